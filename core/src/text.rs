//! Cutting text to a size, a count in words ([`plural`]), `%XX` escapes decoded
//! ([`percent_decode`], [`percent_decode_uri`]), and the words of text written as code
//! ([`runs`], [`camel_pieces`], [`code_pieces`]), which a query and a stored memory split
//! alike. Every cap in cairn goes through here: a field capped before it
//! is stored, a prompt field, a title shortened for display, an error message clipped for
//! the queue, an id kept distinct by a hash. Sizes are counted in bytes or in characters
//! ([`Unit`]); what a caller keeps is the head ([`head`], [`shorten`], [`truncate`]), the
//! head and the tail with the caller's marker between ([`keep_ends`]), or the head and a
//! hash of the whole ([`cap_hashed`]).
//!
//! Invariants: pure; never panics, whatever the text and the size; every cut falls on a
//! char boundary; a result is never longer than asked, except for the one thing each
//! function always adds (the marker of [`keep_ends`], the `…` of [`shorten`], the hash of
//! [`cap_hashed`]) when the size asked for is smaller than that.

use std::borrow::Cow;

/// The runs of letters and digits of `text`: its words as a query counts them.
pub fn runs(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|r| !r.is_empty())
}

/// `LineBuffered` → `line`, `buffered`; `HTTPServer` → `http`, `server`; `sha256` → `sha`,
/// `256`; a run with no inner capital and no letter beside a digit gives nothing.
pub fn camel_pieces(run: &str) -> Vec<String> {
    let chars: Vec<char> = run.chars().collect();
    let mut pieces = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (prev, cur) = (chars[i - 1], chars[i]);
        let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
        let boundary = (prev.is_lowercase() && cur.is_uppercase())
            || (prev.is_uppercase() && cur.is_uppercase() && next_lower)
            || (prev.is_alphabetic() != cur.is_alphabetic());
        if boundary {
            pieces.push(chars[start..i].iter().collect::<String>());
            start = i;
        }
    }
    if pieces.is_empty() {
        return Vec::new();
    }
    pieces.push(chars[start..].iter().collect());
    pieces.into_iter().map(|p| p.to_lowercase()).collect()
}

/// Longest run whose pieces [`code_pieces`] keeps: longer ones are blobs (keys, base64),
/// not names.
const PIECED_RUN_CHARS: usize = 32;

/// The pieces of every word of `texts` written as code, space-separated: what a stored
/// memory is also searched by (its `pieces_text`), so that "line buffered" finds
/// `LineBuffered` as a query's `LineBuffered` finds "line buffered" ([`camel_pieces`]).
/// Hex runs of seven characters or more with a digit (commit ids, hashes) and runs longer
/// than [`PIECED_RUN_CHARS`] give nothing.
pub fn code_pieces(texts: &[&str]) -> String {
    let mut out = String::new();
    for text in texts {
        for run in runs(text) {
            if run.chars().count() > PIECED_RUN_CHARS || is_hex_id(run) {
                continue;
            }
            for piece in camel_pieces(run) {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(&piece);
            }
        }
    }
    out
}

/// A commit id or a hash: seven hex digits or more, one of them a decimal digit.
fn is_hex_id(run: &str) -> bool {
    run.len() >= 7
        && run.chars().all(|c| c.is_ascii_hexdigit())
        && run.chars().any(|c| c.is_ascii_digit())
}

/// `n` and the word for it: "1 record", "2 records".
pub fn plural(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `%XX` and `+` decoded, as in a form; invalid escapes kept as they are.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `%XX` decoded, as in a URI's path or a `postgres://` URL's query, where `+` is a plus.
pub fn percent_decode_uri(s: &str) -> String {
    percent_decode(&s.replace('+', "%2B"))
}

/// What a size counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// UTF-8 bytes: what a column or a file holds.
    Bytes,
    /// Characters (`char`s): what a reader or a model sees.
    Chars,
}

impl Unit {
    /// The length of `s` in this unit.
    pub fn len(self, s: &str) -> usize {
        match self {
            Unit::Bytes => s.len(),
            Unit::Chars => s.chars().count(),
        }
    }

    /// The byte offset where the first `n` units of `s` end (`s.len()` when `s` is shorter).
    fn head_end(self, s: &str, n: usize) -> usize {
        match self {
            Unit::Bytes => floor_char_boundary(s, n),
            Unit::Chars => s.char_indices().nth(n).map_or(s.len(), |(i, _)| i),
        }
    }

    /// The byte offset where the last `n` units of `s` start (0 when `s` is shorter).
    fn tail_start(self, s: &str, n: usize) -> usize {
        match self {
            Unit::Bytes => ceil_char_boundary(s, s.len().saturating_sub(n)),
            Unit::Chars => self.head_end(s, self.len(s).saturating_sub(n)),
        }
    }
}

