//! Search by meaning with the real all-MiniLM-L6-v2 weights: the vectors match the
//! reference implementation, `cairn embed` installs and checks the model, the worker and
//! `cairn embed` give every memory its vector, and search finds a memory asked for in other
//! words, with every filter holding on the meaning side too.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;

use cairn_core::recall::embed::bert::Bert;
use serde_json::Value;

use crate::recall::{T0, cairn, project_dir};
use crate::support::{TestEnv, model_dir, read_request, stderr, stdout};

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

#[test]
fn vectors_match_the_reference_implementation() {
    let bert = Bert::load(&model_dir()).expect("load the model");
    assert_eq!(bert.dims(), 384);
    let path = crate::support::fixtures().join("recall-eval/reference-vectors.jsonl");
    let text = std::fs::read_to_string(path).expect("reference vectors");
    let refs: Vec<(String, Vec<f32>)> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            let want = v["vector"]
                .as_array()
                .expect("vector")
                .iter()
                .map(|x| x.as_f64().expect("float") as f32)
                .collect();
            (v["text"].as_str().expect("text").to_string(), want)
        })
        .collect();
    assert_eq!(refs.len(), 20);
    // One at a time and all in one call: both must agree with the reference.
    let texts: Vec<&str> = refs.iter().map(|(t, _)| t.as_str()).collect();
    let batch = bert.embed(&texts).expect("embed batch");
    for ((text, want), got) in refs.iter().zip(&batch) {
        let alone = &bert.embed(&[text.as_str()]).expect("embed")[0];
        assert!(
            cosine(alone, want) >= 0.9999,
            "{text:?}: {}",
            cosine(alone, want)
        );
        assert!(
            cosine(got, want) >= 0.9999,
            "{text:?} in a batch: {}",
            cosine(got, want)
        );
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{text:?} is not a unit vector");
    }
    // The published sentence-transformers example.
    let s = cosine(&batch[0], &batch[1]);
    assert!((s - 0.6660).abs() < 0.001, "{s}");
}

#[test]
fn a_head_and_a_body_are_pooled_from_the_pass_over_the_whole() {
    let bert = Bert::load(&model_dir()).expect("load the model");
    let head = "Fix the pager on Windows";
    let body = "The terminal cache kept stale keys after a resize — über-slow redraws.";
    let text = format!("{head}\n{body}");
    let split = bert
        .embed_split(&[(text.as_str(), Some(head.len() + 1)), (head, None)])
        .expect("embed");
    let alone = bert.embed(&[text.as_str(), head, body]).expect("embed");
    // The whole is the text's vector as `embed` makes it; a text given no body has no parts.
    assert!(cosine(&split[0].0, &alone[0]) >= 0.9999);
    assert!(split[1].1.is_none());
    let (h, b) = split[0].1.as_ref().expect("parts");
    for v in [h, b] {
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }
    // Each part is nearer its own text embedded alone than the other part's.
    assert!(cosine(h, &alone[1]) > cosine(h, &alone[2]));
    assert!(cosine(b, &alone[2]) > cosine(b, &alone[1]));
    assert!(cosine(h, b) < 0.99);
    // A body the truncation cuts off: no parts.
    let long = format!("{} \n{body}", "word ".repeat(400));
    let cut = bert
        .embed_split(&[(long.as_str(), Some(long.len() - body.len()))])
        .expect("embed");
    assert!(cut[0].1.is_none());
}

#[test]
fn a_long_query_is_read_at_both_ends() {
    let bert = Bert::load(&model_dir()).expect("load the model");
    let short = "why do we hash passwords with argon2";
    let alone = bert.embed(&[short]).expect("embed").swap_remove(0);
    assert!(cosine(&bert.embed_query(short).expect("query"), &alone) >= 0.9999);
    // A pasted trace of about 900 tokens, then the line that says what went wrong: a
    // memory is read from its start, as the model was trained; a query at both ends.
    let frames: String = (0..60)
        .map(|i| format!("  at handle_frame_{i} (src/server/handler.rs:{i}:7)\n"))
        .collect();
    let end = "Error: the session token expired before the refresh finished";
    let long = format!("{frames}{end}");
    let last = bert.embed(&[end]).expect("embed").swap_remove(0);
    let from_start = bert.embed(&[long.as_str()]).expect("embed").swap_remove(0);
    let both_ends = bert.embed_query(&long).expect("query");
    let (start, both) = (cosine(&from_start, &last), cosine(&both_ends, &last));
    assert!(
        both > start + 0.1,
        "its end: {both} read at both ends, {start} from its start"
    );
    let norm: f32 = both_ends.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4);
}

