//! A BERT-family sentence encoder (all-MiniLM-L6-v2, bge-small and their kin) on the CPU:
//! `tokenizer.json` and `model.safetensors` from one directory, run with candle, pooled the
//! way sentence-transformers pools (mean over the attention mask, or the `[CLS]` token when
//! the model's `1_Pooling/config.json` says so) and L2-normalised.
//!
//! Invariants: the output of [`Bert::embed`] matches the reference implementation of the
//! model (sentence-transformers) to cosine ≥ 0.9999 (tested against reference vectors);
//! inputs longer than the model's `max_seq_length` are cut, never rejected (a memory to its
//! first tokens, as the reference does; a query to its first and last: [`Reading`]); the
//! empty text has a vector like any other. No I/O after [`Bert::load`].

use std::path::Path;

use cairn_kernels::dense::Dense;
use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder, embedding, layer_norm, linear};
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer};

use crate::error::{Error, Result};

/// Most tokens (texts × padded length) run through the model at once (a longer text runs
/// alone): bounds the memory of one step (the attention scores of a step are 12 heads ×
/// this × its length floats). The worker embedding the recall corpus on one core peaked at
/// 207 MB with 2048, 176 MB with 1024, 145 MB with 512 and 121 MB with 256 or 128, and was
/// fastest with 256 (52.7 s against 56.8 s with 2048).
const STEP_TOKENS: usize = 256;

/// A text's vector, and those of its head and body when it was given them.
pub type Split = (Vec<f32>, Option<(Vec<f32>, Vec<f32>)>);

/// What one step of the model makes: each text's vector, and the head's and body's of
/// each when asked.
type Pooled = (Vec<Vec<f32>>, Option<(Vec<Vec<f32>>, Vec<Vec<f32>>)>);

/// Which tokens of a text longer than the model reads are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// The first ones, as the model was trained and its reference runs: a memory says what
    /// it is about first.
    Head,
    /// The first half and the last half: a prompt pasting a log or a traceback says what
    /// went wrong at its end (the words of a query are read at both ends too: `query`).
    BothEnds,
}

/// The places of the tokens kept of a text of `n` tokens (its special tokens at both ends
/// among them) for a model reading at most `max`, in order.
fn kept(n: usize, max: usize, reading: Reading) -> Vec<usize> {
    if n <= max {
        return (0..n).collect();
    }
    match reading {
        // The first `max - 1` and the closing special token.
        Reading::Head => (0..max - 1).chain(std::iter::once(n - 1)).collect(),
        Reading::BothEnds => (0..max / 2).chain(n - (max - max / 2)..n).collect(),
    }
}

/// Which part of a text a token belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Head,
    Body,
    Neither,
}

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

thread_local! {
    /// The thread as a rayon pool of its own, of that one thread, once
    /// [`keep_model_work_on_this_thread`] made it.
    static ALONE: std::cell::OnceCell<rayon::ThreadPool> = const { std::cell::OnceCell::new() };
}

/// From now on, the model's work called from this thread runs on it, in line: the
/// thread becomes the only thread of a rayon pool of its own, which candle's small
/// operations (softmax, layer norms, the attention's products) split their work over.
/// Otherwise each of them hands its work to the global pool and sleeps until it is done,
/// some twenty hand-overs and wake-ups per text, which took more than a third of a
/// prompt's embedding: 5.1 → 3.2 ms at the median (one thread, 200 short texts,
/// BENCHMARKS.md, "Recall at prompts and files"). The dense layers, the bulk of the work,
/// are split over threads by `cairn_kernels::dense` itself. The work also keeps this
/// thread's priority (the background embedder's).
///
/// For a thread that lives as long as its process (the worker's answerer and embedder):
/// rayon never frees a pool made of a thread it did not start (a few kilobytes), so a
/// thread started per request (the viewer's) must not call it. Does nothing on a thread
/// that already works for a pool.
pub fn keep_model_work_on_this_thread() {
    ALONE.with(|alone| {
        if alone.get().is_none()
            && rayon::current_thread_index().is_none()
            && let Ok(pool) = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .use_current_thread()
                .build()
        {
            let _ = alone.set(pool);
        }
    });
}

/// Runs `f` in this thread's own pool when it has one
/// ([`keep_model_work_on_this_thread`]), else as it is.
fn on_this_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    ALONE.with(|alone| match alone.get() {
        Some(pool) => pool.install(f),
        None => f(),
    })
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
    query: Dense,
    key: Dense,
    value: Dense,
    attention_out: Dense,
    attention_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    output_norm: LayerNorm,
}

