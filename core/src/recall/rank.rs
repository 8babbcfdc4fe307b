//! Relevance ranking: full text and meaning fused.
//!
//! A search by relevance gathers candidates from two sides, each with the filters applied
//! exactly (inside the query, never to a fixed number of results afterwards):
//! - the full-text side: the [`POOL`] best matches of each kind by BM25 (title weighted
//!   most), over every row matching at least one of the query's words that is not common
//!   ([`COMMON_SHARE`]);
//! - the meaning side: the [`POOL`] nearest vectors (`embed::index`, scanned here or, for a
//!   hook, by the worker: [`Meaning::neighbours`]), kept when their cosine similarity
//!   reaches `embed.min_similarity`.
//!
//! Every candidate is then measured ([`Signals`]: BM25, similarity, coverage of the
//! query's words in the memory and in its title, how much of its title is the query's
//! words, phrasing, how it stands out of the others, duplicates, how rare its words are
//! in the project; see `ranker`) and given its relevance by the shipped [`Ranker`], the
//! probability that it answers the query (which candidate, times whether the query asks
//! about the project's past at all; a search asked on purpose shows the first alone:
//! [`Purpose`]); the candidates are ordered by it, and none is
//! returned when even the best is under the request's floor. A prompt gets
//! [`PROMPT_FACTOR`] of its relevance: the question a person asked ranks below the
//! memories that answer it.
//!
//! The ranker was trained across the recall benchmarks' projects and is judged on each
//! project it was not trained on; see BENCHMARKS.md.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::embed::index::{Neighbour, Scope, VectorIndex};
use super::embed::{best_part, cosine_i8, store};
use super::query::{self, Query};
use super::ranker::{FUSION_K, LEAD_PLACE, Ranker, Signals};
use super::sql::{self, Candidate, Filters, full_text_led, full_text_ranked, push_filters, table};
use crate::error::{Error, Result};
use crate::memory::kind::Kind;

/// Candidates taken from each side (more when a page further down is asked for).
pub const POOL: usize = 50;

/// Why a search is asked, which decides what its hits' relevance weighs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Purpose {
    /// Asked on purpose (a person at the command line or in the viewer, a model through
    /// MCP): a hit's relevance is the candidate model's estimate, how likely the memory is
    /// the one asked about, the query being about the project's past as a search is; for
    /// a memory sharing no word with the query, found by meaning alone, that times how
    /// likely the query asks about the project's past at all (what tells nonsense apart).
    #[default]
    Search,
    /// A prompt searched for the memories it may need: a hit's relevance also weighs how
    /// likely the prompt asks about the project's past at all (the query model; most
    /// prompts do not).
    Prompt,
}
/// A prompt's share of the relevance it would have as a memory. An earlier question holds
/// a search's words better than the memory that answers it ("the docker build is slow
/// again, what did we do last time?" against "Docker image caches the cargo
/// dependencies"), and is rarely what the search is for: a tenth puts a question matching
/// every word (0.9 or more) below an answer of 0.1. Hand-set: the benchmarks hold no
/// prompts.
pub const PROMPT_FACTOR: f64 = 0.1;
/// Matches counted for a word's IDF; a word in more rows than this counts as that common.
/// Bounds the cost of a very common word at a million rows.
const IDF_COUNT_CAP: i64 = 1000;
/// A word held by more than this share of a kind's rows (and more than
/// [`COMMON_MIN_ROWS`]) is not looked for by itself in the full-text pool, unless it is the
/// rarest of the query's words: BM25 scores every row a word matches, and a word held by a
/// quarter of 100,000 memories costs 25 ms while its matches rarely reach the pool. It
/// still counts in coverage, phrasing and rarity. Measured on the recall benchmarks with
/// the share alone (no floor), as it acts at 100,000 memories: the pools of 50 hold the
/// memory asked about for 0.907 of the questions, against 0.911 when every word is looked
/// for (BENCHMARKS.md, "Prompt recall speed").
const COMMON_SHARE: f64 = 0.05;
/// Matches below which a pool filters its project on the rows (see [`scoping`]).
const KEY_MATCHES: i64 = 2000;
/// Matches sampled to tell whether they are mostly the project's (see [`scoping`]).
const KEY_SAMPLE: i64 = 500;
/// See [`COMMON_SHARE`]: a word held by fewer rows costs little whatever its share.
const COMMON_MIN_ROWS: i64 = 1000;
/// The fewest rows a word's rarity is measured among: in a young memory of a few dozen
/// rows no word could be rare, yet a word held by one of them is as telling as one held
/// by one of a thousand. (Every benchmark corpus is larger: this changes none of them.)
const RARITY_ROWS: f64 = 1000.0;

/// What search by meaning needs: the query's vector and its nearest stored neighbours. A
/// process holding the index of stored vectors (the CLI, the MCP server, the worker) scans
/// it itself; a hook, which holds no model and no index, is sent both by the worker
/// (`recall::ask`) and ranks them with its own full-text pools.
#[derive(Debug)]
pub struct Semantic<'a> {
    /// The index scanned for the neighbours when [`Meaning::neighbours`] brings none.
    pub index: Option<&'a VectorIndex>,
    /// Set by whoever embeds the query while the full-text side runs. Ranking waits for it
    /// only when it needs it; it must be set in the end, if only to a default (nothing is
    /// then found by meaning).
    pub meaning: &'a OnceLock<Meaning>,
}

/// The query by meaning, once embedded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meaning {
    /// Unit vector of the query text (empty when embedding failed: nothing is then found
    /// by meaning).
    pub vector: Vec<f32>,
    /// Model that made `vector` (only vectors of this model are compared).
    pub model: String,
    /// Lowest similarity for a candidate found by meaning alone.
    pub min_similarity: f32,
    /// Its nearest neighbours in the search's scope, best first, when found already
    /// ([`nearest`], by the worker); `None` has the index scanned.
    pub neighbours: Option<Vec<Neighbour>>,
}

/// The promise of a [`Semantic::meaning`], held by whoever embeds the query: kept with the
/// meaning, or, dropped unkept (a failure, a panic), kept with the default, so a ranking
/// waiting for it never waits forever.
#[derive(Debug)]
pub struct Promise<'a>(pub &'a OnceLock<Meaning>);

impl Promise<'_> {
    pub fn keep(self, meaning: Meaning) {
        let _ = self.0.set(meaning);
    }
}

