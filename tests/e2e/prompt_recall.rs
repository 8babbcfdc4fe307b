//! Memories given at a prompt and before a file's read, through the real `cairn-hook`, with
//! the real sentence model in a running `cairn-worker` (found by meaning over its socket),
//! and without it: a worker that is down, stopped, silent or gone mid-answer leaves the hook
//! going by words alone, with the prompt stored either way.

use std::io::Read;
use std::os::unix::net::UnixListener;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cairn_core::memory;
use cairn_core::memory::observations::NewObservation;
use cairn_core::memory::rows::ObservationContent;
use cairn_core::memory::sessions;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use serde_json::Value;

use crate::recall::{T0, cairn, project_dir};
use crate::support::{TestEnv, model_dir, stderr, stdout};

/// Ids of the seeded memories.
struct Seeded {
    fix: i64,
    limiter: i64,
}

fn seed(env: &TestEnv) -> Seeded {
    let dd = DataDir::new(&env.data_dir);
    let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
    let cwd = project_dir(env).display().to_string();
    db::write(&mut conn, |tx| {
        sessions::ensure(tx, "old", "acme", &cwd, T0)?;
        sessions::ensure(tx, "g", "globex", "/globex", T0)?;
        let add = |project: &str, session: &str, kind: &str, title: &str, narrative: &str, files: &[&str], at: i64| {
            let o = NewObservation {
                session_id: Some(session.into()),
                project: project.into(),
                prompt_number: Some(1),
                kind: kind.into(),
                origin: "model".into(),
                created_at: at,
                content: ObservationContent {
                    title: title.into(),
                    narrative: narrative.into(),
                    files_modified: files.iter().map(|f| f.to_string()).collect(),
                    ..Default::default()
                },
                ..Default::default()
            };
            memory::observations::insert_observation(tx, &o).map(|s| s.id())
        };
        let fix = add("acme", "old", "bugfix", "Fixed the flaky login test on CI",
            "new_session() set expires_at one second before the TTL, so the login test failed near a second boundary.",
            &["src/session.rs"], T0)?;
        let limiter = add("acme", "old", "feature", "Added a sliding-window rate limiter to POST /login",
            "The sixth attempt within a minute gets 429.", &[], T0 + 1000)?;
        add("acme", "old", "discovery", "Font rendering in the PDF export",
            "Ligatures were dropped by the old renderer.", &[], T0 + 2000)?;
        add("globex", "g", "bugfix", "Fixed the flaky checkout test",
            "The checkout test failed on CI when the cart expired.", &[], T0)?;
        Ok(Seeded { fix, limiter })
    })
    .expect("seed")
}

fn prompt(env: &TestEnv, session: &str, id: &str, text: &str) -> String {
    serde_json::json!({
        "hook_event_name": "UserPromptSubmit", "session_id": session,
        "cwd": project_dir(env).display().to_string(), "prompt_id": id, "prompt": text,
    })
    .to_string()
}

/// The hook's answer to `payload`, and its `additionalContext` (None: the plain answer).
/// The hook waits for the worker as long as a test may need (a debug build on a busy
/// machine embeds slowly), so that what the worker finds is what the test checks.
fn hook(env: &TestEnv, payload: &str) -> (Value, Option<String>) {
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_RECALL__WORKER_DEADLINE_MS", "20000");
    let o = crate::support::run_with_stdin(c, payload.as_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    let context = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .map(str::to_string);
    (v, context)
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !f() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_worker(env: &TestEnv) -> Worker {
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_MODEL__PROVIDER", "offline")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Worker(c.spawn().expect("spawn worker"))
}

/// The name and nice value of every thread of process `pid`, from `/proc`.
#[cfg(target_os = "linux")]
fn nices(pid: u32) -> Vec<(String, i64)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| {
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
            // `tid (comm) state ppid …`: the nice value is the 19th field, the 17th after
            // the command's closing parenthesis.
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let nice = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(16)?
                .parse()
                .ok()?;
            Some((name.trim().to_string(), nice))
        })
        .collect()
}

