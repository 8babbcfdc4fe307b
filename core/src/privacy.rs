//! What never reaches the database: `<private>…</private>` spans, cairn's own injected
//! context (so memory never feeds on itself), and secrets; and how large fields are capped.
//!
//! Order: tags are stripped first, then secrets redacted, then the field capped, so a cut
//! never splits a secret into an unrecognisable (and so unredacted) half.
//!
//! Invariants: pure; never panics on any input (property-tested); an unclosed `<private>`
//! hides everything after it, and a `</private>` with no opening hides everything before
//! it, so a span cut in half by Claude Code leaks nothing; a capped field is at most
//! `max_field_bytes` long (or [`MARKER_MAX`] when the limit is smaller than the marker) and
//! says how many bytes were cut.

use std::borrow::Cow;

pub mod rules;

use serde_json::{Map, Value};

use crate::settings::CaptureSettings;
use crate::text::{self, Unit};

/// The tag whose content a user wants kept out of memory.
pub const PRIVATE_TAG: &str = "private";
/// The tag cairn wraps its injected SessionStart context in; stripped from everything
/// captured so memory never observes its own output.
pub const CONTEXT_TAG: &str = "cairn-context";
/// Tags whose spans are removed, with their content, before anything is stored.
pub const STRIPPED_TAGS: &[&str] = &[PRIVATE_TAG, CONTEXT_TAG];

/// Longest marker [`cap`] inserts.
pub const MARKER_MAX: usize = 48;

/// The capture settings that decide what is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privacy {
    pub redact_secrets: bool,
    pub max_field_bytes: usize,
}

impl Privacy {
    pub fn from_settings(c: &CaptureSettings) -> Self {
        Self {
            redact_secrets: c.redact_secrets,
            max_field_bytes: c.max_field_bytes,
        }
    }

    /// A text field, cleaned: tags stripped, secrets redacted, capped.
    pub fn text(&self, s: &str) -> String {
        let stripped = strip_tags(s);
        let redacted = if self.redact_secrets {
            match redact(&stripped) {
                Cow::Borrowed(_) => stripped,
                Cow::Owned(o) => Cow::Owned(o),
            }
        } else {
            stripped
        };
        cap(&redacted, self.max_field_bytes).into_owned()
    }

    /// A memory saved by hand (`cairn save`, the MCP tool `save_memory`), cleaned like
    /// everything captured: every text field and list item goes through [`Privacy::text`].
    pub fn observation(&self, o: &mut crate::memory::observations::NewObservation) {
        let c = &mut o.content;
        for field in [&mut c.title, &mut c.subtitle, &mut c.narrative] {
            *field = self.text(field);
        }
        for list in [
            &mut c.facts,
            &mut c.concepts,
            &mut c.files_read,
            &mut c.files_modified,
        ] {
            for item in list.iter_mut() {
                *item = self.text(item);
            }
            list.retain(|i| !i.trim().is_empty());
        }
    }

    /// A JSON field (tool input or response), cleaned: every string (and object key)
    /// cleaned like [`Privacy::text`], values of secret-looking keys (`"password": …`)
    /// redacted; when the whole value is still larger than the limit, it becomes a string
    /// holding its capped JSON text.
    pub fn value(&self, v: &Value) -> Value {
        let cleaned = self.walk(v);
        if matches!(cleaned, Value::String(_) | Value::Null | Value::Bool(_)) {
            return cleaned;
        }
        let text = cleaned.to_string();
        if text.len() <= self.max_field_bytes {
            cleaned
        } else {
            Value::String(cap(&text, self.max_field_bytes).into_owned())
        }
    }

    /// A JSON value cleaned leaf by leaf like [`Privacy::value`], but never turned into a
    /// capped string as a whole (each string is still capped).
    pub fn tree(&self, v: &Value) -> Value {
        self.walk(v)
    }

