//! Secret detection by rule set: gitleaks' default rules (`gitleaks.toml`) and cairn's
//! own (`cairn.toml`, the same format), both data, turned into [`RULES`] and [`EXTRA`] by
//! the build script. cairn's cover generic forms no single service owns (credentials in
//! URLs, `curl -u`, `--password`, `-pPASS`, `sshpass -p`, `?token=`, any identifier
//! containing a secret word, in several languages, assigned a secret-looking value) and
//! services gitleaks' set misses.
//!
//! A rule is tried only when one of its keywords occurs in the text (ignoring ASCII case, as
//! gitleaks does; one pass over the text with a table of the keywords' first two bytes,
//! made by the build script, so no hook builds it), and is compiled only when tried, in
//! two steps: a forward-only lazy DFA first says whether the pattern matches anywhere (cheap to build),
//! and only then is the full regex with its capture groups compiled, and the rule's
//! allowlists only when there is a finding to excuse. A hook whose input names no service
//! compiles nothing; one whose path contains `api` builds one small automaton.
//! A match counts when its secret (the rule's secret group, else the first non-empty
//! group, else the whole match) passes the rule's entropy threshold and no allowlist (the
//! file's global one, the rule's own) excuses it, as in gitleaks.
//!
//! Invariants: pure; never panics (a pattern this regex engine cannot compile is skipped,
//! and [`uncompilable`] lists them for the tests); returned spans are sorted, disjoint and
//! on character boundaries.

use std::sync::OnceLock;

use regex::bytes::{Regex, RegexBuilder};
use regex_automata::hybrid::dfa::DFA;
use regex_automata::{Input, nfa::thompson};

use crate::text;

/// Which text an allowlist regex is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Secret,
    Match,
    Line,
}

/// An allowlist: a finding is excused when its regexes or stopwords say so (both, when
/// `and`).
#[derive(Debug)]
pub struct Allow {
    pub target: Target,
    pub and: bool,
    pub regexes: &'static [&'static str],
    /// Lowercase, one a line; a secret containing one is excused.
    pub stopwords: &'static str,
}

/// One detection rule.
#[derive(Debug)]
pub struct Rule {
    pub id: &'static str,
    /// Go RE2 syntax, which the `regex` crate reads.
    pub regex: &'static str,
    /// Minimum Shannon entropy of the secret (0: none).
    pub entropy: f64,
    /// The capture group holding the secret (0: the first non-empty group).
    pub secret_group: usize,
    /// gitleaks' semi-generic form: a keyword, then within a few characters an assignment
    /// operator (`=`, `:`, `>`, `|`, `,`), then the secret. Such a rule is only tried where
    /// a keyword is followed by one within [`ASSIGNMENT_WINDOW`] bytes.
    pub assignment: bool,
    /// The secret stands where only a credential stands (a URL's password, `mysql -p…`):
    /// found whatever words it spells, never judged a name or a reference ([`name_like`],
    /// [`reference_like`]); only allowlists excuse it (whole placeholders: `password`,
    /// `${PASS}`, `<password>`, `xxx`).
    pub slot: bool,
    /// Lowercase; the rule is tried only when one occurs (none: always tried).
    pub keywords: &'static [&'static str],
    pub allowlists: &'static [Allow],
}

include!(concat!(env!("OUT_DIR"), "/gitleaks.rs"));

/// The gitleaks release the rule file comes from.
pub const GITLEAKS_VERSION: &str = "v8.30.0-27-gb58d3f10";

/// cairn's own rules (`cairn.toml`, data like gitleaks' file): generic credential forms,
/// command-line password forms, and services gitleaks' set misses.
pub static EXTRA: &[Rule; CAIRN_RULE_COUNT] = &CAIRN_RULES;

const TOTAL: usize = RULE_COUNT + EXTRA.len();

fn rule(i: usize) -> &'static Rule {
    if i < RULE_COUNT {
        &RULES[i]
    } else {
        &EXTRA[i - RULE_COUNT]
    }
}

/// Every rule, gitleaks' then cairn's.
pub fn all() -> impl Iterator<Item = &'static Rule> {
    (0..TOTAL).map(rule)
}

/// Bytes after a keyword in which a semi-generic rule's assignment operator must occur:
/// the rest of the identifier, up to 20 name characters and 3 spaces or quotes (gitleaks'
/// form), with room to spare.
pub const ASSIGNMENT_WINDOW: usize = 64;

