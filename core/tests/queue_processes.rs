//! The queue across real processes: many writers and two claimers on one database file,
//! and a claimer killed mid-batch. This binary is its own harness (`harness = false`): run
//! without a role it orchestrates the scenarios, re-executing itself with a role argument
//! for each child process.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use cairn_core::clock;
use cairn_core::memory;
use cairn_core::memory::observations::NewObservation;
use cairn_core::memory::sessions;
use cairn_core::queue;
use cairn_core::queue::claim::{Fenced, JobKind, NewJob, Policy, RescueScope};
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

const WRITERS: usize = 16;
const JOBS_PER_WRITER: usize = 150;
const LEASE_MS: i64 = 60_000;
/// The lease of the claimer that gets killed: short, so the test waits little for it.
const HANG_LEASE_MS: i64 = 300;

fn policy() -> Policy {
    Policy {
        batching: true,
        max_size: 20,
        max_wait_ms: 0,
        lease_ms: LEASE_MS,
        max_attempts: 3,
        retry_base_ms: 10,
        retry_max_ms: 100,
    }
}

fn open(dir: &Path) -> rusqlite::Connection {
    db::open_data_dir(&DataDir::new(dir), OpenOptions::default()).expect("open database")
}

/// Role `writer DIR SESSION INDEX`: enqueues its jobs one transaction each, then a summary.
fn writer(dir: &Path, session: &str, index: usize) {
    let mut conn = open(dir);
    for i in 0..=JOBS_PER_WRITER {
        let (kind, key) = if i == JOBS_PER_WRITER {
            (JobKind::Summarize, format!("turn:{session}:{index}"))
        } else {
            (JobKind::Observation, format!("tool:w{index}-{i}"))
        };
        let payload = format!(
            "{{\"writer\":{index},\"i\":{i},\"pad\":\"{}\"}}",
            "x".repeat(900)
        );
        let job = NewJob {
            session_id: session,
            project: "proj",
            kind,
            prompt_number: index as i64,
            payload: &payload,
            dedupe_key: &key,
        };
        db::write(&mut conn, |tx| {
            sessions::ensure(tx, session, "proj", "/proj", clock::now_ms())?;
            queue::claim::enqueue(tx, &job, 3, clock::now_ms())
        })
        .expect("enqueue");
    }
}

/// Stores one observation per job, naming the job, inside the ack.
fn ack_with_results(conn: &mut rusqlite::Connection, batch: &queue::claim::Batch) -> Fenced {
    queue::claim::ack(conn, batch, clock::now_ms(), |tx| {
        for job in &batch.jobs {
            let o = NewObservation {
                session_id: Some(job.session_id.clone()),
                project: job.project.clone(),
                kind: "change".into(),
                source_job_ids: vec![job.id],
                origin: "test".into(),
                created_at: clock::now_ms(),
                content: cairn_core::memory::rows::ObservationContent {
                    title: format!("job {}", job.id),
                    ..Default::default()
                },
                ..Default::default()
            };
            memory::observations::insert_observation(tx, &o)?;
        }
        Ok(())
    })
    .expect("ack")
}

