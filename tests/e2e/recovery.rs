//! Recovery of a damaged database through the real binaries, with no worker running: the
//! next `cairn` command recovers it, so does the worker's start, and `cairn restore`
//! replaces it. (A database damaged under a running worker: `faults`. Hundreds of damage
//! layouts on the core's recovery: `core/tests/recovery_faults.rs`.)

use std::io::{Seek, SeekFrom, Write};

use crate::support::{TestEnv, run_with_stdin, stderr, stdout};

fn turn(sid: &str, n: usize) -> Vec<String> {
    let common =
        format!(r#""session_id":"{sid}","cwd":"/home/dev/acme-api","prompt_id":"{sid}-p{n}""#);
    vec![
        format!(
            r#"{{"hook_event_name":"UserPromptSubmit",{common},"prompt":"turn {n} of {sid}"}}"#
        ),
        format!(
            r#"{{"hook_event_name":"PostToolUse",{common},"tool_name":"Bash","tool_use_id":"{sid}:{n}","tool_input":{{"command":"echo {sid} {n}"}},"tool_response":{{"stdout":"ok"}}}}"#
        ),
        format!(
            r#"{{"hook_event_name":"Stop",{common},"last_assistant_message":"end of {sid} {n}"}}"#
        ),
    ]
}

fn hook(env: &TestEnv, event: &str) {
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "50");
    let out = run_with_stdin(c, event.as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A data dir with a backup holding session `old`, then session `new` (two turns) written
/// after it, and one turn of session `late` spooled while the database was locked; the
/// WAL checkpointed into the file unless `keep_wal`.
fn data_dir(keep_wal: bool) -> TestEnv {
    let env = TestEnv::new();
    for e in turn("old", 1) {
        hook(&env, &e);
    }
    let b = env.run("cairn", &["backup"], b"");
    assert_eq!(b.status.code(), Some(0), "{}", stderr(&b));
    for n in 1..=2 {
        for e in turn("new", n) {
            hook(&env, &e);
        }
    }
    {
        let lock = env.db();
        // Closing the last connection must not checkpoint the WAL away (`keep_wal`).
        lock.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .expect("no checkpoint on close");
        lock.execute_batch("BEGIN IMMEDIATE").expect("lock");
        for e in turn("late", 1) {
            hook(&env, &e);
        }
        lock.execute_batch("ROLLBACK").expect("unlock");
        if !keep_wal {
            lock.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
                .expect("checkpoint");
        }
    }
    assert_eq!(
        std::fs::read_dir(env.data_dir.join("spool"))
            .expect("spool")
            .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file()))
            .count(),
        3,
        "the late turn waits in the spool"
    );
    env
}

fn overwrite(path: &std::path::Path, at: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(bytes).expect("write");
    f.sync_all().expect("sync");
}

fn prompts(env: &TestEnv) -> Vec<String> {
    env.db()
        .prepare("SELECT prompt_text FROM user_prompts ORDER BY prompt_text")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

const ALL: [&str; 4] = [
    "turn 1 of late",
    "turn 1 of new",
    "turn 1 of old",
    "turn 2 of new",
];

#[test]
fn the_next_command_recovers_a_database_whose_header_is_broken() {
    let env = data_dir(false);
    overwrite(&env.db_path(), 0, &[0u8; 100]);
    let status = env.run("cairn", &["status"], b"");
    let err = stderr(&status);
    assert!(err.contains("recovered it"), "{err}");
    assert!(err.contains("rebuilt its broken header"), "{err}");
    assert_eq!(status.status.code(), Some(1), "{}\n{err}", stdout(&status));
    assert!(
        stdout(&status).contains("the database was damaged"),
        "{}",
        stdout(&status)
    );
    // The spooled turn is taken in by the worker.
    let w = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(w.status.code(), Some(0), "{}", stderr(&w));
    assert_eq!(prompts(&env), ALL);
    let again = env.run("cairn", &["search", "--all-projects", "turn"], b"");
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
}

#[test]
fn the_next_command_recovers_a_truncated_database_and_counts_what_it_lost() {
    let env = data_dir(false);
    let len = std::fs::metadata(env.db_path()).expect("len").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(env.db_path())
        .and_then(|f| f.set_len(len * 2 / 3))
        .expect("truncate");
    let o = env.run("cairn", &["status"], b"");
    assert!(stderr(&o).contains("recovered it"), "{}", stderr(&o));
    let w = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(w.status.code(), Some(0), "{}", stderr(&w));
    let kept = prompts(&env);
    assert!(kept.contains(&"turn 1 of old".to_string()), "{kept:?}");
    assert!(kept.contains(&"turn 1 of late".to_string()), "{kept:?}");
    let status = stdout(&env.run("cairn", &["status"], b""));
    assert!(status.contains("rows that could not be read"), "{status}");
}

#[test]
fn the_worker_start_recovers_a_torn_wal_and_reports_the_lost_transactions() {
    let env = data_dir(true);
    let wal = env.data_dir.join("cairn.db-wal");
    let len = std::fs::metadata(&wal).expect("wal").len();
    assert!(len > 4096 * 4, "a WAL with frames: {len}");
    // Garbled in its first frame: every commit after it is lost to SQLite.
    overwrite(&wal, 32 + 200, &[0x77; 64]);
    let w = env.run("cairn-worker", &["--once", "--log-stderr"], b"");
    assert_eq!(w.status.code(), Some(0), "{}", stderr(&w));
    assert!(
        stderr(&w).contains("write-ahead log is torn"),
        "{}",
        stderr(&w)
    );
    let status = stdout(&env.run("cairn", &["status"], b""));
    assert!(
        status.contains("transactions of the write-ahead log were torn"),
        "{status}"
    );
    let kept = prompts(&env);
    assert!(kept.contains(&"turn 1 of old".to_string()), "{kept:?}");
    assert!(kept.contains(&"turn 1 of late".to_string()), "{kept:?}");
}

#[test]
fn restore_replaces_a_database_with_a_damaged_page() {
    let env = data_dir(false);
    let len = std::fs::metadata(env.db_path()).expect("len").len();
    overwrite(&env.db_path(), (len / 4096 - 1) * 4096, &[0xA5; 4096]);
    let backup = std::fs::read_dir(env.data_dir.join("backups"))
        .expect("backups")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".db"))
        .expect("the backup");
    let o = env.run("cairn", &["restore", backup.to_str().expect("utf8")], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("is kept at"), "{}", stdout(&o));
    assert_eq!(prompts(&env), vec!["turn 1 of old".to_string()]);
}

#[test]
fn the_viewer_recovers_a_database_damaged_while_it_serves() {
    let env = data_dir(false);
    let ui = crate::ui::Ui::start(&env);
    assert_eq!(ui.get("/").status, 200);
    overwrite(&env.db_path(), 0, &[0u8; 100]);
    let page = ui.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("turn 2 of new"), "{}", page.body);
    let status = env.run("cairn", &["status"], b"");
    assert!(
        stdout(&status).contains("the database was damaged"),
        "{}",
        stdout(&status)
    );
}
