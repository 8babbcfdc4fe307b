//! TLS to the server as libpq reads a URL's `sslmode` and `sslrootcert`, which the driver
//! knows only as disable, prefer and require, always checking the certificate against
//! Mozilla's roots: a self-signed server (Debian's default with `ssl = on`) could not be
//! reached at all.
//!
//! - `disable`: plain TCP.
//! - `allow`, `prefer` (the default): TLS when the server offers it, the certificate not
//!   checked.
//! - `require`: TLS, the certificate not checked, unless roots are named (`sslrootcert`)
//!   or `~/.postgresql/root.crt` is there: then as `verify-ca`.
//! - `verify-ca`: the certificate must chain to a root of that file (`sslrootcert=system`,
//!   or no file: Mozilla's roots), whatever name it carries.
//! - `verify-full`: that, and the certificate must name the host.
//!
//! A certificate that is itself one of the root file's (a self-signed one, which `openssl
//! req -x509` marks as a CA, named as its own root) is trusted as itself, as psql does.
//!
//! An unchecked certificate keeps what is sent from passive eyes, not from a man in the
//! middle. Memories are sealed before they leave (`crypto`), so what such a man could take
//! is the login: with SCRAM (PostgreSQL's default) not even the password.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::text::percent_decode_uri;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Encrypted, the certificate not checked.
    Nothing,
    /// It chains to a trusted root; any name.
    Chain,
    /// It chains to a trusted root and names the host.
    Full,
}

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// Mozilla's, built in (`webpki-roots`).
    Mozilla,
    /// A PEM file of the URL's `sslrootcert`, or `~/.postgresql/root.crt`.
    File(PathBuf),
}

/// What a URL asks of TLS beyond the driver's sslmode (disable, prefer or require, which
/// the driver is told).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub check: Check,
    pub roots: Roots,
}

/// Takes `sslmode` and `sslrootcert` out of a connection string (a `postgres://` URL or
/// `key=value` pairs); returns the string for the driver, with an sslmode it knows, and
/// what TLS is to check.
pub fn take(text: &str) -> Result<(String, Tls), String> {
    let default_root = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
        .filter(|p| p.is_file());
    take_with(text, default_root)
}

/// [`take`], with libpq's default root file (`~/.postgresql/root.crt`) when it is there.
fn take_with(text: &str, default_root: Option<PathBuf>) -> Result<(String, Tls), String> {
    let text = text.trim();
    let query = url_query(text);
    if query.is_none() && (text.contains("://") || !text.contains('=')) {
        return Err(
            "a sync URL looks like postgres://user@host:5432/dbname (or key=value pairs)".into(),
        );
    }
    let (rest, mode, root) = match query {
        Some(at) => take_from_url(text, at),
        None => take_from_pairs(text)?,
    };
    let roots = match root.as_deref() {
        Some("system") => Roots::Mozilla,
        Some(path) => Roots::File(PathBuf::from(path)),
        None => default_root.map_or(Roots::Mozilla, Roots::File),
    };
    // Roots named (`system` too) or a root file there: `require` checks the chain.
    let has_file = root.is_some() || matches!(roots, Roots::File(_));
    let (driver, check) = match mode.as_deref().unwrap_or("prefer") {
        "disable" => ("disable", Check::Nothing),
        "allow" | "prefer" => ("prefer", Check::Nothing),
        "require" if has_file => ("require", Check::Chain),
        "require" => ("require", Check::Nothing),
        "verify-ca" => ("require", Check::Chain),
        "verify-full" => ("require", Check::Full),
        other => {
            return Err(format!(
                "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
            ));
        }
    };
    let rest = with_mode(&rest, driver, query.is_some());
    Ok((rest, Tls { check, roots }))
}

/// Where the query of a `postgres://` URL starts (its length when it has none).
fn url_query(text: &str) -> Option<usize> {
    (text.starts_with("postgres://") || text.starts_with("postgresql://"))
        .then(|| text.find('?').unwrap_or(text.len()))
}

fn take_from_url(text: &str, at: usize) -> (String, Option<String>, Option<String>) {
    let (mut mode, mut root) = (None, None);
    let kept: Vec<&str> = text
        .get(at + 1..)
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match percent_decode_uri(k).as_str() {
                "sslmode" => mode = Some(percent_decode_uri(v)),
                "sslrootcert" => root = Some(percent_decode_uri(v)),
                _ => return true,
            }
            false
        })
        .collect();
    let mut rest = text[..at].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    (rest, mode, root)
}

fn take_from_pairs(text: &str) -> Result<(String, Option<String>, Option<String>), String> {
    let (mut mode, mut root, mut kept) = (None, None, Vec::new());
    for (k, v) in pairs(text)? {
        match k.as_str() {
            "sslmode" => mode = Some(v),
            "sslrootcert" => root = Some(v),
            _ => kept.push(format!(
                "{k}='{}'",
                v.replace('\\', "\\\\").replace('\'', "\\'")
            )),
        }
    }
    Ok((kept.join(" "), mode, root))
}

/// The string with the driver's `sslmode` added.
fn with_mode(rest: &str, mode: &str, url: bool) -> String {
    match (url, rest.contains('?')) {
        (true, true) => format!("{rest}&sslmode={mode}"),
        (true, false) => format!("{rest}?sslmode={mode}"),
        (false, _) if rest.is_empty() => format!("sslmode={mode}"),
        (false, _) => format!("{rest} sslmode={mode}"),
    }
}

