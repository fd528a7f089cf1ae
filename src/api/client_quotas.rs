//! DescribeClientQuotas (48) and AlterClientQuotas (49), v0–1 as Kafka 4.1 serves them. The
//! quotas live in the metadata log (`MetadataRecord::ClientQuotas`); what they do is
//! `quota`'s.
//!
//! As Kafka's `ClientQuotaControlManager` checks them: an entity names each of `user` and
//! `client-id` at most once (a null name is the default); a byte rate must be a whole number;
//! an unknown key, entity type, match type or a repeated type is INVALID_REQUEST. Altering
//! needs ALTER_CONFIGS on the cluster, describing DESCRIBE_CONFIGS; else
//! CLUSTER_AUTHORIZATION_FAILED. Refused here with INVALID_REQUEST, rather than stored and not
//! enforced: the `ip` entity (connection_creation_rate).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_client_quotas_request::EntryData as AlterEntry;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData as AlteredEntity, EntryData as AlteredEntry};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message};
use crate::acl::Operation;
use crate::quota::{
    CLIENT_ID, CONTROLLER_MUTATION_RATE, EntityName, IP, KEYS, QuotaChange, QuotaEntity, REQUEST_PERCENTAGE, USER,
};

pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::DescribeClientQuotas, 0, 1);
pub const ALTER_VERSIONS: Versions = Versions::new(ApiKey::AlterClientQuotas, 0, 1);

/// Kafka's DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

type Refusal = (i16, String);

fn invalid(text: impl Into<String>) -> Refusal {
    (ResponseError::InvalidRequest.code(), text.into())
}

/// The entity an AlterClientQuotas entry names.
fn entity(entry: &AlterEntry) -> Result<QuotaEntity, Refusal> {
    let mut e = QuotaEntity {
        user: None,
        client_id: None,
    };
    if entry.entity.is_empty() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    for part in &entry.entity {
        let name = EntityName::from_wire(part.entity_name.as_deref());
        let slot = match part.entity_type.as_str() {
            USER => &mut e.user,
            CLIENT_ID => &mut e.client_id,
            IP => {
                return Err(invalid(
                    "IP quotas (connection_creation_rate) are not supported by this broker",
                ));
            }
            other => return Err(invalid(format!("Unhandled client quota entity type: {other}"))),
        };
        if slot.replace(name).is_some() {
            return Err(invalid(format!(
                "Duplicate {} entity type in the client quota entity",
                part.entity_type.as_str()
            )));
        }
    }
    Ok(e)
}

/// The changes an entry asks for, checked as Kafka checks each key and value.
fn changes(entry: &AlterEntry, entity: &QuotaEntity) -> Result<Vec<QuotaChange>, Refusal> {
    let mut out = Vec::with_capacity(entry.ops.len());
    for op in &entry.ops {
        let key = op.key.as_str();
        if !KEYS.contains(&key) {
            return Err(invalid(format!("Invalid configuration key {key}")));
        }
        if !op.remove {
            let whole = (op.value - op.value.round()).abs() <= 1e-6;
            if key != REQUEST_PERCENTAGE && key != CONTROLLER_MUTATION_RATE && !whole {
                return Err(invalid(format!("Configuration {key} must be a Long value")));
            }
            if !op.value.is_finite() || op.value <= 0.0 {
                return Err(invalid(format!("Configuration {key} must be a positive value")));
            }
        }
        out.push(QuotaChange {
            entity: entity.clone(),
            key: key.to_string(),
            value: (!op.remove).then_some(op.value),
        });
    }
    Ok(out)
}

fn altered(entry: &AlterEntry, refusal: Option<&Refusal>) -> AlteredEntry {
    let entity = entry
        .entity
        .iter()
        .map(|p| {
            AlteredEntity::default()
                .with_entity_type(p.entity_type.clone())
                .with_entity_name(p.entity_name.clone())
        })
        .collect();
    AlteredEntry::default()
        .with_entity(entity)
        .with_error_code(refusal.map_or(0, |(code, _)| *code))
        .with_error_message(refusal.and_then(|(_, text)| message(text)))
}

