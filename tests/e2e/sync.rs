//! Sync through a real PostgreSQL server (`tests/common/postgres.rs`: Debian's binaries, a
//! cluster of its own per test on a free loopback port, stopped at the end).

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::support::{TestEnv, hook_fixture, run_with_stdin, stderr, stdout};

#[path = "../common/postgres.rs"]
mod postgres;
use postgres::{PASSWORD, Pg};

/// One machine: a data dir whose projects all sync unless told otherwise.
struct Device {
    env: TestEnv,
    projects: &'static str,
    /// `sync.prompts`.
    prompts: std::cell::Cell<bool>,
    /// Its clock's offset from the real one, as `faketime -f` takes it (`+1h`).
    clock: Option<&'static str>,
    /// The machine's host name (`HOSTNAME`).
    host: std::cell::Cell<&'static str>,
}

impl Device {
    fn new() -> Device {
        Device::with_projects("*")
    }

    fn with_projects(projects: &'static str) -> Device {
        Device {
            env: TestEnv::new(),
            projects,
            prompts: std::cell::Cell::new(false),
            clock: None,
            host: std::cell::Cell::new("host-a"),
        }
    }

    /// A machine whose clock is `offset` off (Debian's `faketime`, libfaketime).
    fn with_clock(offset: &'static str) -> Device {
        Device {
            clock: Some(offset),
            ..Device::new()
        }
    }

    fn command(&self, bin: &str) -> Command {
        let mut c = self.env.cmd(bin);
        c.env("CAIRN_SYNC__PROJECTS", self.projects)
            .env("CAIRN_SYNC__PROMPTS", self.prompts.get().to_string())
            .env("HOSTNAME", self.host.get());
        let Some(offset) = self.clock else {
            return c;
        };
        let mut f = Command::new("faketime");
        f.args(["-f", offset]).arg(c.get_program());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => f.env(k, v),
                None => f.env_remove(k),
            };
        }
        // Timeouts and sleeps keep real time; only the wall clock is off.
        f.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        f
    }

    fn cairn(&self, args: &[&str]) -> Output {
        let mut c = self.command("cairn");
        c.args(args);
        c.output().expect("run cairn")
    }

    /// The hook, given a real Claude Code payload.
    fn hook(&self, payload: &serde_json::Value) {
        let out = run_with_stdin(self.command("cairn-hook"), payload.to_string().as_bytes());
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }

    /// A session started in `cwd` with one prompt.
    fn prompt(&self, session: &str, cwd: &str, text: &str) {
        for name in ["SessionStart.json", "UserPromptSubmit.json"] {
            let mut ev: serde_json::Value =
                serde_json::from_str(&hook_fixture(name)).expect("fixture");
            ev["session_id"] = session.into();
            ev["cwd"] = cwd.into();
            if name == "UserPromptSubmit.json" {
                ev["prompt"] = text.into();
                ev["prompt_id"] = format!("{session}-p1").into();
            }
            self.hook(&ev);
        }
    }

    fn count(&self, sql: &str) -> i64 {
        self.env.count(sql)
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cairn(args);
        assert!(
            out.status.success(),
            "cairn {args:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    }

    fn save(&self, project: &str, title: &str, text: &str) {
        self.ok(&["save", title, "--text", text, "--project", project]);
    }

    fn sync(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["sync", "--json"])).expect("json")
    }

    fn titles(&self) -> Vec<String> {
        let db = self.env.db();
        let mut s = db
            .prepare("SELECT title FROM observations ORDER BY title")
            .expect("prepare");
        s.query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    fn id_of(&self, title: &str) -> i64 {
        self.env
            .db()
            .query_row(
                "SELECT id FROM observations WHERE title = ?1",
                [title],
                |r| r.get(0),
            )
            .expect(title)
    }
}

/// A space made on `first` (named `device0`), joined by the others (`device1`, ...);
/// returns the key.
fn space(pg: &Pg, first: &Device, others: &[&Device]) -> String {
    let init: serde_json::Value = serde_json::from_str(&first.ok(&[
        "sync",
        "init",
        "--url",
        &pg.url(),
        "--name",
        "device0",
        "--json",
    ]))
    .expect("json");
    let key = init["key"].as_str().expect("key").to_string();
    for (i, d) in others.iter().enumerate() {
        let name = format!("device{}", i + 1);
        d.ok(&[
            "sync",
            "join",
            "--url",
            &pg.url(),
            "--key",
            &key,
            "--name",
            &name,
        ]);
    }
    key
}

/// The worker syncing on its own (`tests/e2e/sync/live.rs`), with this file's helpers.
mod live;

