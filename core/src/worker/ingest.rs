//! Ingesting the hooks' spool: every event a hook could not write to the database is
//! written now, through the same `capture::record::apply` the hook uses. The worker drives
//! this (its housekeeping runs it), so capture only ever writes spool files and never
//! depends on the worker, and the spool only stores records, never applies them.
//!
//! Invariants: each file is written in its own transaction and moved out of the spool only
//! after its event is committed; ingesting twice writes nothing twice (dedupe keys, prompt
//! ids).
//!
//! An applied file is not deleted: it moves to `spool/applied/` and stays there until a
//! sound backup taken after it holds its event ([`prune_applied`], after the daily backup;
//! a week when daily backups are off). A database damaged since then loses none of them:
//! recovery (`store::recover`) restores that backup and puts these files back in the
//! spool, to be applied again to the recovered database.

use rusqlite::Connection;

use crate::capture::record::{self, Action, Record};
use crate::capture::{quarantine, spool};
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::store::db;
use crate::store::paths::DataDir;

/// Writes every spooled event to the database through the same path as the hook
/// ([`record::apply`], [`quarantine::add`]), each in its own transaction, removing each
/// file once its event is committed. A file that cannot be read as an event goes to the
/// quarantine. Stops at the first database error (the database is still locked: try
/// again later). Returns how many files were ingested.
pub fn ingest(
    dir: &DataDir,
    conn: &mut Connection,
    settings: &Settings,
    now: i64,
) -> Result<usize> {
    let mut done = 0;
    let outside = crate::store::fallback::existing(dir);
    let swept = spool::sweep_temporary(dir, 60_000)
        + outside
            .as_ref()
            .map_or(0, |fb| spool::sweep_temporary(fb, 60_000));
    if swept > 0 {
        log::info!("removed {swept} temporary spool files left by killed hooks");
    }
    let mut from_outside = 0;
    for path in spool::everywhere(dir)? {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("cannot read spool file", &path, e)),
        };
        match serde_json::from_slice::<(spool::Item, i64)>(&bytes) {
            Ok((spool::Item::Capture(rec), _)) => {
                if let Some(why) = dropped_by_settings(&rec, settings) {
                    log::info!(
                        "spooled event of session {} ({}) dropped now that the settings can be read: {why}",
                        rec.session_id,
                        rec.project
                    );
                } else {
                    db::write(conn, |tx| {
                        record::apply(tx, &rec, settings.queue.max_attempts).map(drop)
                    })?;
                }
            }
            Ok((spool::Item::Quarantine(entry), at)) => {
                db::write(conn, |tx| quarantine::add(tx, &entry, at).map(drop))?;
            }
            Err(e) => {
                log::warn!("spool file {} is unreadable: {e}", path.display());
                let entry = quarantine::Entry::new(
                    None,
                    format!("unreadable spool file: {e}"),
                    &bytes,
                    bytes.len() as u64,
                    settings.capture.redact_secrets,
                );
                db::write(conn, |tx| quarantine::add(tx, &entry, now).map(drop))?;
            }
        }
        keep_applied(dir, &path, now)?;
        done += 1;
        if !path.starts_with(dir.root()) {
            from_outside += 1;
        }
    }
    if done > 0 {
        log::info!("ingested {done} spooled events");
    }
    if let (Some(fb), 1..) = (&outside, from_outside) {
        let message = format!(
            "{from_outside} hook event(s) were kept in {} while the data dir could not be written (a read-only or failing disk); they are stored now",
            fb.root().display()
        );
        log::warn!("{message}");
        if let Err(e) = crate::store::incidents::raise(dir, "kept-outside", &message, now) {
            log::warn!("{e}");
        }
    }
    Ok(done)
}

/// How long applied spool files are kept when no daily backup takes them over.
const KEEP_APPLIED_MS: i64 = 7 * 86_400_000;

/// Moves an applied spool file to `spool/applied/`, stamped with the time it was applied
/// (its modification time).
fn keep_applied(dir: &DataDir, path: &std::path::Path, now: i64) -> Result<()> {
    let applied = dir.spool_applied();
    dir.ensure_sub(&applied)?;
    let Some(name) = path.file_name() else {
        return Ok(());
    };
    let to = applied.join(name);
    match std::fs::rename(path, &to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        // A file kept outside the data dir (`store::fallback`) is on another file system.
        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
            std::fs::copy(path, &to)
                .and_then(|_| std::fs::remove_file(path))
                .map_err(|e| Error::io("cannot move applied spool file", path, e))?;
        }
        Err(e) => return Err(Error::io("cannot move applied spool file", path, e)),
    }
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(now.max(0) as u64);
    if let Err(e) = std::fs::File::options()
        .write(true)
        .open(&to)
        .and_then(|f| f.set_modified(at))
    {
        log::warn!("cannot stamp {}: {e}", to.display());
    }
    Ok(())
}

