//! Bytes written as lowercase hexadecimal, two digits a byte, and read back: hashes as
//! file names and ids, the project's key in the full-text tables, the sync space's keys
//! and blobs, the viewer's token and proofs.
//!
//! Invariants: pure; [`unhex`] of [`hex`] is the bytes given; [`unhex`] refuses what is
//! not whole pairs of hex digits.

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The bytes `s` spells in hex (either case), or `None` when it is not whole pairs of hex
/// digits.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            let pair = s.get(i..i + 2)?;
            pair.bytes()
                .all(|c| c.is_ascii_hexdigit())
                .then(|| u8::from_str_radix(pair, 16).ok())?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bytes_are_two_lowercase_digits_each_and_come_back() {
        assert_eq!(hex(&[0, 15, 16, 255]), "000f10ff");
        assert_eq!(hex(&[]), "");
        assert_eq!(unhex("000F10ff"), Some(vec![0, 15, 16, 255]));
        for bad in ["0", "0g", "+1", "-1", "é0", "1 "] {
            assert_eq!(unhex(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_come_back(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(unhex(&hex(&bytes)), Some(bytes));
        }

        #[test]
        fn any_text_is_read_or_refused(s in any::<String>()) {
            if let Some(b) = unhex(&s) {
                prop_assert_eq!(hex(&b), s.to_lowercase());
            }
        }
    }
}
