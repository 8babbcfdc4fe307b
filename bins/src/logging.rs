//! Logging setup with fern, once per process. Hooks log to a file only (their stdout is
//! protocol); the worker to a daily file plus stderr under a process manager; the CLI to
//! stderr, as `cairn: warning: …` (no time or process: a person reads it at once).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use log::LevelFilter;

/// Where a process logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `logs/<name>-YYYY-MM-DD.log` in the data dir.
    File,
    /// The daily file and stderr.
    FileAndStderr,
    /// stderr only.
    Stderr,
    /// The daily file, opened at the first line logged, or stderr when it cannot be
    /// opened (the hook: its stdout is protocol, a log line must land somewhere, and most
    /// runs log nothing, so they need not pay for opening the file).
    FileElseStderr,
}

/// Sets up the global logger. Failing to open the log file is not fatal: the process runs
/// on without a file log (a hook must never fail because of logging).
pub fn init(name: &str, logs_dir: Option<&Path>, target: Target, level: LevelFilter) {
    let mut dispatch = fern::Dispatch::new()
        .level(level)
        .level_for("ureq", LevelFilter::Warn)
        .level_for("ureq_proto", LevelFilter::Warn)
        .level_for("rustls", LevelFilter::Warn);
    let pid = std::process::id();
    let name_owned = name.to_string();
    dispatch = dispatch.format(move |out, message, record| {
        if target == Target::Stderr {
            // A command's own lines, read by a person at once: what and how bad, the
            // module only where a developer asked for detail (-vv).
            let (level, detail) = match record.level() {
                log::Level::Error => ("error", false),
                log::Level::Warn => ("warning", false),
                log::Level::Info => ("info", false),
                log::Level::Debug => ("debug", true),
                log::Level::Trace => ("trace", true),
            };
            return match detail {
                true => out.finish(format_args!(
                    "{name_owned}: {level}: {}: {message}",
                    record.target()
                )),
                false => out.finish(format_args!("{name_owned}: {level}: {message}")),
            };
        }
        out.finish(format_args!(
            "{} {} {}[{}] {}: {}",
            cairn_core::clock::iso_utc(cairn_core::clock::now_ms()),
            record.level(),
            name_owned,
            pid,
            record.target(),
            message
        ))
    });
    let daily = logs_dir.map(|dir| {
        let date = cairn_core::clock::date_utc(cairn_core::clock::now_ms());
        (dir, dir.join(format!("{name}-{date}.log")))
    });
    let mut file_open = false;
    match (target, daily) {
        (Target::FileElseStderr, Some((dir, path))) => {
            let lazy = LazyFile {
                dir: dir.to_path_buf(),
                path,
                file: Mutex::new(None),
            };
            dispatch = dispatch.chain(fern::Output::call(move |record| lazy.write(record)));
            file_open = true;
        }
        (Target::File | Target::FileAndStderr, Some((dir, path))) => {
            if cairn_core::store::paths::ensure_private_dir(dir).is_ok()
                && let Ok(file) = cairn_core::store::paths::append_private(&path)
            {
                dispatch = dispatch.chain(file);
                file_open = true;
            }
        }
        _ => {}
    }
    let stderr = match target {
        Target::Stderr | Target::FileAndStderr => true,
        Target::FileElseStderr => !file_open,
        Target::File => false,
    };
    if stderr {
        // Not `chain(std::io::stderr())`: fern panics when stderr is closed
        // (`cairn doctor 2>&1 | head -1`); a line nobody can read is dropped.
        dispatch = dispatch.chain(fern::Output::call(|record| {
            let _ = writeln!(std::io::stderr(), "{}", record.args());
        }));
    }
    let _ = dispatch.apply();
}

/// A log file opened when the first line arrives; when it cannot be opened, the lines go
/// to stderr instead.
struct LazyFile {
    dir: PathBuf,
    path: PathBuf,
    /// Not tried yet (`None`), opened (`Some(Some(_))`) or failed (`Some(None)`).
    file: Mutex<Option<Option<File>>>,
}

impl LazyFile {
    fn write(&self, record: &log::Record) {
        let Ok(mut slot) = self.file.lock() else {
            return;
        };
        let file = slot.get_or_insert_with(|| {
            cairn_core::store::paths::ensure_private_dir(&self.dir).ok()?;
            cairn_core::store::paths::append_private(&self.path).ok()
        });
        // One write(2) per line: an append of one buffer is not interleaved with the
        // lines of other hooks writing the same file at the same moment.
        let line = format!("{}\n", record.args());
        let written = match file {
            Some(f) => f.write_all(line.as_bytes()).is_ok(),
            None => false,
        };
        if !written {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

/// Deletes daily log files older than `keep_days`.
pub fn prune(logs_dir: &Path, keep_days: u64, now_ms: i64) {
    let Ok(entries) = std::fs::read_dir(logs_dir) else {
        return;
    };
    let cutoff = now_ms - (keep_days as i64) * 86_400_000;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(date) = name
            .strip_suffix(".log")
            .and_then(|n| n.rsplit_once('-').map(|_| n))
        else {
            continue;
        };
        // name-YYYY-MM-DD: the date is the last 10 characters.
        let Some(day) = date.get(date.len().saturating_sub(10)..) else {
            continue;
        };
        if let Some(t) = cairn_core::clock::parse_iso_utc(day)
            && t < cutoff
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
