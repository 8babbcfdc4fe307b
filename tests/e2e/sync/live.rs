//! The worker syncing on its own: devices each with a running `cairn-worker` converge with
//! no `cairn sync`, through `LISTEN`/`NOTIFY` and through polling; workers killed with
//! SIGKILL mid-push and mid-pull, and a server stopped mid-sync, lose and double nothing;
//! `cairn status` shows the server down, then recovered; a refused login and a wrong key
//! are recorded with their fix and tried again when the file is fixed.

use std::io::Write as _;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{Device, Pg, space};
use crate::support::stdout;

/// A running `cairn-worker` of one device, stopped with SIGTERM on drop.
struct Worker {
    child: Option<Child>,
}

/// Starts `d`'s worker with the offline extractor, no sentence model, and `env`.
fn worker(d: &Device, env: &[(&str, &str)]) -> Worker {
    let mut c = d.env.cmd("cairn-worker");
    c.env("CAIRN_SYNC__PROJECTS", d.projects)
        .env("CAIRN_MODEL__PROVIDER", "offline")
        .env("CAIRN_EMBED__PROVIDER", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    Worker {
        child: Some(c.spawn().expect("start cairn-worker")),
    }
}

impl Worker {
    /// `kill -9`: nothing of the worker runs after this.
    fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM; returns the exit code once it exited (within a deadline).
    fn stop(mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let pid = rustix::process::Pid::from_child(&c);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = c.try_wait().expect("wait") {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("the worker did not stop after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `cairn status --json` (any exit code).
fn status(d: &Device) -> serde_json::Value {
    serde_json::from_str(&stdout(&d.cairn(&["status", "--json"]))).expect("status json")
}

fn count(d: &Device, sql: &str) -> i64 {
    d.env.count(sql)
}

/// Imports `n` memories of project `p` titled `<prefix> <i>`, in one session, at once.
fn import(d: &Device, prefix: &str, n: i64) {
    let session = format!("s-{}", prefix.replace(' ', "-"));
    let mut lines = vec![
        serde_json::json!({"record": "header", "format": "cairn-export", "version": 1, "exported_at": 1}),
        serde_json::json!({"record": "session", "session_id": session, "project": "p", "cwd": "/w",
                           "prompt_counter": 1, "status": "ended", "started_at": 1, "updated_at": 1}),
    ];
    for i in 0..n {
        lines.push(serde_json::json!({
            "record": "observation", "session_id": session, "project": "p", "prompt_number": 1,
            "type": "discovery", "original_type": null, "title": format!("{prefix} {i}"),
            "subtitle": "", "narrative": format!("memory {i} of {prefix}"), "facts": [],
            "concepts": [], "files_read": [], "files_modified": [], "source_job_ids": [],
            "origin": "import", "created_at": 1_000 + i,
        }));
    }
    let file = d.env.tmp.path().join(format!("{session}.jsonl"));
    let mut f = std::fs::File::create(&file).expect("create");
    for l in &lines {
        writeln!(f, "{l}").expect("write");
    }
    d.ok(&["import", "jsonl", file.to_str().expect("utf-8")]);
}

/// Waits until `d`'s worker is connected to the server (it recorded whether it listens).
fn wait_connected(d: &Device) {
    wait_until("the worker connects", 60, || {
        !status(d)["sync"]["listening"].is_null()
    });
}

#[test]
fn workers_converge_on_their_own_through_notifications_and_through_polling() {
    let pg = Pg::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    space(&pg, &a, &[&b, &c]);
    // a and b listen, and poll so rarely that only a notification can bring a memory in
    // time; c is never notified and polls every second.
    let rare = [("CAIRN_SYNC__POLL_SECS", "600")];
    let workers = [
        worker(&a, &rare),
        worker(&b, &rare),
        worker(
            &c,
            &[
                ("CAIRN_SYNC__LISTEN", "false"),
                ("CAIRN_SYNC__POLL_SECS", "1"),
            ],
        ),
    ];
    for d in [&a, &b, &c] {
        wait_connected(d);
    }
    a.save("p", "alpha keeps jobs in postgres", "written on a");
    b.save("p", "beta deploys on fridays", "written on b");
    c.save("p", "gamma caches in redis", "written on c");
    let titles = [
        "alpha keeps jobs in postgres",
        "beta deploys on fridays",
        "gamma caches in redis",
    ];
    for (name, d) in [("a", &a), ("b", &b), ("c", &c)] {
        wait_until(&format!("{name} has every memory"), 60, || {
            let have = d.titles();
            titles.iter().all(|t| have.iter().any(|h| h == t))
        });
    }
    // Searchable on the others, through the notification (b) and through polling (c).
    b.save(
        "p",
        "zebrafinch migration plan",
        "the zebrafinch tables move first",
    );
    for d in [&a, &c] {
        wait_until("b's memory is searchable", 60, || {
            stdout(&d.cairn(&["search", "zebrafinch", "--project", "p"]))
                .contains("zebrafinch migration plan")
        });
    }
    for d in [&a, &b, &c] {
        let titles = d.titles();
        assert_eq!(titles.len(), 4, "each memory once: {titles:?}");
    }
    // Visible: the server, the space, the devices, the times, listening or polling.
    let sa = status(&a);
    let sync = &sa["sync"];
    assert!(
        sync["server"]
            .as_str()
            .is_some_and(|s| s.starts_with("cairn@127.0.0.1:")),
        "{sa}"
    );
    assert_eq!(sync["listening"], true, "{sa}");
    assert!(sync["last_push_at"].is_i64() && sync["last_pull_at"].is_i64());
    assert!(sync["last_error"].is_null(), "{sa}");
    wait_until("a has seen both other devices", 60, || {
        status(&a)["sync"]["devices"].as_array().map(Vec::len) == Some(2)
    });
    assert_eq!(status(&c)["sync"]["listening"], false);
    // `cairn sync status` also asks the server how far behind this device is now.
    let text = a.ok(&["sync", "status"]);
    for line in [
        "last push: 20",
        "last pull: 20",
        "server now: 0 records behind",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
    assert!(!text.contains("last error"), "{text}");
    let text = stdout(&a.cairn(&["status"]));
    assert!(
        text.lines().any(|l| l.starts_with("sync")
            && l.contains("listening")
            && l.contains("2 other devices")),
        "{text}"
    );
    let doctor = stdout(&a.cairn(&["doctor", "--json"]));
    let findings: serde_json::Value = serde_json::from_str(&doctor).expect("doctor json");
    assert!(
        findings
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["check"] == "sync" && f["level"] == "ok"),
        "{doctor}"
    );
    // SIGTERM stops each worker, syncer included, cleanly.
    for w in workers {
        assert_eq!(w.stop(), Some(0));
    }
}

#[test]
fn workers_killed_mid_push_and_mid_pull_end_with_every_memory_once() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    let local = |d: &Device| -> serde_json::Value {
        serde_json::from_str(&d.ok(&["sync", "status", "--json", "--local"])).expect("json")
    };
    let a_id = local(&a)["device"].as_str().expect("device").to_string();
    let a_log = || -> i64 {
        pg.sql(&format!(
            "SELECT count(*) FROM cairn_records WHERE device_id = '{a_id}'"
        ))
        .parse()
        .expect("count")
    };
    let stored = |d: &Device| count(d, "SELECT count(*) FROM observations");
    // Timed rounds: both devices write a batch, start their workers and are killed a
    // little later: before connecting, while pushing or pulling, or idle. Each batch is
    // an import with its session, a record of its own in the device's log.
    let timed_ms = [40, 150, 300, 600, 900, 1_300];
    let per_round: i64 = 120;
    for (round, ms) in timed_ms.iter().enumerate() {
        import(&a, &format!("a round {round}"), per_round);
        import(&b, &format!("b round {round}"), per_round);
        let (wa, wb) = (worker(&a, &[]), worker(&b, &[]));
        std::thread::sleep(Duration::from_millis(*ms));
        wa.kill9();
        wb.kill9();
    }
    // Watched rounds, each batch larger than a push's transaction (500 records) and a
    // pull's (1,000): a is killed as soon as its log on the server grew, b as soon as its
    // store grew.
    let big: i64 = 1_200;
    let timed = per_round * timed_ms.len() as i64;
    let timed_sessions = timed_ms.len() as i64;
    let mut a_written = timed;
    let mut a_logged = timed + timed_sessions;
    let (mut cut_pushes, mut cut_pulls) = (0, 0);
    let watched = 2;
    for round in 0..watched {
        import(&a, &format!("a big round {round}"), big);
        a_written += big;
        a_logged += big + 1;
        let (log_before, b_before) = (a_log(), stored(&b));
        let wa = worker(&a, &[]);
        wait_until("a pushes", 60, || a_log() > log_before);
        wa.kill9();
        cut_pushes += i32::from(a_log() < a_logged);
        let wa = worker(&a, &[]);
        wait_until("a pushed everything", 60, || a_log() >= a_logged);
        wa.kill9();
        let wb = worker(&b, &[]);
        wait_until("b pulls", 60, || stored(&b) > b_before);
        wb.kill9();
        cut_pulls += i32::from(stored(&b) < b_before + big);
    }
    eprintln!(
        "pushes cut short: {cut_pushes} of {watched}, pulls cut short: {cut_pulls} of {watched}"
    );
    let _workers = [worker(&a, &[]), worker(&b, &[])];
    let (a_all, b_all) = (a_written, timed);
    let all = a_all + b_all;
    for (name, d) in [("a", &a), ("b", &b)] {
        wait_until(&format!("{name} has every memory"), 120, || {
            stored(d) >= all
        });
    }
    for d in [&a, &b] {
        assert_eq!(stored(d), all);
        assert_eq!(
            count(d, "SELECT count(DISTINCT title) FROM observations"),
            all
        );
    }
    // Every log holds each memory and session once, numbered without a gap.
    let logs = pg
        .sql("SELECT count(*) || ' ' || max(seq) FROM cairn_records GROUP BY device_id ORDER BY count(*)");
    let b_logged = b_all + timed_sessions;
    assert_eq!(
        logs,
        format!("{b_logged} {b_logged}\n{a_logged} {a_logged}"),
        "{logs}"
    );
}

#[test]
fn the_server_stopped_mid_sync_loses_nothing_and_status_shows_it_down_then_back() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    let _workers = [worker(&a, &[]), worker(&b, &[])];
    wait_connected(&a);
    wait_connected(&b);
    import(&a, "before the stop", 1_500);
    // Stopped while a pushes (or b pulls) the batch.
    wait_until("a starts pushing", 60, || {
        !pg.sql("SELECT count(*) FROM cairn_records")
            .starts_with('0')
    });
    pg.down();
    a.save(
        "p",
        "written while the server was away",
        "kept locally meanwhile",
    );
    wait_until("a's status shows the server down", 60, || {
        let s = status(&a);
        s["sync"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("not reachable"))
            && s["attention"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|r| r.as_str().is_some_and(|r| r.starts_with("sync: ")))
            })
    });
    let down = status(&a);
    assert!(down["sync"]["listening"].is_null(), "{down}");
    assert!(
        down["sync"]["fix"]
            .as_str()
            .is_some_and(|f| f.contains("start the server")),
        "{down}"
    );
    assert!(down["sync"]["retry_at"].is_i64(), "{down}");
    let text = a.cairn(&["status"]);
    assert_eq!(text.status.code(), Some(1), "needs attention");
    assert!(stdout(&text).contains("sync: the server is not reachable"));
    // Local work goes on.
    assert!(
        stdout(&a.cairn(&["search", "away", "--project", "p"]))
            .contains("written while the server was away")
    );

    pg.up();
    let all = 1_501;
    wait_until("b has every memory after the restart", 120, || {
        count(&b, "SELECT count(*) FROM observations") >= all
    });
    wait_until("a's status shows the server back", 60, || {
        let s = status(&a);
        s["sync"]["last_error"].is_null() && s["sync"]["unsent"] == 0
    });
    assert_eq!(count(&b, "SELECT count(*) FROM observations"), all);
    assert_eq!(
        count(&b, "SELECT count(DISTINCT title) FROM observations"),
        all
    );
    // The memories and the import's session, each once.
    assert_eq!(
        pg.sql("SELECT count(*) FROM cairn_records"),
        (all + 1).to_string()
    );
    let back = status(&a);
    assert!(
        !back["attention"].as_array().is_some_and(|a| a
            .iter()
            .any(|r| r.as_str().is_some_and(|r| r.starts_with("sync: ")))),
        "{back}"
    );
}

#[test]
fn a_refused_login_and_a_wrong_key_are_recorded_with_the_fix_and_retried_when_fixed() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    let key = space(&pg, &a, &[&b]);
    a.save("p", "written on a", "before b's files go wrong");
    a.sync();
    let url_file = b.env.data_dir.join("sync.url");
    let key_file = b.env.data_dir.join("sync.key");
    let good_url = std::fs::read_to_string(&url_file).expect("url");
    std::fs::write(&url_file, good_url.replace("cairn@", "nobody@")).expect("bad url");
    let w = worker(&b, &[]);
    wait_until("the refused login is recorded", 60, || {
        status(&b)["sync"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("refused the login"))
    });
    let s = status(&b)["sync"].clone();
    assert!(
        s["fix"].as_str().is_some_and(|f| f.contains("password")),
        "{s}"
    );
    // Not tried again in a loop: the next attempt is minutes away.
    let (at, retry) = (
        s["last_error_at"].as_i64().expect("at"),
        s["retry_at"].as_i64().expect("retry"),
    );
    assert!(retry - at >= 5 * 60_000, "{s}");
    assert_eq!(count(&b, "SELECT count(*) FROM observations"), 0);

    // Same space, another key: found before anything is applied.
    let (space_id, _) = key
        .strip_prefix("cairn1-")
        .and_then(|k| k.split_once('-'))
        .expect("key shape");
    std::fs::write(&key_file, format!("cairn1-{space_id}-{}", "cd".repeat(32))).expect("key");
    std::fs::write(&url_file, &good_url).expect("url back");
    wait_until("the wrong key is recorded", 60, || {
        status(&b)["sync"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("wrong key"))
    });
    let s = status(&b)["sync"].clone();
    assert!(
        s["fix"]
            .as_str()
            .is_some_and(|f| f.contains("copy sync.key")),
        "{s}"
    );
    assert_eq!(count(&b, "SELECT count(*) FROM observations"), 0);
    let doctor: serde_json::Value =
        serde_json::from_str(&stdout(&b.cairn(&["doctor", "--json"]))).expect("doctor");
    assert!(
        doctor
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["check"] == "sync"
                && f["level"] == "fail"
                && f["fix"]
                    .as_str()
                    .is_some_and(|x| x.contains("copy sync.key"))),
        "{doctor}"
    );

    // The right key back: tried again at once, without a restart.
    std::fs::write(&key_file, &key).expect("key back");
    wait_until("b syncs once its key is right", 60, || {
        b.titles().iter().any(|t| t == "written on a")
    });
    wait_until("the error is cleared", 60, || {
        status(&b)["sync"]["last_error"].is_null()
    });
    assert_eq!(w.stop(), Some(0));
    // Stopped, nothing listens.
    let local: serde_json::Value =
        serde_json::from_str(&stdout(&b.cairn(&["sync", "status", "--local", "--json"])))
            .expect("json");
    assert!(local["listening"].is_null(), "{local}");
}

