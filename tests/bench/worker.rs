//! Worker benchmark: the real `cairn-worker` against a fake model that answers at once and
//! counts what it receives.
//!
//! 1. Cost: a scripted session of 200 tool calls over 20 turns → input tokens per stored
//!    observation, model calls per turn, and the largest prompt per turn (it must not grow
//!    with the session).
//! 2. Throughput: jobs per second through the whole worker (claim, prompt, HTTP call,
//!    parse, store, ack) for many sessions, with the fake model and with the offline
//!    extractor.
//! 3. Quality with an imperfect model: the session of 1 again, against a fake model that
//!    also answers one call with a context-length error, one with a 429 and
//!    `Retry-After`, and some with malformed replies → calls per turn, input tokens per
//!    tool event and per stored observation, wasted tokens (usable replies paid for and
//!    thrown away), malformed replies' tokens, and the largest prompt per turn.
//!
//! Run: `cargo bench -p cairn --bench worker`. Tokens are estimated as characters / 4 by
//! the fake model (the rule cairn uses elsewhere); every prompt character is counted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cairn_core::memory::sessions;
use cairn_core::queue;
use cairn_core::queue::claim::{JobKind, NewJob};
use cairn_core::queue::payload::{ToolEvent, TurnEnd};
use cairn_core::store::{db, paths::DataDir};
use serde_json::{Value, json};

/// What the fake model saw: (prompt chars, is summary) per request.
type Seen = Arc<Mutex<Vec<(usize, bool)>>>;

/// Failures the fake model answers with, by request number.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    /// This request gets Anthropic's "prompt is too long" (a context 10% smaller than the
    /// prompt).
    context_error_at: Option<usize>,
    /// This request gets a 429 with `Retry-After: 1`.
    rate_limit_at: Option<usize>,
    /// Every observation request whose number is this modulo 11 gets prose, no XML.
    malformed_mod_11: Option<usize>,
}

fn start_model() -> (String, Seen) {
    start_model_with(Faults::default())
}

fn start_model_with(faults: Faults) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen: Seen = Arc::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || serve(stream, &s, faults));
        }
    });
    (url, seen)
}

fn serve(stream: std::net::TcpStream, seen: &Mutex<Vec<(usize, bool)>>, faults: Faults) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let system = req["system"].as_str().unwrap_or_default();
        let user = req["messages"][0]["content"].as_str().unwrap_or_default();
        let chars = system.chars().count() + user.chars().count();
        let is_summary = user.contains("<last_assistant_message>");
        let n = {
            let mut seen = seen.lock().expect("lock");
            seen.push((chars, is_summary));
            seen.len() - 1
        };
        let fault = if faults.context_error_at == Some(n) {
            Some((
                400,
                "",
                json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": format!("prompt is too long: {} tokens > {} maximum", chars / 4, chars / 4 * 9 / 10)}})
                .to_string(),
            ))
        } else if faults.rate_limit_at == Some(n) {
            Some((
                429,
                "retry-after: 1\r\n",
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"rate limited"}}"#
                    .to_string(),
            ))
        } else {
            None
        };
        if let Some((status, headers, out)) = fault {
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n{out}",
                out.len()
            );
            if reader.get_mut().write_all(resp.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let malformed = !is_summary && faults.malformed_mod_11 == Some(n % 11);
        let text = if malformed {
            "I reviewed these tool calls; the build was fixed and the module refactored."
                .to_string()
        } else if is_summary {
            "<summary><request>r</request><completed>done</completed></summary>".to_string()
        } else {
            // One observation per edit or failure in the prompt, named after its turn and
            // position (the header quotes the turn's request, "turn N: ...").
            let turn = user
                .split("<user_request>turn ")
                .nth(1)
                .and_then(|t| t.split(':').next())
                .unwrap_or("?");
            let mut xml = String::new();
            for (i, part) in user.split("<event ").skip(1).enumerate() {
                if part.contains("tool=\"Edit\"") || part.contains("status=\"failed\"") {
                    xml.push_str(&format!(
                        "<observation><type>change</type><title>Turn {turn} change {i}</title><facts><fact>f</fact></facts></observation>"
                    ));
                }
            }
            if xml.is_empty() {
                "<none/>".into()
            } else {
                xml
            }
        };
        let out = json!({
            "type": "message",
            "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": chars / 4, "output_tokens": text.len() / 4},
        })
        .to_string();
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{out}",
            out.len()
        );
        if reader.get_mut().write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// Tool call `i` of a turn: reads with big outputs, edits, commands, searches, a failure.
