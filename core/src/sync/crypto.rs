//! The space's key and the sealing of records: XChaCha20-Poly1305 with a random nonce per
//! record and the record's place in its log (space, device, sequence) as associated data,
//! so that a record moved to another place, or altered, does not open. Pure apart from the
//! OS's randomness.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::hex::{hex, unhex};
use crate::sync::SyncError;

const NONCE_LEN: usize = 24;
/// How a key is written: `cairn1-<space id>-<key>`, both in lowercase hex.
const KEY_PREFIX: &str = "cairn1-";
/// What the key check record of a space holds.
const CHECK_PLAINTEXT: &[u8] = b"cairn sync key check v1";

/// A space: its id (public, the server's name for it) and its 256-bit key (never leaves
/// the devices).
#[derive(Clone, PartialEq, Eq)]
pub struct SpaceKey {
    pub space: String,
    key: [u8; 32],
}

impl std::fmt::Debug for SpaceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpaceKey")
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

/// Random bytes from the operating system.
pub fn random<const N: usize>() -> Result<[u8; N], SyncError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| SyncError::Random(e.to_string()))?;
    Ok(b)
}

impl SpaceKey {
    /// A new space with a new key.
    pub fn generate() -> Result<Self, SyncError> {
        Ok(SpaceKey {
            space: hex(&random::<16>()?),
            key: random()?,
        })
    }

    /// Reads a key as [`SpaceKey::encode`] writes it, in any letter case (a key read out
    /// or retyped may come back in capitals).
    pub fn parse(text: &str) -> Result<Self, SyncError> {
        let bad = || SyncError::BadKey;
        let text = text.trim().to_ascii_lowercase();
        let rest = text.strip_prefix(KEY_PREFIX).ok_or_else(bad)?;
        let (space, key) = rest.split_once('-').ok_or_else(bad)?;
        let space_bytes = unhex(space).filter(|b| b.len() == 16).ok_or_else(bad)?;
        let key: [u8; 32] = unhex(key).and_then(|k| k.try_into().ok()).ok_or_else(bad)?;
        Ok(SpaceKey {
            space: hex(&space_bytes),
            key,
        })
    }

    /// The key as the user copies it to another machine.
    pub fn encode(&self) -> String {
        format!("{KEY_PREFIX}{}-{}", self.space, hex(&self.key))
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new((&self.key).into())
    }

    /// Encrypts `plain` for this place: nonce followed by ciphertext and tag.
    pub fn seal(&self, ad: &[u8], plain: &[u8]) -> Result<Vec<u8>, SyncError> {
        let nonce = random::<NONCE_LEN>()?;
        let sealed = self
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: ad,
                },
            )
            .map_err(|_| SyncError::Random("encryption failed".into()))?;
        let mut out = nonce.to_vec();
        out.extend(sealed);
        Ok(out)
    }

    /// Decrypts what [`SpaceKey::seal`] wrote for the same place; `None` when the key, the
    /// place or the bytes differ.
    pub fn open(&self, ad: &[u8], body: &[u8]) -> Option<Vec<u8>> {
        if body.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = body.split_at(NONCE_LEN);
        self.cipher()
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: ad,
                },
            )
            .ok()
    }

    /// The associated data of record `seq` of `device`'s log.
    pub fn record_ad(&self, device: &str, seq: i64) -> Vec<u8> {
        format!("cairn-record-v1\0{}\0{device}\0{seq}", self.space).into_bytes()
    }

    fn check_ad(&self) -> Vec<u8> {
        format!("cairn-check-v1\0{}", self.space).into_bytes()
    }

    /// The key check record stored with the space at `sync init`.
    pub fn key_check(&self) -> Result<Vec<u8>, SyncError> {
        self.seal(&self.check_ad(), CHECK_PLAINTEXT)
    }

    /// True when `check` was written by [`SpaceKey::key_check`] with this key.
    pub fn verify(&self, check: &[u8]) -> bool {
        self.open(&self.check_ad(), check).as_deref() == Some(CHECK_PLAINTEXT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_reject_garbage() {
        let k = SpaceKey::generate().expect("key");
        assert_eq!(SpaceKey::parse(&k.encode()).expect("parse"), k);
        let shouted = format!(" {}\n", k.encode().to_ascii_uppercase());
        assert_eq!(SpaceKey::parse(&shouted).expect("capitals"), k);
        for bad in ["", "cairn1-", "cairn1-zz-00", &k.encode()[..40], "x"] {
            assert!(SpaceKey::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sealed_records_open_only_in_their_place_with_their_key() {
        let k = SpaceKey::generate().expect("key");
        let other = SpaceKey::generate().expect("key");
        let body = k.seal(&k.record_ad("d1", 1), b"hello").expect("seal");
        assert_eq!(
            k.open(&k.record_ad("d1", 1), &body).as_deref(),
            Some(&b"hello"[..])
        );
        assert!(k.open(&k.record_ad("d1", 2), &body).is_none());
        assert!(k.open(&k.record_ad("d2", 1), &body).is_none());
        assert!(other.open(&other.record_ad("d1", 1), &body).is_none());
        let mut tampered = body.clone();
        *tampered.last_mut().expect("byte") ^= 1;
        assert!(k.open(&k.record_ad("d1", 1), &tampered).is_none());
        // Two seals of one text differ (random nonces).
        assert_ne!(body, k.seal(&k.record_ad("d1", 1), b"hello").expect("seal"));
        let check = k.key_check().expect("check");
        assert!(k.verify(&check));
        assert!(!other.verify(&check));
    }
}
