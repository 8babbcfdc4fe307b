//! `cairn install` / `cairn uninstall`: cairn's hooks in Claude Code's settings and its MCP
//! server in `~/.claude.json` (or a project's `.mcp.json`). The merges themselves are
//! `cairn_core::ops::install` (pure); this module reads and writes the files (through
//! symlinks), keeps backups of them in the data dir, and says what it did.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use cairn_core::ops::claude_settings::{self, Scope};
use cairn_core::ops::install::{self, Detection, EventChange};
use cairn_core::store::paths::ClaudeCode;

use super::Ctx;

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Change this project's `.claude/settings.local.json` (Claude Code's file for one
    /// person's settings of a project: add it to the repository's .gitignore if git
    /// lists it) instead of `~/.claude/settings.json`. DIR must exist.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = ".")]
    pub project: Option<PathBuf>,
    /// With --project: the team-shared `.claude/settings.json` and `.mcp.json` instead,
    /// naming `cairn-hook` and `cairn` without a path (each machine's PATH finds them).
    #[arg(long, requires = "project")]
    pub shared: bool,
    /// Leave the MCP server's registration alone.
    #[arg(long)]
    pub no_mcp: bool,
}

/// Where Claude Code keeps its files (`CLAUDE_CONFIG_DIR`, else under `HOME`).
fn claude_code() -> anyhow::Result<ClaudeCode> {
    ClaudeCode::from_env()
        .context("neither CLAUDE_CONFIG_DIR nor HOME is set: cannot find Claude Code's settings")
}

/// The settings file and the MCP file an install changes, and the commands it writes.
struct Target {
    settings: PathBuf,
    mcp: PathBuf,
    hook_command: String,
    mcp_command: String,
    /// Who this install is among the users of the MCP server in `~/.claude.json`
    /// ([`install::McpUsers`]); `None` with `--shared`, whose `.mcp.json` is the project's.
    mcp_user: Option<String>,
    /// With `--project`, the project's directory.
    project: Option<PathBuf>,
}

fn target(args: &InstallArgs) -> anyhow::Result<Target> {
    let project = args
        .project
        .as_deref()
        .map(|dir| {
            std::path::absolute(dir)
                .with_context(|| format!("cannot resolve project directory {}", dir.display()))
        })
        .transpose()?;
    let (settings, mcp, mcp_user) = match &project {
        Some(dir) => {
            if !dir.is_dir() {
                anyhow::bail!("project directory {} does not exist", dir.display());
            }
            let file = if args.shared {
                "settings.json"
            } else {
                "settings.local.json"
            };
            let (mcp, user) = if args.shared {
                (dir.join(".mcp.json"), None)
            } else {
                // The same project however DIR was written (`proj/`, through a link).
                let me = dir.canonicalize().unwrap_or_else(|_| dir.clone());
                (claude_code()?.user_file, Some(me.display().to_string()))
            };
            (dir.join(".claude").join(file), mcp, user)
        }
        None => {
            let claude = claude_code()?;
            (
                claude.settings(),
                claude.user_file,
                Some(install::USER_INSTALL.to_string()),
            )
        }
    };
    let (hook_command, mcp_command) = if args.shared {
        // Shared with the team: no path of this machine.
        (install::HOOK_PROGRAM.to_string(), "cairn".to_string())
    } else {
        let cairn = current_cairn()?;
        (
            install::hook_command(&cairn.with_file_name(install::HOOK_PROGRAM)),
            cairn.display().to_string(),
        )
    };
    Ok(Target {
        settings,
        mcp,
        hook_command,
        mcp_command,
        mcp_user,
        project,
    })
}

/// The running `cairn`, symlinks resolved.
fn current_cairn() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the cairn executable")?;
    Ok(exe.canonicalize().unwrap_or(exe))
}

