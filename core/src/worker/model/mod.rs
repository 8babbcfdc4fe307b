//! Model providers: who turns a prompt into a reply. `anthropic` (Messages API), `openai`
//! (any OpenAI-compatible chat-completions endpoint), `claude-cli` (the `claude` command in
//! print mode) and `offline` (no model: the worker uses [`crate::worker::offline`] instead).
//!
//! Invariants:
//! - one [`Provider::complete`] is one attempt; [`complete_with_retry`] adds in-process
//!   exponential backoff with jitter (the `backoff` crate), honours `Retry-After`, and is
//!   bounded in total time by `model.max_retry_secs`;
//! - whether a failure is worth retrying is decided by [`ModelError::is_retryable`] from the
//!   variant and status code, never from message text: timeouts, connection errors, 408,
//!   429, 5xx and overloaded answers are retried; 400, 401, 403, 404 and bad settings are not;
//! - a prompt too long for the model's context is [`ModelError::ContextLength`], told apart
//!   from other error answers by status and body (llama.cpp's `exceed_context_size_error`,
//!   Anthropic's "prompt is too long", OpenAI's `context_length_exceeded`) in one place,
//!   [`status_error`]: the worker splits the batch rather than retrying the same prompt.

pub mod anthropic;
pub mod claude_cli;
pub mod openai;

use std::time::{Duration, Instant};

use crate::settings::ModelSettings;
use crate::worker::prompt::Prompt;

/// Default model of the `anthropic` provider: a current Haiku.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-haiku-4-5";
/// Default base URL of the `anthropic` provider.
pub const DEFAULT_ANTHROPIC_URL: &str = "https://api.anthropic.com";
/// Default model of the `openai` provider.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
/// Default base URL of the `openai` provider (the path `/chat/completions` is appended).
pub const DEFAULT_OPENAI_URL: &str = "https://api.openai.com/v1";

/// How long jobs wait when the `claude` CLI is not logged in before it is tried again.
pub const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// Longest piece of an error body kept in a message.
const MAX_ERROR_BODY: usize = 500;

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The API answered with an error status.
    #[error("model API answered {status}: {body}")]
    Status {
        status: u16,
        body: String,
        /// The server's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// The prompt is longer than the model's context (a 400 or 413 whose body says so).
    #[error("the prompt is too long for the model's context (model API answered {status}: {body})")]
    ContextLength {
        status: u16,
        body: String,
        /// The prompt's size in tokens, as the server counted it, when it said.
        prompt_tokens: Option<u64>,
        /// The context's size in tokens, when the server said.
        limit_tokens: Option<u64>,
    },
    /// The API said it is overloaded (in a 200 answer's error body).
    #[error("model API is overloaded: {0}")]
    Overloaded(String),
    /// No answer within `model.timeout_secs`.
    #[error("model call timed out after {}s", .0.as_secs_f64())]
    Timeout(Duration),
    /// The connection could not be made or broke.
    #[error("cannot reach the model API: {0}")]
    Transport(String),
    /// An answer arrived but could not be read.
    #[error("model API sent an unreadable answer: {0}")]
    BadResponse(String),
    /// The `claude` command failed.
    #[error("{0}")]
    Process(String),
    /// The `claude` command is not logged in (its own words kept): nothing to retry until
    /// someone logs in, and nothing to count as a failed attempt either.
    #[error("the claude CLI is not logged in ({0}): run `claude` and log in with /login")]
    NotLoggedIn(String),
    /// The settings cannot work (no key, bad URL, missing command).
    #[error("{0}")]
    Config(String),
}

