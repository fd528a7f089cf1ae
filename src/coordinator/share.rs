//! A share group's membership (KIP-932): members send ShareGroupHeartbeat with the topics they
//! subscribe to, and the coordinator assigns them partitions. Unlike a consumer group, several
//! members may share a partition and nothing is revoked: the partition leader hands each record
//! to one member at a time (`crate::share`), so a member takes its new assignment at once, with
//! the group's epoch. The group epoch moves on every change of members, subscriptions or the
//! subscribed topics' partitions; the assignment is recomputed for that epoch.
//!
//! The assignor is Kafka's `simple` in spirit: every subscribed partition goes to at least one
//! subscriber, partitions are spread evenly, and when a topic has fewer partitions than
//! subscribers each partition is shared by about as many members.
//!
//! Plain struct, time passed in as `now`, topics passed in as a view of the metadata image.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tokio::time::Instant;
use uuid::Uuid;

use super::consumer::{HeartbeatOut, TopicsView, Tp};

/// The assignor share groups report (Kafka's only one).
pub const ASSIGNOR: &str = "simple";

/// Limits from the broker's `group.share.*` settings, with the group's own configs over them.
#[derive(Debug, Clone, Copy)]
pub struct ShareLimits {
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub max_size: usize,
    /// The least time between two target assignments (KIP-1263).
    pub assignment_interval: Duration,
}

