//! The worker pipeline: a claimer, `worker.concurrency` model threads and a single writer,
//! joined by crossbeam channels.
//!
//! ```text
//! claimer (this thread) ── Work ──► model threads ── Done ──► writer ── Finished ──► claimer
//!   claim_batch, read context        build prompts, call      ack + results + model_calls
//!   heartbeat, rescue, housekeeping  the provider, parse      in one transaction, or fail
//!                                    ── Started ──► writer: a call's row, before the call
//! ```
//!
//! Invariants:
//! - no transaction is held across a model call: the claimer reads, the model threads touch
//!   no database, the writer writes (a call's `started` row too, before the call is made);
//! - results are stored only through `queue::claim::ack`'s closure, so a batch whose lease was
//!   lost stores nothing, and a replayed batch stores no duplicate (content hashes);
//! - a split batch keeps what succeeded: the chunks before a failed one are acked with
//!   their results, the rest failed or released in the same transaction;
//! - a context-length error is not an attempt: the rest of the batch is split smaller and
//!   called again at once, and the size is remembered for the provider and model;
//! - a rate limit's `Retry-After` is waited out in the queue, without counting an attempt;
//! - one in-flight batch per session (the queue's rule), so a turn's summary is built after
//!   its observations are stored;
//! - on stop (SIGTERM/SIGINT) the claimer claims nothing more, waits up to
//!   `worker.shutdown_grace_secs` for batches in flight, then releases the rest without
//!   counting an attempt and kills any `claude` process group still running.
//!
//! Each stage has its file, and every call goes down: `claimer` (claiming, reading what a
//! prompt needs, shutdown) uses `housekeeping` (the periodic tasks between claims);
//! `calls` is a model thread (split, prompt, call with retries, parse); `writer` is the
//! single writer; `messages`, the lowest, holds what the threads send each other. This
//! file starts the threads and joins them.

mod calls;
mod claimer;
mod housekeeping;
mod messages;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::queue;
use crate::queue::claim::RescueScope;
use crate::queue::workers;
use crate::settings::Settings;
use crate::store::db;
use crate::store::paths::DataDir;
use calls::model_thread;
use claimer::{Claimer, build_provider};
pub use claimer::{Control, Options};
pub use housekeeping::Periodic;
use housekeeping::{Housekeeping, file_identity};
use messages::{Damage, Finished, ToWriter, Work};
pub use writer::Report;
use writer::writer_thread;

/// How long a stop waits for the syncer (in a step with the server) before going on.
const SYNCER_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// A worker id: `<host name>:<pid>:<start ms>`.
pub fn worker_id(now: i64) -> String {
    let host = crate::sync::host_name();
    format!("{host}:{}:{now}", std::process::id())
}

