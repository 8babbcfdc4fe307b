//! The two models cairn uses: the provider that turns tool calls into memories (set up,
//! and with `--online` one tiny real call), and the sentence model search by meaning uses.

use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::hooks::find_program;
use super::{Env, Finding, Level, finding, ok};
use crate::settings::Settings;
use crate::store::paths::DataDir;

/// The provider `settings` come to in `env`, and why (see `worker::model::resolve`).
pub fn resolve_provider(settings: &Settings, env: &Env) -> crate::worker::model::Resolved {
    let vars = |k: &str| env.var(k).map(str::to_string);
    crate::worker::model::resolve(&settings.model, &vars)
}

pub(super) fn check_provider(settings: &Settings, env: &Env, out: &mut Vec<Finding>) {
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
                let snippet = crate::text::head(&text, 200, crate::text::Unit::Chars);
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

/// Search by meaning: the model's files are there and load, and how many memories wait for
/// their vector. Without a model search still works, by words only: a warning, not a
/// failure, unless `embed.provider` is `local`.
pub(super) fn check_search(
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

#[cfg(test)]
mod tests {
    use super::super::testing::{env, levels};
    use super::*;

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
}
