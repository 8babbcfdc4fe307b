//! The viewer's HTTP/1.1 server on std's `TcpListener`, built so no local process can
//! knock it over: at most [`MAX_CONNECTIONS`] connections at once, each on its own thread
//! (a counted limit: one more is answered `503` at once and closed), a deadline for a
//! request's head and body ([`READ_DEADLINE`]), a cap on their sizes, and accept errors
//! (`EMFILE` among them) logged and waited out, never ending the loop. Every answer closes
//! its connection.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Connections served at once (live feeds included).
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send its request's head and body.
pub const READ_DEADLINE: Duration = Duration::from_secs(5);
/// Time a client has to take each part of an answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest request body (a form).
pub const MAX_BODY: usize = 64 * 1024;
/// Pause after an accept error (out of descriptors: wait for some to close).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// A request as read from the wire.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The request target as sent (`/path?query`).
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read, with the status it is answered.
#[derive(Debug, PartialEq, Eq)]
enum Unreadable {
    /// The client went, or said nothing before the deadline: no answer.
    Gone,
    Bad(u16, &'static str),
}

/// Serves `listener` until `stop`: each connection's request goes to `handle` on the
/// connection's thread, with the stream to answer on.
pub fn serve<F>(listener: TcpListener, stop: &AtomicBool, handle: F)
where
    F: Fn(Request, TcpStream) + Send + Sync + 'static,
{
    let handle = Arc::new(handle);
    let active = Arc::new(AtomicUsize::new(0));
    let addr = listener.local_addr().ok();
    std::thread::scope(|scope| {
        // A blocking accept does not see `stop`: a watcher wakes it with a connection.
        if let Some(addr) = addr {
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                }
                let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
            });
        }
        accept_loop(&listener, stop, &active, &handle);
        // The loop may end without the flag (it does not today); the watcher must end too.
        stop.store(true, Ordering::Relaxed);
    });
}

fn accept_loop<F>(
    listener: &TcpListener,
    stop: &AtomicBool,
    active: &Arc<AtomicUsize>,
    handle: &Arc<F>,
) where
    F: Fn(Request, TcpStream) + Send + Sync + 'static,
{
    let mut last_error: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                // Logged at most once a second: a flood of EMFILE must not flood the log.
                if last_error.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    log::warn!("viewer: cannot accept a connection: {e}");
                    last_error = Some(Instant::now());
                }
                std::thread::sleep(ACCEPT_PAUSE);
                continue;
            }
        };
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            refuse_busy(stream);
            continue;
        }
        let slot = Slot(Arc::clone(active));
        let handle = Arc::clone(handle);
        let spawned = std::thread::Builder::new()
            .name("viewer-conn".into())
            .spawn(move || {
                let _slot = slot;
                connection(stream, &*handle);
            });
        if let Err(e) = spawned {
            log::warn!("viewer: cannot start a thread: {e}");
            std::thread::sleep(ACCEPT_PAUSE);
        }
    }
}

/// Gives back a connection's place when its thread ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Too many connections: a short answer without reading the request.
fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
    );
    let _ = stream.shutdown(Shutdown::Both);
}

fn connection<F: Fn(Request, TcpStream)>(mut stream: TcpStream, handle: &F) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    match read_request(&mut stream, Instant::now() + READ_DEADLINE) {
        Ok(r) => handle(r, stream),
        Err(Unreadable::Gone) => {}
        Err(Unreadable::Bad(status, why)) => {
            let _ = respond(
                &mut stream,
                status,
                &[("Content-Type".into(), "text/plain; charset=utf-8".into())],
                why.as_bytes(),
            );
        }
    }
}

/// Reads until `buf` holds `want` bytes or the head's end, within `deadline`.
fn fill(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
    done: impl Fn(&[u8]) -> bool,
    cap: usize,
) -> Result<(), Unreadable> {
    let mut chunk = [0u8; 4096];
    while !done(buf) {
        if buf.len() >= cap {
            return Err(Unreadable::Bad(431, "request too large"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Unreadable::Gone);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| Unreadable::Gone)?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(Unreadable::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Unreadable::Gone),
        }
    }
    Ok(())
}

fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn read_request(stream: &mut TcpStream, deadline: Instant) -> Result<Request, Unreadable> {
    let mut buf = Vec::with_capacity(1024);
    fill(
        stream,
        &mut buf,
        deadline,
        |b| head_end(b).is_some(),
        MAX_HEAD,
    )?;
    let end = head_end(&buf).ok_or(Unreadable::Gone)?;
    let mut request = parse_head(&buf[..end])?;
    let length = match request.header("Content-Length") {
        None => 0,
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map_err(|_| Unreadable::Bad(400, "bad Content-Length"))?,
    };
    if request.header("Transfer-Encoding").is_some() {
        return Err(Unreadable::Bad(411, "send a Content-Length"));
    }
    if length > MAX_BODY {
        return Err(Unreadable::Bad(413, "request body too large"));
    }
    let mut body = buf.split_off(end);
    fill(
        stream,
        &mut body,
        deadline,
        |b| b.len() >= length,
        MAX_BODY + 1,
    )?;
    body.truncate(length);
    request.body = body;
    Ok(request)
}

fn parse_head(head: &[u8]) -> Result<Request, Unreadable> {
    let bad = Unreadable::Bad(400, "bad request");
    let text = std::str::from_utf8(head).map_err(|_| Unreadable::Bad(400, "bad request"))?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad);
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') || method.is_empty() {
        return Err(bad);
    }
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((k, v)) = line.split_once(':') else {
            return Err(bad);
        };
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(Request {
        method: method.to_ascii_uppercase(),
        target: target.to_string(),
        headers,
        body: Vec::new(),
    })
}

/// Writes a whole answer (`Content-Length`, `Connection: close`) and closes the sending
/// side. Header values holding a line break are left out.
pub fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (k, v) in headers {
        if !k.contains(['\r', '\n', ':']) && !v.contains(['\r', '\n']) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        411 => "Length Required",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn reads_heads_and_refuses_what_it_cannot_read() {
        let r =
            parse_head(b"get /a?b=1 HTTP/1.1\r\nHost: x:1\r\nCookie: a=b\r\n\r\n").expect("head");
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/a?b=1");
        assert_eq!(r.header("host"), Some("x:1"));
        assert!(parse_head(b"GET http://evil/ HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_head(b"GET / SPDY\r\n\r\n").is_err());
        assert!(parse_head(b"GET /\r\n\r\n").is_err());
        assert!(parse_head(b"GET / HTTP/1.1\r\nno colon\r\n\r\n").is_err());
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
    }

    fn server() -> (SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let t = std::thread::spawn(move || {
            serve(listener, &s, |r, mut stream| {
                let _ = respond(&mut stream, 200, &[], &r.body);
            })
        });
        (addr, stop, t)
    }

    fn ask(addr: SocketAddr, text: &str) -> String {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s.write_all(text.as_bytes()).expect("write");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn idle_connections_past_the_limit_are_refused_and_then_served_again() {
        let (addr, stop, t) = server();
        let answer = ask(addr, "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");
        // Idle connections fill every place; one more is refused at once.
        let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let a = ask(addr, "GET / HTTP/1.1\r\n\r\n");
            if a.starts_with("HTTP/1.1 503") {
                break;
            }
            assert!(Instant::now() < deadline, "never refused: {a}");
        }
        // Past the read deadline their places are free again.
        let deadline = Instant::now() + READ_DEADLINE * 4;
        loop {
            let a = ask(addr, "GET / HTTP/1.1\r\n\r\n");
            if a.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(Instant::now() < deadline, "never served again: {a}");
        }
        drop(idle);
        assert!(
            ask(addr, "GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").starts_with("HTTP/1.1 400")
        );
        let big = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert!(ask(addr, &big).starts_with("HTTP/1.1 413"));
        stop.store(true, Ordering::Relaxed);
        t.join().expect("server ends");
    }
}
