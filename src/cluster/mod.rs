//! Cluster metadata: topics, topic ids, partitions, configs. Every change goes through the
//! `Controller`, which appends a record to the metadata log (fsynced) and then publishes a new
//! immutable `MetadataImage`. On a single node the metadata log is a local file; replaying it at
//! start-up rebuilds the image. In a cluster the same records go through a raft quorum
//! (`raft::MetadataQuorum`, not wired in yet).

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod frame;
mod metadata_log;
pub mod raft;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use uuid::Uuid;

use crate::error::{Error, Result};
use metadata_log::MetadataLog;

/// One metadata change, as stored in the metadata log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// A topic and its partitions, all led by `leader` at `leader_epoch`.
    CreateTopic {
        name: String,
        id: Uuid,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        leader: i32,
        leader_epoch: i32,
    },
    DeleteTopic {
        id: Uuid,
    },
    /// The topic grows to `partitions` partitions.
    CreatePartitions {
        id: Uuid,
        partitions: i32,
    },
    /// The topic's config overrides become exactly `configs`.
    SetTopicConfigs {
        id: Uuid,
        configs: BTreeMap<String, String>,
    },
    /// Producer ids below `next_producer_id` are handed out (Kafka's `ProducerIdsRecord`): a
    /// broker takes a block of ids at a time, so ids are never reissued, even after a restart
    /// that loses the unused rest of a block.
    ProducerIds {
        next_producer_id: i64,
    },
    /// A consumer group's config overrides become exactly `configs` (Kafka's ConfigRecord on a
    /// GROUP resource); empty removes them.
    SetGroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
    },
    /// Dynamic broker configs (KIP-226, Kafka's ConfigRecord on a BROKER resource) become
    /// exactly `configs`: the cluster-wide default layer when `node` is None, else that
    /// broker's own layer; empty removes them.
    SetBrokerConfigs {
        node: Option<i32>,
        configs: BTreeMap<String, String>,
    },
}

/// A set of dynamic broker configs (one level: the cluster default or one broker's).
pub type ConfigLayer = Arc<BTreeMap<String, String>>;

