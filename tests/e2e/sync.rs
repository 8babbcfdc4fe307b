//! Sync through a real PostgreSQL server: Debian's `postgresql` binaries, a cluster made
//! with `initdb` in a temp dir, started with `pg_ctl` on a free loopback port (as the
//! unprivileged `postgres` user when the tests run as root) and stopped at the end.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::support::{TestEnv, stderr, stdout};

/// A PostgreSQL cluster of its own, stopped on drop.
struct Pg {
    _tmp: tempfile::TempDir,
    bin: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    port: u16,
    as_postgres: bool,
}

fn pg_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (apt-get install postgresql)")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists())
        .collect();
    found.sort();
    found.pop().expect("a PostgreSQL version with initdb")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

impl Pg {
    fn start() -> Pg {
        let tmp = tempfile::tempdir().expect("tempdir");
        let as_postgres = rustix::process::geteuid().is_root();
        if as_postgres {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777))
                .expect("chmod");
        }
        let pg = Pg {
            bin: pg_bin(),
            data: tmp.path().join("data"),
            socket: tmp.path().to_path_buf(),
            port: free_port(),
            as_postgres,
            _tmp: tmp,
        };
        let out = pg.tool(
            "initdb",
            &["-U", "cairn", "-A", "trust", "-E", "UTF8", "--no-sync"],
            &["-D"],
        );
        assert!(out.status.success(), "initdb: {}", stderr(&out));
        pg.up();
        pg
    }

    /// Runs one of the server's programs (as `postgres` when root), `-D data` appended.
    fn tool(&self, name: &str, args: &[&str], data_flag: &[&str]) -> Output {
        let program = self.bin.join(name);
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        c.args(args).args(data_flag).arg(&self.data);
        c.output().expect("run a PostgreSQL program")
    }

    fn up(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.socket.display()
        );
        let log = self.socket.join("server.log");
        let log = log.to_str().expect("utf-8 path");
        let out = self.tool("pg_ctl", &["-w", "-l", log, "-o", &opts, "start"], &["-D"]);
        assert!(out.status.success(), "pg_ctl start: {}", stderr(&out));
    }

    fn down(&self) {
        let out = self.tool("pg_ctl", &["-w", "-m", "fast", "stop"], &["-D"]);
        assert!(out.status.success(), "pg_ctl stop: {}", stderr(&out));
    }

    fn url(&self) -> String {
        format!(
            "postgres://cairn@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// Runs SQL with psql and returns its unaligned output.
    fn sql(&self, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-A", "-t", "-d", &self.url(), "-c", sql])
            .output()
            .expect("psql");
        assert!(out.status.success(), "psql {sql}: {}", stderr(&out));
        stdout(&out).trim().to_string()
    }

    /// Every byte the server keeps on disk (tables, WAL), after a checkpoint.
    fn files_contain(&self, needle: &str) -> Vec<PathBuf> {
        self.sql("CHECKPOINT");
        let mut hits = Vec::new();
        let mut stack = vec![self.data.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).expect("read dir").flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(bytes) = std::fs::read(&p)
                    && contains(&bytes, needle.as_bytes())
                {
                    hits.push(p);
                }
            }
        }
        hits
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self.tool("pg_ctl", &["-w", "-m", "immediate", "stop"], &["-D"]);
    }
}

/// One machine: a data dir whose projects all sync unless told otherwise.
struct Device {
    env: TestEnv,
    projects: &'static str,
}

impl Device {
    fn new() -> Device {
        Device::with_projects("*")
    }

    fn with_projects(projects: &'static str) -> Device {
        Device {
            env: TestEnv::new(),
            projects,
        }
    }

    fn cairn(&self, args: &[&str]) -> Output {
        let mut c = self.env.cmd("cairn");
        c.env("CAIRN_SYNC__PROJECTS", self.projects).args(args);
        c.output().expect("run cairn")
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

/// A space made on `first`, joined by the others; returns the key.
fn space(pg: &Pg, first: &Device, others: &[&Device]) -> String {
    let init: serde_json::Value =
        serde_json::from_str(&first.ok(&["sync", "init", "--url", &pg.url(), "--json"]))
            .expect("json");
    let key = init["key"].as_str().expect("key").to_string();
    for d in others {
        d.ok(&["sync", "join", "--url", &pg.url(), "--key", &key]);
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

    // Pulled memories are searchable at once.
    let found = c.ok(&["search", "postgres", "--project", "shared"]);
    assert!(found.contains("alpha uses postgres"), "{found}");

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
    space(&pg, &a, &[&b]);
    let canary = "AKIAQYLPMN5HHHFPZAM2";
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
    // The server holds sealed bytes only: not the secret, not the private text, and not
    // even what the memory says or its project's name.
    assert_eq!(pg.sql("SELECT count(*) FROM cairn_records"), "1");
    for needle in [
        canary,
        "marmoset",
        "zebrafinch",
        "orchidproject",
        "the rest",
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
