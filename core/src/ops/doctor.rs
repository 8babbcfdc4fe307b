//! `cairn doctor`: checks of everything cairn depends on, each finding with what to do.
//!
//! Invariants: the checks only read (the database is opened read-only for the schema check
//! and only then through [`db::open`]); the one network call is the `--online` test call;
//! the environment (home, working dir, variables) is passed in, never read here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use crate::settings::Settings;
use crate::store::db::{self, OpenOptions};
use crate::store::paths::{DataDir, mode_of};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Which check: `database`, `schema`, `integrity`, `permissions`, `hooks`, `worker`,
    /// `provider`, `online`, `search`, `disk`, `settings`, `transcripts`.
    pub check: String,
    pub level: Level,
    pub message: String,
    /// What to do about it (absent when all is well).
    pub fix: Option<String>,
}

fn finding(check: &str, level: Level, message: String, fix: Option<String>) -> Finding {
    Finding {
        check: check.into(),
        level,
        message,
        fix,
    }
}

fn ok(check: &str, message: String) -> Finding {
    finding(check, Level::Ok, message, None)
}

/// What the checks need from the process environment.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `$HOME`, for `~/.claude/settings.json`.
    pub home: Option<PathBuf>,
    /// The working directory, for `./.claude/settings.json`.
    pub cwd: PathBuf,
    /// Environment variables (API keys, `PATH`, `ANTHROPIC_BASE_URL`).
    pub vars: BTreeMap<String, String>,
    /// Make a real test call to the configured provider.
    pub online: bool,
}

impl Env {
    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// Runs every check. `warnings` are the settings loader's warnings (unknown keys).
pub fn run(
    dir: &DataDir,
    settings: &Settings,
    warnings: &[String],
    env: &Env,
    now: i64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for w in warnings {
        out.push(finding(
            "settings",
            Level::Warn,
            w.clone(),
            Some(format!("fix or remove it in {}", dir.settings().display())),
        ));
    }
    let conn = check_database(dir, &mut out);
    check_permissions(dir, &mut out);
    check_hooks(env, &mut out);
    check_worker(dir, settings, conn.as_ref(), now, &mut out);
    check_provider(settings, env, &mut out);
    check_worker_provider(dir, settings, conn.as_ref(), env, &mut out);
    check_search(dir, settings, conn.as_ref(), &mut out);
    if let Some(n) = conn
        .as_ref()
        .and_then(|c| crate::worker::usage::not_logged_in(c).ok().flatten())
    {
        out.push(finding(
            "provider",
            Level::Fail,
            format!(
                "the worker's last {} call found it not logged in: {}",
                n.provider, n.error
            ),
            Some(
                "run `claude` and log in with /login (or `claude setup-token`); waiting jobs go on by themselves"
                    .into(),
            ),
        ));
    }
    check_disk(dir, &mut out);
    check_transcripts(env, &mut out);
    out
}

/// Search by meaning: the model's files are there and load, and how many memories wait for
/// their vector. Without a model search still works, by words only: a warning, not a
/// failure, unless `embed.provider` is `local`.
fn check_search(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&Connection>,
    out: &mut Vec<Finding>,
) {
    use crate::recall::embed::{model, store};
    match model::locate(&settings.embed, dir) {
        Err(model::Unavailable::Off) => {
            out.push(ok("search", "by words only (embed.provider is off)".into()))
        }
        Err(why) => out.push(finding(
            "search",
            if settings.embed.provider == "local" {
                Level::Fail
            } else {
                Level::Warn
            },
            format!("by words only: {why}"),
            Some("run `cairn embed --fetch` (90 MB, once) to find memories by meaning".into()),
        )),
        Ok(source) => match source.load() {
            Err(e) => out.push(finding(
                "search",
                Level::Fail,
                format!(
                    "the sentence model in {} does not load: {e}",
                    source.dir.display()
                ),
                Some("fetch it again with `cairn embed --fetch`".into()),
            )),
            Ok(_) => {
                let progress = conn.and_then(|c| store::progress(c, &source.id).ok());
                let counts = progress.map_or(String::new(), |p| {
                    format!(
                        "; {} memories have vectors, {} waiting",
                        p.embedded, p.queued
                    )
                });
                out.push(ok(
                    "search",
                    format!("by words and meaning ({}){counts}", source.id),
                ));
            }
        },
    }
}

/// Transcripts read for the format check, newest first, and how much of each.
const TRANSCRIPTS_CHECKED: usize = 3;
const TRANSCRIPT_BYTES_CHECKED: u64 = 16 << 20;

/// Whether Claude Code's newest transcripts still look as cairn knows them: record types
/// never seen, or lines that are not JSON, mean the format moved (cairn skips what it does
/// not know, so imports and reconciliation may miss events).
fn check_transcripts(env: &Env, out: &mut Vec<Finding>) {
    use crate::capture::transcript::{Reader, Stats, list};
    use std::io::Read;
    let projects = match (env.var("CLAUDE_CONFIG_DIR"), env.home.as_ref()) {
        (Some(d), _) => PathBuf::from(d).join("projects"),
        (None, Some(h)) => h.join(".claude").join("projects"),
        (None, None) => return,
    };
    let mut found = list(&projects, None);
    if found.is_empty() {
        out.push(ok(
            "transcripts",
            format!("no Claude Code transcripts in {}", projects.display()),
        ));
        return;
    }
    found.reverse();
    let mut stats = Stats::default();
    let mut read = 0;
    for src in found.iter().take(TRANSCRIPTS_CHECKED) {
        let Ok(f) = std::fs::File::open(&src.path) else {
            continue;
        };
        let src_reader = std::io::BufReader::new(f.take(TRANSCRIPT_BYTES_CHECKED));
        let mut r = Reader::new(src_reader, &src.session_id, false);
        r.by_ref().for_each(drop);
        let s = r.stats();
        stats.bad_lines += s.bad_lines;
        stats.unknown_other += s.unknown_other;
        for (k, v) in &s.unknown_types {
            *stats.unknown_types.entry(k.clone()).or_default() += v;
        }
        read += 1;
    }
    if stats.unknown_records() == 0 && stats.bad_lines == 0 {
        out.push(ok(
            "transcripts",
            format!("the {read} newest Claude Code transcripts read as cairn knows them"),
        ));
        return;
    }
    let mut types: Vec<String> = stats
        .unknown_types
        .iter()
        .map(|(k, v)| format!("{} ({v})", if k.is_empty() { "untyped" } else { k }))
        .collect();
    if stats.unknown_other > 0 {
        types.push(format!("others ({})", stats.unknown_other));
    }
    let mut what = Vec::new();
    if !types.is_empty() {
        what.push(format!("record types never seen: {}", types.join(", ")));
    }
    if stats.bad_lines > 0 {
        what.push(format!("{} lines that are not JSON", stats.bad_lines));
    }
    out.push(finding(
        "transcripts",
        Level::Warn,
        format!(
            "Claude Code's transcript format looks unfamiliar in its {read} newest transcripts: {}",
            what.join("; ")
        ),
        Some(
            "cairn skips what it does not know, so transcript imports and reconciliation may miss events: look for a newer cairn; `cairn import transcripts --dry-run` shows what is read"
                .into(),
        ),
    ));
}

/// True when any finding failed (`cairn doctor` exits 1).
pub fn any_failed(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.level == Level::Fail)
}

