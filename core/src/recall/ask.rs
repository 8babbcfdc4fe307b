//! Search by meaning asked of the running worker, which has the sentence model and the
//! index of stored vectors loaded, over a Unix socket in an owner-only directory of the
//! data dir (`run/recall.sock`; no TCP listener): the hook's side ([`ask`], then
//! [`Asked::reply`] under a strict deadline) and the worker's ([`answer`], one
//! connection). The wire is one JSON line each way: a [`Request`] (the search: query,
//! project, kinds, limit) and a [`Reply`] (the query's vector and its nearest neighbours,
//! `rank::Meaning`, or why none). The worker embeds and scans; the hook ranks, with the
//! full-text pools it gathered while the worker worked.
//!
//! Invariants: [`Asked::reply`] ends by the deadline, aiming a little ahead of it ([`aim`])
//! for a thread scheduled late, and [`ask`] never waits: the connect, the write and the
//! reads are non-blocking, and the answer is awaited in `ppoll` bounded by what is left of
//! the wait; any failure (no worker, a slow or stopped one, one killed mid-answer, a reply
//! that does not parse) is an error the caller answers by going by words alone. Only the
//! search request crosses: the prompt as capture cleaned it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::memory::kind::Kind;
use crate::recall::embed::index::Neighbour;
use crate::recall::rank::{Meaning, Purpose};
use crate::recall::search::{Order, SearchRequest};
use crate::recall::sql::Filters;

/// Longest reply read, in bytes: far above what a vector and the neighbours a prompt's
/// search weighs take (about 8 KB).
const MAX_REPLY: u64 = 1 << 20;
/// Longest request read by the worker, in bytes.
const MAX_REQUEST: u64 = 64 << 10;
/// The most the hook stops waiting ahead of its deadline (see [`aim`]).
const SLACK_MAX: Duration = Duration::from_millis(2);

/// How long the hook waits for an answer to be back within `deadline`: an eighth less, at
/// most [`SLACK_MAX`]. The deadline is a promise, not an aim: on a busy machine of few
/// cores the waiting thread, woken at the end of its wait, runs up to a millisecond or two
/// later (measured at 100,000 memories on 2 cores: 1 hook in 200 ended 1.3-1.6 ms past a
/// deadline it aimed at exactly). Pure.
fn aim(deadline: Duration) -> Duration {
    deadline - (deadline / 8).min(SLACK_MAX)
}

/// A search asked of the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub query: String,
    pub project: Option<String>,
    /// `memory::kind::Kind::code`s; empty is every kind.
    pub kinds: Vec<i64>,
    pub limit: usize,
    /// When the asker stops waiting (ms since the epoch): a request read after it is not
    /// searched. A worker busy with an answer nobody waits for any more would make every
    /// prompt queued behind it late too.
    #[serde(default)]
    pub answer_by_ms: Option<i64>,
}

impl Request {
    /// The request for a relevance search (its query, project, kinds and limit, which
    /// decide the neighbours it weighs; other filters are not sent).
    pub fn of(req: &SearchRequest) -> Request {
        Request {
            query: req.query.clone(),
            project: req.filters.project.clone(),
            kinds: req.kinds.iter().map(|k| k.code()).collect(),
            limit: req.limit,
            answer_by_ms: None,
        }
    }

    /// The search the worker runs.
    pub fn to_search(&self) -> SearchRequest {
        SearchRequest {
            query: self.query.clone(),
            filters: Filters {
                project: self.project.clone(),
                ..Filters::default()
            },
            kinds: self
                .kinds
                .iter()
                .filter_map(|&c| Kind::from_code(c))
                .collect(),
            order: Order::Relevance,
            limit: self.limit,
            offset: 0,
            asking_session: None,
            // The worker finds neighbours; the hook ranks, and floors, them.
            min_relevance: None,
            purpose: Purpose::Prompt,
        }
    }
}

