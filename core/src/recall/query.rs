//! The search query language, and its translation into FTS5 `MATCH` expressions.
//!
//! What a person types:
//!
//! | input | meaning |
//! | --- | --- |
//! | `why was the login test failing` | ranked by relevance: memories matching more of the words (stop words such as `why`, `was`, `the` left out) come first; any one word is enough to be a candidate |
//! | `"lease rescue"` | the exact phrase |
//! | `-flaky` or `NOT flaky` | rows matching `flaky` are left out |
//! | `-S`, `-pp`, `-Werror=format`, `-p/--plain` | a command-line option: one or two letters after a dash, or a word with punctuation inside it, are searched as a word, not an exclusion |
//! | `sqlite OR postgres` | either word counts as the same match (binds the two terms next to it) |
//! | `migrat*` | any word starting with `migrat` |
//! | `AND` | ignored |
//!
//! A word typed the way code is written is also looked for in its parts:
//! `--line-buffered` is `line` and `buffered`, `snake_case` is `snake` and `case`,
//! `LineBuffered` is `linebuffered`, `line` and `buffered`.
//!
//! Two expressions come out of a query: [`Query::fts_any`], the rows that match at least one
//! group (what relevance ranks), and [`Query::fts_match`], the rows that match every group
//! (what `newest` / `oldest` list, where nothing ranks a partial match down).
//!
//! Invariants:
//! - parsing never fails and never panics, whatever the input (quotes, parentheses,
//!   `NEAR`, `column:` filters, `^`, unicode, control bytes, NUL, megabytes);
//! - user text reaches `MATCH` only inside double-quoted FTS5 strings (with `"` doubled),
//!   so the only operators in the expression are the ones written here: `AND`, `OR`,
//!   `NOT`, parentheses and the prefix `*`;
//! - a term without a letter or digit is dropped (the tokenizer would make it an empty
//!   phrase, which matches nothing);
//! - stop words are dropped only when something else is left to search for;
//! - at most [`MAX_TERMS`] word groups, from at most twice as many terms as typed, of at
//!   most [`MAX_TERM_CHARS`] characters are kept, so a 10 KB query stays a small
//!   expression; of a longer text, the words at its start and at its end (where a pasted
//!   traceback or log says what went wrong), stop words left out first.
//!
//! Pure: no database, no clock.

use crate::text::{camel_pieces, runs};

/// Most terms kept from one query: of more, the first and the last half (see [`parse`]).
pub const MAX_TERMS: usize = 32;
/// Longest term kept, in characters; longer ones are shortened.
pub const MAX_TERM_CHARS: usize = 200;

/// One quoted unit of the query: a word or a phrase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The text, as typed (without the surrounding quotes).
    pub text: String,
    /// Typed with a trailing `*`: matches words starting with the last token.
    pub prefix: bool,
    /// Typed between double quotes: a phrase, never split or dropped as a stop word.
    pub quoted: bool,
}

/// A parsed query: every group must match (a group matches when any of its terms does),
/// and no excluded term may match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Terms joined by AND; each group is terms joined by OR.
    pub groups: Vec<Vec<Term>>,
    /// Terms joined by NOT.
    pub excluded: Vec<Term>,
    /// The words of the positive terms in the order typed, stop words included: what
    /// [`Query::adjacent_pairs`] is made of.
    pub sequence: Vec<String>,
}