fn restore_hint(dir: &DataDir) -> String {
    match crate::store::backup::daily_backups(dir)
        .ok()
        .and_then(|b| b.last().cloned())
    {
        Some(latest) => format!("restore a backup: cairn restore {}", latest.display()),
        None => "restore a backup with `cairn restore PATH`, or move the file away to start afresh"
            .into(),
    }
}

/// A read-only data dir or database is not a damaged one: say so, and never advise a
/// restore that would roll the user back.
fn read_only_finding(dir: &DataDir) -> Option<Finding> {
    let why = [dir.root().to_path_buf(), dir.db()]
        .iter()
        .find_map(|p| crate::store::paths::read_only_reason(p))?;
    Some(finding(
        "database",
        Level::Fail,
        format!(
            "read-only: {why}; cairn cannot write its database (hooks spool nothing, the worker cannot run)"
        ),
        Some(format!(
            "make {} writable again (remount it read-write, or give it back its write permission); the database was not changed",
            dir.root().display()
        )),
    ))
}

fn check_database(dir: &DataDir, out: &mut Vec<Finding>) -> Option<Connection> {
    let path = dir.db();
    if !path.exists() {
        out.push(finding(
            "database",
            Level::Fail,
            format!("no cairn database at {}", path.display()),
            Some("check CAIRN_DATA_DIR; hooks create the database on their first event (or run `cairn install`)".into()),
        ));
        return None;
    }
    // Read-write without create, like every cairn connection: a read-only connection to a
    // WAL database would leave -wal and -shm files behind.
    let version =
        Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE).and_then(|mut c| {
            db::trace_if_asked(&mut c);
            db::schema_version(&c)
        });
    match version {
        Ok(v) if v > db::SCHEMA_VERSION => {
            out.push(finding(
                "schema",
                Level::Fail,
                format!(
                    "schema version {v} is newer than this cairn supports ({})",
                    db::SCHEMA_VERSION
                ),
                Some("upgrade cairn (every binary: cairn, cairn-hook, cairn-worker)".into()),
            ));
            return None;
        }
        Ok(v) if v < db::SCHEMA_VERSION => out.push(finding(
            "schema",
            Level::Warn,
            format!(
                "schema version {v}, older than this cairn's {}",
                db::SCHEMA_VERSION
            ),
            Some("nothing to do: it is migrated the next time cairn opens it".into()),
        )),
        Ok(v) => out.push(ok("schema", format!("schema version {v} (current)"))),
        Err(_) if read_only_finding(dir).is_some() => {
            out.extend(read_only_finding(dir));
            return None;
        }
        Err(e) => {
            out.push(finding(
                "database",
                Level::Fail,
                format!("{} is not a usable cairn database: {e}", path.display()),
                Some(restore_hint(dir)),
            ));
            return None;
        }
    }
    let opts = OpenOptions {
        busy_timeout: Duration::from_secs(2),
        create: false,
        ..OpenOptions::default()
    };
    let conn = match db::open_data_dir(dir, opts) {
        Ok(c) => c,
        Err(_) if read_only_finding(dir).is_some() => {
            out.extend(read_only_finding(dir));
            return None;
        }
        Err(e) => {
            let fix = if e.is_busy() {
                "another process holds the database; try again when it is done".into()
            } else {
                restore_hint(dir)
            };
            out.push(finding("database", Level::Fail, e.to_string(), Some(fix)));
            return None;
        }
    };
    match db::integrity_problems(&conn) {
        Ok(p) if p.is_empty() => out.push(ok(
            "integrity",
            "integrity_check and FTS integrity are clean".into(),
        )),
        Ok(p) => out.push(finding(
            "integrity",
            Level::Fail,
            format!("{} problems: {}", p.len(), p.join("; ")),
            Some(restore_hint(dir)),
        )),
        Err(e) => out.push(finding(
            "integrity",
            Level::Fail,
            format!("cannot run the integrity check: {e}"),
            Some(restore_hint(dir)),
        )),
    }
    Some(conn)
}

