//! The operator's commands end to end: status, queue, doctor, config, backup/restore,
//! export/import, the claude-mem import, and what every command does with bad input.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

use cairn_core::memory::{self, sessions};
use cairn_core::queue;
use cairn_core::queue::claim::{JobKind, NewJob, Policy};
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

use crate::support::{TestEnv, fixtures, hook_fixture, stderr, stdout};

fn now() -> i64 {
    cairn_core::clock::now_ms()
}

fn cairn(env: &TestEnv, args: &[&str]) -> Output {
    env.run("cairn", args, b"")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// Creates the database of `env` through the library, as hooks would.
fn create_db(env: &TestEnv) -> rusqlite::Connection {
    db::open_data_dir(&DataDir::new(&env.data_dir), OpenOptions::default()).expect("create db")
}

fn enqueue(conn: &mut rusqlite::Connection, session: &str, key: &str, max_attempts: u32) -> i64 {
    let t = now();
    db::write(conn, |tx| {
        sessions::ensure(tx, session, "proj", "/home/dev/proj", t)?;
        let e = queue::claim::enqueue(
            tx,
            &NewJob {
                session_id: session,
                project: "proj",
                kind: JobKind::Summarize,
                prompt_number: 1,
                payload: r#"{"last_assistant_message":"done: fixed the flaky test"}"#,
                dedupe_key: key,
            },
            max_attempts,
            t,
        )?;
        match e {
            queue::claim::Enqueued::Added(id) => Ok(id),
            other => Err(cairn_core::Error::Invalid(format!("{other:?}"))),
        }
    })
    .expect("enqueue")
}

/// Claims and fails every ready job once, under `queue.max_attempts` 1: they end `skipped`.
fn fail_all(conn: &mut rusqlite::Connection, error: &str) -> usize {
    let policy = Policy {
        batching: false,
        max_attempts: 1,
        ..Policy::default()
    };
    let mut n = 0;
    while let Some(batch) =
        queue::claim::claim_batch(conn, "test-worker", &policy, now()).expect("claim")
    {
        let out = queue::claim::fail(conn, &batch, error, &policy, now(), None).expect("fail");
        n += out.skipped;
    }
    n
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", stdout(o), stderr(o)))
}

/// The one-line `error: ...` contract.
fn assert_error_line(o: &Output, needle: &str) {
    assert_eq!(code(o), 2, "stdout: {}\nstderr: {}", stdout(o), stderr(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "{needle:?} not in {err}");
}

#[test]
fn a_worker_that_cannot_start_is_named_with_its_error_until_one_starts() {
    let env = TestEnv::new();
    let mut conn = create_db(&env);
    enqueue(&mut conn, "s1", "k1", 3);
    // A provider without its key: the worker stops at once, as an autostarted one does.
    let failed = env
        .cmd("cairn-worker")
        .arg("--once")
        .env("CAIRN_MODEL__PROVIDER", "anthropic")
        .output()
        .expect("run");
    assert_eq!(code(&failed), 2, "{}", stderr(&failed));
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("the worker stopped on an error at"), "{out}");
    assert!(out.contains("ANTHROPIC_API_KEY is not set"), "{out}");
    assert!(out.contains("1 job is waiting"), "{out}");
    // Not also told to start a worker that cannot start.
    assert!(!out.contains("start it with `cairn-worker`"), "{out}");
    let doctor = stdout(&cairn(&env, &["doctor"]));
    assert!(
        doctor.contains("the worker stopped on an error at")
            && doctor.contains("ANTHROPIC_API_KEY"),
        "{doctor}"
    );

    // A worker that starts, and works, ends the message.
    let worked = env
        .cmd("cairn-worker")
        .arg("--once")
        .env("CAIRN_MODEL__PROVIDER", "offline")
        .output()
        .expect("run");
    assert_eq!(code(&worked), 0, "{}", stderr(&worked));
    let out = stdout(&cairn(&env, &["status"]));
    assert!(!out.contains("stopped on an error"), "{out}");
    let doctor = stdout(&cairn(&env, &["doctor"]));
    assert!(!doctor.contains("stopped on an error"), "{doctor}");
}

#[test]
fn a_worker_on_a_data_dir_without_a_database_says_where_it_creates_one() {
    let env = TestEnv::new();
    let first = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let said = stderr(&first);
    assert!(
        said.contains("no database at ") && said.contains(&env.db_path().display().to_string()),
        "{said}"
    );
    assert!(said.contains("CAIRN_DATA_DIR"), "{said}");
    let again = env.run("cairn-worker", &["--once"], b"");
    assert!(
        !stderr(&again).contains("no database at"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn status_exit_codes_follow_what_needs_attention() {
    let env = TestEnv::new();
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("waiting for the first event"),
        "{}",
        stdout(&o)
    );
    assert!(
        !env.data_dir.exists(),
        "status must not create the data dir"
    );

    let mut conn = create_db(&env);
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("all good"), "{}", stdout(&o));

    enqueue(&mut conn, "s1", "k1", 1);
    let o = cairn(&env, &["status", "--json"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let v = json(&o);
    assert_eq!(v["queue"]["by_status"]["pending"], 1);
    assert!(
        v["attention"][0]
            .as_str()
            .expect("reason")
            .contains("worker is not running"),
        "{v}"
    );

    // A live worker (the lock held, started a moment ago) with work waiting is healthy.
    let lock = cairn_core::store::lock::WorkerLock::try_acquire(
        &DataDir::new(&env.data_dir).worker_lock(),
        now() - 1_000,
    )
    .expect("lock")
    .expect("free");
    let o = cairn(&env, &["status", "--json"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert_eq!(json(&o)["worker"]["pid"], std::process::id());

    assert_eq!(fail_all(&mut conn, "model said 500"), 1);
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 1);
    let text = stdout(&o);
    assert!(text.contains("skipped    #1 summarize"), "{text}");
    assert!(text.contains("model said 500"), "{text}");
    assert!(text.contains("cairn queue replay --all-skipped"), "{text}");

    queue::admin::replay(&mut conn, &queue::admin::Selector::AllSkipped, now()).expect("replay");
    conn.execute(
        "INSERT INTO quarantine (event, reason, raw, raw_len, created_at) VALUES ('Stop', 'not JSON', x'7b7b', 2, ?1)",
        [now()],
    )
    .expect("quarantine");
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("1 hook input was quarantined"),
        "{}",
        stdout(&o)
    );
    drop(lock);
}

#[test]
fn quarantine_lists_shows_and_clears_what_hooks_could_not_use() {
    let env = TestEnv::new();
    // What the hooks could not use: unreadable input carrying a secret, and a well-formed
    // event cairn does not capture.
    let bad = b"{\"hook_event_name\": \"PostToolUse\", \"key\": \"AKIAIOSFODNN7EXAMPLE\"";
    assert_eq!(code(&env.run("cairn-hook", &[], bad)), 0);
    let notification = hook_fixture("Notification.json");
    assert_eq!(
        code(&env.run("cairn-hook", &[], notification.as_bytes())),
        0
    );

    let o = cairn(&env, &["quarantine", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("invalid") && text.contains("uncaptured"),
        "{text}"
    );
    assert!(text.contains("Notification"), "{text}");

    let o = cairn(&env, &["quarantine", "list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = rows.as_array().expect("array");
    assert_eq!(rows.len(), 2);
    let invalid = rows
        .iter()
        .find(|r| r["kind"] == "invalid")
        .expect("invalid row");
    let id = invalid["id"].as_i64().expect("id").to_string();

    // The stored copy is shown, cleaned like everything capture stores.
    let o = cairn(&env, &["quarantine", "show", &id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("hook_event_name"), "{text}");
    assert!(!text.contains("AKIAIOSFODNN7EXAMPLE"), "{text}");
    let o = cairn(&env, &["quarantine", "show", "999999"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("cairn quarantine list"),
        "{}",
        stderr(&o)
    );

    // Unreadable input makes status ask for attention, and points here.
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("cairn quarantine list"),
        "{}",
        stdout(&o)
    );

    let o = cairn(&env, &["quarantine", "clear"]);
    assert_eq!(code(&o), 2, "clear needs to be told what");
    let o = cairn(&env, &["quarantine", "clear", "--id", &id]);
    assert_eq!(code(&o), 0);
    assert!(
        stdout(&o).contains("cleared 1 quarantined input"),
        "{}",
        stdout(&o)
    );
    let o = cairn(&env, &["status", "--json"]);
    let attention =
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("json")["attention"]
            .to_string();
    assert!(!attention.contains("quarantine"), "{attention}");

    let o = cairn(&env, &["quarantine", "clear", "--older-than", "1d"]);
    assert_eq!(code(&o), 1, "nothing that old");
    let o = cairn(&env, &["quarantine", "clear", "--all", "--json"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("\"cleared\": 1"), "{}", stdout(&o));
    let o = cairn(&env, &["quarantine", "list"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("empty"), "{}", stderr(&o));
}

#[test]
fn queue_list_shows_the_current_state_and_queue_show_the_history() {
    let env = TestEnv::new();
    let mut conn = create_db(&env);
    let id = enqueue(&mut conn, "s1", "a1", 3);
    let policy = Policy {
        batching: false,
        retry_base_ms: 0,
        ..Policy::default()
    };
    // One failed attempt, then success.
    let batch = queue::claim::claim_batch(&mut conn, "w", &policy, now())
        .expect("claim")
        .expect("ready");
    queue::claim::fail(
        &mut conn,
        &batch,
        "model API answered 500: oops",
        &policy,
        now(),
        None,
    )
    .expect("fail");
    let batch = queue::claim::claim_batch(&mut conn, "w", &policy, now() + 1_000)
        .expect("claim")
        .expect("ready again");
    queue::claim::ack(&mut conn, &batch, now(), |_| Ok(())).expect("ack");

    let o = cairn(&env, &["queue", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&id.to_string()))
        .expect("the job's line");
    assert!(line.contains("done at"), "{text}");
    assert!(
        !line.contains("oops") && !line.contains("1/3"),
        "history in the list: {text}"
    );

    let o = cairn(&env, &["queue", "show", &id.to_string()]);
    let text = stdout(&o);
    assert!(text.contains("#1 at") && text.contains("oops"), "{text}");
}

#[test]
fn replay_revives_skipped_jobs_and_says_how_many() {
    let env = TestEnv::new();
    let mut conn = create_db(&env);
    let a1 = enqueue(&mut conn, "s1", "a1", 1);
    enqueue(&mut conn, "s2", "b1", 1);
    assert_eq!(fail_all(&mut conn, "provider timed out\nafter 60s"), 2);
    let a2 = enqueue(&mut conn, "s1", "a2", 1);
    assert_eq!(fail_all(&mut conn, "provider timed out"), 1);

    let o = cairn(&env, &["queue", "list", "--status", "skipped", "--json"]);
    assert_eq!(code(&o), 0);
    assert_eq!(json(&o).as_array().expect("rows").len(), 3);
    let o = cairn(&env, &["queue", "list", "--status", "pending"]);
    assert_eq!(code(&o), 1, "no pending jobs: {}", stdout(&o));

    let o = cairn(&env, &["queue", "show", &a1.to_string()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("fixed the flaky test"),
        "payload shown: {text}"
    );
    assert!(
        text.contains("#1 at") && text.contains("provider timed out"),
        "{text}"
    );
    let o = cairn(&env, &["queue", "show", &a1.to_string(), "--json"]);
    assert_eq!(json(&o)["errors"].as_array().expect("errors").len(), 1);

    let o = cairn(&env, &["queue", "replay", "--session", "s1"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("revived 2 skipped jobs"),
        "{}",
        stdout(&o)
    );
    let pending = env
        .count("SELECT count(*) FROM pending_messages WHERE status = 'pending' AND attempts = 0");
    assert_eq!(pending, 2);

    let o = cairn(&env, &["queue", "replay", "--all-skipped", "--json"]);
    assert_eq!(json(&o)["revived"], 1);
    let o = cairn(&env, &["queue", "replay", "--all-skipped"]);
    assert_eq!(code(&o), 1, "nothing left to replay");
    assert!(stdout(&o).starts_with("revived 0 jobs"), "{}", stdout(&o));

    // Skip them again; replay by id, then by time.
    fail_all(&mut conn, "again");
    let o = cairn(&env, &["queue", "replay", "--id", &a2.to_string(), "999"]);
    assert!(
        stdout(&o).starts_with("revived 1 skipped job;"),
        "{}",
        stdout(&o)
    );
    let o = cairn(&env, &["queue", "replay", "--since", "1h"]);
    assert!(
        stdout(&o).starts_with("revived 2 skipped jobs"),
        "{}",
        stdout(&o)
    );
    fail_all(&mut conn, "again");
    let o = cairn(&env, &["queue", "replay", "--since", "2999-01-01"]);
    assert_eq!(code(&o), 1, "nothing skipped in the future");

    // Purge removes processed jobs only.
    let policy = Policy {
        batching: false,
        ..Policy::default()
    };
    queue::admin::replay(&mut conn, &queue::admin::Selector::Ids(vec![a1]), now()).expect("replay");
    let batch = queue::claim::claim_batch(&mut conn, "w", &policy, now())
        .expect("claim")
        .expect("batch");
    let long_ago = now() - 30 * 86_400_000;
    queue::claim::ack(&mut conn, &batch, long_ago, |_| Ok(())).expect("ack");
    conn.execute(
        "UPDATE pending_messages SET updated_at = ?1 WHERE status = 'done'",
        [long_ago],
    )
    .expect("age");
    let o = cairn(&env, &["queue", "purge", "--older-than", "7d"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("purged 1 processed job "),
        "{}",
        stdout(&o)
    );
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 2);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status = 'skipped'"),
        2
    );

    // Discard deletes skipped jobs once a person gives up on them, and only those.
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 1, "skipped jobs need attention");
    assert!(stdout(&o).contains("cairn queue discard"), "{}", stdout(&o));
    let o = cairn(&env, &["queue", "discard"]);
    assert_eq!(code(&o), 2, "which jobs must be said");
    let o = cairn(
        &env,
        &["queue", "discard", "--all-skipped", "--session", "s1"],
    );
    assert_eq!(code(&o), 2, "one selection at a time: {}", stderr(&o));
    let pending = enqueue(&mut conn, "s3", "c1", 1);
    let o = cairn(&env, &["queue", "discard", "--id", &pending.to_string()]);
    assert_eq!(code(&o), 1, "a pending job is not discarded");
    assert!(stdout(&o).starts_with("discarded 0 jobs"), "{}", stdout(&o));
    let o = cairn(&env, &["queue", "discard", "--session", "s1"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "discarded 1 skipped job with its failed attempts\n"
    );
    let o = cairn(&env, &["queue", "discard", "--all-skipped", "--json"]);
    assert_eq!(json(&o)["discarded"], 1);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status = 'skipped'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_errors"),
        0,
        "the failed attempts went with their jobs"
    );
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 1);
    let o = cairn(&env, &["status"]);
    assert!(
        !stdout(&o).contains("skipped after failing"),
        "{}",
        stdout(&o)
    );
}

/// A JSONL export with one session and `n` observations, written through the export format.
fn writer_file(dir: &Path, i: usize, n: usize) -> PathBuf {
    let path = dir.join(format!("writer-{i}.jsonl"));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    let sid = format!("writer-{i}");
    writeln!(
        f,
        "{}",
        serde_json::json!({"record": "session", "session_id": sid, "project": "load",
            "status": "ended", "started_at": 1, "updated_at": 1})
    )
    .expect("write");
    for k in 0..n {
        let o = memory::observations::NewObservation {
            session_id: Some(sid.clone()),
            project: "load".into(),
            prompt_number: Some(1),
            kind: "discovery".into(),
            origin: "import".into(),
            created_at: k as i64,
            content: cairn_core::memory::rows::ObservationContent {
                title: format!("writer {i} observation {k}"),
                narrative: "x".repeat(200),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut v = serde_json::to_value(&o).expect("json");
        v["record"] = "observation".into();
        writeln!(f, "{v}").expect("write");
    }
    f.flush().expect("flush");
    path
}

fn observations_by_session(path: &Path) -> Vec<(String, i64)> {
    let c = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open");
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity");
    assert_eq!(ok, "ok", "{}", path.display());
    c.prepare(
        "SELECT s.session_id, (SELECT count(*) FROM observations o WHERE o.session_id = s.session_id)
         FROM sessions s ORDER BY s.session_id",
    )
    .expect("prepare")
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
    .expect("query")
    .collect::<rusqlite::Result<_>>()
    .expect("rows")
}

fn titles(path: &Path) -> Vec<String> {
    let c = rusqlite::Connection::open(path).expect("open");
    c.prepare("SELECT title FROM observations ORDER BY title")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows")
}

#[test]
fn backup_is_consistent_while_eight_writers_run_and_restores() {
    const WRITERS: usize = 8;
    // Imports commit 500 records per transaction: the session plus 499 observations, then
    // 500 at a time. A consistent snapshot holds whole transactions only.
    const PER_WRITER: usize = 1499;
    let env = TestEnv::new();
    drop(create_db(&env));
    let files: Vec<PathBuf> = (0..WRITERS)
        .map(|i| writer_file(env.tmp.path(), i, PER_WRITER))
        .collect();
    let mut writers: Vec<Child> = files
        .iter()
        .map(|f| {
            env.cmd("cairn")
                .args(["import", "jsonl"])
                .arg(f)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn writer")
        })
        .collect();
    let mut backups = Vec::new();
    loop {
        let dest = env.tmp.path().join(format!("backup-{}.db", backups.len()));
        let o = cairn(
            &env,
            &["backup", "--to", dest.to_str().expect("utf8"), "--json"],
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert_eq!(json(&o)["path"], dest.to_str().expect("utf8"));
        backups.push(dest);
        let mut running = 0;
        for w in &mut writers {
            if w.try_wait().expect("try_wait").is_none() {
                running += 1;
            }
        }
        if running == 0 || backups.len() >= 20 {
            break;
        }
    }
    for w in writers {
        let out = w.wait_with_output().expect("wait");
        assert!(out.status.success(), "writer failed: {}", stderr(&out));
    }
    let allowed = [499, 999, 1499];
    for b in &backups {
        for (session, n) in observations_by_session(b) {
            assert!(
                allowed.contains(&n),
                "{}: {session} has {n} observations, not whole transactions",
                b.display()
            );
        }
    }
    let live = observations_by_session(&env.db_path());
    assert_eq!(live.len(), WRITERS);
    assert!(
        live.iter().all(|(_, n)| *n == PER_WRITER as i64),
        "{live:?}"
    );
    let final_titles = titles(&env.db_path());

    // Restore is refused while a worker runs, and changes nothing.
    let first = backups[0].to_str().expect("utf8").to_string();
    let lock = cairn_core::store::lock::WorkerLock::try_acquire(
        &DataDir::new(&env.data_dir).worker_lock(),
        now(),
    )
    .expect("lock")
    .expect("free");
    let o = cairn(&env, &["restore", &first]);
    assert_error_line(&o, "stop it first");
    assert_eq!(titles(&env.db_path()), final_titles);
    drop(lock);

    let o = cairn(&env, &["restore", &first, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let kept = PathBuf::from(
        json(&o)["replaced_kept_at"]
            .as_str()
            .expect("kept path")
            .to_string(),
    );
    assert_eq!(titles(&env.db_path()), titles(&backups[0]));
    assert_eq!(titles(&kept), final_titles);
    let o = cairn(&env, &["doctor", "--json"]);
    let findings = json(&o);
    let integrity = findings
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["check"] == "integrity")
        .expect("integrity finding");
    assert_eq!(integrity["level"], "ok", "{findings}");
}

fn without_header(export: &str) -> Vec<String> {
    export
        .lines()
        .filter(|l| !l.contains(r#""record":"header""#))
        .map(str::to_string)
        .collect()
}

#[test]
fn export_then_import_round_trips_without_loss_or_duplicates() {
    let a = TestEnv::new();
    let fixture = fixtures().join("claude-mem/claude-mem-13.25.3.sample.db");
    let o = cairn(
        &a,
        &["import", "claude-mem", fixture.to_str().expect("utf8")],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut conn = create_db(&a);
    db::write(&mut conn, |tx| {
        memory::observations::insert_observation(
            tx,
            &memory::observations::NewObservation {
                session_id: None,
                project: "other".into(),
                kind: "decision".into(),
                origin: "manual".into(),
                created_at: 5,
                content: cairn_core::memory::rows::ObservationContent {
                    title: "Keep backups for a week".into(),
                    facts: vec!["backup.keep = 7".into()],
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        Ok(())
    })
    .expect("manual memory");

    let file = a.tmp.path().join("all.jsonl");
    let o = cairn(&a, &["export", "--output", file.to_str().expect("utf8")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("151 observations"), "{}", stderr(&o));
    assert_eq!(cairn_core::store::paths::mode_of(&file), Some(0o600));
    let exported = std::fs::read_to_string(&file).expect("read");
    let o = cairn(&a, &["export", "--output", file.to_str().expect("utf8")]);
    assert_eq!(code(&o), 2, "never overwrites an existing file");

    let b = TestEnv::new();
    let o = b.run(
        "cairn",
        &["import", "jsonl", "--json", file.to_str().expect("utf8")],
        b"",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let report = json(&o);
    assert_eq!(report["added"]["observations"], 151);
    assert_eq!(report["added"]["summaries"], 3);
    assert_eq!(report["added"]["prompts"], 10);
    assert_eq!(report["added"]["sessions"], 4);
    let o = cairn(&b, &["export"]);
    assert_eq!(without_header(&stdout(&o)), without_header(&exported));

    // Again, from stdin: nothing new.
    let o = b.run(
        "cairn",
        &["import", "jsonl", "-", "--json"],
        exported.as_bytes(),
    );
    let report = json(&o);
    assert_eq!(report["added"]["observations"], 0, "{report}");
    assert_eq!(report["existing"]["observations"], 151, "{report}");
    assert_eq!(b.count("SELECT count(*) FROM observations"), 151);

    let o = cairn(
        &b,
        &["export", "--project", "other", "--format", "markdown"],
    );
    assert_eq!(code(&o), 0);
    let md = stdout(&o);
    assert!(md.contains("## Project other"), "{md}");
    assert!(
        md.contains("**[decision] Keep backups for a week**"),
        "{md}"
    );
    assert!(!md.contains("## Project demo"), "{md}");
    let o = cairn(&b, &["export", "--project", "nope"]);
    assert_eq!(code(&o), 1, "nothing for that project");
}

#[test]
fn claude_mem_import_twice_adds_nothing_the_second_time() {
    let env = TestEnv::new();
    let fixture = fixtures().join("claude-mem/claude-mem-13.25.3.sample.db");
    let before = std::fs::read(&fixture).expect("fixture");
    let same_as_before = |now: Vec<u8>| now == before;
    // The default path is ~/.claude-mem/claude-mem.db.
    let home_copy = env.tmp.path().join(".claude-mem/claude-mem.db");
    std::fs::create_dir_all(home_copy.parent().expect("parent")).expect("dir");
    std::fs::copy(&fixture, &home_copy).expect("copy");

    let o = cairn(&env, &["import", "claude-mem"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("added          4 sessions, 10 prompts, 150 observations, 3 summaries"),
        "{text}"
    );
    assert!(
        text.contains("not imported   observations: discovery_tokens"),
        "{text}"
    );

    let o = cairn(
        &env,
        &[
            "import",
            "claude-mem",
            fixture.to_str().expect("utf8"),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let report = json(&o);
    for kind in ["sessions", "prompts", "observations", "summaries"] {
        assert_eq!(report["added"][kind], 0, "{kind}: {report}");
    }
    assert_eq!(report["existing"]["observations"], 150);
    assert_eq!(env.count("SELECT count(*) FROM observations"), 150);
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 3);
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 10);
    assert_eq!(env.count("SELECT count(*) FROM sessions"), 4);
    assert_eq!(
        env.count("SELECT count(*) FROM observations WHERE origin = 'import' AND session_id IN (SELECT session_id FROM sessions)"),
        150
    );
    assert!(
        same_as_before(std::fs::read(&fixture).expect("fixture")),
        "source untouched"
    );

    let o = cairn(&env, &["import", "claude-mem", "/no/such/claude-mem.db"]);
    assert_error_line(&o, "no claude-mem database at /no/such/claude-mem.db");
}

#[test]
fn config_shows_each_value_and_its_source() {
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.data_dir).expect("dir");
    std::fs::write(
        env.data_dir.join("settings.json"),
        r#"{ "backup": { "keep": 3 } }"#,
    )
    .expect("settings");
    let o = env
        .cmd("cairn")
        .args(["config", "--json"])
        .env("CAIRN_BATCH__MAX_SIZE", "7")
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    let find = |key: &str| {
        v["settings"]
            .as_array()
            .expect("settings")
            .iter()
            .find(|s| s["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key}"))
    };
    assert_eq!(find("batch.max_size")["value"], 7);
    assert_eq!(
        find("batch.max_size")["source"],
        "env CAIRN_BATCH__MAX_SIZE"
    );
    assert_eq!(find("backup.keep")["value"], 3);
    assert!(
        find("backup.keep")["source"]
            .as_str()
            .expect("source")
            .ends_with("settings.json")
    );
    assert_eq!(find("queue.max_attempts")["source"], "default");
    let o = cairn(&env, &["config"]);
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.starts_with("backup.keep") && l.contains(" 3 ")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn config_set_and_unset_change_settings_json_as_loading_checks_it() {
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.data_dir).expect("dir");
    let file = env.data_dir.join("settings.json");
    std::fs::write(&file, r#"{ "backup": { "keep": 3 }, "mine": { "x": 1 } }"#).expect("settings");
    let effective = |env: &TestEnv, key: &str, var: Option<(&str, &str)>| {
        let mut c = env.cmd("cairn");
        c.args(["config", "--json"]);
        if let Some((k, v)) = var {
            c.env(k, v);
        }
        let o = c.output().expect("run");
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        json(&o)["settings"]
            .as_array()
            .expect("settings")
            .iter()
            .find(|s| s["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key}"))
    };

    let o = cairn(&env, &["config", "set", "context.budget_tokens", "900"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("context.budget_tokens = 900"),
        "{}",
        stdout(&o)
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert_eq!(written["context"]["budget_tokens"], 900);
    assert_eq!(written["backup"]["keep"], 3, "other keys kept");
    assert_eq!(written["mine"]["x"], 1, "unknown keys kept");
    assert_eq!(effective(&env, "context.budget_tokens", None)["value"], 900);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // A list set over its default says what of the default it leaves out.
    let o = cairn(
        &env,
        &["config", "set", "capture.skip_tools", "TodoWrite,Read"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let said = stdout(&o);
    let note = said
        .lines()
        .find(|l| l.starts_with("note: this replaces the default list; no longer in it: "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        note.contains("\"ExitPlanMode\"") && !note.contains("TodoWrite"),
        "{said}"
    );
    let o = cairn(&env, &["config", "unset", "capture.skip_tools"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // Refused: an unknown key, a value of the wrong type, one out of range. Nothing written.
    let before = std::fs::read(&file).expect("read");
    for (args, needle) in [
        (
            ["config", "set", "context.budget", "9"],
            "context.budget_tokens",
        ),
        (
            ["config", "set", "context.budget_tokens", "lots"],
            "non-negative integer",
        ),
        (
            ["config", "set", "recall.min_relevance", "1.5"],
            "recall.min_relevance: must be between 0 and 1",
        ),
        (["config", "set", "log.level", "loud"], "log.level"),
    ] {
        let o = cairn(&env, &args);
        // Its one error line follows the warning about the unknown `mine`.
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        let err = stderr(&o);
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert!(last.starts_with("error: "), "{err}");
        assert!(last.contains(needle), "{needle:?} not in {err}");
        assert!(last.ends_with("nothing was written"), "{err}");
        assert_eq!(std::fs::read(&file).expect("read"), before, "{args:?}");
    }

    // An environment variable still wins, and both commands say so.
    let o = env
        .cmd("cairn")
        .args(["config", "set", "context.max_sessions", "4"])
        .env("CAIRN_CONTEXT__MAX_SESSIONS", "2")
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("CAIRN_CONTEXT__MAX_SESSIONS is set in the environment"),
        "{}",
        stdout(&o)
    );
    let shown = effective(
        &env,
        "context.max_sessions",
        Some(("CAIRN_CONTEXT__MAX_SESSIONS", "2")),
    );
    assert_eq!(shown["value"], 2);
    assert_eq!(shown["source"], "env CAIRN_CONTEXT__MAX_SESSIONS");
    assert_eq!(effective(&env, "context.max_sessions", None)["value"], 4);

    // Unset: back to the default, the other keys still there.
    let o = cairn(&env, &["config", "unset", "context.budget_tokens"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("back to its default, 1500"),
        "{}",
        stdout(&o)
    );
    let shown = effective(&env, "context.budget_tokens", None);
    assert_eq!(shown["value"], 1500);
    assert_eq!(shown["source"], "default");
    // An empty default says what it stands for: the model's folder in the data dir.
    let o = cairn(&env, &["config", "set", "embed.model_dir", "/elsewhere"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cairn(&env, &["config", "unset", "embed.model_dir"]);
    let models = env.data_dir.join("models").join("all-MiniLM-L6-v2");
    assert!(
        stdout(&o).contains(&format!("back to its default, \"\" ({})", models.display())),
        "{}",
        stdout(&o)
    );
    let o = cairn(&env, &["config"]);
    assert!(
        stdout(&o).contains(&format!("\"\" ({})", models.display())),
        "{}",
        stdout(&o)
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert!(
        written["context"].get("budget_tokens").is_none(),
        "{written}"
    );
    assert_eq!(written["backup"]["keep"], 3);

    // A file that no longer loads is put right by setting the bad key.
    std::fs::write(&file, r#"{ "batch": { "max_size": 0 } }"#).expect("settings");
    assert_error_line(&cairn(&env, &["config"]), "batch.max_size");
    let o = cairn(&env, &["config", "set", "batch.max_size", "5"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(effective(&env, "batch.max_size", None)["value"], 5);

    let o = cairn(&env, &["config", "set", "--help"]);
    assert_eq!(code(&o), 0);
    assert!(
        stdout(&o).contains("parsed for the key's type"),
        "{}",
        stdout(&o)
    );
}

/// A one-request HTTP server answering `status` with `body`; returns its base URL.
fn fake_model(status: u16, body: &'static str) -> (String, std::thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut head = String::new();
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("read");
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().expect("length");
            }
            head.push_str(&line);
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        let mut body_in = vec![0u8; len];
        reader.read_exact(&mut body_in).expect("body");
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("respond");
        head + &String::from_utf8_lossy(&body_in)
    });
    (url, handle)
}

#[test]
fn doctor_reports_findings_and_tests_the_provider_online() {
    let env = TestEnv::new();
    drop(create_db(&env));
    // Nothing installed: nothing is captured, a failure.
    let o = cairn(&env, &["doctor"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("ok    integrity"), "{text}");
    assert!(text.contains("fail  hooks"), "{text}");
    assert!(text.contains("→ run `cairn install`"), "{text}");
    let o = cairn(&env, &["install"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cairn(&env, &["doctor"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));

    let (url, server) = fake_model(200, r#"{"choices":[{"message":{"content":"ok"}}]}"#);
    let o = env
        .cmd("cairn")
        .args(["doctor", "--online", "--json"])
        .env("CAIRN_MODEL__PROVIDER", "openai")
        .env("CAIRN_MODEL__BASE_URL", &url)
        .env("CAIRN_MODEL__MODEL", "tiny")
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let request = server.join().expect("server");
    assert!(
        request.starts_with("POST /v1/chat/completions"),
        "{request}"
    );
    assert!(request.contains(r#""model":"tiny""#), "{request}");
    let findings = json(&o);
    let online = findings
        .as_array()
        .expect("list")
        .iter()
        .find(|f| f["check"] == "online")
        .expect("online finding");
    assert_eq!(online["level"], "ok", "{findings}");

    let (url, server) = fake_model(401, r#"{"error":"bad key"}"#);
    let o = env
        .cmd("cairn")
        .args(["doctor", "--online"])
        .env("CAIRN_MODEL__PROVIDER", "openai")
        .env("CAIRN_MODEL__BASE_URL", &url)
        .env("CAIRN_MODEL__MODEL", "tiny")
        .output()
        .expect("run");
    server.join().expect("server");
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("answered 401"), "{}", stdout(&o));

    let (url, server) = fake_model(200, r#"{"content":[{"type":"text","text":"ok"}]}"#);
    let o = env
        .cmd("cairn")
        .args(["doctor", "--online"])
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", url.trim_end_matches("/v1"))
        .output()
        .expect("run");
    let request = server.join().expect("server");
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(request.starts_with("POST /v1/messages"), "{request}");
    assert!(
        request.to_ascii_lowercase().contains("x-api-key: test-key"),
        "{request}"
    );
    assert!(
        stdout(&o).contains("provider anthropic (ANTHROPIC_API_KEY is set)"),
        "{}",
        stdout(&o)
    );

    let o = env
        .cmd("cairn")
        .args(["doctor"])
        .env("CAIRN_MODEL__PROVIDER", "anthropic")
        .output()
        .expect("run");
    assert_eq!(code(&o), 1, "no key: {}", stdout(&o));
    assert!(
        stdout(&o).contains("ANTHROPIC_API_KEY is not set"),
        "{}",
        stdout(&o)
    );
}

/// `cairn doctor` fails when nothing hands Claude Code's events to cairn (here a settings
/// file Claude Code cannot read), saying how to fix it; and it checks that Claude Code
/// finds cairn's MCP server.
#[test]
fn doctor_fails_when_nothing_captures_and_checks_the_mcp_server() {
    let env = TestEnv::new();
    let line = |text: &str, level: &str, check: &str| {
        text.lines()
            .find(|l| l.split_whitespace().take(2).eq([level, check]))
            .map(str::to_string)
    };
    let out = cairn(&env, &["install", "--no-mcp"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let o = cairn(&env, &["doctor"]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(
        line(&text, "warn", "mcp").is_some_and(|l| l.contains("not registered")),
        "{text}"
    );
    let out = cairn(&env, &["install"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let o = cairn(&env, &["doctor"]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(
        line(&text, "ok", "mcp").is_some_and(|l| l.contains(".claude.json (user scope)")),
        "{text}"
    );

    let settings = env.tmp.path().join(".claude/settings.json");
    std::fs::write(&settings, r#"{ "hooks": { "Stop": [ }"#).expect("write");
    let o = cairn(&env, &["doctor"]);
    let text = stdout(&o);
    assert_eq!(code(&o), 1, "{text}{}", stderr(&o));
    let failed = line(&text, "fail", "hooks").unwrap_or_else(|| panic!("{text}"));
    assert!(failed.contains("nothing is captured"), "{text}");
    assert!(
        text.contains(&format!(
            "→ fix {} (not valid JSON) if cairn's hooks are there; else run `cairn install`",
            settings.display()
        )),
        "{text}"
    );

    // A project's own install counts from anywhere inside the project.
    let project = env.tmp.path().join("proj");
    std::fs::create_dir_all(project.join("sub")).expect("dirs");
    let out = cairn(
        &env,
        &["install", "--project", project.to_str().expect("utf-8")],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut c = env.cmd("cairn");
    c.current_dir(project.join("sub")).arg("doctor");
    let text = stdout(&c.output().expect("doctor"));
    assert!(line(&text, "fail", "hooks").is_none(), "{text}");
}

/// A settings file cairn cannot read is a failed check of `cairn doctor`, beside every
/// other check (run on the default settings), not an error that stops it.
#[test]
fn doctor_reports_a_broken_settings_file_and_checks_the_rest() {
    let env = TestEnv::new();
    let out = cairn(&env, &["install"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::write(
        env.data_dir.join("settings.json"),
        r#"{"batch": {"max_size": 5,}}"#,
    )
    .expect("write");
    let o = cairn(&env, &["doctor"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    let check = |l: &str, name: &str| l.split_whitespace().nth(1) == Some(name);
    let settings: Vec<&str> = text.lines().filter(|l| check(l, "settings")).collect();
    assert!(
        settings.len() == 1
            && settings[0].starts_with("fail")
            && settings[0].contains("line 1, column 26: trailing comma"),
        "{text}"
    );
    for check in ["integrity", "permissions", "hooks", "provider", "disk"] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(check)),
            "no {check} check: {text}"
        );
    }
    assert!(!stderr(&o).contains("error:"), "{}", stderr(&o));
    let o = cairn(&env, &["doctor", "--json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        json(&o)
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["check"] == "settings" && f["level"] == "fail"),
        "{}",
        stdout(&o)
    );
}

/// Commands that read or change an existing database.
/// (`cairn status` is not among them: no database yet is "waiting for the first event".)
const DB_COMMANDS: &[&[&str]] = &[
    &["queue", "list"],
    &["queue", "show", "1"],
    &["queue", "replay", "--all-skipped"],
    &["queue", "purge", "--older-than", "1d"],
    &["backup"],
    &["export"],
    &["doctor"],
];

/// Every entry of a directory with its length and a hash of its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, usize, u64)> {
    use std::hash::{Hash, Hasher};
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let bytes = if p.is_file() {
                std::fs::read(&p).expect("read")
            } else {
                Vec::new()
            };
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            out.push((p, bytes.len(), h.finish()));
        }
    }
    out.sort();
    out
}

#[test]
fn every_command_on_bad_input_is_one_error_line_and_changes_nothing() {
    // A missing data dir.
    let env = TestEnv::new();
    for args in DB_COMMANDS {
        let o = cairn(&env, args);
        assert_error_line(&o, "no cairn database");
        assert!(!env.data_dir.exists(), "{args:?} created the data dir");
    }

    // Commands that fill a database, with good input.
    let fixture = fixtures().join("claude-mem/claude-mem-13.25.3.sample.db");
    let fixture = fixture.to_str().expect("utf8").to_string();
    let jsonl = env.tmp.path().join("one.jsonl");
    std::fs::write(
        &jsonl,
        r#"{"record":"session","session_id":"s","project":"p","status":"active","started_at":1,"updated_at":1}"#,
    )
    .expect("jsonl");
    let jsonl = jsonl.to_str().expect("utf8").to_string();
    let fill: Vec<Vec<&str>> = vec![
        vec!["import", "jsonl", &jsonl],
        vec!["import", "claude-mem", &fixture],
    ];

    // A corrupt database.
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.data_dir).expect("dir");
    std::fs::write(env.db_path(), vec![b'#'; 16_384]).expect("garbage");
    let before = snapshot(&env.data_dir);
    for args in DB_COMMANDS
        .iter()
        .copied()
        .chain(fill.iter().map(Vec::as_slice))
    {
        let o = cairn(&env, args);
        assert_error_line(&o, "not a usable cairn database");
        assert_eq!(
            snapshot(&env.data_dir),
            before,
            "{args:?} changed the data dir"
        );
    }
    let backup = env.tmp.path().join("b.db");
    std::fs::write(&backup, vec![b'#'; 4096]).expect("bad backup");
    let o = cairn(&env, &["restore", backup.to_str().expect("utf8")]);
    assert_error_line(&o, "nothing was changed: pick another backup");
    assert_eq!(snapshot(&env.data_dir), before);
    // A sound backup repairs it, and the damaged file is kept.
    let other = TestEnv::new();
    drop(create_db(&other));
    let good = other.tmp.path().join("good.db");
    let o = cairn(&other, &["backup", "--to", good.to_str().expect("utf8")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cairn(&env, &["restore", good.to_str().expect("utf8")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("is kept at"), "{}", stdout(&o));
    assert_eq!(code(&cairn(&env, &["status"])), 0);

    // A database from a newer cairn.
    let env = TestEnv::new();
    let conn = create_db(&env);
    conn.execute_batch("PRAGMA user_version = 99; UPDATE schema_version SET version = 99")
        .expect("bump");
    drop(conn);
    let before = snapshot(&env.data_dir);
    for args in DB_COMMANDS
        .iter()
        .copied()
        .chain(fill.iter().map(Vec::as_slice))
    {
        let o = cairn(&env, args);
        assert_error_line(&o, "upgrade cairn");
        assert_eq!(
            snapshot(&env.data_dir),
            before,
            "{args:?} changed the data dir"
        );
    }

    // A database another process holds: writers are refused and nothing changes.
    let env = TestEnv::new();
    let mut conn = create_db(&env);
    enqueue(&mut conn, "s", "k", 1);
    fail_all(&mut conn, "boom");
    let holder = env.db();
    holder
        .execute_batch("BEGIN IMMEDIATE; UPDATE sessions SET cwd = cwd;")
        .expect("hold the write lock");
    for args in [
        &["queue", "replay", "--all-skipped"][..],
        &["queue", "purge", "--older-than", "0s"][..],
    ] {
        let o = cairn(&env, args);
        assert_error_line(&o, "locked by another process");
    }
    // Readers still work while a writer holds the lock (WAL).
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    holder.execute_batch("ROLLBACK").expect("release");
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status = 'skipped'"),
        1
    );

    // Wrong arguments.
    let env = TestEnv::new();
    for args in [
        &["queue", "replay"][..],
        &["queue", "list", "--status", "lost"][..],
        &["queue", "purge", "--older-than", "soon"][..],
        &["queue", "replay", "--since", "tomorrow-ish"][..],
        &["queue", "show", "one"][..],
        &["export", "--format", "pdf"][..],
        &["restore"][..],
        &["no-such-command"][..],
    ] {
        let o = cairn(&env, args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).starts_with("error: "),
            "{args:?}: {}",
            stderr(&o)
        );
        assert!(!env.data_dir.exists());
    }
    let bad = env.tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"record\":\"session\"}\n").expect("bad file");
    let o = cairn(&env, &["import", "jsonl", bad.to_str().expect("utf8")]);
    assert_error_line(&o, "line 1");
    assert!(!env.data_dir.exists(), "a bad import file creates nothing");
}

/// The commands between backticks in `text` that start with `cairn `.
fn advised_commands(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with("cairn "))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_status_advises_works_as_printed() {
    let env = TestEnv::new();
    let mut conn = create_db(&env);
    enqueue(&mut conn, "s1", "k1", 1);
    enqueue(&mut conn, "s1", "k2", 1);
    assert_eq!(fail_all(&mut conn, "model said 500"), 2);
    conn.execute(
        "INSERT INTO quarantine (event, reason, raw, raw_len, created_at) VALUES ('Stop', 'not JSON', x'7b7b', 2, ?1)",
        [now()],
    )
    .expect("quarantine");
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 1);
    let advice = advised_commands(&stdout(&o));
    assert!(
        advice
            .iter()
            .any(|c| c.starts_with("cairn queue discard --id ")),
        "{advice:?}"
    );
    assert!(
        advice.contains(&"cairn quarantine clear --all".to_string()),
        "{advice:?}"
    );
    // Each one, run exactly as printed, does its job (the discard before the replay, which
    // would leave it nothing to do).
    let mut advice = advice;
    advice.sort_by_key(|c| c.contains("replay"));
    // `cairn embed --fetch` downloads from the model's public host, which a test cannot
    // reach; it is run as printed against a server on 127.0.0.1 in `embed`.
    assert!(
        advice.contains(&"cairn embed --fetch".to_string()),
        "{advice:?}"
    );
    advice.retain(|c| c != "cairn embed --fetch");
    for command in &advice {
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        let o = cairn(&env, &args);
        // 1 is an answer (the replay after the discard finds nothing left), 2 an error.
        assert_ne!(code(&o), 2, "`{command}`: {}{}", stdout(&o), stderr(&o));
    }
    let o = cairn(&env, &["status"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn an_import_source_that_is_not_claude_mem_is_said_about_the_source() {
    let env = TestEnv::new();
    let source = env.tmp.path().join("some.jsonl");
    std::fs::write(&source, "{\"kind\":\"observation\"}\n").expect("write");
    let src = source.to_string_lossy().to_string();
    let o = cairn(&env, &["import", "claude-mem", &src]);
    assert_error_line(&o, "is not a claude-mem database");
    let err = stderr(&o);
    assert!(err.contains(&src), "{err}");
    assert!(err.contains(&format!("cairn import jsonl {src}")), "{err}");
    assert!(!err.contains("restore"), "{err}");
    assert!(!env.data_dir.exists(), "nothing created");
}

#[test]
fn queue_list_fits_an_80_column_terminal() {
    let env = TestEnv::new();
    let mut conn = create_db(&env);
    enqueue(&mut conn, "4268b601-cbcd-45ac-b3f1-4f61c888c668", "k1", 1);
    enqueue(&mut conn, "4268b601-cbcd-45ac-b3f1-4f61c888c668", "k2", 1);
    fail_all(
        &mut conn,
        "model said 500: the upstream provider is overloaded, try again later (request id req_011CVxyz)",
    );
    let (screen, code) = crate::support::run_on_tty(&env.cmd_with(&["queue", "list"]), 80);
    assert_eq!(code, Some(0), "{screen}");
    for line in screen.lines() {
        assert!(line.chars().count() <= 80, "{line}\n{screen}");
    }
    assert!(screen.contains("model said 500"), "{screen}");
    // A pipe gets the rows whole.
    let piped = stdout(&cairn(&env, &["queue", "list"]));
    assert!(
        piped.contains("4268b601-cbcd-45ac-b3f1-4f61c888c668"),
        "{piped}"
    );
    assert!(piped.contains("(request id req_011CVxyz)"), "{piped}");
}

/// Runs a binary under `umask 000`, through `sh`.
fn under_umask_000(env: &TestEnv, name: &str, args: &[&str], stdin: &[u8]) -> std::process::Output {
    under_umask(env, "000", env.cmd(name), args, stdin)
}

/// Runs a prepared command under `umask <mask>`, through `sh`.
fn under_umask(
    env: &TestEnv,
    mask: &str,
    c: std::process::Command,
    args: &[&str],
    stdin: &[u8],
) -> std::process::Output {
    let _ = env;
    let program = c.get_program().to_os_string();
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(format!("umask {mask} && exec \"$@\""))
        .arg("sh")
        .arg(program)
        .args(c.get_args())
        .args(args);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    crate::support::run_with_stdin(sh, stdin)
}

#[test]
fn every_file_cairn_creates_is_private_even_under_umask_000() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let tool = crate::support::hook_fixture("PostToolUse.json");
    let out = under_umask_000(&env, "cairn-hook", &[], tool.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let elsewhere = env.tmp.path().join("out");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    let to = elsewhere.join("b.db");
    let export = elsewhere.join("e.jsonl");
    for args in [
        vec!["backup"],
        vec!["backup", "--to", to.to_str().expect("utf-8")],
        vec!["export", "-o", export.to_str().expect("utf-8")],
        vec!["install"],
        vec!["install"],
    ] {
        let out = under_umask_000(&env, "cairn", &args, b"");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            crate::support::stderr(&out)
        );
    }
    let mut files = Vec::new();
    let mut stack = vec![
        env.data_dir.clone(),
        elsewhere,
        env.tmp.path().join(".claude"),
    ];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    for want in ["cairn.db", ".log", "b.db", "e.jsonl", "cairn-manual-"] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "no {want} in {names:?}"
        );
    }
    for f in &files {
        let mode = std::fs::metadata(f).expect("meta").permissions().mode() & 0o777;
        // Claude Code's own settings file keeps the mode it had; its backups are cairn's.
        if f.ends_with(".claude/settings.json") {
            continue;
        }
        assert_eq!(mode, 0o600, "{} is {mode:o}", f.display());
    }
}

/// Every directory and file under `root`, recursively.
fn tree(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut dirs, mut files) = (vec![root.to_path_buf()], Vec::new());
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p.clone());
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    (dirs, files)
}

/// Polls `cond` every 20 ms until it holds or `secs` pass; returns whether it held.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cond()
}

/// From `cairn install` in a fresh HOME on, whatever the umask: the data dir and every
/// directory in it are 0700, every file 0600 (the database and its WAL, the install
/// backups, the worker's autostart marker, logs), and `cairn doctor` finds nothing loose.
#[test]
fn the_data_dir_is_owner_only_from_install_on_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    for mask in ["000", "022"] {
        let env = TestEnv::new();
        let claude = env.tmp.path().join(".claude");
        std::fs::create_dir_all(&claude).expect("dir");
        std::fs::write(claude.join("settings.json"), "{\"model\":\"opus\"}\n").expect("settings");
        let out = under_umask(&env, mask, env.cmd("cairn"), &["install"], b"");
        assert_eq!(out.status.code(), Some(0), "{mask}: {}", stderr(&out));
        for name in [
            "SessionStart.json",
            "UserPromptSubmit.json",
            "PostToolUse.json",
        ] {
            let c = {
                let mut c = env.cmd("cairn-hook");
                c.env("CAIRN_WORKER__AUTOSTART", "true")
                    .env("CAIRN_WORKER__IDLE_EXIT_SECS", "1");
                c
            };
            let out = under_umask(&env, mask, c, &[], hook_fixture(name).as_bytes());
            assert_eq!(out.status.code(), Some(0), "{mask} {name}");
        }
        let marker = env.data_dir.join("worker.autostart");
        assert!(marker.exists(), "{mask}: a hook started the worker");
        let lock = env.data_dir.join("worker.lock");
        assert!(
            wait_for(60, || cairn_core::store::lock::holder(&lock)
                .ok()
                .flatten()
                .is_none()
                && lock.exists()),
            "{mask}: the autostarted worker went idle and exited"
        );
        for args in [vec!["status"], vec!["backup"], vec!["doctor"]] {
            let out = under_umask(&env, mask, env.cmd("cairn"), &args, b"");
            assert!(
                out.status.code().is_some_and(|c| c < 2),
                "{mask} {args:?}: {}",
                stderr(&out)
            );
            if args == ["doctor"] {
                assert!(
                    stdout(&out)
                        .lines()
                        .filter(|l| l.contains(" permissions "))
                        .all(|l| l.starts_with("ok ")),
                    "{}",
                    stdout(&out)
                );
            }
        }
        let (dirs, files) = tree(&env.data_dir);
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        for want in ["cairn.db", "install-backups/", "worker.autostart", ".log"] {
            assert!(
                names.iter().any(|n| n.contains(want)),
                "{mask}: no {want} in {names:?}"
            );
        }
        for d in &dirs {
            let mode = std::fs::metadata(d).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{mask}: {} is {mode:o}", d.display());
        }
        for f in &files {
            let mode = std::fs::metadata(f).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{mask}: {} is {mode:o}", f.display());
        }
    }
}

/// Right after `cairn install` nothing has happened yet, and that is no fault: the
/// database is there, `cairn status` says it waits for the first event and exits 0, and
/// `cairn doctor` can check it. Before any install too, `cairn status` is no failure.
#[test]
fn status_and_doctor_work_on_an_installed_cairn_before_its_first_event() {
    let env = TestEnv::new();
    let out = cairn(&env, &["status"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("waiting for the first event"),
        "{}",
        stdout(&out)
    );
    assert!(!env.db_path().exists(), "status creates nothing");
    let out = cairn(&env, &["status", "--json"]);
    assert_eq!(json(&out)["waiting_for_first_event"], true);

    let out = cairn(&env, &["install"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(env.db_path().exists(), "install creates the database");
    let out = cairn(&env, &["status"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("waiting for the first event"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("all good"), "{}", stdout(&out));
    let out = cairn(&env, &["doctor"]);
    assert!(code(&out) < 2, "{}{}", stdout(&out), stderr(&out));
    assert!(
        !stdout(&out).contains("no cairn database"),
        "{}",
        stdout(&out)
    );
    // The first event ends the waiting.
    let out = env.run(
        "cairn-hook",
        &[],
        hook_fixture("SessionStart.json").as_bytes(),
    );
    assert_eq!(code(&out), 0);
    let out = cairn(&env, &["status"]);
    assert!(
        !stdout(&out).contains("waiting for the first event"),
        "{}",
        stdout(&out)
    );
}

/// `tool_use_id` made unique, so that each PostToolUse is a new job.
fn tool_payload(i: usize) -> String {
    hook_fixture("PostToolUse.json").replace(
        "toolu_fake_6b86e2cedc91474d9c85",
        &format!("toolu_lone_{i:08}"),
    )
}

/// Hooks with no other connection ever open (the worker stopped): the WAL stays bounded
/// instead of growing with every event, and every event is kept.
#[test]
fn lone_hooks_keep_the_wal_bounded() {
    const HOOKS: usize = 1_000;
    let env = TestEnv::new();
    for name in ["SessionStart.json", "UserPromptSubmit.json"] {
        env.run("cairn-hook", &[], hook_fixture(name).as_bytes());
    }
    let wal = env.data_dir.join("cairn.db-wal");
    let mut largest = 0;
    for i in 0..HOOKS {
        let out = env.run("cairn-hook", &[], tool_payload(i).as_bytes());
        assert_eq!(code(&out), 0);
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    let bound = cairn_core::store::db::WAL_BOUND_BYTES + (1 << 20);
    assert!(
        largest <= bound,
        "the WAL reached {largest} bytes (bound {bound})"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages") as usize,
        HOOKS
    );
}

/// An HTTP server answering every request with 500, for as long as the test runs; returns
/// its base URL.
fn failing_model() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            while crate::support::read_request(&mut reader).is_some() {
                let body =
                    r#"{"type":"error","error":{"type":"api_error","message":"stand-in failure"}}"#;
                let mut s = &stream;
                let _ = write!(
                    s,
                    "HTTP/1.1 500 X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    });
    url
}

/// Model calls that fail are no "all good": `cairn-worker --once` says what it did (in one
/// line: batches, observations, summaries, failures, skipped jobs), and `cairn status`
/// needs attention, naming the failures and the fix.
#[test]
fn failing_model_calls_make_status_need_attention_and_the_worker_says_what_it_did() {
    let env = TestEnv::new();
    let mut conn = create_db(&env);
    enqueue(&mut conn, "s1", "k1", 3);
    enqueue(&mut conn, "s2", "k2", 3);
    drop(conn);
    let url = failing_model();
    let mut c = env.cmd("cairn-worker");
    c.arg("--once")
        .env("CAIRN_MODEL__PROVIDER", "anthropic")
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", &url)
        .env("CAIRN_QUEUE__RETRY_BASE_SECS", "0")
        .env("CAIRN_QUEUE__MAX_ATTEMPTS", "2")
        .env("CAIRN_MODEL__MAX_RETRY_SECS", "0")
        .env("CAIRN_WORKER__POLL_MS", "20");
    let out = crate::support::run_with_stdin(c, b"");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = stdout(&out);
    assert!(
        line.starts_with("cairn-worker: 0 batches done (0 observations, 0 summaries), 4 failed")
            && line.contains("2 jobs skipped"),
        "{line}"
    );
    let out = cairn(&env, &["status"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("4 of the last 4 model calls failed"),
        "{text}"
    );
    assert!(text.contains("cairn doctor --online"), "{text}");
    let w = json(&cairn(&env, &["status", "--json"]));
    assert_eq!(w["recent_calls"]["failed"], 4);
    // The worker recorded what it used.
    let provider: String = env
        .db()
        .query_row("SELECT provider FROM workers", [], |r| r.get(0))
        .expect("provider");
    assert_eq!(provider, "anthropic");
}

/// A worker that holds the lock but is stopped (SIGSTOP) is no healthy worker: `cairn
/// status` says so and how to resume it; it shows the provider the worker uses, and `cairn
/// doctor` says when this shell would pick another one.
#[test]
fn a_stopped_worker_needs_attention_and_its_provider_is_reported() {
    let env = TestEnv::new();
    create_db(&env);
    let url = failing_model();
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_MODEL__PROVIDER", "auto")
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", &url)
        .env("CAIRN_WORKER__HEARTBEAT_SECS", "1")
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("worker");
    let pid = child.id().to_string();
    let registered = wait_for(30, || {
        env.db_path().exists()
            && env
                .db()
                .query_row(
                    "SELECT count(*) FROM workers WHERE provider IS NOT NULL AND pid = ?1",
                    [child.id()],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap_or(0)
                == 1
    });
    assert!(registered, "the worker registered");
    let out = cairn(&env, &["status"]);
    assert!(
        stdout(&out).contains("provider anthropic"),
        "{}",
        stdout(&out)
    );
    // This shell has no key: it would pick another provider.
    let mut d = env.cmd("cairn");
    d.arg("doctor").env("PATH", "/usr/bin:/bin");
    let out = crate::support::run_with_stdin(d, b"");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("the running worker (pid {pid}) uses anthropic")),
        "{text}"
    );
    assert!(text.contains("would pick"), "{text}");

    let stop = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status();
    assert!(stop.is_ok_and(|s| s.success()));
    let out = cairn(&env, &["status"]);
    let text = stdout(&out);
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let _ = child.wait();
    assert_eq!(code(&out), 1, "{text}");
    assert!(
        text.contains("is stopped") && text.contains(&format!("kill -CONT {pid}")),
        "{text}"
    );
}

/// `cairn queue list` and `cairn status` say why a ready-looking job waits: its batch
/// window, and when it ends.
#[test]
fn the_queue_says_why_a_job_waits() {
    let env = TestEnv::new();
    for name in [
        "SessionStart.json",
        "UserPromptSubmit.json",
        "PostToolUse.json",
    ] {
        env.run("cairn-hook", &[], hook_fixture(name).as_bytes());
    }
    let out = cairn(&env, &["queue", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("waiting for the batch window, ready in 1m"),
        "{}",
        stdout(&out)
    );
    let out = cairn(&env, &["status"]);
    assert!(
        stdout(&out).contains("waiting for the batch window"),
        "{}",
        stdout(&out)
    );
    let mut c = env.cmd("cairn");
    c.args(["queue", "list"])
        .env("CAIRN_BATCH__ENABLED", "false");
    let out = crate::support::run_with_stdin(c, b"");
    assert!(stdout(&out).contains(" ready"), "{}", stdout(&out));
}

/// `cairn-worker` on a terminal says what it does (its log on stderr), and `--once` ends
/// with its one-line summary.
#[test]
fn the_worker_on_a_terminal_logs_and_sums_up() {
    let env = TestEnv::new();
    create_db(&env);
    let mut c = env.cmd("cairn-worker");
    c.arg("--once").env("CAIRN_MODEL__PROVIDER", "offline");
    let (screen, code) = crate::support::run_on_tty(&c, 100);
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("starting: provider offline"), "{screen}");
    assert!(screen.contains("cairn-worker: 0 batches done"), "{screen}");
}