    fn walk(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.walk(i)).collect()),
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    let key = if self.redact_secrets {
                        redact(&strip_tags(k)).into_owned()
                    } else {
                        strip_tags(k).into_owned()
                    };
                    let secret_value =
                        matches!(v, Value::String(s) if !s.is_empty()) || v.is_number();
                    let value = if self.redact_secrets && secret_value && is_secret_key(k) {
                        Value::String(REDACTED.into())
                    } else {
                        self.walk(v)
                    };
                    out.insert(key, value);
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }
}

const REDACTED: &str = "[REDACTED]";

// ---------------------------------------------------------------------------------------
// Tags

/// Removes every span of a [`STRIPPED_TAGS`] tag, with its content. Tag names match
/// without regard to ASCII case; an opening tag may carry attributes.
pub fn strip_tags(s: &str) -> Cow<'_, str> {
    if !s.contains('<') {
        return Cow::Borrowed(s);
    }
    let b = s.as_bytes();
    let mut out = String::new();
    let mut cursor = 0; // next input byte not yet copied or dropped
    let mut depth = 0usize;
    let mut changed = false;
    let mut i = 0;
    while let Some(off) = s[i..].find('<') {
        let at = i + off;
        match tag_at(b, at) {
            Some((end, true)) => {
                if depth == 0 {
                    out.push_str(&s[cursor..at]);
                }
                depth += 1;
                changed = true;
                i = end;
            }
            Some((end, false)) => {
                if depth > 0 {
                    depth -= 1;
                } else {
                    // A closing tag with no opening: hide everything before it.
                    out.clear();
                }
                if depth == 0 {
                    cursor = end;
                }
                changed = true;
                i = end;
            }
            None => i = at + 1,
        }
    }
    if !changed {
        return Cow::Borrowed(s);
    }
    if depth == 0 {
        out.push_str(&s[cursor..]);
    }
    Cow::Owned(out)
}

