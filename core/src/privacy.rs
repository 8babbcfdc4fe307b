//! What never reaches the database: `<private>…</private>` spans, cairn's own injected
//! context (so memory never feeds on itself), and secrets; and how large fields are capped.
//!
//! Order: tags are stripped first, then secrets redacted, then the field capped, so a cut
//! never splits a secret into an unrecognisable (and so unredacted) half.
//!
//! Invariants: pure; never panics on any input (property-tested); what a whole
//! `<private>…</private>` span holds never survives, while a tag that opens or closes no
//! span, or is quoted (`` `<private>` ``, `"<private>"`), is text: code and notes that
//! mention the tags are kept whole; a secret found in one field of an event is removed from
//! all of them ([`Privacy::values`]), and, given the session's fingerprints
//! ([`Recurring`], kept by `capture::fingerprints`), from its later events; a value
//! assigned to a secret-named key is redacted only when it looks like a secret, not code,
//! and a value shaped like one only after a credential word or when random enough to need
//! none; a capped field is at most
//! `max_field_bytes` long (or [`MARKER_MAX`] when the limit is smaller than the marker) and
//! says how many bytes were cut.

use std::borrow::Cow;

pub mod recurring;
pub mod rules;

pub use recurring::Recurring;

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

    /// A text field, cleaned: tags stripped, secrets redacted (every copy of a secret found
    /// anywhere in it), capped.
    pub fn text(&self, s: &str) -> String {
        self.text_in(s, None)
    }

    /// [`Privacy::text`] in a session: copies of the secrets it showed before are removed
    /// too, and the secrets found here are remembered.
    pub fn text_in(&self, s: &str, session: Option<&mut Recurring>) -> String {
        let mut found = Found::default();
        let raw = self.raw_text(s, &mut found);
        self.finish_text(&raw, &found.ready(session, self.redact_secrets))
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
    /// redacted, a span of JSON values between a `"<private>"` and a `"</private>"` item
    /// (or under a `"<private>"` key) dropped; when the whole value is still larger than
    /// the limit, it becomes a string holding its capped JSON text.
    pub fn value(&self, v: &Value) -> Value {
        let [v] = self.values([v]);
        v
    }

    /// The fields of one event, cleaned together like [`Privacy::value`]: a secret found in
    /// any of them is removed from all of them (`export TOKEN=…` in the command and the
    /// token in its output); a private key's header in one makes base64 runs in every one
    /// key material; a token prefix ending one field makes the token-like run starting
    /// another its rest.
    pub fn values<const N: usize>(&self, vs: [&Value; N]) -> [Value; N] {
        self.values_in(vs, None)
    }

    /// [`Privacy::values`] in a session: copies of the secrets it showed before are
    /// removed too, and the secrets found here are remembered.
    pub fn values_in<const N: usize>(
        &self,
        vs: [&Value; N],
        session: Option<&mut Recurring>,
    ) -> [Value; N] {
        let mut found = Found::default();
        let raw = vs.map(|v| self.walk(v, &mut found));
        let ready = found.ready(session, self.redact_secrets);
        raw.map(|v| {
            let cleaned = self.finish(v, &ready);
            if matches!(cleaned, Value::String(_) | Value::Null | Value::Bool(_)) {
                return cleaned;
            }
            let text = cleaned.to_string();
            if text.len() <= self.max_field_bytes {
                cleaned
            } else {
                Value::String(cap(&text, self.max_field_bytes).into_owned())
            }
        })
    }

    /// A JSON value cleaned leaf by leaf like [`Privacy::value`], but never turned into a
    /// capped string as a whole (each string is still capped).
    pub fn tree(&self, v: &Value) -> Value {
        let mut found = Found::default();
        let raw = self.walk(v, &mut found);
        self.finish(raw, &found.ready(None, self.redact_secrets))
    }

    /// Tags stripped and secrets redacted, not capped; what was redacted goes to `found`.
    fn raw_text(&self, s: &str, found: &mut Found) -> String {
        let stripped = strip_tags(s);
        if !self.redact_secrets {
            return stripped.into_owned();
        }
        found.note(&stripped);
        redact_into(&stripped, &mut found.secrets).into_owned()
    }

    /// Every copy of a found secret removed, then capped.
    fn finish_text(&self, s: &str, ready: &Ready) -> String {
        let cleaned = if self.redact_secrets {
            ready.apply(s)
        } else {
            Cow::Borrowed(s)
        };
        cap(&cleaned, self.max_field_bytes).into_owned()
    }

    fn walk(&self, v: &Value, found: &mut Found) -> Value {
        match v {
            Value::String(s) => Value::String(self.raw_text(s, found)),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut i = 0;
                while i < items.len() {
                    if let Some(end) = private_items(&items[i..]) {
                        i += end;
                        continue;
                    }
                    out.push(self.walk(&items[i], found));
                    i += 1;
                }
                Value::Array(out)
            }
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    if whole_tag(k) == Some(true) {
                        continue;
                    }
                    let key = self.raw_text(k, found);
                    let value = match v {
                        Value::String(s)
                            if self.redact_secrets
                                && is_secret_key(k)
                                && looks_like_secret(s, true) =>
                        {
                            found.secrets.push(s.clone());
                            Value::String(REDACTED.into())
                        }
                        Value::Number(n)
                            if self.redact_secrets
                                && is_secret_key(k)
                                && n.to_string().len() >= 4 =>
                        {
                            Value::String(REDACTED.into())
                        }
                        _ => self.walk(v, found),
                    };
                    out.insert(key, value);
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    fn finish(&self, v: Value, ready: &Ready) -> Value {
        match v {
            Value::String(s) => Value::String(self.finish_text(&s, ready)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|i| self.finish(i, ready)).collect())
            }
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.finish_text(&k, ready), self.finish(v, ready)))
                    .collect(),
            ),
            other => other,
        }
    }
}

/// How many items from the start of `items` form a private span (a `"<private>"` item, the
/// items after it, and the `"</private>"` item closing it), if they do.
fn private_items(items: &[Value]) -> Option<usize> {
    let Some(Value::String(first)) = items.first() else {
        return None;
    };
    if whole_tag(first) != Some(true) {
        return None;
    }
    let mut depth = 0usize;
    for (n, item) in items.iter().enumerate() {
        if let Value::String(s) = item {
            match whole_tag(s) {
                Some(true) => depth += 1,
                Some(false) => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(n + 1);
                    }
                }
                None => {}
            }
        }
    }
    None
}

/// What redaction found in the fields of one event so far.
#[derive(Debug, Default)]
struct Found {
    /// The text of every secret redacted.
    secrets: Vec<String>,
    /// A private key's header or footer was seen: base64 runs are key material.
    key_material: bool,
    /// A field ended in a token's known prefix with too little after it to be one.
    split_prefix: bool,
    /// Those token heads.
    pieces: Vec<String>,
}

/// Copies shorter than this are not hunted for elsewhere (a short password is redacted
/// where its assignment is, but `abc` is not removed from every word of the event).
const MIN_COPY: usize = 6;