/// The keyword prefilter, built by the build script from every rule's keywords.
struct Prefilter {
    /// One bit per (lowercased) byte pair that starts a keyword.
    pairs: &'static [u64; 1024],
    /// (pair, keyword), sorted by pair.
    by_pair: &'static [(u16, u16)],
    /// Each keyword (lowercase) and the rules it triggers.
    keywords: &'static [(&'static [u8], &'static [u16])],
    /// Rules with no keyword (or a one-byte one): always tried.
    always: &'static [u16],
}

fn pair(a: u8, b: u8) -> u16 {
    (u16::from(a.to_ascii_lowercase()) << 8) | u16::from(b.to_ascii_lowercase())
}

static PREFILTER: Prefilter = Prefilter {
    pairs: &PREFILTER_PAIRS,
    by_pair: &PREFILTER_BY_PAIR,
    keywords: &PREFILTER_KEYWORDS,
    always: &PREFILTER_ALWAYS,
};

fn prefilter() -> &'static Prefilter {
    &PREFILTER
}

impl Prefilter {
    /// Marks in `tried` the rules whose keywords occur in `b` (for a semi-generic rule:
    /// followed by an assignment operator).
    fn mark(&self, b: &[u8], tried: &mut [bool; TOTAL]) {
        for &i in self.always {
            tried[usize::from(i)] = true;
        }
        // Per keyword: 1 seen, 2 seen followed by an assignment operator.
        let mut seen = vec![0u8; self.keywords.len()];
        for at in 0..b.len().saturating_sub(1) {
            let key = pair(b[at], b[at + 1]);
            if self.pairs[usize::from(key >> 6)] & (1 << (key & 63)) == 0 {
                continue;
            }
            let from = self.by_pair.partition_point(|&(p, _)| p < key);
            for &(p, k) in &self.by_pair[from..] {
                if p != key {
                    break;
                }
                let (word, rules) = &self.keywords[usize::from(k)];
                let state = &mut seen[usize::from(k)];
                if *state == 2
                    || !b
                        .get(at..at + word.len())
                        .is_some_and(|s| s.eq_ignore_ascii_case(word))
                {
                    continue;
                }
                let after = &b[at + word.len()..b.len().min(at + word.len() + ASSIGNMENT_WINDOW)];
                let assigned = after
                    .iter()
                    .any(|c| matches!(c, b'=' | b':' | b'>' | b'|' | b','));
                let new = if assigned { 2 } else { 1 };
                if new > *state {
                    for &r in rules.iter() {
                        if assigned || !rule(usize::from(r)).assignment {
                            tried[usize::from(r)] = true;
                        }
                    }
                    *state = new;
                }
            }
        }
    }
}

fn build(pattern: &str) -> Option<Regex> {
    // ASCII classes, as in Go; a pattern that needs Unicode gets it.
    RegexBuilder::new(pattern)
        .unicode(false)
        .size_limit(32 << 20)
        .build()
        .or_else(|_| RegexBuilder::new(pattern).size_limit(32 << 20).build())
        .ok()
}

struct CompiledAllow {
    target: Target,
    and: bool,
    regexes: Vec<Regex>,
    stopwords: &'static str,
}

impl CompiledAllow {
    fn new(a: &Allow) -> Self {
        CompiledAllow {
            target: a.target,
            and: a.and,
            regexes: a.regexes.iter().filter_map(|r| build(r)).collect(),
            stopwords: a.stopwords,
        }
    }

    fn excuses(&self, secret: &[u8], whole: &[u8], line: &[u8]) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => whole,
            Target::Line => line,
        };
        let by_regex =
            (!self.regexes.is_empty()).then(|| self.regexes.iter().any(|r| r.is_match(target)));
        let by_word = (!self.stopwords.is_empty()).then(|| {
            let lower = secret.to_ascii_lowercase();
            self.stopwords
                .lines()
                .filter(|w| !w.is_empty())
                .any(|w| memchr_find(&lower, w.as_bytes()))
        });
        match (by_regex, by_word) {
            (Some(a), Some(b)) if self.and => a && b,
            (a, b) => a.unwrap_or(false) || b.unwrap_or(false),
        }
    }
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

struct Compiled {
    re: Regex,
    /// The rule's allowlists, compiled when the first finding needs them.
    allow: OnceLock<Vec<CompiledAllow>>,
}

