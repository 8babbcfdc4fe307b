//! Sync latency benchmark: the time from a memory written on one device to it being
//! searchable on another, both with a running `cairn-worker`, through a real PostgreSQL
//! server on loopback (Debian's binaries, a cluster of its own in a temp dir: the sync
//! tests' `tests/common/postgres.rs`).
//!
//! The memory is written on device A through `cairn_core::memory` (as the worker's writer
//! stores one); the clock starts when its transaction commits and stops when device B's
//! store holds it (its full-text index is written in the same transaction, so it is
//! searchable from then on). Embedding is off: the figure excludes it. Memories are written
//! one at a time, each after the last arrived, at a random point of A's 200 ms look at its
//! store. Two runs: B notified (`LISTEN`/`NOTIFY`), then B polling every second
//! (`sync.listen` off), the fallback behind a pooler in transaction mode.
//!
//! Run: `cargo bench -p cairn --bench sync_latency` (`CAIRN_BENCH_MEMORIES`, default 120
//! per run). Prints p50, p90, p99 and the largest, in ms.

// The tests use all of it; the benchmark only starts a server.
#[allow(dead_code)]
#[path = "../common/postgres.rs"]
mod postgres;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_core::memory::observations::{self, NewObservation};
use cairn_core::memory::rows::ObservationContent;
use cairn_core::memory::sessions;
use cairn_core::store::{db, paths::DataDir};
use postgres::Pg;

/// One machine: a data dir, and its worker once started.
struct Device {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    worker: Option<Child>,
}

impl Device {
    fn new() -> Device {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        Device {
            _tmp: tmp,
            dir,
            worker: None,
        }
    }

    fn cmd(&self, bin: &str) -> Command {
        let exe = match bin {
            "cairn" => env!("CARGO_BIN_EXE_cairn"),
            _ => env!("CARGO_BIN_EXE_cairn-worker"),
        };
        let mut c = Command::new(exe);
        c.env("CAIRN_DATA_DIR", &self.dir)
            .env("HOME", self.dir.parent().expect("tmp"))
            .env("CAIRN_WORKER__AUTOSTART", "false")
            .env("CAIRN_SYNC__PROJECTS", "*")
            .env("CAIRN_MODEL__PROVIDER", "offline")
            .env("CAIRN_EMBED__PROVIDER", "off");
        c
    }

    fn cairn(&self, args: &[&str]) -> String {
        let out = self.cmd("cairn").args(args).output().expect("cairn");
        assert!(
            out.status.success(),
            "cairn {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Starts the worker and waits until it is connected, listening or not as `listens`.
    fn start_worker(&mut self, env: &[(&str, &str)], listens: bool) {
        let mut c = self.cmd("cairn-worker");
        c.envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.worker = Some(c.spawn().expect("start the worker"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.cairn(&["sync", "status", "--json", "--local"]);
            let v: serde_json::Value = serde_json::from_str(&status).expect("status json");
            if v["listening"] == listens {
                break;
            }
            assert!(Instant::now() < deadline, "the worker never connected");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop_worker(&mut self) {
        if let Some(mut w) = self.worker.take() {
            let pid = rustix::process::Pid::from_child(&w);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let _ = w.wait();
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(mut w) = self.worker.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

fn memory(i: usize, run: &str) -> NewObservation {
    NewObservation {
        session_id: Some(format!("latency-{run}")),
        project: "bench".into(),
        kind: "discovery".into(),
        origin: "model".into(),
        created_at: i as i64,
        content: ObservationContent {
            title: format!("{run} memory {i}"),
            narrative: format!("what the session of run {run} learned, number {i}"),
            ..ObservationContent::default()
        },
        ..NewObservation::default()
    }
}

/// Writes `n` memories on `a`, one at a time, and returns how long each took to arrive
/// in `b`'s store, in ms.
fn measure(a: &Path, b: &Path, n: usize, run: &str) -> Vec<f64> {
    let mut writer = db::open_data_dir(&DataDir::new(a), db::OpenOptions::default()).expect("a");
    let reader = rusqlite::Connection::open(b.join("cairn.db")).expect("b");
    reader
        .busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    db::write(&mut writer, |tx| {
        sessions::ensure(tx, &format!("latency-{run}"), "bench", "/bench", 0)
    })
    .expect("session");
    let mut seed = 0x9e37_79b9_u64;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // A random point of the writer's 200 ms look at its store.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(seed % 200));
        let m = memory(i, run);
        db::write(&mut writer, |tx| {
            observations::insert_observation(tx, &m).map(drop)
        })
        .expect("write");
        let start = Instant::now();
        let deadline = start + Duration::from_secs(120);
        loop {
            let here: i64 = reader
                .query_row(
                    "SELECT count(*) FROM observations WHERE title = ?1",
                    [&m.content.title],
                    |r| r.get(0),
                )
                .expect("read b");
            if here > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "memory {i} never arrived");
            std::thread::sleep(Duration::from_millis(2));
        }
        out.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    out
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{name:<34} n={:<4} p50 {:>7.1} ms  p90 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
        ms.len(),
        pct(&ms, 0.5),
        pct(&ms, 0.9),
        pct(&ms, 0.99),
        ms.last().copied().unwrap_or(0.0)
    );
}

fn main() {
    let n: usize = std::env::var("CAIRN_BENCH_MEMORIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let pg = Pg::start();
    let (mut a, mut b) = (Device::new(), Device::new());
    let init = a.cairn(&["sync", "init", "--url", &pg.url(), "--json"]);
    let key: serde_json::Value = serde_json::from_str(&init).expect("init json");
    let key = key["key"].as_str().expect("key").to_string();
    b.cairn(&["sync", "join", "--url", &pg.url(), "--key", &key]);
    println!(
        "sync latency: a memory written on device A until it is in device B's store (searchable), {n} memories per run, loopback PostgreSQL"
    );

    // Polls too rare to matter: only the notification brings a memory.
    a.start_worker(&[("CAIRN_SYNC__POLL_SECS", "600")], true);
    b.start_worker(&[("CAIRN_SYNC__POLL_SECS", "600")], true);
    report(
        "B notified (LISTEN/NOTIFY)",
        measure(&a.dir, &b.dir, n, "notified"),
    );
    b.stop_worker();
    b.start_worker(
        &[
            ("CAIRN_SYNC__LISTEN", "false"),
            ("CAIRN_SYNC__POLL_SECS", "1"),
        ],
        false,
    );
    report(
        "B polling every second",
        measure(&a.dir, &b.dir, n, "polling"),
    );
    a.stop_worker();
    b.stop_worker();
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