#[test]
fn a_frozen_server_shows_in_status_and_the_worker_goes_on_when_it_thaws() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    let quick = [("CAIRN_SYNC__ANSWER_SECS", "2")];
    let _workers = [worker(&a, &quick), worker(&b, &quick)];
    wait_connected(&a);
    wait_connected(&b);
    pg.freeze();
    a.save("p", "written while frozen", "its push waits for the server");
    wait_until("a's status says the server does not answer", 60, || {
        status(&a)["sync"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("has not answered for 2 s"))
    });
    assert!(
        stdout(&a.cairn(&["status"])).contains("sync: the server has not answered"),
        "shown as needing attention"
    );
    assert!(status(&a)["sync"]["listening"].is_null());
    pg.thaw();
    wait_until("b has the memory once the server thaws", 60, || {
        count(
            &b,
            "SELECT count(*) FROM observations WHERE title = 'written while frozen'",
        ) == 1
    });
    wait_until("a's status clears", 60, || {
        status(&a)["sync"]["last_error"].is_null()
    });
}

#[test]
fn a_login_mended_outside_sync_url_is_tried_again_at_once() {
    let pg = Pg::start_with_password();
    let (a, b) = (Device::new(), Device::new());
    let with_password = |d: &Device| {
        let url = d.env.data_dir.join("sync.url");
        let text = std::fs::read_to_string(&url).expect("url");
        std::fs::write(
            &url,
            text.replace("cairn@", &format!("cairn:{}@", super::PASSWORD)),
        )
        .expect("url");
    };
    let mut init = a.command("cairn");
    init.args(["sync", "init", "--url", &pg.url(), "--name", "a", "--json"])
        .env("PGPASSWORD", super::PASSWORD);
    let out = init.output().expect("init");
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let key: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    with_password(&a);
    let mut join = b.command("cairn");
    join.args(["sync", "join", "--url", &pg.url(), "--key"])
        .arg(key["key"].as_str().expect("key"))
        .env("PGPASSWORD", super::PASSWORD);
    assert!(join.output().expect("join").status.success());
    // b's URL has no password, and b has no password file yet: refused, retried in minutes.
    let _w = worker(&b, &[]);
    wait_until("the refused login is recorded", 60, || {
        status(&b)["sync"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("refused the login"))
    });
    a.save("p", "first", "pulled once the password file is there");
    a.sync();
    // The password file written: tried again at once.
    let pgpass = b.env.tmp.path().join(".pgpass");
    std::fs::write(&pgpass, format!("*:*:*:cairn:{}\n", super::PASSWORD)).expect("pgpass");
    std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    wait_until("b pulls once its password file is there", 30, || {
        b.titles().iter().any(|t| t == "first")
    });

    // A password in sync.url the server does not take (tried at once, refused), then
    // the server mended to take it: a `cairn sync` by hand goes through, and the worker
    // follows at once rather than after its ten minutes.
    let set_password = |d: &Device, from: &str, to: &str| {
        let url = d.env.data_dir.join("sync.url");
        let text = std::fs::read_to_string(&url).expect("url");
        std::fs::write(&url, text.replace(from, to)).expect("url");
    };
    set_password(&b, "cairn@", "cairn:the-new-one@");
    wait_until("the refused login is recorded again", 60, || {
        status(&b)["sync"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("password authentication failed"))
    });
    pg.sql("ALTER USER cairn PASSWORD 'the-new-one'");
    set_password(&a, super::PASSWORD, "the-new-one");
    b.ok(&["sync"]);
    a.save("p", "second", "pulled by b's worker, awake again");
    a.sync();
    wait_until("b's worker pulls what a wrote after the mend", 30, || {
        b.titles().iter().any(|t| t == "second")
    });
}

