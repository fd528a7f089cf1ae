//! A next-generation consumer group (KIP-848): the broker owns the assignment. Members send
//! ConsumerGroupHeartbeat with their subscription and the partitions they own; the group epoch
//! moves on every membership or subscription change, a server-side assignor (`uniform` or
//! `range`) computes the target assignment for that epoch, and each member reconciles towards
//! its target incrementally: it first gives up partitions it must lose (keeping its epoch), then
//! takes the new epoch and receives partitions as other members release them. Member epochs
//! fence zombies.
//!
//! Static members (KIP-345 as KIP-848 carries it): a member with a `group.instance.id` that leaves
//! with epoch -2 stays in the group, holding its partitions, until its session expires; a new
//! incarnation joining with the same instance id within that time takes its place, assignment and
//! all, without a rebalance. While the holder lives, the instance id is refused to anyone else.
//!
//! Subscriptions are topic names, a regular expression (SubscribedTopicRegex, RE2 syntax, matched
//! against whole topic names), or both. The expressions are resolved here against the topics of
//! the metadata image on every heartbeat, so a topic created or deleted moves the group epoch as a
//! change of the subscribed topics does.
//!
//! Plain struct, time passed in as `now`, topics passed in as a view of the metadata image.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use regex_automata::meta::Regex;
use tokio::time::Instant;
use uuid::Uuid;

/// A partition, by topic id as the protocol names it.
pub type Tp = (Uuid, i32);

/// The server-side assignors served (Kafka's `group.consumer.assignors`; the first is the
/// default).
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// What the assignor needs to know about topics: name → (id, partition count), with a
/// generation unique to this view, so that a group can tell it has already resolved its
/// subscriptions against it.
#[derive(Debug)]
pub struct TopicsView {
    generation: u64,
    topics: HashMap<String, (Uuid, i32)>,
}

impl TopicsView {
    pub fn new(topics: HashMap<String, (Uuid, i32)>) -> TopicsView {
        static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let generation = GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        TopicsView { generation, topics }
    }
}

impl std::ops::Deref for TopicsView {
    type Target = HashMap<String, (Uuid, i32)>;

    fn deref(&self) -> &Self::Target {
        &self.topics
    }
}

impl FromIterator<(String, (Uuid, i32))> for TopicsView {
    fn from_iter<I: IntoIterator<Item = (String, (Uuid, i32))>>(iter: I) -> Self {
        TopicsView::new(iter.into_iter().collect())
    }
}

/// The states Kafka reports for a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// Limits from the broker's `group.consumer.*` settings.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerLimits {
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub max_size: usize,
    /// The least time between two target assignments (KIP-1263).
    pub assignment_interval: Duration,
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// SubscribedTopicNames, sorted.
    pub subscribed: Vec<String>,
    /// SubscribedTopicRegex: the member also takes every topic whose whole name matches it.
    pub subscribed_regex: Option<String>,
    pub rebalance_timeout: Duration,
    /// The member epoch; -2 while a static member is away (left with epoch -2).
    pub epoch: i32,
    previous_epoch: i32,
    /// Partitions the member may own now.
    pub assigned: BTreeSet<Tp>,
    /// Partitions it was told to give up and has not yet confirmed releasing.
    revoking: BTreeSet<Tp>,
    /// KIP-1251: for each partition it holds (assigned or revoking), the member epoch at which
    /// it was assigned to this member. A commit at an older epoch than the member's passes for
    /// the partitions held since that epoch or before.
    assigned_at: BTreeMap<Tp, i32>,
    /// When revoking must be done by (the rebalance timeout), else the member is fenced.
    revoke_deadline: Option<Instant>,
    /// The assignment last sent, so unchanged assignments are not repeated.
    last_sent: Option<BTreeSet<Tp>>,
    session_deadline: Instant,
}

/// A heartbeat, decoded.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatIn {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed: Option<Vec<String>>,
    /// None: unchanged since the last heartbeat; an empty string: no regular expression.
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns, when it reports them.
    pub owned: Option<BTreeSet<Tp>>,
    pub client_id: String,
    pub client_host: String,
}

/// A heartbeat answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeartbeatOut {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Sent when it changed since the last answer.
    pub assignment: Option<BTreeSet<Tp>>,
}

fn fail(code: ResponseError, message: &str, member_id: &str) -> HeartbeatOut {
    HeartbeatOut {
        error: code.code(),
        message: Some(message.to_string()),
        member_id: member_id.to_string(),
        member_epoch: -1,
        ..Default::default()
    }
}

/// Kafka's `canComputeNextTargetAssignment` (KIP-1263): a group computes a new target when it
/// never did (since it was loaded), when its interval is 0, or once the interval has passed
/// since the last one.
pub fn assignment_due(last: Option<Instant>, interval: Duration, now: Instant) -> bool {
    last.is_none_or(|at| interval.is_zero() || now >= at + interval)
}

/// Kafka's member epoch for a leaving member (-1) and a static member leaving temporarily (-2).
const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// The longest SubscribedTopicRegex accepted: the group snapshot stores it as a string with an
/// i16 length. Kafka sets no bound (the request size does); longer ones get
/// INVALID_REGULAR_EXPRESSION.
pub const TOPIC_REGEX_BYTES_MAX: usize = i16::MAX as usize;

/// Compiles a SubscribedTopicRegex. Kafka compiles it with RE2/J and resolves it with
/// `Pattern.matcher(topic).matches()`, so the whole topic name must match: `^t` does not match
/// `t1`. The pattern is parsed alone first, since wrapped in an anchored group an unbalanced
/// pattern such as `a)|(b` would compile.
pub fn compile_topic_regex(pattern: &str) -> Result<Regex, String> {
    regex_automata::util::syntax::parse(pattern).map_err(|e| e.to_string())?;
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())
}

/// A KIP-848 group as stored in `__consumer_offsets`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerGroupSnapshot {
    pub epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberSnapshot>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerMemberSnapshot {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub member_epoch: i32,
    pub subscribed: Vec<String>,
    pub subscribed_regex: Option<String>,
    /// Each assigned partition with its assignment epoch (KIP-1251).
    pub assigned: Vec<(Tp, i32)>,
}

pub struct ConsumerGroup {
    pub id: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: BTreeMap<String, ConsumerMember>,
    static_members: HashMap<String, String>,
    target: HashMap<String, BTreeSet<Tp>>,
    /// The subscribed topics' partition counts the target was computed for (regular
    /// expressions resolved), so that a topic created, grown or deleted moves the group epoch.
    computed_for: BTreeMap<String, (Uuid, i32)>,
    /// The members' regular expressions, compiled; only those some member uses are kept, so
    /// there are at most as many as members.
    patterns: HashMap<String, Regex>,
    /// The view generation and group epoch `computed_for` was last found current at: until
    /// either moves, a heartbeat need not resolve the subscriptions again (each regex against
    /// every topic name). Every change of members or subscriptions moves the epoch.
    resolved_at: Option<(u64, i32)>,
    /// When the target was last computed: the next waits for the group's assignment interval
    /// (KIP-1263). None after a load, as Kafka's timestamp 0.
    assigned_time: Option<Instant>,
    pub empty_since: Option<Instant>,
}

impl ConsumerGroup {
    pub fn new(id: &str, now: Instant) -> ConsumerGroup {
        ConsumerGroup {
            id: id.to_string(),
            epoch: 0,
            assignment_epoch: 0,
            assignor: ASSIGNORS[0].to_string(),
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            target: HashMap::new(),
            computed_for: BTreeMap::new(),
            resolved_at: None,
            assigned_time: None,
            patterns: HashMap::new(),
            empty_since: Some(now),
        }
    }

