//! `sluice group` (Kafka's `kafka-consumer-groups` and `kafka-share-groups`): list, describe
//! with lag, delete, and reset-offsets, a dry run unless `--execute`.
//!
//! ListGroups goes to every broker (each lists the groups it coordinates); DescribeGroups,
//! ShareGroupDescribe, OffsetFetch, DescribeShareGroupOffsets, OffsetCommit and DeleteGroups to
//! the group's coordinator (FindCoordinator); ListOffsets to each partition's leader (Metadata).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, DeleteGroupsRequest, DescribeGroupsRequest, DescribeShareGroupOffsetsRequest, GroupId,
    ListGroupsRequest, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest, ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
};
use kafka_protocol::protocol::Decodable;
use serde_json::json;

use super::CliError;
use super::client::{Client, Metadata, kafka_result, str_bytes, topic_name};
use super::output::{Progress, Report, table};
use crate::cluster::BrokerInfo;

/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
/// Kafka's GROUP_ID_NOT_FOUND.
const GROUP_ID_NOT_FOUND: i16 = 69;

/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the coordinator is
/// loading or moved; Kafka's clients find it again and retry.
const COORDINATOR_RETRIABLE: [i16; 3] = [14, 15, 16];
const COORDINATOR_RETRIES_MAX: u32 = 40;
const COORDINATOR_BACKOFF: std::time::Duration = std::time::Duration::from_millis(250);

type TopicPartition = (String, i32);

/// Runs `call` at the group's coordinator (FindCoordinator), finding it again while it loads
/// or moves, a bounded number of times.
pub async fn at_coordinator<T, F, Fut>(client: &Client, group: &str, mut call: F) -> Result<T, CliError>
where
    F: FnMut(BrokerInfo) -> Fut,
    Fut: std::future::Future<Output = Result<T, CliError>>,
{
    let mut tries = 0;
    loop {
        let result = match client.coordinator(group).await {
            Ok(coordinator) => call(coordinator).await,
            Err(e) => Err(e),
        };
        match result {
            Err(CliError::Kafka { code, .. })
                if COORDINATOR_RETRIABLE.contains(&code) && tries < COORDINATOR_RETRIES_MAX =>
            {
                tries += 1;
                tokio::time::sleep(COORDINATOR_BACKOFF).await;
            }
            other => return other,
        }
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum GroupAction {
    /// List groups and their states (ListGroups on every broker).
    List,
    /// Per partition: committed offset, log end offset, lag, and the member that owns it; for a
    /// share group, its start offset, the log end, the records between, and its members.
    Describe { group: String },
    /// Delete groups with no members (DeleteGroups).
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Move a group's committed offsets (a share group's start offsets). Prints the plan only
    /// unless --execute is given.
    ResetOffsets(ResetArgs),
}

#[derive(clap::Args, Debug)]
pub struct ResetArgs {
    group: String,
    /// TOPIC or TOPIC:PARTITION,PARTITION... (repeatable).
    #[arg(long = "topic", value_name = "TOPIC[:P,...]", required_unless_present = "all_topics")]
    topics: Vec<String>,
    /// Every topic the group has committed offsets for.
    #[arg(long, conflicts_with = "topics")]
    all_topics: bool,
    #[command(flatten)]
    target: ResetTarget,
    /// Commit the new offsets (the group must have no members).
    #[arg(long)]
    execute: bool,
    /// Only print the plan (the default).
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Print progress on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
}

#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false)]
pub struct ResetTarget {
    /// The log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// The log end offset.
    #[arg(long)]
    to_latest: bool,
    /// The first offset at or after a time: RFC 3339 (2026-01-31T12:00:00Z, +01:00) or
    /// YYYY-MM-DDTHH:MM:SS[.mmm], read as UTC.
    #[arg(long, value_name = "DATETIME")]
    to_datetime: Option<String>,
    /// The committed offset moved by N (negative: back), kept within the log.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
}

impl GroupAction {
    pub fn describe(&self) -> String {
        match self {
            GroupAction::List => "group list".into(),
            GroupAction::Describe { group } => format!("group describe {group}"),
            GroupAction::Delete { groups } => format!("group delete {}", groups.join(" ")),
            GroupAction::ResetOffsets(args) => format!("group reset-offsets {}", args.group),
        }
    }
}

pub async fn run(client: &Client, action: GroupAction) -> Result<Report, CliError> {
    match action {
        GroupAction::List => list(client).await,
        GroupAction::Describe { group } => describe(client, &group).await,
        GroupAction::Delete { groups } => delete(client, &groups).await,
        GroupAction::ResetOffsets(args) => reset_offsets(client, args).await,
    }
}

async fn list(client: &Client) -> Result<Report, CliError> {
    let metadata = client.metadata(Some(&[])).await?;
    let version = client.version::<ListGroupsRequest>(5)?;
    let mut groups = BTreeMap::new();
    for broker in metadata.brokers.values() {
        let answer = client.send(broker, version, &ListGroupsRequest::default()).await?;
        kafka_result(answer.error_code, None)?;
        for g in answer.groups {
            let state = match version >= 4 {
                true => g.group_state.to_string(),
                false => String::new(),
            };
            // v5 (KIP-848) names the group's type: classic, consumer or share.
            let kind = match version >= 5 {
                true => g.group_type.to_string(),
                false => String::new(),
            };
            groups.insert(g.group_id.0.to_string(), (state, kind, g.protocol_type.to_string()));
        }
    }
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|(g, (state, kind, protocol))| vec![g.clone(), state.clone(), kind.clone(), protocol.clone()])
        .collect();
    Ok(Report {
        json: json!({"groups": groups.iter().map(|(g, (state, kind, protocol))| json!({"group": g, "state": state, "type": kind, "protocol_type": protocol})).collect::<Vec<_>>()}),
        text: table(&["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"], &rows),
    })
}