impl ModelError {
    /// True when trying the same call again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Status { status, .. } => {
                matches!(status, 408 | 409 | 425 | 429) || *status >= 500
            }
            ModelError::Overloaded(_)
            | ModelError::Timeout(_)
            | ModelError::Transport(_)
            | ModelError::Process(_) => true,
            ModelError::BadResponse(_)
            | ModelError::Config(_)
            | ModelError::NotLoggedIn(_)
            | ModelError::ContextLength { .. } => false,
        }
    }

    /// How long to wait before calling again without counting a failed attempt: what the
    /// server asked when it rate-limited or turned us away with a `Retry-After` (429, 503,
    /// 529), or [`LOGIN_WAIT`] for a CLI that is not logged in. The worker does not call
    /// before then.
    pub fn wait_asked(&self) -> Option<Duration> {
        match self {
            ModelError::NotLoggedIn(_) => Some(LOGIN_WAIT),
            ModelError::Status {
                status: 429 | 503 | 529,
                retry_after,
                ..
            } => *retry_after,
            _ => None,
        }
    }

    /// How long the server asked us to wait, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A model's reply to one prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    pub text: String,
    /// The provider's count; 0 when it reported none (the worker then estimates).
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// What the call cost in US dollars, when the provider says (`claude-cli` does).
    pub cost_usd: Option<f64>,
}

/// The configured provider.
#[derive(Debug)]
pub enum Provider {
    Anthropic(anthropic::Client),
    OpenAi(openai::Client),
    ClaudeCli(claude_cli::Client),
    /// No model: the worker uses the deterministic extractor.
    Offline,
}

impl Provider {
    /// The provider `settings` ask for. `env` reads environment variables (the process
    /// environment in production). `auto` resolves as [`resolve`] says.
    pub fn from_settings(
        m: &ModelSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Provider, ModelError> {
        let timeout = Duration::from_secs(m.timeout_secs.max(1));
        let key_var = key_var(m);
        let key = env(key_var).filter(|k| !k.trim().is_empty());
        let model_or = |default: &str| {
            if m.model.is_empty() {
                default.to_string()
            } else {
                m.model.clone()
            }
        };
        let provider = resolve(m, env).provider;
        Ok(match provider {
            "anthropic" => {
                let key = key.ok_or_else(|| {
                    ModelError::Config(format!(
                        "model.provider is anthropic but {key_var} is not set"
                    ))
                })?;
                let base = first_non_empty(&[
                    Some(m.base_url.clone()),
                    env("ANTHROPIC_BASE_URL"),
                    Some(DEFAULT_ANTHROPIC_URL.into()),
                ]);
                Provider::Anthropic(anthropic::Client::new(
                    &base,
                    &key,
                    &model_or(DEFAULT_ANTHROPIC_MODEL),
                    m.max_output_tokens,
                    timeout,
                ))
            }
            "openai" => {
                // The default key variable names Anthropic's key, which must never be sent
                // to another API: an OpenAI-compatible endpoint reads OPENAI_API_KEY unless
                // a variable is named explicitly. The key is optional (local servers).
                let key = if key_var == "ANTHROPIC_API_KEY" {
                    env("OPENAI_API_KEY").filter(|k| !k.trim().is_empty())
                } else {
                    key
                };
                let base =
                    first_non_empty(&[Some(m.base_url.clone()), Some(DEFAULT_OPENAI_URL.into())]);
                Provider::OpenAi(openai::Client::new(
                    &base,
                    key.as_deref(),
                    &model_or(DEFAULT_OPENAI_MODEL),
                    m.max_output_tokens,
                    timeout,
                ))
            }
            "claude-cli" => Provider::ClaudeCli(claude_cli::Client::new(
                // Found on `env`'s PATH, so the command asked about is the one run.
                &claude_cli::locate(&m.claude_command, env)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| m.claude_command.clone()),
                &m.model,
                timeout,
            )),
            "offline" => Provider::Offline,
            _ => {
                return Err(ModelError::Config(format!(
                    "unknown model.provider {}",
                    m.provider
                )));
            }
        })
    }

