//! `model_calls`: one row per model call attempt, with tokens and latency, and
//! `model_limits`: the prompt size each provider's model is known to take. The only module
//! that writes them; it also answers "how many tokens today" for the daily budget and for
//! `cairn status`.
//!
//! Invariants:
//! - a call's row is written before the call ([`start`]: outcome `started`, its input
//!   tokens estimated from the prompt) and completed after ([`complete`]), so a worker
//!   killed mid-call never under-counts the budget: a call that never completed counts by
//!   its estimate;
//! - token counts are the provider's own when it reports them; estimates (characters / 4)
//!   are marked `tokens_estimated`;
//! - a "day" is a UTC calendar day; tokens are input plus output tokens.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;

use crate::error::Result;
use crate::store::db;

const DAY_MS: i64 = 86_400_000;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The call is being made (or its worker died during it).
    Started,
    /// A usable reply with something to store.
    Ok,
    /// The explicit empty answer.
    Empty,
    /// A reply that could not be used (no XML, no empty answer).
    Unusable,
    /// The call failed (status, timeout, connection).
    Error,
    /// The provider is not logged in (the `claude` CLI): the jobs wait, no attempt counted.
    NotLoggedIn,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Started => "started",
            Outcome::Ok => "ok",
            Outcome::Empty => "empty",
            Outcome::Unusable => "unusable",
            Outcome::Error => "error",
            Outcome::NotLoggedIn => "not_logged_in",
        }
    }
}

/// One model call attempt to record.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub provider: String,
    pub model: String,
    /// `observation` or `summarize`.
    pub purpose: String,
    pub session_id: Option<String>,
    pub job_ids: Vec<i64>,
    pub prompt_chars: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The token counts are estimates (characters / 4), not the provider's.
    pub tokens_estimated: bool,
    /// What the call cost in US dollars, when the provider said.
    pub cost_usd: Option<f64>,
    pub latency_ms: i64,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub created_at: i64,
}

/// Tokens estimated from text length: characters / 4, rounded up.
pub fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// Writes the row of a call about to be made: outcome `started`, input tokens estimated
/// from `r.prompt_chars`, no output. Returns its id, for [`complete`].
pub fn start(tx: &Transaction, r: &CallRecord) -> Result<i64> {
    record(
        tx,
        &CallRecord {
            input_tokens: estimate_tokens(r.prompt_chars),
            output_tokens: 0,
            tokens_estimated: true,
            outcome: Outcome::Started,
            error: None,
            ..r.clone()
        },
    )
}

/// Completes the row [`start`] wrote with what the call cost and how it ended.
pub fn complete(tx: &Transaction, id: i64, r: &CallRecord) -> Result<()> {
    tx.prepare_cached(
        "UPDATE model_calls
         SET input_tokens = ?2, output_tokens = ?3, tokens_estimated = ?4, latency_ms = ?5,
             outcome = ?6, error = ?7, cost_usd = ?8
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        r.input_tokens as i64,
        r.output_tokens as i64,
        r.tokens_estimated,
        r.latency_ms,
        r.outcome.as_str(),
        r.error
            .as_deref()
            .map(|e| crate::worker::prompt::cap(e, 2_000)),
        r.cost_usd,
    ])?;
    Ok(())
}

/// A call attempt as the worker carries it: the id of its `started` row when that was
/// written, and what it came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: Option<i64>,
    pub record: CallRecord,
}

/// Completes each call's `started` row, or inserts the row when none was written.
pub fn settle(tx: &Transaction, calls: &[Call]) -> Result<()> {
    for c in calls {
        match c.id {
            Some(id) => complete(tx, id, &c.record)?,
            None => {
                record(tx, &c.record)?;
            }
        }
    }
    Ok(())
}

/// [`settle`] in a transaction of its own (a failed batch's attempts).
pub fn settle_all(conn: &mut Connection, calls: &[Call]) -> Result<()> {
    if calls.is_empty() {
        return Ok(());
    }
    db::write(conn, |tx| settle(tx, calls))
}

/// Stores one call in the caller's transaction (the worker's ack, so a stored result and
/// its cost commit together).
pub fn record(tx: &Transaction, r: &CallRecord) -> Result<i64> {
    let id = tx
        .prepare_cached(
            "INSERT INTO model_calls
                 (provider, model, purpose, session_id, job_ids, prompt_chars, input_tokens,
                  output_tokens, tokens_estimated, latency_ms, outcome, error, created_at,
                  cost_usd)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
             RETURNING id",
        )?
        .query_row(
            params![
                r.provider,
                r.model,
                r.purpose,
                r.session_id,
                serde_json::to_string(&r.job_ids).unwrap_or_else(|_| "[]".into()),
                r.prompt_chars as i64,
                r.input_tokens as i64,
                r.output_tokens as i64,
                r.tokens_estimated,
                r.latency_ms,
                r.outcome.as_str(),
                r.error
                    .as_deref()
                    .map(|e| crate::worker::prompt::cap(e, 2_000)),
                r.created_at,
                r.cost_usd
            ],
            |row| row.get(0),
        )?;
    Ok(id)
}

