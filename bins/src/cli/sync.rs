//! `cairn sync`: this machine's memory to and from a sync space on a PostgreSQL server.

use anyhow::Context;
use clap::{Args, Subcommand};

use cairn_core::clock;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::sync::{self, Setup, SyncError, live};
use cairn_core::text::plural;

use super::Ctx;
use super::out::{self, say};
use crate::exit;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SyncArgs {
    #[command(subcommand)]
    pub command: Option<SyncCommand>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SyncCommand {
    /// Create a sync space on a PostgreSQL server and put this machine in it; prints the
    /// space's key once, for `cairn sync join` on the other machines.
    Init(InitArgs),
    /// Put this machine in an existing sync space.
    Join(JoinArgs),
    /// Take this machine out of its sync space (to join another, or none): forgets the key,
    /// the URL and what was sent; the memories stay here, and a space joined next receives
    /// them all. Nothing on the server changes.
    Leave(LeaveArgs),
    /// Show the server, the space, the devices seen, the last push and pull, how far behind,
    /// and the last error with its fix; then asks the server how far behind this device is
    /// now (unless --local).
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The server: postgres://user[:password]@host[:port]/dbname[?sslmode=require]. Without
    /// a password in it, PGPASSWORD or the password file (PGPASSFILE, ~/.pgpass) is used.
    #[arg(long)]
    pub url: String,
    /// This machine's name as the other devices show it (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Print JSON: {"key": ...}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The server, as for `cairn sync init`.
    #[arg(long)]
    pub url: String,
    /// The space's key, as `cairn sync init` printed it; `-` reads it from stdin (out of
    /// the process list and the shell's history).
    #[arg(long)]
    pub key: String,
    /// This machine's name as the other devices show it (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LeaveArgs {
    /// Leave even though the space has not received everything from here (it never will;
    /// the memories stay here).
    #[arg(long)]
    pub force: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Only what the worker and `cairn sync` recorded here: do not connect to the server.
    #[arg(long)]
    pub local: bool,
}

fn open_creating(ctx: &Ctx) -> anyhow::Result<rusqlite::Connection> {
    let opts = OpenOptions {
        create: true,
        ..super::read_opts()
    };
    db::open_data_dir(&ctx.data_dir, opts).map_err(super::explain)
}

fn explain(e: SyncError) -> anyhow::Error {
    match e {
        SyncError::Store(e) => super::explain(e),
        e => anyhow::Error::new(e),
    }
}

pub fn run(ctx: &Ctx, args: &SyncArgs) -> anyhow::Result<u8> {
    match &args.command {
        None => once(ctx, args.json),
        Some(SyncCommand::Init(a)) => init(ctx, a),
        Some(SyncCommand::Join(a)) => join(ctx, a),
        Some(SyncCommand::Leave(a)) => leave(ctx, a),
        Some(SyncCommand::Status(a)) => status(ctx, a),
    }
}

/// Ends the process with an error when a call to the server waits `sync.answer_secs` for
/// its answer (a frozen server would hold it forever). Nothing is half-written: every step
/// of a sync is one transaction here and one there.
fn give_up_on_silence(ctx: &Ctx) -> live::Watch {
    live::watch(&ctx.data_dir, answer_limit(ctx), |e| {
        out::note!("error: {e}");
        if let Some(fix) = e.fix() {
            out::note!("  fix: {fix}");
        }
        std::process::exit(exit::ERROR.into());
    })
}

fn answer_limit(ctx: &Ctx) -> std::time::Duration {
    std::time::Duration::from_secs(ctx.settings().sync.answer_secs.max(1))
}

fn once(ctx: &Ctx, json: bool) -> anyhow::Result<u8> {
    let mut conn = super::open(ctx)?;
    let _watch = give_up_on_silence(ctx);
    let moved = sync::sync_once(
        &ctx.data_dir,
        &mut conn,
        &ctx.settings().sync,
        clock::now_ms(),
    )
    .map_err(|e| {
        // Only an error that passes on its own is caught up by the next sync.
        let context = match e {
            SyncError::Unreachable(_) | SyncError::Server(_) | SyncError::NotAnswering(_) => {
                "sync failed (nothing is lost: the next sync catches up)"
            }
            _ => "sync failed",
        };
        explain(e).context(context)
    })?;
    if json {
        say!("{}", serde_json::to_string(&moved)?);
    } else {
        if ctx.settings().sync.projects.is_empty() {
            say!(
                "nothing of this machine is shared: sync.projects is empty (cairn config set sync.projects '*', or the projects' names)"
            );
        }
        if let Some(device) = &moved.new_device {
            say!(
                "This data dir goes on in the space as new device {device}: it was restored from a backup, or copied from another machine. Its old log, if any, is read like another device's, so nothing is lost."
            );
        }
        say!(
            "pushed {}; pulled {} ({} added, {} forgotten)",
            plural(moved.pushed as i64, "record", "records"),
            moved.pulled,
            plural(moved.added as i64, "memory", "memories"),
            moved.forgotten
        );
    }
    Ok(exit::OK)
}

fn joined(setup: &Setup, json: bool, show_key: bool) -> anyhow::Result<u8> {
    if json {
        let mut v = serde_json::json!({
            "space": setup.key.space,
            "device": setup.device,
            "server": setup.url.display(),
        });
        if show_key {
            v["key"] = setup.key.encode().into();
        }
        say!("{v}");
    } else {
        say!(
            "this machine ({}) is in sync space {} on {}",
            setup.device_name,
            setup.key.space,
            setup.url.display()
        );
        if show_key {
            say!("\nthe space's key (shown once; kept in the data dir as sync.key):\n");
            say!("    {}\n", setup.key.encode());
            say!("on each other machine: cairn sync join --url URL --key KEY");
        }
        say!("choose what syncs with the setting sync.projects (none by default, \"*\" for all)");
    }
    Ok(exit::OK)
}

fn init(ctx: &Ctx, args: &InitArgs) -> anyhow::Result<u8> {
    let name = args.name.clone().unwrap_or_else(sync::host_name);
    let existing = existing_store(ctx)?;
    let _watch = give_up_on_silence(ctx);
    let key = sync::create_space(&ctx.data_dir, &args.url).map_err(explain)?;
    let setup = enter(ctx, existing, &key, &args.url, &name)?;
    joined(&setup, args.json, true)
}

fn join(ctx: &Ctx, args: &JoinArgs) -> anyhow::Result<u8> {
    let name = args.name.clone().unwrap_or_else(sync::host_name);
    let existing = existing_store(ctx)?;
    let _watch = give_up_on_silence(ctx);
    let typed = match args.key.as_str() {
        "-" => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("cannot read the key from stdin")?;
            line
        }
        key => key.to_string(),
    };
    let key = sync::check_space(&ctx.data_dir, &args.url, &typed).map_err(explain)?;
    let setup = enter(ctx, existing, &key, &args.url, &name)?;
    joined(&setup, args.json, false)
}

