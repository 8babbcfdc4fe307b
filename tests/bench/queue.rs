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
//!
//! A third column is the floor the queue is measured against: a plain rusqlite loop on a
//! bare table with one index on the claim columns (same pragmas, same transactions, same
//! batches), i.e. what SQLite costs with no queue logic at all.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use cairn_core::clock;
use cairn_core::memory::sessions;
use cairn_core::queue;
use cairn_core::queue::claim::{Fenced, JobKind, NewJob, Policy};
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

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
            queue::claim::enqueue(tx, &job, 3, now)
        })
        .expect("enqueue");
    }
}

/// The plain loop's table: a payload, a status and one index on the claim columns.
const PLAIN_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, payload TEXT NOT NULL,
    status INTEGER NOT NULL DEFAULT 0, available_at INTEGER NOT NULL, lease_until INTEGER);
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (status, available_at);";

fn plain_open(dir: &Path) -> rusqlite::Connection {
    std::fs::create_dir_all(dir).expect("plain dir");
    let conn = rusqlite::Connection::open(dir.join("plain.db")).expect("open plain");
    conn.busy_timeout(std::time::Duration::from_secs(60))
        .expect("busy timeout");
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .expect("wal");
    conn.execute_batch("PRAGMA synchronous = NORMAL;")
        .expect("pragmas");
    conn.execute_batch(PLAIN_SCHEMA).expect("plain schema");
    conn
}

/// The plain loop's enqueue: one immediate transaction per 1 KB job.
fn plain_enqueue(dir: &Path, n: usize) {
    let mut conn = plain_open(dir);
    let payload = "x".repeat(1024);
    for _ in 0..n {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        tx.prepare_cached("INSERT INTO jobs (payload, available_at) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(rusqlite::params![payload, clock::now_ms()]))
            .expect("insert");
        tx.commit().expect("commit");
    }
}

/// The plain loop's claim + ack: batches of 20, each claim and each ack its own transaction.
fn plain_drain(dir: &Path) -> usize {
    let mut conn = plain_open(dir);
    let mut n = 0;
    loop {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        let ids: Vec<i64> = tx
            .prepare_cached(
                "UPDATE jobs SET status = 1, lease_until = ?1
                 WHERE id IN (SELECT id FROM jobs WHERE status = 0 AND available_at <= ?1
                              ORDER BY id LIMIT 20)
                 RETURNING id",
            )
            .and_then(|mut s| {
                s.query_map([clock::now_ms()], |r| r.get(0))?
                    .collect::<Result<_, _>>()
            })
            .expect("claim");
        tx.commit().expect("commit");
        if ids.is_empty() {
            return n;
        }
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        {
            let mut ack = tx
                .prepare_cached("UPDATE jobs SET status = 2 WHERE id = ?1 AND status = 1")
                .expect("ack");
            for id in &ids {
                ack.execute([id]).expect("ack");
            }
        }
        tx.commit().expect("commit");
        n += ids.len();
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
        queue::claim::claim_batch(&mut conn, "bench", &policy, clock::now_ms()).expect("claim")
    {
        let r = queue::claim::ack(&mut conn, &batch, clock::now_ms(), |_| Ok(())).expect("ack");
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

/// Which queue a run drives: cairn's, or the plain loop it is measured against.
#[derive(Debug, Clone, Copy)]
enum Impl {
    Cairn,
    Plain,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Cairn => "cairn",
            Impl::Plain => "plain",
        }
    }

    fn parse(s: &str) -> Impl {
        if s == "plain" {
            Impl::Plain
        } else {
            Impl::Cairn
        }
    }

    fn enqueue(self, dir: &Path, session: &str, n: usize) {
        match self {
            Impl::Cairn => enqueue(dir, session, n),
            Impl::Plain => plain_enqueue(dir, n),
        }
    }

    fn drain(self, dir: &Path) -> usize {
        match self {
            Impl::Cairn => drain(dir),
            Impl::Plain => plain_drain(dir),
        }
    }
}

fn measure(which: Impl, root: &Path, jobs: usize) -> Rates {
    let one = root.join(format!("{}-one", which.name()));
    let t = Instant::now();
    which.enqueue(&one, "s", jobs);
    let enqueue_one = jobs as f64 / t.elapsed().as_secs_f64();

    let many = root.join(format!("{}-many", which.name()));
    which.enqueue(&many, "setup", 0);
    let per = jobs / WRITERS;
    let exe = std::env::current_exe().expect("current exe");
    let t = Instant::now();
    let children: Vec<_> = (0..WRITERS)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "writer",
                    which.name(),
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
    let drained = which.drain(&one);
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
        Impl::parse(&args[2]).enqueue(
            Path::new(&args[3]),
            &args[4],
            args[5].parse().expect("count"),
        );
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let jobs = env_usize("CAIRN_BENCH_JOBS", 20_000);
    let runs = env_usize("CAIRN_BENCH_RUNS", 5).max(1);
    let mut ours = Vec::new();
    let mut plain = Vec::new();
    let mut peer = Vec::new();
    let mut peer_error = None;
    for run in 0..runs {
        let tmp = tempfile::tempdir().expect("tempdir");
        ours.push(measure(Impl::Cairn, tmp.path(), jobs));
        plain.push(measure(Impl::Plain, tmp.path(), jobs));
        match peer_run(tmp.path(), jobs) {
            Ok(r) => peer.push(r),
            Err(e) => peer_error = Some(e),
        }
        eprintln!("run {}/{runs} done", run + 1);
    }
    let o = medians(&ours);
    let f = medians(&plain);
    println!(
        "queue benchmark: {jobs} jobs of 1 KB, {WRITERS} writer processes, batches of 20, median of {runs} runs (jobs/s)\n"
    );
    println!("| measure | cairn | plain loop | litequeue | cairn / plain | cairn / litequeue |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let p = (!peer.is_empty()).then(|| medians(&peer));
    for (name, ours, floor, theirs) in [
        (
            "enqueue, 1 process",
            o.enqueue_one,
            f.enqueue_one,
            p.map(|p| p.enqueue_one),
        ),
        (
            "enqueue, 16 processes",
            o.enqueue_many,
            f.enqueue_many,
            p.map(|p| p.enqueue_many),
        ),
        (
            "claim + ack",
            o.claim_ack,
            f.claim_ack,
            p.map(|p| p.claim_ack),
        ),
    ] {
        let vs_floor = ours / floor;
        match theirs {
            Some(t) => println!(
                "| {name} | {ours:.0} | {floor:.0} | {t:.0} | {vs_floor:.2}x | {:.1}x |",
                ours / t
            ),
            None => println!("| {name} | {ours:.0} | {floor:.0} | n/a | {vs_floor:.2}x | n/a |"),
        }
    }
    if let Some(e) = peer_error {
        println!("\nlitequeue did not run ({e}); `pip install litequeue` to compare");
    }
}
