//! `cairn export` and `cairn import jsonl`: memories out of and into a database.
//!
//! The JSONL format is one JSON object per line, tagged by `record`: first a `header`, then
//! every `session`, `prompt`, `observation` and `summary`, in that order (a record only
//! refers to sessions written before it). Local row ids are not exported; a record is
//! identified by what it says (sessions by id, prompts by session and number, observations
//! by session and content hash, summaries by session and turn).
//!
//! Invariants:
//! - export then import into an empty database, then export again, gives the same records;
//! - importing the same file twice adds nothing the second time;
//! - a file with a bad line is refused before anything is written.

use std::collections::HashSet;
use std::io::{BufRead, Write};

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::memory;
use crate::memory::forgotten;
use crate::memory::observations::{NewObservation, NewSummary};
use crate::memory::rows;
use crate::memory::sessions::{self, PromptRecord, SessionRecord};
use crate::store::db;

/// The `format` of the header line.
pub const FORMAT: &str = "cairn-export";
/// The version of the JSONL format this cairn writes and reads.
pub const VERSION: u32 = 1;
/// Records written per transaction on import, so hooks are not kept waiting.
const CHUNK: usize = 500;

/// The first line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub exported_at: i64,
    /// The project exported, or none for all.
    #[serde(default)]
    pub project: Option<String>,
}

/// One line of a JSONL export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "lowercase")]
pub enum Record {
    Header(Header),
    Session(SessionRecord),
    Prompt(PromptRecord),
    Observation(NewObservation),
    Summary(NewSummary),
}

/// How many records of each kind an export wrote, or an import added and already had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sessions: usize,
    pub prompts: usize,
    pub observations: usize,
    pub summaries: usize,
}

impl Counts {
    pub fn total(&self) -> usize {
        self.sessions + self.prompts + self.observations + self.summaries
    }
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Records added.
    pub added: Counts,
    /// Records the database already had (left as they were).
    pub existing: Counts,
    /// Records someone chose to forget (`cairn forget`): not brought back.
    pub forgotten: Counts,
}

/// Output formats of `cairn export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Markdown,
}

impl Format {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "jsonl" => Some(Format::Jsonl),
            "markdown" | "md" => Some(Format::Markdown),
            _ => None,
        }
    }
}

fn io_err(e: std::io::Error) -> Error {
    Error::io("cannot write export to", "output", e)
}

