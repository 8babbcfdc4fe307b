//! Reading records back by position and by id: the timeline around an anchor (an
//! observation, any record as search lists it, or the best hit of a query), full
//! observations by id (`get_observations`), and records of every kind by reference
//! (`get_records`, `get_summary`, `get_prompt`). Reads only; scoped to the anchor's
//! project.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::memory::kind::Kind;
use crate::memory::rows;
pub use crate::memory::rows::{Observation, Summary};
use crate::recall::rank::Semantic;
use crate::recall::search::{SearchRequest, search_with};
use crate::recall::snippet::{one_line, short_title, shorten};
use crate::recall::sql::Filters;

/// Where a timeline is centred.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// An observation id.
    Observation(i64),
    /// A record of any kind, as search lists it (`12`, `S3`, `P7`).
    Record(Kind, i64),
    /// The best hit (any kind) of this query.
    Query(String),
}

/// A timeline request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineRequest {
    pub anchor: Anchor,
    /// Records before the anchor.
    pub before: usize,
    /// Records after the anchor.
    pub after: usize,
    /// Only this project; `None` is every project.
    pub project: Option<String>,
}

/// One record in a timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub kind: Kind,
    pub id: i64,
    pub project: String,
    pub created_at: i64,
    /// The observation type, or `summary` / `prompt`.
    #[serde(rename = "type")]
    pub label: String,
    pub title: String,
    /// Subtitle of an observation, what a summary completed; empty for prompts.
    pub detail: String,
    /// True for the record the timeline is centred on.
    pub anchor: bool,
}

impl Entry {
    /// `12`, `S12` or `P12`.
    pub fn reference(&self) -> String {
        self.kind.reference(self.id)
    }
}

/// A record of some kind, by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ref {
    pub kind: Kind,
    pub id: i64,
}

/// Records around an anchor, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// The anchor's kind and id; `None` when the anchor was not found (then no entries).
    pub anchor: Option<Ref>,
    pub entries: Vec<Entry>,
}

/// Most records on either side of a timeline anchor.
pub const MAX_TIMELINE_SIDE: usize = 100;

/// Observations, summaries and prompts in time order around an anchor. An anchor id of
/// another project than `req.project` is an error naming both projects; an unknown id or
/// a query without hits gives an empty timeline.
pub fn timeline(conn: &Connection, req: &TimelineRequest) -> Result<Timeline> {
    timeline_with(conn, req, None)
}

/// [`timeline`], with a query anchor found by meaning too (see [`search_with`]).
pub fn timeline_with(
    conn: &Connection,
    req: &TimelineRequest,
    semantic: Option<&Semantic>,
) -> Result<Timeline> {
    let anchor: Option<(Kind, i64)> = match &req.anchor {
        Anchor::Observation(id) => Some((Kind::Observation, *id)),
        Anchor::Record(kind, id) => Some((*kind, *id)),
        Anchor::Query(text) => search_with(
            conn,
            &SearchRequest {
                query: text.clone(),
                filters: Filters {
                    project: req.project.clone(),
                    ..Filters::default()
                },
                limit: 1,
                // The anchor is the best match, however unlikely: the timeline shows
                // where it is, not whether it answers.
                min_relevance: Some(0.0),
                ..SearchRequest::default()
            },
            semantic,
        )?
        .first()
        .map(|h| (h.kind, h.id)),
    };
    let empty = Timeline {
        anchor: None,
        entries: Vec::new(),
    };
    let Some((kind, id)) = anchor else {
        return Ok(empty);
    };
    let Some(mut centre) = entry(conn, kind, id)? else {
        return Ok(empty);
    };
    if let Some(p) = &req.project
        && *p != centre.project
    {
        return Err(Error::Invalid(format!(
            "{} {} belongs to project '{}', not '{p}'; ask for all projects or that project",
            label_of(kind),
            kind.reference(id),
            centre.project
        )));
    }
    centre.anchor = true;
    let key = (centre.created_at, kind.rank(), id);
    let before = req.before.min(MAX_TIMELINE_SIDE);
    let after = req.after.min(MAX_TIMELINE_SIDE);
    let mut older = Vec::new();
    let mut newer = Vec::new();
    for k in Kind::ALL {
        older.extend(side(conn, k, key, true, before, req.project.as_deref())?);
        newer.extend(side(conn, k, key, false, after, req.project.as_deref())?);
    }
    let order = |e: &Entry| (e.created_at, e.kind.rank(), e.id);
    older.sort_by_key(|e| std::cmp::Reverse(order(e)));
    older.truncate(before);
    older.reverse();
    newer.sort_by_key(order);
    newer.truncate(after);
    let mut entries = older;
    entries.push(centre);
    entries.extend(newer);
    Ok(Timeline {
        anchor: Some(Ref { kind, id }),
        entries,
    })
}

