//! SASL on listeners mapped to SASL_PLAINTEXT and SASL_SSL (issue 13): Kafka's SaslHandshake and
//! SaslAuthenticate exchange, per connection, with the mechanisms of
//! `sasl.enabled.mechanisms` (or its `listener.name.<listener>.` override):
//!
//! - PLAIN (RFC 4616): users and passwords from the listener's JAAS line
//!   (`listener.name.<listener>.plain.sasl.jaas.config`, `user_<name>="<password>"` options);
//! - SCRAM-SHA-256 and SCRAM-SHA-512 (`scram`): credentials from the metadata log, managed by
//!   AlterUserScramCredentials;
//! - OAUTHBEARER with Kafka's unsecured JWT validator (`oauthbearer`), for tests and
//!   development.
//!
//! `Authenticator` is one connection's state: until it completes, the connection may send only
//! ApiVersions, SaslHandshake and SaslAuthenticate (`server` closes it on anything else), and
//! frames are bounded by `sasl.server.max.receive.size`. A failed authentication is answered
//! after `connection.failed.authentication.delay.ms` and the connection closed. With
//! `connections.max.reauth.ms` above 0 (KIP-368) a session ends at that age (or at its token's
//! expiry, if sooner): the client re-authenticates on the same connection, as the same
//! principal and mechanism, or is closed at its next request.

pub mod bootstrap;
pub mod client;
pub mod jaas;
pub mod oauthbearer;
pub mod scram;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::cluster::MetadataImage;
use crate::config::{BrokerConfig, ConfigError};
use scram::{ScramMechanism, ScramServer, ScramStep};

/// The principal of a connection that has not authenticated (Kafka's `KafkaPrincipal.ANONYMOUS`).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// A SASL mechanism the broker serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
    OAuthBearer,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "OAUTHBEARER" => Some(Mechanism::OAuthBearer),
            other => ScramMechanism::from_name(other).map(Mechanism::Scram),
        }
    }

    /// The login module Kafka's JAAS line names for this mechanism.
    fn login_module(self) -> &'static str {
        match self {
            Mechanism::Plain => "org.apache.kafka.common.security.plain.PlainLoginModule",
            Mechanism::Scram(_) => "org.apache.kafka.common.security.scram.ScramLoginModule",
            Mechanism::OAuthBearer => "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
        }
    }
}

/// Kafka's default `sasl.enabled.mechanisms`.
pub const DEFAULT_MECHANISMS: &str = "GSSAPI";

/// One SASL listener's settings, read and checked at start-up.
#[derive(Debug, Clone)]
pub struct ListenerSasl {
    pub listener: String,
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN's users: name to password.
    plain_users: BTreeMap<String, String>,
    oauth: oauthbearer::Validator,
    /// `connections.max.reauth.ms`; None for 0 (sessions do not expire).
    pub reauth_max: Option<Duration>,
    /// `connection.failed.authentication.delay.ms`.
    pub failure_delay: Duration,
    /// `sasl.server.max.receive.size`: the largest frame before authentication completes.
    pub max_receive: usize,
}

