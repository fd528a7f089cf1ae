//! OAUTHBEARER (RFC 7628) with Kafka's unsecured JWT validator, for tests and development, as
//! Kafka offers it without a `sasl.server.callback.handler.class`: the token's header says
//! `"alg":"none"`, it has no signature, and its claims are checked, not its origin.
//!
//! The options come from the listener's JAAS line
//! (`OAuthBearerLoginModule required unsecuredValidatorRequiredScope="..."`), with Kafka's
//! names: `unsecuredValidatorPrincipalClaimName` (default `sub`),
//! `unsecuredValidatorScopeClaimName` (`scope`), `unsecuredValidatorRequiredScope` (none),
//! `unsecuredValidatorAllowableClockSkewMs` (0).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

/// The unsecured validator's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validator {
    pub principal_claim: String,
    pub scope_claim: String,
    pub required_scope: Vec<String>,
    pub clock_skew: Duration,
}

impl Default for Validator {
    fn default() -> Validator {
        Validator {
            principal_claim: "sub".into(),
            scope_claim: "scope".into(),
            required_scope: Vec::new(),
            clock_skew: Duration::ZERO,
        }
    }
}

impl Validator {
    /// From the JAAS options of the listener's OAUTHBEARER entry.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Validator, String> {
        let mut v = Validator::default();
        if let Some(name) = options.get("unsecuredValidatorPrincipalClaimName") {
            v.principal_claim = name.trim().to_string();
        }
        if let Some(name) = options.get("unsecuredValidatorScopeClaimName") {
            v.scope_claim = name.trim().to_string();
        }
        if let Some(scope) = options.get("unsecuredValidatorRequiredScope") {
            v.required_scope = scope
                .split([' ', ','])
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
        }
        if let Some(ms) = options.get("unsecuredValidatorAllowableClockSkewMs") {
            let ms: u64 = ms
                .trim()
                .parse()
                .map_err(|_| format!("unsecuredValidatorAllowableClockSkewMs={ms:?} is not a number of ms"))?;
            v.clock_skew = Duration::from_millis(ms);
        }
        Ok(v)
    }

    /// Checks the client's initial response; the principal and the token's expiry, or the
    /// RFC 7628 error status.
    pub fn check(&self, message: &[u8], now: SystemTime) -> Result<Accepted, Rejected> {
        let text = std::str::from_utf8(message).map_err(|_| Rejected::invalid_request("not UTF-8"))?;
        // gs2 header "n,[a=authzid]," then \x01-separated key=value pairs ending in \x01\x01.
        let rest = text
            .strip_prefix("n,")
            .ok_or_else(|| Rejected::invalid_request("the gs2 header must be 'n,'"))?;
        let (authzid, kvs) = rest
            .split_once(',')
            .ok_or_else(|| Rejected::invalid_request("no gs2 header"))?;
        let authzid = authzid.strip_prefix("a=").filter(|a| !a.is_empty());
        let kvs = kvs
            .strip_prefix('\u{1}')
            .and_then(|k| k.strip_suffix("\u{1}\u{1}"))
            .ok_or_else(|| Rejected::invalid_request("the key/value pairs are not framed by \\x01"))?;
        let mut token = None;
        for pair in kvs.split('\u{1}') {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| Rejected::invalid_request("a key/value pair has no '='"))?;
            if key == "auth" {
                let bearer = value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
                    .ok_or_else(|| Rejected::invalid_request("auth is not 'Bearer <token>'"))?;
                token = Some(bearer.trim());
            }
            // Other keys are SASL extensions; the unsecured validator checks none.
        }
        let token = token.ok_or_else(|| Rejected::invalid_request("no auth=Bearer key"))?;
        let accepted = self.validate(token, now)?;
        if authzid.is_some_and(|a| a != accepted.principal) {
            return Err(Rejected::invalid_token(
                "the authorization id differs from the token's principal",
            ));
        }
        Ok(accepted)
    }

    fn validate(&self, token: &str, now: SystemTime) -> Result<Accepted, Rejected> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Rejected::invalid_token(
                "not a JWS compact serialization (header.payload.)",
            ));
        };
        let object = |part: &str, what: &str| -> Result<serde_json::Map<String, Value>, Rejected> {
            let bytes = URL_SAFE_NO_PAD
                .decode(part.trim_end_matches('='))
                .map_err(|_| Rejected::invalid_token(format!("the {what} is not base64url")))?;
            match serde_json::from_slice(&bytes) {
                Ok(Value::Object(map)) => Ok(map),
                _ => Err(Rejected::invalid_token(format!("the {what} is not a JSON object"))),
            }
        };
        let header = object(header, "header")?;
        if header.get("alg").and_then(Value::as_str) != Some("none") || !signature.is_empty() {
            return Err(Rejected::invalid_token(
                "only unsecured tokens (\"alg\":\"none\", no signature) are served",
            ));
        }
        let claims = object(payload, "payload")?;
        let principal = match claims.get(&self.principal_claim) {
            Some(Value::String(p)) if !p.trim().is_empty() => p.clone(),
            _ => {
                return Err(Rejected::invalid_token(format!(
                    "no {} claim naming the principal",
                    self.principal_claim
                )));
            }
        };
        let now_ms = now.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        let skew_ms = self.clock_skew.as_secs_f64() * 1000.0;
        let exp_ms = match claims.get("exp").and_then(Value::as_f64) {
            Some(exp) => exp * 1000.0,
            None => return Err(Rejected::invalid_token("no exp claim")),
        };
        if now_ms - skew_ms >= exp_ms {
            return Err(Rejected::invalid_token("the token has expired"));
        }
        if let Some(iat) = claims.get("iat") {
            let iat_ms = iat
                .as_f64()
                .ok_or_else(|| Rejected::invalid_token("iat is not a number"))?
                * 1000.0;
            if iat_ms > now_ms + skew_ms {
                return Err(Rejected::invalid_token("the token was issued in the future (iat)"));
            }
        }
        if !self.required_scope.is_empty() {
            let scope: Vec<String> = match claims.get(&self.scope_claim) {
                Some(Value::String(s)) => s.split(' ').map(String::from).collect(),
                Some(Value::Array(items)) => items.iter().filter_map(|i| i.as_str().map(String::from)).collect(),
                _ => Vec::new(),
            };
            if let Some(missing) = self.required_scope.iter().find(|r| !scope.contains(r)) {
                return Err(Rejected {
                    status: "insufficient_scope",
                    scope: Some(self.required_scope.join(" ")),
                    reason: format!("the token's scope lacks {missing}"),
                });
            }
        }
        let remaining_ms = (exp_ms - now_ms).max(0.0);
        Ok(Accepted {
            principal,
            lifetime: Duration::from_millis(remaining_ms as u64),
        })
    }
}