fn label_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Observation => "observation",
        Kind::Summary => "summary",
        Kind::Prompt => "prompt",
    }
}

/// Columns of an [`Entry`] for each table (alias `t`).
fn entry_select(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Observation => (
            "observations",
            "t.id, t.project, t.created_at, t.type, t.title, t.subtitle",
        ),
        Kind::Summary => (
            "session_summaries",
            "t.id, t.project, t.created_at, 'summary', t.request, t.completed",
        ),
        Kind::Prompt => (
            "user_prompts",
            "t.id, t.project, t.created_at, 'prompt', t.prompt_text, ''",
        ),
    }
}

fn read_entry(kind: Kind, r: &rusqlite::Row) -> rusqlite::Result<Entry> {
    let title: String = r.get(4)?;
    let detail: String = r.get(5)?;
    Ok(Entry {
        kind,
        id: r.get(0)?,
        project: r.get(1)?,
        created_at: r.get(2)?,
        label: r.get(3)?,
        title: if kind == Kind::Observation {
            title
        } else {
            short_title(&title)
        },
        detail: shorten(&one_line(&detail), 160),
        anchor: false,
    })
}

fn entry(conn: &Connection, kind: Kind, id: i64) -> Result<Option<Entry>> {
    let (table, cols) = entry_select(kind);
    Ok(conn
        .prepare_cached(&format!("SELECT {cols} FROM {table} t WHERE t.id = ?1"))?
        .query_row([id], |r| read_entry(kind, r))
        .optional()?)
}

/// Up to `n` records of `kind` strictly before (or after) the anchor key
/// `(created_at, kind rank, id)`.
fn side(
    conn: &Connection,
    kind: Kind,
    key: (i64, u8, i64),
    before: bool,
    n: usize,
    project: Option<&str>,
) -> Result<Vec<Entry>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let (table, cols) = entry_select(kind);
    let (at, rank, id) = key;
    // Same time: order by kind rank, then id.
    let cmp = if before { "<" } else { ">" };
    let tie = match kind.rank().cmp(&rank) {
        std::cmp::Ordering::Equal => format!("(t.created_at = ?1 AND t.id {cmp} ?2)"),
        std::cmp::Ordering::Less if before => "t.created_at = ?1".to_string(),
        std::cmp::Ordering::Greater if !before => "t.created_at = ?1".to_string(),
        _ => "0".to_string(),
    };
    let dir = if before { "DESC" } else { "ASC" };
    let scope = if project.is_some() {
        "t.project = ?4 AND"
    } else {
        "?4 IS NULL AND"
    };
    let sql = format!(
        "SELECT {cols} FROM {table} t
         WHERE {scope} (t.created_at {cmp} ?1 OR {tie})
         ORDER BY t.created_at {dir}, t.id {dir} LIMIT ?3"
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params![at, id, n as i64, project], |r| read_entry(kind, r))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Observations fetched by id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fetched {
    /// In the order asked (each id once).
    pub found: Vec<Observation>,
    /// Ids asked for that do not exist.
    pub missing: Vec<i64>,
}

