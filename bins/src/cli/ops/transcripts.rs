//! `cairn import transcripts`: what was found and what it will cost, a confirmation, then
//! the import with a progress bar.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use cairn_core::capture::transcript::{self, Options, Report, Source};
use cairn_core::clock;
use cairn_core::store::db::{self, OpenOptions};

use super::{bytes, emit, explain, open_or_create, outln, print_json};
use crate::cli::Ctx;
use crate::exit;

pub struct Args<'a> {
    pub paths: &'a [PathBuf],
    pub project: Option<&'a str>,
    pub since: Option<i64>,
    pub yes: bool,
    pub dry_run: bool,
    pub json: bool,
}

/// A transcript written to within this long may still be growing: its last turn is left
/// open and its session not ended (a later import or the worker's reconciliation finishes
/// it).
const QUIET_MS: i64 = 10 * 60_000;

/// The settings with `model.provider` resolved as the worker resolves it (`auto`: an API
/// key, else a logged-in `claude` CLI, else the offline extractor), and why, for the
/// estimate.
fn effective(
    settings: &cairn_core::settings::Settings,
) -> (cairn_core::settings::Settings, String) {
    let env = |k: &str| std::env::var(k).ok();
    let r = cairn_core::worker::model::resolve(&settings.model, &env);
    let mut s = settings.clone();
    if r.provider != "unknown" {
        s.model.provider = r.provider.into();
    }
    (s, r.why)
}

pub fn import(ctx: &Ctx, args: &Args) -> anyhow::Result<u8> {
    let sources = find(args)?;
    let (resolved, why) = effective(ctx.settings());
    let settings = &resolved;
    let now = clock::now_ms();
    let total: u64 = sources.iter().map(|s| s.size).sum();
    let tty = std::io::stderr().is_terminal();
    let opts = Options {
        project: args.project.map(str::to_string),
        dry_run: true,
        mark_ended: true,
        quiet_ms: QUIET_MS,
    };
    // The plan reads against the memory there is, writing nothing (a data dir that does
    // not exist yet is not created for it).
    let mut conn = if ctx.data_dir.db().exists() {
        open_or_create(ctx)?
    } else {
        db::open(Path::new(":memory:"), OpenOptions::default()).map_err(explain)?
    };
    let reading = progress_bar(tty, total, "reading");
    let plan = transcript::import(&mut conn, &sources, settings, &opts, now, &mut |n| {
        reading.inc(n)
    })
    .map_err(explain)?;
    reading.finish_and_clear();
    let calls = plan.estimated_model_calls(settings);
    let tokens = plan.estimated_input_tokens(settings);
    if args.json && args.dry_run {
        print_json(&serde_json::json!({
            "plan": plan,
            "estimated_model_calls": calls,
            "estimated_input_tokens": tokens,
            "provider": settings.model.provider,
        }))?;
        return Ok(exit::OK);
    }
    let mut o = String::new();
    describe_plan(&mut o, &plan, settings, &why, calls, tokens);
    let new = plan.total();
    let nothing = new.new_jobs == 0 && new.prompts <= new.existing;
    if nothing {
        outln!(o, "nothing to import");
    }
    if nothing && !args.dry_run {
        // Nothing to confirm: a success, whatever the terminal.
        if args.json {
            print_json(&plan)?;
        } else {
            emit(&o)?;
        }
        return Ok(exit::OK);
    }
    if args.dry_run {
        outln!(o, "dry run: nothing was written");
        emit(&o)?;
        return Ok(exit::OK);
    }
    if args.json {
        // JSON output is for scripts: the report of the import follows alone.
        o.clear();
    } else {
        emit(&o)?;
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            anyhow::bail!(
                "not importing without confirmation: run it on a terminal, or pass --yes (--dry-run only reports)"
            );
        }
        eprint!("import and queue these? [y/N] ");
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer).ok();
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
            eprintln!("nothing imported");
            return Ok(exit::NEGATIVE);
        }
    }
    drop(conn);
    let mut conn = open_or_create(ctx)?;
    let opts = Options {
        dry_run: false,
        ..opts
    };
    let queueing = progress_bar(tty, total, "queueing");
    let report = transcript::import(&mut conn, &sources, settings, &opts, now, &mut |n| {
        queueing.inc(n)
    })
    .map_err(explain)?;
    queueing.finish_and_clear();
    // Jobs wait for a worker: start one as a hook would, or say how.
    let worker = if report.added == 0 {
        None
    } else if cairn_core::store::lock::holder(&ctx.data_dir.worker_lock())
        .ok()
        .flatten()
        .is_some()
    {
        Some("the running worker turns them into memories".to_string())
    } else if !settings.worker.autostart {
        Some(
            "start the worker (`cairn-worker`; worker.autostart is off) to turn them into memories"
                .into(),
        )
    } else {
        Some(match crate::entry::hook::autostart(&ctx.data_dir, settings, Some(&conn)) {
            Some(pid) => format!("started the worker (pid {pid}), which turns them into memories"),
            None => "start the worker (`cairn-worker`) to turn them into memories: none could be started here (`cairn -v` says why)".into(),
        })
    };
    if args.json {
        print_json(&report)?;
        return Ok(exit::OK);
    }
    let mut o = String::new();
    let t = report.total();
    outln!(
        o,
        "imported {} events ({} already there, {} forgotten) from {} into {}",
        report.added,
        t.existing,
        t.forgotten,
        transcripts(report.files as usize),
        ctx.data_dir.db().display()
    );
    if let Some(by) = worker {
        if settings.model.daily_token_budget > 0 {
            outln!(
                o,
                "{by} within model.daily_token_budget ({} tokens a day); `cairn status` shows how far it is",
                settings.model.daily_token_budget
            );
        } else {
            outln!(o, "{by}; `cairn status` shows how far it is");
        }
    }
    emit(&o)?;
    Ok(exit::OK)
}