    /// What is stored: the group epoch, and each member's subscription, epoch and partitions.
    pub fn snapshot(&self) -> ConsumerGroupSnapshot {
        ConsumerGroupSnapshot {
            epoch: self.epoch,
            assignor: self.assignor.clone(),
            members: self
                .members
                .values()
                .map(|m| ConsumerMemberSnapshot {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: i32::try_from(m.rebalance_timeout.as_millis()).unwrap_or(i32::MAX),
                    member_epoch: m.epoch,
                    subscribed: m.subscribed.clone(),
                    subscribed_regex: m.subscribed_regex.clone(),
                    assigned: m
                        .assigned
                        .iter()
                        .map(|p| (*p, m.assigned_at.get(p).copied().unwrap_or(m.epoch)))
                        .collect(),
                })
                .collect(),
        }
    }

    /// A group loaded at start-up: members keep their epochs and partitions, and must heartbeat
    /// within a session timeout from now to stay. Their partitions are also the target, so the
    /// first heartbeat after a restart moves nothing.
    pub fn restore(
        id: &str,
        snapshot: ConsumerGroupSnapshot,
        topics: &TopicsView,
        limits: &ConsumerLimits,
        now: Instant,
    ) -> ConsumerGroup {
        let mut g = ConsumerGroup::new(id, now);
        g.epoch = snapshot.epoch;
        g.assignment_epoch = snapshot.epoch;
        g.assignor = snapshot.assignor;
        for m in snapshot.members {
            if let Some(instance) = &m.instance_id {
                g.static_members.insert(instance.clone(), m.member_id.clone());
            }
            let assigned_at: BTreeMap<Tp, i32> = m.assigned.into_iter().collect();
            let assigned: BTreeSet<Tp> = assigned_at.keys().copied().collect();
            g.target.insert(m.member_id.clone(), assigned.clone());
            g.members.insert(
                m.member_id.clone(),
                ConsumerMember {
                    id: m.member_id,
                    instance_id: m.instance_id,
                    rack_id: m.rack_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    subscribed: m.subscribed,
                    subscribed_regex: m.subscribed_regex,
                    rebalance_timeout: Duration::from_millis(u64::try_from(m.rebalance_timeout_ms).unwrap_or(0)),
                    epoch: m.member_epoch,
                    previous_epoch: m.member_epoch,
                    assigned: assigned.clone(),
                    revoking: BTreeSet::new(),
                    assigned_at,
                    revoke_deadline: None,
                    last_sent: Some(assigned),
                    session_deadline: now + limits.session_timeout,
                },
            );
        }
        if !g.members.is_empty() {
            g.empty_since = None;
        }
        for pattern in g.members.values().filter_map(|m| m.subscribed_regex.clone()) {
            // Stored only once compiled, so this fails only if the syntax changed across
            // versions; the member then matches no topic until it sends its regex again.
            match compile_topic_regex(&pattern) {
                Ok(re) => {
                    g.patterns.insert(pattern, re);
                }
                Err(e) => tracing::warn!(group = id, pattern, error = %e, "stored regex does not compile"),
            }
        }
        // The target was computed for the topics as they are now (unless they changed while
        // the broker was down, which the next heartbeat then notices).
        g.computed_for = g.subscribed_topics(topics);
        g
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.assignment_epoch < self.epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || self.target_of(&m.id) != m.assigned)
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    pub fn target_of(&self, member: &str) -> BTreeSet<Tp> {
        self.target.get(member).cloned().unwrap_or_default()
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| [Some(m.session_deadline), m.revoke_deadline])
            .flatten()
            .min()
    }

    fn remove_member(&mut self, id: &str, now: Instant) {
        if let Some(m) = self.members.remove(id) {
            if let Some(instance) = m.instance_id
                && self.static_members.get(&instance).map(String::as_str) == Some(id)
            {
                self.static_members.remove(&instance);
            }
            self.target.remove(id);
            self.epoch += 1;
            self.drop_unused_patterns();
        }
        if self.members.is_empty() {
            self.empty_since = Some(now);
        }
    }

    fn drop_unused_patterns(&mut self) {
        let members = &self.members;
        self.patterns
            .retain(|p, _| members.values().any(|m| m.subscribed_regex.as_ref() == Some(p)));
    }

    /// Each member's topics: the names it subscribed to and the topics its regular expression
    /// matches now (Kafka's `TargetAssignmentBuilder` gives the assignor the union). Every topic
    /// is a candidate, internal ones included: Kafka's `refreshRegularExpressions` scans all the
    /// image's topic names, filtered only by DESCRIBE ACLs.
    fn subscriptions(&self, topics: &TopicsView) -> BTreeMap<String, BTreeSet<String>> {
        let matched: HashMap<&str, Vec<&String>> = self
            .patterns
            .iter()
            .map(|(p, re)| (p.as_str(), topics.keys().filter(|t| re.is_match(t.as_str())).collect()))
            .collect();
        self.members
            .values()
            .map(|m| {
                let mut set: BTreeSet<String> = m.subscribed.iter().cloned().collect();
                if let Some(found) = m.subscribed_regex.as_deref().and_then(|p| matched.get(p)) {
                    set.extend(found.iter().map(|t| (*t).clone()));
                }
                (m.id.clone(), set)
            })
            .collect()
    }

    /// The topics some member subscribes to, by name or regex, that exist, with their ids and
    /// partition counts: what the target depends on. Built whenever the topics or the
    /// subscriptions changed, so without the per-member sets of `subscriptions`.
    fn subscribed_topics(&self, topics: &TopicsView) -> BTreeMap<String, (Uuid, i32)> {
        let by_name = self.members.values().flat_map(|m| m.subscribed.iter());
        let by_regex = self
            .patterns
            .values()
            .flat_map(|re| topics.keys().filter(|t| re.is_match(t.as_str())));
        by_name
            .chain(by_regex)
            .filter_map(|t| topics.get(t).map(|v| (t.clone(), *v)))
            .collect()
    }

    /// A heartbeat's regular expression, compiled when the group does not know it yet;
    /// INVALID_REGULAR_EXPRESSION when it does not compile (Kafka's
    /// `throwIfRegularExpressionIsInvalid`).
    fn new_pattern(&self, req: &HeartbeatIn) -> Result<Option<(String, Regex)>, HeartbeatOut> {
        let Some(pattern) = req.subscribed_regex.as_deref().filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        if self.patterns.contains_key(pattern) {
            return Ok(None);
        }
        if pattern.len() > TOPIC_REGEX_BYTES_MAX {
            return Err(fail(
                ResponseError::InvalidRegularExpression,
                &format!("SubscribedTopicRegex is longer than {TOPIC_REGEX_BYTES_MAX} bytes"),
                &req.member_id,
            ));
        }
        match compile_topic_regex(pattern) {
            Ok(re) => Ok(Some((pattern.to_string(), re))),
            Err(e) => Err(fail(
                ResponseError::InvalidRegularExpression,
                &format!("SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}"),
                &req.member_id,
            )),
        }
    }

    /// Kafka's `getOrMaybeSubscribeStaticConsumerGroupMember` when the instance id's holder left
    /// with epoch -2: the joining member `id` takes its place with its subscription, partitions
    /// and target, at epoch 0 (the reconciliation then gives it the assignment epoch). The group
    /// epoch does not move, so no other member notices.
    fn take_over(&mut self, old_id: &str, id: &str, req: &HeartbeatIn, limits: &ConsumerLimits, now: Instant) {
        let Some(old) = self.members.remove(old_id) else { return };
        tracing::info!(group = %self.id, old = old_id, new = id, "static member replaced");
        if let Some(target) = self.target.remove(old_id) {
            self.target.insert(id.to_string(), target);
        }
        if let Some(instance) = &old.instance_id {
            self.static_members.insert(instance.clone(), id.to_string());
        }
        let rebalance_timeout = match u64::try_from(req.rebalance_timeout_ms) {
            Ok(ms) => Duration::from_millis(ms),
            Err(_) => old.rebalance_timeout,
        };
        self.members.insert(
            id.to_string(),
            ConsumerMember {
                id: id.to_string(),
                instance_id: old.instance_id,
                rack_id: req.rack_id.clone().or(old.rack_id),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                subscribed: old.subscribed,
                subscribed_regex: old.subscribed_regex,
                rebalance_timeout,
                epoch: 0,
                previous_epoch: 0,
                // Held from epoch 0 under the new id, as Kafka's static leave resets them.
                assigned_at: old.assigned.iter().map(|p| (*p, 0)).collect(),
                assigned: old.assigned,
                revoking: BTreeSet::new(),
                revoke_deadline: None,
                last_sent: None,
                session_deadline: now + limits.session_timeout,
            },
        );
    }

    /// Removes members whose session expired or who did not release partitions within their
    /// rebalance timeout. Returns true when the group changed.
    pub fn expire(&mut self, now: Instant) -> bool {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline <= now || m.revoke_deadline.is_some_and(|d| d <= now))
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            tracing::info!(group = %self.id, member = %id, "consumer group member expired");
            self.remove_member(id, now);
        }
        !gone.is_empty()
    }

    /// Handles one ConsumerGroupHeartbeat, with Kafka's checks (`GroupMetadataManager`:
    /// `throwIfConsumerGroupHeartbeatRequestIsInvalid`, `consumerGroupLeave`,
    /// `getOrMaybeSubscribeStaticConsumerGroupMember`, `throwIfStaticMemberIsUnknown`,
    /// `throwIfInstanceIdIsFenced`, `throwIfInstanceIdIsUnreleased`).
    pub fn heartbeat(
        &mut self,
        req: HeartbeatIn,
        topics: &TopicsView,
        limits: &ConsumerLimits,
        now: Instant,
    ) -> HeartbeatOut {
        if let Some(assignor) = &req.server_assignor
            && !ASSIGNORS.contains(&assignor.as_str())
        {
            return fail(
                ResponseError::UnsupportedAssignor,
                "unknown server assignor",
                &req.member_id,
            );
        }
        if req.member_epoch < STATIC_LEAVE_EPOCH {
            return fail(
                ResponseError::InvalidRequest,
                "the member epoch is invalid",
                &req.member_id,
            );
        }
        if req.member_epoch == STATIC_LEAVE_EPOCH && req.instance_id.is_none() {
            return fail(
                ResponseError::InvalidRequest,
                "only a static member (with an instance id) may leave with epoch -2",
                &req.member_id,
            );
        }
        match req.member_epoch {
            LEAVE_EPOCH | STATIC_LEAVE_EPOCH => {
                let id = match self.static_member(&req) {
                    Err(out) => return out,
                    Ok(Some(id)) => id,
                    Ok(None) if self.members.contains_key(&req.member_id) => req.member_id.clone(),
                    Ok(None) => return fail(ResponseError::UnknownMemberId, "unknown member", &req.member_id),
                };
                if req.member_epoch == STATIC_LEAVE_EPOCH {
                    // Kafka's `consumerGroupStaticMemberGroupLeave`: the member stays, holding its
                    // partitions (those it was revoking are free), until its session expires or
                    // a new incarnation takes its place.
                    if let Some(m) = self.members.get_mut(&id) {
                        tracing::info!(group = %self.id, member = %id, "static member left temporarily");
                        m.epoch = STATIC_LEAVE_EPOCH;
                        m.revoking.clear();
                        m.revoke_deadline = None;
                        // Kafka's `resetAssignedPartitionsEpochsToZero` (KIP-1251): a commit
                        // under this member id is refused from now on.
                        m.assigned_at = m.assigned.iter().map(|p| (*p, 0)).collect();
                    }
                } else {
                    self.remove_member(&id, now);
                }
                HeartbeatOut {
                    member_id: id,
                    member_epoch: req.member_epoch,
                    ..Default::default()
                }
            }
            0 => {
                if req.subscribed.is_none() && req.subscribed_regex.is_none() {
                    return fail(
                        ResponseError::InvalidRequest,
                        "a joining member must send its subscribed topic names or regex",
                        &req.member_id,
                    );
                }
                let id = if req.member_id.is_empty() {
                    Uuid::new_v4().to_string()
                } else {
                    req.member_id.clone()
                };
                let holder = req
                    .instance_id
                    .as_ref()
                    .and_then(|instance| self.static_members.get(instance))
                    .and_then(|holder| self.members.get(holder))
                    .map(|m| (m.id.clone(), m.epoch));
                if let Some((holder, epoch)) = &holder
                    && *holder != id
                    && *epoch != STATIC_LEAVE_EPOCH
                {
                    tracing::info!(group = %self.id, member = %id, holder = %holder, "instance id not released");
                    return fail(
                        ResponseError::UnreleasedInstanceId,
                        &format!(
                            "the instance id {} is held by member {holder}, which has not left",
                            req.instance_id.as_deref().unwrap_or_default()
                        ),
                        &id,
                    );
                }
                let compiled = match self.new_pattern(&req) {
                    Ok(compiled) => compiled,
                    Err(out) => return out,
                };
                match holder {
                    Some((holder, STATIC_LEAVE_EPOCH)) => self.take_over(&holder, &id, &req, limits, now),
                    _ => {
                        if !self.members.contains_key(&id) && self.members.len() >= limits.max_size {
                            return fail(ResponseError::GroupMaxSizeReached, "the group is full", &id);
                        }
                        // A known member rejoining with epoch 0 lost its state: it starts afresh.
                        // Kafka refuses this to a static member (UNRELEASED_INSTANCE_ID, as the
                        // instance id is held); here its own instance id does not stand in its
                        // way, so a member whose join answer was lost can join again.
                        if self.members.remove(&id).is_some() {
                            self.target.remove(&id);
                        }
                        if let Some(instance) = &req.instance_id {
                            self.static_members.insert(instance.clone(), id.clone());
                        }
                        self.members.insert(
                            id.clone(),
                            ConsumerMember {
                                id: id.clone(),
                                instance_id: req.instance_id.clone(),
                                rack_id: req.rack_id.clone(),
                                client_id: req.client_id.clone(),
                                client_host: req.client_host.clone(),
                                // Set here so that joining moves the group epoch once, not twice.
                                subscribed: sorted(req.subscribed.clone().unwrap_or_default()),
                                subscribed_regex: req.subscribed_regex.clone().filter(|p| !p.is_empty()),
                                rebalance_timeout: Duration::from_millis(
                                    u64::try_from(req.rebalance_timeout_ms).unwrap_or(300_000),
                                ),
                                epoch: 0,
                                previous_epoch: 0,
                                assigned: BTreeSet::new(),
                                revoking: BTreeSet::new(),
                                assigned_at: BTreeMap::new(),
                                revoke_deadline: None,
                                last_sent: None,
                                session_deadline: now + limits.session_timeout,
                            },
                        );
                        self.epoch += 1;
                    }
                }
                self.empty_since = None;
                self.after_heartbeat(&id, req, compiled, topics, limits, now)
            }
            epoch => {
                if let Err(out) = self.static_member(&req) {
                    return out;
                }
                let Some(member) = self.members.get(&req.member_id) else {
                    return fail(ResponseError::UnknownMemberId, "unknown member", &req.member_id);
                };
                // A member away after a static leave (epoch -2) must join again; otherwise a
                // member whose last answer was lost may repeat its previous epoch.
                if member.epoch == STATIC_LEAVE_EPOCH || (epoch != member.epoch && epoch != member.previous_epoch) {
                    return fail(
                        ResponseError::FencedMemberEpoch,
                        "the member epoch is fenced",
                        &req.member_id,
                    );
                }
                let compiled = match self.new_pattern(&req) {
                    Ok(compiled) => compiled,
                    Err(out) => return out,
                };
                if let Some(member) = self.members.get_mut(&req.member_id) {
                    if epoch != member.epoch {
                        member.last_sent = None; // it missed our answer: send the assignment again
                    }
                    member.session_deadline = now + limits.session_timeout;
                }
                let id = req.member_id.clone();
                self.after_heartbeat(&id, req, compiled, topics, limits, now)
            }
        }
    }

    /// The member holding the heartbeat's instance id: UNKNOWN_MEMBER_ID when none does
    /// (Kafka's `throwIfStaticMemberIsUnknown`), FENCED_INSTANCE_ID when another member id does
    /// (`throwIfInstanceIdIsFenced`). None for a member without an instance id.
    fn static_member(&self, req: &HeartbeatIn) -> Result<Option<String>, HeartbeatOut> {
        let Some(instance) = &req.instance_id else {
            return Ok(None);
        };
        match self.static_members.get(instance) {
            None => Err(fail(
                ResponseError::UnknownMemberId,
                &format!("instance id {instance} is unknown"),
                &req.member_id,
            )),
            Some(holder) if *holder != req.member_id => Err(fail(
                ResponseError::FencedInstanceId,
                &format!("instance id {instance} was fenced by member {holder}"),
                &req.member_id,
            )),
            Some(holder) => Ok(Some(holder.clone())),
        }
    }

    fn after_heartbeat(
        &mut self,
        id: &str,
        req: HeartbeatIn,
        compiled: Option<(String, Regex)>,
        topics: &TopicsView,
        limits: &ConsumerLimits,
        now: Instant,
    ) -> HeartbeatOut {
        if let Some(assignor) = req.server_assignor
            && assignor != self.assignor
        {
            self.assignor = assignor;
            self.epoch += 1;
        }
        if let Some((pattern, re)) = compiled {
            self.patterns.insert(pattern, re);
        }
        if let Some(member) = self.members.get_mut(id) {
            if let Some(subscribed) = req.subscribed {
                let subscribed = sorted(subscribed);
                if subscribed != member.subscribed {
                    member.subscribed = subscribed;
                    self.epoch += 1;
                }
            }
            if let Some(pattern) = req.subscribed_regex {
                let pattern = Some(pattern).filter(|p| !p.is_empty());
                if pattern != member.subscribed_regex {
                    member.subscribed_regex = pattern;
                    self.epoch += 1;
                }
            }
            if let Some(rack) = req.rack_id {
                member.rack_id = Some(rack);
            }
        }
        if self.assignment_epoch < self.epoch {
            // Membership or subscriptions changed: forget expressions no member uses any more.
            self.drop_unused_patterns();
        }
        // Topic metadata the target depends on (a subscribed or matching topic created, grown
        // or deleted), resolved again only when the topics or the subscriptions changed.
        // Resolving the subscriptions matches each regex against every topic name: done at most
        // once per heartbeat, and kept for the assignment below.
        let mut resolved = None;
        if self.resolved_at != Some((topics.generation, self.epoch)) {
            if self.epoch == self.assignment_epoch {
                let subscribed = self.subscribed_topics(topics);
                if subscribed != self.computed_for {
                    self.epoch += 1;
                }
                resolved = Some(subscribed);
            }
            self.resolved_at = Some((topics.generation, self.epoch));
        }
        // KIP-1263: a new target at most once per assignment interval. Until then the group is
        // Assigning and members reconcile towards the target they have, joining members at its
        // epoch with nothing; the first heartbeat after the interval computes it.
        if self.assignment_epoch < self.epoch && assignment_due(self.assigned_time, limits.assignment_interval, now) {
            let subscribed = resolved.unwrap_or_else(|| self.subscribed_topics(topics));
            let subscriptions = self.subscriptions(topics);
            self.target = assign(&self.assignor, &subscriptions, &subscribed, &self.target);
            self.assignment_epoch = self.epoch;
            self.computed_for = subscribed;
            self.assigned_time = Some(now);
        }
        self.reconcile(id, req.owned, now);
        let Some(member) = self.members.get_mut(id) else {
            return fail(ResponseError::UnknownMemberId, "unknown member", id);
        };
        let assignment = if member.last_sent.as_ref() != Some(&member.assigned) {
            member.last_sent = Some(member.assigned.clone());
            Some(member.assigned.clone())
        } else {
            None
        };
        HeartbeatOut {
            error: 0,
            message: None,
            member_id: id.to_string(),
            member_epoch: member.epoch,
            heartbeat_interval_ms: i32::try_from(limits.heartbeat_interval.as_millis()).unwrap_or(i32::MAX),
            assignment,
        }
    }

    /// Moves `id` towards its target: revoke first (keeping the epoch), then take the new epoch
    /// and every target partition no other member still holds.
    fn reconcile(&mut self, id: &str, owned: Option<BTreeSet<Tp>>, now: Instant) {
        let target = self.target_of(id);
        let held_by_others: BTreeSet<Tp> = self
            .members
            .values()
            .filter(|m| m.id != id)
            .flat_map(|m| m.assigned.iter().chain(m.revoking.iter()).copied())
            .collect();
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(id) else { return };
        if !m.revoking.is_empty() && owned.as_ref().is_some_and(|o| o.is_disjoint(&m.revoking)) {
            for p in std::mem::take(&mut m.revoking) {
                m.assigned_at.remove(&p);
            }
            m.revoke_deadline = None;
        }
        if !m.revoking.is_empty() {
            return;
        }
        let to_revoke: BTreeSet<Tp> = m.assigned.difference(&target).copied().collect();
        if !to_revoke.is_empty() {
            m.assigned.retain(|p| target.contains(p));
            m.revoking = to_revoke;
            m.revoke_deadline = Some(now + m.rebalance_timeout);
            return;
        }
        if m.epoch != assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
        for p in target {
            if !held_by_others.contains(&p) && m.assigned.insert(p) {
                m.assigned_at.insert(p, m.epoch);
            }
        }
    }

    /// KIP-1251 (Kafka 4.3's `ConsumerGroup.validateOffsetCommit`): may `member`, whose epoch
    /// is `epoch`, commit `partitions`? Its own epoch commits anything; a newer one nothing; an
    /// older one only partitions it still holds (assigned or revoking) and was assigned at that
    /// epoch or before, so a commit that raced a heartbeat bumping its epoch still lands, and a
    /// zombie's commit for a partition that moved on is refused.
    pub fn may_commit(member: &ConsumerMember, epoch: i32, partitions: &[Tp]) -> bool {
        match epoch.cmp(&member.epoch) {
            std::cmp::Ordering::Equal => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Less => partitions
                .iter()
                .all(|p| member.assigned_at.get(p).is_some_and(|since| *since <= epoch)),
        }
    }
}

