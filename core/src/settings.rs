//! Settings: built-in defaults → `settings.json` in the data dir → `CAIRN_*` environment
//! variables → command-line flags, each layer overriding the one before.
//!
//! The file is nested by section (`{"batch": {"max_size": 20}}`); an environment variable
//! spells the same path in capitals with `__` between section and key
//! (`CAIRN_BATCH__MAX_SIZE=20`). Unknown keys are warnings; a malformed file or a value of
//! the wrong type is an error naming where it came from.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::store::paths::DataDir;

pub mod write;

/// Every setting cairn reads. Defaults are what a fresh install needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub log: LogSettings,
    pub queue: QueueSettings,
    pub batch: BatchSettings,
    pub capture: CaptureSettings,
    pub worker: WorkerSettings,
    pub model: ModelSettings,
    pub context: ContextSettings,
    pub recall: RecallSettings,
    pub backup: BackupSettings,
    pub embed: EmbedSettings,
    pub search: SearchSettings,
    pub sync: SyncSettings,
}

/// `search.*`: what a search shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchSettings {
    /// A search by relevance returns nothing when its best result's estimate (the
    /// probability that the memory is the one asked about, were the query asking about
    /// the project's past, 0 to 1) is below this: no memory holds what is asked. 0
    /// always shows the candidates.
    pub min_relevance: f64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            min_relevance: 0.01,
        }
    }
}

/// `log.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogSettings {
    /// `error`, `warn`, `info`, `debug` or `trace`. Prompt and tool content is logged only
    /// at `debug` and below.
    pub level: String,
    /// Daily log files older than this many days are deleted.
    pub keep_days: u64,
}

/// `queue.*`: the durable job queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueSettings {
    /// Failed attempts before a job is `skipped`.
    pub max_attempts: u32,
    /// How long a claimed batch belongs to its worker before it can be rescued.
    pub lease_secs: u64,
    /// First retry delay after a failed attempt; doubles each attempt, with jitter.
    pub retry_base_secs: u64,
    /// Upper bound of the retry delay.
    pub retry_max_secs: u64,
    /// `done` rows older than this are deleted by `cairn queue purge` and the worker.
    pub retention_days: u64,
}

/// `batch.*`: when a session's observation jobs are ready to be claimed together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BatchSettings {
    /// When false, every job is ready at once and batches hold one job.
    pub enabled: bool,
    /// Most jobs in one batch; this many waiting jobs also make a batch ready.
    pub max_size: u32,
    /// The oldest waiting job makes its batch ready after this long.
    pub max_wait_secs: u64,
}

/// `capture.*`: what hooks store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CaptureSettings {
    /// Tool names whose calls are not queued.
    pub skip_tools: Vec<String>,
    /// Project names (globs with `*` and `?`) that are not captured at all.
    pub excluded_projects: Vec<String>,
    /// Each stored text field is capped to this many bytes, keeping head and tail.
    pub max_field_bytes: usize,
    /// Redact secrets (API keys, tokens, private keys, password assignments) before storing.
    pub redact_secrets: bool,
    /// Inject the context block on `SessionStart` with source `resume` too.
    pub context_on_resume: bool,
    /// How long a hook retries a locked database before spooling the event to a file.
    pub lock_wait_ms: u64,
}

/// `worker.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerSettings {
    /// Model calls in flight at once; 0 is automatic: 1 against a model server on this
    /// machine (a local llama.cpp or Ollama serves one request at a time, and a second one
    /// waits behind the first until it times out), else 2.
    pub concurrency: u32,
    /// Hooks start `cairn-worker` when none holds the worker lock.
    pub autostart: bool,
    /// On SIGTERM/SIGINT, how long the batch in flight may take before it is released.
    pub shutdown_grace_secs: u64,
    /// How often the worker renews its leases, rescues expired ones and heartbeats.
    pub heartbeat_secs: u64,
    /// How often an idle worker looks for ready jobs.
    pub poll_ms: u64,
    /// An autostarted worker exits after this long with nothing to do (0: never).
    pub idle_exit_secs: u64,
}