/// At `b[at] == b'<'`: a stripped tag ending before `end`, and whether it opens.
fn tag_at(b: &[u8], at: usize) -> Option<(usize, bool)> {
    let mut p = at + 1;
    let closing = b.get(p) == Some(&b'/');
    if closing {
        p += 1;
    }
    for tag in STRIPPED_TAGS {
        let t = tag.as_bytes();
        let Some(name) = b.get(p..p + t.len()) else {
            continue;
        };
        if !name.eq_ignore_ascii_case(t) {
            continue;
        }
        let q = p + t.len();
        match b.get(q) {
            Some(b'>') => return Some((q + 1, !closing)),
            Some(c) if c.is_ascii_whitespace() || (*c == b'/' && !closing) => {
                // Attributes (or spaces) up to the closing `>`, on a bounded stretch.
                let limit = (q + 512).min(b.len());
                let rel = b[q..limit].iter().position(|&c| c == b'>')?;
                let end = q + rel + 1;
                // `<private/>` is an empty span: treat as an open and a close.
                if !closing && end >= 2 && b[end - 2] == b'/' {
                    return None;
                }
                return Some((end, !closing));
            }
            _ => {}
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// Secrets

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn run_len(b: &[u8], from: usize, ok: impl Fn(u8) -> bool) -> usize {
    b.get(from..)
        .map_or(0, |rest| rest.iter().take_while(|&&c| ok(c)).count())
}

fn b64url(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
}

fn starts_with_at(b: &[u8], at: usize, prefix: &[u8]) -> bool {
    b.get(at..at + prefix.len()) == Some(prefix)
}

/// A secret starting at `b[at]`: its length and kind.
fn secret_at(b: &[u8], at: usize) -> Option<(usize, &'static str)> {
    let c = b[at];
    let boundary = at == 0 || !is_word(b[at - 1]);
    match c {
        b'A' if boundary => {
            for p in [&b"AKIA"[..], b"ASIA", b"ABIA", b"ACCA"] {
                if starts_with_at(b, at, p) {
                    let n = run_len(b, at + 4, |c| c.is_ascii_uppercase() || c.is_ascii_digit());
                    if n == 16 && !b.get(at + 20).is_some_and(|&c| is_word(c)) {
                        return Some((20, "aws-access-key"));
                    }
                }
            }
            None
        }
        b'g' if boundary => {
            if starts_with_at(b, at, b"github_pat_") {
                let n = run_len(b, at + 11, is_word);
                return (n >= 20).then_some((11 + n, "github-token"));
            }
            if starts_with_at(b, at, b"glpat-") {
                let n = run_len(b, at + 6, b64url);
                return (n >= 20).then_some((6 + n, "gitlab-token"));
            }
            if b.get(at + 1) == Some(&b'h')
                && matches!(b.get(at + 2), Some(b'p' | b'o' | b'u' | b's' | b'r'))
                && b.get(at + 3) == Some(&b'_')
            {
                let n = run_len(b, at + 4, |c| c.is_ascii_alphanumeric());
                return (n >= 30).then_some((4 + n, "github-token"));
            }
            None
        }
        b's' if boundary && starts_with_at(b, at, b"sk-") => {
            let n = run_len(b, at + 3, b64url);
            let body = &b[at + 3..at + 3 + n];
            if starts_with_at(b, at, b"sk-ant-") && n >= 24 {
                return Some((3 + n, "anthropic-key"));
            }
            let digits = body.iter().any(u8::is_ascii_digit);
            (n >= 20 && digits).then_some((3 + n, "openai-key"))
        }
        b'x' if boundary => {
            let slack = (starts_with_at(b, at, b"xox")
                && matches!(b.get(at + 3), Some(b'a' | b'b' | b'p' | b'o' | b's' | b'r'))
                && b.get(at + 4) == Some(&b'-'))
                || starts_with_at(b, at, b"xapp-");
            if slack {
                let n = run_len(b, at + 5, |c| c.is_ascii_alphanumeric() || c == b'-');
                return (n >= 10).then_some((5 + n, "slack-token"));
            }
            None
        }
        b'h' if starts_with_at(b, at, b"https://hooks.slack.com/services/") => {
            let n = run_len(b, at + 33, |c| b64url(c) || c == b'/');
            (n >= 10).then_some((33 + n, "slack-webhook"))
        }
        b'e' if boundary && starts_with_at(b, at, b"eyJ") => {
            let h = run_len(b, at, b64url);
            if h < 10 || b.get(at + h) != Some(&b'.') {
                return None;
            }
            let p0 = at + h + 1;
            if !starts_with_at(b, p0, b"eyJ") {
                return None;
            }
            let p = run_len(b, p0, b64url);
            if p < 10 || b.get(p0 + p) != Some(&b'.') {
                return None;
            }
            let s = run_len(b, p0 + p + 1, b64url);
            Some((h + 1 + p + 1 + s, "jwt"))
        }
        b'-' if starts_with_at(b, at, b"-----BEGIN ") => {
            let label_start = at + 11;
            let label = run_len(b, label_start, |c| {
                c.is_ascii_uppercase() || c.is_ascii_digit() || c == b' '
            });
            let label_text = &b[label_start..label_start + label];
            if label > 60
                || !label_text.windows(11).any(|w| w == b"PRIVATE KEY")
                || !starts_with_at(b, label_start + label, b"-----")
            {
                return None;
            }
            let body = label_start + label + 5;
            let end = find(b, body, b"-----END ")
                .and_then(|e| find(b, e + 9, b"-----").map(|f| f + 5))
                .unwrap_or(b.len());
            Some((end - at, "private-key"))
        }
        _ => None,
    }
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// Key names whose assigned value is a secret (matched as substrings, ignoring case).
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "access_token",
    "auth_token",
    "refresh_token",
    "private_key",
    "authorization",
    "credentials",
];

/// True when an identifier names a secret (`DB_PASSWORD`, `client_secret`, `apiKey`).
pub fn is_secret_key(key: &str) -> bool {
    if key.len() > 64 {
        return false;
    }
    let lower = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|k| lower.contains(k))
}

/// Replaces secrets with `[REDACTED:<kind>]` (tokens and keys of known shapes) or
/// `[REDACTED]` (the value of a `password=`, `secret: …`, `"api_key": "…"` assignment).
///
/// Three passes: cairn's scanners for the commonest token shapes, then the rule set of
/// [`rules`] (gitleaks' rules and the generic credential forms, `[REDACTED:<rule id>]`),
/// then `key = value` assignments of secret-named keys.
pub fn redact(s: &str) -> Cow<'_, str> {
    let tokens = redact_tokens(s);
    let ruled = match redact_rules(&tokens) {
        Cow::Borrowed(_) => tokens,
        Cow::Owned(o) => Cow::Owned(o),
    };
    match redact_assignments(&ruled) {
        Cow::Borrowed(_) => ruled,
        Cow::Owned(o) => Cow::Owned(o),
    }
}

fn redact_rules(s: &str) -> Cow<'_, str> {
    let found = rules::find(s);
    if found.is_empty() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut cursor = 0;
    for f in found {
        out.push_str(&s[cursor..f.start]);
        out.push_str("[REDACTED:");
        out.push_str(f.rule);
        out.push(']');
        cursor = f.end;
    }
    out.push_str(&s[cursor..]);
    Cow::Owned(out)
}