/// The data dir's store when there is one, opened before the server is asked anything: a
/// damaged or newer store fails first. A missing one is created only once the server
/// said yes, so a failed init or join leaves nothing behind.
fn existing_store(ctx: &Ctx) -> anyhow::Result<Option<rusqlite::Connection>> {
    Ok(match ctx.data_dir.db().exists() {
        true => Some(super::open(ctx)?),
        false => None,
    })
}

fn enter(
    ctx: &Ctx,
    existing: Option<rusqlite::Connection>,
    key: &sync::SpaceKey,
    url: &str,
    name: &str,
) -> anyhow::Result<Setup> {
    let mut conn = match existing {
        Some(c) => c,
        None => open_creating(ctx)?,
    };
    sync::enter(&ctx.data_dir, &mut conn, key, url, name).map_err(explain)
}

fn leave(ctx: &Ctx, args: &LeaveArgs) -> anyhow::Result<u8> {
    let mut conn = super::open(ctx)?;
    let (space, dropped) =
        sync::leave(&ctx.data_dir, &mut conn, &ctx.settings().sync, args.force).map_err(explain)?;
    if args.json {
        say!("{}", serde_json::json!({"left": space, "dropped": dropped}));
    } else {
        say!("this machine left sync space {space}; its memories stay here");
        if dropped > 0 {
            say!(
                "{} never reached it",
                plural(dropped, "record or memory", "records or memories")
            );
        }
        say!(
            "to join a space: cairn sync join --url URL --key KEY (or cairn sync init for a new one)"
        );
    }
    Ok(exit::OK)
}

