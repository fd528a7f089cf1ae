//! SaslHandshake (key 17, v0–1) and SaslAuthenticate (key 36, v0–2): the wire side of
//! `crate::sasl::Authenticator`, called by `server` for each connection (the exchange's state is
//! the connection's, not the broker's).
//!
//! - SaslHandshake v1 picks the mechanism, then SaslAuthenticate requests carry the tokens;
//!   v0 picks it and the tokens follow as bare length-prefixed frames (`raw_token`).
//! - An unknown or disabled mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then
//!   the connection closes. A request out of turn: ILLEGAL_SASL_STATE, then the close.
//! - A failed authentication: SASL_AUTHENTICATION_FAILED with Kafka's message, answered after
//!   `connection.failed.authentication.delay.ms`, then the close.
//! - SaslAuthenticate v1+ carries the session's lifetime (`connections.max.reauth.ms`,
//!   KIP-368); a SaslHandshake on an authenticated connection re-authenticates it.
//! - On a listener without SASL (PLAINTEXT, SSL) both answer ILLEGAL_SASL_STATE and the
//!   connection stays open, as Kafka's `KafkaApis`.

use std::time::{Duration, SystemTime};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Reject, Versions, decode, frame, message};
use crate::cluster::MetadataImage;
use crate::sasl::{Authenticator, Handshake, Step};

pub const HANDSHAKE_VERSIONS: Versions = Versions::new(ApiKey::SaslHandshake, 0, 1);
pub const AUTHENTICATE_VERSIONS: Versions = Versions::new(ApiKey::SaslAuthenticate, 0, 2);

/// What the connection does once the answer is queued.
#[derive(Debug, PartialEq, Eq)]
pub enum Then {
    /// Go on reading requests.
    Continue,
    /// Authenticated as this principal: later requests run as it.
    Authenticated(String),
    /// Close the connection (after the answer, sent after `delay`).
    Close { delay: Duration, reason: String },
}

/// An answer and what follows it.
#[derive(Debug)]
pub struct Answer {
    /// The response frame; None for a v0 exchange's failure (Kafka closes without one).
    pub frame: Option<Bytes>,
    pub then: Then,
}

/// SaslHandshake or SaslAuthenticate (`key`), on a SASL listener (`auth`) or not.
pub fn handle(
    auth: Option<&mut Authenticator>,
    image: &MetadataImage,
    key: ApiKey,
    header: &RequestHeader,
    mut body: Bytes,
) -> Result<Answer, Reject> {
    let version = header.request_api_version;
    let cid = header.correlation_id;
    match key {
        ApiKey::SaslHandshake => {
            let req: SaslHandshakeRequest = decode(key, version, &mut body)?;
            let Some(auth) = auth else {
                let resp = SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code());
                return Ok(Answer {
                    frame: Some(frame(cid, version, &resp)?),
                    then: Then::Continue,
                });
            };
            let enabled: Vec<StrBytes> = auth
                .settings()
                .mechanisms
                .iter()
                .map(|m| StrBytes::from_static_str(m.name()))
                .collect();
            let (code, mechanisms, then) = match auth.handshake(req.mechanism.as_str(), version) {
                Handshake::Accepted => (0, enabled, Then::Continue),
                Handshake::Unsupported(offered) => (
                    ResponseError::UnsupportedSaslMechanism.code(),
                    offered.into_iter().map(StrBytes::from_static_str).collect(),
                    Then::Close {
                        delay: Duration::ZERO,
                        reason: format!("SASL mechanism {} is not enabled", req.mechanism.as_str()),
                    },
                ),
                Handshake::IllegalState(reason) => (
                    ResponseError::IllegalSaslState.code(),
                    enabled,
                    Then::Close {
                        delay: Duration::ZERO,
                        reason,
                    },
                ),
            };
            let resp = SaslHandshakeResponse::default()
                .with_error_code(code)
                .with_mechanisms(mechanisms);
            Ok(Answer {
                frame: Some(frame(cid, version, &resp)?),
                then,
            })
        }
        ApiKey::SaslAuthenticate => {
            let req: SaslAuthenticateRequest = decode(key, version, &mut body)?;
            let Some(auth) = auth else {
                let resp = SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code())
                    .with_error_message(message(
                        "SaslAuthenticate request received after successful authentication",
                    ));
                return Ok(Answer {
                    frame: Some(frame(cid, version, &resp)?),
                    then: Then::Continue,
                });
            };
            let delay = auth.settings().failure_delay;
            let (resp, then) = match auth.authenticate(&req.auth_bytes, image, SystemTime::now()) {
                Step::Challenge(challenge) => (
                    SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(challenge)),
                    Then::Continue,
                ),
                Step::Complete { response, lifetime_ms } => (
                    SaslAuthenticateResponse::default()
                        .with_auth_bytes(Bytes::from(response))
                        .with_session_lifetime_ms(lifetime_ms),
                    Then::Authenticated(auth.session().map(|s| s.principal.clone()).unwrap_or_default()),
                ),
                Step::Failed(reason) => (
                    SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                        .with_error_message(message(&reason)),
                    Then::Close { delay, reason },
                ),
                Step::IllegalState(reason) => (
                    SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::IllegalSaslState.code())
                        .with_error_message(message(&reason)),
                    Then::Close {
                        delay: Duration::ZERO,
                        reason,
                    },
                ),
            };
            Ok(Answer {
                frame: Some(frame(cid, version, &resp)?),
                then,
            })
        }
        _ => Err(Reject::UnsupportedVersion { key, version }),
    }
}

/// A bare token after a v0 SaslHandshake: the answer is a bare length-prefixed token; a failure
/// closes the connection without one.
pub fn raw_token(auth: &mut Authenticator, image: &MetadataImage, token: &[u8]) -> Answer {
    let bare = |bytes: &[u8]| {
        let mut out = BytesMut::with_capacity(4 + bytes.len());
        out.put_u32(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
        out.put_slice(bytes);
        Some(out.freeze())
    };
    match auth.authenticate(token, image, SystemTime::now()) {
        Step::Challenge(challenge) => Answer {
            frame: bare(&challenge),
            then: Then::Continue,
        },
        Step::Complete { response, .. } => Answer {
            frame: bare(&response),
            then: Then::Authenticated(auth.session().map(|s| s.principal.clone()).unwrap_or_default()),
        },
        Step::Failed(reason) | Step::IllegalState(reason) => Answer {
            frame: None,
            then: Then::Close {
                delay: auth.settings().failure_delay,
                reason,
            },
        },
    }
}
