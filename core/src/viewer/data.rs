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
        // A prompt is its text: shown once, as the title.
        title: shorten(&one_line(&text), DETAIL_CHARS),
        detail: String::new(),
        created_at: r.get(5)?,
    })
}

const PROMPT_COLUMNS: &str = "id, project, session_id, prompt_number, prompt_text, created_at";

/// Rows of `select` (one of the three kinds) and the largest id of `table`, read in one
/// statement: one snapshot, so no row written between the two reads can be counted as
/// seen without being read. The rows' order is not kept.
fn rows_and_top<T>(
    conn: &Connection,
    table: &str,
    select: &str,
    params: impl rusqlite::Params,
    map: fn(&rusqlite::Row) -> rusqlite::Result<T>,
) -> Result<(Vec<T>, i64)> {
    let mut top = 0;
    let mut out = Vec::new();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT x.*, m.top FROM (SELECT coalesce(max(id), 0) AS top FROM {table}) m
         LEFT JOIN ({select}) x ON 1"
    ))?;
    let last = stmt.column_count() - 1;
    let mut rows = stmt.query(params)?;
    while let Some(r) = rows.next()? {
        top = r.get(last)?;
        if r.get::<_, Option<i64>>(0)?.is_some() {
            out.push(map(r)?);
        }
    }
    Ok((out, top))
}

/// A page of the feed: memories newest first, where the live feed goes on from, and where
/// the next (older) page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPage {
    pub items: Vec<Item>,
    /// The largest id of each kind, over every project, read with the rows.
    pub seen: Seen,
    /// The ids the next page starts below; `None` on the last page.
    pub older: Option<Seen>,
}

/// The newest `limit` memories below `before` (each kind's id; `None`: the newest), one
/// project or all, merged newest first.
pub fn latest(
    conn: &Connection,
    project: Option<&str>,
    limit: usize,
    before: Option<Seen>,
) -> Result<FeedPage> {
    let before = before.unwrap_or(Seen {
        observation: i64::MAX,
        summary: i64::MAX,
        prompt: i64::MAX,
    });
    // One more than shown: whether there is an older page.
    let n = limit as i64 + 1;
    let (obs, top_o) = rows_and_top(
        conn,
        "observations",
        &format!(
            "{SELECT_OBSERVATIONS} WHERE o.id < ?1 AND (?2 IS NULL OR o.project = ?2)
             ORDER BY o.id DESC LIMIT ?3"
        ),
        params![before.observation, project, n],
        observation,
    )?;
    let (sums, top_s) = rows_and_top(
        conn,
        "session_summaries",
        &format!(
            "{SELECT_SUMMARIES} WHERE s.id < ?1 AND (?2 IS NULL OR s.project = ?2)
             ORDER BY s.id DESC LIMIT ?3"
        ),
        params![before.summary, project, n],
        summary,
    )?;
    let (prompts, top_p) = rows_and_top(
        conn,
        "user_prompts",
        &format!(
            "SELECT {PROMPT_COLUMNS} FROM user_prompts WHERE id < ?1 AND (?2 IS NULL OR project = ?2)
             ORDER BY id DESC LIMIT ?3"
        ),
        params![before.prompt, project, n],
        prompt,
    )?;
    let mut items: Vec<Item> = obs.into_iter().chain(sums).chain(prompts).collect();
    items.sort_by_key(|i| std::cmp::Reverse((i.created_at, i.id)));
    let more = items.len() > limit;
    items.truncate(limit);
    // Each kind goes on below the oldest of it shown (a kind not shown stays where it was).
    let older = more.then(|| {
        let mut next = before;
        for i in &items {
            let slot = match i.kind {
                "observation" => &mut next.observation,
                "summary" => &mut next.summary,
                _ => &mut next.prompt,
            };
            *slot = (*slot).min(i.id);
        }
        next
    });
    Ok(FeedPage {
        items,
        seen: Seen {
            observation: top_o,
            summary: top_s,
            prompt: top_p,
        },
        older,
    })
}

