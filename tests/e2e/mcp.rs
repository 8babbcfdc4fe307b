//! `cairn mcp` driven over stdio like Claude Code drives it: one JSON-RPC message per line.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use serde_json::{Value, json};

use crate::recall::{hostile_queries, project_dir, seed};
use crate::support::{TestEnv, stderr, stdout};

/// A running `cairn mcp` with its pipes.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn start(env: &TestEnv) -> Client {
        let mut c = env.cmd("cairn");
        c.current_dir(project_dir(env));
        Client::spawn(c)
    }

    /// Starts `cairn mcp` from `c` (a `cairn` command with its directory and environment).
    fn spawn(mut c: std::process::Command) -> Client {
        c.arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn cairn mcp");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Client {
            child,
            stdin,
            stdout,
        }
    }

    fn send_raw(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).expect("write");
        stdin.write_all(b"\n").expect("newline");
        stdin.flush().expect("flush");
    }

    fn send(&mut self, msg: &Value) {
        self.send_raw(msg.to_string().as_bytes());
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read");
        assert!(n > 0, "server closed stdout");
        assert!(line.ends_with('\n'), "one message per line: {line:?}");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {line}"))
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let reply = self.read();
        assert_eq!(reply["jsonrpc"], "2.0");
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    fn call(&mut self, tool: &str, args: Value) -> (bool, String) {
        let r = self.request(
            json!(9),
            "tools/call",
            json!({"name": tool, "arguments": args}),
        );
        let result = &r["result"];
        assert!(result.is_object(), "{r}");
        (
            result["isError"].as_bool().expect("isError"),
            result["content"][0]["text"]
                .as_str()
                .expect("text")
                .to_string(),
        )
    }

    fn handshake(&mut self) {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Closes stdin and waits; returns the remaining stdout lines and the exit code.
    fn finish(mut self) -> (Vec<Value>, Option<i32>) {
        drop(self.stdin.take());
        let mut rest = Vec::new();
        let mut line = String::new();
        while self.stdout.read_line(&mut line).expect("read") > 0 {
            rest.push(serde_json::from_str(&line).expect("json"));
            line.clear();
        }
        let status = self.child.wait().expect("wait");
        (rest, status.code())
    }
}

#[test]
fn handshake_list_and_every_tool() {
    let env = TestEnv::new();
    let s = seed(&env);
    let mut c = Client::start(&env);
    c.handshake();
    // The notification got no reply: the next line answers the ping.
    assert_eq!(
        c.request(json!("p"), "ping", json!({}))["result"],
        json!({})
    );

    let tools = c.request(json!(1), "tools/list", json!({}));
    let tools = tools["result"]["tools"].as_array().expect("tools").clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        ["search", "timeline", "get_observations", "save_memory"]
    );
    for t in &tools {
        assert_eq!(t["inputSchema"]["type"], "object");
        assert!(t["inputSchema"]["properties"].is_object());
    }
    assert_eq!(tools[2]["inputSchema"]["required"], json!(["ids"]));
    assert!(
        tools[0]["description"]
            .as_str()
            .expect("d")
            .contains("Step 1 of 3")
    );

    let (err, text) = c.call("search", json!({"query": "lease"}));
    assert!(!err, "{text}");
    assert!(text.contains("in project 'acme'"), "{text}");
    assert!(text.contains(&format!("\n{} ", s.title_hit)), "{text}");
    assert!(!text.contains("globex"), "{text}");
    let (_, text) = c.call(
        "search",
        json!({"query": "lease", "all_projects": true, "type": "bugfix"}),
    );
    assert!(
        text.contains("[globex]") && text.contains("[acme]"),
        "{text}"
    );
    let (_, text) = c.call("search", json!({"query": "zebra"}));
    assert!(text.starts_with("No results"), "{text}");

    let (err, text) = c.call(
        "timeline",
        json!({"anchor": s.title_hit, "before": 1, "after": 1}),
    );
    assert!(!err, "{text}");
    assert!(text.contains(&format!("→ {} ", s.title_hit)), "{text}");
    assert_eq!(text.lines().count(), 4, "{text}");

    let (err, text) = c.call(
        "get_observations",
        json!({"ids": [s.bugfix, 4040, s.title_hit]}),
    );
    assert!(!err, "{text}");
    let first = text.find("Busy timeout").expect("bugfix first");
    let second = text.find("Lease rescue").expect("title hit second");
    assert!(first < second, "in the order asked: {text}");
    assert!(text.contains("Not found: 4040"), "{text}");

    let (err, text) = c.call(
        "save_memory",
        json!({"title": "WAL needs a shared-memory file", "text": "Network file systems break the -shm file.", "type": "discovery", "files": ["core/src/db.rs"]}),
    );
    assert!(!err, "{text}");
    let (err, text) = c.call("search", json!({"query": "shared memory"}));
    assert!(
        !err && text.contains("WAL needs a shared-memory file"),
        "{text}"
    );
    let (err, text) = c.call(
        "save_memory",
        json!({"title": "Token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "text": "<private>secret plan</private>kept", "files": ["<private>x</private>"]}),
    );
    assert!(!err, "{text}");
    let (rest, code) = c.finish();
    assert!(rest.is_empty());
    assert_eq!(code, Some(0));
    let dump: String = env
        .db()
        .query_row(
            "SELECT title || narrative || files_modified FROM observations WHERE narrative = 'kept'",
            [],
            |r| r.get(0),
        )
        .expect("the cleaned memory");
    assert!(
        !dump.contains("ghp_abc") && !dump.contains("secret plan"),
        "{dump}"
    );
    assert!(
        dump.ends_with("[]"),
        "an empty file entry is dropped: {dump}"
    );
    let (origin, project, session): (String, String, Option<String>) = env
        .db()
        .query_row(
            "SELECT origin, project, session_id FROM observations WHERE title LIKE 'WAL needs%'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("saved row");
    assert_eq!(
        (origin.as_str(), project.as_str(), session),
        ("manual", "acme", None)
    );
}

#[test]
fn protocol_errors_and_bad_arguments() {
    let env = TestEnv::new();
    seed(&env);
    let mut c = Client::start(&env);
    // Unknown method before initialize.
    let r = c.request(json!(1), "resources/templates/list", json!({}));
    assert_eq!(r["error"]["code"], -32601);
    // Malformed lines: a parse error with a null id, and the server carries on.
    c.send_raw(b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": ");
    let r = c.read();
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32700), Value::Null)
    );
    c.send_raw(b"\xff\xfe not utf-8");
    assert_eq!(c.read()["error"]["code"], -32700);
    c.send_raw(b"[1, 2]");
    assert_eq!(c.read()["error"]["code"], -32600);
    c.handshake();
    // Ids: 0, negative, large and strings come back as sent.
    for id in [
        json!(0),
        json!(-5),
        json!(9_007_199_254_740_991i64),
        json!(""),
        json!("abc"),
    ] {
        c.request(id, "ping", json!({}));
    }
    assert_eq!(
        c.request(json!(3), "nope/nothing", json!({}))["error"]["code"],
        -32601
    );

    for (tool, args, hint) in [
        ("get_observations", json!({}), "'ids' must be a list"),
        (
            "get_observations",
            json!({"ids": "all"}),
            "'ids' must be a list",
        ),
        (
            "get_observations",
            json!({"ids": [999, "S999"]}),
            "nothing stored as 999, S999",
        ),
        (
            "search",
            json!({"limit": 1000}),
            "'limit' must be an integer from 1 to 100",
        ),
        (
            "search",
            json!({"since": "yesterday"}),
            "'since' must be a date",
        ),
        (
            "search",
            json!({"type": ["bugfix", "idea"]}),
            "unknown type 'idea'",
        ),
        (
            "search",
            json!({"project": 7}),
            "'project' must be a string",
        ),
        (
            "search",
            json!({"querry": "x"}),
            "unknown argument 'querry'",
        ),
        ("timeline", json!({"before": 2}), "give 'anchor'"),
        (
            "timeline",
            json!({"anchor": "abc"}),
            "'anchor' must be an id as search lists it",
        ),
        (
            "timeline",
            json!({"anchor": 999}),
            "no observation with id 999",
        ),
        (
            "save_memory",
            json!({"title": "", "text": "x"}),
            "'title' is required",
        ),
        (
            "save_memory",
            json!({"title": "t", "text": "x", "files": [1]}),
            "'files' must be a list of strings",
        ),
    ] {
        let (err, text) = c.call(tool, args.clone());
        assert!(err, "{tool} {args}: {text}");
        assert!(text.contains(hint), "{tool} {args}: {text}");
    }
    let r = c.request(
        json!(4),
        "tools/call",
        json!({"name": "search", "arguments": "lease"}),
    );
    assert_eq!(r["result"]["isError"], true);
}

