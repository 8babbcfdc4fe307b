//! Continuous sync, as the worker's syncer runs it (`worker::syncer`): a [`Link`] to the
//! server (connected, its schema brought up to date, the space's key checked, `LISTEN`ing
//! on the space's channel), its two steps (push what was written here, then tell the
//! others; pull what they pushed), the cheap look at the local store that says when there
//! may be something new to push ([`LocalMark`]), the delays between attempts while the
//! server is away ([`Backoff`]), the [`watch`] that names a server accepting calls it never
//! answers, and what the worker records for `status` to read (`sync_state`, through
//! `local`, its only writer).
//!
//! Invariants: a push and a pull are the same idempotent steps `cairn sync` takes, so a
//! worker killed at any point loses and doubles nothing; the notification's payload is a
//! device id (which the server holds anyway), never content; nothing here runs on a
//! hook's path.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use rusqlite::Connection;
use serde::Serialize;

use super::{Moved, Setup, SyncError, local, server};
use crate::clock::now_ms;
use crate::settings::SyncSettings;
use crate::store::db;
use crate::store::paths::DataDir;

/// Keys of `sync_state` the worker writes beside `local::LAST_PUSH`, `local::LAST_PULL`
/// and `local::LAST_ERROR`.
pub const LAST_ERROR_AT: &str = "last_error_at";
pub const LAST_ERROR_FIX: &str = "last_error_fix";
pub const RETRY_AT: &str = "retry_at";
pub const LISTENING: &str = "listening";
/// The other devices' logs as the server listed them at the last pull: JSON
/// `[[device, last_seq], ...]`.
pub const SERVER_LOGS: &str = "server_logs";

/// A connection to the server ready to sync this device's space.
pub struct Link {
    client: Client,
    setup: Setup,
    listening: bool,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("server", &self.setup.url)
            .field("space", &self.setup.key.space)
            .field("listening", &self.listening)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// Connects, brings the server's schema up to date, checks that the key opens the
    /// space's key check (a wrong key is found here, before anything is sent or applied)
    /// and, with `listen`, starts listening for the other devices' pushes.
    pub fn open(setup: Setup, listen: bool) -> Result<Link, SyncError> {
        let mut client = super::open_space(&setup.url, &setup.key)?;
        if listen {
            server::listen(&mut client, &setup.key.space)?;
        }
        Ok(Link {
            client,
            setup,
            listening: listen,
        })
    }

    pub fn listening(&self) -> bool {
        self.listening
    }

    /// Stages what was written here and pushes the outbox; when anything went, tells the
    /// devices listening on the space. Returns how many records went.
    pub fn push(
        &mut self,
        conn: &mut Connection,
        settings: &SyncSettings,
        now: i64,
    ) -> Result<usize, SyncError> {
        super::stage(conn, &self.setup, settings, now)?;
        let sent = super::push(conn, &mut self.client, &mut self.setup)?;
        if sent > 0 {
            server::notify(&mut self.client, &self.setup.key.space, &self.setup.device)?;
        }
        Ok(sent)
    }

    /// Pulls every other device's log from its cursor, then notes how long each log is on
    /// the server (what `status` compares the cursors with).
    pub fn pull(&mut self, conn: &mut Connection, now: i64) -> Result<Moved, SyncError> {
        let moved = super::pull(conn, &mut self.client, &self.setup, now)?;
        let logs = server::devices(&mut self.client, &self.setup.key.space, &self.setup.device)?;
        let json = serde_json::to_string(&logs).unwrap_or_else(|_| "[]".into());
        db::write(conn, |tx| local::set(tx, SERVER_LOGS, &json))?;
        Ok(moved)
    }

    /// Waits up to `timeout` for another device's push. True when one came; an error when
    /// the connection was lost meanwhile (the server stopped or the network went).
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, SyncError> {
        let mut woke = false;
        if self.listening {
            let me = self.setup.device.as_str();
            let mut notes = self.client.notifications();
            let first = notes.timeout_iter(timeout).next()?;
            if let Some(n) = first {
                woke |= n.payload() != me;
                // The rest already here, without waiting again.
                let mut more = notes.iter();
                while let Some(n) = more.next()? {
                    woke |= n.payload() != me;
                }
            }
        } else {
            std::thread::sleep(timeout);
        }
        if self.client.is_closed() {
            return Err(SyncError::Unreachable(
                "the connection to the server was lost".into(),
            ));
        }
        Ok(woke)
    }
}

