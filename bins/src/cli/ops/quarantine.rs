//! `cairn quarantine list | show | clear | replay`: the hook inputs cairn could not use.

use cairn_core::capture::handle::{self, Replayed};
use cairn_core::capture::quarantine::{self, Clear};
use cairn_core::clock;

use super::{QuarantineCommand, emit, one_line, open, outln, print_json};
use crate::cli::Ctx;
use crate::exit;

pub fn quarantine(ctx: &Ctx, cmd: &QuarantineCommand) -> anyhow::Result<u8> {
    let now = clock::now_ms();
    match cmd {
        QuarantineCommand::List { limit, json } => {
            let conn = open(ctx)?;
            let rows = quarantine::list(&conn, *limit)?;
            if *json {
                print_json(&rows)?;
            } else if rows.is_empty() {
                crate::cli::out::note!(
                    "the quarantine is empty: every hook input so far was usable"
                );
            } else {
                let mut o = String::new();
                outln!(
                    o,
                    "{:>6}  {:<20}  {:<10} {:<18} {:>9}  reason",
                    "id",
                    "time",
                    "kind",
                    "event",
                    "bytes"
                );
                for r in &rows {
                    outln!(
                        o,
                        "{:>6}  {:<20}  {:<10} {:<18} {:>9}  {}",
                        r.id,
                        clock::iso_utc(r.created_at),
                        r.kind,
                        one_line(r.event.as_deref().unwrap_or("-"), 18),
                        r.raw_len,
                        one_line(&r.reason, 70)
                    );
                }
                outln!(
                    o,
                    "\n`cairn quarantine show ID` prints an input; `cairn quarantine replay` tries them \
                     again; `cairn quarantine clear` removes them."
                );
                emit(&o)?;
            }
            Ok(if rows.is_empty() {
                exit::NEGATIVE
            } else {
                exit::OK
            })
        }
        QuarantineCommand::Show { id, json } => {
            let conn = open(ctx)?;
            let Some(row) = quarantine::get(&conn, *id)? else {
                anyhow::bail!("no quarantined input {id}; see `cairn quarantine list`");
            };
            if *json {
                print_json(&row)?;
                return Ok(exit::OK);
            }
            let mut o = String::new();
            outln!(o, "quarantined input {} ({})", row.id, row.kind);
            outln!(
                o,
                "event      {}",
                row.event.as_deref().unwrap_or("unknown")
            );
            outln!(o, "received   {}", clock::iso_utc(row.created_at));
            outln!(o, "reason     {}", row.reason);
            // The stored copy is cleaned (private spans and secrets removed, which can make
            // it longer or shorter) and capped, so its length says nothing about the cut.
            outln!(
                o,
                "size       {} bytes received; the copy below is cleaned (private spans and \
                 secrets removed) and at most {} KiB",
                row.raw_len,
                quarantine::MAX_RAW_BYTES / 1024
            );
            outln!(o, "\n{}", row.raw);
            emit(&o)?;
            Ok(exit::OK)
        }
        QuarantineCommand::Replay { id, all, json } => {
            let ids: &[i64] = if *all { &[] } else { id };
            let mut conn = open(ctx)?;
            let results = handle::replay(&mut conn, ctx.settings(), ids).map_err(super::explain)?;
            let replayed = results
                .iter()
                .filter(|r| matches!(r, Replayed::Captured { .. } | Replayed::Nothing { .. }))
                .count();
            if *json {
                print_json(&results)?;
            } else {
                let mut o = String::new();
                for r in &results {
                    match r {
                        Replayed::Captured { id, event } => {
                            outln!(o, "{id:>6}  captured ({event})")
                        }
                        Replayed::Nothing { id, event } => {
                            outln!(
                                o,
                                "{id:>6}  understood, nothing to store ({event}); removed"
                            )
                        }
                        Replayed::Rejected { id, reason } => {
                            outln!(o, "{id:>6}  still not usable: {}", one_line(reason, 70))
                        }
                        Replayed::Cut { id } => outln!(
                            o,
                            "{id:>6}  cannot be replayed: the stored copy is not the whole input"
                        ),
                        Replayed::Unknown { id } => outln!(o, "{id:>6}  no such input"),
                    }
                }
                outln!(
                    o,
                    "replayed {replayed} of {} quarantined input{}",
                    results.len(),
                    if results.len() == 1 { "" } else { "s" }
                );
                emit(&o)?;
            }
            Ok(if replayed == 0 {
                exit::NEGATIVE
            } else {
                exit::OK
            })
        }
        QuarantineCommand::Clear {
            id,
            older_than,
            all,
            json,
        } => {
            let which = if !id.is_empty() {
                Clear::Ids(id.clone())
            } else if let Some(age) = older_than {
                Clear::Before(now.saturating_sub(*age))
            } else if *all {
                Clear::All
            } else {
                anyhow::bail!("say which inputs to clear: --id, --older-than or --all");
            };
            let mut conn = open(ctx)?;
            let cleared = quarantine::clear(&mut conn, &which).map_err(super::explain)?;
            if *json {
                print_json(&serde_json::json!({ "cleared": cleared }))?;
            } else {
                emit(&format!(
                    "cleared {cleared} quarantined input{}\n",
                    if cleared == 1 { "" } else { "s" }
                ))?;
            }
            Ok(if cleared == 0 {
                exit::NEGATIVE
            } else {
                exit::OK
            })
        }
    }
}