#[test]
fn a_worker_whose_device_shares_nothing_still_receives() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::with_projects(""));
    space(&pg, &a, &[&b]);
    let _workers = [worker(&a, &[]), worker(&b, &[])];
    wait_connected(&b);
    a.save("p", "from a", "received by a device that shares nothing");
    b.save("p", "kept on b", "b shares no project");
    wait_until("b's worker pulls a's memory", 60, || {
        b.titles().iter().any(|t| t == "from a")
    });
    assert_eq!(
        pg.sql("SELECT count(DISTINCT device_id) FROM cairn_records"),
        "1"
    );
}

#[test]
fn a_project_taken_out_of_sync_projects_is_not_pushed_from_then_on() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    // a's projects come from its settings file, as `cairn config set` writes them.
    let config = |value: &str| {
        let mut c = a.env.cmd("cairn");
        c.args(["config", "set", "sync.projects", value]);
        let out = c.output().expect("config");
        assert!(out.status.success(), "{}", crate::support::stderr(&out));
    };
    config("p,q");
    let mut c = a.env.cmd("cairn-worker");
    c.env("CAIRN_MODEL__PROVIDER", "offline")
        .env("CAIRN_EMBED__PROVIDER", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _a_worker = Worker {
        child: Some(c.spawn().expect("worker")),
    };
    let _b_worker = worker(&b, &[("CAIRN_SYNC__POLL_SECS", "600")]);
    wait_connected(&a);
    a.save("q", "shared while q syncs", "pushed");
    wait_until("b has q's first memory", 30, || {
        b.titles().iter().any(|t| t == "shared while q syncs")
    });
    config("p");
    let mut save = a.env.cmd("cairn");
    save.args([
        "save",
        "private once q is out",
        "--text",
        "never pushed",
        "--project",
        "q",
    ]);
    assert!(save.output().expect("save").status.success());
    a.save("p", "p still syncs", "pushed after the private one");
    wait_until("b has p's memory", 30, || {
        b.titles().iter().any(|t| t == "p still syncs")
    });
    assert!(!b.titles().iter().any(|t| t == "private once q is out"));
}
