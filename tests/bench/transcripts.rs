//! Transcript benchmark: reading, and reading plus queueing, a transcript with the sample's
//! record mix scaled up (the sample session repeated with fresh prompt and tool ids).
//!
//! - read: the streaming reader alone (`capture::transcript::SessionEvents`), MB/s;
//! - import: read, clean and queue into a fresh database (`capture::transcript::import`,
//!   as `cairn import transcripts --yes` does), MB/s;
//! - peak RSS of this process after both (`VmHWM`), against the file's size.
//!
//! Run: `cargo bench -p cairn --bench transcripts` (release). `CAIRN_BENCH_MB` sets the
//! transcript's size (default 200).

use std::path::Path;
use std::time::Instant;

use cairn_core::capture::transcript::{self, Options, SessionEvents, Source};
use cairn_core::settings::Settings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;

const SID: &str = "4268b601-cbcd-45ac-b3f1-4f61c888c668";

#[path = "../common/large_transcript.rs"]
mod large_transcript;

fn generate(path: &Path, target: u64) -> u64 {
    let sample = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/claude-code-hooks/transcript.sample.jsonl"),
    )
    .expect("sample");
    large_transcript::write_scaled(&sample, path, target)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let mb: u64 = std::env::var("CAIRN_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join(format!("{SID}.jsonl"));
    let size = generate(&path, mb << 20);
    let src = Source::of(&path).expect("source");
    let mib = size as f64 / (1 << 20) as f64;
    println!("transcript: {mib:.0} MiB (the sample's record mix)");
    let rss_before = peak_rss_kib();

    let t = Instant::now();
    let mut events = SessionEvents::open(&src, true).expect("open");
    let n = events.by_ref().count();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "read:   {n} events in {secs:.2} s = {:.0} MiB/s",
        mib / secs
    );

    let dd = DataDir::new(tmp.path().join("data"));
    let mut conn = db::open_data_dir(
        &dd,
        OpenOptions {
            create: true,
            ..OpenOptions::default()
        },
    )
    .expect("db");
    let settings = Settings::default();
    let t = Instant::now();
    let report = transcript::import(
        &mut conn,
        std::slice::from_ref(&src),
        &settings,
        &Options::default(),
        src.mtime_ms + 1,
        &mut |_| {},
    )
    .expect("import");
    let secs = t.elapsed().as_secs_f64();
    println!(
        "import: {} rows written in {secs:.2} s = {:.0} MiB/s (read, clean, queue)",
        report.added,
        mib / secs
    );
    println!(
        "peak RSS: {} MiB before reading, {} MiB after both (file {mib:.0} MiB)",
        rss_before / 1024,
        peak_rss_kib() / 1024
    );
}