/// A group as DescribeGroups tells it: its state and which member owns which partition.
struct GroupState {
    state: String,
    members: usize,
    owners: BTreeMap<TopicPartition, (String, String, String)>,
}

async fn describe_group(client: &Client, coordinator: &BrokerInfo, group: &str) -> Result<GroupState, CliError> {
    let version = client.version::<DescribeGroupsRequest>(5)?;
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(str_bytes(group))]);
    let answer = client.send(coordinator, version, &request).await?;
    let described = answer
        .groups
        .into_iter()
        .next()
        .ok_or_else(|| CliError::Network("DescribeGroups: an answer without the group".into()))?;
    kafka_result(described.error_code, described.error_message.as_deref())?;
    let mut owners = BTreeMap::new();
    for member in &described.members {
        // The consumer protocol's assignment: a version, then the partitions (KIP-429).
        let mut bytes = member.member_assignment.clone();
        if bytes.len() < 2 {
            continue;
        }
        let assignment_version = i16::from_be_bytes([bytes[0], bytes[1]]);
        let _ = bytes.split_to(2);
        let Ok(assignment) = ConsumerProtocolAssignment::decode(&mut bytes, assignment_version.clamp(0, 3)) else {
            continue;
        };
        for tp in assignment.assigned_partitions {
            for p in tp.partitions {
                owners.insert(
                    (tp.topic.0.to_string(), p),
                    (
                        member.member_id.to_string(),
                        member.client_host.to_string(),
                        member.client_id.to_string(),
                    ),
                );
            }
        }
    }
    Ok(GroupState {
        state: described.group_state.to_string(),
        members: described.members.len(),
        owners,
    })
}

/// The group's committed offsets, for every partition it has one.
pub async fn committed(
    client: &Client,
    coordinator: &BrokerInfo,
    group: &str,
) -> Result<BTreeMap<TopicPartition, i64>, CliError> {
    // v10 names topics by id (KIP-848); up to v9 by name.
    let version = client.version::<OffsetFetchRequest>(9)?;
    let request = match version >= 8 {
        true => OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(str_bytes(group)))
                .with_topics(None),
        ]),
        false => OffsetFetchRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_topics(None),
    };
    let answer = client.send(coordinator, version, &request).await?;
    let mut out = BTreeMap::new();
    let mut take = |topic: &str, partition: i32, offset: i64, code: i16| -> Result<(), CliError> {
        kafka_result(code, None)?;
        if offset >= 0 {
            out.insert((topic.to_string(), partition), offset);
        }
        Ok(())
    };
    if version >= 8 {
        for g in &answer.groups {
            kafka_result(g.error_code, None)?;
            for t in &g.topics {
                for p in &t.partitions {
                    take(&t.name.0, p.partition_index, p.committed_offset, p.error_code)?;
                }
            }
        }
    } else {
        kafka_result(answer.error_code, None)?;
        for t in &answer.topics {
            for p in &t.partitions {
                take(&t.name.0, p.partition_index, p.committed_offset, p.error_code)?;
            }
        }
    }
    Ok(out)
}

