//! `cairn queue list | show | replay | discard | purge`.

use cairn_core::clock;
use cairn_core::queue;
use cairn_core::queue::stats::ListFilter;
use cairn_core::text;

use super::{QueueCommand, emit, one_line, open, outln, print_json};
use crate::cli::Ctx;
use crate::exit;

pub fn queue(ctx: &Ctx, cmd: &QueueCommand) -> anyhow::Result<u8> {
    let now = clock::now_ms();
    let policy = queue::claim::Policy::from_settings(ctx.settings());
    match cmd {
        QueueCommand::List {
            status,
            session,
            limit,
            json,
        } => {
            let conn = open(ctx)?;
            let rows = queue::stats::list(
                &conn,
                &ListFilter {
                    status: *status,
                    session_id: session.clone(),
                    limit: *limit,
                },
            )?;
            if *json {
                print_json(&rows)?;
            } else if rows.is_empty() {
                crate::cli::out::note!("no jobs match");
            } else {
                // The current state of each job (its history, tries and old errors, is in
                // `cairn queue show`). On a terminal: short session ids, and the state cut
                // to the width (on a line of its own when the row leaves it too little
                // room). In a pipe: everything whole.
                let width = crate::cli::out::width();
                let session_w = if width.is_some_and(|w| w < 120) {
                    9
                } else {
                    36
                };
                let session = |id: &str| match width {
                    Some(w) if w < 120 && id.chars().count() > 9 => {
                        format!("{}…", text::head(id, 8, text::Unit::Chars))
                    }
                    _ => id.to_string(),
                };
                let fixed = 7 + 2 + 8 + 1 + 11 + 1 + session_w + 1 + 4 + 2 + 20 + 2;
                let room = width.map(|w| w.saturating_sub(fixed));
                let own_line = room.is_some_and(|r| r < 24);
                let mut o = String::new();
                let head = format!(
                    "{:>7}  {:<8} {:<11} {:<session_w$} {:>4}  {:<20}",
                    "id", "status", "kind", "session", "turn", "updated"
                );
                if own_line {
                    outln!(o, "{}", head.trim_end());
                } else {
                    outln!(o, "{head}  now");
                }
                for r in &rows {
                    let error = state(r, &policy, now);
                    let error = error.as_str();
                    let row = format!(
                        "{:>7}  {:<8} {:<11} {:<session_w$} {:>4}  {:<20}",
                        r.id,
                        r.status.as_str(),
                        r.kind.as_str(),
                        session(&r.session_id),
                        r.prompt_number,
                        clock::iso_utc(r.updated_at),
                    );
                    match (width, room) {
                        (Some(w), _) if own_line => {
                            outln!(o, "{}", row.trim_end());
                            if !error.is_empty() {
                                outln!(
                                    o,
                                    "         {}",
                                    one_line(error, w.saturating_sub(10).max(10))
                                );
                            }
                        }
                        (Some(_), Some(room)) => {
                            outln!(
                                o,
                                "{}",
                                format!("{row}  {}", one_line(error, room.saturating_sub(1)))
                                    .trim_end()
                            );
                        }
                        _ => outln!(
                            o,
                            "{}",
                            format!("{row}  {}", error.replace('\n', " ")).trim_end()
                        ),
                    }
                }
                emit(&o)?;
            }
            Ok(if rows.is_empty() {
                exit::NEGATIVE
            } else {
                exit::OK
            })
        }
        QueueCommand::Show { id, json } => {
            let conn = open(ctx)?;
            let Some((row, payload, errors)) = queue::stats::get(&conn, *id)? else {
                anyhow::bail!("no job {id} in the queue; see `cairn queue list`");
            };
            let payload_value: serde_json::Value =
                serde_json::from_str(&payload).unwrap_or(serde_json::Value::String(payload));
            if *json {
                print_json(&serde_json::json!({
                    "job": row,
                    "payload": payload_value,
                    "errors": errors,
                }))?;
                return Ok(exit::OK);
            }
            let mut o = String::new();
            outln!(
                o,
                "job {} ({}, {})",
                row.id,
                row.kind.as_str(),
                row.status.as_str()
            );
            outln!(
                o,
                "session    {} (project {}, turn {})",
                row.session_id,
                row.project,
                row.prompt_number
            );
            outln!(o, "attempts   {} of {}", row.attempts, row.max_attempts);
            outln!(o, "created    {}", clock::iso_utc(row.created_at));
            outln!(o, "updated    {}", clock::iso_utc(row.updated_at));
            if row.status == queue::claim::JobStatus::Pending {
                outln!(o, "available  {}", clock::iso_utc(row.available_at));
                outln!(
                    o,
                    "now        {}",
                    why_waiting(queue::stats::wait(&row, &policy, now), now)
                );
            }
            if let Some(w) = &row.claimed_by {
                outln!(o, "claimed by {w}");
            }
            if let Some(t) = row.lease_until {
                outln!(o, "lease until {}", clock::iso_utc(t));
            }
            if let Some(t) = row.done_at {
                outln!(o, "done       {}", clock::iso_utc(t));
            }
            outln!(o, "dedupe key {}", row.dedupe_key);
            outln!(
                o,
                "\npayload:\n{}",
                serde_json::to_string_pretty(&payload_value)?
            );
            if errors.is_empty() {
                outln!(o, "\nno failed attempts");
            } else {
                outln!(o, "\nfailed attempts:");
                for e in &errors {
                    outln!(
                        o,
                        "  #{} at {}: {}",
                        e.attempt,
                        clock::iso_utc(e.created_at),
                        e.error
                    );
                }
            }
            emit(&o)?;
            Ok(exit::OK)
        }
        QueueCommand::Replay { which, json } => {
            let mut conn = open(ctx)?;
            let revived = queue::admin::replay(&mut conn, &which.selector(now), now)
                .map_err(super::explain)?;
            if *json {
                print_json(&serde_json::json!({ "revived": revived }))?;
            } else if revived == 0 {
                emit(&format!("revived {NONE_SKIPPED}"))?;
            } else {
                emit(&format!(
                    "revived {}; the worker picks {} up again\n",
                    jobs(revived, "skipped job"),
                    if revived == 1 { "it" } else { "them" }
                ))?;
            }
            Ok(found(revived))
        }
        QueueCommand::Discard { which, json } => {
            let mut conn = open(ctx)?;
            let discarded = queue::admin::discard(&mut conn, &which.selector(now), now)
                .map_err(super::explain)?;
            if *json {
                print_json(&serde_json::json!({ "discarded": discarded }))?;
            } else if discarded == 0 {
                emit(&format!("discarded {NONE_SKIPPED}"))?;
            } else {
                emit(&format!(
                    "discarded {} with {} failed attempts\n",
                    jobs(discarded, "skipped job"),
                    if discarded == 1 { "its" } else { "their" }
                ))?;
            }
            Ok(found(discarded))
        }
        QueueCommand::Purge { older_than, json } => {
            let keep_ms = older_than.unwrap_or_else(|| {
                i64::try_from(ctx.settings().queue.retention_days)
                    .unwrap_or(i64::MAX / 86_400_000)
                    .saturating_mul(86_400_000)
            });
            let mut conn = open(ctx)?;
            let purged = queue::admin::purge(&mut conn, now.saturating_sub(keep_ms))
                .map_err(super::explain)?;
            if *json {
                print_json(&serde_json::json!({ "purged": purged }))?;
            } else {
                emit(&format!(
                    "purged {} last changed before {}\n",
                    jobs(purged, "processed job"),
                    clock::iso_utc(now.saturating_sub(keep_ms))
                ))?;
            }
            Ok(exit::OK)
        }
    }
}

