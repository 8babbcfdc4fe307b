//! Liveness seen from the hooks: a frozen worker holding the database's write lock costs a
//! hook no wait at all, and the events it could not write are spooled and stored later.

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