    /// The provider's name, as stored in `model_calls.provider`.
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Anthropic(_) => "anthropic",
            Provider::OpenAi(_) => "openai",
            Provider::ClaudeCli(_) => "claude-cli",
            Provider::Offline => "offline",
        }
    }

    /// The model name, as stored in `model_calls.model`.
    pub fn model(&self) -> &str {
        match self {
            Provider::Anthropic(c) => c.model(),
            Provider::OpenAi(c) => c.model(),
            Provider::ClaudeCli(c) => c.model(),
            Provider::Offline => "offline",
        }
    }

    /// True when the provider's API is served from this machine (`localhost`, a loopback
    /// or unspecified address): a local model server, which usually serves one request at
    /// a time.
    pub fn is_local(&self) -> bool {
        let url = match self {
            Provider::Anthropic(c) => c.url(),
            Provider::OpenAi(c) => c.url(),
            Provider::ClaudeCli(_) | Provider::Offline => return false,
        };
        is_local_url(url)
    }

    /// Model calls in flight at once: `worker.concurrency`, or when it is 0 (automatic)
    /// 1 for a local model server and 2 otherwise.
    pub fn concurrency(&self, setting: u32) -> u32 {
        match setting {
            0 if self.is_local() => 1,
            0 => 2,
            n => n,
        }
    }

    pub fn is_offline(&self) -> bool {
        matches!(self, Provider::Offline)
    }

    /// One attempt: sends the prompt, returns the reply.
    pub fn complete(&self, prompt: &Prompt) -> Result<Completion, ModelError> {
        match self {
            Provider::Anthropic(c) => c.complete(prompt),
            Provider::OpenAi(c) => c.complete(prompt),
            Provider::ClaudeCli(c) => c.complete(prompt),
            Provider::Offline => Err(ModelError::Config(
                "the offline provider makes no model calls".into(),
            )),
        }
    }
}

/// What `model.provider` comes to, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// `anthropic`, `openai`, `claude-cli` or `offline` (or an unknown name as given).
    pub provider: &'static str,
    /// Why, in words for `cairn install` and `cairn doctor`.
    pub why: String,
}

/// The provider `m.provider` names. `auto` is `anthropic` when the key variable
/// (`model.api_key_env`) is set and non-empty; else `claude-cli` when a `claude` CLI
/// (`model.claude_command`) is on `PATH` and logged in (asked of the CLI, which spends no
/// tokens: see [`claude_cli::login`]); else `offline`. Runs a process for `auto` without
/// a key, so it belongs to the worker's start and the CLI, never to a hook.
pub fn resolve(m: &ModelSettings, env: &dyn Fn(&str) -> Option<String>) -> Resolved {
    resolve_without_asking(m, env).unwrap_or_else(|login| login.ask(env))
}

/// [`resolve`] as far as it goes without running anything: `Err` when `auto` comes down
/// to whether the `claude` CLI on `PATH` is logged in, which only the CLI can say. For
/// `cairn install`: asking runs the CLI, and the CLI may rewrite the user's Claude Code
/// settings as it starts (its own migrations), which install promises to keep.
pub fn resolve_without_asking(
    m: &ModelSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, LoginDecides> {
    let key_var = key_var(m);
    let fixed = |provider: &'static str| Resolved {
        provider,
        why: format!("model.provider is {provider}"),
    };
    match m.provider.as_str() {
        "auto" => {}
        "anthropic" => return Ok(fixed("anthropic")),
        "openai" => return Ok(fixed("openai")),
        "claude-cli" => return Ok(fixed("claude-cli")),
        "offline" => return Ok(fixed("offline")),
        _ => {
            return Ok(Resolved {
                provider: "unknown",
                why: format!("unknown model.provider {}", m.provider),
            });
        }
    }
    if env(key_var).is_some_and(|k| !k.trim().is_empty()) {
        return Ok(Resolved {
            provider: "anthropic",
            why: format!("{key_var} is set"),
        });
    }
    let command = if m.claude_command.trim().is_empty() {
        "claude"
    } else {
        m.claude_command.trim()
    };
    if claude_cli::locate(command, env).is_none() {
        return Ok(no_cli(key_var, command));
    }
    Err(LoginDecides {
        command: command.to_string(),
        key_var: key_var.to_string(),
    })
}

/// `auto` with no key and a `claude` CLI on `PATH`: `claude-cli` when it is logged in,
/// else `offline`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginDecides {
    /// The CLI (`model.claude_command`, `claude` by default).
    pub command: String,
    /// The API key's variable, which is not set.
    pub key_var: String,
}

