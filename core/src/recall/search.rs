//! Search: the request, the orders, paging and the hits. The filters and the SQL they
//! become are [`crate::recall::sql`]'s; relevance order with words is ranked by
//! [`crate::recall::rank`] (full text and meaning fused); what a hit shows is `snippet`'s;
//! the timeline and records by id are `timeline`'s, which calls this module; a search by
//! meaning as well goes through [`crate::recall::searcher`], above both.
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

use crate::memory::kind::Kind;
use crate::recall::sql::Filters;

use crate::error::Result;
use crate::recall::embed::index::{Neighbour, VectorIndex};
use crate::recall::query;
use crate::recall::rank::{self, Purpose, Semantic};
use crate::recall::ranker::Signals;
use crate::recall::snippet::{
    HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, SnippetPair, one_line, short_title, shorten, snippets_of,
};
use crate::recall::sql::{Candidate, full_text_led, push_filters, table};
use crate::settings::SearchSettings;

/// Most hits one search returns, whatever the caller asks.
pub const MAX_LIMIT: usize = 500;
/// Deepest offset accepted (hits beyond it are not reachable by paging).
pub const MAX_OFFSET: usize = 10_000;
/// Matches ranked per kind: the newest this many that pass the filters (see the module
/// invariants).
pub const RANK_WINDOW: i64 = 300;
/// The relevance of a hit when nothing was ranked (see [`Hit::relevance`]).
pub const UNRANKED: f64 = 1.0;

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

/// A search.
#[derive(Debug, Clone, PartialEq)]
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
    /// A search by relevance whose best hit's [`Hit::relevance`] is below this returns
    /// nothing (nothing answers the query); `None`
    /// is the default of the setting `search.min_relevance` (a [`crate::recall::searcher::Searcher`]
    /// puts the effective setting there).
    pub min_relevance: Option<f64>,
    /// A search asked on purpose or a prompt's: what [`Hit::relevance`] weighs.
    pub purpose: Purpose,
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
            min_relevance: None,
            purpose: Purpose::Search,
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
    /// BM25 score (lower is better); `None` when the query had no word to rank by, the
    /// hit was found by meaning alone, or the order is by time (newest, oldest), where no
    /// score is computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// The estimated probability, in [0, 1], that this memory answers the query: the same
    /// number means the same across queries and projects (see [`crate::recall::ranker`]).
    /// For a search asked on purpose, the probability that it is the memory asked about;
    /// for a prompt's ([`Purpose::Prompt`]), weighed too by how likely the prompt asks
    /// about the project's past at all. A search by relevance whose best candidate's
    /// estimate ([`Measured::estimate`]) is below [`SearchRequest::min_relevance`] returns
    /// nothing. 1 when nothing was ranked (no word to rank by, or an order by time): every
    /// hit is what the filters and words asked for.
    pub relevance: f64,
    /// The name of the other device this memory came from (sync); absent for this
    /// machine's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
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
    let kinds = searched_kinds(req);
    let fetch = limit + offset;
    let any = q.fts_any();
    let (hits, copies) = match (&any, req.order) {
        (Some(any), Order::Relevance) => {
            let floor = req
                .min_relevance
                .unwrap_or_else(|| SearchSettings::default().min_relevance);
            // The question being answered right now is not an answer to itself.
            let asked = match &req.asking_session {
                Some(asking) => rank::current_prompt(conn, asking)?.map(|id| (Kind::Prompt, id)),
                None => None,
            };
            let (mut ranked, copies) = rank::relevance(
                conn,
                &q,
                any,
                &kinds,
                f,
                ranked_fetch(req),
                floor,
                req.purpose,
                asked,
                semantic,
            )?;
            ranked.truncate(fetch);
            (ranked, copies)
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
            (hits, rank::Copies::new())
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
            // The ranking's copies of its candidates' rows when there are (its
            // candidates are all in them), else the index.
            let mut held: Vec<Option<&str>> = copies
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, t)| Some(t.as_str()))
                .collect();
            if held.is_empty() {
                held.push(None);
            }
            for copy in held {
                for (id, pair) in snippets_of(conn, kind, m, &ids, copy)? {
                    snippets.insert((kind, id), pair);
                }
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
    // A memory from another device (sync) says which.
    if crate::memory::origin::any_devices(conn)? {
        for h in &mut out {
            h.device = crate::memory::origin::device_of(conn, h.kind, h.id)?;
        }
    }
    Ok(out)
}

