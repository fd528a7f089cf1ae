//! DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51), v0 as Kafka
//! 4.x (KIP-554): the SCRAM credentials SCRAM-SHA-256/512 authenticate against, kept in the
//! metadata log (salt, StoredKey, ServerKey, iterations; the client sends a salted password,
//! never the password, and nothing returns more than the mechanism and iterations).
//!
//! - Describe: every user with a credential (no users, or null), or the users named;
//!   RESOURCE_NOT_FOUND for a named user without one, DUPLICATE_RESOURCE for a user named
//!   twice.
//! - Alter: one result per user; a user's alterations apply together or not at all.
//!   DUPLICATE_RESOURCE for a (user, mechanism) altered twice, UNSUPPORTED_SASL_MECHANISM for
//!   an unknown mechanism, UNACCEPTABLE_CREDENTIAL for an empty name, salt or salted password
//!   or iterations outside 4096–16384, RESOURCE_NOT_FOUND for deleting what does not exist.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message};
use crate::acl::Operation;
use crate::cluster::{ScramCredentialEntry, ScramCredentialKey};
use crate::sasl::scram::{MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramMechanism};

pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::DescribeUserScramCredentials, 0, 0);
pub const ALTER_VERSIONS: Versions = Versions::new(ApiKey::AlterUserScramCredentials, 0, 0);

pub async fn describe(
    ctx: &Ctx,
    req: DescribeUserScramCredentialsRequest,
    _version: i16,
) -> DescribeUserScramCredentialsResponse {
    if !ctx.authorize_cluster(Operation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed."));
    }
    let image = ctx.controller.image();
    let mut by_user: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for ((user, mechanism), credential) in &image.scram_credentials {
        by_user.entry(user.as_str()).or_default().push(
            CredentialInfo::default()
                .with_mechanism(mechanism.wire())
                .with_iterations(credential.iterations),
        );
    }
    let result = |user: &str, infos: Vec<CredentialInfo>| {
        DescribeUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(user.to_string()))
            .with_credential_infos(infos)
    };
    let results = match req.users.filter(|u| !u.is_empty()) {
        None => by_user.into_iter().map(|(user, infos)| result(user, infos)).collect(),
        Some(users) => {
            let mut seen = BTreeMap::new();
            for u in &users {
                *seen.entry(u.name.as_str()).or_insert(0) += 1;
            }
            let mut out = Vec::new();
            for (name, count) in seen {
                let r = if count > 1 {
                    result(name, Vec::new())
                        .with_error_code(ResponseError::DuplicateResource.code())
                        .with_error_message(message(
                            "Cannot describe SCRAM credentials for the same user twice in a single request",
                        ))
                } else if let Some(infos) = by_user.get(name) {
                    result(name, infos.clone())
                } else {
                    result(name, Vec::new())
                        .with_error_code(ResponseError::ResourceNotFound.code())
                        .with_error_message(message(format!(
                            "Attempt to describe a user credential that does not exist: {name}"
                        )))
                };
                out.push(r);
            }
            out
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// An alteration's user name and mechanism, checked as Kafka does first.
fn named_mechanism(name: &str, mechanism: i8) -> Result<ScramMechanism, (ResponseError, &'static str)> {
    if name.is_empty() {
        return Err((ResponseError::UnacceptableCredential, "Username must not be empty"));
    }
    ScramMechanism::from_wire(mechanism).ok_or((ResponseError::UnsupportedSaslMechanism, "Unknown SCRAM mechanism"))
}

pub async fn alter(
    ctx: &Ctx,
    req: AlterUserScramCredentialsRequest,
    _version: i16,
) -> AlterUserScramCredentialsResponse {
    if !ctx.authorize_cluster(Operation::Alter) {
        // Kafka: ALTER on the cluster; each user named gets the code.
        let users: BTreeSet<&str> = req
            .deletions
            .iter()
            .map(|d| d.name.as_str())
            .chain(req.upsertions.iter().map(|u| u.name.as_str()))
            .collect();
        let results = users
            .into_iter()
            .map(|u| {
                AlterUserScramCredentialsResult::default()
                    .with_user(StrBytes::from_string(u.to_string()))
                    .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                    .with_error_message(message("Cluster authorization failed."))
            })
            .collect();
        return AlterUserScramCredentialsResponse::default().with_results(results);
    }
    let image = ctx.controller.image();
    // Each user's first error, in the order Kafka checks them.
    let mut errors: BTreeMap<String, (ResponseError, String)> = BTreeMap::new();
    let mut fail = |user: &str, code: ResponseError, text: String| {
        errors.entry(user.to_string()).or_insert((code, text));
    };
    let mut counts: BTreeMap<(String, i8), usize> = BTreeMap::new();
    let deletions = req.deletions.iter().map(|d| (d.name.as_str(), d.mechanism));
    let upsertions = req.upsertions.iter().map(|u| (u.name.as_str(), u.mechanism));
    for (name, mechanism) in deletions.clone().chain(upsertions) {
        *counts.entry((name.to_string(), mechanism)).or_insert(0) += 1;
    }
    let users: BTreeSet<String> = counts.keys().map(|(u, _)| u.clone()).collect();
    for ((name, _), n) in &counts {
        if *n > 1 {
            fail(
                name,
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request".into(),
            );
        }
    }
    let mut remove = Vec::new();
    for (name, mechanism) in deletions {
        let m = match named_mechanism(name, mechanism) {
            Ok(m) => m,
            Err((code, text)) => {
                fail(name, code, text.into());
                continue;
            }
        };
        if image.scram_credential(name, m).is_none() {
            fail(
                name,
                ResponseError::ResourceNotFound,
                "Attempt to delete a user credential that does not exist".into(),
            );
            continue;
        }
        remove.push(ScramCredentialKey {
            user: name.to_string(),
            mechanism: m.name().to_string(),
        });
    }
    let mut set = Vec::new();
    for u in &req.upsertions {
        let name = u.name.as_str();
        let m = match named_mechanism(name, u.mechanism) {
            Ok(m) => m,
            Err((code, text)) => {
                fail(name, code, text.into());
                continue;
            }
        };
        let problem = if u.iterations < MIN_ITERATIONS {
            Some(format!("Too few iterations: at least {MIN_ITERATIONS}"))
        } else if u.iterations > MAX_ITERATIONS {
            Some(format!("Too many iterations: at most {MAX_ITERATIONS}"))
        } else if u.salt.is_empty() {
            Some("Salt must not be empty".to_string())
        } else if u.salted_password.is_empty() {
            Some("SaltedPassword must not be empty".to_string())
        } else {
            None
        };
        if let Some(problem) = problem {
            fail(name, ResponseError::UnacceptableCredential, problem);
            continue;
        }
        let credential = ScramCredential::from_salted(m, &u.salt, &u.salted_password, u.iterations);
        set.push(ScramCredentialEntry::new(name, m, &credential));
    }
    set.retain(|e| !errors.contains_key(&e.user));
    remove.retain(|k| !errors.contains_key(&k.user));
    let committed = if set.is_empty() && remove.is_empty() {
        Ok(())
    } else {
        ctx.controller.alter_scram_credentials(set, remove)
    };
    let results = users
        .into_iter()
        .map(|user| {
            let result = AlterUserScramCredentialsResult::default().with_user(StrBytes::from_string(user.clone()));
            match (errors.get(&user), &committed) {
                (Some((code, text)), _) => result.with_error_code(code.code()).with_error_message(message(text)),
                (None, Err(e)) => result.with_error_code(e.code()).with_error_message(message(e)),
                (None, Ok(())) => result,
            }
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}