/// ListOffsets at `timestamp` for each partition, sent to each one's leader.
pub async fn list_offsets(
    client: &Client,
    metadata: &Metadata,
    partitions: &BTreeSet<TopicPartition>,
    timestamp: i64,
    progress: &mut Progress,
) -> Result<BTreeMap<TopicPartition, i64>, CliError> {
    let version = client.version::<ListOffsetsRequest>(10)?;
    let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for (topic, partition) in partitions {
        let leader = metadata
            .topics
            .iter()
            .find(|t| &t.name == topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == *partition))
            .map(|p| p.leader)
            .ok_or_else(|| CliError::Kafka {
                code: kafka_protocol::error::ResponseError::UnknownTopicOrPartition.code(),
                message: format!("{topic}-{partition}"),
            })?;
        by_leader
            .entry(leader)
            .or_default()
            .entry(topic.clone())
            .or_default()
            .push(*partition);
    }
    let mut out = BTreeMap::new();
    for (leader, topics) in by_leader {
        let broker = metadata.brokers.get(&leader).ok_or_else(|| CliError::Kafka {
            code: kafka_protocol::error::ResponseError::LeaderNotAvailable.code(),
            message: format!(
                "no live leader for {}",
                topics.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        })?;
        let request = crate::api::list_offsets::request_for(&topics, timestamp);
        let answer = client.send(broker, version, &request).await?;
        for t in &answer.topics {
            for p in &t.partitions {
                kafka_result(p.error_code, Some(&format!("{}-{}", t.name.0, p.partition_index)))?;
                out.insert((t.name.0.to_string(), p.partition_index), p.offset);
            }
        }
        let done = out.len();
        progress.tick(|| format!("listed offsets of {done}/{} partitions", partitions.len()));
    }
    Ok(out)
}

async fn describe(client: &Client, group: &str) -> Result<Report, CliError> {
    if let Some(share) = describe_share_group(client, group).await? {
        return describe_share(client, group, share).await;
    }
    let state = at_coordinator(
        client,
        group,
        |c| async move { describe_group(client, &c, group).await },
    )
    .await?;
    let committed = at_coordinator(client, group, |c| async move { committed(client, &c, group).await }).await?;
    if state.state == "Dead" && committed.is_empty() {
        return Err(CliError::Kafka {
            code: GROUP_ID_NOT_FOUND,
            message: format!("Consumer group '{group}' does not exist."),
        });
    }
    let partitions: BTreeSet<TopicPartition> = committed.keys().chain(state.owners.keys()).cloned().collect();
    let topics = topic_names(&partitions);
    let metadata = client.metadata(Some(&topics)).await?;
    let ends = list_offsets(client, &metadata, &partitions, LATEST, &mut Progress::new(false)).await?;
    let dash = || "-".to_string();
    let mut rows = Vec::new();
    let mut json_rows = Vec::new();
    for tp in &partitions {
        let current = committed.get(tp).copied();
        let end = ends.get(tp).copied();
        let lag = match (current, end) {
            (Some(c), Some(e)) => Some((e - c).max(0)),
            _ => None,
        };
        let owner = state.owners.get(tp);
        rows.push(vec![
            group.to_string(),
            tp.0.clone(),
            tp.1.to_string(),
            current.map_or_else(dash, |c| c.to_string()),
            end.map_or_else(dash, |e| e.to_string()),
            lag.map_or_else(dash, |l| l.to_string()),
            owner.map_or_else(dash, |o| o.0.clone()),
            owner.map_or_else(dash, |o| o.1.clone()),
            owner.map_or_else(dash, |o| o.2.clone()),
        ]);
        json_rows.push(json!({
            "topic": tp.0, "partition": tp.1, "committed_offset": current, "log_end_offset": end, "lag": lag,
            "member_id": owner.map(|o| &o.0), "host": owner.map(|o| &o.1), "client_id": owner.map(|o| &o.2),
        }));
    }
    Ok(Report {
        json: json!({"group": group, "state": state.state, "members": state.members, "partitions": json_rows}),
        text: format!(
            "Group: {group}\tState: {}\tMembers: {}\n{}",
            state.state,
            state.members,
            table(
                &[
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID"
                ],
                &rows
            )
        ),
    })
}