/// `model.*`: which model compresses events, and how it is called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSettings {
    /// `auto`, `anthropic`, `openai`, `claude-cli` or `offline`.
    pub provider: String,
    /// Model name; empty picks the provider's default.
    pub model: String,
    /// API base URL; empty picks the provider's default (or `ANTHROPIC_BASE_URL`).
    pub base_url: String,
    /// Environment variable holding the API key.
    pub api_key_env: String,
    /// Time limit of one model call.
    pub timeout_secs: u64,
    /// Time limit of all retries of one call together.
    pub max_retry_secs: u64,
    /// The whole prompt is kept under this many characters; larger batches are split.
    pub max_prompt_chars: usize,
    /// Each tool field in a prompt is capped to this many characters.
    pub max_tool_field_chars: usize,
    /// `max_tokens` asked of the model.
    pub max_output_tokens: u32,
    /// Input plus output tokens allowed per UTC day; 0 means no limit.
    pub daily_token_budget: u64,
    /// The `claude` executable for the `claude-cli` provider.
    pub claude_command: String,
}

/// `context.*`: the block injected at `SessionStart`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextSettings {
    /// Size of the block, in tokens (estimated as characters / 4).
    pub budget_tokens: usize,
    /// Most recent sessions of the project that left memories to draw observations from.
    pub max_sessions: usize,
    /// Most recent observations to consider.
    pub max_observations: usize,
    /// Start with the project's latest turn summary.
    pub show_last_summary: bool,
}

/// `recall.*`: memories given when they matter, at a prompt and beside a file's read or
/// edit (`recall::moment`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecallSettings {
    /// Give the memories relevant to each prompt of the user's.
    pub at_prompt: bool,
    /// Give the memories about a file before Claude reads or edits it.
    pub at_file: bool,
    /// Most memories given with one prompt.
    pub max_memories: usize,
    /// Most memories given about one file.
    pub max_file_memories: usize,
    /// Lowest relevance (0 to 1, comparable across prompts) of a memory given with a
    /// prompt.
    pub min_relevance: f64,
    /// Most tokens (characters / 4) given with one prompt or one file.
    pub budget_tokens: usize,
    /// How long the hook waits for the running worker to find memories by meaning before
    /// it goes by words alone, in milliseconds (0: words alone, never ask).
    pub worker_deadline_ms: u64,
}

/// `backup.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackupSettings {
    /// The worker takes one backup a day into `backups/`.
    pub daily: bool,
    /// Daily backups kept.
    pub keep: usize,
    /// Manual backups (`cairn backup` without `--to`) kept in `backups/`; older ones are
    /// deleted after each new one.
    pub keep_manual: usize,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            level: "info".into(),
            keep_days: 14,
        }
    }
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            lease_secs: 300,
            retry_base_secs: 30,
            retry_max_secs: 3600,
            retention_days: 14,
        }
    }
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_size: 20,
            max_wait_secs: 120,
        }
    }
}

impl Default for CaptureSettings {
    fn default() -> Self {
        Self {
            skip_tools: [
                "TodoWrite",
                "TodoRead",
                "ListMcpResourcesTool",
                "ReadMcpResourceTool",
                "AskUserQuestion",
                "ExitPlanMode",
                "TaskOutput",
                "KillShell",
                "SlashCommand",
            ]
            .map(String::from)
            .to_vec(),
            excluded_projects: Vec::new(),
            max_field_bytes: 16 * 1024,
            redact_secrets: true,
            context_on_resume: false,
            lock_wait_ms: 3000,
        }
    }
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            concurrency: 0,
            autostart: true,
            shutdown_grace_secs: 20,
            heartbeat_secs: 15,
            poll_ms: 500,
            idle_exit_secs: 900,
        }
    }
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self {
            provider: "auto".into(),
            model: String::new(),
            base_url: String::new(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            timeout_secs: 60,
            max_retry_secs: 120,
            max_prompt_chars: 24_000,
            max_tool_field_chars: 2_000,
            max_output_tokens: 2_048,
            daily_token_budget: 0,
            claude_command: "claude".into(),
        }
    }
}

impl Default for ContextSettings {
    fn default() -> Self {
        Self {
            budget_tokens: 1_500,
            max_sessions: 10,
            max_observations: 50,
            show_last_summary: true,
        }
    }
}

/// `sync.*`: what this device shares through its sync space (`cairn sync`), and how the
/// worker keeps it in sync on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncSettings {
    /// Projects whose memories sync; none by default, `*` for all.
    pub projects: Vec<String>,
    /// Also sync the user's prompts.
    pub prompts: bool,
    /// The running worker syncs on its own (pushes soon after memories are written here,
    /// pulls when another device pushed); `false` leaves syncing to `cairn sync`.
    pub enabled: bool,
    /// The worker also pulls this often when no notification came (a pooler in
    /// transaction mode or a server that drops them), and re-reads this device's setup.
    pub poll_secs: u64,
    /// The worker `LISTEN`s for other devices' pushes on a connection of its own; `false`
    /// (behind a pooler that cannot carry it) leaves it to polling every `poll_secs`.
    pub listen: bool,
    /// How long a call to the server may wait for its answer before the server counts as
    /// not answering (a frozen or overloaded server, or something that is not PostgreSQL
    /// on that port): `cairn sync` then stops with an error, and the worker says so.
    pub answer_secs: u64,
}