/// The `cairn-hook` binary next to the running `cairn`.
pub fn hook_program() -> anyhow::Result<PathBuf> {
    Ok(current_cairn()?.with_file_name(install::HOOK_PROGRAM))
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

/// The model provider the worker will use, and why, for the install's last line. Runs
/// nothing: asking `claude` whether it is logged in would let the CLI migrate (rewrite)
/// the user's Claude Code settings, which install keeps as they were; the worker asks
/// when it starts, and `cairn doctor` says what it found.
fn provider_line(ctx: &Ctx) -> String {
    let env = |k: &str| std::env::var(k).ok();
    match cairn_core::worker::model::resolve_without_asking(&ctx.settings().model, &env) {
        Ok(r) => format!("model provider: {} ({})", r.provider, r.why),
        Err(login) => format!(
            "model provider: claude-cli if {0} is logged in (your subscription), else offline \
             ({1} is not set; the worker asks {0} when it starts, `cairn doctor` shows the answer)",
            login.command, login.key_var
        ),
    }
}

pub fn install(ctx: &Ctx, args: &InstallArgs) -> anyhow::Result<u8> {
    let t = target(args)?;
    let program = hook_program()?;
    if !args.shared && !program.is_file() {
        anyhow::bail!(
            "{} not found next to cairn; build or install cairn-hook first",
            program.display()
        );
    }
    let command = &t.hook_command;
    let path = &t.settings;
    let current = read_settings(path)?;
    let (new, changes) = install::install(current.as_ref().unwrap_or(&Value::Null), command)
        .with_context(|| format!("cannot add hooks to {}", path.display()))?;
    if changes.changed() {
        let written = save(ctx, path, current.is_some(), &new)?;
        let added = changes.with(EventChange::Added);
        let updated = changes.with(EventChange::Updated);
        if !added.is_empty() {
            crate::cli::out::say!(
                "added cairn hooks to {} for {}",
                written.display(),
                added.join(", ")
            );
        }
        if !updated.is_empty() {
            crate::cli::out::say!(
                "updated cairn hooks in {} for {} (now {command})",
                written.display(),
                updated.join(", ")
            );
        }
        crate::cli::out::say!("hook command: {command}");
    } else {
        crate::cli::out::say!(
            "cairn hooks are already in {}; nothing changed there",
            path.display()
        );
    }
    for other in other_installs(&t)? {
        crate::cli::out::note!(
            "warning: cairn is also installed by {other}: Claude Code would hand every event to cairn twice; keep one (`cairn uninstall` removes the hooks of ~/.claude/settings.json, `cairn uninstall --project` a project's, `claude plugin uninstall cairn@cairn` the plugin)"
        );
    }
    if !args.no_mcp {
        let current = read_settings(&t.mcp)?;
        let doc = current.as_ref().unwrap_or(&Value::Null);
        let registered = install::has_mcp(doc);
        let (new, changed) = install::add_mcp(doc, &t.mcp_command)
            .with_context(|| format!("cannot add the MCP server to {}", t.mcp.display()))?;
        if changed {
            let written = save(ctx, &t.mcp, current.is_some(), &new)?;
            crate::cli::out::say!(
                "registered the MCP server \"{}\" ({} mcp) in {}",
                install::MCP_NAME,
                t.mcp_command,
                written.display()
            );
        } else {
            crate::cli::out::say!(
                "the MCP server \"{}\" is already in {}; nothing changed there",
                install::MCP_NAME,
                t.mcp.display()
            );
        }
        if let Some(me) = &t.mcp_user {
            let mut users = read_mcp_users(ctx, &t.mcp, registered)?;
            users.add(me);
            write_mcp_users(ctx, &t.mcp, &users)?;
        }
    }
    // The data dir and its database from now on, owner-only: `cairn status` and `cairn
    // doctor` work before the first event.
    cairn_core::store::db::open_data_dir(&ctx.data_dir, Default::default())
        .map_err(crate::cli::explain)?;
    crate::cli::out::say!("{}", provider_line(ctx));
    Ok(crate::exit::OK)
}

pub fn uninstall(ctx: &Ctx, args: &InstallArgs) -> anyhow::Result<u8> {
    let t = target(args)?;
    let path = &t.settings;
    match read_settings(path)? {
        None => crate::cli::out::say!("no {}; no hooks to remove", path.display()),
        Some(current) => {
            let (new, changes) = install::uninstall(&current)
                .with_context(|| format!("cannot remove hooks from {}", path.display()))?;
            if changes.changed() {
                let written = put_back(ctx, path, &new)?;
                crate::cli::out::say!(
                    "removed cairn hooks from {} for {}",
                    written.display(),
                    changes.with(EventChange::Removed).join(", ")
                );
            } else {
                crate::cli::out::say!(
                    "no cairn hooks in {}; nothing changed there",
                    path.display()
                );
            }
        }
    }
    if !args.no_mcp {
        unregister_mcp(ctx, &t)?;
    }
    plugins_left(&t)?;
    Ok(crate::exit::OK)
}

/// The Claude Code settings files that apply to `project` (the user's alone without one),
/// with their documents and scopes: those that exist and read as JSON (a file that cannot
/// be read sets nothing for Claude Code either).
fn settings_in_force(project: Option<&Path>) -> anyhow::Result<Vec<(PathBuf, Value, Scope)>> {
    let mut files = vec![(claude_code()?.settings(), Scope::User)];
    if let Some(dir) = project {
        files.push((dir.join(".claude/settings.json"), Scope::Project));
        files.push((dir.join(".claude/settings.local.json"), Scope::Local));
    }
    Ok(files
        .into_iter()
        .filter_map(|(file, scope)| {
            let doc = read_settings(&file).ok().flatten()?;
            Some((file, doc, scope))
        })
        .collect())
}

/// The other ways cairn captures where this install does: its hooks or an enabled cairn
/// plugin in the user's settings and in the project's two settings files (the project
/// `--project` names, else the current directory), this install's own file aside.
fn other_installs(t: &Target) -> anyhow::Result<Vec<String>> {
    let dir = match &t.project {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let same = |a: &Path, b: &Path| {
        a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    };
    let mut out = Vec::new();
    for (file, doc, _) in settings_in_force(Some(&dir))? {
        if same(&file, &t.settings) {
            continue;
        }
        if !claude_settings::cairn_hooks(&doc).is_empty() {
            out.push(format!("hooks in {}", file.display()));
        }
        for plugin in claude_settings::enabled_cairn_plugins(&doc) {
            out.push(format!(
                "the plugin {plugin} (enabled in {})",
                file.display()
            ));
        }
    }
    Ok(out)
}

/// Says which cairn plugins Claude Code enables for the user (and with `--project`, for
/// the project): each captures by itself, and only Claude Code's command removes it.
fn plugins_left(t: &Target) -> anyhow::Result<()> {
    for (file, doc, scope) in settings_in_force(t.project.as_deref())? {
        for plugin in claude_settings::enabled_cairn_plugins(&doc) {
            let run = claude_settings::plugin_uninstall_command(&plugin, scope);
            let place = match (&t.project, scope) {
                (Some(dir), Scope::Project | Scope::Local) => format!(" (in {})", dir.display()),
                _ => String::new(),
            };
            crate::cli::out::say!(
                "the cairn plugin {plugin} is enabled in {} and captures by itself: `{run}`{place} removes it",
                file.display()
            );
        }
    }
    Ok(())
}

/// Uninstall's part in the MCP file: the server goes with the last install that uses it
/// (see [`install::McpUsers`]); else it is kept, saying which install still uses it.
fn unregister_mcp(ctx: &Ctx, t: &Target) -> anyhow::Result<()> {
    let current = read_settings(&t.mcp)?;
    let registered = current.as_ref().is_some_and(install::has_mcp);
    let mut others = Vec::new();
    if let Some(me) = &t.mcp_user {
        let mut users = read_mcp_users(ctx, &t.mcp, registered)?;
        users.remove(me);
        write_mcp_users(ctx, &t.mcp, &users)?;
        others = users.installs().to_vec();
    }
    if registered && !others.is_empty() {
        let by: Vec<String> = others.iter().map(|i| install_command(i)).collect();
        crate::cli::out::say!(
            "kept the MCP server \"{}\" in {}: still used by {}",
            install::MCP_NAME,
            t.mcp.display(),
            by.join(" and ")
        );
    } else if let Some(current) = current {
        let (new, changed) = install::remove_mcp(&current)
            .with_context(|| format!("cannot remove the MCP server from {}", t.mcp.display()))?;
        if changed {
            let written = put_back(ctx, &t.mcp, &new)?;
            crate::cli::out::say!(
                "removed the MCP server \"{}\" from {}",
                install::MCP_NAME,
                written.display()
            );
        }
    }
    Ok(())
}

/// The suffix of the note, beside the backups, of the installs that use the MCP server in
/// `~/.claude.json` ([`install::McpUsers`]).
const MCP_USERS: &str = ".cairn-mcp-users";

/// The note of who uses the MCP server in `mcp` (`~/.claude.json`).
fn mcp_users_note(ctx: &Ctx, mcp: &Path) -> anyhow::Result<PathBuf> {
    Ok(backups_dir(ctx)?.join(format!("{}{MCP_USERS}", backup_name(&real_path(mcp)))))
}

/// Who uses the MCP server in `mcp`; `registered`: whether it is there now.
fn read_mcp_users(ctx: &Ctx, mcp: &Path, registered: bool) -> anyhow::Result<install::McpUsers> {
    let note = mcp_users_note(ctx, mcp)?;
    let text = match std::fs::read_to_string(&note) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", note.display())),
    };
    let mut users = install::McpUsers::read(text.as_deref(), registered);
    users.keep_existing(|dir| Path::new(dir).is_dir());
    Ok(users)
}

/// Keeps the note of who uses the MCP server in `mcp`; removes it when nobody does.
fn write_mcp_users(ctx: &Ctx, mcp: &Path, users: &install::McpUsers) -> anyhow::Result<()> {
    let note = mcp_users_note(ctx, mcp)?;
    if users.installs().is_empty() {
        return match std::fs::remove_file(&note) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", note.display()))
            }
            _ => Ok(()),
        };
    }
    write_atomically(&note, users.note().as_bytes(), 0o600)
}