/// A valid token: its principal and how long it stays valid.
#[derive(Debug, PartialEq, Eq)]
pub struct Accepted {
    pub principal: String,
    pub lifetime: Duration,
}

/// A refused token: the RFC 7628 error the server sends as its challenge, and why (the
/// SaslAuthenticate error message once the client acknowledges it).
#[derive(Debug, PartialEq, Eq)]
pub struct Rejected {
    pub status: &'static str,
    pub scope: Option<String>,
    pub reason: String,
}

impl Rejected {
    fn invalid_token(reason: impl Into<String>) -> Rejected {
        Rejected {
            status: "invalid_token",
            scope: None,
            reason: reason.into(),
        }
    }

    fn invalid_request(reason: impl Into<String>) -> Rejected {
        Rejected {
            status: "invalid_request",
            scope: None,
            reason: reason.into(),
        }
    }

    /// The server's error challenge (RFC 7628 section 3.2.2).
    pub fn challenge(&self) -> Vec<u8> {
        let mut error = serde_json::Map::new();
        error.insert("status".into(), Value::String(self.status.into()));
        if let Some(scope) = &self.scope {
            error.insert("scope".into(), Value::String(scope.clone()));
        }
        Value::Object(error).to_string().into_bytes()
    }
}

/// An unsecured token for `principal` (tests): what librdkafka builds from
/// `sasl.oauthbearer.config=principal=...`.
#[doc(hidden)]
pub fn unsecured_token(claims: &Value) -> String {
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(token: &str) -> Vec<u8> {
        format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_valid_token_names_its_principal_and_lifetime() {
        let v = Validator::default();
        let token = unsecured_token(&json!({"sub": "alice", "iat": 1000, "exp": 4600}));
        let ok = v.check(&message(&token), at(1000)).unwrap();
        assert_eq!(ok.principal, "alice");
        assert_eq!(ok.lifetime, Duration::from_secs(3600));
        // With extensions and an authzid equal to the principal.
        let m = format!("n,a=alice,\u{1}auth=Bearer {token}\u{1}traceId=1\u{1}\u{1}");
        assert!(v.check(m.as_bytes(), at(1000)).is_ok());
    }

    #[test]
    fn bad_tokens_are_refused_with_their_status() {
        let v = Validator {
            required_scope: vec!["kafka".into()],
            ..Validator::default()
        };
        let good = json!({"sub": "a", "exp": 2000, "scope": "kafka other"});
        assert!(v.check(&message(&unsecured_token(&good)), at(1000)).is_ok());
        for (claims, status) in [
            (json!({"sub": "a", "exp": 900, "scope": "kafka"}), "invalid_token"),
            (json!({"exp": 2000, "scope": "kafka"}), "invalid_token"),
            (json!({"sub": "a", "scope": "kafka"}), "invalid_token"),
            (
                json!({"sub": "a", "exp": 2000, "iat": 1500, "scope": "kafka"}),
                "invalid_token",
            ),
            (json!({"sub": "a", "exp": 2000, "scope": "other"}), "insufficient_scope"),
        ] {
            let err = v.check(&message(&unsecured_token(&claims)), at(1000)).unwrap_err();
            assert_eq!(err.status, status, "{claims}");
        }
        let signed = format!("{}sig", unsecured_token(&good));
        assert_eq!(
            v.check(&message(&signed), at(1000)).unwrap_err().status,
            "invalid_token"
        );
        assert_eq!(v.check(b"n,,auth=x", at(1000)).unwrap_err().status, "invalid_request");
        let other = format!("n,a=bob,\u{1}auth=Bearer {}\u{1}\u{1}", unsecured_token(&good));
        assert!(v.check(other.as_bytes(), at(1000)).is_err());
        assert_eq!(
            Rejected::invalid_token("x").challenge(),
            br#"{"status":"invalid_token"}"#.to_vec()
        );
    }
}