/// Token prefixes whose rest may be cut into another field (stdout and stderr), with the
/// token's shortest whole length.
const SPLIT_PREFIXES: &[(&str, usize)] = &[
    ("ghp_", 40),
    ("gho_", 40),
    ("ghu_", 40),
    ("ghs_", 40),
    ("ghr_", 40),
    ("github_pat_", 82),
    ("glpat-", 26),
    ("sk-ant-", 40),
    ("sk-proj-", 40),
    ("xoxb-", 20),
    ("xoxp-", 20),
    ("AKIA", 20),
    ("npm_", 40),
];

impl Found {
    fn note(&mut self, s: &str) {
        if s.contains("PRIVATE KEY-----") || s.contains("PRIVATE KEY BLOCK-----") {
            self.key_material = true;
        }
        let tail = s.trim_end();
        let last = tail
            .rsplit(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '='))
            .next()
            .unwrap_or_default();
        let cut = SPLIT_PREFIXES.iter().any(|&(p, whole)| {
            last.starts_with(p)
                && last.len() < whole
                && last[p.len()..].bytes().all(|c| c.is_ascii_alphanumeric())
        });
        if cut {
            self.split_prefix = true;
            self.pieces.push(last.to_string());
        }
    }

    /// Sorted for replacing; the sure secrets remembered in `session`, whose earlier
    /// secrets are removed too (when `redact`).
    fn ready<'r>(mut self, session: Option<&'r mut Recurring>, redact: bool) -> Ready<'r> {
        // Only what surely is a secret is hunted for elsewhere: a doubtful finding removed
        // from every field would multiply a false positive.
        self.secrets.retain(|s| {
            s.len() >= MIN_COPY
                && s.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                && !s.contains(char::is_whitespace)
                && !rules::not_a_value(s)
                && !identifier(s)
                && s.len() >= 8
                && rules::entropy(s.as_bytes()) >= 3.0
                // A word (`Redshift`) is not hunted for: random letters are.
                && (s.bytes().any(|c| !c.is_ascii_alphabetic())
                    || shape_randomness(s.as_bytes()) >= 0.3)
        });
        let session = session.filter(|_| redact).map(|r| {
            for s in &self.secrets {
                r.remember(s);
            }
            &*r
        });
        self.secrets.append(&mut self.pieces);
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        self.secrets.dedup();
        Ready(self, session.filter(|r| !r.is_empty()))
    }
}

/// [`Found`], sorted for replacing, and the session's remembered secrets.
struct Ready<'a>(Found, Option<&'a Recurring>);

impl Ready<'_> {
    fn apply<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let f = &self.0;
        let mut out = Cow::Borrowed(s);
        if let Some(session) = self.1 {
            out = then(out, |text| {
                let mut o = Splice::new(text);
                for (a, b) in session.spans(text) {
                    o.replace(a, b, REDACTED);
                }
                o.done()
            });
        }
        for secret in &f.secrets {
            out = then(out, |text| replace_whole(text, secret));
        }
        if f.key_material {
            out = then(out, redact_base64_runs);
        }
        if f.split_prefix {
            let lead = out.len() - out.trim_start().len();
            let n = run_len(out.as_bytes(), lead, b64url);
            if n >= 8 && rules::entropy(&out.as_bytes()[lead..lead + n]) > 3.0 {
                out = then(out, |text| {
                    let mut o = Splice::new(text);
                    o.replace(lead, lead + n, REDACTED);
                    o.done()
                });
            }
        }
        out
    }
}

/// `s` with every copy of `secret` that stands whole (not inside a longer run of letters
/// and digits: `Redshift` in `RedshiftPermissions`) replaced by the marker.
fn replace_whole<'a>(s: &'a str, secret: &str) -> Cow<'a, str> {
    let b = s.as_bytes();
    let mut out = Splice::new(s);
    for (at, _) in s.match_indices(secret) {
        let end = at + secret.len();
        if at < out.end
            || at > 0 && b[at - 1].is_ascii_alphanumeric()
            || b.get(end).is_some_and(u8::is_ascii_alphanumeric)
        {
            continue;
        }
        out.replace(at, end, REDACTED);
    }
    out.done()
}

/// Runs of at least 64 base64 characters (line breaks inside allowed), redacted: in an
/// event holding a private key's header, the body of a key.
fn redact_base64_runs(s: &str) -> Cow<'_, str> {
    let b = s.as_bytes();
    let is_b64 = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=');
    let mut out = Splice::new(s);
    let mut i = 0;
    while i < b.len() {
        if !is_b64(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let (mut chars, mut last) = (0, i);
        while i < b.len() && (is_b64(b[i]) || b[i] == b'\n' || b[i] == b'\r') {
            if is_b64(b[i]) {
                chars += 1;
                last = i;
            }
            i += 1;
        }
        i = last + 1;
        if chars >= 64 {
            out.replace(start, i, "[REDACTED:private-key]");
        }
    }
    out.done()
}

const REDACTED: &str = "[REDACTED]";

/// A text made of `s` with spans replaced, left to right: `s` itself (borrowed) until the
/// first replacement. What every pass of redaction writes its result with.
struct Splice<'a> {
    s: &'a str,
    out: Option<String>,
    /// The end of the last span replaced (0 before any).
    end: usize,
}

impl<'a> Splice<'a> {
    fn new(s: &'a str) -> Self {
        Splice {
            s,
            out: None,
            end: 0,
        }
    }

    /// Replaces `s[start..end]` by `marker`; `start` is at or after the last span's end.
    fn replace(&mut self, start: usize, end: usize, marker: &str) {
        let o = self
            .out
            .get_or_insert_with(|| String::with_capacity(self.s.len()));
        o.push_str(&self.s[self.end..start]);
        o.push_str(marker);
        self.end = end;
    }

    fn done(self) -> Cow<'a, str> {
        match self.out {
            None => Cow::Borrowed(self.s),
            Some(mut o) => {
                o.push_str(&self.s[self.end..]);
                Cow::Owned(o)
            }
        }
    }
}

/// `text` through one more pass of redaction: what the pass made of it when it changed
/// anything, else `text` as it was.
fn then<'a>(text: Cow<'a, str>, pass: impl FnOnce(&str) -> Cow<'_, str>) -> Cow<'a, str> {
    match pass(&text) {
        Cow::Owned(o) => Cow::Owned(o),
        Cow::Borrowed(_) => text,
    }
}

// ---------------------------------------------------------------------------------------
// Tags

