//! `cairn`: the command-line interface. One module per area; each owns its argument structs
//! and a `run` function returning an exit code.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use cairn_core::settings::{Loaded, Settings};
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

use crate::exit;

pub mod capture;
pub mod embed;
pub mod ops;
pub mod out;
pub mod recall;
pub mod sync;
pub mod ui;

/// cairn: a persistent memory for Claude Code.
///
/// Hooks (`cairn-hook`) capture every prompt, tool call and turn end into a durable queue;
/// the worker (`cairn-worker`) compresses them into searchable observations and turn
/// summaries; this command searches them, shows what the next session will be told, and
/// keeps the whole thing healthy.
///
/// `cairn hook` and `cairn worker` run the hook and the worker (the same code as the
/// `cairn-hook` and `cairn-worker` binaries; `cairn worker --help` for its flags).
///
/// Exit codes: 0 success (with results), 1 no results or something needs attention,
/// 2 error.
#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Data dir to use instead of CAIRN_DATA_DIR or ~/.cairn.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// More log output on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a recorded Claude Code session through the real pipeline and show the result.
    ///
    /// The demo never touches your memory: it ignores CAIRN_DATA_DIR and works in a new
    /// temp dir, or in --data-dir when given (which must be new or empty). The data dir is
    /// kept afterwards for you to explore with the other commands.
    Demo(ops::DemoArgs),
    /// Show whether cairn is healthy: worker, queue, skipped jobs, quarantine, tokens.
    Status(ops::StatusArgs),
    /// Inspect, replay and purge the job queue.
    #[command(subcommand)]
    Queue(ops::QueueCommand),
    /// List, show and clear hook inputs cairn could not use.
    #[command(subcommand)]
    Quarantine(ops::QuarantineCommand),
    /// Check cairn's settings, the database, files, hooks, worker and model provider, and
    /// say what to fix.
    Doctor(ops::DoctorArgs),
    /// Print the effective settings and where each value came from; `set` and `unset`
    /// change one.
    ///
    /// `cairn config set KEY VALUE` writes one setting to settings.json in the data dir,
    /// `cairn config unset KEY` removes it (back to its default). The value is parsed for
    /// the key's type, then the whole file as it would be is checked exactly as loading
    /// checks it: an unknown key or a bad value is an error naming the key and what it
    /// allows, and nothing is written. Every other key of the file is kept; the file is
    /// replaced atomically and stays readable by you alone. A CAIRN_SECTION__KEY
    /// environment variable still wins over the file (the list says where each value comes
    /// from). Hooks and the viewer's context page read the file afresh each time; a running
    /// worker on SIGHUP or when it starts again.
    Config(ops::ConfigArgs),
    /// Take an online backup of the database.
    Backup(ops::BackupArgs),
    /// Replace the database with a backup (refused while a worker runs).
    Restore(ops::RestoreArgs),
    /// Export observations, summaries and prompts.
    Export(ops::ExportArgs),
    /// Import memories: Claude Code's transcripts, a cairn export, or a claude-mem database.
    #[command(subcommand)]
    Import(ops::ImportCommand),
    /// Search observations, summaries and prompts.
    Search(recall::SearchArgs),
    /// Show what happened around an observation or a search hit, in time order.
    Timeline(recall::TimelineArgs),
    /// Show full observations by id.
    Show(recall::ShowArgs),
    /// Print the context block the next session of a project would get, or (--prompt,
    /// --file) what a prompt or a file's read would receive, and why.
    Context(recall::ContextArgs),
    /// Save a memory by hand.
    Save(recall::SaveArgs),
    /// Get the sentence model for search by meaning, and embed memories now.
    Embed(embed::EmbedArgs),
    /// Open the memory in a local web viewer (a loopback address only, with an access token).
    Ui(ui::UiArgs),
    /// Delete memories for good: no vector, no search hit, not brought back by an import.
    Forget(ui::ForgetArgs),
    /// Sync this machine's memory with the other machines of a space (push, then pull);
    /// `cairn sync init` / `join` set it up, `cairn sync status` shows it, `cairn sync
    /// leave` ends it. Nothing is pushed until the setting sync.projects names projects
    /// ("*" for all); what the others push is pulled regardless.
    Sync(sync::SyncArgs),
    /// Run the MCP server on stdio (for `claude mcp add`).
    Mcp(recall::McpArgs),
    /// Add cairn's hooks to Claude Code's settings and register its MCP server.
    ///
    /// The MCP server goes into `~/.claude.json` (user scope: every project), also with
    /// --project; with --project --shared into the project's `.mcp.json`. With
    /// CLAUDE_CONFIG_DIR set, as Claude Code does, `~/.claude/settings.json` and
    /// `~/.claude.json` are `$CLAUDE_CONFIG_DIR/settings.json` and `.claude.json` there.
    Install(capture::InstallArgs),
    /// Remove exactly the hooks `cairn install` added, and its MCP server.
    ///
    /// The MCP server in `~/.claude.json` is removed by the last uninstall of the installs
    /// that use it: `cairn uninstall --project` keeps the one `cairn install` uses, and the
    /// other way round. A cairn plugin that Claude Code enables is named with the command
    /// that removes it (`claude plugin uninstall cairn@cairn`).
    Uninstall(capture::InstallArgs),
}

