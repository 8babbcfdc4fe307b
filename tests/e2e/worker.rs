//! `cairn-worker` end to end: the real binary on a temp data dir, jobs built from the real
//! hook fixtures, and a fake model server (a std `TcpListener` on 127.0.0.1:0 answering
//! from a script).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_core::memory::sessions;
use cairn_core::queue;
use cairn_core::queue::claim::{JobKind, NewJob};
use cairn_core::queue::payload::{ToolEvent, TurnEnd};
use cairn_core::store::{db, lock, paths::DataDir};
use cairn_core::worker::usage;
use serde_json::{Value, json};

use crate::support::{TestEnv, hook_fixture, stderr, stdout};

// ---------------------------------------------------------------------------------------
// The fake model server.

/// A request the fake server received.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
    at: Instant,
}

impl Request {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("request body is JSON")
    }
    /// The prompt's characters (system and user text), whichever API it was sent to.
    fn prompt_chars(&self) -> usize {
        let b = self.json();
        let text = |v: &Value| v.as_str().map_or(0, |s| s.chars().count());
        text(&b["system"])
            + b["messages"]
                .as_array()
                .map_or(0, |m| m.iter().map(|m| text(&m["content"])).sum())
    }
    /// True for a summary prompt.
    fn is_summary(&self) -> bool {
        self.body.contains("last_assistant_message")
    }
}

/// What the server answers.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    delay: Duration,
}

