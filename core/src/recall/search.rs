//! Search: the request and its filters, the orders, paging and the hits. Relevance order
//! with words is ranked by [`crate::recall::rank`] (full text and meaning fused); what a
//! hit shows is `snippet`'s; the timeline and records by id are `timeline`'s.
//!
//! Invariants:
//! - user text reaches `MATCH` only through [`crate::recall::query`], so no input is an SQL error;
//! - every query is scoped to one project unless the caller passes `project: None`
//!   (all projects), and every hit carries its project;
//! - BM25 uses column weights (an observation's title counts most, then its subtitle and
//!   concepts, then facts, then the narrative), so a title hit outranks a narrative hit;
//! - relevance ranks every match (see `rank`); `newest`/`oldest` list the matches of every
//!   word by time, bounded by a window: the [`RANK_WINDOW`] most recently stored matches
//!   of each kind that pass the filters (the earliest stored, for `oldest`), found in one
//!   walk of the full-text index in rowid order;
//! - the full-text index leads every plan; project, time and type filters read the
//!   covering `*_search` indexes (migration 0002), never the wide rows;
//! - read only: nothing here writes.

use std::collections::HashMap;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use serde::Serialize;

use crate::error::Result;
use crate::recall::query;
use crate::recall::rank::{self, Semantic};
use crate::recall::snippet::{
    HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, SnippetPair, one_line, short_title, shorten, snippets_of,
};

/// Most hits one search returns, whatever the caller asks.
pub const MAX_LIMIT: usize = 500;
/// Deepest offset accepted (hits beyond it are not reachable by paging).
pub const MAX_OFFSET: usize = 10_000;
/// Matches ranked per kind: the newest this many that pass the filters (see the module
/// invariants).
pub const RANK_WINDOW: i64 = 300;

/// BM25 column weights of `observations_fts(title, subtitle, narrative, facts_text,
/// concepts_text, project_key)`; the project's key is for narrowing, not for ranking.
const OBSERVATION_WEIGHTS: &str = "10.0, 4.0, 1.0, 2.0, 4.0, 0.0";
/// Of `session_summaries_fts(request, investigated, learned, completed, next_steps, notes,
/// project_key)`.
const SUMMARY_WEIGHTS: &str = "5.0, 1.0, 2.0, 2.0, 1.0, 1.0, 0.0";
/// Of `user_prompts_fts(prompt_text, project_key)`.
const PROMPT_WEIGHTS: &str = "1.0, 0.0";

/// What kind of record a hit is. Each kind has its own id space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Observation,
    Summary,
    Prompt,
}

impl Kind {
    /// The number that stands for the kind in `embeddings.kind` and `embedding_queue.kind`.
    pub fn code(self) -> i64 {
        match self {
            Kind::Observation => 0,
            Kind::Summary => 1,
            Kind::Prompt => 2,
        }
    }

    /// The kind of a [`Kind::code`].
    pub fn from_code(code: i64) -> Option<Kind> {
        match code {
            0 => Some(Kind::Observation),
            1 => Some(Kind::Summary),
            2 => Some(Kind::Prompt),
            _ => None,
        }
    }

    /// Every kind, in timeline tie-break order.
    pub const ALL: [Kind; 3] = [Kind::Observation, Kind::Summary, Kind::Prompt];

    /// How an id of this kind is written for people: `12`, `S12`, `P12`.
    pub fn reference(self, id: i64) -> String {
        match self {
            Kind::Observation => id.to_string(),
            Kind::Summary => format!("S{id}"),
            Kind::Prompt => format!("P{id}"),
        }
    }

    /// Parses a reference as [`Kind::reference`] writes it: `12` or `#12` (an
    /// observation), `S3` (a turn summary), `P7` (a prompt); case-insensitive.
    pub fn parse_reference(s: &str) -> Option<(Kind, i64)> {
        let s = s.trim().trim_start_matches('#');
        let (kind, digits) = match s.chars().next()? {
            'S' | 's' => (Kind::Summary, &s[1..]),
            'P' | 'p' => (Kind::Prompt, &s[1..]),
            _ => (Kind::Observation, s),
        };
        let id: i64 = digits.parse().ok()?;
        (id > 0).then_some((kind, id))
    }

    /// Parses `observations`, `summaries`, `prompts` (singular too) or `all`.
    pub fn parse_list(s: &str) -> Option<Vec<Kind>> {
        match s.trim().to_ascii_lowercase().as_str() {
            "observation" | "observations" | "obs" => Some(vec![Kind::Observation]),
            "summary" | "summaries" => Some(vec![Kind::Summary]),
            "prompt" | "prompts" => Some(vec![Kind::Prompt]),
            "all" | "" => Some(Kind::ALL.to_vec()),
            _ => None,
        }
    }

    pub(super) fn rank(self) -> u8 {
        match self {
            Kind::Observation => 0,
            Kind::Summary => 1,
            Kind::Prompt => 2,
        }
    }
}

/// How hits are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Best BM25 score first (newest first when the query has no word to rank by).
    #[default]
    Relevance,
    Newest,
    Oldest,
}

impl Order {
    /// Parses `relevance`, `newest` or `oldest`.
    pub fn parse(s: &str) -> Option<Order> {
        match s.trim().to_ascii_lowercase().as_str() {
            "relevance" | "rank" | "best" => Some(Order::Relevance),
            "newest" | "new" | "recent" => Some(Order::Newest),
            "oldest" | "old" => Some(Order::Oldest),
            _ => None,
        }
    }
}

/// Which rows a search or timeline may return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// Only this project; `None` is every project.
    pub project: Option<String>,
    /// Only observations of these types (summaries and prompts have no type, so a type
    /// filter leaves them out).
    pub types: Vec<String>,
    /// Only observations tagged with this concept (case-insensitive, whole concept).
    pub concept: Option<String>,
    /// Only records that read or modified a file whose path contains this text.
    pub file: Option<String>,
    /// Created at or after this time (ms).
    pub since: Option<i64>,
    /// Created before this time (ms).
    pub until: Option<i64>,
}

