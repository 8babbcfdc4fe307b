//! The worker: the consumer. Claims ready batches from the queue, turns them into
//! observations and turn summaries with a model provider (`model`) or the offline
//! extractor (`offline`), and stores them with the ack.
//!
//! `pipeline` is the process's threads, a file each: the `claimer` and its
//! `housekeeping` (which also ingests the hooks' spool through `ingest`), the model
//! threads' `calls` (split, prompt, call with retries, parse) and the single `writer`,
//! joined by the `messages` they send each other; `embedder` gives stored
//! memories their sentence vectors (through `recall::embed`); `syncer` keeps the device
//! in its sync space (through `sync::live`: pushes what is written here, pulls what other
//! devices pushed); `answerer` answers the
//! hooks' searches by meaning on a Unix socket (`recall::ask`); `prompt` builds what a
//! model is asked, `parse` reads what it answers; `usage` counts the tokens.
//!
//! Writes `observations` and `session_summaries` (through `memory::observations`, inside
//! `queue::claim::ack`'s transaction), `pending_messages` through the queue, `workers`
//! through `queue::workers`, `model_calls` and `model_limits` (`usage`, their only
//! writer), `embeddings` (through `recall::embed::store`), and the sync tables and the
//! memories other devices pushed (through `sync`, from the `syncer`).
//!
//! Invariants: no transaction is held across a model call; results are stored only inside
//! the ack's transaction, so a batch whose lease was lost stores nothing; every prompt is
//! self-contained, so a replayed job is the same call again and content hashes make the
//! second store a no-op; a model call is recorded before it is made. Data flows from the queue (and the spool) through the model into
//! memory.

use std::time::Duration;

pub mod answerer;
pub mod embedder;
pub mod ingest;
pub mod model;
pub mod offline;
pub mod parse;
pub mod pipeline;
pub mod prompt;
pub mod syncer;
pub mod usage;

/// How often a worker with no sentence model looks for one again (`cairn embed --fetch`
/// or `--from` may install it while the worker runs).
pub const MODEL_LOOK_EVERY: Duration = Duration::from_secs(10);

/// Waits for a sentence model that loads, for a worker's thread that embeds (`off`: what
/// goes without meanwhile, in the log): looks every [`MODEL_LOOK_EVERY`] (`cairn embed --fetch` or
/// `--from` may install or mend it while the worker runs), and reads files that failed to
/// load again only once they changed (`ModelSource::files`), not at every look. Says why
/// there is none once for each reason. `None` when stopped, or after the first look
/// when `once`.
pub fn wait_for_model(
    settings: &crate::settings::EmbedSettings,
    dir: &crate::store::paths::DataDir,
    off: &str,
    once: bool,
    stopped: impl Fn() -> bool,
) -> Option<(
    crate::recall::embed::model::ModelSource,
    crate::recall::embed::model::Embedder,
)> {
    use crate::recall::embed::model;
    let mut told: Option<String> = None;
    let mut failed = None;
    loop {
        let why = match model::locate(settings, dir) {
            Ok(source) => {
                let files = source.files();
                if failed.as_ref() == Some(&files) {
                    told.clone().unwrap_or_default()
                } else {
                    match source.load() {
                        Ok(embedder) => {
                            if told.is_some() {
                                log::info!("a sentence model loads now ({})", source.id);
                            }
                            return Some((source, embedder));
                        }
                        Err(e) => {
                            failed = Some(files);
                            format!(
                                "the sentence model in {} does not load: {e} (tried again when its files change)",
                                source.dir.display()
                            )
                        }
                    }
                }
            }
            Err(why) => {
                failed = None;
                format!("{why} (looked for every {} s)", MODEL_LOOK_EVERY.as_secs())
            }
        };
        if told.as_deref() != Some(why.as_str()) {
            // No model yet is how cairn starts; files that do not load need mending.
            if failed.is_some() {
                log::warn!("{off} until a sentence model loads: {why}");
            } else {
                log::info!("{off} until a sentence model loads: {why}");
            }
            told = Some(why);
        }
        if once || sleep_unless(MODEL_LOOK_EVERY, &stopped) {
            return None;
        }
    }
}

/// Sleeps `total`, in steps short enough to notice `stopped` within a fifth of a second;
/// true when it was stopped.
pub fn sleep_unless(total: Duration, stopped: impl Fn() -> bool) -> bool {
    let step = Duration::from_millis(200);
    let end = std::time::Instant::now() + total;
    loop {
        if stopped() {
            return true;
        }
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(step));
    }
}