/// Removes every span of a [`STRIPPED_TAGS`] tag, with its content. Tag names match
/// without regard to ASCII case; an opening tag may carry attributes. Only whole spans are
/// removed: an opening tag with no closing one after it, a closing tag with no opening one
/// before it, and a tag quoted on both sides (`"<private>"`, `` `<private>` ``: code or
/// prose that mentions the tag) are text and kept. Nested spans go with their outermost.
pub fn strip_tags(s: &str) -> Cow<'_, str> {
    if !s.contains('<') {
        return Cow::Borrowed(s);
    }
    let b = s.as_bytes();
    // Every tag: (start, end, opens).
    let mut tags = Vec::new();
    let mut i = 0;
    while let Some(off) = s[i..].find('<') {
        let at = i + off;
        match tag_at(b, at) {
            Some((end, opens)) => {
                if !quoted(b, at, end) {
                    tags.push((at, end, opens));
                }
                i = end;
            }
            None => i = at + 1,
        }
    }
    // Pair each closing tag with the latest unpaired opening one; the outermost pairs are
    // the spans removed.
    let mut open: Vec<usize> = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for &(at, end, opens) in &tags {
        if opens {
            open.push(at);
        } else if let Some(start) = open.pop() {
            while spans.last().is_some_and(|&(s0, _)| s0 >= start) {
                spans.pop();
            }
            spans.push((start, end));
        }
    }
    let mut out = Splice::new(s);
    for (start, end) in spans {
        out.replace(start, end, "");
    }
    out.done()
}

/// True when the tag at `b[at..end]` sits between two equal quotes (`"`, `'`, `` ` ``).
fn quoted(b: &[u8], at: usize, end: usize) -> bool {
    at > 0 && matches!(b[at - 1], b'"' | b'\'' | b'`') && b.get(end) == Some(&b[at - 1])
}

/// True when `s` (trimmed) is exactly an opening (`Some(true)`) or closing (`Some(false)`)
/// stripped tag.
fn whole_tag(s: &str) -> Option<bool> {
    let t = s.trim();
    match tag_at(t.as_bytes(), 0) {
        Some((end, opens)) if t.starts_with('<') && end == t.len() => Some(opens),
        _ => None,
    }
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
                let rel = b[q..limit].iter().position(|&c| c == b'>' || c == b'<')?;
                let end = q + rel + 1;
                // A closing tag has no attributes; a tag never holds another `<`.
                if b[end - 1] == b'<'
                    || closing && !b[q..end - 1].iter().all(u8::is_ascii_whitespace)
                {
                    return None;
                }
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
        b'L' if boundary && starts_with_at(b, at, b"LS0tLS1CRUdJTi") => {
            // Base64 of `-----BEGIN …`: a key file encoded whole (a Kubernetes secret, an
            // environment variable). Decoded far enough to read the label.
            let n = run_len(b, at, |c| {
                c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=' | b'\n' | b'\r')
            });
            let head = decode_base64(&b[at..at + n.min(120)]);
            let key = head.windows(11).any(|w| w == b"PRIVATE KEY");
            key.then_some((n, "private-key"))
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

/// Standard base64 decoded, skipping line breaks and stopping at padding or anything else.
fn decode_base64(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in b {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            // Either alphabet: standard (`+/`) or URL-safe (`-_`).
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'\n' | b'\r' => continue,
            _ => break,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
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
    redact_into(s, &mut Vec::new())
}

/// [`redact`], pushing the text of every secret it redacts onto `secrets`.
fn redact_into<'a>(s: &'a str, secrets: &mut Vec<String>) -> Cow<'a, str> {
    let tokens = redact_tokens(s, secrets);
    let ruled = then(tokens, |t| redact_rules(t, secrets));
    let assigned = then(ruled, |t| redact_assignments(t, secrets));
    let shaped = then(assigned, |t| redact_shaped(t, secrets));
    then(shaped, |t| redact_encoded(t, secrets))
}

/// Words that make a nearby value a credential (lowercase, matched as parts of words): a
/// secret-ish key name in any naming style (`API_KEY`, `clientSecret`, `x-auth-token`).
const CREDENTIAL_WORDS: &[&str] = &[
    "key",
    "token",
    "secret",
    "passw",
    "pwd",
    "pass",
    "auth",
    "cred",
    "bearer",
    "api",
    "private",
    "access",
    "sid",
    "signature",
    "contrase",
    "mot de passe",
    "kennwort",
    "senha",
    "parol",
];

/// Bytes before a value, on its line, in which a credential word makes it one.
const CREDENTIAL_WINDOW: usize = 48;

/// Characters a token is made of (base64, base64url, dotted and dashed forms).
fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'+' | b'/' | b'.' | b'~')
}

/// How random a token's shape is: the share of positions where the character class
/// (lowercase, uppercase, digit) changes between letters and digits, not counting an uppercase letter followed
/// by lowercase ones (a word in CamelCase). Identifiers and words score low (under 0.25),
/// random keys high (0.4 and more), whatever their alphabet.
pub fn shape_randomness(t: &[u8]) -> f64 {
    let class = |c: u8| match c {
        b'a'..=b'z' => 0,
        b'A'..=b'Z' => 1,
        b'0'..=b'9' => 2,
        _ => 3,
    };
    // Over letters and digits only: separators (`aws-sdk-go-v2`) say nothing.
    let alnum: Vec<u8> = t
        .iter()
        .copied()
        .filter(u8::is_ascii_alphanumeric)
        .collect();
    let changes = alnum
        .windows(2)
        .filter(|w| class(w[0]) != class(w[1]) && !(class(w[0]) == 1 && class(w[1]) == 0))
        .count();
    changes as f64 / alnum.len().max(1) as f64
}

/// A service's token prefix followed by a long run of one or two characters or of digits
/// (`shippo_live_aaaa…`, `BBDC-1111…`): the shape of an issued key, filled in for a test or
/// an example, which no rule of randomness can see but is still the key's form.
fn filled_prefixed(t: &str) -> bool {
    let Some((prefix, last)) = t.rsplit_once(['_', '-']) else {
        return false;
    };
    let fill = last.as_bytes();
    if prefix.is_empty()
        || prefix.len() > 16
        || !prefix
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
        || fill.len() < 20
        || !fill.iter().all(u8::is_ascii_alphanumeric)
    {
        return false;
    }
    let mut seen = [false; 256];
    fill.iter().for_each(|&c| seen[usize::from(c)] = true);
    seen.iter().filter(|&&x| x).count() <= 2 || fill.iter().all(u8::is_ascii_digit)
}

/// A token as values of secrets look, by shape alone: long enough, random enough, of
/// several character classes, not code, a path, a host, a version or a hash's hex, nor a
/// test vector's filler ([`counting`]).
/// `strong`: sure enough to redact with no credential word near it.
fn secret_shaped(t: &str, strong: bool) -> bool {
    shaped_by_class(t, strong) && !filler(t.as_bytes())
}

