//! The client side of SASL, as this node runs it when it dials another node on a SASL listener
//! (`sasl.mechanism.inter.broker.protocol`, `sasl.mechanism.controller.protocol`), with the
//! `username` and `password` of the listener's JAAS line for that mechanism, as Kafka's
//! brokers log in:
//!
//! - PLAIN (RFC 4616): one message, `\0username\0password`;
//! - SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802): client-first, client-final, and the server's
//!   signature checked, so a node that does not know the password cannot pose as the peer;
//! - OAUTHBEARER (RFC 7628) with an unsecured JWT, as Kafka's `OAuthBearerLoginModule` makes
//!   one without a login callback handler: claims from `unsecuredLoginStringClaim_<name>` and
//!   `unsecuredLoginListClaim_<name>` (first character the separator), the principal claim
//!   (`unsecuredLoginPrincipalClaimName`, `sub`) required, `iat` now and `exp` after
//!   `unsecuredLoginLifetimeSeconds` (3600). For tests and development, as in Kafka.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::Mechanism;
use super::scram::{MIN_ITERATIONS, ScramMechanism};
use crate::config::{BrokerConfig, ConfigError};

/// How this node logs in to a SASL listener.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslLogin {
    pub mechanism: Mechanism,
    /// PLAIN and SCRAM: the user; OAUTHBEARER: the token's principal.
    pub username: String,
    pub password: String,
    /// OAUTHBEARER: the token's claims but `iat` and `exp`, and its lifetime.
    pub token: Option<UnsecuredToken>,
}

/// What an OAUTHBEARER login's unsecured JWT says, from its JAAS options.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UnsecuredToken {
    pub claims: serde_json::Map<String, serde_json::Value>,
    pub lifetime_secs: u64,
}

impl UnsecuredToken {
    /// From the options of `OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="..."`.
    pub fn from_options(options: &std::collections::BTreeMap<String, String>) -> Result<UnsecuredToken, String> {
        use serde_json::Value;
        let mut claims = serde_json::Map::new();
        for (key, value) in options {
            if let Some(name) = key.strip_prefix("unsecuredLoginStringClaim_") {
                claims.insert(name.to_string(), Value::String(value.clone()));
            } else if let Some(name) = key.strip_prefix("unsecuredLoginListClaim_") {
                // Kafka's form: the first character separates the items (",a,b").
                let mut chars = value.chars();
                let items = match chars.next() {
                    Some(separator) => chars
                        .as_str()
                        .split(separator)
                        .filter(|i| !i.is_empty())
                        .map(|i| Value::String(i.to_string()))
                        .collect(),
                    None => Vec::new(),
                };
                claims.insert(name.to_string(), Value::Array(items));
            }
        }
        for reserved in ["iat", "exp"] {
            if claims.contains_key(reserved) {
                return Err(format!("the {reserved} claim is set by the login, not by its options"));
            }
        }
        let principal_claim = options
            .get("unsecuredLoginPrincipalClaimName")
            .map_or("sub", |n| n.trim());
        match claims.get(principal_claim) {
            Some(Value::String(p)) if !p.trim().is_empty() => {}
            _ => {
                return Err(format!(
                    "unsecuredLoginStringClaim_{principal_claim} names no principal"
                ));
            }
        }
        let lifetime_secs = match options.get("unsecuredLoginLifetimeSeconds") {
            None => 3600,
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| format!("unsecuredLoginLifetimeSeconds={v:?} is not a number of seconds"))?,
        };
        Ok(UnsecuredToken { claims, lifetime_secs })
    }

    /// The client's initial response: `n,,\x01auth=Bearer <token>\x01\x01`, issued `now`.
    fn message(&self, now: std::time::SystemTime) -> Vec<u8> {
        let iat = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut claims = self.claims.clone();
        claims.insert("iat".into(), iat.into());
        claims.insert("exp".into(), iat.saturating_add(self.lifetime_secs).into());
        let token = super::oauthbearer::unsecured_token(&serde_json::Value::Object(claims));
        format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
    }
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl SaslLogin {
    /// The login to listener `listener` by the mechanism `mechanism_key` names (Kafka's default
    /// for both keys is GSSAPI, which is not served), from its JAAS line.
    pub fn from_config(
        config: &BrokerConfig,
        listener: &str,
        mechanism_key: &'static str,
        mechanism_name: &str,
    ) -> Result<SaslLogin, ConfigError> {
        let mechanism = Mechanism::from_name(mechanism_name.trim()).ok_or_else(|| ConfigError {
            key: mechanism_key.to_string(),
            reason: format!(
                "listener {listener} is SASL: this node logs in to it by {mechanism_name}, which it does not \
                 speak; set {mechanism_key} to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
            ),
        })?;
        let key = config.sasl_key_set(listener, Some(mechanism.name()), "sasl.jaas.config");
        let missing = |what: &str| ConfigError {
            key: key.clone(),
            reason: format!(
                "this node logs in to listener {listener} by {}: its JAAS line needs {what}",
                mechanism.name()
            ),
        };
        let text = config
            .sasl_setting(listener, Some(mechanism.name()), "sasl.jaas.config")
            .ok_or_else(|| missing("username=\"...\" password=\"...\""))?;
        let entry = super::jaas::parse(text).map_err(|reason| ConfigError {
            key: key.clone(),
            reason,
        })?;
        if mechanism == Mechanism::OAuthBearer {
            let token = UnsecuredToken::from_options(&entry.options).map_err(|reason| ConfigError {
                key: key.clone(),
                reason: format!("this node logs in to listener {listener} by OAUTHBEARER: {reason}"),
            })?;
            return Ok(SaslLogin {
                mechanism,
                username: String::new(),
                password: String::new(),
                token: Some(token),
            });
        }
        let username = entry
            .options
            .get("username")
            .cloned()
            .ok_or_else(|| missing("username"))?;
        let password = entry
            .options
            .get("password")
            .cloned()
            .ok_or_else(|| missing("password"))?;
        Ok(SaslLogin {
            mechanism,
            username,
            password,
            token: None,
        })
    }
}

