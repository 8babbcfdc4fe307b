//! Hook benchmark: the real `cairn-hook` binary, spawned as Claude Code spawns it.
//!
//! - PostToolUse wall time (spawn → exit) while another connection (the worker's) is open,
//!   and while none is (the hook is the last to close); with the worker's connection open,
//!   run by run in turn with two references, so that the machine's drift hits all three
//!   alike: spawning `true`, and a bare Rust process that parses the payload and inserts
//!   it as one row into a one-table WAL database (this binary in `--bare` mode);
//! - SessionStart wall time with 100,000 observations in the database;
//! - peak RSS of a hook process (`getrusage(RUSAGE_CHILDREN)` in a small probe process);
//! - 32 hooks started at once: wall time until the last exits;
//! - 10,000 lone PostToolUse hooks one after another on a fresh data dir, no other
//!   connection ever open (the worker stopped): ms per hook at the start, around the
//!   1,000th and at the end, and the largest WAL seen, so that a WAL growing without
//!   bound (and every hook paying for it) shows.
//!
//! Run: `cargo bench -p cairn --bench hook` (release). `CAIRN_BENCH_RUNS` sets the number
//! of single-hook runs (default 300); `CAIRN_BENCH_LONE` the number of lone hooks (default
//! 10,000; `CAIRN_BENCH_LONE_ONLY` runs only those); `CAIRN_BENCH_HOOK` a hook binary to measure instead
//! of the one Cargo built (e.g. the statically linked one from `cargo hook-static`, copied
//! out of `target/release/` first, since the bench rebuilds that path).

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_core::memory;
use cairn_core::memory::observations::NewObservation;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

/// The hook binary measured: `CAIRN_BENCH_HOOK`, else the one Cargo built for this bench.
fn hook_exe() -> std::path::PathBuf {
    std::env::var_os("CAIRN_BENCH_HOOK")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_cairn-hook").into())
}

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/claude-code-hooks")
        .join(name);
    std::fs::read_to_string(&p).expect("fixture")
}

fn spawn(data: &Path, home: &Path, input: &[u8]) -> Child {
    let mut child = Command::new(hook_exe())
        .env("CAIRN_DATA_DIR", data)
        .env("HOME", home)
        .env("CAIRN_WORKER__AUTOSTART", "false")
        .env_remove("CAIRN_SUPPRESS_HOOKS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cairn-hook");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).expect("write stdin");
    drop(stdin);
    child
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8(out.stdout).expect("utf-8")
}

fn run_once(data: &Path, home: &Path, input: &[u8]) -> (Duration, String) {
    let start = Instant::now();
    let out = finish(spawn(data, home, input));
    (start.elapsed(), out)
}

fn tool_payload(i: usize) -> String {
    fixture("PostToolUse.json").replace(
        "toolu_fake_6b86e2cedc91474d9c85",
        &format!("toolu_bench_{i:08}"),
    )
}

/// The SessionStart fixture as the start of session `i`: each run is a new session, as
/// a session starts once (a resumed or compacted one is told only what it was not given).
fn start_payload(i: usize) -> String {
    let mut event: serde_json::Value =
        serde_json::from_str(&fixture("SessionStart.json")).expect("fixture json");
    event["session_id"] = format!("bench-start-{i:06}").into();
    event.to_string()
}

struct Stats {
    median: Duration,
    p90: Duration,
    min: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        median: v[v.len() / 2],
        p90: v[v.len() * 9 / 10],
        min: v[0],
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[allow(unsafe_code)] // getrusage: neither std nor rustix offers it
fn children_max_rss_kib() -> i64 {
    // SAFETY: getrusage only writes into the zeroed struct we own and pass by pointer.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) != 0 {
            return -1;
        }
        u.ru_maxrss
    }
}