impl Query {
    /// True when nothing was typed that can match (no positive and no excluded term).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.excluded.is_empty()
    }

    /// The FTS5 expression of rows matching every group, or `None` when the query has no
    /// positive term (then every row is a candidate, minus [`Query::exclusion`]).
    pub fn fts_match(&self) -> Option<String> {
        self.joined(" AND ")
    }

    /// The FTS5 expression of rows matching at least one group (minus the excluded terms),
    /// or `None` when the query has no positive term.
    pub fn fts_any(&self) -> Option<String> {
        self.joined(" OR ")
    }

    /// Each group's own expression, in order: what tells how many of the query's words a
    /// row matches.
    pub fn group_expressions(&self) -> Vec<String> {
        self.groups.iter().map(|g| group_expression(g)).collect()
    }

    /// Each two words typed next to each other, as an FTS5 phrase, unless both are stop
    /// words (`"some typos"` yes, `"of the"` no), without repeats: a memory holding more
    /// of them holds more of the question's phrasing.
    pub fn adjacent_pairs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for w in self.sequence.windows(2) {
            if is_stop_word(&w[0]) && is_stop_word(&w[1]) {
                continue;
            }
            let pair = quoted(&format!("{} {}", w[0], w[1]).to_lowercase());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
        out
    }

    /// For each group, whether it is one plain word (letters and digits only: not a
    /// phrase, not a prefix, not a choice of terms).
    pub fn plain_words(&self) -> Vec<bool> {
        self.groups
            .iter()
            .map(|g| match g.as_slice() {
                [t] => !t.prefix && t.text.chars().all(char::is_alphanumeric),
                _ => false,
            })
            .collect()
    }

    /// [`Query::fts_any`] of the groups whose place in `keep` is true (minus the excluded
    /// terms), or `None` when none is kept.
    pub fn fts_any_of(&self, keep: &[bool]) -> Option<String> {
        let kept = Query {
            groups: self
                .groups
                .iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(g, _)| g.clone())
                .collect(),
            ..self.clone()
        };
        kept.fts_any()
    }

    fn joined(&self, op: &str) -> Option<String> {
        if self.groups.is_empty() {
            return None;
        }
        let groups: Vec<String> = self.groups.iter().map(|g| group_expression(g)).collect();
        let mut expr = groups.join(op);
        if !self.excluded.is_empty() {
            expr = format!("({expr})");
            for t in &self.excluded {
                expr.push_str(" NOT ");
                expr.push_str(&quote_term(t));
            }
        }
        Some(expr)
    }

    /// For a query with only excluded terms: the FTS5 expression of the rows to leave out.
    /// `None` when the query has positive terms (the exclusion is then inside
    /// [`Query::fts_match`]) or no excluded term.
    pub fn exclusion(&self) -> Option<String> {
        if !self.groups.is_empty() || self.excluded.is_empty() {
            return None;
        }
        let terms: Vec<String> = self.excluded.iter().map(quote_term).collect();
        Some(terms.join(" OR "))
    }
}

/// One group: its term, or its terms joined by OR in parentheses.
fn group_expression(g: &[Term]) -> String {
    let terms: Vec<String> = g.iter().map(quote_term).collect();
    if terms.len() == 1 {
        terms.concat()
    } else {
        format!("({})", terms.join(" OR "))
    }
}

/// `"text"` with inner quotes doubled, plus `*` for a prefix term, which is kept off the
/// project's key column (`x` and the project's name in hex in every row, which `x*`
/// would match).
fn quote_term(t: &Term) -> String {
    let s = quoted(&t.text);
    if t.prefix {
        format!("- {} : {s}*", super::sql::PROJECT_KEY)
    } else {
        s
    }
}

/// `text` as one FTS5 string (a phrase of its words): in double quotes, inner quotes
/// doubled, a NUL (which would end the string early for SQLite) read as a space. The only
/// way text from outside reaches a `MATCH` expression.
pub(crate) fn quoted(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\"\""),
            '\0' => s.push(' '),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// A lexical piece of the input.
#[derive(Debug)]
enum Token {
    Term { term: Term, negated: bool },
    Or,
    And,
    Not,
}