impl Reply {
    fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.into(),
            delay: Duration::ZERO,
        }
    }
    /// A Messages API answer holding `text`.
    fn anthropic(text: &str) -> Reply {
        Reply::status(
            200,
            &json!({
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "usage": {"input_tokens": 120, "output_tokens": 30},
            })
            .to_string(),
        )
    }
    /// A chat-completions answer holding `text`.
    fn openai(text: &str) -> Reply {
        Reply::status(
            200,
            &json!({
                "choices": [{"message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 110, "completion_tokens": 25},
            })
            .to_string(),
        )
    }
    /// llama.cpp's answer to a prompt longer than its context (`--ctx-size`).
    fn llama_too_long(tokens: usize, ctx: usize) -> Reply {
        Reply::status(
            400,
            &json!({"error": {
                "code": 400,
                "message": format!("request ({tokens} tokens) exceeds the available context size ({ctx} tokens), try increasing it"),
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": ctx,
            }})
            .to_string(),
        )
    }
    /// Anthropic's.
    fn anthropic_too_long(tokens: usize, ctx: usize) -> Reply {
        Reply::status(
            400,
            &json!({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": format!("prompt is too long: {tokens} tokens > {ctx} maximum"),
            }})
            .to_string(),
        )
    }
    /// OpenAI's.
    fn openai_too_long(tokens: usize, ctx: usize) -> Reply {
        Reply::status(
            400,
            &json!({"error": {
                "message": format!("This model's maximum context length is {ctx} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."),
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }})
            .to_string(),
        )
    }
    /// Anthropic's rate limit.
    fn anthropic_429(secs: u64) -> Reply {
        Reply::status(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
        )
        .header("retry-after", &secs.to_string())
    }
    /// OpenAI's rate limit.
    fn openai_429(secs: u64) -> Reply {
        Reply::status(
            429,
            r#"{"error":{"message":"Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        )
        .header("retry-after", &secs.to_string())
    }
    fn delayed(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
    fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
}

type Responder = dyn Fn(usize, &Request) -> Reply + Send + Sync;

/// A model stand-in: answers request `n` with `responder(n, request)`.
struct FakeModel {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
    responder: Arc<Mutex<Arc<Responder>>>,
    /// Requests being answered now, and the most ever at once.
    flight: Arc<Flight>,
}

#[derive(Debug, Default)]
struct Flight {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl FakeModel {
    fn start(responder: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static) -> FakeModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
        let responder: Arc<Mutex<Arc<Responder>>> = Arc::new(Mutex::new(Arc::new(responder)));
        let flight: Arc<Flight> = Arc::default();
        let (reqs, resp, fl) = (requests.clone(), responder.clone(), flight.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (reqs, resp, fl) = (reqs.clone(), resp.clone(), fl.clone());
                std::thread::spawn(move || serve(stream, &reqs, &resp, &fl));
            }
        });
        FakeModel {
            url,
            requests,
            responder,
            flight,
        }
    }

    /// Always the same answer.
    fn always(reply: Reply) -> FakeModel {
        FakeModel::start(move |_, _| reply.clone())
    }

    /// The answers in order, then the last one again.
    fn script(replies: Vec<Reply>) -> FakeModel {
        FakeModel::start(move |n, _| replies[n.min(replies.len() - 1)].clone())
    }

    fn set(&self, responder: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static) {
        *self.responder.lock().expect("lock") = Arc::new(responder);
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("lock").clone()
    }

    fn wait_for_requests(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.requests().len() < n {
            assert!(
                Instant::now() < deadline,
                "the worker never called the model"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn serve(
    stream: std::net::TcpStream,
    reqs: &Mutex<Vec<Request>>,
    resp: &Mutex<Arc<Responder>>,
    flight: &Flight,
) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let req = Request {
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
    };
    let n = {
        let mut all = reqs.lock().expect("lock");
        all.push(req.clone());
        all.len() - 1
    };
    let responder = resp.lock().expect("lock").clone();
    let reply = responder(n, &req);
    let in_flight = flight.now.fetch_add(1, Ordering::SeqCst) + 1;
    flight.max.fetch_max(in_flight, Ordering::SeqCst);
    std::thread::sleep(reply.delay);
    flight.now.fetch_sub(1, Ordering::SeqCst);
    let mut out = format!(
        "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&reply.body);
    let mut stream = reader.into_inner();
    let _ = stream.write_all(out.as_bytes());
}

// ---------------------------------------------------------------------------------------
// Jobs from the real fixtures.

const SESSION: &str = "4268b601-cbcd-45ac-b3f1-4f61c888c668";
const REQUEST: &str = "please do the full tour";

/// A tool event as the hook would queue it, from a fixture payload.
fn tool_event(fixture: &str) -> ToolEvent {
    let v: Value = serde_json::from_str(&hook_fixture(fixture)).expect("fixture");
    ToolEvent {
        tool_name: v["tool_name"].as_str().unwrap_or_default().into(),
        tool_use_id: v["tool_use_id"].as_str().unwrap_or_default().into(),
        tool_input: v["tool_input"].clone(),
        tool_response: v.get("tool_response").cloned().unwrap_or(Value::Null),
        error: v["error"].as_str().map(String::from),
        failed: v["hook_event_name"] == "PostToolUseFailure",
        is_interrupt: v["is_interrupt"].as_bool().unwrap_or(false),
        cwd: v["cwd"].as_str().unwrap_or_default().into(),
        prompt_id: v["prompt_id"].as_str().map(String::from),
        duration_ms: v["duration_ms"].as_u64(),
        ..Default::default()
    }
}

/// The Bash fixture with its command replaced (to tell jobs apart).
fn bash(command: &str) -> ToolEvent {
    let mut ev = tool_event("PostToolUse.json");
    ev.tool_input["command"] = json!(command);
    ev.tool_use_id = format!("toolu_{command}");
    ev
}

/// The Bash fixture turned into an Edit of `path` (the fixtures hold no Edit call).
fn edit(path: &str) -> ToolEvent {
    let mut ev = tool_event("PostToolUse.json");
    ev.tool_name = "Edit".into();
    ev.tool_input = json!({"file_path": path, "old_string": "a", "new_string": "b"});
    ev.tool_response = json!({"filePath": path});
    ev.tool_use_id = format!("toolu_edit_{path}");
    ev
}

fn turn_end() -> TurnEnd {
    let v: Value = serde_json::from_str(&hook_fixture("Stop.json")).expect("fixture");
    TurnEnd {
        last_assistant_message: v["last_assistant_message"]
            .as_str()
            .unwrap_or_default()
            .into(),
        cwd: v["cwd"].as_str().unwrap_or_default().into(),
        prompt_id: v["prompt_id"].as_str().map(String::from),
        ..Default::default()
    }
}

/// Queues one prompt's events (and its turn end) the way the hook does: session, prompt
/// record and jobs. Returns the job ids.
fn seed(
    env: &TestEnv,
    session: &str,
    prompt_number: i64,
    events: &[ToolEvent],
    stop: bool,
    max_attempts: u32,
) -> Vec<i64> {
    let dd = DataDir::new(&env.data_dir);
    let mut conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
    // The setting in force when an attempt fails decides, not the job's column.
    if max_attempts != 3 {
        std::fs::write(
            dd.settings(),
            json!({"queue": {"max_attempts": max_attempts}}).to_string(),
        )
        .expect("settings");
    }
    let now = cairn_core::clock::now_ms();
    db::write(&mut conn, |tx| {
        sessions::ensure(tx, session, "acme-api", "/home/dev/acme-api", now)?;
        tx.execute(
            "UPDATE sessions SET prompt_counter = max(prompt_counter, ?2) WHERE session_id = ?1",
            rusqlite::params![session, prompt_number],
        )?;
        tx.execute(
            "INSERT OR IGNORE INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
             VALUES (?1, 'acme-api', ?2, ?3, ?4)",
            rusqlite::params![session, prompt_number, REQUEST, now],
        )?;
        let mut ids = Vec::new();
        let mut add = |kind, payload: String, key: String| -> cairn_core::Result<()> {
            let job = NewJob {
                session_id: session,
                project: "acme-api",
                kind,
                prompt_number,
                payload: &payload,
                dedupe_key: &key,
            };
            if let queue::claim::Enqueued::Added(id) = queue::claim::enqueue(tx, &job, max_attempts, now)? {
                ids.push(id);
            }
            Ok(())
        };
        for ev in events {
            add(
                JobKind::Observation,
                serde_json::to_string(ev).expect("json"),
                format!("{session}:{}", ev.tool_use_id),
            )?;
        }
        if stop {
            add(
                JobKind::Summarize,
                serde_json::to_string(&turn_end()).expect("json"),
                format!("{session}:stop:{prompt_number}"),
            )?;
        }
        Ok(ids)
    })
    .expect("seed")
}

// ---------------------------------------------------------------------------------------
// Running the worker.

/// A worker command talking to `model` with short timings.
fn worker(env: &TestEnv, model: &FakeModel) -> Command {
    let mut c = env.cmd("cairn-worker");
    c.env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("CAIRN_QUEUE__RETRY_BASE_SECS", "0")
        .env("CAIRN_MODEL__MAX_RETRY_SECS", "10")
        .env("CAIRN_MODEL__TIMEOUT_SECS", "20")
        .env("CAIRN_WORKER__POLL_MS", "20")
        .env("CAIRN_WORKER__HEARTBEAT_SECS", "1")
        .env("CAIRN_LOG__LEVEL", "debug");
    c
}

/// Runs to completion, failing the test if it takes more than a minute.
fn finish(mut c: Command) -> Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().expect("spawn worker");
    wait_output(child, Duration::from_secs(90))
}

fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "worker did not finish: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_once(env: &TestEnv, mut c: Command) -> Output {
    c.arg("--once").arg("--log-stderr");
    let out = finish(c);
    assert!(
        out.status.success(),
        "worker failed: {}\n{}",
        out.status,
        stderr(&out)
    );
    let _ = env;
    out
}

fn status_of(env: &TestEnv, id: i64) -> (String, i64, Option<String>) {
    env.db()
        .query_row(
            "SELECT status, attempts, last_error FROM pending_messages WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("job")
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

const GOOD_XML: &str = "Here is what I saw:\n```xml\n<observation>\n  <type>feature</type>\n  <title>Wrote hello to out.txt</title>\n  <subtitle>a first file</subtitle>\n  <facts><fact>out.txt holds hello</fact></facts>\n  <narrative>The assistant wrote hello & left.</narrative>\n  <concepts><concept>what-changed</concept></concepts>\n  <files_read></files_read>\n  <files_modified><file>/home/dev/acme-api/out.txt</file></files_modified>\n</observation>\n```";

const SUMMARY_XML: &str = "<summary><request>Tour the tools</request><investigated>out.txt</investigated><learned>hooks work</learned><completed>wrote files</completed><next_steps>none</next_steps><notes></notes></summary>";

/// Answers summary prompts with a summary and observation prompts with `obs`.
fn by_kind(obs: &'static str) -> impl Fn(usize, &Request) -> Reply + Send + Sync + 'static {
    move |_, r| {
        if r.body.contains("<summary>") && r.body.contains("last_assistant_message") {
            Reply::anthropic(SUMMARY_XML)
        } else {
            Reply::anthropic(obs)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tests.

#[test]
fn a_good_reply_stores_observations_and_the_turn_summary() {
    let env = TestEnv::new();
    let model = FakeModel::start(by_kind(GOOD_XML));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[
            tool_event("PostToolUse.json"),
            edit("/home/dev/acme-api/src/lib.rs"),
        ],
        true,
        3,
    );
    run_once(&env, worker(&env, &model));

    for id in &ids {
        assert_eq!(status_of(&env, *id).0, "done");
    }
    let (kind, title, narrative, modified, origin, jobs): (String, String, String, String, String, String) = env
        .db()
        .query_row(
            "SELECT type, title, narrative, files_modified, origin, source_job_ids FROM observations",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
        )
        .expect("one observation");
    assert_eq!(
        (kind.as_str(), title.as_str()),
        ("feature", "Wrote hello to out.txt")
    );
    assert_eq!(narrative, "The assistant wrote hello & left.");
    assert_eq!(origin, "model");
    // The model named out.txt; the Edit seen in the batch adds lib.rs.
    let modified: Vec<String> = serde_json::from_str(&modified).expect("json");
    assert_eq!(
        modified,
        vec![
            "/home/dev/acme-api/out.txt",
            "/home/dev/acme-api/src/lib.rs"
        ]
    );
    assert_eq!(jobs, format!("[{},{}]", ids[0], ids[1]));

    let (request, completed, edited): (String, String, String) = env
        .db()
        .query_row(
            "SELECT request, completed, files_edited FROM session_summaries WHERE prompt_number = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("summary");
    assert_eq!(
        (request.as_str(), completed.as_str()),
        ("Tour the tools", "wrote files")
    );
    assert!(edited.contains("src/lib.rs"), "{edited}");

    // One model_calls row per call, with tokens.
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE outcome = 'ok' AND input_tokens = 120 AND provider = 'anthropic'"),
        2
    );

    // The Messages API request shape.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    let first = &reqs[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.headers["x-api-key"], "test-key");
    assert_eq!(first.headers["anthropic-version"], "2023-06-01");
    assert!(first.headers["content-type"].starts_with("application/json"));
    let body = first.json();
    assert_eq!(body["model"], "claude-haiku-4-5");
    assert_eq!(body["max_tokens"], 2048);
    assert!(
        body["system"]
            .as_str()
            .expect("system")
            .contains("<observation>")
    );
    assert_eq!(body["messages"][0]["role"], "user");
    let user = body["messages"][0]["content"].as_str().expect("content");
    assert!(user.contains(REQUEST), "header carries the request");
    assert!(user.contains("echo hello > /home/dev/acme-api/out.txt"));
    assert!(user.contains("tool=\"Edit\""));
    // The summary prompt lists the turn's observation and the last assistant message.
    let summary_user = reqs[1].json()["messages"][0]["content"]
        .as_str()
        .expect("content")
        .to_string();
    assert!(summary_user.contains("- [feature] Wrote hello to out.txt"));
    assert!(summary_user.contains("All done: out.txt and sub.txt written."));
}

#[test]
fn an_empty_answer_marks_jobs_done_with_nothing_stored() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic("Nothing worth recording here.\n<none/>"));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.Read.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]), ("done".into(), 0, None));
    assert_eq!(env.count("SELECT count(*) FROM observations"), 0);
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE outcome = 'empty'"),
        1
    );
}

#[test]
fn a_429_with_retry_after_is_honoured_then_succeeds() {
    let env = TestEnv::new();
    let model = FakeModel::script(vec![
        Reply::status(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error"}}"#,
        )
        .header("retry-after", "1"),
        Reply::anthropic(GOOD_XML),
    ]);
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]), ("done".into(), 0, None));
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    let waited = reqs[1].at.duration_since(reqs[0].at);
    assert!(
        waited >= Duration::from_millis(950),
        "waited only {waited:?}"
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM model_calls WHERE outcome = 'error' AND error LIKE '%429%'"
        ),
        1
    );
    assert_eq!(env.count("SELECT count(*) FROM observations"), 1);
}

