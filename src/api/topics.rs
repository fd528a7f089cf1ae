//! Topic administration through the controller: CreateTopics (key 19), DeleteTopics (key 20),
//! CreatePartitions (key 37).
//! CreateTopics: v2 baseline here (validate_only, error messages) · v3-v4 same · v5 flexible,
//! configs, partition count and replication factor in answers · v6 same · v7 topic ids.
//! DeleteTopics: v1 baseline (throttle) · v2-v3 same · v4 flexible · v5 error messages · v6
//! delete by topic id. CreatePartitions: v0 baseline · v1 same · v2 flexible · v3 same.
//! Counts are the client's claims: checked before any arithmetic, and a request adding more
//! than `PARTITIONS_PER_REQUEST_MAX` partitions is refused whole (POLICY_VIOLATION).

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use uuid::Uuid;

use super::{Ctx, Versions, message, topic_name};
use crate::acl::{Operation, ResourceType};
use crate::cluster::TopicInfo;
use crate::config::validate_topic_config;
use crate::error::Error;
use crate::quota::{CONTROLLER_MUTATION_RATE, ClientQuotas, Mutations};

pub const CREATE_TOPICS_VERSIONS: Versions = Versions::new(ApiKey::CreateTopics, 2, 7);
pub const DELETE_TOPICS_VERSIONS: Versions = Versions::new(ApiKey::DeleteTopics, 1, 6);
pub const CREATE_PARTITIONS_VERSIONS: Versions = Versions::new(ApiKey::CreatePartitions, 0, 3);

/// Partitions one CreateTopics or CreatePartitions request may add: Kafka's
/// `ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`. Past it the request would commit one
/// metadata record naming them all, and opening them could exhaust memory and descriptors.
const PARTITIONS_PER_REQUEST_MAX: i64 = 10_000;

/// Kafka's messages for a request past `PARTITIONS_PER_REQUEST_MAX`: CreateTopics' explicit
/// check (`validateTotalNumberOfPartitions`); CreatePartitions has none in Kafka 4 (its bounded
/// record list fails the topic with UNKNOWN_SERVER_ERROR), so it gets the same answer here.
const TOO_MANY_PARTITIONS: &str = "Excessively large number of partitions per request.";

fn reopen(ctx: &Ctx) -> Result<(), Error> {
    ctx.replicas.catch_up(&ctx.controller.image())
}

/// Who sent a request, for its quotas: the quotas in force, the principal's user, the client id.
pub type QuotaSender<'a> = (&'a ClientQuotas, &'a str, &'a str);

/// A request's controller mutation quota (KIP-599, `controller_mutation_rate`): each topic's
/// partitions are taken from the client's bucket just before it is created, deleted or grown,
/// after every other check, as Kafka's controller applies it (`applyPartitionChangeQuota`).
pub struct MutationQuota<'a> {
    sender: Option<QuotaSender<'a>>,
    mode: Mutations,
    throttle: Duration,
}