/// Parses what a person typed. Never fails: whatever the input, the result is either
/// empty or a `MATCH` expression made only of quoted terms.
///
/// ```
/// let q = cairn_core::recall::query::parse(r#"lease "fenced ack" -flaky OR retr*"#);
/// let expr = q.fts_match().expect("terms");
/// assert!(expr.contains(r#""fenced ack""#));
/// // A column filter typed by a user is only text: its words, each a quoted term.
/// let hostile = cairn_core::recall::query::parse("title:secret");
/// assert_eq!(hostile.fts_any().as_deref(), Some(r#""title" OR "secret""#));
/// ```
pub fn parse(input: &str) -> Query {
    let tokens = lex(input);
    // A long text is read from both ends: the first and the last MAX_TERMS terms (a pasted
    // traceback or log says what went wrong at its end).
    let terms = tokens
        .iter()
        .filter(|t| matches!(t, Token::Term { .. }))
        .count();
    let middle = MAX_TERMS..terms.saturating_sub(MAX_TERMS);
    let mut q = Query::default();
    let mut pending_or = false;
    let mut pending_not = false;
    let mut seen = 0usize;
    for tok in tokens {
        match tok {
            Token::Or => pending_or = !q.groups.is_empty(),
            Token::And => pending_or = false,
            Token::Not => pending_not = true,
            Token::Term { term, negated } => {
                let place = seen;
                seen += 1;
                if middle.contains(&place) {
                    // Left out, with the operators bound to it.
                    pending_or = false;
                    pending_not = false;
                    continue;
                }
                if negated || pending_not {
                    q.excluded.push(term);
                    pending_not = false;
                    pending_or = false;
                    continue;
                }
                if q.sequence.len() < MAX_TERMS {
                    q.sequence.extend(runs(&term.text).map(str::to_string));
                    q.sequence.truncate(MAX_TERMS);
                }
                match (pending_or, q.groups.last_mut()) {
                    (true, Some(group)) => group.push(term),
                    _ => q.groups.push(vec![term]),
                }
                pending_or = false;
            }
        }
    }
    q.groups = split_words(std::mem::take(&mut q.groups));
    q
}

/// Replaces each group of one unquoted word by the groups of its parts (see the module
/// comment), drops stop words when other words remain, and keeps at most [`MAX_TERMS`]
/// groups without repeats: the first and the last half of them when there are more.
fn split_words(groups: Vec<Vec<Term>>) -> Vec<Vec<Term>> {
    let mut out: Vec<Vec<Term>> = Vec::new();
    // `Fix` and `fix` are one word to the full-text index: counted once, not twice.
    let same = |a: &[Term], b: &[Term]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.prefix == y.prefix
                    && x.quoted == y.quoted
                    && x.text.to_lowercase() == y.text.to_lowercase()
            })
    };
    let push = |out: &mut Vec<Vec<Term>>, g: Vec<Term>| {
        if !out.iter().any(|e| same(e, &g)) {
            out.push(g);
        }
    };
    for g in groups {
        match g.as_slice() {
            [t] if !t.quoted => {
                for part in word_parts(&t.text, t.prefix) {
                    push(&mut out, vec![part]);
                }
            }
            _ => push(&mut out, g),
        }
    }
    let meaningful: Vec<Vec<Term>> = out
        .iter()
        .filter(|g| !matches!(g.as_slice(), [t] if !t.quoted && !t.prefix && is_stop_word(&t.text)))
        .cloned()
        .collect();
    let mut kept = if meaningful.is_empty() {
        out
    } else {
        meaningful
    };
    if kept.len() > MAX_TERMS {
        kept.drain(MAX_TERMS / 2..kept.len() - MAX_TERMS / 2);
    }
    kept
}

/// The searchable parts of a word as typed: the word itself when it is one run of letters
/// and digits, else each run; plus the pieces of a `CamelCase` run. A trailing `*` stays on
/// the last run.
fn word_parts(text: &str, prefix: bool) -> Vec<Term> {
    let runs: Vec<&str> = runs(text).collect();
    let mut parts = Vec::new();
    let last = runs.len().saturating_sub(1);
    for (i, run) in runs.iter().enumerate() {
        let is_prefix = prefix && i == last;
        parts.push(Term {
            text: run.to_string(),
            prefix: is_prefix,
            quoted: false,
        });
        if !is_prefix {
            for piece in camel_pieces(run) {
                parts.push(Term {
                    text: piece,
                    prefix: false,
                    quoted: false,
                });
            }
        }
    }
    if parts.is_empty() {
        // Only reachable for text with no letter or digit, which make_term already drops.
        parts.push(Term {
            text: text.to_string(),
            prefix,
            quoted: false,
        });
    }
    parts
}

