//! Sync benchmark: push and pull throughput through a real PostgreSQL server on loopback
//! (started like the sync tests, `tests/common/postgres.rs`), a new device's first pull,
//! and what the server stores per 100,000 memories.
//!
//! `cargo bench -p cairn --bench sync` (release). `CAIRN_BENCH_SYNC_N` (default 20,000)
//! is how many memories device A holds and pushes, and device B pulls as a new device;
//! set it to 1000000 for the first pull of a million. `CAIRN_BENCH_RUNS` (default 3)
//! repeats the push and the pull, each on fresh data dirs and a fresh space; medians are
//! reported.
//!
//! The memories look like the worker's: about 1 KB each (a title, a 600-character
//! narrative, three facts, two concepts, two files), 100 per session, so a push also
//! carries one session record per 100 memories. Each direction is timed in its parts:
//! *stage* (read the store, seal each record, queue it in the outbox, one local
//! transaction), *push* (send the outbox, batches of 500 per server transaction), *pull*
//! (read each batch of 1,000, open it, apply it through `memory` with the cursor's move,
//! one local transaction per batch; full-text indexing and the embedding queue included).

// The tests use all of it; the benchmark only starts a server and asks it a size.
#[allow(dead_code)]
#[path = "../common/postgres.rs"]
mod postgres;

use std::path::Path;
use std::time::Instant;

use cairn_core::memory::observations::{self, NewObservation};
use cairn_core::memory::rows::ObservationContent;
use cairn_core::memory::sessions;
use cairn_core::settings::SyncSettings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use cairn_core::sync;

use postgres::Pg;

const PER_SESSION: usize = 100;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(dir: &Path) -> (DataDir, rusqlite::Connection) {
    let d = DataDir::new(dir);
    let conn = db::open_data_dir(&d, OpenOptions::default()).expect("open database");
    (d, conn)
}

const WORDS: &[&str] = &[
    "lease",
    "worker",
    "queue",
    "retry",
    "index",
    "schema",
    "token",
    "cache",
    "deploy",
    "session",
    "summary",
    "parser",
    "socket",
    "timeout",
    "vector",
    "budget",
    "migration",
    "backoff",
    "checkpoint",
    "journal",
    "cursor",
    "tombstone",
    "payload",
    "handler",
];