/// A topic as the metadata image holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicInfo {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// An immutable snapshot of cluster metadata, read by every handler and swapped on change.
/// The maps are persistent (`imbl`): the next image shares all but the changed entries with
/// this one, so a change costs the same with 10 topics or 10,000 (no whole-image clone).
#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    pub cluster_id: String,
    pub node_id: i32,
    /// How many metadata records this image holds: images are published in increasing
    /// order of it, and the replica manager reports how far it has applied by it.
    pub offset: i64,
    pub topics: OrdMap<String, Arc<TopicInfo>>,
    pub topic_ids: imbl::HashMap<Uuid, String>,
    /// Topic names with '.' read as '_' (Kafka's collision rule), to the name that holds it.
    collision_names: imbl::HashMap<String, String>,
    /// The first producer id no block has taken yet.
    pub next_producer_id: i64,
    /// Consumer groups' config overrides (KIP-848 group configs), by group id.
    pub group_configs: OrdMap<String, Arc<BTreeMap<String, String>>>,
    /// Dynamic broker configs: the cluster-wide default layer.
    pub broker_default_configs: ConfigLayer,
    /// Dynamic broker configs: each broker's own layer, by node id.
    pub broker_configs: OrdMap<i32, ConfigLayer>,
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&Arc<TopicInfo>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&Arc<TopicInfo>> {
        self.topic_ids.get(id).and_then(|name| self.topics.get(name))
    }

    /// The dynamic broker config layers that apply to broker `node`: the cluster-wide default
    /// and its own.
    pub fn broker_config_layers(&self, node: i32) -> (ConfigLayer, ConfigLayer) {
        let own = self.broker_configs.get(&node).cloned().unwrap_or_default();
        (self.broker_default_configs.clone(), own)
    }

    /// The records that rebuild this image from an empty one (a raft snapshot): each topic as
    /// it is now (its partitions and configs folded in), the producer id mark, group configs,
    /// then the dynamic broker config layers. The offset is not a record: the snapshot keeps it.
    pub(crate) fn to_records(&self) -> Vec<MetadataRecord> {
        // Destructured so that a new field does not compile until it is carried here too.
        let MetadataImage {
            cluster_id: _,
            node_id: _,
            offset: _,
            topics,
            topic_ids: _,
            collision_names: _,
            next_producer_id,
            group_configs,
            broker_default_configs,
            broker_configs,
        } = self;
        let mut records = Vec::with_capacity(topics.len() + group_configs.len() + broker_configs.len() + 2);
        records.extend(topics.values().map(|topic| MetadataRecord::CreateTopic {
            name: topic.name.clone(),
            id: topic.id,
            partitions: topic.partitions,
            replication_factor: topic.replication_factor,
            configs: topic.configs.clone(),
            leader: topic.leader,
            leader_epoch: topic.leader_epoch,
        }));
        if *next_producer_id != 0 {
            records.push(MetadataRecord::ProducerIds {
                next_producer_id: *next_producer_id,
            });
        }
        records.extend(
            group_configs
                .iter()
                .map(|(group, configs)| MetadataRecord::SetGroupConfigs {
                    group: group.clone(),
                    configs: (**configs).clone(),
                }),
        );
        if !broker_default_configs.is_empty() {
            records.push(MetadataRecord::SetBrokerConfigs {
                node: None,
                configs: (**broker_default_configs).clone(),
            });
        }
        records.extend(
            broker_configs
                .iter()
                .map(|(node, configs)| MetadataRecord::SetBrokerConfigs {
                    node: Some(*node),
                    configs: (**configs).clone(),
                }),
        );
        records
    }

    /// Applies one record; records are validated before they are written, so replay never fails.
    fn apply(&mut self, record: &MetadataRecord) {
        self.offset += 1;
        match record {
            MetadataRecord::CreateTopic {
                name,
                id,
                partitions,
                replication_factor,
                configs,
                leader,
                leader_epoch,
            } => {
                self.topic_ids.insert(*id, name.clone());
                self.collision_names.insert(collision_name(name), name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicInfo {
                        name: name.clone(),
                        id: *id,
                        partitions: *partitions,
                        replication_factor: *replication_factor,
                        configs: configs.clone(),
                        leader: *leader,
                        leader_epoch: *leader_epoch,
                    }),
                );
            }
            MetadataRecord::DeleteTopic { id } => {
                if let Some(name) = self.topic_ids.remove(id) {
                    self.collision_names.remove(&collision_name(&name));
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::SetTopicConfigs { id, configs } => {
                if let Some(name) = self.topic_ids.get(id)
                    && let Some(topic) = self.topics.get_mut(name)
                {
                    Arc::make_mut(topic).configs = configs.clone();
                }
            }
            MetadataRecord::ProducerIds { next_producer_id } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
            MetadataRecord::SetGroupConfigs { group, configs } => {
                if configs.is_empty() {
                    self.group_configs.remove(group);
                } else {
                    self.group_configs.insert(group.clone(), Arc::new(configs.clone()));
                }
            }
            MetadataRecord::SetBrokerConfigs { node: None, configs } => {
                self.broker_default_configs = Arc::new(configs.clone());
            }
            MetadataRecord::SetBrokerConfigs {
                node: Some(node),
                configs,
            } => {
                if configs.is_empty() {
                    self.broker_configs.remove(node);
                } else {
                    self.broker_configs.insert(*node, Arc::new(configs.clone()));
                }
            }
            MetadataRecord::CreatePartitions { id, partitions } => {
                if let Some(name) = self.topic_ids.get(id)
                    && let Some(topic) = self.topics.get_mut(name)
                {
                    Arc::make_mut(topic).partitions = *partitions;
                }
            }
        }
    }
}

/// Kafka's topic name rules (`org.apache.kafka.common.internals.Topic.validate`).
pub fn validate_topic_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "the name is empty"
    } else if name == "." || name == ".." {
        "the name cannot be . or .."
    } else if name.len() > 249 {
        "the name is longer than 249 characters"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        "the name contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    } else {
        return Ok(());
    };
    Err(Error::InvalidTopic {
        name: name.to_string(),
        reason,
    })
}