/// One neighbour on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct WireNeighbour {
    kind: i64,
    id: i64,
    created_at: i64,
    similarity: f32,
}

/// The worker's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The query's unit vector (f32 survives JSON exactly).
    vector: Vec<f32>,
    model: String,
    min_similarity: f32,
    /// The nearest neighbours in the request's scope, best first.
    neighbours: Vec<WireNeighbour>,
    /// Why there is no meaning to use (the search failed, no model): the hook goes by
    /// words alone.
    error: Option<String>,
}

/// A question sent to the worker, its answer not read yet.
#[derive(Debug)]
pub struct Asked {
    stream: UnixStream,
    socket: std::path::PathBuf,
    until: Instant,
    deadline: Duration,
}

/// Asks the worker listening on `socket` for the meaning of `req`'s query and its nearest
/// neighbours, to be answered within `deadline` from now, and returns without waiting for
/// the answer ([`Asked::reply`]): the worker starts on it at once, whatever the caller does
/// meanwhile. An error when no worker takes the question.
pub fn ask(socket: &Path, req: &SearchRequest, deadline: Duration) -> Result<Asked> {
    let wait = aim(deadline);
    let until = Instant::now() + wait;
    if deadline.is_zero() {
        return Err(Error::Invalid("the worker did not answer in time".into()));
    }
    let io = |what: &'static str, e: std::io::Error| Error::io(what, socket, e);
    let mut stream = connect(socket).map_err(|e| io("cannot reach the worker", e))?;
    let asked = Request {
        answer_by_ms: Some(
            // Rounded up: a wait under a millisecond must not read as already over.
            crate::clock::now_ms()
                + i64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i64::MAX / 2),
        ),
        ..Request::of(req)
    };
    let mut line =
        serde_json::to_vec(&asked).map_err(|e| Error::Invalid(format!("request: {e}")))?;
    line.push(b'\n');
    // A request fits a fresh socket's buffer: a write that would wait is an error.
    stream
        .write_all(&line)
        .map_err(|e| io("cannot ask the worker", e))?;
    Ok(Asked {
        stream,
        socket: socket.to_path_buf(),
        until,
        deadline,
    })
}

impl Asked {
    /// Waits for the worker's answer, never past the deadline given to [`ask`].
    pub fn reply(mut self) -> Result<Meaning> {
        let until = self.until;
        let left = || {
            until
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
        };
        let socket = self.socket.as_path();
        let io = |what: &'static str, e: std::io::Error| Error::io(what, socket, e);
        let timed_out = || {
            Error::Invalid(format!(
                "the worker did not answer within {} ms",
                self.deadline.as_millis()
            ))
        };
        let mut reply = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = match self.stream.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Nothing yet: wait for the answer, never past the deadline.
                    let left = left().ok_or_else(timed_out)?;
                    readable(&self.stream, left)
                        .map_err(|e| io("cannot wait for the worker", e))?;
                    continue;
                }
                Err(e) => return Err(io("cannot read the worker's answer", e)),
            };
            if n == 0 {
                return Err(Error::Invalid(
                    "the worker closed the connection before answering".into(),
                ));
            }
            reply.extend_from_slice(&chunk[..n]);
            if reply.ends_with(b"\n") {
                break;
            }
            if reply.len() as u64 > MAX_REPLY {
                return Err(Error::Invalid("the worker's answer is too long".into()));
            }
        }
        decode(&reply)
    }
}

/// The worker's answer line as a meaning, or the error it reports.
fn decode(reply: &[u8]) -> Result<Meaning> {
    let reply: Reply = serde_json::from_slice(reply)
        .map_err(|e| Error::Invalid(format!("the worker's answer: {e}")))?;
    if let Some(why) = reply.error {
        return Err(Error::Invalid(format!(
            "the worker could not search: {why}"
        )));
    }
    Ok(Meaning {
        vector: reply.vector,
        model: reply.model,
        min_similarity: reply.min_similarity,
        neighbours: Some(
            reply
                .neighbours
                .into_iter()
                .filter_map(|n| {
                    Some(Neighbour {
                        kind: Kind::from_code(n.kind)?,
                        id: n.id,
                        created_at: n.created_at,
                        similarity: n.similarity,
                    })
                })
                .collect(),
        ),
    })
}