fn check_permissions(dir: &DataDir, out: &mut Vec<Finding>) {
    for (path, want) in [(dir.root().to_path_buf(), 0o700), (dir.db(), 0o600)] {
        match mode_of(&path) {
            None => {}
            Some(mode) if mode & 0o077 == 0 => {
                out.push(ok("permissions", format!("{} is {mode:o}", path.display())))
            }
            Some(mode) => out.push(finding(
                "permissions",
                Level::Warn,
                format!(
                    "{} is {mode:o}: other users can read your prompts and code",
                    path.display()
                ),
                Some(format!("chmod {want:o} {}", path.display())),
            )),
        }
    }
}

/// A hook command found in a Claude Code settings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    pub event: String,
    pub command: String,
}

/// The hook commands of a Claude Code settings document that mention `cairn-hook`.
pub fn cairn_hooks(settings: &serde_json::Value) -> Vec<HookCommand> {
    let mut out = Vec::new();
    let Some(events) = settings.get("hooks").and_then(|h| h.as_object()) else {
        return out;
    };
    for (event, groups) in events {
        for group in groups.as_array().into_iter().flatten() {
            for hook in group
                .get("hooks")
                .and_then(|h| h.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(cmd) = hook.get("command").and_then(|c| c.as_str())
                    && cmd.contains("cairn-hook")
                {
                    out.push(HookCommand {
                        event: event.clone(),
                        command: cmd.to_string(),
                    });
                }
            }
        }
    }
    out
}

/// The cairn plugins a Claude Code settings document enables (`enabledPlugins`, keys
/// `cairn@<marketplace>` set to true).
pub fn enabled_cairn_plugins(settings: &serde_json::Value) -> Vec<String> {
    settings
        .get("enabledPlugins")
        .and_then(|p| p.as_object())
        .into_iter()
        .flatten()
        .filter(|(k, v)| k.split('@').next() == Some("cairn") && v.as_bool() == Some(true))
        .map(|(k, _)| k.clone())
        .collect()
}

/// The program a hook command runs: the first word that names `cairn-hook`, unquoted.
pub fn hook_program(command: &str) -> Option<String> {
    command
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
        .find(|w| w.contains("cairn-hook"))
        .map(str::to_string)
}