impl Default for SyncSettings {
    fn default() -> Self {
        Self {
            projects: Vec::new(),
            prompts: false,
            enabled: true,
            poll_secs: 30,
            listen: true,
            answer_secs: 60,
        }
    }
}

/// `embed.*`: the sentence model behind search by meaning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EmbedSettings {
    /// `auto` (the local model when its files are there, else full-text search only),
    /// `local` (the same, but its absence is reported as a problem), `openai` (an
    /// OpenAI-compatible `/embeddings` endpoint) or `off`.
    pub provider: String,
    /// Directory holding the model's files; empty is `models/all-MiniLM-L6-v2` in the data
    /// dir.
    pub model_dir: String,
    /// For `openai`: the endpoint's base URL (empty: OpenAI's), e.g.
    /// `http://localhost:11434/v1`.
    pub base_url: String,
    /// For `openai`: the embedding model's name, e.g. `nomic-embed-text`.
    pub model: String,
    /// For `openai`: the environment variable holding the key (none needed locally).
    pub api_key_env: String,
    /// Where `cairn embed --fetch` downloads the model's files from (`<url>/<file>`).
    pub fetch_url: String,
    /// Memories taken from the embedding queue at a time by the worker and `cairn embed`
    /// (an endpoint gets them in one request; the local model runs texts of about the same
    /// length together).
    pub batch_size: usize,
    /// A memory found only by meaning is shown when its cosine similarity to the query is at
    /// least this (found by its words too, it is always a candidate).
    pub min_similarity: f64,
}

impl Default for EmbedSettings {
    fn default() -> Self {
        Self {
            provider: "auto".into(),
            model_dir: String::new(),
            base_url: String::new(),
            model: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            fetch_url: "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/main"
                .into(),
            batch_size: 16,
            min_similarity: 0.2,
        }
    }
}

impl Default for RecallSettings {
    fn default() -> Self {
        Self {
            at_prompt: true,
            at_file: true,
            max_memories: 3,
            max_file_memories: 3,
            min_relevance: 0.35,
            budget_tokens: 250,
            worker_deadline_ms: 25,
        }
    }
}

impl Default for BackupSettings {
    fn default() -> Self {
        Self {
            daily: true,
            keep: 7,
            keep_manual: 10,
        }
    }
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "from", rename_all = "lowercase")]
pub enum Source {
    Default,
    File(PathBuf),
    Env(String),
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Env(v) => write!(f, "env {v}"),
            Source::Flag(v) => write!(f, "flag {v}"),
        }
    }
}

/// Settings after loading, with where each value came from and what was ignored.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub settings: Settings,
    /// Dotted key (`batch.max_size`) → source of its effective value.
    pub sources: BTreeMap<String, Source>,
    /// Unknown keys and variables, one line each.
    pub warnings: Vec<String>,
}

/// Environment variables that start with `CAIRN_` but are not settings.
const NON_SETTING_ENV: &[&str] = &[
    "CAIRN_DATA_DIR",
    crate::SUPPRESS_HOOKS_ENV,
    crate::store::db::SQL_TRACE_ENV,
    // Where the test suite (and `.ci/run`) finds the sentence model's files; every binary
    // a test starts inherits it.
    "CAIRN_TEST_MODEL_DIR",
    // The Claude Code CLI the test of a live session runs.
    "CAIRN_TEST_CLAUDE",
    // The plugin's launcher (`ops/claude-code/bin/cairn-run`): where it installs from.
    "CAIRN_RELEASE_URL",
    "CAIRN_SOURCE_DIR",
    "CAIRN_BUILD_PROFILE",
];

impl Settings {
    /// Loads from the data dir's `settings.json` and the process environment.
    pub fn load(dir: &DataDir) -> Result<Loaded> {
        Self::load_from(&dir.settings(), std::env::vars(), &[])
    }

