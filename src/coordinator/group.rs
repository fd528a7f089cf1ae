//! One classic consumer group's state machine (Kafka's `GroupMetadata` and the join/sync logic
//! of `GroupCoordinator`): members, generations, the leader, protocol selection, static
//! membership (KIP-345), the member-id round trip (KIP-394), session and rebalance deadlines.
//!
//! Plain struct, time passed in as `now`: answers go out through the oneshot senders a caller
//! hands in, immediately or when a later call (another member's join, a deadline) completes them.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Kafka's classic group states (`GroupState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request, decoded.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a new dynamic member first gets MEMBER_ID_REQUIRED and its id (KIP-394).
    pub require_known_member_id: bool,
}

/// A JoinGroup answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader only: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// KIP-814: a static leader rejoining a stable group must not compute a new assignment.
    pub skip_assignment: bool,
}

impl JoinResult {
    fn error(code: ResponseError, member_id: &str) -> JoinResult {
        JoinResult {
            error: code.code(),
            generation: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

/// A SyncGroup answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    fn error(code: ResponseError) -> SyncResult {
        SyncResult {
            error: code.code(),
            ..Default::default()
        }
    }
}

pub type JoinReply = oneshot::Sender<JoinResult>;
pub type SyncReply = oneshot::Sender<SyncResult>;

#[derive(Debug)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    join_waiter: Option<JoinReply>,
    sync_waiter: Option<SyncReply>,
    session_deadline: Instant,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(n, _)| n == protocol)
    }
}

/// Limits the coordinator applies (Kafka's `group.*` broker settings).
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    pub initial_rebalance_delay: Duration,
    pub max_size: usize,
}

/// What a persisted group looks like (for `__consumer_offsets`).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSnapshot {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<MemberSnapshot>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemberSnapshot {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Static members: `group.instance.id` → member id.
    static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, awaiting the member's rejoin, with the
    /// deadline after which the id is forgotten.
    pending_members: HashMap<String, Instant>,
    /// When the current rebalance's join phase ends regardless of missing members.
    rebalance_deadline: Option<Instant>,
    rebalance_started: Option<Instant>,
    /// While a group forms from empty, the join phase lasts at least until then.
    initial_delay_until: Option<Instant>,
    /// When the group last became empty (offsets retention counts from here).
    pub empty_since: Option<Instant>,
}

fn new_member_id(client_id: &str) -> String {
    format!("{client_id}-{}", uuid::Uuid::new_v4())
}

