//! `cairn demo`, `status`, `queue`, `doctor`, `config`, `backup`, `restore`, `export` and
//! `import`: running and looking after cairn.
//!
//! Commands that only read open the database with `create: false`, so a wrong data dir is
//! an error instead of a new empty database, and with a short busy timeout, so a database
//! held by another process is reported instead of waited on. Every failure is one
//! `error: ...` line saying what is wrong and what to do, exit code 2.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};

use cairn_core::queue::admin::Selector;
use cairn_core::queue::claim::JobStatus;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::text::{self, Unit};

use super::{Ctx, explain, open, read_opts};

mod data;
mod demo;
mod health;
mod quarantine;
mod queue;
mod transcripts;

pub use data::{backup, export, import, restore};
pub use demo::DemoArgs;
pub use health::{config, doctor, status};
pub use quarantine::quarantine;
pub use queue::queue;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Clear what has been read: the count of hook events that could not be kept and the
    /// notices of repairs cairn made on its own.
    #[arg(long)]
    pub acknowledge: bool,
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// List jobs, newest first. Exits 1 when none match.
    List {
        /// Only jobs in this state: pending, claimed, done or skipped.
        #[arg(long, value_parser = parse_status)]
        status: Option<JobStatus>,
        /// Only jobs of this Claude Code session.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// At most this many jobs (0: all).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one job: its state, payload and every failed attempt.
    Show {
        /// The job id (from `cairn queue list`).
        id: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put skipped jobs back in the queue with their attempts reset, and say how many.
    ///
    /// Only skipped jobs are replayed: pending, claimed and done jobs are left alone.
    /// Exits 1 when nothing was replayed.
    Replay {
        #[command(flatten)]
        which: SkippedJobs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete skipped jobs that will never succeed (look first with `cairn queue show`),
    /// with their failed attempts, and say how many. `cairn status` stops reporting them.
    ///
    /// Only skipped jobs are deleted: pending, claimed and done jobs are left alone. The
    /// event is gone for good; replay instead if it may still succeed. Exits 1 when
    /// nothing was discarded.
    Discard {
        #[command(flatten)]
        which: SkippedJobs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete processed (`done`) jobs older than a duration. Pending, claimed and skipped
    /// jobs are never purged.
    Purge {
        /// Like 14d, 12h, 2w (default: queue.retention_days).
        #[arg(long, value_name = "D", value_parser = parse_duration)]
        older_than: Option<i64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Which skipped jobs `cairn queue replay` or `discard` acts on: exactly one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct SkippedJobs {
    /// These job ids.
    #[arg(long, num_args = 1.., value_name = "N")]
    id: Vec<i64>,
    /// The skipped jobs of this session.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Jobs skipped since a date (2026-11-22, 2026-11-22T10:00Z) or a duration ago
    /// (30m, 12h, 7d).
    #[arg(long, value_name = "T", value_parser = parse_since)]
    since: Option<Since>,
    /// Every skipped job.
    #[arg(long)]
    all_skipped: bool,
}

impl SkippedJobs {
    fn selector(&self, now: i64) -> Selector {
        if !self.id.is_empty() {
            Selector::Ids(self.id.clone())
        } else if let Some(s) = &self.session {
            Selector::Session(s.clone())
        } else if let Some(t) = self.since {
            Selector::Since(t.resolve(now))
        } else {
            // clap requires one of the four.
            Selector::AllSkipped
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// List quarantined hook inputs, newest first: kind (`invalid`: unreadable, needs
    /// attention; `uncaptured`: an event cairn does not capture, harmless), event, size and
    /// reason. Exits 1 when there are none.
    List {
        /// At most this many (0: all).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON (with the stored copies).
        #[arg(long)]
        json: bool,
    },
    /// Show one quarantined input: why, when, and the stored copy (cleaned and bounded the
    /// way capture cleans events).
    Show {
        /// The id (from `cairn quarantine list`).
        id: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete quarantined inputs once looked at; `cairn status` stops reporting them.
    /// Exits 1 when nothing matched.
    #[command(group(ArgGroup::new("which").required(true).args(["id", "older_than", "all"])))]
    Clear {
        /// These ids.
        #[arg(long, num_args = 1.., value_name = "N")]
        id: Vec<i64>,
        /// Those received longer ago than this (like 7d, 12h).
        #[arg(long, value_name = "D", value_parser = parse_duration)]
        older_than: Option<i64>,
        /// All of them.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Give quarantined inputs another try through the capture path (after an upgrade
    /// that understands them): each one now usable is written as the event it was, at the
    /// time it arrived, and leaves the quarantine; the others stay. A copy that was cut to
    /// its bound cannot be replayed. Exits 1 when nothing was replayed.
    #[command(group(ArgGroup::new("which").required(true).args(["id", "all"])))]
    Replay {
        /// These ids.
        #[arg(long, num_args = 1.., value_name = "N")]
        id: Vec<i64>,
        /// All of them, oldest first.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Also make a real, minimal test call to the configured model provider.
    #[arg(long)]
    pub online: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ConfigArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub change: Option<ConfigCommand>,
}

/// `cairn config set` / `unset` (explained in `cairn config --help`).
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Set KEY (`section.key`, as `cairn config` lists them) to VALUE in settings.json.
    ///
    /// The value is parsed for the key's type: true or false, a number, text, a list as
    /// `a,b` or as JSON. Nothing is written when the key is unknown or the value is not
    /// allowed. Examples:
    ///
    ///   cairn config set context.budget_tokens 2000
    ///
    ///   cairn config set recall.at_prompt false
    ///
    ///   cairn config set capture.skip_tools TodoWrite,Read
    Set {
        /// The setting, e.g. context.budget_tokens.
        key: String,
        /// Its new value.
        value: String,
    },
    /// Remove KEY from settings.json: it goes back to its default.
    Unset {
        /// The setting, e.g. context.budget_tokens.
        key: String,
    },
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the backup (default: backups/cairn-manual-<time>.db in the data dir).
    /// Must not exist.
    #[arg(long, value_name = "PATH")]
    pub to: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup file (from `cairn backup` or `backups/` in the data dir).
    pub path: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Only this project (default: all).
    #[arg(long)]
    pub project: Option<String>,
    /// `jsonl` (for `cairn import jsonl`) or `markdown` (for reading).
    #[arg(long, default_value = "jsonl", value_parser = ["jsonl", "markdown"])]
    pub format: String,
    /// Write to this file instead of stdout (must not exist).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Import a `cairn export --format jsonl` file. Records already present are skipped.
    Jsonl {
        /// The export file (`-` for stdin).
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild past sessions from Claude Code's transcripts (~/.claude/projects): prompts,
    /// tool calls and turn ends, cleaned and queued as the hooks would have. Events already
    /// captured are skipped; running it again adds nothing new. Prints what it found and
    /// the model calls it will cost, and asks before queueing.
    Transcripts {
        /// Transcript files (`<session>.jsonl`) or folders of them (default: every project
        /// under Claude Code's projects folder).
        paths: Vec<PathBuf>,
        /// Only this project (a name as `cairn search --project` takes it; `*` and `?` glob).
        #[arg(long)]
        project: Option<String>,
        /// Only transcripts written since then: a date or a duration ago (30d).
        #[arg(long, value_parser = parse_since)]
        since: Option<Since>,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Only report what would be imported and what it would cost.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Import sessions, observations, summaries and prompts from claude-mem's database.
    /// Running it again adds nothing new.
    ClaudeMem {
        /// The database (default: ~/.claude-mem/claude-mem.db).
        path: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// When `--since` points: an absolute time or a duration before now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    At(i64),
    Ago(i64),
}

impl Since {
    pub fn resolve(self, now: i64) -> i64 {
        match self {
            Since::At(t) => t,
            Since::Ago(d) => now.saturating_sub(d),
        }
    }
}

fn parse_since(s: &str) -> Result<Since, String> {
    if let Some(t) = cairn_core::clock::parse_iso_utc(s) {
        return Ok(Since::At(t));
    }
    parse_duration(s).map(Since::Ago).map_err(|_| {
        "expected a date (2026-11-22, 2026-11-22T10:00Z) or a duration ago (30m, 12h, 7d)".into()
    })
}

fn parse_duration(s: &str) -> Result<i64, String> {
    cairn_core::clock::parse_duration_ms(s)
        .ok_or_else(|| "expected a duration like 30s, 15m, 12h, 7d or 2w".into())
}

fn parse_status(s: &str) -> Result<JobStatus, String> {
    JobStatus::parse(s).ok_or_else(|| "expected pending, claimed, done or skipped".into())
}

/// `cairn demo`: see [`demo`].
pub fn demo(args: &DemoArgs, data_dir: Option<&Path>, verbose: u8) -> anyhow::Result<u8> {
    demo::run(args, data_dir, verbose)
}

/// Opens the database, creating the data dir and database when missing (for the commands
/// whose purpose is to fill one: import, restore).
/// Imports write in many transactions while hooks and the worker write too, so they wait
/// longer for their turn.
fn open_or_create(ctx: &Ctx) -> anyhow::Result<rusqlite::Connection> {
    db::open_data_dir(
        &ctx.data_dir,
        OpenOptions {
            create: true,
            busy_timeout: Duration::from_secs(15),
            upgrade: true,
        },
    )
    .map_err(explain)
}

/// Appends a line to a `String` buffer (printed at the end with [`emit`]).
macro_rules! outln {
    ($o:expr) => {
        $o.push('\n')
    };
    ($o:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($arg)*);
    }};
}
use outln;

/// Writes to stdout; a closed pipe (`cairn ... | head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}

/// Prints a value as pretty JSON on stdout.
fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}

/// `5s`, `3m`, `2h 5m`, `4d 3h`.
fn age(ms: i64) -> String {
    cairn_core::clock::span(ms, false)
}

/// `512 B`, `3.2 KiB`, `1.5 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The first line of `s`, at most `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    let mut out = text::head(line, max, Unit::Chars).to_string();
    if out.len() < line.len() || s.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        for (ms, want) in [
            (0, "0s"),
            (59_000, "59s"),
            (60_000, "1m"),
            (3_700_000, "1h 1m"),
            (90_000_000, "1d 1h"),
        ] {
            assert_eq!(age(ms), want);
        }
        assert_eq!(bytes(10), "10 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(one_line("abc\ndef", 10), "abc…");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }

    #[test]
    fn since_takes_dates_and_durations() {
        assert_eq!(parse_since("1970-01-02"), Ok(Since::At(86_400_000)));
        assert_eq!(
            parse_since("2h").map(|s| s.resolve(10_000_000)),
            Ok(2_800_000)
        );
        assert!(parse_since("soon").is_err());
    }
}