/// Full observations by id, in the order asked; repeated ids are returned once and unknown
/// ids are listed in `missing`.
pub fn get_observations(conn: &Connection, ids: &[i64]) -> Result<Fetched> {
    let mut stmt =
        conn.prepare_cached(&format!("{} WHERE o.id = ?1", rows::SELECT_OBSERVATIONS))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Fetched {
        found: Vec::new(),
        missing: Vec::new(),
    };
    for &id in ids {
        if !seen.insert(id) {
            continue;
        }
        let row = stmt.query_row([id], rows::observation).optional()?;
        match row {
            Some(o) => out.found.push(o),
            None => out.missing.push(id),
        }
    }
    Ok(out)
}

/// A stored user prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prompt {
    pub id: i64,
    pub project: String,
    pub session_id: String,
    pub prompt_number: i64,
    pub text: String,
    pub created_at: i64,
}

/// Any record a search or timeline lists, in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "record", rename_all = "lowercase")]
pub enum Record {
    Observation(Observation),
    Summary(Summary),
    Prompt(Prompt),
}

/// Records fetched by reference (`12`, `S3`, `P7`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FetchedRecords {
    /// In the order asked (each reference once).
    pub found: Vec<Record>,
    /// References asked for that do not exist, written as search lists them.
    pub missing: Vec<String>,
}

/// Full records by kind and id, in the order asked; repeats are returned once and unknown
/// ones are listed in `missing`.
pub fn get_records(conn: &Connection, refs: &[(Kind, i64)]) -> Result<FetchedRecords> {
    let mut seen = std::collections::HashSet::new();
    let mut out = FetchedRecords {
        found: Vec::new(),
        missing: Vec::new(),
    };
    for &(kind, id) in refs {
        if !seen.insert((kind, id)) {
            continue;
        }
        let record = match kind {
            Kind::Observation => get_observations(conn, &[id])?
                .found
                .pop()
                .map(Record::Observation),
            Kind::Summary => get_summary(conn, id)?.map(Record::Summary),
            Kind::Prompt => get_prompt(conn, id)?.map(Record::Prompt),
        };
        match record {
            Some(r) => out.found.push(r),
            None => out.missing.push(kind.reference(id)),
        }
    }
    Ok(out)
}

/// One turn summary by id.
pub fn get_summary(conn: &Connection, id: i64) -> Result<Option<Summary>> {
    Ok(conn
        .prepare_cached(&format!("{} WHERE s.id = ?1", rows::SELECT_SUMMARIES))?
        .query_row([id], rows::summary)
        .optional()?)
}

