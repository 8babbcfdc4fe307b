//! The `observations` and `session_summaries` tables: the only module that writes them.
//! The worker writes through it inside its ack transaction; `save_memory` and the importers
//! write through it too.

use rusqlite::{OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::memory::rows::{self, ObservationContent};
use crate::text::code_pieces;

/// Observation types cairn knows. A model's other words are stored as `change`, with the
/// original word kept in `original_type`.
pub const OBSERVATION_TYPES: &[&str] = &[
    "decision",
    "bugfix",
    "feature",
    "refactor",
    "discovery",
    "change",
];

/// Maps a model's type word to a known type: `(type, original word if it was unknown)`.
pub fn normalize_type(word: &str) -> (String, Option<String>) {
    let w = word.trim().to_ascii_lowercase();
    let mapped = match w.as_str() {
        "bug" | "bug-fix" | "bug_fix" | "fix" => "bugfix",
        other => other,
    };
    if OBSERVATION_TYPES.contains(&mapped) {
        (mapped.to_string(), None)
    } else {
        (
            "change".to_string(),
            Some(word.trim().to_string()).filter(|s| !s.is_empty()),
        )
    }
}

/// An observation to store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NewObservation {
    /// `None` only for memories saved by hand outside a session.
    pub session_id: Option<String>,
    pub project: String,
    pub prompt_number: Option<i64>,
    /// One of [`OBSERVATION_TYPES`].
    #[serde(rename = "type")]
    pub kind: String,
    pub original_type: Option<String>,
    #[serde(flatten)]
    pub content: ObservationContent,
    /// The queue jobs it came from.
    pub source_job_ids: Vec<i64>,
    /// `model`, `offline`, `manual` or `import`.
    pub origin: String,
    pub created_at: i64,
}

impl NewObservation {
    /// A stable hash of what the observation says (not when or where from), so the same
    /// content stored twice in a session is one row.
    pub fn content_hash(&self) -> String {
        let c = &self.content;
        let mut h = Fnv::new();
        for part in [&self.kind, &c.title, &c.subtitle, &c.narrative] {
            h.field(part);
        }
        for list in [&c.facts, &c.concepts, &c.files_read, &c.files_modified] {
            h.field(&list.join("\u{1f}"));
        }
        h.hex()
    }
}

/// A stored observation, to store again (export, then import).
impl From<rows::Observation> for NewObservation {
    fn from(o: rows::Observation) -> Self {
        NewObservation {
            session_id: o.session_id,
            project: o.project,
            prompt_number: o.prompt_number,
            kind: o.kind,
            original_type: o.original_type,
            content: o.content,
            source_job_ids: o.source_job_ids,
            origin: o.origin,
            created_at: o.created_at,
        }
    }
}

/// A turn summary to store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NewSummary {
    pub session_id: String,
    pub project: String,
    pub prompt_number: i64,
    pub request: String,
    pub investigated: String,
    pub learned: String,
    pub completed: String,
    pub next_steps: String,
    pub notes: String,
    pub files_read: Vec<String>,
    pub files_edited: Vec<String>,
    pub source_job_ids: Vec<i64>,
    pub origin: String,
    pub created_at: i64,
}

impl NewSummary {
    pub fn content_hash(&self) -> String {
        let mut h = Fnv::new();
        for part in [
            &self.request,
            &self.investigated,
            &self.learned,
            &self.completed,
            &self.next_steps,
            &self.notes,
        ] {
            h.field(part);
        }
        h.hex()
    }
}

/// A stored turn summary, to store again (export, then import).
impl From<rows::Summary> for NewSummary {
    fn from(s: rows::Summary) -> Self {
        NewSummary {
            session_id: s.session_id,
            project: s.project,
            prompt_number: s.prompt_number,
            request: s.request,
            investigated: s.investigated,
            learned: s.learned,
            completed: s.completed,
            next_steps: s.next_steps,
            notes: s.notes,
            files_read: s.files_read,
            files_edited: s.files_edited,
            source_job_ids: s.source_job_ids,
            origin: s.origin,
            created_at: s.created_at,
        }
    }
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Added(i64),
    /// The same content was already stored in this session (this id).
    Duplicate(i64),
}