/// The largest char boundary of `s` at or below `i` (`s.len()` when `i` is past the end).
pub fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest char boundary of `s` at or above `i` (`s.len()` when `i` is past the end).
pub fn ceil_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The head of `s`, at most `max` units long.
pub fn head(s: &str, max: usize, unit: Unit) -> &str {
    &s[..unit.head_end(s, max)]
}

/// Cuts `s` to at most `max` bytes, back to a char boundary.
pub fn truncate(s: &mut String, max: usize) {
    s.truncate(floor_char_boundary(s, max));
}

/// `s` cut to at most `max` units, keeping its head and its tail with `marker(cut)` between,
/// `cut` being how many units were left out. About two thirds of the room left beside the
/// marker go to the head, the rest to the tail; the room the marker takes is what
/// `marker(unit.len(s))` takes, the longest it can be. `s` itself when it fits; the marker
/// alone when even the marker does not fit in `max`.
pub fn keep_ends(
    s: &str,
    max: usize,
    unit: Unit,
    marker: impl Fn(usize) -> String,
) -> Cow<'_, str> {
    let total = unit.len(s);
    if total <= max {
        return Cow::Borrowed(s);
    }
    let budget = max.saturating_sub(unit.len(&marker(total)));
    let head = unit.head_end(s, budget * 2 / 3);
    let tail = unit.tail_start(s, budget - unit.len(&s[..head]));
    let marker = marker(unit.len(&s[head..tail]));
    let mut out = String::with_capacity(head + marker.len() + (s.len() - tail));
    out.push_str(&s[..head]);
    out.push_str(&marker);
    out.push_str(&s[tail..]);
    Cow::Owned(out)
}

/// `text` cut to at most `max` characters ending in `…`, at a word boundary when one is in
/// the second half (just `…` when `max` is 0).
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut = head(text, max.saturating_sub(1), Unit::Chars);
    let cut = match cut.rfind(' ') {
        Some(i) if i > cut.len() / 2 => &cut[..i],
        _ => cut,
    };
    format!("{}…", cut.trim_end())
}

/// Bytes [`cap_hashed`] adds after the head: `~` and 16 hex digits.
const HASH_SUFFIX_BYTES: usize = 17;

