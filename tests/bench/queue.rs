//! Queue benchmark: enqueue rate from one process and from 16 concurrent processes, and
//! claim+ack rate, on a file database, side by side with a peer durable SQLite queue
//! (litequeue, driven by `peer_litequeue.py`) doing the same work in the same run.
//!
//! `cargo bench -p cairn --bench queue` (release). `pip install litequeue` first for the
//! peer column; without it the peer is reported as missing. `CAIRN_BENCH_JOBS` (default
//! 20000) and `CAIRN_BENCH_RUNS` (default 5) change the size; medians are reported.
//!
//! Each enqueue is its own `BEGIN IMMEDIATE` transaction with the session upsert, exactly
//! as a hook does it; each job carries a 1 KB payload. Claims take batches of 20 and each
//! ack is its own transaction.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use cairn_core::db::{self, OpenOptions};
use cairn_core::paths::DataDir;
use cairn_core::queue::{self, Fenced, JobKind, NewJob, Policy};
use cairn_core::{clock, sessions};

const WRITERS: usize = 16;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(dir: &Path) -> rusqlite::Connection {
    db::open_data_dir(&DataDir::new(dir), OpenOptions::default()).expect("open database")
}

/// Enqueues `n` jobs for `session`, one transaction each.
fn enqueue(dir: &Path, session: &str, n: usize) {
    let mut conn = open(dir);
    let payload = format!("{{\"pad\":\"{}\"}}", "x".repeat(1010));
    for i in 0..n {
        let key = format!("tool:{session}:{i}");
        let job = NewJob {
            session_id: session,
            project: "bench",
            kind: JobKind::Observation,
            prompt_number: 0,
            payload: &payload,
            dedupe_key: &key,
        };
        db::write(&mut conn, |tx| {
            let now = clock::now_ms();
            sessions::ensure(tx, session, "bench", "/bench", now)?;
            queue::enqueue(tx, &job, 3, now)
        })
        .expect("enqueue");
    }
}

/// Claims and acks everything; returns how many jobs.
fn drain(dir: &Path) -> usize {
    let mut conn = open(dir);
    let policy = Policy {
        batching: true,
        max_size: 20,
        max_wait_ms: 0,
        ..Policy::default()
    };
    let mut n = 0;
    while let Some(batch) =
        queue::claim_batch(&mut conn, "bench", &policy, clock::now_ms()).expect("claim")
    {
        let r = queue::ack(&mut conn, &batch, clock::now_ms(), |_| Ok(())).expect("ack");
        assert_eq!(r, Fenced::Done);
        n += batch.jobs.len();
    }
    n
}

#[derive(Debug, Default, Clone, Copy)]
struct Rates {
    enqueue_one: f64,
    enqueue_many: f64,
    claim_ack: f64,
}

fn cairn_run(root: &Path, jobs: usize) -> Rates {
    let one = root.join("one");
    let t = Instant::now();
    enqueue(&one, "s", jobs);
    let enqueue_one = jobs as f64 / t.elapsed().as_secs_f64();

    let many = root.join("many");
    drop(open(&many));
    let per = jobs / WRITERS;
    let exe = std::env::current_exe().expect("current exe");
    let t = Instant::now();
    let children: Vec<_> = (0..WRITERS)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "writer",
                    &many.to_string_lossy(),
                    &format!("w{i}"),
                    &per.to_string(),
                ])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn writer")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a writer failed");
    }
    let enqueue_many = (per * WRITERS) as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    let drained = drain(&one);
    assert_eq!(drained, jobs);
    let claim_ack = jobs as f64 / t.elapsed().as_secs_f64();
    Rates {
        enqueue_one,
        enqueue_many,
        claim_ack,
    }
}

fn peer_run(root: &Path, jobs: usize) -> Result<Rates, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/bench/peer_litequeue.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(root.join("peer.db"))
        .arg(jobs.to_string())
        .arg(WRITERS.to_string())
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("failed")
            .to_string());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    if let Some(e) = v.get("error") {
        return Err(e.to_string());
    }
    Ok(Rates {
        enqueue_one: jobs as f64 / f("enqueue_one_s"),
        enqueue_many: f("enqueue_many_jobs") / f("enqueue_many_s"),
        claim_ack: f("claim_ack_jobs") / f("claim_ack_s"),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn medians(runs: &[Rates]) -> Rates {
    Rates {
        enqueue_one: median(runs.iter().map(|r| r.enqueue_one).collect()),
        enqueue_many: median(runs.iter().map(|r| r.enqueue_many).collect()),
        claim_ack: median(runs.iter().map(|r| r.claim_ack).collect()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("writer") {
        enqueue(
            Path::new(&args[2]),
            &args[3],
            args[4].parse().expect("count"),
        );
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let jobs = env_usize("CAIRN_BENCH_JOBS", 20_000);
    let runs = env_usize("CAIRN_BENCH_RUNS", 5).max(1);
    let mut ours = Vec::new();
    let mut peer = Vec::new();
    let mut peer_error = None;
    for run in 0..runs {
        let tmp = tempfile::tempdir().expect("tempdir");
        ours.push(cairn_run(tmp.path(), jobs));
        match peer_run(tmp.path(), jobs) {
            Ok(r) => peer.push(r),
            Err(e) => peer_error = Some(e),
        }
        eprintln!("run {}/{runs} done", run + 1);
    }
    let o = medians(&ours);
    println!(
        "queue benchmark: {jobs} jobs of 1 KB, {WRITERS} writer processes, batches of 20, median of {runs} runs (jobs/s)\n"
    );
    println!("| measure | cairn | litequeue | cairn / litequeue |");
    println!("| --- | ---: | ---: | ---: |");
    let p = (!peer.is_empty()).then(|| medians(&peer));
    for (name, ours, theirs) in [
        (
            "enqueue, 1 process",
            o.enqueue_one,
            p.map(|p| p.enqueue_one),
        ),
        (
            "enqueue, 16 processes",
            o.enqueue_many,
            p.map(|p| p.enqueue_many),
        ),
        ("claim + ack", o.claim_ack, p.map(|p| p.claim_ack)),
    ] {
        match theirs {
            Some(t) => println!("| {name} | {ours:.0} | {t:.0} | {:.1}x |", ours / t),
            None => println!("| {name} | {ours:.0} | n/a | n/a |"),
        }
    }
    if let Some(e) = peer_error {
        println!("\nlitequeue did not run ({e}); `pip install litequeue` to compare");
    }
}
