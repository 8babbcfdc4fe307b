//! Embeddings from any OpenAI-compatible `/embeddings` endpoint (OpenAI, Ollama,
//! llama.cpp's server, vLLM): the alternative to the local model (`embed.provider`
//! `openai`, `embed.base_url`, `embed.model`, the key in the variable `embed.api_key_env`).
//!
//! Vectors come back normalised to unit length whatever the server does, in the order of
//! the texts; a reply that is not that is an error, never a partial result.

use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// A configured embeddings client.
#[derive(Debug)]
pub struct Remote {
    agent: ureq::Agent,
    url: String,
    model: String,
    key: Option<String>,
}

impl Remote {
    /// `base_url` includes the version path (`http://localhost:11434/v1`).
    pub fn new(base_url: &str, model: &str, key: Option<String>, timeout: Duration) -> Remote {
        Remote {
            agent: ureq::Agent::config_builder()
                .timeout_global(Some(timeout))
                .http_status_as_error(false)
                .user_agent(concat!("cairn/", env!("CARGO_PKG_VERSION")))
                .build()
                .into(),
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            model: model.to_string(),
            key,
        }
    }

    /// One unit vector per text, in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut req = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json");
        if let Some(k) = &self.key {
            req = req.header("authorization", &format!("Bearer {k}"));
        }
        let body = json!({"model": self.model, "input": texts});
        let fail = |why: String| Error::Embedding(format!("embeddings from {}: {why}", self.url));
        let mut resp = req
            .send(body.to_string())
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| fail(e.to_string()))?;
        if status != 200 {
            let short = crate::text::head(&text, 300, crate::text::Unit::Chars);
            return Err(fail(format!("HTTP {status}: {}", short.trim())));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| fail(format!("not JSON: {e}")))?;
        let data = v["data"]
            .as_array()
            .ok_or_else(|| fail("no `data` list in the reply".into()))?;
        if data.len() != texts.len() {
            return Err(fail(format!(
                "{} vectors for {} texts",
                data.len(),
                texts.len()
            )));
        }
        let mut out = vec![Vec::new(); texts.len()];
        for (i, item) in data.iter().enumerate() {
            let at = item["index"].as_u64().map_or(i, |n| n as usize);
            let vector: Option<Vec<f32>> = item["embedding"]
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect());
            let mut vector = vector.ok_or_else(|| fail(format!("item {i} has no embedding")))?;
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                vector.iter_mut().for_each(|x| *x /= norm);
            }
            let slot = out
                .get_mut(at)
                .ok_or_else(|| fail(format!("item index {at} out of range")))?;
            *slot = vector;
        }
        if out.iter().any(Vec::is_empty) {
            return Err(fail("a text got no vector".into()));
        }
        Ok(out)
    }
}