#[test]
fn server_errors_are_retried_in_process() {
    let env = TestEnv::new();
    let model = FakeModel::script(vec![
        Reply::status(500, "oops"),
        Reply::status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        ),
        Reply::anthropic(GOOD_XML),
    ]);
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    assert_eq!(model.requests().len(), 3);
    assert_eq!(status_of(&env, ids[0]), ("done".into(), 0, None));
    assert_eq!(env.count("SELECT count(*) FROM model_calls"), 3);
}

#[test]
fn three_failed_attempts_skip_the_job_and_replay_brings_it_back() {
    let env = TestEnv::new();
    let bad = FakeModel::always(Reply::status(400, r#"{"error":"bad request"}"#));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUseFailure.json")],
        false,
        3,
    );
    let mut c = worker(&env, &bad);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    // 400 is not retried in-process: one request per attempt.
    assert_eq!(bad.requests().len(), 3);
    let (status, attempts, error) = status_of(&env, ids[0]);
    assert_eq!((status.as_str(), attempts), ("skipped", 3));
    assert!(error.expect("error").contains("400"));
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM job_errors WHERE job_id = {}",
            ids[0]
        )),
        3
    );

    let dd = DataDir::new(&env.data_dir);
    let mut conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
    let n = queue::admin::replay(
        &mut conn,
        &queue::admin::Selector::AllSkipped,
        cairn_core::clock::now_ms(),
    )
    .expect("replay");
    assert_eq!(n, 1);
    let good = FakeModel::always(Reply::anthropic(GOOD_XML));
    let mut c = worker(&env, &good);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]).0, "done");
    assert_eq!(env.count("SELECT count(*) FROM observations"), 1);
}

#[test]
fn garbage_replies_are_failed_attempts_not_silent_loss() {
    let env = TestEnv::new();
    let prose = FakeModel::always(Reply::anthropic("I looked at it and it seems fine."));
    let a = seed(&env, "s-prose", 1, &[bash("echo a")], false, 2);
    let mut c = worker(&env, &prose);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    let (status, _, error) = status_of(&env, a[0]);
    assert_eq!(status, "skipped");
    assert!(error.expect("error").contains("it seems fine"));
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE outcome = 'unusable'"),
        2
    );

    let not_json = FakeModel::always(Reply::status(200, "<html>proxy error</html>"));
    let b = seed(&env, "s-html", 1, &[bash("echo b")], false, 1);
    let mut c = worker(&env, &not_json);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    let (status, _, error) = status_of(&env, b[0]);
    assert_eq!(status, "skipped");
    assert!(error.expect("error").contains("unreadable answer"));
    assert_eq!(env.count("SELECT count(*) FROM observations"), 0);
}

#[test]
fn truncated_xml_keeps_the_fields_that_arrived() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(
        "<observation><type>insight</type><title>Race in the cache fixed</title><facts><fact>lock order matters</fact><fact>and the",
    ));
    let ids = seed(&env, SESSION, 1, &[bash("cargo test")], false, 3);
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]).0, "done");
    let (kind, original, title, facts): (String, Option<String>, String, String) = env
        .db()
        .query_row(
            "SELECT type, original_type, title, facts FROM observations",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .expect("observation");
    assert_eq!(kind, "change");
    assert_eq!(original.as_deref(), Some("insight"));
    assert_eq!(title, "Race in the cache fixed");
    assert_eq!(facts, r#"["lock order matters","and the"]"#);
}

#[test]
fn a_reply_slower_than_the_timeout_fails_the_attempt() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML).delayed(Duration::from_secs(4)));
    let ids = seed(&env, SESSION, 1, &[bash("sleep")], false, 1);
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_MODEL__TIMEOUT_SECS", "1")
        .env("CAIRN_MODEL__MAX_RETRY_SECS", "0");
    run_once(&env, c);
    let (status, attempts, error) = status_of(&env, ids[0]);
    assert_eq!((status.as_str(), attempts), ("skipped", 1));
    assert!(error.expect("error").contains("timed out"));
    assert_eq!(env.count("SELECT count(*) FROM observations"), 0);
}

#[test]
fn an_over_size_batch_is_split_into_prompts_under_the_cap() {
    let env = TestEnv::new();
    let model = FakeModel::start(echo_commands);
    let events: Vec<ToolEvent> = (0..8)
        .map(|i| {
            let mut ev = bash(&format!("echo job-{i}"));
            ev.tool_response = json!({"stdout": "x".repeat(1_500), "stderr": ""});
            ev
        })
        .collect();
    let ids = seed(&env, SESSION, 1, &events, true, 3);
    let mut c = worker(&env, &model);
    c.env("CAIRN_MODEL__MAX_PROMPT_CHARS", "6000");
    run_once(&env, c);
    for id in &ids {
        assert_eq!(status_of(&env, *id).0, "done");
    }
    let reqs = model.requests();
    let obs_prompts: Vec<usize> = reqs
        .iter()
        .filter(|r| !r.body.contains("last_assistant_message"))
        .map(|r| {
            let b = r.json();
            b["system"].as_str().expect("system").chars().count()
                + b["messages"][0]["content"]
                    .as_str()
                    .expect("user")
                    .chars()
                    .count()
        })
        .collect();
    assert!(obs_prompts.len() > 1, "one batch, split: {obs_prompts:?}");
    assert!(obs_prompts.iter().all(|n| *n <= 6000), "{obs_prompts:?}");
    // Every event reached the model once, and each has its observation.
    assert_eq!(env.count("SELECT count(*) FROM observations"), 8);
    assert_eq!(
        env.count("SELECT count(DISTINCT source_job_ids) FROM observations"),
        obs_prompts.len() as i64
    );
}

/// Answers each observation prompt with one observation naming the job's command, so
/// every job has an observation of its own.
fn echo_commands(_: usize, r: &Request) -> Reply {
    let body = r.body.as_str();
    let mut xml = String::new();
    let mut rest = body;
    while let Some(i) = rest.find("echo job-") {
        let tail = &rest[i + 5..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        xml.push_str(&format!(
            "<observation><type>change</type><title>Ran {name}</title></observation>\n"
        ));
        rest = &tail[end..];
    }
    if xml.is_empty() {
        xml = SUMMARY_XML.into();
    }
    Reply::anthropic(&xml)
}

#[test]
fn kill_9_mid_batch_then_restart_does_every_job_exactly_once() {
    for round in 0..4 {
        let env = TestEnv::new();
        let model =
            FakeModel::start(|n, r| echo_commands(n, r).delayed(Duration::from_millis(400)));
        let mut ids = Vec::new();
        for p in 1..=3 {
            let events: Vec<ToolEvent> =
                (0..3).map(|i| bash(&format!("echo job-{p}-{i}"))).collect();
            ids.extend(seed(&env, SESSION, p, &events, true, 3));
        }
        let mut c = worker(&env, &model);
        c.env("CAIRN_WORKER__CONCURRENCY", "2")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = c.spawn().expect("spawn");
        // Kill at different points: during the first call, or later with some batches acked.
        model.wait_for_requests(1 + round);
        std::thread::sleep(Duration::from_millis(100 * round as u64));
        child.kill().expect("kill -9");
        let _ = child.wait();

        model.set(echo_commands);
        run_once(&env, worker(&env, &model));
        for id in &ids {
            let (status, attempts, _) = status_of(&env, *id);
            assert_eq!(status, "done", "round {round}, job {id}");
            assert!(
                attempts <= 1,
                "round {round}, job {id}: {attempts} attempts"
            );
        }
        // One observation per tool call, never two.
        assert_eq!(
            env.count("SELECT count(*) FROM observations"),
            9,
            "round {round}"
        );
        assert_eq!(
            env.count("SELECT count(DISTINCT title) FROM observations"),
            9,
            "round {round}"
        );
        assert_eq!(
            env.count("SELECT count(*) FROM session_summaries"),
            3,
            "round {round}"
        );
        assert_eq!(
            env.count("SELECT count(*) FROM pending_messages WHERE status != 'done'"),
            0
        );
    }
}

#[test]
fn sigterm_mid_batch_finishes_the_batch_and_exits_cleanly() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML).delayed(Duration::from_millis(1500)));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .arg("--log-stderr")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().expect("spawn");
    model.wait_for_requests(1);
    signal(&child, "-TERM");
    let out = wait_output(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, ids[0]), ("done".into(), 0, None));
    assert_eq!(env.count("SELECT count(*) FROM observations"), 1);
    assert_eq!(
        env.count("SELECT count(*) FROM workers WHERE stopped_at IS NOT NULL"),
        1
    );
}