#[test]
fn three_devices_converge_and_forget_everywhere() {
    let pg = Pg::start();
    let (a, b, c) = (
        Device::with_projects("shared"),
        Device::new(),
        Device::new(),
    );
    let key = space(&pg, &a, &[&b, &c]);
    assert!(key.starts_with("cairn1-"), "{key}");
    for d in [&a, &b, &c] {
        d.ok(&[
            "save",
            "seed",
            "--text",
            "first memory of the machine",
            "--project",
            "seed",
        ]);
    }
    a.save(
        "shared",
        "alpha uses postgres",
        "the alpha service stores jobs in postgres",
    );
    a.save("shared", "alpha retries", "alpha retries three times");
    a.save(
        "elsewhere",
        "unshared note",
        "project not in sync.projects on this machine",
    );
    b.save("shared", "beta deploys", "beta deploys on fridays");
    c.save("shared", "gamma caches", "gamma caches in redis");

    // Twice round: every device has pushed before each pulls the last time.
    for _ in 0..2 {
        for d in [&a, &b, &c] {
            d.sync();
        }
    }
    let expect_everywhere = [
        "alpha retries",
        "alpha uses postgres",
        "beta deploys",
        "gamma caches",
    ];
    for (name, d) in [("b", &b), ("c", &c)] {
        let titles = d.titles();
        for t in expect_everywhere {
            assert_eq!(
                titles.iter().filter(|x| *x == t).count(),
                1,
                "{name}: {titles:?}"
            );
        }
        assert!(
            !titles.iter().any(|t| t == "unshared note"),
            "{name}: {titles:?}"
        );
    }
    // a's own seed stayed home (project not synced); b's and c's went to each other and
    // to a, once each: the same content from two devices is one memory per session.
    for d in [&a, &b, &c] {
        assert_eq!(d.titles().iter().filter(|t| *t == "seed").count(), 1);
    }
    for t in expect_everywhere {
        assert_eq!(a.titles().iter().filter(|x| *x == t).count(), 1, "{t}");
    }
    // Nothing moves when nothing changed.
    let again = b.sync();
    assert_eq!(
        (again["pushed"].as_u64(), again["added"].as_u64()),
        (Some(0), Some(0))
    );

    // Pulled memories are searchable at once, marked with the device they came from (a
    // is device0); a device's own memories carry no mark.
    let found = c.ok(&["search", "postgres", "--project", "shared"]);
    assert!(found.contains("alpha uses postgres"), "{found}");
    assert!(found.contains("@device0"), "{found}");
    let hits: serde_json::Value = serde_json::from_str(&c.ok(&[
        "search",
        "--json",
        "--project",
        "shared",
        "--order",
        "newest",
        "--limit",
        "50",
    ]))
    .expect("json");
    let device_of = |title: &str| {
        hits.as_array()
            .expect("hits")
            .iter()
            .find(|h| h["title"] == title)
            .map(|h| h["device"].clone())
            .unwrap_or_else(|| panic!("{title} in {hits}"))
    };
    assert_eq!(device_of("alpha uses postgres"), "device0");
    assert_eq!(device_of("beta deploys"), "device1");
    assert!(device_of("gamma caches").is_null(), "c's own: {hits}");
    let context = c.ok(&["context", "--project", "shared"]);
    assert!(
        context.contains("@device0 alpha uses postgres"),
        "{context}"
    );
    assert!(!context.contains("@device2"), "{context}");

    // Forgetting on b (a memory a wrote) forgets on every device.
    let id = b.id_of("alpha uses postgres").to_string();
    b.ok(&["forget", &id, "--yes"]);
    b.sync();
    let moved_a = a.sync();
    assert_eq!(moved_a["forgotten"].as_u64(), Some(1), "{moved_a}");
    c.sync();
    for d in [&a, &b, &c] {
        assert!(!d.titles().iter().any(|t| t == "alpha uses postgres"));
        assert!(d.titles().iter().any(|t| t == "alpha retries"));
    }
    // And a later round does not bring it back.
    for d in [&a, &b, &c] {
        d.sync();
        assert!(!d.titles().iter().any(|t| t == "alpha uses postgres"));
    }

    let status: serde_json::Value =
        serde_json::from_str(&c.ok(&["sync", "status", "--json"])).expect("json");
    assert_eq!(
        status["devices"].as_array().map(Vec::len),
        Some(2),
        "{status}"
    );
    assert_eq!(status["unsent"].as_i64(), Some(0));
    assert!(status["last_error"].is_null(), "{status}");
}

#[test]
fn the_server_sees_no_content_no_secret_and_no_private_text() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    a.prompts.set(true);
    space(&pg, &a, &[&b]);
    let canary = "AKIAQYLPMN5HHHFPZAM2";
    // A prompt too (prompts sync here), and a whole session in an excluded project.
    a.prompt(
        "sess-canary",
        "/work/orchidproject",
        &format!("deploy with {canary} <private>marmoset prompt words</private> please"),
    );
    for name in ["SessionStart.json", "UserPromptSubmit.json"] {
        let mut ev: serde_json::Value = serde_json::from_str(&hook_fixture(name)).expect("json");
        ev["session_id"] = "sess-excluded".into();
        ev["cwd"] = "/work/tapirproject".into();
        ev["prompt"] = "the okapi plan of tapirproject".into();
        let mut c = a.command("cairn-hook");
        c.env("CAIRN_CAPTURE__EXCLUDED_PROJECTS", "tapirproject");
        let out = run_with_stdin(c, ev.to_string().as_bytes());
        assert_eq!(out.status.code(), Some(0));
    }
    a.save(
        "orchidproject",
        "zebrafinch deploy notes",
        &format!("aws key {canary} then <private>marmoset hidden words</private> and the rest"),
    );
    a.sync();
    b.sync();
    // b has the memory as a stored it: cleaned before it was stored, so cleaned on b.
    let narrative: String = b
        .env
        .db()
        .query_row(
            "SELECT narrative FROM observations WHERE title = 'zebrafinch deploy notes'",
            [],
            |r| r.get(0),
        )
        .expect("synced row");
    assert!(narrative.contains("the rest"), "{narrative}");
    assert!(
        !narrative.contains(canary) && !narrative.contains("marmoset"),
        "{narrative}"
    );
    let prompt: String = b
        .env
        .db()
        .query_row("SELECT prompt_text FROM user_prompts", [], |r| r.get(0))
        .expect("synced prompt");
    assert!(prompt.contains("please"), "{prompt}");
    assert!(
        !prompt.contains(canary) && !prompt.contains("marmoset"),
        "{prompt}"
    );
    assert_eq!(
        b.count("SELECT count(*) FROM sessions WHERE project = 'tapirproject'"),
        0
    );
    // The server holds sealed bytes only: not the secret, not the private text, and not
    // even what the memory says or its project's name. Records: the prompt's session and
    // the prompt, the saved memory's session-less observation.
    assert_eq!(pg.sql("SELECT count(*) FROM cairn_records"), "3");
    for needle in [
        canary,
        "marmoset",
        "zebrafinch",
        "orchidproject",
        "the rest",
        "tapirproject",
        "okapi",
    ] {
        let hits = pg.sql(&format!(
            "SELECT count(*) FROM cairn_records WHERE position(convert_to('{needle}', 'UTF8') in body) > 0"
        ));
        assert_eq!(hits, "0", "{needle} in a record");
        assert_eq!(
            pg.files_contain(needle),
            Vec::<PathBuf>::new(),
            "{needle} on disk"
        );
    }
}