/// The status in one line, as `cairn status` and `cairn sync status` show it: the space
/// (its id's first 8 characters), the server, devices seen, last push and pull, how far
/// behind, what waits to be sent, and whether the worker listens.
pub fn summary(s: &super::Status, now: i64) -> String {
    let ago = |t: Option<i64>| {
        t.map_or("never".into(), |t| {
            format!("{} ago", crate::clock::span(now - t, false))
        })
    };
    let mode = match s.listening {
        Some(true) => " · listening",
        Some(false) => " · polling",
        None => "",
    };
    format!(
        "space {} on {} · {} · last push {} · last pull {} · {} behind · {} unsent{mode}",
        s.space.get(..8).unwrap_or(&s.space),
        s.server,
        s.devices_in_words(),
        ago(s.last_push_at),
        ago(s.last_pull_at),
        s.behind,
        s.unsent,
    )
}

/// What the server says now, for `cairn sync status` (the one status that connects).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerNow {
    /// The server answered and the key opened the space.
    pub ok: bool,
    pub error: Option<String>,
    pub fix: Option<String>,
    /// Records of the other devices' logs on the server not applied here yet.
    pub behind: Option<i64>,
    /// The other devices with a log on the server.
    pub devices: Option<usize>,
}

/// Connects and compares the other devices' logs on the server with this device's
/// cursors, giving the server `limit` to answer (the asking runs on a thread of its own,
/// left behind when the server does not answer). Writes nothing locally.
pub fn server_now(setup: Setup, conn: &Connection, limit: Duration) -> ServerNow {
    let me = setup.device.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let asked = Link::open(setup, false).and_then(|mut link| {
            let space = link.setup.key.space.clone();
            server::devices(&mut link.client, &space, &me)
        });
        let _ = tx.send(asked);
    });
    let asked = rx
        .recv_timeout(limit)
        .unwrap_or(Err(SyncError::NotAnswering(limit.as_secs())))
        .and_then(|logs| {
            let mut behind = 0;
            for (device, last) in &logs {
                behind += (last - local::cursor(conn, device)?).max(0);
            }
            Ok((behind, logs.len()))
        });
    match asked {
        Ok((behind, devices)) => ServerNow {
            ok: true,
            error: None,
            fix: None,
            behind: Some(behind),
            devices: Some(devices),
        },
        Err(e) => ServerNow {
            ok: false,
            error: Some(e.to_string()),
            fix: e.fix().map(str::to_string),
            behind: None,
            devices: None,
        },
    }
}

/// Watches this process's calls to the server (`server::waiting_since`) from a thread of
/// its own until the returned guard is dropped. Once a call has waited `limit` for its
/// answer, it records [`SyncError::NotAnswering`] for `status` (through a connection of its
/// own) and hands it to `then`, once per call: `cairn sync` ends there, the worker's
/// syncer logs it and goes on waiting (a frozen server that wakes answers the same call).
pub fn watch(dir: &DataDir, limit: Duration, then: impl Fn(&SyncError) + Send + 'static) -> Watch {
    let done = Arc::new(AtomicBool::new(false));
    let (dir, stop) = (dir.clone(), done.clone());
    let look = (limit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    std::thread::spawn(move || {
        let mut told = 0;
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(look);
            let now = now_ms();
            let Some(since) = server::waiting_since() else {
                continue;
            };
            if since == told || Duration::from_millis((now - since).max(0) as u64) < limit {
                continue;
            }
            told = since;
            let e = SyncError::NotAnswering(limit.as_secs());
            // A store that is not there (an init or join not done) is not made for this.
            let opts = db::OpenOptions {
                create: false,
                ..db::OpenOptions::default()
            };
            let recorded = db::open_data_dir(&dir, opts)
                .map_err(SyncError::from)
                .and_then(|mut conn| {
                    record_error(&mut conn, &e, None, now)?;
                    record_listening(&mut conn, None)
                });
            if let Err(why) = recorded {
                log::warn!("sync: cannot record the error: {why}");
            }
            then(&e);
        }
    });
    Watch { done }
}