    /// How long a hook waits for the database (`capture.lock_wait_ms`) as the data dir's
    /// settings say, the default when they cannot be read: what a recovery started by a
    /// reader (`store::recover::recover_unless_worker`) must outlast.
    pub fn lock_wait(dir: &DataDir) -> std::time::Duration {
        let ms = Self::load(dir)
            .map(|l| l.settings.capture.lock_wait_ms)
            .unwrap_or(Settings::default().capture.lock_wait_ms);
        std::time::Duration::from_millis(ms)
    }

    /// Loads from an explicit file (missing means defaults), environment and flag overrides
    /// (`("batch.max_size", "20")`, values parsed like environment values).
    pub fn load_from(
        file: &Path,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &[(&str, &str)],
    ) -> Result<Loaded> {
        let text = read_file(file)?;
        Self::load_text(file, text.as_deref(), env, flags)
    }

    /// [`Settings::load_from`] with the file's text given (`None`: no file), named `file`
    /// in messages. The settings writer checks what it is about to write with this.
    pub(crate) fn load_text(
        file: &Path,
        text: Option<&str>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &[(&str, &str)],
    ) -> Result<Loaded> {
        let defaults = defaults();
        let mut merged = defaults.clone();
        let mut sources = BTreeMap::new();
        let mut warnings = Vec::new();
        for key in leaf_keys(&defaults) {
            sources.insert(key, Source::Default);
        }

        if let Some(text) = text {
            let map = parse_file(file, text)?;
            let src = Source::File(file.to_path_buf());
            merge_file(
                &defaults,
                &mut merged,
                &map,
                "",
                &src,
                text,
                &mut sources,
                &mut warnings,
            )?;
        }

        let mut env: Vec<(String, String)> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("CAIRN_") && !NON_SETTING_ENV.contains(&k.as_str()))
            .collect();
        env.sort();
        for (var, raw) in env {
            let Some(path) = env_key(&var) else {
                warnings.push(format!(
                    "ignoring environment variable {var}: not a cairn setting"
                ));
                continue;
            };
            match lookup(&defaults, &path) {
                Some(default) => {
                    let v = parse_override(default, &raw)
                        .map_err(|why| Error::Settings(format!("{var}={raw}: {why}")))?;
                    set(&mut merged, &path, v);
                    sources.insert(path, Source::Env(var));
                }
                None => warnings.push(format!(
                    "ignoring environment variable {var}: no setting {path}"
                )),
            }
        }

        for (path, raw) in flags {
            let default = lookup(&defaults, path)
                .ok_or_else(|| Error::Settings(format!("unknown setting {path}")))?;
            let v = parse_override(default, raw)
                .map_err(|why| Error::Settings(format!("{path}={raw}: {why}")))?;
            set(&mut merged, path, v);
            sources.insert((*path).to_string(), Source::Flag(format!("{path}={raw}")));
        }

        let settings: Settings = serde_json::from_value(merged)
            .map_err(|e| Error::Settings(format!("settings: {e}")))?;
        settings.validate()?;
        Ok(Loaded {
            settings,
            sources,
            warnings,
        })
    }

    /// Rejects values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, why: &str| Err(Error::Settings(format!("setting {key}: {why}")));
        if self.queue.max_attempts == 0 {
            return bad("queue.max_attempts", "must be at least 1");
        }
        if self.batch.max_size == 0 {
            return bad("batch.max_size", "must be at least 1");
        }
        if !["auto", "local", "openai", "off"].contains(&self.embed.provider.as_str()) {
            return bad("embed.provider", "must be auto, local, openai or off");
        }
        if self.embed.batch_size == 0 {
            return bad("embed.batch_size", "must be at least 1");
        }
        if !(-1.0..=1.0).contains(&self.embed.min_similarity) {
            return bad("embed.min_similarity", "must be between -1 and 1");
        }
        if !(0.0..=1.0).contains(&self.recall.min_relevance) {
            return bad("recall.min_relevance", "must be between 0 and 1");
        }
        if !(0.0..=1.0).contains(&self.search.min_relevance) {
            return bad("search.min_relevance", "must be between 0 and 1");
        }
        if self.queue.lease_secs == 0 {
            return bad("queue.lease_secs", "must be at least 1");
        }
        if !["error", "warn", "info", "debug", "trace", "off"].contains(&self.log.level.as_str()) {
            return bad(
                "log.level",
                "must be one of error, warn, info, debug, trace, off",
            );
        }
        if !["auto", "anthropic", "openai", "claude-cli", "offline"]
            .contains(&self.model.provider.as_str())
        {
            return bad(
                "model.provider",
                "must be one of auto, anthropic, openai, claude-cli, offline",
            );
        }
        Ok(())
    }

    /// The log level as a `log` filter.
    pub fn log_level(&self) -> log::LevelFilter {
        self.log.level.parse().unwrap_or(log::LevelFilter::Info)
    }
}

