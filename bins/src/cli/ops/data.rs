//! `cairn backup`, `restore`, `export`, `import jsonl`, `import claude-mem` (and `import
//! transcripts`, in `transcripts`).

use std::io::{BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::Context;

use cairn_core::clock;
use cairn_core::ops::claude_mem;
use cairn_core::ops::exchange::{self, Counts, Format};
use cairn_core::store::backup as core_backup;

use super::{
    BackupArgs, ExportArgs, ImportCommand, RestoreArgs, bytes, emit, explain, open, open_or_create,
    outln, print_json, read_opts,
};
use crate::cli::Ctx;
use crate::exit;

/// `cairn backup`: an online, consistent copy of the database.
pub fn backup(ctx: &Ctx, args: &BackupArgs) -> anyhow::Result<u8> {
    let conn = open(ctx)?;
    let dest = match &args.to {
        Some(p) => p.clone(),
        None => core_backup::manual_path(&ctx.data_dir, clock::now_ms()),
    };
    let info = core_backup::online(&conn, &dest).map_err(explain)?;
    if args.to.is_none() {
        let removed = core_backup::prune_manual(&ctx.data_dir, ctx.settings().backup.keep_manual)
            .map_err(explain)?;
        if removed > 0 {
            log::info!(
                "removed {removed} old manual backups (backup.keep_manual = {})",
                ctx.settings().backup.keep_manual
            );
        }
    }
    if args.json {
        print_json(&info)?;
    } else {
        let mut o = String::new();
        outln!(
            o,
            "backup written to {} ({}); restore it with `cairn restore {}`",
            info.path.display(),
            bytes(info.bytes),
            info.path.display()
        );
        emit(&o)?;
    }
    Ok(exit::OK)
}

/// `cairn restore PATH`.
pub fn restore(ctx: &Ctx, args: &RestoreArgs) -> anyhow::Result<u8> {
    let info = core_backup::restore(&ctx.data_dir, &args.path, read_opts(), clock::now_ms())
        .map_err(|e| match &e {
            cairn_core::Error::NotADatabase { path, .. }
            | cairn_core::Error::SchemaTooNew { path, .. }
                if *path == args.path =>
            {
                anyhow::anyhow!("{e}; nothing was changed: pick another backup (daily ones are in the data dir's backups/)")
            }
            _ => explain(e),
        })?;
    if args.json {
        print_json(&info)?;
    } else {
        let mut o = String::new();
        match &info.replaced_kept_at {
            Some(kept) => outln!(
                o,
                "restored {} into {}; the database it replaced is kept at {}",
                info.from.display(),
                ctx.data_dir.db().display(),
                kept.display()
            ),
            None => outln!(
                o,
                "restored {} into {}",
                info.from.display(),
                ctx.data_dir.db().display()
            ),
        }
        emit(&o)?;
    }
    Ok(exit::OK)
}

fn describe(c: &Counts) -> String {
    format!(
        "{} sessions, {} prompts, {} observations, {} summaries",
        c.sessions, c.prompts, c.observations, c.summaries
    )
}

/// `cairn export`: to stdout or a new private file.
pub fn export(ctx: &Ctx, args: &ExportArgs) -> anyhow::Result<u8> {
    let format = Format::parse(&args.format)
        .with_context(|| format!("unknown format {}: use jsonl or markdown", args.format))?;
    let mut conn = open(ctx)?;
    let project = args.project.as_deref();
    let run = |conn: &mut rusqlite::Connection, out: &mut dyn Write| match format {
        Format::Jsonl => exchange::export_jsonl(conn, project, out, clock::now_ms()),
        Format::Markdown => exchange::export_markdown(conn, project, out),
    };
    let counts = match &args.output {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .with_context(|| {
                    format!("cannot create {} (it must not exist yet)", path.display())
                })?;
            let mut out = std::io::BufWriter::new(file);
            let counts = run(&mut conn, &mut out).map_err(explain)?;
            out.flush()
                .with_context(|| format!("cannot write {}", path.display()))?;
            crate::cli::out::note!("exported {} to {}", describe(&counts), path.display());
            counts
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match run(&mut conn, &mut out).and_then(|c| {
                out.flush().map_err(|source| cairn_core::Error::Io {
                    action: "write",
                    path: "stdout".into(),
                    source,
                })?;
                Ok(c)
            }) {
                Ok(c) => c,
                // A closed pipe (`| head`) is not an error.
                Err(cairn_core::Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    return Ok(exit::OK);
                }
                Err(e) => return Err(explain(e)),
            }
        }
    };
    if project.is_some() && counts.total() == 0 {
        crate::cli::out::note!("nothing stored for project {}", project.unwrap_or_default());
        return Ok(exit::NEGATIVE);
    }
    Ok(exit::OK)
}

