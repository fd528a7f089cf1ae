//! TLS for listeners mapped to SSL (issue 13), with rustls: Kafka's PEM keystores and
//! truststores (`ssl.keystore.type=PEM`), each key overridable per listener
//! (`listener.name.<listener>.ssl.*`).
//!
//! - The server's key and certificate chain: `ssl.keystore.location` (one PEM file holding the
//!   private key and the chain, leaf first, as Kafka's PEM keystore file), or the PEM text
//!   itself in `ssl.keystore.certificate.chain` and `ssl.keystore.key`.
//! - Client certificates (`ssl.client.auth`: `required`, `requested`, `none`, Kafka's default)
//!   are checked against `ssl.truststore.location` (a PEM file of CA certificates) or
//!   `ssl.truststore.certificates` (the PEM text).
//! - `ssl.enabled.protocols`: TLSv1.2 and TLSv1.3 (rustls serves nothing older).
//!
//! Everything is read and checked when the broker starts: a missing or unreadable file, a file
//! without a key or a certificate, a key that does not match its certificate, a certificate
//! outside its validity period, a truststore without a CA: start-up stops with a message naming
//! the key and the file. A client whose handshake fails is closed by itself (`server`), within
//! `HANDSHAKE_TIMEOUT`.
//!
//! On an SSL listener a client's principal comes from its certificate (`principal`:
//! `ssl.principal.mapping.rules`); on SASL_SSL from SASL.
//!
//! Not yet: encrypted keys, JKS/PKCS12 stores, reloading certificates.

pub mod principal;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::BrokerConfig;

/// A TLS handshake that takes longer is abandoned (Kafka bounds it by the connection's idle
/// time; a client that connects and sends nothing must not hold a slot for ten minutes).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an SSL listener cannot be served, naming the key (and file) at fault.
#[derive(Debug, thiserror::Error)]
#[error("listener {listener}: {key}: {problem}")]
pub struct TlsError {
    pub listener: String,
    pub key: &'static str,
    pub problem: String,
}

/// What an SSL or SASL_SSL listener's connections start with: the TLS acceptor and, on an SSL
/// listener, how a client certificate's subject becomes the principal.
pub struct TlsListener {
    pub acceptor: TlsAcceptor,
    pub principals: Option<principal::PrincipalMapper>,
}

impl TlsListener {
    /// The principal a completed handshake gives (Kafka's DefaultKafkaPrincipalBuilder on an
    /// SSL listener): Ok(None) for none (no client certificate, or SASL names it), Ok(Some)
    /// for `User:` and the mapped subject, Err(the subject) when no mapping rule applies (the
    /// connection is then closed, as in Kafka).
    pub fn principal(&self, connection: &rustls::ServerConnection) -> Result<Option<String>, Option<String>> {
        let certificate = connection.peer_certificates().and_then(|c| c.first());
        let (Some(mapper), Some(certificate)) = (&self.principals, certificate) else {
            return Ok(None);
        };
        let dn = principal::subject_dn(certificate);
        match dn.as_deref().and_then(|dn| mapper.name(dn)) {
            Some(name) => Ok(Some(format!("User:{name}"))),
            None => Err(dn),
        }
    }
}

/// Listener `listener`'s TLS; `sasl` when SASL names its principals (SASL_SSL).
pub fn listener(config: &BrokerConfig, listener: &str, sasl: bool) -> Result<TlsListener, TlsError> {
    let principals = match sasl {
        true => None,
        false => {
            let rules = config
                .ssl_setting(listener, "ssl.principal.mapping.rules")
                .unwrap_or(principal::DEFAULT_RULES);
            Some(principal::PrincipalMapper::parse(rules).map_err(|problem| TlsError {
                listener: listener.to_string(),
                key: "ssl.principal.mapping.rules",
                problem,
            })?)
        }
    };
    Ok(TlsListener {
        acceptor: acceptor(config, listener)?,
        principals,
    })
}

/// The acceptor of SSL listener `listener`, from its TLS keys.
pub fn acceptor(config: &BrokerConfig, listener: &str) -> Result<TlsAcceptor, TlsError> {
    server_config(config, listener, UnixTime::now()).map(|c| TlsAcceptor::from(Arc::new(c)))
}