/// Stops [`watch`]'s thread when dropped.
#[derive(Debug)]
pub struct Watch {
    done: Arc<AtomicBool>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

/// A look at the local store that changes when a memory, a session, a prompt or a
/// tombstone is written, so the syncer stages only then: SQLite's `data_version` (changed
/// by any other connection's commit, free to read), and when it moved, counts and edges of
/// the synced tables (a summary redone changes its `created_at`). What it misses (a
/// session's later changes) the syncer stages at its next poll.
#[derive(Debug, Default)]
pub struct LocalMark {
    version: Option<i64>,
    tables: Option<[i64; 8]>,
}

impl LocalMark {
    /// True when something was written since the last call (and on the first).
    pub fn changed(&mut self, conn: &Connection) -> Result<bool, SyncError> {
        let version: i64 = conn.query_row("PRAGMA data_version", [], |r| r.get(0))?;
        if self.version == Some(version) {
            return Ok(false);
        }
        self.version = Some(version);
        let tables = conn.query_row(
            "SELECT (SELECT count(*) FROM observations),
                    (SELECT coalesce(max(id), 0) FROM observations),
                    (SELECT count(*) FROM session_summaries),
                    (SELECT coalesce(max(id), 0) FROM session_summaries),
                    (SELECT coalesce(max(created_at), 0) FROM session_summaries),
                    (SELECT count(*) FROM forgotten),
                    (SELECT count(*) FROM sessions),
                    (SELECT count(*) FROM user_prompts)",
            [],
            |r| {
                Ok([
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ])
            },
        )?;
        let changed = self.tables != Some(tables);
        self.tables = Some(tables);
        Ok(changed)
    }
}

/// How long to wait before trying the server again.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The first retry after the server went away; doubled per failure up to [`Self::MAX`].
    pub const FIRST: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(60);
    /// After an error only the user can fix (a refused login, a wrong key): tried again
    /// this late, or sooner when the setup changes (`worker::syncer`).
    pub const LASTING: Duration = Duration::from_secs(600);

    /// Counts a failure; returns the delay before the next attempt.
    pub fn failed(&mut self, e: &SyncError) -> Duration {
        if e.is_lasting() {
            return Self::LASTING;
        }
        let delay = Self::FIRST.saturating_mul(1 << self.failures.min(16));
        self.failures = self.failures.saturating_add(1);
        delay.min(Self::MAX)
    }

    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

/// What one step did, to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Pushed,
    Pulled,
}

