//! The worker's syncer thread: keeps this device in its sync space on its own, beside the
//! model threads (`sync::live` does each step).
//!
//! While sync is set up (`sync.key` and `sync.url` in the data dir) and `sync.enabled`
//! (pulling only, while `sync.projects` names nothing), it holds one connection to the
//! server that `LISTEN`s on the space's channel. Every [`TICK`] it looks at the local
//! store (`sync::live::LocalMark`: free unless something was written) and stages and
//! pushes what was written here, then notifies the space; a notification from another
//! device makes it pull, and every `sync.poll_secs` it stages, pushes and pulls
//! regardless. The server away, or the connection lost: the error is recorded for `status`, and it tries again after 1 s, 2 s, 4 s … up
//! to a minute, catching up from the outbox and the cursors when it is back; an error
//! only the user can fix (a refused login, a wrong key) is tried again after ten minutes
//! or as soon as `sync.url`, `sync.key` or the password file changes, or a `cairn sync`
//! goes through (it clears the recorded error). Settings and the setup are read again
//! every `sync.poll_secs` and as soon as `settings.json` changes (a project taken out of
//! `sync.projects` is not pushed from then on), so `cairn sync join` needs no restart.
//!
//! Writes nothing itself: `sync` writes the sync tables and, through `memory`, what it
//! pulls. Stops within a tick (or one step) of its stop flags.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use rusqlite::Connection;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::settings::{Settings, SyncSettings};
use crate::store::db;
use crate::store::paths::DataDir;
use crate::sync::live::{self, Backoff, Link, LocalMark, Step};
use crate::sync::{Setup, SyncError};

/// How often the local store is looked at, and the longest a stop waits for.
pub const TICK: Duration = Duration::from_millis(200);

/// Starts the thread; it runs until either of the `stop` flags is set.
pub fn spawn(
    dir: &DataDir,
    settings: &Settings,
    stop: [Arc<AtomicBool>; 2],
) -> Result<JoinHandle<()>> {
    let dir = dir.clone();
    let sync = settings.sync.clone();
    std::thread::Builder::new()
        .name("syncer".into())
        .spawn(move || {
            let stopped = || stop.iter().any(|s| s.load(Ordering::SeqCst));
            let limit = Duration::from_secs(sync.answer_secs.max(1));
            let _watch = live::watch(&dir, limit, |e| log::warn!("sync: {e}; still waiting"));
            match db::open_data_dir(&dir, db::OpenOptions::default()) {
                Ok(conn) => Syncer::new(dir, sync, conn).run(&stopped),
                Err(e) => log::warn!("sync stopped: {e}"),
            }
        })
        .map_err(|e| Error::io("cannot start thread", "syncer", e))
}

/// Waits for the thread to end, at most `limit` (a connection attempt to a server that
/// does not answer can take longer; the thread then ends on its own).
pub fn join(thread: JoinHandle<()>, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !thread.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if thread.is_finished() {
        let _ = thread.join();
    } else {
        log::warn!("the syncer is still waiting for the server; not waiting for it");
    }
}

/// When `sync.url`, `sync.key` and the password file (`PGPASSFILE`, else `~/.pgpass`)
/// were last changed: a change is tried at once.
fn setup_files(dir: &DataDir) -> [Option<SystemTime>; 3] {
    [
        Some(dir.root().join("sync.url")),
        Some(dir.root().join("sync.key")),
        crate::sync::server::password_file(),
    ]
    .map(|f| f.and_then(|f| modified(&f)))
}

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

struct Syncer {
    dir: DataDir,
    settings: SyncSettings,
    conn: Connection,
    link: Option<Link>,
    backoff: Backoff,
    mark: LocalMark,
    /// No connection attempt before this.
    next_try: Instant,
    /// Settings and setup read again, and a pull made, at this time.
    next_poll: Instant,
    files: [Option<SystemTime>; 3],
    /// When `settings.json` was last changed: a change is read at once.
    settings_file: Option<SystemTime>,
    /// The last attempt failed and its error is recorded.
    failing: bool,
    push_due: bool,
    pull_due: bool,
}

impl Syncer {
    fn new(dir: DataDir, settings: SyncSettings, conn: Connection) -> Self {
        let now = Instant::now();
        Syncer {
            files: setup_files(&dir),
            settings_file: modified(&dir.settings()),
            dir,
            settings,
            conn,
            link: None,
            backoff: Backoff::default(),
            mark: LocalMark::default(),
            next_try: now,
            next_poll: now,
            failing: false,
            push_due: true,
            pull_due: true,
        }
    }

    fn poll_every(&self) -> Duration {
        Duration::from_secs(self.settings.poll_secs.max(1))
    }

    fn run(mut self, stopped: &dyn Fn() -> bool) {
        self.run_until(stopped);
        // Stopped: nothing listens any more.
        if let Err(e) = live::record_listening(&mut self.conn, None) {
            log::warn!("sync: {e}");
        }
    }

