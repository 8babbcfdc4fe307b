//! What the viewer's pages read that no other reader does: the live feed (memories past
//! the last id seen), projects, sessions with their turns, tokens per day. Observations
//! and summaries are read with `memory::rows`' columns and mapping, then cut to a list
//! item here. Reads only; every query is one indexed statement in autocommit, so no read
//! transaction outlives it.

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::error::Result;
use crate::memory::kind::Kind;
use crate::memory::rows::{self, SELECT_OBSERVATIONS, SELECT_SUMMARIES};
use crate::recall::snippet::{one_line, shorten};

/// One memory as the feed and the session page list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    pub kind: &'static str,
    pub id: i64,
    #[serde(rename = "ref")]
    pub reference: String,
    pub project: String,
    pub session_id: Option<String>,
    pub prompt_number: Option<i64>,
    /// The observation type, or `summary` / `prompt`.
    pub label: String,
    pub title: String,
    pub detail: String,
    pub created_at: i64,
}

/// The last id the feed has seen of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Seen {
    pub observation: i64,
    pub summary: i64,
    pub prompt: i64,
}

const DETAIL_CHARS: usize = 300;

fn observation(r: &rusqlite::Row) -> rusqlite::Result<Item> {
    let o = rows::observation(r)?;
    let c = o.content;
    let detail = if c.narrative.is_empty() {
        c.subtitle
    } else {
        c.narrative
    };
    Ok(Item {
        kind: "observation",
        id: o.id,
        reference: Kind::Observation.reference(o.id),
        project: o.project,
        session_id: o.session_id,
        prompt_number: o.prompt_number,
        label: o.kind,
        title: c.title,
        detail: shorten(&one_line(&detail), DETAIL_CHARS),
        created_at: o.created_at,
    })
}

fn summary(r: &rusqlite::Row) -> rusqlite::Result<Item> {
    let s = rows::summary(r)?;
    let detail = [s.completed, s.learned]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" · ");
    Ok(Item {
        kind: "summary",
        id: s.id,
        reference: Kind::Summary.reference(s.id),
        project: s.project,
        session_id: Some(s.session_id),
        prompt_number: Some(s.prompt_number),
        label: "summary".into(),
        title: shorten(&one_line(&s.request), 160),
        detail: shorten(&one_line(&detail), DETAIL_CHARS),
        created_at: s.created_at,
    })
}

fn prompt(r: &rusqlite::Row) -> rusqlite::Result<Item> {
    let id: i64 = r.get(0)?;
    let text: String = r.get(4)?;
    Ok(Item {
        kind: "prompt",
        id,
        reference: Kind::Prompt.reference(id),
        project: r.get(1)?,
        session_id: Some(r.get(2)?),
        prompt_number: Some(r.get(3)?),
        label: "prompt".into(),
        title: shorten(&one_line(&text), 160),
        detail: shorten(&one_line(&text), DETAIL_CHARS),
        created_at: r.get(5)?,
    })
}

const PROMPT_COLUMNS: &str = "id, project, session_id, prompt_number, prompt_text, created_at";

/// The newest `limit` memories of each kind (one project or all), merged newest first,
/// and the largest id of each kind (where the live feed goes on from).
pub fn latest(conn: &Connection, project: Option<&str>, limit: usize) -> Result<(Vec<Item>, Seen)> {
    let limit = limit as i64;
    let mut items: Vec<Item> = Vec::new();
    items.extend(
        conn.prepare_cached(&format!(
            "{SELECT_OBSERVATIONS} WHERE ?1 IS NULL OR o.project = ?1
             ORDER BY o.id DESC LIMIT ?2"
        ))?
        .query_map(params![project, limit], observation)?
        .collect::<rusqlite::Result<Vec<_>>>()?,
    );
    items.extend(
        conn.prepare_cached(&format!(
            "{SELECT_SUMMARIES} WHERE ?1 IS NULL OR s.project = ?1
             ORDER BY s.id DESC LIMIT ?2"
        ))?
        .query_map(params![project, limit], summary)?
        .collect::<rusqlite::Result<Vec<_>>>()?,
    );
    items.extend(
        conn.prepare_cached(&format!(
            "SELECT {PROMPT_COLUMNS} FROM user_prompts WHERE ?1 IS NULL OR project = ?1
             ORDER BY id DESC LIMIT ?2"
        ))?
        .query_map(params![project, limit], prompt)?
        .collect::<rusqlite::Result<Vec<_>>>()?,
    );
    let seen = last_ids(conn)?;
    items.sort_by_key(|i| std::cmp::Reverse((i.created_at, i.id)));
    items.truncate(limit as usize);
    Ok((items, seen))
}

/// The largest id of each kind, over every project.
pub fn last_ids(conn: &Connection) -> Result<Seen> {
    Ok(conn.query_row(
        "SELECT (SELECT coalesce(max(id), 0) FROM observations),
                (SELECT coalesce(max(id), 0) FROM session_summaries),
                (SELECT coalesce(max(id), 0) FROM user_prompts)",
        [],
        |r| {
            Ok(Seen {
                observation: r.get(0)?,
                summary: r.get(1)?,
                prompt: r.get(2)?,
            })
        },
    )?)
}

