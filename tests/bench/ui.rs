//! `cairn ui` page speed: the server time of every page (the `Server-Timing` header each
//! answer carries) on a database of 100,000 observations, 2,000 prompts and 2,000 turn
//! summaries over 400 sessions and 4 projects, served by the real `cairn ui`.
//!
//! ```sh
//! cargo bench -p cairn --bench ui                   # release build
//! cargo bench -p cairn --bench ui --profile dev     # debug build
//! CAIRN_BENCH_REPEAT=9 cargo bench -p cairn --bench ui
//! ```
//!
//! Each page is asked for `CAIRN_BENCH_REPEAT` times (default 7) on a connection of its
//! own, as a browser tab would; the table gives the median, lowest and highest server time
//! and whether the median is within the 50 ms budget. Search is full text only (the
//! sentence model is off), so the figures do not depend on model files being present.
//!
//! Seeding writes `target/bench-data/ui-100000/` once (one transaction, through the same
//! inserts the worker uses) and reuses it on later runs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_core::memory;
use cairn_core::memory::observations::{NewObservation, NewSummary, OBSERVATION_TYPES};
use cairn_core::memory::rows::ObservationContent;
use cairn_core::memory::sessions;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

const OBSERVATIONS: usize = 100_000;
const PROJECTS: &[&str] = &["acme-api", "webshop", "infra", "ml-pipeline"];
const SESSIONS_PER_PROJECT: usize = 100;
const PROMPTS_PER_SESSION: usize = 5;
const DAY: i64 = 86_400_000;
/// 2026-05-01T00:00:00Z
const START: i64 = 1_777_593_600_000;
const BUDGET_MS: f64 = 50.0;

const WORDS: &[&str] = &[
    "worker",
    "queue",
    "lease",
    "session",
    "database",
    "sqlite",
    "migration",
    "index",
    "query",
    "search",
    "token",
    "cache",
    "retry",
    "timeout",
    "schema",
    "hook",
    "batch",
    "model",
    "prompt",
    "summary",
    "context",
    "viewer",
    "socket",
    "config",
    "parser",
    "render",
    "deploy",
    "backup",
    "restore",
    "vector",
    "embedding",
    "ranking",
    "budget",
    "cursor",
    "feed",
    "page",
    "header",
    "cookie",
    "thread",
    "signal",
    "heartbeat",
    "rescue",
    "attempt",
    "journal",
];

/// A small deterministic generator (xorshift), so every run seeds the same database.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Words drawn as in real text: a Zipf-distributed vocabulary of 3,000 made-up words with
/// the technical words at ranks 40, 80, 120, ... (`worker` is in about one memory in ten,
/// `lease` in one in twenty), so a query matches a share of the memories as it would in a
/// real project rather than most of them.
struct Vocab {
    words: Vec<String>,
    /// Cumulative Zipf weights (1/rank).
    cumulative: Vec<f64>,
}

impl Vocab {
    fn new(rng: &mut Rng) -> Vocab {
        const SYLLABLES: &[&str] = &[
            "ka", "lo", "mi", "ren", "sto", "va", "qui", "del", "or", "pan", "zu", "tek", "bri",
            "mo", "fa", "nel", "gri", "sa", "tu", "vex",
        ];
        let mut words: Vec<String> = (0..3_000)
            .map(|_| {
                (0..2 + rng.below(2))
                    .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                    .collect()
            })
            .collect();
        for (i, w) in WORDS.iter().enumerate() {
            words[40 * (i + 1)] = (*w).to_string();
        }
        let mut total = 0.0;
        let cumulative = (1..=words.len())
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Vocab { words, cumulative }
    }