impl ListenerSasl {
    /// The settings of SASL listener `listener`, or the key at fault.
    pub fn new(config: &BrokerConfig, listener: &str) -> Result<ListenerSasl, ConfigError> {
        let mechanisms_key = config.sasl_key_set(listener, None, "sasl.enabled.mechanisms");
        let names = config
            .sasl_setting(listener, None, "sasl.enabled.mechanisms")
            .unwrap_or(DEFAULT_MECHANISMS);
        let mut mechanisms = Vec::new();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(mechanism) = Mechanism::from_name(name) else {
                return Err(ConfigError {
                    key: mechanisms_key,
                    reason: format!(
                        "listener {listener}: {name} is not served (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER are){}",
                        if name == DEFAULT_MECHANISMS {
                            "; GSSAPI is Kafka's default, so set sasl.enabled.mechanisms"
                        } else {
                            ""
                        }
                    ),
                });
            };
            if !mechanisms.contains(&mechanism) {
                mechanisms.push(mechanism);
            }
        }
        if mechanisms.is_empty() {
            return Err(ConfigError {
                key: mechanisms_key,
                reason: format!("listener {listener} is SASL: name at least one mechanism"),
            });
        }
        let mut sasl = ListenerSasl {
            listener: listener.to_string(),
            mechanisms: mechanisms.clone(),
            plain_users: BTreeMap::new(),
            oauth: oauthbearer::Validator::default(),
            reauth_max: (config.connections_max_reauth_ms > 0)
                .then(|| Duration::from_millis(config.connections_max_reauth_ms)),
            failure_delay: Duration::from_millis(config.connection_failed_authentication_delay_ms),
            max_receive: config.sasl_server_max_receive_size,
        };
        for mechanism in mechanisms {
            let key = config.sasl_key_set(listener, Some(mechanism.name()), "sasl.jaas.config");
            let entry = match config.sasl_setting(listener, Some(mechanism.name()), "sasl.jaas.config") {
                Some(text) => {
                    let entry = jaas::parse(text).map_err(|reason| ConfigError {
                        key: key.clone(),
                        reason,
                    })?;
                    if entry.module != mechanism.login_module() {
                        return Err(ConfigError {
                            key,
                            reason: format!(
                                "{} needs {}, not {}",
                                mechanism.name(),
                                mechanism.login_module(),
                                entry.module
                            ),
                        });
                    }
                    Some(entry)
                }
                None => None,
            };
            match mechanism {
                Mechanism::Plain => {
                    let users: BTreeMap<String, String> = entry
                        .iter()
                        .flat_map(|e| &e.options)
                        .filter_map(|(k, v)| k.strip_prefix("user_").map(|u| (u.to_string(), v.clone())))
                        .collect();
                    if users.is_empty() {
                        return Err(ConfigError {
                            key,
                            reason: format!(
                                "listener {listener} enables PLAIN: its JAAS line needs users (user_<name>=\"<password>\")"
                            ),
                        });
                    }
                    sasl.plain_users = users;
                }
                Mechanism::OAuthBearer => {
                    if let Some(e) = &entry {
                        sasl.oauth = oauthbearer::Validator::from_options(&e.options)
                            .map_err(|reason| ConfigError { key, reason })?;
                    }
                }
                // Credentials live in the metadata log; the JAAS line, if any, is the broker's
                // own login for inter-broker connections.
                Mechanism::Scram(_) => {}
            }
        }
        Ok(sasl)
    }
}

/// An authenticated session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `User:<name>`.
    pub principal: String,
    pub mechanism: Mechanism,
    /// When the session ends (KIP-368), None for never.
    pub expires: Option<tokio::time::Instant>,
}

/// One exchange in progress.
#[derive(Debug)]
enum Exchange {
    Plain,
    Scram(Box<ScramServer>),
    /// OAUTHBEARER; after a refused token, the reason, sent once the client acknowledges the
    /// error challenge.
    OAuth(Option<String>),
}

#[derive(Debug)]
enum State {
    /// Waiting for SaslHandshake.
    Handshake,
    /// Between SaslHandshake and the exchange's end; `raw`: handshake v0, so the tokens come
    /// as bare frames, not SaslAuthenticate requests.
    Exchanging {
        mechanism: Mechanism,
        exchange: Exchange,
        raw: bool,
    },
    /// Authenticated (and not re-authenticating).
    Done,
    Failed,
}

/// What SaslHandshake answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Handshake {
    Accepted,
    /// UNSUPPORTED_SASL_MECHANISM, with the mechanisms offered instead; the connection closes.
    Unsupported(Vec<&'static str>),
    /// ILLEGAL_SASL_STATE; the connection closes.
    IllegalState(String),
}

/// What one SaslAuthenticate (or raw token) produces.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The server's next challenge; the exchange goes on.
    Challenge(Vec<u8>),
    /// Authenticated: the last server message, and the session's lifetime in ms (0: none).
    Complete { response: Vec<u8>, lifetime_ms: i64 },
    /// SASL_AUTHENTICATION_FAILED with this message, answered after the failure delay; the
    /// connection closes.
    Failed(String),
    /// ILLEGAL_SASL_STATE: SaslAuthenticate out of turn; the connection closes.
    IllegalState(String),
}

/// One connection's SASL state.
#[derive(Debug)]
pub struct Authenticator {
    listener: std::sync::Arc<ListenerSasl>,
    state: State,
    session: Option<Session>,
}

impl Authenticator {
    pub fn new(listener: std::sync::Arc<ListenerSasl>) -> Authenticator {
        Authenticator {
            listener,
            state: State::Handshake,
            session: None,
        }
    }

    pub fn settings(&self) -> &ListenerSasl {
        &self.listener
    }

    /// The current session, once authenticated.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// Whether requests other than ApiVersions and SASL may be served.
    pub fn authenticated(&self) -> bool {
        self.session.is_some()
    }

    /// Whether the session has ended (KIP-368): the next request closes the connection.
    pub fn expired(&self, now: tokio::time::Instant) -> bool {
        self.session.as_ref().and_then(|s| s.expires).is_some_and(|e| now >= e)
    }