#[test]
fn sigterm_past_the_grace_period_releases_the_batch_without_an_attempt() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML).delayed(Duration::from_secs(8)));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_WORKER__SHUTDOWN_GRACE_SECS", "0")
        .arg("--log-stderr")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().expect("spawn");
    model.wait_for_requests(1);
    signal(&child, "-INT");
    let out = wait_output(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("released jobs"), "{}", stderr(&out));
    assert_eq!(status_of(&env, ids[0]), ("pending".into(), 0, None));
    assert_eq!(env.count("SELECT count(*) FROM observations"), 0);
}

#[test]
fn a_second_sigterm_releases_the_batch_at_once_without_an_attempt() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML).delayed(Duration::from_secs(20)));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_WORKER__SHUTDOWN_GRACE_SECS", "60")
        .arg("--log-stderr")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().expect("spawn");
    model.wait_for_requests(1);
    signal(&child, "-TERM");
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "-TERM");
    let out = wait_output(child, Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Released on the way out: pending again, no attempt spent, nothing left claimed.
    assert_eq!(status_of(&env, ids[0]), ("pending".into(), 0, None));
}

#[test]
fn the_openai_provider_sends_chat_completions() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::status(
        200,
        &json!({
            "choices": [{"message": {"role": "assistant", "content": GOOD_XML}}],
            "usage": {"prompt_tokens": 90, "completion_tokens": 12},
        })
        .to_string(),
    ));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_MODEL__PROVIDER", "openai")
        .env("CAIRN_MODEL__BASE_URL", format!("{}/v1", model.url))
        .env("CAIRN_MODEL__MODEL", "llama3")
        .env("OPENAI_API_KEY", "sk-test");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]).0, "done");
    let req = &model.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.headers["authorization"], "Bearer sk-test");
    assert!(
        !req.body.contains("test-key"),
        "the Anthropic key never leaves"
    );
    let body = req.json();
    assert_eq!(body["model"], "llama3");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["role"], "user");
    assert!(
        body["messages"][1]["content"]
            .as_str()
            .expect("user")
            .contains("echo hello")
    );
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE provider = 'openai' AND model = 'llama3' AND input_tokens = 90"),
        1
    );
}

fn fake_claude(dir: &Path, body: &str) {
    std::fs::create_dir_all(dir).expect("dir");
    let path = dir.join("claude");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn with_path(c: &mut Command, bin: &Path) {
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{}:{path}", bin.display()));
}

#[test]
fn the_claude_cli_provider_runs_claude_with_hooks_suppressed() {
    let env = TestEnv::new();
    let bin = env.tmp.path().join("bin");
    let seen = env.tmp.path().join("seen.txt");
    fake_claude(
        &bin,
        &format!(
            "echo \"args=$* suppress=$CAIRN_SUPPRESS_HOOKS\" > {seen}\ncat >> {seen}\nprintf '%s' '<observation><type>discovery</type><title>Seen by claude</title></observation>'",
            seen = seen.display()
        ),
    );
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = env.cmd("cairn-worker");
    with_path(&mut c, &bin);
    c.env("CAIRN_MODEL__PROVIDER", "claude-cli")
        .env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_WORKER__POLL_MS", "20");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]).0, "done");
    let seen = std::fs::read_to_string(&seen).expect("seen");
    assert!(
        seen.starts_with("args=-p --output-format json --model haiku suppress=1"),
        "{seen}"
    );
    assert!(seen.contains("echo hello > /home/dev/acme-api/out.txt"));
    assert_eq!(
        env.count("SELECT count(*) FROM observations WHERE title = 'Seen by claude'"),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE provider = 'claude-cli'"),
        1
    );
}

/// A `claude` that answers like the real one: `auth status --json`, and in print mode
/// one JSON result object on stdout, errors included. `mode` beside it: `ok` or
/// `logged-out`.
const REAL_LIKE_CLAUDE: &str = r#"here=$(dirname "$0")
mode=$(cat "$here/mode")
if [ "$1" = auth ]; then
  [ "$mode" = ok ] && { echo '{"loggedIn": true, "authMethod": "claude.ai"}'; exit 0; }
  echo '{"loggedIn": false, "authMethod": "none"}'; exit 1
fi
cat > /dev/null
if [ "$mode" = logged-out ]; then
  printf '{"type":"result","subtype":"success","is_error":true,"result":"Not logged in \302\267 Please run /login","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}\n'
  exit 1
fi
printf '{"type":"result","subtype":"success","is_error":false,"result":"<observation><type>discovery</type><title>Seen by the subscription</title></observation>","total_cost_usd":0.0042,"usage":{"input_tokens":9,"cache_creation_input_tokens":11000,"cache_read_input_tokens":2000,"output_tokens":35}}\n'
"#;

#[test]
fn a_logged_out_claude_makes_jobs_wait_and_status_says_what_to_run() {
    let env = TestEnv::new();
    let bin = env.tmp.path().join("bin");
    fake_claude(&bin, REAL_LIKE_CLAUDE);
    std::fs::write(bin.join("mode"), "logged-out").expect("mode");
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        1,
    );
    let worker_cmd = || {
        let mut c = env.cmd("cairn-worker");
        with_path(&mut c, &bin);
        c.env("CAIRN_MODEL__PROVIDER", "claude-cli")
            .env("CAIRN_BATCH__ENABLED", "false")
            .env("CAIRN_WORKER__POLL_MS", "20");
        c
    };
    run_once(&env, worker_cmd());
    // Waiting, not failing: with max_attempts 1 a counted attempt would have skipped it.
    let (status, attempts, _) = status_of(&env, ids[0]);
    assert_eq!((status.as_str(), attempts), ("pending", 0));
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE outcome = 'not_logged_in' AND error LIKE '%Please run /login%'"),
        1
    );
    let out = env.run("cairn", &["status"], b"");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("not logged in") && stdout(&out).contains("/login"),
        "{}",
        stdout(&out)
    );
    // Logged in: the job goes on and the CLI's real usage and cost are recorded.
    std::fs::write(bin.join("mode"), "ok").expect("mode");
    env.db()
        .execute("UPDATE pending_messages SET available_at = 0", [])
        .expect("now");
    run_once(&env, worker_cmd());
    assert_eq!(status_of(&env, ids[0]).0, "done");
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE outcome = 'ok' AND model = 'haiku' AND input_tokens = 13009 AND output_tokens = 35 AND tokens_estimated = 0 AND abs(cost_usd - 0.0042) < 1e-9"),
        1
    );
    let out = env.run("cairn", &["status"], b"");
    assert!(!stdout(&out).contains("not logged in"), "{}", stdout(&out));
    assert!(stdout(&out).contains("$0.0042"), "{}", stdout(&out));
}