fn seed_observations(dir: &DataDir, n: usize) {
    let mut conn = db::open_data_dir(dir, OpenOptions::default()).expect("open");
    let base = 1_790_000_000_000i64;
    db::write(&mut conn, |tx| {
        for s in 0..100 {
            tx.execute(
                "INSERT INTO sessions (session_id, project, started_at, updated_at)
                 VALUES (?1, 'acme-api', ?2, ?2)",
                rusqlite::params![format!("seed-{s}"), base],
            )?;
        }
        for i in 0..n {
            let o = NewObservation {
                session_id: Some(format!("seed-{}", i % 100)),
                project: "acme-api".into(),
                prompt_number: Some((i % 50) as i64),
                kind: ["discovery", "change", "bugfix", "feature", "decision"][i % 5].into(),
                origin: "model".into(),
                created_at: base + i as i64 * 1000,
                content: cairn_core::memory::rows::ObservationContent {
                    title: format!("Observation {i}: the parser handles case {}", i % 977),
                    subtitle: format!("subtitle {i}"),
                    narrative: format!(
                        "While working on module {} the assistant found that function f{} needs care with input {}.",
                        i % 37,
                        i % 101,
                        i
                    ),
                    facts: vec![format!("fact {i}"), format!("fact {}", i + 1)],
                    concepts: vec!["how-it-works".into()],
                    files_read: vec![format!("src/m{}.rs", i % 37)],
                    ..Default::default()
                },
                ..NewObservation::default()
            };
            memory::observations::insert_observation(tx, &o)?;
        }
        Ok(())
    })
    .expect("seed");
}

/// Peak RSS of hook processes, measured from a fresh, small process: a child started
/// with `vfork` (as `Command` does) inherits its parent's peak RSS in `ru_maxrss`, so the
/// benchmark process, grown by seeding, cannot measure its children itself. It re-runs its
/// own binary in probe mode, which spawns the hooks and reports their peak.
fn rss_probe(data: &Path, home: &Path, payload: &str, runs: usize) -> i64 {
    let payload_file = home.join("probe-payload.json");
    std::fs::write(&payload_file, payload).expect("payload");
    let out = Command::new(std::env::current_exe().expect("exe"))
        .arg("--rss-probe")
        .arg(data)
        .arg(home)
        .arg(&payload_file)
        .arg(runs.to_string())
        .output()
        .expect("probe");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("probe answer")
}

fn probe_main(args: &[String]) {
    let (data, home, payload) = (Path::new(&args[0]), Path::new(&args[1]), &args[2]);
    let runs: usize = args[3].parse().expect("runs");
    let input = std::fs::read(payload).expect("payload");
    for _ in 0..runs {
        finish(spawn(data, home, &input));
    }
    println!("{}", children_max_rss_kib());
}

/// The bare reference: read stdin, parse it as JSON, insert it as one row into a WAL
/// database with a one-table schema, exit. What any SQLite-backed hook must pay.
fn bare_main(db_path: &Path) {
    let mut input = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut input).expect("stdin");
    let event: serde_json::Value = serde_json::from_slice(&input).expect("json");
    let conn = rusqlite::Connection::open(db_path).expect("open");
    conn.busy_timeout(Duration::from_secs(5)).expect("busy");
    conn.execute_batch("PRAGMA synchronous = NORMAL;")
        .expect("pragma");
    conn.execute(
        "INSERT INTO events (tool_use_id, payload) VALUES (?1, ?2)",
        rusqlite::params![event["tool_use_id"].as_str(), event.to_string()],
    )
    .expect("insert");
    print!("{{\"continue\":true,\"suppressOutput\":true}}");
}

fn bare_create(db_path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db_path).expect("open bare");
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .expect("wal");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS events (
             id INTEGER PRIMARY KEY, tool_use_id TEXT UNIQUE, payload TEXT NOT NULL);",
    )
    .expect("bare schema");
    conn
}

/// Spawns `program args` with `input` on stdin (closed after), waits for its exit.
fn spawn_timed(program: &Path, args: &[&std::ffi::OsStr], input: &[u8]) -> Duration {
    let t = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let _ = stdin.write_all(input);
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{} failed", program.display());
    t.elapsed()
}