/// How this node dials a TLS listener of another node (`listener`: the inter-broker or the
/// controller listener), as Kafka's brokers do with that listener's keys: the peer's
/// certificate must chain to the listener's truststore and, unless
/// `ssl.endpoint.identification.algorithm` is empty, name the host dialled; this node shows its
/// own keystore's certificate (for a peer that requires client certificates).
pub fn connector(config: &BrokerConfig, listener: &str) -> Result<TlsConnector, TlsError> {
    let fail = |key: &'static str, problem: String| TlsError {
        listener: listener.to_string(),
        key,
        problem,
    };
    if config.ssl_setting(listener, "ssl.truststore.location").is_none()
        && config.ssl_setting(listener, "ssl.truststore.certificates").is_none()
    {
        return Err(fail(
            "ssl.truststore.location",
            "this node dials other nodes on this listener: set ssl.truststore.location (or \
             ssl.truststore.certificates) to the CA that signed their certificates"
                .into(),
        ));
    }
    let roots = Arc::new(truststore(config, listener)?);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| fail("ssl.truststore.location", e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = match config.ssl_endpoint_identification(listener) {
        true => verifier,
        false => Arc::new(AnyName(verifier)),
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(config, listener))
        .map_err(|e| fail("ssl.enabled.protocols", e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let has_keystore = config.ssl_setting(listener, "ssl.keystore.location").is_some()
        || config.ssl_setting(listener, "ssl.keystore.certificate.chain").is_some();
    let client = match has_keystore {
        true => {
            let (chain, key, from) = keystore(config, listener, UnixTime::now())?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                fail(
                    from.0,
                    format!("{}: the key and the certificate do not go together: {e}", from.1),
                )
            })?
        }
        false => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(client)))
}

/// A server verifier that checks the chain, dates and signatures but not the name
/// (`ssl.endpoint.identification.algorithm=`, as Kafka allows for peers dialled by address).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Listener `listener`'s own key and certificate chain (its keystore), with the key and the
/// file (or "the PEM text") they came from, the leaf checked against `now`.
type Keystore = (
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
    (&'static str, String),
);

fn keystore(config: &BrokerConfig, listener: &str, now: UnixTime) -> Result<Keystore, TlsError> {
    let fail = |key: &'static str, problem: String| TlsError {
        listener: listener.to_string(),
        key,
        problem,
    };
    let setting = |key| config.ssl_setting(listener, key);
    let (chain, key, from) = match setting("ssl.keystore.location") {
        Some(path) => {
            let path = Path::new(path.trim());
            let named = |what: String| fail("ssl.keystore.location", format!("{}: {what}", path.display()));
            let bytes = std::fs::read(path).map_err(|e| named(format!("cannot read it: {e}")))?;
            let chain = certificates(&bytes).map_err(named)?;
            let key = private_key(&bytes).map_err(named)?;
            (chain, key, ("ssl.keystore.location", path.display().to_string()))
        }
        None => {
            let chain_text = setting("ssl.keystore.certificate.chain").unwrap_or_default();
            let chain = certificates(chain_text.as_bytes()).map_err(|e| fail("ssl.keystore.certificate.chain", e))?;
            let key_text = setting("ssl.keystore.key").ok_or_else(|| {
                fail(
                    "ssl.keystore.key",
                    "ssl.keystore.certificate.chain is set: its private key is needed too".into(),
                )
            })?;
            let key = private_key(key_text.as_bytes()).map_err(|e| fail("ssl.keystore.key", e))?;
            (
                chain,
                key,
                ("ssl.keystore.certificate.chain", "the PEM text".to_string()),
            )
        }
    };
    // rustls checks dates only against a peer's chain: a server whose own certificate expired
    // would start and fail every handshake, so it is checked here.
    if let Some(leaf) = chain.first() {
        check_validity(leaf, now).map_err(|e| fail(from.0, format!("{}: {e}", from.1)))?;
    }
    Ok((chain, key, from))
}

/// The TLS versions `ssl.enabled.protocols` (or `ssl.protocol`) allows on listener `listener`.
fn versions(config: &BrokerConfig, listener: &str) -> Vec<&'static rustls::SupportedProtocolVersion> {
    let setting = |key| config.ssl_setting(listener, key);
    let listed: Vec<&str> = setting("ssl.enabled.protocols")
        .or(setting("ssl.protocol"))
        .map(|list| list.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let wants = |version: &str| listed.is_empty() || listed.iter().any(|p| *p == version || *p == "TLS");
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    if wants("TLSv1.3") {
        versions.push(&rustls::version::TLS13);
    }
    if wants("TLSv1.2") {
        versions.push(&rustls::version::TLS12);
    }
    versions
}