/// The share group `group` as ShareGroupDescribe tells it; None when it is not a share group
/// (or the broker serves no share groups).
async fn describe_share_group(
    client: &Client,
    group: &str,
) -> Result<Option<kafka_protocol::messages::share_group_describe_response::DescribedGroup>, CliError> {
    let Ok(version) = client.version::<ShareGroupDescribeRequest>(1) else {
        return Ok(None);
    };
    let request = ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(group))]);
    let request = &request;
    let answer: ShareGroupDescribeResponse =
        at_coordinator(
            client,
            group,
            |c| async move { client.send(&c, version, request).await },
        )
        .await?;
    let Some(described) = answer.groups.into_iter().next() else {
        return Ok(None);
    };
    if described.error_code == GROUP_ID_NOT_FOUND || described.group_state.as_str() == "Dead" {
        return Ok(None);
    }
    kafka_result(described.error_code, described.error_message.as_deref())?;
    Ok(Some(described))
}

/// A share group's start offset and, from v1 (KIP-1226), its lag as the broker counts it
/// (records not yet delivered for good), for every partition it started.
async fn share_offsets(client: &Client, group: &str) -> Result<BTreeMap<TopicPartition, (i64, Option<i64>)>, CliError> {
    let version = client.version::<DescribeShareGroupOffsetsRequest>(1)?;
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(str_bytes(group)))
            // None: every partition the group has started (the default is an empty list).
            .with_topics(None),
    ]);
    let request = &request;
    let offsets = at_coordinator(
        client,
        group,
        |c| async move { client.send(&c, version, request).await },
    )
    .await?;
    let mut starts = BTreeMap::new();
    for g in &offsets.groups {
        kafka_result(g.error_code, g.error_message.as_deref())?;
        for t in &g.topics {
            for p in &t.partitions {
                if p.error_code == 0 && p.start_offset >= 0 {
                    let lag = (p.lag >= 0).then_some(p.lag);
                    starts.insert((t.topic_name.to_string(), p.partition_index), (p.start_offset, lag));
                }
            }
        }
    }
    Ok(starts)
}

