//! A PostgreSQL server of its own for the sync tests and benchmark: Debian's `postgresql`
//! binaries (under `/usr/lib/postgresql/<version>/bin`), a cluster made with `initdb` in a
//! temp dir, started with `pg_ctl` on a free loopback port (as the unprivileged `postgres`
//! user when run as root) and stopped on drop.

use std::path::PathBuf;
use std::process::{Command, Output};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A PostgreSQL cluster of its own, stopped on drop.
pub struct Pg {
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
    pub fn start() -> Pg {
        Pg::start_with(&["-A", "trust"])
    }

    /// A server that asks for a password over TCP (`PASSWORD` for user `cairn`); the URL
    /// of [`Pg::url`] has none in it.
    pub fn start_with_password() -> Pg {
        let pg = Pg::start_with(&["--auth-local=trust", "--auth-host=scram-sha-256"]);
        let out = Command::new(pg.bin.join("psql"))
            .args(["-X", "-h"])
            .arg(&pg.socket)
            .args([
                "-p",
                &pg.port.to_string(),
                "-U",
                "cairn",
                "-d",
                "postgres",
                "-c",
            ])
            .arg(format!("ALTER USER cairn PASSWORD '{PASSWORD}'"))
            .output()
            .expect("psql");
        assert!(out.status.success(), "set password: {}", stderr(&out));
        pg
    }

    /// A server that takes TCP connections over TLS only (`hostssl`), with a certificate
    /// for 127.0.0.1 signed by a CA of its own, as a self-hosted server has; returns the
    /// CA's PEM file.
    pub fn start_with_tls() -> (Pg, PathBuf) {
        Pg::start_with_certificate(false)
    }

    /// [`Pg::start_with_tls`] with a self-signed certificate for 127.0.0.1, made as
    /// `openssl req -x509` makes one (marked as a CA); returns a copy of it.
    pub fn start_with_self_signed_tls() -> (Pg, PathBuf) {
        Pg::start_with_certificate(true)
    }

    fn start_with_certificate(self_signed: bool) -> (Pg, PathBuf) {
        let pg = Pg::start();
        pg.down();
        let dir = &pg.socket;
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("openssl (Debian's openssl package)");
            assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
        };
        let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2";
        let steps = if self_signed {
            vec![format!(
                "req -x509 {ec} -keyout server.key -out server.crt -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
            )]
        } else {
            std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
            vec![
                format!("req -x509 {ec} -keyout ca.key -out ca.pem -subj /CN=cairn-test-CA"),
                format!("req {ec} -keyout server.key -out server.csr -subj /CN=127.0.0.1"),
                "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile san.ext".into(),
            ]
        };
        for step in &steps {
            openssl(&step.split(' ').collect::<Vec<_>>());
        }
        if pg.as_postgres {
            for f in ["server.key", "server.crt"] {
                let out = Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(dir.join(f))
                    .output()
                    .expect("chown");
                assert!(out.status.success());
            }
        }
        std::fs::set_permissions(
            dir.join("server.key"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("chmod");
        let conf = pg.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("conf");
        text.push_str(&format!(
            "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
            dir.join("server.crt").display(),
            dir.join("server.key").display()
        ));
        std::fs::write(&conf, text).expect("conf");
        let hba = pg.data.join("pg_hba.conf");
        let text = std::fs::read_to_string(&hba).expect("hba");
        let text: String = text
            .lines()
            .map(|l| match l.strip_prefix("host ") {
                Some(rest) => format!("hostssl {rest}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&hba, text).expect("hba");
        pg.up();
        let root = if self_signed {
            // A copy the test may read as it likes (the server's own belongs to its user).
            let copy = dir.join("server-root.pem");
            std::fs::copy(dir.join("server.crt"), &copy).expect("copy");
            copy
        } else {
            dir.join("ca.pem")
        };
        (pg, root)
    }

    fn start_with(auth: &[&str]) -> Pg {
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
        let mut args = vec!["-U", "cairn", "-E", "UTF8", "--no-sync"];
        args.extend_from_slice(auth);
        let out = pg.tool("initdb", &args, &["-D"]);
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

    pub fn up(&self) {
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

    pub fn down(&self) {
        let out = self.tool("pg_ctl", &["-w", "-m", "fast", "stop"], &["-D"]);
        assert!(out.status.success(), "pg_ctl stop: {}", stderr(&out));
    }

    /// Freezes the server as a paused machine would (SIGSTOP to the postmaster, then its
    /// children): its kernel still accepts connections and acknowledges what is sent, but
    /// nothing answers.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    pub fn thaw(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let pid = std::fs::read_to_string(self.data.join("postmaster.pid")).expect("pid file");
        let pid = pid.lines().next().expect("pid").trim().to_string();
        // The postmaster first (it forks no new backend meanwhile), then its children,
        // found by their parent in /proc.
        let mut pids = vec![pid.clone()];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid …: the comm may hold spaces, the last ')' ends it.
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            if after.split_whitespace().nth(1) == Some(pid.as_str()) {
                pids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        for (i, pid) in pids.iter().enumerate() {
            let kill = Command::new("kill")
                .args([&format!("-{name}"), pid])
                .status()
                .expect("kill");
            // A child may have ended since it was listed.
            assert!(kill.success() || i > 0, "kill -{name} {pid}");
        }
    }

    pub fn url(&self) -> String {
        format!(
            "postgres://cairn@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// Runs SQL with psql (through the socket, where no password is asked) and returns its
    /// unaligned output.
    pub fn sql(&self, sql: &str) -> String {
        self.sql_in("postgres", sql)
    }

    /// [`Pg::sql`] in database `db`.
    pub fn sql_in(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-A", "-t", "-h"])
            .arg(&self.socket)
            .args(["-p", &self.port.to_string(), "-U", "cairn", "-d", db])
            .args(["-c", sql])
            .output()
            .expect("psql");
        assert!(out.status.success(), "psql {sql}: {}", stderr(&out));
        stdout(&out).trim().to_string()
    }

    /// Every byte the server keeps on disk (tables, WAL), after a checkpoint.
    pub fn files_contain(&self, needle: &str) -> Vec<PathBuf> {
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

/// The password of [`Pg::start_with_password`]'s server.
pub const PASSWORD: &str = "right-horse-battery";

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self.tool("pg_ctl", &["-w", "-m", "immediate", "stop"], &["-D"]);
    }
}