/// The command that made an install among [`install::McpUsers`].
fn install_command(install: &str) -> String {
    if install == install::USER_INSTALL {
        "`cairn install`".into()
    } else {
        format!("`cairn install --project {install}`")
    }
}

/// Writes the new document atomically (temp file + rename, same permissions) to the file
/// `path` names, following symlinks so a linked file (a dotfiles repository) stays linked
/// and changes where it lives, after copying the old file to a timestamped backup in the
/// data dir's `install-backups/` (never beside it: that may be a repository). Returns the
/// path written and says where the backup is.
fn save(ctx: &Ctx, path: &Path, existed: bool, value: &Value) -> anyhow::Result<PathBuf> {
    let mut text = serde_json::to_string_pretty(value).context("cannot encode settings")?;
    text.push('\n');
    save_bytes(ctx, path, existed, text.as_bytes())
}

/// [`save`] with the file's new bytes as they are.
fn save_bytes(ctx: &Ctx, path: &Path, existed: bool, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    let path = &real_path(path);
    let dir = path.parent().context("settings path has no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut mode = 0o600;
    let backups = backups_dir(ctx)?;
    let name = backup_name(path);
    if existed {
        let stamp = cairn_core::clock::iso_utc(cairn_core::clock::now_ms()).replace([':', '-'], "");
        let mut b = backups.join(format!("{name}.cairn-backup-{stamp}"));
        let mut n = 1;
        while b.exists() {
            b = backups.join(format!("{name}.cairn-backup-{stamp}-{n}"));
            n += 1;
        }
        cairn_core::store::paths::copy_private(path, &b)
            .with_context(|| format!("cannot back up {} to {}", path.display(), b.display()))?;
        if let Ok(m) = std::fs::metadata(path) {
            mode = m.permissions().mode() & 0o777;
        }
        crate::cli::out::say!("backup of {}: {}", path.display(), b.display());
    }
    write_atomically(path, bytes, mode)?;
    if !existed {
        // So that uninstall deletes the file instead of leaving an empty document.
        let marker = backups.join(format!("{name}{CREATED}"));
        cairn_core::store::paths::create_private(&marker)
            .with_context(|| format!("cannot write {}", marker.display()))?;
    }
    Ok(path.clone())
}

/// The suffix of the note, beside the backups, that install created a file that did not
/// exist before.
const CREATED: &str = ".cairn-created";

/// `install-backups/` in the data dir, owner-only.
fn backups_dir(ctx: &Ctx) -> anyhow::Result<PathBuf> {
    let backups = ctx.data_dir.root().join("install-backups");
    ctx.data_dir.ensure_sub(&backups)?;
    Ok(backups)
}

/// A file's name among the backups: its whole real path, `/` as `%`.
fn backup_name(real: &Path) -> String {
    real.display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "%")
}