/// Memories of one project or all: observations, summaries, prompts (one statement; one
/// per case, so a project's count searches its index and the total counts whole tables).
pub fn count(conn: &Connection, project: Option<&str>) -> Result<i64> {
    Ok(match project {
        Some(p) => conn
            .prepare_cached(
                "SELECT (SELECT count(*) FROM observations WHERE project = ?1)
                      + (SELECT count(*) FROM session_summaries WHERE project = ?1)
                      + (SELECT count(*) FROM user_prompts WHERE project = ?1)",
            )?
            .query_row([p], |r| r.get(0))?,
        None => conn
            .prepare_cached(
                "SELECT (SELECT count(*) FROM observations)
                      + (SELECT count(*) FROM session_summaries)
                      + (SELECT count(*) FROM user_prompts)",
            )?
            .query_row([], |r| r.get(0))?,
    })
}

/// Memories written after `seen` (at most `limit` of each kind), oldest first, and the new
/// `seen`: a kind's last row read, or (fewer than `limit` read) its largest id, read in the
/// same statement as the rows, so rows of other projects are passed over but nothing
/// written meanwhile is.
pub fn since(
    conn: &Connection,
    project: Option<&str>,
    seen: Seen,
    limit: usize,
) -> Result<(Vec<Item>, Seen)> {
    let n = limit as i64;
    let next = |rows: &[Item], top: i64, from: i64| {
        if rows.len() as i64 >= n {
            rows.iter().map(|i| i.id).max().unwrap_or(from)
        } else {
            top.max(from)
        }
    };
    let (obs, top_o) = rows_and_top(
        conn,
        "observations",
        &format!(
            "{SELECT_OBSERVATIONS} WHERE o.id > ?1 AND (?2 IS NULL OR o.project = ?2)
             ORDER BY o.id LIMIT ?3"
        ),
        params![seen.observation, project, n],
        observation,
    )?;
    let (sums, top_s) = rows_and_top(
        conn,
        "session_summaries",
        &format!(
            "{SELECT_SUMMARIES} WHERE s.id > ?1 AND (?2 IS NULL OR s.project = ?2)
             ORDER BY s.id LIMIT ?3"
        ),
        params![seen.summary, project, n],
        summary,
    )?;
    let (prompts, top_p) = rows_and_top(
        conn,
        "user_prompts",
        &format!(
            "SELECT {PROMPT_COLUMNS} FROM user_prompts WHERE id > ?1 AND (?2 IS NULL OR project = ?2)
             ORDER BY id LIMIT ?3"
        ),
        params![seen.prompt, project, n],
        prompt,
    )?;
    let next_seen = Seen {
        observation: next(&obs, top_o, seen.observation),
        summary: next(&sums, top_s, seen.summary),
        prompt: next(&prompts, top_p, seen.prompt),
    };
    let mut items: Vec<Item> = prompts.into_iter().chain(obs).chain(sums).collect();
    items.sort_by_key(|i| (i.created_at, i.id));
    Ok((items, next_seen))
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
    /// The session's first prompt still kept.
    pub first_prompt: Option<String>,
    /// What its latest turn summary says was asked.
    pub summary: Option<String>,
    /// Observations, summaries and prompts kept.
    pub memories: i64,
}

const SESSION_COLUMNS: &str =
    "s.session_id, s.project, s.status, s.prompt_counter, s.started_at, s.updated_at,
    (SELECT prompt_text FROM user_prompts p WHERE p.session_id = s.session_id
     ORDER BY p.prompt_number LIMIT 1),
    (SELECT request FROM session_summaries m WHERE m.session_id = s.session_id
     ORDER BY m.prompt_number DESC LIMIT 1),
    (SELECT count(*) FROM observations o WHERE o.session_id = s.session_id)
    + (SELECT count(*) FROM session_summaries m WHERE m.session_id = s.session_id)
    + (SELECT count(*) FROM user_prompts p WHERE p.session_id = s.session_id)";

/// A session keeps a memory.
const SESSION_NOT_EMPTY: &str =
    "(EXISTS (SELECT 1 FROM observations o WHERE o.session_id = s.session_id)
    OR EXISTS (SELECT 1 FROM session_summaries m WHERE m.session_id = s.session_id)
    OR EXISTS (SELECT 1 FROM user_prompts p WHERE p.session_id = s.session_id))";