    /// Whether the next frame is a bare token (after a v0 handshake).
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.state, State::Exchanging { raw: true, .. })
    }

    /// SaslHandshake (version `version`) for `mechanism`.
    pub fn handshake(&mut self, mechanism: &str, version: i16) -> Handshake {
        match (&self.state, &self.session) {
            (State::Handshake, None) => {}
            // KIP-368: re-authentication, with SaslAuthenticate, by the same mechanism.
            (State::Done, Some(session)) => {
                if version < 1 {
                    return Handshake::IllegalState("re-authentication needs SaslHandshake v1".into());
                }
                if mechanism != session.mechanism.name() {
                    return Handshake::Unsupported(vec![session.mechanism.name()]);
                }
            }
            _ => {
                self.state = State::Failed;
                return Handshake::IllegalState("SaslHandshake is not expected at this time".into());
            }
        }
        let Some(chosen) = Mechanism::from_name(mechanism).filter(|m| self.listener.mechanisms.contains(m)) else {
            self.state = State::Failed;
            return Handshake::Unsupported(self.listener.mechanisms.iter().map(|m| m.name()).collect());
        };
        let exchange = match chosen {
            Mechanism::Plain => Exchange::Plain,
            Mechanism::Scram(m) => Exchange::Scram(Box::new(ScramServer::new(m))),
            Mechanism::OAuthBearer => Exchange::OAuth(None),
        };
        self.state = State::Exchanging {
            mechanism: chosen,
            exchange,
            raw: version == 0,
        };
        Handshake::Accepted
    }

    /// One client message of the exchange; `image` holds the SCRAM credentials.
    pub fn authenticate(&mut self, message: &[u8], image: &MetadataImage, now: SystemTime) -> Step {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let State::Exchanging {
            mechanism,
            mut exchange,
            raw,
        } = state
        else {
            let reason = match state {
                State::Done => "SaslAuthenticate request received after successful authentication",
                _ => "Unexpected SaslAuthenticate request: no SaslHandshake chose a mechanism",
            };
            return Step::IllegalState(reason.into());
        };
        let (user, response, token_lifetime) = match &mut exchange {
            Exchange::Plain => match self.plain(message) {
                Ok(user) => (user, Vec::new(), None),
                Err(reason) => return Step::Failed(reason),
            },
            Exchange::Scram(server) => {
                let m = match mechanism {
                    Mechanism::Scram(m) => m,
                    _ => return Step::Failed("SCRAM exchange without a SCRAM mechanism".into()),
                };
                match server.step(message, |user| image.scram_credential(user, m).cloned()) {
                    ScramStep::Challenge(challenge) => {
                        self.state = State::Exchanging {
                            mechanism,
                            exchange,
                            raw,
                        };
                        return Step::Challenge(challenge);
                    }
                    ScramStep::Complete { user, server_final } => (user, server_final, None),
                    ScramStep::Failed(reason) => return Step::Failed(reason),
                }
            }
            // The client's answer to an error challenge: the failure is final now.
            Exchange::OAuth(Some(reason)) => return Step::Failed(format!("Authentication failed: {reason}")),
            Exchange::OAuth(None) => match self.listener.oauth.check(message, now) {
                Ok(accepted) => (accepted.principal, Vec::new(), Some(accepted.lifetime)),
                Err(rejected) => {
                    let challenge = rejected.challenge();
                    self.state = State::Exchanging {
                        mechanism,
                        exchange: Exchange::OAuth(Some(rejected.reason)),
                        raw,
                    };
                    return Step::Challenge(challenge);
                }
            },
        };
        let principal = format!("User:{user}");
        if let Some(previous) = &self.session
            && previous.principal != principal
        {
            return Step::Failed(format!(
                "Cannot change principals during re-authentication from {}: {principal}",
                previous.principal
            ));
        }
        // KIP-368: a session lifetime only when connections.max.reauth.ms is set; then the
        // token's expiry shortens it.
        let lifetime = self
            .listener
            .reauth_max
            .map(|max| token_lifetime.map_or(max, |t| t.min(max)));
        self.session = Some(Session {
            principal,
            mechanism,
            expires: lifetime.and_then(|l| tokio::time::Instant::now().checked_add(l)),
        });
        self.state = State::Done;
        Step::Complete {
            response,
            lifetime_ms: lifetime.map_or(0, |l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX)),
        }
    }

    /// PLAIN: `[authzid] NUL authcid NUL passwd`.
    fn plain(&self, message: &[u8]) -> Result<String, String> {
        let text = std::str::from_utf8(message).map_err(|_| "Invalid PLAIN message: not UTF-8".to_string())?;
        let mut parts = text.split('\0');
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("Invalid SASL/PLAIN response: expected 3 tokens".into());
        };
        if user.is_empty() {
            return Err("Authentication failed: username not specified".into());
        }
        if password.is_empty() {
            return Err("Authentication failed: password not specified".into());
        }
        if !authzid.is_empty() && authzid != user {
            return Err(
                "Authentication failed: Client requested an authorization id that is different from username".into(),
            );
        }
        let known = self.listener.plain_users.get(user);
        // Compared in constant time, and against something even for an unknown user.
        let matches = scram::constant_time_eq(known.map_or(&[][..], |p| p.as_bytes()), password.as_bytes());
        if known.is_some() && matches {
            Ok(user.to_string())
        } else {
            Err("Authentication failed: Invalid username or password".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn listener(mechanisms: &[Mechanism], reauth: Option<Duration>) -> Arc<ListenerSasl> {
        Arc::new(ListenerSasl {
            listener: "SASL_PLAINTEXT".into(),
            mechanisms: mechanisms.to_vec(),
            plain_users: [("alice".to_string(), "alice-secret".to_string())].into(),
            oauth: oauthbearer::Validator::default(),
            reauth_max: reauth,
            failure_delay: Duration::from_millis(100),
            max_receive: 524288,
        })
    }

    fn image() -> MetadataImage {
        MetadataImage::default()
    }

    #[test]
    fn plain_authenticates_known_users_only() {
        let l = listener(&[Mechanism::Plain], None);
        for (message, ok) in [
            (&b"\0alice\0alice-secret"[..], true),
            (b"alice\0alice\0alice-secret", true),
            (b"\0alice\0wrong", false),
            (b"\0bob\0alice-secret", false),
            (b"bob\0alice\0alice-secret", false),
            (b"\0alice", false),
            (b"\0\0x", false),
        ] {
            let mut a = Authenticator::new(l.clone());
            assert_eq!(a.handshake("PLAIN", 1), Handshake::Accepted);
            let step = a.authenticate(message, &image(), SystemTime::now());
            assert_eq!(matches!(step, Step::Complete { .. }), ok, "{message:?}: {step:?}");
            assert_eq!(a.authenticated(), ok);
        }
    }

    #[test]
    fn handshakes_out_of_turn_or_for_other_mechanisms_are_refused() {
        let l = listener(&[Mechanism::Plain], None);
        let mut a = Authenticator::new(l.clone());
        assert_eq!(a.handshake("SCRAM-SHA-256", 1), Handshake::Unsupported(vec!["PLAIN"]));
        let mut a = Authenticator::new(l.clone());
        assert!(matches!(
            a.authenticate(b"\0alice\0alice-secret", &image(), SystemTime::now()),
            Step::IllegalState(_)
        ));
        let mut a = Authenticator::new(l.clone());
        assert_eq!(a.handshake("PLAIN", 0), Handshake::Accepted);
        assert!(a.expects_raw_token());
        assert!(matches!(a.handshake("PLAIN", 1), Handshake::IllegalState(_)));
    }

    #[test]
    fn reauthentication_keeps_the_principal_and_sessions_expire() {
        let l = listener(&[Mechanism::Plain], Some(Duration::from_millis(50)));
        let mut a = Authenticator::new(l);
        a.handshake("PLAIN", 1);
        let Step::Complete { lifetime_ms, .. } = a.authenticate(b"\0alice\0alice-secret", &image(), SystemTime::now())
        else {
            panic!()
        };
        assert_eq!(lifetime_ms, 50);
        assert!(!a.expired(tokio::time::Instant::now()));
        assert!(a.expired(tokio::time::Instant::now() + Duration::from_millis(60)));
        assert_eq!(a.handshake("PLAIN", 1), Handshake::Accepted);
        assert!(a.authenticated(), "still authenticated while re-authenticating");
        assert!(matches!(
            a.authenticate(b"\0alice\0alice-secret", &image(), SystemTime::now()),
            Step::Complete { .. }
        ));
        assert_eq!(a.handshake("SCRAM-SHA-256", 1), Handshake::Unsupported(vec!["PLAIN"]));
    }

    #[test]
    fn a_refused_token_gets_an_error_challenge_then_fails() {
        let l = listener(&[Mechanism::OAuthBearer], None);
        let mut a = Authenticator::new(l);
        a.handshake("OAUTHBEARER", 1);
        let step = a.authenticate(b"n,,\x01auth=Bearer x.y.\x01\x01", &image(), SystemTime::now());
        assert_eq!(step, Step::Challenge(br#"{"status":"invalid_token"}"#.to_vec()));
        assert!(matches!(
            a.authenticate(b"\x01", &image(), SystemTime::now()),
            Step::Failed(_)
        ));
        assert!(!a.authenticated());
    }
}