fn describe_plan(
    o: &mut String,
    plan: &Report,
    settings: &cairn_core::settings::Settings,
    why: &str,
    calls: u64,
    tokens: u64,
) {
    outln!(
        o,
        "found {} ({})",
        transcripts(plan.files as usize),
        bytes(plan.bytes)
    );
    if !plan.projects.is_empty() {
        outln!(
            o,
            "{:<24} {:>8} {:>8} {:>10} {:>10}",
            "project",
            "sessions",
            "turns",
            "tool calls",
            "new jobs"
        );
    }
    for (name, c) in &plan.projects {
        outln!(
            o,
            "{:<24} {:>8} {:>8} {:>10} {:>10}",
            name,
            c.sessions,
            c.turns,
            c.tool_events,
            c.new_jobs
        );
    }
    let t = plan.total();
    if t.existing > 0 {
        outln!(o, "already in memory: {} events", t.existing);
    }
    if t.forgotten > 0 {
        outln!(o, "forgotten (left out): {} events", t.forgotten);
    }
    if plan.not_captured > 0 {
        outln!(
            o,
            "not captured (excluded projects, skipped tools): {} events",
            plan.not_captured
        );
    }
    let s = &plan.stats;
    if s.unknown_records() > 0 || s.bad_lines > 0 || s.oversized_lines > 0 {
        outln!(
            o,
            "skipped: {} records of unknown types, {} unreadable lines, {} over-long lines",
            s.unknown_records(),
            s.bad_lines,
            s.oversized_lines
        );
    }
    if t.open_turns > 0 {
        let when = plan
            .open_until
            .map(|t| format!(" from {} UTC", clock::minute_utc(t)))
            .unwrap_or_default();
        let (n, file, it) = if t.open_turns == 1 {
            ("1 turn is".to_string(), "its transcript", "it")
        } else {
            (
                format!("{} turns are", t.open_turns),
                "their transcripts",
                "them",
            )
        };
        outln!(
            o,
            "{n} still open: {file} changed in the last {} minutes, so the session may still \
             be going; a turn's end and summary are not counted yet. An import{when} \
             includes {it} (and the worker does, once a session it captured is over)",
            QUIET_MS / 60_000
        );
    }
    if calls == 0 {
        outln!(
            o,
            "cost: no model calls (provider {}: the offline extractor; {why})",
            settings.model.provider
        );
    } else {
        let budget = settings.model.daily_token_budget;
        let cli = settings.model.provider == "claude-cli";
        outln!(
            o,
            "cost: about {calls} model calls and {tokens} input tokens with {}{} ({why}){}{}",
            settings.model.provider,
            if settings.model.model.is_empty() {
                String::new()
            } else {
                format!(" {}", settings.model.model)
            },
            if cli {
                ", spent from your Claude subscription's usage limits"
            } else {
                ""
            },
            if budget > 0 {
                format!(
                    "; model.daily_token_budget ({budget} a day) spreads them over about {} days",
                    tokens.div_ceil(budget).max(1)
                )
            } else {
                String::new()
            }
        );
    }
}

fn find(args: &Args) -> anyhow::Result<Vec<Source>> {
    let mut out = Vec::new();
    if args.paths.is_empty() {
        let dir =
            transcript::projects_dir().context("HOME is not set: pass the transcripts' paths")?;
        if !dir.is_dir() {
            anyhow::bail!(
                "no Claude Code transcripts at {} (pass the transcripts' paths, or set CLAUDE_CONFIG_DIR)",
                dir.display()
            );
        }
        out = transcript::list(&dir, args.since);
    }
    for p in args.paths {
        if p.is_dir() {
            let mut found = transcript::list(p, args.since);
            // A project's own folder of transcripts.
            found.extend(
                std::fs::read_dir(p)
                    .with_context(|| format!("cannot read {}", p.display()))?
                    .flatten()
                    .map(|e| e.path())
                    .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
                    .filter_map(|f| Source::of(&f).ok())
                    .filter(|s| args.since.is_none_or(|t| s.mtime_ms >= t)),
            );
            out.extend(found);
        } else {
            out.push(Source::of(p).with_context(|| format!("cannot read {}", p.display()))?);
        }
    }
    out.sort_by(|a, b| (a.mtime_ms, &a.path).cmp(&(b.mtime_ms, &b.path)));
    out.dedup_by(|a, b| a.path == b.path);
    Ok(out)
}

fn progress_bar(tty: bool, total: u64, what: &str) -> ProgressBar {
    if !tty {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:>9} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}, {eta} left",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// `1 transcript`, `3 transcripts`.
fn transcripts(n: usize) -> String {
    if n == 1 {
        "1 transcript".into()
    } else {
        format!("{n} transcripts")
    }
}
