//! Faults around the edges: a full disk, a database replaced under the worker, inherited
//! file descriptors, signals, a read-only data dir, and kill -9 loops.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{TestEnv, hook_fixture, run_with_stdin, stderr, stdout};

const PLAIN: &str = r#"{"continue":true,"suppressOutput":true}"#;

fn tool_event(i: usize) -> String {
    format!(
        r#"{{"hook_event_name":"PostToolUse","session_id":"s-faults","cwd":"/home/dev/acme-api","tool_name":"Bash","tool_use_id":"t{i}","tool_input":{{"command":"echo {i}"}},"tool_response":{{"stdout":"{i}"}}}}"#
    )
}

/// A small tmpfs mounted for the test's life (needs root and a kernel that allows it).
pub(crate) struct Tmpfs(PathBuf);

impl Tmpfs {
    pub(crate) fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .is_ok_and(|o| o.status.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system holding `dir` up to the last byte.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).expect("filler");
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let small = [0u8; 1];
    while f.write_all(&small).is_ok() {}
}

/// The files waiting in the spool (not `applied/`, which keeps applied ones).
fn spool_names(env: &TestEnv) -> Vec<String> {
    std::fs::read_dir(env.data_dir.join("spool"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_full_disk_shows_every_lost_event_in_status_and_skips_the_backup() {
    let env = TestEnv::new();
    let mnt = env.tmp.path().join("mnt");
    // The data dir on a small tmpfs when the test may mount one; otherwise the same
    // failures at the file-system calls: the database locked (it cannot be written) and
    // `spool` a plain file (nothing can be spooled).
    let tmpfs = Tmpfs::mount(&mnt, "2m");
    let env = match &tmpfs {
        Some(_) => TestEnv {
            data_dir: mnt.join("cairn-data"),
            tmp: env.tmp,
        },
        None => env,
    };
    let first = env.run(
        "cairn-hook",
        &[],
        hook_fixture("SessionStart.json").as_bytes(),
    );
    assert_eq!(first.status.code(), Some(0));
    assert!(env.data_dir.join("lost-events").exists(), "allocated ahead");
    let _holder = match &tmpfs {
        Some(_) => {
            fill(&mnt);
            None
        }
        None => {
            std::fs::write(env.data_dir.join("spool"), b"").expect("spool as a file");
            let c = env.db();
            c.execute_batch("BEGIN IMMEDIATE").expect("lock");
            Some(c)
        }
    };
    // No place outside the data dir either (`store::fallback`): no runtime dir, and a
    // temp dir that is a file.
    let no_temp = env.tmp.path().join("no-temp");
    std::fs::write(&no_temp, b"").expect("temp dir as a file");
    for i in 0..3 {
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "50")
            .env("XDG_RUNTIME_DIR", env.tmp.path().join("no-runtime"))
            .env("TMPDIR", &no_temp);
        let out = run_with_stdin(c, tool_event(i).as_bytes());
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(stdout(&out), PLAIN);
    }
    assert!(
        !spool_names(&env).iter().any(|n| n.ends_with(".tmp")),
        "temporary files left: {:?}",
        spool_names(&env)
    );
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert_eq!(status.status.code(), Some(1), "{text}{}", stderr(&status));
    assert!(text.contains("3 hook events could not be kept"), "{text}");
    if tmpfs.is_some() {
        // With some room again (less than the database plus the backup margin), the
        // worker runs, and its daily backup checks for room first instead of filling the
        // disk again.
        std::fs::remove_file(mnt.join("filler")).expect("free space");
        let out = env.run("cairn-worker", &["--once", "--log-stderr"], b"");
        let err = stderr(&out);
        assert!(err.contains("not enough free space for a backup"), "{err}");
        let backups: Vec<_> = std::fs::read_dir(env.data_dir.join("backups"))
            .map(|d| d.filter_map(|e| e.ok()).collect())
            .unwrap_or_default();
        assert!(backups.is_empty(), "{backups:?}");
    }
    let ack = env.run("cairn", &["status", "--acknowledge"], b"");
    assert!(
        !stdout(&ack).contains("could not be kept"),
        "{}",
        stdout(&ack)
    );
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Stops a child on drop (a failed assertion must not leave a worker behind).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn job_status(env: &TestEnv, key: &str) -> Option<String> {
    env.db()
        .query_row(
            "SELECT status FROM pending_messages WHERE dedupe_key = ?1",
            [key],
            |r| r.get(0),
        )
        .ok()
}

#[test]
fn a_database_deleted_under_the_worker_is_reopened_and_reported() {
    let env = TestEnv::new();
    let out = env.run("cairn-hook", &[], tool_event(0).as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_WORKER__HEARTBEAT_SECS", "1")
        .env("CAIRN_WORKER__POLL_MS", "20")
        .env("CAIRN_BATCH__ENABLED", "false")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _worker = Reaped(c.spawn().expect("spawn worker"));
    wait_until("the first job is done", || {
        job_status(&env, "tool:t0").as_deref() == Some("done")
    });
    for suffix in ["", "-wal", "-shm"] {
        let mut p = env.db_path().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    // The next hook creates a new database; the worker must notice and work on it.
    let out = env.run("cairn-hook", &[], tool_event(1).as_bytes());
    assert_eq!(out.status.code(), Some(0));
    wait_until("the job in the new database is done", || {
        job_status(&env, "tool:t1").as_deref() == Some("done")
    });
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert_eq!(
        status.status.code(),
        Some(1),
        "{text} {:?} {}",
        std::fs::read_dir(&env.data_dir)
            .expect("dir")
            .map(|e| e.expect("e").file_name())
            .collect::<Vec<_>>(),
        std::fs::read_to_string(env.data_dir.join("logs").join(format!(
            "worker-{}.log",
            cairn_core::clock::date_utc(cairn_core::clock::now_ms())
        )))
        .unwrap_or_default()
    );
    // Deleted, then created again by the hook: "deleted" or "replaced", whichever the
    // worker saw first.
    assert!(
        text.contains("was deleted while the worker ran")
            || text.contains("was replaced while the worker ran"),
        "{text}"
    );
    // What the deleted file held was kept.
    let kept: Vec<String> = std::fs::read_dir(env.data_dir.join("backups"))
        .expect("backups")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        kept.iter()
            .any(|n| n.starts_with("cairn-deleted-") || n.starts_with("cairn-replaced-")),
        "{kept:?}"
    );
}

#[test]
fn manual_backups_in_one_second_all_work_and_are_bounded() {
    let env = TestEnv::new();
    env.run("cairn-hook", &[], tool_event(0).as_bytes());
    for _ in 0..5 {
        let mut c = env.cmd("cairn");
        c.env("CAIRN_BACKUP__KEEP_MANUAL", "3").arg("backup");
        let out = run_with_stdin(c, b"");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let manual: Vec<String> = std::fs::read_dir(env.data_dir.join("backups"))
        .expect("backups")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cairn-manual-"))
        .collect();
    assert_eq!(manual.len(), 3, "{manual:?}");
}

#[test]
fn doctor_calls_a_read_only_data_dir_read_only_not_damaged() {
    let env = TestEnv::new();
    let mnt = env.tmp.path().join("ro");
    // A read-only mount when the test may mount one (permissions do not stop root);
    // otherwise the data dir's and database's write permissions taken away.
    let tmpfs = Tmpfs::mount(&mnt, "8m");
    let env = match &tmpfs {
        Some(_) => TestEnv {
            data_dir: mnt.join("cairn-data"),
            tmp: env.tmp,
        },
        None => env,
    };
    env.run("cairn-hook", &[], tool_event(0).as_bytes());
    assert!(env.db_path().exists());
    let _ = env.run("cairn", &["status"], b"");
    match &tmpfs {
        Some(_) => {
            let ok = Command::new("mount")
                .args(["-o", "remount,ro"])
                .arg(&mnt)
                .status()
                .expect("remount");
            assert!(ok.success());
        }
        None => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(env.db_path(), std::fs::Permissions::from_mode(0o400))
                .expect("chmod db");
            std::fs::set_permissions(&env.data_dir, std::fs::Permissions::from_mode(0o500))
                .expect("chmod dir");
        }
    }
    let out = env.run("cairn", &["doctor"], b"");
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("read-only"), "{text}");
    assert!(!text.contains("not a usable cairn database"), "{text}");
    assert!(!text.contains("restore"), "{text}");
    if tmpfs.is_none() {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&env.data_dir, std::fs::Permissions::from_mode(0o700));
    }
}

#[test]
#[allow(unsafe_code)] // std offers no safe hook between fork and exec
fn the_autostarted_worker_keeps_none_of_the_hooks_descriptors() {
    use rustix::io::{FdFlags, fcntl_setfd};
    use rustix::pipe::{PipeFlags, pipe_with};
    use std::io::Read;
    let env = TestEnv::new();
    // A pipe whose write end the hook inherits (not close-on-exec), as a parent that waits
    // for EOF on it would hand it over.
    // Close-on-exec here, so that no other test's child inherits it; only the hook's
    // child clears the flag before exec.
    let (read_end, write_end) = pipe_with(PipeFlags::CLOEXEC).expect("pipe");
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_WORKER__AUTOSTART", "true")
        .env("CAIRN_WORKER__IDLE_EXIT_SECS", "60");
    // The closure owns this process's write end, closed when `c` goes (after the run).
    // SAFETY: the closure runs in the forked child and only calls fcntl(2), which is
    // async-signal-safe; it allocates nothing.
    unsafe {
        use std::os::unix::process::CommandExt;
        c.pre_exec(move || {
            fcntl_setfd(&write_end, FdFlags::empty())?;
            Ok(())
        });
    }
    let out = run_with_stdin(c, tool_event(0).as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let mut read_end = std::fs::File::from(read_end);
    wait_until("the worker is started", || {
        cairn_core::store::lock::holder(&env.data_dir.join("worker.lock"))
            .ok()
            .flatten()
            .is_some()
    });
    let worker = cairn_core::store::lock::holder(&env.data_dir.join("worker.lock"))
        .expect("lock")
        .expect("holder");
    // EOF comes at once unless the worker holds the write end.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = read_end.read_to_end(&mut buf);
        let _ = tx.send(());
    });
    let eof = rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok();
    let _ = Command::new("kill").arg(worker.pid.to_string()).status();
    assert!(
        eof,
        "the autostarted worker holds the hook's inherited pipe"
    );
}

/// Soak: the worker killed with SIGKILL over and over while hooks keep arriving (some of
/// them spooled behind a short lock wait). Afterwards every event has its one job, in its
/// own turn, and every job is done exactly once with nothing stored twice.
#[test]
fn kill_9_loops_with_hooks_arriving_lose_and_duplicate_nothing() {
    let env = TestEnv::new();
    let sessions = 4;
    let turns = 6;
    let tools = 3;
    let hooks = {
        let data_dir = env.data_dir.clone();
        let home = env.tmp.path().to_path_buf();
        std::thread::spawn(move || {
            for turn in 1..=turns {
                for s in 0..sessions {
                    let sid = format!("soak-{s}");
                    let pid = format!("p{turn}");
                    let common = format!(
                        r#""session_id":"{sid}","cwd":"/home/dev/acme-api","prompt_id":"{pid}""#
                    );
                    let mut events = vec![format!(
                        r#"{{"hook_event_name":"UserPromptSubmit",{common},"prompt":"turn {turn}"}}"#
                    )];
                    for k in 0..tools {
                        events.push(format!(
                            r#"{{"hook_event_name":"PostToolUse",{common},"tool_name":"Bash","tool_use_id":"{sid}:{turn}:{k}","tool_input":{{"command":"echo {sid} {turn} {k}"}},"tool_response":{{"stdout":"ok {k}"}}}}"#
                        ));
                    }
                    events.push(format!(
                        r#"{{"hook_event_name":"Stop",{common},"last_assistant_message":"end of turn {turn}"}}"#
                    ));
                    for e in events {
                        let mut c = Command::new(crate::support::bin("cairn-hook"));
                        c.env("CAIRN_DATA_DIR", &data_dir)
                            .env("HOME", &home)
                            .env("CAIRN_WORKER__AUTOSTART", "false")
                            .env("CAIRN_CAPTURE__LOCK_WAIT_MS", "5");
                        let out = run_with_stdin(c, e.as_bytes());
                        // The plain answer, or a prompt's memories (an earlier turn's
                        // summary may answer "turn N").
                        let answer = stdout(&out);
                        if answer != PLAIN {
                            let v: serde_json::Value =
                                serde_json::from_str(&answer).expect("protocol JSON");
                            assert_eq!(
                                v["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit",
                                "{answer}"
                            );
                        }
                        std::thread::sleep(std::time::Duration::from_millis(15));
                    }
                }
            }
        })
    };
    let worker = || {
        let mut c = env.cmd("cairn-worker");
        c.env("CAIRN_WORKER__HEARTBEAT_SECS", "1")
            .env("CAIRN_WORKER__POLL_MS", "10")
            .env("CAIRN_BATCH__ENABLED", "false")
            .env("CAIRN_QUEUE__MAX_ATTEMPTS", "1000")
            .env("CAIRN_QUEUE__RETRY_BASE_SECS", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    let mut kills = 0;
    while !hooks.is_finished() {
        let mut child = worker().spawn().expect("spawn worker");
        std::thread::sleep(std::time::Duration::from_millis(60 + 37 * (kills % 5)));
        child.kill().expect("kill -9");
        let _ = child.wait();
        kills += 1;
    }
    hooks.join().expect("hooks");
    assert!(kills >= 5, "only {kills} kills");
    let mut c = worker();
    c.arg("--once");
    let out = run_with_stdin(c, b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let expected_tools = (sessions * turns * tools) as i64;
    let expected_turns = (sessions * turns) as i64;
    assert_eq!(spool_names(&env).len(), 0, "spool not drained");
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE kind = 'observation'"),
        expected_tools
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE kind = 'summarize'"),
        expected_turns
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status <> 'done'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM user_prompts"),
        expected_turns
    );
    // Each tool job in its own turn (its id says which).
    let wrong: i64 = env.count(
        "SELECT count(*) FROM pending_messages WHERE kind = 'observation'
           AND prompt_number <> CAST(substr(dedupe_key, length(dedupe_key) - 2, 1) AS INTEGER)",
    );
    assert_eq!(wrong, 0);
    // Nothing stored twice: at most one summary per turn, no repeated observation.
    assert_eq!(
        env.count("SELECT count(*) FROM session_summaries"),
        env.count("SELECT count(*) FROM (SELECT DISTINCT session_id, prompt_number FROM session_summaries)")
    );
    assert_eq!(
        env.count("SELECT count(*) FROM observations"),
        env.count(
            "SELECT count(*) FROM (SELECT DISTINCT session_id, title, narrative FROM observations)"
        )
    );
}

fn turn_events(sid: &str, turn: usize) -> Vec<String> {
    let common =
        format!(r#""session_id":"{sid}","cwd":"/home/dev/acme-api","prompt_id":"{sid}-p{turn}""#);
    let mut events = vec![format!(
        r#"{{"hook_event_name":"UserPromptSubmit",{common},"prompt":"turn {turn} of {sid}"}}"#
    )];
    for k in 0..2 {
        events.push(format!(
            r#"{{"hook_event_name":"PostToolUse",{common},"tool_name":"Bash","tool_use_id":"{sid}:{turn}:{k}","tool_input":{{"command":"echo turn {turn} step {k}"}},"tool_response":{{"stdout":"done {k}"}}}}"#
        ));
    }
    events.push(format!(
        r#"{{"hook_event_name":"Stop",{common},"last_assistant_message":"end of turn {turn}"}}"#
    ));
    events
}

#[test]
fn a_database_damaged_under_the_worker_is_recovered_with_its_newer_rows() {
    use std::io::{Seek, SeekFrom, Write};
    let env = TestEnv::new();
    // Hooks and worker read the same capture.lock_wait_ms, as from one settings.json: the
    // recovery keeps hooks off the damaged file for that long.
    let hook = |e: &str| {
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "200");
        // Each answer must be the plain one: no memories given with the prompts, whose
        // words ("turn 2 of s") match the earlier turns' summaries.
        c.env("CAIRN_RECALL__AT_PROMPT", "false");
        let out = run_with_stdin(c, e.as_bytes());
        assert_eq!(stdout(&out), PLAIN);
    };
    for e in turn_events("s", 1) {
        hook(&e);
    }
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_WORKER__HEARTBEAT_SECS", "1")
        .env("CAIRN_WORKER__POLL_MS", "20")
        .env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_CAPTURE__LOCK_WAIT_MS", "200")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _worker = Reaped(c.spawn().expect("spawn worker"));
    // The worker's first housekeeping takes the daily backup (turn 1); turn 2 comes after.
    wait_until("the daily backup", || {
        std::fs::read_dir(env.data_dir.join("backups")).is_ok_and(|d| d.count() > 0)
    });
    for e in turn_events("s", 2) {
        hook(&e);
    }
    wait_until("turn 2 is done", || {
        job_status(&env, "tool:s:2:1").as_deref() == Some("done")
            && env.count("SELECT count(*) FROM session_summaries") == 2
    });
    let results_before = env.count("SELECT count(*) FROM observations")
        + env.count("SELECT count(*) FROM session_summaries");
    // Overwrite the pages of the queue's indexes in the live file.
    let roots: Vec<i64> = {
        let c = env.db();
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        let mut stmt = c
            .prepare(
                "SELECT rootpage FROM sqlite_master
                 WHERE name IN ('pending_messages_pending', 'pending_messages_pending_order')",
            )
            .expect("prepare");
        stmt.query_map([], |r| r.get(0))
            .expect("roots")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    assert_eq!(roots.len(), 2);
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(env.db_path())
            .expect("open db file");
        for page in &roots {
            f.seek(SeekFrom::Start((*page as u64 - 1) * 4096))
                .expect("seek");
            f.write_all(&[0x5A; 4096]).expect("overwrite");
        }
        f.sync_all().expect("sync");
    }
    // A new session's prompt commits (it touches no damaged page), so the worker reads the
    // file again; its tools and Stop meet the damaged indexes.
    for e in turn_events("t", 1) {
        hook(&e);
    }
    wait_until("the recovery notice", || {
        std::fs::read_dir(env.data_dir.join("notices")).is_ok_and(|d| d.count() > 0)
    });
    wait_until("the new session's jobs are done", || {
        job_status(&env, "tool:t:1:1").as_deref() == Some("done")
    });
    let c = env.db();
    let integrity: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity");
    assert_eq!(integrity, "ok");
    // Everything newer than the backup was salvaged: turn 2's prompt, jobs and results.
    let rows = |db: &rusqlite::Connection, sql: &str| -> Vec<String> {
        db.prepare(sql)
            .and_then(|mut st| {
                st.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .unwrap_or_else(|e| vec![e.to_string()])
    };
    let explain = || {
        let damaged = std::fs::read_dir(env.data_dir.join("backups"))
            .expect("backups")
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.to_string_lossy().ends_with(".db") && p.to_string_lossy().contains("damaged")
            })
            .map(|p| rusqlite::Connection::open(p).expect("damaged"));
        let q1 =
            "SELECT id || ' ' || session_id || ' ' || prompt_number FROM user_prompts ORDER BY id";
        let q2 = "SELECT id || ' ' || session_id || ' ' || coalesce(dedupe_key, '') || ' ' || status FROM pending_messages ORDER BY id";
        format!(
            "live prompts {:?}\nlive jobs {:?}\ndamaged prompts {:?}\ndamaged jobs {:?}\nspool {:?}",
            rows(&env.db(), q1),
            rows(&env.db(), q2),
            damaged.as_ref().map(|d| rows(d, q1)),
            damaged.as_ref().map(|d| rows(d, q2)),
            std::fs::read_dir(env.data_dir.join("spool"))
                .map(|d| d.count())
                .ok()
        )
    };
    assert_eq!(
        env.count("SELECT count(*) FROM user_prompts"),
        3,
        "{}",
        explain()
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE session_id = 's'"),
        6,
        "{}",
        explain()
    );
    assert_eq!(
        env.count("SELECT count(*) FROM session_summaries WHERE session_id = 's'"),
        2
    );
    assert!(
        env.count("SELECT count(*) FROM observations")
            + env.count("SELECT count(*) FROM session_summaries")
            >= results_before
    );
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert_eq!(status.status.code(), Some(1), "{text}");
    assert!(
        text.contains("the database was damaged") && text.contains("salvaged"),
        "{text}"
    );
    assert!(
        std::fs::read_dir(env.data_dir.join("backups"))
            .expect("backups")
            .filter_map(|e| e.ok())
            .any(|e| e
                .file_name()
                .to_string_lossy()
                .starts_with("cairn-damaged-"))
    );
}