fn status(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<u8> {
    let conn = super::open(ctx)?;
    let Some(s) = sync::status(&ctx.data_dir, &conn, &ctx.settings().sync).map_err(explain)? else {
        if args.json {
            say!("null");
        } else {
            say!("{}", SyncError::NotSetUp);
        }
        return Ok(exit::NEGATIVE);
    };
    let server_now = match args.local {
        true => None,
        false => Setup::load(&ctx.data_dir, &conn)
            .map_err(explain)?
            .map(|setup| live::server_now(setup, &conn, answer_limit(ctx))),
    };
    let failing = s.last_error.is_some() || server_now.as_ref().is_some_and(|n| !n.ok);
    if args.json {
        let mut v = serde_json::to_value(&s)?;
        v["server_now"] = serde_json::to_value(&server_now)?;
        say!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if failing { exit::NEGATIVE } else { exit::OK });
    }
    let now = clock::now_ms();
    let when = |t: Option<i64>| match t {
        Some(t) => format!(
            "{} ({} ago)",
            clock::iso_utc(t),
            clock::span(now - t, false)
        ),
        None => "never".into(),
    };
    say!("server:    {}", s.server);
    say!("space:     {}", s.space);
    say!("device:    {} ({})", s.device_name, s.device);
    say!(
        "unsent:    {} (records queued, memories not yet staged)",
        s.unsent
    );
    say!("last push: {}", when(s.last_push_at));
    say!("last pull: {}", when(s.last_pull_at));
    say!(
        "behind:    {} records at the last pull{}",
        s.behind,
        match s.listening {
            Some(true) => "; the worker listens for the other devices' pushes",
            Some(false) => "; the worker polls (sync.listen is off)",
            None => "",
        }
    );
    if let Some(e) = &s.last_error {
        let since = s
            .last_error_at
            .map_or(String::new(), |t| format!(" (since {})", clock::iso_utc(t)));
        say!("last error: {e}{since}");
        if let Some(fix) = &s.fix {
            say!("  fix: {fix}");
        }
        if let Some(t) = s.retry_at {
            say!("  the worker tries again at {}", clock::iso_utc(t));
        }
    }
    for d in &s.devices {
        let of = d.last_seq.map_or(String::new(), |l| format!(" of #{l}"));
        let name = if d.name.is_empty() {
            "(no records yet)"
        } else {
            &d.name
        };
        let earlier = if d.former {
            " — this data dir's log before it went on as a new device"
        } else {
            ""
        };
        say!(
            "  device {name} ({}): read to #{}{of}{earlier}",
            d.device,
            d.read_to
        );
    }
    match &server_now {
        Some(n) if n.ok => say!(
            "server now: {} behind, {} with a log",
            plural(n.behind.unwrap_or(0), "record", "records"),
            plural(
                n.devices.unwrap_or(0) as i64,
                "other device",
                "other devices"
            )
        ),
        Some(n) => {
            say!(
                "server now: {}",
                n.error.as_deref().unwrap_or("unknown error")
            );
            if let Some(fix) = &n.fix {
                say!("  fix: {fix}");
            }
        }
        None => {}
    }
    Ok(if failing { exit::NEGATIVE } else { exit::OK })
}
