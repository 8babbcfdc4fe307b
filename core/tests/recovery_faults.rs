//! The seeded fault-injection test of the recovery (see `tests/common/recovery_faults.rs`):
//! a few hundred damaged copies of a small database, each ending with every event stored
//! or reported. `CAIRN_FAULT_SEED=<seed>` replays one case; `CAIRN_FAULT_CASES` sets how
//! many run (the benchmark runs many more: `cargo bench -p cairn --bench recovery`).

#[path = "../../tests/common/recovery_faults.rs"]
mod faults;

use faults::{LAYOUTS, Template, run_case};

#[test]
fn every_damage_layout_ends_with_every_event_stored_or_reported() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("CAIRN_FAULT_SEED") {
        Some(seed) => vec![seed],
        None => (1..=env("CAIRN_FAULT_CASES").unwrap_or(240)).collect(),
    };
    let templates = Template::all();
    let scratch = tempfile::tempdir().expect("scratch");
    let mut failures = Vec::new();
    let mut recovered = 0;
    let mut layouts = std::collections::HashSet::new();
    let (mut reported, mut counted, mut cut_off) = (0, 0, 0);
    for seed in &seeds {
        let t = &templates[(*seed % 4) as usize];
        match run_case(t, scratch.path(), *seed) {
            Ok(o) => {
                recovered += usize::from(o.recovered);
                layouts.insert(format!("{:?}", o.layout));
                assert_eq!(o.stored + o.reported, o.events, "seed {seed}");
                reported += o.reported;
                counted += o.unreadable + o.suspect;
                cut_off += usize::from(o.cut_off);
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed (replay one with CAIRN_FAULT_SEED=<seed>):\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
    println!(
        "{} cases, {recovered} recovered; {reported} events missing, all reported ({counted} rows or transactions counted, {cut_off} tables cut off)",
        seeds.len()
    );
    if seeds.len() >= 100 {
        assert_eq!(
            layouts.len(),
            LAYOUTS.len(),
            "every layout ran: {layouts:?}"
        );
        assert!(
            recovered * 2 > seeds.len(),
            "most cases found damage: {recovered}"
        );
    }
}