pub async fn alter(ctx: &Ctx, req: AlterClientQuotasRequest, _version: i16) -> AlterClientQuotasResponse {
    let respond = |entries| AlterClientQuotasResponse::default().with_entries(entries);
    if !ctx.authorize_cluster(Operation::AlterConfigs) {
        let refusal = (
            ResponseError::ClusterAuthorizationFailed.code(),
            "Cluster authorization failed.".into(),
        );
        return respond(req.entries.iter().map(|e| altered(e, Some(&refusal))).collect());
    }
    let checked: Vec<Result<Vec<QuotaChange>, Refusal>> = req
        .entries
        .iter()
        .map(|e| entity(e).and_then(|entity| changes(e, &entity)))
        .collect();
    let valid: Vec<QuotaChange> = checked
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .flatten()
        .cloned()
        .collect();
    let written = match req.validate_only || valid.is_empty() {
        true => Ok(()),
        false => ctx.controller.alter_client_quotas(valid).await,
    };
    let written = written.map_err(|e| (e.code(), e.to_string()));
    respond(
        req.entries
            .iter()
            .zip(&checked)
            .map(|(entry, check)| match (check, &written) {
                (Err(refusal), _) | (Ok(_), Err(refusal)) => altered(entry, Some(refusal)),
                (Ok(_), Ok(())) => altered(entry, None),
            })
            .collect(),
    )
}

/// Which part of an entity a filter component asks for, and how.
enum Match {
    Exact(String),
    Default,
    Any,
}

fn part_matches(part: Option<&EntityName>, m: &Match) -> bool {
    match (part, m) {
        (None, _) => false,
        (Some(_), Match::Any) => true,
        (Some(EntityName::Default), Match::Default) => true,
        (Some(EntityName::Name(n)), Match::Exact(want)) => n == want,
        _ => false,
    }
}

pub async fn describe(ctx: &Ctx, req: DescribeClientQuotasRequest, _version: i16) -> DescribeClientQuotasResponse {
    let refuse = |(code, text): Refusal| {
        DescribeClientQuotasResponse::default()
            .with_error_code(code)
            .with_error_message(message(text))
            .with_entries(None)
    };
    if !ctx.authorize_cluster(Operation::DescribeConfigs) {
        return refuse((
            ResponseError::ClusterAuthorizationFailed.code(),
            "Cluster authorization failed.".into(),
        ));
    }
    let (mut user, mut client): (Option<Match>, Option<Match>) = (None, None);
    for c in &req.components {
        let m = match (c.match_type, &c._match) {
            (MATCH_EXACT, Some(name)) => Match::Exact(name.to_string()),
            (MATCH_EXACT, None) => return refuse(invalid("An exact match needs a name")),
            (MATCH_DEFAULT, _) => Match::Default,
            (MATCH_ANY, _) => Match::Any,
            (other, _) => return refuse(invalid(format!("Unknown match type {other}"))),
        };
        let slot = match c.entity_type.as_str() {
            USER => &mut user,
            CLIENT_ID => &mut client,
            // No IP quota is ever stored: a filter on one matches nothing.
            IP => {
                return DescribeClientQuotasResponse::default().with_entries(Some(Vec::new()));
            }
            other => return refuse(invalid(format!("Custom entity type {other} not supported"))),
        };
        if slot.replace(m).is_some() {
            return refuse(invalid(format!(
                "Entity type {} cannot appear more than once in the filter",
                c.entity_type.as_str()
            )));
        }
    }
    let image = ctx.controller.image();
    let entries = image
        .client_quotas
        .iter()
        .filter(|(e, _)| {
            let fits = |part: Option<&EntityName>, m: &Option<Match>| match m {
                Some(m) => part_matches(part, m),
                // Strict: only entities of exactly the filtered types.
                None => !req.strict || part.is_none(),
            };
            fits(e.user.as_ref(), &user) && fits(e.client_id.as_ref(), &client)
        })
        .map(|(e, values)| {
            let name = |n: &EntityName| n.to_wire().map(|s| StrBytes::from_string(s.to_string()));
            let mut entity = Vec::new();
            if let Some(u) = &e.user {
                entity.push(
                    EntityData::default()
                        .with_entity_type(StrBytes::from_static_str(USER))
                        .with_entity_name(name(u)),
                );
            }
            if let Some(c) = &e.client_id {
                entity.push(
                    EntityData::default()
                        .with_entity_type(StrBytes::from_static_str(CLIENT_ID))
                        .with_entity_name(name(c)),
                );
            }
            let values = values
                .iter()
                .map(|(k, v)| {
                    ValueData::default()
                        .with_key(StrBytes::from_string(k.clone()))
                        .with_value(*v)
                })
                .collect();
            EntryData::default().with_entity(entity).with_values(values)
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}
