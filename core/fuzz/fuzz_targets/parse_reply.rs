//! The model-output parser never panics, whatever the model sends, and every observation
//! it returns has a title.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = cairn_core::worker::parse::parse(&text);
    for o in &parsed.observations {
        assert!(!o.title.is_empty());
    }
    let _ = parsed.clone().observations_outcome(&text);
    let _ = parsed.summary_outcome(&text);
});