/// An import source that cannot be read, said about the source.
fn source_error(source: &std::path::Path, e: cairn_core::Error) -> anyhow::Error {
    match e {
        cairn_core::Error::NotADatabase { reason, .. } => {
            let jsonl = source
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("jsonl") || x.eq_ignore_ascii_case("json"));
            anyhow::anyhow!(
                "{} is not a claude-mem database ({reason}); nothing was imported. Pass claude-mem's SQLite database (by default ~/.claude-mem/claude-mem.db){}",
                source.display(),
                if jsonl {
                    format!(
                        ", or import a cairn export with `cairn import jsonl {}`",
                        source.display()
                    )
                } else {
                    String::new()
                }
            )
        }
        other => explain(other),
    }
}

/// `cairn import jsonl FILE` and `cairn import claude-mem [PATH]`.
pub fn import(ctx: &Ctx, cmd: &ImportCommand) -> anyhow::Result<u8> {
    match cmd {
        ImportCommand::Jsonl { file, json } => {
            // Read and check the whole file before touching (or creating) the database.
            let records = if file.as_os_str() == "-" {
                exchange::parse_jsonl(std::io::stdin().lock())
            } else {
                let f = std::fs::File::open(file)
                    .with_context(|| format!("cannot open {}", file.display()))?;
                exchange::parse_jsonl(BufReader::new(f))
            }
            .map_err(|e| anyhow::anyhow!("{}: {e}; nothing was imported", file.display()))?;
            let mut conn = open_or_create(ctx)?;
            let report = exchange::import_records(&mut conn, &records)
                .map_err(|e| anyhow::anyhow!("{}: {}", file.display(), explain(e)))?;
            if *json {
                print_json(&report)?;
            } else {
                let mut o = String::new();
                outln!(
                    o,
                    "imported {} into {}",
                    describe(&report.added),
                    ctx.data_dir.db().display()
                );
                if report.existing.total() > 0 {
                    outln!(o, "already there: {}", describe(&report.existing));
                }
                if report.forgotten.total() > 0 {
                    outln!(o, "forgotten, left out: {}", describe(&report.forgotten));
                }
                emit(&o)?;
            }
            Ok(exit::OK)
        }
        ImportCommand::Transcripts {
            paths,
            project,
            since,
            yes,
            dry_run,
            json,
        } => super::transcripts::import(
            ctx,
            &super::transcripts::Args {
                paths,
                project: project.as_deref(),
                since: since.map(|s| s.resolve(clock::now_ms())),
                yes: *yes,
                dry_run: *dry_run,
                json: *json,
            },
        ),
        ImportCommand::ClaudeMem { path, json } => {
            let source = match path {
                Some(p) => p.clone(),
                None => {
                    let home = std::env::var_os("HOME")
                        .filter(|h| !h.is_empty())
                        .map(PathBuf::from)
                        .context("HOME is not set: pass the claude-mem database's path")?;
                    claude_mem::default_path(&home)
                }
            };
            // Check the source before creating anything; what is wrong with it is about the
            // source, never the data dir's database.
            drop(claude_mem::open_source(&source).map_err(|e| source_error(&source, e))?);
            let mut conn = open_or_create(ctx)?;
            let report =
                claude_mem::import(&mut conn, &source, clock::now_ms()).map_err(explain)?;
            if *json {
                print_json(&report)?;
                return Ok(exit::OK);
            }
            let mut o = String::new();
            outln!(
                o,
                "imported from {} into {}",
                source.display(),
                ctx.data_dir.db().display()
            );
            outln!(o, "added          {}", describe(&report.added));
            if report.existing.total() > 0 {
                outln!(o, "already there  {}", describe(&report.existing));
            }
            if report.forgotten.total() > 0 {
                outln!(
                    o,
                    "forgotten      {} (left out)",
                    describe(&report.forgotten)
                );
            }
            for (reason, n) in &report.skipped_rows {
                outln!(o, "skipped        {n} × {reason}");
            }
            for t in &report.missing_tables {
                outln!(o, "missing table  {t} (this claude-mem version has none)");
            }
            for (table, cols) in &report.skipped_columns {
                outln!(o, "not imported   {table}: {}", cols.join(", "));
            }
            emit(&o)?;
            Ok(exit::OK)
        }
    }
}
