//! Liveness: a worker that holds the lock but cannot work is replaced, not waited for.
//!
//! A worker stopped by SIGSTOP (a debugger, a suspended terminal job) keeps its lock and
//! the database's write lock: no other worker starts and every hook waits its whole
//! budget before spooling. The hook's autostart asks [`replace_wedged`] to end it.
//!
//! Invariants (never kill a healthy worker): a process is killed only when it holds the
//! worker lock, is stopped (`/proc/<pid>/stat` state `T`), is a `cairn-worker` by its
//! command name, and its heartbeat is older than [`WEDGED_AFTER_PERIODS`] periods (or from
//! before the clock was stepped back, which says nothing of its age); each
//! replacement is logged and raises a notice (`store::incidents`). The new worker rescues
//! the killed one's claimed jobs at its start, as after any crash.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use rusqlite::OptionalExtension;

use crate::error::Result;
use crate::store::lock::{self, Holder, process_stopped};
use crate::store::paths::DataDir;

/// A running worker whose heartbeat is older than this many heartbeat periods is wedged
/// (stopped, hung): its heartbeat runs beside its model calls, never behind them.
pub const WEDGED_AFTER_PERIODS: i64 = 4;

/// How long a worker with heartbeat period `period_ms` may stay silent before it is wedged.
pub fn wedged_after_ms(period_ms: i64) -> i64 {
    period_ms.max(1000).saturating_mul(WEDGED_AFTER_PERIODS)
}

/// The latest heartbeat of the live worker (`pid`, not stopped), or of any worker when none
/// is live.
pub fn last_heartbeat(conn: &Connection, pid: Option<u32>) -> Result<Option<i64>> {
    Ok(conn
        .query_row(
            "SELECT max(heartbeat_at) FROM workers
             WHERE ?1 IS NULL OR (pid = ?1 AND stopped_at IS NULL)",
            [pid],
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}

/// The worker binary's process name, as `/proc/<pid>/comm` shows it.
const WORKER_COMM: &str = "cairn-worker";

/// How long [`replace_wedged`] waits for the killed worker's lock to be released.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// True when the process `pid` runs the worker binary.
fn is_worker(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| comm.trim_end() == WORKER_COMM)
}

/// Why the lock holder is wedged beyond doubt, or `None` when it may be healthy: stopped,
/// a worker, and silent (no heartbeat, or none since its start) for longer than
/// [`WEDGED_AFTER_PERIODS`] × `heartbeat_secs`. Pure but for `/proc` and the one read.
fn wedged(conn: &Connection, holder: &Holder, heartbeat_secs: u64, now: i64) -> Result<bool> {
    if holder.pid == 0 || !process_stopped(holder.pid) || !is_worker(holder.pid) {
        return Ok(false);
    }
    let period = i64::try_from(heartbeat_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    let limit = wedged_after_ms(period);
    let last = last_heartbeat(conn, Some(holder.pid))?.unwrap_or(holder.started_at);
    Ok(silent_too_long(last, now, limit))
}

/// True when a heartbeat at `last` is more than `limit` old at `now`, or lies further in
/// the future than the queue's clock tolerance: the clock was stepped back since, the
/// stopped worker has not heartbeaten after the jump, and its silence must not count as
/// fresh for the length of the jump. Pure.
fn silent_too_long(last: i64, now: i64, limit: i64) -> bool {
    let age = now.saturating_sub(last);
    age > limit || age < -crate::queue::claim::CLOCK_TOLERANCE_MS
}

/// Ends the worker holding the lock when it is stopped, is a `cairn-worker`, and its
/// heartbeat is older than the wedged threshold; waits (at most [`RELEASE_WAIT`]) for its
/// lock to be released, logs it and raises a `worker-replaced` notice. Returns the pid
/// killed, `None` when the lock is free or its holder may be healthy (left alone). The
/// caller then starts a new worker.
pub fn replace_wedged(
    dir: &DataDir,
    conn: &Connection,
    heartbeat_secs: u64,
    now: i64,
) -> Result<Option<u32>> {
    let Some(holder) = lock::holder(&dir.worker_lock())? else {
        return Ok(None);
    };
    if !wedged(conn, &holder, heartbeat_secs, now)? {
        return Ok(None);
    }
    let pid = holder.pid;
    let Some(target) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return Ok(None);
    };
    match rustix::process::kill_process(target, rustix::process::Signal::KILL) {
        Ok(()) => {}
        // Gone meanwhile (another hook replaced it): nothing left to do here.
        Err(rustix::io::Errno::SRCH) => return Ok(None),
        Err(e) => {
            log::warn!("cannot end the stopped worker (pid {pid}): {e}");
            return Ok(None);
        }
    }
    let released = wait_released(&dir.worker_lock(), pid);
    let message = format!(
        "the worker (pid {pid}) was stopped and silent for over {WEDGED_AFTER_PERIODS} heartbeat periods while holding the database; it was killed and a new worker started{}",
        if released {
            ""
        } else {
            " (its lock was not released yet)"
        }
    );
    log::warn!("{message}");
    if let Err(e) = crate::store::incidents::raise(dir, "worker-replaced", &message, now) {
        log::warn!("cannot record the notice: {e}");
    }
    Ok(Some(pid))
}

/// Polls until `pid` no longer holds the lock at `path`, for at most [`RELEASE_WAIT`].
fn wait_released(path: &Path, pid: u32) -> bool {
    let deadline = Instant::now() + RELEASE_WAIT;
    loop {
        match lock::holder(path) {
            Ok(Some(h)) if h.pid == pid => {}
            _ => return true,
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_is_no_worker() {
        let me = std::process::id();
        assert!(!process_stopped(me));
        assert!(!is_worker(me));
    }

    #[test]
    fn silence_is_measured_forward_only() {
        let limit = 4_000;
        assert!(!silent_too_long(10_000, 12_000, limit));
        assert!(silent_too_long(10_000, 14_001, limit));
        assert!(
            !silent_too_long(10_000, 9_000, limit),
            "another process's reading"
        );
        assert!(
            silent_too_long(10_000, 10_000 - 3_600_000, limit),
            "a heartbeat from before the clock went back an hour"
        );
    }

    #[test]
    fn a_live_holder_that_is_not_a_stopped_worker_is_left_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::new(tmp.path());
        let conn = crate::store::db::open_data_dir(&dir, Default::default()).expect("open");
        assert_eq!(replace_wedged(&dir, &conn, 1, 0).expect("free"), None);
        // This process holds the lock, silent since long ago, but it runs and is no worker.
        let _lock = lock::WorkerLock::try_acquire(&dir.worker_lock(), 0)
            .expect("lock")
            .expect("free");
        assert_eq!(
            replace_wedged(&dir, &conn, 1, 10_000_000).expect("alive"),
            None
        );
        assert!(lock::holder(&dir.worker_lock()).expect("holder").is_some());
    }
}