/// English words too common to tell memories apart (a question's `why was the … `).
pub(crate) fn is_stop_word(word: &str) -> bool {
    const STOP: &[&str] = &[
        "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be",
        "because", "been", "before", "being", "both", "but", "by", "can", "could", "did", "do",
        "does", "doing", "during", "each", "few", "for", "from", "further", "had", "has", "have",
        "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is",
        "it", "its", "itself", "just", "me", "more", "most", "my", "no", "nor", "not", "now", "of",
        "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same",
        "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them",
        "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
        "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while",
        "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
    ];
    let lower = word.to_lowercase();
    STOP.contains(&lower.as_str())
}

/// Splits the input into terms and operators. Control characters are spaces; a `"` opens
/// a phrase that runs to the next `"` (or the end).
fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    // A dash right after a phrase (`"else if"-like`) is not an exclusion: only one that
    // starts a word.
    let mut word_starts = true;
    while let Some(&c) = chars.peek() {
        if is_space(c) {
            chars.next();
            word_starts = true;
            continue;
        }
        let starts = std::mem::replace(&mut word_starts, false);
        let mut negated = false;
        if c == '-' {
            chars.next();
            if !starts {
                continue;
            }
            match chars.peek() {
                // `--flag` is a word written as code, not an exclusion.
                Some(&'-') => {
                    while chars.peek() == Some(&'-') {
                        chars.next();
                    }
                }
                Some(&n) if !is_space(n) => negated = true,
                _ => continue,
            }
        }
        let (text, quoted) = if chars.peek() == Some(&'"') {
            chars.next();
            let mut text = String::new();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                text.push(if c.is_control() { ' ' } else { c });
            }
            (text, true)
        } else {
            let mut text = String::new();
            while let Some(&c) = chars.peek() {
                if is_space(c) || c == '"' {
                    break;
                }
                text.push(c);
                chars.next();
            }
            (text, false)
        };
        let mut prefix = false;
        let mut text = text;
        if quoted {
            if chars.peek() == Some(&'*') {
                chars.next();
                prefix = true;
            }
        } else {
            if !negated {
                match text.as_str() {
                    "OR" | "|" => {
                        tokens.push(Token::Or);
                        continue;
                    }
                    "AND" | "&" => {
                        tokens.push(Token::And);
                        continue;
                    }
                    "NOT" => {
                        tokens.push(Token::Not);
                        continue;
                    }
                    _ => {}
                }
            }
            if text.ends_with('*') {
                text = text.trim_end_matches('*').to_string();
                prefix = true;
            }
        }
        // `-S`, `-pp`, `-Woverlength-strings`: a command-line option, searched as a word.
        // Leaving out every memory with a one- or two-letter word, or with the words of
        // a compiler flag, is never what a question means.
        if negated && !quoted && !prefix && (is_short_option(&text) || is_code_word(&text)) {
            negated = false;
        }
        if let Some(term) = make_term(&text, prefix, quoted) {
            tokens.push(Token::Term { term, negated });
        }
    }
    tokens
}

