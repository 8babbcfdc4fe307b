//! `cairn demo` end to end: the recorded session through the real binaries.

use crate::support::{TestEnv, stderr, stdout};

#[test]
fn the_demo_shows_observations_context_search_and_timeline() {
    let env = TestEnv::new();
    let dir = env.tmp.path().join("demo-data");
    let dir_s = dir.to_string_lossy().to_string();
    let out = env.run("cairn", &["demo", "--data-dir", &dir_s], b"");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));

    // The hooks took every event, the worker processed every job.
    assert!(text.contains("17 hook events"), "{text}");
    assert!(text.contains("0 jobs not done"), "{text}");
    // The observations the offline extractor must find in this session.
    for title in [
        "Changed \"expires_at = now + ttl - 1\" to \"expires_at = now + ttl\" in session.py",
        "test_session_expiry failed: AssertionError: session expires 1s before its TTL",
        "Wrote ratelimit.py",
        "Added \"@rate_limited(limit=5, window=60, key=client_ip)\" to login.py",
        "Wrote test_ratelimit.py",
    ] {
        assert!(text.contains(title), "missing {title}:\n{text}");
    }
    // The next session's context block, with the last turn's summary.
    assert!(
        text.contains("<cairn-context>\n# cairn memory of project acme-api"),
        "{text}"
    );
    assert!(
        text.contains("- Completed: Added a sliding-window rate limiter"),
        "{text}"
    );
    // The search and the timeline ran and found the story.
    assert!(text.contains("rate limiting"), "{text}");
    assert!(
        !text.contains("**"),
        "no highlight marks in a pipe:\n{text}"
    );
    assert!(
        text.contains("→  S1"),
        "the timeline marks its anchor:\n{text}"
    );
    // Privacy held and skipped tools stayed out, in the database the demo leaves behind.
    let db = rusqlite::Connection::open(dir.join("cairn.db")).expect("demo database");
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(
        count("SELECT count(*) FROM user_prompts WHERE prompt_text LIKE '%hunter2%'"),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM pending_messages WHERE payload LIKE '%TodoWrite%'"),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM pending_messages WHERE status <> 'done'"),
        0
    );
    assert_eq!(count("SELECT count(*) FROM session_summaries"), 2);
    assert!(
        text.contains(&format!("export CAIRN_DATA_DIR={dir_s}")),
        "{text}"
    );

    // The data dir is now not empty: a second demo there is refused, nothing touched.
    let before = std::fs::read(dir.join("cairn.db")).expect("db");
    let again = env.run("cairn", &["demo", "--data-dir", &dir_s], b"");
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).starts_with("error: "), "{}", stderr(&again));
    assert!(stderr(&again).contains("not empty"));
    assert_eq!(before, std::fs::read(dir.join("cairn.db")).expect("db"));
}

#[test]
fn the_demo_ends_with_commands_that_work_from_where_the_user_is() {
    let env = TestEnv::new();
    let dir = env.tmp.path().join("demo-data");
    let dir_s = dir.to_string_lossy().to_string();
    let exe = crate::support::bin("cairn");
    // Not on the PATH and not run by cargo: the full path of the binary.
    let mut c = env.cmd("cairn");
    c.args(["demo", "--data-dir", &dir_s])
        .env("PATH", "/usr/bin:/bin")
        .env_remove("CARGO");
    let out = crate::support::run_with_stdin(c, b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let tail = &text[text.find("Explore it with:").expect("the way on")..];
    let status_line = tail
        .lines()
        .find(|l| l.trim_end().ends_with(" status"))
        .expect("a status line")
        .trim();
    assert!(
        status_line == format!("{} status", exe.display())
            || status_line == format!("'{}' status", exe.display()),
        "{tail}"
    );
    assert!(!tail.contains("\n  cairn "), "{tail}");
    // Typed into a shell as printed, with the export before it, it works.
    let export = tail
        .lines()
        .find(|l| l.trim().starts_with("export CAIRN_DATA_DIR="))
        .expect("export line")
        .trim();
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(format!("{export}; {status_line}"))
        .env("HOME", env.tmp.path());
    let out = crate::support::run_with_stdin(sh, b"");
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    assert!(stdout(&out).contains("cairn status of"), "{}", stdout(&out));

    // Run by cargo: the cargo command.
    let dir2 = env.tmp.path().join("demo-data-2");
    let mut c = env.cmd("cairn");
    c.args(["demo", "--data-dir", &dir2.to_string_lossy()])
        .env("PATH", "/usr/bin:/bin")
        .env("CARGO", "/usr/bin/cargo");
    let text = stdout(&crate::support::run_with_stdin(c, b""));
    assert!(
        text.contains("\n  cargo run --bin cairn -- status"),
        "{text}"
    );

    // On the PATH: plain `cairn`.
    let dir3 = env.tmp.path().join("demo-data-3");
    let mut c = env.cmd("cairn");
    c.args(["demo", "--data-dir", &dir3.to_string_lossy()])
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", exe.parent().expect("dir").display()),
        )
        .env_remove("CARGO");
    let text = stdout(&crate::support::run_with_stdin(c, b""));
    assert!(text.contains("\n  cairn status"), "{text}");
}