#[test]
fn auto_uses_a_logged_in_claude_when_no_key_is_set() {
    let env = TestEnv::new();
    let bin = env.tmp.path().join("bin");
    fake_claude(&bin, REAL_LIKE_CLAUDE);
    std::fs::write(bin.join("mode"), "ok").expect("mode");
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = env.cmd("cairn-worker");
    with_path(&mut c, &bin);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_WORKER__POLL_MS", "20");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]).0, "done");
    assert_eq!(
        env.count("SELECT count(*) FROM observations WHERE title = 'Seen by the subscription'"),
        1
    );
}

#[test]
fn a_hanging_claude_is_killed_with_its_children() {
    let env = TestEnv::new();
    let bin = env.tmp.path().join("bin");
    let pidfile = env.tmp.path().join("child.pid");
    fake_claude(
        &bin,
        &format!("sleep 300 &\necho $! > {}\nsleep 300", pidfile.display()),
    );
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        1,
    );
    let mut c = env.cmd("cairn-worker");
    with_path(&mut c, &bin);
    c.env("CAIRN_MODEL__PROVIDER", "claude-cli")
        .env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_MODEL__TIMEOUT_SECS", "1")
        .env("CAIRN_MODEL__MAX_RETRY_SECS", "0");
    run_once(&env, c);
    let (status, _, error) = status_of(&env, ids[0]);
    assert_eq!(status, "skipped");
    assert!(error.expect("error").contains("timed out"));
    let pid = std::fs::read_to_string(&pidfile).expect("pid");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "the claude script's child is still running: {stat}"
    );
}

#[test]
fn a_second_worker_exits_at_once_with_a_clear_message() {
    let env = TestEnv::new();
    let dd = DataDir::new(&env.data_dir);
    dd.ensure().expect("dir");
    let _held = lock::WorkerLock::try_acquire(&dd.worker_lock(), 1)
        .expect("lock")
        .expect("free");
    let model = FakeModel::always(Reply::anthropic(GOOD_XML));
    let out = finish(worker(&env, &model));
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("another cairn-worker is already running"),
        "{}",
        stderr(&out)
    );
    assert!(model.requests().is_empty());
}

#[test]
fn an_explicit_provider_without_its_key_is_an_error_exit() {
    let env = TestEnv::new();
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_MODEL__PROVIDER", "anthropic").arg("--once");
    let out = finish(c);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    // After the note that the database is new (the data dir was never used), the error.
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "printed once: {err}");
    assert!(errors[0].contains("ANTHROPIC_API_KEY is not set"), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn without_a_key_the_offline_extractor_does_the_work() {
    let env = TestEnv::new();
    let ids = seed(
        &env,
        SESSION,
        1,
        &[
            tool_event("PostToolUse.Read.json"),
            edit("/home/dev/acme-api/src/lib.rs"),
            tool_event("PostToolUseFailure.json"),
        ],
        true,
        3,
    );
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_WORKER__POLL_MS", "20");
    run_once(&env, c);
    for id in &ids {
        assert_eq!(status_of(&env, *id).0, "done");
    }
    let rows: Vec<(String, String, String)> = env
        .db()
        .prepare("SELECT type, title, origin FROM observations ORDER BY id")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        rows,
        vec![
            (
                "change".into(),
                "Changed \"a\" to \"b\" in lib.rs".into(),
                "offline".into()
            ),
            (
                "discovery".into(),
                // The fixture's own description of the command, and its message.
                "Run a failing command failed: failing".into(),
                "offline".into()
            ),
        ]
    );
    let (request, completed, origin): (String, String, String) = env
        .db()
        .query_row(
            "SELECT request, completed, origin FROM session_summaries",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("summary");
    assert_eq!(request, REQUEST);
    assert_eq!(completed, "All done: out.txt and sub.txt written.");
    assert_eq!(origin, "offline");
    assert_eq!(env.count("SELECT count(*) FROM model_calls"), 0);
}

#[test]
fn a_spent_token_budget_makes_jobs_wait_not_fail() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let dd = DataDir::new(&env.data_dir);
    let mut conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
    let now = cairn_core::clock::now_ms();
    usage::record_all(
        &mut conn,
        &[usage::CallRecord {
            provider: "anthropic".into(),
            model: "m".into(),
            purpose: "observation".into(),
            session_id: None,
            job_ids: Vec::new(),
            prompt_chars: 0,
            input_tokens: 900,
            output_tokens: 100,
            tokens_estimated: false,
            cost_usd: None,
            latency_ms: 1,
            outcome: usage::Outcome::Ok,
            error: None,
            created_at: now,
        }],
    )
    .expect("record");
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_MODEL__DAILY_TOKEN_BUDGET", "1000");
    let out = run_once(&env, c);
    assert!(
        stderr(&out).contains("daily token budget spent (1000 of 1000 tokens)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(status_of(&env, ids[0]), ("pending".into(), 0, None));
    assert!(model.requests().is_empty());
    let b = usage::budget(&conn, 1000, cairn_core::clock::now_ms()).expect("budget");
    assert!(b.exhausted());

    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_MODEL__DAILY_TOKEN_BUDGET", "5000");
    run_once(&env, c);
    assert_eq!(status_of(&env, ids[0]).0, "done");
}

#[test]
fn an_autostarted_worker_exits_when_idle() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML));
    let ids = seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_WORKER__IDLE_EXIT_SECS", "1")
        .arg("--autostarted");
    let out = finish(c);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, ids[0]).0, "done");
    let logs: Vec<_> = std::fs::read_dir(env.data_dir.join("logs"))
        .expect("logs dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        logs.iter()
            .any(|n| n.starts_with("worker-") && n.ends_with(".log")),
        "{logs:?}"
    );
}

/// A worker stopped by SIGSTOP holds its lock forever: once its heartbeat is older than
/// the wedged threshold, a hook's autostart ends it and starts a new worker, which does
/// the jobs the stopped one left (claimed or pending) and those that came meanwhile.
#[test]
fn a_stopped_worker_is_replaced_by_the_hooks() {
    use std::os::unix::process::ExitStatusExt;
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML));
    std::fs::create_dir_all(&env.data_dir).expect("dir");
    let mut c = worker(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut first = c.spawn().expect("spawn worker");
    let lock_path = DataDir::new(&env.data_dir).worker_lock();
    let holder = || lock::holder(&lock_path).expect("holder").map(|h| h.pid);
    wait_until(|| holder() == Some(first.id()));
    let hook = |i: usize| {
        let mut v: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
        v["tool_use_id"] = json!(format!("toolu_frozen_{i}"));
        // The worker's environment (the fake model, a one-second heartbeat), which the
        // worker the hook starts inherits.
        let mut h = Command::new(crate::support::bin("cairn-hook"));
        h.envs(
            worker(&env, &model)
                .get_envs()
                .filter_map(|(k, v)| Some((k, v?))),
        )
        .env("CAIRN_BATCH__ENABLED", "false")
        .env("CAIRN_WORKER__AUTOSTART", "true")
        .env("CAIRN_WORKER__IDLE_EXIT_SECS", "2")
        .env("CAIRN_CAPTURE__LOCK_WAIT_MS", "200");
        let out = crate::support::run_with_stdin(h, v.to_string().as_bytes());
        assert!(out.status.success());
    };
    hook(0);
    wait_until(|| env.count("SELECT count(*) FROM pending_messages WHERE status = 'done'") == 1);
    signal(&first, "-STOP");
    // Hooks keep coming while it is stopped; one of them replaces it once its heartbeat
    // (every second here) is four periods old.
    let mut fired = 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    while first.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the stopped worker was never replaced"
        );
        hook(fired);
        fired += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = first.wait().expect("wait");
    assert_eq!(status.signal(), Some(9), "{status:?}");
    hook(fired);
    fired += 1;
    wait_until(|| {
        env.count("SELECT count(*) FROM pending_messages WHERE status = 'done'") == fired as i64
    });
    let notices = std::fs::read_dir(DataDir::new(&env.data_dir).notices())
        .expect("notices")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("worker-replaced"))
        .count();
    assert_eq!(notices, 1);
    let status = env.run("cairn", &["status"], b"");
    assert!(stdout(&status).contains("killed"), "{}", stdout(&status));
    // The new worker goes when idle.
    wait_until(|| holder().is_none());
}