/// Runs the worker until stopped (or, with `once`, until nothing is ready; with
/// `idle_exit`, until idle that long). The caller holds the worker lock.
/// `reload` loads fresh settings on SIGHUP; `periodic` runs in housekeeping.
pub fn run(
    dir: &DataDir,
    settings: Settings,
    reload: &dyn Fn() -> Result<Settings>,
    opts: Options,
    control: Control,
    periodic: Option<Periodic>,
) -> Result<Report> {
    let provider = build_provider(&settings)?;
    let concurrency = provider.concurrency(settings.worker.concurrency).max(1) as usize;
    log::info!(
        "worker {} starting: provider {} ({}), concurrency {}{}",
        opts.worker_id,
        provider.name(),
        provider.model(),
        concurrency,
        if settings.worker.concurrency == 0 && provider.is_local() {
            " (a model server on this machine: one call at a time; set worker.concurrency to change it)"
        } else {
            ""
        }
    );
    // Damage is found now, before anything is written or applied to the file (the caller
    // recovers it), not when a query happens to read it.
    if let Some(damage) = crate::store::recover::check(dir, std::time::Duration::from_secs(10))? {
        return Err(damage);
    }
    let mut conn = db::open_data_dir(dir, db::OpenOptions::default())?;
    let db_identity = file_identity(&dir.db());
    // Room to count hook events lost to a full disk, allocated while there is room.
    if let Err(e) = crate::store::incidents::prepare_lost(dir) {
        log::warn!("{e}");
    }
    let writer_conn = db::open_data_dir(dir, db::OpenOptions::default())?;
    let now = now_ms();
    let uses = (provider.name(), provider.model());
    workers::register(&mut conn, &opts.worker_id, std::process::id(), uses, now)?;
    // We hold the single-instance lock: every claim not ours belongs to a dead worker.
    let max_attempts = queue::claim::Policy::from_settings(&settings).max_attempts;
    queue::claim::rescue(
        &mut conn,
        RescueScope::AllBut(&opts.worker_id),
        max_attempts,
        now,
    )?;

    let budget_spent = Arc::new(AtomicBool::new(false));
    let (work_tx, work_rx) = crossbeam_channel::bounded::<Work>(concurrency);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<ToWriter>();
    let (fin_tx, fin_rx) = crossbeam_channel::unbounded::<Finished>();

    let mut model_threads = Vec::new();
    for i in 0..concurrency {
        let rx = work_rx.clone();
        let tx = done_tx.clone();
        let spent = budget_spent.clone();
        model_threads.push(
            std::thread::Builder::new()
                .name(format!("model-{i}"))
                .spawn(move || model_thread(rx, tx, spent))
                .map_err(|e| Error::io("cannot start thread", "model", e))?,
        );
    }
    drop(work_rx);
    drop(done_tx);
    let damage = Damage::default();
    let writer_damage = damage.clone();
    let writer = std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || writer_thread(writer_conn, done_rx, fin_tx, writer_damage))
        .map_err(|e| Error::io("cannot start thread", "writer", e))?;

    // Beside the model threads; with `--once`, after them (it drains what they stored).
    // It has a stop flag of its own: this run may end without the process ending (the
    // database was replaced and is opened again).
    let embed_stop = Arc::new(AtomicBool::new(false));
    let embedder = match opts.once {
        false => Some(super::embedder::spawn(
            dir,
            &settings,
            [embed_stop.clone(), control.stop.clone()],
            false,
        )?),
        true => None,
    };

    // Keeps this device in its sync space, when it is in one; not with `--once`. A stop
    // flag of its own, for the same reason as the embedder's.
    let sync_stop = Arc::new(AtomicBool::new(false));
    let syncer = match opts.once {
        false => Some(super::syncer::spawn(
            dir,
            &settings,
            [sync_stop.clone(), control.stop.clone()],
        )?),
        true => None,
    };

    let answerer = match opts.once {
        false => super::answerer::Answerer::start(dir, &settings),
        true => None,
    };

    let housekeeping = Housekeeping::new(dir.clone(), periodic, db_identity, damage.clone());
    let mut claimer = Claimer::new(
        conn,
        settings,
        provider,
        opts,
        concurrency,
        housekeeping,
        budget_spent,
    );
    let outcome = claimer.run_loop(&work_tx, &fin_rx, &control, reload);
    let leftover = claimer.shutdown(&fin_rx, &control);
    drop(work_tx);
    claimer.provider_cleanup();
    if leftover == 0 {
        for t in model_threads {
            let _ = t.join();
        }
    }
    // The writer ends when every model thread has; a thread stuck in a call past the
    // grace period is left to die with the process (its batch was released).
    let report = if leftover == 0 {
        writer.join().unwrap_or_default()
    } else {
        Report::default()
    };
    if let Some(a) = answerer {
        a.stop();
    }
    sync_stop.store(true, Ordering::SeqCst);
    if let Some(thread) = syncer {
        super::syncer::join(thread, SYNCER_GRACE);
    }
    match embedder {
        Some(thread) => {
            embed_stop.store(true, Ordering::SeqCst);
            let _ = thread.join();
        }
        None if outcome.is_ok() => {
            let stops = [embed_stop, control.stop.clone()];
            let _ = super::embedder::spawn(dir, &claimer.settings, stops, true)?.join();
        }
        None => {}
    }
    let now = now_ms();
    if let Err(e) = workers::stopped(&mut claimer.conn, &claimer.opts.worker_id, now) {
        log::warn!("cannot record the worker's stop: {e}");
    }
    outcome?;
    log::info!(
        "worker {} stopped: {} batches done, {} failed, {} released",
        claimer.opts.worker_id,
        report.batches_done,
        report.batches_failed,
        report.batches_released + leftover as u64
    );
    Ok(Report {
        batches_released: report.batches_released + leftover as u64,
        reopen: claimer.housekeeping.replaced(),
        ..report
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_ids_name_host_pid_and_start() {
        let id = worker_id(42);
        let parts: Vec<&str> = id.rsplitn(3, ':').collect();
        assert_eq!(parts[0], "42");
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(!parts[2].is_empty());
    }
}