enum State {
    Start,
    /// SCRAM: client-first sent.
    ScramFirst {
        mechanism: ScramMechanism,
        nonce: String,
        client_first_bare: String,
    },
    /// SCRAM: client-final sent; the server signature it must answer with.
    ScramFinal {
        server_signature: Vec<u8>,
    },
    /// OAUTHBEARER: the token sent; an empty answer accepts it, an error challenge refuses it.
    Bearer,
    Done,
}

/// One exchange: `start`, then `step` with each server message until it returns None.
pub struct SaslClient {
    login: SaslLogin,
    state: State,
}

impl SaslClient {
    pub fn new(login: SaslLogin) -> SaslClient {
        SaslClient {
            login,
            state: State::Start,
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.login.mechanism
    }

    /// The first client message.
    pub fn start(&mut self) -> Vec<u8> {
        match self.login.mechanism {
            Mechanism::Scram(mechanism) => {
                let nonce = nonce();
                let client_first_bare = format!("n={},r={nonce}", encode_saslname(&self.login.username));
                let message = format!("n,,{client_first_bare}");
                self.state = State::ScramFirst {
                    mechanism,
                    nonce,
                    client_first_bare,
                };
                message.into_bytes()
            }
            Mechanism::OAuthBearer => {
                self.state = State::Bearer;
                match &self.login.token {
                    Some(token) => token.message(std::time::SystemTime::now()),
                    // Not made by from_config: an empty token, which the server refuses.
                    None => b"n,,\x01auth=Bearer \x01\x01".to_vec(),
                }
            }
            Mechanism::Plain => {
                self.state = State::Done;
                let mut message = Vec::with_capacity(2 + self.login.username.len() + self.login.password.len());
                message.push(0);
                message.extend_from_slice(self.login.username.as_bytes());
                message.push(0);
                message.extend_from_slice(self.login.password.as_bytes());
                message
            }
        }
    }

    /// Whether the exchange has nothing more to send or check.
    pub fn done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// The answer to the server's message, or None once the exchange is complete on this side.
    pub fn step(&mut self, server: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Start => Err("the exchange has not started".into()),
            State::Done => Ok(None),
            State::ScramFirst {
                mechanism,
                nonce,
                client_first_bare,
            } => {
                let server_first = std::str::from_utf8(server).map_err(|_| "server-first is not UTF-8".to_string())?;
                let (message, server_signature) = scram_final(
                    mechanism,
                    &self.login.password,
                    &client_first_bare,
                    &nonce,
                    server_first,
                )?;
                self.state = State::ScramFinal { server_signature };
                Ok(Some(message.into_bytes()))
            }
            State::Bearer => match server.is_empty() {
                true => Ok(None),
                false => Err(format!(
                    "the server refused the token: {}",
                    String::from_utf8_lossy(server)
                )),
            },
            State::ScramFinal { server_signature } => {
                let text = std::str::from_utf8(server).map_err(|_| "server-final is not UTF-8".to_string())?;
                if let Some(e) = text.strip_prefix("e=") {
                    return Err(format!("the server refused: {e}"));
                }
                let verifier = text
                    .strip_prefix("v=")
                    .and_then(|v| STANDARD.decode(v).ok())
                    .ok_or_else(|| format!("malformed server-final message: {text}"))?;
                if !super::scram::constant_time_eq(&verifier, &server_signature) {
                    return Err("the server's signature is wrong: it does not know our credential".into());
                }
                Ok(None)
            }
        }
    }
}