/// A forward-only lazy DFA of a loosened form of a rule's pattern (see [`loosen`]):
/// whether it may match anywhere. Cheap to build: no reverse automaton, no capture groups,
/// and long counted repetitions become open ones.
fn gate(i: usize) -> Option<&'static DFA> {
    static G: [OnceLock<Option<DFA>>; TOTAL] = [const { OnceLock::new() }; TOTAL];
    G[i].get_or_init(|| {
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(rule(i).regex)
            .ok()?;
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .nfa_size_limit(Some(32 << 20))
                    .which_captures(thompson::WhichCaptures::None),
            )
            .build_from_hir(&loosen(&hir))
            .ok()?;
        DFA::builder().build_from_nfa(nfa).ok()
    })
    .as_ref()
}

/// A pattern matching everything `hir` matches (and more): a repetition counted past a
/// few copies (`{10,150}`, `{0,50}?`) becomes at least a few copies and then any number,
/// which keeps the automaton small. Only a gate: a match is confirmed by the real pattern.
fn loosen(hir: &regex_syntax::hir::Hir) -> regex_syntax::hir::Hir {
    use regex_syntax::hir::{Capture, Hir, HirKind, Repetition};
    const FEW: u32 = 4;
    match hir.kind() {
        HirKind::Repetition(r) => {
            let sub = Box::new(loosen(&r.sub));
            let long = r.max.is_none_or(|m| m > FEW);
            Hir::repetition(Repetition {
                min: if long { r.min.min(FEW) } else { r.min },
                max: if long { None } else { r.max },
                greedy: true,
                sub,
            })
        }
        HirKind::Capture(c) => Hir::capture(Capture {
            index: c.index,
            name: c.name.clone(),
            sub: Box::new(loosen(&c.sub)),
        }),
        HirKind::Concat(parts) => Hir::concat(parts.iter().map(loosen).collect()),
        HirKind::Alternation(alts) => Hir::alternation(alts.iter().map(loosen).collect()),
        _ => hir.clone(),
    }
}

/// False only when the rule's pattern surely matches nowhere in `b`.
fn may_match(i: usize, b: &[u8]) -> bool {
    let Some(dfa) = gate(i) else {
        return true;
    };
    let mut cache = dfa.create_cache();
    !matches!(
        dfa.try_search_fwd(&mut cache, &Input::new(b).earliest(true)),
        Ok(None)
    )
}

fn compiled(i: usize) -> Option<&'static Compiled> {
    static C: [OnceLock<Option<Compiled>>; TOTAL] = [const { OnceLock::new() }; TOTAL];
    C[i].get_or_init(|| {
        Some(Compiled {
            re: build(rule(i).regex)?,
            allow: OnceLock::new(),
        })
    })
    .as_ref()
}

impl Compiled {
    fn allow(&self, i: usize) -> &[CompiledAllow] {
        self.allow
            .get_or_init(|| rule(i).allowlists.iter().map(CompiledAllow::new).collect())
    }
}

fn global_allow() -> &'static CompiledAllow {
    static G: OnceLock<CompiledAllow> = OnceLock::new();
    G.get_or_init(|| CompiledAllow::new(&GLOBAL_ALLOW))
}

/// Rules whose pattern this regex engine cannot compile (expected: none).
pub fn uncompilable() -> Vec<&'static str> {
    (0..TOTAL)
        .filter(|&i| compiled(i).is_none())
        .map(|i| rule(i).id)
        .collect()
}

/// Rust's integer types, as a literal's suffix names them.
const INT_TYPES: [&str; 12] = [
    "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize",
];

/// True when the text after an unquoted would-be value shows it is a type: a declaration's
/// annotation followed by its initializer (`pub const X: AuthMode = 4i32;`, `let k:
/// KeyKind = …`), which no configuration value is followed by.
pub fn annotated(after: &[u8]) -> bool {
    after.starts_with(b" = ")
}

