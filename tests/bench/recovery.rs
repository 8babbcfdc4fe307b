//! Recovery benchmark: the seeded fault injection of `tests/common/recovery_faults.rs`, with
//! many more cases than the test suite runs. Every case must end with every event stored
//! or reported; the run prints, per damage layout, how many cases found damage, and how
//! many events were stored, reported unreadable (counted, or salvaged from damaged pages),
//! with the time per case.
//!
//! Run: `cargo bench -p cairn --bench recovery -- --cases 5000` (`--seed S` replays one
//! case, `--first S` starts the seeds elsewhere). Exits 1, naming the seeds, when a case
//! fails.

#[path = "../common/recovery_faults.rs"]
mod faults;

use std::collections::BTreeMap;
use std::time::Instant;

use faults::{Template, run_case};

fn arg(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

#[derive(Default)]
struct Row {
    cases: u64,
    found: u64,
    events: u64,
    stored: u64,
    reported: u64,
    unreadable: u64,
    suspect: u64,
    cut_off: u64,
}

fn main() {
    let seeds: Vec<u64> = match arg("--seed") {
        Some(s) => vec![s],
        None => {
            let first = arg("--first").unwrap_or(1);
            (first..first + arg("--cases").unwrap_or(2000)).collect()
        }
    };
    let t = Instant::now();
    let templates = Template::all();
    println!(
        "templates: {} events each (with a backup and without, the WAL kept and checkpointed), built in {:.1}s",
        templates[0].markers.len(),
        t.elapsed().as_secs_f64()
    );
    let scratch = tempfile::tempdir().expect("scratch");
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let mut failures = Vec::new();
    let t = Instant::now();
    for seed in &seeds {
        match run_case(&templates[(*seed % 4) as usize], scratch.path(), *seed) {
            Ok(o) => {
                let r = rows.entry(format!("{:?}", o.layout)).or_default();
                r.cases += 1;
                r.found += u64::from(o.recovered);
                r.events += o.events as u64;
                r.stored += o.stored as u64;
                r.reported += o.reported as u64;
                r.unreadable += o.unreadable;
                r.suspect += o.suspect;
                r.cut_off += u64::from(o.cut_off);
            }
            Err(e) => {
                eprintln!("FAILED {e}");
                failures.push(*seed);
            }
        }
    }
    let per_case = t.elapsed().as_secs_f64() * 1000.0 / seeds.len().max(1) as f64;
    let line = |name: &str, r: &Row| {
        println!(
            "| {:<11} | {:>5} | {:>5} | {:>6} | {:>6} | {:>8} | {:>10} | {:>7} | {:>7} |",
            name,
            r.cases,
            r.found,
            r.events,
            r.stored,
            r.reported,
            r.unreadable,
            r.suspect,
            r.cut_off
        )
    };
    println!(
        "| layout      | cases | found | events | stored | reported | unreadable | suspect | cut off |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut total = Row::default();
    for (name, r) in &rows {
        line(name, r);
        total.cases += r.cases;
        total.found += r.found;
        total.events += r.events;
        total.stored += r.stored;
        total.reported += r.reported;
        total.unreadable += r.unreadable;
        total.suspect += r.suspect;
        total.cut_off += r.cut_off;
    }
    line("all", &total);
    println!(
        "{} of {} cases failed; {per_case:.0} ms per case",
        failures.len(),
        seeds.len()
    );
    if !failures.is_empty() {
        eprintln!("failed seeds (replay with --seed S): {failures:?}");
        std::process::exit(1);
    }
}