impl<'a> MutationQuota<'a> {
    /// Strict from `strict_since` (the first version whose clients know
    /// THROTTLING_QUOTA_EXCEEDED), permissive below it.
    pub fn new(sender: Option<QuotaSender<'a>>, version: i16, strict_since: i16) -> MutationQuota<'a> {
        let sender = sender.filter(|(quotas, user, client_id)| {
            crate::quota::resolve(quotas, CONTROLLER_MUTATION_RATE, user, client_id).is_some()
        });
        let mode = match version >= strict_since {
            true => Mutations::Strict,
            false => Mutations::Permissive,
        };
        MutationQuota {
            sender,
            mode,
            throttle: Duration::ZERO,
        }
    }

    /// Whether a quota applies: only then are topics checked before their mutation is taken.
    fn applies(&self) -> bool {
        self.sender.is_some()
    }

    /// Takes `partitions` from the bucket, or refuses the topic with THROTTLING_QUOTA_EXCEEDED.
    fn take(&mut self, ctx: &Ctx, partitions: i64) -> Result<(), Error> {
        let Some((quotas, user, client_id)) = self.sender else {
            return Ok(());
        };
        let now = std::time::Instant::now();
        let outcome = ctx
            .quotas
            .mutate(quotas, user, client_id, partitions as f64, self.mode, now);
        let (Ok(wait) | Err(wait)) = outcome;
        self.throttle = self.throttle.max(wait);
        outcome.map(drop).map_err(|_| Error::Controller {
            code: ResponseError::ThrottlingQuotaExceeded.code(),
            message: "The throttling quota has been exceeded.".into(),
        })
    }

    /// How long the client is throttled for (the response's throttle_time_ms, and how long
    /// its connection is not read).
    pub fn throttle(&self) -> Duration {
        self.throttle
    }
}

pub async fn create_topics(
    ctx: &Ctx,
    req: CreateTopicsRequest,
    version: i16,
    quota: &mut MutationQuota<'_>,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    // Kafka's `validateTotalNumberOfPartitions`: an upper bound (invalid topics included) taken
    // before anything else; past it every topic gets POLICY_VIOLATION. Summed in i64, where
    // Kafka's int sum can wrap.
    let requested: i64 = req
        .topics
        .iter()
        .map(|t| match (t.assignments.len(), t.num_partitions) {
            (0, -1) => i64::from(ctx.config.num_partitions),
            (0, n) => i64::from(n.max(0)),
            (assigned, _) => i64::try_from(assigned).unwrap_or(i64::MAX),
        })
        .fold(0, i64::saturating_add);
    if requested > PARTITIONS_PER_REQUEST_MAX {
        for topic in req.topics {
            let mut result = CreatableTopicResult::default()
                .with_name(topic.name)
                .with_error_code(ResponseError::PolicyViolation.code())
                .with_error_message(message(TOO_MANY_PARTITIONS));
            if version >= 5 {
                result.num_partitions = -1;
                result.replication_factor = -1;
            }
            results.push(result);
        }
        return CreateTopicsResponse::default().with_topics(results);
    }
    // Kafka answers a name listed twice with INVALID_REQUEST for each occurrence.
    let mut seen = BTreeMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.to_string()).or_insert(0) += 1;
    }
    // Kafka: CREATE on the cluster, or on each topic.
    let may_create_all = ctx.authorize_cluster(Operation::Create);
    for topic in req.topics {
        let name = topic.name.0.to_string();
        let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
        let outcome = if seen.get(&name).copied().unwrap_or(0) > 1 {
            Err(Error::InvalidRequest(format!("topic {name} is listed more than once")))
        } else if !may_create_all && !ctx.authorize(Operation::Create, ResourceType::Topic, &name) {
            Err(Error::TopicAuthorizationFailed)
        } else {
            create_one(ctx, &name, &topic, req.validate_only, quota)
        };
        match outcome {
            Ok((partitions, replication_factor, id, configs)) => {
                if version >= 5 {
                    result.num_partitions = partitions;
                    result.replication_factor = replication_factor;
                    // The configs only to those who may describe them.
                    if ctx.authorize(Operation::DescribeConfigs, ResourceType::Topic, &name) {
                        result.configs = Some(describe_configs(ctx, &configs));
                    } else {
                        result.topic_config_error_code = ResponseError::TopicAuthorizationFailed.code();
                    }
                }
                if version >= 7 {
                    result.topic_id = id;
                }
            }
            Err(e) => {
                result.error_code = e.code();
                result.error_message = message(&e);
                if version >= 5 {
                    result.num_partitions = -1;
                    result.replication_factor = -1;
                }
            }
        }
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}

type Created = (i32, i16, Uuid, BTreeMap<String, String>);

fn create_one(
    ctx: &Ctx,
    name: &str,
    topic: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    validate_only: bool,
    quota: &mut MutationQuota<'_>,
) -> Result<Created, Error> {
    let mut configs = BTreeMap::new();
    for c in &topic.configs {
        let key = c.name.to_string();
        let Some(value) = c.value.as_ref().map(|v| v.to_string()) else {
            return Err(Error::InvalidConfig {
                key,
                reason: "null value".into(),
            });
        };
        validate_topic_config(&key, &value).map_err(|e| Error::InvalidConfig {
            key: e.key,
            reason: e.reason,
        })?;
        configs.insert(key, value);
    }
    let (partitions, replication_factor, manual) = if topic.assignments.is_empty() {
        let partitions = if topic.num_partitions == -1 {
            ctx.config.num_partitions
        } else {
            topic.num_partitions
        };
        let rf = if topic.replication_factor == -1 {
            ctx.config.default_replication_factor
        } else {
            topic.replication_factor
        };
        (partitions, rf, None)
    } else {
        // A manual assignment: partitions 0..n, the counts unset; the controller checks the
        // brokers (live, none twice, as many per partition).
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(Error::InvalidRequest(
                "both a replica assignment and a partition count or replication factor were given".into(),
            ));
        }
        let mut sorted: Vec<_> = topic.assignments.iter().collect();
        sorted.sort_by_key(|a| a.partition_index);
        for (i, a) in sorted.iter().enumerate() {
            if i32::try_from(i).ok() != Some(a.partition_index) {
                return Err(Error::InvalidReplicaAssignment(
                    "partitions must be numbered 0..n without gaps".into(),
                ));
            }
        }
        let manual: Vec<Vec<i32>> = sorted
            .iter()
            .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
            .collect();
        // At most PARTITIONS_PER_REQUEST_MAX (create_topics checked), so this always converts.
        let partitions =
            i32::try_from(manual.len()).map_err(|_| Error::InvalidReplicaAssignment("too many partitions".into()))?;
        let rf = manual.first().and_then(|r| i16::try_from(r.len()).ok()).unwrap_or(0);
        (partitions, rf, Some(manual))
    };
    if validate_only || quota.applies() {
        // Kafka takes the quota after the topic's checks (validate_only takes it too).
        ctx.controller
            .validate_new_topic(name, partitions, replication_factor)?;
        quota.take(ctx, i64::from(partitions))?;
    }
    if validate_only {
        return Ok((partitions, replication_factor, Uuid::nil(), configs));
    }
    let info = create_and_open(ctx, name, partitions, replication_factor, manual, configs)?;
    Ok((info.partitions, info.replication_factor, info.id, info.configs.clone()))
}