/// One ShareGroupHeartbeat, decoded.
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeatIn {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// None: unchanged since the last heartbeat.
    pub subscribed: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`: the message of INVALID_REQUEST, if the
/// request is malformed.
pub fn invalid_heartbeat(group_id: &str, req: &ShareHeartbeatIn) -> Option<&'static str> {
    if req.member_id.trim().is_empty() {
        return Some("MemberId can't be empty.");
    }
    if group_id.trim().is_empty() {
        return Some("GroupId can't be empty.");
    }
    if req.rack_id.as_deref().is_some_and(|r| r.trim().is_empty()) {
        return Some("RackId can't be empty.");
    }
    if req.member_epoch == 0 {
        if req.subscribed.as_ref().is_none_or(Vec::is_empty) {
            return Some("SubscribedTopicNames must be set in first request.");
        }
    } else if req.member_epoch < -1 {
        return Some("MemberEpoch is invalid.");
    }
    None
}

#[derive(Debug, Clone)]
pub struct ShareMember {
    pub id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// SubscribedTopicNames, sorted and without repeats.
    pub subscribed: Vec<String>,
    pub epoch: i32,
    previous_epoch: i32,
    /// The partitions the member reads now.
    pub assigned: BTreeSet<Tp>,
    /// The assignment last sent, so that an unchanged one is not repeated.
    last_sent: Option<BTreeSet<Tp>>,
    session_deadline: Instant,
}

/// What is stored of a share group: its epoch. Members are not stored; after a coordinator
/// change they join again (a heartbeat of an unknown member gets UNKNOWN_MEMBER_ID, and the
/// client then joins with epoch 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupSnapshot {
    pub epoch: i32,
}

#[derive(Debug)]
pub struct ShareGroup {
    pub id: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    target: BTreeMap<String, BTreeSet<Tp>>,
    /// The subscribed topics (name → id, partitions) the target was computed for.
    computed_for: BTreeMap<String, (Uuid, i32)>,
    /// When the target was last computed: the next waits for the group's assignment interval
    /// (KIP-1263).
    assigned_time: Option<Instant>,
}

impl ShareGroup {
    pub fn new(id: &str) -> ShareGroup {
        ShareGroup {
            id: id.to_string(),
            epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            computed_for: BTreeMap::new(),
            assigned_time: None,
        }
    }

    pub fn snapshot(&self) -> ShareGroupSnapshot {
        ShareGroupSnapshot { epoch: self.epoch }
    }

    pub fn restore(id: &str, snapshot: &ShareGroupSnapshot) -> ShareGroup {
        let mut group = ShareGroup::new(id);
        group.epoch = snapshot.epoch;
        group.assignment_epoch = snapshot.epoch;
        group
    }

    /// "Empty" or "Stable", as ListGroups and ShareGroupDescribe report it.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() { "Empty" } else { "Stable" }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.members.values().map(|m| m.session_deadline).min()
    }

    /// The partitions some member of the group is assigned.
    pub fn assigned_partitions(&self) -> BTreeSet<Tp> {
        self.members.values().flat_map(|m| m.assigned.iter().copied()).collect()
    }

    /// Whether `member_id` is a member now (ShareFetch and ShareAcknowledge check it).
    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// Removes members whose session ended; true when the group changed.
    pub fn expire(&mut self, topics: &TopicsView, interval: Duration, now: Instant) -> bool {
        let before = self.members.len();
        self.members.retain(|_, m| m.session_deadline > now);
        if self.members.len() == before {
            return false;
        }
        self.epoch += 1;
        self.assign_if_due(topics, interval, now);
        true
    }

    /// KIP-1263: a new target for a group whose epoch moved past it, at most once per
    /// assignment `interval`; until then members keep the target they have (a joining member
    /// gets nothing at its epoch), and the first heartbeat after the interval computes it.
    fn assign_if_due(&mut self, topics: &TopicsView, interval: Duration, now: Instant) {
        if self.assignment_epoch < self.epoch && super::consumer::assignment_due(self.assigned_time, interval, now) {
            self.compute_target(topics);
            self.assigned_time = Some(now);
        }
    }

    /// The subscribed topics as `topics` has them now.
    fn subscribed_topics(&self, topics: &TopicsView) -> BTreeMap<String, (Uuid, i32)> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .filter_map(|name| topics.get(name).map(|t| (name.clone(), *t)))
            .collect()
    }

    fn compute_target(&mut self, topics: &TopicsView) {
        self.computed_for = self.subscribed_topics(topics);
        self.target = assign(&self.members, &self.computed_for);
        self.assignment_epoch = self.epoch;
    }

    /// One ShareGroupHeartbeat (validated by `invalid_heartbeat`).
    pub fn heartbeat(
        &mut self,
        req: ShareHeartbeatIn,
        topics: &TopicsView,
        limits: &ShareLimits,
        now: Instant,
    ) -> HeartbeatOut {
        let fail = |code: ResponseError, message: String| HeartbeatOut {
            error: code.code(),
            message: Some(message),
            member_id: req.member_id.clone(),
            member_epoch: -1,
            ..Default::default()
        };
        let id = req.member_id.clone();
        if req.member_epoch == -1 {
            if self.members.remove(&id).is_none() {
                return fail(
                    ResponseError::UnknownMemberId,
                    format!("Member {id} is not a member of group {}.", self.id),
                );
            }
            self.epoch += 1;
            self.assign_if_due(topics, limits.assignment_interval, now);
            return HeartbeatOut {
                member_id: id,
                member_epoch: -1,
                ..Default::default()
            };
        }
        let subscribed = req.subscribed.as_ref().map(|names| {
            let set: BTreeSet<&String> = names.iter().collect();
            set.into_iter().cloned().collect::<Vec<String>>()
        });
        let mut changed = false;
        if req.member_epoch == 0 {
            if !self.members.contains_key(&id) && self.members.len() >= limits.max_size {
                return fail(
                    ResponseError::GroupMaxSizeReached,
                    format!(
                        "The share group has reached its maximum capacity of {} members.",
                        limits.max_size
                    ),
                );
            }
            // A join, or a member joining again under its id: it starts afresh.
            let member = ShareMember {
                id: id.clone(),
                rack_id: req.rack_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                subscribed: subscribed.clone().unwrap_or_default(),
                epoch: 0,
                previous_epoch: 0,
                assigned: BTreeSet::new(),
                last_sent: None,
                session_deadline: now + limits.session_timeout,
            };
            let old = self.members.insert(id.clone(), member);
            changed = old.is_none_or(|o| o.subscribed != subscribed.clone().unwrap_or_default());
        } else {
            let Some(member) = self.members.get_mut(&id) else {
                return fail(
                    ResponseError::UnknownMemberId,
                    format!("Member {id} is not a member of group {}.", self.id),
                );
            };
            if req.member_epoch > member.epoch {
                return fail(
                    ResponseError::FencedMemberEpoch,
                    format!(
                        "The share group member has a greater member epoch ({}) than the one known by the \
                         group coordinator ({}). The member must abandon all its partitions and rejoin.",
                        req.member_epoch, member.epoch
                    ),
                );
            }
            if req.member_epoch < member.epoch && req.member_epoch != member.previous_epoch {
                return fail(
                    ResponseError::FencedMemberEpoch,
                    format!(
                        "The share group member has a smaller member epoch ({}) than the one known by the \
                         group coordinator ({}). The member must abandon all its partitions and rejoin.",
                        req.member_epoch, member.epoch
                    ),
                );
            }
            member.session_deadline = now + limits.session_timeout;
            if req.rack_id.is_some() {
                member.rack_id = req.rack_id.clone();
            }
            member.client_id = req.client_id.clone();
            member.client_host = req.client_host.clone();
            if let Some(names) = subscribed
                && names != member.subscribed
            {
                member.subscribed = names;
                changed = true;
            }
        }
        // A subscribed topic created, deleted or grown moves the epoch as a subscription does.
        if changed || (self.assignment_epoch == self.epoch && self.subscribed_topics(topics) != self.computed_for) {
            self.epoch += 1;
        }
        self.assign_if_due(topics, limits.assignment_interval, now);
        let target = self.target.get(&id).cloned().unwrap_or_default();
        let assignment_epoch = self.assignment_epoch;
        let Some(member) = self.members.get_mut(&id) else {
            return fail(ResponseError::UnknownMemberId, format!("Member {id} is gone."));
        };
        if member.epoch != assignment_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = assignment_epoch;
        }
        member.assigned = target;
        let assignment = (req.member_epoch == 0 || member.last_sent.as_ref() != Some(&member.assigned))
            .then(|| member.assigned.clone());
        if assignment.is_some() {
            member.last_sent = Some(member.assigned.clone());
        }
        HeartbeatOut {
            member_id: id,
            member_epoch: member.epoch,
            heartbeat_interval_ms: i32::try_from(limits.heartbeat_interval.as_millis()).unwrap_or(i32::MAX),
            assignment,
            ..Default::default()
        }
    }
}

/// The target assignment: each subscribed topic's partitions spread over its subscribers. A
/// topic with at least as many partitions as subscribers gives each partition to one of them;
/// one with fewer shares each partition among about `subscribers / partitions` members. The
/// starting member moves on from topic to topic, so that single-partition topics do not all
/// land on the same member.
fn assign(
    members: &BTreeMap<String, ShareMember>,
    topics: &BTreeMap<String, (Uuid, i32)>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut target: BTreeMap<String, BTreeSet<Tp>> = members.keys().map(|id| (id.clone(), BTreeSet::new())).collect();
    let mut start = 0usize;
    for (name, (topic_id, partitions)) in topics {
        let subscribers: Vec<&String> = members
            .values()
            .filter(|m| m.subscribed.binary_search(name).is_ok())
            .map(|m| &m.id)
            .collect();
        let count = usize::try_from(*partitions).unwrap_or(0);
        if subscribers.is_empty() || count == 0 {
            continue;
        }
        let n = subscribers.len();
        if count >= n {
            for p in 0..count {
                let member = subscribers[(p + start) % n];
                if let (Some(set), Ok(p)) = (target.get_mut(member), i32::try_from(p)) {
                    set.insert((*topic_id, p));
                }
            }
        } else {
            for (j, member) in subscribers.iter().enumerate() {
                if let (Some(set), Ok(p)) = (target.get_mut(*member), i32::try_from((j + start) % count)) {
                    set.insert((*topic_id, p));
                }
            }
        }
        start = start.wrapping_add(count);
    }
    target
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn limits() -> ShareLimits {
        ShareLimits {
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
            max_size: 3,
            assignment_interval: Duration::ZERO,
        }
    }

    fn view(topics: &[(&str, Uuid, i32)]) -> TopicsView {
        topics
            .iter()
            .map(|(n, id, p)| (n.to_string(), (*id, *p)))
            .collect::<HashMap<_, _>>()
            .into_iter()
            .collect()
    }

    fn join(g: &mut ShareGroup, view: &TopicsView, id: &str, topics: &[&str], now: Instant) -> HeartbeatOut {
        g.heartbeat(
            ShareHeartbeatIn {
                member_id: id.into(),
                member_epoch: 0,
                subscribed: Some(topics.iter().map(|t| t.to_string()).collect()),
                ..Default::default()
            },
            view,
            &limits(),
            now,
        )
    }

    fn beat(g: &mut ShareGroup, view: &TopicsView, id: &str, epoch: i32, now: Instant) -> HeartbeatOut {
        g.heartbeat(
            ShareHeartbeatIn {
                member_id: id.into(),
                member_epoch: epoch,
                ..Default::default()
            },
            view,
            &limits(),
            now,
        )
    }

    #[test]
    fn a_new_target_waits_for_the_assignment_interval() {
        // KIP-1263: b joining 100 ms after the first target gets nothing at that target's
        // epoch; its first heartbeat after 1 s computes the next.
        let paced = ShareLimits {
            assignment_interval: Duration::from_secs(1),
            ..limits()
        };
        let t = Uuid::new_v4();
        let v = view(&[("t", t, 4)]);
        let t0 = Instant::now();
        let mut g = ShareGroup::new("g");
        let req = |id: &str, epoch| ShareHeartbeatIn {
            member_id: id.into(),
            member_epoch: epoch,
            subscribed: (epoch == 0).then(|| vec!["t".to_string()]),
            ..Default::default()
        };
        let a = g.heartbeat(req("a", 0), &v, &paced, t0);
        assert_eq!((a.member_epoch, a.assignment.map(|p| p.len())), (1, Some(4)));
        let b = g.heartbeat(req("b", 0), &v, &paced, t0 + Duration::from_millis(100));
        assert_eq!((b.member_epoch, b.assignment), (1, Some(BTreeSet::new())));
        assert_eq!((g.epoch, g.assignment_epoch), (2, 1));
        let b = g.heartbeat(req("b", 1), &v, &paced, t0 + Duration::from_millis(900));
        assert_eq!((b.member_epoch, b.assignment), (1, None));
        let b = g.heartbeat(req("b", 1), &v, &paced, t0 + Duration::from_secs(1));
        assert_eq!((b.member_epoch, b.assignment.map(|p| p.len())), (2, Some(2)));
    }

    #[test]
    fn members_split_partitions_and_share_them_when_fewer_than_members() {
        let t = Uuid::new_v4();
        let v = view(&[("t", t, 4)]);
        let now = Instant::now();
        let mut g = ShareGroup::new("g");
        let a = join(&mut g, &v, "a", &["t"], now);
        assert_eq!(a.error, 0);
        assert_eq!(a.member_epoch, 1);
        assert_eq!(a.assignment.unwrap().len(), 4);
        let b = join(&mut g, &v, "b", &["t"], now);
        assert_eq!(b.member_epoch, 2);
        assert_eq!(b.assignment.unwrap().len(), 2);
        // a learns its new assignment at its next heartbeat, with the new epoch.
        let a = beat(&mut g, &v, "a", 1, now);
        assert_eq!(a.member_epoch, 2);
        assert_eq!(a.assignment.unwrap().len(), 2);
        // Nothing changed: no assignment repeated.
        let a = beat(&mut g, &v, "a", 2, now);
        assert!(a.assignment.is_none());
        // One partition, three members: all three read it.
        let one = Uuid::new_v4();
        let v1 = view(&[("one", one, 1)]);
        let mut g = ShareGroup::new("g1");
        for id in ["a", "b", "c"] {
            let out = join(&mut g, &v1, id, &["one"], now);
            assert_eq!(out.error, 0);
        }
        for id in ["a", "b", "c"] {
            assert_eq!(g.members[id].assigned, BTreeSet::from([(one, 0)]), "{id}");
        }
    }

    #[test]
    fn epochs_fence_and_unknown_members_are_refused() {
        let v = view(&[("t", Uuid::new_v4(), 2)]);
        let now = Instant::now();
        let mut g = ShareGroup::new("g");
        join(&mut g, &v, "a", &["t"], now);
        assert_eq!(
            beat(&mut g, &v, "a", 5, now).error,
            ResponseError::FencedMemberEpoch.code()
        );
        assert_eq!(
            beat(&mut g, &v, "zz", 1, now).error,
            ResponseError::UnknownMemberId.code()
        );
        join(&mut g, &v, "b", &["t"], now);
        // a's previous epoch (1) is accepted once the group moved to 2, an older one is not.
        assert_eq!(beat(&mut g, &v, "a", 1, now).member_epoch, 2);
        assert_eq!(beat(&mut g, &v, "a", 1, now).error, 0);
        join(&mut g, &v, "c", &["t"], now);
        assert_eq!(
            beat(&mut g, &v, "c", 1, now).error,
            ResponseError::FencedMemberEpoch.code()
        );
        // Full: a fourth member is refused, a known one may join again.
        assert_eq!(
            join(&mut g, &v, "d", &["t"], now).error,
            ResponseError::GroupMaxSizeReached.code()
        );
        assert_eq!(join(&mut g, &v, "a", &["t"], now).error, 0);
        // Leaving.
        let left = beat(&mut g, &v, "a", -1, now);
        assert_eq!((left.error, left.member_epoch), (0, -1));
        assert!(!g.has_member("a"));
        assert_eq!(
            beat(&mut g, &v, "a", -1, now).error,
            ResponseError::UnknownMemberId.code()
        );
    }

    #[test]
    fn a_silent_member_expires_and_a_new_partition_moves_the_epoch() {
        let t = Uuid::new_v4();
        let v = view(&[("t", t, 2)]);
        let now = Instant::now();
        let mut g = ShareGroup::new("g");
        join(&mut g, &v, "a", &["t"], now);
        join(&mut g, &v, "b", &["t"], now + Duration::from_secs(30));
        assert!(g.expire(&v, Duration::ZERO, now + Duration::from_secs(46)));
        assert_eq!(g.members.keys().collect::<Vec<_>>(), vec!["b"]);
        let b = beat(&mut g, &v, "b", 2, now + Duration::from_secs(47));
        assert_eq!(b.member_epoch, 3);
        assert_eq!(b.assignment.unwrap().len(), 2);
        let grown = view(&[("t", t, 3)]);
        let b = beat(&mut g, &grown, "b", 3, now + Duration::from_secs(48));
        assert_eq!(b.member_epoch, 4);
        assert_eq!(b.assignment.unwrap().len(), 3);
        assert!(!g.expire(&grown, Duration::ZERO, now + Duration::from_secs(50)));
    }

    #[test]
    fn malformed_heartbeats_are_named() {
        let ok = ShareHeartbeatIn {
            member_id: "m".into(),
            member_epoch: 0,
            subscribed: Some(vec!["t".into()]),
            ..Default::default()
        };
        assert_eq!(invalid_heartbeat("g", &ok), None);
        assert_eq!(invalid_heartbeat(" ", &ok), Some("GroupId can't be empty."));
        let mut r = ok.clone();
        r.member_id = String::new();
        assert_eq!(invalid_heartbeat("g", &r), Some("MemberId can't be empty."));
        let mut r = ok.clone();
        r.subscribed = Some(vec![]);
        assert_eq!(
            invalid_heartbeat("g", &r),
            Some("SubscribedTopicNames must be set in first request.")
        );
        let mut r = ok.clone();
        r.member_epoch = -2;
        assert_eq!(invalid_heartbeat("g", &r), Some("MemberEpoch is invalid."));
        let mut r = ok;
        r.rack_id = Some(String::new());
        assert_eq!(invalid_heartbeat("g", &r), Some("RackId can't be empty."));
    }
}
