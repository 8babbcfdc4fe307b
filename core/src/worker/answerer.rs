//! The worker's answerer thread: answers the hooks' searches by meaning (`recall::ask`)
//! on the data dir's `run/recall.sock`, with a sentence model and vector index of its own
//! (`recall::searcher::Searcher`): it sends the query's vector and nearest neighbours, and
//! the hook ranks them with its full-text pools, so that a prompt finds memories by meaning
//! without a model in the hook. One connection at a time, in arrival order; a hook that gave
//! up has gone by words alone: its request, when read after that, is not searched
//! (`ask::Request::answer_by_ms`), and an answer it gave up on while it was searched is
//! written to a closed socket.
//!
//! Without a model that loads the thread does not listen (a hook then finds no socket and
//! goes by words at once) and waits for one (`worker::wait_for_model`). The socket's
//! directory is the owner's only (`0700`); a socket left by a worker that died is replaced
//! (this worker holds the single-instance lock). It ends when [`Answerer::stop`] is
//! called, and removes the socket.

use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::recall::ask;
use crate::recall::search::tune_for_reading;
use crate::recall::searcher::Searcher;
use crate::settings::Settings;
use crate::store::db;
use crate::store::paths::DataDir;

/// How long a connection may take to send its request.
const REQUEST_WAIT: Duration = Duration::from_secs(1);

/// The running answerer.
#[derive(Debug)]
pub struct Answerer {
    stop: Arc<AtomicBool>,
    socket: std::path::PathBuf,
    thread: Option<JoinHandle<()>>,
}

impl Answerer {
    /// Starts the thread, which loads the model and then listens; without a model (logged)
    /// or a socket it ends at once. `None` when recall at prompts is off.
    pub fn start(dir: &DataDir, settings: &Settings) -> Option<Answerer> {
        if settings.recall.worker_deadline_ms == 0 || !settings.recall.at_prompt {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let data = dir.clone();
        let embed = settings.embed.clone();
        let thread = std::thread::Builder::new()
            .name("answerer".into())
            .spawn(move || {
                crate::recall::embed::bert::keep_model_work_on_this_thread();
                // Without a model that loads, looked for again until there is one.
                let Some((source, bert)) = crate::worker::wait_for_model(
                    &embed,
                    &data,
                    "prompts find memories by words alone",
                    false,
                    || flag.load(Ordering::SeqCst),
                ) else {
                    return;
                };
                let mut searcher = Searcher::with_model(source, bert, &embed);
                searcher.keep_vectors();
                match listen(&data) {
                    Ok(listener) => run(&data, listener, searcher, &flag),
                    Err(e) => log::warn!("prompts find memories by words alone: {e}"),
                }
            });
        match thread {
            Ok(t) => Some(Answerer {
                stop,
                socket: dir.recall_socket(),
                thread: Some(t),
            }),
            Err(e) => {
                log::warn!("cannot start the answerer: {e}");
                None
            }
        }
    }

    /// Stops the thread (waking its `accept`) and removes the socket.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.socket);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn listen(dir: &DataDir) -> Result<UnixListener> {
    dir.ensure_sub(&dir.run())?;
    let path = dir.recall_socket();
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("cannot remove the old socket", &path, e)),
    }
    UnixListener::bind(&path).map_err(|e| Error::io("cannot listen", &path, e))
}

fn run(dir: &DataDir, listener: UnixListener, mut searcher: Searcher, stop: &AtomicBool) {
    // Stopped while the model loaded: `stop` may have knocked before the socket was there.
    if stop.load(Ordering::SeqCst) {
        return;
    }
    let conn = match db::open_data_dir(dir, db::OpenOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            log::warn!("the answerer cannot open the database: {e}");
            return;
        }
    };
    if let Err(e) = tune_for_reading(&conn) {
        log::debug!("cannot tune the answerer's connection: {e}");
    }
    log::info!(
        "answering searches by meaning on {}",
        dir.recall_socket().display()
    );
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                log::debug!("recall socket: {e}");
                continue;
            }
        };
        if let Err(e) = ask::answer(stream, REQUEST_WAIT, |req| searcher.meaning(&conn, req)) {
            log::debug!("recall socket: {e}");
        }
    }
}