#[test]
fn sighup_reloads_settings() {
    let env = TestEnv::new();
    let first = FakeModel::always(Reply::anthropic(GOOD_XML));
    let second = FakeModel::always(Reply::anthropic(
        "<observation><type>change</type><title>From the second model</title></observation>",
    ));
    let mut c = worker(&env, &first);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .arg("--log-stderr")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::fs::create_dir_all(&env.data_dir).expect("dir");
    let child = c.spawn().expect("spawn");
    let a = seed(&env, "s-a", 1, &[bash("echo a")], false, 3);
    first.wait_for_requests(1);
    wait_until(|| status_of(&env, a[0]).0 == "done");
    std::fs::write(
        env.data_dir.join("settings.json"),
        json!({"model": {"base_url": second.url}}).to_string(),
    )
    .expect("settings");
    signal(&child, "-HUP");
    wait_until(|| {
        let log = std::fs::read_dir(env.data_dir.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>();
        log.contains("settings reloaded")
    });
    let b = seed(&env, "s-b", 1, &[bash("echo b")], false, 3);
    wait_until(|| status_of(&env, b[0]).0 == "done");
    signal(&child, "-TERM");
    let out = wait_output(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(second.requests().len(), 1);
    assert_eq!(
        env.count("SELECT count(*) FROM observations WHERE title = 'From the second model'"),
        1
    );
}

fn wait_until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "condition never became true");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------
// The units in ops/.

fn ops(path: &str) -> String {
    let p = crate::support::fixtures().join("../../ops").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// `key=value` lines of an INI section (systemd unit, supervisord program).
fn ini_section(text: &str, section: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside && !line.starts_with(['#', ';']) && !line.is_empty() {
            let (k, v) = line.split_once('=').expect("key=value line");
            out.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    out
}

#[test]
fn the_systemd_unit_is_valid_and_restarts_with_back_off() {
    let unit = ops("systemd/cairn-worker.service");
    let service = ini_section(&unit, "Service");
    assert_eq!(service["Restart"], "on-failure");
    assert!(service["ExecStart"].ends_with("cairn-worker --log-stderr"));
    assert_eq!(service["KillSignal"], "SIGTERM");
    let stop: u64 = service["TimeoutStopSec"].parse().expect("secs");
    assert!(stop > cairn_core::settings::WorkerSettings::default().shutdown_grace_secs);
    assert!(service.contains_key("RestartSec") && service.contains_key("RestartMaxDelaySec"));
    assert_eq!(ini_section(&unit, "Install")["WantedBy"], "default.target");

    // Where systemd is installed, its own checker must find nothing but the back-off keys
    // older versions do not know.
    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        return;
    };
    if !out.status.success() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("cairn-worker.service");
    let real = unit.replace(
        "%h/.cargo/bin/cairn-worker",
        &crate::support::bin("cairn-worker").display().to_string(),
    );
    std::fs::write(&file, real).expect("write");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&file)
        .output()
        .expect("systemd-analyze");
    let complaints: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("RestartSteps") && !l.contains("RestartMaxDelaySec"))
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "{complaints:?}"
    );
}

#[test]
fn the_launchd_plist_is_a_well_formed_plist() {
    use quick_xml::events::Event;
    let text = ops("launchd/dev.cairn.worker.plist");
    let mut reader = quick_xml::Reader::from_str(&text);
    let mut stack: Vec<String> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    let mut last_key_text = false;
    let mut strings: Vec<String> = Vec::new();
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) => {
                let name = e.name().0.to_string();
                last_key_text = name == "key";
                stack.push(name);
            }
            Event::End(e) => {
                assert_eq!(stack.pop().as_deref(), Some(e.name().0), "balanced tags");
            }
            Event::Text(t) => {
                let s = t
                    .xml_content(quick_xml::XmlVersion::Implicit1_0)
                    .trim()
                    .to_string();
                if last_key_text && stack.last().map(String::as_str) == Some("key") {
                    keys.push(s);
                } else if stack.last().map(String::as_str) == Some("string") {
                    strings.push(s);
                }
            }
            Event::Empty(e) => {
                let name = e.name().0.to_string();
                assert!(
                    matches!(name.as_str(), "true" | "false"),
                    "unexpected <{name}/>"
                );
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(stack.is_empty());
    for k in [
        "Label",
        "ProgramArguments",
        "RunAtLoad",
        "KeepAlive",
        "SuccessfulExit",
        "ThrottleInterval",
        "ExitTimeOut",
    ] {
        assert!(keys.iter().any(|x| x == k), "missing key {k}: {keys:?}");
    }
    assert!(strings.iter().any(|s| s == "dev.cairn.worker"));
    assert!(strings.iter().any(|s| s.ends_with("/cairn-worker")));
    assert!(strings.iter().any(|s| s == "--log-stderr"));
}

#[test]
fn the_supervisord_program_restarts_only_unexpected_exits() {
    let conf = ops("supervisord/cairn-worker.conf");
    let p = ini_section(&conf, "program:cairn-worker");
    assert_eq!(p["autorestart"], "unexpected");
    assert_eq!(p["exitcodes"], "0");
    assert_eq!(p["stopsignal"], "TERM");
    assert!(p["command"].ends_with("cairn-worker --log-stderr"));
    let wait: u64 = p["stopwaitsecs"].parse().expect("secs");
    assert!(wait > cairn_core::settings::WorkerSettings::default().shutdown_grace_secs);
}

// ---------------------------------------------------------------------------------------
// Real, imperfect models: echoes, small contexts, rate limits, single-slot servers.

/// A worker speaking to `model` as an OpenAI-compatible endpoint (llama.cpp, Ollama).
fn openai_worker(env: &TestEnv, model: &FakeModel) -> Command {
    let mut c = worker(env, model);
    c.env("CAIRN_MODEL__PROVIDER", "openai")
        .env("CAIRN_MODEL__BASE_URL", format!("{}/v1", model.url))
        .env("CAIRN_MODEL__MODEL", "qwen-small")
        .env("CAIRN_BATCH__MAX_WAIT_SECS", "0");
    c
}

/// `worker` with batches ready at once (no turn end needed).
fn worker_now(env: &TestEnv, model: &FakeModel) -> Command {
    let mut c = worker(env, model);
    c.env("CAIRN_BATCH__MAX_WAIT_SECS", "0");
    c
}

/// The `<observations>` block of a summary prompt, as a model that echoes its prompt
/// sends it back.
fn echo_observations_block(r: &Request) -> String {
    let b = r.json();
    let user = b["messages"][0]["content"].as_str().unwrap_or_default();
    match (user.find("<observations>"), user.find("</observations>")) {
        (Some(a), Some(z)) => user[a..z + "</observations>".len()].to_string(),
        _ => "<observations>\n</observations>".into(),
    }
}

#[test]
fn a_summary_reply_that_echoes_the_prompt_is_a_failed_attempt() {
    let env = TestEnv::new();
    let model = FakeModel::start(|_, r| {
        if r.is_summary() {
            Reply::anthropic(&format!("Sure.\n{}", echo_observations_block(r)))
        } else {
            Reply::anthropic(GOOD_XML)
        }
    });
    let ids = seed(&env, SESSION, 1, &[tool_event("PostToolUse.json")], true, 2);
    run_once(&env, worker_now(&env, &model));
    let summary_job = *ids.last().expect("summary job");
    let (status, attempts, error) = status_of(&env, summary_job);
    assert_eq!(
        (status.as_str(), attempts),
        ("skipped", 2),
        "not done/empty"
    );
    assert!(error.expect("error").contains("<summary>"));
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 0);
    assert_eq!(
        env.count(
            "SELECT count(*) FROM model_calls WHERE purpose = 'summarize' AND outcome = 'unusable'"
        ),
        2
    );
    assert_eq!(
        env.count("SELECT count(*) FROM model_calls WHERE outcome = 'empty'"),
        0
    );
}