#[test]
fn every_reply_is_flushed_before_exit_at_eof() {
    let env = TestEnv::new();
    seed(&env);
    let mut c = Client::start(&env);
    c.handshake();
    for i in 1..=20 {
        c.send(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "lease"}}}));
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": i}}));
    }
    // The last line has no newline: it still counts.
    c.stdin
        .as_mut()
        .expect("stdin")
        .write_all(br#"{"jsonrpc":"2.0","id":21,"method":"ping"}"#)
        .expect("write");
    let (rest, code) = c.finish();
    // The initialize reply was read by handshake; 20 searches and a ping remain.
    assert_eq!(rest.len(), 21);
    let ids: Vec<i64> = rest.iter().filter_map(|r| r["id"].as_i64()).collect();
    assert_eq!(ids, (1..=21).collect::<Vec<_>>());
    assert_eq!(code, Some(0));
}

#[test]
fn hostile_queries_never_break_the_server() {
    let env = TestEnv::new();
    seed(&env);
    hostile_corpus_through_the_server(&env);
}

#[test]
fn hostile_queries_never_break_the_server_searching_by_meaning() {
    let env = TestEnv::new();
    seed(&env);
    let model = crate::support::model_dir();
    let settings = json!({"embed": {"model_dir": model, "provider": "local"}});
    std::fs::write(env.data_dir.join("settings.json"), settings.to_string()).expect("settings");
    let o = env.run("cairn", &["embed"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", crate::support::stderr(&o));
    assert_eq!(env.count("SELECT count(*) FROM embedding_queue"), 0);
    hostile_corpus_through_the_server(&env);
}

fn hostile_corpus_through_the_server(env: &TestEnv) {
    let mut c = Client::start(env);
    c.handshake();
    let mut corpus = hostile_queries();
    corpus.extend(
        [
            "\0",
            "lease\0rescue",
            "\0\0\0",
            "\"\0\"",
            "-\0",
            "\0*",
            "NEAR(\0)",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    for q in &corpus {
        for args in [
            json!({"query": q, "all_projects": true}),
            json!({"query": q, "file": q, "concept": q}),
        ] {
            let (err, text) = c.call("search", args);
            assert!(!err, "{q:?}: {text}");
        }
        let (err, text) = c.call("timeline", json!({"query": q, "all_projects": true}));
        assert!(
            !err || text.contains("no record matches") || text.contains("give 'anchor'"),
            "{q:?}: {text}"
        );
        // Hostile project names are just names.
        let (err, text) = c.call("search", json!({"query": "lease", "project": q}));
        assert!(!err, "{q:?}: {text}");
    }
    let (rest, code) = c.finish();
    assert!(rest.is_empty());
    assert_eq!(code, Some(0));
}

#[test]
fn an_unknown_tool_is_a_protocol_error() {
    let env = TestEnv::new();
    seed(&env);
    let mut c = Client::start(&env);
    c.handshake();
    // The request as Claude Code sends it, `_meta` included.
    c.send_raw(
        br#"{"method":"tools/call","params":{"name":"recall","arguments":{"query":"lease"},"_meta":{"claudecode/toolUseId":"toolu_01Xq"}},"jsonrpc":"2.0","id":5}"#,
    );
    let r = c.read();
    assert_eq!(r["id"], 5, "{r}");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let message = r["error"]["message"].as_str().expect("message");
    assert!(message.contains("unknown tool 'recall'"), "{message}");
    assert!(message.contains("search, timeline"), "{message}");
}

#[test]
fn discover_carries_server_info_where_the_sdks_read_it() {
    let env = TestEnv::new();
    let mut c = Client::start(&env);
    // The Python SDK's request in `server/discover` mode.
    c.send_raw(
        br#"{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp","version":"1.30.0"}}}}"#,
    );
    let r = c.read();
    let info = &r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info["name"], "cairn", "{r}");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"), "{r}");
    assert!(r["result"]["supportedVersions"].is_array(), "{r}");
    // Every stateless result says who answered.
    c.send_raw(
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
    );
    let r = c.read();
    assert_eq!(
        r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "cairn",
        "{r}"
    );
}

#[test]
fn the_same_save_memory_call_twice_stores_one_memory() {
    let env = TestEnv::new();
    let mut c = Client::start(&env);
    c.handshake();
    let args = json!({"title": "Prefer BEGIN IMMEDIATE", "text": "Deferred transactions get SQLITE_BUSY at once under WAL.", "type": "decision"});
    let (err, first) = c.call("save_memory", args.clone());
    assert!(!err, "{first}");
    let (err, second) = c.call("save_memory", args);
    assert!(!err, "{second}");
    assert!(first.starts_with("Saved as observation 1"), "{first}");
    assert!(
        second.starts_with("Already saved as observation 1"),
        "{second}"
    );
    let tools = c.request(json!(2), "tools/list", json!({}));
    let save = &tools["result"]["tools"][3];
    assert_eq!(save["annotations"]["idempotentHint"], true);
    c.finish();
    assert_eq!(env.count("SELECT count(*) FROM observations"), 1);
}

#[test]
fn get_observations_of_fifty_ids_stays_within_its_token_budget() {
    let env = TestEnv::new();
    let mut c = Client::start(&env);
    c.handshake();
    // Fifty memories of about 1 KB each: about 51 KB in full.
    let body = "The worker renews its lease every heartbeat and a rescued batch counts as a failed attempt. ".repeat(11);
    for i in 1..=50 {
        let (err, text) = c.call(
            "save_memory",
            json!({"title": format!("Lease note {i}"), "text": format!("{i}: {body}")}),
        );
        assert!(!err, "{text}");
    }
    let ids: Vec<i64> = (1..=50).collect();
    let (err, text) = c.call("get_observations", json!({"ids": ids}));
    assert!(!err, "{text}");
    // Within the default budget of 4,000 tokens (characters / 4).
    assert!(text.chars().count() <= 16_000, "{}", text.chars().count());
    assert!(text.contains("Lease note 1\n"), "{text}");
    let tail = text.lines().last().expect("a last line");
    assert!(
        tail.starts_with("Left out to stay within 4000 tokens: "),
        "{tail}"
    );
    assert!(tail.contains(", 50."), "{tail}");
    assert!(tail.contains("max_tokens"), "{tail}");
    // What was left out comes with a bigger budget.
    let (err, text) = c.call("get_observations", json!({"ids": ids, "max_tokens": 20000}));
    assert!(!err, "{text}");
    assert!(text.contains("Lease note 50\n"), "{text}");
    assert!(!text.contains("Left out"), "{text}");
    // And a budget is a budget for search and timeline too.
    let (err, text) = c.call(
        "search",
        json!({"query": "lease", "limit": 50, "max_tokens": 500}),
    );
    assert!(!err, "{text}");
    assert!(text.chars().count() <= 2_000, "{text}");
    assert!(text.contains("call search again with offset: "), "{text}");
    let (err, text) = c.call(
        "timeline",
        json!({"anchor": 25, "before": 20, "after": 20, "max_tokens": 500}),
    );
    assert!(!err, "{text}");
    assert!(text.chars().count() <= 2_000, "{text}");
    assert!(text.contains("→ 25 "), "{text}");
    assert!(
        text.contains("Left out to stay within 500 tokens: "),
        "{text}"
    );
    let (err, text) = c.call("get_observations", json!({"ids": [1], "max_tokens": 100}));
    assert!(err, "{text}");
    assert!(
        text.contains("'max_tokens' must be an integer from 500 to 20000"),
        "{text}"
    );
}

#[test]
fn the_asking_session_and_project_come_from_claude_codes_environment() {
    let env = TestEnv::new();
    seed(&env);
    // Claude Code starts the server from anywhere, telling it the project root and session.
    let mut cmd = env.cmd("cairn");
    cmd.current_dir(env.tmp.path())
        .env("CLAUDE_PROJECT_DIR", project_dir(&env))
        .env("CLAUDE_CODE_SESSION_ID", "s2")
        .arg("mcp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut c = Client {
        stdout: BufReader::new(child.stdout.take().expect("stdout")),
        stdin: None,
        child,
    };
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"lease"}}}"#)
        .expect("write");
    stdin.write_all(b"\n").expect("newline");
    stdin.flush().expect("flush");
    let r = c.read();
    let text = r["result"]["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("in project 'acme'"), "{text}");
    drop(stdin);
    c.finish();
}

/// What `claude mcp list` does: start the server as Claude Code starts it, shake hands,
/// list the tools, close stdin. The server writes nothing: no database where none was
/// (no session, no memory), no row where one is.
#[test]
fn a_start_that_only_lists_the_tools_writes_nothing() {
    let env = TestEnv::new();
    let list = |env: &TestEnv| {
        let mut cmd = env.cmd("cairn");
        cmd.current_dir(env.tmp.path())
            .env("CLAUDE_PROJECT_DIR", project_dir(env))
            .env(
                "CLAUDE_CODE_SESSION_ID",
                "3b34696e-2bf2-4d97-88a7-82f25e921969",
            );
        let mut c = Client::spawn(cmd);
        c.handshake();
        let tools = c.request(json!(1), "tools/list", json!({}));
        assert_eq!(
            tools["result"]["tools"].as_array().map(Vec::len),
            Some(4),
            "{tools}"
        );
        let (rest, code) = c.finish();
        assert!(rest.is_empty(), "{rest:?}");
        assert_eq!(code, Some(0));
    };
    list(&env);
    assert!(
        !env.db_path().exists(),
        "a start with no tool call made the database"
    );

    // Once the memory exists, listing leaves every row as it was.
    seed(&env);
    let tables = [
        "sessions",
        "user_prompts",
        "observations",
        "session_summaries",
        "pending_messages",
    ];
    let counts = |env: &TestEnv| -> Vec<i64> {
        tables
            .iter()
            .map(|t| env.count(&format!("SELECT count(*) FROM {t}")))
            .collect()
    };
    let before = counts(&env);
    list(&env);
    assert_eq!(counts(&env), before, "{tables:?}");
}

#[test]
fn a_database_damaged_under_the_server_is_recovered_and_the_call_answered() {
    let env = TestEnv::new();
    seed(&env);
    let backup = env.run("cairn", &["backup"], b"");
    assert_eq!(backup.status.code(), Some(0), "{}", stderr(&backup));
    let mut c = Client::start(&env);
    c.handshake();
    // The header overwritten while the server runs, before the call that opens the database.
    std::fs::OpenOptions::new()
        .write(true)
        .open(env.db_path())
        .and_then(|mut f| f.write_all(&[0u8; 100]).and_then(|()| f.sync_all()))
        .expect("damage the header");
    let (err, text) = c.call("search", json!({"query": "lease"}));
    assert!(!err, "{text}");
    assert!(text.contains("Queue internals"), "{text}");
    let (_, code) = c.finish();
    assert_eq!(code, Some(0));
    let status = env.run("cairn", &["status"], b"");
    assert!(
        stdout(&status).contains("the database was damaged"),
        "{}",
        stdout(&status)
    );
}
