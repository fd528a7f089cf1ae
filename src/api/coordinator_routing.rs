//! Which broker coordinates a group or a transactional id: the leader of the key's partition of
//! `__consumer_offsets` or `__transaction_state`, the partition being Java's `hashCode` of the
//! key modulo the topic's partition count (Kafka's `GroupCoordinator.partitionFor` and
//! `TransactionStateManager.partitionFor`). FindCoordinator names that broker; every group and
//! transaction API answers NOT_COORDINATOR on any other, before the coordinator sees the
//! request, so a client whose coordinator moved looks it up again. A single node leads every
//! partition, so it coordinates every key.
//!
//! Leading the partition is not enough: its state must be loaded here at the partition's
//! current leader epoch (coordinator/loading.rs). A small partition is loaded by the request
//! that finds it unloaded; until a larger one is loaded by the failover pass, the broker
//! answers NOT_COORDINATOR too, and wakes that pass: the client looks the coordinator up again
//! (FindCoordinator names this broker) and retries after its backoff. Kafka answers
//! COORDINATOR_LOAD_IN_PROGRESS, which older clients do not expect from every API;
//! NOT_COORDINATOR every client handles.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;

use super::Ctx;
use crate::cluster::{BrokerInfo, MetadataImage};
use crate::coordinator::OFFSETS_TOPIC;
use crate::coordinator::records::partition_for;
use crate::coordinator::transactions::TRANSACTION_STATE_TOPIC;

/// NOT_COORDINATOR: the answer of a broker that does not coordinate the key asked about.
pub const NOT_COORDINATOR: i16 = ResponseError::NotCoordinator.code();

/// What a coordinator key names (FindCoordinator's key types 0 and 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A group id: its partition of `__consumer_offsets`.
    Group,
    /// A transactional id: its partition of `__transaction_state`.
    Transaction,
}

impl KeyKind {
    /// The internal topic whose partitions spread this kind of key over the brokers.
    pub fn topic(self) -> &'static str {
        match self {
            KeyKind::Group => OFFSETS_TOPIC,
            KeyKind::Transaction => TRANSACTION_STATE_TOPIC,
        }
    }
}

/// Where the coordinator of a key is, as one metadata image says.
#[derive(Debug, Clone, PartialEq)]
pub enum Coordinator {
    /// The internal topic does not exist yet: the coordinators create it on first use, so the
    /// broker asked serves the key as before clusters existed.
    NotCreated,
    /// The live broker leading the key's partition.
    Broker(Arc<BrokerInfo>),
    /// The key's partition has no leader, or its leader is fenced or not registered (Kafka:
    /// COORDINATOR_NOT_AVAILABLE until a leader is back).
    Unavailable,
}

/// The coordinator of `key` in `image`.
pub fn locate(image: &MetadataImage, kind: KeyKind, key: &str) -> Coordinator {
    let Some(topic) = image.topic(kind.topic()) else {
        return Coordinator::NotCreated;
    };
    // The image's count, not the configured one: the topic keeps the count it was created
    // with if `offsets.topic.num.partitions` changes later, as in Kafka.
    let leader = topic.leader(partition_for(key, topic.partitions));
    match image.brokers.get(&leader) {
        Some(broker) if !broker.fenced => Coordinator::Broker(broker.clone()),
        _ => Coordinator::Unavailable,
    }
}

/// Whether node `node` coordinates `key`. An empty id is the coordinator's to refuse
/// (INVALID_GROUP_ID, INVALID_REQUEST): Kafka validates the id before it checks where the
/// id's coordinator is. A broker that leads the partition but is fenced does not coordinate
/// (Kafka moves leadership off a fenced broker), so it agrees with FindCoordinator.
pub fn is_coordinator(image: &MetadataImage, node: i32, kind: KeyKind, key: &str) -> bool {
    if key.is_empty() {
        return true;
    }
    match locate(image, kind, key) {
        Coordinator::NotCreated => true,
        Coordinator::Broker(broker) => broker.id == node,
        Coordinator::Unavailable => false,
    }
}

