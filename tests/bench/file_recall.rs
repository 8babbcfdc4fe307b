//! What cairn adds to a session, replayed through the real `cairn-hook` with a real
//! `cairn-worker` running (answering the prompts' searches by meaning on its socket).
//!
//! Each folder of `tests/fixtures/file-recall/` holds a project's history as memories and
//! one session as Claude Code's hook payloads (`SessionStart`, then per turn a
//! `UserPromptSubmit` and a `PreToolUse` for each `Read` and `Edit`); see its README. The
//! payloads are sent in order, each to a fresh hook process, as Claude Code would.
//!
//! - File reads: of the files read that have memories (an earlier memory changed them), the
//!   share that received them (at their read or their edit); those that did not, told apart
//!   (their memories were already given earlier in the session, or none was found); the
//!   reads of files without memories that received something (noise); the tokens.
//! - The whole session: the tokens of the `SessionStart` index, of every prompt's and every
//!   file's `additionalContext`, in total and per part; memories given twice (must be 0);
//!   answers that would change a call (a decision, an updated input; must be 0).
//!
//! Tokens are characters / 4, rounded up, as cairn counts them. Run:
//! `cargo bench -p cairn --bench file_recall`. Needs the all-MiniLM-L6-v2 files:
//! `CAIRN_BENCH_MODEL_DIR`, else `target/test-model/` as the end-to-end tests fetch it.
//! `CAIRN_BENCH_PROJECTS` (comma-separated folders, default all). The hook's settings come
//! from the environment as usual (e.g. `CAIRN_RECALL__WORKER_DEADLINE_MS`).

// The prompt bench uses all of it; this one neither the prompt nor the waits.
#[allow(dead_code)]
#[path = "common/moments.rs"]
mod moments;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cairn_core::recall::moment;
use cairn_core::settings::RecallSettings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use moments::{context, hook, model_dir, pct, words_alone_count, worker};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/file-recall")
}

fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// Whether an answer would change the call it answers: a decision, an updated input, or
/// a stop.
fn changes_the_call(answer: &Value) -> bool {
    let out = &answer["hookSpecificOutput"];
    answer.get("decision").is_some()
        || answer["continue"] == Value::Bool(false)
        || ["permissionDecision", "updatedInput", "decision"]
            .iter()
            .any(|k| out.get(k).is_some())
}