impl LoginDecides {
    /// Asks the CLI ([`claude_cli::login`]).
    pub fn ask(&self, env: &dyn Fn(&str) -> Option<String>) -> Resolved {
        let (command, key_var) = (&self.command, &self.key_var);
        match claude_cli::login(command, env) {
            claude_cli::Login::LoggedIn => Resolved {
                provider: "claude-cli",
                why: format!("{key_var} is not set and {command} is logged in (your subscription)"),
            },
            claude_cli::Login::LoggedOut => Resolved {
                provider: "offline",
                why: format!(
                    "{key_var} is not set and {command} is not logged in (run `{command}` and \
                     /login to use your subscription)"
                ),
            },
            claude_cli::Login::Missing => no_cli(key_var, command),
        }
    }
}

/// `auto` with no key and no CLI.
fn no_cli(key_var: &str, command: &str) -> Resolved {
    Resolved {
        provider: "offline",
        why: format!("{key_var} is not set and no {command} is on PATH"),
    }
}

fn key_var(m: &ModelSettings) -> &str {
    if m.api_key_env.is_empty() {
        "ANTHROPIC_API_KEY"
    } else {
        m.api_key_env.as_str()
    }
}

/// True when `url`'s host is this machine.
fn is_local_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    let host = host.to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

fn first_non_empty(options: &[Option<String>]) -> String {
    options
        .iter()
        .flatten()
        .map(|s| s.trim())
        .find(|s| !s.is_empty())
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string()
}

/// What [`complete_with_retry`] reports about each attempt, for `model_calls`: once before
/// the request is sent, once after.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// The request is about to be sent.
    Starting,
    /// It ended.
    Finished(AttemptRecord),
}

/// One attempt of a call, for `model_calls`.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    pub latency_ms: i64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: Option<f64>,
    /// The provider is not logged in (`ModelError::NotLoggedIn`).
    pub not_logged_in: bool,
    /// `None` on success, else the error text.
    pub error: Option<String>,
}

/// Retry timing of [`complete_with_retry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// All attempts and waits together stay under this.
    pub max_elapsed: Duration,
    /// First wait; doubles per attempt (with jitter of ±50%).
    pub initial: Duration,
    pub max_interval: Duration,
}

impl RetryPolicy {
    pub fn from_settings(m: &ModelSettings) -> Self {
        Self {
            max_elapsed: Duration::from_secs(m.max_retry_secs),
            initial: Duration::from_millis(500),
            max_interval: Duration::from_secs(30),
        }
    }
}

/// Calls the provider, retrying retryable failures with exponential backoff and jitter,
/// honouring `Retry-After`, until `policy.max_elapsed` is spent. `record` sees every
/// attempt, before it is made and after. A `Retry-After` longer than the time left ends
/// the retries at once: the error goes back to the worker, which waits that long before
/// the batch is tried again.
pub fn complete_with_retry(
    provider: &Provider,
    prompt: &Prompt,
    policy: RetryPolicy,
    record: &mut dyn FnMut(Attempt),
) -> Result<Completion, ModelError> {
    let started = Instant::now();
    let backoff = backoff::ExponentialBackoff {
        initial_interval: policy.initial,
        current_interval: policy.initial,
        randomization_factor: 0.5,
        multiplier: 2.0,
        max_interval: policy.max_interval,
        max_elapsed_time: Some(policy.max_elapsed),
        ..Default::default()
    };
    let op = || {
        record(Attempt::Starting);
        let t = Instant::now();
        let result = provider.complete(prompt);
        let latency_ms = t.elapsed().as_millis() as i64;
        match result {
            Ok(c) => {
                record(Attempt::Finished(AttemptRecord {
                    latency_ms,
                    input_tokens: c.input_tokens,
                    output_tokens: c.output_tokens,
                    cost_usd: c.cost_usd,
                    not_logged_in: false,
                    error: None,
                }));
                Ok(c)
            }
            Err(e) => {
                record(Attempt::Finished(AttemptRecord {
                    latency_ms,
                    input_tokens: 0,
                    output_tokens: 0,
                    cost_usd: None,
                    not_logged_in: matches!(e, ModelError::NotLoggedIn(_)),
                    error: Some(e.to_string()),
                }));
                if !e.is_retryable() {
                    return Err(backoff::Error::Permanent(e));
                }
                match e.retry_after() {
                    Some(wait) if started.elapsed() + wait > policy.max_elapsed => {
                        Err(backoff::Error::Permanent(e))
                    }
                    Some(wait) => Err(backoff::Error::retry_after(e, wait)),
                    None => Err(backoff::Error::transient(e)),
                }
            }
        }
    };
    let notify = |e: ModelError, wait: Duration| {
        log::info!(
            "model call failed ({e}); retrying in {:.1}s",
            wait.as_secs_f64()
        );
    };
    backoff::retry_notify(backoff, op, notify).map_err(|e| match e {
        backoff::Error::Permanent(e) => e,
        backoff::Error::Transient { err, .. } => err,
    })
}