/// Lone PostToolUse hooks (`CAIRN_BENCH_LONE`, default 10,000) one after another on a fresh
/// data dir with no other connection ever open: report rows for the first 100, the 901st
/// to 1,000th and the last 100, and a line on the largest WAL seen.
fn lone_hooks(root: &Path, home: &Path) -> (Vec<String>, String) {
    let mut report = Vec::new();
    let lone: usize = std::env::var("CAIRN_BENCH_LONE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
        .max(200);
    let data4 = root.join("lone");
    let dir4 = DataDir::new(&data4);
    let wal = {
        let mut p = dir4.db().into_os_string();
        p.push("-wal");
        std::path::PathBuf::from(p)
    };
    let wal_size = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    run_once(&data4, home, fixture("SessionStart.json").as_bytes());
    run_once(&data4, home, fixture("UserPromptSubmit.json").as_bytes());
    let (mut times, mut max_wal, mut wal_at_1000) = (Vec::with_capacity(lone), 0, 0);
    for i in 0..lone {
        times.push(run_once(&data4, home, tool_payload(5_000_000 + i).as_bytes()).0);
        max_wal = max_wal.max(wal_size());
        if i + 1 == 1_000 {
            wal_at_1000 = max_wal;
        }
    }
    let n: i64 = db::open_data_dir(&dir4, OpenOptions::default())
        .expect("open")
        .query_row("SELECT count(*) FROM pending_messages", [], |r| r.get(0))
        .expect("count");
    assert_eq!(n as usize, lone, "every lone hook wrote its row");
    let window = |from: usize| stats(times[from.min(lone - 100)..][..100].to_vec());
    let mb = |b: u64| b as f64 / 1e6;
    for (what, from) in [("1-100", 0), ("901-1,000", 900), ("last 100", lone - 100)] {
        let w = window(from);
        report.push(format!(
            "| PostToolUse, lone hooks {what} of {lone} (no other connection ever) | {} | {} | {} | 100 |",
            ms(w.median),
            ms(w.p90),
            ms(w.min)
        ));
    }
    let wal_line = format!(
        "lone hooks: largest WAL {:.1} MB over the first 1,000, {:.1} MB over all {lone}; database {:.1} MB",
        mb(wal_at_1000),
        mb(max_wal),
        mb(std::fs::metadata(dir4.db()).map_or(0, |m| m.len()))
    );

    (report, wal_line)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--rss-probe") {
        probe_main(&args[i + 1..]);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--bare") {
        bare_main(Path::new(&args[i + 1]));
        return;
    }
    if std::env::var_os("CAIRN_BENCH_LONE_ONLY").is_some() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (rows, wal_line) = lone_hooks(tmp.path(), tmp.path());
        println!("hook binary: {}\n", hook_exe().display());
        println!("| case | median | p90 | min | runs |");
        println!("| --- | --- | --- | --- | --- |");
        for line in rows {
            println!("{line}");
        }
        println!("\n{wal_line}");
        return;
    }
    let runs: usize = std::env::var("CAIRN_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path();
    let mut report = Vec::new();

    // 1. PostToolUse with the worker's connection open, in turn with the two references
    //    (`true`; the bare Rust + SQLite process), then with no other connection.
    let data = tmp.path().join("post");
    let dir = DataDir::new(&data);
    run_once(&data, home, fixture("SessionStart.json").as_bytes());
    run_once(&data, home, fixture("UserPromptSubmit.json").as_bytes());
    let worker = db::open_data_dir(&dir, OpenOptions::default()).expect("worker connection");
    let bare_db = tmp.path().join("bare.db");
    let bare_worker = bare_create(&bare_db);
    let exe = std::env::current_exe().expect("exe");
    let true_exe = Path::new("true");
    let bare_args = [std::ffi::OsStr::new("--bare"), bare_db.as_os_str()];
    for i in 0..20 {
        run_once(&data, home, tool_payload(1_000_000 + i).as_bytes());
        spawn_timed(&exe, &bare_args, tool_payload(1_000_000 + i).as_bytes());
    }
    let (mut floor, mut bare, mut hook) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let payload = tool_payload(i);
        floor.push(spawn_timed(true_exe, &[], payload.as_bytes()));
        bare.push(spawn_timed(&exe, &bare_args, payload.as_bytes()));
        hook.push(run_once(&data, home, payload.as_bytes()).0);
    }
    let bare_rows: i64 = bare_worker
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .expect("bare count");
    assert_eq!(
        bare_rows as usize,
        runs + 20,
        "every bare run wrote its row"
    );
    let (floor, bare, with_worker) = (stats(floor), stats(bare), stats(hook));
    report.push(format!(
        "| baseline: spawn `true` (process start and exit only) | {} | {} | {} | {runs} |",
        ms(floor.median),
        ms(floor.p90),
        ms(floor.min)
    ));
    report.push(format!(
        "| reference: bare Rust process, parse + insert one row (one-table WAL database, another connection open) | {} | {} | {} | {runs} |",
        ms(bare.median),
        ms(bare.p90),
        ms(bare.min)
    ));
    let rss_post = rss_probe(&data, home, &tool_payload(9_000_000), 20);
    drop(worker);
    let times: Vec<Duration> = (0..runs)
        .map(|i| run_once(&data, home, tool_payload(2_000_000 + i).as_bytes()).0)
        .collect();
    let alone = stats(times);
    let n: i64 = db::open_data_dir(&dir, OpenOptions::default())
        .expect("open")
        .query_row("SELECT count(*) FROM pending_messages", [], |r| r.get(0))
        .expect("count");
    assert_eq!(n as usize, 2 * runs + 21, "every hook wrote its row");
    report.push(format!(
        "| PostToolUse, worker connection open | {} | {} | {} | {runs} |",
        ms(with_worker.median),
        ms(with_worker.p90),
        ms(with_worker.min)
    ));
    report.push(format!(
        "| PostToolUse, no other connection | {} | {} | {} | {runs} |",
        ms(alone.median),
        ms(alone.p90),
        ms(alone.min)
    ));

    // 2. SessionStart with 100,000 observations.
    let data2 = tmp.path().join("start");
    let dir2 = DataDir::new(&data2);
    let seed_start = Instant::now();
    seed_observations(&dir2, 100_000);
    eprintln!("seeded 100,000 observations in {:?}", seed_start.elapsed());
    if std::env::var_os("CAIRN_BENCH_SEED_ONLY").is_some() {
        let keep = tmp.keep();
        println!("seeded data dir kept at {}", keep.join("start").display());
        return;
    }
    let worker = db::open_data_dir(&dir2, OpenOptions::default()).expect("worker connection");
    let (_, answer) = run_once(&data2, home, start_payload(0).as_bytes());
    assert!(answer.contains("hookSpecificOutput"), "{answer}");
    let start_runs = (runs / 3).max(30);
    let times: Vec<Duration> = (1..=start_runs)
        .map(|i| run_once(&data2, home, start_payload(i).as_bytes()).0)
        .collect();
    let start = stats(times);
    let context_len = answer.len();
    report.push(format!(
        "| SessionStart, 100,000 observations ({context_len} bytes answered) | {} | {} | {} | {start_runs} |",
        ms(start.median),
        ms(start.p90),
        ms(start.min)
    ));
    let rss_start = rss_probe(&data2, home, &start_payload(start_runs + 1), 20);
    drop(worker);

    // 3. 32 hooks at once, worker connection open.
    let worker = db::open_data_dir(&dir, OpenOptions::default()).expect("worker connection");
    let rounds = (runs / 10).max(10);
    let mut walls = Vec::new();
    for r in 0..rounds {
        let payloads: Vec<String> = (0..32)
            .map(|i| tool_payload(3_000_000 + r * 100 + i))
            .collect();
        let t = Instant::now();
        let children: Vec<Child> = payloads
            .iter()
            .map(|p| spawn(&data, home, p.as_bytes()))
            .collect();
        for c in children {
            finish(c);
        }
        walls.push(t.elapsed());
    }
    drop(worker);
    let par = stats(walls);
    report.push(format!(
        "| 32 PostToolUse hooks at once (wall, until the last exits) | {} | {} | {} | {rounds} rounds |",
        ms(par.median),
        ms(par.p90),
        ms(par.min)
    ));
    let n: i64 = db::open_data_dir(&dir, OpenOptions::default())
        .expect("open")
        .query_row("SELECT count(*) FROM pending_messages", [], |r| r.get(0))
        .expect("count");
    assert_eq!(n as usize, 2 * runs + 21 + 32 * rounds);

    let (lone_rows, lone_wal) = lone_hooks(tmp.path(), home);
    report.extend(lone_rows);

    println!("hook binary: {}\n", hook_exe().display());
    println!("| case | median | p90 | min | runs |");
    println!("| --- | --- | --- | --- | --- |");
    for line in report {
        println!("{line}");
    }
    println!();
    println!(
        "peak RSS of a hook process (max of 20): PostToolUse {:.1} MB, SessionStart with 100,000 observations {:.1} MB",
        rss_post as f64 / 1024.0,
        rss_start as f64 / 1024.0
    );
    println!("{lone_wal}");
}