#[test]
fn a_wrong_key_writes_nothing_and_spaces_stay_apart() {
    let pg = Pg::start();
    let (a, b, d) = (Device::new(), Device::new(), Device::new());
    let key = space(&pg, &a, &[]);
    // Same space id, another key.
    let (space_id, _) = key
        .strip_prefix("cairn1-")
        .and_then(|k| k.split_once('-'))
        .expect("key shape");
    let wrong = format!("cairn1-{space_id}-{}", "ab".repeat(32));
    let devices_before = pg.sql("SELECT count(*) FROM cairn_devices");
    let out = b.cairn(&["sync", "join", "--url", &pg.url(), "--key", &wrong]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("wrong key"), "{}", stderr(&out));
    assert!(!b.env.data_dir.join("sync.key").exists());
    assert!(!b.env.data_dir.join("sync.url").exists());
    if b.env.db_path().exists() {
        assert_eq!(b.env.count("SELECT count(*) FROM sync_state"), 0);
    }
    assert_eq!(pg.sql("SELECT count(*) FROM cairn_devices"), devices_before);
    // A key that is not one at all.
    let out = b.cairn(&["sync", "join", "--url", &pg.url(), "--key", "hunter2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a cairn sync key"),
        "{}",
        stderr(&out)
    );

    // A second space on the same server never sees the first.
    space(&pg, &d, &[]);
    a.save("p", "first space only", "kept in the first space");
    d.save("p", "second space only", "kept in the second space");
    a.sync();
    d.sync();
    a.sync();
    assert!(!a.titles().iter().any(|t| t == "second space only"));
    assert!(!d.titles().iter().any(|t| t == "first space only"));
    assert_eq!(
        pg.sql("SELECT count(DISTINCT space_id) FROM cairn_spaces"),
        "2"
    );

    // A member's sync.key damaged after it joined: its sync refuses before anything is
    // sealed or sent (a record sealed with it would stop every other member's pull), and
    // once the key is mended the memory goes and the others read it.
    b.ok(&["sync", "join", "--url", &pg.url(), "--key", &key]);
    let key_file = a.env.data_dir.join("sync.key");
    let good = std::fs::read_to_string(&key_file).expect("key");
    let trimmed = good.trim_end();
    let flipped = if trimmed.ends_with('a') { 'b' } else { 'a' };
    let damaged = format!("{}{flipped}\n", &trimmed[..trimmed.len() - 1]);
    std::fs::write(&key_file, damaged).expect("damage");
    a.save("p", "saved while the key was damaged", "sent once mended");
    let records = pg.sql("SELECT count(*) FROM cairn_records");
    let out = a.cairn(&["sync"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("wrong key"), "{}", stderr(&out));
    // The next sync would fail the same way until the key is mended.
    assert!(!stderr(&out).contains("catches up"), "{}", stderr(&out));
    assert_eq!(pg.sql("SELECT count(*) FROM cairn_records"), records);
    assert_eq!(a.count("SELECT count(*) FROM sync_outbox"), 0);
    std::fs::write(&key_file, good).expect("mend");
    a.sync();
    b.sync();
    assert!(
        b.titles()
            .iter()
            .any(|t| t == "saved while the key was damaged")
    );
}

#[test]
fn with_the_server_away_nothing_is_lost_and_sync_catches_up() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    a.save("p", "before the outage", "written while the server ran");
    a.sync();
    pg.down();
    a.save(
        "p",
        "during the outage",
        "written while the server was away",
    );
    let out = a.cairn(&["sync"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not reachable"), "{}", stderr(&out));
    // Local work goes on: search still finds it, and status names the error.
    assert!(
        a.ok(&["search", "outage", "--project", "p"])
            .contains("during the outage")
    );
    let out = a.cairn(&["sync", "status", "--json"]);
    assert_eq!(out.status.code(), Some(1), "an error is shown as one");
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(status["unsent"].as_i64(), Some(1), "{status}");
    assert_eq!(status["server_now"]["ok"], false, "{status}");
    assert!(
        status["fix"]
            .as_str()
            .is_some_and(|f| f.contains("start the server")),
        "{status}"
    );
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("not reachable"))
    );
    pg.up();
    a.sync();
    b.sync();
    let titles = b.titles();
    assert!(
        titles.iter().any(|t| t == "before the outage"),
        "{titles:?}"
    );
    assert!(
        titles.iter().any(|t| t == "during the outage"),
        "{titles:?}"
    );
    assert_eq!(pg.sql("SELECT count(*) FROM cairn_records"), "2");
}

