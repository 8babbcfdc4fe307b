//! The canary corpus: common credential forms, each with a secret part that must appear in
//! none of the places cairn writes or sends: the database (and its WAL), the quarantine,
//! spool files, logs at trace level, backups (daily and `--to`), exports, the model's
//! requests (a fake server records them) and the MCP server's output.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::support::{TestEnv, hook_fixture, run_with_stdin, stderr};

/// (the text as written, the secret part that must not be kept). At least 40 forms.
pub const CORPUS: &[(&str, &str)] = &[
    (
        "export AWS_ACCESS_KEY_ID=AKIAZ7QW3ERT5YU8IO2P",
        "Z7QW3ERT5YU8IO2P",
    ),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYz9Q2k4T7vB",
        "wJalrXUtnFEMI/K7MDENG",
    ),
    (
        "token ghp_R8x2Lq9Vb7Nw3Kd5Tz1Hy6Pm4Cj0Fs8Ga2Qe",
        "R8x2Lq9Vb7Nw3Kd5Tz1Hy6Pm4Cj0Fs8Ga2Qe",
    ),
    (
        "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6wX7",
        "iJ7kL8mN9oP0qR1sT2uV3wX4",
    ),
    (
        "GITHUB_TOKEN=gho_p9Q8r7S6t5U4v3W2x1Y0zA9bC8dE7fG6hI5j",
        "p9Q8r7S6t5U4v3W2x1Y0zA9b",
    ),
    (
        "git remote set-url origin https://oauth2:glpat-Xy7Zq9Lm2Nb4Vc6Kd8Pf@gitlab.com/a/b.git",
        "Xy7Zq9Lm2Nb4Vc6Kd8Pf",
    ),
    (
        "SLACK_BOT_TOKEN=xoxb-2837465910-4829103847562-Qm9Zx8Lp7Kw6Jv5Hu4Gt3Fs2",
        "Qm9Zx8Lp7Kw6Jv5Hu4Gt3Fs2",
    ),
    (
        "curl -X POST https://hooks.slack.com/services/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",
        "q8W7e6R5t4Y3u2I1o0P9a8S7",
    ),
    (
        "STRIPE_SECRET_KEY=sk_live_51Hq8Zr2eZvKYlo2C9xQ7wP3mN5bV1cX4zL6kJ8hG0fD",
        "51Hq8Zr2eZvKYlo2C9xQ7wP3",
    ),
    (
        "OPENAI_API_KEY=sk-proj-Tz8Qw2Er4Ty6Ui8Op0As2Df4Gh6Jk8Lz0Xc2Vb4Nm6",
        "Tz8Qw2Er4Ty6Ui8Op0As2Df4",
    ),
    (
        "ANTHROPIC_API_KEY=sk-ant-api03-Hq7Wm2Xp9Zk4Lr6Vn8Bt3Cy5Dj1Fs0Ga-Qe7Rw_AA",
        "Hq7Wm2Xp9Zk4Lr6Vn8Bt3Cy5",
    ),
    (
        "const key = \"AIzaSyD3kQ7xP9mL2vB8nR4tW6zY1cF5hJ0gK3e\";",
        "SyD3kQ7xP9mL2vB8nR4tW6zY1c",
    ),
    (
        "//registry.npmjs.org/:_authToken=npm_Zq8Xw7Cv6Bn5Ml4Kj3Hg2Fd1Sa0Po9Iu8Yt7R",
        "Zq8Xw7Cv6Bn5Ml4Kj3Hg2Fd1Sa0",
    ),
    (
        "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjYW5hcnktand0LTQ0In0.Qm2Xr7Zp9Lk4Wn6Vb8Tc3Yd5Hf1Gs0Ja",
        "eyJzdWIiOiJjYW5hcnktand0LTQ0In0",
    ),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAcanaryRsaBody7Qx9Lm2Zp4Kw6\n-----END RSA PRIVATE KEY-----",
        "canaryRsaBody7Qx9Lm2Zp4Kw6",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAcanarySshBody3Wq8Zx\n-----END OPENSSH PRIVATE KEY-----",
        "canarySshBody3Wq8Zx",
    ),
    (
        "git clone https://bob:Pw9canaryUrl4Xq@github.com/acme/api.git",
        "Pw9canaryUrl4Xq",
    ),
    (
        "psql postgres://admin:Pg7canaryPw2Lm@db.internal:5432/app",
        "Pg7canaryPw2Lm",
    ),
    (
        "redis-cli -u redis://:Rd3canaryPw8Zx@cache.internal:6379/0",
        "Rd3canaryPw8Zx",
    ),
    (
        "mongosh \"mongodb+srv://svc:Mg5canaryPw1Qw@cluster0.abcd.mongodb.net/prod\"",
        "Mg5canaryPw1Qw",
    ),
    (
        "DATABASE_URL=mysql://app:My4canaryPw6Kd@10.0.0.5:3306/shop",
        "My4canaryPw6Kd",
    ),
    (
        "curl -u deploy:Cu2canaryPw9Vb https://ci.example.com/api",
        "Cu2canaryPw9Vb",
    ),
    (
        "curl --user admin:Cu7canaryPw3Nx https://jenkins.example.com/",
        "Cu7canaryPw3Nx",
    ),
    (
        "mysql -h db -u root --password Ms8canaryPw5Tz shop",
        "Ms8canaryPw5Tz",
    ),
    (
        "mysql -uroot -pMp6canaryPw2Hy shop < dump.sql",
        "Mp6canaryPw2Hy",
    ),
    (
        "GET https://api.example.com/v1/items?token=Qt4canaryTok9Lz&page=2",
        "Qt4canaryTok9Lz",
    ),
    (
        "https://maps.example.com/api?q=x&api_key=Ak3canaryKey7Wp",
        "Ak3canaryKey7Wp",
    ),
    ("token: Tk5canaryTok2Mv8Xq", "Tk5canaryTok2Mv8Xq"),
    ("password=Pw1canaryPass6Rb", "Pw1canaryPass6Rb"),
    ("{\"api_key\": \"Aj8canaryJson4Ks\"}", "Aj8canaryJson4Ks"),
    (
        "Authorization: Basic ZGVwbG95OkJhNWNhbmFyeUJhc2ljM1F3",
        "ZGVwbG95OkJhNWNhbmFyeUJhc2ljM1F3",
    ),
    (
        "export SECRET_KEY='Sk9canarySecret4Lw'",
        "Sk9canarySecret4Lw",
    ),
    (
        "client_secret = \"Cs2canaryClient7Yh\"",
        "Cs2canaryClient7Yh",
    ),
    (
        "TWINE_PASSWORD=pypi-AgEIcHlwaS5vcmcCJGNhbmFyeS1weXBpLTQ3LXRva2VuLWJvZHktWHE5THoyAAIq",
        "AgEIcHlwaS5vcmcCJGNhbmFyeS1weXBp",
    ),
    (
        "SENDGRID_API_KEY=SG.Qw8canarySendgr1d.Zx7canarySendgridBody4Lm9Kp2Vb6Nt3Hy5Jd1F",
        "Zx7canarySendgridBody4Lm9Kp2Vb6Nt3",
    ),
    (
        "doctl auth init -t dop_v1_4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e3b6d0f9a2c5e8b1d4f7a0c3e6b9d2f5a",
        "4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e",
    ),
    (
        "HF_TOKEN=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",
        "QwErTyUiOpAsDfGhJkLzXcVbNm",
    ),
    (
        "SHOPIFY_TOKEN=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",
        "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",
    ),
    (
        "docker login -u ci -p Dk7canaryDock3Qz registry.example.com",
        "Dk7canaryDock3Qz",
    ),
    (
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Az9canaryAzureKey4Lm8Qp2Xw6Vb3Nt7Hy1Jd5Fs0Gk==;EndpointSuffix=core.windows.net",
        "Az9canaryAzureKey4Lm8Qp2Xw6Vb3Nt7",
    ),
    (
        "DD_API_KEY=4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1f",
        "4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1f",
    ),
    (
        "\"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIEvgIBADANcanaryGcpKeyBody8Wq\\n-----END PRIVATE KEY-----\\n\"",
        "MIIEvgIBADANcanaryGcpKeyBody8Wq",
    ),
    (
        "DOPPLER_TOKEN=dp.pt.Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz9Xc8Vb7Nm6Qw5Er4Ty",
        "Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0",
    ),
    (
        "PULUMI_ACCESS_TOKEN=pul-4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e3b6d0f9a",
        "4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e3b6d0f9a",
    ),
    (
        "DATABRICKS_TOKEN=dapi4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e",
        "dapi4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e",
    ),
    (
        "TELEGRAM_BOT_TOKEN=5829104736:AAHq7Wm2Xp9Zk4Lr6Vn8Bt3Cy5Dj1Fs0GaQe",
        "AAHq7Wm2Xp9Zk4Lr6Vn8Bt3Cy5Dj1Fs0GaQe",
    ),
    (
        "TWILIO_API_KEY=SK4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e",
        "SK4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e",
    ),
    (
        "MAILGUN_API_KEY=key-4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e",
        "4f8a2c9e1b7d3f6a0c5e8b2d9f4a7c1e\n",
    ),
    ("X-Api-Key: Xk6canaryHeader2Pw9Lm", "Xk6canaryHeader2Pw9Lm"),
    (
        "export VAULT_TOKEN=hvs.CAESIJcanaryVault7Qw2Zx9Lm4Kp6Vb8Nt3Hy5Jd1Fs0GkAb",
        "CAESIJcanaryVault7Qw2Zx9Lm4Kp6",
    ),
];

