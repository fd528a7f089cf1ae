//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka serves them: the server side
//! of the exchange, and the credentials Kafka stores (salt, StoredKey, ServerKey, iterations;
//! never the password), with ring's PBKDF2, HMAC and SHA-2.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::{digest, hmac, pbkdf2};

/// Kafka's bounds on a credential's iteration count (`ScramMechanism.minIterations`, and the
/// most AlterUserScramCredentials accepts).
pub const MIN_ITERATIONS: i32 = 4096;
pub const MAX_ITERATIONS: i32 = 16384;

/// One SCRAM mechanism; its wire number is Kafka's `ScramMechanism.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mechanism's number in DescribeUserScramCredentials and AlterUserScramCredentials.
    pub fn wire(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_wire(n: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.wire() == n)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        }
    }

    /// The hash's output length: the salted password's.
    pub fn hash_len(self) -> usize {
        self.digest().output_len()
    }

    pub(crate) fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data).as_ref().to_vec()
    }

    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    /// Hi(password, salt, iterations) of RFC 5802: PBKDF2 with the mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: i32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
        let rounds = u32::try_from(iterations)
            .ok()
            .and_then(NonZeroU32::new)
            .unwrap_or(NonZeroU32::MIN);
        pbkdf2::derive(self.pbkdf2(), rounds, salt, password, &mut out);
        out
    }
}

/// What the broker keeps of a user's SCRAM password (Kafka's `ScramCredential`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl ScramCredential {
    /// The credential from a salted password, as AlterUserScramCredentials sends it.
    pub fn from_salted(mechanism: ScramMechanism, salt: &[u8], salted: &[u8], iterations: i32) -> ScramCredential {
        let client_key = mechanism.mac(salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.mac(salted, b"Server Key"),
            iterations,
        }
    }

    /// The credential of a password (tests, and `sluice format --add-scram`).
    pub fn from_password(mechanism: ScramMechanism, password: &str, salt: &[u8], iterations: i32) -> ScramCredential {
        let salted = mechanism.salted_password(password.as_bytes(), salt, iterations);
        ScramCredential::from_salted(mechanism, salt, &salted, iterations)
    }
}

/// Equal bytes, in time that does not depend on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Kafka's answer to every bad credential, unknown user or wrong proof alike.
pub const INVALID_CREDENTIALS: &str =
    "Authentication failed during authentication due to invalid credentials with SASL mechanism";

/// The server side of one SCRAM exchange: client-first → server-first, client-final →
/// server-final (with the ServerSignature), or a failure.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
    state: State,
}

#[derive(Debug)]
enum State {
    First,
    Final {
        user: String,
        gs2_header: String,
        client_first_bare: String,
        server_first: String,
        nonce: String,
        credential: ScramCredential,
    },
    Done,
}

/// One step's result.
#[derive(Debug, PartialEq, Eq)]
pub enum ScramStep {
    Challenge(Vec<u8>),
    Complete { user: String, server_final: Vec<u8> },
    Failed(String),
}