fn session_row(r: &rusqlite::Row) -> rusqlite::Result<SessionRow> {
    let first: Option<String> = r.get(6)?;
    let summary: Option<String> = r.get(7)?;
    Ok(SessionRow {
        session_id: r.get(0)?,
        project: r.get(1)?,
        status: r.get(2)?,
        prompts: r.get(3)?,
        started_at: r.get(4)?,
        updated_at: r.get(5)?,
        first_prompt: first.map(|t| shorten(&one_line(&t), DETAIL_CHARS)),
        summary: summary.map(|t| shorten(&one_line(&t), DETAIL_CHARS)),
        memories: r.get(8)?,
    })
}

/// Sessions that keep a memory (one project or all), the most recently active first,
/// `limit` from `offset`.
pub fn sessions(
    conn: &Connection,
    project: Option<&str>,
    limit: usize,
    offset: usize,
) -> Result<Vec<SessionRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s
             WHERE (?1 IS NULL OR s.project = ?1) AND {SESSION_NOT_EMPTY}
             ORDER BY s.updated_at DESC LIMIT ?2 OFFSET ?3"
        ))?
        .query_map(params![project, limit as i64, offset as i64], session_row)?
        .collect::<rusqlite::Result<_>>()?)
}

/// Sessions that keep a memory (one project or all).
pub fn session_count(conn: &Connection, project: Option<&str>) -> Result<i64> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT count(*) FROM sessions s WHERE (?1 IS NULL OR s.project = ?1) AND {SESSION_NOT_EMPTY}"
        ))?
        .query_row([project], |r| r.get(0))?)
}

/// One session's turn: its prompt, its observations in order, its summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Turn {
    pub prompt_number: i64,
    pub prompt: Option<Item>,
    pub observations: Vec<Item>,
    pub summary: Option<Item>,
}

/// Observations a session page lists.
pub const SESSION_OBSERVATIONS: usize = 500;

/// One session's page: the session, its turns in order (observations before the first
/// prompt are turn 0), and its observations in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPage {
    pub row: SessionRow,
    pub turns: Vec<Turn>,
    /// Observations of the session, shown or not.
    pub observations: i64,
    /// The first observation shown (0-based, in the session's order).
    pub offset: usize,
}