/// True when `b`, read as hex or as base64 (at any of its four alignments, as a line cut
/// from a longer run is), holds bytes counting up by one (`000102…`, `AAECAwQF…`): a test
/// vector's filler, no one's key.
fn filler(b: &[u8]) -> bool {
    let counting = |d: &[u8]| {
        d.len() >= 12
            && d.windows(2)
                .filter(|w| w[1].wrapping_sub(w[0]) == 1)
                .count()
                * 10
                >= (d.len() - 1) * 9
    };
    let hex: Vec<u8> = b
        .chunks_exact(2)
        .map_while(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect();
    counting(&hex) || (0..4).any(|k| counting(&decode_base64(b.get(k..).unwrap_or_default())))
}

fn shaped_by_class(t: &str, strong: bool) -> bool {
    let b = t.as_bytes();
    let n = b.len();
    let (min, min_entropy) = if strong { (24, 4.0) } else { (12, 3.0) };
    if n < min || n > 512 || rules::name_like(t) || rules::reference_like(t) {
        return false;
    }
    let lower = b.iter().any(u8::is_ascii_lowercase);
    let upper = b.iter().any(u8::is_ascii_uppercase);
    let digit = b.iter().any(u8::is_ascii_digit);
    let hex = b.iter().all(|c| c.is_ascii_hexdigit() || *c == b'-');
    let classes = usize::from(lower) + usize::from(upper) + usize::from(digit);
    // A prefixed token (`sk_live_…`, `rubygems_…`) is shaped like a snake_case name, but its
    // last part is random.
    // A short hex tail is a resource's id (`backup-03e3c82e0183b7b6b`), not a key.
    let prefixed = t.rsplit(['_', '-']).next().is_some_and(|last| {
        last.len() >= 16
            && last.len() < n
            && secret_shaped(last, false)
            && (last.len() >= 24 || !last.bytes().all(|c| c.is_ascii_hexdigit()))
    });
    // A prefix names what the random part is: its own randomness is what counts.
    let min_entropy = if prefixed { 3.0 } else { min_entropy };
    if rules::entropy(b) < min_entropy || (rules::code_like(t) && !prefixed) {
        return false;
    }
    if strong {
        // Words and hex ids joined (`TargetTracking-my-asg-61a39305-ed0c-…`): a name.
        if t.split(['-', '_']).all(|p| {
            p.len() < 24 && p.bytes().all(|c| c.is_ascii_hexdigit())
                || p.len() <= 16 && p.bytes().all(|c| c.is_ascii_alphabetic())
        }) {
            return false;
        }
        // Hex (hashes, commit ids, UUIDs) and base64 data need a word saying what they are.
        let r = shape_randomness(b);
        return (prefixed && !b.iter().any(|c| matches!(c, b'/' | b'+' | b'.')))
            || !hex
                && digit
                && !b.iter().any(|c| matches!(c, b'/' | b'+' | b'.'))
                && (classes == 3 && r >= 0.3 || classes == 2 && r >= 0.4);
    }
    let r = shape_randomness(b);
    // A host, a file or a version (`docs.python.org/3/library`, `golang:1.27.0`).
    let dotted = b.iter().any(|c| matches!(c, b'.' | b'/'));
    if dotted {
        // A file's name (`ed25519-pkcs8-v2.der`, `cert_2031.pem`): its extension says so.
        if t.rsplit_once('.').is_some_and(|(name, ext)| {
            !name.is_empty()
                && (1..=4).contains(&ext.len())
                && ext.as_bytes()[0].is_ascii_lowercase()
                && ext
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        }) {
            return false;
        }
        let longest = t
            .split(['.', '/'])
            .max_by_key(|p| p.len())
            .unwrap_or_default();
        // A hex id in a path (`…:key/4c1731d6-5435-…`) names a resource.
        return longest.len() < n
            && !longest.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-')
            && secret_shaped(longest, false);
    }
    // Hex of 64 bits or so is a digest or an id (`456157e4ff304b13`); keys in hex are
    // longer.
    if hex && digit {
        return n >= 24;
    }
    match (digit, lower || upper) {
        (true, true) => r >= 0.3,
        (false, true) => classes >= 2 && r >= 0.35,
        (true, false) => n >= 20,
        (false, false) => false,
    }
}

/// A value assigned right after a credential word: random-looking letters suffice (a
/// name in CamelCase or snake_case does not).
fn assigned_shaped(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 16
        && b.len() <= 512
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
        && rules::entropy(b) >= 3.7
        && !rules::code_like(t)
        && !rules::name_like(t)
        && !rules::reference_like(t)
        && !type_name(t)
        && (shape_randomness(b) >= 0.2
            || b.iter().any(u8::is_ascii_digit)
            || b.iter().any(u8::is_ascii_lowercase) && b.iter().any(u8::is_ascii_uppercase))
}

/// True when `t` is a type's name with a number in it (`Ed25519PrivateKey`,
/// `X448PublicKey`): an identifier whose part after its last digit is words
/// ([`rules::name_like`]).
fn type_name(t: &str) -> bool {
    let tail = t
        .rsplit(|c: char| c.is_ascii_digit())
        .next()
        .unwrap_or_default();
    t.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && tail.len() >= 6
        && tail.len() < t.len()
        && rules::name_like(tail)
}

/// True when `t` reads as a name in code rather than a value: an identifier that starts
/// with `_`, or whose `_`-separated parts are all shorter than a key's random part
/// (`N14x509_object_st4DOLLAR_14E`, `_MatcherAPIv1Base`). Issued keys with a prefix
/// (`sk_live_…`) keep a long random part and stay secrets.
fn identifier(t: &str) -> bool {
    let b = t.as_bytes();
    let word = b
        .first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    word && (b[0] == b'_' || t.contains('_') && t.split('_').all(|part| part.len() < 20))
}

/// True when `t` is a commit id or a digest by its length (SHA-1, SHA-256 in hex) and what
/// precedes it says so (`@user 6d02d53f…` in release notes, `sha256:`, `commit …`).
fn names_a_commit(before: &str, t: &str) -> bool {
    let hex = t.bytes().all(|c| c.is_ascii_hexdigit());
    let last_word = before.split_whitespace().last().unwrap_or_default();
    hex && matches!(t.len(), 7..=12 | 40 | 64)
        && (last_word.starts_with('@')
            || [
                "sha", "hash", "commit", "digest", "checksum", "revision", "merge", "cherry",
            ]
            .iter()
            .any(|w| before.contains(w)))
}

/// Values that look like secrets (see [`secret_shaped`]) where a credential word precedes
/// them on their line (`Using API_KEY=…`, `<secret>…</secret>`, `"client_token": "…"`,
/// `twilio token - '…'`), and values so random in shape that they are secrets anywhere.
fn redact_shaped<'a>(s: &'a str, secrets: &mut Vec<String>) -> Cow<'a, str> {
    let b = s.as_bytes();
    let mut out = Splice::new(s);
    let mut i = 0;
    while i < b.len() {
        if !token_char(b[i]) || (i > 0 && token_char(b[i - 1])) {
            i += 1;
            continue;
        }
        let mut start = i;
        while i < b.len() && token_char(b[i]) {
            i += 1;
        }
        // Base64 padding belongs to the token.
        while i < b.len()
            && b[i] == b'='
            && i - start >= 12
            && !b.get(i + 1).is_some_and(|&c| token_char(c))
        {
            i += 1;
        }
        let mut end = i;
        while start < end && matches!(b[start], b'.' | b'-' | b'/' | b'~') {
            start += 1;
        }
        while end > start && matches!(b[end - 1], b'.' | b'-' | b'/' | b'~') {
            end -= 1;
        }
        // An email address's or a URL's user (`1234+name@users.noreply…`): not a value.
        if end - start < 12 || s[start..end].starts_with("[REDACTED") || b.get(end) == Some(&b'@') {
            continue;
        }
        let t = &s[start..end];
        let line_start = b[..start]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |p| p + 1)
            .max(start.saturating_sub(CREDENTIAL_WINDOW));
        let before = s
            .get(line_start..start)
            .unwrap_or_default()
            .to_ascii_lowercase();
        let near = CREDENTIAL_WORDS.iter().any(|w| before.contains(w));
        // `token = 'Xy…'`, `API_KEY: Xy…`: the word right before, only separators between.
        let gap = before.trim_end_matches(|c: char| {
            c.is_ascii_whitespace() || matches!(c, ':' | '=' | '>' | '\'' | '"' | '-' | '{' | '(')
        });
        let assigned = before.len() - gap.len() <= 6
            && CREDENTIAL_WORDS.iter().any(|w| {
                gap.rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .next()
                    .is_some_and(|word| word.contains(w))
            });
        // A service's name and a quoted value, nothing else on the line before it
        // (`keenio '15AP…'`, `mite "2w39…"`): how keys are written down beside what they
        // are for.
        let quote = start
            .checked_sub(1)
            .and_then(|q| b.get(q))
            .filter(|q| matches!(q, b'\'' | b'"'));
        let named = quote.is_some_and(|q| b.get(end) == Some(q))
            && before.strip_suffix(['\'', '"']).is_some_and(|unquoted| {
                let name = unquoted.trim_end();
                name.len() < unquoted.len()
                    && name.len() >= 4
                    && name
                        .rsplit(|c: char| c.is_ascii_whitespace())
                        .next()
                        .is_some_and(|w| w.len() == name.trim_start().len() && w.len() >= 4)
                    && name.trim_start().bytes().all(|c| c.is_ascii_lowercase())
            });
        // Base64 of plain text is text: `redact_encoded` looks into it.
        // A name with a leading underscore (`_MatcherAPIv1Base`) is code, whatever is near.
        let shaped = !t.starts_with('_') && (near || named) && secret_shaped(t, false)
            || !t.starts_with('_') && assigned && assigned_shaped(t)
            || filled_prefixed(t)
            || secret_shaped(t, true)
                && !decodes_to_text(t.as_bytes())
                && !identifier(t)
                && !wrapped_line(b, start, end);
        if !shaped {
            continue;
        }
        // A public key's body (`ssh-rsa AAAA…`) and a commit's id in a link are not secrets.
        let public = [
            "ssh-rsa ",
            "ssh-ed25519 ",
            "ssh-dss ",
            "ecdsa-sha2-nistp256 ",
        ]
        .iter()
        .any(|p| before.ends_with(p));
        let linked = ["/commit/", "/commits/", "/blob/", "/tree/", "/compare/"]
            .iter()
            .any(|p| t.contains(p));
        // The value of an id (`"JobId": "…"`, `user_id=…`) identifies; it is a secret
        // only when the key says so too (`secret_id`). A resource's name (`arn:…/key/…`)
        // likewise.
        let key = gap
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or_default();
        let identifier = before.len() - gap.len() <= 6
            && key.len() > 2
            && key.ends_with("id")
            && !["secret", "pass", "token", "auth"]
                .iter()
                .any(|w| key.contains(w));
        let named_resource = before
            .rsplit(|c: char| c.is_ascii_whitespace() || matches!(c, '"' | '\'' | '='))
            .next()
            .is_some_and(|w| w.starts_with("arn:") || w.starts_with("urn:"));
        // An anchor, a place in a page (`…/files#diff-a608d9…L14`, even wrapped onto the
        // next line), names where to look, not a value.
        let anchor = b[..start]
            .iter()
            .rposition(|c| !c.is_ascii_whitespace())
            .is_some_and(|p| b[p] == b'#' && p > 0 && !b[p - 1].is_ascii_whitespace());
        // A UUID names a thing; it is a credential only where a word for one is near
        // (`client_secret = "…"`, `<secret>{… uuid}`), not a mere id (`CSIDL_…: "{…}"`).
        let uuid = t.len() == 36
            && t.bytes().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == b'-',
                _ => c.is_ascii_hexdigit(),
            });
        let granting = [
            "secret", "token", "key", "pass", "pwd", "auth", "cred", "api",
        ]
        .iter()
        .any(|w| before.contains(w));
        // A type with its initializer after it (`KeyExchange: eTlsAlgorithmUsage = 0i32;`).
        let typed = quote.is_none() && rules::annotated(&b[end..]);
        if uuid && !granting
            || typed
            || public
            || linked
            || identifier
            || named_resource
            || anchor
            || names_a_commit(&before, t)
        {
            continue;
        }
        secrets.push(t.to_string());
        out.replace(start, end, REDACTED);
    }
    out.done()
}

