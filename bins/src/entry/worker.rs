//! `cairn-worker`: the consumer. Claims ready batches from the queue, has a model (or the
//! offline extractor) turn them into observations and turn summaries, stores them and
//! acks. Runs in the foreground, for systemd, launchd, supervisord, or a hook that starts
//! it on demand.
//!
//! Exit codes: 0 after a clean stop (SIGTERM/SIGINT, `--once` drained, `--autostarted`
//! idle), and also when another worker already holds the data dir's lock: that is not a
//! failure (the work is being done), and a process manager must not restart-loop on it.
//! 2 on an error (unusable database or settings). A second SIGTERM/SIGINT while shutting
//! down exits at once with 1.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use crate::{exit, logging};
use cairn_core::settings::Settings;
use cairn_core::store::lock::{self, WorkerLock};
use cairn_core::store::paths::DataDir;
use cairn_core::worker;
use cairn_core::worker::pipeline::{Control, Options, Periodic};

/// cairn's worker: compresses queued Claude Code events into observations and summaries.
#[derive(Debug, Parser)]
#[command(name = "cairn-worker", version, max_term_width = 100)]
struct Args {
    /// Process what is ready now, then exit.
    #[arg(long)]
    once: bool,
    /// Also log to stderr (for journald, launchd and supervisord logs); on by itself when
    /// stderr is a terminal.
    #[arg(long)]
    log_stderr: bool,
    /// Started on demand by a hook: exit after `worker.idle_exit_secs` with nothing to do.
    #[arg(long)]
    autostarted: bool,
    /// Data dir to use instead of CAIRN_DATA_DIR or ~/.cairn.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

/// The whole worker process; `args` include the program name, as `std::env::args_os`.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = Args::parse_from(args);
    match run(args) {
        Ok(code) => exit::code(code),
        Err(e) => {
            let msg = exit::chain(&e);
            log::error!("{msg}");
            let _ = writeln!(std::io::stderr(), "error: {msg}");
            exit::code(exit::ERROR)
        }
    }
}

