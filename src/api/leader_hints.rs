//! KIP-951 leader hints, shared by Produce (v10+) and Fetch (v12+): a partition answered
//! NOT_LEADER_OR_FOLLOWER names its current leader and epoch, and the response lists those
//! leaders' endpoints (Produce v10+, Fetch v16+), so the client goes there without a Metadata
//! round trip. The two responses have their own struct types; this walks the image once and
//! each handler builds its own structs from what it yields.

use std::collections::BTreeSet;

use crate::cluster::{BrokerInfo, Endpoint, MetadataImage, TopicInfo};

pub(crate) struct LeaderHints<'a> {
    image: &'a MetadataImage,
    leaders: BTreeSet<i32>,
}

impl<'a> LeaderHints<'a> {
    pub fn new(image: &'a MetadataImage) -> LeaderHints<'a> {
        LeaderHints {
            image,
            leaders: BTreeSet::new(),
        }
    }

    /// The topic a response names, by id (the versions with topic ids) or by name.
    pub fn topic(&self, by_id: bool, id: &uuid::Uuid, name: &str) -> Option<&'a TopicInfo> {
        if by_id {
            self.image.topic_by_id(id).map(|t| &**t)
        } else {
            self.image.topic(name).map(|t| &**t)
        }
    }

    /// The live leader of `partition` and the topic's leader epoch, remembered for
    /// `endpoints`; None when the leader is not live (the client must ask Metadata).
    pub fn leader_of(&mut self, topic: &TopicInfo, partition: i32) -> Option<(i32, i32)> {
        let leader = topic.leader(partition);
        if !self.image.is_live(leader) {
            return None;
        }
        self.leaders.insert(leader);
        Some((leader, topic.partition_leader_epoch(partition)))
    }

    /// The brokers `leader_of` named, by id, with their endpoints on `listener` (one without
    /// it is left out).
    pub fn endpoints(self, listener: &str) -> impl Iterator<Item = (&'a BrokerInfo, &'a Endpoint)> {
        let brokers = &self.image.brokers;
        self.leaders.into_iter().filter_map(move |id| {
            let broker = brokers.get(&id)?;
            Some((&**broker, broker.endpoint(listener)?))
        })
    }
}