/// AlterShareGroupOffsets: the share group starts each partition of `offsets` there (the
/// coordinator accepts it only while the group has no members).
async fn alter_share_offsets(
    client: &Client,
    coordinator: &BrokerInfo,
    group: &str,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<(), CliError> {
    use kafka_protocol::messages::AlterShareGroupOffsetsRequest;
    use kafka_protocol::messages::alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
    };
    let version = client.version::<AlterShareGroupOffsetsRequest>(0)?;
    let mut by_topic: BTreeMap<&str, Vec<AlterShareGroupOffsetsRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in offsets {
        by_topic.entry(topic).or_default().push(
            AlterShareGroupOffsetsRequestPartition::default()
                .with_partition_index(*partition)
                .with_start_offset(*offset),
        );
    }
    let request = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(topic_name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let answer = client.send(coordinator, version, &request).await?;
    kafka_result(answer.error_code, answer.error_message.as_deref())?;
    for t in &answer.responses {
        for p in &t.partitions {
            kafka_result(p.error_code, Some(&format!("{}-{}", t.topic_name.0, p.partition_index)))?;
        }
    }
    Ok(())
}

/// A share group (Kafka's `kafka-share-groups --describe`): per partition it has started, its
/// start offset (records below it are all acknowledged or archived), the log end, the records
/// between them and how many members are assigned the partition; then each member.
async fn describe_share(
    client: &Client,
    group: &str,
    described: kafka_protocol::messages::share_group_describe_response::DescribedGroup,
) -> Result<Report, CliError> {
    let offsets = share_offsets(client, group).await?;
    let mut assigned: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    let mut members = Vec::new();
    for m in &described.members {
        let mut count = 0;
        for tp in &m.assignment.topic_partitions {
            for p in &tp.partitions {
                *assigned.entry((tp.topic_name.to_string(), *p)).or_default() += 1;
                count += 1;
            }
        }
        members.push((
            m.member_id.to_string(),
            m.client_host.to_string(),
            m.client_id.to_string(),
            count,
        ));
    }
    let partitions: BTreeSet<TopicPartition> = offsets.keys().chain(assigned.keys()).cloned().collect();
    let metadata = client.metadata(Some(&topic_names(&partitions))).await?;
    let ends = list_offsets(client, &metadata, &partitions, LATEST, &mut Progress::new(false)).await?;
    let dash = || "-".to_string();
    let mut rows = Vec::new();
    let mut json_rows = Vec::new();
    for tp in &partitions {
        let start = offsets.get(tp).map(|o| o.0);
        let end = ends.get(tp).copied();
        // The broker's lag leaves out what was acknowledged past the start offset; a broker
        // before Kafka 4.2's v1 gives none, and the records past the start offset stand in.
        let pending = match (offsets.get(tp), end) {
            (Some((_, Some(lag))), _) => Some(*lag),
            (Some((s, None)), Some(e)) => Some((e - s).max(0)),
            _ => None,
        };
        let readers = assigned.get(tp).copied().unwrap_or(0);
        rows.push(vec![
            group.to_string(),
            tp.0.clone(),
            tp.1.to_string(),
            start.map_or_else(dash, |s| s.to_string()),
            end.map_or_else(dash, |e| e.to_string()),
            pending.map_or_else(dash, |l| l.to_string()),
            readers.to_string(),
        ]);
        json_rows.push(json!({
            "topic": tp.0, "partition": tp.1, "start_offset": start, "log_end_offset": end,
            "lag": pending, "members": readers,
        }));
    }
    let member_rows: Vec<Vec<String>> = members
        .iter()
        .map(|(id, host, client_id, count)| vec![id.clone(), host.clone(), client_id.clone(), count.to_string()])
        .collect();
    let state = described.group_state.to_string();
    Ok(Report {
        json: json!({
            "group": group, "type": "share", "state": state, "group_epoch": described.group_epoch,
            "members": members.iter().map(|(id, host, client_id, count)| json!({
                "member_id": id, "host": host, "client_id": client_id, "partitions": count,
            })).collect::<Vec<_>>(),
            "partitions": json_rows,
        }),
        text: format!(
            "Share group: {group}\tState: {state}\tMembers: {}\n{}\n{}",
            members.len(),
            table(
                &[
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "START-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "MEMBERS"
                ],
                &rows
            ),
            table(&["CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"], &member_rows)
        ),
    })
}

async fn delete(client: &Client, groups: &[String]) -> Result<Report, CliError> {
    let version = client.version::<DeleteGroupsRequest>(2)?;
    for group in groups {
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(str_bytes(group))]);
        let request = &request;
        at_coordinator(client, group, |c| async move {
            let answer = client.send(&c, version, request).await?;
            for result in &answer.results {
                kafka_result(result.error_code, Some(&format!("group '{}'", result.group_id.0)))?;
            }
            Ok(())
        })
        .await?;
    }
    Ok(Report {
        json: json!({"deleted": groups}),
        text: groups.iter().map(|g| format!("deleted group {g}\n")).collect(),
    })
}

/// `TOPIC` or `TOPIC:0,1`.
fn topic_selection(text: &str) -> Result<(String, Option<Vec<i32>>), CliError> {
    match text.split_once(':') {
        None => Ok((text.to_string(), None)),
        Some((topic, list)) => {
            let partitions = list
                .split(',')
                .map(|p| p.trim().parse::<i32>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| CliError::Usage(format!("--topic {text}: expected TOPIC:PARTITION,PARTITION...")))?;
            Ok((topic.to_string(), Some(partitions)))
        }
    }
}

