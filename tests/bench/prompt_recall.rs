//! Memories given at a prompt and at a file's read, through the real `cairn-hook` (release)
//! with a real `cairn-worker` answering searches by meaning.
//!
//! - Quality, on the recall benchmarks in `tests/fixtures/recall-eval/` (each project's
//!   commits as memories, its changelog lines as questions): every question is sent as a
//!   `UserPromptSubmit` in a fresh session of its project. Hit rate: the memory the question
//!   is about is among those given. Noise: the share of prompts that receive anything when
//!   nothing relevant exists, for the questions of another project asked in this one and for
//!   a set of everyday prompts. Tokens: the mean `additionalContext` size (characters / 4)
//!   over all prompts. Also how many prompts went by words alone (the worker past the
//!   hook's deadline).
//! - Speed, at 100,000 memories (random vectors for them: the scan costs the same): wall
//!   time of `UserPromptSubmit` with the worker running, with no worker (words alone), of
//!   `PreToolUse` for `Read`, and of `PostToolUse` (no recall) beside them.
//!
//! The everyday prompts are the `held_out` ones of `everyday.json` there, which the
//! ranker is neither trained nor tuned on. `CAIRN_BENCH_RANKER_DIR=DIR` judges each
//! project with the weights trained without it (`DIR/<project>.json`, written by
//! `train_ranker.py --lopo DIR`, with the thresholds chosen without it), given to the hook
//! and the worker through `CAIRN_BENCH_RANKER`.
//!
//! Run: `cargo bench -p cairn --bench prompt_recall`. Needs the all-MiniLM-L6-v2 files:
//! `CAIRN_BENCH_MODEL_DIR`, else `target/test-model/` as the end-to-end tests fetch it.
//! `CAIRN_BENCH_DATA=DIR` starts each project from a copy of the database the quality
//! bench embedded in `DIR/<project>/`. `CAIRN_BENCH_PROJECTS` (comma-separated, default
//! `bat,jq,click`), `CAIRN_BENCH_QUESTIONS`
//! (most questions per project, default 120), `CAIRN_BENCH_RUNS` (hooks per speed case,
//! default 200), `CAIRN_BENCH_SKIP_QUALITY` / `CAIRN_BENCH_SKIP_SPEED`.
//!
//! Speed alone, as released: `CAIRN_BENCH_SKIP_QUALITY=1 cargo bench -p cairn --bench
//! prompt_recall`; `CAIRN_BENCH_MEMORIES` (default 100,000) for a smaller trial. Besides the
//! cases above, the worker stopped (SIGSTOP: it accepts nothing, as a worker stuck in a long
//! batch) with prompts arriving, and for each prompt case the longest wait for the worker
//! and how many hooks waited past the deadline by more than 1 ms (from the hooks' debug
//! logs; must be 0).

#[path = "common/moments.rs"]
mod moments;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cairn_core::memory::kind::Kind;
use cairn_core::memory::observations::{NewObservation, insert_observation};
use cairn_core::memory::rows::ObservationContent;
use cairn_core::memory::sessions;
use cairn_core::recall::embed::model;
use cairn_core::recall::embed::store::{self, Queued, Vectors};
use cairn_core::settings::EmbedSettings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use moments::{
    Half, context, hook, model_dir, pct, prompt, words_alone_count, worker, worker_meanings,
    worker_waits,
};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/recall-eval")
}

/// Everyday prompts no project's memory answers, never trained or tuned on.
fn everyday() -> Vec<String> {
    let text = std::fs::read_to_string(fixtures().join("everyday.json")).expect("everyday");
    let v: Value = serde_json::from_str(&text).expect("everyday json");
    v["held_out"]
        .as_array()
        .expect("held_out")
        .iter()
        .map(|p| p.as_str().expect("prompt").to_string())
        .collect()
}