fn find_program(program: &str, env: &Env) -> Option<PathBuf> {
    let expanded = match (program.strip_prefix("~/"), &env.home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(
            program.replace(
                "$HOME",
                &env.home
                    .as_ref()
                    .map(|h| h.display().to_string())
                    .unwrap_or_default(),
            ),
        ),
    };
    if expanded.components().count() > 1 {
        return is_executable(&expanded).then_some(expanded);
    }
    env.var("PATH")?
        .split(':')
        .map(|d| Path::new(d).join(&expanded))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn check_hooks(env: &Env, out: &mut Vec<Finding>) {
    let mut files = Vec::new();
    if let Some(home) = &env.home {
        files.push(home.join(".claude/settings.json"));
    }
    files.push(env.cwd.join(".claude/settings.json"));
    files.push(env.cwd.join(".claude/settings.local.json"));
    files.dedup();
    let mut hooked: Vec<String> = Vec::new();
    // Each way cairn is installed: a settings file with its hooks, or the plugin.
    let mut ways: Vec<String> = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let doc: serde_json::Value = match serde_json::from_str(&text) {
            Ok(d) => d,
            Err(e) => {
                out.push(finding(
                    "hooks",
                    Level::Warn,
                    format!("{} is not valid JSON: {e}", file.display()),
                    Some("fix the file; Claude Code ignores it as it is".into()),
                ));
                continue;
            }
        };
        for plugin in enabled_cairn_plugins(&doc) {
            out.push(ok(
                "hooks",
                format!("the cairn plugin {plugin} is enabled in {}", file.display()),
            ));
            ways.push(format!("the plugin {plugin}"));
        }
        let hooks = cairn_hooks(&doc);
        if !hooks.is_empty() {
            ways.push(format!("hooks in {}", file.display()));
        }
        for hook in hooks {
            hooked.push(hook.event.clone());
            let Some(program) = hook_program(&hook.command) else {
                continue;
            };
            match find_program(&program, env) {
                Some(found) => out.push(ok(
                    "hooks",
                    format!(
                        "{} in {} runs {}",
                        hook.event,
                        file.display(),
                        found.display()
                    ),
                )),
                None => out.push(finding(
                    "hooks",
                    Level::Fail,
                    format!(
                        "{} in {} runs {program}, which does not exist or is not executable",
                        hook.event,
                        file.display()
                    ),
                    Some(
                        "run `cairn install` again to point the hooks at the installed cairn-hook"
                            .into(),
                    ),
                )),
            }
        }
    }
    ways.dedup();
    if ways.len() > 1 {
        out.push(finding(
            "hooks",
            Level::Warn,
            format!(
                "cairn is installed {} ways at once ({}): every event is handed to cairn more than once",
                ways.len(),
                ways.join("; ")
            ),
            Some(
                "keep one: `cairn uninstall` (or `--project`) removes settings hooks; `claude plugin uninstall cairn` the plugin"
                    .into(),
            ),
        ));
    }
    if hooked.is_empty() && !ways.is_empty() {
        // The plugin brings its own hooks.
        return;
    }
    if hooked.is_empty() {
        out.push(finding(
            "hooks",
            Level::Warn,
            format!(
                "no cairn hooks in {}",
                files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some("run `cairn install` so Claude Code hands its events to cairn".into()),
        ));
        return;
    }
    // Exactly the events `cairn install` registers.
    let missing: Vec<&str> = crate::capture::hook::EventName::CAPTURED
        .iter()
        .map(|e| e.as_str())
        .filter(|e| !hooked.iter().any(|h| h == e))
        .collect();
    if !missing.is_empty() {
        out.push(finding(
            "hooks",
            Level::Warn,
            format!("no cairn hook for {}", missing.join(", ")),
            Some("run `cairn install` to add the missing hooks".into()),
        ));
    }
}

fn check_worker(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&Connection>,
    now: i64,
    out: &mut Vec<Finding>,
) {
    let holder = match crate::store::lock::holder(&dir.worker_lock()) {
        Ok(h) => h,
        Err(e) => {
            out.push(finding(
                "worker",
                Level::Warn,
                format!("cannot check the worker lock: {e}"),
                Some(format!("check {}", dir.worker_lock().display())),
            ));
            return;
        }
    };
    let heartbeat: Option<i64> = conn.and_then(|c| {
        crate::ops::status::last_heartbeat(c, holder.as_ref().map(|h| h.pid))
            .ok()
            .flatten()
    });
    let waiting: i64 = conn
        .and_then(|c| {
            c.query_row(
                "SELECT count(*) FROM pending_messages WHERE status IN ('pending', 'claimed')",
                [],
                |r| r.get(0),
            )
            .ok()
        })
        .unwrap_or(0);
    let stale_ms = (settings.worker.heartbeat_secs as i64).max(1) * 3 * 1000;
    match holder {
        Some(h) => match heartbeat.map(|t| now - t) {
            Some(age) if age > stale_ms => out.push(finding(
                "worker",
                Level::Warn,
                format!(
                    "worker pid {} holds the lock but its last heartbeat was {}s ago",
                    h.pid,
                    age / 1000
                ),
                Some(format!("it may be stuck: restart it (kill {}; it is restarted by its service or the next hook)", h.pid)),
            )),
            Some(age) => out.push(ok(
                "worker",
                format!("worker pid {} running, heartbeat {}s ago", h.pid, age / 1000),
            )),
            None if now - h.started_at > stale_ms => out.push(finding(
                "worker",
                Level::Warn,
                format!(
                    "worker pid {} holds the lock but has recorded no heartbeat since it started {}s ago",
                    h.pid,
                    (now - h.started_at) / 1000
                ),
                Some(format!("it may be stuck: restart it (kill {})", h.pid)),
            )),
            None => out.push(ok(
                "worker",
                format!("worker pid {} running (no heartbeat recorded yet)", h.pid),
            )),
        },
        None if waiting > 0 => out.push(finding(
            "worker",
            Level::Warn,
            format!("no worker is running and {waiting} jobs are waiting"),
            Some(if settings.worker.autostart {
                "start `cairn-worker` (the next hook also starts one)".into()
            } else {
                "start `cairn-worker`, or set worker.autostart to true".into()
            }),
        )),
        None => out.push(ok(
            "worker",
            "no worker running and no work waiting".into(),
        )),
    }
}

/// The provider and model the running worker uses, as it recorded them (it chose them
/// from its own environment: a worker started by a hook has Claude Code's), and a warning
/// when this shell's environment would pick another provider, since `check_provider`
/// above judged the shell's choice.
fn check_worker_provider(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&Connection>,
    env: &Env,
    out: &mut Vec<Finding>,
) {
    let Some(holder) = crate::store::lock::holder(&dir.worker_lock())
        .ok()
        .flatten()
    else {
        return;
    };
    let Some(w) = conn
        .and_then(|c| crate::queue::workers::latest(c).ok().flatten())
        .filter(|w| w.pid == holder.pid && w.stopped_at.is_none())
    else {
        return;
    };
    let (Some(provider), Some(model)) = (w.provider, w.model) else {
        return;
    };
    out.push(ok(
        "provider",
        format!(
            "the running worker (pid {}) uses {provider} ({model})",
            w.pid
        ),
    ));
    let shell = resolve_provider(settings, env).provider;
    if shell != provider {
        out.push(finding(
            "provider",
            Level::Warn,
            format!(
                "this shell's environment would pick {shell}, but the running worker uses {provider}: it was started with another environment (by a hook, with Claude Code's)"
            ),
            Some("set model.provider in the data dir's settings.json to choose one for every worker, then restart the worker".into()),
        ));
    }
}

/// The provider `settings` come to in `env`, and why (see `worker::model::resolve`).
pub fn resolve_provider(settings: &Settings, env: &Env) -> crate::worker::model::Resolved {
    let vars = |k: &str| env.var(k).map(str::to_string);
    crate::worker::model::resolve(&settings.model, &vars)
}

fn check_provider(settings: &Settings, env: &Env, out: &mut Vec<Finding>) {
    let m = &settings.model;
    let resolved = resolve_provider(settings, env);
    let provider = resolved.provider;
    let problem = match provider {
        "anthropic" if env.var(&m.api_key_env).is_none() => Some((
            format!(
                "provider anthropic needs an API key, but {} is not set",
                m.api_key_env
            ),
            format!(
                "export {}=…, or set model.provider to offline",
                m.api_key_env
            ),
        )),
        "openai" if m.base_url.trim().is_empty() => Some((
            "provider openai needs model.base_url (e.g. http://localhost:11434/v1)".into(),
            "set model.base_url in settings.json or CAIRN_MODEL__BASE_URL".into(),
        )),
        "openai" if m.model.trim().is_empty() => Some((
            "provider openai needs model.model (the endpoint has no default)".into(),
            "set model.model in settings.json or CAIRN_MODEL__MODEL".into(),
        )),
        "claude-cli" if find_program(&m.claude_command, env).is_none() => Some((
            format!(
                "provider claude-cli runs {}, which is not found",
                m.claude_command
            ),
            "install Claude Code, or set model.claude_command to its path".into(),
        )),
        _ => None,
    };
    match problem {
        Some((message, fix)) => {
            out.push(finding("provider", Level::Fail, message, Some(fix)));
            return;
        }
        None => out.push(ok(
            "provider",
            format!("provider {provider} ({})", resolved.why),
        )),
    }
    if m.provider == "auto" && provider == "offline" {
        out.push(finding(
            "provider",
            Level::Warn,
            "memories come from the offline extractor, which only restates the tool calls".into(),
            Some(format!(
                "log in to Claude Code (`{}` then /login) to use your subscription, or export {}",
                if m.claude_command.is_empty() {
                    "claude"
                } else {
                    &m.claude_command
                },
                m.api_key_env
            )),
        ));
    }
    if !env.online {
        return;
    }
    match provider {
        "anthropic" | "openai" => out.push(test_call(settings, provider, env)),
        "claude-cli" => out.push(cli_test_call(settings, env)),
        other => out.push(ok(
            "online",
            format!("provider {other} makes no network calls; nothing to test"),
        )),
    }
}

/// One tiny real call through the `claude` CLI, with the model cairn would use.
fn cli_test_call(settings: &Settings, env: &Env) -> Finding {
    use crate::worker::model::claude_cli;
    let m = &settings.model;
    let vars = |k: &str| env.var(k).map(str::to_string);
    let command = claude_cli::locate(&m.claude_command, &vars)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| m.claude_command.clone());
    let client = claude_cli::Client::new(
        &command,
        &m.model,
        Duration::from_secs(m.timeout_secs.clamp(1, 120)),
    );
    let prompt = crate::worker::prompt::Prompt {
        system: "Reply with the single word: ok".into(),
        user: "ok?".into(),
    };
    let started = Instant::now();
    match client.complete(&prompt) {
        Ok(c) => ok(
            "online",
            format!(
                "{} answered with model {} in {} ms ({} input + {} output tokens{})",
                client.command(),
                client.model(),
                started.elapsed().as_millis(),
                c.input_tokens,
                c.output_tokens,
                c.cost_usd
                    .map(|usd| format!(", ${usd:.4}"))
                    .unwrap_or_default()
            ),
        ),
        Err(e @ crate::worker::model::ModelError::NotLoggedIn(_)) => finding(
            "online",
            Level::Fail,
            e.to_string(),
            Some(format!(
                "run `{}` and log in with /login (or `claude setup-token`); waiting jobs go on by themselves",
                client.command()
            )),
        ),
        Err(e) => finding(
            "online",
            Level::Fail,
            format!("{} failed: {e}", client.command()),
            Some(
                "check model.claude_command and model.model; run the command by hand to see more"
                    .into(),
            ),
        ),
    }
}