async fn reset_offsets(client: &Client, args: ResetArgs) -> Result<Report, CliError> {
    let group = args.group.as_str();
    let mut progress = Progress::new(args.progress);
    // A share group's "committed" offsets are its start offsets (Kafka's kafka-share-groups
    // --reset-offsets); other groups' are their committed offsets.
    let share = describe_share_group(client, group).await?;
    let state = match &share {
        Some(described) => described.group_state.to_string(),
        None => {
            at_coordinator(
                client,
                group,
                |c| async move { describe_group(client, &c, group).await },
            )
            .await?
            .state
        }
    };
    // Kafka's ConsumerGroupCommand resets only inactive groups: a live member would commit
    // over the new offsets.
    if !matches!(state.as_str(), "Empty" | "Dead") {
        return Err(CliError::Refused(format!(
            "Assignments can only be reset if the group '{group}' is inactive, but the current state is {state}."
        )));
    }
    let committed = match share {
        Some(_) => share_offsets(client, group)
            .await?
            .into_iter()
            .map(|(tp, (start, _))| (tp, start))
            .collect(),
        None => at_coordinator(client, group, |c| async move { committed(client, &c, group).await }).await?,
    };
    let is_share = share.is_some();
    let mut partitions = BTreeSet::new();
    let mut metadata = Metadata::default();
    if args.all_topics {
        partitions.extend(committed.keys().cloned());
        let topics = topic_names(&partitions);
        if !topics.is_empty() {
            metadata = client.metadata(Some(&topics)).await?;
        }
    } else {
        let selections = args
            .topics
            .iter()
            .map(|t| topic_selection(t))
            .collect::<Result<Vec<_>, _>>()?;
        let topics: Vec<String> = selections.iter().map(|(t, _)| t.clone()).collect();
        metadata = client.metadata(Some(&topics)).await?;
        for (topic, chosen) in selections {
            let info = metadata
                .topics
                .iter()
                .find(|t| t.name == topic)
                .ok_or_else(|| CliError::Kafka {
                    code: kafka_protocol::error::ResponseError::UnknownTopicOrPartition.code(),
                    message: format!("topic '{topic}'"),
                })?;
            kafka_result(info.error_code, Some(&format!("topic '{topic}'")))?;
            let known: BTreeSet<i32> = info.partitions.iter().map(|p| p.partition).collect();
            for p in chosen.unwrap_or_else(|| known.iter().copied().collect()) {
                if !known.contains(&p) {
                    return Err(CliError::Kafka {
                        code: kafka_protocol::error::ResponseError::UnknownTopicOrPartition.code(),
                        message: format!("{topic}-{p}"),
                    });
                }
                partitions.insert((topic.clone(), p));
            }
        }
    }
    let earliest = list_offsets(client, &metadata, &partitions, EARLIEST, &mut progress).await?;
    let latest = list_offsets(client, &metadata, &partitions, LATEST, &mut progress).await?;
    let at_time = match &args.target.to_datetime {
        Some(text) => {
            let ms = parse_datetime(text).ok_or_else(|| {
                CliError::Usage(format!(
                    "--to-datetime {text}: expected RFC 3339 or YYYY-MM-DDTHH:MM:SS[.mmm]"
                ))
            })?;
            Some(list_offsets(client, &metadata, &partitions, ms, &mut progress).await?)
        }
        None => None,
    };
    let mut plan = BTreeMap::new();
    for tp in &partitions {
        let (low, high) = (
            earliest.get(tp).copied().unwrap_or(0),
            latest.get(tp).copied().unwrap_or(0),
        );
        let target = if args.target.to_earliest {
            low
        } else if args.target.to_latest {
            high
        } else if let Some(found) = &at_time {
            // No record at or after the time: the log end, as Kafka's tool does.
            match found.get(tp).copied() {
                Some(o) if o >= 0 => o,
                _ => high,
            }
        } else {
            let shift = args.target.shift_by.unwrap_or(0);
            let current = committed.get(tp).copied().ok_or_else(|| {
                CliError::Refused(format!(
                    "Cannot shift offset for partition {}-{} since there is no current committed offset",
                    tp.0, tp.1
                ))
            })?;
            current.saturating_add(shift)
        };
        plan.insert(tp.clone(), target.clamp(low, high.max(low)));
    }
    if args.execute && !plan.is_empty() {
        let plan = &plan;
        at_coordinator(client, group, |c| async move {
            match is_share {
                true => alter_share_offsets(client, &c, group, plan).await,
                false => commit(client, &c, group, plan).await,
            }
        })
        .await?;
    }
    let rows: Vec<Vec<String>> = plan
        .iter()
        .map(|((t, p), new)| {
            vec![
                group.to_string(),
                t.clone(),
                p.to_string(),
                committed.get(&(t.clone(), *p)).map_or("-".into(), |c| c.to_string()),
                new.to_string(),
            ]
        })
        .collect();
    let mode = match args.execute {
        true => "executed",
        false => "dry run (nothing committed; add --execute)",
    };
    Ok(Report {
        json: json!({
            "group": group,
            "executed": args.execute,
            "partitions": plan.iter().map(|((t, p), new)| json!({
                "topic": t, "partition": p, "current_offset": committed.get(&(t.clone(), *p)), "new_offset": new,
            })).collect::<Vec<_>>(),
        }),
        text: format!(
            "{}{mode}\n",
            table(&["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], &rows)
        ),
    })
}

/// OffsetCommit as a client outside the group (generation -1, no member id), which the
/// coordinator accepts only while the group has no members.
pub async fn commit(
    client: &Client,
    coordinator: &BrokerInfo,
    group: &str,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<(), CliError> {
    // v10 names topics by id (KIP-848); up to v9 by name.
    let version = client.version::<OffsetCommitRequest>(9)?;
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in offsets {
        topics.entry(topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(str_bytes(""))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let answer = client.send(coordinator, version, &request).await?;
    for t in &answer.topics {
        for p in &t.partitions {
            kafka_result(
                p.error_code,
                Some(&format!("committing {}-{}", t.name.0, p.partition_index)),
            )?;
        }
    }
    Ok(())
}

/// Milliseconds since the epoch of `2026-01-31T12:00:00[.mmm][Z|±HH:MM|±HHMM]`; no zone is UTC.
pub fn parse_datetime(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, time) = text.split_once(['T', ' '])?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    let (clock, zone_ms) = match time.find(['Z', 'z', '+', '-']) {
        Some(i) => {
            let (clock, zone) = time.split_at(i);
            let offset = match zone {
                "Z" | "z" => 0,
                _ => {
                    let sign = if zone.starts_with('-') { -1 } else { 1 };
                    let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
                    if digits.len() != 4 {
                        return None;
                    }
                    let hours: i64 = digits[..2].parse().ok()?;
                    let minutes: i64 = digits[2..].parse().ok()?;
                    sign * (hours * 60 + minutes) * 60_000
                }
            };
            (clock, offset)
        }
        None => (time, 0),
    };
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, f)) => (hms, f),
        None => (clock, ""),
    };
    let mut hms_parts = hms.splitn(3, ':');
    let hour: i64 = hms_parts.next()?.parse().ok()?;
    let minute: i64 = hms_parts.next()?.parse().ok()?;
    let second: i64 = hms_parts.next().unwrap_or("0").parse().ok()?;
    let millis: i64 = match fraction {
        "" => 0,
        f if f.chars().all(|c| c.is_ascii_digit()) => format!("{f:0<3}")[..3].parse().ok()?,
        _ => return None,
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis - zone_ms)
}

/// The topics of `partitions`, each once, in order.
fn topic_names(partitions: &BTreeSet<TopicPartition>) -> Vec<String> {
    let names: BTreeSet<&String> = partitions.iter().map(|(t, _)| t).collect();
    names.into_iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_in_both_forms() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_datetime("1970-01-01T00:00:01.5"), Some(1500));
        assert_eq!(parse_datetime("2024-02-29T12:00:00.123"), Some(1_709_208_000_123));
        assert_eq!(parse_datetime("2024-02-29T13:00:00+01:00"), Some(1_709_208_000_000));
        assert_eq!(parse_datetime("2024-02-29T11:30:00-0030"), Some(1_709_208_000_000));
        assert_eq!(parse_datetime("2024-13-01T00:00:00"), None);
        assert_eq!(parse_datetime("yesterday"), None);
    }

    #[test]
    fn topic_selections() {
        assert_eq!(topic_selection("t").unwrap(), ("t".into(), None));
        assert_eq!(topic_selection("t:0,2").unwrap(), ("t".into(), Some(vec![0, 2])));
        assert!(topic_selection("t:x").is_err());
    }
}