/// Whether this broker coordinates `key`, with its state loaded: the check of every group and
/// transaction API. Before the internal topic exists the coordinator creates it on first use
/// (and marks it loaded), so there is nothing to wait for.
pub fn coordinator_here(ctx: &Ctx, kind: KeyKind, key: &str) -> bool {
    let image = ctx.controller.image();
    if !is_coordinator(&image, ctx.config.node_id, kind, key) {
        return false;
    }
    if key.is_empty() || image.topic(kind.topic()).is_none() {
        return true;
    }
    match kind {
        KeyKind::Group => ctx.coordinator.ready(key),
        KeyKind::Transaction => ctx.transactions.ready(key),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use uuid::Uuid;

    use super::*;
    use crate::cluster::TopicInfo;

    fn broker(id: i32, fenced: bool) -> Arc<BrokerInfo> {
        Arc::new(BrokerInfo {
            fenced,
            ..BrokerInfo::new(id, &format!("node{id}"), 9092 + id)
        })
    }

    fn with_topic(image: &mut MetadataImage, name: &str, assignments: Vec<Vec<i32>>) {
        let topic = TopicInfo {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions: i32::try_from(assignments.len()).unwrap(),
            replication_factor: 1,
            configs: BTreeMap::new(),
            leader_epoch: 0,
            assignments,
            registrations: Default::default(),
        };
        image.topics.insert(name.to_string(), Arc::new(topic));
    }

    /// Three brokers (3 fenced); 50 partitions of each internal topic, partition p led by
    /// broker p % 3 + 1, except partition 6, which has no replica.
    fn cluster() -> MetadataImage {
        let mut image = MetadataImage::default();
        for (id, fenced) in [(1, false), (2, false), (3, true)] {
            image.brokers.insert(id, broker(id, fenced));
        }
        let assignments: Vec<Vec<i32>> = (0..50).map(|p| if p == 6 { vec![] } else { vec![p % 3 + 1] }).collect();
        with_topic(&mut image, OFFSETS_TOPIC, assignments.clone());
        with_topic(&mut image, TRANSACTION_STATE_TOPIC, assignments);
        image
    }

    #[test]
    fn the_coordinator_is_the_leader_of_the_keys_partition() {
        // Kafka's GroupCoordinator.partitionFor: "my-group" is partition 12 of 50, so it is
        // led by broker 12 % 3 + 1 = 1; "console-consumer-12345" is 6 (no leader).
        let image = cluster();
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(
            locate(&image, KeyKind::Group, "my-group"),
            Coordinator::Broker(broker(1, false))
        );
        assert!(is_coordinator(&image, 1, KeyKind::Group, "my-group"));
        assert!(!is_coordinator(&image, 2, KeyKind::Group, "my-group"));
        assert_eq!(
            locate(&image, KeyKind::Group, "console-consumer-12345"),
            Coordinator::Unavailable
        );
        assert!(!is_coordinator(&image, 1, KeyKind::Group, "console-consumer-12345"));
    }

    #[test]
    fn transactional_ids_are_placed_by_the_transaction_state_topic() {
        let mut image = cluster();
        // Every partition of __transaction_state on broker 2, of __consumer_offsets on 1.
        with_topic(&mut image, TRANSACTION_STATE_TOPIC, vec![vec![2]; 50]);
        assert_eq!(
            locate(&image, KeyKind::Transaction, "my-group"),
            Coordinator::Broker(broker(2, false))
        );
        assert!(is_coordinator(&image, 2, KeyKind::Transaction, "my-group"));
        assert!(is_coordinator(&image, 1, KeyKind::Group, "my-group"));
    }

    #[test]
    fn a_fenced_leader_coordinates_nothing() {
        let image = cluster();
        // Partition 2 is led by broker 3, which is fenced.
        let key = (0..)
            .map(|i| format!("g{i}"))
            .find(|k| partition_for(k, 50) == 2)
            .unwrap();
        assert_eq!(locate(&image, KeyKind::Group, &key), Coordinator::Unavailable);
        assert!(!is_coordinator(&image, 3, KeyKind::Group, &key), "not even itself");
        assert!(!is_coordinator(&image, 1, KeyKind::Group, &key));
    }

    #[test]
    fn a_leader_that_is_not_registered_is_unavailable() {
        let mut image = cluster();
        with_topic(&mut image, OFFSETS_TOPIC, vec![vec![9]; 50]);
        assert_eq!(locate(&image, KeyKind::Group, "g"), Coordinator::Unavailable);
    }

    #[test]
    fn before_the_topic_exists_every_broker_serves_the_key() {
        let mut image = MetadataImage::default();
        image.brokers.insert(1, broker(1, false));
        image.brokers.insert(2, broker(2, false));
        assert_eq!(locate(&image, KeyKind::Group, "g"), Coordinator::NotCreated);
        assert!(is_coordinator(&image, 2, KeyKind::Group, "g"));
        assert!(is_coordinator(&image, 1, KeyKind::Transaction, "t"));
    }

    #[test]
    fn an_empty_id_is_left_to_the_coordinator_to_refuse() {
        let image = cluster();
        // "" hashes to partition 0, led by broker 1: broker 2 still lets its coordinator answer.
        assert!(is_coordinator(&image, 2, KeyKind::Group, ""));
        assert!(is_coordinator(&image, 2, KeyKind::Transaction, ""));
    }

    #[test]
    fn a_single_node_coordinates_every_key() {
        let mut image = MetadataImage::default();
        image.brokers.insert(1, broker(1, false));
        with_topic(&mut image, OFFSETS_TOPIC, vec![vec![1]; 50]);
        with_topic(&mut image, TRANSACTION_STATE_TOPIC, vec![vec![1]; 50]);
        for i in 0..200 {
            let key = format!("key-{i}");
            assert!(is_coordinator(&image, 1, KeyKind::Group, &key), "{key}");
            assert!(is_coordinator(&image, 1, KeyKind::Transaction, &key), "{key}");
        }
    }
}