/// Kafka refuses a topic whose name differs from an existing one only by '.' versus '_',
/// since both map to the same metric names: names are compared with '.' read as '_'.
fn collision_name(name: &str) -> String {
    name.replace('.', "_")
}

/// Owner of all metadata changes.
pub struct Controller {
    node_id: i32,
    log: Mutex<MetadataLog>,
    /// The committed image, published: readers take the current one, the replica manager
    /// subscribes and applies each (ARCHITECTURE.md, "Metadata flow").
    image: watch::Sender<Arc<MetadataImage>>,
    /// This broker's current block of producer ids: the next one to hand out and the block's end.
    producer_ids: Mutex<(i64, i64)>,
}

/// Producer ids taken from the metadata log at a time (Kafka's `ProducerIdsBlock` size).
const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

impl Controller {
    /// Opens the metadata log under `data_dir` and replays it.
    pub fn open(data_dir: &Path, node_id: i32) -> Result<Controller> {
        let (log, records, cluster_id) = MetadataLog::open(&data_dir.join("__cluster_metadata-0"))?;
        let mut image = MetadataImage {
            cluster_id,
            node_id,
            ..Default::default()
        };
        for record in &records {
            image.apply(record);
        }
        Ok(Controller {
            node_id,
            log: Mutex::new(log),
            image: watch::Sender::new(Arc::new(image)),
            producer_ids: Mutex::new((0, 0)),
        })
    }