/// How many candidates a search by relevance of `req` ranks: its page, and one more for
/// the question being asked, which is left out.
fn ranked_fetch(req: &SearchRequest) -> usize {
    req.limit.min(MAX_LIMIT) + req.offset.min(MAX_OFFSET) + 1
}

/// The nearest neighbours of `vector` (by the index's model) that a search by relevance of
/// `req` weighs, best first: what the worker sends a hook beside the query's vector
/// (`rank::Meaning::neighbours`).
pub fn nearest(
    conn: &Connection,
    index: &VectorIndex,
    vector: &[f32],
    req: &SearchRequest,
) -> Result<Vec<Neighbour>> {
    rank::nearest(
        conn,
        index,
        vector,
        &searched_kinds(req),
        &req.filters,
        ranked_fetch(req),
    )
}

/// The kinds a request searches: those asked for (all when none) that its filters can
/// hold (a summary has no type or concept; a prompt no file either).
fn searched_kinds(req: &SearchRequest) -> Vec<Kind> {
    let f = &req.filters;
    if req.kinds.is_empty() {
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
    .collect()
}

/// One candidate of a search by relevance with what ranking measured of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub kind: Kind,
    pub id: i64,
    pub signals: Signals,
    pub relevance: f64,
    /// What the search floor gates: its relevance before the query's model (how likely
    /// it is the memory asked about, were the query asking about the project's past)
    /// when it holds a word of the query, else its relevance.
    pub estimate: f64,
}

/// Every candidate a search by relevance weighs, before the floor and the page, in no
/// order; empty when the query has no word to rank by. For retraining the ranker (the
/// quality benchmark dumps these) and for explaining a ranking.
pub fn candidates_with(
    conn: &Connection,
    req: &SearchRequest,
    semantic: Option<&Semantic>,
) -> Result<Vec<Measured>> {
    let q = query::parse(&req.query);
    let Some(any) = q.fts_any() else {
        return Ok(Vec::new());
    };
    let fetch = req.limit.min(MAX_LIMIT) + req.offset.min(MAX_OFFSET);
    let kinds = searched_kinds(req);
    Ok(
        rank::scored(conn, &q, &any, &kinds, &req.filters, fetch, semantic)?
            .0
            .into_iter()
            .map(|s| Measured {
                kind: s.candidate.kind,
                id: s.candidate.id,
                signals: s.signals,
                relevance: s.candidate.relevance,
                estimate: s.estimate,
            })
            .collect(),
    )
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
                relevance: UNRANKED,
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
                relevance: UNRANKED,
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
    let snippet = if let Some((best, body)) = snippets {
        let best = one_line(&best.unwrap_or_default());
        // The title is shown anyway: a snippet that only repeats it, or a part of it, gives
        // way to the body, or to nothing when there is none.
        let bare = best
            .replace(HIGHLIGHT_OPEN, "")
            .replace(HIGHLIGHT_CLOSE, "");
        if one_line(&title).contains(bare.trim_matches('…').trim()) {
            body.map(|b| one_line(&b)).unwrap_or_default()
        } else {
            best
        }
    } else {
        shorten(&one_line(&plain.unwrap_or_default()), 120)
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
        relevance: c.relevance,
        device: None,
    }))
}