impl Stored {
    pub fn id(self) -> i64 {
        match self {
            Stored::Added(id) | Stored::Duplicate(id) => id,
        }
    }
}

fn json(list: &[String]) -> String {
    serde_json::to_string(list).unwrap_or_else(|_| "[]".into())
}

/// Stores an observation unless the session already has the same content.
pub fn insert_observation(tx: &Transaction, o: &NewObservation) -> Result<Stored> {
    let hash = o.content_hash();
    let c = &o.content;
    let ids = serde_json::to_string(&o.source_job_ids).unwrap_or_else(|_| "[]".into());
    let facts_text = c.facts.join("\n");
    let added = tx
        .prepare_cached(
            "INSERT INTO observations
                 (session_id, project, prompt_number, type, original_type, title, subtitle, narrative,
                  facts, concepts, files_read, files_modified, content_hash, source_job_ids, origin, created_at,
                  facts_text, concepts_text, pieces_text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
             ON CONFLICT (session_id, content_hash) DO NOTHING
             RETURNING id",
        )?
        .query_row(
            params![
                o.session_id,
                o.project,
                o.prompt_number,
                o.kind,
                o.original_type,
                c.title,
                c.subtitle,
                c.narrative,
                json(&c.facts),
                json(&c.concepts),
                json(&c.files_read),
                json(&c.files_modified),
                hash,
                ids,
                o.origin,
                o.created_at,
                facts_text,
                c.concepts.join(", "),
                code_pieces(&[&c.title, &c.subtitle, &c.narrative, &facts_text])
            ],
            |r| r.get::<_, i64>(0),
        )
        .optional()?;
    if let Some(id) = added {
        return Ok(Stored::Added(id));
    }
    let id = tx
        .prepare_cached("SELECT id FROM observations WHERE session_id IS ?1 AND content_hash = ?2")?
        .query_row(params![o.session_id, hash], |r| r.get(0))
        .optional()?;
    // A NULL session never conflicts, so a miss here cannot happen; report 0 defensively.
    Ok(Stored::Duplicate(id.unwrap_or(0)))
}

/// Stores a memory saved by hand (no session): the same content saved again in the same
/// project is the row already there ([`Stored::Duplicate`]), so a repeated `save_memory`
/// call or `cairn save` stores one observation.
pub fn save_manual(tx: &Transaction, o: &NewObservation) -> Result<Stored> {
    if o.session_id.is_none() {
        let existing = tx
            .prepare_cached(
                "SELECT id FROM observations
                 WHERE session_id IS NULL AND content_hash = ?1 AND project = ?2
                 ORDER BY id LIMIT 1",
            )?
            .query_row(params![o.content_hash(), o.project], |r| r.get(0))
            .optional()?;
        if let Some(id) = existing {
            return Ok(Stored::Duplicate(id));
        }
    }
    insert_observation(tx, o)
}

/// Stores a turn summary; a newer summary of the same turn replaces the older one.
pub fn upsert_summary(tx: &Transaction, s: &NewSummary) -> Result<Stored> {
    let hash = s.content_hash();
    let existing: Option<(i64, String)> = tx
        .prepare_cached("SELECT id, content_hash FROM session_summaries WHERE session_id = ?1 AND prompt_number = ?2")?
        .query_row(params![s.session_id, s.prompt_number], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((id, old)) = &existing
        && *old == hash
    {
        return Ok(Stored::Duplicate(*id));
    }
    let id = tx
        .prepare_cached(
            "INSERT INTO session_summaries
                 (session_id, project, prompt_number, request, investigated, learned, completed,
                  next_steps, notes, files_read, files_edited, content_hash, source_job_ids, origin, created_at,
                  pieces_text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
             ON CONFLICT (session_id, prompt_number) DO UPDATE SET
                 request = excluded.request, investigated = excluded.investigated,
                 learned = excluded.learned, completed = excluded.completed,
                 next_steps = excluded.next_steps, notes = excluded.notes,
                 files_read = excluded.files_read, files_edited = excluded.files_edited,
                 content_hash = excluded.content_hash, source_job_ids = excluded.source_job_ids,
                 origin = excluded.origin, created_at = excluded.created_at,
                 pieces_text = excluded.pieces_text
             RETURNING id",
        )?
        .query_row(
            params![
                s.session_id,
                s.project,
                s.prompt_number,
                s.request,
                s.investigated,
                s.learned,
                s.completed,
                s.next_steps,
                s.notes,
                json(&s.files_read),
                json(&s.files_edited),
                hash,
                serde_json::to_string(&s.source_job_ids).unwrap_or_else(|_| "[]".into()),
                s.origin,
                s.created_at,
                code_pieces(&[
                    &s.request,
                    &s.investigated,
                    &s.learned,
                    &s.completed,
                    &s.next_steps,
                    &s.notes
                ])
            ],
            |r| r.get(0),
        )?;
    Ok(Stored::Added(id))
}

/// Titles of the session's latest observations, newest first (for the prompt header).
pub fn recent_titles(
    conn: &rusqlite::Connection,
    session_id: &str,
    limit: usize,
) -> Result<Vec<String>> {
    let titles = conn
        .prepare_cached(
            "SELECT title FROM observations WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2",
        )?
        .query_map(params![session_id, limit as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(titles)
}

/// FNV-1a, 64 bits, with a separator between fields: stable across Rust versions, unlike
/// `DefaultHasher`. Enough to tell contents apart within one session.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn field(&mut self, s: &str) {
        for b in s.trim().bytes().chain([0xff]) {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db;
    use rusqlite::OptionalExtension;

    fn conn() -> (tempfile::TempDir, rusqlite::Connection) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let mut c = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        db::write(&mut c, |tx| {
            crate::memory::sessions::ensure(tx, "s1", "p", "/p", 1)
        })
        .expect("session");
        (tmp, c)
    }

    #[test]
    fn normalizes_types() {
        assert_eq!(normalize_type("Bugfix"), ("bugfix".into(), None));
        assert_eq!(normalize_type(" fix "), ("bugfix".into(), None));
        assert_eq!(
            normalize_type("insight"),
            ("change".into(), Some("insight".into()))
        );
    }

    #[test]
    fn a_memory_saved_twice_by_hand_is_one_row_per_project() {
        let (_t, mut c) = conn();
        let o = NewObservation {
            project: "p".into(),
            kind: "decision".into(),
            origin: "manual".into(),
            created_at: 5,
            content: crate::memory::rows::ObservationContent {
                title: "Prefer BEGIN IMMEDIATE".into(),
                narrative: "Deferred transactions fail at once under WAL.".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let first = db::write(&mut c, |tx| save_manual(tx, &o)).expect("save");
        let mut again = o.clone();
        again.created_at = 9;
        let second = db::write(&mut c, |tx| save_manual(tx, &again)).expect("save");
        assert!(matches!(first, Stored::Added(_)));
        assert_eq!(second, Stored::Duplicate(first.id()));
        let mut elsewhere = o.clone();
        elsewhere.project = "q".into();
        let third = db::write(&mut c, |tx| save_manual(tx, &elsewhere)).expect("save");
        assert!(matches!(third, Stored::Added(id) if id != first.id()));
    }

    #[test]
    fn same_content_in_a_session_is_one_row() {
        let (_t, mut c) = conn();
        let o = NewObservation {
            session_id: Some("s1".into()),
            project: "p".into(),
            kind: "discovery".into(),
            origin: "model".into(),
            created_at: 5,
            content: crate::memory::rows::ObservationContent {
                title: "Found it".into(),
                facts: vec!["a".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let first = db::write(&mut c, |tx| insert_observation(tx, &o)).expect("insert");
        let mut again = o.clone();
        again.created_at = 9;
        let second = db::write(&mut c, |tx| insert_observation(tx, &again)).expect("insert");
        assert!(matches!(first, Stored::Added(_)));
        assert_eq!(second, Stored::Duplicate(first.id()));
        let mut other = o.clone();
        other.content.facts.push("b".into());
        assert!(matches!(
            db::write(&mut c, |tx| insert_observation(tx, &other)).expect("insert"),
            Stored::Added(_)
        ));
        let hits: i64 = c
            .query_row(
                "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH 'found'",
                [],
                |r| r.get(0),
            )
            .expect("fts");
        assert_eq!(hits, 2);
        assert_eq!(
            recent_titles(&c, "s1", 5).expect("titles"),
            vec!["Found it", "Found it"]
        );
    }

    #[test]
    fn facts_and_concepts_are_indexed_as_text_not_json() {
        let (_t, mut c) = conn();
        let o = NewObservation {
            session_id: Some("s1".into()),
            project: "p".into(),
            kind: "discovery".into(),
            origin: "model".into(),
            content: crate::memory::rows::ObservationContent {
                title: "Tests fail".into(),
                facts: vec![
                    "Exit code 1\nFAILED test_login".into(),
                    "second \"quoted\" fact".into(),
                ],
                concepts: vec!["flaky-tests".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let id = db::write(&mut c, |tx| insert_observation(tx, &o))
            .expect("insert")
            .id();
        let hit = |q: &str| -> Option<String> {
            c.query_row(
                "SELECT snippet(observations_fts, 3, '[', ']', '…', 8) FROM observations_fts
                 WHERE observations_fts MATCH ?1",
                [q],
                |r| r.get(0),
            )
            .optional()
            .expect("query")
        };
        let snippet = hit("\"code 1 failed\"").expect("a phrase across the JSON escape");
        assert!(
            !snippet.contains("[\"") && !snippet.contains("\\n"),
            "{snippet}"
        );
        assert!(hit("nfailed").is_none(), "no word glued to a JSON escape");
        assert!(hit("concepts_text:flaky").is_some());
        // Updates and deletes remove exactly what was indexed.
        c.execute(
            "UPDATE observations SET facts = '[\"replaced\"]', facts_text = 'replaced' WHERE id = ?1",
            [id],
        )
        .expect("update");
        assert!(hit("login").is_none(), "the old facts left the index");
        assert!(hit("replaced").is_some());
        assert!(db::integrity_problems(&c).expect("check").is_empty());
        c.execute("DELETE FROM observations WHERE id = ?1", [id])
            .expect("delete");
        assert!(hit("replaced").is_none());
        assert!(db::integrity_problems(&c).expect("check").is_empty());
    }

    #[test]
    fn a_newer_summary_replaces_the_turns_old_one() {
        let (_t, mut c) = conn();
        let mut s = NewSummary {
            session_id: "s1".into(),
            project: "p".into(),
            prompt_number: 1,
            request: "do it".into(),
            completed: "half".into(),
            origin: "model".into(),
            ..Default::default()
        };
        let a = db::write(&mut c, |tx| upsert_summary(tx, &s)).expect("a");
        assert_eq!(
            db::write(&mut c, |tx| upsert_summary(tx, &s)).expect("b"),
            Stored::Duplicate(a.id())
        );
        s.completed = "all".into();
        db::write(&mut c, |tx| upsert_summary(tx, &s)).expect("c");
        let (n, completed): (i64, String) = c
            .query_row(
                "SELECT count(*), max(completed) FROM session_summaries",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("row");
        assert_eq!((n, completed.as_str()), (1, "all"));
        let fts: i64 = c
            .query_row("SELECT count(*) FROM session_summaries_fts WHERE session_summaries_fts MATCH 'half'", [], |r| r.get(0))
            .expect("fts");
        assert_eq!(fts, 0);
    }
}