impl Loaded {
    /// Every effective value with its source, as `(key, value, source)`, sorted by key.
    pub fn effective(&self) -> Vec<(String, Value, Source)> {
        let value = serde_json::to_value(&self.settings).unwrap_or(Value::Null);
        self.sources
            .iter()
            .map(|(k, s)| {
                (
                    k.clone(),
                    lookup(&value, k).cloned().unwrap_or(Value::Null),
                    s.clone(),
                )
            })
            .collect()
    }
}

/// The built-in defaults as JSON: the shape every file, variable and flag is checked against.
fn defaults() -> Value {
    serde_json::to_value(Settings::default()).unwrap_or(Value::Null)
}

/// The built-in default of the setting `path` (`capture.skip_tools`), `None` when there is
/// no such setting.
pub fn default_of(path: &str) -> Option<Value> {
    lookup(&defaults(), path).cloned()
}

/// The settings file's text, `None` when there is none.
fn read_file(file: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("cannot read settings file", file, e)),
    }
}

/// The settings file's text as its object of sections, or an error naming file and line.
fn parse_file(file: &Path, text: &str) -> Result<Map<String, Value>> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Error::Settings(format!(
            "settings file {}: line {}, column {}: {}",
            file.display(),
            e.line(),
            e.column(),
            strip_position(&e.to_string())
        ))
    })?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(Error::Settings(format!(
            "settings file {}: line 1: expected a JSON object of sections",
            file.display()
        ))),
    }
}

fn strip_position(msg: &str) -> &str {
    msg.split(" at line ").next().unwrap_or(msg)
}

fn env_key(var: &str) -> Option<String> {
    let rest = var.strip_prefix("CAIRN_")?;
    let (section, key) = rest.split_once("__")?;
    if section.is_empty() || key.is_empty() {
        return None;
    }
    Some(format!(
        "{}.{}",
        section.to_ascii_lowercase(),
        key.to_ascii_lowercase()
    ))
}

fn leaf_keys(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Value::Object(sections) = v {
        for (section, inner) in sections {
            if let Value::Object(keys) = inner {
                out.extend(keys.keys().map(|k| format!("{section}.{k}")));
            }
        }
    }
    out
}

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn set(v: &mut Value, path: &str, new: Value) {
    let mut cur = v;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, k) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            if let Value::Object(m) = cur {
                m.insert((*k).to_string(), new);
            }
            return;
        }
        match cur.get_mut(*k) {
            Some(next) => cur = next,
            None => return,
        }
    }
}

/// The line of the first `"key"` in the file text, to point at a bad value.
fn line_of_key(text: &str, key: &str) -> usize {
    let needle = format!("\"{key}\"");
    text.lines()
        .position(|l| l.contains(&needle))
        .map_or(1, |i| i + 1)
}

#[allow(clippy::too_many_arguments)]
fn merge_file(
    defaults: &Value,
    merged: &mut Value,
    map: &Map<String, Value>,
    prefix: &str,
    src: &Source,
    text: &str,
    sources: &mut BTreeMap<String, Source>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    for (key, value) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let Some(default) = lookup(defaults, &path) else {
            warnings.push(format!(
                "{src}: line {}: ignoring unknown setting {path}",
                line_of_key(text, key)
            ));
            continue;
        };
        match (default, value) {
            (Value::Object(_), Value::Object(inner)) => {
                merge_file(defaults, merged, inner, &path, src, text, sources, warnings)?;
            }
            _ => {
                check_type(default, value).map_err(|why| {
                    Error::Settings(format!(
                        "settings file {src}: line {}: {path}: {why}",
                        line_of_key(text, key)
                    ))
                })?;
                set(merged, &path, value.clone());
                sources.insert(path, src.clone());
            }
        }
    }
    Ok(())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "a non-negative integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a section",
    }
}

fn check_type(default: &Value, value: &Value) -> std::result::Result<(), String> {
    let ok = match (default, value) {
        (Value::Bool(_), Value::Bool(_)) => true,
        (Value::Number(d), Value::Number(n)) => !d.is_u64() || n.is_u64(),
        (Value::String(_), Value::String(_)) => true,
        (Value::Array(_), Value::Array(items)) => items.iter().all(Value::is_string),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected {}, got {}",
            type_name(default),
            type_name(value)
        ))
    }
}

