//! A BERT-family sentence encoder (all-MiniLM-L6-v2, bge-small and their kin) on the CPU:
//! `tokenizer.json` and `model.safetensors` from one directory, run with candle, pooled the
//! way sentence-transformers pools (mean over the attention mask, or the `[CLS]` token when
//! the model's `1_Pooling/config.json` says so) and L2-normalised.
//!
//! Invariants: the output of [`Bert::embed`] matches the reference implementation of the
//! model (sentence-transformers) to cosine ≥ 0.9999 (tested against reference vectors);
//! inputs longer than the model's `max_seq_length` are truncated, never rejected; the empty
//! text has a vector like any other. No I/O after [`Bert::load`].

use std::path::Path;

use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder, embedding, layer_norm, linear};
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::error::{Error, Result};

/// The files a model directory must hold.
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Longest input, in tokens, when the model directory does not say
/// (`sentence_bert_config.json`).
const DEFAULT_MAX_TOKENS: usize = 256;

/// `config.json`: the transformer's shape.
#[derive(Debug, Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "two")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "gelu")]
    hidden_act: String,
}

fn two() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn gelu() -> String {
    "gelu".into()
}

/// `sentence_bert_config.json`.
#[derive(Debug, Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

/// `1_Pooling/config.json`.
#[derive(Debug, Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
}

/// How token vectors become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    Mean,
    Cls,
}

#[derive(Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

/// A loaded encoder.
#[derive(Debug)]
pub struct Bert {
    tokenizer: Tokenizer,
    words: Embedding,
    positions: Embedding,
    token_types: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    hidden: usize,
    pooling: Pooling,
    device: Device,
}

fn model_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Embedding(format!("{what}: {e}"))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| model_err(&format!("cannot read {}", path.display()), e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("cannot read", path, e)),
    }
}

