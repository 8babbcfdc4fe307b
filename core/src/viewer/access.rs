//! Where the viewer listens and the token it asks for, kept across runs in `viewer.json`
//! (mode 0600) so bookmarks and open tabs outlive a restart.
//!
//! The address is a loopback address of its own, `127.x.y.z` chosen at random once (on
//! Linux, where all of 127/8 is the loopback; elsewhere 127.0.0.1): browsers send a cookie
//! to every port of its host, so a host no other server uses is what keeps the session
//! cookie from other local listeners (they get neither it nor a way to replace it).

use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener};

use serde::{Deserialize, Serialize};

use crate::store::paths::{self, DataDir};

/// What a run of the viewer shares with the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    pub address: Ipv4Addr,
    pub port: u16,
    pub token: String,
    /// The process that bound it last (absent in files of older versions).
    #[serde(default)]
    pub pid: Option<u32>,
}

impl Access {
    /// The URL to open: it carries the access token.
    pub fn url(&self) -> String {
        format!(
            "http://{}:{}/?token={}",
            self.address, self.port, self.token
        )
    }
}

/// The kept access of a viewer of this data dir that is running now: its process is there
/// and what listens where it bound proves it holds the token ([`proof`]) without being
/// sent it. A process that reused the viewer's pid and another server that took its port
/// are not the viewer, and never receive the URL with the token.
pub fn running(dir: &DataDir) -> Option<Access> {
    let a = load(dir)?;
    let pid = i32::try_from(a.pid?).ok()?;
    if pid as u32 == std::process::id() || !crate::store::backup::process_exists(pid) {
        return None;
    }
    let nonce = super::http::secret().ok()?;
    let expected = proof(&a.token, a.address, a.port, &nonce)?;
    let proven = proof_of(&a, &nonce).is_some_and(|p| super::http::same_secret(&p, &expected));
    if !proven {
        log::info!(
            "{}:{} is not the viewer that bound it last (it cannot prove it holds its token)",
            a.address,
            a.port
        );
    }
    proven.then_some(a)
}

/// What a viewer holding `token` and listening at `address`:`port` answers to
/// `/proof?nonce=…`: the HMAC-SHA256 of its address and the nonce keyed by the token, in
/// hex; `None` unless the nonce is 32 hex digits. A fresh random nonce each time, so an
/// answer seen once proves nothing later; the address in it, so a stranger holding the
/// kept address cannot pass the question on to another viewer with the same token
/// (`cairn ui --port N`) and return its answer.
pub fn proof(token: &str, address: Ipv4Addr, port: u16, nonce: &str) -> Option<String> {
    use hmac::{Hmac, Mac};
    crate::hex::unhex(nonce).filter(|bytes| bytes.len() == 16)?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).ok()?;
    mac.update(format!("cairn viewer proof {address}:{port} ").as_bytes());
    mac.update(nonce.as_bytes());
    Some(crate::hex::hex(&mac.finalize().into_bytes()))
}

/// The answer of what listens at `a`'s address to `/proof?nonce=…`, if any within a short
/// while: asked directly (never through a proxy the environment names) and not followed
/// elsewhere.
fn proof_of(a: &Access, nonce: &str) -> Option<String> {
    let wait = std::time::Duration::from_millis(500);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(wait))
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .build()
        .into();
    let mut resp = agent
        .get(&format!(
            "http://{}:{}/proof?nonce={nonce}",
            a.address, a.port
        ))
        .call()
        .ok()?;
    if resp.status().as_u16() != 200 {
        return None;
    }
    resp.body_mut()
        .with_config()
        .limit(256)
        .read_to_string()
        .ok()
        .map(|s| s.trim().to_string())
}

/// A fresh loopback address of the viewer's own (127.0.0.1 where only that one exists).
pub fn random_loopback(bytes: [u8; 3]) -> Ipv4Addr {
    if cfg!(target_os = "linux") {
        // Not 127.0.0.0/24 (127.0.0.1 and neighbours are what other servers use), never a
        // .0 or .255 last byte.
        let b = bytes[0].max(1);
        let d = bytes[2].clamp(1, 254);
        Ipv4Addr::new(127, b, bytes[1], d)
    } else {
        Ipv4Addr::LOCALHOST
    }
}

fn random_bytes() -> std::io::Result<[u8; 3]> {
    let hex = super::http::secret()?;
    let b = |i: usize| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).unwrap_or(1);
    Ok([b(0), b(1), b(2)])
}