impl Drop for Promise<'_> {
    fn drop(&mut self) {
        let _ = self.0.set(Meaning::default());
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Features {
    created_at: i64,
    bm25: Option<f64>,
    /// Its place in its kind's full-text pool (0 is the best), when in it.
    text_place: usize,
    similarity: Option<f32>,
    /// The best similarity of its parts, when it was embedded in parts.
    part_similarity: Option<f32>,
}

/// A candidate with what was measured of it.
#[derive(Debug, Clone)]
pub(super) struct Scored {
    pub(super) candidate: Candidate,
    pub(super) signals: Signals,
    /// Its relevance to a search asked on purpose ([`Purpose::Search`]), which is what the
    /// search floor gates: for a candidate holding a word of the query, the candidate
    /// model's estimate alone (how likely it is the memory asked about, were the query
    /// asking about the project's past); for one found by meaning alone, its relevance
    /// (times the query model's estimate that the query asks about the project at all).
    pub(super) estimate: f64,
}

/// Every candidate of a relevance search with words (`any` is the query's
/// at-least-one-word expression), scored, in no order: the pools are large enough for a
/// page ending at `fetch`.
pub(super) fn scored(
    conn: &Connection,
    q: &Query,
    any: &str,
    kinds: &[Kind],
    f: &Filters,
    fetch: usize,
    semantic: Option<&Semantic>,
) -> Result<(Vec<Scored>, Copies)> {
    let pool = POOL.max(fetch);
    let groups = q.group_expressions();
    let counts = kinds
        .iter()
        .map(|&kind| Ok((kind, Counts::of(conn, kind, q, &groups)?)))
        .collect::<Result<HashMap<Kind, Counts>>>()?;
    // The ids passing the filters the vector index does not hold; read before the scan,
    // which then needs nothing from the database.
    let allowed = match semantic {
        Some(_) => allowed_ids(conn, kinds, f)?,
        None => None,
    };
    let scope = scope_of(kinds, f, allowed.as_ref());
    // The bit scan of the vectors runs on a thread of its own (once the query's vector is
    // there, unless its neighbours came with it) while this one gathers the full-text pools.
    let (pools, closest) = std::thread::scope(|threads| {
        let scan = semantic
            .and_then(|s| Some((s.meaning, s.index?)))
            .map(|(meaning, index)| {
                let scope = &scope;
                threads.spawn(move || {
                    let m = meaning.wait();
                    (m.neighbours.is_none() && !m.vector.is_empty())
                        .then(|| (index, index.closest(&m.vector, pool, scope)))
                })
            });
        let pools: Result<Vec<_>> = kinds
            .iter()
            .map(|&kind| {
                let held = &counts[&kind];
                let searched = held.searched();
                let expr = q.fts_any_of(&searched).unwrap_or_else(|| any.to_string());
                let kept = || held.held.iter().zip(&searched).filter(|(_, s)| **s);
                // A count at the cap may stand for many more.
                let many = kept().map(|(n, _)| n).sum::<i64>() >= KEY_MATCHES
                    || kept().any(|(n, _)| *n >= IDF_COUNT_CAP);
                let scoping = match &f.project {
                    Some(p) if many => scoping(conn, kind, &expr, p, f, pool)?,
                    _ => Scoping::Rows,
                };
                Ok((kind, text_pool(conn, kind, &expr, f, pool, scoping)?))
            })
            .collect();
        let closest = match scan.map(|h| h.join()) {
            Some(Ok(closest)) => Ok(closest),
            Some(Err(_)) => Err(Error::Embedding("the scan of the vectors panicked".into())),
            None => Ok(None),
        };
        (pools, closest)
    });
    let closest = closest?;
    let mut found: HashMap<(Kind, i64), Features> = HashMap::new();
    for (kind, rows) in pools? {
        for (place, (id, created_at, bm25)) in rows.into_iter().enumerate() {
            found.insert(
                (kind, id),
                Features {
                    created_at,
                    bm25: Some(bm25),
                    text_place: place,
                    ..Features::default()
                },
            );
        }
    }
    // While the meaning is still awaited (the worker embeds the prompt), the full-text
    // candidates are examined and their stored vectors read: the ranking after the answer
    // then examines only what meaning alone found.
    let early = match semantic {
        Some(s) if s.meaning.get().is_none() => Some((
            examine(conn, q, &counts, &by_kind(&found), Scratch::Words)?,
            stored_vectors(conn, &found)?,
        )),
        _ => None,
    };
    let meaning = semantic
        .map(|s| s.meaning.wait())
        .filter(|m| !m.vector.is_empty());
    let near = match (meaning, closest) {
        (Some(m), Some((index, closest))) => index.rescore(conn, &m.vector, closest, pool)?,
        (Some(m), None) => m
            .neighbours
            .iter()
            .flatten()
            .filter(|n| scope.admits(n.kind, n.id, n.created_at))
            .take(pool)
            .copied()
            .collect(),
        (None, _) => Vec::new(),
    };
    let mut meaning_only: HashMap<Kind, Vec<i64>> = HashMap::new();
    if let Some(m) = meaning {
        for n in near {
            match found.get_mut(&(n.kind, n.id)) {
                Some(feat) => feat.similarity = Some(n.similarity),
                None if n.similarity >= m.min_similarity => {
                    meaning_only.entry(n.kind).or_default().push(n.id);
                    found.insert(
                        (n.kind, n.id),
                        Features {
                            created_at: n.created_at,
                            bm25: None,
                            similarity: Some(n.similarity),
                            ..Features::default()
                        },
                    );
                }
                None => {}
            }
        }
    }
    let (examined, near, stored) = match early {
        Some((words, stored)) => {
            let near = examine(conn, q, &counts, &meaning_only, Scratch::Meaning)?;
            (words, Some(near), Some(stored))
        }
        None => (
            examine(conn, q, &counts, &by_kind(&found), Scratch::Words)?,
            None,
            None,
        ),
    };
    // A word the query excludes excludes a memory found by meaning too.
    let excluded = Query {
        excluded: q.excluded.clone(),
        ..Query::default()
    };
    if let Some(x) = excluded.exclusion() {
        let held = near.as_ref().unwrap_or(&examined);
        for (kind, ids) in &meaning_only {
            let hit = matching(conn, held.table(*kind), &x)?;
            for id in ids.iter().filter(|id| hit.contains(id)) {
                found.remove(&(*kind, *id));
            }
        }
    }
    let examined = examined.with(near);
    let copies = examined.copies.clone();
    if let Some(m) = meaning {
        // Every candidate's parts, and the similarity of full-text candidates the
        // nearest-neighbour pool did not reach, from its stored vectors (read while the
        // meaning was awaited, or now).
        for (&(kind, id), feat) in found.iter_mut() {
            let read;
            let own = match stored.as_ref().and_then(|s| s.get(&(kind, id))) {
                Some(s) => Some(s),
                None => {
                    read = store::stored(conn, kind, id)?;
                    read.as_ref()
                }
            }
            .filter(|s| s.model == m.model);
            if feat.similarity.is_none() {
                feat.similarity = own.map(|s| cosine_i8(&m.vector, &s.vector));
            }
            feat.part_similarity = own.and_then(|s| best_part(&m.vector, &s.parts));
        }
    }
    let ranker = Ranker::shipped().pair(meaning.is_some());
    let duplicates = examined.duplicates();

    let best_bm25: HashMap<Kind, f64> = kinds
        .iter()
        .map(|k| {
            let best = found
                .iter()
                .filter(|((kind, _), _)| kind == k)
                .filter_map(|(_, feat)| feat.bm25)
                .fold(0.0f64, f64::min);
            (*k, best)
        })
        .collect();
    // Places by similarity among all candidates, best first.
    let mut by_meaning: Vec<(f32, (Kind, i64))> = found
        .iter()
        .filter_map(|(key, feat)| feat.similarity.map(|s| (s, *key)))
        .collect();
    by_meaning.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let best_similarity = by_meaning.first().map_or(0.0, |b| f64::from(b.0));
    let crowd = by_meaning
        .get(LEAD_PLACE - 1)
        .or(by_meaning.last())
        .map_or(0.0, |b| f64::from(b.0));
    let best_coverage = found
        .keys()
        .filter_map(|key| examined.wording.get(key))
        .map(|w| w.coverage)
        .fold(0.0, f64::max);
    let meaning_place: HashMap<(Kind, i64), usize> = by_meaning
        .iter()
        .enumerate()
        .map(|(i, (_, key))| (*key, i))
        .collect();
    let words = (q.group_expressions().len() as f64).ln_1p();

    let measured: Vec<((Kind, i64), &Features, Signals)> = found
        .iter()
        .map(|(&(kind, id), feat)| {
            let w = examined
                .wording
                .get(&(kind, id))
                .copied()
                .unwrap_or_default();
            let mut signals = Signals {
                coverage: w.coverage,
                best_coverage,
                title_coverage: w.title_coverage,
                title_precision: w.title_precision,
                phrasing: w.phrasing,
                words,
                rarity: w.rarity,
                query_rarity: w.query_rarity,
                duplicates: (duplicates.get(&(kind, id)).copied().unwrap_or(0) as f64).ln_1p(),
                ..Signals::default()
            };
            if let Some(b) = feat.bm25 {
                signals.bm25 = -b;
                signals.bm25_share = match best_bm25.get(&kind) {
                    Some(best) if *best < 0.0 => b / best,
                    _ => 0.0,
                };
                signals.text_rank = 1.0 / (1.0 + feat.text_place as f64);
                signals.fusion += 1.0 / (FUSION_K + feat.text_place as f64);
            }
            if meaning.is_some()
                && let Some(s) = feat.similarity
            {
                signals.similarity = f64::from(s);
                signals.similarity_gap = f64::from(s) - best_similarity;
                signals.similarity_lead = f64::from(s) - crowd;
                signals.meaning_rank = 1.0 / (1.0 + meaning_place[&(kind, id)] as f64);
                signals.fusion += 1.0 / (FUSION_K + meaning_place[&(kind, id)] as f64);
                signals.part_similarity =
                    feat.part_similarity.map_or(signals.similarity, f64::from);
                signals.parted = if feat.part_similarity.is_some() {
                    1.0
                } else {
                    0.0
                };
            }
            ((kind, id), feat, signals)
        })
        .collect();
    let signals: Vec<Signals> = measured.iter().map(|m| m.2).collect();
    let (estimates, asks) = ranker.estimates(&signals);
    let scored = measured
        .into_iter()
        .zip(estimates)
        .map(|(((kind, id), feat, signals), mut estimate)| {
            if kind == Kind::Prompt {
                estimate *= PROMPT_FACTOR;
            }
            let relevance = estimate * asks;
            if signals.coverage == 0.0 {
                estimate = relevance;
            }
            Scored {
                candidate: Candidate {
                    kind,
                    id,
                    created_at: feat.created_at,
                    score: feat.bm25,
                    relevance,
                },
                signals,
                estimate,
            }
        })
        .collect();
    Ok((scored, copies))
}

/// The ranked candidates of a relevance search with words (`any` is the query's
/// at-least-one-word expression), best first, at most `fetch`; none when even the best
/// candidate's estimate is below `min_relevance` (no memory holds what is asked). The
/// floor gates the query, not each hit: a relevant memory is often the best of a few weak
/// candidates (on the benchmarks, hiding every hit under the floor that hides nonsense
/// lost 5% of the relevant memories in a top 10; gating on the best, 0.2%). For a
/// candidate holding a word of the query it gates the candidate model's estimate, not the
/// relevance: a search is asked on purpose, and the query model, trained on sentences,
/// rates a lone keyword such as `lease` like an everyday request. Nonsense, which no
/// memory holds, is gated by the relevance of what meaning found. The candidates'
/// relevance is by `purpose`: a search's is exactly what the floor gates (so a result
/// shown at the floor or above would have let the search show it, and a memory found by
/// meaning alone reads as unlikely as the floor takes it), a prompt's weighs every
/// candidate by the query model. `leave_out` (the question being asked) is taken out
/// first.
#[allow(clippy::too_many_arguments)]
pub(super) fn relevance(
    conn: &Connection,
    q: &Query,
    any: &str,
    kinds: &[Kind],
    f: &Filters,
    fetch: usize,
    min_relevance: f64,
    purpose: Purpose,
    leave_out: Option<(Kind, i64)>,
    semantic: Option<&Semantic>,
) -> Result<(Vec<Candidate>, Copies)> {
    let (mut scored, copies) = scored(conn, q, any, kinds, f, fetch, semantic)?;
    // Left out before the floor: what is left must pass it by itself.
    if let Some((kind, id)) = leave_out {
        scored.retain(|s| !(s.candidate.kind == kind && s.candidate.id == id));
    }
    if !scored.iter().any(|s| s.estimate >= min_relevance) {
        return Ok((Vec::new(), Copies::new()));
    }
    let mut ranked: Vec<Candidate> = scored
        .into_iter()
        .map(|s| match purpose {
            Purpose::Search => Candidate {
                relevance: s.estimate,
                ..s.candidate
            },
            Purpose::Prompt => s.candidate,
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.relevance
            .total_cmp(&a.relevance)
            .then((b.created_at, b.kind, b.id).cmp(&(a.created_at, a.kind, a.id)))
    });
    ranked.truncate(fetch);
    Ok((ranked, copies))
}

/// The nearest neighbours of `vector` that a relevance search fetching `fetch` weighs in
/// the kinds and filters given, best first: what [`scored`] finds in `index` itself, for a
/// process that holds none (the worker sends them to a hook with the query's vector).
pub(super) fn nearest(
    conn: &Connection,
    index: &VectorIndex,
    vector: &[f32],
    kinds: &[Kind],
    f: &Filters,
    fetch: usize,
) -> Result<Vec<Neighbour>> {
    let allowed = allowed_ids(conn, kinds, f)?;
    let scope = scope_of(kinds, f, allowed.as_ref());
    index.nearest(conn, vector, POOL.max(fetch), &scope)
}

/// The rows of `kinds` passing `f` the vector index may return (`allowed`: the ids passing
/// the filters it does not hold, from [`allowed_ids`]).
fn scope_of<'a>(
    kinds: &'a [Kind],
    f: &'a Filters,
    allowed: Option<&'a HashMap<Kind, HashSet<i64>>>,
) -> Scope<'a> {
    Scope {
        kinds,
        project: f.project.as_deref(),
        since: f.since,
        until: f.until,
        allowed,
    }
}