impl Bert {
    /// Loads the model in `dir`. Fails with [`Error::Embedding`] naming the file when one is
    /// missing or not what a BERT model directory holds.
    pub fn load(dir: &Path) -> Result<Bert> {
        for f in REQUIRED_FILES {
            if !dir.join(f).is_file() {
                return Err(Error::Embedding(format!(
                    "no {f} in the model directory {}",
                    dir.display()
                )));
            }
        }
        let config: Config = read_json(&dir.join("config.json"))?
            .ok_or_else(|| Error::Embedding("config.json vanished".into()))?;
        if !config.hidden_act.starts_with("gelu") {
            return Err(Error::Embedding(format!(
                "unsupported activation {:?} in {}",
                config.hidden_act,
                dir.join("config.json").display()
            )));
        }
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(Error::Embedding(
                "config.json: bad attention head count".into(),
            ));
        }
        let max_tokens = read_json::<SentenceConfig>(&dir.join("sentence_bert_config.json"))?
            .and_then(|c| c.max_seq_length)
            .unwrap_or(DEFAULT_MAX_TOKENS)
            .min(config.max_position_embeddings);
        let pooling = match read_json::<PoolingConfig>(&dir.join("1_Pooling/config.json"))? {
            Some(p) if p.pooling_mode_cls_token => Pooling::Cls,
            _ => Pooling::Mean,
        };
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| model_err(&format!("cannot load {}", tokenizer_path.display()), e))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| model_err("tokenizer truncation", e))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));

        let weights_path = dir.join("model.safetensors");
        let bytes =
            std::fs::read(&weights_path).map_err(|e| Error::io("cannot read", &weights_path, e))?;
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &device)
            .map_err(|e| model_err(&format!("cannot load {}", weights_path.display()), e))?;
        // Some exports prefix every tensor with the architecture's name.
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let load =
            || -> candle_core::Result<(Embedding, Embedding, Embedding, LayerNorm, Vec<Layer>)> {
                let h = config.hidden_size;
                let eps = config.layer_norm_eps;
                let e = vb.pp("embeddings");
                let mut layers = Vec::with_capacity(config.num_hidden_layers);
                for n in 0..config.num_hidden_layers {
                    let l = vb.pp(format!("encoder.layer.{n}"));
                    layers.push(Layer {
                        query: linear(h, h, l.pp("attention.self.query"))?,
                        key: linear(h, h, l.pp("attention.self.key"))?,
                        value: linear(h, h, l.pp("attention.self.value"))?,
                        attention_out: linear(h, h, l.pp("attention.output.dense"))?,
                        attention_norm: layer_norm(h, eps, l.pp("attention.output.LayerNorm"))?,
                        intermediate: linear(
                            h,
                            config.intermediate_size,
                            l.pp("intermediate.dense"),
                        )?,
                        output: linear(config.intermediate_size, h, l.pp("output.dense"))?,
                        output_norm: layer_norm(h, eps, l.pp("output.LayerNorm"))?,
                    });
                }
                Ok((
                    embedding(config.vocab_size, h, e.pp("word_embeddings"))?,
                    embedding(
                        config.max_position_embeddings,
                        h,
                        e.pp("position_embeddings"),
                    )?,
                    embedding(config.type_vocab_size, h, e.pp("token_type_embeddings"))?,
                    layer_norm(h, eps, e.pp("LayerNorm"))?,
                    layers,
                ))
            };
        let (words, positions, token_types, norm, layers) = load().map_err(|e| {
            model_err(
                &format!("{} is not a BERT model", weights_path.display()),
                e,
            )
        })?;
        Ok(Bert {
            tokenizer,
            words,
            positions,
            token_types,
            norm,
            layers,
            heads: config.num_attention_heads,
            hidden: config.hidden_size,
            pooling,
            device,
        })
    }

    /// Length of the vectors this model makes.
    pub fn dims(&self) -> usize {
        self.hidden
    }

    /// One unit vector per text, in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        // One text at a time: a batch is padded to its longest text, and memories are
        // mostly short, so padding cost far more than batching saved (measured on the
        // recall benchmark's corpus: 13 texts per second in padded batches of 16 on one
        // core, against about 80 one by one).
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            let e = self
                .tokenizer
                .encode(*text, true)
                .map_err(|e| model_err("tokenizer", e))?;
            let ids = e.get_ids().to_vec();
            let mask = e.get_attention_mask().to_vec();
            let cols = ids.len();
            out.extend(
                self.forward(ids, mask, 1, cols)
                    .map_err(|e| model_err("inference", e))?,
            );
        }
        Ok(out)
    }

    fn forward(
        &self,
        ids: Vec<u32>,
        mask: Vec<u32>,
        rows: usize,
        cols: usize,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let ids = Tensor::from_vec(ids, (rows, cols), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, cols), &self.device)?.to_dtype(DType::F32)?;
        let positions = Tensor::arange(0u32, cols as u32, &self.device)?.unsqueeze(0)?;
        let types = ids.zeros_like()?;
        let mut x = self
            .words
            .forward(&ids)?
            .broadcast_add(&self.positions.forward(&positions)?)?
            .add(&self.token_types.forward(&types)?)?;
        x = self.norm.forward(&x)?;
        let head = self.hidden / self.heads;
        let scale = 1.0 / (head as f64).sqrt();
        // Padding positions get a large negative score before the softmax.
        let bias = ((&mask - 1.0)? * 1e4)?.reshape((rows, 1, 1, cols))?;
        let split = |t: Tensor| -> candle_core::Result<Tensor> {
            t.reshape((rows, cols, self.heads, head))?
                .transpose(1, 2)?
                .contiguous()
        };
        for l in &self.layers {
            let q = split(l.query.forward(&x)?)?;
            let k = split(l.key.forward(&x)?)?;
            let v = split(l.value.forward(&x)?)?;
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let context = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((rows, cols, self.hidden))?;
            x = l
                .attention_norm
                .forward(&l.attention_out.forward(&context)?.add(&x)?)?;
            let inner = l.intermediate.forward(&x)?.gelu_erf()?;
            x = l.output_norm.forward(&l.output.forward(&inner)?.add(&x)?)?;
        }
        let pooled = match self.pooling {
            Pooling::Mean => {
                let m = mask.unsqueeze(2)?;
                let sum = x.broadcast_mul(&m)?.sum(1)?;
                let count = m.sum(1)?.clamp(1e-9, f64::MAX)?;
                sum.broadcast_div(&count)?
            }
            Pooling::Cls => x.narrow(1, 0, 1)?.squeeze(1)?,
        };
        let norm = pooled
            .sqr()?
            .sum_keepdim(D::Minus1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        pooled.broadcast_div(&norm)?.to_vec2()
    }
}