fn tool_call(turn: usize, i: usize) -> ToolEvent {
    let id = format!("toolu_t{turn}c{i}");
    let file = format!("/home/dev/acme-api/src/module_{}.rs", (turn * 7 + i) % 23);
    let (name, input, response, failed, error) = match i % 10 {
        0 | 3 | 6 => (
            "Read",
            json!({"file_path": file}),
            json!({"type": "text", "file": {"filePath": file, "content": "fn body() { let x = 1; }\n".repeat(160)}}),
            false,
            None,
        ),
        1 | 7 => (
            "Edit",
            json!({"file_path": file, "old_string": "let x = 1;\n".repeat(15), "new_string": "let x = compute(2);\n".repeat(15)}),
            json!({"filePath": file, "structuredPatch": []}),
            false,
            None,
        ),
        2 | 8 => (
            "Bash",
            json!({"command": format!("cargo test -p acme module_{i}"), "description": "Run tests"}),
            json!({"stdout": "test result: ok. 42 passed\n".repeat(40), "stderr": "", "interrupted": false}),
            false,
            None,
        ),
        4 => (
            "Grep",
            json!({"pattern": "compute", "path": "/home/dev/acme-api"}),
            json!({"filenames": (0..30).map(|k| format!("src/m{k}.rs")).collect::<Vec<_>>()}),
            false,
            None,
        ),
        5 => (
            "Bash",
            json!({"command": "cargo build", "description": "Build"}),
            Value::Null,
            true,
            Some("error[E0425]: cannot find value `y` in this scope\n".repeat(10)),
        ),
        _ => (
            "Glob",
            json!({"pattern": "src/**/*.rs"}),
            json!({"filenames": (0..40).map(|k| format!("src/f{k}.rs")).collect::<Vec<_>>()}),
            false,
            None,
        ),
    };
    ToolEvent {
        tool_name: name.into(),
        tool_use_id: id,
        tool_input: input,
        tool_response: response,
        error,
        failed,
        cwd: "/home/dev/acme-api".into(),
        ..Default::default()
    }
}

/// Queues `turns` turns of `calls` tool calls each, for `sessions` sessions.
fn seed(dir: &Path, sessions_n: usize, turns: usize, calls: usize) -> usize {
    let dd = DataDir::new(dir);
    let mut conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
    let now = cairn_core::clock::now_ms();
    let mut jobs = 0;
    for s in 0..sessions_n {
        let sid = format!("bench-session-{s}");
        for t in 1..=turns {
            jobs += db::write(&mut conn, |tx| {
                sessions::ensure(tx, &sid, "acme-api", "/home/dev/acme-api", now)?;
                tx.execute(
                    "UPDATE sessions SET prompt_counter = ?2 WHERE session_id = ?1",
                    rusqlite::params![sid, t as i64],
                )?;
                tx.execute(
                    "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
                     VALUES (?1, 'acme-api', ?2, ?3, ?4)",
                    rusqlite::params![sid, t as i64, format!("turn {t}: refactor module {t} and fix the build"), now],
                )?;
                let mut n = 0;
                let mut add = |kind, payload: String, key: String| -> cairn_core::Result<()> {
                    let job = NewJob {
                        session_id: &sid,
                        project: "acme-api",
                        kind,
                        prompt_number: t as i64,
                        payload: &payload,
                        dedupe_key: &key,
                    };
                    queue::claim::enqueue(tx, &job, 3, now)?;
                    n += 1;
                    Ok(())
                };
                for i in 0..calls {
                    let ev = tool_call(t, i);
                    add(JobKind::Observation, serde_json::to_string(&ev).expect("json"), format!("{sid}:{}", ev.tool_use_id))?;
                }
                let end = TurnEnd {
                    last_assistant_message: format!("Turn {t} done: module {t} refactored, build fixed. ").repeat(5),
                    ..Default::default()
                };
                add(JobKind::Summarize, serde_json::to_string(&end).expect("json"), format!("{sid}:stop:{t}"))?;
                Ok(n)
            })
            .expect("seed");
        }
    }
    jobs
}

