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

/// Most tokens (texts × padded length) run through the model at once: bounds the memory
/// of one step (the attention scores of a step are 12 heads × this × its length floats).
const STEP_TOKENS: usize = 2048;

/// The texts (indices into `tokens`) grouped for one step each: sorted by length, and a
/// group's longest text at most an eighth (plus two tokens) longer than its shortest, so
/// padding stays small. Memories are mostly short; padding a batch to its longest text
/// cost more than batching saved (13 texts per second in padded batches of 16 against 43
/// one by one, on the recall benchmark's corpus, one core); grouped by length, and with
/// [`gelu_activation`], the same run makes 53.
fn length_groups(tokens: &[Vec<u32>]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by_key(|&i| tokens[i].len());
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in order {
        let len = tokens[i].len().max(1);
        match groups.last_mut() {
            Some(g)
                if len <= tokens[g[0]].len() + tokens[g[0]].len() / 8 + 2
                    && (g.len() + 1) * len <= STEP_TOKENS =>
            {
                g.push(i)
            }
            _ => groups.push(vec![i]),
        }
    }
    groups
}

/// GELU, `x·Φ(x)`, with `erf` to within 1.5e-7 (Abramowitz and Stegun 7.1.26): the
/// model's activation, at a third of the cost of the exact `erf` it took most of a text's
/// time computing. The vectors agree with the reference implementation's all the same.
fn gelu_activation(t: &Tensor) -> candle_core::Result<Tensor> {
    let mut v = t.flatten_all()?.to_vec1::<f32>()?;
    for x in &mut v {
        *x *= 0.5 * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
    Tensor::from_vec(v, t.shape(), t.device())
}

fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = 1.0 - poly * (-a * a).exp();
    y.copysign(x)
}

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
        let mut tokens = Vec::with_capacity(texts.len());
        for text in texts {
            let e = self
                .tokenizer
                .encode(*text, true)
                .map_err(|e| model_err("tokenizer", e))?;
            tokens.push(e.get_ids().to_vec());
        }
        let mut out = vec![Vec::new(); texts.len()];
        for group in length_groups(&tokens) {
            let cols = group.iter().map(|&i| tokens[i].len()).max().unwrap_or(0);
            let mut ids = Vec::with_capacity(group.len() * cols);
            let mut mask = Vec::with_capacity(group.len() * cols);
            for &i in &group {
                let t = &tokens[i];
                ids.extend_from_slice(t);
                ids.resize(ids.len() + cols - t.len(), 0);
                mask.extend(std::iter::repeat_n(1u32, t.len()));
                mask.resize(mask.len() + cols - t.len(), 0);
            }
            let vectors = self
                .forward(ids, mask, group.len(), cols)
                .map_err(|e| model_err("inference", e))?;
            for (i, v) in group.into_iter().zip(vectors) {
                out[i] = v;
            }
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
        // Tokens of every text are rows of one matrix, so each dense layer is one
        // matrix product whatever the number of texts.
        let mut x = self
            .words
            .forward(&ids)?
            .broadcast_add(&self.positions.forward(&positions)?)?
            .add(&self.token_types.forward(&types)?)?
            .reshape((rows * cols, self.hidden))?;
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
                .reshape((rows * cols, self.hidden))?;
            x = l
                .attention_norm
                .forward(&l.attention_out.forward(&context)?.add(&x)?)?;
            let inner = gelu_activation(&l.intermediate.forward(&x)?)?;
            x = l.output_norm.forward(&l.output.forward(&inner)?.add(&x)?)?;
        }
        let x = x.reshape((rows, cols, self.hidden))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_of_about_one_length_run_together() {
        let lens = [40usize, 9, 10, 41, 300, 12, 44, 70, 9];
        let tokens: Vec<Vec<u32>> = lens.iter().map(|&n| vec![7; n]).collect();
        let groups = length_groups(&tokens);
        let mut seen: Vec<usize> = groups.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..lens.len()).collect::<Vec<_>>(), "every text once");
        let as_lens: Vec<Vec<usize>> = groups
            .iter()
            .map(|g| g.iter().map(|&i| lens[i]).collect())
            .collect();
        assert_eq!(
            as_lens,
            vec![vec![9, 9, 10, 12], vec![40, 41, 44], vec![70], vec![300]]
        );
    }

    #[test]
    fn a_step_holds_at_most_its_token_budget() {
        let tokens: Vec<Vec<u32>> = (0..100).map(|_| vec![7; 100]).collect();
        let groups = length_groups(&tokens);
        assert!(groups.iter().all(|g| g.len() * 100 <= STEP_TOKENS));
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), 100);
        assert_eq!(groups.len(), 100usize.div_ceil(STEP_TOKENS / 100));
    }

    #[test]
    fn erf_is_close_to_the_exact_one() {
        // Reference values of erf.
        for (x, want) in [
            (0.0f32, 0.0f32),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-1.0, -0.842_700_8),
            (2.0, 0.995_322_3),
            (-3.5, -0.999_999_3),
        ] {
            assert!((erf(x) - want).abs() < 3e-7, "erf({x}) = {}", erf(x));
        }
    }
}