/// SCRAM's client-final message answering `server_first` (which must extend `nonce`), and the
/// server signature the server-final must carry.
pub(crate) fn scram_final(
    mechanism: ScramMechanism,
    password: &str,
    client_first_bare: &str,
    nonce: &str,
    server_first: &str,
) -> Result<(String, Vec<u8>), String> {
    let (mut combined, mut salt, mut iterations) = (None, None, None);
    for field in server_first.split(',') {
        if let Some(v) = field.strip_prefix("r=") {
            combined = Some(v);
        } else if let Some(v) = field.strip_prefix("s=") {
            salt = STANDARD.decode(v).ok();
        } else if let Some(v) = field.strip_prefix("i=") {
            iterations = v.parse::<i32>().ok();
        }
    }
    let (Some(combined), Some(salt), Some(iterations)) = (combined, salt, iterations) else {
        return Err(format!("malformed server-first message: {server_first}"));
    };
    if !combined.starts_with(nonce) || combined.len() == nonce.len() {
        return Err("the server's nonce does not extend ours".into());
    }
    if iterations < MIN_ITERATIONS {
        return Err(format!(
            "{iterations} iterations, below the {MIN_ITERATIONS} SCRAM needs"
        ));
    }
    let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
    let client_key = mechanism.mac(&salted, b"Client Key");
    let stored_key = mechanism.hash(&client_key);
    let without_proof = format!("c={},r={combined}", STANDARD.encode("n,,"));
    let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = mechanism.mac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
    let server_key = mechanism.mac(&salted, b"Server Key");
    Ok((
        format!("{without_proof},p={}", STANDARD.encode(proof)),
        mechanism.mac(&server_key, auth_message.as_bytes()),
    ))
}