/// The id of the newest prompt of `session`: the question it is asking now.
pub(super) fn current_prompt(conn: &Connection, session: &str) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            "SELECT id FROM user_prompts WHERE session_id = ?1
             ORDER BY prompt_number DESC LIMIT 1",
        )?
        .query_row([session], |r| r.get(0))
        .optional()?)
}

/// How a pool keeps to its project (see [`scoping`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scoping {
    /// Every match joined to its row and filtered there ([`full_text_ranked`]).
    Rows,
    /// The project's key matched in the MATCH expression ([`full_text_led`]).
    Key,
    /// Every match scored by the words alone and only the best `n` joined to their rows
    /// and filtered: exactly the project's best when at least a pool of those `n` pass
    /// (any row of the project after them ranks below all of them), else [`Scoping::Rows`]
    /// after all.
    Best(usize),
}

/// The `pool` best full-text matches of a kind: id, time, BM25 (lower is better). Every
/// match is scored; the full-text index leads the plan and filters read the covering index.
fn text_pool(
    conn: &Connection,
    kind: Kind,
    any: &str,
    f: &Filters,
    pool: usize,
    scoping: Scoping,
) -> Result<Vec<(i64, i64, f64)>> {
    let (sql, args, best) = pool_statement(kind, any, f, pool, scoping);
    let mut stmt = conn.prepare_cached(&sql)?;
    let Some(n) = best else {
        let rows = stmt
            .query_map(params_from_iter(args), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        return Ok(rows);
    };
    let best = stmt
        .query_map(params_from_iter(args), |r| {
            Ok(((r.get(0)?, r.get(1)?, r.get(2)?), r.get::<_, bool>(3)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let scored = best.len();
    let passed: Vec<_> = best
        .into_iter()
        .filter(|(_, passes)| *passes)
        .map(|(row, _)| row)
        .take(pool)
        .collect();
    if passed.len() < pool && scored == n {
        // Fewer than a pool of the best are the project's: more may be further down.
        return text_pool(conn, kind, any, f, pool, Scoping::Rows);
    }
    Ok(passed)
}

/// How a pool whose words match many rows keeps to `project`, from a sample of its
/// matches (the first [`KEY_SAMPLE`]): matching the project's key ([`Scoping::Key`]) costs
/// a walk of its doclist, every row of the project, for BM25's IDF (about 3 ms at 100,000
/// rows), and is chosen when most of the sample are other projects'; otherwise the best
/// matches by their words alone hold the project's best ([`Scoping::Best`], as many as
/// two pools at the project's share of the sample), which spares joining every match to
/// its row (a third of a pool's time at 100,000 memories of one project: BENCHMARKS.md,
/// "Recall at prompts and files"). Filters on a concept or a file, which need the row
/// itself, keep [`Scoping::Rows`] then.
fn scoping(
    conn: &Connection,
    kind: Kind,
    expr: &str,
    project: &str,
    f: &Filters,
    pool: usize,
) -> Result<Scoping> {
    let t = table(kind);
    let (sampled, own): (i64, i64) = conn
        .prepare_cached(&format!(
            "SELECT count(*), coalesce(sum(t.project = ?2), 0) FROM
               (SELECT rowid AS id FROM {fts} WHERE {fts} MATCH ?1 LIMIT ?3) m
             JOIN {table} t INDEXED BY {index} ON t.id = m.id",
            fts = t.fts,
            table = t.table,
            index = t.search_index,
        ))?
        .query_row(params![expr, project, KEY_SAMPLE], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(if own * 2 < sampled {
        Scoping::Key
    } else if f.concept.is_some() || f.file.is_some() {
        Scoping::Rows
    } else {
        Scoping::Best((2 * pool * sampled as usize).div_ceil(own.max(1) as usize))
    })
}

/// The statement of [`text_pool`] and its arguments, by its [`Scoping`]. With no filter,
/// the best `pool` matches are taken from the full-text index alone and only they are
/// joined to their rows (for their time); otherwise the filters read the covering index.
/// [`Scoping::Best`] with a filter returns its `n` rows with whether each passes the
/// filters (the third value is then `Some(n)`).
pub(super) fn pool_statement(
    kind: Kind,
    any: &str,
    f: &Filters,
    pool: usize,
    scoping: Scoping,
) -> (String, Vec<Value>, Option<usize>) {
    let t = table(kind);
    let fts = t.fts;
    let (mut args, wheres) = match scoping {
        Scoping::Key => full_text_led(kind, any, f),
        Scoping::Rows | Scoping::Best(_) => full_text_ranked(kind, any, f),
    };
    let best = match scoping {
        Scoping::Best(n) if wheres.len() > 1 => Some(n),
        _ => None,
    };
    args.push(Value::Integer(best.unwrap_or(pool) as i64));
    let limit = args.len();
    let score = t.bm25_best(limit);
    let sql = if best.is_some() || wheres.len() == 1 {
        // The best by the words alone, joined to their rows; with `best`, whether each
        // passes the filters.
        let passes = match best {
            Some(_) => format!(", ({})", wheres[1..].join(" AND ")),
            None => String::new(),
        };
        format!(
            "SELECT t.id, t.created_at, m.score{passes} FROM
               (SELECT rowid AS id, {score} AS score FROM {fts} WHERE {fts} MATCH ?1
                ORDER BY 2, rowid DESC LIMIT ?{limit}) m
             JOIN {table} t INDEXED BY {index} ON t.id = m.id
             ORDER BY 3, t.id DESC",
            table = t.table,
            index = t.search_index,
        )
    } else {
        format!(
            "SELECT t.id, t.created_at, {score} FROM {from} WHERE {wheres}
             ORDER BY 3, t.id DESC LIMIT ?{limit}",
            from = t.joined_rows(f),
            wheres = wheres.join(" AND ")
        )
    };
    (sql, args, best)
}

/// For filters the vector index does not hold (type, concept, file): the ids of each kind
/// that pass every filter. `None` when there is no such filter. A type is read from the
/// index on (project, type, created_at) (migration 0009); a concept, which must equal one
/// of the memory's concepts, is first looked for as a phrase of the full-text index's
/// `concepts_text`, so only the rows that may hold it are read; a file is matched against
/// every row of the project in the index of files (migration 0015), by the raw text of its
/// lists first (`sql::push_filters`).
fn allowed_ids(
    conn: &Connection,
    kinds: &[Kind],
    f: &Filters,
) -> Result<Option<HashMap<Kind, HashSet<i64>>>> {
    if f.types.is_empty() && f.concept.is_none() && f.file.is_none() {
        return Ok(None);
    }
    let concept = f
        .concept
        .as_deref()
        .map(str::trim)
        .filter(|c| c.chars().any(char::is_alphanumeric))
        .map(|c| format!("concepts_text : {}", query::quoted(c)));
    let mut out = HashMap::new();
    for &kind in kinds {
        let (sql, args) = allowed_statement(kind, f, concept.as_deref());
        let ids = conn
            .prepare_cached(&sql)?
            .query_map(params_from_iter(args), |r| r.get(0))?
            .collect::<rusqlite::Result<HashSet<i64>>>()?;
        out.insert(kind, ids);
    }
    Ok(Some(out))
}

/// The statement of [`allowed_ids`] for one kind, with its arguments.
fn allowed_statement(kind: Kind, f: &Filters, concept: Option<&str>) -> (String, Vec<Value>) {
    let t = table(kind);
    let (args, wheres, from) = match (concept, kind) {
        (Some(phrase), Kind::Observation) => {
            let (args, wheres) = full_text_led(kind, phrase, f);
            (args, wheres, t.joined_rows(f))
        }
        _ => {
            let mut args = Vec::new();
            let mut wheres = Vec::new();
            push_filters(kind, f, false, &mut args, &mut wheres);
            (args, wheres, format!("{} t", t.table))
        }
    };
    let sql = format!(
        "SELECT t.id FROM {from} WHERE {wheres}",
        wheres = if wheres.is_empty() {
            "1".to_string()
        } else {
            wheres.join(" AND ")
        }
    );
    (sql, args)
}

/// What a candidate's words tell: its coverage, the IDF-weighted share of the query's word
/// groups it contains, and its phrasing, the share of the query's adjacent word pairs it
/// holds as phrases.
#[derive(Debug, Clone, Copy, Default)]
struct Wording {
    coverage: f64,
    title_coverage: f64,
    /// The share of its title's words (stop words aside) that are words of the query.
    title_precision: f64,
    phrasing: f64,
    /// The rarest of the query's words it holds: that word's IDF over the IDF of a word in
    /// no row.
    rarity: f64,
    /// The mean of the same over all the query's words (the same for every candidate).
    query_rarity: f64,
}

/// How many rows of a kind hold each of the query's word groups, counted up to a cap,
/// and how many rows the kind has (its highest id).
#[derive(Debug, Clone)]
struct Counts {
    rows: i64,
    held: Vec<i64>,
}

impl Counts {
    /// Counts each of `q`'s `groups` up to [`IDF_COUNT_CAP`], and a plain word held by
    /// more on up to what makes it common when there are other groups (a lone group is
    /// looked for whatever its count). A phrase or a prefix is never common: counting its
    /// matches reads their positions, and it is rarely held by many rows.
    fn of(conn: &Connection, kind: Kind, q: &Query, groups: &[String]) -> Result<Counts> {
        let t = table(kind);
        let rows: i64 = conn
            .prepare_cached(&format!("SELECT coalesce(max(id), 0) FROM {}", t.table))?
            .query_row([], |r| r.get(0))?;
        let count = |g: &str, cap: i64| -> Result<i64> {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ?1 LIMIT ?2)",
                    fts = t.fts
                ))?
                .query_row(params![g, cap], |r| r.get(0))?)
        };
        let plain = q.plain_words();
        let common = common_above(rows);
        let held = groups
            .iter()
            .zip(plain)
            .map(|(g, plain)| {
                let n = count(g, IDF_COUNT_CAP)?;
                if plain && groups.len() > 1 && n >= IDF_COUNT_CAP && common >= IDF_COUNT_CAP {
                    count(g, common + 1)
                } else {
                    Ok(n)
                }
            })
            .collect::<Result<Vec<i64>>>()?;
        Ok(Counts { rows, held })
    }

    /// The groups the full-text pool looks for: the ones not common (see
    /// [`COMMON_SHARE`]), and always the rarest.
    fn searched(&self) -> Vec<bool> {
        let limit = common_above(self.rows);
        let rarest = self.held.iter().copied().min().unwrap_or(0);
        let mut rarest_kept = false;
        self.held
            .iter()
            .map(|&n| {
                let keep = n <= limit || (n == rarest && !rarest_kept);
                rarest_kept |= n == rarest;
                keep
            })
            .collect()
    }
}

/// The most rows a word may hold and not be common (see [`COMMON_SHARE`]).
fn common_above(rows: i64) -> i64 {
    COMMON_MIN_ROWS.max((rows as f64 * COMMON_SHARE) as i64)
}

fn wording(
    conn: &Connection,
    q: &Query,
    counted: &HashMap<Kind, Counts>,
    candidates: &HashMap<Kind, Vec<i64>>,
    scratch: &HashMap<Kind, String>,
    titles: &HashMap<(Kind, i64), String>,
) -> Result<HashMap<(Kind, i64), Wording>> {
    let groups = q.group_expressions();
    let pairs = q.adjacent_pairs();
    let mut out = HashMap::new();
    if groups.is_empty() {
        return Ok(out);
    }
    for (&kind, ids) in candidates {
        let t = table(kind);
        let Some(held) = counted.get(&kind) else {
            continue;
        };
        let rows = held.rows;
        let mut idf = Vec::with_capacity(groups.len());
        let mut totals = Vec::with_capacity(groups.len());
        let mut counts = Vec::with_capacity(groups.len());
        for &n in &held.held {
            let n = n.min(IDF_COUNT_CAP);
            let (n, total) = (n as f64, rows.max(n) as f64);
            idf.push(((total - n + 0.5) / (n + 0.5) + 1.0).ln());
            totals.push(total);
            counts.push(n);
        }
        // A word's rarity: its IDF over the IDF it would have in no row, among at least
        // RARITY_ROWS rows.
        let rarity: Vec<f64> = counts
            .iter()
            .zip(&totals)
            .map(|(n, total)| {
                let total = total.max(RARITY_ROWS);
                let idf = |n: f64| ((total - n + 0.5) / (n + 0.5) + 1.0).ln();
                idf(*n) / idf(0.0)
            })
            .collect();
        let query_rarity = rarity.iter().sum::<f64>() / rarity.len() as f64;
        let idf_sum: f64 = idf.iter().sum();
        let mut coverage: HashMap<i64, f64> = HashMap::new();
        let mut rarest: HashMap<i64, f64> = HashMap::new();
        for ((g, w), r) in groups.iter().zip(&idf).zip(&rarity) {
            for id in matching(conn, &scratch[&kind], g)? {
                if idf_sum > 0.0 {
                    *coverage.entry(id).or_insert(0.0) += w / idf_sum;
                }
                let best = rarest.entry(id).or_insert(0.0);
                *best = best.max(*r);
            }
        }
        let first = t.title_column();
        let in_title: Vec<String> = groups.iter().map(|g| format!("{first} : ({g})")).collect();
        let in_title = shares(conn, &scratch[&kind], &in_title, &idf)?;
        let phrasing = shares(conn, &scratch[&kind], &pairs, &vec![1.0; pairs.len()])?;
        for &id in ids {
            out.insert(
                (kind, id),
                Wording {
                    coverage: coverage.get(&id).copied().unwrap_or(0.0),
                    title_coverage: in_title.get(&id).map_or(0.0, |h| h.share),
                    title_precision: title_precision(
                        in_title.get(&id).map_or(0, |h| h.matched),
                        titles.get(&(kind, id)).map_or("", String::as_str),
                    ),
                    phrasing: phrasing.get(&id).map_or(0.0, |h| h.share),
                    rarity: rarest.get(&id).copied().unwrap_or(0.0),
                    query_rarity,
                },
            );
        }
    }
    Ok(out)
}

/// The share of a title's words, stop words aside, that are words of the query, of which
/// it holds `held` (each of the query's word groups found in it counts one): a title
/// saying little but what the query says is likelier the memory asked about than one
/// holding the same words among many others.
fn title_precision(held: usize, title: &str) -> f64 {
    let words = crate::text::runs(title)
        .filter(|w| !query::is_stop_word(w))
        .count();
    if words == 0 {
        return 0.0;
    }
    (held as f64 / words as f64).min(1.0)
}

/// Which scratch table a candidate's row is copied into (see [`examine`]). When the query's
/// meaning is still awaited once the full-text pools are in (a hook waiting for the
/// worker), the full-text candidates' rows go into `Words` meanwhile and those found by
/// meaning alone into `Meaning` once it has come; otherwise every candidate goes into
/// `Words` at once.
#[derive(Debug, Clone, Copy)]
enum Scratch {
    Words,
    Meaning,
}

/// The scratch tables (kind, name) holding the rows of a ranking's candidates (see
/// [`examine`]), as they were when it ranked: valid until the connection's next ranking.
/// A search makes its hits' snippets there, where matching the query costs microseconds,
/// not in the index, where FTS5 walks every row holding one of its words (milliseconds).
pub(super) type Copies = Vec<(Kind, String)>;

/// What [`examine`] measured of a set of candidates.
#[derive(Debug, Default)]
struct Examined {
    /// Every scratch table holding these candidates: one per kind, two once merged
    /// ([`Examined::with`]).
    copies: Copies,
    wording: HashMap<(Kind, i64), Wording>,
    /// Each candidate's title (its first column), lowercase and trimmed.
    titles: HashMap<(Kind, i64), String>,
}

impl Examined {
    /// The scratch table holding this set's candidates of `kind` (one before
    /// [`Examined::with`]).
    fn table(&self, kind: Kind) -> &str {
        self.copies
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, name)| name.as_str())
            .expect("a kind of these candidates")
    }

    /// These candidates and `more`'s together.
    fn with(mut self, more: Option<Examined>) -> Examined {
        if let Some(more) = more {
            self.copies.extend(more.copies);
            self.wording.extend(more.wording);
            self.titles.extend(more.titles);
        }
        self
    }

    /// For each candidate: how many others of its kind have the same title, such as a
    /// dozen commits titled "Fix typo".
    fn duplicates(&self) -> HashMap<(Kind, i64), usize> {
        let mut count: HashMap<(Kind, &str), usize> = HashMap::new();
        for ((kind, _), title) in &self.titles {
            *count.entry((*kind, title)).or_default() += 1;
        }
        self.titles
            .iter()
            .map(|(&(kind, id), title)| ((kind, id), count[&(kind, title.as_str())] - 1))
            .collect()
    }
}

