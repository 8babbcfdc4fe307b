//! Losses recorded wherever they happen: a data dir that cannot be written (a read-only
//! file system, permissions, a path that cannot exist) keeps hook events outside it,
//! `cairn status` and `cairn search` read the database read-only meanwhile, and the worker
//! stores what was kept once the data dir can be written again.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::faults::Tmpfs;
use crate::support::{TestEnv, run_with_stdin, stderr, stdout};

const PLAIN: &str = r#"{"continue":true,"suppressOutput":true}"#;
const SESSION: &str = "s-losses";

fn prompt(n: usize, text: &str) -> String {
    format!(
        r#"{{"hook_event_name":"UserPromptSubmit","session_id":"{SESSION}","cwd":"/home/dev/acme-api","prompt_id":"p{n}","prompt":"{text}"}}"#
    )
}

fn tool(n: usize, i: usize) -> String {
    format!(
        r#"{{"hook_event_name":"PostToolUse","session_id":"{SESSION}","cwd":"/home/dev/acme-api","prompt_id":"p{n}","tool_name":"Bash","tool_use_id":"t{n}-{i}","tool_input":{{"command":"cargo test {i}"}},"tool_response":{{"stdout":"ok {i}"}}}}"#
    )
}

/// A hook run as Claude Code runs it, with the test's private runtime dir: it must answer
/// and exit 0 whatever the data dir's state.
fn hook(env: &TestEnv, input: &str) {
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "200");
    let out = run_with_stdin(c, input.as_bytes());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), PLAIN);
}

/// The spool files kept outside the data dir: every `spool/` under the runtime dir's
/// `cairn/`.
fn kept_outside(env: &TestEnv) -> Vec<PathBuf> {
    let Ok(dirs) = std::fs::read_dir(env.runtime_dir().join("cairn")) else {
        return Vec::new();
    };
    dirs.flatten()
        .filter_map(|d| std::fs::read_dir(d.path().join("spool")).ok())
        .flat_map(|files| files.flatten().map(|f| f.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect()
}

/// Makes the data dir unwritable the way the machine allows: root is stopped by no
/// permission, so as root the data dir is on a tmpfs remounted read-only (a real
/// read-only file system, EROFS); otherwise its and the database's write permissions are
/// taken away.
enum ReadOnly {
    Mount { _tmpfs: Tmpfs, at: PathBuf },
    Permissions(PathBuf),
}

impl ReadOnly {
    fn set(&self, read_only: bool) {
        match self {
            ReadOnly::Mount { at: mnt, .. } => {
                let opt = if read_only {
                    "remount,ro"
                } else {
                    "remount,rw"
                };
                let ok = Command::new("mount")
                    .args(["-o", opt])
                    .arg(mnt)
                    .status()
                    .expect("remount");
                assert!(ok.success(), "mount -o {opt}");
            }
            ReadOnly::Permissions(data_dir) => {
                use std::os::unix::fs::PermissionsExt;
                let (dir, file) = if read_only {
                    (0o500, 0o400)
                } else {
                    (0o700, 0o600)
                };
                for entry in std::fs::read_dir(data_dir).expect("data dir").flatten() {
                    if entry.path().is_file() {
                        std::fs::set_permissions(
                            entry.path(),
                            std::fs::Permissions::from_mode(file),
                        )
                        .expect("chmod file");
                    }
                }
                std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(dir))
                    .expect("chmod dir");
            }
        }
    }
}

#[test]
fn a_read_only_data_dir_keeps_events_outside_and_the_worker_stores_them_later() {
    let base = TestEnv::new();
    let mnt = base.tmp.path().join("ro");
    let is_root = rustix::process::geteuid().is_root();
    let tmpfs = if is_root {
        Tmpfs::mount(&mnt, "16m")
    } else {
        None
    };
    if is_root && tmpfs.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "running as root, the test needs to mount a tmpfs (a read-only file system)"
        );
        eprintln!("skipped: running as root without the right to mount a tmpfs");
        return;
    }
    let env = match &tmpfs {
        Some(_) => TestEnv {
            data_dir: mnt.join("cairn-data"),
            tmp: base.tmp,
        },
        None => base,
    };
    hook(&env, &prompt(1, "rotate the staging certificates"));
    hook(&env, &tool(1, 0));
    let saved = env.run(
        "cairn",
        &[
            "save",
            "Staging certificates rotate monthly",
            "--text",
            "The first of each month.",
            "--project",
            "acme-api",
        ],
        b"",
    );
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    // The last connection to close checkpoints and removes the WAL and its shared-memory
    // file, which a read-only file system then cannot create again.
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 1);
    assert!(!env.data_dir.join("cairn.db-shm").exists());
    let ro = match tmpfs {
        Some(t) => ReadOnly::Mount {
            _tmpfs: t,
            at: mnt.clone(),
        },
        None => ReadOnly::Permissions(env.data_dir.clone()),
    };
    ro.set(true);

    // Five events while nothing in the data dir can be written: none lost, none blocks.
    hook(&env, &prompt(2, "migrate the billing tables"));
    for i in 0..4 {
        hook(&env, &tool(2, i));
    }
    assert_eq!(kept_outside(&env).len(), 5, "{:?}", kept_outside(&env));

    // Status and search read the database read-only, and say so.
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert_eq!(status.status.code(), Some(1), "{text}{}", stderr(&status));
    assert!(text.contains("read-only"), "{text}");
    assert!(text.contains("5 hook events kept in"), "{text}");
    assert!(
        stderr(&status).contains("read without writing (the file alone"),
        "{}",
        stderr(&status)
    );
    let search = env.run("cairn", &["search", "certificates", "--all-projects"], b"");
    assert_eq!(search.status.code(), Some(0), "{}", stderr(&search));
    assert!(
        stdout(&search).contains("staging certificates"),
        "{}",
        stdout(&search)
    );
    assert!(stderr(&search).contains("read-only"), "{}", stderr(&search));
    // A new session is still told what is known, read as it is; its start is kept outside.
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "200");
    let start = run_with_stdin(
        c,
        br#"{"hook_event_name":"SessionStart","session_id":"s-later","cwd":"/home/dev/acme-api","source":"startup"}"#,
    );
    assert_eq!(start.status.code(), Some(0), "{}", stderr(&start));
    assert!(
        stdout(&start).contains("Staging certificates rotate monthly"),
        "{}{}",
        stdout(&start),
        stderr(&start)
    );
    assert_eq!(kept_outside(&env).len(), 6);

    // Writable again: status says where the events wait; the worker stores them.
    ro.set(false);
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert_eq!(status.status.code(), Some(1), "{text}");
    assert!(
        text.contains("6 hook events are kept outside the data dir"),
        "{text}"
    );
    let out = worker_once(&env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(kept_outside(&env).is_empty(), "{:?}", kept_outside(&env));
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 2);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE kind = 'observation'"),
        5
    );
    let numbers = env.count(
        "SELECT count(*) FROM pending_messages WHERE dedupe_key LIKE 'tool:t2-%' AND prompt_number = 2",
    );
    assert_eq!(
        numbers, 4,
        "the kept tool events belong to the second prompt"
    );

    // What happened stays on record until read.
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert_eq!(status.status.code(), Some(1), "{text}");
    assert!(
        text.contains("while the data dir could not be written"),
        "{text}"
    );
    let ack = env.run("cairn", &["status", "--acknowledge"], b"");
    let text = stdout(&ack);
    assert!(!text.contains("could not be written"), "{text}");
    assert!(!text.contains("read-only"), "{text}");
}