/// Runs `cairn-worker --once` on `dir`; returns the wall time in seconds.
fn drain(dir: &Path, model_url: Option<&str>) -> f64 {
    drain_with(dir, model_url, &[])
}

fn drain_with(dir: &Path, model_url: Option<&str>, env: &[(&str, &str)]) -> f64 {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn-worker"));
    // Two calls in flight, as before worker.concurrency became automatic (it would pick
    // one for this fake model on 127.0.0.1).
    c.env("CAIRN_WORKER__CONCURRENCY", "2");
    c.envs(env.iter().copied());
    c.arg("--once")
        .env("CAIRN_DATA_DIR", dir)
        .env("HOME", dir)
        .env("CAIRN_WORKER__POLL_MS", "20")
        .env_remove("ANTHROPIC_BASE_URL");
    match model_url {
        Some(url) => {
            c.env("ANTHROPIC_API_KEY", "bench")
                .env("ANTHROPIC_BASE_URL", url);
        }
        None => {
            c.env_remove("ANTHROPIC_API_KEY");
        }
    }
    let t = Instant::now();
    let out = c.output().expect("run worker");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed().as_secs_f64()
}

fn count(dir: &Path, sql: &str) -> i64 {
    let c = rusqlite::Connection::open(dir.join("cairn.db")).expect("db");
    c.query_row(sql, [], |r| r.get(0)).expect(sql)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // 1. Cost of one scripted session: 200 tool calls over 20 turns.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (url, seen) = start_model();
    let jobs = seed(tmp.path(), 1, 20, 10);
    drain(tmp.path(), Some(&url));
    let done = count(
        tmp.path(),
        "SELECT count(*) FROM pending_messages WHERE status = 'done'",
    );
    assert_eq!(done as usize, jobs, "every job done");
    let observations = count(tmp.path(), "SELECT count(*) FROM observations");
    assert_eq!(
        observations, 60,
        "3 edits or failures per turn, each its own observation"
    );
    let input_tokens = count(tmp.path(), "SELECT sum(input_tokens) FROM model_calls");
    let calls = seen.lock().expect("lock").clone();
    let obs_calls = calls.iter().filter(|(_, s)| !s).count();
    let largest = calls.iter().map(|(c, _)| *c).max().unwrap_or(0);
    let per_turn: Vec<i64> = (1..=20)
        .map(|t| {
            count(
                tmp.path(),
                &format!(
                    "SELECT coalesce(max(prompt_chars), 0) FROM model_calls m
                     WHERE EXISTS (SELECT 1 FROM pending_messages p, json_each(m.job_ids) j
                                   WHERE p.id = j.value AND p.prompt_number = {t})"
                ),
            )
        })
        .collect();
    println!("worker bench 1: scripted session, 200 tool calls over 20 turns");
    println!("  jobs: {jobs} (200 tool calls + 20 turn ends), all done");
    println!("  observations stored: {observations}");
    println!(
        "  model calls: {} ({} observation, {} summary) = {:.2} per turn",
        calls.len(),
        obs_calls,
        calls.len() - obs_calls,
        calls.len() as f64 / 20.0
    );
    println!(
        "  input tokens: {input_tokens} total, {:.0} per stored observation",
        input_tokens as f64 / observations.max(1) as f64
    );
    println!(
        "  largest prompt: {largest} chars (cap {})",
        cairn_core::settings::ModelSettings::default().max_prompt_chars
    );
    println!(
        "  largest prompt by turn: first {} / middle {} / last {} chars",
        per_turn[0], per_turn[9], per_turn[19]
    );
    assert!(
        per_turn[19] <= per_turn[0] + 1_000,
        "prompts grew with the session: {per_turn:?}"
    );

    // 2. Throughput: 20 sessions × 5 turns × 10 calls (1,100 jobs), median of 3 runs.
    for (label, model) in [
        ("fake model (instant HTTP)", Some(url.as_str())),
        ("offline extractor", None),
    ] {
        let mut rates = Vec::new();
        let mut jobs_n = 0;
        for _ in 0..3 {
            let tmp = tempfile::tempdir().expect("tempdir");
            jobs_n = seed(tmp.path(), 20, 5, 10);
            let secs = drain(tmp.path(), model);
            let done = count(
                tmp.path(),
                "SELECT count(*) FROM pending_messages WHERE status = 'done'",
            );
            assert_eq!(done as usize, jobs_n);
            rates.push(jobs_n as f64 / secs);
        }
        println!(
            "worker bench 2: {label}: {jobs_n} jobs, median {:.0} jobs/s (runs: {})",
            median(rates.clone()),
            rates
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    // 3. The session of 1 against an imperfect model.
    imperfect();
}

fn imperfect() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let faults = Faults {
        context_error_at: Some(0),
        rate_limit_at: Some(5),
        malformed_mod_11: Some(8),
    };
    let (url, seen) = start_model_with(faults);
    let jobs = seed(tmp.path(), 1, 20, 10);
    let secs = drain_with(
        tmp.path(),
        Some(&url),
        // Failed attempts are retried at once, so --once drains everything.
        &[("CAIRN_QUEUE__RETRY_BASE_SECS", "0")],
    );
    let dir = tmp.path();
    let done = count(
        dir,
        "SELECT count(*) FROM pending_messages WHERE status = 'done'",
    );
    assert_eq!(done as usize, jobs, "every job done");
    let observations = count(dir, "SELECT count(*) FROM observations");
    let calls = seen.lock().expect("lock").len();
    let rows = count(dir, "SELECT count(*) FROM model_calls");
    assert_eq!(rows as usize, calls, "every call recorded");
    let input = count(dir, "SELECT sum(input_tokens) FROM model_calls");
    let by = |outcome: &str, what: &str| {
        count(
            dir,
            &format!(
                "SELECT coalesce(sum({what}), 0) FROM model_calls WHERE outcome IN ({outcome})"
            ),
        )
    };
    let rejected = by("'error'", "1");
    let malformed_calls = by("'unusable'", "1");
    let malformed_tokens = by("'unusable'", "input_tokens + output_tokens");
    // Usable replies paid for and thrown away: a call that answered usably, whose jobs
    // were sent to the model again afterwards.
    let wasted = count(
        dir,
        "SELECT coalesce(sum(m.input_tokens + m.output_tokens), 0) FROM model_calls m
         WHERE m.outcome IN ('ok', 'empty')
           AND EXISTS (SELECT 1 FROM model_calls later, json_each(later.job_ids) l,
                              json_each(m.job_ids) j
                       WHERE later.id > m.id AND l.value = j.value)",
    );
    let per_turn: Vec<i64> = (1..=20)
        .map(|t| {
            count(
                dir,
                &format!(
                    "SELECT coalesce(max(prompt_chars), 0) FROM model_calls m
                     WHERE m.outcome != 'error'
                       AND EXISTS (SELECT 1 FROM pending_messages p, json_each(m.job_ids) j
                                   WHERE p.id = j.value AND p.prompt_number = {t})"
                ),
            )
        })
        .collect();
    let learned = count(
        dir,
        "SELECT coalesce(max(max_prompt_chars), 0) FROM model_limits",
    );
    println!("worker bench 3: the session of 1 against an imperfect model ({secs:.1}s)");
    println!(
        "  faults: call 1 'prompt is too long', call 6 429 with Retry-After 1 s, \
         observation calls numbered 8 mod 11 answered in prose"
    );
    println!("  jobs: {jobs}, all done; observations stored: {observations}");
    println!(
        "  model calls: {calls} = {:.2} per turn ({rejected} rejected, {malformed_calls} malformed)",
        calls as f64 / 20.0
    );
    println!(
        "  input tokens: {input} total, {:.0} per tool event, {:.0} per stored observation",
        input as f64 / 200.0,
        input as f64 / observations.max(1) as f64
    );
    println!("  wasted tokens (usable replies paid for again): {wasted}");
    println!("  malformed replies: {malformed_tokens} tokens");
    println!("  prompt size learned from the context error: {learned} chars");
    println!(
        "  largest prompt by turn: first {} / middle {} / last {} chars (max {})",
        per_turn[0],
        per_turn[9],
        per_turn[19],
        per_turn.iter().max().unwrap_or(&0)
    );
    assert_eq!(wasted, 0, "usable replies were thrown away");
    assert_eq!(observations, 60, "every change and failure observed once");
}
