//! Claude Code's transcript format: its newest transcripts still read as cairn knows them.

use super::{Env, Finding, Level, finding, ok};

/// Transcripts read for the format check, newest first, and how much of each.
const TRANSCRIPTS_CHECKED: usize = 3;
const TRANSCRIPT_BYTES_CHECKED: u64 = 16 << 20;

/// Whether Claude Code's newest transcripts still look as cairn knows them: record types
/// never seen, or lines that are not JSON, mean the format moved (cairn skips what it does
/// not know, so imports and reconciliation may miss events).
pub(super) fn check_transcripts(env: &Env, out: &mut Vec<Finding>) {
    use crate::capture::transcript::{Reader, Stats, list};
    use std::io::Read;
    let Some(projects) = env.claude().map(|c| c.projects()) else {
        return;
    };
    let mut found = list(&projects, None);
    if found.is_empty() {
        out.push(ok(
            "transcripts",
            format!("no Claude Code transcripts in {}", projects.display()),
        ));
        return;
    }
    found.reverse();
    let mut stats = Stats::default();
    let mut read = 0;
    for src in found.iter().take(TRANSCRIPTS_CHECKED) {
        let Ok(f) = std::fs::File::open(&src.path) else {
            continue;
        };
        let src_reader = std::io::BufReader::new(f.take(TRANSCRIPT_BYTES_CHECKED));
        let mut r = Reader::new(src_reader, &src.session_id, false);
        r.by_ref().for_each(drop);
        let s = r.stats();
        stats.bad_lines += s.bad_lines;
        stats.unknown_other += s.unknown_other;
        for (k, v) in &s.unknown_types {
            *stats.unknown_types.entry(k.clone()).or_default() += v;
        }
        read += 1;
    }
    if stats.unknown_records() == 0 && stats.bad_lines == 0 {
        out.push(ok(
            "transcripts",
            format!("the {read} newest Claude Code transcripts read as cairn knows them"),
        ));
        return;
    }
    let mut types: Vec<String> = stats
        .unknown_types
        .iter()
        .map(|(k, v)| format!("{} ({v})", if k.is_empty() { "untyped" } else { k }))
        .collect();
    if stats.unknown_other > 0 {
        types.push(format!("others ({})", stats.unknown_other));
    }
    let mut what = Vec::new();
    if !types.is_empty() {
        what.push(format!("record types never seen: {}", types.join(", ")));
    }
    if stats.bad_lines > 0 {
        what.push(format!("{} lines that are not JSON", stats.bad_lines));
    }
    out.push(finding(
        "transcripts",
        Level::Warn,
        format!(
            "Claude Code's transcript format looks unfamiliar in its {read} newest transcripts: {}",
            what.join("; ")
        ),
        Some(
            "cairn skips what it does not know, so transcript imports and reconciliation may miss events: look for a newer cairn; `cairn import transcripts --dry-run` shows what is read"
                .into(),
        ),
    ));
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::testing::{env, levels};
    use super::super::{Level, run};
    use crate::settings::Settings;
    use crate::store::paths::DataDir;

    #[test]
    fn an_unfamiliar_transcript_format_is_a_warning() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let e = env(tmp.path());
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "transcripts"), vec![Level::Ok], "none yet");
        let proj = tmp.path().join("home/.claude/projects/-w");
        std::fs::create_dir_all(&proj).expect("dir");
        let sample = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/claude-code-hooks/transcript.sample.jsonl");
        std::fs::copy(&sample, proj.join("a.jsonl")).expect("copy");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "transcripts"), vec![Level::Ok], "{f:#?}");
        let mut text = std::fs::read_to_string(&sample).expect("read");
        text.push_str("{\"type\":\"hologram\",\"cwd\":\"/w\"}\nnot json\n");
        std::fs::write(proj.join("b.jsonl"), text).expect("write");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "transcripts"), vec![Level::Warn]);
        let w = f
            .iter()
            .find(|x| x.check == "transcripts")
            .expect("finding");
        assert!(w.message.contains("hologram (1)"), "{}", w.message);
        assert!(
            w.message.contains("1 lines that are not JSON"),
            "{}",
            w.message
        );
    }
}
