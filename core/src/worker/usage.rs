//! `model_calls`: one row per model call attempt, with tokens and latency. The only module
//! that writes it; it also answers "how many tokens today" for the daily budget and for
//! `cairn status`.
//!
//! A "day" is a UTC calendar day. Tokens are input plus output tokens.

use rusqlite::{Connection, Transaction, params};
use serde::Serialize;

use crate::error::Result;
use crate::store::db;

const DAY_MS: i64 = 86_400_000;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// A usable reply with something to store.
    Ok,
    /// The explicit empty answer.
    Empty,
    /// A reply that could not be used (no XML, no empty answer).
    Unusable,
    /// The call failed (status, timeout, connection).
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Empty => "empty",
            Outcome::Unusable => "unusable",
            Outcome::Error => "error",
        }
    }
}

/// One model call attempt to record.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub latency_ms: i64,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub created_at: i64,
}

/// Stores one call in the caller's transaction (the worker's ack, so a stored result and
/// its cost commit together).
pub fn record(tx: &Transaction, r: &CallRecord) -> Result<i64> {
    let id = tx
        .prepare_cached(
            "INSERT INTO model_calls
                 (provider, model, purpose, session_id, job_ids, prompt_chars, input_tokens,
                  output_tokens, latency_ms, outcome, error, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
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
                r.latency_ms,
                r.outcome.as_str(),
                r.error
                    .as_deref()
                    .map(|e| crate::worker::prompt::cap(e, 2_000)),
                r.created_at
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
}
