//! `cairn install` / `cairn uninstall`: cairn's hooks in Claude Code's settings. The merge
//! itself is `cairn_core::ops::install` (pure); this module reads and writes the file, keeps a
//! backup of it, and says what it did.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use cairn_core::ops::install::{self, Detection, EventChange};

use super::Ctx;

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Change this project's `.claude/settings.json` instead of `~/.claude/settings.json`.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = ".")]
    pub project: Option<PathBuf>,
}

/// `~/.claude/settings.json`.
pub fn user_settings_path() -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("HOME is not set: cannot find ~/.claude/settings.json")?;
    Ok(Path::new(&home).join(".claude").join("settings.json"))
}

/// `<dir>/.claude/settings.json`, with `dir` made absolute.
pub fn project_settings_path(dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = std::path::absolute(dir)
        .with_context(|| format!("cannot resolve project directory {}", dir.display()))?;
    Ok(dir.join(".claude").join("settings.json"))
}

fn target(args: &InstallArgs) -> anyhow::Result<PathBuf> {
    match &args.project {
        Some(dir) => project_settings_path(dir),
        None => user_settings_path(),
    }
}

/// The `cairn-hook` binary next to the running `cairn`.
pub fn hook_program() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the cairn executable")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    Ok(exe.with_file_name(install::HOOK_PROGRAM))
}

/// Reads a Claude Code settings file; `None` when it does not exist.
pub fn read_settings(path: &Path) -> anyhow::Result<Option<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(Some(Value::Null));
    }
    let v = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON; fix it first", path.display()))?;
    Ok(Some(v))
}

/// Whether cairn's hooks are in a settings file, for `cairn doctor`: `None` when the file
/// does not exist.
pub fn installed_hooks(path: &Path) -> anyhow::Result<Option<Detection>> {
    let command = install::hook_command(&hook_program()?);
    Ok(read_settings(path)?.map(|v| install::detect(&v, &command)))
}

pub fn install(_ctx: &Ctx, args: &InstallArgs) -> anyhow::Result<u8> {
    let path = target(args)?;
    let program = hook_program()?;
    if !program.is_file() {
        anyhow::bail!(
            "{} not found next to cairn; build or install cairn-hook first",
            program.display()
        );
    }
    let command = install::hook_command(&program);
    let current = read_settings(&path)?;
    let (new, changes) = install::install(current.as_ref().unwrap_or(&Value::Null), &command)
        .with_context(|| format!("cannot add hooks to {}", path.display()))?;
    if !changes.changed() {
        crate::cli::out::say!(
            "cairn hooks are already in {}; nothing changed",
            path.display()
        );
        return Ok(crate::exit::OK);
    }
    let backup = save(&path, current.is_some(), &new)?;
    let added = changes.with(EventChange::Added);
    let updated = changes.with(EventChange::Updated);
    if !added.is_empty() {
        crate::cli::out::say!(
            "added cairn hooks to {} for {}",
            path.display(),
            added.join(", ")
        );
    }
    if !updated.is_empty() {
        crate::cli::out::say!(
            "updated cairn hooks in {} for {} (now {command})",
            path.display(),
            updated.join(", ")
        );
    }
    crate::cli::out::say!("hook command: {command}");
    if let Some(b) = backup {
        crate::cli::out::say!("backup of the previous file: {}", b.display());
    }
    Ok(crate::exit::OK)
}

pub fn uninstall(_ctx: &Ctx, args: &InstallArgs) -> anyhow::Result<u8> {
    let path = target(args)?;
    let Some(current) = read_settings(&path)? else {
        crate::cli::out::say!("no {}; nothing to remove", path.display());
        return Ok(crate::exit::OK);
    };
    let (new, changes) = install::uninstall(&current)
        .with_context(|| format!("cannot remove hooks from {}", path.display()))?;
    if !changes.changed() {
        crate::cli::out::say!("no cairn hooks in {}; nothing changed", path.display());
        return Ok(crate::exit::OK);
    }
    let backup = save(&path, true, &new)?;
    crate::cli::out::say!(
        "removed cairn hooks from {} for {}",
        path.display(),
        changes.with(EventChange::Removed).join(", ")
    );
    if let Some(b) = backup {
        crate::cli::out::say!("backup of the previous file: {}", b.display());
    }
    Ok(crate::exit::OK)
}

/// Writes the new settings atomically (temp file + rename, same permissions), after
/// copying the old file to a timestamped backup beside it. Returns the backup's path.
fn save(path: &Path, existed: bool, value: &Value) -> anyhow::Result<Option<PathBuf>> {
    let dir = path.parent().context("settings path has no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut backup = None;
    let mut mode = 0o600;
    if existed {
        let stamp = cairn_core::clock::iso_utc(cairn_core::clock::now_ms()).replace([':', '-'], "");
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut b = dir.join(format!("{name}.cairn-backup-{stamp}"));
        let mut n = 1;
        while b.exists() {
            b = dir.join(format!("{name}.cairn-backup-{stamp}-{n}"));
            n += 1;
        }
        cairn_core::store::paths::copy_private(path, &b)
            .with_context(|| format!("cannot back up {} to {}", path.display(), b.display()))?;
        if let Ok(m) = std::fs::metadata(path) {
            mode = m.permissions().mode() & 0o777;
        }
        backup = Some(b);
    }
    let mut text = serde_json::to_string_pretty(value).context("cannot encode settings")?;
    text.push('\n');
    let tmp = dir.join(format!(".{}.cairn-tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = cairn_core::store::paths::create_private(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(backup)
}