/// A session with `SESSION_OBSERVATIONS` of its observations from `offset` (in turn order),
/// with the prompts and summaries of the turns those fall in (all of them on the first page).
pub fn session(conn: &Connection, session_id: &str, offset: usize) -> Result<Option<SessionPage>> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.session_id = ?1"
        ))?
        .query_map([session_id], session_row)?
        .next()
        .transpose()?;
    let Some(row) = row else { return Ok(None) };
    let observations: i64 = conn
        .prepare_cached("SELECT count(*) FROM observations WHERE session_id = ?1")?
        .query_row([session_id], |r| r.get(0))?;
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
             ORDER BY o.prompt_number, o.id LIMIT ?2 OFFSET ?3"
        ))?
        .query_map(
            params![session_id, SESSION_OBSERVATIONS as i64, offset as i64],
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
    let mut turns: Vec<Turn> = turns.into_values().collect();
    // A page of a long session: the turns from its first observation's to its last's.
    let shown: Vec<i64> = turns
        .iter()
        .filter(|t| !t.observations.is_empty())
        .map(|t| t.prompt_number)
        .collect();
    let from = if offset > 0 {
        shown.first().copied()
    } else {
        None
    };
    let to = if offset as i64 + (SESSION_OBSERVATIONS as i64) < observations {
        shown.last().copied()
    } else {
        None
    };
    turns.retain(|t| {
        from.is_none_or(|f| t.prompt_number >= f) && to.is_none_or(|l| t.prompt_number <= l)
    });
    Ok(Some(SessionPage {
        row,
        turns,
        observations,
        offset,
    }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::testing::{T0, fixture, obs};

    #[test]
    fn a_memory_written_between_two_feed_reads_is_delivered_exactly_once() {
        let mut f = fixture();
        f.add(obs("acme", "bugfix", "first", "", T0));
        f.add(obs("other", "bugfix", "elsewhere", "", T0 + 1));
        let page = latest(&f.conn, Some("acme"), 10, None).expect("latest");
        assert_eq!(page.items.len(), 1);
        // Rows of another project are seen with the rows read, in the same statement.
        assert_eq!(page.seen.observation, 2);
        let id = f.add(obs("acme", "bugfix", "between", "", T0 + 2));
        f.prompt("acme", 1, "a prompt", T0 + 3);
        let (items, seen) = since(&f.conn, Some("acme"), page.seen, 100).expect("since");
        let refs: Vec<&str> = items.iter().map(|i| i.title.as_str()).collect();
        assert_eq!(refs, ["between", "a prompt"]);
        assert_eq!(seen.observation, id);
        let (again, same) = since(&f.conn, Some("acme"), seen, 100).expect("since again");
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(same, seen);
        // A full batch goes on from its last row, not from the table's largest id.
        f.add(obs("acme", "bugfix", "one", "", T0 + 4));
        f.add(obs("acme", "bugfix", "two", "", T0 + 5));
        let (one, after) = since(&f.conn, None, seen, 1).expect("one by one");
        assert_eq!(
            one.iter().map(|i| i.title.as_str()).collect::<Vec<_>>(),
            ["one"]
        );
        let (two, _) = since(&f.conn, None, after, 1).expect("the next");
        assert_eq!(
            two.iter().map(|i| i.title.as_str()).collect::<Vec<_>>(),
            ["two"]
        );
    }

    #[test]
    fn paging_the_feed_reaches_the_oldest_memory_once() {
        let mut f = fixture();
        for i in 0..7 {
            f.add(obs("acme", "bugfix", &format!("o{i}"), "", T0 + i * 10));
        }
        f.summary("acme", 1, "asked", "done", T0 + 15);
        f.prompt("acme", 1, "p1", T0 + 1);
        assert_eq!(count(&f.conn, Some("acme")).expect("count"), 9);
        assert_eq!(count(&f.conn, Some("none")).expect("count"), 0);
        assert_eq!(count(&f.conn, None).expect("count"), 9);
        let mut before = None;
        let mut titles = Vec::new();
        for _ in 0..10 {
            let page = latest(&f.conn, Some("acme"), 4, before).expect("page");
            titles.extend(page.items.iter().map(|i| i.title.clone()));
            match page.older {
                Some(o) => before = Some(o),
                None => break,
            }
        }
        assert_eq!(
            titles,
            ["o6", "o5", "o4", "o3", "o2", "asked", "o1", "p1", "o0"]
        );
    }

    #[test]
    fn sessions_read_as_a_history_and_empty_ones_are_not_listed() {
        let mut f = fixture();
        f.prompt("acme", 1, "fix the lease", T0);
        f.add(obs("acme", "bugfix", "lease fixed", "", T0 + 1));
        f.summary("acme", 1, "fix the lease", "fixed", T0 + 2);
        f.add(obs("zeta", "bugfix", "z", "", T0 + 3));
        f.conn
            .execute("DELETE FROM observations WHERE project = 'zeta'", [])
            .expect("forget");
        let rows = sessions(&f.conn, None, 10, 0).expect("sessions");
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].first_prompt.as_deref(), Some("fix the lease"));
        assert_eq!(rows[0].summary.as_deref(), Some("fix the lease"));
        assert_eq!(rows[0].memories, 3);
        assert_eq!(session_count(&f.conn, None).expect("count"), 1);
        assert_eq!(session_count(&f.conn, Some("zeta")).expect("count"), 0);
        assert!(sessions(&f.conn, None, 10, 1).expect("page 2").is_empty());
        let page = session(&f.conn, "s-acme", 0)
            .expect("session")
            .expect("exists");
        assert_eq!((page.observations, page.turns.len()), (1, 1));
        assert!(session(&f.conn, "nope", 0).expect("session").is_none());
    }
}