    /// The current snapshot.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// Every image committed from now on (the current one is marked unseen: the subscriber
    /// sees it first).
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        let mut images = self.image.subscribe();
        images.mark_changed();
        images
    }

    pub fn node_count(&self) -> i32 {
        1
    }

    /// Appends `record` durably, then publishes the image with it applied. The metadata lock
    /// serializes changes, so validation against the current image cannot race.
    fn commit(&self, validate: impl FnOnce(&MetadataImage) -> Result<MetadataRecord>) -> Result<Arc<MetadataImage>> {
        self.commit_with(validate)
    }

    /// `commit` with the caller's error type (a handler's refusal carries its own code).
    fn commit_with<E: From<Error>>(
        &self,
        validate: impl FnOnce(&MetadataImage) -> std::result::Result<MetadataRecord, E>,
    ) -> std::result::Result<Arc<MetadataImage>, E> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.image();
        let record = validate(&current)?;
        log.append(&record)?;
        let mut next = (*current).clone();
        next.apply(&record);
        let next = Arc::new(next);
        self.image.send_replace(next.clone());
        Ok(next)
    }

    /// A producer id never handed out before (InitProducerId), from this broker's block;
    /// a new block is recorded durably in the metadata log before any of its ids is used.
    pub fn allocate_producer_id(&self) -> Result<i64> {
        let mut block = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
        if block.0 >= block.1 {
            let image = self.commit(|image| {
                let next_producer_id = image
                    .next_producer_id
                    .checked_add(PRODUCER_ID_BLOCK_SIZE)
                    .ok_or_else(|| Error::InvalidRequest("producer ids exhausted".into()))?;
                Ok(MetadataRecord::ProducerIds { next_producer_id })
            })?;
            *block = (image.next_producer_id - PRODUCER_ID_BLOCK_SIZE, image.next_producer_id);
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    /// Checks a new topic against the image without creating it (validate_only and the real
    /// create share it).
    pub fn check_new_topic(
        image: &MetadataImage,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        nodes: i32,
    ) -> Result<()> {
        validate_topic_name(name)?;
        if image.topics.contains_key(name) {
            return Err(Error::TopicAlreadyExists(name.to_string()));
        }
        if image
            .collision_names
            .get(&collision_name(name))
            .is_some_and(|other| other != name)
        {
            return Err(Error::InvalidTopic {
                name: name.to_string(),
                reason: "it collides with an existing topic ('.' and '_' are equivalent)",
            });
        }
        if partitions < 1 {
            return Err(Error::InvalidPartitions(partitions));
        }
        if replication_factor < 1 || i32::from(replication_factor) > nodes {
            return Err(Error::InvalidReplicationFactor {
                asked: replication_factor.into(),
                nodes,
            });
        }
        Ok(())
    }

    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<TopicInfo>> {
        let nodes = self.node_count();
        let image = self.commit(|image| {
            Self::check_new_topic(image, name, partitions, replication_factor, nodes)?;
            Ok(MetadataRecord::CreateTopic {
                name: name.to_string(),
                id: Uuid::new_v4(),
                partitions,
                replication_factor,
                configs,
                leader: self.node_id,
                leader_epoch: 0,
            })
        })?;
        image
            .topic(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))
    }

    /// Replaces a topic's config overrides (validated by the caller).
    pub fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<Arc<TopicInfo>> {
        let image = self.commit(|image| {
            let topic = image
                .topic(name)
                .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
            Ok(MetadataRecord::SetTopicConfigs { id: topic.id, configs })
        })?;
        image
            .topic(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))
    }

    /// Replaces a consumer group's config overrides (validated by the caller; the group need
    /// not exist, as in Kafka).
    pub fn set_group_configs(&self, group: &str, configs: BTreeMap<String, String>) -> Result<()> {
        self.commit(|_| {
            Ok(MetadataRecord::SetGroupConfigs {
                group: group.to_string(),
                configs,
            })
        })
        .map(|_| ())
    }

    /// Replaces a layer of dynamic broker configs (`node` None: the cluster-wide default) with
    /// what `update` makes of the current one. `update` runs under the metadata lock, so two
    /// concurrent changes cannot lose one another; it validates, and its error is returned
    /// as is.
    pub fn update_broker_configs<E: From<Error>>(
        &self,
        node: Option<i32>,
        update: impl FnOnce(&MetadataImage, &BTreeMap<String, String>) -> std::result::Result<BTreeMap<String, String>, E>,
    ) -> std::result::Result<Arc<MetadataImage>, E> {
        self.commit_with(|image| {
            let current = match node {
                None => image.broker_default_configs.clone(),
                Some(node) => image.broker_configs.get(&node).cloned().unwrap_or_default(),
            };
            let configs = update(image, &current)?;
            Ok(MetadataRecord::SetBrokerConfigs { node, configs })
        })
    }

    pub fn delete_topic(&self, id: Uuid) -> Result<()> {
        self.commit(|image| {
            image.topic_by_id(&id).ok_or(Error::UnknownTopicId(id))?;
            Ok(MetadataRecord::DeleteTopic { id })
        })
        .map(|_| ())
    }

    /// Grows a topic to `partitions`; `validate_only` checks without changing anything.
    pub fn create_partitions(&self, name: &str, partitions: i32, validate_only: bool) -> Result<Arc<TopicInfo>> {
        let check = |image: &MetadataImage| -> Result<Arc<TopicInfo>> {
            let topic = image
                .topic(name)
                .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
            if partitions <= topic.partitions {
                return Err(Error::InvalidPartitions(partitions));
            }
            Ok(topic.clone())
        };
        if validate_only {
            return check(&self.image());
        }
        let image = self.commit(|image| {
            let topic = check(image)?;
            Ok(MetadataRecord::CreatePartitions {
                id: topic.id,
                partitions,
            })
        })?;
        image
            .topic(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        for bad in ["", ".", "..", "a b", "é", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn metadata_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), 1).unwrap();
        let cluster_id = c.image().cluster_id.clone();
        let t = c
            .create_topic("a", 3, 1, BTreeMap::from([("segment.bytes".into(), "1024".into())]))
            .unwrap();
        c.create_topic("b", 1, 1, BTreeMap::new()).unwrap();
        c.create_partitions("a", 5, false).unwrap();
        c.set_topic_configs(
            "a",
            BTreeMap::from([
                ("segment.bytes".into(), "1024".into()),
                ("retention.ms".into(), "5".into()),
            ]),
        )
        .unwrap();
        let b = c.image().topic("b").unwrap().id;
        c.delete_topic(b).unwrap();
        drop(c);
        let c = Controller::open(dir.path(), 1).unwrap();
        let image = c.image();
        assert_eq!(image.cluster_id, cluster_id);
        let a = image.topic("a").unwrap();
        assert_eq!((a.id, a.partitions), (t.id, 5));
        assert_eq!(a.configs.get("segment.bytes").map(String::as_str), Some("1024"));
        assert_eq!(a.configs.get("retention.ms").map(String::as_str), Some("5"));
        assert!(image.topic("b").is_none());
    }

    #[test]
    fn group_configs_survive_reopen_and_an_empty_set_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), 1).unwrap();
        let configs = BTreeMap::from([("consumer.session.timeout.ms".to_string(), "50000".to_string())]);
        c.set_group_configs("g1", configs.clone()).unwrap();
        c.set_group_configs("g2", configs.clone()).unwrap();
        c.set_group_configs("g2", BTreeMap::new()).unwrap();
        drop(c);
        let c = Controller::open(dir.path(), 1).unwrap();
        let image = c.image();
        assert_eq!(image.group_configs.get("g1").map(|c| (**c).clone()), Some(configs));
        assert!(!image.group_configs.contains_key("g2"));
    }

    #[test]
    fn broker_config_layers_survive_reopen_and_an_empty_set_removes_one() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), 1).unwrap();
        let default = BTreeMap::from([("log.retention.ms".to_string(), "1000".to_string())]);
        let own = BTreeMap::from([("message.max.bytes".to_string(), "2000".to_string())]);
        c.update_broker_configs::<Error>(None, |_, _| Ok(default.clone()))
            .unwrap();
        c.update_broker_configs::<Error>(Some(1), |_, _| Ok(own.clone()))
            .unwrap();
        c.update_broker_configs::<Error>(Some(2), |_, _| Ok(own.clone()))
            .unwrap();
        c.update_broker_configs::<Error>(Some(2), |_, current| {
            assert_eq!(current, &own, "the update sees the stored layer");
            Ok(BTreeMap::new())
        })
        .unwrap();
        let refused = c.update_broker_configs(None, |_, _| Err(Error::InvalidRequest("no".into())));
        assert!(refused.is_err());
        drop(c);
        let c = Controller::open(dir.path(), 1).unwrap();
        let (cluster, node) = c.image().broker_config_layers(1);
        assert_eq!(((*cluster).clone(), (*node).clone()), (default, own));
        assert!(!c.image().broker_configs.contains_key(&2));
    }

    #[test]
    fn producer_ids_are_never_reissued_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), 1).unwrap();
        let first: Vec<i64> = (0..3).map(|_| c.allocate_producer_id().unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2]);
        drop(c);
        let c = Controller::open(dir.path(), 1).unwrap();
        // The rest of the first block is lost, never reused.
        assert_eq!(c.allocate_producer_id().unwrap(), PRODUCER_ID_BLOCK_SIZE);
        for _ in 0..PRODUCER_ID_BLOCK_SIZE {
            c.allocate_producer_id().unwrap();
        }
        assert_eq!(c.allocate_producer_id().unwrap(), 2 * PRODUCER_ID_BLOCK_SIZE + 1);
    }

    #[test]
    fn invalid_creates_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), 1).unwrap();
        c.create_topic("a.b", 1, 1, BTreeMap::new()).unwrap();
        assert_eq!(c.create_topic("a.b", 1, 1, BTreeMap::new()).unwrap_err().code(), 36);
        assert_eq!(c.create_topic("a_b", 1, 1, BTreeMap::new()).unwrap_err().code(), 17);
        assert_eq!(c.create_topic("c", 0, 1, BTreeMap::new()).unwrap_err().code(), 37);
        assert_eq!(c.create_topic("c", 1, 2, BTreeMap::new()).unwrap_err().code(), 38);
        assert_eq!(c.create_partitions("a.b", 1, false).unwrap_err().code(), 37);
    }
}