/// Stores calls in a transaction of their own (a failed batch's attempts).
pub fn record_all(conn: &mut Connection, records: &[CallRecord]) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    db::write(conn, |tx| {
        for r in records {
            record(tx, r)?;
        }
        Ok(())
    })
}

/// Midnight UTC of the day holding `now` (ms).
pub fn day_start_utc(now: i64) -> i64 {
    now - now.rem_euclid(DAY_MS)
}

/// Input plus output tokens of every call since midnight UTC.
pub fn tokens_today(conn: &Connection, now: i64) -> Result<u64> {
    let n: i64 = conn
        .prepare_cached(
            "SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM model_calls
             WHERE created_at >= ?1",
        )?
        .query_row([day_start_utc(now)], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// The daily token budget and how much of it is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// Tokens spent today (UTC).
    pub spent: u64,
    /// `model.daily_token_budget`; 0 means no limit.
    pub limit: u64,
    /// When the day's count starts again (next midnight UTC, ms).
    pub resets_at: i64,
}

impl Budget {
    /// True when a limit is set and today's tokens reached it: jobs wait until `resets_at`.
    pub fn exhausted(&self) -> bool {
        self.limit > 0 && self.spent >= self.limit
    }
}

/// Today's budget state for `limit` (`model.daily_token_budget`).
pub fn budget(conn: &Connection, limit: u64, now: i64) -> Result<Budget> {
    Ok(Budget {
        spent: tokens_today(conn, now)?,
        limit,
        resets_at: day_start_utc(now) + DAY_MS,
    })
}

/// Model calls over a period, for `cairn status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Calls whose outcome was `error` or `unusable`.
    pub failed: u64,
}

/// Totals of the calls made at or after `since` (ms).
pub fn totals_since(conn: &Connection, since: i64) -> Result<Totals> {
    let t = conn
        .prepare_cached(
            "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                    coalesce(sum(outcome IN ('error', 'unusable')), 0)
             FROM model_calls WHERE created_at >= ?1",
        )?
        .query_row([since], |r| {
            Ok(Totals {
                calls: r.get::<_, i64>(0)?.max(0) as u64,
                input_tokens: r.get::<_, i64>(1)?.max(0) as u64,
                output_tokens: r.get::<_, i64>(2)?.max(0) as u64,
                failed: r.get::<_, i64>(3)?.max(0) as u64,
            })
        })?;
    Ok(t)
}

/// One provider's and model's calls over a period, for `cairn status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProviderTotals {
    pub provider: String,
    pub model: String,
    #[serde(flatten)]
    pub totals: Totals,
    /// Calls whose token counts are (partly) estimates.
    pub estimated: u64,
    /// Calls started and never completed (their worker died during them); counted by
    /// their prompt's estimate.
    pub unfinished: u64,
    /// What the calls cost in US dollars, as far as the provider said (`claude-cli` does).
    pub cost_usd: f64,
}