/// Memories written after `seen` (at most `limit` of each kind), oldest first, and the new
/// `seen`.
pub fn since(
    conn: &Connection,
    project: Option<&str>,
    seen: Seen,
    limit: usize,
) -> Result<(Vec<Item>, Seen)> {
    let limit = limit as i64;
    let mut next = seen;
    let mut items: Vec<Item> = Vec::new();
    let obs: Vec<Item> = conn
        .prepare_cached(&format!(
            "{SELECT_OBSERVATIONS} WHERE o.id > ?1 AND (?2 IS NULL OR o.project = ?2)
             ORDER BY o.id LIMIT ?3"
        ))?
        .query_map(params![seen.observation, project, limit], observation)?
        .collect::<rusqlite::Result<_>>()?;
    let sums: Vec<Item> = conn
        .prepare_cached(&format!(
            "{SELECT_SUMMARIES} WHERE s.id > ?1 AND (?2 IS NULL OR s.project = ?2)
             ORDER BY s.id LIMIT ?3"
        ))?
        .query_map(params![seen.summary, project, limit], summary)?
        .collect::<rusqlite::Result<_>>()?;
    let prompts: Vec<Item> = conn
        .prepare_cached(&format!(
            "SELECT {PROMPT_COLUMNS} FROM user_prompts WHERE id > ?1 AND (?2 IS NULL OR project = ?2)
             ORDER BY id LIMIT ?3"
        ))?
        .query_map(params![seen.prompt, project, limit], prompt)?
        .collect::<rusqlite::Result<_>>()?;
    // Rows of other projects are skipped, but seen: never read again.
    let all = last_ids(conn)?;
    next.observation = obs.last().map_or(all.observation, |i| i.id);
    next.summary = sums.last().map_or(all.summary, |i| i.id);
    next.prompt = prompts.last().map_or(all.prompt, |i| i.id);
    items.extend(prompts);
    items.extend(obs);
    items.extend(sums);
    items.sort_by_key(|i| (i.created_at, i.id));
    Ok((items, next))
}

/// Project names, the most recently active first.
pub fn projects(conn: &Connection) -> Result<Vec<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT project FROM sessions GROUP BY project ORDER BY max(updated_at) DESC LIMIT 200",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

/// A session as the sessions page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRow {
    pub session_id: String,
    pub project: String,
    pub status: String,
    pub prompts: i64,
    pub started_at: i64,
    pub updated_at: i64,
}

fn session_row(r: &rusqlite::Row) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        session_id: r.get(0)?,
        project: r.get(1)?,
        status: r.get(2)?,
        prompts: r.get(3)?,
        started_at: r.get(4)?,
        updated_at: r.get(5)?,
    })
}

/// The most recently active sessions (one project or all).
pub fn sessions(conn: &Connection, project: Option<&str>, limit: usize) -> Result<Vec<SessionRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT session_id, project, status, prompt_counter, started_at, updated_at
             FROM sessions WHERE ?1 IS NULL OR project = ?1
             ORDER BY updated_at DESC LIMIT ?2",
        )?
        .query_map(params![project, limit as i64], session_row)?
        .collect::<rusqlite::Result<_>>()?)
}

/// One session's turn: its prompt, its observations in order, its summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Turn {
    pub prompt_number: i64,
    pub prompt: Option<Item>,
    pub observations: Vec<Item>,
    pub summary: Option<Item>,
}

/// Most observations a session page lists.
pub const SESSION_OBSERVATIONS: usize = 2_000;

/// A session and its turns in order (observations before the first prompt are turn 0).
pub fn session(conn: &Connection, session_id: &str) -> Result<Option<(SessionRow, Vec<Turn>)>> {
    let row = conn
        .prepare_cached(
            "SELECT session_id, project, status, prompt_counter, started_at, updated_at
             FROM sessions WHERE session_id = ?1",
        )?
        .query_map([session_id], session_row)?
        .next()
        .transpose()?;
    let Some(row) = row else { return Ok(None) };
    let mut turns: std::collections::BTreeMap<i64, Turn> = Default::default();
    fn turn(turns: &mut std::collections::BTreeMap<i64, Turn>, n: i64) -> &mut Turn {
        turns.entry(n).or_insert_with(|| Turn {
            prompt_number: n,
            ..Turn::default()
        })
    }
    for p in conn
        .prepare_cached(&format!(
            "SELECT {PROMPT_COLUMNS} FROM user_prompts WHERE session_id = ?1 ORDER BY prompt_number"
        ))?
        .query_map([session_id], prompt)?
    {
        let p = p?;
        let n = p.prompt_number.unwrap_or(0);
        turn(&mut turns, n).prompt = Some(p);
    }
    for o in conn
        .prepare_cached(&format!(
            "{SELECT_OBSERVATIONS} WHERE o.session_id = ?1
             ORDER BY o.prompt_number, o.id LIMIT ?2"
        ))?
        .query_map(
            params![session_id, SESSION_OBSERVATIONS as i64],
            observation,
        )?
    {
        let o = o?;
        turn(&mut turns, o.prompt_number.unwrap_or(0))
            .observations
            .push(o);
    }
    for s in conn
        .prepare_cached(&format!(
            "{SELECT_SUMMARIES} WHERE s.session_id = ?1 ORDER BY s.prompt_number"
        ))?
        .query_map([session_id], summary)?
    {
        let s = s?;
        let n = s.prompt_number.unwrap_or(0);
        turn(&mut turns, n).summary = Some(s);
    }
    Ok(Some((row, turns.into_values().collect())))
}

/// Model tokens (input plus output) per UTC day from `since` (ms), oldest first, as
/// (day start in ms, tokens).
pub fn tokens_per_day(conn: &Connection, since: i64) -> Result<Vec<(i64, i64)>> {
    Ok(conn
        .prepare_cached(
            "SELECT created_at / 86400000 AS day, sum(input_tokens + output_tokens)
             FROM model_calls WHERE created_at >= ?1 GROUP BY day ORDER BY day",
        )?
        .query_map([since], |r| {
            Ok((r.get::<_, i64>(0)? * 86_400_000, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?)
}