/// Memories in two projects, through the real hook-less path: a cairn export imported.
fn import_memories(env: &TestEnv) {
    let lines = [
        r#"{"record": "header", "format": "cairn-export", "version": 1, "exported_at": 0, "project": "acme"}"#.to_string(),
        session_line("s1", "acme"),
        session_line("x1", "globex"),
        obs_line("s1", "acme", "feature", "Added a sliding-window rate limiter to POST /login",
            "The sixth attempt within a minute gets 429.", T0),
        obs_line("s1", "acme", "bugfix", "Fixed the flaky login test",
            "new_session() set expires_at one second before the TTL, so the test failed near a second boundary.", T0 + 1000),
        obs_line("s1", "acme", "decision", "Prefer BEGIN IMMEDIATE for every write transaction",
            "SQLITE_BUSY is then retried by the busy handler.", T0 + 2000),
        obs_line("s1", "acme", "discovery", "Font rendering in the PDF export",
            "Ligatures were dropped by the old renderer.", T0 + 3000),
        obs_line("x1", "globex", "feature", "Rate limiting for the signup endpoint",
            "Too many signups from one address are refused.", T0),
    ];
    let file = env.tmp.path().join("export.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write export");
    let o = env.run(
        "cairn",
        &["import", "jsonl", file.to_str().expect("path")],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

fn session_line(id: &str, project: &str) -> String {
    format!(
        r#"{{"record": "session", "session_id": "{id}", "project": "{project}", "cwd": "/{project}", "prompt_counter": 1, "status": "ended", "started_at": {T0}, "updated_at": {T0}, "ended_at": {T0}}}"#
    )
}

fn obs_line(
    session: &str,
    project: &str,
    kind: &str,
    title: &str,
    narrative: &str,
    at: i64,
) -> String {
    serde_json::json!({
        "record": "observation", "session_id": session, "project": project,
        "prompt_number": 1, "type": kind, "original_type": null, "title": title,
        "subtitle": "", "narrative": narrative, "facts": [], "concepts": [],
        "files_read": [], "files_modified": [], "source_job_ids": [], "origin": "import",
        "created_at": at,
    })
    .to_string()
}

fn status_json(env: &TestEnv) -> Value {
    let o = env.run("cairn", &["embed", "--status", "--json"], b"");
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&o), stderr(&o)))
}

fn titles(o: &std::process::Output) -> Vec<String> {
    if o.status.code() == Some(1) && o.stdout.is_empty() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {:?} {} {}", o.status, stdout(o), stderr(o)));
    v.as_array()
        .expect("hits")
        .iter()
        .map(|h| h["title"].as_str().expect("title").to_string())
        .collect()
}

/// `cairn` with no relevance floor: every candidate shows, however unlikely.
fn unfloored(env: &TestEnv, args: &[&str]) -> std::process::Output {
    floored(env, 0.0, args)
}

/// Searches with `args` and the relevance floor `floor`.
fn floored(env: &TestEnv, floor: f64, args: &[&str]) -> std::process::Output {
    let mut c = env.cmd("cairn");
    c.current_dir(project_dir(env))
        .env("CAIRN_SEARCH__MIN_RELEVANCE", floor.to_string())
        .args(args);
    crate::support::run_with_stdin(c, b"")
}

/// Searches with `args` (plus `--json`, and no relevance floor) and asserts no hit's title
/// contains `absent`.
fn never_shows(env: &TestEnv, args: &[&str], absent: &str) {
    let mut all = args.to_vec();
    all.insert(1, "--json");
    let found = titles(&unfloored(env, &all));
    assert!(
        !found.iter().any(|t| t.contains(absent)),
        "{args:?}: {found:?}"
    );
}