/// Creates a topic and opens its partitions, atomically as the client sees it: when a
/// partition cannot be created (no space, no descriptors left), the topic is deleted from the
/// metadata log again and the error returned, so metadata never names a topic whose storage
/// does not exist (CreateTopics and Metadata auto-creation).
pub(super) fn create_and_open(
    ctx: &Ctx,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    manual: Option<Vec<Vec<i32>>>,
    configs: BTreeMap<String, String>,
) -> Result<std::sync::Arc<TopicInfo>, Error> {
    let info = match manual {
        Some(manual) => ctx.controller.create_topic_assigned(name, manual, configs)?,
        None => ctx
            .controller
            .create_topic(name, partitions, replication_factor, configs)?,
    };
    if let Err(e) = reopen(ctx) {
        if ctx.replicas.topic_is_offline(&info.name, info.partitions) {
            tracing::error!(topic = name, error = %e, "creating a topic failed: removing it again");
            if let Err(undo) = ctx.controller.delete_topic(info.id) {
                tracing::error!(topic = name, error = %undo, "removing a topic that failed to open");
            }
            let _ = reopen(ctx);
        }
        return Err(e);
    }
    Ok(info)
}

/// Every topic key with its value and source, as CreateTopics v5+ reports them: the sources
/// DescribeConfigs gives (a dynamic cluster default is DYNAMIC_DEFAULT_BROKER_CONFIG, a key of
/// the config file STATIC_BROKER_CONFIG), not DEFAULT_CONFIG for every key not overridden.
fn describe_configs(ctx: &Ctx, overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    super::configs::effective_topic_configs(ctx, overrides)
        .into_iter()
        .map(|c| {
            CreatableTopicConfigs::default()
                .with_name(c.name)
                .with_value(c.value)
                .with_read_only(c.read_only)
                .with_config_source(c.config_source)
                .with_is_sensitive(c.is_sensitive)
        })
        .collect()
}

pub async fn delete_topics(
    ctx: &Ctx,
    req: DeleteTopicsRequest,
    version: i16,
    quota: &mut MutationQuota<'_>,
) -> DeleteTopicsResponse {
    // v6 names topics by name or id in `topics`; older versions list names.
    let wanted: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut results = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let image = ctx.controller.image();
        let found = match (&name, id.is_nil()) {
            (Some(n), true) => image
                .topic(n)
                .cloned()
                .ok_or_else(|| Error::UnknownTopicOrPartition(n.clone())),
            (None, false) => image.topic_by_id(&id).cloned().ok_or(Error::UnknownTopicId(id)),
            _ => Err(Error::InvalidRequest(
                "give a topic name or a topic id, not both".into(),
            )),
        };
        // Kafka: DELETE on the topic (which implies DESCRIBE); by name it is checked before
        // the topic's existence, which an unauthorized client does not learn.
        let may_delete = |n: &str| ctx.authorize(Operation::Delete, ResourceType::Topic, n);
        let found = match found {
            Err(Error::UnknownTopicOrPartition(n)) if !may_delete(&n) => Err(Error::TopicAuthorizationFailed),
            Ok(topic) if !may_delete(&topic.name) => Err(Error::TopicAuthorizationFailed),
            other => other,
        };
        let outcome = found.and_then(|topic| {
            quota.take(ctx, i64::from(topic.partitions))?;
            ctx.controller.delete_topic(topic.id)?;
            reopen(ctx)?;
            Ok(topic)
        });
        let mut result = DeletableTopicResult::default();
        match outcome {
            Ok(topic) => {
                ctx.coordinator.on_topic_deleted(&topic.name, topic.id).await;
                result.name = Some(topic_name(&topic.name));
                if version >= 6 {
                    result.topic_id = topic.id;
                }
            }
            Err(e) => {
                result.name = name.as_deref().map(topic_name);
                if version >= 6 {
                    result.topic_id = id;
                }
                result.error_code = e.code();
                if version >= 5 {
                    result.error_message = message(&e);
                }
            }
        }
        results.push(result);
    }
    DeleteTopicsResponse::default().with_responses(results)
}

