//! Secret detection by rule set: gitleaks' default rules (`gitleaks.toml`, turned into
//! [`RULES`] by the build script) plus cairn's own [`EXTRA`] rules for generic forms no
//! single service owns (credentials in URLs, `curl -u`, `--password`, `-pPASS`,
//! `?token=`, `token: …`).
//!
//! A rule is tried only when one of its keywords occurs in the text (one Aho-Corasick pass
//! over all keywords, ignoring ASCII case, as gitleaks does), and its pattern is compiled
//! the first time it is tried, so a hook whose input names no service compiles nothing.
//! A match counts when its secret (the rule's secret group, else the first non-empty
//! group, else the whole match) passes the rule's entropy threshold and no allowlist (the
//! file's global one, the rule's own) excuses it, as in gitleaks.
//!
//! Invariants: pure; never panics (a pattern this regex engine cannot compile is skipped,
//! and [`uncompilable`] lists them for the tests); returned spans are sorted, disjoint and
//! on character boundaries.

use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use regex::bytes::{Regex, RegexBuilder};

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
    /// Lowercase; a secret containing one is excused.
    pub stopwords: &'static [&'static str],
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
    /// Lowercase; the rule is tried only when one occurs (none: always tried).
    pub keywords: &'static [&'static str],
    pub allowlists: &'static [Allow],
}

include!(concat!(env!("OUT_DIR"), "/gitleaks.rs"));

/// The gitleaks release the rule file comes from.
pub const GITLEAKS_VERSION: &str = "v8.30.0-27-gb58d3f10";

const NO_ALLOW: &[Allow] = &[];

/// cairn's own rules: generic credential forms.
pub static EXTRA: [Rule; 10] = [
    Rule {
        id: "url-credentials",
        // scheme://user:password@host, scheme://:password@host
        regex: r"(?i)\b[a-z][a-z0-9+.-]{1,30}://[^\s:/@'`]{0,128}:([^\s@/'`]{1,256})@[^\s@/'`]",
        entropy: 0.0,
        secret_group: 1,
        keywords: &["://"],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "cli-user-password",
        // curl -u user:pw, --user user:pw, --user=user:pw
        regex: r#"(?:^|\s)(?:-u|--user|--proxy-user)(?:\s+|=)?['"]?[^\s:'"]{0,128}:([^\s'"]{1,256})"#,
        entropy: 0.0,
        secret_group: 1,
        keywords: &["-u", "--user", "--proxy-user"],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "cli-password-flag",
        // mysql --password pw, --password=pw, --token xyz, --api-key=…
        regex: r#"(?i)(?:^|\s)--(?:password|passwd|pass|token|secret|api-?key|access-token|auth-token|client-secret)(?:\s+|=)['"]?([^\s'"-][^\s'"]{0,255})"#,
        entropy: 0.0,
        secret_group: 1,
        keywords: &[
            "--pass", "--token", "--secret", "--api", "--access", "--auth", "--client",
        ],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "mysql-password",
        // mysql -uroot -pPASS (a bare -p asks for the password: nothing to hide)
        regex: r#"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlimport|mysqlsh)\b[^\n|;&]{0,256}?\s-p['"]?([^\s'"]{1,256})"#,
        entropy: 0.0,
        secret_group: 1,
        keywords: &["mysql", "mariadb"],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "registry-login-password",
        // docker login -u ci -p PASS, podman login --password PASS
        regex: r#"\b(?:docker|podman|buildah|skopeo|nerdctl|helm|oras)\b[^\n|;&]{0,128}?\blogin\b[^\n|;&]{0,256}?\s(?:-p|--password)(?:\s+|=)['"]?([^\s'"]{1,256})"#,
        entropy: 0.0,
        secret_group: 1,
        keywords: &["login"],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "connection-string-key",
        // Azure and .NET connection strings: AccountKey=…; SharedAccessKey=…;
        regex: r#"(?i)\b(?:AccountKey|SharedAccessKey|SharedAccessSignature|SharedSecret)\s*=\s*([^;\s'"]{8,})"#,
        entropy: 0.0,
        secret_group: 1,
        keywords: &["accountkey", "sharedaccess", "sharedsecret"],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "url-query-secret",
        // ?token=…, &api_key=…, ?sig=…
        regex: r#"(?i)[?&;](?:token|access_token|auth_token|id_token|refresh_token|api_?key|key|secret|client_secret|password|passwd|pwd|sig|signature|auth|x-amz-signature|x-amz-credential|x-goog-signature)=([^&\s#'"<>]{4,})"#,
        entropy: 0.0,
        secret_group: 1,
        keywords: &[
            "token=",
            "key=",
            "secret=",
            "password=",
            "passwd=",
            "pwd=",
            "sig=",
            "signature=",
            "auth=",
            "credential=",
        ],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "token-assignment",
        // token: …, TOKEN=…, "token": "…", github_token = …
        regex: r#"(?i)(?:^|[^a-z0-9])(?:[a-z0-9]+[_.-])?(?:token|pat|secret|credential|cred|creds|pass|pwd|api_?key|private_?key|auth)["']?\s*(?::|=|:=|=>)\s*["']?([^\s"'`,;)]{8,})"#,
        entropy: 2.5,
        secret_group: 1,
        keywords: &[
            "token", "pat", "secret", "cred", "pass", "pwd", "key", "auth",
        ],
        allowlists: &[Allow {
            target: Target::Secret,
            and: false,
            // Not secrets: plain words, paths, numbers, placeholders, variables.
            regexes: &[
                r"^[a-zA-Z_.-]+$",
                r"^[0-9._-]+$",
                r"^(?:[a-zA-Z]:)?[/\\~.][^\s]*$",
                r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$",
                r"^<[^>]*>$",
                r"^\[REDACTED",
                r"^(?:true|false|null|none|undefined)$",
            ],
            stopwords: &[],
        }],
    },
    Rule {
        id: "gcp-api-key",
        regex: r"\b(AIza[0-9A-Za-z_-]{35})(?:[^0-9A-Za-z_-]|$)",
        entropy: 0.0,
        secret_group: 1,
        keywords: &["aiza"],
        allowlists: NO_ALLOW,
    },
    Rule {
        id: "npm-access-token",
        regex: r"\b(npm_[A-Za-z0-9]{36})(?:[^A-Za-z0-9]|$)",
        entropy: 0.0,
        secret_group: 1,
        keywords: &["npm_"],
        allowlists: NO_ALLOW,
    },
];

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

