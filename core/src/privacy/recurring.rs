//! A session's secrets, remembered without being kept: a secret redacted in one event of a
//! session is removed from its later events too, even where no rule would find it there
//! (the bare value echoed alone, a value printed back by a program). What is remembered
//! is a keyed fingerprint of each secret (HMAC-SHA256 under a key of the data dir, cut to
//! 128 bits) and its length, never the secret: the file holding them tells an attacker
//! nothing without the key, and the key alone tells nothing.
//!
//! A later text is checked cheaply: it is cut into candidate tokens (runs between
//! whitespace, quotes and brackets, and the parts of such a run between `=`, `:`, `@`,
//! `/`, `,`), and only a candidate whose length is one a remembered secret has is
//! fingerprinted. A copy glued inside a longer word is not seen: what is remembered are
//! values, and values are written between delimiters.
//!
//! Invariants: pure (the key and the fingerprints are passed in, the new ones passed out,
//! by `capture::fingerprints`); a candidate is redacted only when its fingerprint equals
//! one remembered.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a fingerprint kept: 128 bits of HMAC-SHA256.
pub const FINGERPRINT_LEN: usize = 16;

/// A secret's fingerprint and its length in bytes.
pub type Fingerprint = (u16, [u8; FINGERPRINT_LEN]);

/// Longest secret remembered: longer ones (keys, certificates) are found by their shape.
pub const MAX_SECRET_LEN: usize = 1024;

/// The secrets a session has shown, as fingerprints, and the ones found in the event being
/// cleaned (the caller stores [`Recurring::new_fingerprints`] after the event).
#[derive(Clone)]
pub struct Recurring {
    mac: Hmac<Sha256>,
    known: Vec<Fingerprint>,
    /// One bit per length a known secret has.
    lengths: Box<[u64; MAX_SECRET_LEN / 64 + 1]>,
    new: Vec<Fingerprint>,
}

impl std::fmt::Debug for Recurring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recurring")
            .field("known", &self.known.len())
            .field("new", &self.new.len())
            .finish_non_exhaustive()
    }
}

impl Recurring {
    /// The fingerprints a session has so far, under the data dir's `key`.
    pub fn new(key: &[u8], known: Vec<Fingerprint>) -> Self {
        let mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
        let mut r = Recurring {
            mac,
            known: Vec::new(),
            lengths: Box::new([0; MAX_SECRET_LEN / 64 + 1]),
            new: Vec::new(),
        };
        for f in known {
            r.add(f);
        }
        r
    }

    fn add(&mut self, f: Fingerprint) {
        let n = usize::from(f.0);
        if n > MAX_SECRET_LEN || self.known.contains(&f) {
            return;
        }
        self.lengths[n / 64] |= 1 << (n % 64);
        self.known.push(f);
    }

    /// The fingerprint of `secret` under this key.
    pub fn fingerprint(&self, secret: &str) -> Fingerprint {
        let mut m = self.mac.clone();
        m.update(secret.as_bytes());
        let full = m.finalize().into_bytes();
        let mut out = [0; FINGERPRINT_LEN];
        out.copy_from_slice(&full[..FINGERPRINT_LEN]);
        (secret.len() as u16, out)
    }

    /// Remembers a secret found in the event being cleaned: later texts (of this event and
    /// the session's next ones) lose its copies.
    pub fn remember(&mut self, secret: &str) {
        if secret.is_empty() || secret.len() > MAX_SECRET_LEN {
            return;
        }
        let f = self.fingerprint(secret);
        if !self.known.contains(&f) {
            self.new.push(f);
            self.add(f);
        }
    }

    /// The fingerprints found since [`Recurring::new`], for the caller to store.
    pub fn new_fingerprints(&self) -> &[Fingerprint] {
        &self.new
    }

    /// True when nothing is remembered: nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    fn has_length(&self, n: usize) -> bool {
        n <= MAX_SECRET_LEN && self.lengths[n / 64] & (1 << (n % 64)) != 0
    }

    fn is_known(&self, s: &str) -> bool {
        self.has_length(s.len()) && self.known.contains(&self.fingerprint(s))
    }

    /// The byte spans of `s` that are remembered secrets, sorted and disjoint.
    pub fn spans(&self, s: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        if self.known.is_empty() {
            return out;
        }
        let b = s.as_bytes();
        let outer = |c: u8| {
            c.is_ascii_whitespace()
                || matches!(
                    c,
                    b'"' | b'\''
                        | b'`'
                        | b'('
                        | b')'
                        | b'['
                        | b']'
                        | b'{'
                        | b'}'
                        | b'<'
                        | b'>'
                        | b';'
                        | b'|'
                        | b'&'
                )
        };
        let inner = |c: u8| matches!(c, b'=' | b':' | b'@' | b'/' | b',');
        let mut i = 0;
        while i < b.len() {
            if outer(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && !outer(b[i]) {
                i += 1;
            }
            let run = (start, i);
            if self.is_known(&s[run.0..run.1]) {
                out.push(run);
                continue;
            }
            // The run's parts between inner delimiters, and each part with what follows
            // it (a secret holding `/` or `=` padding).
            let cuts: Vec<usize> = std::iter::once(run.0)
                .chain((run.0..run.1).filter(|&p| inner(b[p])).map(|p| p + 1))
                .collect();
            let mut covered = run.0;
            for (k, &from) in cuts.iter().enumerate() {
                if from < covered {
                    continue;
                }
                let ends = cuts[k + 1..]
                    .iter()
                    .map(|&c| c - 1)
                    .chain(std::iter::once(run.1));
                for to in ends {
                    if to - from > MAX_SECRET_LEN {
                        break;
                    }
                    if to > from && s.is_char_boundary(from) && self.is_known(&s[from..to]) {
                        out.push((from, to));
                        covered = to;
                        break;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_secret_is_found_between_delimiters_only() {
        let mut r = Recurring::new(b"key", Vec::new());
        assert!(r.spans("anything at all").is_empty());
        r.remember("Zx8Qw2Lm4Kp6Vb8N");
        r.remember("ab/cd+ef==");
        let s = "echo Zx8Qw2Lm4Kp6Vb8N; T=Zx8Qw2Lm4Kp6Vb8N x:ab/cd+ef== aZx8Qw2Lm4Kp6Vb8N";
        let found: Vec<&str> = r.spans(s).iter().map(|&(a, b)| &s[a..b]).collect();
        assert_eq!(
            found,
            ["Zx8Qw2Lm4Kp6Vb8N", "Zx8Qw2Lm4Kp6Vb8N", "ab/cd+ef=="]
        );
        // Another key knows nothing of them; the same key, given the stored ones, does.
        let other = Recurring::new(b"other", r.new_fingerprints().to_vec());
        assert!(other.spans(s).is_empty());
        let again = Recurring::new(b"key", r.new_fingerprints().to_vec());
        assert_eq!(again.spans(s).len(), 3);
        assert!(again.new_fingerprints().is_empty());
    }
}