/// True when a would-be secret is code: a path (`a::b`, `:Name`), a dotted name
/// (`win32api.RegEnumKey`), a call or index, a snake_case or camelCase identifier.
pub fn code_like(s: &str) -> bool {
    let ident = |t: &str| {
        let t = t.as_bytes();
        !t.is_empty()
            && (t[0].is_ascii_alphabetic() || t[0] == b'_')
            && t.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
    };
    // Segments as names are: a token's dotted parts (`pk.eyJ1….Xy`) are long.
    let dotted = s.contains('.') && s.split('.').all(|t| ident(t) && t.len() < 24);
    let snake = ident(s)
        && s.contains('_')
        && s.split('_').all(|w| {
            w.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                || w.bytes()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        });
    // An index or a query into data (`Jobs[-1].JobId`, `Shards[*].ShardId`).
    let indexed = s.contains('[') && {
        let mut plain = String::with_capacity(s.len());
        let mut depth = 0usize;
        for c in s.chars() {
            match c {
                '[' => depth += 1,
                ']' => depth = depth.saturating_sub(1),
                _ if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        !plain.is_empty() && plain.split('.').all(|t| t.is_empty() || ident(t))
    };
    // A format string (`__attr_factory_%s`, `{0}:{1}`).
    // A format string or a template (`__attr_factory_%s`, `{self.name}-{id}`).
    let b = s.as_bytes();
    // A directive or two, not a value made of `%` escapes (`…%4K%7%%a4…`).
    let formatted = b.iter().filter(|&&c| c == b'%').count() <= 2
        && b.windows(2).enumerate().any(|(i, w)| {
            w[0] == b'%'
                && (w[1] == b'('
                    || matches!(w[1], b's' | b'd' | b'r')
                        && !b.get(i + 2).is_some_and(u8::is_ascii_alphanumeric))
        })
        || s.contains('{') && s.contains('}');
    // A name made of names joined by `:` (`aws:backup:backup-vault`, `aws:dsql:ClusterId`,
    // `lambda:createdBy`): words, and with two parts one of them a name in words.
    let word = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|c| c.is_ascii_alphabetic() || matches!(c, b'-' | b'_'))
    };
    let parts = s.split(':').count();
    let colon_path = parts >= 2
        && s.split(':').all(|p| word(p) || name_like(p))
        && (parts >= 3
            || s.split(':').any(|p| {
                // camelCase (`createdBy`) or words joined.
                name_like(p)
                    || p.starts_with(|c: char| c.is_ascii_lowercase())
                        && p.bytes().any(|c| c.is_ascii_uppercase())
            }));
    // A reference to a name (`@pipelineState`, `@user_id`), a template's field
    // (`{message}`, `${name}`).
    let at_name = s.strip_prefix('@').is_some_and(ident)
        || s.trim_start_matches('$')
            .strip_prefix('{')
            .is_some_and(|r| ident(r.trim_end_matches('}')));
    // A colour (`#08547A`).
    let colour = s.strip_prefix('#').is_some_and(|h| {
        matches!(h.len(), 3 | 4 | 6 | 8) && h.bytes().all(|c| c.is_ascii_hexdigit())
    });
    // A pattern (`QuickSetup*`, `logs/*`, `*.example.org`).
    let pattern = s.ends_with('*') || s.starts_with("*.") || s.contains("/*") || s.contains("*/");
    // A number written in hex (`0xf326d30c_e5f8_4fe7_ab74_f5a3196d92db`, a GUID's literal).
    // With its type too (`0xC029008E_u32`).
    let hex_literal = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .is_some_and(|h| {
            let end = h
                .find(|c: char| !(c.is_ascii_hexdigit() || c == '_'))
                .unwrap_or(h.len());
            end > 0 && (end == h.len() || INT_TYPES.contains(&&h[end..]))
        });
    // A number with its type (`3i32`, `0u8`, `1.5f32`, `100UL`): a constant in code. A
    // bare number is not judged here (a PIN is one).
    let typed_number = {
        let t = s.strip_prefix('-').unwrap_or(s);
        let end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.'))
            .unwrap_or(t.len());
        let suffix = t[end..].to_ascii_lowercase();
        t.starts_with(|c: char| c.is_ascii_digit())
            && (INT_TYPES.contains(&suffix.as_str())
                || ["f32", "f64", "u", "l", "ul", "lu", "ll", "ull", "f"]
                    .contains(&suffix.as_str()))
    };
    s.contains("::")
        || s.contains("->")
        || hex_literal
        || typed_number
        || colon_path
        || at_name
        || colour
        || pattern
        || indexed
        || formatted
        || s.starts_with(':')
        || s.contains(['(', ')'])
        || dotted
        || snake
}