/// The RFC 5802 `saslname` as a user name: `=2C` is ',' and `=3D` is '='; any other '=' is
/// malformed.
fn decode_saslname(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// A printable nonce without ',' (RFC 5802's `printable`), from the system's random source.
fn server_nonce() -> Result<String, String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "no random source for the SCRAM nonce".to_string())?;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    Ok(bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect())
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer {
            mechanism,
            state: State::First,
        }
    }

    /// The next step; `lookup` finds a user's credential for this mechanism.
    pub fn step(&mut self, message: &[u8], lookup: impl Fn(&str) -> Option<ScramCredential>) -> ScramStep {
        let state = std::mem::replace(&mut self.state, State::Done);
        let Ok(text) = std::str::from_utf8(message) else {
            return ScramStep::Failed("SCRAM message is not UTF-8".into());
        };
        match state {
            State::First => self.first(text, lookup),
            State::Final {
                user,
                gs2_header,
                client_first_bare,
                server_first,
                nonce,
                credential,
            } => {
                let outcome = self.last(
                    text,
                    &gs2_header,
                    &client_first_bare,
                    &server_first,
                    &nonce,
                    &credential,
                );
                match outcome {
                    Ok(server_final) => ScramStep::Complete { user, server_final },
                    Err(e) => ScramStep::Failed(e),
                }
            }
            State::Done => ScramStep::Failed("SCRAM exchange already finished".into()),
        }
    }

    /// `n,[a=authzid],n=user,r=nonce[,ext...]`.
    fn first(&mut self, text: &str, lookup: impl Fn(&str) -> Option<ScramCredential>) -> ScramStep {
        let fail = |m: &str| ScramStep::Failed(format!("Invalid SCRAM client first message: {m}"));
        let Some(rest) = text.strip_prefix("n,") else {
            return fail("only the gs2 header 'n' (no channel binding) is served");
        };
        let Some((authzid, bare)) = rest.split_once(',') else {
            return fail("no gs2 header");
        };
        let authzid = match authzid {
            "" => None,
            a => match a.strip_prefix("a=").and_then(decode_saslname) {
                Some(a) => Some(a),
                None => return fail("bad authorization id"),
            },
        };
        let mut fields = bare.split(',');
        let (Some(user), Some(nonce)) = (
            fields.next().and_then(|f| f.strip_prefix("n=")),
            fields.next().and_then(|f| f.strip_prefix("r=")),
        ) else {
            return fail("expected n=user,r=nonce");
        };
        let Some(user) = decode_saslname(user) else {
            return fail("bad user name encoding");
        };
        if nonce.is_empty() || nonce.contains(|c: char| !c.is_ascii_graphic()) {
            return fail("bad nonce");
        }
        // Extensions: Kafka's only one is tokenauth (delegation tokens), not served here.
        if fields.any(|f| f.starts_with("tokenauth=")) {
            return ScramStep::Failed("Authentication failed: delegation tokens are not served".into());
        }
        if authzid.as_ref().is_some_and(|a| *a != user) {
            return ScramStep::Failed(
                "Authentication failed: Client requested an authorization id that is different from username".into(),
            );
        }
        let Some(credential) = lookup(&user) else {
            return ScramStep::Failed(format!("{INVALID_CREDENTIALS} {}", self.mechanism.name()));
        };
        let server_nonce = match server_nonce() {
            Ok(n) => n,
            Err(e) => return ScramStep::Failed(e),
        };
        let nonce = format!("{nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&credential.salt),
            credential.iterations
        );
        let gs2_header = text[..text.len() - bare.len()].to_string();
        let challenge = server_first.clone().into_bytes();
        self.state = State::Final {
            user,
            gs2_header,
            client_first_bare: bare.to_string(),
            server_first,
            nonce,
            credential,
        };
        ScramStep::Challenge(challenge)
    }

    /// `c=channel-binding,r=nonce[,ext...],p=proof`: the proof checked against StoredKey.
    fn last(
        &self,
        text: &str,
        gs2_header: &str,
        client_first_bare: &str,
        server_first: &str,
        nonce: &str,
        credential: &ScramCredential,
    ) -> Result<Vec<u8>, String> {
        let invalid = || format!("{INVALID_CREDENTIALS} {}", self.mechanism.name());
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| "Invalid SCRAM client final message: no proof".to_string())?;
        let mut fields = without_proof.split(',');
        let binding = fields.next().and_then(|f| f.strip_prefix("c="));
        let got_nonce = fields.next().and_then(|f| f.strip_prefix("r="));
        if binding.and_then(|b| STANDARD.decode(b).ok()).as_deref() != Some(gs2_header.as_bytes()) {
            return Err("Invalid SCRAM client final message: channel binding does not match".into());
        }
        // Kafka's ScramSaslServer checks that the nonce ends with the server's: librdkafka
        // (at least to 2.x) sends its own nonce again in front of the combined one.
        if !got_nonce.is_some_and(|n| n.ends_with(nonce)) {
            return Err("Invalid client nonce in the final client message.".into());
        }
        let proof = STANDARD.decode(proof).map_err(|_| invalid())?;
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = self.mechanism.mac(&credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(invalid());
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&self.mechanism.hash(&client_key), &credential.stored_key) {
            return Err(invalid());
        }
        let server_signature = self.mechanism.mac(&credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(server_signature)).into_bytes())
    }
}