/// The `key=value` pairs of a libpq connection string (values plain, or in single quotes
/// with `\'` and `\\`).
fn pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("`{key}` has no `=value`"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let quoted = chars.next_if_eq(&'\'').is_some();
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => value.extend(chars.next()),
                Some('\'') if quoted => break,
                Some(c) if !quoted && c.is_whitespace() => break,
                Some(c) => value.push(c),
                None if quoted => return Err(format!("the value of `{key}` has no closing quote")),
                None => break,
            }
        }
        out.push((key, value));
    }
}

impl Tls {
    /// The connector the driver is given; an error when the root file cannot be read.
    pub fn connector(&self) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match self.check {
            Check::Nothing => Arc::new(Unchecked(provider.signature_verification_algorithms)),
            Check::Chain | Check::Full => {
                let (store, pinned) = self.roots()?;
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                        .build()
                        .map_err(|e| format!("no usable root certificate: {e}"))?;
                Arc::new(Rooted {
                    webpki,
                    names: self.check == Check::Full,
                    pinned,
                })
            }
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }

    /// The trusted roots, and the root file's certificates as they are (a self-signed
    /// server certificate named as its own root is trusted as itself).
    fn roots(&self) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), String> {
        let path = match &self.roots {
            Roots::Mozilla => {
                let store =
                    RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                return Ok((store, Vec::new()));
            }
            Roots::File(p) => p,
        };
        let unreadable = |e: &dyn std::fmt::Display| {
            format!(
                "cannot read the root certificates in {}: {e}",
                path.display()
            )
        };
        let mut store = RootCertStore::empty();
        let mut certs = Vec::new();
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
            let cert = cert.map_err(|e| unreadable(&e))?;
            store.add(cert.clone()).map_err(|e| unreadable(&e))?;
            certs.push(cert);
        }
        if store.is_empty() {
            return Err(unreadable(&"no certificate in it"));
        }
        Ok((store, certs))
    }
}

/// Takes any certificate, still checking that the server holds its key (the handshake's
/// signatures).
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// A certificate checked against the roots: its chain, and with `names` (`verify-full`)
/// the host's name too. A certificate that is itself one of the root file's (a self-signed
/// server certificate, which `openssl req -x509` marks as a CA, named as its own root as
/// psql allows) is trusted as itself, its name still checked with `names`.
#[derive(Debug)]
struct Rooted {
    webpki: Arc<WebPkiServerVerifier>,
    names: bool,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Rooted {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pinned
            .iter()
            .any(|p| p.as_ref() == end_entity.as_ref())
        {
            if self.names {
                let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
            }
            return Ok(ServerCertVerified::assertion());
        }
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(text: &str) -> (String, Check, Roots) {
        let (rest, tls) = take_with(text, None).expect(text);
        (rest, tls.check, tls.roots)
    }

    #[test]
    fn sslmode_and_sslrootcert_are_read_as_libpq_reads_them() {
        let (rest, check, roots) =
            taken("postgres://a@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&x=1");
        assert_eq!(rest, "postgres://a@h/db?x=1&sslmode=require");
        assert_eq!(check, Check::Full);
        assert_eq!(roots, Roots::File("/etc/ca.pem".into()));
        let (rest, check, _) = taken("postgresql://a@h/db?sslmode=require");
        assert_eq!(rest, "postgresql://a@h/db?sslmode=require");
        assert_eq!(check, Check::Nothing);
        let (rest, check, _) = taken("postgres://a@h/db");
        assert_eq!(
            (rest.as_str(), check),
            ("postgres://a@h/db?sslmode=prefer", Check::Nothing)
        );
        let (_, check, roots) = taken("postgres://a@h/db?sslmode=require&sslrootcert=system");
        assert_eq!((check, roots), (Check::Chain, Roots::Mozilla));
        let (_, check, _) = taken("postgres://a@h/db?sslmode=verify-ca");
        assert_eq!(check, Check::Chain);
        assert!(take("postgres://a@h/db?sslmode=sometimes").is_err());
        // libpq's own root file, when there, makes `require` check the chain.
        let home_root = PathBuf::from("/home/ann/.postgresql/root.crt");
        let (_, tls) =
            take_with("postgres://a@h/db?sslmode=require", Some(home_root.clone())).expect("url");
        assert_eq!(
            (tls.check, tls.roots),
            (Check::Chain, Roots::File(home_root))
        );
    }

    #[test]
    fn key_value_strings_keep_their_other_pairs_quoted() {
        let (rest, check, roots) =
            taken("host=db user=ann sslmode = verify-ca sslrootcert='/a b/ca.pem'");
        assert_eq!(check, Check::Chain);
        assert_eq!(roots, Roots::File("/a b/ca.pem".into()));
        assert_eq!(rest, "host='db' user='ann' sslmode=require");
        let (rest, _, _) = taken(r"host=db password='a\'b\\c'");
        assert_eq!(rest, r"host='db' password='a\'b\\c' sslmode=prefer");
        let parsed: postgres::Config = rest.parse().expect("the driver reads it");
        assert_eq!(parsed.get_password(), Some(&b"a'b\\c"[..]));
        assert!(take("host=db password='open").is_err());
        for not_a_url in ["http://example.org/", "cairn@db/mem", "mysql://a@b/c"] {
            let e = take(not_a_url).expect_err(not_a_url);
            assert!(e.contains("postgres://user@host"), "{e}");
        }
        assert!(take("host").is_err());
    }
}
