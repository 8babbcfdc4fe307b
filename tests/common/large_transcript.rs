//! A transcript with the sample's record mix scaled up, for the transcripts benchmark and
//! the end-to-end memory-bound test (each includes this file as a module).

use std::io::Write;
use std::path::Path;

/// Writes `sample` (the sample transcript's text) over and over into `path`, each copy
/// with fresh prompt, message and tool ids, until it holds `target` bytes; returns the
/// bytes written.
pub fn write_scaled(sample: &str, path: &Path, target: u64) -> u64 {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let (mut written, mut i) = (0u64, 0u64);
    while written < target {
        let copy = sample
            .replace("27e14413-d798-42bf-80a4-2cddf2998f80", &format!("p-{i}"))
            .replace("f628ad8a-5534-4e07-937d-93771a16ff88", &format!("c-{i}"))
            .replace("toolu_fake_", &format!("toolu_{i}_"));
        out.write_all(copy.as_bytes()).expect("write");
        written += copy.len() as u64;
        i += 1;
    }
    out.flush().expect("flush");
    written
}
