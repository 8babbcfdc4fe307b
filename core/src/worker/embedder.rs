//! The worker's embedder thread: gives every stored memory its sentence vector
//! (`recall::embed::store::backfill`), newest first, in batches of `embed.batch_size`,
//! beside the model threads. New memories, imports and memories written before search by
//! meaning existed all arrive through `embedding_queue`; a model change queues every
//! memory again.
//!
//! Without a model that loads (none fetched, `embed.provider` off, or files that do not
//! load) the thread logs why and waits for one (`worker::wait_for_model`): search stays
//! full-text meanwhile, and `cairn status` says why. It stops between batches when the
//! worker stops; with `--once` it drains the queue and ends (or ends at once without a
//! model). It runs at the lowest priority (nice 19, on Linux), so a prompt's search by
//! meaning and the hooks come first on a machine of few cores.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::recall::embed::store;
use crate::settings::Settings;
use crate::store::db;
use crate::store::paths::DataDir;

/// Starts the thread. `once`: end when the queue is empty; else poll every `poll_ms` until
/// either of the `stop` flags is set.
pub fn spawn(
    dir: &DataDir,
    settings: &Settings,
    stop: [Arc<AtomicBool>; 2],
    once: bool,
) -> Result<JoinHandle<()>> {
    let dir = dir.clone();
    let embed = settings.embed.clone();
    let poll = Duration::from_millis(settings.worker.poll_ms.max(50));
    std::thread::Builder::new()
        .name("embedder".into())
        .spawn(move || {
            if let Err(e) = run(&dir, &embed, &stop, once, poll) {
                log::warn!("embedder stopped: {e}");
            }
        })
        .map_err(|e| Error::io("cannot start thread", "embedder", e))
}

fn run(
    dir: &DataDir,
    settings: &crate::settings::EmbedSettings,
    stop: &[Arc<AtomicBool>; 2],
    once: bool,
    poll: Duration,
) -> Result<()> {
    let stopped = || stop.iter().any(|s| s.load(Ordering::SeqCst));
    // Without a model that loads, looked for again until there is one (not with `--once`).
    let Some((source, bert)) =
        super::wait_for_model(settings, dir, "memories get no vectors", once, stopped)
    else {
        return Ok(());
    };
    lowest_priority();
    crate::recall::embed::bert::keep_model_work_on_this_thread();
    let mut conn = db::open_data_dir(dir, db::OpenOptions::default())?;
    let requeued = store::requeue_other_models(&mut conn, &source.id)?;
    if requeued > 0 {
        log::info!(
            "model is now {}: {requeued} memories queued to embed again",
            source.id
        );
    }
    log::info!("embedding memories with {}", source.id);
    let mut since_log = 0usize;
    while !stopped() {
        let n = match store::backfill(&mut conn, &bert, &source.id, settings.batch_size) {
            Ok(n) => n,
            Err(e) if e.is_busy() => 0,
            Err(e) => return Err(e),
        };
        since_log += n;
        if n == 0 {
            if since_log > 0 {
                log::info!("embedded {since_log} memories");
                since_log = 0;
            }
            if once {
                break;
            }
            std::thread::sleep(poll);
        }
    }
    Ok(())
}

/// Lowers this thread to the lowest priority (nice 19): the answerer's search by meaning,
/// which a hook waits for under a deadline, and the hooks themselves come first, and
/// stored memories are embedded in the time they leave. On Linux a nice value is a
/// thread's own (and threads it starts inherit it); elsewhere the thread keeps its
/// priority.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
        log::debug!("the embedder keeps its priority: {e}");
    }
}