/// Copies the `candidates`' rows of each kind into a full-text table of their own in the
/// connection's temporary schema (same columns, same tokenizer; one per kind and
/// [`Scratch`], emptied first), then measures there how each holds the query's words
/// (coverage, phrasing, rarity) and reads its title. Matching the query's words, phrases
/// and exclusions against a hundred rows there costs microseconds; against the whole
/// index, restricted to the rows' ids, it cost milliseconds per expression (FTS5 runs the
/// expression once per id).
fn examine(
    conn: &Connection,
    q: &Query,
    counted: &HashMap<Kind, Counts>,
    candidates: &HashMap<Kind, Vec<i64>>,
    into: Scratch,
) -> Result<Examined> {
    let mut scratch = HashMap::new();
    let mut titles = HashMap::new();
    for (&kind, ids) in candidates {
        let t = table(kind);
        let name = match into {
            Scratch::Words => format!("rank_{}", t.table),
            Scratch::Meaning => format!("rank_{}_near", t.table),
        };
        // The project's key column stays empty: it is there for the expressions that
        // name it (a prefix term is kept off it).
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} USING fts5 (
                 {columns}, {key}, tokenize = 'porter unicode61'
             );
             DELETE FROM temp.{name};",
            columns = t.columns,
            key = sql::PROJECT_KEY,
        ))?;
        if !ids.is_empty() {
            conn.prepare(&format!(
                "INSERT INTO temp.{name} (rowid, {columns})
                 SELECT id, {columns} FROM {table} WHERE id IN ({marks})",
                columns = t.columns,
                table = t.table,
                marks = sql::marks(ids.len())
            ))?
            .execute(params_from_iter(ids))?;
        }
        let mut read = conn.prepare_cached(&format!(
            "SELECT rowid, lower(trim({})) FROM temp.{name}",
            t.title_column()
        ))?;
        let rows = read.query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        for row in rows {
            let (id, title) = row?;
            titles.insert((kind, id), title.unwrap_or_default());
        }
        scratch.insert(kind, name);
    }
    let wording = wording(conn, q, counted, candidates, &scratch, &titles)?;
    Ok(Examined {
        copies: scratch.into_iter().collect(),
        wording,
        titles,
    })
}