/// One stored prompt by id.
pub fn get_prompt(conn: &Connection, id: i64) -> Result<Option<Prompt>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, project, session_id, prompt_number, prompt_text, created_at
             FROM user_prompts WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(Prompt {
                id: r.get(0)?,
                project: r.get(1)?,
                session_id: r.get(2)?,
                prompt_number: r.get(3)?,
                text: r.get(4)?,
                created_at: r.get(5)?,
            })
        })
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::testing::{T0, fixture, obs};

    #[test]
    fn timeline_centres_on_the_anchor_in_its_project() {
        let mut f = fixture();
        let p1 = f.prompt("p", 1, "start the queue work", T0);
        let o1 = f.add(obs("p", "discovery", "Read the queue", "", T0 + 1));
        let o2 = f.add(obs("p", "bugfix", "Fixed rescue", "", T0 + 2));
        let s1 = f.summary("p", 1, "queue work", "rescue fixed", T0 + 3);
        let o3 = f.add(obs("p", "change", "Tidy", "", T0 + 4));
        f.add(obs("other", "change", "Elsewhere", "", T0 + 2));
        let t = timeline(
            &f.conn,
            &TimelineRequest {
                anchor: Anchor::Observation(o2),
                before: 2,
                after: 1,
                project: Some("p".into()),
            },
        )
        .expect("timeline");
        let refs: Vec<(String, bool)> = t
            .entries
            .iter()
            .map(|e| (e.reference(), e.anchor))
            .collect();
        assert_eq!(
            refs,
            vec![
                (format!("P{p1}"), false),
                (o1.to_string(), false),
                (o2.to_string(), true),
                (format!("S{s1}"), false),
            ]
        );
        let t = timeline(
            &f.conn,
            &TimelineRequest {
                anchor: Anchor::Query("tidy".into()),
                before: 1,
                after: 5,
                project: Some("p".into()),
            },
        )
        .expect("by query");
        assert_eq!(
            t.anchor,
            Some(Ref {
                kind: Kind::Observation,
                id: o3
            })
        );
        assert_eq!(t.entries.len(), 2);
        let err = timeline(
            &f.conn,
            &TimelineRequest {
                anchor: Anchor::Observation(o2),
                before: 1,
                after: 1,
                project: Some("other".into()),
            },
        )
        .expect_err("wrong project");
        assert!(err.to_string().contains("belongs to project 'p'"), "{err}");
        let all = timeline(
            &f.conn,
            &TimelineRequest {
                anchor: Anchor::Observation(o2),
                before: 5,
                after: 5,
                project: None,
            },
        )
        .expect("all");
        assert!(all.entries.iter().any(|e| e.project == "other"));
        let none = timeline(
            &f.conn,
            &TimelineRequest {
                anchor: Anchor::Observation(9_999),
                before: 1,
                after: 1,
                project: None,
            },
        )
        .expect("unknown");
        assert_eq!(none.anchor, None);
        assert!(none.entries.is_empty());
    }

    #[test]
    fn observations_by_id_in_order_with_missing_reported() {
        let mut f = fixture();
        f.prompt("p", 1, "why is the lease lost", T0);
        let mut o = obs("p", "bugfix", "Lease fix", "the narrative", T0 + 1);
        o.content.facts = vec!["fact one".into()];
        o.content.files_modified = vec!["core/src/queue.rs".into()];
        let a = f.add(o);
        let b = f.add(obs("p", "change", "Other", "", T0 + 2));
        let got = get_observations(&f.conn, &[b, 42, a, b]).expect("get");
        assert_eq!(
            got.found.iter().map(|o| o.id).collect::<Vec<_>>(),
            vec![b, a]
        );
        assert_eq!(got.missing, vec![42]);
        let lease = &got.found[1];
        assert_eq!(lease.content.facts, vec!["fact one"]);
        assert_eq!(lease.content.files_modified, vec!["core/src/queue.rs"]);
        assert_eq!(lease.prompt.as_deref(), Some("why is the lease lost"));
        assert_eq!(lease.content.narrative, "the narrative");
    }

    #[test]
    fn records_of_every_kind_by_reference_in_order_with_missing_reported() {
        let mut f = fixture();
        let p = f.prompt("p", 1, "why is the lease lost", T0);
        let o = f.add(obs("p", "bugfix", "Lease fix", "the narrative", T0 + 1));
        let s = f.summary("p", 1, "fix the lease", "rescue counts attempts", T0 + 2);
        let refs = [
            (Kind::Summary, s),
            (Kind::Prompt, 999),
            (Kind::Observation, o),
            (Kind::Prompt, p),
            (Kind::Summary, s),
        ];
        let got = get_records(&f.conn, &refs).expect("get");
        assert_eq!(got.missing, vec!["P999".to_string()]);
        assert_eq!(got.found.len(), 3);
        let Record::Summary(sum) = &got.found[0] else {
            panic!("{:?}", got.found[0]);
        };
        assert_eq!(
            (sum.id, sum.request.as_str(), sum.completed.as_str()),
            (s, "fix the lease", "rescue counts attempts")
        );
        assert_eq!(sum.files_edited, vec!["core/src/queue.rs"]);
        assert!(matches!(&got.found[1], Record::Observation(x) if x.id == o));
        let Record::Prompt(prompt) = &got.found[2] else {
            panic!("{:?}", got.found[2]);
        };
        assert_eq!(
            (prompt.id, prompt.text.as_str()),
            (p, "why is the lease lost")
        );
        let json = serde_json::to_value(&got).expect("json");
        assert_eq!(json["found"][0]["record"], "summary");
        assert_eq!(json["found"][1]["record"], "observation");
        assert_eq!(json["found"][1]["type"], "bugfix");
    }
}
