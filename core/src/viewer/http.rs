//! The request side of the viewer: who may ask (token, `Host`, `Origin`), what they asked
//! (path, query, form) and the headers every answer carries. Pure except for reading the
//! token's random bytes.

use crate::text::{percent_decode, percent_decode_uri};
use std::collections::HashMap;
use std::io::Read;
use std::net::Ipv4Addr;

/// Every answer's security headers: no inline script or style, nothing from elsewhere, no
/// framing, no caching, no referrer to other sites (`same-origin`, not `no-referrer`: under
/// `no-referrer` a browser sends `Origin: null` with its own form posts).
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn security_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "same-origin"),
        ("Cache-Control", "no-store"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
    ]
}

/// A random secret as 32 hex digits, from the system's random source.
pub fn secret() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(crate::hex::hex(&bytes))
}

/// Compares secrets in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Encodes a value for a URL's query or path.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `a=1&b=2` as a map (the last value of a repeated key wins; empty values kept).
pub fn parse_form(s: &str) -> HashMap<String, String> {
    s.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// A request target split into its decoded path and query.
pub fn split_url(url: &str) -> (String, HashMap<String, String>) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    (percent_decode_uri(path), parse_form(query))
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// Why a request is refused before it reaches a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` is not this server's loopback address (DNS rebinding).
    Host,
    /// `Origin` or `Sec-Fetch-Site` says another site sent it.
    Origin,
    /// No valid token (cookie or `?token=`).
    Token,
    /// A change without the form's token.
    Csrf,
}

impl Refusal {
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Host => "wrong Host: the viewer answers only on its loopback address",
            Refusal::Origin => "refused: the request came from another site",
            Refusal::Token => {
                "no access token: open the URL `cairn ui` printed (it carries the token)"
            }
            Refusal::Csrf => "refused: the form's token is missing or wrong; reload the page",
        }
    }
}

/// The hosts a browser on this machine names the server by: its address and port
/// (`localhost` too when the address is 127.0.0.1).
pub fn allowed_host(host: Option<&str>, address: Ipv4Addr, port: u16) -> bool {
    match host {
        Some(h) => {
            h == format!("{address}:{port}")
                || (address == Ipv4Addr::LOCALHOST && h == format!("localhost:{port}"))
        }
        None => false,
    }
}

/// `Origin` absent (a typed URL or a same-origin GET) or this server; `Sec-Fetch-Site`, when
/// the browser sends it, not another site.
pub fn allowed_origin(
    origin: Option<&str>,
    fetch_site: Option<&str>,
    address: Ipv4Addr,
    port: u16,
) -> bool {
    let origin_ok = match origin {
        None => true,
        Some(o) => o
            .strip_prefix("http://")
            .is_some_and(|h| allowed_host(Some(h), address, port)),
    };
    let site_ok = !matches!(fetch_site, Some("cross-site") | Some("same-site"));
    origin_ok && site_ok
}

/// Where the first visit goes once its token is in a cookie: the decoded path's non-empty
/// segments, each percent-encoded again, and the query without `token` (keys sorted).
/// Built by cairn, so it is always a path on this server: never `//host`, never a line
/// break.
pub fn first_visit_location(path: &str, query: &HashMap<String, String>) -> String {
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_encode)
        .collect();
    let mut out = format!("/{}", segments.join("/"));
    let mut keys: Vec<&String> = query.keys().filter(|k| *k != "token").collect();
    keys.sort();
    for (i, k) in keys.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&format!(
            "{}={}",
            percent_encode(k),
            percent_encode(&query[*k])
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_forms_and_urls() {
        let f = parse_form("q=a+b%20c&x=%3Cs%3E&bad=%zz&empty=");
        assert_eq!(f["q"], "a b c");
        assert_eq!(f["x"], "<s>");
        assert_eq!(f["bad"], "%zz");
        assert_eq!(f["empty"], "");
        let (path, q) = split_url("/memory/S3?token=abc");
        assert_eq!(path, "/memory/S3");
        assert_eq!(q["token"], "abc");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("a%4"), "a%4");
        assert_eq!(percent_encode("a b/é"), "a%20b%2F%C3%A9");
    }

    #[test]
    fn the_first_visit_goes_to_a_path_cairn_built() {
        let check = |target: &str, want: &str| {
            let (path, query) = split_url(target);
            assert_eq!(first_visit_location(&path, &query), want, "{target}");
        };
        check("/?token=T", "/");
        check(
            "/%0d%0aX-Injected:%20yes?token=T",
            "/%0D%0AX-Injected%3A%20yes",
        );
        check("//evil.example/?token=T", "/evil.example");
        check("/\\evil.example?token=T", "/%5Cevil.example");
        check(
            "/search?q=a+b&token=T&project=x",
            "/search?project=x&q=a%20b",
        );
        check("/session/s%2F2?token=T", "/session/s/2");
    }

    #[test]
    fn checks_hosts_origins_and_secrets() {
        let lo = Ipv4Addr::LOCALHOST;
        let own = Ipv4Addr::new(127, 9, 8, 7);
        assert!(allowed_host(Some("127.0.0.1:80"), lo, 80));
        assert!(allowed_host(Some("localhost:80"), lo, 80));
        assert!(allowed_host(Some("127.9.8.7:80"), own, 80));
        assert!(!allowed_host(Some("127.0.0.1:80"), own, 80));
        assert!(!allowed_host(Some("localhost:80"), own, 80));
        assert!(!allowed_host(Some("evil.example:80"), lo, 80));
        assert!(!allowed_host(Some("127.0.0.1:81"), lo, 80));
        assert!(!allowed_host(None, lo, 80));
        assert!(allowed_origin(None, None, lo, 80));
        assert!(allowed_origin(
            Some("http://127.0.0.1:80"),
            Some("same-origin"),
            lo,
            80
        ));
        assert!(allowed_origin(Some("http://127.9.8.7:80"), None, own, 80));
        assert!(!allowed_origin(Some("http://127.0.0.1:80"), None, own, 80));
        assert!(!allowed_origin(Some("http://evil.example"), None, lo, 80));
        assert!(!allowed_origin(None, Some("cross-site"), lo, 80));
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert_eq!(cookie("a=1; cairn_9=xyz", "cairn_9"), Some("xyz"));
        assert_eq!(cookie("a=1", "cairn_9"), None);
        assert_eq!(secret().expect("random").len(), 32);
    }
}