/// Every title of every device, sorted, each once: what converged looks like.
fn assert_converged(devices: &[&Device]) -> Vec<String> {
    let first = devices[0].titles();
    let mut unique = first.clone();
    unique.dedup();
    assert_eq!(unique, first, "a memory twice");
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d.titles(), first, "device {i} differs");
    }
    first
}

#[test]
fn a_refused_login_and_a_server_that_is_down_say_the_fix_and_write_nothing() {
    let pg = Pg::start_with_password();
    let (a, b) = (Device::new(), Device::new());
    // No password anywhere: refused, and nothing written on either side.
    let out = a.cairn(&["sync", "init", "--url", &pg.url()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("refused the login") && err.contains("PGPASSWORD"),
        "{err}"
    );
    assert!(!err.contains(PASSWORD));
    assert!(!a.env.data_dir.join("sync.key").exists());
    assert!(!a.env.data_dir.join("sync.url").exists());
    // A wrong password in the URL: the same, and the password is not repeated.
    let wrong = pg.url().replace("cairn@", "cairn:not-the-password@");
    let out = a.cairn(&["sync", "init", "--url", &wrong]);
    assert_eq!(out.status.code(), Some(2));
    // The server's own reason, not the driver's "db error".
    assert!(
        stderr(&out).contains("refused the login: password authentication failed"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("not-the-password"));
    assert!(!a.env.data_dir.join("sync.key").exists());
    // A database that does not exist: said so, with where to look.
    let mut init = a.command("cairn");
    let elsewhere = pg.url().replace("/postgres?", "/no_such_db?");
    init.env("PGPASSWORD", PASSWORD)
        .args(["sync", "init", "--url", &elsewhere]);
    let out = init.output().expect("init");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no such database")
            && stderr(&out).contains("\"no_such_db\" does not exist"),
        "{}",
        stderr(&out)
    );
    assert!(!a.env.data_dir.join("sync.key").exists());

    // The right one from PGPASSWORD: a is in the space.
    let mut init = a.command("cairn");
    init.env("PGPASSWORD", PASSWORD)
        .args(["sync", "init", "--url", &pg.url(), "--json"]);
    let out = init.output().expect("init");
    assert!(out.status.success(), "{}", stderr(&out));
    let key = serde_json::from_str::<serde_json::Value>(&stdout(&out)).expect("json")["key"]
        .as_str()
        .expect("key")
        .to_string();
    // A sync without the password: refused, the memory stays queued, nothing on the server.
    a.save("p", "queued while refused", "kept until the login works");
    let out = a.cairn(&["sync"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("refused the login"),
        "{}",
        stderr(&out)
    );
    assert_eq!(pg.sql("SELECT count(*) FROM cairn_records"), "0");
    assert_eq!(a.count("SELECT count(*) FROM sync_outbox"), 1);
    let status: serde_json::Value =
        serde_json::from_str(&stdout(&a.cairn(&["sync", "status", "--json"]))).expect("json");
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("refused the login")),
        "{status}"
    );

    // A server that is down: join says so, with the fix, and writes nothing.
    pg.down();
    let out = b.cairn(&["sync", "join", "--url", &pg.url(), "--key", &key]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("not reachable") && err.contains("host and port"),
        "{err}"
    );
    assert!(!b.env.data_dir.join("sync.key").exists());
    assert!(!b.env.data_dir.join("sync.url").exists());
}

#[test]
fn a_device_offline_while_others_write_and_forget_converges_when_back() {
    let pg = Pg::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    space(&pg, &a, &[&b, &c]);
    a.save("p", "a one", "first of a");
    b.save("p", "b one", "first of b");
    c.save("p", "c one", "first of c");
    for _ in 0..2 {
        for d in [&a, &b, &c] {
            d.sync();
        }
    }
    assert_converged(&[&a, &b, &c]);

    // c goes away. Meanwhile a and b write, forget each other's memories, and forget one
    // c never saw; c writes on its own.
    a.save("p", "a two", "second of a");
    a.save(
        "p",
        "a short-lived",
        "written and forgotten while c was away",
    );
    b.save("p", "b two", "second of b");
    c.save("p", "c two", "written offline");
    for d in [&a, &b, &a] {
        d.sync();
    }
    let forget = |d: &Device, title: &str| {
        let id = d.id_of(title).to_string();
        d.ok(&["forget", &id, "--yes"]);
    };
    forget(&b, "a one");
    forget(&a, "b one");
    forget(&a, "a short-lived");
    for _ in 0..3 {
        a.sync();
        b.sync();
    }

    // c is back: it counts what it gained and lost, not what came and went while it was
    // away ("a short-lived"); two rounds and everyone agrees.
    let back = c.sync();
    assert_eq!(
        (back["added"].as_u64(), back["forgotten"].as_u64()),
        (Some(2), Some(2)),
        "{back}"
    );
    for _ in 0..2 {
        for d in [&c, &a, &b] {
            d.sync();
        }
    }
    let titles = assert_converged(&[&a, &b, &c]);
    assert_eq!(titles, ["a two", "b two", "c one", "c two"], "{titles:?}");
}