/// Removes the applied spool files a sound backup taken at `backup_at` holds (applied
/// before it), and those older than a week whatever the backups. Returns how many.
pub fn prune_applied(dir: &DataDir, backup_at: i64) -> usize {
    prune_applied_before(dir, backup_at)
}

/// Removes the applied spool files older than [`KEEP_APPLIED_MS`] (when daily backups are
/// off, nothing else removes them). Returns how many.
pub fn prune_applied_old(dir: &DataDir, now: i64) -> usize {
    prune_applied_before(dir, now - KEEP_APPLIED_MS)
}

fn prune_applied_before(dir: &DataDir, before: i64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir.spool_applied()) else {
        return 0;
    };
    let before = std::time::UNIX_EPOCH + std::time::Duration::from_millis(before.max(0) as u64);
    entries
        .flatten()
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < before)
        })
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Why an event spooled while the settings could not be read is not written, now that they
/// can (the ingesting process has read them): an excluded project, a skipped tool. Events
/// spooled with readable settings were checked at hook time.
fn dropped_by_settings(rec: &Record, settings: &Settings) -> Option<&'static str> {
    if !rec.settings_unread {
        return None;
    }
    if record::is_excluded(&rec.project, &settings.capture) {
        return Some("its project is in capture.excluded_projects");
    }
    match &rec.action {
        Action::Tool(ev) if settings.capture.skip_tools.contains(&ev.tool_name) => {
            Some("its tool is in capture.skip_tools")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::handle::Stored;
    use crate::capture::hook::decode;
    use crate::capture::spool::{Item, pending, write};
    use crate::capture::testing::{env, q, run, settings};
    use crate::store::db::OpenOptions;

    // Spool files written by `spool::write`, ingested here (moved with `ingest` from the
    // spool's tests).

    #[test]
    fn files_sort_in_order_and_bad_ones_are_quarantined() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let rec = |at: i64| {
            Item::Capture(Box::new(Record {
                session_id: "s".into(),
                project: "p".into(),
                cwd: "/p".into(),
                at,
                prompt_number: None,
                settings_unread: false,
                action: Action::Start,
            }))
        };
        let a = write(&dd, &rec(2), 2).expect("write");
        let b = write(&dd, &rec(10), 10).expect("write");
        assert_eq!(pending(&dd).expect("pending"), vec![a, b]);
        assert_eq!(crate::store::paths::mode_of(&dd.spool()), Some(0o700));
        std::fs::write(dd.spool().join("0000000000011-1-x.json"), b"{oops").expect("bad");
        std::fs::write(dd.spool().join(".partial.json.tmp"), b"{").expect("tmp");

        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let s = Settings::default();
        assert_eq!(ingest(&dd, &mut conn, &s, 50).expect("ingest"), 3);
        assert!(pending(&dd).expect("pending").is_empty());
        let started: i64 = conn
            .query_row("SELECT started_at FROM sessions", [], |r| r.get(0))
            .expect("session");
        assert_eq!(started, 2);
        let rows = quarantine::list(&conn, 0).expect("list");
        assert_eq!(rows.len(), 1);
        assert!(rows[0].reason.contains("unreadable spool file"));
    }

    #[test]
    fn a_locked_database_leaves_the_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let item = Item::Quarantine(quarantine::Entry::new(None, "x", b"y", 1, true));
        write(&dd, &item, 1).expect("write");
        let mut holder = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let tx = holder
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("lock");
        let mut conn = db::open_data_dir(
            &dd,
            OpenOptions {
                busy_timeout: std::time::Duration::from_millis(20),
                create: true,
                ..OpenOptions::default()
            },
        )
        .expect("open");
        let err = ingest(&dd, &mut conn, &Settings::default(), 5).expect_err("locked");
        assert!(err.is_busy(), "{err}");
        assert_eq!(pending(&dd).expect("pending").len(), 1);
        tx.rollback().expect("unlock");
        assert_eq!(
            ingest(&dd, &mut conn, &Settings::default(), 5).expect("ok"),
            1
        );
    }

    // A hook that could not write spools its event; the worker ingests it once.

    const SID: &str = "s1";

    fn ev(name: &str, extra: &str) -> String {
        format!(
            r#"{{"hook_event_name":"{name}","session_id":"{SID}","cwd":"/nowhere/acme-api","prompt_id":"p"{extra}}}"#
        )
    }

    #[test]
    fn a_locked_database_spools_and_ingest_writes_it_once() {
        let (_t, dd) = env();
        let mut s = settings();
        s.capture.lock_wait_ms = 50;
        let mut holder = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let tx = holder
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("lock");
        let tool = ev(
            "PostToolUse",
            r#","tool_name":"Bash","tool_use_id":"t9","tool_input":{"command":"echo AKIAIOSFODNN7EXAMPLE"}"#,
        );
        let o = run(&dd, &s, &tool, 5);
        let Stored::Spooled(path) = &o.stored else {
            panic!("not spooled: {:?}", o.stored)
        };
        let text = std::fs::read_to_string(path).expect("spool file");
        assert!(!text.contains("AKIAIOSFODNN7EXAMPLE"), "{text}");
        let bad = run(&dd, &s, "garbage", 6);
        assert_eq!(bad.stored, Stored::Quarantined);
        tx.rollback().expect("unlock");
        drop(holder);

        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(ingest(&dd, &mut conn, &s, 100).expect("ingest"), 2);
        assert_eq!(ingest(&dd, &mut conn, &s, 101).expect("again"), 0);
        assert_eq!(q(&conn, "SELECT count(*) FROM pending_messages"), 1);
        assert_eq!(q(&conn, "SELECT created_at FROM pending_messages"), 5);
        assert_eq!(q(&conn, "SELECT count(*) FROM quarantine"), 1);
        // The same event written again after all (a replayed spool file): still one job.
        let _ = decode(tool.as_bytes(), None).expect("decode");
        run(&dd, &s, &tool, 7);
        assert_eq!(q(&conn, "SELECT count(*) FROM pending_messages"), 1);
    }
}

