//! CreateDelegationToken (38), RenewDelegationToken (39), ExpireDelegationToken (40) and
//! DescribeDelegationToken (41), answered as Kafka 4.1 answers them with delegation tokens
//! disabled, its default (no `delegation.token.secret.key`): Sluice issues no tokens.
//!
//! Kafka's `KafkaApis` first refuses token requests on connections that may not ask for
//! tokens (`allowTokenRequests`): PLAINTEXT, SSL without a client certificate (its principal
//! is ANONYMOUS), and connections authenticated by a token; they get
//! DELEGATION_TOKEN_REQUEST_NOT_ALLOWED. A token asked for another owner without
//! CREATE_TOKENS on that user gets DELEGATION_TOKEN_AUTHORIZATION_FAILED. Any other request
//! gets DELEGATION_TOKEN_AUTH_DISABLED (from the controller for create, renew and expire, from
//! the broker for describe). Kafka's brokers always advertise these APIs, so clients expect
//! these errors (`DelegationTokenDisabledException` in the Java admin client), not
//! UNSUPPORTED_VERSION.
//! v0 of each was removed in Kafka 4.0 (KIP-896).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, CreateDelegationTokenRequest, CreateDelegationTokenResponse, DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse, ExpireDelegationTokenRequest, ExpireDelegationTokenResponse,
    RenewDelegationTokenRequest, RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions};
use crate::acl::{Operation, ResourceType};

pub const CREATE_VERSIONS: Versions = Versions::new(ApiKey::CreateDelegationToken, 1, 3);
pub const RENEW_VERSIONS: Versions = Versions::new(ApiKey::RenewDelegationToken, 1, 2);
pub const EXPIRE_VERSIONS: Versions = Versions::new(ApiKey::ExpireDelegationToken, 1, 2);
pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::DescribeDelegationToken, 1, 3);

/// The error every token request gets on this connection: Kafka's `allowTokenRequests`, then
/// tokens being disabled.
fn refusal(ctx: &Ctx) -> ResponseError {
    let protocol = ctx.config.security_protocol(&ctx.listener).unwrap_or("PLAINTEXT");
    let allowed = match protocol {
        "SSL" => &*ctx.principal != crate::sasl::ANONYMOUS,
        "SASL_PLAINTEXT" | "SASL_SSL" => true,
        _ => false,
    };
    if allowed {
        ResponseError::DelegationTokenAuthDisabled
    } else {
        ResponseError::DelegationTokenRequestNotAllowed
    }
}

/// `User:alice` as Kafka's principal type and name.
fn split_principal(principal: &str) -> (StrBytes, StrBytes) {
    let (kind, name) = principal.split_once(':').unwrap_or(("User", principal));
    (
        StrBytes::from_string(kind.to_string()),
        StrBytes::from_string(name.to_string()),
    )
}

pub async fn create(ctx: &Ctx, req: CreateDelegationTokenRequest, version: i16) -> CreateDelegationTokenResponse {
    let (requester_type, requester_name) = split_principal(&ctx.principal);
    // The owner is the one asked for (v3), else the requester, as in Kafka's answer.
    let (owner_type, owner_name) = match (req.owner_principal_type, req.owner_principal_name) {
        (Some(kind), Some(name)) if !name.is_empty() => (kind, name),
        _ => (requester_type.clone(), requester_name.clone()),
    };
    // A token for another owner needs CREATE_TOKENS on that user, checked before the
    // request would go to the controller (Kafka's handleCreateTokenRequest).
    let owner = format!("{}:{}", owner_type.as_str(), owner_name.as_str());
    let code = match refusal(ctx) {
        ResponseError::DelegationTokenAuthDisabled
            if owner != *ctx.principal && !ctx.authorize(Operation::CreateTokens, ResourceType::User, &owner) =>
        {
            ResponseError::DelegationTokenAuthorizationFailed
        }
        refused => refused,
    };
    let resp = CreateDelegationTokenResponse::default()
        .with_error_code(code.code())
        .with_principal_type(owner_type)
        .with_principal_name(owner_name)
        .with_issue_timestamp_ms(-1)
        .with_expiry_timestamp_ms(-1)
        .with_max_timestamp_ms(-1);
    // The requester is named from v3 (KIP-373), which brought owners other than it.
    match version >= 3 {
        true => resp
            .with_token_requester_principal_type(requester_type)
            .with_token_requester_principal_name(requester_name),
        false => resp,
    }
}

pub async fn renew(ctx: &Ctx, _req: RenewDelegationTokenRequest, _version: i16) -> RenewDelegationTokenResponse {
    RenewDelegationTokenResponse::default()
        .with_error_code(refusal(ctx).code())
        .with_expiry_timestamp_ms(-1)
}

pub async fn expire(ctx: &Ctx, _req: ExpireDelegationTokenRequest, _version: i16) -> ExpireDelegationTokenResponse {
    ExpireDelegationTokenResponse::default()
        .with_error_code(refusal(ctx).code())
        .with_expiry_timestamp_ms(-1)
}

pub async fn describe(
    ctx: &Ctx,
    _req: DescribeDelegationTokenRequest,
    _version: i16,
) -> DescribeDelegationTokenResponse {
    DescribeDelegationTokenResponse::default().with_error_code(refusal(ctx).code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_split_into_kafkas_type_and_name() {
        let (kind, name) = split_principal("User:CN=alice,O=x");
        assert_eq!((kind.as_str(), name.as_str()), ("User", "CN=alice,O=x"));
        let (kind, name) = split_principal(crate::sasl::ANONYMOUS);
        assert_eq!((kind.as_str(), name.as_str()), ("User", "ANONYMOUS"));
    }
}