/// A loaded encoder.
#[derive(Debug)]
pub struct Bert {
    tokenizer: Tokenizer,
    /// Most tokens the model reads of a text (`max_seq_length`).
    max_tokens: usize,
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

/// The tensors of a `.safetensors` file, each read from the file when the model asks for
/// it. Reading the whole file first held it (90 MB for all-MiniLM-L6-v2) beside the tensors
/// made from it: loading peaked at twice the weights (188 MB against 100 MB once loaded).
struct Weights {
    file: std::fs::File,
    path: std::path::PathBuf,
    /// Offset of the data block in the file.
    data: u64,
    tensors: std::collections::HashMap<String, TensorInfo>,
}

#[derive(Deserialize)]
struct TensorInfo {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (u64, u64),
}

impl Weights {
    /// Reads the file's header (an 8-byte little-endian length, then that much JSON).
    fn open(path: &Path) -> Result<Weights> {
        use std::io::Read;
        let bad = |why: String| model_err(&format!("cannot load {}", path.display()), why);
        let mut file = std::fs::File::open(path).map_err(|e| Error::io("cannot read", path, e))?;
        let mut len = [0u8; 8];
        file.read_exact(&mut len)
            .map_err(|e| bad(format!("no header: {e}")))?;
        let len = u64::from_le_bytes(len);
        let size = file
            .metadata()
            .map_err(|e| Error::io("cannot read", path, e))?
            .len();
        if len > size.saturating_sub(8) || len > 100 << 20 {
            return Err(bad(format!("header of {len} bytes in a file of {size}")));
        }
        let mut header = vec![0u8; len as usize];
        file.read_exact(&mut header)
            .map_err(|e| bad(format!("short header: {e}")))?;
        let mut entries: std::collections::HashMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| bad(format!("bad header: {e}")))?;
        entries.remove("__metadata__");
        let mut tensors = std::collections::HashMap::with_capacity(entries.len());
        for (name, v) in entries {
            let info: TensorInfo =
                serde_json::from_value(v).map_err(|e| bad(format!("tensor {name}: {e}")))?;
            tensors.insert(name, info);
        }
        Ok(Weights {
            file,
            path: path.to_path_buf(),
            data: 8 + len,
            tensors,
        })
    }

    fn read(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        use std::os::unix::fs::FileExt;
        let info = self
            .tensors
            .get(name)
            .ok_or_else(|| candle_core::Error::CannotFindTensor { path: name.into() })?;
        let stored = match info.dtype.as_str() {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            other => candle_core::bail!("tensor {name} has unsupported dtype {other}"),
        };
        let (start, end) = info.data_offsets;
        let count: usize = info.shape.iter().product();
        if end < start || (end - start) as usize != count * stored.size_in_bytes() {
            candle_core::bail!("tensor {name}: data offsets do not fit its shape");
        }
        let mut bytes = vec![0u8; (end - start) as usize];
        self.file
            .read_exact_at(&mut bytes, self.data + start)
            .map_err(|e| {
                candle_core::Error::Msg(format!("{}: tensor {name}: {e}", self.path.display()))
            })?;
        Tensor::from_raw_buffer(&bytes, stored, &info.shape, dev)?.to_dtype(dtype)
    }
}