#[test]
fn clocks_an_hour_apart_converge_with_nothing_lost_or_twice() {
    let pg = Pg::start();
    // b's clock runs an hour ahead, c's an hour behind.
    let (a, b, c) = (
        Device::new(),
        Device::with_clock("+1h"),
        Device::with_clock("-1h"),
    );
    space(&pg, &a, &[&b, &c]);
    let real_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    a.save("p", "written on time", "a's clock is right");
    b.save("p", "written in the future", "b's clock is an hour ahead");
    c.save("p", "written in the past", "c's clock is an hour behind");
    // The same words saved on two machines are one memory everywhere.
    b.save("p", "the same note", "saved on two machines");
    c.save("p", "the same note", "saved on two machines");
    for _ in 0..2 {
        for d in [&b, &c, &a] {
            d.sync();
        }
    }
    // The clocks really were off: b's memory is stamped about an hour ahead, everywhere.
    let stamp = |d: &Device| -> i64 {
        d.env
            .db()
            .query_row(
                "SELECT created_at FROM observations WHERE title = 'written in the future'",
                [],
                |r| r.get(0),
            )
            .expect("stamp")
    };
    assert!(stamp(&b) > real_now + 50 * 60_000, "faketime took effect");
    assert_eq!(stamp(&a), stamp(&b));
    assert_eq!(stamp(&c), stamp(&b));
    // And a forget from the past reaches the future.
    let id = c.id_of("written on time").to_string();
    c.ok(&["forget", &id, "--yes"]);
    for _ in 0..2 {
        for d in [&c, &b, &a] {
            d.sync();
        }
    }
    let titles = assert_converged(&[&a, &b, &c]);
    assert_eq!(
        titles,
        [
            "the same note",
            "written in the future",
            "written in the past"
        ],
        "{titles:?}"
    );
}

#[test]
fn prompts_and_sessions_sync_only_as_asked() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    a.prompt(
        "sess-1",
        "/work/ferncastle",
        "how do the ferncastle leases expire",
    );
    a.sync();
    b.sync();
    // The session came (another device's session reads as a history), its prompt did not.
    assert_eq!(
        b.count("SELECT count(*) FROM sessions WHERE session_id = 'sess-1'"),
        1
    );
    assert_eq!(b.count("SELECT count(*) FROM user_prompts"), 0);
    assert_eq!(b.count("SELECT count(*) FROM sessions WHERE cwd <> ''"), 0);

    // With sync.prompts, the prompt goes too, marked with its device where it is found.
    a.prompts.set(true);
    let moved = a.sync();
    assert_eq!(moved["pushed"].as_u64(), Some(1), "{moved}");
    b.sync();
    assert_eq!(b.count("SELECT count(*) FROM user_prompts"), 1);
    let found = b.ok(&["search", "ferncastle", "--all-projects", "--kind", "prompt"]);
    assert!(found.contains("@device0"), "{found}");
    // Forgotten on b, forgotten on a.
    let id = b.count("SELECT id FROM user_prompts");
    b.ok(&["forget", &format!("P{id}"), "--yes"]);
    b.sync();
    a.sync();
    assert_eq!(a.count("SELECT count(*) FROM user_prompts"), 0);
}