/// A topic's CreatePartitions error: the code (from `Error::code`) and Kafka's message.
struct Refusal {
    code: i16,
    message: String,
}

impl Refusal {
    /// `error`'s code with Kafka's wording of it.
    fn worded(error: Error, message: String) -> Refusal {
        Refusal {
            code: error.code(),
            message,
        }
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

pub async fn create_partitions(
    ctx: &Ctx,
    req: CreatePartitionsRequest,
    _version: i16,
    quota: &mut MutationQuota<'_>,
) -> CreatePartitionsResponse {
    let image = ctx.controller.image();
    // Partitions the request would add, from the counts as sent (in i64: `count - current`
    // overflows i32 for a count near i32::MIN). Same bound and answer as CreateTopics.
    let added: i64 = req
        .topics
        .iter()
        .filter_map(|t| image.topic(&t.name.0).map(|current| (t.count, current.partitions)))
        .map(|(count, current)| (i64::from(count) - i64::from(current)).max(0))
        .fold(0, i64::saturating_add);
    if added > PARTITIONS_PER_REQUEST_MAX {
        let results = req
            .topics
            .into_iter()
            .map(|t| {
                CreatePartitionsTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(ResponseError::PolicyViolation.code())
                    .with_error_message(message(TOO_MANY_PARTITIONS))
            })
            .collect();
        return CreatePartitionsResponse::default().with_results(results);
    }
    let mut results = Vec::with_capacity(req.topics.len());
    for topic in req.topics {
        let mut result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        let outcome = match ctx.authorize(Operation::Alter, ResourceType::Topic, &topic.name.0) {
            true => create_partitions_one(ctx, &topic, req.validate_only, quota),
            false => Err(Refusal::from(Error::TopicAuthorizationFailed)),
        };
        if let Err(refusal) = outcome {
            result.error_code = refusal.code;
            result.error_message = message(refusal.message);
        }
        results.push(result);
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// Checks in Kafka's order (`ReplicationControlManager.createPartitions`): the topic exists,
/// the count is an increase, the assignments cover exactly the new partitions; then the
/// controller, which checks the count again under its commit.
fn create_partitions_one(
    ctx: &Ctx,
    topic: &kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic,
    validate_only: bool,
    quota: &mut MutationQuota<'_>,
) -> Result<(), Refusal> {
    let name = topic.name.0.to_string();
    let current = ctx
        .controller
        .image()
        .topic(&name)
        .map(|t| t.partitions)
        .ok_or_else(|| Error::UnknownTopicOrPartition(name.clone()))?;
    let count = topic.count;
    if count == current {
        let message = format!("Topic already has {current} partition(s).");
        return Err(Refusal::worded(Error::InvalidPartitions(count), message));
    }
    if count < current {
        let message =
            format!("The topic {name} currently has {current} partition(s); {count} would not be an increase.");
        return Err(Refusal::worded(Error::InvalidPartitions(count), message));
    }
    // count > current >= 0: the difference fits.
    let added = i64::from(count) - i64::from(current);
    if let Some(assignments) = topic.assignments.as_ref().filter(|a| !a.is_empty())
        && i64::try_from(assignments.len()).ok() != Some(added)
    {
        let message = format!(
            "Attempted to add {added} additional partition(s), but only {} assignment(s) were specified.",
            assignments.len()
        );
        return Err(Refusal::worded(
            Error::InvalidReplicaAssignment(message.clone()),
            message,
        ));
    }
    let manual: Option<Vec<Vec<i32>>> = topic
        .assignments
        .as_ref()
        .filter(|a| !a.is_empty())
        .map(|a| a.iter().map(|a| a.broker_ids.iter().map(|b| b.0).collect()).collect());
    if quota.applies() {
        // After the controller's own checks, as Kafka's.
        ctx.controller
            .create_partitions(&name, count, manual.as_deref(), true)?;
        quota.take(ctx, added)?;
    }
    ctx.controller
        .create_partitions(&name, count, manual.as_deref(), validate_only)?;
    if !validate_only {
        reopen(ctx)?;
    }
    Ok(())
}