/// True when `b[start..end]` is a line of a wrapped base64 block (a mail's attachment, a
/// certificate: lines of 60 characters or more, one after another, the last shorter): encoded data, which
/// its shape alone does not make a secret. A key's body is caught by its header.
fn wrapped_line(b: &[u8], start: usize, end: usize) -> bool {
    let base64_line = |l: &[u8], min: usize| {
        let l = l.trim_ascii();
        l.len() >= min
            && l.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='))
    };
    let from = b[..start]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1);
    let to = b[end..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| end + p);
    let line = &b[from..to];
    if !base64_line(line, 40) {
        return false;
    }
    // The block's full lines are 60 characters or more; its last one may be shorter.
    let min = if line.trim_ascii().len() >= 60 {
        40
    } else {
        60
    };
    let next = b
        .get(to + 1..)
        .map(|r| &r[..r.iter().position(|&c| c == b'\n').unwrap_or(r.len())]);
    let prev = from.checked_sub(1).map(|e| {
        let s = b[..e]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |p| p + 1);
        &b[s..e]
    });
    next.is_some_and(|l| base64_line(l, min)) || prev.is_some_and(|l| base64_line(l, min))
}

/// True when `b` is base64 of printable text (at least 19 of 20 bytes).
fn decodes_to_text(b: &[u8]) -> bool {
    let decoded = decode_base64(b);
    let Ok(text) = std::str::from_utf8(&decoded) else {
        return false;
    };
    let printable = text
        .bytes()
        .filter(|&c| c.is_ascii_graphic() || c.is_ascii_whitespace())
        .count();
    text.len() >= MIN_ENCODED * 3 / 4 - 2 && printable * 20 >= text.len() * 19
}

/// Shortest base64 run decoded and looked into.
const MIN_ENCODED: usize = 24;