#[test]
fn observations_replayed_after_their_turns_summary_get_it_redone_once() {
    let env = TestEnv::new();
    // The observation calls fail (skipped after one attempt); the summary is written
    // without them.
    let model = FakeModel::start(|_, r| {
        if r.is_summary() {
            Reply::anthropic(SUMMARY_XML)
        } else {
            Reply::status(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
            )
        }
    });
    let ids = seed(&env, SESSION, 1, &[tool_event("PostToolUse.json")], true, 1);
    run_once(&env, worker_now(&env, &model));
    assert_eq!(status_of(&env, ids[0]).0, "skipped");
    assert_eq!(status_of(&env, ids[1]).0, "done");
    let summaries = |m: &FakeModel| m.requests().iter().filter(|r| r.is_summary()).count();
    assert_eq!(summaries(&model), 1);
    assert!(
        !model
            .requests()
            .last()
            .expect("summary")
            .body
            .contains("Wrote hello")
    );

    // Replayed, they land after the summary: the summary is redone and covers them.
    let dd = DataDir::new(&env.data_dir);
    let mut conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
    let replay = |conn: &mut rusqlite::Connection| {
        queue::admin::replay(
            conn,
            &queue::admin::Selector::AllSkipped,
            cairn_core::clock::now_ms(),
        )
        .expect("replay")
    };
    assert_eq!(replay(&mut conn), 1);
    model.set(by_kind(GOOD_XML));
    let out = run_once(&env, worker_now(&env, &model));
    assert_eq!(status_of(&env, ids[0]).0, "done");
    assert_eq!(status_of(&env, ids[1]).0, "done", "{}", stderr(&out));
    assert_eq!(summaries(&model), 2, "the summary was redone");
    let last = model
        .requests()
        .into_iter()
        .rfind(|r| r.is_summary())
        .expect("summary");
    assert!(
        last.body.contains("- [feature] Wrote hello to out.txt"),
        "{}",
        last.body
    );
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 1);

    // Nothing left to replay, and another run changes nothing: no duplicates.
    assert_eq!(replay(&mut conn), 0);
    run_once(&env, worker_now(&env, &model));
    assert_eq!(summaries(&model), 2);
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 1);
    assert_eq!(env.count("SELECT count(*) FROM observations"), 1);
}

/// A model server with a small context: any prompt over `ctx_chars` characters (3
/// characters a token) is refused with `too_long`, the rest answered like `echo_commands`.
fn small_context(
    ctx_chars: usize,
    too_long: fn(usize, usize) -> Reply,
    ok: fn(&str) -> Reply,
) -> impl Fn(usize, &Request) -> Reply + Send + Sync + 'static {
    move |n, r| {
        let chars = r.prompt_chars();
        if chars > ctx_chars {
            return too_long(chars / 3, ctx_chars / 3);
        }
        let body: Value = serde_json::from_str(&echo_commands(n, r).body).expect("json");
        let xml = body["content"][0]["text"]
            .as_str()
            .expect("text")
            .to_string();
        ok(&xml)
    }
}

fn big_events(prefix: &str, n: usize) -> Vec<ToolEvent> {
    (0..n)
        .map(|i| {
            let mut ev = bash(&format!("echo job-{prefix}{i}"));
            ev.tool_response = json!({"stdout": "x".repeat(1_500), "stderr": ""});
            ev
        })
        .collect()
}

#[test]
fn a_context_length_error_splits_the_batch_at_once_and_the_size_is_remembered() {
    type Flavour = (&'static str, fn(usize, usize) -> Reply, fn(&str) -> Reply);
    let flavours: [Flavour; 3] = [
        ("llama.cpp", Reply::llama_too_long, Reply::openai),
        ("openai", Reply::openai_too_long, Reply::openai),
        ("anthropic", Reply::anthropic_too_long, Reply::anthropic),
    ];
    for (name, too_long, ok) in flavours {
        let env = TestEnv::new();
        let model = FakeModel::start(small_context(9_000, too_long, ok));
        let cmd = |env: &TestEnv| {
            let mut c = if name == "anthropic" {
                worker_now(env, &model)
            } else {
                openai_worker(env, &model)
            };
            // One attempt each: a context error must not cost one.
            c.env("CAIRN_QUEUE__MAX_ATTEMPTS", "1");
            c
        };
        let ids = seed(&env, SESSION, 1, &big_events("a", 8), false, 1);
        run_once(&env, cmd(&env));
        for id in &ids {
            assert_eq!(status_of(&env, *id).0, "done", "{name}: job {id}");
        }
        assert_eq!(env.count("SELECT count(*) FROM observations"), 8, "{name}");
        let reqs = model.requests();
        assert!(
            reqs[0].prompt_chars() > 9_000,
            "{name}: the first is too long"
        );
        assert!(
            reqs[1..].iter().all(|r| r.prompt_chars() <= 9_000),
            "{name}: split at once"
        );
        let limit = env.count("SELECT max_prompt_chars FROM model_limits");
        assert!(
            limit > 1_000 && limit <= 9_000,
            "{name}: remembered {limit}"
        );

        // Later batches fit the first time.
        let before = reqs.len();
        let more = seed(&env, SESSION, 2, &big_events("b", 8), false, 1);
        run_once(&env, cmd(&env));
        for id in &more {
            assert_eq!(status_of(&env, *id).0, "done", "{name}: job {id}");
        }
        let later = &model.requests()[before..];
        assert!(!later.is_empty());
        assert!(
            later.iter().all(|r| r.prompt_chars() <= 9_000),
            "{name}: {} over",
            later.len()
        );
    }
}

#[test]
fn a_context_too_small_for_one_event_names_the_setting() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::llama_too_long(7797, 4096));
    let ids = seed(&env, SESSION, 1, &big_events("a", 2), false, 1);
    run_once(&env, openai_worker(&env, &model));
    let (status, _, error) = status_of(&env, ids[0]);
    assert_eq!(status, "skipped");
    let error = error.expect("error");
    assert!(error.contains("model.max_prompt_chars"), "{error}");
    assert!(
        error.contains("exceeds the available context size"),
        "{error}"
    );
    // Split down to one event, shrunk, each size tried once.
    let reqs = model.requests();
    assert!(reqs.len() < 20, "{} calls", reqs.len());
    let last = reqs.last().expect("calls").body.clone();
    assert_eq!(last.matches("echo job-").count(), 1, "one event last");
}

#[test]
fn a_failed_chunk_keeps_the_chunks_that_succeeded() {
    let env = TestEnv::new();
    // The second observation call fails once; everything else succeeds.
    let model = FakeModel::start(|n, r| {
        if n == 1 {
            Reply::status(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"flaky"}}"#,
            )
        } else {
            echo_commands(n, r)
        }
    });
    let ids = seed(&env, SESSION, 1, &big_events("", 8), false, 3);
    let mut c = worker_now(&env, &model);
    c.env("CAIRN_MODEL__MAX_PROMPT_CHARS", "6000");
    run_once(&env, c);
    for id in &ids {
        assert_eq!(status_of(&env, *id).0, "done");
    }
    assert_eq!(env.count("SELECT count(*) FROM observations"), 8);
    // The first chunk's events went to the model once: its reply was kept.
    let reqs = model.requests();
    let first_chunk_calls = reqs
        .iter()
        .filter(|r| r.body.contains("echo job-0"))
        .count();
    assert_eq!(first_chunk_calls, 1, "paid for twice");
    // Its jobs never failed; the others failed once.
    let first_chunk = reqs[0].body.matches("echo job-").count() as i64;
    assert!(first_chunk > 0 && first_chunk < 8);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE attempts = 0"),
        first_chunk
    );
}

