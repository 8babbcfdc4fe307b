//! Turns gitleaks' rule file (`src/privacy/gitleaks.toml`, kept as data with its licence
//! beside it) and cairn's own (`src/privacy/cairn.toml`, same format) into static tables
//! the redactor reads: no parsing at run time, so a hook pays
//! nothing for rules whose keywords do not occur in what it captures.
//!
//! Kept from each rule: id, pattern, secret group, entropy threshold, keywords (lowercased,
//! as gitleaks matches them) and allowlists (regexes with their target, stopwords, the
//! AND/OR condition; a regex whose text says other than it means read as meant,
//! [`CORRECTED`]). Path-only rules (no pattern) and path allowlists do not apply to
//! captured text and are dropped. The keyword prefilter over all of them is built here
//! too ([`prefilter`]), so a hook starts with every table ready.

use std::fmt::Write as _;

fn strings(v: Option<&toml::Value>, lower: bool) -> Vec<String> {
    v.and_then(toml::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(toml::Value::as_str)
                .map(|s| {
                    if lower {
                        s.to_lowercase()
                    } else {
                        s.to_string()
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Allowlist regexes of gitleaks' rule file as they were meant, where the text says
/// something else. The global `(?i)^true|false|null$` parses as `^true`, `false` or
/// `null$`: it excused every secret holding `false` anywhere, starting with `true` or
/// ending with `null` (`Kfalse9xQw`), in every rule, where the three words alone were
/// meant. `curl-auth-user`'s placeholders (`user:changeme`, `user:xxx`) have no end: they
/// excused every password starting with one (`user:xyzS3cretabc`, `user:testK8x9Qw`).
const CORRECTED: &[(&str, &str)] = &[
    (r"(?i)^true|false|null$", r"(?i)^(?:true|false|null)$"),
    (
        r"[^:]+:(?:change(?:it|me)|pass(?:word)?|pwd|test|token|\*+|x+)",
        r#"[^:]+:(?:change(?:it|me)|pass(?:word)?|pwd|test|token|\*+|x+)['"]?$"#,
    ),
];

fn allow(t: &toml::Table) -> String {
    let regexes: Vec<String> = strings(t.get("regexes"), false)
        .into_iter()
        .map(|r| match CORRECTED.iter().find(|(from, _)| *from == r) {
            Some((_, to)) => (*to).to_string(),
            None => r,
        })
        .collect();
    let target = match t.get("regexTarget").and_then(toml::Value::as_str) {
        Some("match") => "Target::Match",
        Some("line") => "Target::Line",
        _ => "Target::Secret",
    };
    let and = t.get("condition").and_then(toml::Value::as_str) == Some("AND");
    format!(
        "Allow {{ target: {target}, and: {and}, regexes: &{:?}, stopwords: {:?} }}",
        regexes,
        // One string, a word a line: a thousand slices would be a thousand pointers for the
        // loader to relocate at every start of the hook.
        strings(t.get("stopwords"), true).join("\n"),
    )
}

/// The rules of one rule file, as Rust expressions. `semi_generic`: whether a rule is
/// gitleaks' `<keyword> = <secret>` form is read from its pattern (gitleaks' file) or from
/// the rule's `assignment` key (cairn's); whether its secret stands in a credential's slot
/// from the `slot` key (cairn's only).
fn rules_of(doc: &toml::Table, from_pattern: bool) -> Vec<(String, Vec<String>)> {
    let mut rules = Vec::new();
    for r in doc
        .get("rules")
        .and_then(toml::Value::as_array)
        .expect("rules")
    {
        let r = r.as_table().expect("rule table");
        let Some(regex) = r.get("regex").and_then(toml::Value::as_str) else {
            continue;
        };
        let id = r.get("id").and_then(toml::Value::as_str).expect("id");
        let entropy = r
            .get("entropy")
            .and_then(|e| e.as_float().or_else(|| e.as_integer().map(|i| i as f64)))
            .unwrap_or(0.0);
        let group = r
            .get("secretGroup")
            .and_then(toml::Value::as_integer)
            .unwrap_or(0);
        let allows: Vec<String> = r
            .get("allowlists")
            .and_then(toml::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(toml::Value::as_table)
                    .map(allow)
                    .collect()
            })
            .unwrap_or_default();
        // gitleaks' semi-generic form: `<keyword>` then, within a few characters, one of
        // these assignment operators, then the secret. Not when a keyword is part of the
        // secret itself (`live_…`, `NRAK-…`): it need not be followed by an operator.
        const OPERATORS: &str = r#"(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"#;
        let keywords = strings(r.get("keywords"), true);
        let assignment = if from_pattern {
            regex.split_once(OPERATORS).is_some_and(|(_, secret)| {
                let secret = secret.to_lowercase();
                !keywords.iter().any(|k| {
                    let stem = k.trim_matches(|c: char| !c.is_ascii_alphanumeric());
                    !stem.is_empty() && secret.contains(stem)
                })
            })
        } else {
            r.get("assignment").and_then(toml::Value::as_bool) == Some(true)
        };
        // cairn's: the secret stands where only a credential stands (see `Rule::slot`).
        let slot = !from_pattern && r.get("slot").and_then(toml::Value::as_bool) == Some(true);
        rules.push((
            format!(
                "Rule {{ id: {id:?}, regex: {regex:?}, entropy: {entropy:?}, secret_group: {group}, assignment: {assignment}, slot: {slot}, keywords: &{:?}, allowlists: &[{}] }}",
                keywords,
                allows.join(", "),
            ),
            keywords,
        ));
    }
    rules
}

fn pair(a: u8, b: u8) -> u16 {
    (u16::from(a.to_ascii_lowercase()) << 8) | u16::from(b.to_ascii_lowercase())
}

/// The keyword prefilter of every rule (`rules[i]`: rule i's keywords, gitleaks' rules
/// then cairn's), as static tables: a bit per lowercased byte pair that starts a keyword,
/// the (pair, keyword) list sorted by pair, each keyword with the rules it triggers, and
/// the rules tried always (no keyword, or a one-byte one). Built here so that no hook
/// builds them at run time.
fn prefilter(rules: &[Vec<String>], out: &mut String) {
    let mut keywords: Vec<(String, Vec<u16>)> = Vec::new();
    let mut always = Vec::new();
    for (i, kw) in rules.iter().enumerate() {
        let i = u16::try_from(i).expect("fewer than 65536 rules");
        if kw.is_empty() || kw.iter().any(|k| k.len() < 2) {
            always.push(i);
            continue;
        }
        for k in kw {
            match keywords.iter().position(|(w, _)| w == k) {
                Some(at) => keywords[at].1.push(i),
                None => keywords.push((k.clone(), vec![i])),
            }
        }
    }
    let mut pairs = [0u64; 1024];
    let mut by_pair = Vec::new();
    for (k, (w, _)) in keywords.iter().enumerate() {
        let b = w.as_bytes();
        let key = pair(b[0], b[1]);
        pairs[usize::from(key >> 6)] |= 1 << (key & 63);
        by_pair.push((key, u16::try_from(k).expect("fewer than 65536 keywords")));
    }
    by_pair.sort_unstable();
    writeln!(out, "static PREFILTER_PAIRS: [u64; 1024] = {pairs:?};").expect("fmt");
    writeln!(
        out,
        "static PREFILTER_BY_PAIR: [(u16, u16); {}] = {by_pair:?};",
        by_pair.len()
    )
    .expect("fmt");
    writeln!(
        out,
        "static PREFILTER_KEYWORDS: [(&[u8], &[u16]); {}] = [",
        keywords.len()
    )
    .expect("fmt");
    for (w, r) in &keywords {
        writeln!(out, "    (b{w:?}, &{r:?}),").expect("fmt");
    }
    writeln!(out, "];").expect("fmt");
    writeln!(
        out,
        "static PREFILTER_ALWAYS: [u16; {}] = {always:?};",
        always.len()
    )
    .expect("fmt");
}

fn read(src: &str) -> toml::Table {
    println!("cargo::rerun-if-changed={src}");
    let text = std::fs::read_to_string(src).unwrap_or_else(|e| panic!("read {src}: {e}"));
    toml::from_str(&text).unwrap_or_else(|e| panic!("parse {src}: {e}"))
}

fn main() {
    let doc = read("src/privacy/gitleaks.toml");
    // A correction whose text the file no longer holds is stale: the regex was changed
    // upstream and needs a look.
    let text = std::fs::read_to_string("src/privacy/gitleaks.toml").expect("read gitleaks.toml");
    for (from, _) in CORRECTED {
        assert!(text.contains(from), "stale correction: {from}");
    }
    let mut out = String::new();
    let global = doc
        .get("allowlist")
        .and_then(toml::Value::as_table)
        .map(allow)
        .expect("global allowlist");
    writeln!(out, "pub static GLOBAL_ALLOW: Allow = {global};").expect("fmt");
    let mut every_keyword_list = Vec::new();
    for (count, name, rules) in [
        ("RULE_COUNT", "RULES", rules_of(&doc, true)),
        (
            "CAIRN_RULE_COUNT",
            "CAIRN_RULES",
            rules_of(&read("src/privacy/cairn.toml"), false),
        ),
    ] {
        writeln!(out, "pub const {count}: usize = {};", rules.len()).expect("fmt");
        writeln!(out, "pub static {name}: [Rule; {count}] = [").expect("fmt");
        for (r, keywords) in rules {
            writeln!(out, "    {r},").expect("fmt");
            every_keyword_list.push(keywords);
        }
        writeln!(out, "];").expect("fmt");
    }
    prefilter(&every_keyword_list, &mut out);
    let dest =
        std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("gitleaks.rs");
    std::fs::write(dest, out).expect("write rules");
}