/// Base64 runs (line breaks inside allowed, as `base64` wraps them) that decode to text
/// holding a secret (a `.env` file, a key file, a config encoded whole): redacted whole.
/// The decoded text goes through the same three passes; runs that decode to anything but
/// printable text (identifiers, hashes, binary) are left as they are.
fn redact_encoded<'a>(s: &'a str, secrets: &mut Vec<String>) -> Cow<'a, str> {
    let b = s.as_bytes();
    let is_b64 = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=');
    let mut out = Splice::new(s);
    let mut i = 0;
    while i < b.len() {
        if !is_b64(b[i]) || (i > 0 && is_b64(b[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        let (mut chars, mut last) = (0, i);
        while i < b.len() && (is_b64(b[i]) || b[i] == b'\n' || b[i] == b'\r') {
            if is_b64(b[i]) {
                chars += 1;
                last = i;
            }
            i += 1;
        }
        i = last + 1;
        if chars < MIN_ENCODED {
            continue;
        }
        if !decodes_to_text(&b[start..i]) {
            continue;
        }
        let decoded = decode_base64(&b[start..i]);
        let text = String::from_utf8_lossy(&decoded);
        let mut inner = Vec::new();
        let tokens = redact_tokens(&text, &mut inner);
        let ruled = redact_rules(&tokens, &mut inner);
        let _ = redact_assignments(&ruled, &mut inner);
        if inner.is_empty() {
            continue;
        }
        secrets.push(s[start..i].to_string());
        out.replace(start, i, "[REDACTED:encoded]");
    }
    out.done()
}

fn redact_rules<'a>(s: &'a str, secrets: &mut Vec<String>) -> Cow<'a, str> {
    let mut out = Splice::new(s);
    for f in rules::find(s) {
        secrets.push(s[f.start..f.end].to_string());
        out.replace(f.start, f.end, &format!("[REDACTED:{}]", f.rule));
    }
    out.done()
}

fn redact_tokens<'a>(s: &'a str, secrets: &mut Vec<String>) -> Cow<'a, str> {
    let b = s.as_bytes();
    let mut out = Splice::new(s);
    let mut i = 0;
    while i < b.len() {
        if matches!(b[i], b'A' | b'g' | b's' | b'x' | b'h' | b'e' | b'-' | b'L')
            && let Some((len, kind)) = secret_at(b, i)
        {
            secrets.push(s[i..i + len].to_string());
            out.replace(i, i + len, &format!("[REDACTED:{kind}]"));
            i += len;
            continue;
        }
        i += 1;
    }
    out.done()
}