/// A search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    /// What the person typed; see [`crate::recall::query`]. Empty lists by the filters alone.
    pub query: String,
    pub filters: Filters,
    /// Kinds to search; empty means all.
    pub kinds: Vec<Kind>,
    pub order: Order,
    pub limit: usize,
    pub offset: usize,
    /// The Claude Code session asking, when the caller knows it (the MCP server is told by
    /// Claude Code's `CLAUDE_CODE_SESSION_ID`; the CLI passes `None`). The prompt that
    /// session is answering right now was stored just before this search; ranking may use
    /// this to keep it from crowding out the memories. Filters nothing by itself.
    pub asking_session: Option<String>,
}

impl Default for SearchRequest {
    fn default() -> Self {
        Self {
            query: String::new(),
            filters: Filters::default(),
            kinds: Vec::new(),
            order: Order::Relevance,
            limit: 20,
            offset: 0,
            asking_session: None,
        }
    }
}

/// One line of the search index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub kind: Kind,
    pub id: i64,
    pub project: String,
    pub created_at: i64,
    /// The observation type, or `summary` / `prompt`.
    #[serde(rename = "type")]
    pub label: String,
    pub title: String,
    /// A short excerpt with the matched words between [`HIGHLIGHT_OPEN`] and
    /// [`HIGHLIGHT_CLOSE`].
    pub snippet: String,
    /// BM25 score (lower is better); `None` when the query had no word to rank by or the
    /// order is by time (newest, oldest), where no score is computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

impl Hit {
    /// `12`, `S12` or `P12`.
    pub fn reference(&self) -> String {
        self.kind.reference(self.id)
    }
}

/// Bytes of the database file a reading connection maps into memory (SQLite caps it at
/// its compile-time maximum, about 2 GB).
pub const READ_MMAP_BYTES: i64 = 2_147_418_112;
/// Page cache of a reading connection, in KiB.
pub const READ_CACHE_KIB: i64 = 65_536;

/// Tunes a connection that will serve searches: memory-mapped reads (a search touches
/// pages all over a large full-text index; reading them through `mmap` instead of one
/// `pread` each is most of the difference at a million observations) and a larger page
/// cache for long-lived processes such as the MCP server.
pub fn tune_for_reading(conn: &Connection) -> Result<()> {
    conn.execute_batch(&format!(
        "PRAGMA mmap_size = {READ_MMAP_BYTES}; PRAGMA cache_size = -{READ_CACHE_KIB};"
    ))?;
    Ok(())
}

/// Searches observations, summaries and prompts by their words alone.
pub fn search(conn: &Connection, req: &SearchRequest) -> Result<Vec<Hit>> {
    search_with(conn, req, None)
}

/// Searches observations, summaries and prompts; with `semantic`, relevance order fuses
/// the full-text ranking with the nearest vectors (see [`crate::recall::rank`]).
pub fn search_with(
    conn: &Connection,
    req: &SearchRequest,
    semantic: Option<&Semantic>,
) -> Result<Vec<Hit>> {
    let q = query::parse(&req.query);
    let limit = req.limit.min(MAX_LIMIT);
    let offset = req.offset.min(MAX_OFFSET);
    if limit == 0 {
        return Ok(Vec::new());
    }
    let f = &req.filters;
    let kinds: Vec<Kind> = if req.kinds.is_empty() {
        Kind::ALL.to_vec()
    } else {
        req.kinds.clone()
    }
    .into_iter()
    .filter(|kind| match kind {
        Kind::Observation => true,
        Kind::Summary => f.types.is_empty() && f.concept.is_none(),
        Kind::Prompt => f.types.is_empty() && f.concept.is_none() && f.file.is_none(),
    })
    .collect();
    let fetch = limit + offset;
    let any = q.fts_any();
    let hits = match (&any, req.order) {
        (Some(any), Order::Relevance) => {
            let mut ranked = rank::relevance(conn, &q, any, &kinds, f, fetch + 1, semantic)?;
            // The question being answered right now is not an answer to itself.
            if let Some(asking) = &req.asking_session
                && let Some(current) = rank::current_prompt(conn, asking)?
            {
                ranked.retain(|c| !(c.kind == Kind::Prompt && c.id == current));
            }
            ranked.truncate(fetch);
            ranked
        }
        _ => {
            let mut hits = Vec::new();
            for &kind in &kinds {
                hits.extend(search_kind(conn, kind, &q, f, req.order, fetch as i64)?);
            }
            hits.sort_by(|a, b| {
                let by_time = (b.created_at, b.kind, b.id).cmp(&(a.created_at, a.kind, a.id));
                match req.order {
                    Order::Relevance | Order::Newest => by_time,
                    Order::Oldest => by_time.reverse(),
                }
            });
            hits
        }
    };
    let shown: Vec<Candidate> = hits.into_iter().skip(offset).take(limit).collect();
    // Highlights mark every word of the query that a row holds.
    let mut snippets: HashMap<(Kind, i64), SnippetPair> = HashMap::new();
    if let Some(m) = &any {
        for kind in Kind::ALL {
            let ids: Vec<i64> = shown
                .iter()
                .filter(|c| c.kind == kind)
                .map(|c| c.id)
                .collect();
            for (id, pair) in snippets_of(conn, kind, m, &ids)? {
                snippets.insert((kind, id), pair);
            }
        }
    }
    let mut out = Vec::new();
    for c in shown {
        let pair = snippets.remove(&(c.kind, c.id));
        // A row deleted between the two reads is simply left out.
        if let Some(hit) = fill(conn, c, pair)? {
            out.push(hit);
        }
    }
    Ok(out)
}

/// The SQL pieces that differ between the three searchable tables.
pub(super) struct Table {
    pub(super) table: &'static str,
    pub(super) fts: &'static str,
    /// The full-text table's columns of text, in order (its last, `project_key`, is not).
    pub(super) columns: &'static str,
    select: &'static str,
    weights: &'static str,
    /// The text shown when there is no match to make a snippet from.
    plain: &'static str,
    /// The FTS column a snippet comes from when the best one only repeats the title.
    pub(super) body_column: Option<u8>,
    /// The covering index of the columns search filters read (migration 0002).
    pub(super) search_index: &'static str,
}

impl Table {
    /// The BM25 score of a match, by the column weights (lower is better).
    pub(super) fn bm25(&self) -> String {
        format!("bm25({}, {})", self.fts, self.weights)
    }