/// Role `claimer DIR NAME STOPFILE`: claims and acks until the stop file exists and
/// nothing is left; prints `claimed <id> <id>...` per batch.
fn claimer(dir: &Path, name: &str, stop: &Path) {
    let mut conn = open(dir);
    let out = std::io::stdout();
    loop {
        let stopping = stop.exists();
        match queue::claim::claim_batch(&mut conn, name, &policy(), clock::now_ms()).expect("claim")
        {
            Some(batch) => {
                assert_eq!(ack_with_results(&mut conn, &batch), Fenced::Done);
                let ids: Vec<String> = batch.ids().iter().map(i64::to_string).collect();
                let mut out = out.lock();
                writeln!(out, "claimed {}", ids.join(" ")).expect("stdout");
                out.flush().expect("flush");
            }
            None if stopping => return,
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Role `hang DIR`: claims one batch, prints its ids, then waits to be killed.
fn hang(dir: &Path) {
    let mut conn = open(dir);
    let short_lease = Policy {
        lease_ms: HANG_LEASE_MS,
        ..policy()
    };
    let batch = queue::claim::claim_batch(&mut conn, "doomed", &short_lease, clock::now_ms())
        .expect("claim")
        .expect("a batch to claim");
    let ids: Vec<String> = batch.ids().iter().map(i64::to_string).collect();
    println!("claimed {}", ids.join(" "));
    std::io::stdout().flush().expect("flush");
    std::thread::sleep(Duration::from_secs(120));
}

/// Kills the children it holds when dropped, so a failed scenario leaves no process behind.
struct Reaper(Vec<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

fn claimed_ids(output: &[u8]) -> Vec<i64> {
    String::from_utf8_lossy(output)
        .lines()
        .filter_map(|l| l.strip_prefix("claimed "))
        .flat_map(|l| l.split_whitespace().map(|x| x.parse::<i64>().expect("id")))
        .collect()
}

/// Checks every job is done, acked once, with exactly one observation naming it.
fn check_all_done_once(dir: &Path, expected_jobs: usize) {
    let conn = open(dir);
    let by_status: BTreeMap<String, i64> = conn
        .prepare("SELECT status, count(*) FROM pending_messages GROUP BY status")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    assert_eq!(
        by_status.get("done").copied(),
        Some(expected_jobs as i64),
        "{by_status:?}"
    );
    assert_eq!(by_status.len(), 1, "every job done: {by_status:?}");
    let dup: i64 = conn
        .query_row(
            "SELECT count(*) FROM (SELECT source_job_ids FROM observations GROUP BY source_job_ids HAVING count(*) > 1)",
            [],
            |r| r.get(0),
        )
        .expect("dups");
    assert_eq!(dup, 0, "an observation written twice for one job");
    let missing: i64 = conn
        .query_row(
            "SELECT count(*) FROM pending_messages p WHERE NOT EXISTS
               (SELECT 1 FROM observations o WHERE o.source_job_ids = json_array(p.id))",
            [],
            |r| r.get(0),
        )
        .expect("missing");
    assert_eq!(missing, 0, "a job done without its results");
}

fn many_writers_two_claimers(root: &Path) {
    let dir = root.join("many");
    let dir_s = dir.to_string_lossy().to_string();
    let stop = root.join("many.stop");
    let stop_s = stop.to_string_lossy().to_string();
    // Nothing is created up front: writers and claimers race to create the database.
    let mut claimers = Reaper(
        ["claimer-1", "claimer-2"]
            .iter()
            .map(|n| spawn(&["claimer", &dir_s, n, &stop_s]))
            .collect(),
    );
    let mut writers = Reaper(
        (0..WRITERS)
            .map(|i| spawn(&["writer", &dir_s, &format!("s{}", i % 8), &i.to_string()]))
            .collect(),
    );
    for w in std::mem::take(&mut writers.0) {
        let out = w.wait_with_output().expect("writer");
        assert!(out.status.success(), "a writer failed: {:?}", out.status);
    }
    std::fs::write(&stop, b"").expect("stop file");
    let mut all = Vec::new();
    let mut per_claimer = Vec::new();
    for c in std::mem::take(&mut claimers.0) {
        let out = c.wait_with_output().expect("claimer");
        assert!(out.status.success(), "a claimer failed: {:?}", out.status);
        let ids = claimed_ids(&out.stdout);
        per_claimer.push(ids.len());
        all.extend(ids);
    }
    let total = WRITERS * (JOBS_PER_WRITER + 1);
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), unique.len(), "a job was claimed twice");
    assert_eq!(unique.len(), total, "every job claimed once");
    check_all_done_once(&dir, total);
    eprintln!("  {total} jobs from {WRITERS} writers, claimed {per_claimer:?} by two claimers");
}

fn claimer_killed_mid_batch(root: &Path) {
    let dir = root.join("killed");
    let dir_s = dir.to_string_lossy().to_string();
    {
        let mut conn = open(&dir);
        for i in 0..30 {
            let key = format!("tool:{i}");
            let job = NewJob {
                session_id: "s",
                project: "proj",
                kind: JobKind::Observation,
                prompt_number: 1,
                payload: "{}",
                dedupe_key: &key,
            };
            db::write(&mut conn, |tx| {
                sessions::ensure(tx, "s", "proj", "/proj", 0)?;
                queue::claim::enqueue(tx, &job, 3, 0)
            })
            .expect("enqueue");
        }
    }
    let mut doomed = Reaper(vec![spawn(&["hang", &dir_s])]);
    let mut line = String::new();
    BufReader::new(doomed.0[0].stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read claimed ids");
    let hung = claimed_ids(line.as_bytes());
    assert_eq!(hung.len(), 20, "a full batch was claimed: {line}");
    drop(doomed); // kill -9

    let mut conn = open(&dir);
    let claimed: i64 = conn
        .query_row(
            "SELECT count(*) FROM pending_messages WHERE status = 'claimed'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(
        claimed, 20,
        "the dead claimer's jobs stay claimed until its lease ends"
    );
    let lease_until: i64 = conn
        .query_row("SELECT max(lease_until) FROM pending_messages", [], |r| {
            r.get(0)
        })
        .expect("lease");
    while clock::now_ms() <= lease_until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rescued =
        queue::claim::rescue(&mut conn, RescueScope::Expired, 3, clock::now_ms()).expect("rescue");
    assert_eq!(
        rescued.retrying, 20,
        "the dead claimer's jobs come back after the lease"
    );

    let stop = root.join("killed.stop");
    std::fs::write(&stop, b"").expect("stop");
    let out = spawn(&["claimer", &dir_s, "survivor", &stop.to_string_lossy()])
        .wait_with_output()
        .expect("claimer");
    assert!(out.status.success());
    assert_eq!(claimed_ids(&out.stdout).len(), 30);
    check_all_done_once(&dir, 30);
    let attempts: Vec<i64> = conn
        .prepare("SELECT attempts FROM pending_messages ORDER BY id")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    let with_attempt = attempts.iter().filter(|a| **a == 1).count();
    assert_eq!(with_attempt, 20, "the lost lease counts as one attempt");
}

/// A named end-to-end case, run in its own temp dir.
type Scenario = (&'static str, fn(&Path));

fn dir_arg(args: &[String], i: usize) -> PathBuf {
    PathBuf::from(&args[i])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("writer") => {
            writer(
                &dir_arg(&args, 2),
                &args[3],
                args[4].parse().expect("index"),
            );
            return ExitCode::SUCCESS;
        }
        Some("claimer") => {
            claimer(&dir_arg(&args, 2), &args[3], Path::new(&args[4]));
            return ExitCode::SUCCESS;
        }
        Some("hang") => {
            hang(&dir_arg(&args, 2));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    if args.iter().any(|a| a == "--list") {
        println!("many_writers_two_claimers: test\nclaimer_killed_mid_batch: test");
        return ExitCode::SUCCESS;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let scenarios: [Scenario; 2] = [
        ("many_writers_two_claimers", many_writers_two_claimers),
        ("claimer_killed_mid_batch", claimer_killed_mid_batch),
    ];
    // Like libtest: plain arguments are name filters (`cargo test -p cairn-core claimer`).
    let filters: Vec<&String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in scenarios {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let root = tmp.path().join(name);
        std::fs::create_dir_all(&root).expect("mkdir");
        match std::panic::catch_unwind(|| f(&root)) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