/// One minimal real request to the provider: a one-token answer.
fn test_call(settings: &Settings, provider: &str, env: &Env) -> Finding {
    let m = &settings.model;
    let key = env.var(&m.api_key_env).map(str::to_string);
    let (url, model) = if provider == "anthropic" {
        let base = Some(m.base_url.trim())
            .filter(|b| !b.is_empty())
            .or(env.var("ANTHROPIC_BASE_URL"))
            .unwrap_or("https://api.anthropic.com")
            .trim_end_matches('/')
            .to_string();
        let model = if m.model.is_empty() {
            "claude-haiku-4-5".to_string()
        } else {
            m.model.clone()
        };
        (format!("{base}/v1/messages"), model)
    } else {
        let base = m.base_url.trim().trim_end_matches('/').to_string();
        (format!("{base}/chat/completions"), m.model.clone())
    };
    let payload = serde_json::json!({
        "model": model,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "Reply with: ok"}],
    })
    .to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(m.timeout_secs.clamp(1, 30))))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.post(&url).header("content-type", "application/json");
    if provider == "anthropic" {
        req = req.header("anthropic-version", "2023-06-01");
        if let Some(k) = &key {
            req = req.header("x-api-key", k);
        }
    } else if let Some(k) = &key {
        req = req.header("authorization", &format!("Bearer {k}"));
    }
    let started = Instant::now();
    match req.send(&payload) {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            let ms = started.elapsed().as_millis();
            if (200..300).contains(&status) {
                ok(
                    "online",
                    format!("{provider} at {url} answered with model {model} in {ms} ms"),
                )
            } else {
                let snippet: String = text.chars().take(200).collect();
                finding(
                    "online",
                    Level::Fail,
                    format!("{provider} at {url} answered {status}: {snippet}"),
                    Some(match status {
                        401 | 403 => format!("check the key in {}", m.api_key_env),
                        404 => "check model.base_url and model.model".into(),
                        _ => "check the provider settings and the service's status".into(),
                    }),
                )
            }
        }
        Err(e) => finding(
            "online",
            Level::Fail,
            format!("cannot reach {provider} at {url}: {e}"),
            Some("check the network, model.base_url and any proxy".into()),
        ),
    }
}

