//! `cairn-hook`: the producer. Claude Code runs it for every hook event; it reads the event
//! from stdin (`hook_event_name`; an event name given as the first argument is used when the
//! payload has none), writes it to the database through `cairn_core::capture::handle`, prints the
//! protocol answer on stdout and exits 0, whatever happened. Logs go to
//! `<data dir>/logs/hook-<date>.log`, never to stdout.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::logging::{self, Target};
use cairn_core::capture;
use cairn_core::capture::handle::{HookInput, Stored};
use cairn_core::capture::hook::PLAIN_ANSWER;
use cairn_core::ops::liveness;
use cairn_core::settings::Settings;
use cairn_core::store::paths::DataDir;

const HELP: &str = "\
cairn-hook: cairn's producer. Claude Code runs it for every hook event; it is not meant to
be run by hand.

Usage: cairn-hook [EVENT] < payload.json

It reads one hook payload (JSON) on stdin, takes the event from its hook_event_name (or
EVENT when the payload has none), stores it in the data dir (CAIRN_DATA_DIR, else
~/.cairn), prints Claude Code's protocol answer on stdout and exits 0, whatever happened.
Problems go to <data dir>/logs/hook-<date>.log and to `cairn status`.

Install it into Claude Code with `cairn install`.
";

/// How long the hook waits for stdin to close.
const STDIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Inputs larger than this are quarantined (head kept), not parsed.
const MAX_INPUT: usize = 8 << 20;
/// An autostart marker younger than this means another hook is already starting the worker.
const AUTOSTART_MARKER_FRESH: Duration = Duration::from_secs(5);

/// The whole hook process: `args` are the arguments after the program name (an optional
/// event name). Always exits 0.
pub fn main(args: impl IntoIterator<Item = String>) -> ExitCode {
    let explicit = args.into_iter().next();
    if let Some(flag @ ("-h" | "--help" | "-V" | "--version")) = explicit.as_deref() {
        // A person at a terminal, not Claude Code: explain instead of waiting for stdin.
        let text = if flag.ends_with('V') || flag == "--version" {
            format!("cairn-hook {}\n", env!("CARGO_PKG_VERSION"))
        } else {
            HELP.to_string()
        };
        let _ = std::io::stdout().write_all(text.as_bytes());
        return ExitCode::SUCCESS;
    }
    std::panic::set_hook(Box::new(|info| log::error!("cairn-hook panicked: {info}")));
    let answer =
        std::panic::catch_unwind(|| run(explicit)).unwrap_or_else(|_| PLAIN_ANSWER.to_string());
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(answer.as_bytes());
    let _ = out.flush();
    ExitCode::SUCCESS
}

fn run(explicit: Option<String>) -> String {
    if std::env::var_os(cairn_core::SUPPRESS_HOOKS_ENV).is_some_and(|v| !v.is_empty()) {
        return PLAIN_ANSWER.to_string();
    }
    let dir = match DataDir::from_env() {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "cairn-hook: event not captured: {e}");
            return PLAIN_ANSWER.to_string();
        }
    };
    let target = Target::FileElseStderr;
    // Unreadable settings may hold `capture.excluded_projects` or privacy rules, so the
    // event is not written with defaults: it is cleaned with the default rules and
    // spooled until the settings can be read (`handle_with`), and `cairn status` names
    // the broken file. The error names the file and line.
    let (settings, settings_error) = match Settings::load(&dir) {
        Ok(l) => (l.settings, None),
        Err(e) => {
            logging::init("hook", Some(&dir.logs()), target, log::LevelFilter::Info);
            log::error!("settings unreadable, event spooled until they can be read: {e}");
            (Settings::default(), Some(e.to_string()))
        }
    };
    if settings_error.is_none() {
        logging::init("hook", Some(&dir.logs()), target, settings.log_level());
    }
    // Opened (created) here when the settings cannot be read, so that `cairn status` can
    // report it (the event itself is then spooled, not written). Otherwise `handle_with`
    // opens it when it first needs it: after a prompt's question has left for the worker,
    // which then starts on it about a millisecond sooner.
    let conn = settings_error
        .is_some()
        .then(|| capture::handle::open_for_hook(&dir, &settings));
    // Claude Code writes the payload as it starts the process: it has arrived by now
    // (settings read). An incomplete input is quarantined (and logged once) by
    // `handle_with`.
    let input = read_stdin(STDIN_TIMEOUT, MAX_INPUT);

    let project_dir = std::env::var("CLAUDE_PROJECT_DIR").ok();
    let (outcome, conn) = capture::handle::handle_with(
        &dir,
        &settings,
        &HookInput {
            bytes: &input.bytes,
            total_len: input.total_len,
            incomplete: input.incomplete.clone(),
            explicit_event: explicit.as_deref(),
            project_dir: project_dir.as_deref(),
            settings_error: settings_error.as_deref(),
        },
        conn,
        cairn_core::clock::now_ms(),
    );
    // The process exits right after answering. Closing the connection would only free
    // what the exit frees anyway (the parsed schema, the page cache, the WAL-index
    // mapping: about a tenth of the hook's time); the event is committed to the WAL
    // either way, and the kernel releases the file locks at exit. The hook already skips
    // the checkpoint a close could run (`open_for_hook`), so with no other connection
    // open it keeps the WAL bounded itself (a `stat`, and now and then a checkpoint).
    if let Some(c) = &conn
        && let Err(e) = cairn_core::store::db::bound_wal(c)
    {
        log::warn!("cannot checkpoint the WAL: {e}");
    }
    if settings_error.is_none()
        && settings.worker.autostart
        && matches!(outcome.stored, Stored::Database | Stored::Spooled(_))
    {
        autostart(&dir, &settings, conn.as_ref());
    }
    std::mem::forget(conn);
    outcome.answer
}

