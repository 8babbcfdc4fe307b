//! Any OpenAI-compatible chat-completions endpoint (`POST {base}/chat/completions`):
//! OpenAI, Ollama, llama.cpp server, vLLM, OpenRouter.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Completion, ModelError, agent, post_json, status_error};
use crate::worker::prompt::Prompt;

/// A configured chat-completions client.
#[derive(Debug)]
pub struct Client {
    agent: ureq::Agent,
    url: String,
    key: Option<String>,
    model: String,
    max_tokens: u32,
    timeout: Duration,
}

impl Client {
    /// `base_url` includes the version path (`http://localhost:11434/v1`); the key is
    /// optional (local servers need none).
    pub fn new(
        base_url: &str,
        key: Option<&str>,
        model: &str,
        max_tokens: u32,
        timeout: Duration,
    ) -> Self {
        Self {
            agent: agent(timeout),
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            key: key.map(String::from),
            model: model.to_string(),
            max_tokens: max_tokens.max(1),
            timeout,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// True when requests carry an `Authorization` header.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// The request body: instructions as the system message, the rest as the user's.
    pub fn body(&self, prompt: &Prompt) -> Value {
        json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
        })
    }

    /// One attempt.
    pub fn complete(&self, prompt: &Prompt) -> Result<Completion, ModelError> {
        let auth = self.key.as_ref().map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| ("authorization", a))
            .into_iter()
            .collect();
        let (status, retry_after, text) = post_json(
            &self.agent,
            &self.url,
            &headers,
            &self.body(prompt),
            self.timeout,
        )?;
        if !(200..300).contains(&status) {
            return Err(status_error(status, &text, retry_after));
        }
        parse_response(&text)
    }
}

/// Reads a chat-completions answer: the first choice's message and the token counts.
pub fn parse_response(text: &str) -> Result<Completion, ModelError> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        ModelError::BadResponse(format!("{e}: {}", crate::worker::prompt::cap(text, 200)))
    })?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| err.to_string());
        return Err(ModelError::BadResponse(msg));
    }
    let content = v
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| ModelError::BadResponse("no choices[0].message.content".into()))?;
    let tokens = |k: &str| {
        v.pointer(&format!("/usage/{k}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(Completion {
        text: content.to_string(),
        input_tokens: tokens("prompt_tokens"),
        output_tokens: tokens("completion_tokens"),
        cost_usd: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_choice() {
        let c = parse_response(
            r#"{"choices":[{"message":{"role":"assistant","content":"<none/>"}}],"usage":{"prompt_tokens":7,"completion_tokens":2}}"#,
        )
        .expect("ok");
        assert_eq!(
            (c.text.as_str(), c.input_tokens, c.output_tokens),
            ("<none/>", 7, 2)
        );
        assert!(parse_response(r#"{"choices":[]}"#).is_err());
        assert!(parse_response(r#"{"error":{"message":"bad model"}}"#).is_err());
    }
}
