//! The whole pipeline across binaries: hook events in, worker out, and the hand-offs
//! between them (the spool, the daily backup).

use crate::support::{TestEnv, hook_fixture, run_with_stdin};

fn hook(env: &TestEnv, fixture: &str) {
    let out = env.run("cairn-hook", &[], hook_fixture(fixture).as_bytes());
    assert_eq!(out.status.code(), Some(0), "{fixture}");
}

fn worker_once(env: &TestEnv) {
    let out = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(
        out.status.code(),
        Some(0),
        "worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn offline(env: &mut TestEnv) {
    std::fs::create_dir_all(&env.data_dir).expect("data dir");
    std::fs::write(
        env.data_dir.join("settings.json"),
        r#"{"model": {"provider": "offline"}}"#,
    )
    .expect("settings");
}

#[test]
fn a_recorded_turn_becomes_observations_a_summary_and_a_daily_backup() {
    let mut env = TestEnv::new();
    offline(&mut env);
    for f in [
        "SessionStart.json",
        "UserPromptSubmit.json",
        "PostToolUse.json",
        "PostToolUse.Bash.subagent.json",
        "PostToolUse.Read.json",
        "PostToolUseFailure.json",
        "PostToolUse.Agent.json",
        "Stop.json",
        "SessionEnd.json",
    ] {
        hook(&env, f);
    }
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status = 'pending'"),
        6
    );
    worker_once(&env);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status <> 'done'"),
        0
    );
    // A read with no edit beside it is routine: no memory of its own (a "Read out.txt"
    // would crowd the index and the file's recall).
    assert_eq!(
        env.count(
            "SELECT count(*) FROM observations WHERE files_read LIKE '%/home/dev/acme-api/out.txt%'"
        ),
        0,
        "a lone read is routine"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM observations WHERE type = 'discovery' AND facts LIKE '%Exit code 3%'"),
        1,
        "the failed command is remembered"
    );
    let (request, text): (String, String) = env
        .db()
        .query_row(
            "SELECT request, completed || ' ' || notes FROM session_summaries WHERE prompt_number = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("one summary");
    assert!(request.contains("please do the full tour"), "{request}");
    assert!(text.contains("out.txt and sub.txt written"), "{text}");
    let backups: Vec<_> = std::fs::read_dir(env.data_dir.join("backups"))
        .expect("backups dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert!(backups[0].starts_with("cairn-") && backups[0].ends_with(".db"));
}

#[test]
fn a_hook_leaves_the_upgrade_of_an_older_database_to_the_worker() {
    // A database of schema version 7, as the release before the full-text tables held the
    // project: upgrading it rebuilds them (seconds for a large one), which a hook must not
    // keep Claude Code waiting for.
    let mut env = TestEnv::new();
    offline(&mut env);
    {
        let db = env.db();
        let mut files: Vec<_> = std::fs::read_dir(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations"),
        )
        .expect("migrations")
        .map(|e| e.expect("entry").path())
        .collect();
        files.sort();
        for file in &files[..7] {
            db.execute_batch(&std::fs::read_to_string(file).expect("read"))
                .expect("migrate");
        }
        db.execute_batch("PRAGMA user_version = 7; PRAGMA journal_mode = WAL;")
            .expect("version");
    }
    let version = || env.count("SELECT user_version FROM pragma_user_version");
    hook(&env, "SessionStart.json");
    hook(&env, "UserPromptSubmit.json");
    assert_eq!(version(), 7, "a hook upgraded the database");
    let spooled = || {
        std::fs::read_dir(env.data_dir.join("spool"))
            .map(|d| {
                d.filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file()))
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(spooled(), 2, "both events wait in the spool");
    // The next cairn command upgrades it, saying so before the wait (and says what waits
    // in the spool); the worker takes the events in.
    let status = env.run("cairn", &["status"], b"");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("spool"), "{text}");
    let said = String::from_utf8_lossy(&status.stderr);
    assert!(
        said.contains("cairn: warning: upgrading the database from schema 7"),
        "{said}"
    );
    assert!(version() > 7, "cairn status upgraded the database");
    worker_once(&env);
    assert_eq!(spooled(), 0, "the worker took the events in");
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 1);
    // Upgraded, the database takes hooks directly again.
    hook(&env, "Stop.json");
    assert_eq!(spooled(), 0);
}

#[test]
fn an_event_spooled_while_the_database_was_locked_reaches_the_queue() {
    let mut env = TestEnv::new();
    offline(&mut env);
    hook(&env, "SessionStart.json");
    hook(&env, "UserPromptSubmit.json");
    {
        let mut holder = env.db();
        let tx = holder
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("lock");
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "50");
        let out = run_with_stdin(c, hook_fixture("PostToolUse.json").as_bytes());
        assert_eq!(out.status.code(), Some(0));
        tx.rollback().expect("unlock");
    }
    let spooled = || {
        std::fs::read_dir(env.data_dir.join("spool"))
            .map(|d| {
                d.filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file()))
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(spooled(), 1);
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 0);
    hook(&env, "Stop.json");
    worker_once(&env);
    assert_eq!(spooled(), 0, "the worker ingested the spool");
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE dedupe_key = 'tool:toolu_fake_6b86e2cedc91474d9c85'"),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status <> 'done'"),
        0
    );
    // Ingesting is idempotent: a second worker run changes nothing.
    let before = env.count("SELECT count(*) FROM observations");
    worker_once(&env);
    assert_eq!(env.count("SELECT count(*) FROM observations"), before);
}