#[test]
fn a_memory_keeps_its_vector_on_a_device_of_the_same_model_only() {
    let pg = Pg::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    space(&pg, &a, &[&b, &c]);
    let model = crate::support::model_dir();
    let model = model.to_str().expect("utf-8 path");
    a.save(
        "p",
        "leases expire",
        "the worker's lease runs out after ten minutes",
    );
    b.save("p", "b's own note", "embedded here with the same model");
    // a and b embed with the same sentence model; c has none.
    for d in [&a, &b] {
        d.ok(&["embed", "--from", model]);
        assert_eq!(d.count("SELECT count(*) FROM embedding_queue"), 0);
    }
    a.sync();
    b.sync();
    c.sync();
    let vector = |d: &Device| -> Option<(Vec<u8>, Vec<u8>)> {
        d.env
            .db()
            .query_row(
                "SELECT e.vector, e.parts FROM embeddings e JOIN observations o ON o.id = e.ref_id
                 WHERE e.kind = 0 AND o.title = 'leases expire'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ok()
    };
    // b kept a's vectors (of the whole and of its two parts, its title and its narrative)
    // and has nothing to embed; c, with no vectors of that model, embeds it itself (it
    // stays queued until its worker does).
    let (whole, parts) = vector(&a).expect("embedded on a");
    assert_eq!(parts.len(), 2 * whole.len());
    assert_eq!(vector(&b), vector(&a));
    assert_eq!(b.count("SELECT count(*) FROM embedding_queue"), 0);
    assert_eq!(vector(&c), None);
    assert!(c.count("SELECT count(*) FROM embedding_queue") >= 1);
    // And b finds it by meaning: the vector is searchable there.
    let found = b.ok(&["search", "when does the lease time out", "--project", "p"]);
    assert!(found.contains("leases expire"), "{found}");
}

#[test]
fn a_store_restored_from_a_backup_goes_on_as_a_new_device_and_loses_nothing() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    a.save("p", "before the backup", "kept in the backup");
    a.sync();
    let backup = a.env.tmp.path().join("a.db");
    a.ok(&["backup", "--to", backup.to_str().expect("utf-8")]);
    a.save("p", "after the backup", "on the server, not in the backup");
    a.sync();
    a.ok(&["restore", backup.to_str().expect("utf-8")]);
    assert!(!a.titles().contains(&"after the backup".to_string()));
    // The restored store numbers its next record as the server already holds it.
    a.save("p", "after the restore", "written on the restored store");
    let moved = a.sync();
    let device = moved["new_device"].as_str().expect("a new device id");
    assert_eq!(moved["pushed"].as_u64(), Some(1), "{moved}");
    let out = a.ok(&["sync"]);
    assert!(!out.contains("new device"), "once only: {out}");
    b.sync();
    let all = assert_converged(&[&a, &b]);
    assert_eq!(
        all,
        ["after the backup", "after the restore", "before the backup"]
    );
    // Two logs on the server hold this machine's records (b wrote none), none twice.
    assert_eq!(pg.sql("SELECT count(*) FROM cairn_devices"), "2");
    assert_eq!(
        pg.sql(&format!(
            "SELECT count(*) FROM cairn_records WHERE device_id = '{device}'"
        )),
        "1"
    );
    let status: serde_json::Value =
        serde_json::from_str(&a.ok(&["sync", "status", "--json"])).expect("json");
    assert_eq!(status["device"], device, "{status}");
    assert_eq!(status["unsent"], 0, "{status}");
    // The one other log it reads (b wrote none) is its own earlier one, named as such.
    let devices = status["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1, "{status}");
    assert_eq!(devices[0]["former"], true, "{status}");
    let shown = a.ok(&["sync", "status"]);
    assert!(
        shown.contains("before it went on as a new device"),
        "{shown}"
    );
    let shown = a.ok(&["status"]);
    assert!(
        shown.contains("1 other device (this data dir's earlier log)"),
        "{shown}"
    );
    // What this machine wrote before reads as its own, not as another device's.
    let hit = a.ok(&["search", "before the backup", "--json", "--project", "p"]);
    assert!(!hit.contains("\"device\":\"device0\""), "{hit}");
}

#[test]
fn a_data_dir_copied_to_another_machine_splits_into_two_devices_and_loses_nothing() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    a.save("p", "before the copy", "on both copies");
    a.sync();
    let copy_of_a = || {
        let copy = Device::new();
        let cp = Command::new("cp")
            .arg("-a")
            .arg(&a.env.data_dir)
            .arg(&copy.env.data_dir)
            .status()
            .expect("cp");
        assert!(cp.success());
        copy
    };
    let (copy, idle) = (copy_of_a(), copy_of_a());
    // One copy is on another machine, the idle one on the same.
    copy.host.set("host-b");
    // Each copy writes under the same device id and the same next number; whichever
    // pushes second finds the other's record there.
    a.save("p", "on the original", "written after the copy");
    copy.save("p", "on the copy", "written after the copy");
    a.sync();
    let moved = copy.sync();
    assert!(moved["new_device"].is_string(), "{moved}");
    a.sync();
    b.sync();
    // A copy that wrote nothing would never read what the original pushed as its own.
    assert!(idle.sync()["new_device"].is_string());
    let all = assert_converged(&[&a, &copy, &b, &idle]);
    assert_eq!(all, ["before the copy", "on the copy", "on the original"]);
    // The copy on another machine no longer shows under the first machine's name.
    let name = |d: &Device| {
        let s: serde_json::Value =
            serde_json::from_str(&d.ok(&["sync", "status", "--json"])).expect("json");
        s["device_name"].as_str().expect("name").to_string()
    };
    assert_eq!(name(&copy), "device0 on host-b");
    assert_eq!(name(&idle), "device0");
    assert_eq!(name(&a), "device0");
    let seen = b.ok(&["sync", "status"]);
    assert!(seen.contains("device device0 on host-b ("), "{seen}");
}

/// Runs `cairn args` on `d`, failing the test (rather than hanging it) after `limit`.
fn cairn_within(d: &Device, args: &[&str], env: &[(&str, &str)], limit: u64) -> Output {
    let mut c = d.command("cairn");
    c.args(args).envs(env.iter().copied());
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(limit);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("cairn {args:?} still waits after {limit} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn a_frozen_server_is_named_after_sync_answer_secs_not_waited_on_forever() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    a.save("p", "while frozen", "written while the server was frozen");
    pg.freeze();
    let quick = [("CAIRN_SYNC__ANSWER_SECS", "2")];
    let out = cairn_within(&a, &["sync"], &quick, 30);
    pg.thaw();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("has not answered for 2 s"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("fix: "), "{}", stderr(&out));
    let status: serde_json::Value =
        serde_json::from_str(&stdout(&a.cairn(&["sync", "status", "--local", "--json"])))
            .expect("json");
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("has not answered")),
        "{status}"
    );
    // `sync status` asks the server within the same limit and says what it found.
    pg.freeze();
    let out = cairn_within(&a, &["sync", "status", "--json"], &quick, 30);
    pg.thaw();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert!(
        status["server_now"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("has not answered")),
        "{status}"
    );
    // Thawed, the next sync sends what waited, and the error is gone.
    assert_eq!(a.sync()["pushed"].as_u64(), Some(1));
    b.sync();
    assert_eq!(b.titles(), ["while frozen"]);
    let status: serde_json::Value =
        serde_json::from_str(&a.ok(&["sync", "status", "--json"])).expect("json");
    assert!(status["last_error"].is_null(), "{status}");
}