/// A term from raw text: trimmed, shortened, dropped when it holds no letter or digit.
fn make_term(text: &str, prefix: bool, quoted: bool) -> Option<Term> {
    let text: String = text
        .trim()
        .chars()
        .take(MAX_TERM_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    // A prefix applies to the last token; it must end in a letter or digit to mean one.
    let prefix = prefix && text.chars().last().is_some_and(char::is_alphanumeric);
    text.chars().any(char::is_alphanumeric).then_some(Term {
        text,
        prefix,
        quoted,
    })
}

/// One or two letters or digits, the first right after the dash (`S`, `pp`, `A,`).
fn is_short_option(text: &str) -> bool {
    let n = text.chars().filter(|c| c.is_alphanumeric()).count();
    (1..=2).contains(&n) && text.chars().next().is_some_and(char::is_alphanumeric)
}

/// Punctuation inside the word, not only after it (`Werror=format`, `p/--plain`,
/// `foo-bar`): written as code. `_` is a letter here (`snake_case` is one word).
fn is_code_word(text: &str) -> bool {
    text.trim_end_matches(|c: char| c.is_ascii_punctuation())
        .chars()
        .any(|c| !c.is_alphanumeric() && c != '_')
}

/// `text` as a query that means its words and nothing else: what a prompt, written as
/// prose, is searched by. A dash before a word, `*` after one, double quotes and the
/// operators `OR`, `AND`, `NOT`, `|` and `&` lose their meaning (`NOT` and `OR` are stop
/// words then; `|` and `&`, holding no letter, go).
pub fn literal(text: &str) -> String {
    text.split(is_space)
        .filter(|w| !w.is_empty())
        .map(|w| {
            let w = w.trim_start_matches('-').trim_end_matches('*');
            match w {
                "OR" | "AND" | "NOT" => w.to_lowercase(),
                "|" | "&" => String::new(),
                _ => w.replace('"', " "),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_space(c: char) -> bool {
    c.is_whitespace() || c.is_control()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(input: &str, want_match: Option<&str>, want_exclusion: Option<&str>) {
        let q = parse(input);
        assert_eq!(q.fts_match().as_deref(), want_match, "match of {input:?}");
        assert_eq!(
            q.exclusion().as_deref(),
            want_exclusion,
            "exclusion of {input:?}"
        );
    }

    #[test]
    fn words_phrases_exclusions_or_prefix() {
        check("lease", Some(r#""lease""#), None);
        check("lease rescue", Some(r#""lease" AND "rescue""#), None);
        check(r#""lease rescue""#, Some(r#""lease rescue""#), None);
        check(
            r#"worker "lease rescue" -flaky"#,
            Some(r#"("worker" AND "lease rescue") NOT "flaky""#),
            None,
        );
        check(
            "sqlite OR postgres",
            Some(r#"("sqlite" OR "postgres")"#),
            None,
        );
        check(
            "db sqlite OR postgres OR mysql wal",
            Some(r#""db" AND ("sqlite" OR "postgres" OR "mysql") AND "wal""#),
            None,
        );
        check("migrat*", Some(r#"- project_key : "migrat"*"#), None);
        check(
            r#""lease res"*"#,
            Some(r#"- project_key : "lease res"*"#),
            None,
        );
        check("lease AND rescue", Some(r#""lease" AND "rescue""#), None);
        check("lease NOT rescue", Some(r#"("lease") NOT "rescue""#), None);
        check("-flaky", None, Some(r#""flaky""#));
        check("-flaky -slow", None, Some(r#""flaky" OR "slow""#));
        check("-\"two words\"", None, Some(r#""two words""#));
        check("NOT pp", None, Some(r#""pp""#));
    }

    #[test]
    fn adjacent_words_make_phrases_unless_both_are_stop_words() {
        let q = parse("Fixed some typos in the --plain output -flaky");
        assert_eq!(
            q.adjacent_pairs(),
            vec![
                r#""fixed some""#,
                r#""some typos""#,
                r#""typos in""#,
                r#""the plain""#,
                r#""plain output""#
            ]
        );
        assert!(parse("typos").adjacent_pairs().is_empty());
        assert!(
            parse(r#"say "a""b" c"#)
                .adjacent_pairs()
                .iter()
                .all(|p| p.matches('"').count() == 2)
        );
    }

    #[test]
    fn a_short_option_is_a_word_not_an_exclusion() {
        check(
            "Added -u and -n options",
            Some(r#""Added" AND "u" AND "n" AND "options""#),
            None,
        );
        check("bat -p, -pp", Some(r#""bat" AND "p" AND "pp""#), None);
        check("-S", Some(r#""S""#), None);
        check("lease -ab", Some(r#""lease" AND "ab""#), None);
        check("lease -abc", Some(r#"("lease") NOT "abc""#), None);
        check("lease -abc.", Some(r#"("lease") NOT "abc.""#), None);
        check(
            r#"custom "else if"-like blocks"#,
            Some(r#""custom" AND "else if" AND "like" AND "blocks""#),
            None,
        );
        check(
            "Fix build with -Woverlength-strings",
            Some(r#""Fix" AND "build" AND "Woverlength" AND "strings""#),
            None,
        );
        check(
            "-p/--plain -Werror=format",
            Some(r#""p" AND "plain" AND "Werror" AND "format""#),
            None,
        );
        check(
            "lease -x*",
            Some(r#"("lease") NOT - project_key : "x"*"#),
            None,
        );
    }

    #[test]
    fn a_literal_query_means_its_words_only() {
        let typed = r#"remove the -dirty suffix NOT "release* OR -x test | lint & build"#;
        let q = parse(&literal(typed));
        assert!(q.excluded.is_empty(), "{q:?}");
        assert!(q.groups.iter().flatten().all(|t| !t.quoted && !t.prefix));
        assert_eq!(
            q.fts_match().as_deref(),
            Some(
                r#""remove" AND "dirty" AND "suffix" AND "release" AND "x" AND "test" AND "lint" AND "build""#
            )
        );
        // Without operators, a query reads the same.
        assert_eq!(
            literal("why did the lease test fail"),
            "why did the lease test fail"
        );
    }

    #[test]
    fn any_word_is_enough_for_relevance() {
        let q = parse(r#"lease "fenced ack" -flaky"#);
        assert_eq!(
            q.fts_any().as_deref(),
            Some(r#"("lease" OR "fenced ack") NOT "flaky""#)
        );
        assert_eq!(q.group_expressions(), vec![r#""lease""#, r#""fenced ack""#]);
        assert_eq!(parse("lease").fts_any().as_deref(), Some(r#""lease""#));
        assert_eq!(
            parse("lease worker -flaky")
                .fts_any_of(&[false, true])
                .as_deref(),
            Some(r#"("worker") NOT "flaky""#)
        );
        assert_eq!(parse("lease worker").fts_any_of(&[false, false]), None);
        assert_eq!(
            parse(r#"lease "fenced ack" work* snake_case"#).plain_words(),
            vec![true, false, false, true, true]
        );
        assert_eq!(parse("-flaky").fts_any(), None);
    }

    #[test]
    fn stop_words_are_dropped_when_something_is_left() {
        check(
            "why was the login test failing",
            Some(r#""login" AND "test" AND "failing""#),
            None,
        );
        // Nothing but stop words: they are what there is to search for.
        check("or and not", Some(r#""or" AND "and" AND "not""#), None);
        check("the who", Some(r#""the" AND "who""#), None);
        // Quoted, a stop word is meant.
        check(r#""the" login"#, Some(r#""the" AND "login""#), None);
        check("The LOGIN", Some(r#""LOGIN""#), None);
    }

    #[test]
    fn words_written_as_code_are_searched_in_parts() {
        check("--line-buffered", Some(r#""line" AND "buffered""#), None);
        check("snake_case", Some(r#""snake" AND "case""#), None);
        check(
            "LineBuffered",
            Some(r#""LineBuffered" AND "line" AND "buffered""#),
            None,
        );
        check(
            "HTTPServer",
            Some(r#""HTTPServer" AND "http" AND "server""#),
            None,
        );
        check("sha256", Some(r#""sha256" AND "sha" AND "256""#), None);
        check(
            "foo-bar*",
            Some(r#""foo" AND - project_key : "bar"*"#),
            None,
        );
        check("lease lease", Some(r#""lease""#), None);
        check("Fix the fix", Some(r#""Fix""#), None);
    }

    #[test]
    fn operators_and_syntax_become_harmless_text() {
        check("", None, None);
        check("   \t\n", None, None);
        check("OR", None, None);
        check("OR x OR", Some(r#""x""#), None);
        check("x OR OR y", Some(r#"("x" OR "y")"#), None);
        check("NEAR(x y)", Some(r#""NEAR" AND "x" AND "y""#), None);
        check("title:secret", Some(r#""title" AND "secret""#), None);
        check(r#""title:secret""#, Some(r#""title:secret""#), None);
        check("^start", Some(r#""start""#), None);
        check(r#"say "hi"#, Some(r#""say" AND "hi""#), None);
        check(r#"x"y"#, Some(r#""x" AND "y""#), None);
        check("* ** ***", None, None);
        check("- -- ---", None, None);
        check("!!! ??? ()", None, None);
        check("(x)", Some(r#""x""#), None);
        check("x*y", Some(r#""x" AND "y""#), None);
        check("né café", Some(r#""né" AND "café""#), None);
        check("数据库", Some(r#""数据库""#), None);
        check("nul\0byte", Some(r#""nul" AND "byte""#), None);
        check("x\u{7}y", Some(r#""x" AND "y""#), None);
        check(r#""quote""inside""#, Some(r#""quote" AND "inside""#), None);
    }

    #[test]
    fn long_queries_are_bounded() {
        let long: String = (0..5_000).map(|i| format!("word{i} ")).collect();
        let q = parse(&long);
        assert_eq!(q.groups.len(), MAX_TERMS);
        // Read from both ends: the first words and the last.
        assert_eq!(q.groups[0][0].text, "word0");
        assert_eq!(q.groups[MAX_TERMS - 1][0].text, "4999");
        assert_eq!(q.groups[MAX_TERMS - 2][0].text, "word4999");
        let huge = "x".repeat(10_000);
        let q = parse(&huge);
        assert_eq!(q.groups[0][0].text.chars().count(), MAX_TERM_CHARS);
    }

    fn fts_conn() -> rusqlite::Connection {
        let c = rusqlite::Connection::open_in_memory().expect("open");
        // With the project's key column of the real tables, as they fill it.
        c.execute_batch(&format!(
            "CREATE VIRTUAL TABLE t USING fts5 (a, b, {key}, tokenize = 'porter unicode61');
             INSERT INTO t VALUES ('lease rescue worker', 'flaky test', 'x616c706861');
             INSERT INTO t VALUES ('sqlite wal mode', 'migration plan', 'x616c706861');",
            key = crate::recall::sql::PROJECT_KEY
        ))
        .expect("schema");
        c
    }

    fn run(c: &rusqlite::Connection, input: &str) -> rusqlite::Result<i64> {
        let q = parse(input);
        match (q.fts_match(), q.exclusion()) {
            (Some(m), _) => {
                c.query_row("SELECT count(*) FROM t WHERE t MATCH ?1", [m], |r| r.get(0))
            }
            (None, Some(x)) => c.query_row(
                "SELECT count(*) FROM t WHERE rowid NOT IN (SELECT rowid FROM t WHERE t MATCH ?1)",
                [x],
                |r| r.get(0),
            ),
            (None, None) => c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)),
        }
    }

    #[test]
    fn expressions_mean_what_they_say() {
        let c = fts_conn();
        for (input, want) in [
            ("lease", 1),
            ("lease sqlite", 0),
            ("lease OR sqlite", 2),
            ("the lease", 1),
            ("\"rescue worker\"", 1),
            ("\"worker rescue\"", 0),
            ("migrat*", 1),
            ("x*", 0),
            ("lease -x*", 1),
            ("-flaky", 1),
            ("wal -flaky", 1),
            ("lease -flaky", 0),
            ("leases rescued", 1), // porter stemming
            ("", 2),
        ] {
            assert_eq!(run(&c, input).expect(input), want, "{input}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn any_input_is_a_valid_expression(input in any::<String>()) {
            let c = fts_conn();
            prop_assert!(run(&c, &input).is_ok(), "{input:?}");
        }

        #[test]
        fn operator_soup_is_a_valid_expression(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("\"".to_string()), Just("-".into()), Just("*".into()), Just("OR".into()),
                    Just("AND".into()), Just("NOT".into()), Just("NEAR".into()), Just("(".into()),
                    Just(")".into()), Just("^".into()), Just(":".into()), Just("a:".into()),
                    Just("lease".into()), Just(" ".into()), Just("\0".into()), Just("é".into()),
                    "[a-z]{1,4}",
                ],
                0..40,
            )
        ) {
            let c = fts_conn();
            let input = parts.concat();
            prop_assert!(run(&c, &input).is_ok(), "{input:?}");
        }
    }
}