struct Prefilter {
    ac: AhoCorasick,
    /// Rules per keyword pattern.
    rules_of: Vec<Vec<u16>>,
    /// Rules with no keyword: always tried.
    always: Vec<u16>,
}

fn prefilter() -> Option<&'static Prefilter> {
    static P: OnceLock<Option<Prefilter>> = OnceLock::new();
    P.get_or_init(|| {
        let mut words: Vec<&'static str> = Vec::new();
        let mut rules_of: Vec<Vec<u16>> = Vec::new();
        let mut always = Vec::new();
        for i in 0..TOTAL {
            let r = rule(i);
            if r.keywords.is_empty() {
                always.push(i as u16);
            }
            for k in r.keywords {
                match words.iter().position(|w| w == k) {
                    Some(p) => rules_of[p].push(i as u16),
                    None => {
                        words.push(k);
                        rules_of.push(vec![i as u16]);
                    }
                }
            }
        }
        let ac = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(&words)
            .ok()?;
        Some(Prefilter {
            ac,
            rules_of,
            always,
        })
    })
    .as_ref()
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
    stopwords: &'static [&'static str],
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
                .iter()
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
    allow: Vec<CompiledAllow>,
}

fn compiled(i: usize) -> Option<&'static Compiled> {
    static C: [OnceLock<Option<Compiled>>; TOTAL] = [const { OnceLock::new() }; TOTAL];
    C[i].get_or_init(|| {
        let r = rule(i);
        Some(Compiled {
            re: build(r.regex)?,
            allow: r.allowlists.iter().map(CompiledAllow::new).collect(),
        })
    })
    .as_ref()
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

/// Every secret in `s`, sorted and merged where they overlap.
pub fn find(s: &str) -> Vec<Finding> {
    let Some(pre) = prefilter() else {
        return Vec::new();
    };
    let b = s.as_bytes();
    let mut tried = [false; TOTAL];
    for &i in &pre.always {
        tried[i as usize] = true;
    }
    let mut seen = vec![false; pre.rules_of.len()];
    for m in pre.ac.find_overlapping_iter(b) {
        let k = m.pattern().as_usize();
        if !seen[k] {
            seen[k] = true;
            for &i in &pre.rules_of[k] {
                tried[i as usize] = true;
            }
        }
    }
    let mut found = Vec::new();
    for (i, _) in tried.iter().enumerate().filter(|(_, t)| **t) {
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
            let line_start = b[..whole.start()]
                .iter()
                .rposition(|&c| c == b'\n')
                .map_or(0, |p| p + 1);
            let line_end = b[whole.end()..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| whole.end() + p);
            let line = &b[line_start..line_end];
            if global_allow().excuses(sb, whole.as_bytes(), line)
                || c.allow
                    .iter()
                    .any(|a| a.excuses(sb, whole.as_bytes(), line))
            {
                continue;
            }
            found.push(Finding {
                start: floor(s, secret.start()),
                end: ceil(s, secret.end()),
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

fn floor(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
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
        assert!(entropy(b"aaaa") < 0.01 && entropy(b"abcd") > 1.99);
    }
}