fn sorted(mut topics: Vec<String>) -> Vec<String> {
    topics.sort();
    topics.dedup();
    topics
}

/// Computes the target assignment from each member's topics (`subscriptions`, by member id).
/// Both assignors only assign a topic's partitions among the members subscribed to it.
fn assign(
    assignor: &str,
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, (Uuid, i32)>,
    previous: &HashMap<String, BTreeSet<Tp>>,
) -> HashMap<String, BTreeSet<Tp>> {
    let mut target: HashMap<String, BTreeSet<Tp>> =
        subscriptions.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
    if assignor == "range" {
        // Kafka's range assignor, per topic: members sorted, contiguous ranges, the first
        // members taking one extra when the count does not divide.
        for (name, (id, count)) in topics {
            let subs: Vec<&String> = subscriptions
                .iter()
                .filter(|(_, topics)| topics.contains(name))
                .map(|(m, _)| m)
                .collect();
            if subs.is_empty() {
                continue;
            }
            let n = subs.len() as i32;
            let (per, extra) = (count / n, count % n);
            let mut next = 0;
            for (i, m) in subs.iter().enumerate() {
                let take = per + i32::from((i as i32) < extra);
                for p in next..next + take {
                    target.entry((*m).clone()).or_default().insert((*id, p));
                }
                next += take;
            }
        }
        return target;
    }
    // Uniform: balanced counts (every member within one partition of the others, among the
    // members that can take a partition), sticky to each member's previous target where that
    // keeps the balance.
    let mut all: Vec<(Tp, String)> = Vec::new();
    for (name, (id, count)) in topics {
        for p in 0..*count {
            all.push(((*id, p), name.clone()));
        }
    }
    let eligible = |m: &str, topic: &str| subscriptions.get(m).is_some_and(|t| t.contains(topic));
    let subscribers = subscriptions.values().filter(|t| !t.is_empty()).count().max(1);
    let base = all.len() / subscribers;
    // How many members may hold one more than `base`.
    let mut extra_slots = all.len() % subscribers;
    let mut unassigned = Vec::new();
    for (tp, topic) in &all {
        let keeper = previous
            .iter()
            .find(|(m, set)| set.contains(tp) && eligible(m, topic))
            .map(|(m, _)| m.clone());
        let Some(m) = keeper else {
            unassigned.push((*tp, topic.clone()));
            continue;
        };
        let held = target.get(&m).map_or(0, BTreeSet::len);
        if held < base {
            target.entry(m).or_default().insert(*tp);
        } else if held == base && extra_slots > 0 {
            extra_slots -= 1;
            target.entry(m).or_default().insert(*tp);
        } else {
            unassigned.push((*tp, topic.clone()));
        }
    }
    for (tp, topic) in unassigned {
        let least = subscriptions
            .keys()
            .filter(|m| eligible(m, &topic))
            .min_by_key(|m| (target.get(*m).map_or(0, BTreeSet::len), (*m).clone()))
            .cloned();
        if let Some(m) = least {
            target.entry(m).or_default().insert(tp);
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConsumerLimits {
        ConsumerLimits {
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
            max_size: 100,
            assignment_interval: Duration::ZERO,
        }
    }

    fn topics(n: i32) -> (TopicsView, Uuid) {
        let id = Uuid::from_u128(7);
        (TopicsView::new(HashMap::from([("t".to_string(), (id, n))])), id)
    }

    fn join(g: &mut ConsumerGroup, view: &TopicsView, now: Instant) -> HeartbeatOut {
        let req = HeartbeatIn {
            member_id: Uuid::new_v4().to_string(),
            member_epoch: 0,
            subscribed: Some(vec!["t".into()]),
            owned: Some(BTreeSet::new()),
            rebalance_timeout_ms: 30_000,
            ..Default::default()
        };
        g.heartbeat(req, view, &limits(), now)
    }

    fn beat(
        g: &mut ConsumerGroup,
        id: &str,
        epoch: i32,
        owned: &BTreeSet<Tp>,
        view: &TopicsView,
        now: Instant,
    ) -> HeartbeatOut {
        let req = HeartbeatIn {
            member_id: id.into(),
            member_epoch: epoch,
            owned: Some(owned.clone()),
            ..Default::default()
        };
        g.heartbeat(req, view, &limits(), now)
    }

    #[test]
    fn a_second_member_gets_partitions_only_after_the_first_releases_them() {
        // KIP-848 reconciliation: revoke before assign, epochs move per member.
        let now = Instant::now();
        let (view, _) = topics(4);
        let mut g = ConsumerGroup::new("g", now);
        let a = join(&mut g, &view, now);
        assert_eq!((a.error, a.member_epoch), (0, 1));
        let a_owned = a.assignment.clone().unwrap();
        assert_eq!(a_owned.len(), 4);
        let b = join(&mut g, &view, now);
        assert_eq!(b.member_epoch, 2);
        assert_eq!(
            b.assignment,
            Some(BTreeSet::new()),
            "nothing free yet: a still owns everything"
        );
        // a is told to give up two partitions, keeping its epoch until it has.
        let a2 = beat(&mut g, &a.member_id, 1, &a_owned, &view, now);
        let a_kept = a2.assignment.clone().unwrap();
        assert_eq!((a2.member_epoch, a_kept.len()), (1, 2));
        assert_eq!(g.state(), ConsumerGroupState::Reconciling);
        let a3 = beat(&mut g, &a.member_id, 1, &a_kept, &view, now);
        assert_eq!(
            (a3.member_epoch, a3.assignment),
            (2, None),
            "revocation acknowledged: new epoch"
        );
        let b2 = beat(&mut g, &b.member_id, 2, &BTreeSet::new(), &view, now);
        let b_owned = b2.assignment.unwrap();
        assert_eq!(b_owned.len(), 2);
        assert!(b_owned.is_disjoint(&a_kept));
        assert_eq!(g.state(), ConsumerGroupState::Stable);
    }

    #[test]
    fn a_new_target_waits_for_the_assignment_interval() {
        // KIP-1263: the first target at once, the next no sooner than 1 s after it.
        let paced = ConsumerLimits {
            assignment_interval: Duration::from_secs(1),
            ..limits()
        };
        let t0 = Instant::now();
        let (view, _) = topics(4);
        let mut g = ConsumerGroup::new("g", t0);
        let beat_at = |g: &mut ConsumerGroup, req: HeartbeatIn, at| g.heartbeat(req, &view, &paced, at);
        let join_req = |id: &str| HeartbeatIn {
            member_id: id.into(),
            member_epoch: 0,
            subscribed: Some(vec!["t".into()]),
            owned: Some(BTreeSet::new()),
            rebalance_timeout_ms: 30_000,
            ..Default::default()
        };
        let beat_req = |id: &str, epoch, owned: &BTreeSet<Tp>| HeartbeatIn {
            member_id: id.into(),
            member_epoch: epoch,
            owned: Some(owned.clone()),
            ..Default::default()
        };
        let a = beat_at(&mut g, join_req("a"), t0);
        let all = a.assignment.clone().unwrap();
        assert_eq!((a.member_epoch, all.len()), (1, 4));
        // b joins 100 ms later: the group epoch moves, the target waits; b joins at the
        // target's epoch with nothing.
        let b = beat_at(&mut g, join_req("b"), t0 + Duration::from_millis(100));
        assert_eq!((b.member_epoch, b.assignment), (1, Some(BTreeSet::new())));
        assert_eq!(
            (g.epoch, g.assignment_epoch, g.state()),
            (2, 1, ConsumerGroupState::Assigning)
        );
        let a2 = beat_at(&mut g, beat_req("a", 1, &all), t0 + Duration::from_millis(999));
        assert_eq!(
            (a2.member_epoch, a2.assignment),
            (1, None),
            "a keeps everything meanwhile"
        );
        // The first heartbeat after the interval computes the target: a gives two up.
        let a3 = beat_at(&mut g, beat_req("a", 1, &all), t0 + Duration::from_millis(1000));
        assert_eq!(g.assignment_epoch, 2);
        assert_eq!(a3.assignment.map(|p| p.len()), Some(2));
        // With an interval of 0 every change is assigned at once.
        let mut h = ConsumerGroup::new("h", t0);
        h.heartbeat(join_req("a"), &view, &limits(), t0);
        let b = h.heartbeat(join_req("b"), &view, &limits(), t0);
        assert_eq!((b.member_epoch, h.assignment_epoch), (2, 2));
    }

    #[test]
    fn an_older_epoch_commits_only_partitions_held_since_then() {
        // KIP-1251: a's epoch moves 1 → 2 → 3 while it keeps two partitions from epoch 1.
        let now = Instant::now();
        let (view, _) = topics(4);
        let mut g = ConsumerGroup::new("g", now);
        let a = join(&mut g, &view, now);
        let all = a.assignment.clone().unwrap();
        let b = join(&mut g, &view, now);
        let kept = beat(&mut g, &a.member_id, 1, &all, &view, now).assignment.unwrap();
        let lost: Vec<Tp> = all.difference(&kept).copied().collect();
        let kept: Vec<Tp> = kept.into_iter().collect();
        let member = |g: &ConsumerGroup, id: &str| g.members[id].clone();
        // While a revokes, it still holds what it gives up, at epoch 1.
        assert!(ConsumerGroup::may_commit(&member(&g, &a.member_id), 1, &lost));
        assert_eq!(
            beat(&mut g, &a.member_id, 1, &kept.iter().copied().collect(), &view, now).member_epoch,
            2
        );
        let a_now = member(&g, &a.member_id);
        assert!(ConsumerGroup::may_commit(&a_now, 1, &kept), "held since epoch 1");
        assert!(!ConsumerGroup::may_commit(&a_now, 1, &lost), "released");
        assert!(
            !ConsumerGroup::may_commit(&a_now, 1, &[kept[0], lost[0]]),
            "one refused refuses all"
        );
        assert!(
            ConsumerGroup::may_commit(&a_now, 2, &lost),
            "the member's own epoch commits anything"
        );
        assert!(!ConsumerGroup::may_commit(&a_now, 3, &kept), "a newer epoch is refused");
        // b gets the released partitions at epoch 2: its epoch 1 never held them.
        let b_owned = beat(&mut g, &b.member_id, 2, &BTreeSet::new(), &view, now)
            .assignment
            .unwrap();
        let b_owned: Vec<Tp> = b_owned.into_iter().collect();
        assert_eq!(b_owned, lost);
        assert!(!ConsumerGroup::may_commit(&member(&g, &b.member_id), 1, &b_owned));
        // The epochs survive a restart.
        let restored = ConsumerGroup::restore("g", g.snapshot(), &view, &limits(), now);
        assert!(ConsumerGroup::may_commit(&member(&restored, &a.member_id), 1, &kept));
        assert!(!ConsumerGroup::may_commit(
            &member(&restored, &b.member_id),
            1,
            &b_owned
        ));
    }

    #[test]
    fn stale_epochs_are_fenced_and_unknown_members_refused() {
        let now = Instant::now();
        let (view, _) = topics(2);
        let mut g = ConsumerGroup::new("g", now);
        let a = join(&mut g, &view, now);
        let none = BTreeSet::new();
        assert_eq!(
            beat(&mut g, &a.member_id, 7, &none, &view, now).error,
            ResponseError::FencedMemberEpoch.code()
        );
        assert_eq!(
            beat(&mut g, "ghost", 1, &none, &view, now).error,
            ResponseError::UnknownMemberId.code()
        );
        let mut bad = HeartbeatIn {
            member_epoch: 0,
            ..Default::default()
        };
        assert_eq!(
            g.heartbeat(bad.clone(), &view, &limits(), now).error,
            ResponseError::InvalidRequest.code()
        );
        bad.subscribed = Some(vec!["t".into()]);
        bad.server_assignor = Some("nope".into());
        assert_eq!(
            g.heartbeat(bad, &view, &limits(), now).error,
            ResponseError::UnsupportedAssignor.code()
        );
    }

    #[test]
    fn a_silent_member_expires_and_its_partitions_move() {
        let now = Instant::now();
        let (view, _) = topics(2);
        let mut g = ConsumerGroup::new("g", now);
        let a = join(&mut g, &view, now);
        let b = join(&mut g, &view, now);
        let a_owned = a.assignment.unwrap();
        let kept = beat(&mut g, &a.member_id, 1, &a_owned, &view, now).assignment.unwrap();
        beat(&mut g, &a.member_id, 1, &kept, &view, now);
        // b goes silent; a keeps heartbeating past b's session.
        let later = now + Duration::from_secs(46);
        assert!(!g.expire(now + Duration::from_secs(10)));
        beat(&mut g, &a.member_id, 2, &kept, &view, later - Duration::from_secs(1));
        assert!(g.expire(later));
        assert!(!g.members.contains_key(&b.member_id));
        let a_now = beat(&mut g, &a.member_id, 2, &kept, &view, later);
        assert_eq!(
            a_now.assignment.map(|s| s.len()),
            Some(2),
            "a owns both partitions again"
        );
    }

    #[test]
    fn uniform_rebalances_sticky_partitions_to_a_newcomer() {
        let now = Instant::now();
        let (view, _) = topics(4);
        let mut g = ConsumerGroup::new("g", now);
        let a = join(&mut g, &view, now).member_id;
        let b = join(&mut g, &view, now).member_id;
        let (ta, tb) = (g.target_of(&a), g.target_of(&b));
        let c = join(&mut g, &view, now).member_id;
        let mut sizes: Vec<usize> = [&a, &b, &c].iter().map(|m| g.target_of(m).len()).collect();
        sizes.sort();
        assert_eq!(sizes, vec![1, 1, 2], "balanced within one");
        assert!(
            g.target_of(&a).is_subset(&ta) && g.target_of(&b).is_subset(&tb),
            "sticky: a and b only lose"
        );
    }

    #[test]
    fn range_and_uniform_assignors_balance() {
        let now = Instant::now();
        let (view, _) = topics(5);
        for assignor in ASSIGNORS {
            let mut g = ConsumerGroup::new("g", now);
            g.assignor = assignor.to_string();
            let ids: Vec<String> = (0..2).map(|_| join(&mut g, &view, now).member_id).collect();
            let mut sizes: Vec<usize> = ids.iter().map(|m| g.target_of(m).len()).collect();
            sizes.sort();
            assert_eq!(sizes, vec![2, 3], "{assignor}");
        }
    }

    /// A view of topics `(name, partitions)`, with ids from their position.
    fn view_of(topics: &[(&str, i32)]) -> TopicsView {
        topics
            .iter()
            .enumerate()
            .map(|(i, (name, n))| (name.to_string(), (Uuid::from_u128(100 + i as u128), *n)))
            .collect()
    }

    /// A new view: `view`'s topics changed by `edit`, as the next metadata image would be.
    fn edited(view: &TopicsView, edit: impl FnOnce(&mut HashMap<String, (Uuid, i32)>)) -> TopicsView {
        let mut topics = view.topics.clone();
        edit(&mut topics);
        TopicsView::new(topics)
    }

    fn join_as(g: &mut ConsumerGroup, view: &TopicsView, req: HeartbeatIn, now: Instant) -> HeartbeatOut {
        let req = HeartbeatIn {
            member_id: if req.member_id.is_empty() {
                Uuid::new_v4().to_string()
            } else {
                req.member_id
            },
            member_epoch: 0,
            owned: Some(BTreeSet::new()),
            rebalance_timeout_ms: 30_000,
            ..req
        };
        g.heartbeat(req, view, &limits(), now)
    }

    fn join_static(g: &mut ConsumerGroup, view: &TopicsView, instance: &str, now: Instant) -> HeartbeatOut {
        let req = HeartbeatIn {
            instance_id: Some(instance.into()),
            subscribed: Some(vec!["t".into()]),
            ..Default::default()
        };
        join_as(g, view, req, now)
    }

    fn join_regex(g: &mut ConsumerGroup, view: &TopicsView, regex: &str, now: Instant) -> HeartbeatOut {
        let req = HeartbeatIn {
            subscribed_regex: Some(regex.into()),
            ..Default::default()
        };
        join_as(g, view, req, now)
    }

    fn leave(
        g: &mut ConsumerGroup,
        id: &str,
        epoch: i32,
        instance: Option<&str>,
        view: &TopicsView,
        now: Instant,
    ) -> HeartbeatOut {
        let req = HeartbeatIn {
            member_id: id.into(),
            member_epoch: epoch,
            instance_id: instance.map(String::from),
            ..Default::default()
        };
        g.heartbeat(req, view, &limits(), now)
    }

    /// Names of the topics in an assignment.
    fn names(view: &TopicsView, set: &BTreeSet<Tp>) -> BTreeSet<String> {
        set.iter()
            .filter_map(|(id, _)| view.iter().find(|(_, (i, _))| i == id).map(|(n, _)| n.clone()))
            .collect()
    }

    #[test]
    fn an_instance_id_held_by_a_live_member_is_refused_to_a_joining_member() {
        // Kafka's `throwIfInstanceIdIsUnreleased`: only a holder that left with epoch -2 releases
        // its instance id; the live holder keeps its partitions and nobody rebalances.
        let now = Instant::now();
        let (view, _) = topics(2);
        let mut g = ConsumerGroup::new("g", now);
        let a = join_static(&mut g, &view, "i1", now);
        assert_eq!((a.error, a.member_epoch), (0, 1));
        let epoch = g.epoch;
        let b = join_static(&mut g, &view, "i1", now);
        assert_eq!(b.error, ResponseError::UnreleasedInstanceId.code());
        assert_eq!(b.member_epoch, -1);
        assert_eq!(g.members.len(), 1);
        assert_eq!(g.epoch, epoch, "no rebalance");
        assert_eq!(g.members[&a.member_id].assigned.len(), 2);
        // A member that left for good (epoch -1) releases the instance id.
        assert_eq!(leave(&mut g, &a.member_id, -1, Some("i1"), &view, now).error, 0);
        assert!(g.members.is_empty());
        let c = join_static(&mut g, &view, "i1", now);
        assert_eq!((c.error, c.assignment.map(|s| s.len())), (0, Some(2)));
    }

    #[test]
    fn a_static_member_that_left_with_epoch_minus_2_holds_its_partitions_until_its_session_expires() {
        // Kafka's `consumerGroupStaticMemberGroupLeave`: the member stays at epoch -2; its
        // session timer still runs and then fences it.
        let now = Instant::now();
        let (view, _) = topics(4);
        let mut g = ConsumerGroup::new("g", now);
        let a = join_static(&mut g, &view, "ia", now);
        let b = join(&mut g, &view, now);
        let a_owned = a.assignment.unwrap();
        let a_kept = beat(&mut g, &a.member_id, 1, &a_owned, &view, now).assignment.unwrap();
        beat(&mut g, &a.member_id, 1, &a_kept, &view, now);
        let b_owned = beat(&mut g, &b.member_id, 2, &BTreeSet::new(), &view, now)
            .assignment
            .unwrap();
        assert_eq!(g.state(), ConsumerGroupState::Stable);
        let epoch = g.epoch;
        let left = leave(&mut g, &a.member_id, STATIC_LEAVE_EPOCH, Some("ia"), &view, now);
        assert_eq!((left.error, left.member_epoch), (0, STATIC_LEAVE_EPOCH));
        let away = &g.members[&a.member_id];
        assert_eq!(
            (away.epoch, away.assigned.clone()),
            (STATIC_LEAVE_EPOCH, a_kept.clone())
        );
        assert_eq!(g.epoch, epoch, "a temporary leave moves nothing");
        // b keeps heartbeating and gets none of a's partitions meanwhile.
        let later = now + Duration::from_secs(30);
        let b2 = beat(&mut g, &b.member_id, 2, &b_owned, &view, later);
        assert_eq!((b2.error, b2.assignment), (0, None));
        assert!(!g.expire(later));
        // a's session (from its last heartbeat) ends: it is fenced and b takes everything.
        let expired = now + limits().session_timeout;
        assert!(g.expire(expired));
        assert!(!g.members.contains_key(&a.member_id));
        assert!(!g.static_members.contains_key("ia"));
        let b3 = beat(&mut g, &b.member_id, 2, &b_owned, &view, expired);
        assert_eq!(b3.assignment.map(|s| s.len()), Some(4));
    }

    #[test]
    fn a_new_incarnation_takes_over_a_static_member_that_left_keeping_its_assignment_and_epoch() {
        // Kafka's `getOrMaybeSubscribeStaticConsumerGroupMember`: the new member id replaces the
        // one that left with epoch -2, with its partitions; the group epoch does not move.
        let now = Instant::now();
        let (view, _) = topics(4);
        let mut g = ConsumerGroup::new("g", now);
        let a = join_static(&mut g, &view, "ia", now);
        let b = join(&mut g, &view, now);
        let a_owned = a.assignment.unwrap();
        let a_kept = beat(&mut g, &a.member_id, 1, &a_owned, &view, now).assignment.unwrap();
        let a_epoch = beat(&mut g, &a.member_id, 1, &a_kept, &view, now).member_epoch;
        let b_owned = beat(&mut g, &b.member_id, 2, &BTreeSet::new(), &view, now)
            .assignment
            .unwrap();
        let epoch = g.epoch;
        leave(&mut g, &a.member_id, STATIC_LEAVE_EPOCH, Some("ia"), &view, now);
        let a2 = join_static(&mut g, &view, "ia", now + Duration::from_secs(5));
        assert_eq!(a2.error, 0);
        assert_ne!(a2.member_id, a.member_id);
        assert_eq!(a2.member_epoch, a_epoch, "the epoch it left with");
        assert_eq!(a2.assignment, Some(a_kept.clone()), "the partitions it left with");
        assert_eq!(g.epoch, epoch, "no rebalance");
        assert!(!g.members.contains_key(&a.member_id));
        assert_eq!(g.static_members["ia"], a2.member_id);
        assert_eq!(g.target_of(&a2.member_id), a_kept);
        // The other member notices nothing.
        let b2 = beat(&mut g, &b.member_id, 2, &b_owned, &view, now);
        assert_eq!((b2.member_epoch, b2.assignment), (2, None));
        assert_eq!(g.state(), ConsumerGroupState::Stable);
        // The old member id is gone for good.
        assert_eq!(
            beat(&mut g, &a.member_id, a_epoch, &a_kept, &view, now).error,
            ResponseError::UnknownMemberId.code()
        );
    }

    #[test]
    fn heartbeats_naming_an_instance_id_are_checked_against_its_holder() {
        // Kafka's `throwIfStaticMemberIsUnknown` (UNKNOWN_MEMBER_ID), `throwIfInstanceIdIsFenced`
        // (FENCED_INSTANCE_ID) and the epoch rules of `throwIfConsumerGroupHeartbeatRequestIsInvalid`.
        let now = Instant::now();
        let (view, _) = topics(2);
        let mut g = ConsumerGroup::new("g", now);
        let a = join_static(&mut g, &view, "ia", now);
        let with_instance = |member: &str, epoch: i32, instance: &str| HeartbeatIn {
            member_id: member.into(),
            member_epoch: epoch,
            instance_id: Some(instance.into()),
            ..Default::default()
        };
        let code = |g: &mut ConsumerGroup, req: HeartbeatIn| g.heartbeat(req, &view, &limits(), now).error;
        assert_eq!(code(&mut g, with_instance(&a.member_id, 1, "ia")), 0);
        assert_eq!(
            code(&mut g, with_instance("other", 1, "ia")),
            ResponseError::FencedInstanceId.code()
        );
        assert_eq!(
            code(&mut g, with_instance(&a.member_id, 1, "nobody")),
            ResponseError::UnknownMemberId.code()
        );
        for epoch in [-1, STATIC_LEAVE_EPOCH] {
            assert_eq!(
                code(&mut g, with_instance("other", epoch, "ia")),
                ResponseError::FencedInstanceId.code()
            );
            assert_eq!(
                code(&mut g, with_instance("other", epoch, "nobody")),
                ResponseError::UnknownMemberId.code()
            );
        }
        assert_eq!(
            leave(&mut g, &a.member_id, STATIC_LEAVE_EPOCH, None, &view, now).error,
            ResponseError::InvalidRequest.code(),
            "epoch -2 needs an instance id"
        );
        assert_eq!(
            leave(&mut g, &a.member_id, -3, Some("ia"), &view, now).error,
            ResponseError::InvalidRequest.code()
        );
        assert_eq!(g.members.len(), 1, "no refused request changed the group");
        // Once away (epoch -2), the member must join again to come back.
        leave(&mut g, &a.member_id, STATIC_LEAVE_EPOCH, Some("ia"), &view, now);
        assert_eq!(
            code(&mut g, with_instance(&a.member_id, 1, "ia")),
            ResponseError::FencedMemberEpoch.code()
        );
        let back = join_as(
            &mut g,
            &view,
            HeartbeatIn {
                member_id: a.member_id.clone(),
                instance_id: Some("ia".into()),
                subscribed: Some(vec!["t".into()]),
                ..Default::default()
            },
            now,
        );
        assert_eq!(
            (back.error, back.member_epoch, back.assignment.map(|s| s.len())),
            (0, 1, Some(2))
        );
    }

    #[test]
    fn a_regex_subscription_takes_the_topics_whose_whole_name_matches() {
        // Kafka resolves SubscribedTopicRegex with RE2/J `matcher(topic).matches()`.
        let now = Instant::now();
        let view = view_of(&[
            ("orders", 1),
            ("orders-eu", 1),
            ("reorders", 1),
            ("t1", 1),
            ("__consumer_offsets", 1),
        ]);
        let mut g = ConsumerGroup::new("g", now);
        let a = join_regex(&mut g, &view, "orders.*", now);
        assert_eq!(a.error, 0);
        assert_eq!(
            names(&view, &a.assignment.unwrap()),
            BTreeSet::from(["orders".to_string(), "orders-eu".to_string()])
        );
        let b = join_regex(&mut g, &view, "^t", now);
        assert_eq!(b.error, 0);
        assert_eq!(g.target_of(&b.member_id), BTreeSet::new(), "`^t` does not match `t1`");
        assert_eq!(g.members[&b.member_id].subscribed_regex.as_deref(), Some("^t"));
        // Names and a regex together: the union (Kafka's TargetAssignmentBuilder).
        let c = join_as(
            &mut g,
            &view,
            HeartbeatIn {
                subscribed: Some(vec!["t1".into()]),
                subscribed_regex: Some("re.*".into()),
                ..Default::default()
            },
            now,
        );
        assert_eq!(
            names(&view, &g.target_of(&c.member_id)),
            BTreeSet::from(["reorders".to_string(), "t1".to_string()])
        );
        // An empty regex clears it.
        let cleared = g.heartbeat(
            HeartbeatIn {
                member_id: c.member_id.clone(),
                member_epoch: c.member_epoch,
                subscribed_regex: Some(String::new()),
                ..Default::default()
            },
            &view,
            &limits(),
            now,
        );
        assert_eq!(cleared.error, 0);
        assert_eq!(g.members[&c.member_id].subscribed_regex, None);
        assert_eq!(
            names(&view, &g.target_of(&c.member_id)),
            BTreeSet::from(["t1".to_string()])
        );
        assert_eq!(g.patterns.len(), 2, "the unused pattern is forgotten");
    }

    #[test]
    fn a_regex_resolves_against_internal_topics_too_as_in_kafka() {
        // Kafka's `refreshRegularExpressions` scans every topic name of the image (no
        // `Topic.isInternal` filter; only DESCRIBE ACLs filter, and there is no authorizer).
        let now = Instant::now();
        let view = view_of(&[("__consumer_offsets", 2), ("t", 1)]);
        let mut g = ConsumerGroup::new("g", now);
        let a = join_regex(&mut g, &view, "__.*", now);
        assert_eq!(
            names(&view, &a.assignment.unwrap()),
            BTreeSet::from(["__consumer_offsets".to_string()])
        );
    }

    #[test]
    fn a_topic_created_or_deleted_moves_a_regex_subscription() {
        // Kafka refreshes regexes when the metadata image has new topics and drops deleted ones
        // from the subscription metadata; both bump the group epoch.
        let now = Instant::now();
        let mut view = view_of(&[("p-a", 2), ("q", 1)]);
        let mut g = ConsumerGroup::new("g", now);
        let a = join_regex(&mut g, &view, "p-.*", now);
        let owned = a.assignment.unwrap();
        assert_eq!(names(&view, &owned), BTreeSet::from(["p-a".to_string()]));
        let epoch = g.epoch;
        view = edited(&view, |m| {
            m.insert("p-b".into(), (Uuid::from_u128(900), 3));
        });
        let grown = beat(&mut g, &a.member_id, a.member_epoch, &owned, &view, now);
        assert_eq!(g.epoch, epoch + 1);
        assert_eq!(grown.member_epoch, epoch + 1);
        let owned = grown.assignment.unwrap();
        assert_eq!(owned.len(), 5, "both matching topics");
        view = edited(&view, |m| {
            m.remove("p-a");
        });
        let shrunk = beat(&mut g, &a.member_id, grown.member_epoch, &owned, &view, now);
        assert_eq!(g.epoch, epoch + 2);
        let kept = shrunk.assignment.unwrap();
        assert_eq!(names(&view, &kept), BTreeSet::from(["p-b".to_string()]));
        assert_eq!(kept.len(), 3);
    }

    #[test]
    fn an_invalid_regex_gets_invalid_regular_expression_and_changes_nothing() {
        let now = Instant::now();
        let (view, _) = topics(1);
        let mut g = ConsumerGroup::new("g", now);
        for bad in ["(", "a)|(b", "[z-a]", "*"] {
            let out = join_regex(&mut g, &view, bad, now);
            assert_eq!(out.error, ResponseError::InvalidRegularExpression.code(), "{bad}");
            assert!(out.message.is_some_and(|m| m.contains(bad)));
        }
        let too_long = "a".repeat(TOPIC_REGEX_BYTES_MAX + 1);
        assert_eq!(
            join_regex(&mut g, &view, &too_long, now).error,
            ResponseError::InvalidRegularExpression.code()
        );
        assert!(g.members.is_empty() && g.patterns.is_empty());
        assert_eq!(g.epoch, 0);
        // A member changing to a bad regex keeps its old one.
        let a = join_regex(&mut g, &view, "t", now);
        let bad = g.heartbeat(
            HeartbeatIn {
                member_id: a.member_id.clone(),
                member_epoch: a.member_epoch,
                subscribed_regex: Some("(".into()),
                ..Default::default()
            },
            &view,
            &limits(),
            now,
        );
        assert_eq!(bad.error, ResponseError::InvalidRegularExpression.code());
        assert_eq!(g.members[&a.member_id].subscribed_regex.as_deref(), Some("t"));
    }

    #[test]
    fn a_restored_group_keeps_its_away_static_members_and_regex_subscriptions() {
        let now = Instant::now();
        let mut view = view_of(&[("p-a", 2), ("q", 1)]);
        let mut g = ConsumerGroup::new("g", now);
        let static_regex = |member: &str| HeartbeatIn {
            member_id: member.into(),
            instance_id: Some("is".into()),
            subscribed_regex: Some("p-.*".into()),
            ..Default::default()
        };
        let s = join_as(&mut g, &view, static_regex(""), now);
        let owned = s.assignment.unwrap();
        assert_eq!(owned.len(), 2);
        leave(&mut g, &s.member_id, STATIC_LEAVE_EPOCH, Some("is"), &view, now);
        let snapshot = g.snapshot();
        assert_eq!(snapshot.members[0].subscribed_regex.as_deref(), Some("p-.*"));
        let mut r = ConsumerGroup::restore("g", snapshot.clone(), &view, &limits(), now);
        assert_eq!(r.snapshot(), snapshot);
        // Still away and holding its partitions: a new incarnation takes them over.
        let s2 = join_as(&mut r, &view, static_regex("s2"), now);
        assert_eq!(
            (s2.error, s2.member_epoch, s2.assignment),
            (0, s.member_epoch, Some(owned.clone()))
        );
        assert_eq!(r.epoch, snapshot.epoch);
        // The regex still resolves: a new matching topic moves the group.
        view = edited(&view, |m| {
            m.insert("p-b".into(), (Uuid::from_u128(900), 1));
        });
        let grown = beat(&mut r, "s2", s2.member_epoch, &owned, &view, now);
        assert_eq!(r.epoch, snapshot.epoch + 1);
        assert_eq!(
            names(&view, &grown.assignment.unwrap()),
            BTreeSet::from(["p-a".to_string(), "p-b".to_string()])
        );
    }
}