/// The stored vector of each candidate that has one (the meaning, not yet known, names the
/// model compared).
fn stored_vectors(
    conn: &Connection,
    found: &HashMap<(Kind, i64), Features>,
) -> Result<HashMap<(Kind, i64), store::Stored>> {
    let mut out = HashMap::new();
    for &(kind, id) in found.keys() {
        if let Some(stored) = store::stored(conn, kind, id)? {
            out.insert((kind, id), stored);
        }
    }
    Ok(out)
}

fn by_kind(found: &HashMap<(Kind, i64), Features>) -> HashMap<Kind, Vec<i64>> {
    let mut out: HashMap<Kind, Vec<i64>> = HashMap::new();
    for (kind, id) in found.keys() {
        out.entry(*kind).or_default().push(*id);
    }
    out
}

/// The rows of a scratch table that match the expression.
fn matching(conn: &Connection, scratch: &str, expr: &str) -> Result<HashSet<i64>> {
    let rows = conn
        .prepare_cached(&format!(
            "SELECT rowid FROM temp.{scratch} WHERE {scratch} MATCH ?1"
        ))?
        .query_map([expr], |r| r.get(0))?
        .collect::<rusqlite::Result<HashSet<i64>>>()?;
    Ok(rows)
}

/// What a row of a scratch table holds of a set of expressions ([`shares`]).
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// The weight of the expressions it matches, as a share of all.
    share: f64,
    /// How many of them it matches.
    matched: usize,
}

