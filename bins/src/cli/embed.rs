//! `cairn embed`: get the sentence model and give every memory its vector, with progress.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use cairn_core::recall::embed::{model, store};
use cairn_core::store::db::{self, OpenOptions};

use super::{Ctx, explain};
use crate::exit;

/// Search by meaning needs a sentence model (all-MiniLM-L6-v2, 90 MB, runs on the CPU).
/// With no flag, embeds every memory still waiting for its vector (the worker does the
/// same in the background; this is the way to do it now, with progress).
///
/// The model's files go to `embed.model_dir` (default: models/all-MiniLM-L6-v2 in the
/// data dir). `--fetch` downloads them from `embed.fetch_url`; `--from DIR` copies them
/// from a directory that holds them (model.safetensors, tokenizer.json, config.json).
/// Both check the files against the model's published SHA-256 sums before using them.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Download the model's files first (nothing else downloads them).
    #[arg(long, conflicts_with = "from")]
    pub fetch: bool,
    /// Copy the model's files from this directory first.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// Only report the model and how many memories have vectors.
    #[arg(long, conflicts_with_all = ["fetch", "from"])]
    pub status: bool,
    /// Machine-readable output (with --status).
    #[arg(long, requires = "status")]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &EmbedArgs) -> anyhow::Result<u8> {
    let settings = &ctx.settings().embed;
    let dir = model::model_dir(settings, &ctx.data_dir);
    let tty = std::io::stderr().is_terminal();
    if args.fetch || args.from.is_some() {
        let bar = bytes_bar(tty);
        let mut progress = |file: &str, done: u64, total: u64| {
            if total > 0 {
                bar.set_length(total);
            }
            bar.set_message(file.to_string());
            bar.set_position(done);
        };
        let result = match &args.from {
            Some(src) => model::install_from(src, &dir, &mut progress),
            None => model::fetch(&settings.fetch_url, &dir, &mut progress),
        };
        bar.finish_and_clear();
        result.map_err(explain)?;
        eprintln!("model installed in {}", dir.display());
    }
    let source = match model::locate(settings, &ctx.data_dir) {
        Ok(s) => Some(s),
        Err(why) if args.status => {
            report_status(ctx, None, Some(&why.to_string()), args.json)?;
            return Ok(exit::NEGATIVE);
        }
        Err(why) => anyhow::bail!("{why}"),
    };
    let source = source.context("no model")?;
    if args.status {
        report_status(ctx, Some(&source.id), None, args.json)?;
        return Ok(exit::OK);
    }
    // Only a data dir that exists: embedding is for memories already stored.
    let mut conn = db::open_data_dir(
        &ctx.data_dir,
        OpenOptions {
            create: false,
            ..OpenOptions::default()
        },
    )
    .map_err(explain)?;
    let bert = source.load().map_err(explain)?;
    store::requeue_other_models(&mut conn, &source.id).map_err(explain)?;
    let start = store::progress(&conn, &source.id).map_err(explain)?;
    let bar = count_bar(tty, start.queued);
    let mut done = 0u64;
    loop {
        let n =
            store::backfill(&mut conn, &bert, &source.id, settings.batch_size).map_err(explain)?;
        if n == 0 {
            break;
        }
        done += n as u64;
        bar.set_position(done);
    }
    bar.finish_and_clear();
    let now = store::progress(&conn, &source.id).map_err(explain)?;
    println!(
        "embedded {done} memories with {}; {} have vectors",
        source.id, now.embedded
    );
    Ok(exit::OK)
}

fn report_status(
    ctx: &Ctx,
    model: Option<&str>,
    unavailable: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let progress = match (model, super::open(ctx)) {
        (Some(m), Ok(conn)) => Some(store::progress(&conn, m).map_err(explain)?),
        _ => None,
    };
    if json {
        let v = serde_json::json!({
            "model": model,
            "unavailable": unavailable,
            "embedded": progress.map(|p| p.embedded),
            "queued": progress.map(|p| p.queued),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    match (model, unavailable) {
        (Some(m), _) => println!("model: {m}"),
        (None, Some(why)) => println!("model: none ({why})"),
        (None, None) => println!("model: none"),
    }
    if let Some(p) = progress {
        println!(
            "memories with vectors: {}, waiting: {}",
            p.embedded, p.queued
        );
    }
    Ok(())
}

fn bytes_bar(tty: bool) -> ProgressBar {
    if !tty {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>20} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn count_bar(tty: bool, total: u64) -> ProgressBar {
    if !tty {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "embedding [{bar:30}] {pos}/{len} memories, {per_sec}, {eta} left",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
