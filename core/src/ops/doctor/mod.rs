//! `cairn doctor`: checks of everything cairn depends on, each finding with what to do.
//! Here the findings, the runner and the check of cairn's own settings (the others run on
//! the defaults when they cannot be read, which that check fails); the checks by topic:
//! `data` (database, schema, integrity, permissions, disk), `hooks` (cairn's hooks or
//! plugin in Claude Code's settings), `mcp` (cairn's MCP server registered where Claude
//! Code reads it, or brought by the plugin), `worker` (running, heartbeat), `model` (the
//! provider and its online test, the sentence model), `transcripts` (Claude Code's
//! transcript format), `sync` (the sync space, as last recorded: no connection to the
//! server).
//!
//! Invariants: the checks only read (the database is opened read-only for the schema check
//! and only then through [`crate::store::db::open`]); the one network call is the
//! `--online` test call; the environment (home, working dir, variables) is passed in, never
//! read here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::settings::Settings;
use crate::store::paths::{CLAUDE_CONFIG_DIR_ENV, ClaudeCode, DataDir};

mod data;
mod hooks;
mod mcp;
mod model;
mod sync;
mod transcripts;
mod worker;

pub use model::resolve_provider;

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
    /// Which check: `database`, `schema`, `integrity`, `permissions`, `hooks`, `mcp`,
    /// `worker`, `provider`, `online`, `search`, `disk`, `settings`, `transcripts`, `sync`.
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

    /// Where Claude Code keeps its files, as this environment says.
    fn claude(&self) -> Option<ClaudeCode> {
        ClaudeCode::new(self.var(CLAUDE_CONFIG_DIR_ENV), self.home.as_deref())
    }
}

/// Runs every check. `warnings` are the settings loader's warnings (unknown keys); when
/// the settings cannot be read, `settings` are the defaults and the `settings` check fails.
pub fn run(
    dir: &DataDir,
    settings: &Settings,
    warnings: &[String],
    env: &Env,
    now: i64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    check_settings(dir, warnings, env, &mut out);
    let conn = data::check_database(dir, &mut out);
    data::check_permissions(dir, &mut out);
    let plugins = hooks::check_hooks(env, &mut out);
    mcp::check_mcp(env, &plugins, &mut out);
    worker::check_worker(dir, settings, conn.as_ref(), now, &mut out);
    model::check_provider(settings, env, &mut out);
    worker::check_worker_provider(dir, settings, conn.as_ref(), env, &mut out);
    model::check_search(dir, settings, conn.as_ref(), &mut out);
    let standing = conn.as_ref().and_then(|c| {
        let holder = crate::store::lock::holder(&dir.worker_lock()).ok()?;
        crate::ops::status::worker_standing(dir, c, holder.as_ref()).ok()
    });
    if let Some(f) = standing.as_ref().and_then(|s| s.failure.as_ref()) {
        out.push(finding(
            "worker",
            Level::Fail,
            crate::ops::status::stopped_on(f),
            Some(format!(
                "fix that, then {}; more in the data dir's logs/",
                crate::ops::status::restart_worker(settings.worker.autostart)
            )),
        ));
    }
    if let Some(n) = standing.and_then(|s| s.not_logged_in) {
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
    sync::check_sync(dir, settings, conn.as_ref(), &mut out);
    data::check_disk(dir, &mut out);
    transcripts::check_transcripts(env, &mut out);
    out
}

/// `settings.json` in the data dir (and the `CAIRN_*` variables) as the loader reads them:
/// a file it cannot read fails, naming file, line and column; the other checks run on the
/// defaults meanwhile.
fn check_settings(dir: &DataDir, warnings: &[String], env: &Env, out: &mut Vec<Finding>) {
    if let Err(e) = Settings::load_from(&dir.settings(), env.vars.clone(), &[]) {
        out.push(finding(
            "settings",
            Level::Fail,
            format!("{e}; the other checks ran on the default settings"),
            Some(
                "fix it; until then hook events wait in the spool, cleaned with the default privacy rules, and the settings are applied to them once they can be read"
                    .into(),
            ),
        ));
    }
    for w in warnings {
        out.push(finding(
            "settings",
            Level::Warn,
            w.clone(),
            Some(format!("fix or remove it in {}", dir.settings().display())),
        ));
    }
}

/// A JSON file of Claude Code's: `Ok(None)` when it cannot be read (missing), `Err(())`
/// when it is not JSON, with a warning of `check` saying to fix it and what that gives.
fn read_json(
    file: &std::path::Path,
    check: &str,
    fix: &str,
    out: &mut Vec<Finding>,
) -> std::result::Result<Option<serde_json::Value>, ()> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        out.push(finding(
            check,
            Level::Warn,
            format!("{} is not valid JSON: {e}", file.display()),
            Some(format!("fix the file; {fix}")),
        ));
    })
}

/// True when any finding failed (`cairn doctor` exits 1).
pub fn any_failed(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.level == Level::Fail)
}

/// What the tests of every check use.
#[cfg(test)]
mod testing {
    use super::*;
    use std::path::Path;

    /// An environment with its home and working dir under `tmp`.
    pub(super) fn env(tmp: &Path) -> Env {
        Env {
            home: Some(tmp.join("home")),
            cwd: tmp.join("work"),
            vars: BTreeMap::new(),
            online: false,
        }
    }

    /// The levels of one check's findings, in order.
    pub(super) fn levels(f: &[Finding], check: &str) -> Vec<Level> {
        f.iter()
            .filter(|x| x.check == check)
            .map(|x| x.level)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{env, levels};
    use super::*;
    use crate::store::db::{self, OpenOptions};

    #[test]
    fn healthy_data_dir_and_broken_hooks() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        drop(db::open_data_dir(&dd, OpenOptions::default()).expect("open"));
        let mut e = env(tmp.path());
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "schema"), vec![Level::Ok]);
        assert_eq!(levels(&f, "integrity"), vec![Level::Ok]);
        // Not installed: nothing is captured.
        assert_eq!(levels(&f, "hooks"), vec![Level::Fail], "{f:#?}");
        assert_eq!(levels(&f, "mcp"), vec![Level::Warn], "{f:#?}");
        assert!(
            f.iter()
                .filter(|x| x.level == Level::Fail)
                .all(|x| x.check == "hooks"),
            "{f:#?}"
        );
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
            crate::capture::hook::EventName::CAPTURED.len() - 1,
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
    fn a_settings_file_that_cannot_be_read_fails_and_the_rest_is_checked() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        drop(db::open_data_dir(&dd, OpenOptions::default()).expect("open"));
        std::fs::write(dd.settings(), r#"{"batch": {"max_size": 5,}}"#).expect("write");
        let f = run(&dd, &Settings::default(), &[], &env(tmp.path()), 1);
        assert_eq!(levels(&f, "settings"), vec![Level::Fail], "{f:#?}");
        let bad = f.iter().find(|x| x.check == "settings").expect("finding");
        assert!(bad.message.contains("line 1, column 26"), "{}", bad.message);
        assert_eq!(levels(&f, "integrity"), vec![Level::Ok]);
        assert!(any_failed(&f));
        // A variable it cannot take fails the same way.
        std::fs::write(dd.settings(), "{}").expect("write");
        let mut e = env(tmp.path());
        assert!(levels(&run(&dd, &Settings::default(), &[], &e, 1), "settings").is_empty());
        e.vars.insert("CAIRN_BATCH__MAX_SIZE".into(), "many".into());
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "settings"), vec![Level::Fail], "{f:#?}");
    }
}