/// Parses an environment or flag value by the type of the default it replaces.
fn parse_override(default: &Value, raw: &str) -> std::result::Result<Value, String> {
    let raw = raw.trim();
    match default {
        Value::Bool(_) => match raw.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Value::Bool(true)),
            "0" | "false" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err("expected true or false".into()),
        },
        Value::Number(n) if n.is_f64() => raw
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| "expected a number".into()),
        Value::Number(_) => raw
            .parse::<u64>()
            .map(Value::from)
            .map_err(|_| "expected a non-negative integer".into()),
        Value::String(_) => Ok(Value::String(raw.to_string())),
        Value::Array(_) if raw.starts_with('[') => {
            let v: Value = serde_json::from_str(raw).map_err(|e| format!("bad JSON list: {e}"))?;
            check_type(default, &v)?;
            Ok(v)
        }
        Value::Array(_) => Ok(Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        )),
        _ => Err("cannot be set here".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(file_text: Option<&str>, env: &[(&str, &str)]) -> Result<Loaded> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("settings.json");
        if let Some(t) = file_text {
            std::fs::write(&file, t).expect("write");
        }
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Settings::load_from(&file, env, &[])
    }

    #[test]
    fn missing_file_means_defaults() {
        let l = load(None, &[]).expect("load");
        assert_eq!(l.settings, Settings::default());
        assert_eq!(l.sources["batch.max_size"], Source::Default);
        assert!(l.warnings.is_empty());
    }

    #[test]
    fn file_then_env_then_flags() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("settings.json");
        std::fs::write(
            &file,
            r#"{"batch": {"max_size": 7, "max_wait_secs": 9}, "capture": {"skip_tools": ["X"]}}"#,
        )
        .expect("write");
        let env = vec![
            ("CAIRN_BATCH__MAX_SIZE".to_string(), "11".to_string()),
            ("CAIRN_CAPTURE__SKIP_TOOLS".to_string(), "A, B".to_string()),
            ("CAIRN_DATA_DIR".to_string(), "/x".to_string()),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        let l = Settings::load_from(&file, env, &[("log.level", "debug")]).expect("load");
        assert_eq!(l.settings.batch.max_size, 11);
        assert_eq!(l.settings.batch.max_wait_secs, 9);
        assert_eq!(l.settings.capture.skip_tools, vec!["A", "B"]);
        assert_eq!(l.settings.log.level, "debug");
        assert_eq!(
            l.sources["batch.max_size"],
            Source::Env("CAIRN_BATCH__MAX_SIZE".into())
        );
        assert_eq!(l.sources["batch.max_wait_secs"], Source::File(file.clone()));
        assert_eq!(
            l.sources["log.level"],
            Source::Flag("log.level=debug".into())
        );
        let eff = l.effective();
        assert!(eff.iter().any(|(k, v, _)| k == "batch.max_size" && v == 11));
    }

    #[test]
    fn malformed_file_names_file_and_line() {
        let err = load(
            Some("{\n  \"batch\": {\n    \"max_size\": 20,\n  }\n}"),
            &[],
        )
        .expect_err("bad");
        let msg = err.to_string();
        assert!(
            msg.contains("settings.json") && msg.contains("line 4"),
            "{msg}"
        );
    }

    #[test]
    fn wrong_types_are_errors_with_the_key() {
        let err = load(Some("{\"batch\": {\n\"max_size\": \"big\"}}"), &[]).expect_err("type");
        let msg = err.to_string();
        assert!(
            msg.contains("batch.max_size") && msg.contains("line 2"),
            "{msg}"
        );
        let err = load(None, &[("CAIRN_BATCH__ENABLED", "maybe")]).expect_err("env type");
        assert!(err.to_string().contains("CAIRN_BATCH__ENABLED"));
        let err = load(Some("[1]"), &[]).expect_err("not an object");
        assert!(err.to_string().contains("expected a JSON object"));
        let err = load(Some("{\"batch\": {\"max_size\": 0}}"), &[]).expect_err("zero");
        assert!(err.to_string().contains("at least 1"));
    }

    #[test]
    fn unknown_keys_are_warnings() {
        let l = load(
            Some("{\"batch\": {\"size\": 1}, \"nope\": {}}"),
            &[("CAIRN_NOPE__X", "1"), ("CAIRN_WHAT", "1")],
        )
        .expect("load");
        assert_eq!(l.warnings.len(), 4, "{:?}", l.warnings);
        assert_eq!(l.settings, Settings::default());
    }
}