/// A data dir whose parent is a file fails every file-system call (ENOTDIR), for root as
/// for anybody: the hook keeps the event outside, and the worker started on the data dir
/// once it can exist stores it.
#[test]
fn a_data_dir_that_cannot_exist_keeps_events_until_it_can() {
    let env = TestEnv::new();
    let parent = env.tmp.path().join("home");
    let env = TestEnv {
        data_dir: parent.join("cairn-data"),
        tmp: env.tmp,
    };
    std::fs::write(&parent, b"a file where a directory should be").expect("file");
    hook(&env, &prompt(1, "rotate the staging certificates"));
    hook(&env, &tool(1, 0));
    let kept = kept_outside(&env);
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_private(kept[0].parent().expect("spool"));
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert_eq!(status.status.code(), Some(1), "{text}{}", stderr(&status));
    assert!(text.contains("2 hook event(s) kept in"), "{text}");

    std::fs::remove_file(&parent).expect("rm");
    let out = worker_once(&env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(kept_outside(&env).is_empty());
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 1);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE prompt_number = 1"),
        1
    );
}

/// A place for hook events that another user could have prepared is never used: a
/// symlink where the runtime dir's `cairn` should be is refused, and the loss is counted
/// in the data dir instead, for `cairn status`.
#[test]
fn a_symlinked_fallback_is_refused_and_the_loss_counted() {
    let env = TestEnv::new();
    hook(&env, &prompt(1, "first"));
    let elsewhere = env.tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::os::unix::fs::symlink(&elsewhere, env.runtime_dir().join("cairn")).expect("symlink");
    // The data dir can hold neither a database write nor a spool file.
    std::fs::write(env.data_dir.join("spool"), b"").expect("spool as a file");
    let _lock = {
        let c = env.db();
        c.execute_batch("BEGIN IMMEDIATE").expect("lock");
        c
    };
    hook(&env, &tool(1, 0));
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("elsewhere").count(),
        0,
        "nothing written through the symlink"
    );
    drop(_lock);
    let status = env.run("cairn", &["status"], b"");
    let text = stdout(&status);
    assert!(text.contains("1 hook event could not be kept"), "{text}");
}

/// One worker run that drains the queue with the offline extractor.
fn worker_once(env: &TestEnv) -> std::process::Output {
    let mut c = env.cmd("cairn-worker");
    c.env("CAIRN_MODEL__PROVIDER", "offline").arg("--once");
    run_with_stdin(c, b"")
}

fn assert_private(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for level in dir.ancestors().take(3) {
        let mode = std::fs::symlink_metadata(level)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", level.display());
    }
}