impl Group {
    pub fn new(id: &str, now: Instant) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            rebalance_deadline: None,
            rebalance_started: None,
            initial_delay_until: None,
            empty_since: Some(now),
        }
    }

    /// A group loaded from `__consumer_offsets`: Stable with its members (who must heartbeat
    /// within their session timeout to stay), or Empty.
    pub fn restore(id: &str, snapshot: GroupSnapshot, now: Instant) -> Group {
        let mut g = Group::new(id, now);
        g.protocol_type = Some(snapshot.protocol_type);
        g.generation = snapshot.generation;
        g.protocol = snapshot.protocol;
        g.leader = snapshot.leader;
        for m in snapshot.members {
            let session_timeout = Duration::from_millis(u64::try_from(m.session_timeout_ms).unwrap_or(0));
            if let Some(instance) = &m.instance_id {
                g.static_members.insert(instance.clone(), m.member_id.clone());
            }
            let protocols = match &g.protocol {
                Some(p) => vec![(p.clone(), m.subscription)],
                None => vec![],
            };
            g.members.insert(
                m.member_id.clone(),
                Member {
                    id: m.member_id,
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout,
                    rebalance_timeout: Duration::from_millis(u64::try_from(m.rebalance_timeout_ms).unwrap_or(0)),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    protocols,
                    assignment: m.assignment,
                    join_waiter: None,
                    sync_waiter: None,
                    session_deadline: now + session_timeout,
                },
            );
        }
        if !g.members.is_empty() {
            g.state = GroupState::Stable;
            g.empty_since = None;
        }
        g
    }

    pub fn snapshot(&self) -> GroupSnapshot {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupSnapshot {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: i32::try_from(m.rebalance_timeout.as_millis()).unwrap_or(i32::MAX),
                    session_timeout_ms: i32::try_from(m.session_timeout.as_millis()).unwrap_or(i32::MAX),
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending_members.is_empty()
    }

    /// The earliest moment something must happen without a request (a session expiring, the
    /// join phase ending), or None when the group is idle.
    pub fn next_deadline(&self) -> Option<Instant> {
        let sessions = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.session_deadline);
        let pending = self.pending_members.values().copied();
        sessions.chain(pending).chain(self.rebalance_deadline).min()
    }

    /// Members' protocols the group could pick: those every member supports.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocols.is_empty() || protocol_type.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|(name, _)| self.members.values().all(|m| m.supports(name)))
    }

    /// JoinGroup. The answer goes to `reply`, now or when the join phase completes.
    pub fn join(&mut self, req: JoinRequest, limits: &GroupLimits, now: Instant, reply: JoinReply) -> bool {
        let changed = self.join_inner(req, limits, now, reply);
        self.maybe_complete_join(now);
        changed
    }

    fn join_inner(&mut self, req: JoinRequest, limits: &GroupLimits, now: Instant, reply: JoinReply) -> bool {
        let send = |reply: JoinReply, result: JoinResult| {
            let _ = reply.send(result);
        };
        if req.session_timeout < limits.min_session_timeout || req.session_timeout > limits.max_session_timeout {
            send(
                reply,
                JoinResult::error(ResponseError::InvalidSessionTimeout, &req.member_id),
            );
            return false;
        }
        if self.state == GroupState::Dead {
            send(
                reply,
                JoinResult::error(ResponseError::CoordinatorNotAvailable, &req.member_id),
            );
            return false;
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            send(
                reply,
                JoinResult::error(ResponseError::InconsistentGroupProtocol, &req.member_id),
            );
            return false;
        }
        if req.member_id.is_empty() {
            return self.join_new_member(req, limits, now, reply);
        }
        // A known member id, possibly a pending one from KIP-394 or a static member.
        if let Some(instance) = &req.instance_id {
            match self.static_members.get(instance) {
                Some(current) if *current != req.member_id => {
                    send(
                        reply,
                        JoinResult::error(ResponseError::FencedInstanceId, &req.member_id),
                    );
                    return false;
                }
                _ => {}
            }
        }
        if self.pending_members.remove(&req.member_id).is_some() {
            self.add_member(req, now, reply);
            self.prepare_rebalance(limits, now);
            return true;
        }
        let Some(member) = self.members.get_mut(&req.member_id) else {
            send(reply, JoinResult::error(ResponseError::UnknownMemberId, &req.member_id));
            return false;
        };
        member.session_deadline = now + member.session_timeout;
        match self.state {
            GroupState::PreparingRebalance => {
                Self::update_member(member, req, reply);
                false
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                let same = member.protocols == req.protocols;
                let is_leader = self.leader.as_deref() == Some(req.member_id.as_str());
                if same && (self.state == GroupState::CompletingRebalance || !is_leader) {
                    // The member lost our answer (or a follower rejoined for nothing): repeat it.
                    let result = self.join_result_for(&req.member_id);
                    send(reply, result);
                    false
                } else {
                    let member = self.members.get_mut(&req.member_id);
                    if let Some(member) = member {
                        Self::update_member(member, req, reply);
                    }
                    self.prepare_rebalance(limits, now);
                    true
                }
            }
            GroupState::Empty | GroupState::Dead => {
                send(reply, JoinResult::error(ResponseError::UnknownMemberId, &req.member_id));
                false
            }
        }
    }

    fn join_new_member(&mut self, req: JoinRequest, limits: &GroupLimits, now: Instant, reply: JoinReply) -> bool {
        if self.members.len() + self.pending_members.len() >= limits.max_size {
            let _ = reply.send(JoinResult::error(ResponseError::GroupMaxSizeReached, ""));
            return false;
        }
        let member_id = new_member_id(&req.client_id);
        if let Some(instance) = req.instance_id.clone() {
            // KIP-345: a static member's new id replaces its old one; the old id is fenced.
            if let Some(old_id) = self.static_members.get(&instance).cloned()
                && let Some(mut old) = self.members.remove(&old_id)
            {
                if let Some(w) = old.join_waiter.take() {
                    let _ = w.send(JoinResult::error(ResponseError::FencedInstanceId, &old_id));
                }
                if let Some(w) = old.sync_waiter.take() {
                    let _ = w.send(SyncResult::error(ResponseError::FencedInstanceId));
                }
                let protocols_same = old.protocols == req.protocols;
                let was_leader = self.leader.as_deref() == Some(old_id.as_str());
                self.static_members.insert(instance, member_id.clone());
                if was_leader {
                    self.leader = Some(member_id.clone());
                }
                let req = JoinRequest {
                    member_id: member_id.clone(),
                    ..req
                };
                if self.state == GroupState::Stable && protocols_same {
                    // Rejoin without a rebalance: same generation, same assignment.
                    let mut member = Self::member_from(&req, now);
                    member.assignment = old.assignment;
                    self.members.insert(member_id.clone(), member);
                    let mut result = self.join_result_for(&member_id);
                    if was_leader {
                        result.skip_assignment = true;
                    }
                    let _ = reply.send(result);
                    return true;
                }
                self.add_member(req, now, reply);
                if matches!(
                    self.state,
                    GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
                ) {
                    self.prepare_rebalance(limits, now);
                }
                return true;
            }
            self.static_members.insert(instance, member_id.clone());
            let req = JoinRequest {
                member_id: member_id.clone(),
                ..req
            };
            self.add_member(req, now, reply);
            self.prepare_rebalance(limits, now);
            return true;
        }
        if req.require_known_member_id {
            self.pending_members
                .insert(member_id.clone(), now + req.session_timeout);
            let _ = reply.send(JoinResult::error(ResponseError::MemberIdRequired, &member_id));
            return true;
        }
        let req = JoinRequest { member_id, ..req };
        self.add_member(req, now, reply);
        self.prepare_rebalance(limits, now);
        true
    }

    fn member_from(req: &JoinRequest, now: Instant) -> Member {
        Member {
            id: req.member_id.clone(),
            instance_id: req.instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout: req.session_timeout,
            rebalance_timeout: req.rebalance_timeout,
            protocol_type: req.protocol_type.clone(),
            protocols: req.protocols.clone(),
            assignment: Bytes::new(),
            join_waiter: None,
            sync_waiter: None,
            session_deadline: now + req.session_timeout,
        }
    }

    fn add_member(&mut self, req: JoinRequest, now: Instant, reply: JoinReply) {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        let mut member = Self::member_from(&req, now);
        member.join_waiter = Some(reply);
        if self.leader.is_none() {
            self.leader = Some(member.id.clone());
        }
        self.members.insert(member.id.clone(), member);
        self.empty_since = None;
    }

    fn update_member(member: &mut Member, req: JoinRequest, reply: JoinReply) {
        member.protocols = req.protocols;
        member.session_timeout = req.session_timeout;
        member.rebalance_timeout = req.rebalance_timeout;
        member.client_id = req.client_id;
        member.client_host = req.client_host;
        if let Some(old) = member.join_waiter.replace(reply) {
            // A duplicate join from the same member: the older request is answered as Kafka
            // does when it is superseded.
            let _ = old.send(JoinResult::error(ResponseError::RebalanceInProgress, &member.id));
        }
    }

    /// Starts (or keeps) a rebalance: every member must rejoin before the deadline.
    fn prepare_rebalance(&mut self, limits: &GroupLimits, now: Instant) {
        // Followers waiting for an assignment of the abandoned generation must rejoin.
        for m in self.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(ResponseError::RebalanceInProgress));
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        let delay = limits.initial_rebalance_delay.min(timeout);
        match self.state {
            GroupState::PreparingRebalance => {
                // Kafka's InitialDelayedJoin: each member joining a forming group extends the
                // wait by the delay, up to the rebalance timeout.
                if let (Some(until), Some(started)) = (self.initial_delay_until, self.rebalance_started) {
                    let extended = (now + delay).min(started + timeout).max(until);
                    self.initial_delay_until = Some(extended);
                    self.rebalance_deadline = Some(extended);
                }
            }
            state => {
                self.state = GroupState::PreparingRebalance;
                self.rebalance_started = Some(now);
                // A group forming from empty waits a moment for more members, so that a fleet
                // starting together causes one rebalance, not many.
                if state == GroupState::Empty && !delay.is_zero() {
                    self.initial_delay_until = Some(now + delay);
                    self.rebalance_deadline = Some(now + delay);
                } else {
                    self.rebalance_deadline = Some(now + timeout);
                }
            }
        }
    }

    fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.join_waiter.is_some())
    }

    fn maybe_complete_join(&mut self, now: Instant) {
        if self.state == GroupState::PreparingRebalance && self.all_joined() && self.initial_delay_until.is_none() {
            self.complete_join(now);
        }
    }

    /// Ends the join phase: members that did not rejoin leave, the generation advances, the
    /// protocol is chosen, and every waiting member gets its answer.
    fn complete_join(&mut self, now: Instant) {
        self.rebalance_deadline = None;
        self.rebalance_started = None;
        self.initial_delay_until = None;
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id);
        }
        if self.members.is_empty() {
            self.generation += 1;
            self.state = GroupState::Empty;
            // Kafka's initNextGeneration keeps the protocol type of a group that went empty:
            // ListGroups still reports it as a consumer group, not a simple one.
            self.protocol = None;
            self.leader = None;
            self.empty_since = Some(now);
            return;
        }
        self.generation += 1;
        self.protocol = self.select_protocol();
        if self.leader.as_ref().is_none_or(|l| !self.members.contains_key(l)) {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result_for(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.session_deadline = now + m.session_timeout;
                if let Some(w) = m.join_waiter.take() {
                    let _ = w.send(result);
                }
            }
        }
    }

    /// Kafka's vote: each member votes for the first protocol in its list that all support.
    fn select_protocol(&self) -> Option<String> {
        let candidates: Vec<&String> = self
            .members
            .values()
            .next()?
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.members.values().all(|m| m.supports(n)))
            .collect();
        let mut votes: Vec<(usize, &String)> = candidates.iter().map(|c| (0, *c)).collect();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(&n))
                && let Some(v) = votes.iter_mut().find(|(_, c)| *c == name)
            {
                v.0 += 1;
            }
        }
        // Highest count wins; ties go to the earlier candidate (stable).
        let best = votes.iter().map(|(n, _)| *n).max()?;
        votes.iter().find(|(n, _)| *n == best).map(|(_, c)| (*c).clone())
    }

    fn join_result_for(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members
                .values()
                .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol)))
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: 0,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader,
            member_id: member_id.to_string(),
            members,
            skip_assignment: false,
        }
    }

    fn remove_member(&mut self, id: &str) {
        if let Some(mut m) = self.members.remove(id) {
            if let Some(instance) = &m.instance_id
                && self.static_members.get(instance).map(String::as_str) == Some(id)
            {
                self.static_members.remove(instance);
            }
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinResult::error(ResponseError::UnknownMemberId, id));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(ResponseError::UnknownMemberId));
            }
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// Checks a member's identity for sync, heartbeat, leave and commit (Kafka's
    /// `ClassicGroup.validateMember`): an instance id must be the group's and name this member
    /// (an instance id the group does not know is UNKNOWN_MEMBER_ID, one held by another
    /// member FENCED_INSTANCE_ID), then the member id must be in the group.
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                None => return Err(ResponseError::UnknownMemberId),
                Some(current) if current != member_id => return Err(ResponseError::FencedInstanceId),
                Some(_) => {}
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        Ok(())
    }

    /// SyncGroup's checks, in the order of Kafka's `GroupMetadataManager.classicGroupSync` and
    /// `validateSyncGroup`: an Empty group knows no member, a Dead one sends the member to find
    /// the coordinator again; then the member, its generation, and last the protocol type and
    /// name (v5+), which only disagree when both the request and the group have one.
    pub fn validate_sync(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
    ) -> Result<(), ResponseError> {
        match self.state {
            GroupState::Empty => return Err(ResponseError::UnknownMemberId),
            GroupState::Dead => return Err(ResponseError::CoordinatorNotAvailable),
            _ => {}
        }
        self.validate_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        let differs = |asked: Option<&str>, ours: Option<&str>| asked.zip(ours).is_some_and(|(a, o)| a != o);
        if differs(protocol_type, self.protocol_type.as_deref()) || differs(protocol, self.protocol.as_deref()) {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        Ok(())
    }

    /// True when this SyncGroup passes the checks and is the leader's of the generation being
    /// completed: the one whose assignment would be stored.
    pub fn sync_completes(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
    ) -> bool {
        self.state == GroupState::CompletingRebalance
            && self.leader.as_deref() == Some(member_id)
            && self
                .validate_sync(member_id, instance_id, generation, protocol_type, protocol)
                .is_ok()
    }

    /// SyncGroup. The leader's call completes the rebalance for everyone.
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
        reply: SyncReply,
    ) -> bool {
        if let Err(e) = self.validate_sync(member_id, instance_id, generation, protocol_type, protocol) {
            let _ = reply.send(SyncResult::error(e));
            return false;
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.session_deadline = now + m.session_timeout;
        }
        match self.state {
            GroupState::PreparingRebalance => {
                let _ = reply.send(SyncResult::error(ResponseError::RebalanceInProgress));
                false
            }
            GroupState::Stable => {
                let _ = reply.send(self.sync_result_for(member_id));
                false
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(member_id) {
                    m.sync_waiter = Some(reply);
                }
                if self.leader.as_deref() != Some(member_id) {
                    return false;
                }
                let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                for m in self.members.values_mut() {
                    // Members the leader left out get an empty assignment, as in Kafka.
                    m.assignment = given.remove(&m.id).unwrap_or_default();
                }
                self.state = GroupState::Stable;
                let ids: Vec<String> = self.members.keys().cloned().collect();
                for id in ids {
                    let result = self.sync_result_for(&id);
                    if let Some(w) = self.members.get_mut(&id).and_then(|m| m.sync_waiter.take()) {
                        let _ = w.send(result);
                    }
                }
                true
            }
            // validate_sync answered these.
            GroupState::Empty => {
                let _ = reply.send(SyncResult::error(ResponseError::UnknownMemberId));
                false
            }
            GroupState::Dead => {
                let _ = reply.send(SyncResult::error(ResponseError::CoordinatorNotAvailable));
                false
            }
        }
    }

    /// The leader's assignment cannot be stored (too large for `__consumer_offsets`): every
    /// member waiting for it gets `error` and the group rebalances, as Kafka does when storing
    /// the group fails.
    pub fn abort_sync(
        &mut self,
        leader: &str,
        error: ResponseError,
        limits: &GroupLimits,
        now: Instant,
        reply: SyncReply,
    ) {
        if self.state != GroupState::CompletingRebalance || self.leader.as_deref() != Some(leader) {
            let _ = reply.send(SyncResult::error(error));
            return;
        }
        let _ = reply.send(SyncResult::error(error));
        for m in self.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(error));
            }
        }
        self.prepare_rebalance(limits, now);
    }

    fn sync_result_for(&self, member_id: &str) -> SyncResult {
        SyncResult {
            error: 0,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    /// Heartbeat: keeps the session alive and tells the member when to rejoin. The checks go in
    /// the order of Kafka's `GroupMetadataManager.classicGroupHeartbeatToClassicGroup`: a Dead
    /// group, the member, its generation, then the state; so a member of an old generation
    /// learns ILLEGAL_GENERATION even while a rebalance is under way. A member that has its
    /// JoinGroup answer may heartbeat in CompletingRebalance, before its SyncGroup.
    pub fn heartbeat(&mut self, member_id: &str, instance_id: Option<&str>, generation: i32, now: Instant) -> i16 {
        if self.state == GroupState::Dead {
            return ResponseError::CoordinatorNotAvailable.code();
        }
        if let Err(e) = self.validate_member(member_id, instance_id) {
            return e.code();
        }
        if generation != self.generation {
            return ResponseError::IllegalGeneration.code();
        }
        // Known member, so the group is not Empty; Kafka still answers that state so.
        if self.state == GroupState::Empty {
            return ResponseError::UnknownMemberId.code();
        }
        self.keep_session(member_id, now);
        match self.state {
            GroupState::PreparingRebalance => ResponseError::RebalanceInProgress.code(),
            _ => 0,
        }
    }

    fn keep_session(&mut self, member_id: &str, now: Instant) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.session_deadline = now + m.session_timeout;
        }
    }

    /// An accepted OffsetCommit counts as a heartbeat while the group is Stable or
    /// PreparingRebalance (Kafka's `OffsetMetadataManager.commitOffset`); TxnOffsetCommit does
    /// not.
    pub fn commit_keeps_session(&mut self, member_id: &str, now: Instant) {
        if matches!(self.state, GroupState::Stable | GroupState::PreparingRebalance) {
            self.keep_session(member_id, now);
        }
    }

    /// LeaveGroup for one member (by id, or by instance id with an empty member id).
    pub fn leave(&mut self, member_id: &str, instance_id: Option<&str>, limits: &GroupLimits, now: Instant) -> i16 {
        let id = match (member_id.is_empty(), instance_id) {
            (true, Some(instance)) => match self.static_members.get(instance) {
                Some(id) => id.clone(),
                None => return ResponseError::UnknownMemberId.code(),
            },
            // Kafka removes a member still pending in the KIP-394 round trip (it has its id
            // but has not rejoined with it) without error.
            (false, None) if self.pending_members.remove(member_id).is_some() => return 0,
            _ => {
                if let Err(e) = self.validate_member(member_id, instance_id) {
                    return e.code();
                }
                member_id.to_string()
            }
        };
        if self.pending_members.remove(&id).is_some() {
            return 0;
        }
        self.remove_member(&id);
        self.after_member_loss(limits, now);
        0
    }

    fn after_member_loss(&mut self, limits: &GroupLimits, now: Instant) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if self.members.is_empty() {
                    self.prepare_rebalance(limits, now);
                    self.complete_join(now);
                } else {
                    self.prepare_rebalance(limits, now);
                }
            }
            GroupState::PreparingRebalance => {
                if self.members.is_empty() {
                    self.complete_join(now);
                } else {
                    self.maybe_complete_join(now);
                }
            }
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Applies every deadline that has passed: expired sessions leave, an overdue join phase
    /// completes with the members that rejoined. Returns true when the group changed.
    pub fn expire(&mut self, limits: &GroupLimits, now: Instant) -> bool {
        let mut changed = false;
        let before = self.pending_members.len();
        self.pending_members.retain(|_, deadline| *deadline > now);
        changed |= before != self.pending_members.len();
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none() && m.session_deadline <= now)
            .map(|m| m.id.clone())
            .collect();
        for id in &expired {
            tracing::info!(group = %self.id, member = %id, "session timed out; removing member");
            self.remove_member(id);
        }
        if !expired.is_empty() {
            changed = true;
            self.after_member_loss(limits, now);
        }
        if self.state == GroupState::PreparingRebalance {
            if self.rebalance_deadline.is_some_and(|d| d <= now) {
                self.complete_join(now);
                changed = true;
            } else if changed {
                self.maybe_complete_join(now);
            }
        }
        changed
    }

    /// Marks the group deleted; every waiter is told to find the coordinator again.
    pub fn kill(&mut self) {
        self.end(ResponseError::CoordinatorNotAvailable);
    }

    /// The group's partition is no longer loaded here (Kafka's `onGroupUnloaded`): Dead, and
    /// every member waiting in JoinGroup or SyncGroup gets NOT_COORDINATOR, so it looks up
    /// the new coordinator, which has the group from `__consumer_offsets`.
    pub fn unload(&mut self) {
        self.end(ResponseError::NotCoordinator);
    }

    fn end(&mut self, error: ResponseError) {
        for m in self.members.values_mut() {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinResult::error(error, &m.id));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(error));
            }
        }
        self.members.clear();
        self.pending_members.clear();
        self.rebalance_deadline = None;
        self.state = GroupState::Dead;
    }

    /// Checks an OffsetCommit (or, `transactional`, a TxnOffsetCommit) in the order of Kafka's
    /// `ClassicGroup.validateOffsetCommit` (4.x; the API version plays no part): a Dead group;
    /// a commit without generation (-1) to an Empty group, accepted whatever member id it
    /// names; then the member and its generation whenever the commit names either; only last
    /// the rebalance state. So a member that commits with its old generation while its own
    /// rejoin is under way learns ILLEGAL_GENERATION (its offsets belong to a generation that
    /// is gone), not REBALANCE_IN_PROGRESS (the same commit will do after the rebalance):
    /// clients act differently on the two. TxnOffsetCommit v0-2 carry no member at all, so a
    /// transactional commit naming none is accepted, and transactions ignore the state.
    pub fn validate_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
    ) -> Result<(), ResponseError> {
        if self.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        // The admin client or a consumer that assigns itself partitions (no group membership).
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation != self.generation {
                return Err(ResponseError::IllegalGeneration);
            }
        } else if !transactional {
            // Naming no member, a plain commit is only for a group without members.
            return Err(ResponseError::UnknownMemberId);
        }
        // The member has its JoinGroup answer for this generation but not yet its assignment.
        if !transactional && self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// Topics the members subscribed to (consumer protocol), for OffsetDelete.
    pub fn subscribed_topics(&self) -> Option<std::collections::HashSet<String>> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol.as_deref()?;
        let mut topics = std::collections::HashSet::new();
        for m in self.members.values() {
            let mut meta = m.metadata(protocol);
            if meta.len() < 2 {
                continue;
            }
            let version = i16::from_be_bytes([meta[0], meta[1]]);
            let _ = bytes::Buf::get_i16(&mut meta);
            if let Ok(sub) = ConsumerProtocolSubscription::decode(&mut meta, version.clamp(0, 3)) {
                topics.extend(sub.topics.iter().map(|t| t.to_string()));
            }
        }
        Some(topics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> GroupLimits {
        GroupLimits {
            min_session_timeout: Duration::from_millis(100),
            max_session_timeout: Duration::from_secs(600),
            initial_rebalance_delay: Duration::ZERO,
            max_size: 100,
        }
    }

    fn join_req(member_id: &str, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            member_id: member_id.to_string(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
                .collect(),
            require_known_member_id: true,
        }
    }

    fn join(g: &mut Group, req: JoinRequest, now: Instant) -> oneshot::Receiver<JoinResult> {
        let (tx, rx) = oneshot::channel();
        g.join(req, &limits(), now, tx);
        rx
    }

    /// Joins a new dynamic member through the KIP-394 round trip; returns its id and the
    /// receiver of its real join answer.
    fn join_new(g: &mut Group, protocols: &[&str], now: Instant) -> (String, oneshot::Receiver<JoinResult>) {
        let mut rx = join(g, join_req("", protocols), now);
        let first = rx.try_recv().unwrap();
        assert_eq!(first.error, ResponseError::MemberIdRequired.code());
        let id = first.member_id.clone();
        (id.clone(), join(g, join_req(&id, protocols), now))
    }

    fn sync(
        g: &mut Group,
        id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
    ) -> oneshot::Receiver<SyncResult> {
        let (tx, rx) = oneshot::channel();
        g.sync(id, None, generation, None, None, assignments, now, tx);
        rx
    }

    #[test]
    fn two_members_join_sync_and_get_their_assignments() {
        // Kafka's classic protocol: JoinGroup → leader assigns in SyncGroup → Stable.
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range", "roundrobin"], now);
        // With no initial delay the first member completes the join phase alone...
        let ja = ra.try_recv().unwrap();
        assert_eq!((ja.error, ja.generation, ja.leader.as_str()), (0, 1, a.as_str()));
        let mut sa = sync(&mut g, &a, 1, vec![(a.clone(), Bytes::from_static(b"A1"))], now);
        assert_eq!(sa.try_recv().unwrap().assignment, Bytes::from_static(b"A1"));
        assert_eq!(g.state, GroupState::Stable);
        // ...and a second member triggers a rebalance that waits for the first to rejoin.
        let (b, mut rb) = join_new(&mut g, &["roundrobin"], now);
        assert!(rb.try_recv().is_err(), "b waits for a");
        assert_eq!(g.heartbeat(&a, None, 1, now), ResponseError::RebalanceInProgress.code());
        let mut ra = join(&mut g, join_req(&a, &["range", "roundrobin"]), now);
        let (ja, jb) = (ra.try_recv().unwrap(), rb.try_recv().unwrap());
        assert_eq!((ja.generation, jb.generation), (2, 2));
        assert_eq!(
            ja.protocol.as_deref(),
            Some("roundrobin"),
            "the only protocol both support"
        );
        assert_eq!(ja.members.len(), 2, "the leader sees every member");
        assert!(jb.members.is_empty());
        let mut sb = sync(&mut g, &b, 2, vec![], now);
        assert!(sb.try_recv().is_err(), "a follower waits for the leader");
        let mut sa = sync(
            &mut g,
            &a,
            2,
            vec![(a.clone(), "A".into()), (b.clone(), "B".into())],
            now,
        );
        assert_eq!(sa.try_recv().unwrap().assignment, Bytes::from_static(b"A"));
        assert_eq!(sb.try_recv().unwrap().assignment, Bytes::from_static(b"B"));
        assert_eq!(g.heartbeat(&b, None, 2, now), 0);
        assert_eq!(g.heartbeat(&b, None, 1, now), ResponseError::IllegalGeneration.code());
        assert_eq!(
            g.heartbeat("nobody", None, 2, now),
            ResponseError::UnknownMemberId.code()
        );
    }

    #[test]
    fn a_member_pending_in_the_join_round_trip_may_leave() {
        // Kafka: LeaveGroup removes a member that has its id (MEMBER_ID_REQUIRED) but has not
        // rejoined with it yet, without error; an id never handed out is UNKNOWN_MEMBER_ID.
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let mut rx = join(&mut g, join_req("", &["range"]), now);
        let pending = rx.try_recv().unwrap().member_id;
        assert_eq!(g.leave(&pending, None, &limits(), now), 0);
        assert!(g.is_empty(), "nothing left pending");
        assert_eq!(
            g.leave("never-issued", None, &limits(), now),
            ResponseError::UnknownMemberId.code()
        );
    }

    #[test]
    fn a_silent_member_expires_after_its_session_timeout() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 1, vec![], now);
        let (b, _rb) = join_new(&mut g, &["range"], now);
        let mut ra = join(&mut g, join_req(&a, &["range"]), now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 2, vec![], now);
        // b never syncs nor heartbeats; a keeps heartbeating.
        let later = now + Duration::from_secs(8);
        assert_eq!(g.heartbeat(&a, None, 2, later), 0);
        assert!(!g.expire(&limits(), later));
        let expiry = now + Duration::from_secs(11);
        assert!(g.expire(&limits(), expiry));
        assert!(!g.members.contains_key(&b));
        assert_eq!(g.state, GroupState::PreparingRebalance, "a must rejoin");
        let mut ra = join(&mut g, join_req(&a, &["range"]), expiry);
        assert_eq!(ra.try_recv().unwrap().generation, 3);
    }

    #[test]
    fn a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_deadline() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 1, vec![], now);
        let (_b, mut rb) = join_new(&mut g, &["range"], now);
        // a heartbeats (so its session lives) but never rejoins.
        assert!(g.next_deadline().unwrap() <= now + Duration::from_secs(30));
        let deadline = now + Duration::from_secs(30);
        assert_eq!(
            g.heartbeat(&a, None, 1, deadline - Duration::from_secs(1)),
            ResponseError::RebalanceInProgress.code()
        );
        g.expire(&limits(), deadline);
        let jb = rb.try_recv().unwrap();
        assert_eq!((jb.generation, jb.members.len()), (2, 1), "b leads alone");
        assert!(!g.members.contains_key(&a));
    }

    #[test]
    fn static_member_rejoining_a_stable_group_keeps_its_assignment_without_rebalance() {
        // KIP-345.
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let mut req = join_req("", &["range"]);
        req.instance_id = Some("i-1".into());
        let mut r = join(&mut g, req.clone(), now);
        let j = r.try_recv().unwrap();
        assert_eq!(j.error, 0, "static members skip MEMBER_ID_REQUIRED");
        sync(&mut g, &j.member_id, 1, vec![(j.member_id.clone(), "P0".into())], now);
        // The process restarts: same instance id, no member id.
        let mut r2 = join(&mut g, req.clone(), now);
        let j2 = r2.try_recv().unwrap();
        assert_eq!((j2.error, j2.generation), (0, 1), "same generation: no rebalance");
        assert_ne!(j2.member_id, j.member_id);
        assert!(j2.skip_assignment, "the leader must not reassign (KIP-814)");
        assert_eq!(g.state, GroupState::Stable);
        let mut s = sync(&mut g, &j2.member_id, 1, vec![], now);
        assert_eq!(s.try_recv().unwrap().assignment, Bytes::from_static(b"P0"));
        // The old incarnation is fenced.
        assert_eq!(
            g.heartbeat(&j.member_id, Some("i-1"), 1, now),
            ResponseError::FencedInstanceId.code()
        );
    }

    #[test]
    fn inconsistent_protocols_and_bad_timeouts_are_refused() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (_a, _ra) = join_new(&mut g, &["range"], now);
        let mut r = join(&mut g, join_req("", &["sticky"]), now);
        assert_eq!(
            r.try_recv().unwrap().error,
            ResponseError::InconsistentGroupProtocol.code()
        );
        let mut r = join(&mut g, join_req("", &[]), now);
        assert_eq!(
            r.try_recv().unwrap().error,
            ResponseError::InconsistentGroupProtocol.code()
        );
        let mut bad = join_req("", &["range"]);
        bad.session_timeout = Duration::from_millis(1);
        let mut r = join(&mut g, bad, now);
        assert_eq!(r.try_recv().unwrap().error, ResponseError::InvalidSessionTimeout.code());
        let mut r = join(&mut g, join_req("made-up", &["range"]), now);
        assert_eq!(r.try_recv().unwrap().error, ResponseError::UnknownMemberId.code());
    }

    #[test]
    fn leaving_members_trigger_a_rebalance_and_the_last_one_empties_the_group() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 1, vec![], now);
        assert_eq!(g.leave(&a, None, &limits(), now), 0);
        assert_eq!(g.state, GroupState::Empty);
        assert_eq!(
            g.protocol_type.as_deref(),
            Some("consumer"),
            "still a consumer group, not a simple one"
        );
        assert!(
            g.validate_commit("", None, -1, false).is_ok(),
            "standalone commits on an empty group"
        );
        assert_eq!(g.leave(&a, None, &limits(), now), ResponseError::UnknownMemberId.code());
    }

    #[test]
    fn commits_are_checked_against_generation_and_member() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        assert_eq!(
            g.validate_commit(&a, None, 1, false),
            Err(ResponseError::RebalanceInProgress)
        );
        sync(&mut g, &a, 1, vec![], now);
        assert_eq!(g.validate_commit(&a, None, 1, false), Ok(()));
        assert_eq!(
            g.validate_commit(&a, None, 0, false),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            g.validate_commit("x", None, 1, false),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            g.validate_commit("", None, -1, false),
            Err(ResponseError::UnknownMemberId)
        );
    }

    /// A single member, Stable at generation 1, that rejoined: generation 2, CompletingRebalance.
    fn rejoined_alone(now: Instant) -> (Group, String) {
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 1, vec![], now);
        let mut ra = join(&mut g, join_req(&a, &["range"]), now);
        assert_eq!(
            ra.try_recv().unwrap().generation,
            2,
            "the leader's rejoin rebalances at once"
        );
        assert_eq!(g.state, GroupState::CompletingRebalance);
        (g, a)
    }

    #[test]
    fn a_commit_of_the_old_generation_during_the_members_own_rejoin_is_illegal_generation() {
        // Kafka's ClassicGroup.validateOffsetCommit: member and generation before the state.
        let (g, a) = rejoined_alone(Instant::now());
        assert_eq!(
            g.validate_commit(&a, None, 1, false),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            g.validate_commit(&a, None, 2, false),
            Err(ResponseError::RebalanceInProgress),
            "the new generation, not yet synced"
        );
        assert_eq!(
            g.validate_commit("x", None, 1, false),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            g.validate_commit("", None, -1, false),
            Err(ResponseError::UnknownMemberId),
            "no member named, and the group has one"
        );
        // Transactional commits (TxnOffsetCommit) check the member but not the state, and
        // accept a commit naming no member (v0-2 cannot name one).
        assert_eq!(g.validate_commit(&a, None, 2, true), Ok(()));
        assert_eq!(
            g.validate_commit(&a, None, 1, true),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            g.validate_commit("x", None, 2, true),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(g.validate_commit("", None, -1, true), Ok(()));
        assert_eq!(
            g.validate_commit("", None, 2, true),
            Err(ResponseError::UnknownMemberId),
            "a generation names a member"
        );
    }

    #[test]
    fn commits_check_the_instance_id_first_then_the_member_then_the_generation() {
        // Kafka's ClassicGroup.validateMember (KIP-345).
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let mut req = join_req("", &["range"]);
        req.instance_id = Some("i-1".into());
        let mut r = join(&mut g, req, now);
        let id = r.try_recv().unwrap().member_id;
        sync(&mut g, &id, 1, vec![], now);
        for transactional in [false, true] {
            assert_eq!(
                g.validate_commit("other", Some("i-1"), 7, transactional),
                Err(ResponseError::FencedInstanceId)
            );
            assert_eq!(
                g.validate_commit(&id, Some("i-2"), 7, transactional),
                Err(ResponseError::UnknownMemberId),
                "an instance id the group does not know"
            );
            assert_eq!(
                g.validate_commit(&id, Some("i-1"), 7, transactional),
                Err(ResponseError::IllegalGeneration)
            );
            assert_eq!(g.validate_commit(&id, Some("i-1"), 1, transactional), Ok(()));
            assert_eq!(g.validate_commit(&id, None, 1, transactional), Ok(()));
        }
    }

    #[test]
    fn an_empty_group_takes_commits_without_generation_and_a_dead_one_none() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        for transactional in [false, true] {
            assert_eq!(
                g.validate_commit("ghost", None, -1, transactional),
                Ok(()),
                "generation -1 on an Empty group, whatever the member id"
            );
            assert_eq!(
                g.validate_commit("ghost", None, 0, transactional),
                Err(ResponseError::UnknownMemberId)
            );
        }
        g.kill();
        for transactional in [false, true] {
            assert_eq!(
                g.validate_commit("", None, -1, transactional),
                Err(ResponseError::CoordinatorNotAvailable)
            );
        }
        assert_eq!(
            g.heartbeat("", None, 0, now),
            ResponseError::CoordinatorNotAvailable.code()
        );
        let mut s = sync(&mut g, "", 0, vec![], now);
        assert_eq!(
            s.try_recv().unwrap().error,
            ResponseError::CoordinatorNotAvailable.code()
        );
    }

    #[test]
    fn heartbeats_check_the_member_and_generation_before_the_state() {
        // Kafka's GroupMetadataManager.classicGroupHeartbeatToClassicGroup.
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 1, vec![], now);
        let (_b, _rb) = join_new(&mut g, &["range"], now);
        assert_eq!(g.state, GroupState::PreparingRebalance, "b waits for a");
        assert_eq!(g.heartbeat(&a, None, 0, now), ResponseError::IllegalGeneration.code());
        assert_eq!(g.heartbeat("x", None, 1, now), ResponseError::UnknownMemberId.code());
        assert_eq!(
            g.heartbeat(&a, Some("i-1"), 1, now),
            ResponseError::UnknownMemberId.code(),
            "an instance id the group does not know"
        );
        assert_eq!(g.heartbeat(&a, None, 1, now), ResponseError::RebalanceInProgress.code());
        let (mut g, a) = rejoined_alone(now);
        assert_eq!(g.heartbeat(&a, None, 1, now), ResponseError::IllegalGeneration.code());
        assert_eq!(g.heartbeat(&a, None, 2, now), 0, "CompletingRebalance: before its sync");
    }

    #[test]
    fn sync_checks_the_member_then_the_generation_then_the_protocol() {
        // Kafka's GroupMetadataManager.classicGroupSync and validateSyncGroup.
        let now = Instant::now();
        let g = Group::new("g", now);
        assert_eq!(
            g.validate_sync("x", None, 9, Some("other"), None),
            Err(ResponseError::UnknownMemberId),
            "an Empty group knows no member"
        );
        let (mut g, a) = rejoined_alone(now);
        assert_eq!(
            g.validate_sync("x", None, 9, Some("other"), None),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            g.validate_sync(&a, None, 1, Some("other"), Some("other")),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            g.validate_sync(&a, None, 2, Some("other"), None),
            Err(ResponseError::InconsistentGroupProtocol)
        );
        assert_eq!(
            g.validate_sync(&a, None, 2, Some("consumer"), Some("roundrobin")),
            Err(ResponseError::InconsistentGroupProtocol)
        );
        assert_eq!(g.validate_sync(&a, None, 2, Some("consumer"), Some("range")), Ok(()));
        assert_eq!(g.validate_sync(&a, None, 2, None, None), Ok(()), "v0-4 name neither");
        assert!(
            g.sync_completes(&a, None, 2, None, None),
            "the leader completes the generation"
        );
        assert!(!g.sync_completes(&a, None, 1, None, None));
        let mut s = sync(&mut g, &a, 2, vec![(a.clone(), "A".into())], now);
        assert_eq!(s.try_recv().unwrap().assignment, Bytes::from_static(b"A"));
        assert!(
            !g.sync_completes(&a, None, 2, None, None),
            "Stable: nothing to complete"
        );
    }

    #[test]
    fn an_accepted_commit_keeps_the_session_alive() {
        // Kafka's OffsetMetadataManager.commitOffset reschedules the member's heartbeat.
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 1, vec![], now);
        g.commit_keeps_session(&a, now + Duration::from_secs(8));
        assert!(
            !g.expire(&limits(), now + Duration::from_secs(11)),
            "a commit at 8 s kept it"
        );
        assert!(g.expire(&limits(), now + Duration::from_secs(19)));
        assert!(!g.members.contains_key(&a));
    }

    #[test]
    fn restore_brings_back_a_stable_group() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut ra) = join_new(&mut g, &["range"], now);
        ra.try_recv().unwrap();
        sync(&mut g, &a, 1, vec![(a.clone(), "X".into())], now);
        let restored = Group::restore("g", g.snapshot(), now);
        assert_eq!(restored.state, GroupState::Stable);
        assert_eq!(restored.generation, 1);
        assert_eq!(restored.members[&a].assignment, Bytes::from_static(b"X"));
        assert_eq!(restored.snapshot(), g.snapshot());
    }
}
