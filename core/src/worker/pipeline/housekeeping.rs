//! Housekeeping: the claimer's periodic tasks between claims, and their schedule. Every
//! `worker.heartbeat_secs`: the worker's heartbeat, lease renewal of batches in flight,
//! rescue of expired leases, ingestion of the hooks' spool (`worker::ingest`), and a check
//! that the database file is still the one open; every 5 minutes: reconciliation of
//! finished sessions with their transcripts (`capture::transcript::reconcile`); hourly:
//! purge of old done jobs, the daily backup and the binary's periodic hook.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::capture::transcript;
use crate::queue;
use crate::queue::claim::{Batch, Fenced, Policy, RescueScope};
use crate::queue::workers;
use crate::settings::Settings;
use crate::store::backup;
use crate::store::paths::DataDir;
use crate::worker::ingest;

use super::messages::Damage;

/// How often done jobs are purged and the periodic hook runs.
const SLOW_HOUSEKEEPING_MS: i64 = 60 * 60 * 1000;
/// How often finished sessions' transcripts are compared with what was captured.
const RECONCILE_EVERY_MS: i64 = 5 * 60 * 1000;
/// Sessions compared per pass (each reads one transcript).
const RECONCILE_PER_PASS: usize = 20;

/// True when a task scheduled for `next`, one `period` after its last run, is due at
/// `now`. Time only moves forward for housekeeping: a `next` more than a period ahead
/// means the clock was stepped back since the last run, and the task is due now rather
/// than after the length of the jump (the heartbeat, lease renewals and the spool's
/// ingestion would stop for that long).
fn passed(next: i64, period: i64, now: i64) -> bool {
    now >= next || next.saturating_sub(now) > period
}

/// Periodic work the binary adds to housekeeping (log pruning): called with the current
/// settings and `now`.
pub type Periodic = Box<dyn FnMut(&Settings, i64) + Send>;

/// The (device, inode) of a file: changes when the file is deleted and created again, or
/// replaced by a rename.
pub(super) fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The periodic tasks' state: when each runs next, and what they need besides the
/// claimer's connection and settings.
pub(super) struct Housekeeping {
    /// The data dir (for the tasks that need its files: spool, backups).
    dir: DataDir,
    periodic: Option<Periodic>,
    next: i64,
    next_slow: i64,
    next_reconcile: i64,
    /// Claude Code's projects folder, where reconciliation finds transcripts.
    projects_dir: Option<PathBuf>,
    /// The database file's identity when the worker opened it.
    db_identity: Option<(u64, u64)>,
    /// Set when the file at the database path is no longer the one open.
    replaced: bool,
    /// Where a task that meets a damaged database says so (the claimer stops on it).
    damage: Damage,
}

impl Housekeeping {
    /// Housekeeping for the database in `dir` whose file had `db_identity` when opened;
    /// every task is due at once.
    pub(super) fn new(
        dir: DataDir,
        periodic: Option<Periodic>,
        db_identity: Option<(u64, u64)>,
        damage: Damage,
    ) -> Housekeeping {
        Housekeeping {
            dir,
            periodic,
            next: 0,
            next_slow: 0,
            next_reconcile: 0,
            projects_dir: transcript::projects_dir(),
            db_identity,
            replaced: false,
            damage,
        }
    }

    /// True when a heartbeat period has passed since the last pass (or none was made);
    /// the next pass is then scheduled one period from `now`.
    pub(super) fn due(&mut self, settings: &Settings, now: i64) -> bool {
        let period = (settings.worker.heartbeat_secs.max(1) * 1000) as i64;
        if !passed(self.next, period, now) {
            return false;
        }
        self.next = now + period;
        true
    }

    /// Where damage met by any thread is noted (shared with the claimer and the writer).
    pub(super) fn damage(&self) -> Damage {
        self.damage.clone()
    }

    /// Makes the next pass due at once (after a settings reload).
    pub(super) fn run_next_turn(&mut self) {
        self.next = 0;
    }

    /// True when the database file was found deleted or replaced: the worker stops to be
    /// run again on the file now at the path.
    pub(super) fn replaced(&self) -> bool {
        self.replaced
    }