    fn run_until(&mut self, stopped: &dyn Fn() -> bool) {
        while !stopped() {
            // `sync.projects` narrowed must hold from the next push on: a project taken
            // out is private again at once, not at the next poll.
            let settings_file = modified(&self.dir.settings());
            if settings_file != self.settings_file {
                self.settings_file = settings_file;
                self.next_poll = Instant::now();
            }
            if Instant::now() >= self.next_poll {
                if let Ok(l) = Settings::load(&self.dir) {
                    self.settings = l.settings.sync;
                }
                self.next_poll = Instant::now() + self.poll_every();
                // Also stages what the look at the store does not see.
                self.push_due = true;
                self.pull_due = true;
            }
            if !self.settings.enabled {
                self.link = None;
                std::thread::sleep(TICK);
                continue;
            }
            // A new URL, key or password is taken up at once, connected or not.
            if self.link.is_some() && setup_files(&self.dir) != self.files {
                self.link = None;
            }
            if self.link.is_none() && !self.connect() {
                std::thread::sleep(TICK);
                continue;
            }
            if let Err(e) = self.step() {
                self.failed(e);
            }
        }
    }

    /// Opens the link when it is time to try; false when there is none.
    fn connect(&mut self) -> bool {
        let files = setup_files(&self.dir);
        if files != self.files {
            self.files = files;
            self.next_try = Instant::now();
        }
        if Instant::now() < self.next_try && !self.cleared_elsewhere() {
            return false;
        }
        let mut setup = match Setup::load(&self.dir, &self.conn) {
            Ok(Some(s)) => s,
            Ok(None) => {
                // Not in a space (yet): looked at again at the next poll.
                self.next_try = self.next_poll;
                return false;
            }
            Err(e) => {
                self.failed(e);
                return false;
            }
        };
        if let Err(e) = crate::sync::ensure_device(&mut self.conn, &mut setup) {
            self.failed(e);
            return false;
        }
        let server = setup.url.display();
        match Link::open(setup, self.settings.listen) {
            Ok(link) => {
                log::info!(
                    "sync: connected to {server}{}",
                    if link.listening() {
                        ", listening for the other devices"
                    } else {
                        " (polling)"
                    }
                );
                if let Err(e) = live::record_listening(&mut self.conn, Some(link.listening())) {
                    log::warn!("sync: {e}");
                }
                self.link = Some(link);
                self.failing = false;
                self.push_due = true;
                self.pull_due = true;
                true
            }
            Err(e) => {
                self.failed(e);
                false
            }
        }
    }

    /// True when the error this thread recorded is gone: a `cairn sync` went through since,
    /// so what was wrong was mended where this thread does not look (on the server, in
    /// `PGPASSWORD`), and waiting out the delay would only leave this device behind.
    fn cleared_elsewhere(&self) -> bool {
        self.failing && live::recorded(&self.conn).is_ok_and(|r| r.last_error.is_none())
    }

    /// Pushes when something was written here, pulls when due, then waits a tick for a
    /// notification.
    fn step(&mut self) -> std::result::Result<(), SyncError> {
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        if self.mark.changed(&self.conn)? || self.push_due {
            let sent = link.push(&mut self.conn, &self.settings, now_ms())?;
            if sent > 0 {
                log::debug!("sync: pushed {sent} records");
            }
            live::record_ok(&mut self.conn, Step::Pushed, now_ms())?;
            self.push_due = false;
            self.backoff.succeeded();
        }
        if self.pull_due {
            let moved = link.pull(&mut self.conn, now_ms())?;
            if moved.pulled > 0 {
                log::info!(
                    "sync: pulled {} records ({} memories added, {} forgotten)",
                    moved.pulled,
                    moved.added,
                    moved.forgotten
                );
            }
            live::record_ok(&mut self.conn, Step::Pulled, now_ms())?;
            self.pull_due = false;
            self.backoff.succeeded();
        }
        if link.wait(TICK)? {
            self.pull_due = true;
        }
        Ok(())
    }

    /// A busy store is tried again at the next tick; anything else is recorded, and the
    /// server tried again after the backoff's delay.
    fn failed(&mut self, e: SyncError) {
        if let SyncError::Store(s) = &e
            && s.is_busy()
        {
            std::thread::sleep(TICK);
            return;
        }
        let delay = self.backoff.failed(&e);
        self.link = None;
        self.failing = true;
        if let Err(e) = live::record_listening(&mut self.conn, None) {
            log::warn!("sync: {e}");
        }
        self.push_due = true;
        self.pull_due = true;
        self.next_try = Instant::now() + delay;
        log::warn!("sync: {e}; trying again in {}s", delay.as_secs());
        let retry_at = now_ms() + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        if let Err(e) = live::record_error(&mut self.conn, &e, Some(retry_at), now_ms()) {
            log::warn!("sync: cannot record the error: {e}");
        }
    }
}