    /// The full-text table joined to its rows. Filters on id, project, time and type read
    /// the covering index (a few dense pages); only concept and file filters need the row
    /// itself.
    pub(super) fn joined_rows(&self, f: &Filters) -> String {
        let fts = self.fts;
        if f.concept.is_none() && f.file.is_none() {
            format!(
                "{fts} JOIN {table} t INDEXED BY {index} ON t.id = {fts}.rowid",
                table = self.table,
                index = self.search_index
            )
        } else {
            format!(
                "{fts} JOIN {table} t ON t.id = {fts}.rowid",
                table = self.table
            )
        }
    }
}

pub(super) fn table(kind: Kind) -> Table {
    match kind {
        Kind::Observation => Table {
            table: "observations",
            fts: "observations_fts",
            columns: "title, subtitle, narrative, facts_text, concepts_text",
            select: "t.id, t.project, t.created_at, t.type, t.title",
            weights: OBSERVATION_WEIGHTS,
            plain: "CASE WHEN t.subtitle <> '' THEN t.subtitle ELSE t.narrative END",
            body_column: Some(2),
            search_index: "observations_search",
        },
        Kind::Summary => Table {
            table: "session_summaries",
            fts: "session_summaries_fts",
            columns: "request, investigated, learned, completed, next_steps, notes",
            select: "t.id, t.project, t.created_at, 'summary', t.request",
            weights: SUMMARY_WEIGHTS,
            plain: "CASE WHEN t.completed <> '' THEN t.completed ELSE t.learned END",
            body_column: Some(3),
            search_index: "session_summaries_search",
        },
        Kind::Prompt => Table {
            table: "user_prompts",
            fts: "user_prompts_fts",
            columns: "prompt_text",
            select: "t.id, t.project, t.created_at, 'prompt', t.prompt_text",
            weights: PROMPT_WEIGHTS,
            plain: "''",
            body_column: None,
            search_index: "user_prompts_search",
        },
    }
}

/// A ranked row before its text is read: ranking needs only these, and reading titles and
/// snippets for every match (not just the rows shown) would cost far more.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub(super) kind: Kind,
    pub(super) id: i64,
    pub(super) created_at: i64,
    pub(super) score: Option<f64>,
}

