//! DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1–3 as Kafka 4.1 serves them
//! (KIP-896 removed v0). Bindings live in the metadata log (`MetadataRecord::Acls`).
//!
//! Without an authorizer each answers SECURITY_DISABLED. Creating and deleting need ALTER on
//! the cluster, describing DESCRIBE; else CLUSTER_AUTHORIZATION_FAILED. A binding or filter with
//! a code Kafka does not define (or UNKNOWN), or a binding Kafka would not store (an empty
//! name, a CLUSTER not named `kafka-cluster`, a principal without `Type:`), gets
//! INVALID_REQUEST. Creating a binding in force already succeeds and changes nothing.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message};
use crate::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};

pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::DescribeAcls, 1, 3);
pub const CREATE_VERSIONS: Versions = Versions::new(ApiKey::CreateAcls, 1, 3);
pub const DELETE_VERSIONS: Versions = Versions::new(ApiKey::DeleteAcls, 1, 3);

const NO_AUTHORIZER: &str = "No Authorizer is configured.";

/// Why a request is refused whole: no authorizer, or the principal may not `operation` the
/// cluster.
fn refusal(ctx: &Ctx, operation: Operation) -> Option<(i16, &'static str)> {
    if !ctx.authorizer.enabled() {
        return Some((ResponseError::SecurityDisabled.code(), NO_AUTHORIZER));
    }
    if !ctx.authorize_cluster(operation) {
        return Some((
            ResponseError::ClusterAuthorizationFailed.code(),
            "Cluster authorization failed.",
        ));
    }
    None
}

fn code<T: Copy>(value: i8, parse: fn(i8) -> Option<T>, what: &str) -> Result<T, String> {
    parse(value).ok_or_else(|| format!("Invalid {what} {value}"))
}

fn text(s: &StrBytes) -> String {
    s.to_string()
}

fn binding(c: &AclCreation) -> Result<AclBinding, String> {
    let b = AclBinding {
        resource_type: code(c.resource_type, ResourceType::from_code, "resourceType")?,
        pattern_type: code(c.resource_pattern_type, PatternType::from_code, "patternType")?,
        resource_name: text(&c.resource_name),
        principal: text(&c.principal),
        host: text(&c.host),
        operation: code(c.operation, Operation::from_code, "operation")?,
        permission: code(c.permission_type, Permission::from_code, "permissionType")?,
    };
    match b.invalid() {
        Some(reason) => Err(reason),
        None => Ok(b),
    }
}

/// A filter from its wire fields (DescribeAcls and DeleteAcls share them).
#[allow(clippy::too_many_arguments)]
fn filter(
    resource_type: i8,
    name: &Option<StrBytes>,
    pattern_type: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, String> {
    Ok(AclFilter {
        resource_type: code(resource_type, ResourceType::from_code, "resourceType")?,
        resource_name: name.as_ref().map(text),
        pattern_type: code(pattern_type, PatternType::from_code, "patternType")?,
        principal: principal.as_ref().map(text),
        host: host.as_ref().map(text),
        operation: code(operation, Operation::from_code, "operation")?,
        permission: code(permission, Permission::from_code, "permissionType")?,
    })
}

pub async fn create_acls(ctx: &Ctx, req: CreateAclsRequest, _version: i16) -> CreateAclsResponse {
    let n = req.creations.len();
    let answer = |code: i16, text: Option<&str>| {
        AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(text.and_then(message))
    };
    if let Some((code, text)) = refusal(ctx, Operation::Alter) {
        return CreateAclsResponse::default().with_results(vec![answer(code, Some(text)); n]);
    }
    let parsed: Vec<Result<AclBinding, String>> = req.creations.iter().map(binding).collect();
    let valid: Vec<AclBinding> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let written = match valid.is_empty() {
        true => Ok(()),
        false => ctx.controller.create_acls(valid).await,
    };
    let results = parsed
        .iter()
        .map(|p| match (p, &written) {
            (Err(reason), _) => answer(ResponseError::InvalidRequest.code(), Some(reason)),
            (Ok(_), Ok(())) => answer(0, None),
            (Ok(_), Err(e)) => answer(e.code(), Some(&e.to_string())),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

pub async fn describe_acls(ctx: &Ctx, req: DescribeAclsRequest, _version: i16) -> DescribeAclsResponse {
    let refused = |code: i16, text: &str| {
        DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(message(text))
    };
    if let Some((code, text)) = refusal(ctx, Operation::Describe) {
        return refused(code, text);
    }
    let f = match filter(
        req.resource_type_filter,
        &req.resource_name_filter,
        req.pattern_type_filter,
        &req.principal_filter,
        &req.host_filter,
        req.operation,
        req.permission_type,
    ) {
        Ok(f) => f,
        Err(reason) => return refused(ResponseError::InvalidRequest.code(), &reason),
    };
    let image = ctx.controller.image();
    let mut resources: BTreeMap<(ResourceType, String, PatternType), Vec<AclDescription>> = BTreeMap::new();
    for b in image.acls.iter().filter(|b| f.matches(b)) {
        resources
            .entry((b.resource_type, b.resource_name.clone(), b.pattern_type))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(StrBytes::from_string(b.principal.clone()))
                    .with_host(StrBytes::from_string(b.host.clone()))
                    .with_operation(b.operation.code())
                    .with_permission_type(b.permission.code()),
            );
    }
    let resources = resources
        .into_iter()
        .map(|((rt, name, pattern), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(rt.code())
                .with_resource_name(StrBytes::from_string(name))
                .with_pattern_type(pattern.code())
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}

pub async fn delete_acls(ctx: &Ctx, req: DeleteAclsRequest, _version: i16) -> DeleteAclsResponse {
    let failed = |code: i16, text: &str| {
        DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(message(text))
    };
    if let Some((code, text)) = refusal(ctx, Operation::Alter) {
        return DeleteAclsResponse::default().with_filter_results(vec![failed(code, text); req.filters.len()]);
    }
    let parsed: Vec<Result<AclFilter, String>> = req
        .filters
        .iter()
        .map(|f: &DeleteAclsFilter| {
            filter(
                f.resource_type_filter,
                &f.resource_name_filter,
                f.pattern_type_filter,
                &f.principal_filter,
                &f.host_filter,
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclFilter> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let removed = ctx.controller.delete_acls(&valid).await;
    let mut removed = match removed {
        Ok(removed) => removed.into_iter(),
        Err(e) => {
            let results = parsed
                .iter()
                .map(|p| match p {
                    Err(reason) => failed(ResponseError::InvalidRequest.code(), reason),
                    Ok(_) => failed(e.code(), &e.to_string()),
                })
                .collect();
            return DeleteAclsResponse::default().with_filter_results(results);
        }
    };
    let results = parsed
        .iter()
        .map(|p| match p {
            Err(reason) => failed(ResponseError::InvalidRequest.code(), reason),
            Ok(_) => {
                let matching = removed
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|b| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(b.resource_type.code())
                            .with_resource_name(StrBytes::from_string(b.resource_name))
                            .with_pattern_type(b.pattern_type.code())
                            .with_principal(StrBytes::from_string(b.principal))
                            .with_host(StrBytes::from_string(b.host))
                            .with_operation(b.operation.code())
                            .with_permission_type(b.permission.code())
                    })
                    .collect();
                DeleteAclsFilterResult::default().with_matching_acls(matching)
            }
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
