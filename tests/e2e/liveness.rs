//! Liveness seen from the hooks: a frozen worker holding the database's write lock costs a
//! hook no wait at all, and the events it could not write are spooled and stored later;
//! a clock stepped back holds neither the queue nor the worker's autostart.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_core::store::lock;
use cairn_core::store::paths::DataDir;

use crate::support::{TestEnv, stderr};

/// Set in the copy of this test binary that plays the frozen worker: the data dir.
const HOLDER_ENV: &str = "CAIRN_TEST_FROZEN_HOLDER";

/// This test's name, which the copy is started with.
const THIS_TEST: &str = "liveness::hooks_never_wait_on_a_frozen_worker_holding_the_write_lock";

fn prompt(n: usize) -> String {
    format!(
        r#"{{"hook_event_name":"UserPromptSubmit","session_id":"s-frozen","cwd":"/home/dev/acme-api","prompt_id":"p{n}","prompt":"prompt number {n}"}}"#
    )
}

/// Runs a hook to its end, failing the test when it is still running after `limit`.
fn hook_within(env: &TestEnv, input: &str, limit: Duration) {
    let mut c = env.cmd("cairn-hook");
    // A budget far longer than the test's limit: only seeing the stopped holder ends the
    // wait in time.
    c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "600000")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("spawn hook");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).expect("write");
    }
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert_eq!(status.code(), Some(0));
            return;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the hook still waited after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The frozen worker's part: hold the worker lock and the database's write lock, say so,
/// and keep them until stdin closes.
fn hold(data_dir: &std::ffi::OsStr) {
    let dir = DataDir::new(data_dir);
    let _lock = lock::WorkerLock::try_acquire(&dir.worker_lock(), 0)
        .expect("lock")
        .expect("the worker lock is free");
    let conn = rusqlite::Connection::open(dir.db()).expect("open");
    conn.execute_batch("BEGIN IMMEDIATE").expect("write lock");
    println!("holding");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reported: 15 of 150 hooks waited 3.1 s on a SIGSTOPped worker's write lock before
/// spooling. A process holding the worker lock and the write lock is stopped; hooks with
/// a ten-minute lock budget must still end at once, spooling their events, which the next
/// worker stores.
#[test]
fn hooks_never_wait_on_a_frozen_worker_holding_the_write_lock() {
    if let Some(dir) = std::env::var_os(HOLDER_ENV) {
        hold(&dir);
        return;
    }
    let env = TestEnv::new();
    hook_within(&env, &prompt(1), Duration::from_secs(30));
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args([THIS_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(HOLDER_ENV, &env.data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the holder");
    let out = child.stdout.take().expect("stdout");
    let holder = Holder(child);
    // libtest writes the test's name before its output, on the same line.
    let holding = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.ends_with("holding"));
    assert!(holding, "the holder never took the locks");
    let stopped = Command::new("kill")
        .args(["-STOP", &holder.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(stopped.success());

    for n in 2..=4 {
        hook_within(&env, &prompt(n), Duration::from_secs(30));
    }
    let spool = DataDir::new(&env.data_dir).spool();
    let spooled = std::fs::read_dir(&spool).map_or(0, |d| d.count());
    assert_eq!(
        spooled, 3,
        "every event waited for the frozen holder is spooled"
    );
    let logs = std::fs::read_dir(env.data_dir.join("logs"))
        .expect("logs")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert!(logs.contains("is stopped: not waiting"), "{logs}");

    drop(holder);
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_MODEL__PROVIDER", "offline").arg("--once");
    let out = crate::support::run_with_stdin(c, b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 4);
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reported: with the clock stepped back one hour, jobs queued before the jump and the
/// next turn's summary stayed pending for about the length of the jump. Here the jump is
/// made by moving what was written before it an hour ahead (the queue's times, and the
/// autostart marker a hook left as it started the last worker), which is what the
/// processes see after the clock goes back; the next turn's hooks must start a worker,
/// and every job of both turns must be done.
#[test]
fn a_clock_stepped_back_an_hour_holds_no_job_and_no_autostart() {
    const HOUR_MS: i64 = 3_600_000;
    let env = TestEnv::new();
    let event = |name: &str, n: usize, extra: &str| {
        format!(
            r#"{{"hook_event_name":"{name}","session_id":"s-clock","cwd":"/home/dev/acme-api","prompt_id":"p{n}"{extra}}}"#
        )
    };
    let turn = |n: usize, autostart: bool| {
        for input in [
            event("UserPromptSubmit", n, &format!(r#","prompt":"turn {n}""#)),
            event(
                "PostToolUse",
                n,
                &format!(
                    r#","tool_name":"Bash","tool_use_id":"t{n}","tool_input":{{"command":"make {n}"}},"tool_response":{{"stdout":"built {n}"}}"#
                ),
            ),
            event("Stop", n, r#","last_assistant_message":"done""#),
        ] {
            let mut c = env.cmd("cairn-hook");
            c.env("CAIRN_WORKER__AUTOSTART", autostart.to_string())
                .env("CAIRN_MODEL__PROVIDER", "offline")
                .env("CAIRN_WORKER__IDLE_EXIT_SECS", "2");
            let out = crate::support::run_with_stdin(c, input.as_bytes());
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
    };
    turn(1, false);
    // Before the jump: the queue's times, and a worker's start a moment ago.
    let moved = env
        .db()
        .execute(
            "UPDATE pending_messages SET created_at = created_at + ?1,
                    updated_at = updated_at + ?1, available_at = available_at + ?1",
            [HOUR_MS],
        )
        .expect("move");
    assert_eq!(moved, 2);
    let marker = env.data_dir.join("worker.autostart");
    std::fs::File::create(&marker)
        .and_then(|f| f.set_modified(std::time::SystemTime::now() + Duration::from_secs(3_600)))
        .expect("marker");

    turn(2, true);
    let done = || env.count("SELECT count(*) FROM pending_messages WHERE status = 'done'");
    wait_until("every job of both turns done", || done() == 4);
    let lock_path = DataDir::new(&env.data_dir).worker_lock();
    wait_until("the worker gone when idle", || {
        lock::holder(&lock_path).expect("holder").is_none()
    });
}
