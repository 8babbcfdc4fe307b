//! Reading memories back: the columns of an observation and of a turn summary and the
//! mapping of a row to its struct, written once for every reader (the timeline and
//! `get_records`, export, the viewer). Also [`ObservationContent`], what an observation
//! says, one type for the model-output parser, the writer ([`NewObservation`]) and these
//! rows. Reads only; the lowest file of the folder (it imports nothing of `memory`).
//!
//! [`NewObservation`]: crate::memory::observations::NewObservation

use rusqlite::Row;
use serde::{Deserialize, Serialize};

/// What an observation says, apart from its type: the fields a model writes (and a person
/// saving a memory by hand). The type stays beside it, in the struct holding the content,
/// because its meaning changes on the way: the model's own word as parsed, one of
/// `OBSERVATION_TYPES` once stored.
///
/// Serialized as the fields of the struct holding it (`#[serde(flatten)]`), in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObservationContent {
    pub title: String,
    pub subtitle: String,
    pub narrative: String,
    pub facts: Vec<String>,
    pub concepts: Vec<String>,
    pub files_read: Vec<String>,
    pub files_modified: Vec<String>,
}

impl ObservationContent {
    /// True when nothing a reader could use was said.
    pub fn is_blank(&self) -> bool {
        self.title.is_empty()
            && self.subtitle.is_empty()
            && self.narrative.is_empty()
            && self.facts.is_empty()
    }
}

/// A stored observation, with the user's prompt of its turn. Serialized as `get_records`
/// shows it: the bookkeeping fields (`original_type`, `source_job_ids`) left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    pub id: i64,
    pub project: String,
    pub session_id: Option<String>,
    pub prompt_number: Option<i64>,
    /// One of `OBSERVATION_TYPES`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(flatten)]
    pub content: ObservationContent,
    /// The model's own type word, when it was not one cairn knows.
    #[serde(skip)]
    pub original_type: Option<String>,
    /// The queue jobs it came from.
    #[serde(skip)]
    pub source_job_ids: Vec<i64>,
    /// `model`, `offline`, `manual` or `import`.
    pub origin: String,
    pub created_at: i64,
    /// The user's prompt of that turn, when it was recorded.
    pub prompt: Option<String>,
}

/// A stored turn summary. Serialized as `get_records` shows it: `source_job_ids` left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub id: i64,
    pub project: String,
    pub session_id: String,
    pub prompt_number: i64,
    pub request: String,
    pub investigated: String,
    pub learned: String,
    pub completed: String,
    pub next_steps: String,
    pub notes: String,
    pub files_read: Vec<String>,
    pub files_edited: Vec<String>,
    /// The queue jobs it came from.
    #[serde(skip)]
    pub source_job_ids: Vec<i64>,
    /// `model`, `offline`, `manual` or `import`.
    pub origin: String,
    pub created_at: i64,
}

/// Every column [`observation`] reads: observations as `o`, with the prompt of their turn
/// (`p`). A reader appends its `WHERE` (naming columns as `o.…`) and order.
pub const SELECT_OBSERVATIONS: &str =
    "SELECT o.id, o.project, o.session_id, o.prompt_number, o.type, o.title, o.subtitle,
            o.narrative, o.facts, o.concepts, o.files_read, o.files_modified, o.original_type,
            o.source_job_ids, o.origin, o.created_at, p.prompt_text
     FROM observations o
     LEFT JOIN user_prompts p
            ON p.session_id = o.session_id AND p.prompt_number = o.prompt_number";

/// Every column [`summary`] reads: turn summaries as `s`. A reader appends its `WHERE`
/// (naming columns as `s.…`) and order.
pub const SELECT_SUMMARIES: &str =
    "SELECT s.id, s.project, s.session_id, s.prompt_number, s.request, s.investigated,
            s.learned, s.completed, s.next_steps, s.notes, s.files_read, s.files_edited,
            s.source_job_ids, s.origin, s.created_at
     FROM session_summaries s";

/// An observation from a row of [`SELECT_OBSERVATIONS`].
pub fn observation(r: &Row) -> rusqlite::Result<Observation> {
    Ok(Observation {
        id: r.get(0)?,
        project: r.get(1)?,
        session_id: r.get(2)?,
        prompt_number: r.get(3)?,
        kind: r.get(4)?,
        content: ObservationContent {
            title: r.get(5)?,
            subtitle: r.get(6)?,
            narrative: r.get(7)?,
            facts: json_list(&r.get::<_, String>(8)?),
            concepts: json_list(&r.get::<_, String>(9)?),
            files_read: json_list(&r.get::<_, String>(10)?),
            files_modified: json_list(&r.get::<_, String>(11)?),
        },
        original_type: r.get(12)?,
        source_job_ids: json_ids(&r.get::<_, String>(13)?),
        origin: r.get(14)?,
        created_at: r.get(15)?,
        prompt: r.get(16)?,
    })
}

/// A turn summary from a row of [`SELECT_SUMMARIES`].
pub fn summary(r: &Row) -> rusqlite::Result<Summary> {
    Ok(Summary {
        id: r.get(0)?,
        project: r.get(1)?,
        session_id: r.get(2)?,
        prompt_number: r.get(3)?,
        request: r.get(4)?,
        investigated: r.get(5)?,
        learned: r.get(6)?,
        completed: r.get(7)?,
        next_steps: r.get(8)?,
        notes: r.get(9)?,
        files_read: json_list(&r.get::<_, String>(10)?),
        files_edited: json_list(&r.get::<_, String>(11)?),
        source_job_ids: json_ids(&r.get::<_, String>(12)?),
        origin: r.get(13)?,
        created_at: r.get(14)?,
    })
}

/// Decodes a JSON list column (facts, concepts, files): strings as they are, other values
/// as their JSON text; a malformed column (the schema's `json_valid` checks make that
/// impossible) reads as empty.
pub fn json_list(text: &str) -> Vec<String> {
    serde_json::from_str::<Vec<serde_json::Value>>(text)
        .map(|items| {
            items
                .into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Decodes a `source_job_ids` column; malformed reads as empty.
fn json_ids(text: &str) -> Vec<i64> {
    serde_json::from_str(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as `get_records` gives it keeps its keys and their order.
    #[test]
    fn an_observation_serializes_as_records_always_did() {
        let o = Observation {
            id: 1,
            project: "p".into(),
            session_id: Some("s".into()),
            prompt_number: Some(2),
            kind: "change".into(),
            content: ObservationContent {
                title: "T".into(),
                narrative: "N".into(),
                facts: vec!["f".into()],
                files_modified: vec!["a.rs".into()],
                ..Default::default()
            },
            original_type: Some("insight".into()),
            source_job_ids: vec![3],
            origin: "model".into(),
            created_at: 5,
            prompt: None,
        };
        assert_eq!(
            serde_json::to_string(&o).expect("encode"),
            r#"{"id":1,"project":"p","session_id":"s","prompt_number":2,"type":"change","title":"T","subtitle":"","narrative":"N","facts":["f"],"concepts":[],"files_read":[],"files_modified":["a.rs"],"origin":"model","created_at":5,"prompt":null}"#
        );
    }

    #[test]
    fn json_lists_decode_leniently() {
        assert_eq!(json_list(r#"["a", 2, null]"#), vec!["a", "2", "null"]);
        assert_eq!(json_list("[]"), Vec::<String>::new());
        assert_eq!(json_list("not json"), Vec::<String>::new());
        assert_eq!(json_ids("[3, 4]"), vec![3, 4]);
        assert_eq!(json_ids("oops"), Vec::<i64>::new());
    }
}