fn redact_assignments<'a>(s: &'a str, secrets: &mut Vec<String>) -> Cow<'a, str> {
    let b = s.as_bytes();
    let mut out = Splice::new(s);
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
        // A segment of a name joined by `:` (`arn:aws:secretsmanager:…:secret:name`).
        if k_start == k_end
            || !is_secret_key(&s[k_start..k_end])
            || c == b':' && k_start > 0 && b[k_start - 1] == b':'
        {
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
        let quoted = matches!(b.get(v), Some(b'"' | b'\''));
        let (v_start, v_end) = match b.get(v) {
            Some(&q @ (b'"' | b'\'')) => {
                let len = run_len(b, v + 1, |c| c != q && c != b'\n');
                if b.get(v + 1 + len) != Some(&q) {
                    continue;
                }
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
        let value = &s[v_start..v_end];
        // After an authorization scheme (`Bearer …`), whatever follows is the credential,
        // unless it is an ellipsis or a word (`basic ...` in a doc).
        let scheme = ["bearer ", "basic ", "token "].iter().any(|w| {
            value.len() > w.len()
                && value
                    .get(..w.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(w))
                && value[w.len()..]
                    .bytes()
                    .filter(u8::is_ascii_alphanumeric)
                    .count()
                    >= 8
        });
        let called = !quoted
            && (matches!(b.get(v_end), Some(b'(' | b'[' | b'.')) || rules::annotated(&b[v_end..]));
        let typed = rules::keyed_by_type(&b[k_start.saturating_sub(128)..v_start]);
        if !scheme && (called || typed || !looks_like_secret(value, quoted)) {
            continue;
        }
        secrets.push(value.to_string());
        out.replace(v_start, v_end, REDACTED);
        i = v_end;
    }
    out.done()
}

fn is_value_end(c: u8) -> bool {
    c.is_ascii_whitespace()
        || matches!(
            c,
            b'"' | b'\'' | b',' | b';' | b'&' | b'}' | b')' | b'(' | b'[' | b']' | b'`'
        )
}

/// Words a secret-named key is assigned in code that are not its value: types, empty
/// values, the language's own words.
const NOT_SECRETS: &[&str] = &[
    "none",
    "null",
    "nil",
    "true",
    "false",
    "undefined",
    "str",
    "string",
    "bytes",
    "int",
    "bool",
    "optional",
    "any",
    "self",
    "this",
    "cls",
    "new",
    "await",
    "function",
    "lambda",
    "secret",
    "password",
    "token",
    "redacted",
    "required",
    "changeme",
    "xxx",
    "xxxx",
    "xxxxxx",
    "xxxxxxxx",
    "******",
    "********",
    "example",
    "default",
    "empty",
];

/// Whether a value assigned to a secret-named key looks like a secret rather than code: not
/// empty, not a placeholder (`${VAR}`, `<token>`, `{{ x }}`, `%s`, `***`), not a word of the
/// language or a type (`None`, `str`, `u64`), not a dotted path or an identifier
/// (`self.token`, `os.environ`, `get_token`) unless it mixes letters and digits the way a
/// password does (`hunter2`); quoted text with spaces is prose, not a secret.
fn looks_like_secret(v: &str, quoted: bool) -> bool {
    let v = v.trim();
    if v.is_empty() || v.starts_with("[REDACTED") || v.len() > 512 {
        return false;
    }
    let lower = v.to_ascii_lowercase();
    if NOT_SECRETS.contains(&lower.as_str()) {
        return false;
    }
    let first = v.as_bytes()[0];
    if matches!(
        first,
        b'$' | b'<' | b'{' | b'%' | b'@' | b'*' | b'#' | b'&' | b'!'
    ) && !quoted
        || v.starts_with("${")
        || v.starts_with("{{")
        || (v.starts_with('<') && v.ends_with('>'))
        || v.bytes()
            .all(|c| c == b'*' || c == b'x' || c == b'X' || c == b'.')
    {
        return false;
    }
    // Prose, or code with escapes (`"…: true\r\nHost: …"`).
    if v.contains(char::is_whitespace) || !quoted && v.contains('\\') {
        return false;
    }
    let ident = |t: &str| {
        let t = t.as_bytes();
        !t.is_empty() && !t[0].is_ascii_digit() && t.iter().all(|&c| is_word(c))
    };
    let letters = v.bytes().any(|c| c.is_ascii_alphabetic());
    let digits = v.bytes().any(|c| c.is_ascii_digit());
    if !quoted {
        // Code: a dotted path, a type (`u64`, `int32`), a call's name, a lone identifier.
        if v.split('.').all(ident) && v.contains('.') {
            return false;
        }
        if v.bytes()
            .all(|c| c.is_ascii_digit() || c == b'.' || c == b'-' || c == b'_')
        {
            return false;
        }
        if ident(v) && !(letters && digits && v.len() >= 6) {
            return false;
        }
        if type_name(v) {
            return false;
        }
        if ident(v) && is_type_like(&lower) {
            return false;
        }
        if v.starts_with('-') || v.starts_with('/') || v.starts_with("./") {
            return false;
        }
        // Generics, paths and operators: `Option<PathBuf>`, `std::env::var`, `a->b`.
        if v.contains(['<', '>', '(', '{']) || v.contains("::") {
            return false;
        }
    } else if v.len() < 4
        || (v.contains('{') && v.contains('}'))
        || v.contains("%s")
        || v.contains("%(")
    {
        return false;
    }
    // A constant's name (`CODEBUILD`, `USER_PASSWORD_AUTH`).
    let constant = v.bytes().all(|c| c.is_ascii_uppercase() || c == b'_');
    if constant
        || rules::plain_url(v)
        || rules::code_like(v)
        || rules::name_like(v)
        || rules::reference_like(v)
        || ident(v) && v.contains('_') && !quoted
    {
        return false;
    }
    true
}

/// `u64`, `int32`, `float64`, `sha256`, `utf8`, `base64`: names with digits that are types
/// or encodings, not passwords.
fn is_type_like(lower: &str) -> bool {
    let stem = lower.trim_end_matches(|c: char| c.is_ascii_digit());
    stem.len() < lower.len()
        && [
            "u", "i", "f", "int", "uint", "float", "sha", "utf", "base", "md", "crc", "ucs",
            "latin", "x", "bytes", "str", "complex", "ascii",
        ]
        .contains(&stem)
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
        check(
            "keep <private>open to the end",
            "keep <private>open to the end",
        );
        check(
            "shown before</private> shown",
            "shown before</private> shown",
        );
        check("a <private>b</private>c</private>d", "a c</private>d");
        check("x <private> y <private>z</private>", "x <private> y ");
        // Mentioned, not used: quoted tags are text.
        check(
            "strip `<private>` spans and \"<cairn-context>\" blocks",
            "strip `<private>` spans and \"<cairn-context>\" blocks",
        );
        check("if s == '<private>': drop()", "if s == '<private>': drop()");
        check("`<private>S</private>`", "``");
        check("<private>a<private>b</private>c</private>d", "d");
        check("x<cairn-context>old memory</cairn-context>y", "xy");
        check("<privately>kept</privately>", "<privately>kept</privately>");
        check("a < b and c > d", "a < b and c > d");
        check("<private", "<private");
        check("<private/>x", "<private/>x");
        check("héllo <private>ü</private>wörld", "héllo wörld");
    }

    #[test]
    fn a_window_cut_inside_a_character_is_no_context() {
        // The credential window starts inside an `é`: no text before the value is read.
        let s = format!("{}'Zx8Qw2Lm4Kp6Vb8Nq'", "é".repeat(30));
        assert_eq!(redact(&s), s);
    }

    #[test]
    fn values_shaped_like_secrets_go_by_class_and_names_stay() {
        for (text, secret) in [
            (
                "[DEBUG] Using API_KEY=oxpf4a93fjovt0v1z6lltcbcizlrml98",
                "oxpf4a93fjovt0v1z6lltcbcizlrml98",
            ),
            (
                "<secret>{acme AQAAABAAA Y5UbXOT1Xh1ZOCxztUvGqltt}</secret>",
                "Y5UbXOT1Xh1ZOCxztUvGqltt",
            ),
            (
                "acme token = 'sk_d21e2be3622049c7809f95cc02313821'",
                "sk_d21e2be3622049c7809f95cc02313821",
            ),
            (
                "export X=Qm9vYXJ0aGlzIGlzIGEgdGVzdA7xK3",
                "Qm9vYXJ0aGlzIGlzIGEgdGVzdA7xK3",
            ),
        ] {
            let out = redact(text);
            assert!(!out.contains(secret), "{text} -> {out}");
        }
        for text in [
            "impl fmt::Display for InvalidUtf8InPathParam {",
            "httpx.get('http://example.com/api/v1/example', timeout=10.0)",
            "- Update GPG signing key. @itchyny 0ff997f7c4c07660ffc6ad2506d5f56b8136208b",
            "see [the SSL API](https://docs.python.org/3/library/ssl.html)",
            "class SyncOrAsyncAuth(httpx.Auth):",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn base64_of_text_holding_a_secret_goes_whole() {
        // `DB_PASSWORD=Hq3Vx9Lm2Tz7Wk4Pn8\n`, and a line of prose.
        let env = "REJfUEFTU1dPUkQ9SHEzVng5TG0yVHo3V2s0UG44Cg==";
        let text = format!("data: {env}\nmore: {env}{env}");
        let out = redact(&text);
        assert!(!out.contains("REJfUEFTU1dPUkQ9"), "{out}");
        let prose = "VGhlIHF1aWNrIGJyb3duIGZveCBqdW1wcyBvdmVyIHRoZSBsYXp5IGRvZw==";
        assert_eq!(redact(prose), prose);
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
        check("client_secret = Xy9zQ2;", "client_secret = [REDACTED];");
        check("client_secret = xyz;", "client_secret = xyz;");
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
    fn code_that_names_secrets_is_not_a_secret() {
        for line in [
            "pwd = os.getcwd()",
            "token = self.get_token()",
            "pat = re.compile(r'^[a-z]+$')",
            "password = None",
            "    password: str,",
            "def login(self, password: str = None) -> bool:",
            "\"SECRET_KEY\": None,",
            "secret = secrets.token_bytes(32)",
            "api_key = config.api_key",
            "let token = tokens[i];",
            "let secret = [b'A'; 32 * 1024];",
            "token: u64,",
            "auth_token = get_auth_token(user)",
            "password = getpass.getpass(prompt)",
            "private_key: Option<PathBuf>,",
            "credentials = credentials or {}",
            "($value:expr, $pattern:pat => $result:expr) => {",
            "secret_key = os.environ['SECRET_KEY']",
            "token = ''",
            "password = \"\"",
            "    passwd = pwd.getpwuid(os.getuid())",
            "password=${DB_PASSWORD}",
            "persist-credentials: false",
        ] {
            check(line, line);
        }
    }

    #[test]
    fn an_allowlist_excuses_the_placeholder_it_names_not_a_secret_holding_it() {
        // gitleaks' global `true`, `false`, `null`, and `curl -u`'s `user:xxx`, `user:test`,
        // are whole values; a password holding one is still a password.
        for (text, expected) in [
            (
                "--password Kfalse9xQw",
                "--password [REDACTED:cli-password-flag]",
            ),
            (
                "sshpass -p true9XqWz ssh host",
                "sshpass -p [REDACTED:sshpass-password] ssh host",
            ),
            (
                "mysql -uroot -pXy9Qwnull db",
                "mysql -uroot -p[REDACTED:mysql-password] db",
            ),
            (
                "redis://:Kfalse9xQw@cache:6379",
                "redis://:[REDACTED:url-credentials]@cache:6379",
            ),
            (
                "curl -u bob:xyzS3cretabc https://api.example.com",
                "curl -u [REDACTED:curl-auth-user] https://api.example.com",
            ),
            (
                "curl -u admin:testK8x9Qw https://api.example.com",
                "curl -u [REDACTED:curl-auth-user] https://api.example.com",
            ),
        ] {
            check(text, expected);
        }
        for text in [
            "postgres://admin:false@db.example.com/prod",
            "postgres://admin:null@db.example.com/prod",
            "curl -u user:changeme https://api.example.com",
            "curl -u user:xxx https://api.example.com",
            "curl -u \"user:password\" https://api.example.com",
        ] {
            check(text, text);
        }
    }

    #[test]
    fn a_credential_word_with_digits_inside_is_no_placeholder() {
        // A placeholder puts its numbers at the end (`Password123`); `Secret123x` does not.
        for (text, expected) in [
            (
                "--password Secret123x",
                "--password [REDACTED:cli-password-flag]",
            ),
            (
                "password=Secret123x",
                "password=[REDACTED:keyword-secret-unquoted]",
            ),
            (
                "api_key = \"Secret123x\"",
                "api_key = \"[REDACTED:token-assignment]\"",
            ),
            (
                "GET /v1?token=Secret123x HTTP/1.1",
                "GET /v1?token=[REDACTED:url-query-secret] HTTP/1.1",
            ),
            (
                "curl -u bob:Secret123x https://api.example.com",
                "curl -u [REDACTED:curl-auth-user] https://api.example.com",
            ),
        ] {
            check(text, expected);
        }
        for text in [
            "password=Password123",
            "\"MasterUserPassword\": \"mynewpassword\"",
        ] {
            check(text, text);
        }
    }

    #[test]
    fn a_urls_password_is_redacted_whatever_words_it_spells() {
        for scheme in ["postgres", "postgresql", "https", "redis"] {
            for password in [
                "S3cretXyz",
                "S3cretPass",
                "Secret123x",
                "xyzS3cretabc",
                "Tr0ub4dorPass",
                "Zx9pQ2wLmN",
                "hunter22",
                "Kx8S3cret9q",
                "rootPassword",
                "mysecretpassword",
            ] {
                check(
                    &format!("psql {scheme}://admin:{password}@db.example.com/prod"),
                    &format!(
                        "psql {scheme}://admin:[REDACTED:url-credentials]@db.example.com/prod"
                    ),
                );
            }
        }
    }

    #[test]
    fn placeholders_in_a_url_stay() {
        for password in [
            "password",
            "secret",
            "pass",
            "changeme",
            "example",
            "your_password",
            "YOUR-PASSWORD",
            "${PASS}",
            "$DB_PASSWORD",
            "<password>",
            "{password}",
            "%s",
            "xxx",
            "***",
        ] {
            for url in [
                format!("postgres://user:{password}@localhost:5432/app"),
                format!("redis://:{password}@cache:6379/0"),
            ] {
                check(&url, &url);
            }
        }
    }

    #[test]
    fn command_line_password_slots_are_redacted_whatever_words_they_spell() {
        for (text, expected) in [
            (
                "mysql -uroot -pS3cretPass shop",
                "mysql -uroot -p[REDACTED:mysql-password] shop",
            ),
            (
                "sshpass -p xyzS3cretabc ssh deploy@host",
                "sshpass -p [REDACTED:sshpass-password] ssh deploy@host",
            ),
            (
                "docker login -u ci -p S3cretXyz registry.example.com",
                "docker login -u ci -p [REDACTED:registry-login-password] registry.example.com",
            ),
        ] {
            check(text, expected);
        }
        for text in [
            "mysql -uroot -pYOUR_PASSWORD shop",
            "mysql -uroot -p$MYSQL_PWD shop",
            "sshpass -p <password> ssh deploy@host",
            "docker login -u ci -p ${REGISTRY_TOKEN} registry.example.com",
        ] {
            check(text, text);
        }
    }

    #[test]
    fn an_api_key_spelling_a_credential_word_is_redacted() {
        // gitleaks' generic rule excuses a value holding one of its stop words (`token`,
        // `password`, `admin`, `auth`…); cairn's assignment rules still take it.
        for text in [
            "api_key = \"Zx8Qw2secretLm4Kp6Vb8N\"",
            "API_KEY=sk9XadminQw2Lm4Kp6",
            "GITHUB_TOKEN=Zx8tokenQw2Lm4Kp6Vb8N",
            "client_secret: 'Zx8passwordQw2Lm4Kp6Vb8N'",
        ] {
            let out = P.text(text);
            assert!(out.contains("[REDACTED"), "{text} -> {out}");
        }
    }

    #[test]
    fn a_secret_is_removed_from_every_field_of_an_event() {
        let input = serde_json::json!({"command": "export TOKEN='Zq8vLm2Xw9Pt4Rk7'; run"});
        let response = serde_json::json!({"stdout": "token is Zq8vLm2Xw9Pt4Rk7\n", "stderr": ""});
        let [i, r] = P.values([&input, &response]);
        assert!(!i.to_string().contains("Zq8vLm2Xw9Pt4Rk7"), "{i}");
        assert!(!r.to_string().contains("Zq8vLm2Xw9Pt4Rk7"), "{r}");
        // A key's header in one field, its body in another.
        let body = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo9z+40RQzuVaE8AkAFmxZzow3x+VJYKdjykkJ0iT9wCS0DRTXu269V264Vf/3jvredZiKRkgwlL9xNAwxXFg0x/XFw005UWVRIkdgcKWTjpBP2dPwVZ4WWC+9aGVd+Gyn1o0CLelf4rEjGoXbAAEgAqeGUxrcIlbjXfbcmwIDAQAB";
        let a = serde_json::json!({"stdout": "-----BEGIN RSA PRIVATE KEY-----\n"});
        let b = serde_json::json!({"stderr": format!("{}\n{}\n-----END RSA PRIVATE KEY-----", &body[..64], &body[64..])});
        let [_, b] = P.values([&a, &b]);
        assert!(!b.to_string().contains(&body[..64]), "{b}");
        // A token cut between stdout and stderr.
        let a = serde_json::json!({"stdout": "export GH=ghp_abcd"});
        let b = serde_json::json!({"stderr": "EFGHijklmnopQRSTuvwxyz012345 done"});
        let [a, b] = P.values([&a, &b]);
        assert!(!a.to_string().contains("ghp_abcd"), "{a}");
        assert!(!b.to_string().contains("EFGHijklmnop"), "{b}");
        // Base64 of a whole key file.
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n");
        let encoded = encode_base64(pem.as_bytes());
        let got = P.text(&format!("data:\n  tls.key: {encoded}\n"));
        assert!(!got.contains(&encoded[..40]), "{got}");
    }

    fn encode_base64(b: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in b.chunks(3) {
            let n = (u32::from(c[0]) << 16)
                | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
                | u32::from(*c.get(2).unwrap_or(&0));
            for k in 0..4 {
                if k <= c.len() {
                    out.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn tags_as_json_values_and_keys_hide_what_they_wrap() {
        let v = serde_json::json!({
            "list": ["a", "<private>", "SECRET-1", {"x": "SECRET-2"}, "</private>", "b"],
            "<private>": "SECRET-3",
            "lone": ["<private>", "kept"],
        });
        let got = P.value(&v).to_string();
        assert!(!got.contains("SECRET"), "{got}");
        assert!(got.contains("\"a\"") && got.contains("\"b\"") && got.contains("kept"));
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