    fn words(&self, rng: &mut Rng, n: usize) -> String {
        let total = self.cumulative[self.cumulative.len() - 1];
        (0..n)
            .map(|_| {
                let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
                let i = self.cumulative.partition_point(|c| *c < u);
                self.words[i.min(self.words.len() - 1)].as_str()
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn bench_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/bench-data")
        .join(format!("ui-{OBSERVATIONS}"))
}

/// Seeds (or reuses) the data dir.
fn seeded() -> DataDir {
    let dd = DataDir::new(bench_dir());
    if dd.db().exists() {
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let have: i64 = conn
            .query_row("SELECT count(*) FROM observations", [], |r| r.get(0))
            .expect("count");
        if have as usize == OBSERVATIONS {
            eprintln!("reusing {}", dd.db().display());
            return dd;
        }
        drop(conn);
        std::fs::remove_dir_all(dd.root()).expect("remove stale bench data");
    }
    eprintln!(
        "seeding {OBSERVATIONS} observations into {}",
        dd.db().display()
    );
    let started = Instant::now();
    let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
    let mut rng = Rng(0x5eed_cafe);
    let vocab = Vocab::new(&mut rng);
    let sessions = PROJECTS.len() * SESSIONS_PER_PROJECT;
    let per_session = OBSERVATIONS / sessions;
    let per_prompt = per_session / PROMPTS_PER_SESSION;
    let span = 180 * DAY;
    db::write(&mut conn, |tx| {
        let mut insert_prompt = tx.prepare(
            "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for s in 0..sessions {
            // Sessions take turns between the projects, in time order.
            let project = PROJECTS[s % PROJECTS.len()];
            let sid = format!("bench-{s:05}");
            let began = START + s as i64 * span / sessions as i64;
            sessions::ensure(tx, &sid, project, &format!("/home/dev/{project}"), began)?;
            for p in 0..PROMPTS_PER_SESSION {
                let prompt_number = p as i64 + 1;
                let at = |i: usize| began + ((p * per_prompt + i) as i64) * 20_000;
                insert_prompt.execute(rusqlite::params![
                    sid,
                    project,
                    prompt_number,
                    format!("why does the {}", vocab.words(&mut rng, 8)),
                    at(0) - 5_000
                ])?;
                for i in 0..per_prompt {
                    let o = NewObservation {
                        session_id: Some(sid.clone()),
                        project: project.into(),
                        prompt_number: Some(prompt_number),
                        kind: OBSERVATION_TYPES[rng.below(OBSERVATION_TYPES.len())].into(),
                        origin: "model".into(),
                        created_at: at(i),
                        content: ObservationContent {
                            title: vocab.words(&mut rng, 6),
                            subtitle: vocab.words(&mut rng, 10),
                            narrative: vocab.words(&mut rng, 40),
                            facts: vec![vocab.words(&mut rng, 8), vocab.words(&mut rng, 8)],
                            concepts: vec!["how-it-works".into()],
                            files_read: vec![format!("src/{}.rs", vocab.words(&mut rng, 1))],
                            files_modified: Vec::new(),
                        },
                        ..NewObservation::default()
                    };
                    memory::observations::insert_observation(tx, &o)?;
                }
                memory::observations::upsert_summary(
                    tx,
                    &NewSummary {
                        session_id: sid.clone(),
                        project: project.into(),
                        prompt_number,
                        request: vocab.words(&mut rng, 10),
                        investigated: vocab.words(&mut rng, 20),
                        learned: vocab.words(&mut rng, 20),
                        completed: vocab.words(&mut rng, 15),
                        next_steps: vocab.words(&mut rng, 10),
                        origin: "model".into(),
                        created_at: at(per_prompt),
                        ..NewSummary::default()
                    },
                )?;
            }
        }
        // A month of model calls for the health page's chart.
        let mut call = tx.prepare(
            "INSERT INTO model_calls (provider, model, purpose, input_tokens, output_tokens,
                 latency_ms, outcome, created_at)
             VALUES ('anthropic', 'claude-haiku', 'observation', ?1, ?2, 900, 'ok', ?3)",
        )?;
        let now = cairn_core::clock::now_ms();
        for i in 0..3_000i64 {
            call.execute(rusqlite::params![
                2_000 + i % 900,
                400 + i % 70,
                now - i * 864_000
            ])?;
        }
        Ok(())
    })
    .expect("seed");
    eprintln!("seeded in {:.1} s", started.elapsed().as_secs_f64());
    dd
}

/// The running `cairn ui`, stopped on drop.
struct Ui {
    child: Child,
    addr: String,
    cookie: String,
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dd: &DataDir) -> Ui {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["ui", "--no-open", "--data-dir"])
        .arg(dd.root())
        .env_remove("CAIRN_DATA_DIR")
        .env("CAIRN_EMBED__PROVIDER", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start cairn ui");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its address");
    let url = line.trim().trim_start_matches("cairn ui: ");
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (addr, token) = rest.split_once("/?token=").expect("a token");
    let port = addr.rsplit(':').next().expect("port");
    Ui {
        child,
        addr: addr.to_string(),
        cookie: format!("cairn_{port}={token}"),
    }
}

/// One GET on a connection of its own: status, server time in ms, body.
fn get(ui: &Ui, path: &str) -> (u16, f64, String) {
    let mut s = TcpStream::connect(&ui.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\nConnection: close\r\n\r\n",
        ui.addr, ui.cookie
    )
    .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("answer");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let ms = head
        .lines()
        .find_map(|l| l.strip_prefix("Server-Timing: app;dur="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN);
    (status, ms, body.to_string())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let repeat: usize = std::env::var("CAIRN_BENCH_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7)
        .max(1);
    let dd = seeded();
    let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
    let one = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).expect(sql) };
    let last_obs = one("SELECT max(id) FROM observations");
    let last_summary = one("SELECT max(id) FROM session_summaries");
    let last_prompt = one("SELECT max(id) FROM user_prompts");
    let summary = one("SELECT min(id) FROM session_summaries");
    let session: String = conn
        .query_row(
            "SELECT session_id FROM observations WHERE id = ?1",
            [last_obs / 2],
            |r| r.get(0),
        )
        .expect("a session");
    drop(conn);
    let project = PROJECTS[0];
    let pages: Vec<(&str, String)> = vec![
        ("feed `/` (all projects, with the total count)", "/".into()),
        ("feed, one project", format!("/?project={project}")),
        (
            "feed, a page 1,000 memories back",
            format!(
                "/?before={}.{}.{}&from=1000",
                last_obs - 960,
                last_summary - 20,
                last_prompt - 20
            ),
        ),
        (
            "search `lease worker` (relevance, all projects)",
            "/search?q=lease+worker".into(),
        ),
        (
            "search `lease worker`, second page",
            "/search?q=lease+worker&from=50".into(),
        ),
        (
            "search `lease`, one project, newest",
            format!("/search?q=lease&project={project}&order=newest"),
        ),
        ("search, empty query (newest)", "/search?q=".into()),
        ("sessions", "/sessions".into()),
        ("sessions, page 5", "/sessions?from=200".into()),
        (
            "one session (250 observations)",
            format!("/session/{session}"),
        ),
        ("health", "/health".into()),
        (
            "one memory (observation)",
            format!("/memory/{}", last_obs / 3),
        ),
        ("one memory (summary)", format!("/memory/S{summary}")),
        (
            "timeline around a memory",
            format!("/timeline/{}", last_obs / 3),
        ),
        (
            "context (the SessionStart block, settings)",
            format!("/context?project={project}"),
        ),
        (
            "context with a prompt's memories",
            format!("/context?project={project}&prompt=why+does+the+lease+expire"),
        ),
    ];
    let ui = start(&dd);
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "`cairn ui` server time, {profile} build, {OBSERVATIONS} observations, median of {repeat} requests per page"
    );
    println!();
    println!("| page | median ms | lowest | highest | within 50 ms |");
    println!("| --- | ---: | ---: | ---: | --- |");
    let mut over = Vec::new();
    for (name, path) in &pages {
        let mut times = Vec::with_capacity(repeat);
        for _ in 0..repeat {
            let (status, ms, body) = get(&ui, path);
            assert_eq!(status, 200, "{path}: {body}");
            times.push(ms);
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let ok = median <= BUDGET_MS;
        if !ok {
            over.push(*name);
        }
        println!(
            "| {name} | {median:.1} | {:.1} | {:.1} | {} |",
            times[0],
            times[times.len() - 1],
            if ok { "yes" } else { "**no**" }
        );
    }
    println!();
    if over.is_empty() {
        println!("every page within {BUDGET_MS} ms");
    } else {
        println!("over {BUDGET_MS} ms: {}", over.join(", "));
    }
}