#[test]
fn a_damaged_sync_url_needs_attention_in_status() {
    let pg = Pg::start();
    let a = Device::new();
    space(&pg, &a, &[]);
    std::fs::write(a.env.data_dir.join("sync.url"), "postgres://[::1").expect("damage");
    let out = a.cairn(&["status"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out)
            .contains("sync: this device's sync setup cannot be read: not a PostgreSQL URL"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("fix the URL in the data dir's sync.url"));
}

#[test]
fn a_self_signed_server_is_reached_as_sslmode_asks() {
    let (pg, ca) = Pg::start_with_tls();
    let (a, b) = (Device::new(), Device::new());
    let url = |mode: &str| pg.url().replace("sslmode=disable", mode);
    // Without TLS the server refuses (hostssl only): what follows went encrypted.
    let out = a.cairn(&["sync", "init", "--url", &pg.url()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no encryption"), "{}", stderr(&out));
    // Checking against Mozilla's roots, the server's own CA is unknown: said, with the fix.
    let out = a.cairn(&["sync", "init", "--url", &url("sslmode=verify-full")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("certificate is not trusted"),
        "{}",
        stderr(&out)
    );
    assert!(!a.env.data_dir.join("sync.key").exists());
    // libpq's default (prefer) and require take it unchecked; verify-full with the CA
    // checks it and its name.
    let init: serde_json::Value = serde_json::from_str(&a.ok(&[
        "sync",
        "init",
        "--url",
        &pg.url().replace("?sslmode=disable", ""),
        "--json",
    ]))
    .expect("json");
    let key = init["key"].as_str().expect("key");
    let full = url(&format!("sslmode=verify-full&sslrootcert={}", ca.display()));
    b.ok(&["sync", "join", "--url", &full, "--key", key]);
    a.save("p", "over tls", "sent encrypted");
    a.sync();
    b.sync();
    assert_eq!(b.titles(), ["over tls"]);
    // A wrong root file is refused, and an unreadable one named.
    let other = b.env.tmp.path().join("other.pem");
    std::fs::copy(a.env.data_dir.join("sync.url"), &other).expect("not a pem");
    std::fs::write(
        b.env.data_dir.join("sync.url"),
        url(&format!(
            "sslmode=verify-ca&sslrootcert={}",
            other.display()
        )),
    )
    .expect("url");
    let out = b.cairn(&["sync"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the root certificates"),
        "{}",
        stderr(&out)
    );
    // Named as localhost, the certificate (for 127.0.0.1) passes verify-ca, not verify-full.
    let by_name = |mode: &str| {
        let u = url(&format!("sslmode={mode}&sslrootcert={}", ca.display()));
        std::fs::write(
            b.env.data_dir.join("sync.url"),
            u.replace("127.0.0.1", "localhost"),
        )
        .expect("url");
        b.cairn(&["sync"])
    };
    assert!(by_name("verify-ca").status.success());
    let out = by_name("verify-full");
    assert!(
        stderr(&out).contains("certificate is not trusted"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("not valid for name"),
        "{}",
        stderr(&out)
    );
    std::fs::write(b.env.data_dir.join("sync.url"), url("sslmode=require")).expect("url");
    b.sync();
}

#[test]
fn a_database_user_without_create_syncs_and_a_wrong_database_is_left_untouched() {
    let pg = Pg::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    let key = space(&pg, &a, &[]);
    // A user the owner granted reading and writing the tables only, in a schema where it
    // may create nothing (PostgreSQL 15's default for public).
    pg.sql("CREATE ROLE syncer LOGIN");
    pg.sql("REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    pg.sql(
        "GRANT SELECT ON cairn_sync_migrations, cairn_spaces TO syncer;
         GRANT SELECT, INSERT, UPDATE ON cairn_devices, cairn_records TO syncer",
    );
    let as_syncer = pg.url().replace("cairn@", "syncer@");
    // Such a user cannot make a space, and is told what it needs.
    let c_init = c.cairn(&["sync", "init", "--url", &as_syncer]);
    assert_eq!(c_init.status.code(), Some(2));
    assert!(
        stderr(&c_init).contains("may not do this") && stderr(&c_init).contains("create tables"),
        "{}",
        stderr(&c_init)
    );
    b.ok(&["sync", "join", "--url", &as_syncer, "--key", &key]);
    a.save("p", "from the owner", "pulled by a user that cannot create");
    a.sync();
    b.save(
        "p",
        "from the syncer",
        "pushed by a user that cannot create",
    );
    b.sync();
    a.sync();
    assert_converged(&[&a, &b]);
    // A join against a database that holds no space says so and creates nothing there.
    pg.sql("CREATE DATABASE other");
    let other = pg.url().replace("/postgres?", "/other?");
    let out = c.cairn(&["sync", "join", "--url", &other, "--key", &key]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("has no sync space"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        pg.sql_in(
            "other",
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'cairn%'"
        ),
        "0"
    );
}

#[test]
fn a_machine_leaves_its_space_and_brings_every_memory_to_the_next() {
    let pg = Pg::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    space(&pg, &a, &[&b]);
    a.save("p", "from a", "pulled by b in the first space");
    a.sync();
    b.sync();
    b.save("p", "from b", "not sent yet");
    // Not staged yet, and counted as unsent all the same.
    let status: serde_json::Value =
        serde_json::from_str(&b.ok(&["sync", "status", "--local", "--json"])).expect("json");
    assert!(
        status["unsent"].as_i64().is_some_and(|n| n >= 1),
        "{status}"
    );
    // What never reached the space is not left behind without a word.
    let out = b.cairn(&["sync", "leave"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(said.contains("not reached the space yet"), "{said}");
    b.sync();
    let out = b.ok(&["sync", "leave"]);
    assert!(out.contains("left sync space"), "{out}");
    assert!(!b.env.data_dir.join("sync.key").exists());
    assert_eq!(b.count("SELECT count(*) FROM sync_rows"), 0);
    let out = b.cairn(&["sync"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not in a sync space"));
    // A new space gets all of b's memories, those first pulled from a included.
    space(&pg, &b, &[&c]);
    b.sync();
    c.sync();
    assert_eq!(c.titles(), ["from a", "from b"]);
    // Nobody in the first space noticed anything but b's memory.
    a.sync();
    assert_eq!(a.titles(), ["from a", "from b"]);
}

/// A machine that leaves and joins the same space again reads its old log there as its
/// own earlier one, not as another device's.
#[test]
fn a_machine_back_in_its_space_knows_its_old_log() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    let key = space(&pg, &a, &[&b]);
    a.save("p", "from a", "pulled by b");
    b.save("p", "from b", "pushed before b leaves");
    a.sync();
    b.sync();
    b.ok(&["sync", "leave"]);
    let url = pg.url();
    b.ok(&[
        "sync", "join", "--url", &url, "--key", &key, "--name", "device1",
    ]);
    b.sync();
    let status: serde_json::Value =
        serde_json::from_str(&b.ok(&["sync", "status", "--json"])).expect("json");
    let devices = status["devices"].as_array().expect("devices");
    let mut seen: Vec<(String, bool)> = devices
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap_or("").to_string(),
                d["former"] == true,
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("device0".to_string(), false),
            ("device1".to_string(), true)
        ],
        "{status}"
    );
    a.sync();
    assert_eq!(assert_converged(&[&a, &b]), ["from a", "from b"]);
}

#[test]
fn a_store_restored_from_before_it_joined_stays_in_the_space_as_a_new_device() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    a.prompt("s0", "/work/p", "a first session makes the store");
    a.save("p", "before joining", "kept in the backup");
    let backup = a.env.tmp.path().join("before-join.db");
    a.ok(&["backup", "--to", backup.to_str().expect("utf-8")]);
    space(&pg, &a, &[&b]);
    a.save("p", "after joining", "pushed, not in the backup");
    a.sync();
    a.ok(&["restore", backup.to_str().expect("utf-8")]);
    // Still in the space, as status says at once.
    let status: serde_json::Value =
        serde_json::from_str(&a.ok(&["status", "--json"])).expect("json");
    assert!(status["sync"].is_object(), "{status}");
    let moved = a.sync();
    assert!(moved["new_device"].is_string(), "{moved}");
    b.sync();
    assert_eq!(
        assert_converged(&[&a, &b]),
        ["after joining", "before joining"]
    );
}

#[test]
fn a_failed_init_or_join_leaves_no_data_dir_behind() {
    let pg = Pg::start();
    let (a, b) = (Device::new(), Device::new());
    let key = space(&pg, &a, &[]);
    // TLS asked of a server that offers none: said so, with what to change.
    let out = b.cairn(&[
        "sync",
        "join",
        "--url",
        &pg.url().replace("sslmode=disable", "sslmode=require"),
        "--key",
        &key,
    ]);
    assert!(stderr(&out).contains("offers no TLS"), "{}", stderr(&out));
    let wrong_key = format!("{}00", &key[..key.len() - 2]);
    for args in [
        vec![
            "sync",
            "join",
            "--url",
            "postgres://nobody@127.0.0.1:1/x",
            "--key",
            &key,
        ],
        vec!["sync", "join", "--url", &pg.url(), "--key", "garbage"],
        vec!["sync", "join", "--url", &pg.url(), "--key", &wrong_key],
        vec!["sync", "init", "--url", "http://example.org/"],
    ] {
        let out = b.cairn(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stdout(&out));
        assert!(
            !b.env.data_dir.exists(),
            "{args:?} left {:?}",
            b.env.data_dir
        );
    }
    // The key from stdin, kept out of the process list.
    let mut join = b.command("cairn");
    join.args(["sync", "join", "--url", &pg.url(), "--key", "-"]);
    let out = run_with_stdin(join, format!("{key}\n").as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(b.env.data_dir.join("cairn.db").exists());
}

#[test]
fn a_self_signed_certificate_named_as_its_own_root_is_checked_as_psql_does() {
    let (pg, cert) = Pg::start_with_self_signed_tls();
    let a = Device::new();
    let url = |host: &str| {
        pg.url().replace("127.0.0.1", host).replace(
            "sslmode=disable",
            &format!("sslmode=verify-full&sslrootcert={}", cert.display()),
        )
    };
    let out = a.cairn(&["sync", "init", "--url", &url("localhost")]);
    assert!(
        stderr(&out).contains("not valid for name"),
        "{}",
        stderr(&out)
    );
    a.ok(&["sync", "init", "--url", &url("127.0.0.1")]);
    a.save("p", "over a pinned certificate", "checked");
    a.sync();
}

#[test]
fn a_password_file_others_may_read_is_not_used_and_the_error_says_why() {
    use std::os::unix::fs::PermissionsExt;
    let pg = Pg::start_with_password();
    let a = Device::new();
    let pgpass = a.env.tmp.path().join(".pgpass");
    std::fs::write(&pgpass, format!("*:*:*:cairn:{PASSWORD}\n")).expect("pgpass");
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = a.cairn(&["sync", "init", "--url", &pg.url()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is readable by others, so it is not used (chmod 600 it)"),
        "{}",
        stderr(&out)
    );
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    a.ok(&["sync", "init", "--url", &pg.url()]);
}