/// Free bytes for unprivileged users on the file system holding `path`.
#[allow(unsafe_code)]
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call, and `st` points to
    // writable memory the size of a `statvfs`, which the call fills on success (rc 0); it is
    // read only in that case.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

fn check_disk(dir: &DataDir, out: &mut Vec<Finding>) {
    let probe = dir
        .root()
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let Some(free) = free_bytes(probe) else {
        out.push(finding(
            "disk",
            Level::Warn,
            format!("cannot tell the free space at {}", probe.display()),
            None,
        ));
        return;
    };
    let mib = free / (1024 * 1024);
    let (level, fix) = if mib < 100 {
        (Level::Fail, Some("free disk space: SQLite fails writes when the disk is full and hooks then spool events".to_string()))
    } else if mib < 1024 {
        (Level::Warn, Some("free some disk space soon".to_string()))
    } else {
        (Level::Ok, None)
    };
    out.push(finding(
        "disk",
        level,
        format!("{mib} MiB free at {}", probe.display()),
        fix,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(tmp: &Path) -> Env {
        Env {
            home: Some(tmp.join("home")),
            cwd: tmp.join("work"),
            vars: BTreeMap::new(),
            online: false,
        }
    }

    fn levels(f: &[Finding], check: &str) -> Vec<Level> {
        f.iter()
            .filter(|x| x.check == check)
            .map(|x| x.level)
            .collect()
    }

    #[test]
    fn every_way_of_installing_is_recognised_and_two_at_once_warned() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = env(tmp.path());
        let home = tmp.path().join("home/.claude");
        let work = tmp.path().join("work/.claude");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(&work).expect("work");
        let hook = tmp.path().join("cairn-hook");
        std::fs::write(&hook, "#!/bin/sh\n").expect("hook");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let hooks = |cmd: &str| {
            let (doc, _) =
                crate::ops::install::install(&serde_json::Value::Null, cmd).expect("install");
            doc
        };
        let run_hooks = |e: &Env| {
            let mut out = Vec::new();
            check_hooks(e, &mut out);
            out
        };
        // The plugin alone: installed, no "no cairn hooks".
        std::fs::write(
            home.join("settings.json"),
            r#"{"enabledPlugins": {"cairn@cairn": true, "other@x": true}}"#,
        )
        .expect("write");
        let f = run_hooks(&e);
        assert_eq!(levels(&f, "hooks"), vec![Level::Ok], "{f:#?}");
        // Plus project hooks in settings.local.json: two ways, warned.
        std::fs::write(
            work.join("settings.local.json"),
            hooks(&hook.display().to_string()).to_string(),
        )
        .expect("write");
        let f = run_hooks(&e);
        let warn: Vec<&Finding> = f.iter().filter(|x| x.level == Level::Warn).collect();
        assert_eq!(warn.len(), 1, "{f:#?}");
        assert!(warn[0].message.contains("2 ways"), "{}", warn[0].message);
        // A disabled plugin is not a way.
        std::fs::write(
            home.join("settings.json"),
            r#"{"enabledPlugins": {"cairn@cairn": false}}"#,
        )
        .expect("write");
        let f = run_hooks(&e);
        assert!(f.iter().all(|x| x.level == Level::Ok), "{f:#?}");
    }

    #[test]
    fn the_subscription_provider_and_its_online_test() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let mut e = env(tmp.path());
        e.vars.insert("PATH".into(), bin.display().to_string());
        let settings = Settings::default();
        let messages = |f: &[Finding], check: &str| -> String {
            f.iter()
                .filter(|x| x.check == check)
                .map(|x| {
                    format!(
                        "{:?} {} / {}",
                        x.level,
                        x.message,
                        x.fix.clone().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        // No key, no CLI: offline, with a warning saying how to do better.
        let mut out = Vec::new();
        check_provider(&settings, &e, &mut out);
        let said = messages(&out, "provider");
        assert!(
            said.contains("provider offline") && said.contains("/login"),
            "{said}"
        );
        // A logged-in CLI: claude-cli, and --online makes one tiny real call.
        crate::worker::model::claude_cli::tests::fake_claude(&bin, "ok");
        e.online = true;
        let mut out = Vec::new();
        check_provider(&settings, &e, &mut out);
        assert_eq!(levels(&out, "provider"), vec![Level::Ok], "{out:?}");
        let said = messages(&out, "online");
        assert!(
            said.starts_with("Ok ") && said.contains("model haiku"),
            "{said}"
        );
        // Logged out after the worker chose it: the online test says what to run.
        std::fs::write(bin.join("mode"), "logged-out").expect("mode");
        let fixed = Settings {
            model: crate::settings::ModelSettings {
                provider: "claude-cli".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut out = Vec::new();
        check_provider(&fixed, &e, &mut out);
        let said = messages(&out, "online");
        assert!(
            said.starts_with("Fail ") && said.contains("/login"),
            "{said}"
        );
    }

    #[test]
    fn finds_hook_commands_and_their_programs() {
        let doc: serde_json::Value = serde_json::json!({
            "hooks": {
                "Stop": [{"hooks": [{"type": "command", "command": "\"/opt/x/cairn-hook\" stop"}]}],
                "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "other-tool"}]}]
            }
        });
        let hooks = cairn_hooks(&doc);
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0].event, "Stop");
        assert_eq!(
            hook_program(&hooks[0].command).as_deref(),
            Some("/opt/x/cairn-hook")
        );
        assert!(cairn_hooks(&serde_json::json!({"model": "x"})).is_empty());
        assert_eq!(
            hook_program("CAIRN_X=1 cairn-hook"),
            Some("cairn-hook".into())
        );
    }

    #[test]
    fn an_unfamiliar_transcript_format_is_a_warning() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let e = env(tmp.path());
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "transcripts"), vec![Level::Ok], "none yet");
        let proj = tmp.path().join("home/.claude/projects/-w");
        std::fs::create_dir_all(&proj).expect("dir");
        let sample = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/claude-code-hooks/transcript.sample.jsonl");
        std::fs::copy(&sample, proj.join("a.jsonl")).expect("copy");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "transcripts"), vec![Level::Ok], "{f:#?}");
        let mut text = std::fs::read_to_string(&sample).expect("read");
        text.push_str("{\"type\":\"hologram\",\"cwd\":\"/w\"}\nnot json\n");
        std::fs::write(proj.join("b.jsonl"), text).expect("write");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "transcripts"), vec![Level::Warn]);
        let w = f
            .iter()
            .find(|x| x.check == "transcripts")
            .expect("finding");
        assert!(w.message.contains("hologram (1)"), "{}", w.message);
        assert!(
            w.message.contains("1 lines that are not JSON"),
            "{}",
            w.message
        );
    }

    #[test]
    fn healthy_data_dir_and_broken_hooks() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        drop(db::open_data_dir(&dd, OpenOptions::default()).expect("open"));
        let mut e = env(tmp.path());
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert!(!any_failed(&f), "{f:#?}");
        assert_eq!(levels(&f, "schema"), vec![Level::Ok]);
        assert_eq!(levels(&f, "integrity"), vec![Level::Ok]);
        assert_eq!(levels(&f, "hooks"), vec![Level::Warn], "not installed");
        // auto → offline, with a warning that the offline extractor is the weakest.
        assert_eq!(levels(&f, "provider"), vec![Level::Ok, Level::Warn]);

        let claude = tmp.path().join("home/.claude");
        std::fs::create_dir_all(&claude).expect("dir");
        let hook = tmp.path().join("cairn-hook");
        std::fs::write(&hook, "#!/bin/sh\n").expect("hook");
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let mut hooks = serde_json::Map::new();
        for ev in crate::capture::hook::EventName::CAPTURED.map(|e| e.as_str()) {
            hooks.insert(
                ev.into(),
                serde_json::json!([{"hooks": [{"type": "command", "command": hook.display().to_string()}]}]),
            );
        }
        hooks.insert(
            "PostToolUseFailure".into(),
            serde_json::json!([{"hooks": [{"type": "command", "command": "/gone/cairn-hook"}]}]),
        );
        std::fs::write(
            claude.join("settings.json"),
            serde_json::json!({ "hooks": hooks }).to_string(),
        )
        .expect("settings");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        let hook_levels = levels(&f, "hooks");
        assert_eq!(
            hook_levels.iter().filter(|l| **l == Level::Ok).count(),
            5,
            "{f:#?}"
        );
        assert_eq!(
            hook_levels.iter().filter(|l| **l == Level::Fail).count(),
            1,
            "{f:#?}"
        );
        assert!(any_failed(&f));
        // Without the failure hook: a warning that names it.
        hooks.remove("PostToolUseFailure");
        std::fs::write(
            claude.join("settings.json"),
            serde_json::json!({ "hooks": hooks }).to_string(),
        )
        .expect("settings");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert!(
            f.iter()
                .any(|x| x.level == Level::Warn && x.message.contains("PostToolUseFailure")),
            "{f:#?}"
        );

        let mut s = Settings::default();
        s.model.provider = "anthropic".into();
        let f = run(&dd, &s, &[], &e, 1);
        assert_eq!(levels(&f, "provider"), vec![Level::Fail]);
        e.vars.insert("ANTHROPIC_API_KEY".into(), "k".into());
        let f = run(&dd, &s, &[], &e, 1);
        assert_eq!(levels(&f, "provider"), vec![Level::Ok]);
        s.model.provider = "openai".into();
        let f = run(&dd, &s, &[], &e, 1);
        assert_eq!(levels(&f, "provider"), vec![Level::Fail]);
    }

    #[test]
    fn broken_database_and_loose_permissions() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let e = env(tmp.path());
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "database"), vec![Level::Fail]);

        dd.ensure().expect("dir");
        std::fs::write(dd.db(), vec![b'x'; 4096]).expect("garbage");
        std::fs::set_permissions(dd.db(), std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("chmod");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "database"), vec![Level::Fail], "{f:#?}");
        assert_eq!(
            levels(&f, "permissions"),
            vec![Level::Ok, Level::Warn],
            "{f:#?}"
        );
        assert!(f.iter().all(|x| x.level == Level::Ok || x.fix.is_some()));
    }

    #[test]
    fn worker_heartbeat_freshness() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let e = env(tmp.path());
        let now = 1_000_000_000;
        let _lock = crate::store::lock::WorkerLock::try_acquire(&dd.worker_lock(), now - 1_000)
            .expect("lock")
            .expect("free");
        let f = run(&dd, &Settings::default(), &[], &e, now);
        assert_eq!(levels(&f, "worker"), vec![Level::Ok], "just started");
        let f = run(&dd, &Settings::default(), &[], &e, now + 3_600_000);
        assert_eq!(levels(&f, "worker"), vec![Level::Warn], "never beat");
        conn.execute(
            "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at) VALUES ('w', ?1, ?2, ?3)",
            rusqlite::params![std::process::id(), now - 1_000, now + 3_590_000],
        )
        .expect("row");
        let f = run(&dd, &Settings::default(), &[], &e, now + 3_600_000);
        assert_eq!(levels(&f, "worker"), vec![Level::Ok], "fresh beat: {f:#?}");
        let f = run(&dd, &Settings::default(), &[], &e, now + 7_200_000);
        assert_eq!(levels(&f, "worker"), vec![Level::Warn], "stale beat");
    }

    #[test]
    fn free_space_is_known() {
        assert!(free_bytes(Path::new("/")).is_some());
        assert!(free_bytes(Path::new("/no/such/dir")).is_none());
    }
}