/// True when a would-be secret reads as a name: at least two words, joined by `_`, `-`,
/// `.` or `/` or in camelCase (`currentAltReachedAcceptState`, `Ec2SubnetIds`,
/// `public-key-base-64`, `my-app/5026-stage-150723.war`), each word pronounceable (no run
/// of five consonants), few of them one or two letters long and few digits glued to
/// letters. Random keys split the same way give many short, unpronounceable pieces.
pub fn name_like(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty()
        || !b
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'/'))
    {
        return false;
    }
    // Words, pieces (too short, or no vowel), numbers glued to letters, acronyms in camelCase.
    let (mut words, mut pieces, mut glued, mut acronyms) = (0usize, 0usize, 0usize, 0usize);
    for part in s.split(['_', '-', '.', '/']).filter(|p| !p.is_empty()) {
        let p = part.as_bytes();
        let mut i = 0;
        while i < p.len() {
            let start = i;
            if p[i].is_ascii_digit() {
                while i < p.len() && p[i].is_ascii_digit() {
                    i += 1;
                }
                // Digits glued to letters (`S3`, `v4`), short in a name; a number of its
                // own (`150723`) is a date or a version.
                // A year or a version closing the name (`DeGroote2016`) is one too.
                let closing = i == p.len() && i - start <= 4 && s.ends_with(part);
                if start > 0 || i < p.len() {
                    if i - start > 2 && !closing {
                        return false;
                    }
                    glued += 1;
                }
                continue;
            }
            // A word: `Name`, `name`, or an acronym `AWS` (ending before `Access`).
            let upper = p[i].is_ascii_uppercase();
            i += 1;
            let mut acronym = false;
            if upper && p.get(i).is_some_and(u8::is_ascii_uppercase) {
                while i < p.len()
                    && p[i].is_ascii_uppercase()
                    && !p.get(i + 1).is_some_and(u8::is_ascii_lowercase)
                {
                    i += 1;
                }
                acronym = true;
                if start > 0 || i < p.len() {
                    if i - start > 5 {
                        return false;
                    }
                    acronyms += 1;
                }
            } else {
                while i < p.len() && p[i].is_ascii_lowercase() {
                    i += 1;
                }
            }
            let w = &p[start..i];
            words += 1;
            let mut run = 0;
            let mut vowel = false;
            for c in w.iter().map(u8::to_ascii_lowercase) {
                run = if b"aeiouy".contains(&c) {
                    vowel = true;
                    0
                } else {
                    run + 1
                };
                if run >= 5 {
                    return false;
                }
            }
            // A letter or two with its number is an acronym (`S3`, `v4`, `EC2`) when it is
            // capital or begins its part.
            let numbered = p.get(i).is_some_and(u8::is_ascii_digit) && (upper || start == 0);
            if w.len() <= 2 && !numbered || w.len() >= 3 && !vowel && !acronym {
                pieces += 1;
            }
        }
    }
    words >= 2 && pieces * 3 <= words && glued * 3 <= words && acronyms <= 1
}

/// True when a would-be secret is an example or a reference, not a value: a placeholder
/// (`…12345EXAMPLE`, `dummy…`), a resource name (`arn:aws:…`, `urn:…`), a key's
/// fingerprint or a digest written in hex pairs (`1f:51:ae:…`).
pub fn reference_like(s: &str) -> bool {
    let b = s.as_bytes();
    let has = |w: &str| {
        b.windows(w.len())
            .any(|x| x.eq_ignore_ascii_case(w.as_bytes()))
    };
    let starts = |w: &str| {
        b.get(..w.len())
            .is_some_and(|x| x.eq_ignore_ascii_case(w.as_bytes()))
    };
    // Not in a URL or an address, where `example.com` names the host, not the value.
    !b.iter().any(|c| matches!(c, b'@' | b':'))
        && ["example", "placeholder", "dummy"].iter().any(|w| has(w))
        || starts("arn:")
        || starts("urn:")
        || self_naming(s)
        || timestamp(s)
        || s.len() >= 23
            && s.split(':')
                .all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// True when a value names what it stands for (`MyPassword`, `mynewpassword`,
/// `SomeKindOfPassword123!@#`, `EXAMPLE1-…-SECRET1`, `objectkey1`): a placeholder written
/// for a document or a test, not an issued secret, whose random characters would not
/// spell a credential word.
fn self_naming(s: &str) -> bool {
    let b = s.as_bytes();
    let has = |w: &str| {
        b.windows(w.len())
            .any(|x| x.eq_ignore_ascii_case(w.as_bytes()))
    };
    const WORDS: [&str; 5] = ["password", "passwd", "pswd", "secret", "token"];
    let names = |p: &[u8]| {
        WORDS.iter().any(|w| {
            p.windows(w.len())
                .any(|x| x.eq_ignore_ascii_case(w.as_bytes()))
        })
    };
    // A word as a prefix before a random part (`secret_H9ZGTfAERfN5W0AX`) is an issued key,
    // and so is one with digits inside its letters, one or more (`Sk9canarySecret4Lw`,
    // `Secret123x`): a placeholder spells words and puts its numbers at the end
    // (`Password123`, `SECRET1`).
    let random_part = s
        .split(['_', '-'])
        .any(|p| p.len() >= 12 && !names(p.as_bytes()));
    let digit_inside = (1..b.len()).any(|i| {
        b[i - 1].is_ascii_alphabetic()
            && b[i].is_ascii_digit()
            && b[i..]
                .iter()
                .find(|c| !c.is_ascii_digit())
                .is_some_and(u8::is_ascii_alphabetic)
    });
    b.len() <= 40
        && !random_part
        && !digit_inside
        && (WORDS.iter().any(|w| has(w)) || b.len() <= 24 && has("key"))
}

/// A date or a time (`2016-09-08T21:47:36Z`, `2024-01-31`).
fn timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..10].iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
        && b[10..].iter().all(|c| {
            c.is_ascii_digit() || matches!(c, b'T' | b'Z' | b':' | b'.' | b'+' | b'-' | b' ')
        })
}