    /// A pass of the periodic tasks, when one is due (`due`). Every `worker.heartbeat_secs`
    /// (and first thing at start): the worker's heartbeat, lease renewal of batches in
    /// flight, rescue of expired leases, ingestion of events hooks spooled; every 5 minutes
    /// (and at start): reconciliation of finished sessions with their transcripts; hourly:
    /// purge of old done jobs, the daily backup and the binary's periodic hook (log
    /// pruning).
    pub(super) fn run(
        &mut self,
        conn: &mut Connection,
        settings: &Settings,
        worker_id: &str,
        policy: &Policy,
        inflight: &mut HashMap<i64, Batch>,
        now: i64,
    ) {
        if !self.due(settings, now) {
            return;
        }
        log::trace!("housekeeping in {}", self.dir.root().display());
        if self.check_replaced(conn, now) {
            return;
        }
        if let Err(e) = workers::heartbeat(conn, worker_id, now) {
            log::warn!("heartbeat failed: {e}");
            if self.damage.note(&e) {
                return;
            }
        }
        let mut lost = Vec::new();
        for (token, batch) in inflight.iter_mut() {
            match queue::claim::heartbeat(conn, batch, policy, now) {
                Ok(Fenced::Done) => {}
                Ok(Fenced::LeaseLost) => lost.push(*token),
                Err(e) => {
                    self.damage.note(&e);
                    log::warn!("lease renewal of jobs {:?} failed: {e}", batch.ids())
                }
            }
        }
        for token in lost {
            // Usually the writer finished it a moment ago; otherwise its lease expired and
            // the ack will be refused (fenced), storing nothing.
            log::debug!("batch {token} is no longer held by this worker");
        }
        if let Err(e) = queue::claim::rescue(conn, RescueScope::Expired, policy.max_attempts, now) {
            log::warn!("rescue failed: {e}");
            if self.damage.note(&e) {
                return;
            }
        }
        match ingest::ingest(&self.dir, conn, settings, now) {
            Ok(0) => {}
            Ok(n) => log::info!("ingested {n} spooled hook events"),
            // Not applied to a damaged file: the worker stops to recover it first.
            Err(e) if self.damage.note(&e) => return,
            Err(e) => log::warn!("spool ingestion failed (the files stay for the next try): {e}"),
        }
        if passed(self.next_reconcile, RECONCILE_EVERY_MS, now) {
            self.next_reconcile = now + RECONCILE_EVERY_MS;
            if let Some(projects) = self.projects_dir.as_deref() {
                match transcript::reconcile(conn, settings, projects, now, RECONCILE_PER_PASS) {
                    Ok(r) if r.recovered > 0 => log::warn!(
                        "reconciliation recovered {} events the hooks missed in {} sessions",
                        r.recovered,
                        r.sessions
                    ),
                    Ok(_) => {}
                    Err(e) if self.damage.note(&e) => return,
                    Err(e) => log::warn!("transcript reconciliation failed: {e}"),
                }
            }
        }
        if passed(self.next_slow, SLOW_HOUSEKEEPING_MS, now) {
            self.next_slow = now + SLOW_HOUSEKEEPING_MS;
            let keep_ms = (settings.queue.retention_days as i64).saturating_mul(86_400_000);
            match queue::admin::purge(conn, now.saturating_sub(keep_ms)) {
                Ok(0) => {}
                Ok(n) => log::info!(
                    "purged {n} done jobs older than {} days",
                    settings.queue.retention_days
                ),
                Err(e) if self.damage.note(&e) => return,
                Err(e) => log::warn!("purge failed: {e}"),
            }
            backup::remove_partials(&self.dir.backups());
            backup::remove_partials(self.dir.root());
            if settings.backup.daily {
                match backup::daily(&self.dir, conn, settings.backup.keep, now) {
                    Ok(Some(path)) => {
                        log::info!("daily backup written to {}", path.display());
                        // Spool files applied before it are in a sound backup now.
                        let pruned = ingest::prune_applied(&self.dir, now);
                        if pruned > 0 {
                            log::info!(
                                "{pruned} applied spool files are in the backup now: removed"
                            );
                        }
                    }
                    Ok(None) => {}
                    Err(e) if self.damage.note(&e) => return,
                    Err(e) => log::warn!("daily backup failed: {e}"),
                }
            } else {
                ingest::prune_applied_old(&self.dir, now);
            }
            if let Some(p) = self.periodic.as_mut() {
                p(settings, now);
            }
        }
    }

    /// True when the database file was deleted or replaced under the worker (its identity
    /// changed): what the open file holds is copied to `backups/` (the deletion may have
    /// been a mistake), a notice says so in `cairn status`, and the worker stops to be run
    /// again on the file now at the path (`Report::reopen`).
    fn check_replaced(&mut self, conn: &Connection, now: i64) -> bool {
        let path = self.dir.db();
        let current = file_identity(&path);
        if current == self.db_identity || self.replaced {
            return self.replaced;
        }
        self.replaced = true;
        let what = if current.is_none() {
            "deleted"
        } else {
            "replaced"
        };
        let stamp: String = crate::clock::iso_utc(now)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let kept = self.dir.backups().join(format!("cairn-{what}-{stamp}.db"));
        let kept_note = match self
            .dir
            .ensure_sub(&self.dir.backups())
            .and_then(|()| backup::online(conn, &kept))
        {
            Ok(info) => format!(
                "what the old file held is kept at {} (`cairn restore` it if that was a mistake)",
                info.path.display()
            ),
            Err(e) => format!("the old file could not be kept ({e})"),
        };
        let message = format!(
            "the database {} was {what} while the worker ran; the worker reopened it; {kept_note}",
            path.display()
        );
        log::error!("{message}");
        if let Err(e) = crate::store::incidents::raise(&self.dir, what, &message, now) {
            log::error!("cannot record the notice for `cairn status`: {e}");
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_stepped_back_does_not_pause_housekeeping() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut h = Housekeeping::new(DataDir::new(tmp.path()), None, None, Damage::default());
        let mut s = Settings::default();
        s.worker.heartbeat_secs = 5;
        let t = 100_000_000;
        assert!(h.due(&s, t), "at once at start");
        assert!(!h.due(&s, t + 1_000), "within the period");
        assert!(h.due(&s, t + 5_000), "a period later");
        // The clock goes back an hour: the next pass is not an hour away.
        assert!(h.due(&s, t - 3_600_000), "at once after the jump");
        assert!(!h.due(&s, t - 3_600_000 + 1_000));
        assert!(h.due(&s, t - 3_600_000 + 5_000));
        assert!(passed(0, 10, 5));
        assert!(!passed(10, 10, 5));
        assert!(passed(100, 10, 5), "more than a period ahead");
    }
}
