//! A next-generation consumer group (KIP-848): the broker owns the assignment. Members send
//! ConsumerGroupHeartbeat with their subscription and the partitions they own; the group epoch
//! moves on every membership or subscription change, a server-side assignor (`uniform` or
//! `range`) computes the target assignment for that epoch, and each member reconciles towards
//! its target incrementally: it first gives up partitions it must lose (keeping its epoch), then
//! takes the new epoch and receives partitions as other members release them. Member epochs
//! fence zombies.
//!
//! Plain struct, time passed in as `now`, topics passed in as a view of the metadata image.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tokio::time::Instant;
use uuid::Uuid;

/// A partition, by topic id as the protocol names it.
pub type Tp = (Uuid, i32);

/// The server-side assignors served (Kafka's `group.consumer.assignors`; the first is the
/// default).
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// What the assignor needs to know about topics: name → (id, partition count).
pub type TopicsView = HashMap<String, (Uuid, i32)>;

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
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub rebalance_timeout: Duration,
    pub epoch: i32,
    previous_epoch: i32,
    /// Partitions the member may own now.
    pub assigned: BTreeSet<Tp>,
    /// Partitions it was told to give up and has not yet confirmed releasing.
    revoking: BTreeSet<Tp>,
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

/// Kafka's member epoch for a leaving member (-1) and a static member leaving temporarily (-2).
const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;

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
    pub assigned: Vec<Tp>,
}

pub struct ConsumerGroup {
    pub id: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: BTreeMap<String, ConsumerMember>,
    static_members: HashMap<String, String>,
    target: HashMap<String, BTreeSet<Tp>>,
    /// The subscribed topics' partition counts the target was computed for.
    computed_for: BTreeMap<String, (Uuid, i32)>,
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
                    assigned: m.assigned.iter().copied().collect(),
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
            let assigned: BTreeSet<Tp> = m.assigned.into_iter().collect();
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
                    rebalance_timeout: Duration::from_millis(u64::try_from(m.rebalance_timeout_ms).unwrap_or(0)),
                    epoch: m.member_epoch,
                    previous_epoch: m.member_epoch,
                    assigned: assigned.clone(),
                    revoking: BTreeSet::new(),
                    revoke_deadline: None,
                    last_sent: Some(assigned),
                    session_deadline: now + limits.session_timeout,
                },
            );
        }
        if !g.members.is_empty() {
            g.empty_since = None;
        }
        // The target was computed for the topics as they are now (unless they changed while
        // the broker was down, which the next heartbeat then notices).
        g.computed_for = g
            .members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .filter_map(|t| topics.get(t).map(|v| (t.clone(), *v)))
            .collect();
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
        }
        if self.members.is_empty() {
            self.empty_since = Some(now);
        }
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

    /// Handles one ConsumerGroupHeartbeat.
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
        match req.member_epoch {
            LEAVE_EPOCH | STATIC_LEAVE_EPOCH => {
                let id = match (&req.instance_id, self.members.contains_key(&req.member_id)) {
                    (_, true) => req.member_id.clone(),
                    (Some(instance), false) => match self.static_members.get(instance) {
                        Some(id) => id.clone(),
                        None => return fail(ResponseError::UnknownMemberId, "unknown member", &req.member_id),
                    },
                    (None, false) => return fail(ResponseError::UnknownMemberId, "unknown member", &req.member_id),
                };
                self.remove_member(&id, now);
                HeartbeatOut {
                    member_id: id,
                    member_epoch: req.member_epoch,
                    ..Default::default()
                }
            }
            0 => {
                if req.subscribed.is_none() {
                    return fail(
                        ResponseError::InvalidRequest,
                        "a joining member must send its subscription",
                        &req.member_id,
                    );
                }
                let id = if req.member_id.is_empty() {
                    Uuid::new_v4().to_string()
                } else {
                    req.member_id.clone()
                };
                if let Some(instance) = &req.instance_id
                    && let Some(old) = self.static_members.get(instance).cloned()
                    && old != id
                {
                    // KIP-345 carried into KIP-848: the new incarnation replaces the old one.
                    self.remove_member(&old, now);
                }
                if !self.members.contains_key(&id) && self.members.len() >= limits.max_size {
                    return fail(ResponseError::GroupMaxSizeReached, "the group is full", &id);
                }
                // A known member rejoining with epoch 0 lost its state: it starts afresh.
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
                        subscribed: {
                            let mut topics = req.subscribed.clone().unwrap_or_default();
                            topics.sort();
                            topics.dedup();
                            topics
                        },
                        rebalance_timeout: Duration::from_millis(
                            u64::try_from(req.rebalance_timeout_ms).unwrap_or(300_000),
                        ),
                        epoch: 0,
                        previous_epoch: 0,
                        assigned: BTreeSet::new(),
                        revoking: BTreeSet::new(),
                        revoke_deadline: None,
                        last_sent: None,
                        session_deadline: now + limits.session_timeout,
                    },
                );
                self.empty_since = None;
                self.epoch += 1;
                self.after_heartbeat(&id, req, topics, limits, now)
            }
            epoch => {
                let Some(member) = self.members.get_mut(&req.member_id) else {
                    return fail(ResponseError::UnknownMemberId, "unknown member", &req.member_id);
                };
                // A member whose last answer was lost may repeat its previous epoch.
                if epoch != member.epoch && epoch != member.previous_epoch {
                    return fail(
                        ResponseError::FencedMemberEpoch,
                        "the member epoch is fenced",
                        &req.member_id,
                    );
                }
                if epoch != member.epoch {
                    member.last_sent = None; // it missed our answer: send the assignment again
                }
                member.session_deadline = now + limits.session_timeout;
                let id = req.member_id.clone();
                self.after_heartbeat(&id, req, topics, limits, now)
            }
        }
    }

    fn after_heartbeat(
        &mut self,
        id: &str,
        req: HeartbeatIn,
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
        if let Some(member) = self.members.get_mut(id) {
            if let Some(subscribed) = req.subscribed {
                let mut subscribed = subscribed;
                subscribed.sort();
                subscribed.dedup();
                if subscribed != member.subscribed {
                    member.subscribed = subscribed;
                    self.epoch += 1;
                }
            }
            if let Some(rack) = req.rack_id {
                member.rack_id = Some(rack);
            }
        }
        // Topic metadata the target depends on (a subscribed topic created, grown or deleted).
        let subscribed: BTreeMap<String, (Uuid, i32)> = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .filter_map(|t| topics.get(t).map(|v| (t.clone(), *v)))
            .collect();
        if subscribed != self.computed_for && self.epoch == self.assignment_epoch {
            self.epoch += 1;
        }
        if self.assignment_epoch < self.epoch {
            self.target = assign(&self.assignor, &self.members, &subscribed, &self.target);
            self.assignment_epoch = self.epoch;
            self.computed_for = subscribed;
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
            m.revoking.clear();
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
            if !held_by_others.contains(&p) {
                m.assigned.insert(p);
            }
        }
    }
}