fn search_kind(
    conn: &Connection,
    kind: Kind,
    q: &query::Query,
    f: &Filters,
    order: Order,
    fetch: i64,
) -> Result<Vec<Candidate>> {
    let Some(m) = q.fts_match() else {
        return list_kind(conn, kind, q, f, order, fetch);
    };
    let (sql, args) = window_statement(kind, m, f, order, fetch);
    let mut rows = conn
        .prepare_cached(&sql)?
        .query_map(params_from_iter(args), |r| {
            Ok(Candidate {
                kind,
                id: r.get(0)?,
                created_at: r.get(1)?,
                score: r.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let newest_first =
        |a: &Candidate, b: &Candidate| (b.created_at, b.id).cmp(&(a.created_at, a.id));
    match order {
        // BM25 scores are negative: lower is better.
        Order::Relevance => rows.sort_by(|a, b| {
            a.score
                .unwrap_or(0.0)
                .total_cmp(&b.score.unwrap_or(0.0))
                .then_with(|| newest_first(a, b))
        }),
        Order::Newest => rows.sort_by(newest_first),
        Order::Oldest => rows.sort_by(|a, b| newest_first(b, a)),
    }
    rows.truncate(usize::try_from(fetch).unwrap_or(usize::MAX));
    Ok(rows)
}

/// The statement [`search_kind`] runs: id, time and score of the window's matches, and its
/// arguments (`fts_match` is the parsed query's MATCH expression).
fn window_statement(
    kind: Kind,
    fts_match: String,
    f: &Filters,
    order: Order,
    fetch: i64,
) -> (String, Vec<Value>) {
    let t = table(kind);
    let fts = t.fts;
    // BM25 only when it orders the result: its IDF walks each phrase's whole doclist.
    let score = match order {
        Order::Relevance => t.bm25(),
        Order::Newest | Order::Oldest => "NULL".into(),
    };
    // A unary `+` keeps SQLite from driving the join from a `created_at` index (one
    // full-text evaluation per row): the full-text index always leads.
    let (mut args, wheres) = full_text_led(kind, &fts_match, f);
    let from = t.joined_rows(f);
    // The window: the RANK_WINDOW newest matches (oldest, for `Order::Oldest`) that pass
    // the filters, found and scored in one walk of the full-text index in rowid order.
    let walk = match order {
        Order::Oldest => "ASC",
        Order::Relevance | Order::Newest => "DESC",
    };
    args.push(Value::Integer(fetch.max(RANK_WINDOW)));
    let sql = format!(
        "SELECT t.id, t.created_at, {score} FROM {from} WHERE {wheres}
         ORDER BY {fts}.rowid {walk} LIMIT ?{}",
        args.len(),
        wheres = wheres.join(" AND ")
    );
    (sql, args)
}

/// Rows of a kind by the filters alone (the query has no word to match), newest or oldest
/// first, minus the rows matching excluded words.
fn list_kind(
    conn: &Connection,
    kind: Kind,
    q: &query::Query,
    f: &Filters,
    order: Order,
    fetch: i64,
) -> Result<Vec<Candidate>> {
    let t = table(kind);
    let mut args: Vec<Value> = Vec::new();
    let mut wheres: Vec<String> = Vec::new();
    if let Some(x) = q.exclusion() {
        args.push(Value::Text(x));
        wheres.push(format!(
            "t.id NOT IN (SELECT rowid FROM {fts} WHERE {fts} MATCH ?{})",
            args.len(),
            fts = t.fts
        ));
    }
    push_filters(kind, f, false, &mut args, &mut wheres);
    let order_by = match order {
        Order::Relevance | Order::Newest => "t.created_at DESC, t.id DESC",
        Order::Oldest => "t.created_at, t.id",
    };
    args.push(Value::Integer(fetch));
    let sql = format!(
        "SELECT t.id, t.created_at FROM {table} t WHERE {wheres}
         ORDER BY {order_by} LIMIT ?{n}",
        table = t.table,
        wheres = if wheres.is_empty() {
            "1".to_string()
        } else {
            wheres.join(" AND ")
        },
        n = args.len(),
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params_from_iter(args), |r| {
            Ok(Candidate {
                kind,
                id: r.get(0)?,
                created_at: r.get(1)?,
                score: None,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Reads what a hit shows: project, label, title, and its snippet (highlighted when the
/// query had words to match: `snippets` holds the best one and the body column's).
fn fill(conn: &Connection, c: Candidate, snippets: Option<SnippetPair>) -> Result<Option<Hit>> {
    let t = table(c.kind);
    let row = conn
        .prepare_cached(&format!(
            "SELECT {select}, substr({plain}, 1, 160) FROM {table} t WHERE t.id = ?1",
            select = t.select,
            plain = t.plain,
            table = t.table
        ))?
        .query_row([c.id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })
        .optional()?;
    let Some((id, project, created_at, label, title, plain)) = row else {
        return Ok(None);
    };
    let plain = one_line(&plain.unwrap_or_default());
    let snippet = if let Some((best, body)) = snippets {
        let best = one_line(&best.unwrap_or_default());
        // The title is shown anyway: a snippet that only repeats it gives way to the body.
        let bare = best
            .replace(HIGHLIGHT_OPEN, "")
            .replace(HIGHLIGHT_CLOSE, "");
        match body.map(|b| one_line(&b)).filter(|b| !b.is_empty()) {
            Some(body) if bare == one_line(&title) => body,
            _ => best,
        }
    } else {
        shorten(&plain, 120)
    };
    Ok(Some(Hit {
        kind: c.kind,
        id,
        project,
        created_at,
        label,
        title: if c.kind == Kind::Observation {
            title
        } else {
            short_title(&title)
        },
        snippet,
        score: c.score,
    }))
}

/// The arguments and WHERE terms of a statement led by the full-text index: `?1`, the
/// MATCH expression `expr` narrowed to the filters' project when they name one (the index
/// then intersects the words with the project's key, migration 0008, and reads no row of
/// another project), then every other filter, indexed columns written `+t.column` (see
/// [`search_kind`]).
pub(super) fn full_text_led(kind: Kind, expr: &str, f: &Filters) -> (Vec<Value>, Vec<String>) {
    let fts = table(kind).fts;
    let scoped = match &f.project {
        Some(p) => format!("({expr}) AND project_key : \"{}\"", project_key(p)),
        None => expr.to_string(),
    };
    let mut args = vec![Value::Text(scoped)];
    let mut wheres = vec![format!("{fts} MATCH ?1")];
    let rest = Filters {
        project: None,
        ..f.clone()
    };
    push_filters(kind, &rest, true, &mut args, &mut wheres);
    (args, wheres)
}

/// The word a project is indexed by in the `project_key` columns: `'x' || hex(project)`,
/// as the tokenizer lowercases it.
fn project_key(project: &str) -> String {
    let mut key = String::with_capacity(1 + 2 * project.len());
    key.push('x');
    for b in project.bytes() {
        key.push_str(&format!("{b:02x}"));
    }
    key
}

/// With `no_index`, the indexed columns are written `+t.column` so that SQLite does not
/// use their indexes (see [`search_kind`]).
pub(super) fn push_filters(
    kind: Kind,
    f: &Filters,
    no_index: bool,
    args: &mut Vec<Value>,
    wheres: &mut Vec<String>,
) {
    let plus = if no_index { "+" } else { "" };
    if let Some(p) = &f.project {
        args.push(Value::Text(p.clone()));
        wheres.push(format!("{plus}t.project = ?{}", args.len()));
    }
    if let Some(since) = f.since {
        args.push(Value::Integer(since));
        wheres.push(format!("{plus}t.created_at >= ?{}", args.len()));
    }
    if let Some(until) = f.until {
        args.push(Value::Integer(until));
        wheres.push(format!("{plus}t.created_at < ?{}", args.len()));
    }
    if kind == Kind::Observation {
        if !f.types.is_empty() {
            let mut marks = Vec::new();
            for ty in &f.types {
                args.push(Value::Text(ty.trim().to_ascii_lowercase()));
                marks.push(format!("?{}", args.len()));
            }
            wheres.push(format!("t.type IN ({})", marks.join(", ")));
        }
        if let Some(c) = &f.concept {
            args.push(Value::Text(c.trim().to_lowercase()));
            wheres.push(format!(
                "EXISTS (SELECT 1 FROM json_each(t.concepts) c WHERE lower(c.value) = ?{})",
                args.len()
            ));
        }
    }
    if let Some(file) = &f.file {
        let columns: &[&str] = match kind {
            Kind::Observation => &["files_read", "files_modified"],
            Kind::Summary => &["files_read", "files_edited"],
            Kind::Prompt => &[],
        };
        args.push(Value::Text(format!("%{}%", escape_like(file.trim()))));
        let n = args.len();
        let any: Vec<String> = columns
            .iter()
            .map(|col| {
                format!(
                    "EXISTS (SELECT 1 FROM json_each(t.{col}) f WHERE f.value LIKE ?{n} ESCAPE '\\')"
                )
            })
            .collect();
        if !any.is_empty() {
            wheres.push(format!("({})", any.join(" OR ")));
        }
    }
}

/// Escapes `%`, `_` and `\` for a `LIKE … ESCAPE '\'` pattern.
fn escape_like(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A point in time from a person: `YYYY-MM-DD[THH:MM[:SS]]` (UTC), or an age like `7d`,
/// `12h`, `2w` meaning that long before `now`.
pub fn parse_time(s: &str, now: i64) -> Option<i64> {
    crate::clock::parse_iso_utc(s)
        .or_else(|| crate::clock::parse_duration_ms(s).map(|d| now.saturating_sub(d)))
}

#[cfg(test)]
mod reference_tests {
    use super::Kind;

    #[test]
    fn references_round_trip() {
        for (kind, id) in [
            (Kind::Observation, 12),
            (Kind::Summary, 3),
            (Kind::Prompt, 7),
        ] {
            assert_eq!(Kind::parse_reference(&kind.reference(id)), Some((kind, id)));
        }
        assert_eq!(Kind::parse_reference("#12"), Some((Kind::Observation, 12)));
        assert_eq!(Kind::parse_reference("s3"), Some((Kind::Summary, 3)));
        for bad in ["", "S", "X3", "P-1", "0", "12a", "S 3"] {
            assert_eq!(Kind::parse_reference(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory;
    use crate::memory::observations::{NewObservation, NewSummary};
    use crate::recall::timeline::{
        Anchor, Record, Ref, TimelineRequest, get_observations, get_records, timeline,
    };
    use crate::store::db;
    use rusqlite::params;

    const DAY: i64 = 86_400_000;
    const T0: i64 = 1_790_000_000_000;

    struct Fixture {
        _tmp: tempfile::TempDir,
        conn: Connection,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        tune_for_reading(&conn).expect("tune");
        Fixture { _tmp: tmp, conn }
    }

    fn obs(project: &str, kind: &str, title: &str, narrative: &str, at: i64) -> NewObservation {
        NewObservation {
            session_id: Some(format!("s-{project}")),
            project: project.into(),
            prompt_number: Some(1),
            kind: kind.into(),
            origin: "model".into(),
            created_at: at,
            content: crate::memory::rows::ObservationContent {
                title: title.into(),
                narrative: narrative.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    impl Fixture {
        fn add(&mut self, o: NewObservation) -> i64 {
            db::write(&mut self.conn, |tx| {
                if let Some(s) = &o.session_id {
                    crate::memory::sessions::ensure(tx, s, &o.project, "/x", o.created_at)?;
                }
                Ok(memory::observations::insert_observation(tx, &o)?.id())
            })
            .expect("insert")
        }

        fn summary(
            &mut self,
            project: &str,
            n: i64,
            request: &str,
            completed: &str,
            at: i64,
        ) -> i64 {
            let s = NewSummary {
                session_id: format!("s-{project}"),
                project: project.into(),
                prompt_number: n,
                request: request.into(),
                completed: completed.into(),
                files_edited: vec!["core/src/queue.rs".into()],
                origin: "model".into(),
                created_at: at,
                ..Default::default()
            };
            db::write(&mut self.conn, |tx| {
                crate::memory::sessions::ensure(tx, &s.session_id, project, "/x", at)?;
                Ok(memory::observations::upsert_summary(tx, &s)?.id())
            })
            .expect("summary")
        }

        fn prompt(&mut self, project: &str, n: i64, text: &str, at: i64) -> i64 {
            let session = format!("s-{project}");
            db::write(&mut self.conn, |tx| {
                crate::memory::sessions::ensure(tx, &session, project, "/x", at)?;
                tx.execute(
                    "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![session, project, n, text, at],
                )?;
                Ok(tx.last_insert_rowid())
            })
            .expect("prompt")
        }

        fn ids(&self, req: SearchRequest) -> Vec<String> {
            search(&self.conn, &req)
                .expect("search")
                .iter()
                .map(Hit::reference)
                .collect()
        }
    }

    fn req(query: &str, project: Option<&str>) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            filters: Filters {
                project: project.map(Into::into),
                ..Filters::default()
            },
            ..SearchRequest::default()
        }
    }

    #[test]
    fn a_title_hit_beats_a_narrative_hit() {
        let mut f = fixture();
        let narrative = f.add(obs(
            "p",
            "discovery",
            "Queue notes",
            "the worker lease expires after five minutes and is rescued",
            T0 + 10,
        ));
        let title = f.add(obs("p", "bugfix", "Lease rescue fixed", "small change", T0));
        assert_eq!(
            f.ids(req("lease", Some("p"))),
            vec![title.to_string(), narrative.to_string()]
        );
        let hits = search(&f.conn, &req("lease", Some("p"))).expect("search");
        // A title-only match shows the body instead of repeating the title.
        assert_eq!(hits[0].snippet, "small change");
        assert!(
            hits[1]
                .snippet
                .contains(&format!("{HIGHLIGHT_OPEN}lease{HIGHLIGHT_CLOSE}")),
            "{:?}",
            hits[1]
        );
        // Scores are the fused relevance: higher is better.
        assert!(hits[0].score.expect("score") > hits[1].score.expect("score"));
    }

    #[test]
    fn projects_are_isolated_unless_widened() {
        let mut f = fixture();
        let a = f.add(obs("alpha", "feature", "Token budget", "", T0));
        let b = f.add(obs("beta", "feature", "Token budget too", "", T0 + 1));
        assert_eq!(f.ids(req("token", Some("alpha"))), vec![a.to_string()]);
        assert_eq!(f.ids(req("token", Some("beta"))), vec![b.to_string()]);
        assert!(f.ids(req("token", Some("gamma"))).is_empty());
        let all = search(&f.conn, &req("token", None)).expect("all");
        let mut projects: Vec<&str> = all.iter().map(|h| h.project.as_str()).collect();
        projects.sort();
        assert_eq!(projects, vec!["alpha", "beta"]);
    }

    #[test]
    fn filters_apply_exactly_to_what_is_found_by_meaning() {
        use crate::recall::embed::{index::VectorIndex, store};
        use crate::recall::rank::Semantic;
        let mut f = fixture();
        let mut add = |project: &str, kind: &str, concepts: &[&str], file: &str, at: i64| {
            f.add(NewObservation {
                content: crate::memory::rows::ObservationContent {
                    concepts: concepts.iter().map(|c| c.to_string()).collect(),
                    files_read: vec![file.into()],
                    ..Default::default()
                },
                ..obs(project, kind, "Unrelated words", "", at)
            })
        };
        let exact = add("p", "bugfix", &["gotcha", "queue"], "src/a.rs", T0);
        let upper = add("p", "discovery", &["GOTCHA"], "src/b.rs", T0 + 1);
        let _wider = add("p", "bugfix", &["big gotcha"], "src/a.rs", T0 + 2);
        let _plural = add("p", "bugfix", &["gotchas"], "src/a.rs", T0 + 3);
        let _elsewhere = add("q", "bugfix", &["gotcha"], "src/a.rs", T0 + 4);
        let late = add("p", "bugfix", &["queue"], "src/a.rs", T0 + 100);
        // Every memory gets the query's own vector: all are equally near, and only the
        // filters decide what is found (the query's word matches nothing).
        let unit = {
            let mut v = vec![0.0f32; 8];
            v[0] = 1.0;
            v
        };
        let queued = store::queued(&mut f.conn, 100).expect("queued");
        let items: Vec<_> = queued.into_iter().map(|q| (q, unit.clone())).collect();
        store::store(&mut f.conn, "m", &items).expect("store");
        let mut index = VectorIndex::new("m");
        index.refresh(&f.conn).expect("index");
        let query = std::sync::OnceLock::from(unit.clone());
        let semantic = Semantic {
            index: &index,
            query: &query,
            model: "m",
            min_similarity: 0.5,
        };
        let found = |filters: Filters| -> Vec<String> {
            let req = SearchRequest {
                query: "zyzzyva".into(),
                filters: Filters {
                    project: Some("p".into()),
                    ..filters
                },
                kinds: vec![Kind::Observation],
                ..SearchRequest::default()
            };
            let mut ids: Vec<String> = search_with(&f.conn, &req, Some(&semantic))
                .expect("search")
                .iter()
                .map(Hit::reference)
                .collect();
            ids.sort();
            ids
        };
        let refs = |ids: &[i64]| -> Vec<String> {
            let mut v: Vec<String> = ids
                .iter()
                .map(|&id| Kind::Observation.reference(id))
                .collect();
            v.sort();
            v
        };
        // A concept is one of the memory's concepts, whatever its case; not a part of one.
        for concept in ["gotcha", "Gotcha", " GOTCHA "] {
            let c = Filters {
                concept: Some(concept.into()),
                ..Filters::default()
            };
            assert_eq!(found(c), refs(&[exact, upper]), "{concept:?}");
        }
        let typed = Filters {
            types: vec!["bugfix".into()],
            concept: Some("gotcha".into()),
            ..Filters::default()
        };
        assert_eq!(found(typed), refs(&[exact]));
        let queue_late = Filters {
            types: vec!["bugfix".into()],
            concept: Some("queue".into()),
            since: Some(T0 + 50),
            ..Filters::default()
        };
        assert_eq!(found(queue_late), refs(&[late]));
        let by_file = Filters {
            file: Some("src/b.rs".into()),
            ..Filters::default()
        };
        assert_eq!(found(by_file), refs(&[upper]));
        // A concept with no word in it is still compared exactly (no full-text lookup).
        let none = Filters {
            concept: Some("???".into()),
            ..Filters::default()
        };
        assert!(found(none).is_empty());
    }

    #[test]
    fn a_project_is_matched_exactly_whatever_its_name() {
        let mut f = fixture();
        // Names that share words, prefixes, case or a last hex digit 'e' ('n' is 0x6e,
        // which the porter stemmer may shorten): each search returns its project's rows
        // only, of every kind, in every order.
        let names = [
            "app", "app-2", "App", "my app", "my-app", "n", "ne", "ñ", "x", "app e", "",
        ];
        let mut expected: HashMap<&str, Vec<String>> = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            let at = T0 + i as i64 * 10;
            let o = f.add(obs(name, "feature", "Lease budget", "", at));
            let s = f.summary(name, 1, "lease budget", "done", at + 1);
            let p = f.prompt(name, 1, "lease budget", at + 2);
            expected.insert(
                name,
                vec![
                    Kind::Prompt.reference(p),
                    Kind::Summary.reference(s),
                    Kind::Observation.reference(o),
                ],
            );
        }
        for name in names {
            for order in [Order::Relevance, Order::Newest, Order::Oldest] {
                let mut r = req("lease", Some(name));
                r.order = order;
                let mut got = f.ids(r);
                got.sort();
                let mut want = expected[name].clone();
                want.sort();
                assert_eq!(got, want, "project {name:?}, {order:?}");
            }
        }
    }

    #[test]
    fn operators_work_end_to_end() {
        let mut f = fixture();
        let sqlite = f.add(obs(
            "p",
            "decision",
            "Use sqlite wal",
            "readers never block",
            T0,
        ));
        let pg = f.add(obs(
            "p",
            "decision",
            "Postgres rejected",
            "too heavy for a cli",
            T0 + 1,
        ));
        let mig = f.add(obs(
            "p",
            "change",
            "Migration runner",
            "numbered files",
            T0 + 2,
        ));
        let check = |q: &str, want: Vec<i64>| {
            let mut got: Vec<i64> = search(&f.conn, &req(q, Some("p")))
                .expect(q)
                .iter()
                .map(|h| h.id)
                .collect();
            got.sort();
            assert_eq!(got, want, "{q}");
        };
        check("sqlite OR postgres", vec![sqlite, pg]);
        // Any word is enough to be found; matching more of them ranks first.
        check("sqlite postgres", vec![sqlite, pg]);
        check("sqlite wal readers", vec![sqlite]);
        check("\"readers never block\"", vec![sqlite]);
        check("\"never readers\"", vec![]);
        check("migrat*", vec![mig]);
        check("-sqlite", vec![pg, mig]);
        check("decision -postgres", vec![]); // `decision` is the type, not in the text
        check("wal -postgres", vec![sqlite]);
        check("", vec![sqlite, pg, mig]);
        // A column filter is only text: its words.
        check("title:sqlite", vec![sqlite]);
        check("\"", vec![sqlite, pg, mig]);
    }

    #[test]
    fn filters_by_type_concept_file_and_dates() {
        let mut f = fixture();
        let mut a = obs("p", "bugfix", "Fix lease", "", T0);
        a.content.concepts = vec!["Gotcha".into(), "queue".into()];
        a.content.files_modified = vec!["/home/dev/cairn/core/src/queue.rs".into()];
        let a = f.add(a);
        let mut b = obs("p", "feature", "Lease heartbeat", "", T0 + 3 * DAY);
        b.content.concepts = vec!["how-it-works".into()];
        b.content.files_read = vec!["core/src/db.rs".into()];
        let b = f.add(b);
        let s = f.summary("p", 1, "Make leases safe", "lease rescue", T0 + DAY);
        let p = f.prompt("p", 1, "please fix the lease", T0 + 2 * DAY);

        let with = |edit: &dyn Fn(&mut SearchRequest)| {
            let mut r = req("lease", Some("p"));
            r.order = Order::Oldest;
            edit(&mut r);
            f.ids(r)
        };
        assert_eq!(
            with(&|_| {}),
            vec![
                a.to_string(),
                format!("S{s}"),
                format!("P{p}"),
                b.to_string()
            ]
        );
        assert_eq!(
            with(&|r| r.filters.types = vec!["bugfix".into()]),
            vec![a.to_string()]
        );
        assert_eq!(
            with(&|r| r.filters.types = vec!["BUGFIX".into(), "feature".into()]),
            vec![a.to_string(), b.to_string()]
        );
        assert_eq!(
            with(&|r| r.filters.concept = Some("gotcha".into())),
            vec![a.to_string()]
        );
        assert_eq!(
            with(&|r| r.filters.concept = Some("queue".into())),
            vec![a.to_string()]
        );
        assert_eq!(
            with(&|r| r.filters.concept = Some("que".into())),
            Vec::<String>::new()
        );
        assert_eq!(
            with(&|r| r.filters.file = Some("queue.rs".into())),
            vec![a.to_string(), format!("S{s}")]
        );
        assert_eq!(
            with(&|r| r.filters.file = Some("db.rs".into())),
            vec![b.to_string()]
        );
        assert_eq!(
            with(&|r| r.filters.file = Some("%".into())),
            Vec::<String>::new()
        );
        assert_eq!(
            with(&|r| {
                r.filters.since = Some(T0 + DAY);
                r.filters.until = Some(T0 + 3 * DAY);
            }),
            vec![format!("S{s}"), format!("P{p}")]
        );
        assert_eq!(
            with(&|r| r.kinds = vec![Kind::Prompt]),
            vec![format!("P{p}")]
        );
        assert_eq!(
            with(&|r| r.kinds = vec![Kind::Summary]),
            vec![format!("S{s}")]
        );
        assert_eq!(
            with(&|r| r.order = Order::Newest),
            vec![
                b.to_string(),
                format!("P{p}"),
                format!("S{s}"),
                a.to_string()
            ]
        );
        assert_eq!(
            with(&|r| {
                r.limit = 2;
                r.offset = 1;
            }),
            vec![format!("S{s}"), format!("P{p}")]
        );
        assert_eq!(with(&|r| r.limit = 0), Vec::<String>::new());
    }

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

    #[test]
    fn the_window_walks_the_full_text_index_and_reads_covering_indexes() {
        let f = fixture();
        let plan = |kind: Kind, filters: &Filters, order: Order| {
            let (sql, args) = window_statement(kind, "lease".into(), filters, order, 20);
            let mut stmt = f
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .expect("plan");
            let rows = stmt
                .query_map(params_from_iter(args), |r| r.get::<_, String>(3))
                .expect("rows")
                .collect::<rusqlite::Result<Vec<_>>>()
                .expect("collect");
            rows.join("\n")
        };
        let covered = Filters {
            project: Some("p".into()),
            types: vec!["bugfix".into()],
            since: Some(1),
            until: Some(i64::MAX),
            ..Default::default()
        };
        for kind in Kind::ALL {
            for order in [Order::Relevance, Order::Newest, Order::Oldest] {
                let p = plan(kind, &covered, order);
                let lines: Vec<&str> = p.lines().collect();
                assert!(
                    lines[0].contains("VIRTUAL TABLE"),
                    "{kind:?} {order:?}:\n{p}"
                );
                assert!(
                    p.contains(&format!(
                        "USING COVERING INDEX {}",
                        table(kind).search_index
                    )),
                    "{kind:?} {order:?}:\n{p}"
                );
                assert!(!p.contains("TEMP B-TREE"), "{kind:?} {order:?} sorts:\n{p}");
            }
        }
        // Concept and file filters read the row itself, still led by the full-text index.
        let concept = Filters {
            project: Some("p".into()),
            concept: Some("gotcha".into()),
            ..Default::default()
        };
        let p = plan(Kind::Observation, &concept, Order::Relevance);
        assert!(
            p.lines()
                .next()
                .is_some_and(|l| l.contains("VIRTUAL TABLE")),
            "{p}"
        );
        assert!(!p.contains("observations_search"), "{p}");
    }

    #[test]
    fn the_rank_window_follows_the_filters() {
        let mut f = fixture();
        let n = RANK_WINDOW as usize + 100;
        db::write(&mut f.conn, |tx| {
            crate::memory::sessions::ensure(tx, "s-small", "small", "/x", T0)?;
            crate::memory::sessions::ensure(tx, "s-big", "big", "/x", T0)?;
            for i in 0..3 {
                memory::observations::insert_observation(
                    tx,
                    &obs("small", "change", &format!("small {i}"), "lease", T0 + i),
                )?;
            }
            for i in 0..n as i64 {
                let title = if i == n as i64 - 1 {
                    "Lease title hit"
                } else {
                    "Queue note"
                };
                memory::observations::insert_observation(
                    tx,
                    &obs(
                        "big",
                        "change",
                        &format!("{title} {i}"),
                        "lease here",
                        T0 + 10 + i,
                    ),
                )?;
            }
            Ok(())
        })
        .expect("seed");
        // The small project's matches are the oldest of all, yet every one is found.
        assert_eq!(
            search(&f.conn, &req("lease", Some("small")))
                .expect("small")
                .len(),
            3
        );
        let hits = search(&f.conn, &req("lease", Some("big"))).expect("big");
        assert!(
            hits[0].title.starts_with("Lease title hit"),
            "{:?}",
            hits[0]
        );
        let mut oldest = req("lease", Some("big"));
        oldest.order = Order::Oldest;
        let hits = search(&f.conn, &oldest).expect("oldest");
        assert_eq!(hits[0].title, "Queue note 0");
        let mut newest = req("lease", None);
        newest.order = Order::Newest;
        newest.limit = 2;
        let hits = search(&f.conn, &newest).expect("newest");
        assert_eq!(hits[0].title, format!("Lease title hit {}", n - 1));
    }

    #[test]
    fn an_old_title_hit_is_not_lost_behind_newer_mentions() {
        let mut f = fixture();
        db::write(&mut f.conn, |tx| {
            crate::memory::sessions::ensure(tx, "s-p", "p", "/x", T0)?;
            memory::observations::insert_observation(
                tx,
                &obs(
                    "p",
                    "decision",
                    "Quokka cache: decided write-through",
                    "",
                    T0,
                ),
            )?;
            for i in 0..400 {
                memory::observations::insert_observation(
                    tx,
                    &obs(
                        "p",
                        "change",
                        &format!("Filler note {i}"),
                        "mentions the quokka cache in passing",
                        T0 + DAY + i,
                    ),
                )?;
            }
            Ok(())
        })
        .expect("seed");
        let mut r = req("quokka", Some("p"));
        r.limit = 20;
        let hits = search(&f.conn, &r).expect("search");
        assert_eq!(hits.len(), 20);
        assert_eq!(hits[0].title, "Quokka cache: decided write-through");
        // Matching more of the words ranks higher than matching one of them often.
        db::write(&mut f.conn, |tx| {
            memory::observations::insert_observation(
                tx,
                &obs(
                    "p",
                    "discovery",
                    "Write-through costs",
                    "quokka cache latency",
                    T0,
                ),
            )?;
            Ok(())
        })
        .expect("one more");
        let hits = search(
            &f.conn,
            &req("why is the quokka cache write-through slow", Some("p")),
        )
        .expect("question");
        assert_eq!(hits[0].title, "Quokka cache: decided write-through");
        assert_eq!(hits[1].title, "Write-through costs");
    }

    #[test]
    fn the_question_being_asked_does_not_answer_itself() {
        let mut f = fixture();
        let memory = f.add(obs(
            "p",
            "feature",
            "Rate limit on login",
            "five a minute",
            T0,
        ));
        let asked = f.prompt("p", 1, "what do we know about the rate limit?", T0 + 10);
        // Another session open on the project asked the same earlier: that one stays.
        let other = db::write(&mut f.conn, |tx| {
            crate::memory::sessions::ensure(tx, "s-other", "p", "/x", T0)?;
            tx.execute(
                "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
                 VALUES ('s-other', 'p', 1, 'rate limit for signups?', ?1)",
                [T0 + 5],
            )?;
            Ok(tx.last_insert_rowid())
        })
        .expect("other prompt");
        let all = f.ids(req("rate limit", Some("p")));
        // Prompts rank below the memory that says the same.
        assert_eq!(all[0], memory.to_string());
        assert!(all.contains(&format!("P{asked}")), "{all:?}");
        let mut asking = req("rate limit", Some("p"));
        asking.asking_session = Some("s-p".into());
        let ids = f.ids(asking);
        assert_eq!(ids[0], memory.to_string());
        assert!(!ids.contains(&format!("P{asked}")), "{ids:?}");
        assert!(ids.contains(&format!("P{other}")), "{ids:?}");
    }

    #[test]
    fn relevance_pools_are_led_by_the_full_text_index() {
        let f = fixture();
        let filters = Filters {
            project: Some("p".into()),
            types: vec!["bugfix".into()],
            since: Some(1),
            until: Some(i64::MAX),
            ..Default::default()
        };
        // With the project alone (in the MATCH expression), the pool is taken from the
        // full-text index before any row is read.
        let project_only = Filters {
            project: Some("p".into()),
            ..Default::default()
        };
        for (kind, filters) in Kind::ALL
            .into_iter()
            .flat_map(|k| [(k, &filters), (k, &project_only)])
        {
            let sql = crate::recall::rank::pool_statement(kind, "x", filters, 1);
            let mut stmt = f
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", sql.0))
                .expect("plan");
            let rows = stmt
                .query_map(params_from_iter(sql.1), |r| r.get::<_, String>(3))
                .expect("rows")
                .collect::<rusqlite::Result<Vec<_>>>()
                .expect("collect")
                .join("\n");
            // The first table read is the full-text index.
            assert!(
                rows.lines()
                    .find(|l| l.contains("SCAN") || l.contains("SEARCH"))
                    .is_some_and(|l| l.contains("VIRTUAL TABLE")),
                "{rows}"
            );
            assert!(
                rows.contains(&format!(
                    "USING COVERING INDEX {}",
                    table(kind).search_index
                )),
                "{kind:?}:\n{rows}"
            );
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("one two three four", 10), "one two…");
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        assert_eq!(short_title("first line\nsecond"), "first line");
        assert_eq!(parse_time("1970-01-02", 0), Some(DAY));
        assert_eq!(parse_time("2d", 5 * DAY), Some(3 * DAY));
        assert_eq!(parse_time("soon", 0), None);
        assert_eq!(escape_like("a%b_c\\"), "a\\%b\\_c\\\\");
        assert_eq!(Kind::parse_list("summaries"), Some(vec![Kind::Summary]));
        assert_eq!(Order::parse("newest"), Some(Order::Newest));
        assert_eq!(Order::parse("x"), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        #[test]
        fn no_query_is_an_sql_error(q in proptest::prelude::any::<String>()) {
            let mut f = fixture();
            f.add(obs("p", "change", "Some title", "some narrative", T0));
            f.prompt("p", 1, "a prompt", T0);
            let r = search(&f.conn, &req(&q, Some("p")));
            proptest::prop_assert!(r.is_ok(), "{q:?}: {r:?}");
        }
    }

    /// Moved from the store's tests, which may not reach up into recall: an upgraded
    /// version-1 database gets the covering indexes and is searchable.
    #[test]
    fn upgrades_a_version_1_database_with_its_data() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path().join("data"));
        dd.ensure().expect("dir");
        {
            let v1 = Connection::open(dd.db()).expect("v1");
            v1.execute_batch(db::MIGRATIONS[0].1).expect("0001");
            v1.execute_batch(
                "PRAGMA user_version = 1;
                 INSERT INTO sessions (session_id, project, started_at, updated_at)
                     VALUES ('s', 'p', 1, 1);
                 INSERT INTO observations
                     (session_id, project, type, title, narrative, content_hash, created_at)
                     VALUES ('s', 'p', 'discovery', 'Lease rescue', 'kept', 'h', 1);",
            )
            .expect("v1 data");
        }
        let conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("upgrade");
        assert_eq!(
            db::schema_version(&conn).expect("version"),
            db::SCHEMA_VERSION
        );
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index'
                 AND name IN ('observations_search', 'session_summaries_search',
                              'user_prompts_search')",
                [],
                |r| r.get(0),
            )
            .expect("indexes");
        assert_eq!(indexes, 3);
        let hits = search(
            &conn,
            &SearchRequest {
                query: "lease".into(),
                filters: Filters {
                    project: Some("p".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .expect("search");
        assert_eq!(hits.len(), 1);
        assert!(db::integrity_problems(&conn).expect("check").is_empty());
    }
}
