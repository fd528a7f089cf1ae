//! `sluice acl` (Kafka's `kafka-acls`): list, create and delete ACL bindings with
//! DescribeAcls, CreateAcls and DeleteAcls, sent to any broker. Names are Kafka's
//! (`crate::acl`'s resource types, operations, pattern types and permissions).

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use serde_json::json;

use super::CliError;
use super::client::{Client, kafka_result, str_bytes};
use super::output::{Report, table};
use crate::acl::{CLUSTER_NAME, Operation, PatternType, Permission, ResourceType};

#[derive(clap::Subcommand, Debug)]
pub enum AclAction {
    /// ACLs matching the options (none: every ACL).
    List(AclArgs),
    /// Create one ACL per --operation on the resource.
    Create(AclArgs),
    /// Delete the ACLs matching the options.
    Delete(AclArgs),
}

#[derive(clap::Args, Debug)]
pub struct AclArgs {
    /// The principal, User:NAME.
    #[arg(long)]
    principal: Option<String>,
    /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
    /// ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL (repeatable).
    #[arg(long = "operation")]
    operations: Vec<String>,
    /// A topic (a name, or `*`).
    #[arg(long, conflicts_with_all = ["group", "cluster", "transactional_id"])]
    topic: Option<String>,
    /// A consumer group.
    #[arg(long, conflicts_with_all = ["cluster", "transactional_id"])]
    group: Option<String>,
    /// The cluster.
    #[arg(long, conflicts_with = "transactional_id")]
    cluster: bool,
    /// A transactional id.
    #[arg(long)]
    transactional_id: Option<String>,
    /// The resource name is a prefix (PREFIXED), not a literal name.
    #[arg(long)]
    prefixed: bool,
    /// Allow (the default for create).
    #[arg(long, conflicts_with = "deny")]
    allow: bool,
    /// Deny.
    #[arg(long)]
    deny: bool,
    /// The client host (create: default `*`).
    #[arg(long)]
    host: Option<String>,
}

impl AclAction {
    pub fn describe(&self) -> String {
        match self {
            AclAction::List(_) => "acl list".into(),
            AclAction::Create(_) => "acl create".into(),
            AclAction::Delete(_) => "acl delete".into(),
        }
    }
}

impl AclArgs {
    fn resource(&self) -> Option<(ResourceType, String)> {
        if let Some(t) = &self.topic {
            Some((ResourceType::Topic, t.clone()))
        } else if let Some(g) = &self.group {
            Some((ResourceType::Group, g.clone()))
        } else if let Some(t) = &self.transactional_id {
            Some((ResourceType::TransactionalId, t.clone()))
        } else {
            self.cluster.then(|| (ResourceType::Cluster, CLUSTER_NAME.to_string()))
        }
    }

    fn permission(&self, default: Permission) -> Permission {
        match (self.allow, self.deny) {
            (true, _) => Permission::Allow,
            (_, true) => Permission::Deny,
            _ => default,
        }
    }

    fn operations(&self) -> Result<Vec<Operation>, CliError> {
        self.operations
            .iter()
            .map(|o| {
                let name = o.trim().to_ascii_uppercase().replace('-', "_");
                Operation::ALL
                    .iter()
                    .copied()
                    .find(|op| op.name() == name)
                    .ok_or_else(|| CliError::Usage(format!("--operation {o}: not a Kafka ACL operation")))
            })
            .collect()
    }

    fn pattern(&self, unset: PatternType) -> PatternType {
        match (self.prefixed, self.resource().is_some()) {
            (true, _) => PatternType::Prefixed,
            (false, true) => PatternType::Literal,
            (false, false) => unset,
        }
    }
}

pub async fn run(client: &Client, action: AclAction) -> Result<Report, CliError> {
    match action {
        AclAction::List(args) => list(client, &args).await,
        AclAction::Create(args) => create(client, &args).await,
        AclAction::Delete(args) => delete(client, &args).await,
    }
}

/// One binding as printed: resource type, name, pattern, principal, host, operation, permission.
type Row = [String; 7];

fn name_of<T>(code: i8, from: fn(i8) -> Option<T>, name: fn(T) -> &'static str) -> String {
    from(code).map_or_else(|| format!("UNKNOWN({code})"), |v| name(v).to_string())
}

fn row(
    resource_type: i8,
    resource: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> Row {
    [
        name_of(resource_type, ResourceType::from_code, ResourceType::name),
        resource.to_string(),
        name_of(pattern, PatternType::from_code, PatternType::name),
        principal.to_string(),
        host.to_string(),
        name_of(operation, Operation::from_code, Operation::name),
        name_of(permission, Permission::from_code, Permission::name),
    ]
}

fn report(rows: Vec<Row>, verb: &str) -> Report {
    let json_rows: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"resource_type": r[0], "resource_name": r[1], "pattern_type": r[2], "principal": r[3],
                   "host": r[4], "operation": r[5], "permission": r[6]})
        })
        .collect();
    let table_rows: Vec<Vec<String>> = rows.into_iter().map(|r| r.to_vec()).collect();
    Report {
        json: json!({ verb: json_rows }),
        text: table(
            &[
                "RESOURCE-TYPE",
                "RESOURCE",
                "PATTERN",
                "PRINCIPAL",
                "HOST",
                "OPERATION",
                "PERMISSION",
            ],
            &table_rows,
        ),
    }
}