/// `n` observations in sessions of [`PER_SESSION`], one transaction.
fn seed(conn: &mut rusqlite::Connection, n: usize) {
    db::write(conn, |tx| {
        for i in 0..n {
            let session = format!("bench-session-{}", i / PER_SESSION);
            let at = 1_700_000_000_000 + i as i64 * 1000;
            if i % PER_SESSION == 0 {
                sessions::ensure(tx, &session, "bench", "/work/bench", at)?;
            }
            let word = |k: usize| WORDS[(i * 7 + k * 13) % WORDS.len()];
            let narrative: String = (0..90).map(&word).collect::<Vec<_>>().join(" ");
            let o = NewObservation {
                session_id: Some(session),
                project: "bench".into(),
                prompt_number: Some((i % PER_SESSION) as i64 / 5 + 1),
                kind: "discovery".into(),
                original_type: None,
                content: ObservationContent {
                    title: format!("The {} {} of memory {i}", word(1), word(2)),
                    subtitle: format!("How the {} meets the {}", word(3), word(4)),
                    narrative,
                    facts: (0..3)
                        .map(|k| format!("fact {k} of {i}: the {} holds", word(k + 5)))
                        .collect(),
                    concepts: vec![word(8).into(), word(9).into()],
                    files_read: vec![format!("src/{}.rs", word(10))],
                    files_modified: vec![format!("src/{}/{i}.rs", word(11))],
                },
                source_job_ids: Vec::new(),
                origin: "model".into(),
                created_at: at,
            };
            observations::insert_observation(tx, &o)?;
        }
        Ok(())
    })
    .expect("seed");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Run {
    stage: f64,
    push: f64,
    pull: f64,
    records: usize,
    memories: usize,
    pulled_added: usize,
}

/// One run: device A seeds `n` memories, stages and pushes them into a new space; device B
/// joins and pulls them all.
fn run(pg: &Pg, n: usize) -> Run {
    let tmp = tempfile::tempdir().expect("tempdir");
    let settings = SyncSettings {
        projects: vec!["*".into()],
        prompts: false,
        ..SyncSettings::default()
    };
    let (dir_a, mut a) = open(&tmp.path().join("a"));
    seed(&mut a, n);
    let mut setup_a = sync::init(&dir_a, &mut a, &pg.url(), "bench-a").expect("init");

    let t = Instant::now();
    let records = sync::stage(&mut a, &setup_a, &settings, 1).expect("stage");
    let stage = t.elapsed().as_secs_f64();
    let mut client = setup_a.url.connect().expect("connect");
    let t = Instant::now();
    let pushed = sync::push(&mut a, &mut client, &mut setup_a).expect("push");
    let push = t.elapsed().as_secs_f64();
    assert_eq!(pushed, records);

    let (dir_b, mut b) = open(&tmp.path().join("b"));
    let key = setup_a.key.encode();
    let setup_b = sync::join(&dir_b, &mut b, &pg.url(), &key, "bench-b").expect("join");
    let mut client = setup_b.url.connect().expect("connect");
    let t = Instant::now();
    let moved = sync::pull(&mut b, &mut client, &setup_b, 2).expect("pull");
    let pull = t.elapsed().as_secs_f64();
    assert_eq!(moved.pulled, records);
    let on_b: i64 = b
        .query_row("SELECT count(*) FROM observations", [], |r| r.get(0))
        .expect("count");
    assert_eq!(on_b as usize, n, "every memory arrived once");
    Run {
        stage,
        push,
        pull,
        records,
        memories: n,
        pulled_added: moved.added,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let n = env_usize("CAIRN_BENCH_SYNC_N", 20_000);
    let runs = env_usize("CAIRN_BENCH_RUNS", 3).max(1);
    let profile = if cfg!(debug_assertions) {
        "dev (debug) build"
    } else {
        "release build"
    };
    println!("sync benchmark: {n} memories, {runs} runs, {profile}, PostgreSQL on loopback");
    let pg = Pg::start();
    let mut all = Vec::new();
    for i in 0..runs {
        let r = run(&pg, n);
        println!(
            "  run {}: stage {:.2}s, push {:.2}s, pull {:.2}s ({} records, {} added)",
            i + 1,
            r.stage,
            r.push,
            r.pull,
            r.records,
            r.pulled_added
        );
        all.push(r);
    }
    let per_s = |secs: f64, count: usize| count as f64 / secs;
    let memories = all[0].memories;
    let stage = median(all.iter().map(|r| per_s(r.stage, r.memories)).collect());
    let push = median(all.iter().map(|r| per_s(r.push, r.memories)).collect());
    let out = median(
        all.iter()
            .map(|r| per_s(r.stage + r.push, r.memories))
            .collect(),
    );
    let pull = median(all.iter().map(|r| per_s(r.pull, r.memories)).collect());
    let first_pull = median(all.iter().map(|r| r.pull).collect());
    println!();
    println!("| measure ({memories} memories, median of {runs}) | value |");
    println!("|---|---|");
    println!("| stage (seal into the outbox) | {stage:.0} memories/s |");
    println!("| push (outbox to the server) | {push:.0} memories/s |");
    println!("| out: stage + push | {out:.0} memories/s |");
    println!("| in: pull (read, open, apply, index) | {pull:.0} memories/s |");
    println!("| a new device's first pull of {memories} | {first_pull:.1} s |");

    // What the server keeps: the records table with its index and TOAST, over every run's
    // space (each run pushed the same number of memories).
    let bytes: f64 = pg
        .sql("SELECT pg_total_relation_size('cairn_records')")
        .parse()
        .expect("size");
    let rows: f64 = pg
        .sql("SELECT count(*) FROM cairn_records")
        .parse()
        .expect("rows");
    let total_memories = (memories * runs) as f64;
    println!(
        "| server storage per 100,000 memories (pg_total_relation_size) | {:.0} MB ({:.0} bytes per record, {rows:.0} records) |",
        bytes / total_memories * 100_000.0 / 1e6,
        bytes / rows
    );
}