/// RFC 5802's saslname: `,` and `=` escaped.
fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// 24 random bytes, base64 (printable, no comma).
fn nonce() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 24];
    // SystemRandom reads the OS generator; it fails only where no generator exists at all.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sasl::scram::{ScramCredential, ScramServer, ScramStep};

    fn login(mechanism: Mechanism, password: &str) -> SaslLogin {
        SaslLogin {
            mechanism,
            username: "broker,1".into(),
            password: password.into(),
            token: None,
        }
    }

    /// Runs client and server to the end; the server knows "secret".
    fn exchange(mechanism: ScramMechanism, password: &str, server_password: &str) -> Result<String, String> {
        let credential = ScramCredential::from_password(mechanism, server_password, b"salty", 4096);
        let mut client = SaslClient::new(login(Mechanism::Scram(mechanism), password));
        let mut server = ScramServer::new(mechanism);
        let mut message = client.start();
        loop {
            match server.step(&message, |user| (user == "broker,1").then(|| credential.clone())) {
                ScramStep::Challenge(challenge) => match client.step(&challenge)? {
                    Some(next) => message = next,
                    None => return Err("client finished before the server".into()),
                },
                ScramStep::Complete { user, server_final } => {
                    assert_eq!(client.step(&server_final)?, None);
                    assert!(client.done());
                    return Ok(user);
                }
                ScramStep::Failed(e) => return Err(e),
            }
        }
    }

    #[test]
    fn scram_logs_in_with_the_right_password_only() {
        for mechanism in ScramMechanism::ALL {
            assert_eq!(exchange(mechanism, "secret", "secret").as_deref(), Ok("broker,1"));
            assert!(exchange(mechanism, "wrong", "secret").is_err());
        }
    }

    #[test]
    fn a_server_that_does_not_know_the_credential_is_not_believed() {
        let mechanism = ScramMechanism::Sha256;
        let mut client = SaslClient::new(login(Mechanism::Scram(mechanism), "secret"));
        let first = String::from_utf8(client.start()).unwrap();
        let nonce = first.rsplit("r=").next().unwrap();
        let server_first = format!("r={nonce}xyz,s={},i=4096", STANDARD.encode(b"salt"));
        assert!(client.step(server_first.as_bytes()).unwrap().is_some());
        let forged = format!("v={}", STANDARD.encode([0u8; 32]));
        assert!(client.step(forged.as_bytes()).unwrap_err().contains("signature"));
        // A nonce that is not ours, and too few iterations, are refused.
        let mut client = SaslClient::new(login(Mechanism::Scram(mechanism), "secret"));
        client.start();
        assert!(client.step(b"r=other,s=c2FsdA==,i=4096").is_err());
        let mut client = SaslClient::new(login(Mechanism::Scram(mechanism), "secret"));
        let first = String::from_utf8(client.start()).unwrap();
        let nonce = first.rsplit("r=").next().unwrap().to_string();
        assert!(client.step(format!("r={nonce}x,s=c2FsdA==,i=1").as_bytes()).is_err());
    }

    #[test]
    fn plain_is_one_message() {
        let mut client = SaslClient::new(login(Mechanism::Plain, "pw"));
        assert_eq!(client.start(), b"\0broker,1\0pw");
        assert!(client.done());
        assert_eq!(client.step(b""), Ok(None));
    }

    fn bearer(options: &[(&str, &str)]) -> Result<SaslLogin, String> {
        let options = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Ok(SaslLogin {
            mechanism: Mechanism::OAuthBearer,
            username: String::new(),
            password: String::new(),
            token: Some(UnsecuredToken::from_options(&options)?),
        })
    }

    #[test]
    fn an_unsecured_token_is_what_kafkas_validator_accepts() {
        use crate::sasl::oauthbearer::Validator;
        let login = bearer(&[
            ("unsecuredLoginStringClaim_sub", "broker"),
            ("unsecuredLoginListClaim_scope", ",inter,broker"),
            ("unsecuredLoginLifetimeSeconds", "600"),
        ])
        .unwrap();
        let mut client = SaslClient::new(login);
        let message = client.start();
        let options = [("unsecuredValidatorRequiredScope".to_string(), "inter".to_string())].into();
        let validator = Validator::from_options(&options).unwrap();
        let accepted = validator.check(&message, std::time::SystemTime::now()).unwrap();
        assert_eq!(accepted.principal, "broker");
        assert!(
            (599..=600).contains(&accepted.lifetime.as_secs()),
            "{:?}",
            accepted.lifetime
        );
        // The server's empty answer ends the exchange; an error challenge is a refusal.
        assert_eq!(client.step(b""), Ok(None));
        let mut client = SaslClient::new(bearer(&[("unsecuredLoginStringClaim_sub", "broker")]).unwrap());
        let message = client.start();
        let refused = validator.check(&message, std::time::SystemTime::now()).unwrap_err();
        let challenge = refused.challenge();
        assert!(client.step(&challenge).unwrap_err().contains("insufficient_scope"));
    }

    #[test]
    fn an_unsecured_login_needs_its_principal() {
        assert!(bearer(&[]).is_err());
        assert!(bearer(&[("unsecuredLoginStringClaim_user", "x")]).is_err());
        assert!(
            bearer(&[
                ("unsecuredLoginPrincipalClaimName", "user"),
                ("unsecuredLoginStringClaim_user", "x")
            ])
            .is_ok()
        );
        assert!(
            bearer(&[
                ("unsecuredLoginStringClaim_sub", "x"),
                ("unsecuredLoginStringClaim_exp", "1")
            ])
            .is_err()
        );
        assert!(
            bearer(&[
                ("unsecuredLoginStringClaim_sub", "x"),
                ("unsecuredLoginLifetimeSeconds", "soon")
            ])
            .is_err()
        );
    }
}