/// For each row of the scratch table matching any of the expressions: what it holds of
/// them.
fn shares(
    conn: &Connection,
    scratch: &str,
    exprs: &[String],
    weights: &[f64],
) -> Result<HashMap<i64, Held>> {
    let sum: f64 = weights.iter().sum();
    let mut out: HashMap<i64, Held> = HashMap::new();
    for (expr, w) in exprs.iter().zip(weights) {
        for id in matching(conn, scratch, expr)? {
            let held = out.entry(id).or_default();
            if sum > 0.0 {
                held.share += w / sum;
            }
            held.matched += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::testing::{T0, fixture, obs, unit};

    /// The signals of the candidate `id` among `found`.
    fn signals_of(found: &[Scored], id: i64) -> Signals {
        found
            .iter()
            .find(|s| s.candidate.id == id)
            .expect("a candidate")
            .signals
    }

    /// Only project `p`'s memories.
    fn in_p() -> Filters {
        Filters {
            project: Some("p".into()),
            ..Filters::default()
        }
    }

    #[test]
    fn filters_apply_exactly_to_what_is_found_by_meaning() {
        let mut f = fixture();
        let mut add = |project: &str, kind: &str, concepts: &[&str], file: &str, at: i64| {
            let mut o = obs(project, kind, "Unrelated words", "", at);
            o.content.concepts = concepts.iter().map(|c| c.to_string()).collect();
            o.content.files_read = vec![file.into()];
            f.add(o)
        };
        let exact = add("p", "bugfix", &["gotcha", "queue"], "src/a.rs", T0);
        let upper = add("p", "discovery", &["GOTCHA"], "src/b.rs", T0 + 1);
        let _wider = add("p", "bugfix", &["big gotcha"], "src/a.rs", T0 + 2);
        let _plural = add("p", "bugfix", &["gotchas"], "src/a.rs", T0 + 3);
        let _elsewhere = add("q", "bugfix", &["gotcha"], "src/a.rs", T0 + 4);
        let late = add("p", "bugfix", &["queue"], "src/a.rs", T0 + 100);
        // Files written by other JSON encoders, which may escape a slash or any letter
        // outside ASCII: the filter reads the paths, not how they were written.
        let slashed = add("p", "change", &[], "one", T0 + 101);
        let accented = add("p", "change", &[], "two", T0 + 102);
        for (id, json) in [
            (slashed, r#"["src\/c.rs"]"#),
            (accented, r#"["d\u00e9j\u00e0/c.rs"]"#),
        ] {
            f.conn
                .execute(
                    "UPDATE observations SET files_read = ?1 WHERE id = ?2",
                    rusqlite::params![json, id],
                )
                .expect("files");
        }
        // Every memory gets the query's own vector: all are equally near, and only the
        // filters decide what is found (the query's word matches nothing).
        store::store_each(&mut f.conn, "m", |_| Some(unit(0)));
        let mut index = VectorIndex::new("m");
        index.refresh(&f.conn).expect("index");
        let meaning = std::sync::OnceLock::from(Meaning {
            vector: unit(0),
            model: "m".into(),
            min_similarity: 0.5,
            neighbours: None,
        });
        let semantic = Semantic {
            index: Some(&index),
            meaning: &meaning,
        };
        // What a relevance search of the word finds among observations (a page of 20).
        let q = query::parse("zyzzyva");
        let any = q.fts_any().expect("a word");
        let found = |filters: Filters| -> Vec<String> {
            let filters = Filters {
                project: Some("p".into()),
                ..filters
            };
            let kinds = [Kind::Observation];
            let mut ids: Vec<String> = relevance(
                &f.conn,
                &q,
                &any,
                &kinds,
                &filters,
                21,
                0.0,
                Purpose::Search,
                None,
                Some(&semantic),
            )
            .expect("rank")
            .0
            .iter()
            .map(|c| c.kind.reference(c.id))
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
        for (file, want) in [
            ("src/c.rs", vec![slashed]),
            ("déjà/c.rs", vec![accented]),
            ("/c.rs", vec![slashed, accented]),
            ("C.RS", vec![slashed, accented]),
        ] {
            let filters = Filters {
                file: Some(file.into()),
                ..Filters::default()
            };
            assert_eq!(found(filters), refs(&want), "{file:?}");
        }
        // A concept with no word in it is still compared exactly (no full-text lookup).
        let none = Filters {
            concept: Some("???".into()),
            ..Filters::default()
        };
        assert!(found(none).is_empty());
    }

    #[test]
    fn a_meaning_that_arrives_late_ranks_as_one_given_at_once() {
        let mut f = fixture();
        let text = [
            f.add(obs(
                "p",
                "bugfix",
                "Lease lost on restart",
                "the lease expires",
                T0,
            )),
            f.add(obs("p", "change", "Renew the lease early", "", T0 + 1)),
            f.add(obs("p", "change", "Lease table cleanup", "", T0 + 2)),
        ];
        // Found by meaning alone: one shares a title with a word-found one, one holds the
        // word the query excludes.
        let alone = [
            f.add(obs(
                "p",
                "change",
                "Renew the lease early",
                "job claims",
                T0 + 3,
            )),
            f.add(obs(
                "p",
                "bugfix",
                "Claims vanish after a crash",
                "",
                T0 + 4,
            )),
            f.add(obs(
                "p",
                "change",
                "Crash in the poller",
                "nightly builds",
                T0 + 5,
            )),
        ];
        let axis = |i: usize| {
            let mut v = vec![0.0f32; 8];
            v[0] = 1.0;
            v[i] = 0.5 + i as f32 / 10.0;
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
        };
        store::store_each(&mut f.conn, "m", |id| Some(axis(1 + id as usize % 7)));
        let meaning = || Meaning {
            vector: axis(1),
            model: "m".into(),
            min_similarity: 0.0,
            // The neighbours the worker sends: the ones found by meaning alone.
            neighbours: Some(
                alone
                    .iter()
                    .enumerate()
                    .map(|(i, &id)| Neighbour {
                        kind: Kind::Observation,
                        id,
                        created_at: T0 + 3 + i as i64,
                        similarity: 0.9 - i as f32 / 10.0,
                    })
                    .collect(),
            ),
        };
        let q = query::parse("lease -nightly");
        let any = q.fts_any().expect("a word");
        let filters = in_p();
        let kinds = [Kind::Observation];
        // Each candidate's signals and estimate, and how many scratch tables held them.
        let rank = |m: &OnceLock<Meaning>| -> (Vec<String>, usize) {
            let semantic = Semantic {
                index: None,
                meaning: m,
            };
            let (scored, copies) =
                scored(&f.conn, &q, &any, &kinds, &filters, 10, Some(&semantic)).expect("rank");
            let mut out: Vec<String> = scored
                .iter()
                .map(|s| format!("{} {:?} {:.9}", s.candidate.id, s.signals, s.estimate))
                .collect();
            out.sort();
            (out, copies.len())
        };
        let (at_once, tables) = rank(&OnceLock::from(meaning()));
        assert_eq!(tables, 1);
        // The full-text side is done long before this meaning arrives: its candidates are
        // examined and their vectors read while it is awaited.
        let late = OnceLock::new();
        let ranked = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(200));
                Promise(&late).keep(meaning());
            });
            rank(&late)
        });
        // Two tables: the late path was the one taken.
        assert_eq!(ranked, (at_once.clone(), 2));
        // Every candidate was measured: the word-found ones with their stored vectors, the
        // meaning-only ones but the excluded, the duplicate title counted.
        assert_eq!(at_once.len(), text.len() + alone.len() - 1, "{at_once:#?}");
        assert!(
            !at_once
                .iter()
                .any(|l| l.starts_with(&format!("{} ", alone[2])))
        );
        assert!(
            at_once.iter().all(|l| !l.contains("similarity: 0.0,")),
            "{at_once:#?}"
        );
        let twice = format!("duplicates: {:?},", 1f64.ln_1p());
        for id in [text[1], alone[0]] {
            let line = at_once.iter().find(|l| l.starts_with(&format!("{id} ")));
            assert!(line.is_some_and(|l| l.contains(&twice)), "{at_once:#?}");
        }
    }

    #[test]
    fn the_fusion_adds_each_sides_reciprocal_place() {
        let mut f = fixture();
        let ids: Vec<i64> = (0..6)
            .map(|i| {
                let (title, narrative) = if i < 4 {
                    ("Lease lost", "lease ".repeat(i + 1))
                } else {
                    ("Poller crash", format!("the poller {i}"))
                };
                f.add(obs("p", "change", title, &narrative, T0 + i as i64))
            })
            .collect();
        store::store_each(&mut f.conn, "m", |_| Some(unit(0)));
        // The worker's neighbours: two holding the word, the two that do not.
        let near = [ids[3], ids[5], ids[1], ids[4]];
        let meaning = OnceLock::from(Meaning {
            vector: unit(0),
            model: "m".into(),
            min_similarity: 0.0,
            neighbours: Some(
                near.iter()
                    .enumerate()
                    .map(|(i, &id)| Neighbour {
                        kind: Kind::Observation,
                        id,
                        created_at: T0,
                        similarity: 0.9 - i as f32 / 10.0,
                    })
                    .collect(),
            ),
        });
        let semantic = Semantic {
            index: None,
            meaning: &meaning,
        };
        let q = query::parse("lease");
        let any = q.fts_any().expect("words");
        let filters = in_p();
        let kinds = [Kind::Observation];
        let (found, _) =
            scored(&f.conn, &q, &any, &kinds, &filters, 10, Some(&semantic)).expect("scored");
        assert_eq!(found.len(), ids.len());
        let place = |rank: f64| (rank > 0.0).then(|| (1.0 / rank - 1.0).round());
        for s in &found {
            let mut fusion = 0.0;
            for side in [s.signals.text_rank, s.signals.meaning_rank] {
                if let Some(r) = place(side) {
                    fusion += 1.0 / (FUSION_K + r);
                }
            }
            assert!((s.signals.fusion - fusion).abs() < 1e-12, "{s:?}");
        }
        // Found by words and by meaning (every candidate with a vector has a place by
        // similarity), and by meaning alone.
        assert!(signals_of(&found, ids[3]).fusion > 1.0 / FUSION_K);
        let alone = signals_of(&found, ids[4]);
        assert!(alone.text_rank == 0.0 && alone.fusion > 0.0 && alone.fusion < 1.0 / FUSION_K);
    }

    #[test]
    fn a_memorys_parts_are_measured_apart() {
        let mut f = fixture();
        // One memory with a title and a narrative (embedded in parts), one with a title
        // alone; both hold the query's word, one is found by meaning alone.
        let parted = f.add(obs("p", "change", "Lease lost", "the poller died", T0));
        let whole = f.add(obs("p", "change", "Lease renewed", "", T0 + 1));
        let alone = f.add(obs("p", "change", "Poller crash", "it restarts", T0 + 2));
        store::store_each(&mut f.conn, "m", |_| Some(unit(1)));
        // The parts: the head along the query, the body across it.
        let parts: Vec<u8> = [unit(0), unit(2)]
            .iter()
            .flat_map(|v| crate::recall::embed::quantize(v))
            .collect();
        for id in [parted, alone] {
            f.conn
                .execute(
                    "UPDATE embeddings SET parts = ?1 WHERE ref_id = ?2",
                    params![parts, id],
                )
                .expect("parts");
        }
        let meaning = OnceLock::from(Meaning {
            vector: unit(0),
            model: "m".into(),
            min_similarity: 0.0,
            neighbours: Some(vec![Neighbour {
                kind: Kind::Observation,
                id: alone,
                created_at: T0 + 2,
                similarity: 0.0,
            }]),
        });
        let semantic = Semantic {
            index: None,
            meaning: &meaning,
        };
        let q = query::parse("lease");
        let any = q.fts_any().expect("words");
        let kinds = [Kind::Observation];
        let (found, _) =
            scored(&f.conn, &q, &any, &kinds, &in_p(), 10, Some(&semantic)).expect("scored");
        let of = |id: i64| signals_of(&found, id);
        for id in [parted, alone] {
            let s = of(id);
            assert_eq!(
                (s.similarity, s.part_similarity, s.parted),
                (0.0, 1.0, 1.0),
                "{s:?}"
            );
        }
        let s = of(whole);
        assert_eq!(
            (s.similarity, s.part_similarity, s.parted),
            (0.0, 0.0, 0.0),
            "{s:?}"
        );
        // Without a model, nothing of meaning is measured.
        let (found, _) = scored(&f.conn, &q, &any, &kinds, &in_p(), 10, None).expect("scored");
        assert!(
            found
                .iter()
                .all(|s| s.signals.part_similarity == 0.0 && s.signals.parted == 0.0)
        );
    }

    #[test]
    fn snippets_made_in_the_copies_are_the_indexs() {
        let mut f = fixture();
        let filler = "the worker claims a batch and the model compresses it into notes";
        // More rows hold the query's words than a pool takes: the last ones come back
        // only by meaning, and are copied into the table of those found by meaning alone.
        let ids: Vec<i64> = (0..70)
            .map(|i| {
                let narrative = match i % 3 {
                    0 => format!("{filler}; the lease {i} expires on restart; {filler}"),
                    1 => format!("{filler} {filler} then renew the lease early"),
                    _ => format!("renew {filler}; a crash loses the lease {i}"),
                };
                let title = format!("{} {i}", ["Lease lost", "Crash in poller", "Notes"][i % 3]);
                f.add(obs("p", "change", &title, &narrative, T0 + i as i64))
            })
            .collect();
        store::store_each(&mut f.conn, "m", |id| Some(unit(id as usize)));
        let meaning = || Meaning {
            vector: unit(0),
            model: "m".into(),
            min_similarity: 0.0,
            neighbours: Some(
                ids.iter()
                    .rev()
                    .take(20)
                    .map(|&id| Neighbour {
                        kind: Kind::Observation,
                        id,
                        created_at: T0,
                        similarity: 0.5,
                    })
                    .collect(),
            ),
        };
        let q = query::parse("renew lease crash restart");
        let any = q.fts_any().expect("words");
        let filters = in_p();
        let late = OnceLock::new();
        let (found, copies) = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(200));
                Promise(&late).keep(meaning());
            });
            let semantic = Semantic {
                index: None,
                meaning: &late,
            };
            let kinds = [Kind::Observation];
            scored(&f.conn, &q, &any, &kinds, &filters, 10, Some(&semantic)).expect("scored")
        });
        let found: Vec<i64> = found.iter().map(|s| s.candidate.id).collect();
        assert!(found.len() > POOL, "{}", found.len());
        assert_eq!(copies.len(), 2, "{copies:?}");
        let snippets = |copy: Option<&str>| {
            super::super::snippet::snippets_of(&f.conn, Kind::Observation, &any, &found, copy)
                .expect("snippets")
        };
        let mut from_copies: Vec<_> = copies
            .iter()
            .flat_map(|(_, table)| snippets(Some(table)))
            .collect();
        from_copies.sort_by_key(|(id, _)| *id);
        let mut from_index = snippets(None);
        from_index.sort_by_key(|(id, _)| *id);
        assert_eq!(from_copies.len(), found.len());
        assert_eq!(from_copies, from_index);
    }

    /// SQLite's plan of `sql` with `args`, one line a step.
    fn plan(conn: &Connection, sql: &str, args: Vec<Value>) -> String {
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("plan")
            .query_map(params_from_iter(args), |r| r.get::<_, String>(3))
            .expect("rows")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("collect")
            .join("\n")
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
        // With the project alone, matched by its key or filtered on the rows, the
        // full-text index leads.
        let project_only = in_p();
        for (kind, filters, scoping) in Kind::ALL
            .into_iter()
            .flat_map(|k| {
                [Scoping::Rows, Scoping::Key, Scoping::Best(10)]
                    .map(|s| [(k, &filters, s), (k, &project_only, s)])
            })
            .flatten()
        {
            let (sql, args, _) = pool_statement(kind, "x", filters, 1, scoping);
            let rows = plan(&f.conn, &sql, args);
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
    fn a_file_filter_reads_the_index_of_files_not_the_rows() {
        let f = fixture();
        for (kind, index) in [
            (Kind::Observation, "observations_files"),
            (Kind::Summary, "session_summaries_files"),
        ] {
            for filters in [
                Filters {
                    file: Some("src/db.rs".into()),
                    ..in_p()
                },
                Filters {
                    file: Some("src/db.rs".into()),
                    since: Some(1),
                    ..in_p()
                },
            ] {
                let (sql, args) = allowed_statement(kind, &filters, None);
                let plan = plan(&f.conn, &sql, args);
                assert!(
                    plan.contains(&format!("USING COVERING INDEX {index}")),
                    "{kind:?}:\n{plan}"
                );
            }
        }
    }

    #[test]
    fn a_common_word_is_not_looked_for_alone_but_still_counts() {
        let mut f = fixture();
        // "update" is in 1,050 of 1,100 rows (common), "pager" in two.
        let mut pager = Vec::new();
        for i in 0..1100 {
            let title = match i {
                0 | 1 => format!("Update the pager {i}"),
                2..1050 => format!("Update dependency {i}"),
                _ => format!("Tidy module {i}"),
            };
            let id = f.add(obs("p", "change", &title, "", T0 + i));
            if i < 2 {
                pager.push(id);
            }
        }
        let filters = in_p();
        let kinds = [Kind::Observation];
        let candidates = |text: &str| {
            let q = query::parse(text);
            let any = q.fts_any().expect("words");
            scored(&f.conn, &q, &any, &kinds, &filters, 20, None)
                .expect("scored")
                .0
        };
        // The rows holding only the common word are not searched; the rare word's rows
        // are, and their coverage counts the common word too.
        let found = candidates("update pager");
        let mut ids: Vec<i64> = found.iter().map(|s| s.candidate.id).collect();
        ids.sort();
        assert_eq!(ids, pager);
        assert!(found.iter().all(|s| s.signals.coverage > 0.99));
        // A query of common words alone still finds their rows.
        assert_eq!(candidates("update dependency").len(), 50);
        // In a young memory no word is common: the pool holds rows of "update" alone.
        let mut young = fixture();
        for i in 0..200 {
            young.add(obs("p", "change", &format!("Update {i}"), "", T0 + i));
        }
        young.add(obs("p", "change", "pager", "", T0 + 30));
        let q = query::parse("update pager");
        let any = q.fts_any().expect("words");
        let (found, _) = scored(&young.conn, &q, &any, &kinds, &filters, 20, None).expect("scored");
        assert_eq!(found.len(), 50);
    }

    #[test]
    fn a_titles_precision_is_the_share_of_its_words_the_query_holds() {
        let mut f = fixture();
        let exact = f.add(obs(
            "p",
            "change",
            "Rejects U+001F in the string literals",
            "",
            T0,
        ));
        let wider = f.add(obs(
            "p",
            "change",
            "Fix compiler warnings in string literals of the found_string parser",
            "Rejects U+001F",
            T0 + 1,
        ));
        let stops = f.add(obs("p", "change", "Of the", "string", T0 + 2));
        let q = query::parse("Reject U+001F in string literals.");
        let any = q.fts_any().expect("words");
        let (found, _) =
            scored(&f.conn, &q, &any, &[Kind::Observation], &in_p(), 20, None).expect("scored");
        let precision = |id: i64| signals_of(&found, id).title_precision;
        // Matched as the index matches ("rejects" is "reject"), stop words left aside:
        // every word of the first title is the query's.
        assert_eq!(precision(exact), 1.0);
        // "string" and "literals" of "fix compiler warnings string literals found string
        // parser".
        assert_eq!(precision(wider), 2.0 / 8.0);
        // A title of stop words alone says nothing.
        assert_eq!(precision(stops), 0.0);
    }

    #[test]
    fn a_pool_keeps_to_its_project_exactly_however_it_is_scoped() {
        let mut f = fixture();
        for i in 0..600 {
            f.add(obs("big", "change", &format!("Update {i}"), "", T0 + i));
        }
        for i in 0..20 {
            f.add(obs(
                "small",
                "change",
                &format!("Update small {i}"),
                "",
                T0 + i,
            ));
        }
        let expr = r#""update""#;
        let of = |project: &str| Filters {
            project: Some(project.into()),
            ..Filters::default()
        };
        let chosen = |project: &str| {
            scoping(&f.conn, Kind::Observation, expr, project, &of(project), 50).expect("sample")
        };
        assert_eq!(chosen("small"), Scoping::Key);
        // The sample, the first 500 matches, is all the big project's: two pools.
        assert_eq!(chosen("big"), Scoping::Best(100));
        // Whichever way, the pool is exactly the project's best: for the big project the
        // best matches hold them, for the small one they do not, and the rows are then
        // filtered one by one after all.
        for project in ["small", "big"] {
            let pool = |s| text_pool(&f.conn, Kind::Observation, expr, &of(project), 50, s);
            let rows = pool(Scoping::Rows).expect("rows");
            assert_eq!(rows.len(), if project == "small" { 20 } else { 50 });
            for s in [
                Scoping::Key,
                Scoping::Best(60),
                Scoping::Best(104),
                Scoping::Best(2000),
            ] {
                let other = pool(s).expect("pool");
                let ids = |r: &[(i64, i64, f64)]| r.iter().map(|x| x.0).collect::<Vec<_>>();
                assert_eq!(ids(&other), ids(&rows), "{project} {s:?}");
            }
        }
    }
}