/// A point in time from a person: `YYYY-MM-DD[THH:MM[:SS]]` (UTC), or an age like `7d`,
/// `12h`, `2w` meaning that long before `now`.
pub fn parse_time(s: &str, now: i64) -> Option<i64> {
    crate::clock::parse_iso_utc(s)
        .or_else(|| crate::clock::parse_duration_ms(s).map(|d| now.saturating_sub(d)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory;
    use crate::recall::testing::{self, DAY, Fixture, T0, obs};
    use crate::store::db;

    /// A database tuned as a searching process tunes it.
    fn fixture() -> Fixture {
        let f = testing::fixture();
        tune_for_reading(&f.conn).expect("tune");
        f
    }

    impl Fixture {
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

    /// Words written as code are found by the words they are made of, and code by prose's
    /// words; the snippet is the memory's own text, never its pieces.
    #[test]
    fn code_words_are_found_by_their_pieces() {
        let mut f = fixture();
        let cop = f.add(obs(
            "p",
            "bugfix",
            "Fix a false positive in the cop",
            "RedundantParentheses no longer flags a method call with a block",
            T0,
        ));
        let other = f.add(obs("p", "change", "Parentheses in docs", "", T0 + 10));
        let hits = search(&f.conn, &req("redundant parentheses", Some("p"))).expect("search");
        assert_eq!(hits[0].id, cop, "{hits:?}");
        assert_eq!(hits[1].id, other);
        assert!(
            hits[0].snippet.contains("RedundantParentheses"),
            "{:?}",
            hits[0].snippet
        );
        assert!(
            !hits[0].snippet.contains("redundant"),
            "{:?}",
            hits[0].snippet
        );
        // Only the pieces match: the memory's plain text is shown.
        let hits = search(&f.conn, &req("redundant", Some("p"))).expect("search");
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].id, cop);
        assert_eq!(
            hits[0].snippet,
            "RedundantParentheses no longer flags a method call with a block"
        );
        // And the other way round, as before: the query's code finds the prose.
        let prose = f.add(obs("p", "change", "Line buffered output", "", T0 + 20));
        let hits = search(&f.conn, &req("LineBuffered", Some("p"))).expect("search");
        assert_eq!(hits[0].id, prose);
    }

    #[test]
    fn a_pasted_traceback_is_searched_by_its_end_too() {
        let mut f = fixture();
        let fix = f.add(obs(
            "p",
            "bugfix",
            "KeyError for session_token when the cookie has expired",
            "the middleware now treats a missing token as a logged-out visitor",
            T0,
        ));
        f.add(obs(
            "p",
            "change",
            "Dashboard charts load lazily",
            "",
            T0 + 10,
        ));
        let mut prompt = String::from("the dashboard crashes again, what is this?\n");
        prompt.push_str("Traceback (most recent call last):\n");
        for i in 0..40 {
            prompt.push_str(&format!(
                "  File \"/srv/app/venv/lib/python3.11/site-packages/frame{i}.py\", line {i}, in handler{i}\n    return handler{i}(request)\n"
            ));
        }
        prompt.push_str("KeyError: 'session_token'\n");
        let q = crate::recall::query::literal(&prompt);
        let ids = f.ids(req(&q, Some("p")));
        assert_eq!(ids.first(), Some(&fix.to_string()), "{ids:?}");
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
        // BM25 scores are lower for the better match; relevance higher.
        assert!(hits[0].score.expect("score") < hits[1].score.expect("score"));
        assert!(hits[0].relevance > hits[1].relevance);
        // A part of a long title (a turn's request) gives way to the body as well.
        let long = f.add(obs(
            "p",
            "change",
            "Heartbeat of the worker that lost its claim while the laptop slept through the whole night",
            "the claim is renewed at wake-up",
            T0 + 30,
        ));
        let hits = search(&f.conn, &req("laptop", Some("p"))).expect("search");
        assert_eq!(hits[0].id, long);
        assert_eq!(hits[0].snippet, "the claim is renewed at wake-up");
        // And nothing when it has no body.
        let bare = f.add(obs("p", "change", "Cleanup done", "", T0 + 20));
        let hits = search(&f.conn, &req("cleanup", Some("p"))).expect("search");
        assert_eq!(hits[0].id, bare);
        assert_eq!(hits[0].snippet, "");
    }

    #[test]
    fn a_search_by_relevance_whose_best_hit_is_below_its_floor_shows_nothing() {
        let mut f = fixture();
        f.add(obs("p", "bugfix", "Lease rescue fixed", "small change", T0));
        f.add(obs("p", "change", "Queue note", "mentions a lease", T0 + 1));
        let with_floor = |floor: Option<f64>, order: Order| {
            let mut r = req("lease rescue", Some("p"));
            r.min_relevance = floor;
            r.order = order;
            search(&f.conn, &r).expect("search")
        };
        let all = with_floor(Some(0.0), Order::Relevance);
        assert_eq!(all.len(), 2);
        assert!(
            all.iter().all(|h| (0.0..1.0).contains(&h.relevance)),
            "{all:?}"
        );
        // The floor gates the query: its best hit must reach it, and then all show.
        let between = (all[0].relevance + all[1].relevance) / 2.0;
        assert_eq!(with_floor(Some(between), Order::Relevance).len(), 2);
        assert_eq!(
            with_floor(Some(all[0].relevance), Order::Relevance).len(),
            2
        );
        // What it gates is the best candidate's estimate (at least its relevance).
        let mut r = req("lease rescue", Some("p"));
        r.min_relevance = Some(0.0);
        let best = candidates_with(&f.conn, &r, None)
            .expect("candidates")
            .iter()
            .map(|m| m.estimate)
            .fold(0.0, f64::max);
        // A search is asked on purpose: its best hit shows the very estimate gated, so a
        // search shows nothing under the floor.
        assert_eq!(best, all[0].relevance, "{all:?}");
        // A prompt's relevance weighs too whether it asks about the project's past at
        // all: lower, in the same order.
        r.purpose = Purpose::Prompt;
        let prompted = search(&f.conn, &r).expect("search");
        let ids = |hits: &[Hit]| hits.iter().map(|h| h.id).collect::<Vec<_>>();
        assert_eq!(ids(&prompted), ids(&all));
        assert!(prompted[0].relevance < all[0].relevance, "{prompted:?}");
        assert_eq!(with_floor(Some(best), Order::Relevance).len(), 2);
        assert!(with_floor(Some(best + 1e-9), Order::Relevance).is_empty());
        assert!(with_floor(Some(1.0), Order::Relevance).is_empty());
        // Orders by time rank nothing: every hit is what was asked for.
        let newest = with_floor(Some(1.0), Order::Newest);
        assert_eq!(newest.len(), 1);
        assert_eq!(newest[0].relevance, UNRANKED);
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
    fn a_prefix_matches_words_never_the_projects_key() {
        let mut f = fixture();
        // Every row holds its project's key, `x` and the name in hex, in the full-text index.
        let budget = f.add(obs("alpha", "feature", "Token budget", "", T0));
        f.add(obs("alpha", "feature", "Another thing", "", T0 + 1));
        let xylophone = f.add(obs("alpha", "feature", "Xylophone tuning", "", T0 + 2));
        for order in [Order::Relevance, Order::Newest] {
            for project in [Some("alpha"), None] {
                let ask = |q: &str| SearchRequest {
                    order,
                    ..req(q, project)
                };
                assert_eq!(f.ids(ask("x*")), vec![xylophone.to_string()]);
                assert_eq!(f.ids(ask("budget -x*")), vec![budget.to_string()]);
            }
        }
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

    /// A question asked earlier in the words of a search is not its answer: the memory
    /// that answers it comes first, though it holds fewer of the words.
    #[test]
    fn an_earlier_question_ranks_below_its_answer() {
        let mut f = fixture();
        let answer = f.add(obs(
            "p",
            "bugfix",
            "Docker image caches the cargo dependencies",
            "the build fetched every crate each time; the Dockerfile now copies the manifests first",
            T0,
        ));
        let asked = f.prompt(
            "p",
            1,
            "the docker build is slow again, what did we do last time?",
            T0 + 10,
        );
        let ids = f.ids(req("docker build slow", Some("p")));
        assert_eq!(ids, [answer.to_string(), format!("P{asked}")], "{ids:?}");
    }

    #[test]
    fn the_question_being_asked_is_left_out_before_the_floor() {
        let mut f = fixture();
        let weak = f.add(obs(
            "p",
            "change",
            "Field notes",
            "a zebra, among the many animals of the park, was seen by the river at dawn",
            T0,
        ));
        let asked = f.prompt("p", 1, "zebra crossing lights timing", T0 + 10);
        let mut r = req("zebra crossing lights timing", Some("p"));
        r.min_relevance = Some(0.0);
        let estimate = |kind: Kind, id: i64| {
            candidates_with(&f.conn, &r, None)
                .expect("candidates")
                .iter()
                .find(|m| m.kind == kind && m.id == id)
                .map(|m| m.estimate)
                .expect("a candidate")
        };
        let (of_weak, of_asked) = (
            estimate(Kind::Observation, weak),
            estimate(Kind::Prompt, asked),
        );
        assert!(of_asked > of_weak, "{of_asked} {of_weak}");
        // A floor only the question passes: shown to a search from elsewhere, nothing to
        // the session asking it, whose question is no answer.
        r.min_relevance = Some((of_weak + of_asked) / 2.0);
        assert!(!search(&f.conn, &r).expect("search").is_empty());
        r.asking_session = Some("s-p".into());
        assert!(search(&f.conn, &r).expect("search").is_empty());
    }

    #[test]
    fn times_and_orders_parse() {
        assert_eq!(parse_time("1970-01-02", 0), Some(DAY));
        assert_eq!(parse_time("2d", 5 * DAY), Some(3 * DAY));
        assert_eq!(parse_time("soon", 0), None);
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
}