/// Every session of `project` (or all), oldest first.
pub fn sessions(conn: &Connection, project: Option<&str>) -> Result<Vec<SessionRecord>> {
    let rows = conn
        .prepare(
            "SELECT session_id, project, cwd, prompt_counter, status, started_at, updated_at, ended_at
             FROM sessions WHERE ?1 IS NULL OR project = ?1
             ORDER BY started_at, session_id",
        )?
        .query_map([project], |r| {
            Ok(SessionRecord {
                session_id: r.get(0)?,
                project: r.get(1)?,
                cwd: r.get(2)?,
                prompt_counter: r.get(3)?,
                status: r.get(4)?,
                started_at: r.get(5)?,
                updated_at: r.get(6)?,
                ended_at: r.get(7)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Every prompt of `project` (or all), in id order.
pub fn prompts(conn: &Connection, project: Option<&str>) -> Result<Vec<PromptRecord>> {
    let rows = conn
        .prepare(
            "SELECT session_id, project, prompt_number, prompt_id, prompt_text, created_at
             FROM user_prompts WHERE ?1 IS NULL OR project = ?1 ORDER BY id",
        )?
        .query_map([project], |r| {
            Ok(PromptRecord {
                session_id: r.get(0)?,
                project: r.get(1)?,
                prompt_number: r.get(2)?,
                prompt_id: r.get(3)?,
                prompt_text: r.get(4)?,
                created_at: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Every observation of `project` (or all), in id order.
pub fn observations(conn: &Connection, project: Option<&str>) -> Result<Vec<NewObservation>> {
    let found = conn
        .prepare(&format!(
            "{} WHERE ?1 IS NULL OR o.project = ?1 ORDER BY o.id",
            rows::SELECT_OBSERVATIONS
        ))?
        .query_map([project], |r| {
            rows::observation(r).map(NewObservation::from)
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(found)
}

/// Every turn summary of `project` (or all), in id order.
pub fn summaries(conn: &Connection, project: Option<&str>) -> Result<Vec<NewSummary>> {
    let found = conn
        .prepare(&format!(
            "{} WHERE ?1 IS NULL OR s.project = ?1 ORDER BY s.id",
            rows::SELECT_SUMMARIES
        ))?
        .query_map([project], |r| rows::summary(r).map(NewSummary::from))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(found)
}

/// Writes the memories of `project` (or all) as JSONL. Reads in one transaction, so the
/// export is consistent while others write.
pub fn export_jsonl(
    conn: &mut Connection,
    project: Option<&str>,
    out: &mut dyn Write,
    now: i64,
) -> Result<Counts> {
    let tx = conn.transaction()?;
    let mut line = |record: &Record| -> Result<()> {
        let text = serde_json::to_string(record)
            .map_err(|e| Error::Invalid(format!("cannot encode a record: {e}")))?;
        writeln!(out, "{text}").map_err(io_err)
    };
    line(&Record::Header(Header {
        format: FORMAT.into(),
        version: VERSION,
        exported_at: now,
        project: project.map(str::to_string),
    }))?;
    let mut counts = Counts::default();
    for s in sessions(&tx, project)? {
        line(&Record::Session(s))?;
        counts.sessions += 1;
    }
    for p in prompts(&tx, project)? {
        line(&Record::Prompt(p))?;
        counts.prompts += 1;
    }
    for o in observations(&tx, project)? {
        line(&Record::Observation(o))?;
        counts.observations += 1;
    }
    for s in summaries(&tx, project)? {
        line(&Record::Summary(s))?;
        counts.summaries += 1;
    }
    tx.finish()?;
    Ok(counts)
}

/// Writes the memories of `project` (or all) as Markdown, for reading: one section per
/// project and session, prompts, observations and turn summaries in turn order.
pub fn export_markdown(
    conn: &mut Connection,
    project: Option<&str>,
    out: &mut dyn Write,
) -> Result<Counts> {
    let tx = conn.transaction()?;
    let all_sessions = sessions(&tx, project)?;
    let all_prompts = prompts(&tx, project)?;
    let all_obs = observations(&tx, project)?;
    let all_sums = summaries(&tx, project)?;
    tx.finish()?;
    let counts = Counts {
        sessions: all_sessions.len(),
        prompts: all_prompts.len(),
        observations: all_obs.len(),
        summaries: all_sums.len(),
    };
    let mut md = String::from("# cairn memories\n");
    let mut projects: Vec<&str> = all_sessions.iter().map(|s| s.project.as_str()).collect();
    projects.extend(
        all_obs
            .iter()
            .filter(|o| o.session_id.is_none())
            .map(|o| o.project.as_str()),
    );
    projects.sort_unstable();
    projects.dedup();
    for p in projects {
        md.push_str(&format!("\n## Project {p}\n"));
        for s in all_sessions.iter().filter(|s| s.project == p) {
            md.push_str(&format!(
                "\n### Session {} ({})\n",
                s.session_id,
                crate::clock::iso_utc(s.started_at)
            ));
            let mut turns: Vec<Option<i64>> = all_prompts
                .iter()
                .filter(|x| x.session_id == s.session_id)
                .map(|x| Some(x.prompt_number))
                .chain(
                    all_obs
                        .iter()
                        .filter(|o| o.session_id.as_deref() == Some(s.session_id.as_str()))
                        .map(|o| o.prompt_number),
                )
                .chain(
                    all_sums
                        .iter()
                        .filter(|x| x.session_id == s.session_id)
                        .map(|x| Some(x.prompt_number)),
                )
                .collect();
            turns.sort_unstable();
            turns.dedup();
            for turn in turns {
                match turn {
                    Some(n) => md.push_str(&format!("\n#### Turn {n}\n")),
                    None => md.push_str("\n#### Outside a turn\n"),
                }
                for x in all_prompts
                    .iter()
                    .filter(|x| x.session_id == s.session_id && Some(x.prompt_number) == turn)
                {
                    md.push_str(&format!("\n> {}\n", x.prompt_text.replace('\n', "\n> ")));
                }
                for o in all_obs.iter().filter(|o| {
                    o.session_id.as_deref() == Some(s.session_id.as_str())
                        && o.prompt_number == turn
                }) {
                    markdown_observation(&mut md, o);
                }
                for x in all_sums
                    .iter()
                    .filter(|x| x.session_id == s.session_id && Some(x.prompt_number) == turn)
                {
                    md.push_str("\n**Summary**\n\n");
                    for (label, text) in [
                        ("Request", &x.request),
                        ("Investigated", &x.investigated),
                        ("Learned", &x.learned),
                        ("Completed", &x.completed),
                        ("Next steps", &x.next_steps),
                        ("Notes", &x.notes),
                    ] {
                        if !text.is_empty() {
                            md.push_str(&format!("- {label}: {}\n", text.replace('\n', "\n  ")));
                        }
                    }
                }
            }
        }
        let loose: Vec<&NewObservation> = all_obs
            .iter()
            .filter(|o| o.session_id.is_none() && o.project == p)
            .collect();
        if !loose.is_empty() {
            md.push_str("\n### Saved by hand\n");
            for o in loose {
                markdown_observation(&mut md, o);
            }
        }
    }
    out.write_all(md.as_bytes()).map_err(io_err)?;
    Ok(counts)
}

fn markdown_observation(md: &mut String, o: &NewObservation) {
    let c = &o.content;
    md.push_str(&format!(
        "\n- **[{}] {}** ({})\n",
        o.kind,
        c.title,
        crate::clock::iso_utc(o.created_at)
    ));
    if !c.subtitle.is_empty() {
        md.push_str(&format!("  {}\n", c.subtitle));
    }
    if !c.narrative.is_empty() {
        md.push_str(&format!("\n  {}\n", c.narrative.replace('\n', "\n  ")));
    }
    // A fact's further lines stay inside its item.
    for f in &c.facts {
        md.push_str(&format!("  - {}\n", f.replace('\n', "\n    ")));
    }
}

/// Reads a JSONL export completely and checks it; returns the records without the header.
pub fn parse_jsonl(input: impl BufRead) -> Result<Vec<(usize, Record)>> {
    let mut records = Vec::new();
    for (index, line) in input.lines().enumerate() {
        let n = index + 1;
        let line = line.map_err(|e| Error::Invalid(format!("line {n}: cannot read: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(&line)
            .map_err(|e| Error::Invalid(format!("line {n}: not a cairn export record: {e}")))?;
        match record {
            Record::Header(h) => {
                if h.format != FORMAT || h.version > VERSION {
                    return Err(Error::Invalid(format!(
                        "line {n}: format {} version {} is not one this cairn reads ({FORMAT} version {VERSION}); upgrade cairn",
                        h.format, h.version
                    )));
                }
            }
            other => records.push((n, other)),
        }
    }
    Ok(records)
}

/// Imports a JSONL export. The whole file is read and checked first; a bad line or a record
/// referring to a session found neither in the file nor in the database is an error and
/// nothing is written. Records already present are left alone.
pub fn import_jsonl(conn: &mut Connection, input: impl BufRead) -> Result<ImportReport> {
    let records = parse_jsonl(input)?;
    import_records(conn, &records)
}

/// Imports records read by [`parse_jsonl`] (numbered by line), as [`import_jsonl`] does.
pub fn import_records(conn: &mut Connection, records: &[(usize, Record)]) -> Result<ImportReport> {
    let in_file: HashSet<&str> = records
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Session(s) => Some(s.session_id.as_str()),
            _ => None,
        })
        .collect();
    {
        let mut exists = conn.prepare("SELECT 1 FROM sessions WHERE session_id = ?1")?;
        for (n, r) in records {
            let sid = match r {
                Record::Prompt(p) => Some(p.session_id.as_str()),
                Record::Observation(o) => o.session_id.as_deref(),
                Record::Summary(s) => Some(s.session_id.as_str()),
                _ => None,
            };
            if let Some(sid) = sid
                && !in_file.contains(sid)
                && exists.query_row([sid], |_| Ok(())).optional()?.is_none()
            {
                return Err(Error::Invalid(format!(
                    "line {n}: refers to session {sid}, which is neither in the file nor in the database"
                )));
            }
        }
    }
    let mut report = ImportReport::default();
    for chunk in records.chunks(CHUNK) {
        db::write(conn, |tx| {
            for (_, record) in chunk {
                let forgotten = match record {
                    Record::Header(_) | Record::Session(_) => false,
                    Record::Prompt(p) => forgotten::prompt_forgotten(tx, p)?,
                    Record::Observation(o) => forgotten::observation_forgotten(tx, o)?,
                    Record::Summary(s) => forgotten::summary_forgotten(tx, s)?,
                };
                if forgotten {
                    *slot(&mut report.forgotten, record) += 1;
                    continue;
                }
                let added = match record {
                    Record::Header(_) => continue,
                    Record::Session(s) => sessions::import_session(tx, s)?,
                    Record::Prompt(p) => sessions::import_prompt(tx, p)?,
                    Record::Observation(o) => insert_observation_once(tx, o)?,
                    Record::Summary(s) => {
                        matches!(
                            memory::observations::upsert_summary(tx, s)?,
                            memory::observations::Stored::Added(_)
                        )
                    }
                };
                let counts = if added {
                    &mut report.added
                } else {
                    &mut report.existing
                };
                *slot(counts, record) += 1;
            }
            Ok(())
        })?;
    }
    Ok(report)
}

fn slot<'a>(counts: &'a mut Counts, record: &Record) -> &'a mut usize {
    match record {
        Record::Header(_) | Record::Session(_) => &mut counts.sessions,
        Record::Prompt(_) => &mut counts.prompts,
        Record::Observation(_) => &mut counts.observations,
        Record::Summary(_) => &mut counts.summaries,
    }
}

/// Stores an observation unless the same content is already stored for its session (or,
/// for one saved outside a session, for its project). True when added.
pub(crate) fn insert_observation_once(
    tx: &rusqlite::Transaction,
    o: &NewObservation,
) -> Result<bool> {
    if o.session_id.is_none() {
        let found = tx
            .prepare_cached(
                "SELECT 1 FROM observations
                 WHERE session_id IS NULL AND project = ?1 AND content_hash = ?2",
            )?
            .query_row(params![o.project, o.content_hash()], |_| Ok(()))
            .optional()?;
        if found.is_some() {
            return Ok(false);
        }
    }
    Ok(matches!(
        memory::observations::insert_observation(tx, o)?,
        memory::observations::Stored::Added(_)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::{OpenOptions, open_data_dir};
    use crate::store::paths::DataDir;

    fn fresh() -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let conn = open_data_dir(&DataDir::new(tmp.path().join("d")), OpenOptions::default())
            .expect("open");
        (tmp, conn)
    }

    fn seed(conn: &mut Connection) {
        db::write(conn, |tx| {
            sessions::ensure(tx, "s1", "alpha", "/w/alpha", 1_000)?;
            sessions::ensure(tx, "s2", "beta", "/w/beta", 2_000)?;
            sessions::import_prompt(
                tx,
                &PromptRecord {
                    session_id: "s1".into(),
                    project: "alpha".into(),
                    prompt_number: 1,
                    prompt_id: Some("p-1".into()),
                    prompt_text: "fix the parser\nplease".into(),
                    created_at: 1_100,
                },
            )?;
            memory::observations::insert_observation(
                tx,
                &NewObservation {
                    session_id: Some("s1".into()),
                    project: "alpha".into(),
                    prompt_number: Some(1),
                    kind: "bugfix".into(),
                    source_job_ids: vec![3, 4],
                    origin: "model".into(),
                    created_at: 1_200,
                    content: rows::ObservationContent {
                        title: "Parser accepts trailing commas".into(),
                        narrative: "The parser\nnow skips them.".into(),
                        facts: vec!["a \"quoted\" fact".into(), "two\nlines".into()],
                        concepts: vec!["gotcha".into()],
                        files_modified: vec!["src/parse.rs".into()],
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )?;
            memory::observations::insert_observation(
                tx,
                &NewObservation {
                    session_id: None,
                    project: "beta".into(),
                    kind: "decision".into(),
                    origin: "manual".into(),
                    created_at: 2_100,
                    content: rows::ObservationContent {
                        title: "Use WAL".into(),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )?;
            memory::observations::upsert_summary(
                tx,
                &NewSummary {
                    session_id: "s1".into(),
                    project: "alpha".into(),
                    prompt_number: 1,
                    request: "fix the parser".into(),
                    learned: "commas".into(),
                    origin: "model".into(),
                    created_at: 1_300,
                    ..Default::default()
                },
            )?;
            Ok(())
        })
        .expect("seed");
    }

    fn export(conn: &mut Connection, project: Option<&str>) -> String {
        let mut out = Vec::new();
        export_jsonl(conn, project, &mut out, 5).expect("export");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn round_trip_is_lossless_and_idempotent() {
        let (_a, mut a) = fresh();
        seed(&mut a);
        let first = export(&mut a, None);
        assert_eq!(first.lines().count(), 1 + 2 + 1 + 2 + 1);

        let (_b, mut b) = fresh();
        let report = import_jsonl(&mut b, first.as_bytes()).expect("import");
        assert_eq!(report.added.total(), 6);
        assert_eq!(report.existing.total(), 0);
        assert_eq!(export(&mut b, None), first);

        let again = import_jsonl(&mut b, first.as_bytes()).expect("import again");
        assert_eq!(again.added.total(), 0);
        assert_eq!(again.existing.total(), 6);
        assert_eq!(export(&mut b, None), first);
    }

    /// An observation line keeps the key order exports have always had.
    #[test]
    fn an_observation_line_reads_and_writes_byte_for_byte() {
        let line = r#"{"record":"observation","session_id":"s","project":"p","prompt_number":1,"type":"change","original_type":"insight","title":"T","subtitle":"","narrative":"N","facts":["f"],"concepts":[],"files_read":[],"files_modified":["a.rs"],"source_job_ids":[3],"origin":"model","created_at":5}"#;
        let records = parse_jsonl(line.as_bytes()).expect("parse");
        let [(1, record @ Record::Observation(o))] = &records[..] else {
            panic!("{records:?}");
        };
        assert_eq!(o.content.files_modified, vec!["a.rs"]);
        assert_eq!(serde_json::to_string(record).expect("encode"), line);
    }

    #[test]
    fn export_of_one_project_holds_only_it() {
        let (_a, mut a) = fresh();
        seed(&mut a);
        let beta = export(&mut a, Some("beta"));
        assert!(!beta.contains("alpha"), "{beta}");
        assert!(beta.contains("Use WAL"));
        let mut md = Vec::new();
        let counts = export_markdown(&mut a, Some("alpha"), &mut md).expect("md");
        let md = String::from_utf8(md).expect("utf8");
        assert_eq!(counts.observations, 1);
        assert!(md.contains("## Project alpha"), "{md}");
        assert!(
            md.contains("**[bugfix] Parser accepts trailing commas**"),
            "{md}"
        );
        assert!(md.contains("> fix the parser\n> please"), "{md}");
        assert!(md.contains("- Learned: commas"), "{md}");
        // A fact of two lines stays one item of the list.
        assert!(md.contains("  - two\n    lines\n"), "{md}");
        assert!(!md.contains("Use WAL"));
    }

    #[test]
    fn a_bad_line_writes_nothing() {
        let (_a, mut a) = fresh();
        seed(&mut a);
        let mut text = export(&mut a, None);
        text.push_str("{\"record\":\"observation\",\"title\":oops}\n");
        let (_b, mut b) = fresh();
        let err = import_jsonl(&mut b, text.as_bytes()).expect_err("bad");
        assert!(err.to_string().starts_with("line 8:"), "{err}");
        let n: i64 = b
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 0);
    }

    proptest::proptest! {
        #[test]
        fn parsing_any_text_never_panics(text in "\\PC*") {
            let _ = parse_jsonl(text.as_bytes());
        }

        #[test]
        fn any_observation_round_trips(
            title in "\\PC{1,40}",
            narrative in "\\PC*",
            facts in proptest::collection::vec("\\PC*", 0..4),
            prompt in proptest::option::of(0i64..1000),
        ) {
            let o = NewObservation {
                session_id: Some("s".into()),
                project: "p".into(),
                prompt_number: prompt,
                kind: "change".into(),
                content: rows::ObservationContent {
                    title,
                    narrative,
                    facts,
                    ..Default::default()
                },
                origin: "model".into(),
                ..Default::default()
            };
            let line = serde_json::to_string(&Record::Observation(o.clone())).expect("encode");
            let back = parse_jsonl(line.as_bytes()).expect("parse");
            proptest::prop_assert_eq!(back, vec![(1, Record::Observation(o))]);
        }
    }

    #[test]
    fn unknown_sessions_and_newer_versions_are_refused() {
        let (_b, mut b) = fresh();
        let orphan = r#"{"record":"prompt","session_id":"nope","project":"p","prompt_number":1,"prompt_text":"x","created_at":1}"#;
        let err = import_jsonl(&mut b, orphan.as_bytes()).expect_err("orphan");
        assert!(err.to_string().contains("session nope"), "{err}");
        let newer = r#"{"record":"header","format":"cairn-export","version":9,"exported_at":1}"#;
        let err = import_jsonl(&mut b, newer.as_bytes()).expect_err("newer");
        assert!(err.to_string().contains("upgrade cairn"), "{err}");
    }
}