/// Every form, one a line, numbered.
fn corpus_text() -> String {
    CORPUS
        .iter()
        .enumerate()
        .map(|(i, (form, _))| format!("step {i}: {form}\n"))
        .collect()
}

/// The canaries (trailing newlines in the table only disambiguate, they are not part of it).
fn canaries() -> Vec<&'static str> {
    CORPUS.iter().map(|(_, c)| c.trim_end()).collect()
}

fn leaks(what: &str, hay: &[u8], found: &mut Vec<String>) {
    for c in canaries() {
        let escaped = Value::from(c).to_string();
        let escaped = escaped.trim_matches('"');
        if contains(hay, c) || contains(hay, escaped) {
            found.push(format!("{c} in {what}"));
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn all_files_under(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            all_files_under(&p, out);
        } else {
            out.push((
                p.display().to_string(),
                std::fs::read(&p).unwrap_or_default(),
            ));
        }
    }
}

/// A stand-in for the model API: records every request body, answers with nothing to
/// store.
fn fake_model() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                let mut len = 0usize;
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                let _ = reader.read_exact(&mut body);
                seen.lock()
                    .expect("lock")
                    .push(format!("{head}{}", String::from_utf8_lossy(&body)));
                let answer = json!({
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": ""}],
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                })
                .to_string();
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    (url, bodies)
}