fn redact_tokens(s: &str) -> Cow<'_, str> {
    let b = s.as_bytes();
    let mut out: Option<String> = None;
    let mut cursor = 0;
    let mut i = 0;
    while i < b.len() {
        if matches!(b[i], b'A' | b'g' | b's' | b'x' | b'h' | b'e' | b'-')
            && let Some((len, kind)) = secret_at(b, i)
        {
            let o = out.get_or_insert_with(|| String::with_capacity(s.len()));
            o.push_str(&s[cursor..i]);
            o.push_str("[REDACTED:");
            o.push_str(kind);
            o.push(']');
            i += len;
            cursor = i;
            continue;
        }
        i += 1;
    }
    match out {
        None => Cow::Borrowed(s),
        Some(mut o) => {
            o.push_str(&s[cursor..]);
            Cow::Owned(o)
        }
    }
}

fn redact_assignments(s: &str) -> Cow<'_, str> {
    let b = s.as_bytes();
    let mut out: Option<String> = None;
    let mut cursor = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c != b'=' && c != b':' {
            i += 1;
            continue;
        }
        let sep = i;
        i += 1;
        // `==`, `:=` is fine, `::` is a path.
        if b.get(sep + 1) == Some(&b'=') && c == b'=' || c == b':' && b.get(sep + 1) == Some(&b':')
        {
            i += 1;
            continue;
        }
        // The key: before optional spaces and a closing quote.
        let mut k_end = sep;
        while k_end > 0 && b[k_end - 1] == b' ' {
            k_end -= 1;
        }
        if k_end > 0 && matches!(b[k_end - 1], b'"' | b'\'') {
            k_end -= 1;
        }
        let mut k_start = k_end;
        while k_start > 0
            && (is_word(b[k_start - 1]) || b[k_start - 1] == b'-' || b[k_start - 1] == b'.')
            && k_end - k_start < 64
        {
            k_start -= 1;
        }
        if k_start == k_end || !is_secret_key(&s[k_start..k_end]) {
            continue;
        }
        // The value: after spaces, quoted or up to a delimiter.
        let mut v = sep + 1;
        if c == b':' && b.get(v) == Some(&b'=') {
            v += 1;
        }
        while b.get(v).is_some_and(|&c| c == b' ' || c == b'\t') {
            v += 1;
        }
        let (v_start, v_end) = match b.get(v) {
            Some(&q @ (b'"' | b'\'')) => {
                let len = run_len(b, v + 1, |c| c != q && c != b'\n');
                (v + 1, v + 1 + len)
            }
            _ => {
                let mut len = run_len(b, v, |c| !is_value_end(c));
                let word = &s[v..v + len];
                if ["bearer", "basic", "token"]
                    .iter()
                    .any(|w| word.eq_ignore_ascii_case(w))
                    && b.get(v + len) == Some(&b' ')
                {
                    len += 1 + run_len(b, v + len + 1, |c| !is_value_end(c));
                }
                (v, v + len)
            }
        };
        if v_end == v_start || s[v_start..v_end].starts_with("[REDACTED") {
            continue;
        }
        let o = out.get_or_insert_with(|| String::with_capacity(s.len()));
        o.push_str(&s[cursor..v_start]);
        o.push_str(REDACTED);
        cursor = v_end;
        i = v_end;
    }
    match out {
        None => Cow::Borrowed(s),
        Some(mut o) => {
            o.push_str(&s[cursor..]);
            Cow::Owned(o)
        }
    }
}