/// Computes the target assignment. Both assignors only assign a topic's partitions among the
/// members subscribed to it.
fn assign(
    assignor: &str,
    members: &BTreeMap<String, ConsumerMember>,
    topics: &BTreeMap<String, (Uuid, i32)>,
    previous: &HashMap<String, BTreeSet<Tp>>,
) -> HashMap<String, BTreeSet<Tp>> {
    let mut target: HashMap<String, BTreeSet<Tp>> = members.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
    if assignor == "range" {
        // Kafka's range assignor, per topic: members sorted, contiguous ranges, the first
        // members taking one extra when the count does not divide.
        for (name, (id, count)) in topics {
            let subs: Vec<&String> = members
                .values()
                .filter(|m| m.subscribed.contains(name))
                .map(|m| &m.id)
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
    let eligible = |m: &ConsumerMember, topic: &str| m.subscribed.iter().any(|t| t == topic);
    let subscribers = members.values().filter(|m| !m.subscribed.is_empty()).count().max(1);
    let base = all.len() / subscribers;
    // How many members may hold one more than `base`.
    let mut extra_slots = all.len() % subscribers;
    let mut unassigned = Vec::new();
    for (tp, topic) in &all {
        let keeper = previous
            .iter()
            .find(|(m, set)| set.contains(tp) && members.get(*m).is_some_and(|mm| eligible(mm, topic)))
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
        let least = members
            .values()
            .filter(|m| eligible(m, &topic))
            .min_by_key(|m| (target.get(&m.id).map_or(0, BTreeSet::len), m.id.clone()))
            .map(|m| m.id.clone());
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
        }
    }

    fn topics(n: i32) -> (TopicsView, Uuid) {
        let id = Uuid::from_u128(7);
        (HashMap::from([("t".to_string(), (id, n))]), id)
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
}