/// True when a would-be secret found by a rule is not a value: code ([`code_like`]), a
/// name ([`name_like`]), a placeholder or a reference ([`reference_like`]), judged without
/// the brackets that close the code around it (`self.credentials.token}`).
pub fn not_a_value(s: &str) -> bool {
    let t = s.trim_end_matches(['}', ']', ')', '>', ',', ';']);
    // Symbols, not characters a key is made of (`0️⃣`, `→`).
    let symbols = !t.is_ascii() && t.bytes().filter(u8::is_ascii_alphanumeric).count() < 4;
    symbols || code_like(t) || name_like(t) || reference_like(t) || plain_url(t)
}

/// A URL with no credentials in it (`http://petstore.swagger.io/oauth/dialog`): an address,
/// not a value. Services whose URL is the secret (webhooks) have rules of their own.
pub fn plain_url(s: &str) -> bool {
    ["http://", "https://"].iter().any(|p| s.starts_with(p)) && !s.contains(['@', '?'])
}

/// True when the text before a value ends with a quoted key that is a type's qualified
/// name (`"AWS::KMS::Key": "2b447c471bc70388"`): a table about types, whose values
/// describe the type (a schema's hash), not a credential.
pub fn keyed_by_type(before: &[u8]) -> bool {
    let Some(close) = before
        .iter()
        .rposition(|c| !c.is_ascii_whitespace() && !matches!(c, b':' | b'=' | b'\'' | b'"'))
    else {
        return false;
    };
    let key_end = close + 1;
    let key_start = before[..key_end]
        .iter()
        .rposition(|&c| !(c.is_ascii_alphanumeric() || matches!(c, b'_' | b':')))
        .map_or(0, |p| p + 1);
    let key = &before[key_start..key_end];
    key_start > 0
        && matches!(before[key_start - 1], b'"' | b'\'')
        && before.get(key_end) == Some(&before[key_start - 1])
        && key.windows(2).any(|w| w == b"::")
}

/// True when the text before a generic rule's value ends with a key naming an id
/// (`"KeyId": "`, `job_id=`), which identifies rather than grants, unless the key says
/// secret too (`secret_id`, `token_id`).
fn names_an_id(before: &[u8]) -> bool {
    let before = String::from_utf8_lossy(before).to_ascii_lowercase();
    let key = before
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-')
        .next()
        .unwrap_or_default();
    key.len() > 2
        && key.ends_with("id")
        && !["secret", "pass", "token", "auth"]
            .iter()
            .any(|w| key.contains(w))
}

/// Shannon entropy in bits per byte, as gitleaks computes it.
pub fn entropy(s: &[u8]) -> f64 {
    if s.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in s {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// A secret found in a text: its byte span and the rule that found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    pub start: usize,
    pub end: usize,
    pub rule: &'static str,
}

/// Where the line holding byte `at` starts.
fn line_start(b: &[u8], at: usize) -> usize {
    b[..at]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1)
}

