//! The search query language, and its translation into an FTS5 `MATCH` expression.
//!
//! What a person types:
//!
//! | input | meaning |
//! | --- | --- |
//! | `lease rescue` | both words must match (in any field) |
//! | `"lease rescue"` | the exact phrase |
//! | `-flaky` or `NOT flaky` | rows matching `flaky` are left out |
//! | `sqlite OR postgres` | either word (binds the two terms next to it) |
//! | `migrat*` | any word starting with `migrat` |
//! | `AND` | ignored (words are joined by AND already) |
//!
//! Invariants:
//! - parsing never fails and never panics, whatever the input (quotes, parentheses,
//!   `NEAR`, `column:` filters, `^`, unicode, control bytes, NUL, megabytes);
//! - user text reaches `MATCH` only inside double-quoted FTS5 strings (with `"` doubled),
//!   so the only operators in the expression are the ones written here: `AND`, `OR`,
//!   `NOT`, parentheses and the prefix `*`;
//! - a term without a letter or digit is dropped (the tokenizer would make it an empty
//!   phrase, which matches nothing);
//! - at most [`MAX_TERMS`] terms of at most [`MAX_TERM_CHARS`] characters are kept, so a
//!   10 KB query stays a small expression.
//!
//! Pure: no database, no clock.

/// Most terms kept from one query; the rest are ignored.
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
}

/// A parsed query: every group must match (a group matches when any of its terms does),
/// and no excluded term may match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Terms joined by AND; each group is terms joined by OR.
    pub groups: Vec<Vec<Term>>,
    /// Terms joined by NOT.
    pub excluded: Vec<Term>,
}

impl Query {
    /// True when nothing was typed that can match (no positive and no excluded term).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.excluded.is_empty()
    }

    /// The FTS5 expression rows must match, or `None` when the query has no positive term
    /// (then every row is a candidate, minus [`Query::exclusion`]).
    pub fn fts_match(&self) -> Option<String> {
        if self.groups.is_empty() {
            return None;
        }
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let terms: Vec<String> = g.iter().map(quote_term).collect();
                if terms.len() == 1 {
                    terms.concat()
                } else {
                    format!("({})", terms.join(" OR "))
                }
            })
            .collect();
        let mut expr = groups.join(" AND ");
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

/// `"text"` with inner quotes doubled, plus `*` for a prefix term.
fn quote_term(t: &Term) -> String {
    let mut s = String::with_capacity(t.text.len() + 3);
    s.push('"');
    for c in t.text.chars() {
        if c == '"' {
            s.push('"');
        }
        s.push(c);
    }
    s.push('"');
    if t.prefix {
        s.push('*');
    }
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
/// // A column filter typed by a user is only text inside a quoted term.
/// let hostile = cairn_core::recall::query::parse("title:secret");
/// assert_eq!(hostile.fts_match().as_deref(), Some(r#""title:secret""#));
/// ```
pub fn parse(input: &str) -> Query {
    let tokens = lex(input);
    let mut q = Query::default();
    let mut pending_or = false;
    let mut pending_not = false;
    let mut kept = 0usize;
    for tok in tokens {
        match tok {
            Token::Or => pending_or = !q.groups.is_empty(),
            Token::And => pending_or = false,
            Token::Not => pending_not = true,
            Token::Term { term, negated } => {
                if kept >= MAX_TERMS {
                    break;
                }
                kept += 1;
                if negated || pending_not {
                    q.excluded.push(term);
                    pending_not = false;
                    pending_or = false;
                    continue;
                }
                match (pending_or, q.groups.last_mut()) {
                    (true, Some(group)) => group.push(term),
                    _ => q.groups.push(vec![term]),
                }
                pending_or = false;
            }
        }
    }
    q
}

/// Splits the input into terms and operators. Control characters are spaces; a `"` opens
/// a phrase that runs to the next `"` (or the end).
fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        if is_space(c) {
            chars.next();
            continue;
        }
        let mut negated = false;
        if c == '-' {
            chars.next();
            match chars.peek() {
                Some(&n) if !is_space(n) && n != '-' => negated = true,
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
        if let Some(term) = make_term(&text, prefix) {
            tokens.push(Token::Term { term, negated });
        }
    }
    tokens
}

/// A term from raw text: trimmed, shortened, dropped when it holds no letter or digit.
fn make_term(text: &str, prefix: bool) -> Option<Term> {
    let text: String = text
        .trim()
        .chars()
        .take(MAX_TERM_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    // A prefix applies to the last token; it must end in a letter or digit to mean one.
    let prefix = prefix && text.chars().last().is_some_and(char::is_alphanumeric);
    text.chars()
        .any(char::is_alphanumeric)
        .then_some(Term { text, prefix })
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
        check("migrat*", Some(r#""migrat"*"#), None);
        check(r#""lease res"*"#, Some(r#""lease res"*"#), None);
        check("a AND b", Some(r#""a" AND "b""#), None);
        check("a NOT b", Some(r#"("a") NOT "b""#), None);
        check("or and not", Some(r#""or" AND "and" AND "not""#), None);
        check("-flaky", None, Some(r#""flaky""#));
        check("-flaky -slow", None, Some(r#""flaky" OR "slow""#));
        check("-\"two words\"", None, Some(r#""two words""#));
    }

    #[test]
    fn operators_and_syntax_become_harmless_text() {
        check("", None, None);
        check("   \t\n", None, None);
        check("OR", None, None);
        check("OR a OR", Some(r#""a""#), None);
        check("a OR OR b", Some(r#"("a" OR "b")"#), None);
        check("NEAR(a b)", Some(r#""NEAR(a" AND "b)""#), None);
        check("title:secret", Some(r#""title:secret""#), None);
        check("^start", Some(r#""^start""#), None);
        check(r#"say "hi"#, Some(r#""say" AND "hi""#), None);
        check(r#"a"b"#, Some(r#""a" AND "b""#), None);
        check("* ** ***", None, None);
        check("- -- ---", None, None);
        check("!!! ??? ()", None, None);
        check("(a)", Some(r#""(a)""#), None);
        check("a*b", Some(r#""a*b""#), None);
        check("né café", Some(r#""né" AND "café""#), None);
        check("数据库", Some(r#""数据库""#), None);
        check("nul\0byte", Some(r#""nul" AND "byte""#), None);
        check("x\u{7}y", Some(r#""x" AND "y""#), None);
        check(r#""quote""inside""#, Some(r#""quote" AND "inside""#), None);
    }

    #[test]
    fn long_queries_are_bounded() {
        let long = "word ".repeat(5_000);
        let q = parse(&long);
        assert_eq!(q.groups.len(), MAX_TERMS);
        let huge = "x".repeat(10_000);
        let q = parse(&huge);
        assert_eq!(q.groups[0][0].text.chars().count(), MAX_TERM_CHARS);
    }

    fn fts_conn() -> rusqlite::Connection {
        let c = rusqlite::Connection::open_in_memory().expect("open");
        c.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5 (a, b, tokenize = 'porter unicode61');
             INSERT INTO t VALUES ('lease rescue worker', 'flaky test');
             INSERT INTO t VALUES ('sqlite wal mode', 'migration plan');",
        )
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
            ("\"rescue worker\"", 1),
            ("\"worker rescue\"", 0),
            ("migrat*", 1),
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
