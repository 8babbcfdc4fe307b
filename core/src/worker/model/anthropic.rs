//! The Anthropic Messages API (`POST {base}/v1/messages`).

use std::time::Duration;

use serde_json::{Value, json};

use super::{Completion, ModelError, agent, post_json, status_error};
use crate::worker::prompt::Prompt;

/// The API version header cairn speaks.
pub const API_VERSION: &str = "2023-06-01";

/// A configured Messages API client.
#[derive(Debug)]
pub struct Client {
    agent: ureq::Agent,
    url: String,
    key: String,
    model: String,
    max_tokens: u32,
    timeout: Duration,
}

impl Client {
    pub fn new(base_url: &str, key: &str, model: &str, max_tokens: u32, timeout: Duration) -> Self {
        Self {
            agent: agent(timeout),
            url: format!("{}/v1/messages", base_url.trim_end_matches('/')),
            key: key.to_string(),
            model: model.to_string(),
            max_tokens: max_tokens.max(1),
            timeout,
        }
    }

    /// The endpoint called.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// The request body for a prompt: the fixed instructions as the system prompt.
    pub fn body(&self, prompt: &Prompt) -> Value {
        json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": prompt.system,
            "messages": [{"role": "user", "content": prompt.user}],
        })
    }

    /// One attempt.
    pub fn complete(&self, prompt: &Prompt) -> Result<Completion, ModelError> {
        let (status, retry_after, text) = post_json(
            &self.agent,
            &self.url,
            &[
                ("x-api-key", self.key.as_str()),
                ("anthropic-version", API_VERSION),
            ],
            &self.body(prompt),
            self.timeout,
        )?;
        if !(200..300).contains(&status) {
            return Err(status_error(status, &text, retry_after));
        }
        parse_response(&text)
    }
}

/// Reads a Messages API answer: the text blocks joined, and the token counts.
pub fn parse_response(text: &str) -> Result<Completion, ModelError> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        ModelError::BadResponse(format!("{e}: {}", crate::worker::prompt::cap(text, 200)))
    })?;
    if v.get("type").and_then(Value::as_str) == Some("error") {
        let kind = v
            .pointer("/error/type")
            .and_then(Value::as_str)
            .unwrap_or("error");
        let msg = v
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(if kind == "overloaded_error" {
            ModelError::Overloaded(msg.to_string())
        } else {
            ModelError::BadResponse(format!("{kind}: {msg}"))
        });
    }
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::BadResponse("no content in the answer".into()))?;
    let text: Vec<&str> = content
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let tokens = |k: &str| v.pointer(&format!("/usage/{k}")).and_then(Value::as_u64);
    Ok(Completion {
        text: text.join("\n"),
        input_tokens: tokens("input_tokens").unwrap_or(0)
            + tokens("cache_read_input_tokens").unwrap_or(0)
            + tokens("cache_creation_input_tokens").unwrap_or(0),
        output_tokens: tokens("output_tokens").unwrap_or(0),
        cost_usd: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_text_and_usage() {
        let c = parse_response(
            r#"{"type":"message","content":[{"type":"text","text":"<none/>"},{"type":"tool_use"},{"type":"text","text":"x"}],
                "usage":{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":5}}"#,
        )
        .expect("ok");
        assert_eq!(
            c,
            Completion {
                text: "<none/>\nx".into(),
                input_tokens: 15,
                output_tokens: 3,
                cost_usd: None,
            }
        );
    }

    #[test]
    fn errors_in_the_body() {
        let e = parse_response(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
        )
        .expect_err("overloaded");
        assert!(e.is_retryable(), "{e}");
        let e = parse_response("not json").expect_err("garbage");
        assert!(!e.is_retryable());
        let e = parse_response("{}").expect_err("no content");
        assert!(e.to_string().contains("no content"));
    }

    #[test]
    fn body_shape() {
        let c = Client::new("http://h/", "k", "m", 100, Duration::from_secs(1));
        let b = c.body(&Prompt {
            system: "S".into(),
            user: "U".into(),
        });
        assert_eq!(
            b,
            json!({"model":"m","max_tokens":100,"system":"S","messages":[{"role":"user","content":"U"}]})
        );
    }
}
