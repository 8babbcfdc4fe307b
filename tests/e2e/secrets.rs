//! Secret redaction measured from the outside: a sample generated from each rule of the
//! shipped gitleaks rule set, put through the real hook as a Bash command and its output,
//! must stay out of the data dir (at least 99.5% of them), and so must an independent set
//! written from other projects' detectors (`tests/fixtures/secrets/detectors.jsonl`, at
//! least 95%) and the set generated from trufflehog's detector tests
//! (`tests/fixtures/secrets/trufflehog.jsonl`, the floor measured); a secret typed in a
//! command must not come back in its output, nor in the session's later events; split,
//! multi-field and encoded forms stay out; and ordinary
//! text must be left alone: the commit messages of the recall-eval corpus (at most 0.5% of
//! the memories changed) and source lines that only name secrets (none).

use regex_syntax::hir::{Class, Hir, HirKind};
use serde_json::Value;

use crate::support::{TestEnv, hook_fixture, run_with_stdin};
use cairn_core::privacy::{Privacy, rules};

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// A string matching `hir` (anchors and word boundaries are left to the caller's check).
    fn sample(&mut self, hir: &Hir, out: &mut Vec<u8>) {
        match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(l) => out.extend_from_slice(&l.0),
            HirKind::Class(Class::Unicode(c)) => {
                // Printable ASCII where the class allows it, so the sample survives JSON.
                let ranges: Vec<(u32, u32)> = c
                    .ranges()
                    .iter()
                    .map(|r| (r.start() as u32, r.end() as u32))
                    .filter_map(|(a, b)| {
                        let (a, b) = (a.max(0x20), b.min(0x7e));
                        (a <= b).then_some((a, b))
                    })
                    .collect();
                let pick = if ranges.is_empty() {
                    c.ranges().first().map_or('x', |r| r.start())
                } else {
                    let (a, b) = ranges[self.below(ranges.len() as u64) as usize];
                    char::from_u32(a + self.below(u64::from(b - a + 1)) as u32).unwrap_or('x')
                };
                let mut buf = [0; 4];
                out.extend_from_slice(pick.encode_utf8(&mut buf).as_bytes());
            }
            HirKind::Class(Class::Bytes(c)) => {
                let ranges: Vec<(u8, u8)> = c
                    .ranges()
                    .iter()
                    .filter_map(|r| {
                        let (a, b) = (r.start().max(0x20), r.end().min(0x7e));
                        (a <= b).then_some((a, b))
                    })
                    .collect();
                let (a, b) = ranges
                    .get(self.below(ranges.len() as u64) as usize)
                    .copied()
                    .or_else(|| c.ranges().first().map(|r| (r.start(), r.start())))
                    .unwrap_or((b'x', b'x'));
                out.push(a + self.below(u64::from(b - a) + 1) as u8);
            }
            HirKind::Repetition(r) => {
                let max = r.max.unwrap_or(r.min + 8).min(r.min + 24);
                let n = r.min + self.below(u64::from(max - r.min) + 1) as u32;
                for _ in 0..n {
                    self.sample(&r.sub, out);
                }
            }
            HirKind::Capture(c) => self.sample(&c.sub, out),
            HirKind::Concat(parts) => {
                for p in parts {
                    self.sample(p, out);
                }
            }
            HirKind::Alternation(alts) => {
                let i = self.below(alts.len() as u64) as usize;
                self.sample(&alts[i], out);
            }
        }
    }
}

/// A sample of `rule` that the rule itself finds, and its secret part.
fn sample_for(rule: &rules::Rule, g: &mut Gen) -> Option<(String, String)> {
    let hir = match regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(rule.regex)
    {
        Ok(h) => h,
        Err(_) => regex_syntax::Parser::new().parse(rule.regex).ok()?,
    };
    // As the redactor compiles it: ASCII classes (as in Go), a larger size limit.
    let re = regex::bytes::RegexBuilder::new(rule.regex)
        .unicode(false)
        .size_limit(32 << 20)
        .build()
        .or_else(|_| {
            regex::bytes::RegexBuilder::new(rule.regex)
                .size_limit(32 << 20)
                .build()
        })
        .ok()?;
    for _ in 0..200 {
        let mut out = Vec::new();
        g.sample(&hir, &mut out);
        let Ok(s) = String::from_utf8(out) else {
            continue;
        };
        // Surrounded by spaces, as in a command line; the rule must really find it. A rule
        // is only tried where one of its keywords occurs (in gitleaks too): a sample whose
        // pattern does not spell one gets the first keyword before it, as in a real
        // config line naming the service.
        let lower = s.to_ascii_lowercase();
        let s = match rule.keywords.first() {
            Some(k) if !rule.keywords.iter().any(|k| lower.contains(k)) => format!(" {k} {s} "),
            _ => format!(" {s} "),
        };
        let Some(caps) = re.captures(s.as_bytes()) else {
            continue;
        };
        let secret = if rule.secret_group > 0 {
            caps.get(rule.secret_group)
        } else {
            caps.iter().skip(1).flatten().find(|m| !m.is_empty())
        }
        .or(caps.get(0))?
        .as_bytes();
        let Ok(secret) = String::from_utf8(secret.to_vec()) else {
            continue;
        };
        if secret.len() < 6
            || (rule.entropy > 0.0 && rules::entropy(secret.as_bytes()) <= rule.entropy)
        {
            continue;
        }
        return Some((s, secret));
    }
    None
}