#[test]
fn jobs_that_failed_together_are_retried_together() {
    let env = TestEnv::new();
    let model = FakeModel::start(|n, r| {
        if n == 0 {
            Reply::status(500, "overloaded")
        } else {
            echo_commands(n, r)
        }
    });
    let ids = seed(&env, SESSION, 1, &big_events("", 5), false, 3);
    let mut c = worker_now(&env, &model);
    c.env("CAIRN_QUEUE__RETRY_BASE_SECS", "1")
        .env("CAIRN_MODEL__MAX_RETRY_SECS", "0");
    run_once(&env, c);
    // --once stops when nothing is ready: run until the retry is done.
    let deadline = Instant::now() + Duration::from_secs(20);
    while env.count("SELECT count(*) FROM pending_messages WHERE status != 'done'") > 0 {
        assert!(Instant::now() < deadline, "never retried");
        std::thread::sleep(Duration::from_millis(200));
        run_once(&env, {
            let mut c = worker_now(&env, &model);
            c.env("CAIRN_QUEUE__RETRY_BASE_SECS", "1");
            c
        });
    }
    let reqs = model.requests();
    assert_eq!(
        reqs.len(),
        2,
        "one failed call, one retry of all five together"
    );
    assert_eq!(reqs[1].body.matches("echo job-").count(), 5);
    for id in &ids {
        let (status, attempts, _) = status_of(&env, *id);
        assert_eq!((status.as_str(), attempts), ("done", 1));
    }
}

#[test]
fn a_retry_after_longer_than_max_retry_secs_is_waited_out_without_an_attempt() {
    for (name, reply) in [
        ("anthropic", Reply::anthropic_429(3)),
        ("openai", Reply::openai_429(3)),
    ] {
        let env = TestEnv::new();
        let model = FakeModel::script(vec![reply.clone(), Reply::anthropic(GOOD_XML)]);
        let ids = seed(
            &env,
            SESSION,
            1,
            &[bash("echo a"), bash("echo b")],
            false,
            1,
        );
        let cmd = |env: &TestEnv| {
            let mut c = if name == "openai" {
                model.set({
                    let reply = reply.clone();
                    move |n, _| {
                        if n == 0 {
                            reply.clone()
                        } else {
                            Reply::openai(GOOD_XML)
                        }
                    }
                });
                openai_worker(env, &model)
            } else {
                worker_now(env, &model)
            };
            c.env("CAIRN_MODEL__MAX_RETRY_SECS", "1")
                .env("CAIRN_QUEUE__RETRY_BASE_SECS", "0");
            c
        };
        let started = cairn_core::clock::now_ms();
        run_once(&env, cmd(&env));
        // One attempt allowed, none spent: the jobs wait for the time the server named.
        let available: i64 = env
            .db()
            .query_row("SELECT min(available_at) FROM pending_messages", [], |r| {
                r.get(0)
            })
            .expect("row");
        for id in &ids {
            let (status, attempts, _) = status_of(&env, *id);
            assert_eq!((status.as_str(), attempts), ("pending", 0), "{name}");
        }
        assert!(
            available >= started + 3_000,
            "{name}: retry {}ms after",
            available - started
        );
        assert_eq!(
            env.count("SELECT count(DISTINCT available_at) FROM pending_messages"),
            1,
            "{name}: together"
        );
        assert_eq!(model.requests().len(), 1, "{name}");
        // Not before: a worker now claims nothing.
        run_once(&env, cmd(&env));
        assert_eq!(
            model.requests().len(),
            1,
            "{name}: called before Retry-After"
        );
        let wait = available - cairn_core::clock::now_ms();
        std::thread::sleep(Duration::from_millis(wait.max(0) as u64 + 50));
        run_once(&env, cmd(&env));
        for id in &ids {
            assert_eq!(status_of(&env, *id).0, "done", "{name}");
        }
        assert_eq!(model.requests().len(), 2, "{name}: both jobs in one call");
    }
}

#[test]
fn a_local_model_server_gets_one_call_at_a_time_unless_told_otherwise() {
    for (setting, expected) in [(None, 1), (Some("2"), 2)] {
        let env = TestEnv::new();
        let model =
            FakeModel::start(|_, _| Reply::openai(GOOD_XML).delayed(Duration::from_millis(300)));
        for s in 0..4 {
            seed(
                &env,
                &format!("s{s}"),
                1,
                &[bash(&format!("echo {s}"))],
                false,
                3,
            );
        }
        let mut c = openai_worker(&env, &model);
        c.env("CAIRN_BATCH__ENABLED", "false");
        if let Some(n) = setting {
            c.env("CAIRN_WORKER__CONCURRENCY", n);
        }
        let out = run_once(&env, c);
        assert_eq!(model.requests().len(), 4);
        assert_eq!(
            model.flight.max.load(Ordering::SeqCst),
            expected,
            "{setting:?}"
        );
        if setting.is_none() {
            assert!(
                stderr(&out).contains("concurrency 1 (a model server on this machine"),
                "{}",
                stderr(&out)
            );
        }
    }
}

#[test]
fn a_model_call_is_recorded_before_it_is_made() {
    let env = TestEnv::new();
    let model = FakeModel::always(Reply::anthropic(GOOD_XML).delayed(Duration::from_secs(30)));
    seed(
        &env,
        SESSION,
        1,
        &[tool_event("PostToolUse.json")],
        false,
        3,
    );
    let mut c = worker_now(&env, &model);
    c.env("CAIRN_BATCH__ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("spawn");
    model.wait_for_requests(1);
    // The call is in flight: its row is there already, counted by its estimate.
    let row = || -> (String, i64, i64, i64) {
        env.db()
            .query_row(
                "SELECT outcome, input_tokens, tokens_estimated, prompt_chars FROM model_calls",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .expect("a started row")
    };
    let (outcome, tokens, estimated, chars) = row();
    assert_eq!((outcome.as_str(), estimated), ("started", 1));
    assert_eq!(tokens, (chars + 3) / 4);
    child.kill().expect("kill -9");
    let _ = child.wait();
    // Killed mid-call: still counted, against the budget and in `cairn status`.
    assert_eq!(row().0, "started");
    let b = usage::budget(&env.db(), 1, cairn_core::clock::now_ms()).expect("budget");
    assert_eq!(b.spent as i64, tokens);
    let o = env
        .cmd("cairn")
        .args(["status", "--json"])
        .output()
        .expect("status");
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let p = &v["model_calls_last_day"][0];
    assert_eq!(p["provider"], "anthropic");
    assert_eq!(p["model"], "claude-haiku-4-5");
    assert_eq!(
        (p["calls"].as_i64(), p["unfinished"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(p["input_tokens"].as_i64(), Some(tokens));

    // A completed call: the provider's counts, its latency and outcome. The model answers
    // after a pause, so the latency is at least that pause and at most the worker's run.
    let pause = Duration::from_millis(150);
    model.set(move |_, _| Reply::anthropic(GOOD_XML).delayed(pause));
    let started = Instant::now();
    run_once(&env, worker_now(&env, &model));
    let run_ms = i64::try_from(started.elapsed().as_millis()).expect("ms");
    let (outcome, input, output, estimated, latency): (String, i64, i64, i64, i64) = env
        .db()
        .query_row(
            "SELECT outcome, input_tokens, output_tokens, tokens_estimated, latency_ms
             FROM model_calls ORDER BY id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .expect("row");
    assert_eq!(
        (outcome.as_str(), input, output, estimated),
        ("ok", 120, 30, 0)
    );
    assert!(
        (pause.as_millis() as i64..=run_ms).contains(&latency),
        "latency {latency} ms, the model paused {pause:?}, the run took {run_ms} ms"
    );
    let o = env.cmd("cairn").arg("status").output().expect("status");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("anthropic claude-haiku-4-5: 2 calls in 24h")
            && text.contains("1 never completed"),
        "{text}"
    );
}