/// Writes what uninstall leaves of a settings file, as it was before cairn came: deleted
/// when install created it and nothing else is in it now; else, byte for byte, the newest
/// backup that holds exactly `value` (the file before install, its formatting kept);
/// else `value` (someone changed the file since). Either way through [`save_bytes`]: the
/// file as it is now is backed up first.
fn put_back(ctx: &Ctx, path: &Path, value: &Value) -> anyhow::Result<PathBuf> {
    let real = real_path(path);
    let backups = backups_dir(ctx)?;
    let name = backup_name(&real);
    let marker = backups.join(format!("{name}{CREATED}"));
    let empty = value.as_object().is_some_and(|m| m.is_empty());
    if empty && marker.exists() {
        std::fs::remove_file(&real).with_context(|| format!("cannot remove {}", real.display()))?;
        let _ = std::fs::remove_file(&marker);
        crate::cli::out::say!("removed {}: cairn install had created it", real.display());
        return Ok(real);
    }
    let mut earlier: Vec<PathBuf> = std::fs::read_dir(&backups)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("{name}.cairn-backup-")))
                })
                .collect()
        })
        .unwrap_or_default();
    // Newest first: the stamp sorts by time, a `-n` suffix after it.
    earlier.sort_by(|a, b| b.cmp(a));
    let same = earlier.into_iter().find_map(|b| {
        let bytes = std::fs::read(&b).ok()?;
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        (&v == value).then_some((b, bytes))
    });
    let Some((backup, bytes)) = same else {
        return save(ctx, path, true, value);
    };
    let written = save_bytes(ctx, path, true, &bytes)?;
    crate::cli::out::say!(
        "{} is back as it was before cairn install (from {})",
        written.display(),
        backup.display()
    );
    Ok(written)
}

/// Replaces `path` with `bytes`, mode `mode` ([`cairn_core::store::paths::replace_file`]).
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    cairn_core::store::paths::replace_file(path, bytes, mode)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The file `path` names, through any symlinks (also one whose target does not exist
/// yet); `path` itself when it is no link.
fn real_path(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(target) => {
                p = match p.parent() {
                    Some(parent) if target.is_relative() => parent.join(target),
                    _ => target,
                }
            }
            Err(_) => break,
        }
    }
    // Name it plainly (no `..`), for the messages and the backup's name.
    match (
        p.parent().and_then(|d| d.canonicalize().ok()),
        p.file_name(),
    ) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => p,
    }
}