/// For a project: the environment that has the hook and the worker rank with the weights
/// and thresholds chosen without it (`CAIRN_BENCH_RANKER_DIR`), or nothing.
fn held_out_weights(project: &str) -> Vec<(String, String)> {
    let Some(dir) = std::env::var_os("CAIRN_BENCH_RANKER_DIR") else {
        return Vec::new();
    };
    let path = Path::new(&dir).join(format!("{project}.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("held-out weights"))
        .expect("weights json");
    let mut env = vec![("CAIRN_BENCH_RANKER".to_string(), path.display().to_string())];
    for (setting, key) in [
        ("CAIRN_RECALL__MIN_RELEVANCE", "prompt"),
        ("CAIRN_SEARCH__MIN_RELEVANCE", "search"),
    ] {
        if let Some(t) = v["thresholds"][key].as_f64() {
            env.push((setting.to_string(), t.to_string()));
        }
    }
    env
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The references a block gives: the word after `- ` on each line.
fn refs(block: &str) -> Vec<String> {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

struct Question {
    text: String,
    relevant: HashSet<String>,
}

fn questions(project: &str, most: usize) -> Vec<Question> {
    let text =
        std::fs::read_to_string(fixtures().join(project).join("queries.jsonl")).expect("queries");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| Question {
            text: v["query"].as_str().unwrap_or_default().to_string(),
            relevant: v["relevant"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r.as_str().map(str::to_string))
                .collect(),
        })
        .take(most)
        .collect()
}

#[derive(Default)]
struct Tally {
    prompts: usize,
    given: usize,
    hits: usize,
    tokens: usize,
}

fn quality() {
    let projects: Vec<String> = std::env::var("CAIRN_BENCH_PROJECTS")
        .unwrap_or_else(|_| "bat,jq,click".into())
        .split(',')
        .map(str::to_string)
        .collect();
    let most = env_usize("CAIRN_BENCH_QUESTIONS", 120);
    let root = tempfile::tempdir().expect("tmp");
    println!("## quality (hit rate, noise, tokens), {most} questions at most per project\n");
    let (mut all_q, mut all_other, mut all_daily) =
        (Tally::default(), Tally::default(), Tally::default());
    let mut fallbacks = 0;
    let mut matched_elsewhere: Vec<String> = Vec::new();
    for (pi, project) in projects.iter().enumerate() {
        let data = root.path().join(project);
        let dir = DataDir::new(&data);
        // CAIRN_BENCH_DATA=DIR: a copy of the database the quality bench embedded there.
        let embedded = std::env::var_os("CAIRN_BENCH_DATA")
            .map(|d| Path::new(&d).join(project).join("cairn.db"))
            .filter(|db| db.is_file());
        if let Some(db) = embedded {
            std::fs::create_dir_all(&data).expect("data dir");
            std::fs::copy(db, dir.db()).expect("copy the embedded database");
        } else {
            let mut conn = db::open_data_dir(&dir, OpenOptions::default()).expect("open");
            let corpus = fixtures().join(project).join("corpus.jsonl");
            let file = std::io::BufReader::new(std::fs::File::open(&corpus).expect("corpus"));
            cairn_core::ops::exchange::import_jsonl(&mut conn, file).expect("import");
        }
        let embed = Command::new(env!("CARGO_BIN_EXE_cairn-worker"))
            .arg("--once")
            .env("CAIRN_DATA_DIR", &data)
            .env("HOME", &data)
            .env("CAIRN_MODEL__PROVIDER", "offline")
            .env("CAIRN_EMBED__MODEL_DIR", model_dir())
            .output()
            .expect("embed");
        assert!(embed.status.success());
        let subtitle: HashMap<String, String> = {
            let c = rusqlite::Connection::open(dir.db()).expect("open");
            let mut st = c
                .prepare("SELECT id, subtitle FROM observations")
                .expect("prepare");
            st.query_map([], |r| Ok((r.get::<_, i64>(0)?.to_string(), r.get(1)?)))
                .expect("query")
                .collect::<rusqlite::Result<_>>()
                .expect("rows")
        };
        let extra = held_out_weights(project);
        let extra: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let cwd = format!("/src/{project}");
        let _w = worker(&data, &cwd, &extra);
        let mut own = Tally::default();
        for (i, q) in questions(project, most).iter().enumerate() {
            let given = context(&hook(&data, &prompt(&format!("q{i}"), &cwd, &q.text), &extra).1);
            own.prompts += 1;
            if let Some(block) = given {
                own.given += 1;
                own.tokens += block.chars().count().div_ceil(4);
                if refs(&block)
                    .iter()
                    .any(|r| subtitle.get(r).is_some_and(|s| q.relevant.contains(s)))
                {
                    own.hits += 1;
                }
            }
        }
        let other_project = &projects[(pi + 1) % projects.len()];
        let mut other = Tally::default();
        for (i, q) in questions(other_project, most / 2).iter().enumerate() {
            let given = context(&hook(&data, &prompt(&format!("o{i}"), &cwd, &q.text), &extra).1);
            other.prompts += 1;
            if let Some(block) = given {
                other.given += 1;
                other.tokens += block.chars().count().div_ceil(4);
                matched_elsewhere.push(format!("{other_project} in {project}: {}", q.text));
            }
        }
        let mut daily = Tally::default();
        for (i, text) in everyday().iter().enumerate() {
            let given = context(&hook(&data, &prompt(&format!("d{i}"), &cwd, text), &extra).1);
            daily.prompts += 1;
            if let Some(block) = given {
                daily.given += 1;
                daily.tokens += block.chars().count().div_ceil(4);
                matched_elsewhere.push(format!("everyday in {project}: {text}"));
            }
        }
        let fell = words_alone_count(&data);
        fallbacks += fell;
        println!(
            "{project}: hit rate {:.3} ({}/{}), given {:.3}; noise: {other_project}'s questions {:.3} ({}/{}), everyday {:.3} ({}/{}); tokens/prompt {:.1}; by words alone {fell}",
            own.hits as f64 / own.prompts.max(1) as f64,
            own.hits,
            own.prompts,
            own.given as f64 / own.prompts.max(1) as f64,
            other.given as f64 / other.prompts.max(1) as f64,
            other.given,
            other.prompts,
            daily.given as f64 / daily.prompts.max(1) as f64,
            daily.given,
            daily.prompts,
            (own.tokens + other.tokens + daily.tokens) as f64
                / (own.prompts + other.prompts + daily.prompts).max(1) as f64,
        );
        for (t, s) in [
            (&mut all_q, own),
            (&mut all_other, other),
            (&mut all_daily, daily),
        ] {
            t.prompts += s.prompts;
            t.given += s.given;
            t.hits += s.hits;
            t.tokens += s.tokens;
        }
    }
    let noise_prompts = all_other.prompts + all_daily.prompts;
    println!(
        "\nall: hit rate {:.3} ({}/{}); noise {:.3} ({}/{}: other projects' questions {}/{}, everyday {}/{}); tokens per prompt {:.1}; by words alone {fallbacks}",
        all_q.hits as f64 / all_q.prompts.max(1) as f64,
        all_q.hits,
        all_q.prompts,
        (all_other.given + all_daily.given) as f64 / noise_prompts.max(1) as f64,
        all_other.given + all_daily.given,
        noise_prompts,
        all_other.given,
        all_other.prompts,
        all_daily.given,
        all_daily.prompts,
        (all_q.tokens + all_other.tokens + all_daily.tokens) as f64
            / (all_q.prompts + noise_prompts).max(1) as f64,
    );
    println!("\nnoise prompts that received something:");
    for m in matched_elsewhere {
        println!("- {m}");
    }
}

fn speed() {
    let runs = env_usize("CAIRN_BENCH_RUNS", 200);
    let root = tempfile::tempdir().expect("tmp");
    let data = root.path().join("data");
    let dir = DataDir::new(&data);
    let settings = EmbedSettings {
        model_dir: model_dir().display().to_string(),
        ..EmbedSettings::default()
    };
    let model_id = model::locate(&settings, &dir).expect("model").id;
    let titles: Vec<String> = {
        let text = std::fs::read_to_string(fixtures().join("bat/corpus.jsonl")).expect("corpus");
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["title"].as_str().map(str::to_string))
            .collect()
    };
    let n = env_usize("CAIRN_BENCH_MEMORIES", 100_000);
    let started = Instant::now();
    {
        let mut conn = db::open_data_dir(&dir, OpenOptions::default()).expect("open");
        let mut queued = Vec::with_capacity(n);
        db::write(&mut conn, |tx| {
            sessions::ensure(tx, "seed", "bench", "/src/bench", 1)?;
            for i in 0..n {
                let o = NewObservation {
                    session_id: Some("seed".into()),
                    project: "bench".into(),
                    prompt_number: Some(1),
                    kind: ["change", "bugfix", "feature", "discovery"][i % 4].into(),
                    origin: "model".into(),
                    created_at: 1_700_000_000_000 + i as i64 * 60_000,
                    content: ObservationContent {
                        title: format!("{} ({i})", titles[i % titles.len()]),
                        narrative: titles[(i * 7 + 3) % titles.len()].clone(),
                        files_modified: vec![format!("src/module_{}.rs", i % 500)],
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let id = insert_observation(tx, &o)?.id();
                queued.push(Queued {
                    kind: Kind::Observation,
                    id,
                    project: "bench".into(),
                    created_at: o.created_at,
                    text: String::new(),
                    parts: Vec::new(),
                });
            }
            Ok(())
        })
        .expect("seed");
        let mut state: u64 = 42;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2000) as f32 / 1000.0 - 1.0
        };
        let mut unit = || {
            let v: Vec<f32> = (0..384).map(|_| next()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
        };
        // Each memory has a title and a narrative: its vector and its two parts'.
        for chunk in queued.chunks(5_000) {
            let items: Vec<(Queued, Vectors)> = chunk
                .iter()
                .map(|q| {
                    let whole = unit();
                    let parts = vec![unit(), unit()];
                    (q.clone(), Vectors { whole, parts })
                })
                .collect();
            store::store(&mut conn, &model_id, &items).expect("vectors");
        }
    }
    println!(
        "\n## speed at {n} memories (seeded in {:.0} s), {runs} hooks per case\n",
        started.elapsed().as_secs_f64()
    );
    let prompts: Vec<&str> = titles.iter().take(runs).map(String::as_str).collect();
    let cwd = "/src/bench";
    let case = |name: &str, f: &dyn Fn(usize) -> Duration| -> Vec<Duration> {
        let mut t: Vec<Duration> = (0..runs).map(f).collect();
        t.sort();
        println!(
            "{name}: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            pct(&t, 0.5),
            pct(&t, 0.9),
            pct(&t, 0.99),
            pct(&t, 1.0)
        );
        t
    };
    let deadline = cairn_core::settings::Settings::load(&dir)
        .map(|l| l.settings.recall.worker_deadline_ms)
        .unwrap_or(25) as f64;
    // How long each hook since the last call waited for the worker, from its logs.
    let seen = std::cell::Cell::new(0usize);
    let waited = |name: &str| {
        let all = worker_waits(&data);
        let new = &all[seen.get().min(all.len())..];
        seen.set(all.len());
        let mut sorted = new.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |p: f64| {
            sorted
                .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        println!(
            "{name}: waited for the worker p50 {:.1} ms, max {:.1} ms; {} of {} hooks past the deadline ({deadline} ms) by more than 1 ms",
            at(0.5),
            at(1.0),
            new.iter().filter(|w| **w > deadline + 1.0).count(),
            new.len(),
        );
    };
    let post = |i: usize| {
        serde_json::json!({
            "hook_event_name": "PostToolUse", "session_id": format!("post{i}"), "cwd": cwd,
            "tool_name": "Bash", "tool_use_id": format!("t{i}"),
            "tool_input": {"command": "ls"}, "tool_response": {"stdout": "a"},
        })
        .to_string()
    };
    let read = |i: usize| {
        serde_json::json!({
            "hook_event_name": "PreToolUse", "session_id": format!("read{i}"), "cwd": cwd,
            "tool_name": "Read", "tool_use_id": format!("r{i}"),
            "tool_input": {"file_path": format!("/src/bench/src/module_{}.rs", i % 500)},
        })
        .to_string()
    };
    case("PostToolUse (no recall), no worker", &|i| {
        hook(&data, &post(i), &[]).0
    });
    case("UserPromptSubmit, words alone (no worker)", &|i| {
        hook(
            &data,
            &prompt(&format!("w{i}"), cwd, prompts[i % prompts.len()]),
            &[],
        )
        .0
    });
    waited("UserPromptSubmit, words alone (no worker)");
    case("PreToolUse Read, no worker", &|i| {
        hook(&data, &read(i), &[]).0
    });
    let before = words_alone_count(&data);
    {
        let w = worker(&data, cwd, &[]);
        // Not the warm-up's wait, which has a deadline of its own.
        seen.set(worker_waits(&data).len());
        case("UserPromptSubmit, worker running", &|i| {
            hook(
                &data,
                &prompt(&format!("m{i}"), cwd, prompts[i % prompts.len()]),
                &[],
            )
            .0
        });
        waited("UserPromptSubmit, worker running");
        let halves = worker_meanings(&data);
        let halves = &halves[halves.len().saturating_sub(runs)..];
        let median = |f: fn(&Half) -> f64| {
            let mut v: Vec<f64> = halves.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        println!(
            "the worker's half (embedding the prompt, its nearest neighbours), worker running: p50 {:.1} ms, of which (p50 each) the index caught up {:.1} ms, embedding {:.1} ms, neighbours {:.1} ms ({} logged)",
            median(|h| h.all),
            median(|h| h.refresh),
            median(|h| h.embedding),
            median(|h| h.neighbours),
            halves.len()
        );
        case("PreToolUse Read, worker running", &|i| {
            hook(&data, &read(i + runs), &[]).0
        });
        case("PostToolUse (no recall), worker running", &|i| {
            hook(&data, &post(i + runs), &[]).0
        });
        println!(
            "prompts past the worker's deadline (went by words alone) while it ran: {} of {runs}",
            words_alone_count(&data) - before
        );
        let stopped = words_alone_count(&data);
        let signal = |sig: &str| {
            let ok = Command::new("kill")
                .args([sig, &w.0.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill {sig}");
        };
        signal("-STOP");
        case("UserPromptSubmit, worker stopped (SIGSTOP)", &|i| {
            hook(
                &data,
                &prompt(&format!("z{i}"), cwd, prompts[i % prompts.len()]),
                &[],
            )
            .0
        });
        signal("-CONT");
        waited("UserPromptSubmit, worker stopped (SIGSTOP)");
        println!(
            "prompts that went by words alone while it was stopped: {} of {runs}",
            words_alone_count(&data) - stopped
        );
    }
}

fn main() {
    if std::env::var_os("CAIRN_BENCH_SKIP_QUALITY").is_none() {
        quality();
    }
    if std::env::var_os("CAIRN_BENCH_SKIP_SPEED").is_none() {
        speed();
    }
}
