//! Logging setup with fern, once per process. Hooks log to a file only (their stdout is
//! protocol); the worker to a daily file plus stderr under a process manager; the CLI to
//! stderr.

use std::path::Path;

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
    /// The daily file, or stderr when the file cannot be opened (the hook: its stdout is
    /// protocol, and a log line must land somewhere).
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
    let mut file_open = false;
    if matches!(
        target,
        Target::File | Target::FileAndStderr | Target::FileElseStderr
    ) && let Some(dir) = logs_dir
        && cairn_core::paths::ensure_private_dir(dir).is_ok()
    {
        let date = cairn_core::clock::date_utc(cairn_core::clock::now_ms());
        let path = dir.join(format!("{name}-{date}.log"));
        if let Ok(file) = fern::log_file(&path) {
            dispatch = dispatch.chain(file);
            file_open = true;
        }
    }
    let stderr = match target {
        Target::Stderr | Target::FileAndStderr => true,
        Target::FileElseStderr => !file_open,
        Target::File => false,
    };
    if stderr {
        dispatch = dispatch.chain(std::io::stderr());
    }
    let _ = dispatch.apply();
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