fn server_config(config: &BrokerConfig, listener: &str, now: UnixTime) -> Result<ServerConfig, TlsError> {
    let fail = |key: &'static str, problem: String| TlsError {
        listener: listener.to_string(),
        key,
        problem,
    };
    let setting = |key| config.ssl_setting(listener, key);
    let (chain, key, from) = keystore(config, listener, now)?;
    let versions = versions(config, listener);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| fail("ssl.enabled.protocols", e.to_string()))?;
    let client_auth = setting("ssl.client.auth").unwrap_or("none");
    let builder = match client_auth {
        "required" | "requested" => {
            let roots = truststore(config, listener)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match client_auth {
                "requested" => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| fail("ssl.truststore.location", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut server = builder.with_single_cert(chain, key).map_err(|e| {
        fail(
            from.0,
            format!("{}: the key and the certificate do not go together: {e}", from.1),
        )
    })?;
    server.alpn_protocols.clear();
    Ok(server)
}

/// The CA certificates client certificates must chain to.
fn truststore(config: &BrokerConfig, listener: &str) -> Result<RootCertStore, TlsError> {
    let fail = |key: &'static str, problem: String| TlsError {
        listener: listener.to_string(),
        key,
        problem,
    };
    let (bytes, key, from) = match config.ssl_setting(listener, "ssl.truststore.location") {
        Some(path) => {
            let path = Path::new(path.trim());
            let bytes = std::fs::read(path).map_err(|e| {
                fail(
                    "ssl.truststore.location",
                    format!("{}: cannot read it: {e}", path.display()),
                )
            })?;
            (bytes, "ssl.truststore.location", path.display().to_string())
        }
        None => {
            let text = config
                .ssl_setting(listener, "ssl.truststore.certificates")
                .unwrap_or_default();
            (
                text.as_bytes().to_vec(),
                "ssl.truststore.certificates",
                "the PEM text".to_string(),
            )
        }
    };
    let mut roots = RootCertStore::empty();
    for cert in certificates(&bytes).map_err(|e| fail(key, format!("{from}: {e}")))? {
        roots
            .add(cert)
            .map_err(|e| fail(key, format!("{from}: not a CA certificate rustls accepts: {e}")))?;
    }
    Ok(roots)
}

/// Every certificate of a PEM text, at least one.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("holds no certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certs)
}

/// The one private key of a PEM text (PKCS#8, PKCS#1 or SEC1; unencrypted).
fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    if pem.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err("the private key is encrypted: give it unencrypted (ssl.key.password is not served)".into());
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("no usable private key: {e}"))
}

/// Whether `now` lies in the certificate's validity period (read from its DER: notBefore and
/// notAfter of the TBSCertificate's Validity).
fn check_validity(cert: &CertificateDer<'_>, now: UnixTime) -> Result<(), String> {
    let (not_before, not_after) = validity(cert.as_ref()).ok_or("its certificate cannot be parsed")?;
    let now = now.as_secs();
    if now < not_before {
        return Err(format!(
            "its certificate is not valid yet (from {not_before} s after the epoch)"
        ));
    }
    if now > not_after {
        return Err(format!("its certificate expired ({not_after} s after the epoch)"));
    }
    Ok(())
}

/// One DER element at the start of `der`: its tag, its contents and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[count..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The fields of an X.509 certificate's TBSCertificate from its serialNumber on (the optional
/// [0] version skipped): serialNumber, signature, issuer, validity, subject, ...
fn tbs_fields(der: &[u8]) -> Option<&[u8]> {
    let (_, certificate, _) = element(der)?;
    let (_, tbs, _) = element(certificate)?;
    let (tag, _, after) = element(tbs)?;
    Some(if tag == 0xa0 { after } else { tbs })
}

/// The validity period of an X.509 certificate, in seconds since the epoch.
fn validity(der: &[u8]) -> Option<(u64, u64)> {
    let mut rest = tbs_fields(der)?;
    // serialNumber, signature, issuer, then validity.
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (_, validity, _) = element(rest)?;
    let (tag_before, before, after) = element(validity)?;
    let (tag_after, not_after, _) = element(after)?;
    Some((asn1_time(tag_before, before)?, asn1_time(tag_after, not_after)?))
}

/// UTCTime (tag 23, YYMMDDHHMMSSZ) or GeneralizedTime (tag 24, YYYYMMDDHHMMSSZ) as seconds.
fn asn1_time(tag: u8, text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        23 => {
            let yy: u64 = text.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, text.get(2..)?)
        }
        24 => (text.get(..4)?.parse().ok()?, text.get(4..)?),
        _ => return None,
    };
    let field = |at: usize| -> Option<u64> { rest.get(at..at + 2)?.parse().ok() };
    let (month, day, hour, minute, second) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || day == 0 || day > 31 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), year >= 1970.
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asn1_times_are_read_as_seconds_since_the_epoch() {
        assert_eq!(asn1_time(23, b"700101000000Z"), Some(0));
        assert_eq!(asn1_time(23, b"260101000000Z"), Some(1_767_225_600));
        assert_eq!(asn1_time(24, b"20260101000000Z"), Some(1_767_225_600));
        assert_eq!(asn1_time(24, b"99991231235959Z"), Some(253_402_300_799));
        assert_eq!(asn1_time(23, b"2601010000Z"), None);
        assert_eq!(asn1_time(23, b"261301000000Z"), None);
        assert_eq!(asn1_time(4, b"260101000000Z"), None);
    }

    #[test]
    fn a_certificate_outside_its_validity_is_refused() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let der = CertificateDer::from(cert.der().to_vec());
        assert_eq!(validity(&der), Some((1_577_836_800, 1_609_459_200)));
        let inside = UnixTime::since_unix_epoch(Duration::from_secs(1_600_000_000));
        let after = UnixTime::since_unix_epoch(Duration::from_secs(1_700_000_000));
        assert!(check_validity(&der, inside).is_ok());
        assert!(check_validity(&der, after).unwrap_err().contains("expired"));
        assert!(validity(b"\x30\x03\x02\x01").is_none(), "garbage is no certificate");
    }
}