#[cfg(test)]
mod turn_tests {
    //! A spooled event is written as if at hook time: in its own turn, whatever was written
    //! between its hook and its ingestion.
    use super::*;
    use crate::capture::handle::Stored;
    use crate::queue::payload::TurnEnd;
    use crate::store::db::OpenOptions;

    fn run(dd: &DataDir, s: &Settings, json: &str, now: i64) -> Stored {
        crate::capture::testing::run(dd, s, json, now).stored
    }

    fn ev(sid: &str, name: &str, prompt_id: &str, extra: &str) -> String {
        format!(
            r#"{{"hook_event_name":"{name}","session_id":"{sid}","cwd":"/nowhere/acme-api","prompt_id":"{prompt_id}"{extra}}}"#
        )
    }

    fn prompt(sid: &str, pid: &str) -> String {
        ev(sid, "UserPromptSubmit", pid, r#","prompt":"do it""#)
    }

    fn tool(sid: &str, pid: &str, id: &str) -> String {
        ev(
            sid,
            "PostToolUse",
            pid,
            &format!(r#","tool_name":"Bash","tool_use_id":"{id}","tool_input":{{"command":"ls"}}"#),
        )
    }

    fn stop(sid: &str, pid: &str, msg: &str) -> String {
        ev(
            sid,
            "Stop",
            pid,
            &format!(r#","last_assistant_message":"{msg}""#),
        )
    }

    fn lock(dd: &DataDir) -> Connection {
        let conn = db::open_data_dir(dd, OpenOptions::default()).expect("open");
        conn.execute_batch("BEGIN IMMEDIATE").expect("lock");
        conn
    }

    fn turn_message(conn: &Connection, key: &str) -> Option<String> {
        conn.query_row(
            "SELECT payload FROM pending_messages WHERE dedupe_key = ?1",
            [key],
            |r| r.get::<_, String>(0),
        )
        .ok()
        .map(|p| {
            serde_json::from_str::<TurnEnd>(&p)
                .expect("turn")
                .last_assistant_message
        })
    }

    #[test]
    fn a_spooled_stop_ingested_after_the_next_turn_ends_its_own_turn() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut s = Settings::default();
        s.capture.lock_wait_ms = 20;
        assert_eq!(run(&dd, &s, &prompt("s", "p1"), 1), Stored::Database);
        assert_eq!(run(&dd, &s, &tool("s", "p1", "t1"), 2), Stored::Database);
        let holder = lock(&dd);
        assert!(matches!(
            run(&dd, &s, &stop("s", "p1", "FINAL MESSAGE OF TURN 1"), 3),
            Stored::Spooled(_)
        ));
        holder.execute_batch("ROLLBACK").expect("unlock");
        // The next turn, with the database free again (its prompt goes behind the spooled
        // Stop of its session, so it is numbered after it).
        run(&dd, &s, &prompt("s", "p2"), 4);
        run(&dd, &s, &tool("s", "p2", "t2"), 5);
        run(&dd, &s, &stop("s", "p2", "FINAL MESSAGE OF TURN 2"), 6);
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        ingest(&dd, &mut conn, &s, 10).expect("ingest");
        assert!(spool::pending(&dd).expect("pending").is_empty());
        assert_eq!(
            turn_message(&conn, "turn:s:1").as_deref(),
            Some("FINAL MESSAGE OF TURN 1")
        );
        assert_eq!(
            turn_message(&conn, "turn:s:2").as_deref(),
            Some("FINAL MESSAGE OF TURN 2")
        );
    }

    #[test]
    fn tools_of_a_spooled_prompt_land_in_its_turn() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut s = Settings::default();
        s.capture.lock_wait_ms = 20;
        run(&dd, &s, &ev("s", "SessionStart", "", ""), 1);
        let holder = lock(&dd);
        assert!(matches!(
            run(&dd, &s, &prompt("s", "p1"), 2),
            Stored::Spooled(_)
        ));
        holder.execute_batch("ROLLBACK").expect("unlock");
        // The database is free again, but the prompt this tool belongs to is not in it yet:
        // written now, it would land in turn 0.
        assert!(matches!(
            run(&dd, &s, &tool("s", "p1", "t1"), 3),
            Stored::Spooled(_)
        ));
        let holder = lock(&dd);
        // Spooled with the database locked, its prompt unknown at hook time.
        assert!(matches!(
            run(&dd, &s, &tool("s", "p1", "t2"), 4),
            Stored::Spooled(_)
        ));
        holder.execute_batch("ROLLBACK").expect("unlock");
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(ingest(&dd, &mut conn, &s, 10).expect("ingest"), 3);
        let numbers: Vec<i64> = conn
            .prepare("SELECT prompt_number FROM pending_messages ORDER BY dedupe_key")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<std::result::Result<_, _>>()
            .expect("rows");
        assert_eq!(numbers, vec![1, 1]);
    }

    /// 64 sessions of two turns each, hooks on many threads with a 1 ms lock wait while
    /// another connection keeps taking the write lock: every tool job and every turn end
    /// lands in the turn it belongs to once the spool is ingested.
    #[test]
    fn many_sessions_with_a_short_lock_wait_keep_their_turns() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut s = Settings::default();
        s.capture.lock_wait_ms = 1;
        drop(db::open_data_dir(&dd, OpenOptions::default()).expect("create"));
        let stop_flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let locker = {
            let dd = dd.clone();
            let stop_flag = stop_flag.clone();
            std::thread::spawn(move || {
                let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
                while !stop_flag.load(std::sync::atomic::Ordering::Relaxed) {
                    if conn.execute_batch("BEGIN IMMEDIATE").is_ok() {
                        std::thread::sleep(std::time::Duration::from_millis(3));
                        conn.execute_batch("ROLLBACK").expect("rollback");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            })
        };
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let dd = dd.clone();
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut spooled = 0;
                    for n in 0..8 {
                        let sid = format!("s{t}-{n}");
                        let mut at = 1;
                        let mut go = |json: String| {
                            at += 1;
                            if matches!(run(&dd, &s, &json, at), Stored::Spooled(_)) {
                                spooled += 1;
                            }
                        };
                        for turn in 1..=2 {
                            let pid = format!("p{turn}");
                            go(prompt(&sid, &pid));
                            for k in 0..3 {
                                go(tool(&sid, &pid, &format!("{sid}:{turn}:{k}")));
                            }
                            go(stop(&sid, &pid, &format!("end of turn {turn}")));
                        }
                    }
                    spooled
                })
            })
            .collect();
        let spooled: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
        stop_flag.store(true, std::sync::atomic::Ordering::Relaxed);
        locker.join().expect("locker");
        assert!(spooled > 0, "the lock never made a hook spool");
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        ingest(&dd, &mut conn, &s, 1_000).expect("ingest");
        let mut stmt = conn
            .prepare("SELECT kind, prompt_number, dedupe_key, payload FROM pending_messages")
            .expect("prepare");
        let rows: Vec<(String, i64, String, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("query")
            .collect::<std::result::Result<_, _>>()
            .expect("rows");
        assert_eq!(rows.len(), 64 * 2 * 4);
        for (kind, number, key, payload) in rows {
            if kind == "observation" {
                let turn: i64 = key.rsplit(':').nth(1).expect("turn").parse().expect("n");
                assert_eq!(number, turn, "{key}");
            } else {
                let msg = serde_json::from_str::<TurnEnd>(&payload)
                    .expect("turn")
                    .last_assistant_message;
                assert_eq!(msg, format!("end of turn {number}"), "{key}");
            }
        }
    }
}