const NONE_SKIPPED: &str =
    "0 jobs: none of the selected jobs is skipped (see `cairn queue list --status skipped`)\n";

/// `1 skipped job`, `3 skipped jobs`.
fn jobs(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Exit code of a command that acts on selected jobs: 1 (like grep) when none was.
fn found(n: usize) -> u8 {
    if n == 0 { exit::NEGATIVE } else { exit::OK }
}

/// Why a pending job waits, in words: `ready`, `waiting for the batch window, ready in
/// 1m40s (sooner when its turn ends)`, `retry at … (in 30s)`.
pub(super) fn why_waiting(wait: queue::stats::Wait, now: i64) -> String {
    use queue::stats::Wait;
    let at = |t: i64| format!("{} (in {})", clock::iso_utc(t), super::age(t - now));
    match wait {
        Wait::Ready => "ready".into(),
        Wait::BatchWindow(t) => format!(
            "waiting for the batch window, ready in {} (sooner when its turn ends or the batch fills; batch.max_wait_secs)",
            super::age(t - now)
        ),
        Wait::Retry(t) => format!("retry at {}", at(t)),
        Wait::Released(t) => format!(
            "given back without an attempt counted, taken again at {}",
            at(t)
        ),
    }
}

/// What a job is doing now, in a few words: ready, waiting (for what, until when),
/// claimed, done, or skipped (why: the error that decides whether to replay it).
fn state(r: &queue::stats::JobRow, policy: &queue::claim::Policy, now: i64) -> String {
    use queue::claim::JobStatus;
    match r.status {
        JobStatus::Pending => why_waiting(queue::stats::wait(r, policy, now), now),
        JobStatus::Claimed => format!(
            "claimed by {}",
            r.claimed_by.as_deref().unwrap_or("a worker")
        ),
        JobStatus::Done => r
            .done_at
            .map(|t| format!("done at {}", clock::iso_utc(t)))
            .unwrap_or_else(|| "done".into()),
        // Whole: a terminal cuts it to its width, a pipe gets all of it.
        JobStatus::Skipped => format!(
            "skipped: {}",
            r.last_error.as_deref().unwrap_or("").replace('\n', " ")
        ),
    }
}