/// Every secret in `s`, sorted and merged where they overlap.
pub fn find(s: &str) -> Vec<Finding> {
    let b = s.as_bytes();
    let mut tried = [false; TOTAL];
    prefilter().mark(b, &mut tried);
    let mut found = Vec::new();
    for (i, _) in tried.iter().enumerate().filter(|(_, t)| **t) {
        if !may_match(i, b) {
            continue;
        }
        let Some(c) = compiled(i) else { continue };
        let r = rule(i);
        for caps in c.re.captures_iter(b) {
            let Some(whole) = caps.get(0) else { continue };
            let secret = if r.secret_group > 0 {
                caps.get(r.secret_group)
            } else {
                caps.iter()
                    .skip(1)
                    .flatten()
                    .find(|m| !m.is_empty())
                    .or(Some(whole))
            };
            let Some(secret) = secret.filter(|m| !m.is_empty()) else {
                continue;
            };
            let sb = secret.as_bytes();
            if r.entropy > 0.0 && entropy(sb) <= r.entropy {
                continue;
            }
            // A generic rule (a keyword, an operator, a value) on code: not a secret. Names
            // and references are not secrets whatever found them, except in a credential's
            // slot, where a password may spell words (`S3cretPass`, `Secret123x`).
            let text = std::str::from_utf8(sb).unwrap_or_default();
            if (r.assignment || r.id == "token-assignment")
                && (not_a_value(text)
                    || annotated(&b[secret.end()..])
                    || names_an_id(&b[whole.start()..secret.start()])
                    || keyed_by_type(&b[line_start(b, whole.start())..secret.start()]))
                || !r.slot && (name_like(text) || reference_like(text))
            {
                continue;
            }
            let line_start = line_start(b, whole.start());
            let line_end = b[whole.end()..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| whole.end() + p);
            let line = &b[line_start..line_end];
            if global_allow().excuses(sb, whole.as_bytes(), line)
                || c.allow(i)
                    .iter()
                    .any(|a| a.excuses(sb, whole.as_bytes(), line))
            {
                continue;
            }
            found.push(Finding {
                start: text::floor_char_boundary(s, secret.start()),
                end: text::ceil_char_boundary(s, secret.end()),
                rule: r.id,
            });
        }
    }
    found.sort_by_key(|f| (f.start, std::cmp::Reverse(f.end)));
    let mut merged: Vec<Finding> = Vec::with_capacity(found.len());
    for f in found {
        match merged.last_mut() {
            Some(last) if f.start < last.end => last.end = last.end.max(f.end),
            _ => merged.push(f),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles() {
        const { assert!(RULE_COUNT >= 200, "gitleaks' rule set is read whole") };
        assert_eq!(uncompilable(), Vec::<&str>::new());
    }

    #[test]
    fn gates_build_and_only_loosen() {
        let no_gate: Vec<&str> = (0..TOTAL)
            .filter(|&i| gate(i).is_none())
            .map(|i| rule(i).id)
            .collect();
        assert_eq!(no_gate, Vec::<&str>::new());
        let i = (0..TOTAL)
            .find(|&i| rule(i).id == "generic-api-key")
            .expect("rule");
        let hit = b"config: api_key = 'Zx8Qw2Lm4Kp6Vb8Nt3Hy5Jd1'";
        assert!(compiled(i).expect("compiles").re.is_match(hit));
        assert!(may_match(i, hit));
        assert!(!may_match(i, b"echo hello > /home/dev/acme-api/out.txt"));
        assert!(RULES[i].assignment);
        // Not even tried: no assignment operator after the keyword.
        let mut tried = [false; TOTAL];
        prefilter().mark(b"echo hello > /home/dev/acme-api/out.txt", &mut tried);
        assert!(!tried[i]);
        prefilter().mark(hit, &mut tried);
        assert!(tried[i]);
    }

    #[test]
    fn finds_with_keywords_entropy_and_allowlists() {
        let ids = |s: &str| find(s).iter().map(|f| f.rule).collect::<Vec<_>>();
        assert_eq!(ids("nothing to see here"), Vec::<&str>::new());
        let s = "curl -u bob:hunter2pw https://x";
        let f = find(s);
        assert_eq!(f.len(), 1);
        assert!(s[f[0].start..f[0].end].contains("hunter2pw"));
        assert!(!s[f[0].start..f[0].end].contains("curl"));
        let s = "postgres://admin:s3cretpw@db.internal:5432/app";
        let f = find(s);
        assert_eq!(&s[f[0].start..f[0].end], "s3cretpw");
        // In a credential's slot a password that reads as a name is still one.
        assert!(name_like("S3cretPass"));
        let s = "postgres://admin:S3cretPass@db.internal:5432/app";
        let f = find(s);
        assert_eq!(&s[f[0].start..f[0].end], "S3cretPass");
        assert!(entropy(b"aaaa") < 0.01 && entropy(b"abcd") > 1.99);
    }

    #[test]
    fn names_and_references_are_told_from_random_values() {
        for name in [
            "currentAltReachedAcceptState",
            "ResourceWithS3UrlDict",
            "CrtSigV4AsymAuth",
            "Ec2SubnetIds",
            "AWSAccessKeyId",
            "public-key-base-64",
            "my-app/5026-stage-150723_224258.war",
            "Fts5TokenizerModule",
            "FiberForceLengthPassiveDeGroote2016",
        ] {
            assert!(name_like(name), "{name} is a name");
        }
        for key in [
            "CD5wRvwe6g7NgnMDOC",
            "SSVmFDNCFfOHKXQAEckx",
            "Mkff1bQx72mxhvNdCsudapMP7eery91G",
            "oxpf4a93fjovt0v1z6lltcbcizlrml98",
            "ZWd1e2141Q2R1ds23sdX",
            "hunter2",
            "bcd2f1b8-9a78-44d3-8a7a-4dd07d7cf635",
        ] {
            assert!(!name_like(key), "{key} is not a name");
        }
        for reference in [
            "RW5DdDJkMWYwZjM2MzM2VHVpOHJIUXlDUXlhc2QzRGViYnc9SEXAMPLE=",
            "arn:aws:kms:us-east-1:123456789012:key/4c1731d6-5435-ed4d-be13-d53411a7cfbd",
            "1f:51:ae:28:bf:89:e9:d8:1f:25:5d:37:2d:7d:b8:ca:9f:f5:f1:6f",
            "SomeKindOfPassword123!@#",
            "EXAMPLE1-90ab-cdef-fedc-ba987SECRET1",
            "objectkey1",
            "2016-09-08T21:47:36Z",
        ] {
            assert!(reference_like(reference), "{reference} is a reference");
        }
        assert!(!reference_like("alice:obn7RebJJI2w@git.example.com"));
        // A credential word among random letters and digits is no placeholder.
        assert!(!reference_like("Sk9canarySecret4Lw"));
        assert!(!reference_like("x7Token2QpLm"));
        assert!(!reference_like("Secret123x"));
        assert!(reference_like("Password123"));
        assert!(not_a_value("self.credentials.token}"));
        assert!(not_a_value("StreamDescription.Shards[-1].ShardId"));
        assert!(not_a_value("__attr_factory_%s"));
        assert!(!not_a_value(
            "a4%Cw73f5Bq%D642%7%%6r%60d%nk%%Z9p9zQ%slT%%s%18H"
        ));
        assert!(!not_a_value("-__Z=R-="));
        assert!(not_a_value("aws:dsql:ClusterId"));
        assert!(not_a_value("@pipelineState"));
        assert!(not_a_value("0xf326d30c_e5f8_4fe7_ab74_f5a3196d92db"));
        assert!(not_a_value("3i32"));
        assert!(not_a_value("0xC029008E_u32"));
        assert!(!not_a_value("0xC029008E_zz9"));
        assert!(annotated(b" = 4096i32;"));
        assert!(!annotated(b" == x"));
        assert!(!annotated(b"\n"));
        assert!(not_a_value("100UL"));
        assert!(!code_like("12345678"));
        assert!(not_a_value("lambda:createdBy"));
        assert!(not_a_value("{self.name}-{id_string}"));
        assert!(not_a_value("http://petstore.swagger.io/oauth/dialog"));
        assert!(!not_a_value("https://user:S3cr3tP4ss@host.example.org/"));
        assert!(not_a_value("#08547A"));
        assert!(not_a_value("0\u{fe0f}\u{20e3}"));
        assert!(not_a_value("{message}"));
        assert!(not_a_value("QuickSetup*"));
        assert!(!not_a_value("admin:S3cr3tP4ss"));
        assert!(keyed_by_type(br#"    "AWS::KMS::Key": ""#));
        assert!(!keyed_by_type(br#"    "api_key": ""#));
        assert!(!not_a_value("Zx8Qw2Lm4Kp6Vb8N"));
    }
}
