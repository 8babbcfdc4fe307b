//! `cairn demo`: the whole pipeline on a recorded Claude Code session, with no Claude
//! Code, no network and no key. It plays the session's hook events through the hook (one
//! process per event, as Claude Code runs it), runs the worker once, then shows what the
//! next session is told at SessionStart, a search and a timeline. The data dir is left for
//! the user to explore.
//!
//! Every step is a separate process of this very executable (`cairn hook`, `cairn worker
//! --once`, `cairn search`...), which runs the same code as `cairn-hook` and
//! `cairn-worker`: `cargo run --bin cairn -- demo` builds only `cairn`, and sibling
//! binaries left over from an older build could disagree with it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use cairn_core::clock;
use cairn_core::store::db;
use cairn_core::store::paths::DataDir;

/// The recorded session: one hook payload per line (see tests/fixtures/demo/README.md).
const SESSION: &str = include_str!("../../../../tests/fixtures/demo/session.jsonl");

/// The recorded session's project.
const PROJECT: &str = "acme-api";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Model provider for the worker: offline (no model, the default), anthropic, openai or
    /// claude-cli (those need their usual key or command).
    #[arg(long, default_value = "offline", value_parser = ["offline", "anthropic", "openai", "claude-cli", "auto"])]
    pub provider: String,
}

/// Runs the demo in `data_dir` (which must be new or empty) or in a fresh temp dir.
pub fn run(args: &DemoArgs, data_dir: Option<&Path>, verbose: u8) -> anyhow::Result<u8> {
    let dir = match data_dir {
        Some(d) => fresh_given(d)?,
        None => fresh_temp()?,
    };
    let bins = Bins::beside_me()?;
    let data = DataDir::new(&dir);
    data.ensure()?;
    let settings = serde_json::json!({
        "model": {"provider": args.provider},
        "worker": {"autostart": false},
    });
    cairn_core::store::paths::create_private(&data.settings())
        .and_then(|mut f| {
            std::io::Write::write_all(
                &mut f,
                (serde_json::to_string_pretty(&settings)? + "\n").as_bytes(),
            )
        })
        .with_context(|| format!("cannot write {}", data.settings().display()))?;

    let events: Vec<&str> = SESSION.lines().filter(|l| !l.trim().is_empty()).collect();
    let (next_session_start, recorded) =
        events.split_last().context("the demo session is empty")?;
    say(&format!(
        "cairn demo: data dir {}\n\n1. A recorded Claude Code session ({} hook events) goes through the hook, one `cairn hook` process per event:",
        dir.display(),
        recorded.len()
    ));
    for event in recorded {
        let answer = bins.hook(&dir, event)?;
        say(&format!("   {:<20} {}", describe(event), brief(&answer)));
    }
    let conn = db::open_data_dir(&data, db::OpenOptions::default())?;
    let count = |sql: &str| -> anyhow::Result<i64> { Ok(conn.query_row(sql, [], |r| r.get(0))?) };
    say(&format!(
        "   → {} prompts recorded, {} jobs queued (skipped tools and private text are not stored)\n",
        count("SELECT count(*) FROM user_prompts")?,
        count("SELECT count(*) FROM pending_messages")?
    ));

    say(&format!(
        "2. The worker (`cairn worker --once`) compresses the queue (provider: {}):",
        args.provider
    ));
    let started = clock::now_ms();
    bins.worker_once(&dir, &args.provider, verbose)?;
    say(&format!(
        "   → {} observations and {} turn summaries from {} jobs in {} ms; {} jobs not done\n",
        count("SELECT count(*) FROM observations")?,
        count("SELECT count(*) FROM session_summaries")?,
        count("SELECT count(*) FROM pending_messages WHERE status = 'done'")?,
        clock::now_ms() - started,
        count("SELECT count(*) FROM pending_messages WHERE status <> 'done'")?,
    ));
    drop(conn);

    say("3. What the next session is told at SessionStart (the hook's answer):\n");
    let answer = bins.hook(&dir, next_session_start)?;
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or("");
    if context.is_empty() {
        say("   (nothing: no memories yet)");
    } else {
        say(context.trim_end());
    }

    say("\n4. cairn search rate limit\n");
    bins.cairn(&dir, &["search", "--project", PROJECT, "rate", "limit"])?;
    say("\n5. cairn timeline --query \"flaky login\" --before 2 --after 2\n");
    bins.cairn(
        &dir,
        &[
            "timeline",
            "--project",
            PROJECT,
            "--query",
            "flaky login",
            "--before",
            "2",
            "--after",
            "2",
        ],
    )?;

    let cairn = bins.as_typed();
    say(&format!(
        "\nThe data dir is kept. Explore it with:\n  export CAIRN_DATA_DIR={}\n  {cairn} status\n  {cairn} search --project {PROJECT} session expiry\n  {cairn} show <id>\n  {cairn} context --project {PROJECT}",
        shell_word(&dir.display().to_string())
    ));
    Ok(crate::exit::OK)
}

fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// `s` as one shell word: as it is when it is plain, else single-quoted.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A given data dir must be new or empty: the demo never mixes its story into real memory.
fn fresh_given(dir: &Path) -> anyhow::Result<PathBuf> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} is not empty; the demo needs a new or empty data dir (omit --data-dir for a temp one)",
                dir.display()
            );
        }
    }
    Ok(dir.to_path_buf())
}

fn fresh_temp() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "cairn-demo-{}-{}",
        std::process::id(),
        clock::now_ms()
    ));
    cairn_core::store::paths::ensure_private_dir(&dir)?;
    Ok(dir)
}

/// `PostToolUse Edit`, `UserPromptSubmit`, ...: what an event is, for the transcript.
fn describe(event: &str) -> String {
    let v: Value = serde_json::from_str(event).unwrap_or(Value::Null);
    let name = v["hook_event_name"].as_str().unwrap_or("?");
    match v["tool_name"].as_str() {
        Some(tool) => format!("{name} {tool}"),
        None => name.to_string(),
    }
}

/// The hook's answer in a few words.
fn brief(answer: &Value) -> &'static str {
    if answer.get("hookSpecificOutput").is_some() {
        "answered with context"
    } else if answer["continue"] == Value::Bool(true) {
        "ok"
    } else {
        "unexpected answer"
    }
}

/// This executable, run as the hook, the worker or the CLI on the demo's data dir.
struct Bins {
    exe: PathBuf,
}

impl Bins {
    fn beside_me() -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot locate the cairn executable")?;
        Ok(Self { exe })
    }

    /// How the person who ran the demo runs this cairn from where they are: `cairn` when
    /// that is this executable on the PATH, `cargo run --bin cairn --` when cargo ran it
    /// (the demo's own README line), else the executable's full path.
    fn as_typed(&self) -> String {
        let me = std::fs::canonicalize(&self.exe).unwrap_or_else(|_| self.exe.clone());
        let on_path = std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path)
                .any(|d| std::fs::canonicalize(d.join("cairn")).is_ok_and(|p| p == me))
        });
        if on_path {
            return "cairn".into();
        }
        if std::env::var_os("CARGO").is_some() {
            let release = me
                .parent()
                .and_then(|d| d.file_name())
                .is_some_and(|n| n == "release");
            return format!(
                "cargo run{} --bin cairn --",
                if release { " --release" } else { "" }
            );
        }
        shell_word(&self.exe.display().to_string())
    }

    fn command(&self, role: &str, data: &Path) -> Command {
        let mut c = Command::new(&self.exe);
        if role != "cairn" {
            c.arg(role.trim_start_matches("cairn-"));
        }
        c.env("CAIRN_DATA_DIR", data)
            .env("CAIRN_WORKER__AUTOSTART", "false")
            .env_remove(cairn_core::SUPPRESS_HOOKS_ENV);
        c
    }

    /// Feeds one payload to `cairn-hook`; returns its JSON answer.
    fn hook(&self, data: &Path, payload: &str) -> anyhow::Result<Value> {
        let mut child = self
            .command("cairn-hook", data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start cairn-hook")?;
        child
            .stdin
            .take()
            .context("no stdin")?
            .write_all(payload.as_bytes())
            .context("cannot write to cairn-hook")?;
        let out = child
            .wait_with_output()
            .context("cairn-hook did not finish")?;
        if !out.status.success() {
            bail!("cairn-hook exited with {}", out.status);
        }
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "cairn-hook answered something that is not JSON: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    fn worker_once(&self, data: &Path, provider: &str, verbose: u8) -> anyhow::Result<()> {
        let mut c = self.command("cairn-worker", data);
        c.args(["--once", "--log-stderr"])
            .env("CAIRN_MODEL__PROVIDER", provider);
        if verbose == 0 {
            c.env("CAIRN_LOG__LEVEL", "warn");
        }
        let out = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .context("cannot start cairn-worker")?;
        let log = String::from_utf8_lossy(&out.stderr);
        for line in log.lines() {
            say(&format!("   worker: {line}"));
        }
        if !out.status.success() {
            bail!("cairn-worker --once failed ({})", out.status);
        }
        Ok(())
    }

    /// Runs a `cairn` command on the demo data dir, its output going straight to ours.
    fn cairn(&self, data: &Path, args: &[&str]) -> anyhow::Result<()> {
        let status = self
            .command("cairn", data)
            .args(args)
            .stdin(Stdio::null())
            .status()
            .context("cannot start cairn")?;
        // 1 means "no results", which the demo shows as it is.
        if !matches!(status.code(), Some(0 | 1)) {
            bail!("cairn {} failed ({status})", args.join(" "));
        }
        Ok(())
    }
}
