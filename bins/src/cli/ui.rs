//! `cairn ui` (the local web viewer) and `cairn forget` (deleting memories for good).

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::Args;

use cairn_core::clock;
use cairn_core::memory::forget::{self, Memory};
use cairn_core::memory::kind::Kind;
use cairn_core::recall::searcher::Searcher;
use cairn_core::store::db;
use cairn_core::viewer::Viewer;

use super::Ctx;
use super::out::{note, print};
use crate::exit;

#[derive(Debug, Args)]
pub struct UiArgs {
    /// Port on the viewer's loopback address; 0, the default, is the last run's, else a
    /// free one. Another port than a running viewer's starts a second viewer.
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    pub port: u16,
    /// Print the URL but do not open a browser.
    #[arg(long)]
    pub no_open: bool,
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// Memories to forget, as search lists them: `12` (observation), `S3` (turn summary),
    /// `P7` (prompt).
    #[arg(value_name = "ID", value_parser = parse_reference, required_unless_present = "session")]
    pub ids: Vec<(Kind, i64)>,
    /// Forget every memory of this session instead.
    #[arg(long, value_name = "SESSION_ID", conflicts_with = "ids")]
    pub session: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

fn parse_reference(s: &str) -> Result<(Kind, i64), String> {
    Kind::parse_reference(s).ok_or_else(|| {
        format!(
            "'{s}' is not a record id (12 for an observation, S3 for a summary, P7 for a prompt)"
        )
    })
}

/// Starts the viewer and serves until Ctrl-C (or SIGTERM).
pub fn ui(ctx: &Ctx, args: &UiArgs) -> anyhow::Result<u8> {
    // One viewer per data dir: a second `cairn ui` (or one asking for the running one's
    // port) opens the running one's page (a new one would move to another address and
    // leave the first one's bookmarks behind).
    if let Some(running) = cairn_core::viewer::access::running(&ctx.data_dir)
        && (args.port == 0 || args.port == running.port)
    {
        let url = running.url();
        print(&format!(
            "cairn ui is already running (process {}): {url}\n(Ctrl-C in its terminal stops it; `--port N` starts another)\n",
            running.pid.unwrap_or_default()
        ))?;
        if !args.no_open {
            open_browser(&url);
        }
        return Ok(exit::OK);
    }
    let searcher = Searcher::open(&ctx.settings().embed, &ctx.data_dir)
        .with_min_relevance(ctx.settings().search.min_relevance);
    let viewer = Viewer::bind(
        ctx.data_dir.clone(),
        ctx.settings().clone(),
        args.port,
        searcher,
    )
    .map_err(super::explain)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("failed to catch signals")?;
    }
    let url = viewer.url();
    print(&format!("cairn ui: {url}\n(Ctrl-C stops it)\n"))?;
    if !args.no_open {
        open_browser(&url);
    }
    viewer.run(&stop).map_err(super::explain)?;
    Ok(exit::OK)
}

/// Opens `url` with the desktop's opener when there is one; never fails.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        // Reaped in the background so it leaves no zombie.
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => log::warn!("no browser opened ({opener}: {e}); open the URL yourself"),
    }
}

/// Deletes memories for good, with a tombstone so no import brings them back.
pub fn forget(ctx: &Ctx, args: &ForgetArgs) -> anyhow::Result<u8> {
    let mut conn = super::open(ctx)?;
    let (memories, what) = match &args.session {
        Some(sid) => (
            db::write(&mut conn, |tx| forget::session_memories(tx, sid)).map_err(super::explain)?,
            format!("every memory of session {sid}"),
        ),
        None => (
            args.ids
                .iter()
                .map(|&(kind, id)| Memory::of(kind, id))
                .collect::<Vec<_>>(),
            // Named below, once it is known which exist.
            String::new(),
        ),
    };
    let memories = if args.session.is_some() {
        memories
    } else {
        let found = forget::existing(&conn, &memories).map_err(super::explain)?;
        let missing: Vec<String> = memories
            .iter()
            .filter(|m| !found.contains(m))
            .map(|m| m.reference())
            .collect();
        if !missing.is_empty() {
            note!(
                "no memory {} (never saved, or forgotten already)",
                missing.join(", ")
            );
        }
        found
    };
    if memories.is_empty() {
        match &args.session {
            Some(sid) => note!("nothing to forget: session {sid} has no memories"),
            None => note!("nothing to forget"),
        }
        return Ok(exit::NEGATIVE);
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            anyhow::bail!("forgetting cannot be undone: confirm with --yes");
        }
        let what = match &args.session {
            Some(_) => what,
            None => memories
                .iter()
                .map(|m| m.reference())
                .collect::<Vec<_>>()
                .join(", "),
        };
        let records = match memories.len() {
            1 => "1 record".to_string(),
            n => format!("{n} records"),
        };
        eprint!("forget {what} ({records}) for good? [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            note!("nothing forgotten");
            return Ok(exit::NEGATIVE);
        }
    }
    let done = db::write(&mut conn, |tx| {
        forget::forget(tx, &memories, clock::now_ms())
    })
    .map_err(super::explain)?;
    print(&format!(
        "forgotten: {} observations, {} summaries, {} prompts\n",
        done.observations, done.summaries, done.prompts
    ))?;
    Ok(if done.total() == 0 {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}