/// [`totals_since`] per provider and model, busiest first.
pub fn totals_by_provider(conn: &Connection, since: i64) -> Result<Vec<ProviderTotals>> {
    let mut stmt = conn.prepare_cached(
        "SELECT provider, model, count(*), coalesce(sum(input_tokens), 0),
                coalesce(sum(output_tokens), 0),
                coalesce(sum(outcome IN ('error', 'unusable')), 0),
                coalesce(sum(tokens_estimated), 0), coalesce(sum(outcome = 'started'), 0),
                coalesce(sum(cost_usd), 0.0)
         FROM model_calls WHERE created_at >= ?1
         GROUP BY provider, model
         ORDER BY sum(input_tokens + output_tokens) DESC, provider, model",
    )?;
    let rows = stmt.query_map([since], |r| {
        let n = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
        Ok(ProviderTotals {
            provider: r.get(0)?,
            model: r.get(1)?,
            totals: Totals {
                calls: n(2)?,
                input_tokens: n(3)?,
                output_tokens: n(4)?,
                failed: n(5)?,
            },
            estimated: n(6)?,
            unfinished: n(7)?,
            cost_usd: r.get(8)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A provider found not logged in by its latest finished call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotLoggedIn {
    pub provider: String,
    /// The provider's own words.
    pub error: String,
    pub at: i64,
}

/// The provider whose latest finished call (any provider's) found it not logged in, if
/// that is so: once a call succeeds again, the answer is `None`.
pub fn not_logged_in(conn: &Connection) -> Result<Option<NotLoggedIn>> {
    let row = conn
        .prepare_cached(
            "SELECT provider, outcome, coalesce(error, ''), created_at FROM model_calls
             WHERE outcome <> 'started'
             ORDER BY created_at DESC, id DESC LIMIT 1",
        )?
        .query_row([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })
        .optional()?;
    Ok(row
        .filter(|(_, outcome, _, _)| outcome == Outcome::NotLoggedIn.as_str())
        .map(|(provider, _, error, at)| NotLoggedIn {
            provider,
            error,
            at,
        }))
}

/// The largest prompt (characters) `provider`'s `model` is known to take, if it ever
/// rejected one as too long.
pub fn prompt_limit(conn: &Connection, provider: &str, model: &str) -> Result<Option<usize>> {
    let n: Option<i64> = conn
        .prepare_cached(
            "SELECT max_prompt_chars FROM model_limits WHERE provider = ?1 AND model = ?2",
        )?
        .query_row(params![provider, model], |r| r.get(0))
        .optional()?;
    Ok(n.map(|n| n.max(1) as usize))
}

/// Remembers that `provider`'s `model` takes prompts of at most `max_prompt_chars`.
pub fn learn_prompt_limit(
    tx: &Transaction,
    provider: &str,
    model: &str,
    max_prompt_chars: usize,
    now: i64,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO model_limits (provider, model, max_prompt_chars, updated_at)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (provider, model) DO UPDATE
         SET max_prompt_chars = excluded.max_prompt_chars, updated_at = excluded.updated_at",
    )?
    .execute(params![
        provider,
        model,
        max_prompt_chars.max(1) as i64,
        now
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tokens: u64, outcome: Outcome, at: i64) -> CallRecord {
        CallRecord {
            provider: "anthropic".into(),
            model: "m".into(),
            purpose: "observation".into(),
            session_id: Some("s".into()),
            job_ids: vec![1, 2],
            prompt_chars: 100,
            input_tokens: tokens,
            output_tokens: 1,
            tokens_estimated: false,
            cost_usd: Some(0.001),
            latency_ms: 5,
            outcome,
            error: None,
            created_at: at,
        }
    }

    #[test]
    fn counts_todays_tokens_and_the_budget() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let mut c = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        let day = 20_000 * DAY_MS;
        let now = day + 3_600_000;
        record_all(
            &mut c,
            &[
                call(100, Outcome::Ok, day - 1),
                call(10, Outcome::Ok, day),
                call(20, Outcome::Error, now),
            ],
        )
        .expect("record");
        record_all(&mut c, &[]).expect("nothing");
        assert_eq!(tokens_today(&c, now).expect("today"), 32);
        assert_eq!(day_start_utc(now), day);
        let b = budget(&c, 32, now).expect("budget");
        assert!(b.exhausted());
        assert_eq!(b.resets_at, day + DAY_MS);
        assert!(!budget(&c, 0, now).expect("no limit").exhausted());
        assert!(!budget(&c, 33, now).expect("room").exhausted());
        let t = totals_since(&c, day).expect("totals");
        assert_eq!(
            t,
            Totals {
                calls: 2,
                input_tokens: 30,
                output_tokens: 2,
                failed: 1
            }
        );
        let ids: String = c
            .query_row("SELECT job_ids FROM model_calls LIMIT 1", [], |r| r.get(0))
            .expect("ids");
        assert_eq!(ids, "[1,2]");
    }

    #[test]
    fn a_call_counts_from_before_it_is_made() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let mut c = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        let now = 20_000 * DAY_MS + 1;
        let mut r = call(0, Outcome::Ok, now);
        r.prompt_chars = 4_001;
        let id = db::write(&mut c, |tx| start(tx, &r)).expect("start");
        // A worker killed here: the call counts by its prompt's estimate.
        assert_eq!(tokens_today(&c, now).expect("today"), 1_001);
        let t = totals_by_provider(&c, now - 1).expect("by provider");
        assert_eq!(
            (t[0].unfinished, t[0].estimated, t[0].totals.calls),
            (1, 1, 1)
        );
        // Completed: the provider's own counts replace the estimate.
        r.input_tokens = 900;
        r.output_tokens = 50;
        settle_all(
            &mut c,
            &[Call {
                id: Some(id),
                record: r.clone(),
            }],
        )
        .expect("complete");
        assert_eq!(tokens_today(&c, now).expect("today"), 950);
        // A call whose start could not be written is inserted whole.
        settle_all(
            &mut c,
            &[Call {
                id: None,
                record: r,
            }],
        )
        .expect("insert");
        let t = totals_by_provider(&c, now - 1).expect("by provider");
        assert_eq!(t.len(), 1);
        assert_eq!(
            (
                t[0].provider.as_str(),
                t[0].model.as_str(),
                t[0].unfinished,
                t[0].estimated
            ),
            ("anthropic", "m", 0, 0)
        );
        assert_eq!(t[0].totals.input_tokens, 1_800);
        assert_eq!(estimate_tokens(5), 2);
    }

    #[test]
    fn prompt_limits_are_remembered_per_provider_and_model() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let mut c = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        assert_eq!(prompt_limit(&c, "openai", "small").expect("none"), None);
        db::write(&mut c, |tx| {
            learn_prompt_limit(tx, "openai", "small", 9_000, 1)
        })
        .expect("learn");
        db::write(&mut c, |tx| {
            learn_prompt_limit(tx, "openai", "small", 6_000, 2)
        })
        .expect("again");
        assert_eq!(
            prompt_limit(&c, "openai", "small").expect("known"),
            Some(6_000)
        );
        assert_eq!(
            prompt_limit(&c, "openai", "big").expect("other model"),
            None
        );
        assert_eq!(
            prompt_limit(&c, "anthropic", "small").expect("other provider"),
            None
        );
    }
}