fn run(args: Args) -> anyhow::Result<u8> {
    let dir = match &args.data_dir {
        Some(d) => DataDir::new(d),
        None => DataDir::from_env()?,
    };
    let loaded = Settings::load(&dir)?;
    use std::io::IsTerminal as _;
    let target = if args.log_stderr || std::io::stderr().is_terminal() {
        logging::Target::FileAndStderr
    } else {
        logging::Target::File
    };
    logging::init(
        "worker",
        Some(&dir.logs()),
        target,
        loaded.settings.log_level(),
    );
    for w in &loaded.warnings {
        log::warn!("{w}");
    }
    // A data dir with no database yet is a fresh install (the first hook creates it too), or
    // a misspelt `--data-dir` or CAIRN_DATA_DIR: say where, so the second is seen.
    if !dir.db().exists() {
        let msg = format!(
            "no database at {}: the worker makes a new, empty one there, which hooks fill (if your memories are elsewhere, set CAIRN_DATA_DIR or --data-dir)",
            dir.db().display()
        );
        log::warn!("{msg}");
        let _ = writeln!(std::io::stderr(), "cairn-worker: {msg}");
    }
    dir.ensure()?;
    let now = cairn_core::clock::now_ms();
    let Some(held) = WorkerLock::try_acquire(&dir.worker_lock(), now)? else {
        let pid = lock::holder(&dir.worker_lock())
            .ok()
            .flatten()
            .map(|h| format!(" (pid {})", h.pid))
            .unwrap_or_default();
        let msg = format!(
            "another cairn-worker is already running on {}{pid}; exiting",
            dir.root().display()
        );
        log::info!("{msg}");
        let _ = writeln!(std::io::stderr(), "cairn-worker: {msg}");
        return Ok(exit::OK);
    };

    let control = Control::default();
    register_signals(&control).context("failed to install signal handlers")?;

    let settings = loaded.settings;
    let idle_exit = (args.autostarted && settings.worker.idle_exit_secs > 0)
        .then(|| Duration::from_secs(settings.worker.idle_exit_secs));
    let opts = Options {
        worker_id: worker::pipeline::worker_id(now),
        once: args.once,
        idle_exit,
    };
    let logs = dir.logs();
    let periodic: Periodic = Box::new(move |s: &Settings, now: i64| {
        logging::prune(&logs, s.log.keep_days, now);
    });
    let reload_dir = dir.clone();
    let reload = move || {
        let l = Settings::load(&reload_dir)?;
        for w in &l.warnings {
            log::warn!("{w}");
        }
        Ok(l.settings)
    };
    let mut settings = settings;
    let mut periodic = Some(periodic);
    let mut recovered = false;
    let mut done = worker::pipeline::Report::default();
    loop {
        let report = match worker::pipeline::run(
            &dir,
            settings.clone(),
            &reload,
            opts.clone(),
            control.clone(),
            periodic.take(),
        ) {
            Ok(r) => r,
            // A damaged database, met at the start or by any thread of the run: recovered
            // once per run (a second failure is an error).
            Err(e) if e.is_corrupt() && !recovered => {
                recovered = true;
                cairn_core::store::recover::recover_and_report(
                    &dir,
                    &e,
                    Duration::from_millis(settings.capture.lock_wait_ms),
                    cairn_core::clock::now_ms(),
                )
                .context("cannot recover the damaged database")
                .map_err(|e| stopped(&dir, e))?;
                worker::pipeline::Report {
                    reopen: true,
                    ..Default::default()
                }
            }
            Err(e) => {
                return Err(stopped(
                    &dir,
                    anyhow::Error::new(e).context("worker stopped on an error"),
                ));
            }
        };
        done.batches_done += report.batches_done;
        done.batches_failed += report.batches_failed;
        done.batches_released += report.batches_released;
        done.observations += report.observations;
        done.summaries += report.summaries;
        if !report.reopen || control.stop.load(Ordering::SeqCst) {
            break;
        }
        // The database file was deleted or replaced: run again on the file now there
        // (created when missing), with the settings as they are now.
        log::warn!("reopening the database {}", dir.db().display());
        settings = reload().unwrap_or(settings);
        let logs = dir.logs();
        periodic = Some(Box::new(move |s: &Settings, now: i64| {
            logging::prune(&logs, s.log.keep_days, now);
        }));
    }
    drop(held);
    if args.once {
        let line = summary(&done, skipped_since(&dir, now));
        log::info!("{line}");
        println!("{line}");
    }
    Ok(if control.urgent.load(Ordering::SeqCst) {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}

/// `e`, recorded where `cairn status` finds it (`store::incidents::worker_failure`): a
/// worker a hook started exits at once on it, and only its log would say why.
fn stopped(dir: &DataDir, e: anyhow::Error) -> anyhow::Error {
    let now = cairn_core::clock::now_ms();
    if let Err(not) =
        cairn_core::store::incidents::record_worker_failure(dir, &exit::chain(&e), now)
    {
        log::warn!("{not}");
    }
    e
}

/// What a `--once` run did, in one line: `cairn-worker: 3 batches done (5 observations, 1
/// summary), 1 failed, 0 given back; 0 jobs skipped`.
fn summary(r: &worker::pipeline::Report, skipped: Option<i64>) -> String {
    let n = |k: u64, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
    let skipped = match skipped {
        Some(k) => n(k.max(0).unsigned_abs(), "job skipped", "jobs skipped"),
        None => "skipped jobs unknown".into(),
    };
    format!(
        "cairn-worker: {} done ({}, {}), {} failed, {} given back; {skipped}",
        n(r.batches_done, "batch", "batches"),
        n(r.observations, "observation", "observations"),
        n(r.summaries, "summary", "summaries"),
        r.batches_failed,
        r.batches_released,
    )
}

/// Jobs that ended skipped since `since` (the run's start); `None` when the database cannot
/// say.
fn skipped_since(dir: &DataDir, since: i64) -> Option<i64> {
    let conn = cairn_core::store::db::open_data_dir(
        dir,
        cairn_core::store::db::OpenOptions {
            create: false,
            ..Default::default()
        },
    )
    .ok()?;
    cairn_core::queue::stats::skipped_since(&conn, since).ok()
}

/// SIGTERM/SIGINT set the stop flag; a second one while stopping sets `urgent` (the batches
/// in flight are released at once, so no attempt is lost to a lease left behind) and, if
/// the worker has still not exited a few seconds later, exits with 1. SIGHUP asks for a
/// settings reload.
fn register_signals(control: &Control) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let control = control.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGHUP {
                    control.reload.store(true, Ordering::SeqCst);
                } else if !control.stop.swap(true, Ordering::SeqCst) {
                    log::info!("stop requested (signal {sig})");
                } else if !control.urgent.swap(true, Ordering::SeqCst) {
                    std::thread::spawn(|| {
                        std::thread::sleep(URGENT_EXIT_AFTER);
                        log::error!(
                            "not stopped {URGENT_EXIT_AFTER:?} after a second stop request; exiting"
                        );
                        std::process::exit(i32::from(exit::NEGATIVE));
                    });
                }
            }
        })?;
    Ok(())
}

/// How long a second stop request waits for the release before exiting regardless.
const URGENT_EXIT_AFTER: Duration = Duration::from_secs(5);