fn all_bytes_under(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(all_bytes_under(&p));
            } else {
                out.extend(std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn generated_samples_of_every_gitleaks_rule_stay_out_of_the_data_dir() {
    let env = TestEnv::new();
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let base: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
    let mut samples = Vec::new();
    let mut no_sample = Vec::new();
    let mut texts = Vec::new();
    for rule in &rules::RULES {
        let Some((text, secret)) = sample_for(rule, &mut g) else {
            no_sample.push(rule.id);
            continue;
        };
        texts.push(text);
        samples.push((rule.id, secret));
    }
    // Eight samples per event, one a line, so the suite stays quick.
    for (i, chunk) in texts.chunks(8).enumerate() {
        let mut ev = base.clone();
        ev["tool_use_id"] = format!("toolu_sample_{i}").into();
        let command: Vec<String> = chunk.iter().map(|t| format!("echo{t}")).collect();
        let output: Vec<String> = chunk.iter().map(|t| format!("value:{t}")).collect();
        ev["tool_input"]["command"] = command.join("\n").into();
        ev["tool_response"]["stdout"] = output.join("\n").into();
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_LOG__LEVEL", "trace");
        let out = run_with_stdin(c, ev.to_string().as_bytes());
        assert_eq!(out.status.code(), Some(0));
    }
    let everything = all_bytes_under(&env.data_dir);
    let escaped = |s: &str| Value::from(s).to_string().trim_matches('"').to_string();
    let leaked: Vec<(&str, &str)> = samples
        .iter()
        .filter(|(_, s)| contains(&everything, s) || contains(&everything, &escaped(s)))
        .map(|(id, s)| (*id, s.as_str()))
        .collect();
    let kept = samples.len() - leaked.len();
    let share = kept as f64 / samples.len() as f64;
    eprintln!(
        "generated samples: {} of {} rules; kept out {kept} of {} ({:.1}%); no sample for {:?}; leaked: {leaked:?}",
        samples.len(),
        rules::RULES.len(),
        samples.len(),
        share * 100.0,
        no_sample
    );
    assert!(
        samples.len() * 100 >= rules::RULES.len() * 90,
        "too few samples"
    );
    assert!(
        share >= 0.995,
        "only {:.1}% kept out; leaked: {leaked:?}",
        share * 100.0
    );
}

/// Puts each text through the real hook, as a command and its output (the secret in both),
/// eight an event; returns the secrets found anywhere in the data dir afterwards.
fn leaks_through_the_hook<'a>(
    env: &TestEnv,
    samples: &[(&'a str, String, String)],
) -> Vec<(&'a str, String)> {
    let base: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
    for (i, chunk) in samples.chunks(8).enumerate() {
        let mut ev = base.clone();
        ev["tool_use_id"] = format!("toolu_detector_{i}").into();
        let lines: Vec<&str> = chunk.iter().map(|(_, t, _)| t.as_str()).collect();
        ev["tool_input"]["command"] = lines.join("\n").into();
        ev["tool_response"]["stdout"] = lines.join("\n").into();
        let out = run_with_stdin(env.cmd("cairn-hook"), ev.to_string().as_bytes());
        assert_eq!(out.status.code(), Some(0));
    }
    // As text, searched with std's substring search (a byte-window scan of a database for
    // hundreds of samples takes minutes in a debug build).
    let everything = String::from_utf8_lossy(&all_bytes_under(&env.data_dir)).into_owned();
    let escaped = |s: &str| Value::from(s).to_string().trim_matches('"').to_string();
    samples
        .iter()
        .filter(|(_, _, s)| everything.contains(s.as_str()) || everything.contains(&escaped(s)))
        .map(|(d, _, s)| (*d, s.clone()))
        .collect()
}

/// Puts a sample set (`secrets/<file>`, lines `{"detector", "text", "secret"}`; lines
/// without a text, such as a header naming the source, are skipped) through the real hook
/// and checks that it holds at least `min_samples` and that `floor` of them are kept out.
fn sample_set_stays_out(file: &str, name: &str, min_samples: usize, floor: f64) {
    let text = std::fs::read_to_string(crate::support::fixtures().join("secrets").join(file))
        .expect("samples");
    let parsed: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .filter(|v: &Value| v["text"].is_string())
        .collect();
    let samples: Vec<(&str, String, String)> = parsed
        .iter()
        .map(|v| {
            (
                v["detector"].as_str().expect("detector"),
                v["text"].as_str().expect("text").to_string(),
                v["secret"].as_str().expect("secret").to_string(),
            )
        })
        .collect();
    let env = TestEnv::new();
    let leaked = leaks_through_the_hook(&env, &samples);
    let share = 1.0 - leaked.len() as f64 / samples.len() as f64;
    eprintln!(
        "{name} samples kept out: {} of {} ({:.1}%); leaked: {leaked:?}",
        samples.len() - leaked.len(),
        samples.len(),
        share * 100.0
    );
    assert!(samples.len() >= min_samples);
    assert!(
        share >= floor,
        "only {:.1}% kept out; leaked: {leaked:?}",
        share * 100.0
    );
}

#[test]
fn an_independent_sample_set_stays_out_of_the_data_dir() {
    sample_set_stays_out("detectors.jsonl", "independent", 80, 0.985);
}

#[test]
fn trufflehogs_detector_samples_stay_out_of_the_data_dir() {
    // Generated from trufflehog's detector tests by `build_trufflehog.py` (its first line
    // names the source and commit). The target is 95%; the floor is what the hook
    // measured (862 of 904 when it was set; 864 since, BENCHMARKS.md).
    sample_set_stays_out("trufflehog.jsonl", "trufflehog", 800, 0.953);
}

#[test]
fn a_secret_in_a_command_is_not_stored_from_its_output() {
    let env = TestEnv::new();
    let mut ev: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
    let secret = "Qm9vYXJ0aGlzIGlzIGEgdGVzdA7x";
    ev["tool_input"]["command"] = format!("export TOKEN='{secret}'; ./deploy.sh").into();
    ev["tool_response"]["stdout"] = format!("using token {secret}\ndone").into();
    ev["tool_response"]["stderr"] = format!("debug: {secret}").into();
    let out = run_with_stdin(env.cmd("cairn-hook"), ev.to_string().as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let everything = all_bytes_under(&env.data_dir);
    assert!(contains(&everything, "deploy.sh"), "the event was stored");
    assert!(!contains(&everything, secret), "the secret was stored");
}

#[test]
fn source_lines_that_name_secrets_are_left_alone() {
    let text = std::fs::read_to_string(crate::support::fixtures().join("secrets/code-lines.txt"))
        .expect("lines");
    let p = Privacy {
        redact_secrets: true,
        max_field_bytes: 1 << 20,
    };
    // As a `Read` tool's response holds a file: the whole text, and each line alone.
    let response =
        serde_json::json!({"type": "text", "file": {"filePath": "x.py", "content": text}});
    assert_eq!(p.value(&response), response);
    let changed: Vec<(&str, String)> = text
        .lines()
        .filter(|l| p.text(l) != *l)
        .map(|l| (l, p.text(l)))
        .collect();
    assert!(changed.is_empty(), "{changed:#?}");
    // What is judged by the lines around it (an anchor wrapped onto the next line, a block
    // of base64 lines): each block whole.
    let blocks =
        std::fs::read_to_string(crate::support::fixtures().join("secrets/code-blocks.txt"))
            .expect("blocks");
    let changed: Vec<(&str, String)> = blocks
        .split("---\n")
        .filter(|b| p.text(b) != *b)
        .map(|b| (b, p.text(b)))
        .collect();
    assert!(changed.is_empty(), "{changed:#?}");
}

#[test]
fn commit_messages_are_not_mistaken_for_secrets() {
    let path = crate::support::fixtures().join("recall-eval/bat/corpus.jsonl");
    let text = std::fs::read_to_string(&path).expect("corpus");
    let p = Privacy {
        redact_secrets: true,
        max_field_bytes: 1 << 20,
    };
    let (mut memories, mut changed) = (0usize, Vec::new());
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("jsonl");
        if v["record"] != "observation" {
            continue;
        }
        memories += 1;
        let mut fields: Vec<String> = ["title", "subtitle", "narrative"]
            .iter()
            .filter_map(|k| v[*k].as_str().map(str::to_string))
            .collect();
        for k in ["facts", "concepts", "files_read", "files_modified"] {
            for item in v[k].as_array().into_iter().flatten() {
                fields.extend(item.as_str().map(str::to_string));
            }
        }
        if let Some(f) = fields.iter().find(|f| p.text(f) != **f) {
            changed.push((f.clone(), p.text(f)));
        }
    }
    let rate = changed.len() as f64 / memories as f64;
    eprintln!(
        "memories changed by redaction: {} of {memories} ({:.2}%): {changed:#?}",
        changed.len(),
        rate * 100.0
    );
    assert!(memories > 1000);
    assert!(rate <= 0.005, "{:.2}% changed", rate * 100.0);
}

/// One `PostToolUse` event of the fixture's session, through the real hook.
fn hook_event(env: &TestEnv, id: &str, input: Value, response: Value) {
    let mut ev: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
    ev["tool_use_id"] = id.into();
    ev["tool_input"] = input;
    ev["tool_response"] = response;
    let out = run_with_stdin(env.cmd("cairn-hook"), ev.to_string().as_bytes());
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_secret_is_removed_from_the_sessions_later_events() {
    let env = TestEnv::new();
    let secret = "Vq7Lm2Xp9Rt4Wz8Kc3Nb6Hd";
    hook_event(
        &env,
        "toolu_first",
        serde_json::json!({"command": format!("export DEPLOY_TOKEN='{secret}'")}),
        serde_json::json!({"stdout": "", "stderr": ""}),
    );
    // Later: the bare value alone, and inside other text; no rule would find it there.
    hook_event(
        &env,
        "toolu_later",
        serde_json::json!({"command": "printenv DEPLOY_TOKEN"}),
        serde_json::json!({"stdout": format!("{secret}\n"), "stderr": format!("sent x:{secret} ok")}),
    );
    let everything = all_bytes_under(&env.data_dir);
    assert!(
        contains(&everything, "printenv DEPLOY_TOKEN"),
        "the event was stored"
    );
    assert!(!contains(&everything, secret), "the secret was stored");
    // What is remembered is a keyed fingerprint, and the files are the owner's only.
    let secrets = env.data_dir.join("secrets");
    assert!(!contains(&all_bytes_under(&secrets), secret));
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(&secrets).expect("secrets dir").flatten() {
        let mode = e.metadata().expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", e.path().display());
    }
}

#[test]
fn multi_field_and_encoded_forms_stay_out_of_the_data_dir() {
    use base64_encode as b64;
    let env = TestEnv::new();
    let body = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo9z+40RQzuVaE8AkAFmxZzow3x+VJYKdjykkJ0iT9wCS0DRTXu269V264Vf";
    hook_event(
        &env,
        "toolu_pem",
        serde_json::json!({"command": "cat id_rsa", "description": "-----BEGIN RSA PRIVATE KEY-----"}),
        serde_json::json!({"stdout": body, "stderr": ""}),
    );
    let split = "ghp_Zq8Lm2Xp9Rt4Wz8Kc3Nb6Hd1Fg5Jk7Ls0Q";
    hook_event(
        &env,
        "toolu_split",
        serde_json::json!({"command": "gh auth token"}),
        serde_json::json!({"stdout": &split[..12], "stderr": &split[12..]}),
    );
    let key =
        format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n");
    let env_file = "DATABASE_URL=postgres://app:Hq3Vx9Lm2Tz7Wk4Pn8@db.internal/app\nSTRIPE_SECRET_KEY=sk_live_Tq8Vz3Lm9Xp2Wk7Hd4Nb6Rc1\n";
    hook_event(
        &env,
        "toolu_encoded",
        serde_json::json!({"command": "kubectl get secret app -o yaml"}),
        serde_json::json!({"stdout": format!("data:\n  id_rsa: {}\n  env: {}\n", b64(key.as_bytes()), b64(env_file.as_bytes())), "stderr": ""}),
    );
    let private = "Pw7Hd2Lm9Xq4Tz8Vc3";
    hook_event(
        &env,
        "toolu_tags",
        serde_json::json!({"items": ["keep-me-1", "<private>", private, "</private>"], "<private>": {"note": format!("{private}-obj")}}),
        serde_json::json!({"stdout": "keep-me-2", "stderr": ""}),
    );
    let everything = all_bytes_under(&env.data_dir);
    for kept in [
        "cat id_rsa",
        "gh auth token",
        "kubectl get secret",
        "keep-me-1",
        "keep-me-2",
    ] {
        assert!(contains(&everything, kept), "{kept} was not stored");
    }
    for (what, leaked) in [
        ("a key's body", &body[40..100]),
        ("a split token's rest", &split[12..]),
        ("an encoded key", &b64(key.as_bytes())[..60]),
        ("an encoded .env", &b64(env_file.as_bytes())[..40]),
        ("the .env's password", "Hq3Vx9Lm2Tz7Wk4Pn8"),
        ("a private array item", private),
    ] {
        assert!(!contains(&everything, leaked), "{what} was stored");
    }
}

/// Standard base64 with padding, as `base64 -w0` writes it.
fn base64_encode(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | u32::from(c) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