#[test]
fn questions_in_other_words_find_their_memory() {
    let env = TestEnv::new();
    import_memories(&env);
    project_dir(&env);

    // Without a model: full text only, and the paraphrase finds nothing.
    let o = unfloored(&env, &["search", "brute force protection", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let st = status_json(&env);
    assert!(st["model"].is_null(), "{st}");
    assert!(
        st["unavailable"]
            .as_str()
            .expect("why")
            .contains("cairn embed --fetch"),
        "{st}"
    );

    // Installing the model embeds every imported memory.
    let model = model_dir();
    let o = env.run(
        "cairn",
        &["embed", "--from", model.to_str().expect("path")],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("embedded 5 memories"), "{}", stdout(&o));
    let st = status_json(&env);
    assert_eq!(st["embedded"], 5, "{st}");
    assert_eq!(st["queued"], 0, "{st}");
    let o = env.run("cairn", &["status", "--json"], b"");
    let status: Value = serde_json::from_slice(&o.stdout).expect("status json");
    assert_eq!(status["search"]["embedded"], 5, "{status}");
    assert!(status["search"]["model"].as_str().is_some(), "{status}");
    let o = env.run("cairn", &["doctor"], b"");
    assert!(
        stdout(&o).contains("by words and meaning"),
        "{}",
        stdout(&o)
    );

    // The paraphrases now find their memories through the vector side. A memory sharing
    // no word with the query is rated unlikely (the benchmarks' questions mostly share
    // words with their memories), under the default floor: these show it without one.
    let o = unfloored(&env, &["search", "brute force protection", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        titles(&o)[0],
        "Added a sliding-window rate limiter to POST /login"
    );
    // Each hit carries its relevance, best first.
    let hits: Vec<Value> = serde_json::from_slice(&o.stdout).expect("hits");
    let relevance: Vec<f64> = hits
        .iter()
        .map(|h| h["relevance"].as_f64().expect("relevance"))
        .collect();
    assert!(
        relevance.iter().all(|r| (0.0..=1.0).contains(r)),
        "{relevance:?}"
    );
    assert!(relevance.is_sorted_by(|a, b| a >= b), "{relevance:?}");
    // The relevance shown is the one the floor weighs: a floor at the best result's
    // relevance shows it, one just above shows nothing.
    let best = relevance[0];
    let o = floored(&env, best, &["search", "brute force protection", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        titles(&o)[0],
        "Added a sliding-window rate limiter to POST /login"
    );
    let o = floored(
        &env,
        best * 1.01,
        &["search", "brute force protection", "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{:?}", titles(&o));
    // Nothing answers nonsense or words the memories never speak of, while a question in
    // the memory's words finds it with the default floor.
    for q in [
        "zzzzqqq",
        "glorp frindle wumpus",
        "violin orchard marmalade",
    ] {
        let o = cairn(&env, &["search", q, "--json"]);
        assert_eq!(o.status.code(), Some(1), "{q}: {:?}", titles(&o));
        assert!(titles(&o).is_empty(), "{q}: {:?}", titles(&o));
    }
    // Said in plain text, with what a floor hid and how to see it anyway.
    let o = cairn(&env, &["search", "brute force protection"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("nothing reached search.min_relevance 0.01")
            && stderr(&o).contains("CAIRN_SEARCH__MIN_RELEVANCE=0"),
        "{}",
        stderr(&o)
    );
    let o = cairn(&env, &["search", "flaky login test", "--json"]);
    assert_eq!(titles(&o)[0], "Fixed the flaky login test");
    let o = unfloored(&env, &["search", "throttle", "--json"]);
    assert_eq!(
        titles(&o)[0],
        "Added a sliding-window rate limiter to POST /login"
    );
    let o = cairn(
        &env,
        &["search", "why was the login test failing", "--json"],
    );
    assert_eq!(titles(&o)[0], "Fixed the flaky login test");

    // Filters hold on the meaning side: another project's limiter never shows, nor a type
    // or a time the filter leaves out, nor a word the query excludes.
    // (The signup limiter is close enough in meaning to be a candidate: cosine 0.21.)
    let o = unfloored(&env, &["search", "brute force protection", "--json"]);
    assert!(
        !titles(&o).iter().any(|t| t.contains("signup")),
        "{:?}",
        titles(&o)
    );
    let o = unfloored(
        &env,
        &[
            "search",
            "brute force protection",
            "--all-projects",
            "--json",
        ],
    );
    assert!(
        titles(&o).iter().any(|t| t.contains("signup")),
        "{:?}",
        titles(&o)
    );
    never_shows(
        &env,
        &["search", "throttle", "--type", "bugfix"],
        "rate limiter",
    );
    never_shows(
        &env,
        &["search", "throttle", "--until", "2026-09-21T14:13"],
        "rate limiter",
    );
    never_shows(
        &env,
        &["search", "--", "throttle", "-minute"],
        "rate limiter",
    );

    // The timeline's query anchor is found by meaning too.
    let o = cairn(
        &env,
        &["timeline", "--query", "brute force protection", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t: Value = serde_json::from_slice(&o.stdout).expect("timeline json");
    let anchor = t["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["anchor"] == true)
        .cloned()
        .expect("anchor");
    assert_eq!(
        anchor["title"],
        "Added a sliding-window rate limiter to POST /login"
    );

    // A memory saved by hand gets its vector from the worker like any other.
    let o = cairn(
        &env,
        &[
            "save",
            "Cache invalidation uses write-through",
            "--text",
            "The quokka cache writes through to disk.",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(status_json(&env)["queued"], 1);
    let o = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(status_json(&env)["queued"], 0);
    assert_eq!(status_json(&env)["embedded"], 6);

    // Deleting a memory deletes its vector; changing one queues it again.
    let conn = env.db();
    conn.execute(
        "DELETE FROM observations WHERE title LIKE 'Font rendering%'",
        [],
    )
    .expect("delete");
    conn.execute("UPDATE observations SET narrative = 'Now 10 per minute.' WHERE title LIKE 'Added a sliding%'", []).expect("update");
    drop(conn);
    assert_eq!(env.count("SELECT count(*) FROM embeddings"), 4);
    assert_eq!(env.count("SELECT count(*) FROM embedding_queue"), 1);
}

/// The model loads on a thread of its own while the search starts: weights that do not
/// load leave the search to words alone, with the reason at `-v`, in the CLI and through
/// the MCP server.
#[test]
fn weights_that_do_not_load_leave_search_to_words() {
    let env = TestEnv::new();
    import_memories(&env);
    let installed = env.data_dir.join("models/all-MiniLM-L6-v2");
    std::fs::create_dir_all(&installed).expect("models");
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(model_dir().join(file), installed.join(file)).expect("copy");
    }
    std::fs::write(installed.join("model.safetensors"), b"not weights").expect("write");

    let o = unfloored(&env, &["-v", "search", "rate limiter", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        titles(&o),
        ["Added a sliding-window rate limiter to POST /login"]
    );
    assert_eq!(
        stderr(&o).matches("search by words only:").count(),
        1,
        "{}",
        stderr(&o)
    );
    let o = unfloored(&env, &["timeline", "--query", "rate limiter", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let requests = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"query":"rate limiter"}}}"#,
    ];
    let mut c = env.cmd("cairn");
    c.current_dir(project_dir(&env))
        .env("CAIRN_SEARCH__MIN_RELEVANCE", "0")
        .arg("mcp");
    let o = crate::support::run_with_stdin(c, (requests.join("\n") + "\n").as_bytes());
    let answer = stdout(&o);
    assert!(
        answer.contains("sliding-window rate limiter"),
        "{answer}\n{}",
        stderr(&o)
    );
}

#[test]
fn vectors_of_another_model_are_made_again() {
    let env = TestEnv::new();
    import_memories(&env);
    let model = model_dir();
    let o = env.run(
        "cairn",
        &["embed", "--from", model.to_str().expect("path")],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let current: String = env
        .db()
        .query_row("SELECT DISTINCT model FROM embeddings", [], |r| r.get(0))
        .expect("model");
    // As if an older model had made them: search must not compare them, and the next
    // embedding run makes them again with the current model.
    env.db()
        .execute("UPDATE embeddings SET model = 'older-model:1'", [])
        .expect("age");
    project_dir(&env);
    let o = unfloored(&env, &["search", "brute force protection", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let o = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM embeddings WHERE model = '{current}'"
        )),
        5
    );
    let o = unfloored(&env, &["search", "brute force protection", "--json"]);
    assert_eq!(
        titles(&o)[0],
        "Added a sliding-window rate limiter to POST /login"
    );
}

/// Serves the files of `dir` over HTTP on 127.0.0.1, `tokenizer.json` replaced by `bad`
/// when given; returns the base URL.
fn serve_model(dir: &Path, bad_tokenizer: Option<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let Some(request) = read_request(&mut reader) else {
                continue;
            };
            let path = request.path.trim_start_matches('/').to_string();
            let body = match (&bad_tokenizer, path.as_str()) {
                (Some(bad), "tokenizer.json") => Some(bad.clone()),
                _ => std::fs::File::open(dir.join(&path)).ok().map(|mut f| {
                    let mut v = Vec::new();
                    f.read_to_end(&mut v).expect("read");
                    v
                }),
            };
            let _ = match body {
                Some(b) => stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            b.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|()| stream.write_all(&b)),
                None => stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
            };
        }
    });
    url
}

/// `cairn embed --fetch` from `url`.
fn fetch_from(env: &TestEnv, url: &str) -> std::process::Output {
    let mut c = env.cmd("cairn");
    c.env("CAIRN_EMBED__FETCH_URL", url)
        .args(["embed", "--fetch"]);
    crate::support::run_with_stdin(c, b"")
}

#[test]
fn fetch_checks_every_file_and_keeps_nothing_bad() {
    let env = TestEnv::new();
    import_memories(&env);
    let model = model_dir();

    // A tampered tokenizer: refused by its checksum, nothing installed.
    let url = serve_model(&model, Some(b"{\"tampered\": true}".to_vec()));
    let o = fetch_from(&env, &url);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("SHA-256"), "{}", stderr(&o));
    let installed = env.data_dir.join("models/all-MiniLM-L6-v2");
    assert!(!installed.join("model.safetensors").exists());
    assert!(!installed.join("tokenizer.json").exists());
    assert_eq!(status_json(&env)["model"], Value::Null);

    // No server at all: a clear error, nothing installed, and the way to install the
    // files obtained another way.
    let o = fetch_from(&env, "http://127.0.0.1:9");
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("cannot download"), "{err}");
    assert!(err.contains("cairn embed --from DIR"), "{err}");
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert!(err.contains(file), "{file}: {err}");
    }
    assert!(!installed.join("model.safetensors").exists());

    // The real files: installed, checked, and every memory embedded.
    let url = serve_model(&model, None);
    let o = fetch_from(&env, &url);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(installed.join("cairn-model.json").is_file());
    assert_eq!(status_json(&env)["embedded"], 5);
}

/// A stand-in for an OpenAI-compatible `/v1/embeddings` endpoint: each text's vector
/// counts words of a few topics (so texts on one topic are near), in the reply order the
/// API documents; every request body and its authorization header are kept.
fn serve_embeddings(status: u16) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        const TOPICS: [&[&str]; 4] = [
            &["limit", "throttl", "brute", "429", "attempt"],
            &["flaky", "failing", "test"],
            &["sqlite", "transaction", "busy"],
            &["font", "pdf", "render"],
        ];
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0u8; length];
            let _ = reader.read_exact(&mut body);
            let body = String::from_utf8_lossy(&body).into_owned();
            log.lock().expect("log").push(format!("{head}\n{body}"));
            let reply = if status == 200 {
                let req: Value = serde_json::from_str(&body).expect("request json");
                let data: Vec<Value> = req["input"]
                    .as_array()
                    .expect("input list")
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let t = t.as_str().expect("text").to_lowercase();
                        let mut v: Vec<f64> = TOPICS
                            .iter()
                            .map(|words| words.iter().filter(|w| t.contains(*w)).count() as f64)
                            .collect();
                        v.push(0.1);
                        serde_json::json!({"object": "embedding", "index": i, "embedding": v})
                    })
                    .rev()
                    .collect();
                serde_json::json!({"object": "list", "data": data, "model": req["model"]})
                    .to_string()
            } else {
                r#"{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}"#.to_string()
            };
            let _ = stream.write_all(
                format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                )
                .as_bytes(),
            );
        }
    });
    (url, seen)
}