impl candle_nn::var_builder::SimpleBackend for Weights {
    fn get(
        &self,
        s: candle_core::Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = self.read(name, dtype, dev)?;
        if t.shape() != &s {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: t.shape().clone(),
            }
            .bt());
        }
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.read(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// A dense layer of the model, packed for our product (`cairn_kernels::dense`).
fn dense(inputs: usize, outputs: usize, vb: VarBuilder) -> candle_core::Result<Dense> {
    let l = linear(inputs, outputs, vb)?;
    let bias = l
        .bias()
        .ok_or_else(|| candle_core::Error::Msg("a dense layer without a bias".into()))?;
    Ok(Dense::new(
        &l.weight().flatten_all()?.to_vec1::<f32>()?,
        &bias.to_vec1::<f32>()?,
        inputs,
        outputs,
    ))
}

/// `x`, rows × the layer's inputs, through a dense layer.
fn apply(layer: &Dense, x: &Tensor) -> candle_core::Result<Tensor> {
    let (rows, inputs) = x.dims2()?;
    if inputs != layer.inputs() {
        candle_core::bail!("{inputs} inputs to a layer of {}", layer.inputs());
    }
    let y = layer.product(&x.flatten_all()?.to_vec1::<f32>()?);
    Tensor::from_vec(y, (rows, layer.outputs()), x.device())
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
    /// What a look at the files of the model in `dir` finds wrong, without loading it:
    /// its configuration, the weights' header and that the file holds every tensor it
    /// lists, and the tokenizer's JSON. Milliseconds where a load reads every weight; for
    /// `cairn status`.
    pub fn check(dir: &Path) -> Result<()> {
        Bert::config(dir)?;
        let path = dir.join("model.safetensors");
        let weights = Weights::open(&path)?;
        let size = weights
            .file
            .metadata()
            .map_err(|e| Error::io("cannot read", &path, e))?
            .len();
        if let Some((name, _)) = weights
            .tensors
            .iter()
            .find(|(_, t)| weights.data + t.data_offsets.1 > size)
        {
            return Err(model_err(
                &format!("cannot load {}", path.display()),
                format!("tensor {name} is past the end of the file ({size} bytes)"),
            ));
        }
        let tokenizer = dir.join("tokenizer.json");
        let file =
            std::fs::File::open(&tokenizer).map_err(|e| Error::io("cannot read", &tokenizer, e))?;
        serde_json::from_reader::<_, serde::de::IgnoredAny>(std::io::BufReader::new(file))
            .map_err(|e| model_err(&format!("cannot load {}", tokenizer.display()), e))?;
        Ok(())
    }

    /// The configuration of the model in `dir`, when every file it needs is there and
    /// the configuration is one this encoder runs.
    fn config(dir: &Path) -> Result<Config> {
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
        Ok(config)
    }

    /// Loads the model in `dir`. Fails with [`Error::Embedding`] naming the file when one is
    /// missing or not what a BERT model directory holds.
    pub fn load(dir: &Path) -> Result<Bert> {
        let config = Bert::config(dir)?;
        let max_tokens = read_json::<SentenceConfig>(&dir.join("sentence_bert_config.json"))?
            .and_then(|c| c.max_seq_length)
            .unwrap_or(DEFAULT_MAX_TOKENS)
            .min(config.max_position_embeddings);
        let pooling = match read_json::<PoolingConfig>(&dir.join("1_Pooling/config.json"))? {
            Some(p) if p.pooling_mode_cls_token => Pooling::Cls,
            _ => Pooling::Mean,
        };
        let tokenizer_path = dir.join("tokenizer.json");
        // No truncation by the tokenizer: a text is cut by `kept`, at one end or both.
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| model_err(&format!("cannot load {}", tokenizer_path.display()), e))?;
        tokenizer
            .with_truncation(None)
            .map_err(|e| model_err("tokenizer truncation", e))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));

        let weights_path = dir.join("model.safetensors");
        let device = Device::Cpu;
        let weights = Weights::open(&weights_path)?;
        let vb = VarBuilder::from_backend(Box::new(weights), DType::F32, device.clone());
        // Some exports prefix every tensor with the architecture's name.
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        // The word embeddings (the largest tensor) first: each tensor's file bytes are
        // held only while it is made, so the peak is the weights plus that one tensor.
        let load =
            || -> candle_core::Result<(Embedding, Embedding, Embedding, LayerNorm, Vec<Layer>)> {
                let h = config.hidden_size;
                let eps = config.layer_norm_eps;
                let e = vb.pp("embeddings");
                let words = embedding(config.vocab_size, h, e.pp("word_embeddings"))?;
                let positions = embedding(
                    config.max_position_embeddings,
                    h,
                    e.pp("position_embeddings"),
                )?;
                let token_types =
                    embedding(config.type_vocab_size, h, e.pp("token_type_embeddings"))?;
                let norm = layer_norm(h, eps, e.pp("LayerNorm"))?;
                let mut layers = Vec::with_capacity(config.num_hidden_layers);
                for n in 0..config.num_hidden_layers {
                    let l = vb.pp(format!("encoder.layer.{n}"));
                    layers.push(Layer {
                        query: dense(h, h, l.pp("attention.self.query"))?,
                        key: dense(h, h, l.pp("attention.self.key"))?,
                        value: dense(h, h, l.pp("attention.self.value"))?,
                        attention_out: dense(h, h, l.pp("attention.output.dense"))?,
                        attention_norm: layer_norm(h, eps, l.pp("attention.output.LayerNorm"))?,
                        intermediate: dense(
                            h,
                            config.intermediate_size,
                            l.pp("intermediate.dense"),
                        )?,
                        output: dense(config.intermediate_size, h, l.pp("output.dense"))?,
                        output_norm: layer_norm(h, eps, l.pp("output.LayerNorm"))?,
                    });
                }
                Ok((words, positions, token_types, norm, layers))
            };
        let (words, positions, token_types, norm, layers) = load().map_err(|e| {
            model_err(
                &format!("{} is not a BERT model", weights_path.display()),
                e,
            )
        })?;
        Ok(Bert {
            tokenizer,
            max_tokens,
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

    /// One unit vector per text, in order (on the calling thread alone when it asked for
    /// that: [`keep_model_work_on_this_thread`]).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        on_this_thread(|| self.embed_here(texts, Reading::Head))
    }

    fn embed_here(&self, texts: &[&str], reading: Reading) -> Result<Vec<Vec<f32>>> {
        let split: Vec<(&str, Option<usize>)> = texts.iter().map(|t| (*t, None)).collect();
        Ok(self
            .embed_split_here(&split, reading)?
            .into_iter()
            .map(|(whole, _)| whole)
            .collect())
    }

    /// The unit vector of a query: [`Bert::embed`]'s, but a query longer than the model
    /// reads is read at both ends ([`Reading::BothEnds`]).
    pub fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        on_this_thread(|| Ok(self.embed_here(&[text], Reading::BothEnds)?.swap_remove(0)))
    }

    /// One unit vector per text, and for a text given with the byte offset where its body
    /// begins, the unit vectors of its head and of its body: each the mean of its own
    /// tokens' states in the same pass over the whole text (late chunking), so the parts
    /// cost no more than the whole. A text whose body the truncation cut off has no parts.
    pub fn embed_split(&self, texts: &[(&str, Option<usize>)]) -> Result<Vec<Split>> {
        on_this_thread(|| self.embed_split_here(texts, Reading::Head))
    }

    fn embed_split_here(
        &self,
        texts: &[(&str, Option<usize>)],
        reading: Reading,
    ) -> Result<Vec<Split>> {
        let mut tokens = Vec::with_capacity(texts.len());
        // Per text with a body: each token's side, head or body (neither for the special
        // tokens).
        let mut sides: Vec<Option<Vec<Side>>> = Vec::with_capacity(texts.len());
        for (text, body_at) in texts {
            let e = self
                .tokenizer
                .encode(*text, true)
                .map_err(|e| model_err("tokenizer", e))?;
            let kept = kept(e.len(), self.max_tokens, reading);
            tokens.push(kept.iter().map(|&k| e.get_ids()[k]).collect());
            sides.push(body_at.map(|at| {
                kept.iter()
                    .map(|&k| (e.get_offsets()[k], e.get_special_tokens_mask()[k]))
                    .map(|((from, _), special)| match (special, from < at) {
                        (1, _) => Side::Neither,
                        (_, true) => Side::Head,
                        (_, false) => Side::Body,
                    })
                    .collect()
            }));
        }
        let mut out = vec![(Vec::new(), None); texts.len()];
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
            // The head's and the body's token masks, when a text of the group has parts.
            let side_mask = |side: Side| -> Vec<f32> {
                let mut m = Vec::with_capacity(group.len() * cols);
                for &i in &group {
                    let of = sides[i].as_deref().unwrap_or_default();
                    m.extend(of.iter().map(|s| f32::from(u8::from(*s == side))));
                    m.resize(m.len() + cols - of.len(), 0.0);
                }
                m
            };
            let parts = group
                .iter()
                .any(|&i| sides[i].is_some())
                .then(|| (side_mask(Side::Head), side_mask(Side::Body)));
            let (wholes, parts) = self
                .forward(ids, mask, group.len(), cols, parts)
                .map_err(|e| model_err("inference", e))?;
            let mut parts = parts.map(|(heads, bodies)| heads.into_iter().zip(bodies));
            for (i, whole) in group.into_iter().zip(wholes) {
                let part = parts.as_mut().and_then(Iterator::next);
                let held = |side: Side| sides[i].iter().flatten().any(|s| *s == side);
                let both = held(Side::Head) && held(Side::Body);
                out[i] = (whole, part.filter(|_| both));
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
        parts: Option<(Vec<f32>, Vec<f32>)>,
    ) -> candle_core::Result<Pooled> {
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
            // The scale goes on the queries (a head's width per token) rather than on the
            // scores (a text's length per token): the scores are the largest tensors of a
            // step, and each is dropped as soon as the next is made.
            let q = (split(apply(&l.query, &x)?)? * scale)?;
            let k = split(apply(&l.key, &x)?)?;
            let v = split(apply(&l.value, &x)?)?;
            let probs =
                candle_nn::ops::softmax_last_dim(&q.matmul(&k.t()?)?.broadcast_add(&bias)?)?;
            let context = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((rows * cols, self.hidden))?;
            x = l
                .attention_norm
                .forward(&apply(&l.attention_out, &context)?.add(&x)?)?;
            let inner = gelu_activation(&apply(&l.intermediate, &x)?)?;
            x = l.output_norm.forward(&apply(&l.output, &inner)?.add(&x)?)?;
        }
        let x = x.reshape((rows, cols, self.hidden))?;
        let mean = |m: &Tensor| -> candle_core::Result<Tensor> {
            let m = m.unsqueeze(2)?;
            let sum = x.broadcast_mul(&m)?.sum(1)?;
            let count = m.sum(1)?.clamp(1e-9, f64::MAX)?;
            sum.broadcast_div(&count)
        };
        let unit = |pooled: Tensor| -> candle_core::Result<Vec<Vec<f32>>> {
            let norm = pooled
                .sqr()?
                .sum_keepdim(D::Minus1)?
                .sqrt()?
                .clamp(1e-12, f64::MAX)?;
            pooled.broadcast_div(&norm)?.to_vec2()
        };
        let whole = match self.pooling {
            Pooling::Mean => mean(&mask)?,
            Pooling::Cls => x.narrow(1, 0, 1)?.squeeze(1)?,
        };
        // A part is the mean of its tokens whatever the model's pooling.
        let parts = match parts {
            Some((heads, bodies)) => {
                let part = |m: Vec<f32>| -> candle_core::Result<Vec<Vec<f32>>> {
                    unit(mean(&Tensor::from_vec(m, (rows, cols), &self.device)?)?)
                };
                Some((part(heads)?, part(bodies)?))
            }
            None => None,
        };
        Ok((unit(whole)?, parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_keeps_its_start_or_both_ends_within_the_models_reach() {
        let all: Vec<usize> = (0..5).collect();
        assert_eq!(kept(5, 8, Reading::Head), all);
        assert_eq!(kept(5, 8, Reading::BothEnds), all);
        assert_eq!(kept(8, 8, Reading::BothEnds), (0..8).collect::<Vec<_>>());
        // Ten tokens, eight read: the closing special token stays either way.
        assert_eq!(kept(10, 8, Reading::Head), [0, 1, 2, 3, 4, 5, 6, 9]);
        assert_eq!(kept(10, 8, Reading::BothEnds), [0, 1, 2, 3, 6, 7, 8, 9]);
        assert_eq!(kept(11, 7, Reading::BothEnds), [0, 1, 2, 7, 8, 9, 10]);
    }

    #[test]
    fn the_models_parallel_work_runs_on_a_thread_that_keeps_it() {
        // What candle's operations split over threads goes to the current rayon pool:
        // on a thread that keeps the model's work, one of that thread alone, so it runs
        // in line, on that thread.
        std::thread::spawn(|| {
            keep_model_work_on_this_thread();
            keep_model_work_on_this_thread();
            let me = std::thread::current().id();
            let (threads, ran_on) = on_this_thread(|| {
                use rayon::prelude::*;
                let ran_on: std::collections::HashSet<_> = (0..64)
                    .into_par_iter()
                    .map(|_| std::thread::current().id())
                    .collect();
                (rayon::current_num_threads(), ran_on)
            });
            assert_eq!(threads, 1);
            assert_eq!(ran_on, [me].into());
            // Again, from the same thread.
            assert_eq!(on_this_thread(rayon::current_num_threads), 1);
        })
        .join()
        .expect("the thread ends");
        // On a thread that did not ask, or one of another pool, it runs as before.
        std::thread::spawn(|| {
            assert!(on_this_thread(|| rayon::current_thread_index().is_none()));
        })
        .join()
        .expect("the thread ends");
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let threads = pool.install(|| {
            keep_model_work_on_this_thread();
            on_this_thread(rayon::current_num_threads)
        });
        assert_eq!(threads, 2);
    }

    /// A `.safetensors` file of `tensors` (name, dtype, shape, raw bytes), as the format
    /// lays it out.
    fn safetensors(dir: &Path, tensors: &[(&str, &str, &[usize], Vec<u8>)]) -> std::path::PathBuf {
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let mut data = Vec::new();
        for (name, dtype, shape, bytes) in tensors {
            header.insert(
                (*name).into(),
                serde_json::json!({
                    "dtype": dtype,
                    "shape": shape,
                    "data_offsets": [data.len(), data.len() + bytes.len()],
                }),
            );
            data.extend_from_slice(bytes);
        }
        let header = serde_json::to_vec(&header).expect("header");
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend(header);
        file.extend(data);
        let path = dir.join("model.safetensors");
        std::fs::write(&path, file).expect("write");
        path
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_look_at_the_files_finds_what_would_not_load() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let fails = |why: &str| {
            let e = Bert::check(dir).expect_err(why).to_string();
            assert!(e.contains(why), "{e}");
        };
        fails("no config.json");
        std::fs::write(
            dir.join("config.json"),
            r#"{"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
                "num_attention_heads": 2, "intermediate_size": 8,
                "max_position_embeddings": 16}"#,
        )
        .expect("config");
        std::fs::write(dir.join("tokenizer.json"), "{}").expect("tokenizer");
        let path = safetensors(dir, &[("a", "F32", &[2], f32_bytes(&[1.0, 2.0]))]);
        Bert::check(dir).expect("whole files");
        // The weights cut short, as by a copy that stopped.
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 1]).expect("cut");
        fails("tensor a is past the end of the file");
        std::fs::write(&path, b"not weights").expect("garbage");
        fails("header of");
        safetensors(dir, &[("a", "F32", &[2], f32_bytes(&[1.0, 2.0]))]);
        std::fs::write(dir.join("tokenizer.json"), "{\"model\": ").expect("tokenizer");
        fails("tokenizer.json");
    }

    #[test]
    fn weights_are_read_tensor_by_tensor_as_stored() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // 1.5 and -2.0 in IEEE half precision.
        let half: Vec<u8> = [0x3e00u16, 0xc000]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let path = safetensors(
            tmp.path(),
            &[
                (
                    "a",
                    "F32",
                    &[2, 3],
                    f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
                ),
                ("b", "F16", &[2], half),
            ],
        );
        let w = Weights::open(&path).expect("open");
        let dev = Device::Cpu;
        let a = w.read("a", DType::F32, &dev).expect("a");
        assert_eq!(
            a.to_vec2::<f32>().expect("values"),
            vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]
        );
        let b = w.read("b", DType::F32, &dev).expect("b");
        assert_eq!(b.to_vec1::<f32>().expect("values"), vec![1.5, -2.0]);
        use candle_nn::var_builder::SimpleBackend;
        assert!(w.contains_tensor("a") && !w.contains_tensor("__metadata__"));
        let wrong = w.get(
            (3, 2).into(),
            "a",
            candle_nn::Init::Const(0.0),
            DType::F32,
            &dev,
        );
        assert!(
            wrong.is_err(),
            "a shape other than the stored one is refused"
        );
        assert!(w.read("missing", DType::F32, &dev).is_err());
    }

    #[test]
    fn a_damaged_weights_file_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = safetensors(
            tmp.path(),
            &[("a", "F32", &[4], f32_bytes(&[1.0, 2.0, 3.0, 4.0]))],
        );
        // Cut short: the header reads, the tensor does not.
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 4]).expect("truncate");
        let w = Weights::open(&path).expect("the header is whole");
        let e = w
            .read("a", DType::F32, &Device::Cpu)
            .expect_err("short data");
        assert!(e.to_string().contains("model.safetensors"), "{e}");
        // A header longer than the file, and one that is not JSON.
        std::fs::write(&path, [0xff; 16]).expect("write");
        let e = Weights::open(&path).err().expect("bad length");
        assert!(e.to_string().contains("model.safetensors"), "{e}");
        let mut junk = 4u64.to_le_bytes().to_vec();
        junk.extend(b"nope");
        std::fs::write(&path, junk).expect("write");
        assert!(Weights::open(&path).is_err());
        // Offsets that do not fit the shape.
        safetensors(tmp.path(), &[("a", "F32", &[5], f32_bytes(&[1.0]))]);
        let w = Weights::open(&path).expect("open");
        assert!(w.read("a", DType::F32, &Device::Cpu).is_err());
    }

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