/// Parses a `Retry-After` header given in seconds (the HTTP-date form is ignored).
pub fn parse_retry_after(value: Option<&str>) -> Option<Duration> {
    let v = value?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// Classifies a ureq error.
pub(crate) fn transport_error(e: ureq::Error, timeout: Duration) -> ModelError {
    match e {
        ureq::Error::Timeout(_) => ModelError::Timeout(timeout),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            ModelError::Timeout(timeout)
        }
        ureq::Error::BadUri(u) => ModelError::Config(format!("bad model.base_url: {u}")),
        other => ModelError::Transport(other.to_string()),
    }
}

/// Sends a JSON body with a POST and returns (status, Retry-After, body text).
pub(crate) fn post_json(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: &serde_json::Value,
    timeout: Duration,
) -> Result<(u16, Option<Duration>, String), ModelError> {
    let mut req = agent.post(url).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req
        .send(body.to_string())
        .map_err(|e| transport_error(e, timeout))?;
    let status = resp.status().as_u16();
    let retry_after = parse_retry_after(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
    );
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| transport_error(e, timeout))?;
    Ok((status, retry_after, text))
}

/// An agent that returns error statuses as answers and gives up after `timeout`.
pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .user_agent(concat!("cairn/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// The error for a non-2xx answer. A 400 or 413 whose body says the prompt does not fit
/// the context is [`ModelError::ContextLength`], whichever provider sent it.
pub(crate) fn status_error(status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
    let capped = crate::worker::prompt::cap(body.trim(), MAX_ERROR_BODY);
    if matches!(status, 400 | 413) && says_context_exceeded(body) {
        let (prompt_tokens, limit_tokens) = context_sizes(body);
        return ModelError::ContextLength {
            status,
            body: capped,
            prompt_tokens,
            limit_tokens,
        };
    }
    ModelError::Status {
        status,
        body: capped,
        retry_after,
    }
}

/// The words each provider uses for a prompt longer than the context: llama.cpp
/// (`exceed_context_size_error`, "exceeds the available context size"), Anthropic
/// ("prompt is too long"), OpenAI and vLLM (`context_length_exceeded`, "maximum context
/// length"), Ollama ("context length").
fn says_context_exceeded(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    [
        "exceed_context_size_error",
        "exceeds the available context size",
        "prompt is too long",
        "context_length_exceeded",
        "maximum context length",
        "context length exceeded",
        "input is too long",
    ]
    .iter()
    .any(|p| b.contains(p))
}

/// The prompt's and the context's sizes in tokens from a context-length error: the
/// numbers it names with "tokens" (llama.cpp "request (7797 tokens) exceeds the available
/// context size (4096 tokens)", Anthropic "prompt is too long: 210000 tokens > 200000
/// maximum", OpenAI "maximum context length is 128000 tokens. However, your messages
/// resulted in 130000 tokens"): the larger is the prompt, the smaller the context.
fn context_sizes(body: &str) -> (Option<u64>, Option<u64>) {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(|m| m.as_str())
                .map(String::from)
        })
        .unwrap_or_else(|| body.to_string());
    let mut numbers = Vec::new();
    let mut digits = String::new();
    for ch in message.chars().chain(std::iter::once(' ')) {
        if ch.is_ascii_digit() {
            digits.push(ch);
        } else if ch != ',' || digits.is_empty() {
            if let Ok(n) = digits.parse::<u64>()
                && n >= 16
            {
                numbers.push(n);
            }
            digits.clear();
        }
    }
    match numbers[..] {
        [a, b, ..] if a != b => (Some(a.max(b)), Some(a.min(b))),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn auto_picks_anthropic_with_a_key_else_offline() {
        let m = ModelSettings::default();
        let p = Provider::from_settings(&m, &env_of(&[])).expect("offline");
        assert_eq!(p.name(), "offline");
        let p = Provider::from_settings(&m, &env_of(&[("ANTHROPIC_API_KEY", " ")])).expect("blank");
        assert_eq!(p.name(), "offline");
        let p = Provider::from_settings(
            &m,
            &env_of(&[
                ("ANTHROPIC_API_KEY", "k"),
                ("ANTHROPIC_BASE_URL", "http://x/"),
            ]),
        )
        .expect("anthropic");
        assert_eq!(
            (p.name(), p.model()),
            ("anthropic", DEFAULT_ANTHROPIC_MODEL)
        );
        match p {
            Provider::Anthropic(c) => assert_eq!(c.url(), "http://x/v1/messages"),
            other => panic!("{other:?}"),
        }
        let named = ModelSettings {
            api_key_env: "MY_KEY".into(),
            base_url: "http://y".into(),
            ..ModelSettings::default()
        };
        let p = Provider::from_settings(
            &named,
            &env_of(&[("MY_KEY", "k"), ("ANTHROPIC_BASE_URL", "http://x")]),
        )
        .expect("anthropic");
        match p {
            Provider::Anthropic(c) => assert_eq!(c.url(), "http://y/v1/messages"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn auto_picks_by_key_then_logged_in_cli_then_offline() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let path = bin.display().to_string();
        let m = ModelSettings::default();
        // (key set, CLI on PATH, CLI logged in) → provider
        let cases = [
            (false, false, false, "offline"),
            (false, true, false, "offline"),
            (false, true, true, "claude-cli"),
            (true, false, false, "anthropic"),
            (true, true, false, "anthropic"),
            (true, true, true, "anthropic"),
        ];
        for (key, cli, logged_in, want) in cases {
            let _ = std::fs::remove_file(bin.join("claude"));
            if cli {
                claude_cli::tests::fake_claude(&bin, if logged_in { "ok" } else { "logged-out" });
            }
            let env = |k: &str| match k {
                "PATH" => Some(path.clone()),
                "ANTHROPIC_API_KEY" if key => Some("k".into()),
                _ => None,
            };
            let r = resolve(&m, &env);
            assert_eq!(
                r.provider, want,
                "key {key} cli {cli} logged in {logged_in}: {r:?}"
            );
            // Without asking, only the CLI's login is left open.
            match resolve_without_asking(&m, &env) {
                Ok(known) => assert_eq!(known, r, "cli {cli} key {key}"),
                Err(login) => {
                    assert!(cli && !key, "{login:?}");
                    assert_eq!(login.command, "claude");
                }
            }
            let p = Provider::from_settings(&m, &env).expect("provider");
            assert_eq!(p.name(), want);
            if want == "claude-cli" {
                assert_eq!(p.model(), claude_cli::DEFAULT_MODEL);
                assert!(r.why.contains("logged in"), "{}", r.why);
            }
            if cli && !logged_in && !key {
                assert!(r.why.contains("/login"), "{}", r.why);
            }
        }
        // Asking the CLI spent no tokens: it never ran in print mode.
        assert!(!bin.join("args").exists());
        // An explicit provider is taken as it is, logged in or not.
        let fixed = ModelSettings {
            provider: "claude-cli".into(),
            ..ModelSettings::default()
        };
        assert_eq!(resolve(&fixed, &|_: &str| None).provider, "claude-cli");
    }

    #[test]
    fn explicit_anthropic_without_a_key_is_a_config_error() {
        let m = ModelSettings {
            provider: "anthropic".into(),
            ..ModelSettings::default()
        };
        let e = Provider::from_settings(&m, &env_of(&[])).expect_err("no key");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
    }

    #[test]
    fn openai_never_sends_the_anthropic_key() {
        let m = ModelSettings {
            provider: "openai".into(),
            base_url: "http://localhost:11434/v1/".into(),
            model: "llama3".into(),
            ..ModelSettings::default()
        };
        let p = Provider::from_settings(&m, &env_of(&[("ANTHROPIC_API_KEY", "secret")]))
            .expect("openai");
        match p {
            Provider::OpenAi(c) => {
                assert_eq!(c.url(), "http://localhost:11434/v1/chat/completions");
                assert!(!c.has_key());
                assert_eq!(c.model(), "llama3");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retryable_by_variant_and_status() {
        let s = |status| ModelError::Status {
            status,
            body: String::new(),
            retry_after: None,
        };
        for code in [408, 429, 500, 502, 503, 529] {
            assert!(s(code).is_retryable(), "{code}");
        }
        for code in [400, 401, 403, 404, 422] {
            assert!(!s(code).is_retryable(), "{code}");
        }
        assert!(ModelError::Timeout(Duration::from_secs(1)).is_retryable());
        assert!(ModelError::Overloaded("x".into()).is_retryable());
        assert!(!ModelError::BadResponse("x".into()).is_retryable());
        assert_eq!(parse_retry_after(Some(" 3 ")), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after(Some("0.5")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
        assert_eq!(parse_retry_after(None), None);
    }

    #[test]
    fn a_local_model_server_gets_one_call_at_a_time() {
        for (url, local) in [
            ("http://127.0.0.1:8080/v1", true),
            ("http://localhost:11434/v1", true),
            ("http://LOCALHOST", true),
            ("http://[::1]:8080", true),
            ("http://0.0.0.0:8080/v1", true),
            ("http://127.0.0.2:8080", true),
            ("https://api.openai.com/v1", false),
            ("https://localhost.example.com", false),
            ("http://10.0.0.5:8080", false),
        ] {
            assert_eq!(is_local_url(url), local, "{url}");
        }
        let openai = |base: &str| {
            Provider::from_settings(
                &ModelSettings {
                    provider: "openai".into(),
                    base_url: base.into(),
                    ..ModelSettings::default()
                },
                &env_of(&[]),
            )
            .expect("openai")
        };
        let local = openai("http://127.0.0.1:8080/v1");
        assert_eq!((local.concurrency(0), local.concurrency(3)), (1, 3));
        let remote = openai("");
        assert_eq!((remote.concurrency(0), remote.concurrency(1)), (2, 1));
        assert_eq!(Provider::Offline.concurrency(0), 2);
    }

    #[test]
    fn context_length_errors_of_each_provider_are_recognised() {
        let check = |status, body: &str, sizes: (Option<u64>, Option<u64>)| match status_error(
            status, body, None,
        ) {
            ModelError::ContextLength {
                prompt_tokens,
                limit_tokens,
                ..
            } => assert_eq!((prompt_tokens, limit_tokens), sizes, "{body}"),
            other => panic!("{body}: {other:?}"),
        };
        check(
            400,
            r#"{"error":{"code":400,"message":"request (7797 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error"}}"#,
            (Some(7797), Some(4096)),
        );
        check(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210,500 tokens > 200000 maximum"}}"#,
            (Some(210_500), Some(200_000)),
        );
        check(
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            (Some(130_012), Some(128_000)),
        );
        check(413, "prompt is too long", (None, None));
        // Other 400s, and a 500 that mentions the words, stay what they are.
        assert!(matches!(
            status_error(400, r#"{"error":"bad request"}"#, None),
            ModelError::Status { status: 400, .. }
        ));
        assert!(matches!(
            status_error(500, "prompt is too long", None),
            ModelError::Status { status: 500, .. }
        ));
        assert!(!status_error(400, "prompt is too long", None).is_retryable());
    }

    #[test]
    fn a_wait_is_asked_only_by_rate_limits_with_retry_after() {
        let s = |status, secs: Option<u64>| ModelError::Status {
            status,
            body: String::new(),
            retry_after: secs.map(Duration::from_secs),
        };
        assert_eq!(s(429, Some(30)).wait_asked(), Some(Duration::from_secs(30)));
        assert_eq!(s(529, Some(5)).wait_asked(), Some(Duration::from_secs(5)));
        assert_eq!(s(429, None).wait_asked(), None);
        assert_eq!(s(500, Some(5)).wait_asked(), None);
    }
}