/// `s` when it fits in `max` bytes, else its head and a hash of the whole, at most `max`
/// bytes long (never shorter than the hash): two long strings that differ only past the
/// cut stay distinct. The hash (64-bit FNV-1a) is stable across builds and versions, so a
/// string capped today caps the same later.
pub fn cap_hashed(s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let hash = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let head = head(&s, max.saturating_sub(HASH_SUFFIX_BYTES), Unit::Bytes);
    format!("{head}~{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_marker(cut: usize) -> String {
        format!("[{cut}]")
    }

    #[test]
    fn code_is_split_into_the_words_it_is_made_of() {
        assert_eq!(
            code_pieces(&[
                "Fix RedundantParentheses in parseHTTPHeader",
                "sha256 and v2"
            ]),
            "redundant parentheses parse http header sha 256 v 2"
        );
        // Plain words, snake_case (the tokenizer splits it already), commit ids and
        // blobs give nothing.
        assert_eq!(
            code_pieces(&[
                "plain words, snake_case",
                "reverts eca89acee00faf6e9ef55d84780e6eeddf225e5c and 1a2b3c4",
                "AKIAIOSFODNN7EXAMPLEkeyMaterialThatIsLong",
            ]),
            ""
        );
        // A short hex word without a digit is a word ("deadbeef" aside, "decade").
        assert_eq!(code_pieces(&["faceBook decade"]), "face book");
    }

    #[test]
    fn boundaries() {
        // "aé€😀": a at 0, é at 1..3, € at 3..6, 😀 at 6..10.
        let s = "aé€😀";
        for (i, floor, ceil) in [
            (0, 0, 0),
            (1, 1, 1),
            (2, 1, 3),
            (4, 3, 6),
            (5, 3, 6),
            (7, 6, 10),
            (9, 6, 10),
            (10, 10, 10),
            (99, 10, 10),
        ] {
            assert_eq!(floor_char_boundary(s, i), floor, "floor {i}");
            assert_eq!(ceil_char_boundary(s, i), ceil, "ceil {i}");
        }
        assert_eq!(floor_char_boundary("", 3), 0);
    }

    #[test]
    fn heads() {
        fn check(s: &str, max: usize, unit: Unit, want: &str) {
            assert_eq!(head(s, max, unit), want, "{s:?} {max} {unit:?}");
        }
        check("", 5, Unit::Bytes, "");
        check("abc", 0, Unit::Bytes, "");
        check("abc", 2, Unit::Bytes, "ab");
        check("abc", 9, Unit::Chars, "abc");
        check("éé", 3, Unit::Bytes, "é");
        check("éé", 1, Unit::Bytes, "");
        check("ééé", 2, Unit::Chars, "éé");
        check("a😀b", 2, Unit::Chars, "a😀");
        let mut s = "ab€".to_string();
        truncate(&mut s, 4);
        assert_eq!(s, "ab");
        truncate(&mut s, 10);
        assert_eq!(s, "ab");
    }

    #[test]
    fn ends_with_a_marker() {
        fn check(s: &str, max: usize, unit: Unit, want: &str) {
            assert_eq!(
                keep_ends(s, max, unit, bytes_marker),
                want,
                "{s:?} {max} {unit:?}"
            );
        }
        // Fits: as it is.
        check("abcdef", 6, Unit::Bytes, "abcdef");
        // The marker's room is that of `[19]`: 6 left, 4 from the head and 2 from the tail.
        check("0123456789abcdefghi", 10, Unit::Bytes, "0123[13]hi");
        check("0123456789abcdefghi", 10, Unit::Chars, "0123[13]hi");
        // Counted in bytes, a cut inside é moves to its start (head) or its end (tail).
        check("aéééééééééé", 9, Unit::Bytes, "aé[16]é");
        check("aéééééééééé", 9, Unit::Chars, "aéé[6]éé");
        // Too small for the marker: the marker alone.
        check("0123456789abcdefghi", 2, Unit::Bytes, "[19]");
        assert!(matches!(
            keep_ends("abc", 3, Unit::Bytes, bytes_marker),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn shortened_at_words() {
        fn check(s: &str, max: usize, want: &str) {
            assert_eq!(shorten(s, max), want, "{s:?} {max}");
        }
        check("short", 10, "short");
        check("one two three four", 10, "one two…");
        check("abcdefghijkl", 5, "abcd…");
        check("a bcdefghijkl", 5, "a bc…");
        check("ééééé", 4, "ééé…");
        check("abc", 0, "…");
    }

    #[test]
    fn hashed_ids_stay_distinct() {
        assert_eq!(cap_hashed("short".into(), 10), "short");
        let a = cap_hashed("x".repeat(40) + "a", 30);
        let b = cap_hashed("x".repeat(40) + "b", 30);
        assert_eq!(a.len(), 30);
        assert_ne!(a, b);
        assert!(a.starts_with(&"x".repeat(13)) && a.as_bytes()[13] == b'~');
        // Stable: the same input hashes the same in every version.
        assert_eq!(cap_hashed("abcdefghij".into(), 5), "~b9bbc7aa22d79212");
        assert_eq!(cap_hashed("é".repeat(300), 256).len(), 256 - 1);
    }

    /// A marker the generated text cannot hold, to find the kept ends again.
    fn control_marker(cut: usize) -> String {
        format!("\u{1}{cut}\u{1}")
    }

    proptest::proptest! {
        #[test]
        fn cuts_never_panic_and_stay_within_the_size(s in "\\PC{0,60}", max in 0usize..80) {
            for unit in [Unit::Bytes, Unit::Chars] {
                let h = head(&s, max, unit);
                proptest::prop_assert!(s.starts_with(h) && unit.len(h) <= max);
                proptest::prop_assert!(unit.len(h) == max.min(unit.len(&s)) || unit == Unit::Bytes);

                let out = keep_ends(&s, max, unit, control_marker);
                let marker_room = unit.len(&control_marker(unit.len(&s)));
                proptest::prop_assert!(unit.len(&out) <= max.max(marker_room));
                if unit.len(&s) > max {
                    let parts: Vec<&str> = out.split('\u{1}').collect();
                    proptest::prop_assert_eq!(parts.len(), 3);
                    proptest::prop_assert!(s.starts_with(parts[0]) && s.ends_with(parts[2]));
                    let cut: usize = parts[1].parse().expect("count");
                    proptest::prop_assert_eq!(unit.len(parts[0]) + cut + unit.len(parts[2]), unit.len(&s));
                }
            }
            let short = shorten(&s, max);
            proptest::prop_assert!(short.chars().count() <= max.max(1));
            let hashed = cap_hashed(s.clone(), max);
            proptest::prop_assert!(hashed.len() <= max.max(HASH_SUFFIX_BYTES));
            let mut t = s.clone();
            truncate(&mut t, max);
            proptest::prop_assert!(s.starts_with(&t) && t.len() <= max);
        }

        #[test]
        fn boundaries_are_boundaries(s in "\\PC{0,20}", i in 0usize..100) {
            let f = floor_char_boundary(&s, i);
            let c = ceil_char_boundary(&s, i);
            proptest::prop_assert!(s.is_char_boundary(f) && s.is_char_boundary(c));
            proptest::prop_assert!(f <= i.min(s.len()) && c >= i.min(s.len()) && c <= s.len());
        }
    }
}