#[test]
fn no_canary_reaches_any_place_cairn_writes_or_sends() {
    assert!(CORPUS.len() >= 40);
    let env = TestEnv::new();
    let text = corpus_text();
    let mut found = Vec::new();
    let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();
    let hook = |input: &[u8], lock_wait: Option<&str>| {
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_LOG__LEVEL", "trace");
        if let Some(ms) = lock_wait {
            c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", ms);
        }
        let out = run_with_stdin(c, input);
        assert_eq!(out.status.code(), Some(0));
        out
    };
    let fixture =
        |name: &str| -> Value { serde_json::from_str(&hook_fixture(name)).expect("json") };
    let mut prompt = fixture("UserPromptSubmit.json");
    prompt["prompt"] = text.clone().into();
    let mut tool = fixture("PostToolUse.json");
    tool["tool_input"]["command"] = text.clone().into();
    tool["tool_response"]["stdout"] = text.clone().into();
    let mut fail = fixture("PostToolUseFailure.json");
    fail["error"] = text.clone().into();
    let mut stop = fixture("Stop.json");
    stop["last_assistant_message"] = text.clone().into();
    for ev in [&fixture("SessionStart.json"), &prompt, &tool, &fail, &stop] {
        let out = hook(ev.to_string().as_bytes(), None);
        outputs.push((
            "hook stdout/stderr".into(),
            [out.stdout, out.stderr].concat(),
        ));
    }
    // Unreadable input (quarantined): the corpus JSON-escaped inside a broken object.
    let broken = format!("{{\"prompt\": {}", Value::from(text.clone()));
    hook(broken.as_bytes(), None);
    // A spooled event: the database held by another writer.
    let mut spooled = fixture("PostToolUse.json");
    spooled["tool_use_id"] = "toolu_spooled_canary".into();
    spooled["tool_response"]["stdout"] = text.clone().into();
    {
        let mut holder = env.db();
        let tx = holder
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("lock");
        hook(spooled.to_string().as_bytes(), Some("30"));
        let mut spool = Vec::new();
        all_files_under(&env.data_dir.join("spool"), &mut spool);
        assert!(!spool.is_empty(), "the event was spooled");
        outputs.extend(spool);
        tx.rollback().expect("unlock");
    }

    // The worker: ingests the spool, sends the jobs to the (fake) model, backs up.
    let (url, requests) = fake_model();
    let mut w = env.cmd("cairn-worker");
    w.args(["--once"])
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", &url)
        .env("CAIRN_LOG__LEVEL", "trace");
    let out = run_with_stdin(w, b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    outputs.push((
        "worker stdout/stderr".into(),
        [out.stdout, out.stderr].concat(),
    ));
    let requests = requests.lock().expect("lock").clone();
    assert!(!requests.is_empty(), "the worker called the model");
    for r in &requests {
        outputs.push(("a model request".into(), r.as_bytes().to_vec()));
    }

    // A memory saved by hand, then read back through MCP and the CLI.
    let mcp_input = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "save_memory", "arguments": {"title": "credentials used in the deploy", "text": text}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "credentials deploy"}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_observations", "arguments": {"ids": [1, 2, 3]}}}),
    ]
    .iter()
    .map(|m| format!("{m}\n"))
    .collect::<String>();
    let out = env.run("cairn", &["mcp"], mcp_input.as_bytes());
    let mcp_out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        mcp_out.contains("credentials used in the deploy"),
        "{mcp_out}"
    );
    outputs.push(("MCP output".into(), [out.stdout, out.stderr].concat()));
    for args in [
        vec!["search", "credentials"],
        vec!["quarantine", "list", "--json"],
        vec!["context"],
    ] {
        let out = env.run("cairn", &args, b"");
        outputs.push((
            format!("cairn {}", args.join(" ")),
            [out.stdout, out.stderr].concat(),
        ));
    }

    // Backups and exports.
    let out_dir = env.tmp.path().join("out");
    std::fs::create_dir_all(&out_dir).expect("dir");
    let to = out_dir.join("b.db");
    let export = out_dir.join("e.jsonl");
    let md = out_dir.join("e.md");
    for args in [
        vec!["backup"],
        vec!["backup", "--to", to.to_str().expect("utf-8")],
        vec!["export", "-o", export.to_str().expect("utf-8")],
        vec![
            "export",
            "--format",
            "markdown",
            "-o",
            md.to_str().expect("utf-8"),
        ],
    ] {
        let out = env.run("cairn", &args, b"");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    all_files_under(&out_dir, &mut outputs);
    all_files_under(&env.data_dir, &mut outputs);
    let names: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
    for want in ["cairn.db", ".log", "backups", "b.db", "e.jsonl", "spool"] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "no {want}: {names:?}"
        );
    }
    for (what, bytes) in &outputs {
        leaks(what, bytes, &mut found);
    }
    found.sort();
    found.dedup();
    assert!(
        found.is_empty(),
        "{} leaks:\n{}",
        found.len(),
        found.join("\n")
    );
}