async fn list(client: &Client, args: &AclArgs) -> Result<Report, CliError> {
    let version = client.version::<DescribeAclsRequest>(3)?;
    let (resource_type, name) = args.resource().map_or((ResourceType::Any, None), |(t, n)| (t, Some(n)));
    let operations = args.operations()?;
    let request = DescribeAclsRequest::default()
        .with_resource_type_filter(resource_type.code())
        .with_resource_name_filter(name.as_deref().map(str_bytes))
        .with_pattern_type_filter(args.pattern(PatternType::Any).code())
        .with_principal_filter(args.principal.as_deref().map(str_bytes))
        .with_host_filter(args.host.as_deref().map(str_bytes))
        .with_operation(operations.first().copied().unwrap_or(Operation::Any).code())
        .with_permission_type(args.permission(Permission::Any).code());
    let answer = client.admin(version, &request).await?;
    kafka_result(answer.error_code, answer.error_message.as_deref())?;
    let mut rows = Vec::new();
    for resource in &answer.resources {
        for acl in &resource.acls {
            rows.push(row(
                resource.resource_type,
                &resource.resource_name,
                resource.pattern_type,
                &acl.principal,
                &acl.host,
                acl.operation,
                acl.permission_type,
            ));
        }
    }
    rows.sort();
    Ok(report(rows, "acls"))
}

async fn create(client: &Client, args: &AclArgs) -> Result<Report, CliError> {
    let (resource_type, name) = args
        .resource()
        .ok_or_else(|| CliError::Usage("acl create: give --topic, --group, --transactional-id or --cluster".into()))?;
    let principal = args
        .principal
        .clone()
        .ok_or_else(|| CliError::Usage("acl create: give --principal User:NAME".into()))?;
    let operations = args.operations()?;
    if operations.is_empty() {
        return Err(CliError::Usage("acl create: give --operation".into()));
    }
    let host = args.host.clone().unwrap_or_else(|| "*".into());
    let pattern = args.pattern(PatternType::Literal);
    let permission = args.permission(Permission::Allow);
    let version = client.version::<CreateAclsRequest>(3)?;
    let creations: Vec<AclCreation> = operations
        .iter()
        .map(|op| {
            AclCreation::default()
                .with_resource_type(resource_type.code())
                .with_resource_name(str_bytes(&name))
                .with_resource_pattern_type(pattern.code())
                .with_principal(str_bytes(&principal))
                .with_host(str_bytes(&host))
                .with_operation(op.code())
                .with_permission_type(permission.code())
        })
        .collect();
    let answer = client
        .admin(version, &CreateAclsRequest::default().with_creations(creations))
        .await?;
    for result in &answer.results {
        kafka_result(result.error_code, result.error_message.as_deref())?;
    }
    let rows = operations
        .iter()
        .map(|op| {
            row(
                resource_type.code(),
                &name,
                pattern.code(),
                &principal,
                &host,
                op.code(),
                permission.code(),
            )
        })
        .collect();
    Ok(report(rows, "created"))
}

async fn delete(client: &Client, args: &AclArgs) -> Result<Report, CliError> {
    let version = client.version::<DeleteAclsRequest>(3)?;
    let (resource_type, name) = args.resource().map_or((ResourceType::Any, None), |(t, n)| (t, Some(n)));
    let mut operations = args.operations()?;
    if operations.is_empty() {
        operations.push(Operation::Any);
    }
    let filters = operations
        .iter()
        .map(|op| {
            DeleteAclsFilter::default()
                .with_resource_type_filter(resource_type.code())
                .with_resource_name_filter(name.as_deref().map(str_bytes))
                .with_pattern_type_filter(args.pattern(PatternType::Any).code())
                .with_principal_filter(args.principal.as_deref().map(str_bytes))
                .with_host_filter(args.host.as_deref().map(str_bytes))
                .with_operation(op.code())
                .with_permission_type(args.permission(Permission::Any).code())
        })
        .collect();
    let answer = client
        .admin(version, &DeleteAclsRequest::default().with_filters(filters))
        .await?;
    let mut rows = Vec::new();
    for result in &answer.filter_results {
        kafka_result(result.error_code, result.error_message.as_deref())?;
        for acl in &result.matching_acls {
            kafka_result(acl.error_code, acl.error_message.as_deref())?;
            rows.push(row(
                acl.resource_type,
                &acl.resource_name,
                acl.pattern_type,
                &acl.principal,
                &acl.host,
                acl.operation,
                acl.permission_type,
            ));
        }
    }
    rows.sort();
    Ok(report(rows, "deleted"))
}