/// What every command gets: the data dir and the effective settings.
#[derive(Debug)]
pub struct Ctx {
    pub data_dir: DataDir,
    pub loaded: Loaded,
    pub verbose: u8,
}

impl Ctx {
    pub fn settings(&self) -> &Settings {
        &self.loaded.settings
    }
}

/// Parses the command line and runs the command. Errors are printed once, as
/// `error: ...`, and exit with code 2.
pub fn main() -> ExitCode {
    // `cairn hook ...` and `cairn worker ...` are `cairn-hook` and `cairn-worker`.
    let mut args = std::env::args_os().skip(1);
    match args.next().as_ref().and_then(|a| a.to_str()) {
        Some("hook") => return crate::entry::hook::main(args.filter_map(|a| a.into_string().ok())),
        Some("worker") => {
            return crate::entry::worker::main(std::iter::once("cairn worker".into()).chain(args));
        }
        _ => {}
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::ERROR
            } else {
                exit::OK
            };
            let _ = e.print();
            return exit::code(code);
        }
    };
    // `restore` replaces a damaged database itself, `doctor` reports it: the others
    // recover it first (`recover_damage`), then run once more.
    let recovers = !matches!(
        cli.command,
        Command::Restore(_) | Command::Doctor(_) | Command::Demo(_)
    );
    let data_dir = cli.data_dir.clone();
    let mut result = run(cli);
    if let Err(e) = &result
        && recovers
        && let Some(cause) = damage(e)
    {
        result = match recover_damage(data_dir.as_deref(), &cause) {
            Ok(()) => Cli::try_parse().map_err(anyhow::Error::new).and_then(run),
            Err(why) => Err(why),
        };
    }
    match result {
        Ok(code) => exit::code(code),
        Err(e) => {
            out::note!("error: {}", exit::chain(&e));
            exit::code(exit::ERROR)
        }
    }
}

/// The damage a failed command met (`Error::is_corrupt`, on a core error or a SQLite one),
/// as the core error recovery is raised with.
fn damage(e: &anyhow::Error) -> Option<cairn_core::Error> {
    e.chain().find_map(|c| {
        if let Some(core) = c.downcast_ref::<cairn_core::Error>() {
            return core
                .is_corrupt()
                .then(|| cairn_core::Error::Invalid(core.to_string()));
        }
        let sqlite = c.downcast_ref::<rusqlite::Error>()?;
        cairn_core::error::is_damage(sqlite).then(|| cairn_core::Error::Invalid(sqlite.to_string()))
    })
}