/// The nice value of the thread named `name` of process `pid`.
#[cfg(target_os = "linux")]
fn nice_of(pid: u32, name: &str) -> Option<i64> {
    nices(pid)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// What the hooks (`who` "hook") or the worker ("worker") logged.
fn logs(env: &TestEnv, who: &str) -> String {
    std::fs::read_dir(env.data_dir.join("logs"))
        .expect("logs")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{who}-"))
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

/// Fills the listen backlog of a socket whose listener accepts nothing: connects, without
/// waiting, until a connect is refused for want of room. How many connections it queued.
fn fill_backlog(socket: &std::path::Path) -> usize {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let addr = SocketAddrUnix::new(socket).expect("address");
    for queued in 0..1_000_000 {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )
        .expect("socket");
        // A queued connection keeps its place once its end here is closed.
        match rustix::net::connect(&fd, &addr) {
            Ok(()) => {}
            Err(rustix::io::Errno::AGAIN) => return queued,
            Err(e) => panic!("connect: {e}"),
        }
    }
    panic!("the backlog never filled")
}

fn found_by(env: &TestEnv, text: &str) -> Value {
    let mut c = env.cmd("cairn");
    c.current_dir(project_dir(env))
        .env("CAIRN_RECALL__WORKER_DEADLINE_MS", "20000")
        .args(["context", "--prompt", text, "--json"]);
    let o = crate::support::run_with_stdin(c, b"");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
}

/// Installs the sentence model (`cairn embed --from`), which embeds every memory.
fn install_model(env: &TestEnv) {
    let model = model_dir();
    let o = env.run(
        "cairn",
        &["embed", "--from", model.to_str().expect("path")],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Waits until the running worker answers by meaning (its socket is there once its model
/// is loaded).
fn await_meaning(env: &TestEnv, socket: &std::path::Path) {
    wait_until("the worker answering by meaning", || {
        socket.exists()
            && found_by(env, "why does the login test fail on CI?")["found_by"]
                .as_str()
                .is_some_and(|f| f.starts_with("words and meaning"))
    });
}

/// A prompt about the login test, in session `s1`: it is given the fix. The block given.
fn the_fix_is_given(env: &TestEnv, s: &Seeded) -> String {
    let (_, given) = hook(
        env,
        &prompt(env, "s1", "p1", "why does the login test fail on CI again?"),
    );
    let given = given.expect("the fix is given");
    assert!(given.contains(&format!("- {} bugfix", s.fix)), "{given}");
    given
}

#[test]
fn a_prompt_gets_the_memory_that_answers_it_by_meaning_from_the_worker() {
    let env = TestEnv::new();
    let s = seed(&env);
    install_model(&env);
    let socket = env.data_dir.join("run/recall.sock");
    let worker = start_worker(&env);
    // The worker answers once its model is loaded; the socket is then there.
    await_meaning(&env, &socket);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(socket.parent().expect("dir"))
        .expect("run dir")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "only the user can reach the socket");
    // Embedding stored memories yields to answering prompts (Linux: per-thread nice);
    // every other thread, the answerer's, which embeds prompts, among them, keeps the
    // normal priority.
    #[cfg(target_os = "linux")]
    {
        let pid = worker.0.id();
        wait_until("the embedder at the lowest priority", || {
            nice_of(pid, "embedder") == Some(19)
        });
        let threads = nices(pid);
        assert!(threads.iter().any(|(n, _)| n == "answerer"), "{threads:?}");
        for (name, nice) in &threads {
            assert_eq!(*nice, i64::from(name == "embedder") * 19, "{threads:?}");
        }
        assert_eq!(threads.iter().filter(|(n, _)| n == "embedder").count(), 1);
    }

    let given = the_fix_is_given(&env, &s);
    assert!(!given.contains("checkout"), "another project's: {given}");
    assert!(given.contains("get_observations"), "{given}");

    // Never twice in a session; everyday prompts and others' words get nothing.
    let (_, again) = hook(
        &env,
        &prompt(&env, "s1", "p2", "the login test failed on CI again"),
    );
    assert!(
        again
            .as_deref()
            .is_none_or(|g| !g.contains(&format!("- {} ", s.fix))),
        "{again:?}"
    );
    for (i, text) in [
        "run the tests",
        "commit this",
        "explain this error",
        "/compact",
    ]
    .iter()
    .enumerate()
    {
        let (v, given) = hook(&env, &prompt(&env, "s2", &format!("e{i}"), text));
        assert_eq!(given, None, "{text}: {v}: {}", found_by(&env, text));
    }
    assert_eq!(env.count("SELECT COUNT(*) FROM user_prompts"), 6);

    // `cairn context --prompt` shows why: the scores and what became of each memory.
    let why = found_by(&env, "why does the login test fail on CI again?");
    let offered = why["offered"].as_array().expect("offered");
    assert_eq!(offered[0]["id"], s.fix, "{why}");
    assert_eq!(offered[0]["verdict"], "given", "{why}");
    assert!(
        offered[0]["relevance"].as_f64().expect("score") >= 0.5,
        "{why}"
    );
    assert!(
        offered
            .iter()
            .any(|o| o["id"] == s.limiter && o["verdict"] != "given"),
        "{why}"
    );

    // `cairn status` counts what was given.
    let o = env.run("cairn", &["status"], b"");
    assert!(stdout(&o).contains("1 with prompts"), "{}", stdout(&o));

    // The worker stopped (SIGSTOP: alive, its socket there, answering nothing): the hook
    // gives up on it at its deadline and goes by words alone, and returns while the worker
    // is still stopped; the prompt is stored.
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &worker.0.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_RECALL__WORKER_DEADLINE_MS", "300")
        .env("CAIRN_LOG__LEVEL", "debug");
    let o = crate::support::run_with_stdin(
        c,
        prompt(
            &env,
            "s4",
            "p1",
            "why does the login test fail on CI again?",
        )
        .as_bytes(),
    );
    signal("-CONT");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("answer");
    let given = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("by words");
    assert!(given.contains(&format!("- {} bugfix", s.fix)), "{given}");
    let hook_logs = logs(&env, "hook");
    assert!(
        hook_logs.contains("by words alone: the worker did not answer"),
        "{hook_logs}"
    );
    assert_eq!(env.count("SELECT COUNT(*) FROM user_prompts"), 7);

    // Stopped long enough for its listen backlog to fill (connections queue for a worker
    // that accepts nothing): the hook's connect is refused at once, where a plain connect
    // would wait for the worker without end; it goes by words alone, the prompt stored.
    signal("-STOP");
    let queued = fill_backlog(&env.data_dir.join("run").join("recall.sock"));
    assert!(queued > 0, "nothing queued");
    let (done, answered) = std::sync::mpsc::channel();
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_RECALL__WORKER_DEADLINE_MS", "300")
        .env("CAIRN_LOG__LEVEL", "debug");
    let payload = prompt(
        &env,
        "s5",
        "p1",
        "why does the login test fail on CI again?",
    );
    std::thread::spawn(move || {
        let _ = done.send(crate::support::run_with_stdin(c, payload.as_bytes()));
    });
    let o = answered.recv_timeout(Duration::from_secs(60));
    // Resumed either way: a hook waiting for it would then be accepted and end.
    signal("-CONT");
    let o = o.expect("the hook waited for a stopped worker whose backlog is full");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("answer");
    assert!(
        v["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .expect("by words")
            .contains(&format!("- {} bugfix", s.fix)),
        "{v}"
    );
    assert!(logs(&env, "hook").contains("by words alone: cannot reach the worker"));
    assert_eq!(env.count("SELECT COUNT(*) FROM user_prompts"), 8);

    // The worker killed: its socket is left behind; the hook goes by words alone at once,
    // and the prompt is stored.
    drop(worker);
    let (_, given) = hook(
        &env,
        &prompt(
            &env,
            "s3",
            "p1",
            "why does the login test fail on CI again?",
        ),
    );
    assert!(
        given
            .expect("by words")
            .contains(&format!("- {} bugfix", s.fix))
    );
    assert_eq!(env.count("SELECT COUNT(*) FROM user_prompts"), 9);
}

#[test]
fn a_model_installed_while_the_worker_runs_is_taken_up() {
    let env = TestEnv::new();
    let s = seed(&env);
    let socket = env.data_dir.join("run/recall.sock");
    let _worker = start_worker(&env);
    // No model yet: the worker runs, and a prompt goes by words alone.
    wait_until("the worker running", || {
        let o = env.run("cairn", &["status", "--json"], b"");
        serde_json::from_slice::<Value>(&o.stdout)
            .is_ok_and(|v| v["worker"]["running"] == Value::Bool(true))
    });
    let before = found_by(&env, "why does the login test fail on CI?");
    assert!(
        before["found_by"]
            .as_str()
            .is_some_and(|f| f.starts_with("words")),
        "{before}"
    );
    assert!(!socket.exists());

    // Installed while it runs (as a user following `cairn status`' advice would): the
    // worker takes it up without a restart.
    install_model(&env);
    await_meaning(&env, &socket);
    the_fix_is_given(&env, &s);
}

#[test]
fn a_model_that_does_not_load_is_taken_up_once_mended() {
    let env = TestEnv::new();
    let s = seed(&env);
    let socket = env.data_dir.join("run/recall.sock");
    // The model's files are all there, but its weights are not weights.
    let installed = env.data_dir.join("models/all-MiniLM-L6-v2");
    std::fs::create_dir_all(&installed).expect("models");
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(model_dir().join(file), installed.join(file)).expect("copy");
    }
    std::fs::write(installed.join("model.safetensors"), b"not weights").expect("write");
    let _worker = start_worker(&env);
    wait_until("the worker saying why it has no model", || {
        std::fs::read_dir(env.data_dir.join("logs")).is_ok()
            && logs(&env, "worker").matches("does not load").count() >= 2
    });
    assert!(!socket.exists());
    let search = || {
        let o = env.run("cairn", &["status", "--json"], b"");
        serde_json::from_slice::<Value>(&o.stdout).expect("status")["search"].clone()
    };
    let broken = search();
    assert_eq!(broken["broken"], Value::Bool(true), "{broken}");
    assert!(broken["model"].is_null(), "{broken}");

    // Mended while it runs: both of its threads that embed take it up, without a restart.
    install_model(&env);
    assert_eq!(search()["broken"], Value::Bool(false));
    await_meaning(&env, &socket);
    the_fix_is_given(&env, &s);
    // A prompt stored now waits for its vector: the worker's embedder gives it one.
    let vectors = || env.count("SELECT COUNT(*) FROM embeddings");
    let before = vectors();
    hook(
        &env,
        &prompt(&env, "s9", "p9", "a prompt stored after the mend"),
    );
    wait_until("the worker embedding a new prompt", || vectors() > before);
}

#[test]
fn a_pasted_traceback_gets_the_fix_its_last_line_names() {
    let env = TestEnv::new();
    let s = seed(&env);
    // Forty frames of paths before the line that says what went wrong.
    let mut text = String::from("what now?\nTraceback (most recent call last):\n");
    for i in 0..40 {
        text.push_str(&format!(
            "  File \"/srv/app/venv/lib/python3.12/site-packages/pkg{i}/mod.py\", line {i}, in call{i}\n"
        ));
    }
    text.push_str("AssertionError: new_session() expires_at is one second early\n");
    let (_, given) = hook(&env, &prompt(&env, "s1", "p1", &text));
    let given = given.expect("the fix is given");
    assert!(given.contains(&format!("- {} bugfix", s.fix)), "{given}");
}

#[test]
fn a_silent_worker_or_one_gone_mid_answer_leaves_the_prompt_to_words_alone() {
    let env = TestEnv::new();
    let s = seed(&env);
    let run = env.data_dir.join("run");
    std::fs::create_dir_all(&run).expect("run dir");
    let socket = run.join("recall.sock");
    let ask = |session: &str| {
        let (_, given) = hook(
            &env,
            &prompt(
                &env,
                session,
                "p1",
                "why does the login test fail on CI again?",
            ),
        );
        assert!(
            given
                .expect("by words")
                .contains(&format!("- {} bugfix", s.fix)),
            "{session}"
        );
    };

    // Listening, never accepting: the request waits in the backlog past the deadline.
    let silent = UnixListener::bind(&socket).expect("bind");
    ask("silent");
    drop(silent);
    std::fs::remove_file(&socket).expect("rm");

    // Reads the request, then is gone without a word.
    let gone = UnixListener::bind(&socket).expect("bind");
    let server = std::thread::spawn(move || {
        let (mut stream, _) = gone.accept().expect("accept");
        let mut first = [0u8; 1];
        let _ = stream.read(&mut first);
    });
    ask("gone");
    server.join().expect("server");
    std::fs::remove_file(&socket).expect("rm");

    // Answers garbage.
    let garbage = UnixListener::bind(&socket).expect("bind");
    let server = std::thread::spawn(move || {
        use std::io::Write as _;
        let (mut stream, _) = garbage.accept().expect("accept");
        let mut first = [0u8; 1];
        let _ = stream.read(&mut first);
        let _ = stream.write_all(b"{not json\n");
    });
    ask("garbage");
    server.join().expect("server");

    assert_eq!(env.count("SELECT COUNT(*) FROM user_prompts"), 3);
}

#[test]
fn a_read_is_told_what_changed_in_its_file_and_is_never_changed() {
    let env = TestEnv::new();
    let s = seed(&env);
    let file = project_dir(&env)
        .join("src/session.rs")
        .display()
        .to_string();
    let read = |session: &str, tool: &str| {
        serde_json::json!({
            "hook_event_name": "PreToolUse", "session_id": session,
            "cwd": project_dir(&env).display().to_string(), "tool_name": tool,
            "tool_use_id": "toolu_1", "tool_input": {"file_path": file},
        })
        .to_string()
    };
    let (v, told) = hook(&env, &read("s1", "Read"));
    let told = told.expect("told");
    assert!(told.contains(&format!("- {} bugfix", s.fix)), "{told}");
    let out = v["hookSpecificOutput"].as_object().expect("output");
    let mut keys: Vec<&String> = out.keys().collect();
    keys.sort();
    assert_eq!(keys, ["additionalContext", "hookEventName"], "{v}");
    assert_eq!(v.as_object().expect("answer").len(), 1, "{v}");
    // Once per file per session, the edit included; nothing stored for a call about to run.
    let (plain, again) = hook(&env, &read("s1", "Edit"));
    assert_eq!(again, None);
    assert_eq!(
        plain,
        serde_json::json!({"continue": true, "suppressOutput": true}),
        "nothing to tell: the plain answer, no decision"
    );
    let (_, other) = hook(&env, &read("s2", "Edit"));
    assert!(other.is_some());
    assert_eq!(env.count("SELECT COUNT(*) FROM pending_messages"), 0);
    let o = cairn(
        &env,
        &["context", "--file", &file, "--session", "s1", "--json"],
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["text"], "", "{v}");

    // Turned off, a new session's read is told nothing, and `cairn context` says so
    // instead of showing what the hook would not give.
    let off = |mut c: std::process::Command| {
        c.env("CAIRN_RECALL__AT_FILE", "false");
        c
    };
    let mut c = off(env.cmd("cairn-hook"));
    c.current_dir(project_dir(&env));
    let o = crate::support::run_with_stdin(c, read("s3", "Read").as_bytes());
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).expect("answer"),
        serde_json::json!({"continue": true, "suppressOutput": true})
    );
    let mut c = off(env.cmd("cairn"));
    c.current_dir(project_dir(&env)).args([
        "context",
        "--file",
        &file,
        "--session",
        "s3",
        "--json",
    ]);
    let o = crate::support::run_with_stdin(c, b"");
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["turned_off_by"], "recall.at_file false", "{v}");
    assert_eq!(v["text"], "", "{v}");
    let mut c = off(env.cmd("cairn"));
    c.current_dir(project_dir(&env))
        .args(["context", "--file", &file, "--session", "s3"]);
    let o = crate::support::run_with_stdin(c, b"");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("turned off by recall.at_file false"),
        "{}",
        stderr(&o)
    );
}