fn is_value_end(c: u8) -> bool {
    c.is_ascii_whitespace() || matches!(c, b'"' | b'\'' | b',' | b';' | b'&' | b'}' | b')')
}

// ---------------------------------------------------------------------------------------
// Capping

fn marker(cut: usize) -> String {
    format!("\n[... {cut} bytes cut by cairn ...]\n")
}

/// Caps `s` to `max` bytes, keeping about two thirds from the head and one third from the
/// tail, joined by a marker saying how many bytes were cut.
pub fn cap(s: &str, max: usize) -> Cow<'_, str> {
    text::keep_ends(s, max, Unit::Bytes, marker)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Privacy = Privacy {
        redact_secrets: true,
        max_field_bytes: 16 * 1024,
    };

    fn check(input: &str, expected: &str) {
        assert_eq!(P.text(input), expected, "input: {input:?}");
    }

    #[test]
    fn private_spans_and_injected_context_are_removed() {
        check("a <private>b</private> c", "a  c");
        check("<PRIVATE>x</Private>y", "y");
        check("a <private note=\"1\">b</private >c", "a c");
        check("keep <private>open to the end", "keep ");
        check("hidden before</private> shown", " shown");
        check("<private>a<private>b</private>c</private>d", "d");
        check("x<cairn-context>old memory</cairn-context>y", "xy");
        check("<privately>kept</privately>", "<privately>kept</privately>");
        check("a < b and c > d", "a < b and c > d");
        check("<private", "<private");
        check("<private/>x", "<private/>x");
        check("héllo <private>ü</private>wörld", "héllo wörld");
    }

    #[test]
    fn secrets_are_redacted() {
        check(
            "key AKIAIOSFODNN7EXAMPLE here",
            "key [REDACTED:aws-access-key] here",
        );
        check("AKIAIOSFODNN7EXAMPLEX", "AKIAIOSFODNN7EXAMPLEX");
        check(
            "t=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "t=[REDACTED:github-token]",
        );
        check(
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
            "[REDACTED:github-token]",
        );
        check("glpat-abcdefghij0123456789 x", "[REDACTED:gitlab-token] x");
        check(
            "ANTHROPIC sk-ant-api03-abcdefghijklmnop0123456789",
            "ANTHROPIC [REDACTED:anthropic-key]",
        );
        check("sk-proj-abcdefghij1234567890klmn", "[REDACTED:openai-key]");
        check(
            "task-abcdefghij1234567890klmnop",
            "task-abcdefghij1234567890klmnop",
        );
        check("sk-learn is a library", "sk-learn is a library");
        check("xoxb-1234567890-abcdefghij", "[REDACTED:slack-token]");
        check(
            "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXX",
            "[REDACTED:slack-webhook]",
        );
        check(
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end",
            "jwt [REDACTED:jwt] end",
        );
        check(
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nb",
            "a\n[REDACTED:private-key]\nb",
        );
        check(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn",
            "[REDACTED:private-key]",
        );
        check(
            "-----BEGIN PUBLIC KEY-----\nabc",
            "-----BEGIN PUBLIC KEY-----\nabc",
        );
        check("password=hunter2 next", "password=[REDACTED] next");
        check("DB_PASSWORD: 's3cr3t!'", "DB_PASSWORD: '[REDACTED]'");
        check("{\"api_key\": \"abc123\"}", "{\"api_key\": \"[REDACTED]\"}");
        check("client_secret = xyz;", "client_secret = [REDACTED];");
        check(
            "Authorization: Bearer abc.def.ghi\nnext",
            "Authorization: [REDACTED]\nnext",
        );
        check("if password == other", "if password == other");
        check("max_tokens: 2048", "max_tokens: 2048");
        check("std::secret::Thing", "std::secret::Thing");
        check("password=", "password=");
    }

    #[test]
    fn redaction_can_be_turned_off() {
        let p = Privacy {
            redact_secrets: false,
            ..P
        };
        assert_eq!(
            p.text("AKIAIOSFODNN7EXAMPLE <private>x</private>"),
            "AKIAIOSFODNN7EXAMPLE "
        );
    }

    #[test]
    fn caps_keep_head_and_tail_with_a_marker() {
        let s: String = (0..1000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let c = cap(&s, 200);
        assert!(c.len() <= 200, "{}", c.len());
        assert!(c.starts_with("abcdef"));
        assert!(c.ends_with(&s[s.len() - 20..]));
        assert!(c.contains("bytes cut by cairn"));
        let cut: usize = c
            .split("[... ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("number");
        assert_eq!(c.len() - marker(cut).len() + cut, s.len());
        assert_eq!(cap("short", 200), "short");
        let multi = "é".repeat(500);
        let c = cap(&multi, 101);
        assert!(c.len() <= 101);
    }

    #[test]
    fn json_values_are_cleaned_leaf_by_leaf() {
        let v = serde_json::json!({
            "command": "export AWS=AKIAIOSFODNN7EXAMPLE",
            "password": "hunter2",
            "nested": [{"text": "a<private>b</private>c"}, 5, null, true],
            "max_tokens": 10,
        });
        let got = P.value(&v);
        assert_eq!(
            got,
            serde_json::json!({
                "command": "export AWS=[REDACTED:aws-access-key]",
                "password": "[REDACTED]",
                "nested": [{"text": "ac"}, 5, null, true],
                "max_tokens": 10,
            })
        );
        let small = Privacy {
            max_field_bytes: 100,
            ..P
        };
        let big = serde_json::json!({"a": "x".repeat(80), "b": "y".repeat(80)});
        let got = small.value(&big);
        let Value::String(s) = got else {
            panic!("capped to a string")
        };
        assert!(s.len() <= 100 && s.contains("bytes cut by cairn"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_respects_the_cap(s in ".{0,400}", max in 0usize..300) {
            let p = Privacy { redact_secrets: true, max_field_bytes: max };
            let out = p.text(&s);
            proptest::prop_assert!(out.len() <= max.max(MARKER_MAX));
            let _ = p.value(&serde_json::json!({"k": s.clone(), "password": s}));
        }

        #[test]
        fn never_panics_on_tag_soup(s in "(<|>|/|private|cairn-context|PRIVATE| |x|é|-----BEGIN |PRIVATE KEY-----|sk-|eyJ|\\.|=|:|\"|password){0,40}") {
            let out = P.text(&s);
            // Nothing between a stripped open tag and its close survives.
            let canary = format!("{s}<private>CANARY</private>");
            proptest::prop_assert!(!P.text(&canary).contains("CANARY"));
            let _ = out;
        }

        #[test]
        fn private_content_never_survives(before in "[a-z <>/]{0,30}", after in "[a-z <>/]{0,30}") {
            let s = format!("{before}<private>TOPSECRET</private>{after}");
            proptest::prop_assert!(!P.text(&s).contains("TOPSECRET"));
        }
    }
}