/// The files the memories changed, relative to the project.
fn files_with_memories(memories: &Path) -> HashSet<String> {
    std::fs::read_to_string(memories)
        .expect("memories")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|v| {
            v["files_modified"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What one moment of the session received.
#[derive(Default)]
struct Part {
    answers: usize,
    given: usize,
    tokens: usize,
    times: Vec<Duration>,
}

impl Part {
    fn add(&mut self, took: Duration, given: &Option<String>) {
        self.answers += 1;
        self.times.push(took);
        if let Some(g) = given {
            self.given += 1;
            self.tokens += tokens(g);
        }
    }
}

fn replay(project: &str) {
    let folder = fixtures().join(project);
    let root = tempfile::tempdir().expect("tmp");
    let data = root.path().join("data");
    let dir = DataDir::new(&data);
    {
        let mut conn = db::open_data_dir(&dir, OpenOptions::default()).expect("open");
        let file = std::io::BufReader::new(
            std::fs::File::open(folder.join("memories.jsonl")).expect("memories"),
        );
        cairn_core::ops::exchange::import_jsonl(&mut conn, file).expect("import");
    }
    let started = Instant::now();
    let embed = Command::new(env!("CARGO_BIN_EXE_cairn-worker"))
        .arg("--once")
        .env("CAIRN_DATA_DIR", &data)
        .env("HOME", &data)
        .env("CAIRN_MODEL__PROVIDER", "offline")
        .env("CAIRN_EMBED__MODEL_DIR", model_dir())
        .output()
        .expect("embed");
    assert!(embed.status.success(), "the memories were not embedded");
    let with_memories = files_with_memories(&folder.join("memories.jsonl"));
    let events: Vec<Value> = std::fs::read_to_string(folder.join("session.jsonl"))
        .expect("session")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let cwd = events[0]["cwd"].as_str().expect("cwd").to_string();
    let session = events[0]["session_id"]
        .as_str()
        .expect("session")
        .to_string();
    let _w = worker(&data, &cwd, &[]);
    let memories = std::fs::read_to_string(folder.join("memories.jsonl"))
        .expect("memories")
        .matches(r#""record": "observation""#)
        .count();
    println!(
        "## {project}: {memories} memories about {} files, embedded, and a worker started in {:.0} s; {} events\n",
        with_memories.len(),
        started.elapsed().as_secs_f64(),
        events.len()
    );

    let before = words_alone_count(&data);
    let (mut start, mut prompts, mut reads, mut edits) = (
        Part::default(),
        Part::default(),
        Part::default(),
        Part::default(),
    );
    let mut changed = 0;
    // Per file read, in the order first read: whether it received anything (read or edit).
    let mut files: BTreeMap<String, bool> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for ev in &events {
        let (took, answer) = hook(&data, &ev.to_string(), &[]);
        let given = context(&answer);
        match ev["hook_event_name"].as_str().unwrap_or_default() {
            "SessionStart" => start.add(took, &given),
            "UserPromptSubmit" => prompts.add(took, &given),
            "PreToolUse" => {
                if changes_the_call(&answer) {
                    changed += 1;
                }
                let path = ev["tool_input"]["file_path"].as_str().unwrap_or_default();
                let rel = path
                    .strip_prefix(&format!("{cwd}/"))
                    .unwrap_or(path)
                    .to_string();
                if ev["tool_name"] == "Read" {
                    reads.add(took, &given);
                    if !files.contains_key(&rel) {
                        order.push(rel.clone());
                    }
                } else {
                    edits.add(took, &given);
                }
                let received = files.entry(rel).or_default();
                *received |= given.is_some();
            }
            other => panic!("unexpected event {other}"),
        }
    }
    let fell = words_alone_count(&data) - before;

    let conn = db::open_data_dir(&dir, OpenOptions::default()).expect("open");
    let settings = RecallSettings::default();
    let (mut received, mut given_before, mut not_found, mut noise) = (0, 0, 0, 0);
    let mut missed: Vec<String> = Vec::new();
    let mut noisy: Vec<String> = Vec::new();
    let mut has = 0;
    for f in &order {
        let got = files[f];
        if with_memories.contains(f) {
            has += 1;
            if got {
                received += 1;
            } else {
                // Outside the session: would the file have been given something?
                let alone =
                    moment::at_file(&conn, project, None, &format!("{cwd}/{f}"), None, &settings)
                        .expect("at_file");
                if alone.block.is_empty() {
                    not_found += 1;
                    missed.push(format!("{f} (not found)"));
                } else {
                    given_before += 1;
                    missed.push(format!("{f} (its memories were given earlier)"));
                }
            }
        } else if got {
            noise += 1;
            noisy.push(f.clone());
        }
    }
    let per_moment: Vec<(String, i64, i64)> = conn
        .prepare(
            "SELECT moment, COUNT(*), SUM(tokens) FROM memory_given WHERE session_id = ?1
             GROUP BY moment ORDER BY moment",
        )
        .expect("prepare")
        .query_map([&session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    let twice: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM (SELECT 1 FROM memory_given WHERE session_id = ?1
             GROUP BY kind, memory_id HAVING COUNT(*) > 1)",
            [&session],
            |r| r.get(0),
        )
        .expect("twice");

    let files_without = order.len() - has;
    println!(
        "file reads: {} reads of {} files, {has} of them with memories: received {received} ({:.3}), \
         given earlier in the session {given_before}, not found {not_found}; \
         {files_without} files without memories, {noise} received something (noise {:.3})",
        reads.answers,
        order.len(),
        received as f64 / has.max(1) as f64,
        noise as f64 / files_without.max(1) as f64,
    );
    println!(
        "file tokens: {} at reads ({} of {} reads given), {} at edits ({} of {} edits given); \
         {:.1} per read, {:.1} per file given",
        reads.tokens,
        reads.given,
        reads.answers,
        edits.tokens,
        edits.given,
        edits.answers,
        reads.tokens as f64 / reads.answers.max(1) as f64,
        (reads.tokens + edits.tokens) as f64 / (reads.given + edits.given).max(1) as f64,
    );
    for m in &missed {
        println!("- missed: {m}");
    }
    for n in &noisy {
        println!("- noise: {n}");
    }
    let total = start.tokens + prompts.tokens + reads.tokens + edits.tokens;
    println!(
        "\nsession total: {total} tokens: SessionStart index {}, prompts {} ({} of {} given, \
         {:.1} per prompt; {fell} by words alone), files {} ({} reads and edits given)",
        start.tokens,
        prompts.tokens,
        prompts.given,
        prompts.answers,
        prompts.tokens as f64 / prompts.answers.max(1) as f64,
        reads.tokens + edits.tokens,
        reads.given + edits.given,
    );
    for (moment, n, t) in &per_moment {
        println!("- memory_given {moment}: {n} memories, {t} tokens of lines");
    }
    println!("memories given twice in the session: {twice}; answers changing a call: {changed}");
    for (name, part) in [
        ("SessionStart", &mut start),
        ("UserPromptSubmit", &mut prompts),
        ("PreToolUse Read", &mut reads),
        ("PreToolUse Edit", &mut edits),
    ] {
        part.times.sort();
        println!(
            "hook wall time, {name}: p50 {:.1} ms, max {:.1} ms ({} runs)",
            pct(&part.times, 0.5),
            pct(&part.times, 1.0),
            part.times.len()
        );
    }
    println!();
}

fn main() {
    let only: Option<Vec<String>> = std::env::var("CAIRN_BENCH_PROJECTS")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let mut projects: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .flatten()
        .filter(|e| e.path().join("session.jsonl").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|p| only.as_ref().is_none_or(|o| o.contains(p)))
        .collect();
    projects.sort();
    for p in projects {
        replay(&p);
    }
}
