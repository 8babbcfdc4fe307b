//! Redaction's false positives on real text: every source file under a directory is put
//! through the cleaning a `Read` tool response gets (`Privacy::value` on the response's
//! JSON), with no size cap, and counted as altered when its content comes back changed;
//! every commit message of a git history likewise, as a `Bash` tool response.
//!
//! Run: `cargo bench -p cairn --bench privacy -- <source dir>... [--git <repo dir>]`
//! (or `CAIRN_FP_DIRS`, colon-separated, and `CAIRN_FP_GIT`). Altered lines are printed
//! (up to `CAIRN_FP_SHOW`, default 40) so a new false positive can be read and fixed.
//! `--samples <file.jsonl>` instead judges a secret sample set (`tests/fixtures/secrets/`)
//! through the same cleaning, each text as a command and its output, and prints the
//! samples that leak: quicker than the end-to-end test that is its judge.
//! No corpus is committed: any source tree on the machine will do (Python's standard
//! library, the Rust sources of the cargo registry, an npm package directory).

use std::path::{Path, PathBuf};
use std::process::Command;

use cairn_core::privacy::Privacy;
use serde_json::{Value, json};

const EXTENSIONS: &[&str] = &[
    "py", "rs", "js", "mjs", "cjs", "ts", "go", "c", "h", "cc", "cpp", "java", "rb", "sh", "toml",
    "yaml", "yml", "json", "md", "txt",
];

const P: Privacy = Privacy {
    redact_secrets: true,
    max_field_bytes: usize::MAX / 4,
};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_symlink() {
            continue;
        }
        if p.is_dir() {
            files(&p, out);
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e))
        {
            out.push(p);
        }
    }
}

/// The lines of `before` that cleaning changed, with what they became.
fn changed_lines(before: &str, after: &str) -> Vec<(String, String)> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    if a.len() != b.len() {
        return vec![(
            format!("({} lines)", a.len()),
            format!("({} lines)", b.len()),
        )];
    }
    a.iter()
        .zip(&b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| (x.to_string(), y.to_string()))
        .collect()
}

/// The part of two lines around where they first differ (long minified lines are
/// unreadable whole).
fn around_change(x: &str, y: &str) -> (String, String) {
    let first = x.bytes().zip(y.bytes()).take_while(|(a, b)| a == b).count();
    let cut = |s: &str| {
        let mut a = first.saturating_sub(60);
        while !s.is_char_boundary(a) {
            a -= 1;
        }
        let mut b = (first + 60).min(s.len());
        while !s.is_char_boundary(b) {
            b += 1;
        }
        s[a..b].trim().to_string()
    };
    (cut(x), cut(y))
}

/// Puts each sample of a set through the cleaning an event gets (its text as a command
/// and as its output) and prints those whose secret comes through, then the share kept out.
fn samples(file: &str) {
    let text = std::fs::read_to_string(file).expect("sample set");
    let (mut total, mut leaked) = (0usize, 0usize);
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("jsonl");
        let (Some(t), Some(secret)) = (v["text"].as_str(), v["secret"].as_str()) else {
            continue;
        };
        total += 1;
        let [input, response] = P.values([&json!({"command": t}), &json!({"stdout": t})]);
        let out = format!("{input}{response}");
        let escaped = Value::from(secret).to_string();
        if out.contains(secret) || out.contains(escaped.trim_matches('"')) {
            leaked += 1;
            println!("leak {}: {secret:?} in {t:?}", v["detector"]);
        }
    }
    println!(
        "samples of {file}: {} of {total} kept out ({:.2}%)",
        total - leaked,
        100.0 * (total - leaked) as f64 / total.max(1) as f64
    );
}

fn main() {
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut git = std::env::var("CAIRN_FP_GIT").ok();
    if let Some(i) = args.iter().position(|a| a == "--git") {
        git = args.get(i + 1).cloned();
        args.drain(i..(i + 2).min(args.len()));
    }
    if let Some(i) = args.iter().position(|a| a == "--samples") {
        let file = args.get(i + 1).cloned().expect("--samples <file.jsonl>");
        args.drain(i..(i + 2).min(args.len()));
        samples(&file);
    }
    if let Ok(dirs) = std::env::var("CAIRN_FP_DIRS") {
        args.extend(dirs.split(':').filter(|d| !d.is_empty()).map(String::from));
    }
    let show: usize = std::env::var("CAIRN_FP_SHOW")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut shown = 0;
    for dir in &args {
        let mut list = Vec::new();
        files(Path::new(dir), &mut list);
        let (mut total, mut altered, mut lines) = (0usize, 0usize, 0usize);
        for path in &list {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            total += 1;
            let response = json!({"type": "text", "file": {"filePath": path, "content": text}});
            let cleaned = P.value(&response);
            let after = cleaned["file"]["content"].as_str().unwrap_or_default();
            if after != text {
                altered += 1;
                // Every altered file on stderr, with how far the run is.
                eprintln!(
                    "altered {altered} at file {total} of {}: {}",
                    list.len(),
                    path.display()
                );
                let changed = changed_lines(&text, after);
                lines += changed.len();
                for (x, y) in changed {
                    if shown < show {
                        shown += 1;
                        let (x, y) = around_change(&x, &y);
                        println!("{}:\n  - {x}\n  + {y}", path.display());
                    }
                }
            }
        }
        println!(
            "source files under {dir}: {altered} of {total} altered ({:.2}%), {lines} lines",
            100.0 * altered as f64 / total.max(1) as f64
        );
    }
    if let Some(repo) = git {
        let out = Command::new("git")
            .args(["-C", &repo, "log", "--format=%B%x00"])
            .output()
            .expect("git log");
        let log = String::from_utf8_lossy(&out.stdout);
        let (mut total, mut altered) = (0usize, 0usize);
        for msg in log.split('\0').map(str::trim).filter(|m| !m.is_empty()) {
            total += 1;
            let cleaned = P.value(&json!({"stdout": msg, "stderr": ""}));
            if cleaned["stdout"] != Value::String(msg.into()) {
                altered += 1;
                if shown < show {
                    shown += 1;
                    println!("commit message:\n  - {msg}\n  + {}", cleaned["stdout"]);
                }
            }
        }
        println!(
            "commit messages of {repo}: {altered} of {total} altered ({:.3}%)",
            100.0 * altered as f64 / total.max(1) as f64
        );
    }
}