/// What was read from stdin.
struct Input {
    bytes: Vec<u8>,
    total_len: u64,
    incomplete: Option<String>,
}

/// Reads stdin until it closes, for at most `timeout` from now, keeping at most `max` bytes
/// (the rest is counted and dropped). Each read waits in poll(2) with what is left of the
/// timeout, so a stdin that never closes cannot hang the hook, and no thread is needed
/// (a second thread cost the hook its stack, a malloc arena and their page faults).
fn read_stdin(timeout: Duration, max: usize) -> Input {
    let deadline = Instant::now() + timeout;
    // Reads at least as large as its buffer go straight to the file descriptor, so poll(2)
    // on fd 0 never misses data held in the lock's buffer.
    let mut stdin = std::io::stdin().lock();
    let mut chunk = [0u8; 16 * 1024];
    let mut bytes = Vec::new();
    let mut total: u64 = 0;
    let mut incomplete = None;
    loop {
        match wait_readable(deadline.saturating_duration_since(Instant::now())) {
            Ok(true) => {}
            Ok(false) => {
                // A whole payload followed by a stdin left open is still a payload.
                if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
                    incomplete = Some(format!(
                        "stdin not closed within {} ms",
                        timeout.as_millis()
                    ));
                }
                break;
            }
            Err(e) => {
                incomplete = Some(format!("cannot read stdin: {e}"));
                break;
            }
        }
        match stdin.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                let room = max.saturating_sub(bytes.len());
                bytes.extend_from_slice(&chunk[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                incomplete = Some(format!("cannot read stdin: {e}"));
                break;
            }
        }
    }
    if incomplete.is_none() && total > max as u64 {
        incomplete = Some(format!(
            "input of {total} bytes is larger than the {max} bytes a hook accepts"
        ));
    }
    Input {
        bytes,
        total_len: total,
        incomplete,
    }
}

/// Waits until stdin has data or end of file (true), or `timeout` passes (false). A closed
/// or invalid fd 0 reports ready, and the read that follows says what is wrong.
fn wait_readable(timeout: Duration) -> std::io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdin = std::io::stdin();
    // No longer than the int of milliseconds poll(2) takes on some systems can hold.
    let timeout = timeout.min(Duration::from_millis(i32::MAX as u64));
    let timeout = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos().into(),
    };
    loop {
        match poll(&mut [PollFd::new(&stdin, PollFlags::IN)], Some(&timeout)) {
            Ok(ready) => return Ok(ready > 0),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Starts `cairn-worker --autostarted` when no worker holds the lock, or when the one
/// holding it is stopped and silent past the wedged threshold (it is ended first,
/// `ops::liveness::replace_wedged`): detached in its own session, stdio closed, never
/// waited on. An `O_EXCL` marker file, fresh for a few seconds, lets one of many hooks
/// firing at once do it. Also run by `cairn import transcripts` once it queued jobs.
/// Returns the started worker's pid; `None` when none was started (one runs, another hook
/// is starting one, or it could not be: logged).
pub(crate) fn autostart(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&rusqlite::Connection>,
) -> Option<u32> {
    let stopped_holder = match cairn_core::store::lock::holder(&dir.worker_lock()) {
        Ok(Some(h)) if !cairn_core::store::lock::process_stopped(h.pid) => return None,
        Ok(Some(_)) => true,
        Ok(None) => false,
        Err(e) => {
            log::warn!("cannot check the worker lock: {e}");
            return None;
        }
    };
    let marker = dir.root().join("worker.autostart");
    if !claim_marker(&marker) {
        return None;
    }
    if stopped_holder {
        let conn = conn?;
        let now = cairn_core::clock::now_ms();
        match liveness::replace_wedged(dir, conn, settings.worker.heartbeat_secs, now) {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => {
                log::warn!("cannot check the stopped worker: {e}");
                return None;
            }
        }
    }
    let worker = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name("cairn-worker"),
        Err(e) => {
            log::warn!("cannot start the worker: cannot find my own executable: {e}");
            return None;
        }
    };
    if !worker.is_file() {
        log::warn!(
            "cannot start the worker: {} not found (start cairn-worker yourself, or set worker.autostart to false)",
            worker.display()
        );
        return None;
    }
    let mut cmd = Command::new(&worker);
    cmd.arg("--autostarted")
        .env(cairn_core::store::paths::DATA_DIR_ENV, dir.root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    detach(&mut cmd);
    match cmd.spawn() {
        Ok(child) => {
            log::info!("started {} (pid {})", worker.display(), child.id());
            Some(child.id())
        }
        Err(e) => {
            log::warn!("cannot start {}: {e}", worker.display());
            None
        }
    }
}

/// Starts the worker in a session of its own, holding none of the hook's inherited file
/// descriptors: a descriptor Claude Code (or any parent) passed to the hook, such as the
/// write end of a pipe it waits on for EOF, must not stay open for the worker's life.
/// Every descriptor above stderr is marked close-on-exec in the child (the standard
/// library's own exec-error pipe is close-on-exec already, so a failed exec is still
/// reported).
#[allow(unsafe_code)] // std offers no safe hook between fork and exec
fn detach(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `pre_exec` is unsafe because its closure runs in the forked child, where only
    // async-signal-safe calls are sound. This one makes system calls only (setsid here,
    // close_range or getrlimit and fcntl in `cloexec_from`): it allocates nothing, takes no
    // lock and touches no state shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            cloexec_from(3);
            Ok(())
        });
    }
}