#[test]
fn an_openai_compatible_endpoint_embeds_instead_of_the_local_model() {
    let env = TestEnv::new();
    import_memories(&env);
    let (url, seen) = serve_embeddings(200);
    let with_endpoint = |args: &[&str]| {
        let mut c = env.cmd("cairn");
        c.current_dir(project_dir(&env))
            .env("CAIRN_EMBED__PROVIDER", "openai")
            .env("CAIRN_EMBED__BASE_URL", &url)
            .env("CAIRN_EMBED__MODEL", "topic-embed")
            .env("OPENAI_API_KEY", "sk-test-key")
            // The endpoint's vectors are made up: no floor for their relevance.
            .env("CAIRN_SEARCH__MIN_RELEVANCE", "0")
            .args(args);
        crate::support::run_with_stdin(c, b"")
    };
    let o = with_endpoint(&["embed"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("embedded 5 memories with openai:topic-embed"),
        "{}",
        stdout(&o)
    );
    let first = seen.lock().expect("log")[0].clone();
    assert!(first.starts_with("POST /v1/embeddings"), "{first}");
    assert!(
        first
            .to_lowercase()
            .contains("authorization: bearer sk-test-key"),
        "{first}"
    );
    assert!(first.contains("\"model\":\"topic-embed\""), "{first}");
    let o = with_endpoint(&["search", "throttle", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        titles(&o)[0],
        "Added a sliding-window rate limiter to POST /login"
    );

    // A refused key is an error that says what the endpoint said.
    let env = TestEnv::new();
    import_memories(&env);
    let (url, _) = serve_embeddings(401);
    let mut c = env.cmd("cairn");
    c.env("CAIRN_EMBED__PROVIDER", "openai")
        .env("CAIRN_EMBED__BASE_URL", &url)
        .env("CAIRN_EMBED__MODEL", "topic-embed")
        .args(["embed"]);
    let o = crate::support::run_with_stdin(c, b"");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("HTTP 401"), "{}", stderr(&o));
    assert!(stderr(&o).contains("Incorrect API key"), "{}", stderr(&o));
}