/// Waits until `stream` has something to read, or `left` has passed. `ppoll` wakes with the
/// answer and ends within microseconds of the deadline: looking every millisecond cost
/// half a millisecond a prompt on average, and socket timeouts end up to a scheduler
/// tick (several ms) late.
fn readable(stream: &UnixStream, left: Duration) -> std::io::Result<()> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let timeout = Timespec::try_from(left).map_err(std::io::Error::other)?;
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Connects to the worker's socket without waiting: the stream is non-blocking. A worker
/// that accepts nothing (stopped, or stuck) leaves the connections queued for it; once its
/// listen backlog is full a blocking connect would wait for it without end (std's
/// `UnixStream::connect` has no timeout), a non-blocking one is refused at once.
fn connect(socket: &Path) -> std::io::Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
    let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None)?;
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
    rustix::io::ioctl_fionbio(&fd, true)?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(socket)?)?;
    Ok(UnixStream::from(fd))
}

/// Answers one connection (the worker's side): reads a request (waiting at most `wait`),
/// runs it through `run`, writes the reply. A request that cannot be read is dropped.
pub fn answer(
    stream: UnixStream,
    wait: Duration,
    run: impl FnOnce(&SearchRequest) -> Result<Meaning>,
) -> Result<()> {
    stream
        .set_read_timeout(Some(wait))
        .and_then(|()| stream.set_write_timeout(Some(wait)))
        .map_err(|e| Error::io("cannot answer", "recall socket", e))?;
    let mut line = String::new();
    BufReader::new(
        stream
            .try_clone()
            .map_err(|e| Error::io("cannot answer", "recall socket", e))?,
    )
    .take(MAX_REQUEST)
    .read_line(&mut line)
    .map_err(|e| Error::io("cannot read a request", "recall socket", e))?;
    let req: Request =
        serde_json::from_str(&line).map_err(|e| Error::Invalid(format!("recall request: {e}")))?;
    if req
        .answer_by_ms
        .is_some_and(|by| crate::clock::now_ms() >= by)
    {
        return Err(Error::Invalid(
            "a request its asker stopped waiting for, not searched".into(),
        ));
    }
    let reply = match run(&req.to_search()) {
        Ok(m) => Reply {
            vector: m.vector,
            model: m.model,
            min_similarity: m.min_similarity,
            neighbours: m
                .neighbours
                .unwrap_or_default()
                .into_iter()
                .map(|n| WireNeighbour {
                    kind: n.kind.code(),
                    id: n.id,
                    created_at: n.created_at,
                    similarity: n.similarity,
                })
                .collect(),
            error: None,
        },
        Err(e) => Reply {
            vector: Vec::new(),
            model: String::new(),
            min_similarity: 0.0,
            neighbours: Vec::new(),
            error: Some(e.to_string()),
        },
    };
    let mut out =
        serde_json::to_vec(&reply).map_err(|e| Error::Invalid(format!("recall reply: {e}")))?;
    out.push(b'\n');
    (&stream)
        .write_all(&out)
        .map_err(|e| Error::io("cannot answer", "recall socket", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// The question and its answer in one call, as the hook makes them.
    fn meaning(socket: &Path, req: &SearchRequest, deadline: Duration) -> Result<Meaning> {
        ask(socket, req, deadline)?.reply()
    }

    fn meant() -> Meaning {
        Meaning {
            vector: vec![0.6, -0.8, 1.0e-7, 0.333_333_34],
            model: "m".into(),
            min_similarity: 0.2,
            neighbours: Some(vec![Neighbour {
                kind: Kind::Summary,
                id: 3,
                created_at: 5,
                similarity: 0.712_345_7,
            }]),
        }
    }

    fn request() -> SearchRequest {
        SearchRequest {
            query: "login tests".into(),
            filters: Filters {
                project: Some("web".into()),
                ..Filters::default()
            },
            kinds: vec![Kind::Observation, Kind::Summary],
            limit: 12,
            ..SearchRequest::default()
        }
    }

    #[test]
    fn the_wait_ends_ahead_of_the_deadline_by_a_little() {
        let ms = Duration::from_millis;
        assert_eq!(aim(ms(25)), ms(23));
        assert_eq!(aim(ms(8)), ms(7));
        assert_eq!(aim(Duration::from_secs(60)), ms(59_998));
        assert_eq!(aim(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_query_s_meaning_crosses_the_socket_and_back() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("recall.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            answer(stream, Duration::from_secs(5), |req| {
                assert_eq!(req.query, "login tests");
                assert_eq!(req.filters.project.as_deref(), Some("web"));
                assert_eq!(req.kinds, vec![Kind::Observation, Kind::Summary]);
                assert_eq!(req.limit, 12);
                Ok(meant())
            })
        });
        // Every float crosses exactly: the hook ranks as the worker would.
        let got = meaning(&path, &request(), Duration::from_secs(5)).expect("meaning");
        assert_eq!(got, meant());
        server.join().expect("join").expect("answer");
    }

    #[test]
    fn a_request_nobody_waits_for_any_more_is_not_searched() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("recall.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        // The hook gives up after 20 ms; the worker, busy, reads its request later.
        let err = meaning(&path, &request(), Duration::from_millis(20)).expect_err("late");
        assert!(err.to_string().contains("within 20 ms"), "{err}");
        std::thread::sleep(Duration::from_millis(5));
        let (stream, _) = listener.accept().expect("accept");
        let searched = std::cell::Cell::new(false);
        let answered = answer(stream, Duration::from_secs(5), |_| {
            searched.set(true);
            Ok(Meaning::default())
        });
        assert!(answered.is_err());
        assert!(!searched.get());
    }

    #[test]
    fn no_worker_a_silent_one_or_a_failed_search_is_an_error() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("recall.sock");
        assert!(meaning(&path, &request(), Duration::from_millis(20)).is_err());

        // Accepted (by the kernel's backlog) and never answered: the deadline ends it.
        let listener = UnixListener::bind(&path).expect("bind");
        let err = meaning(&path, &request(), Duration::from_millis(30)).expect_err("silent");
        assert!(
            err.to_string().contains("in time") || err.to_string().contains("answer"),
            "{err}"
        );

        drop(listener);
        std::fs::remove_file(&path).expect("rm");

        // A worker that accepts nothing: once its backlog is full, a connect is refused
        // instead of waiting for the worker; the search ends in error.
        let _listener = UnixListener::bind(&path).expect("bind");
        let (done, finished) = std::sync::mpsc::channel();
        let filler = path.clone();
        std::thread::spawn(move || {
            let mut refused = None;
            for _ in 0..100_000 {
                if let Err(e) = connect(&filler) {
                    refused = Some(e.kind());
                    break;
                }
            }
            let searched = meaning(&filler, &request(), Duration::from_millis(20)).is_err();
            let _ = done.send((refused, searched));
        });
        let (refused, searched) = finished
            .recv_timeout(Duration::from_secs(60))
            .expect("a connect waited for a worker that accepts nothing");
        assert_eq!(refused, Some(std::io::ErrorKind::WouldBlock));
        assert!(searched);

        let path = tmp.path().join("other.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            answer(stream, Duration::from_secs(5), |_| {
                Err(Error::Invalid("no model".into()))
            })
        });
        let err = meaning(&path, &request(), Duration::from_secs(5)).expect_err("failed");
        assert!(err.to_string().contains("no model"), "{err}");
        server.join().expect("join").expect("answer");
    }
}