/// The kept access when the file is there, owner-only and readable; `None` otherwise (a
/// file others could read holds a token that may be known: it is not reused).
pub fn load(dir: &DataDir) -> Option<Access> {
    let file = dir.viewer();
    if paths::mode_of(&file)? & 0o077 != 0 {
        log::warn!(
            "{} is readable by others: a new token is made",
            file.display()
        );
        return None;
    }
    let text = std::fs::read_to_string(&file).ok()?;
    let a: Access = serde_json::from_str(&text).ok()?;
    (a.address.is_loopback() && a.token.len() == 32).then_some(a)
}

/// Writes the access for the next run (owner-only from the start).
pub fn save(dir: &DataDir, a: &Access) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(a).map_err(std::io::Error::other)?;
    let mut f = paths::create_private(&dir.viewer())?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")
}

/// Binds the kept address and port when it can (`port` other than 0 wins over the kept
/// one), else a fresh address or port, and saves what it bound. A `port` asked for that is
/// in use on the kept address is an error, not a move to another address.
pub fn bind(dir: &DataDir, port: u16) -> std::io::Result<(TcpListener, Access)> {
    let kept = load(dir);
    let token = match &kept {
        Some(a) => a.token.clone(),
        None => super::http::secret()?,
    };
    let address = match &kept {
        Some(a) => a.address,
        None => random_loopback(random_bytes()?),
    };
    let want = if port != 0 {
        port
    } else {
        kept.as_ref().map_or(0, |a| a.port)
    };
    let mut tries = vec![(address, want)];
    if want != 0 && port == 0 {
        tries.push((address, 0));
    }
    if address != Ipv4Addr::LOCALHOST {
        tries.push((Ipv4Addr::LOCALHOST, port));
    }
    let mut last = None;
    for (ip, p) in tries {
        match TcpListener::bind((ip, p)) {
            Ok(l) => {
                let bound = l.local_addr()?;
                let access = Access {
                    address: ip,
                    port: bound.port(),
                    token,
                    pid: Some(std::process::id()),
                };
                if kept.as_ref() != Some(&access)
                    && let Err(e) = save(dir, &access)
                {
                    log::warn!("cannot keep the viewer's address for the next run: {e}");
                }
                return Ok((l, access));
            }
            // A port asked for and taken: another address would lose the kept one.
            Err(e) if port != 0 && e.kind() == std::io::ErrorKind::AddrInUse => return Err(e),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("nowhere to listen")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_of_the_token_and_a_well_formed_nonce_only() {
        let nonce = "0123456789abcdef0123456789ABCDEF";
        let at = Ipv4Addr::new(127, 9, 8, 7);
        let p = proof("token-a", at, 4000, nonce).expect("proof");
        assert_eq!(p.len(), 64);
        assert_eq!(proof("token-a", at, 4000, nonce), Some(p.clone()));
        assert_ne!(proof("token-b", at, 4000, nonce), Some(p.clone()));
        assert_ne!(proof("token-a", at, 4001, nonce), Some(p.clone()));
        assert_ne!(
            proof("token-a", Ipv4Addr::LOCALHOST, 4000, nonce),
            Some(p.clone())
        );
        assert_ne!(
            proof("token-a", at, 4000, &nonce.replace('0', "1")),
            Some(p)
        );
        assert_eq!(proof("token-a", at, 4000, "short"), None);
        assert_eq!(proof("token-a", at, 4000, &"g".repeat(32)), None);
    }

    #[test]
    fn the_address_and_token_outlive_a_run_but_not_a_readable_file() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = DataDir::new(tmp.path());
        let (l, first) = bind(&dir, 0).expect("bind");
        assert!(first.address.is_loopback());
        if cfg!(target_os = "linux") {
            assert_ne!(first.address, Ipv4Addr::LOCALHOST);
        }
        assert_eq!(paths::mode_of(&dir.viewer()), Some(0o600));
        drop(l);
        let (l, second) = bind(&dir, 0).expect("bind again");
        assert_eq!(second, first);
        // Its port taken: the same address and token on another port.
        let (_l2, third) = bind(&dir, 0).expect("bind while taken");
        assert_eq!((third.address, &third.token), (first.address, &first.token));
        assert_ne!(third.port, first.port);
        // A port asked for and taken is an error: the kept address stays.
        let kept = std::fs::read(dir.viewer()).expect("kept");
        let taken = bind(&dir, third.port).expect_err("taken");
        assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
        assert_eq!(std::fs::read(dir.viewer()).expect("kept"), kept);
        drop(l);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.viewer(), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        assert_eq!(load(&dir), None);
        assert_eq!(random_loopback([0, 0, 255]).octets()[3], 254);
    }
}
