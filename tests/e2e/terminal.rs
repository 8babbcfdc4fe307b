//! The CLI as a person meets it: on an 80-column terminal, in pipes that close early, with
//! `NO_COLOR`, and as scripts read `--json`.

use serde_json::Value;

use crate::recall::{cairn, project_dir, seed};
use crate::support::{
    TestEnv, run_into_closed_pipe, run_on_tty, run_piped_to_head, stderr, stdout,
};

/// A long memory, so that rows cannot fit 80 columns unless cut.
fn seed_long(env: &TestEnv) {
    let out = cairn(
        env,
        &[
            "save",
            "Worker lease renewal and the rescue of expired batches by the next worker",
            "--text",
            "When the worker dies mid-batch its lease expires after five minutes; the next worker rescues the batch, counts a failed attempt, and retries it with a growing delay so that a poisoned batch ends skipped.",
            "--type",
            "decision",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn rows_fit_an_80_column_terminal_and_stay_whole_in_pipes() {
    let env = TestEnv::new();
    seed(&env);
    seed_long(&env);
    for args in [
        vec!["search", "worker", "lease"],
        vec![
            "timeline", "--query", "rescue", "--before", "3", "--after", "3",
        ],
        vec!["search", "lease", "--all-projects"],
    ] {
        let mut c = env.cmd("cairn");
        c.current_dir(project_dir(&env)).args(&args);
        let (screen, code) = run_on_tty(&c, 80);
        assert_eq!(code, Some(0), "{args:?}: {screen}");
        let plain = strip_escapes(&screen);
        for line in plain.lines() {
            assert!(
                line.chars().count() <= 80,
                "{args:?}: {} columns: {line}\n{plain}",
                line.chars().count()
            );
        }
        // Ids and times are whole; what was cut ends in `…`.
        assert!(plain.contains("…"), "{args:?}: {plain}");
        assert!(plain.lines().skip(1).all(|l| l.contains(" 20")), "{plain}");
        // In a pipe every row is whole.
        let piped = cairn(&env, &args);
        assert!(
            stdout(&piped).lines().any(|l| l.chars().count() > 80),
            "{args:?}: {}",
            stdout(&piped)
        );
    }
}

/// Terminal escapes (colour, and what `script` adds) removed.
fn strip_escapes(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[test]
fn matches_are_bold_on_a_terminal_and_unmarked_everywhere_else() {
    let env = TestEnv::new();
    seed(&env);
    // Terminal: bold, never `**` nor a raw mark.
    let mut c = env.cmd("cairn");
    c.current_dir(project_dir(&env)).args(["search", "lease"]);
    let (screen, _) = run_on_tty(&c, 200);
    assert!(screen.contains("\x1b[1m"), "{screen:?}");
    assert!(
        !screen.contains("**") && !screen.contains('\u{2}'),
        "{screen:?}"
    );
    // NO_COLOR on a terminal: no bold.
    let mut with_no_color = env.cmd("cairn");
    with_no_color
        .current_dir(project_dir(&env))
        .args(["search", "lease"])
        .env("NO_COLOR", "1");
    let (screen, _) = run_on_tty_keeping(&with_no_color, 200);
    assert!(!screen.contains("\x1b[1m"), "{screen:?}");
    assert!(!screen.contains("**"), "{screen:?}");
    // A pipe: plain text.
    let piped = stdout(&cairn(&env, &["search", "lease"]));
    assert!(piped.contains("lease"), "{piped}");
    assert!(
        !piped.contains("**") && !piped.contains('\x1b') && !piped.contains('\u{2}'),
        "{piped:?}"
    );
    // --json: plain snippets and where the matches are.
    let json: Value =
        serde_json::from_slice(&cairn(&env, &["search", "lease", "--json"]).stdout).expect("json");
    let hits = json.as_array().expect("hits");
    let mut offsets = 0;
    for h in hits {
        let snippet = h["snippet"].as_str().expect("snippet");
        assert!(!snippet.contains("**") && !snippet.contains('\u{2}'), "{h}");
        let chars: Vec<char> = snippet.chars().collect();
        for m in h["matches"].as_array().expect("matches") {
            let (s, e) = (
                m[0].as_u64().expect("s") as usize,
                m[1].as_u64().expect("e") as usize,
            );
            let word: String = chars[s..e].iter().collect();
            assert!(word.to_lowercase().starts_with("lease"), "{word} in {h}");
            offsets += 1;
        }
    }
    assert!(offsets > 0, "{json}");
}

/// [`run_on_tty`] without removing `NO_COLOR` from the command's environment.
fn run_on_tty_keeping(c: &std::process::Command, columns: usize) -> (String, Option<i32>) {
    let mut line = format!("NO_COLOR=1 '{}'", c.get_program().to_string_lossy());
    for a in c.get_args() {
        line.push_str(&format!(" '{}'", a.to_string_lossy()));
    }
    let mut s = std::process::Command::new("script");
    s.args(["-qec", &line, "/dev/null"]);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    if let Some(dir) = c.get_current_dir() {
        s.current_dir(dir);
    }
    s.env("COLUMNS", columns.to_string());
    let out = crate::support::run_with_stdin(s, b"");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}

#[test]
fn an_id_names_one_record_from_anywhere_and_errors_name_the_flags() {
    let env = TestEnv::new();
    let s = seed(&env);
    let elsewhere = env.tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    let id = s.bugfix.to_string();
    for args in [vec!["timeline", id.as_str()], vec!["show", id.as_str()]] {
        let mut c = env.cmd("cairn");
        c.current_dir(&elsewhere).args(&args);
        let out = crate::support::run_with_stdin(c, b"");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!("{id} ")),
            "{args:?}: {}",
            stdout(&out)
        );
    }
    let out = cairn(
        &env,
        &[
            "timeline",
            &s.other_project.to_string(),
            "--project",
            "acme",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--project globex") && err.contains("--all-projects"),
        "{err}"
    );
}

#[test]
fn a_closed_stdout_is_a_normal_end_for_every_command() {
    let env = TestEnv::new();
    // Without a database: doctor finds it missing (exit 2, as without a pipe).
    let c = env.cmd("cairn");
    let (text, status) = run_piped_to_head(&c, "doctor");
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(status, "2", "{text}");
    seed(&env);
    let mut c = env.cmd("cairn");
    c.current_dir(project_dir(&env));
    for (args, want) in [
        ("doctor", "0|1"),
        ("status", "0|1"),
        ("search lease", "0"),
        ("timeline --query lease", "0"),
        ("show 1", "0"),
        ("context", "0"),
        ("config", "0"),
        ("queue list", "1"),
        ("quarantine list", "1"),
        ("export", "0"),
        ("search nothing-matches-this", "1"),
        ("no-such-command", "2"),
    ] {
        let status = run_into_closed_pipe(&c, args);
        assert!(
            want.split('|').any(|w| w == status),
            "cairn {args}: exit {status}"
        );
        let (text, status) = run_piped_to_head(&c, args);
        assert!(!text.contains("panicked"), "cairn {args}: {text}");
        assert!(
            want.split('|').any(|w| w == status),
            "cairn {args} | head -1: exit {status}"
        );
    }
}

#[test]
fn save_does_not_start_a_second_memory_in_a_mistyped_data_dir() {
    let env = TestEnv::new();
    let out = cairn(&env, &["save", "A memory", "--text", "kept nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no cairn database at"),
        "{}",
        stderr(&out)
    );
    assert!(!env.data_dir.exists());
    // Where one exists, the same memory saved twice is one.
    seed(&env);
    let first = cairn(&env, &["save", "A memory", "--text", "kept once"]);
    let again = cairn(&env, &["save", "A memory", "--text", "kept once"]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(
        stdout(&again).starts_with("already saved as observation"),
        "{}",
        stdout(&again)
    );
}