/// The client side, as a Kafka client runs it: for tests (unit and protocol-tests).
#[doc(hidden)]
pub mod client {
    use super::*;

    pub fn first(user: &str, nonce: &str) -> String {
        format!("n,,n={user},r={nonce}")
    }

    /// The client-final message answering `server_first`, for `password` (empty when
    /// `server_first` is not one a client accepts).
    pub fn last(mechanism: ScramMechanism, password: &str, client_first: &str, server_first: &str) -> String {
        let bare = client_first.strip_prefix("n,,").unwrap_or(client_first);
        let nonce = bare.rsplit("r=").next().unwrap_or_default();
        crate::sasl::client::scram_final(mechanism, password, bare, nonce, server_first)
            .map(|(message, _)| message)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7677_example_verifies() {
        // RFC 7677 section 3: user "user", password "pencil".
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::from_password(ScramMechanism::Sha256, "pencil", &salt, 4096);
        let server = ScramServer::new(ScramMechanism::Sha256);
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        let v = server
            .last(
                client_final,
                "n,,",
                "n=user,r=rOprNGfwEbeRWgbNEkqO",
                server_first,
                "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
                &credential,
            )
            .unwrap();
        assert_eq!(v, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn an_exchange_completes_with_the_password_and_fails_without_it() {
        for mechanism in ScramMechanism::ALL {
            let credential = ScramCredential::from_password(mechanism, "alice-secret", b"salty", 4096);
            let lookup = |u: &str| (u == "alice").then(|| credential.clone());
            for (password, ok) in [("alice-secret", true), ("wrong", false)] {
                let mut server = ScramServer::new(mechanism);
                let first = client::first("alice", "abc123");
                let ScramStep::Challenge(server_first) = server.step(first.as_bytes(), lookup) else {
                    panic!("no challenge");
                };
                let server_first = String::from_utf8(server_first).unwrap();
                assert!(server_first.starts_with("r=abc123"), "{server_first}");
                let last = client::last(mechanism, password, &first, &server_first);
                match server.step(last.as_bytes(), lookup) {
                    ScramStep::Complete { user, server_final } => {
                        assert!(ok);
                        assert_eq!(user, "alice");
                        assert!(server_final.starts_with(b"v="));
                    }
                    ScramStep::Failed(m) => {
                        assert!(!ok);
                        assert!(m.contains("invalid credentials"), "{m}");
                    }
                    ScramStep::Challenge(_) => panic!("a third step"),
                }
            }
            let mut server = ScramServer::new(mechanism);
            assert!(matches!(
                server.step(client::first("bob", "n").as_bytes(), lookup),
                ScramStep::Failed(_)
            ));
        }
    }

    #[test]
    fn malformed_first_messages_fail() {
        let lookup = |_: &str| Some(ScramCredential::from_password(ScramMechanism::Sha256, "p", b"s", 4096));
        for bad in [
            "",
            "y,,n=a,r=b",
            "n,,r=b",
            "n,,n=a",
            "n,,n=a=x,r=b",
            "n,a=b,n=a,r=c",
            "n,,n=a,r=b,tokenauth=true",
        ] {
            let mut server = ScramServer::new(ScramMechanism::Sha256);
            assert!(
                matches!(server.step(bad.as_bytes(), lookup), ScramStep::Failed(_)),
                "{bad}"
            );
        }
        assert_eq!(decode_saslname("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
    }
}