/// Records a step that went well: its time, and no error any more.
pub fn record_ok(conn: &mut Connection, step: Step, now: i64) -> Result<(), SyncError> {
    let key = match step {
        Step::Pushed => local::LAST_PUSH,
        Step::Pulled => local::LAST_PULL,
    };
    db::write(conn, |tx| {
        local::set(tx, key, &now.to_string())?;
        for k in [local::LAST_ERROR, LAST_ERROR_AT, LAST_ERROR_FIX, RETRY_AT] {
            local::set(tx, k, "")?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Records an error, what to do about it, and when the worker tries again (`None`: a
/// `cairn sync` that failed, which nothing retries). The time kept
/// is the first of a run of errors ("down since").
pub fn record_error(
    conn: &mut Connection,
    e: &SyncError,
    retry_at: Option<i64>,
    now: i64,
) -> Result<(), SyncError> {
    let since = match local::get(conn, local::LAST_ERROR)? {
        Some(old) if !old.is_empty() => local::get(conn, LAST_ERROR_AT)?
            .and_then(|t| t.parse().ok())
            .unwrap_or(now),
        _ => now,
    };
    db::write(conn, |tx| {
        local::set(tx, local::LAST_ERROR, &e.to_string())?;
        local::set(tx, LAST_ERROR_AT, &since.to_string())?;
        local::set(tx, LAST_ERROR_FIX, e.fix().unwrap_or(""))?;
        local::set(
            tx,
            RETRY_AT,
            &retry_at.map_or(String::new(), |t| t.to_string()),
        )
    })?;
    Ok(())
}

/// Records whether the worker is listening for the other devices' pushes (`None`: it has
/// no connection to listen on).
pub fn record_listening(conn: &mut Connection, listening: Option<bool>) -> Result<(), SyncError> {
    let value = match listening {
        Some(true) => "1",
        Some(false) => "0",
        None => "",
    };
    db::write(conn, |tx| local::set(tx, LISTENING, value))?;
    Ok(())
}

/// What the worker recorded, as `status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    pub last_push_at: Option<i64>,
    pub last_pull_at: Option<i64>,
    pub last_error: Option<String>,
    pub last_error_at: Option<i64>,
    pub fix: Option<String>,
    pub retry_at: Option<i64>,
    pub listening: Option<bool>,
    /// The other devices' logs on the server at the last pull: device, last sequence.
    pub server_logs: Vec<(String, i64)>,
}

pub fn recorded(conn: &Connection) -> Result<Recorded, SyncError> {
    let text = |k: &str| -> Result<Option<String>, SyncError> {
        Ok(local::get(conn, k)?.filter(|v| !v.is_empty()))
    };
    let time =
        |k: &str| -> Result<Option<i64>, SyncError> { Ok(text(k)?.and_then(|v| v.parse().ok())) };
    Ok(Recorded {
        last_push_at: time(local::LAST_PUSH)?,
        last_pull_at: time(local::LAST_PULL)?,
        last_error: text(local::LAST_ERROR)?,
        last_error_at: time(LAST_ERROR_AT)?,
        fix: text(LAST_ERROR_FIX)?,
        retry_at: time(RETRY_AT)?,
        listening: text(LISTENING)?.map(|v| v == "1"),
        server_logs: text(SERVER_LOGS)?
            .and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::observations::{self, NewObservation};
    use crate::memory::rows::ObservationContent;
    use crate::memory::sessions;

    fn store(dir: &std::path::Path) -> Connection {
        db::open(&dir.join("a.db"), db::OpenOptions::default()).expect("db")
    }

    #[test]
    fn the_local_mark_moves_when_another_connection_writes_a_memory() {
        let tmp = tempfile::tempdir().expect("tmp");
        let watcher = store(tmp.path());
        let mut writer = store(tmp.path());
        let mut mark = LocalMark::default();
        assert!(mark.changed(&watcher).expect("first"), "the first look");
        assert!(!mark.changed(&watcher).expect("same"));
        // A new session is something to stage; a write to no synced table is not.
        db::write(&mut writer, |tx| sessions::ensure(tx, "s1", "p", "/w", 1)).expect("session");
        assert!(mark.changed(&watcher).expect("session"));
        db::write(&mut writer, |tx| local::set(tx, RETRY_AT, "1")).expect("other table");
        assert!(!mark.changed(&watcher).expect("no memory"));
        db::write(&mut writer, |tx| {
            let o = NewObservation {
                session_id: Some("s1".into()),
                project: "p".into(),
                kind: "discovery".into(),
                origin: "model".into(),
                created_at: 5,
                content: ObservationContent {
                    title: "t".into(),
                    ..ObservationContent::default()
                },
                ..NewObservation::default()
            };
            observations::insert_observation(tx, &o).map(drop)
        })
        .expect("observation");
        assert!(mark.changed(&watcher).expect("memory"));
        assert!(!mark.changed(&watcher).expect("seen"));
    }

    #[test]
    fn backoff_doubles_to_a_ceiling_and_waits_long_on_lasting_errors() {
        let mut b = Backoff::default();
        let away = SyncError::Unreachable("refused".into());
        let delays: Vec<u64> = (0..9).map(|_| b.failed(&away).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        b.succeeded();
        assert_eq!(b.failed(&away), Backoff::FIRST);
        let refused = SyncError::LoginRefused("password authentication failed".into());
        assert_eq!(b.failed(&refused), Backoff::LASTING);
    }

    #[test]
    fn errors_are_recorded_with_their_fix_and_cleared_by_a_good_step() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut conn = store(tmp.path());
        assert_eq!(recorded(&conn).expect("empty"), Recorded::default());
        let away = SyncError::Unreachable("connection refused".into());
        record_error(&mut conn, &away, Some(2_000), 1_000).expect("first");
        record_error(&mut conn, &away, Some(5_000), 3_000).expect("second");
        record_listening(&mut conn, Some(true)).expect("listening");
        let r = recorded(&conn).expect("recorded");
        assert!(
            r.last_error
                .as_deref()
                .is_some_and(|e| e.contains("not reachable"))
        );
        assert_eq!(r.last_error_at, Some(1_000), "down since the first error");
        assert_eq!(r.retry_at, Some(5_000));
        assert_eq!(r.fix.as_deref(), away.fix());
        assert_eq!(r.listening, Some(true));
        record_ok(&mut conn, Step::Pulled, 6_000).expect("ok");
        let r = recorded(&conn).expect("recorded");
        assert_eq!((r.last_error, r.fix, r.retry_at), (None, None, None));
        assert_eq!((r.last_pull_at, r.last_push_at), (Some(6_000), None));
    }
}