/// Recovers the damaged database of the data dir (`store::recover`) when no worker runs on
/// it, under the worker lock, and says so on stderr; with a worker running, that worker
/// recovers it (every path of it detects damage), and the error says to try again.
fn recover_damage(
    data_dir: Option<&std::path::Path>,
    cause: &cairn_core::Error,
) -> anyhow::Result<()> {
    let dir = match data_dir {
        Some(d) => DataDir::new(d),
        None => DataDir::from_env()?,
    };
    let recovered = cairn_core::store::recover::recover_unless_worker(
        &dir,
        cause,
        Settings::lock_wait(&dir),
        cairn_core::clock::now_ms(),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "{cause}; recovering it failed ({e}): restore a backup with `cairn restore PATH` (daily backups are in the data dir's backups/)"
        )
    })?;
    let Some(done) = recovered else {
        anyhow::bail!(
            "{cause}; the worker running on it is recovering it: run the command again in a moment (`cairn status` shows the recovery)"
        );
    };
    out::note!("cairn: {cause}; recovered it: {}", done.describe());
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        _ => log::LevelFilter::Debug,
    };
    crate::logging::init("cairn", None, crate::logging::Target::Stderr, level);
    let data_dir = match &cli.data_dir {
        Some(d) => DataDir::new(d),
        None => DataDir::from_env()?,
    };
    // `demo` makes its own data dir; it must not trip over a broken settings file elsewhere.
    if let Command::Demo(args) = &cli.command {
        return ops::demo(args, cli.data_dir.as_deref(), cli.verbose);
    }
    let loaded = match Settings::load(&data_dir) {
        Ok(l) => l,
        // `cairn status` and `cairn doctor` are where a broken settings file is reported
        // (with what waits behind it, or as a failed check beside the others), so they run
        // on the defaults rather than failing.
        // `cairn config set` / `unset` is how a bad value is put right: the writer checks
        // the file itself.
        Err(e)
            if matches!(
                cli.command,
                Command::Status(_)
                    | Command::Doctor(_)
                    | Command::Config(ops::ConfigArgs {
                        change: Some(_),
                        ..
                    })
            ) =>
        {
            if !matches!(cli.command, Command::Doctor(_)) {
                log::warn!("{e}");
            }
            Settings::load_from(std::path::Path::new(""), std::iter::empty(), &[])?
        }
        Err(e) => return Err(e.into()),
    };
    for w in &loaded.warnings {
        log::warn!("{w}");
    }
    let ctx = Ctx {
        data_dir,
        loaded,
        verbose: cli.verbose,
    };
    match cli.command {
        Command::Demo(_) => unreachable!("handled above"),
        Command::Status(a) => ops::status(&ctx, &a),
        Command::Queue(c) => ops::queue(&ctx, &c),
        Command::Quarantine(c) => ops::quarantine(&ctx, &c),
        Command::Doctor(a) => ops::doctor(&ctx, &a),
        Command::Config(a) => ops::config(&ctx, &a),
        Command::Backup(a) => ops::backup(&ctx, &a),
        Command::Restore(a) => ops::restore(&ctx, &a),
        Command::Export(a) => ops::export(&ctx, &a),
        Command::Import(c) => ops::import(&ctx, &c),
        Command::Search(a) => recall::search(&ctx, &a),
        Command::Timeline(a) => recall::timeline(&ctx, &a),
        Command::Show(a) => recall::show(&ctx, &a),
        Command::Context(a) => recall::context(&ctx, &a),
        Command::Save(a) => recall::save(&ctx, &a),
        Command::Embed(a) => embed::run(&ctx, &a),
        Command::Mcp(a) => recall::mcp(&ctx, &a),
        Command::Sync(a) => sync::run(&ctx, &a),
        Command::Ui(a) => ui::ui(&ctx, &a),
        Command::Forget(a) => ui::forget(&ctx, &a),
        Command::Install(a) => capture::install(&ctx, &a),
        Command::Uninstall(a) => capture::uninstall(&ctx, &a),
    }
}

/// How the CLI opens the database: never creates it, waits briefly on other writers.
pub(crate) fn read_opts() -> OpenOptions {
    OpenOptions {
        busy_timeout: Duration::from_secs(3),
        create: false,
        upgrade: true,
    }
}

/// Opens the existing database of the data dir, or explains why it cannot. A database
/// that cannot be written (a read-only file system, permissions) is opened read-only,
/// saying so on stderr: reading commands work, writing ones fail at their first write.
pub(crate) fn open(ctx: &Ctx) -> anyhow::Result<rusqlite::Connection> {
    let err = match db::open_data_dir(&ctx.data_dir, read_opts()) {
        Ok(conn) => return Ok(conn),
        Err(e) => e,
    };
    let path = ctx.data_dir.db();
    let Some(why) = cairn_core::store::paths::read_only_reason(&path)
        .or_else(|| cairn_core::store::paths::read_only_reason(ctx.data_dir.root()))
    else {
        return Err(explain(err));
    };
    let (conn, how) = db::open_read_only(&path, read_opts().busy_timeout).map_err(explain)?;
    let seen = match how {
        db::ReadOnly::Shared => "",
        db::ReadOnly::Immutable => " (the file alone: changes still in its WAL are not seen)",
    };
    out::note!("note: {why}; the database is read without writing{seen}");
    Ok(conn)
}

/// A core error as one line that says what to do.
pub(crate) fn explain(e: cairn_core::Error) -> anyhow::Error {
    use cairn_core::Error;
    match &e {
        Error::Locked { .. } => anyhow::anyhow!(
            "{e}; try again when it is done (an import, restore or backup may be running)"
        ),
        _ if e.is_busy() => {
            anyhow::anyhow!("the database is locked by another process; try again when it is done")
        }
        // Kept as it is: the command is run again once the database is recovered.
        Error::Damaged { .. } => anyhow::Error::new(e),
        Error::NotADatabase { .. } => anyhow::anyhow!(
            "{e}; restore a backup with `cairn restore PATH` (daily backups are in the data dir's backups/), or move the file away"
        ),
        _ => anyhow::Error::new(e),
    }
}