/// Marks every descriptor from `first` up close-on-exec. Async-signal-safe.
///
/// These are descriptors the hook inherited, not opened: nothing in the process owns them,
/// so there is no handle to give a safe wrapper (rustix's calls take one, and rustix has no
/// close_range), and the calls go to libc with the bare numbers.
#[allow(unsafe_code)] // descriptors known only by number (see above)
fn cloexec_from(first: std::os::fd::RawFd) {
    use std::os::fd::RawFd;
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range(2) with CLOSE_RANGE_CLOEXEC closes nothing and reads or writes
        // no memory: it only sets the close-on-exec flag of the open descriptors in the range.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if rc == 0 {
            return;
        }
    }
    // Older kernels and other systems: one fcntl per possible descriptor, bounded.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let max = limit.map_or(65_536, |n| n.min(65_536)) as RawFd;
    for fd in first..max {
        // SAFETY: fcntl(2) on any number reads or writes no memory: a number that is not an
        // open descriptor fails with EBADF, and an open one only has its flag set.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// True when a marker written at `written` is fresh: younger than
/// [`AUTOSTART_MARKER_FRESH`]. A marker written in what is now the future (the clock was
/// stepped back since) is stale, not fresh until the clock catches up: otherwise no hook
/// would start a worker for the length of the jump.
fn marker_fresh(written: std::time::SystemTime) -> bool {
    match written.elapsed() {
        Ok(age) => age < AUTOSTART_MARKER_FRESH,
        Err(ahead) => {
            ahead.duration()
                <= Duration::from_millis(cairn_core::queue::claim::CLOCK_TOLERANCE_MS as u64)
        }
    }
}

/// Creates the marker exclusively; an old marker (a start that failed or finished long
/// ago) is replaced once.
fn claim_marker(marker: &Path) -> bool {
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(marker)
        {
            Ok(_) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let fresh = std::fs::metadata(marker)
                    .and_then(|m| m.modified())
                    .is_ok_and(marker_fresh);
                if fresh {
                    return false;
                }
                let _ = std::fs::remove_file(marker);
            }
            Err(e) => {
                log::warn!("cannot create {}: {e}", marker.display());
                return false;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_from_before_the_clock_went_back_is_stale() {
        let now = std::time::SystemTime::now();
        assert!(marker_fresh(now));
        assert!(!marker_fresh(now - Duration::from_secs(60)));
        assert!(marker_fresh(now + Duration::from_millis(500)));
        assert!(!marker_fresh(now + Duration::from_secs(3_600)));
        let tmp = tempfile::tempdir().expect("tempdir");
        let marker = tmp.path().join("worker.autostart");
        let f = std::fs::File::create(&marker).expect("marker");
        f.set_modified(now + Duration::from_secs(3_600))
            .expect("mtime an hour ahead");
        assert!(claim_marker(&marker), "replaced, not taken for fresh");
        assert!(!claim_marker(&marker), "the new one is fresh");
    }
}
