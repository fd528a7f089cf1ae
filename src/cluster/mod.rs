//! Cluster metadata: topics, topic ids, partitions, configs. Every change goes through the
//! `Controller`, which appends a record to the metadata log (fsynced) and then publishes a new
//! immutable `MetadataImage`. On a single node the metadata log is a local file; replaying it at
//! start-up rebuilds the image. In a cluster the same records go through a raft quorum
//! (`raft::MetadataQuorum`, not wired in yet).

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod broker_client;
mod frame;
mod metadata_log;
pub mod peer;
pub mod raft;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use uuid::Uuid;

use crate::acl::{AclBinding, AclFilter, Acls};
use crate::error::{Error, Result};
use crate::sasl::scram::{ScramCredential, ScramMechanism};
use metadata_log::MetadataLog;

/// One metadata change, as stored in the metadata log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// A topic and its partitions at `leader_epoch`. `assignments` lists each partition's
    /// replicas, the first being its leader (Kafka's PartitionRecord); empty means every
    /// partition lives on `leader` (the single-node form, and every record written before
    /// clusters existed).
    CreateTopic {
        name: String,
        id: Uuid,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        leader: i32,
        leader_epoch: i32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
    },
    DeleteTopic {
        id: Uuid,
    },
    /// The topic grows to `partitions` partitions; `assignments` are the new partitions'
    /// replicas (empty: on this node, as `CreateTopic`'s).
    CreatePartitions {
        id: Uuid,
        partitions: i32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
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
    /// A broker joined, or came back (Kafka's RegisterBrokerRecord): its advertised endpoints
    /// and rack. A registered broker is unfenced.
    RegisterBroker {
        id: i32,
        /// The first of `listeners` (a record written before listeners were recorded has only
        /// these: its PLAINTEXT endpoint).
        host: String,
        port: i32,
        rack: Option<String>,
        /// Every advertised listener (Kafka's BrokerEndpoint list).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        listeners: Vec<Endpoint>,
        /// Its log directory is cordoned by its static `cordoned.log.dirs` (KIP-1066; its
        /// dynamic per-broker value, in the image's broker layer, overrides this).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cordoned: bool,
        /// Set at a start after an unclean stop (no clean-shutdown marker: killed, crashed,
        /// power lost): the broker's static `log.flush.interval.messages`. A replica that did
        /// not fsync every message before acknowledging it may have lost what it acknowledged,
        /// so it leaves the eligible leader replicas (Kafka's `handleBrokerUncleanShutdown`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unclean_restart: Option<i64>,
    },
    /// A broker's registration is removed (Kafka's UnregisterBrokerRecord): an UnregisterBroker
    /// request, for a broker taken out of the cluster for good. Like a fenced one, it leaves
    /// every ISR and leads nothing (the quorum leader's next elections); a broker still running
    /// registers again at its next heartbeat, as Kafka's does.
    UnregisterBroker {
        id: i32,
    },
    /// A broker missed its session timeout (fenced: Kafka's FenceBrokerRecord) or heartbeats
    /// again (unfenced). A fenced broker is not listed to clients and gets no new partitions.
    SetBrokerFenced {
        id: i32,
        fenced: bool,
    },
    /// A broker's log directory failed or works again, as its heartbeat reports it (Kafka's
    /// BrokerRegistrationChangeRecord after a heartbeat's `OfflineLogDirs`, KIP-858). Its
    /// replicas are offline: it leads no partition another in-sync replica can lead, leaves
    /// every ISR it does not lead, may not join one (INELIGIBLE_REPLICA) and gets no new
    /// replicas, until it reports the directory working again.
    SetBrokerLogDirOffline {
        id: i32,
        offline: bool,
    },
    /// The cluster's id, agreed once by the quorum's first leader.
    SetClusterId {
        id: String,
    },
    /// SCRAM credentials are set and removed together (Kafka's UserScramCredentialRecord and
    /// RemoveUserScramCredentialRecord, in one batch): an AlterUserScramCredentials request.
    ScramCredentials {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        set: Vec<ScramCredentialEntry>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        remove: Vec<ScramCredentialKey>,
    },
    /// ACL bindings are added and removed (Kafka's AccessControlEntryRecord and
    /// RemoveAccessControlEntryRecord): a CreateAcls or DeleteAcls request. Adding a binding
    /// that exists, or removing one that does not, changes nothing.
    Acls {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        add: Vec<AclBinding>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        remove: Vec<AclBinding>,
    },
    /// Partitions' leaders, leader epochs and in-sync replicas change (Kafka's
    /// PartitionChangeRecord): a leader election by the controller, or an ISR change a leader
    /// asked for (AlterPartition). Each change carries the whole new registration, whose
    /// `partition_epoch` is one above the current one: a change computed against an older
    /// registration is refused (stale) and computed again.
    ChangePartitions {
        changes: Vec<PartitionChange>,
    },
    /// Client quotas are set and removed (Kafka's ClientQuotaRecord, one per key): an
    /// AlterClientQuotas request.
    ClientQuotas {
        changes: Vec<crate::quota::QuotaChange>,
    },
    /// KIP-584 feature levels are finalized (Kafka's FeatureLevelRecord, one per feature): an
    /// UpdateFeatures request. A level of 0 turns the feature off. `epoch` is set only in a
    /// snapshot, which carries the finalized-features epoch the image had; otherwise applying
    /// the record sets it from the record's metadata offset, as Kafka's epoch is its image's
    /// offset.
    SetFeatureLevels {
        levels: BTreeMap<String, i16>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<i64>,
    },
}

/// A user's SCRAM credential for one mechanism: salt, StoredKey and ServerKey in base64, never
/// the password.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScramCredentialEntry {
    pub user: String,
    pub mechanism: String,
    pub salt: String,
    pub stored_key: String,
    pub server_key: String,
    pub iterations: i32,
}

impl ScramCredentialEntry {
    pub fn new(user: &str, mechanism: ScramMechanism, c: &ScramCredential) -> ScramCredentialEntry {
        use base64::Engine;
        let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        ScramCredentialEntry {
            user: user.to_string(),
            mechanism: mechanism.name().to_string(),
            salt: encode(&c.salt),
            stored_key: encode(&c.stored_key),
            server_key: encode(&c.server_key),
            iterations: c.iterations,
        }
    }

    fn credential(&self) -> ScramCredential {
        use base64::Engine;
        let decode = |b: &str| base64::engine::general_purpose::STANDARD.decode(b).unwrap_or_default();
        ScramCredential {
            salt: decode(&self.salt),
            stored_key: decode(&self.stored_key),
            server_key: decode(&self.server_key),
            iterations: self.iterations,
        }
    }
}

/// Which SCRAM credential a removal names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScramCredentialKey {
    pub user: String,
    pub mechanism: String,
}

/// BROKER_ID_NOT_REGISTERED, in the words of Kafka's `ReplicationControlManager`.
fn broker_not_registered(id: i32) -> Error {
    Error::Controller {
        code: kafka_protocol::error::ResponseError::BrokerIdNotRegistered.code(),
        message: format!("Broker ID {id} is not currently registered"),
    }
}

/// One partition's new registration (in `MetadataRecord::ChangePartitions`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartitionChange {
    pub topic: Uuid,
    pub partition: i32,
    /// The partition's new replicas (Kafka's PartitionChangeRecord `replicas`: a reassignment
    /// starting, completing or cancelled); None leaves them as they are. Records written
    /// before reassignments existed have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<i32>>,
    #[serde(flatten)]
    pub registration: PartitionRegistration,
}

/// Who leads a partition and who is in sync with it (Kafka's `PartitionRegistration`, without
/// the replicas, which `TopicInfo::assignments` holds).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// The leader's node id, -1 when no eligible replica is live.
    pub leader: i32,
    /// Moves at every leader change; batches written by a leader carry its epoch.
    pub leader_epoch: i32,
    /// The in-sync replicas: those holding everything below the leader's high watermark.
    pub isr: Vec<i32>,
    /// Moves at every change of this registration.
    pub partition_epoch: i32,
    /// During a reassignment (KIP-455): the replicas of the target that were not replicas
    /// before it; they fetch from the leader and join the ISR like any follower.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// During a reassignment: the replicas that leave once every target replica is in sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
    /// KIP-966's eligible leader replicas: replicas that left the ISR while it was smaller
    /// than `min.insync.replicas`. The high watermark does not move then (the strict min ISR
    /// rule, replica/leader.rs), so each holds everything below it and may lead once the ISR
    /// is empty. Empty while the ISR has `min.insync.replicas` members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elr: Vec<i32>,
    /// KIP-966's last known ELR, as Kafka keeps it by default: the last leader, recorded when
    /// the ISR empties. With ISR and ELR empty it may lead again once back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_known_elr: Vec<i32>,
}

impl PartitionRegistration {
    /// Whether a reassignment of the partition is under way (Kafka's
    /// `isReassignmentInProgress`).
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

/// A partition being reassigned, as ListPartitionReassignments reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub partition: i32,
    /// The union of the target and the replicas before it.
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

/// One advertised listener of a broker: clients that came in on listener `name` are told
/// this address (Kafka's `BrokerEndpoint`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: i32,
}

/// A broker as the metadata image holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerInfo {
    pub id: i32,
    /// Its advertised listeners, at least one.
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
    /// Its log directory failed, as its last heartbeat said (`SetBrokerLogDirOffline`).
    pub log_dir_offline: bool,
    /// Its static `cordoned.log.dirs` cordons its log directory (see
    /// `MetadataImage::is_cordoned` for the value that applies).
    pub cordoned: bool,
}

impl BrokerInfo {
    /// An unfenced broker with no rack and one PLAINTEXT listener.
    pub fn new(id: i32, host: &str, port: i32) -> BrokerInfo {
        BrokerInfo {
            id,
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: host.to_string(),
                port,
            }],
            rack: None,
            fenced: false,
            log_dir_offline: false,
            cordoned: false,
        }
    }

    /// Its endpoint on `listener`, None when it has no such listener (Kafka leaves such a
    /// broker out of the answers given on that listener).
    pub fn endpoint(&self, listener: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == listener)
    }

    /// The record that registers it.
    /// `unclean_restart`: the static `log.flush.interval.messages` at a start after an unclean
    /// stop (`MetadataRecord::RegisterBroker`).
    pub fn registration(&self, unclean_restart: Option<i64>) -> MetadataRecord {
        let first = self.endpoints.first();
        MetadataRecord::RegisterBroker {
            id: self.id,
            host: first.map(|e| e.host.clone()).unwrap_or_default(),
            port: first.map_or(0, |e| e.port),
            rack: self.rack.clone(),
            listeners: self.endpoints.clone(),
            cordoned: self.cordoned,
            unclean_restart,
        }
    }
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
    /// The leader epoch every partition started with.
    pub leader_epoch: i32,
    /// Each partition's replicas, the preferred leader first.
    pub assignments: Vec<Vec<i32>>,
    /// The registrations changed since the topic was created (elections, ISR changes); a
    /// partition not here is led by its first replica at `leader_epoch`, with every replica
    /// in sync.
    pub registrations: OrdMap<i32, Arc<PartitionRegistration>>,
}

impl TopicInfo {
    /// The replicas of `partition` (empty for a partition the topic does not have).
    pub fn replicas(&self, partition: i32) -> &[i32] {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.assignments.get(p))
            .map_or(&[], Vec::as_slice)
    }

    /// The node that leads `partition` (-1: none).
    pub fn leader(&self, partition: i32) -> i32 {
        match self.registrations.get(&partition) {
            Some(registration) => registration.leader,
            None => self.replicas(partition).first().copied().unwrap_or(-1),
        }
    }

    /// The leader epoch of `partition`.
    pub fn partition_leader_epoch(&self, partition: i32) -> i32 {
        self.registrations
            .get(&partition)
            .map_or(self.leader_epoch, |r| r.leader_epoch)
    }

    /// `partition`'s registration: as changed, or as created.
    pub fn registration(&self, partition: i32) -> PartitionRegistration {
        match self.registrations.get(&partition) {
            Some(registration) => (**registration).clone(),
            None => PartitionRegistration {
                leader: self.replicas(partition).first().copied().unwrap_or(-1),
                leader_epoch: self.leader_epoch,
                isr: self.replicas(partition).to_vec(),
                partition_epoch: 0,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
                elr: Vec::new(),
                last_known_elr: Vec::new(),
            },
        }
    }

    /// The factor new partitions get: that of the last partition, less the replicas a
    /// reassignment is removing (Kafka's createPartitions reads the last partition's
    /// replicas, so a factor changed by reassignments carries on); the factor the topic was
    /// created with when no replica is recorded (a single node).
    pub fn current_replication_factor(&self) -> i16 {
        let last = self.partitions - 1;
        let replicas = self.replicas(last);
        if replicas.is_empty() {
            return self.replication_factor;
        }
        let removing = self.registration(last).removing_replicas;
        let factor = replicas.iter().filter(|r| !removing.contains(r)).count();
        i16::try_from(factor).unwrap_or(i16::MAX)
    }

    /// Whether `node` holds a replica of `partition`.
    pub fn hosts(&self, partition: i32, node: i32) -> bool {
        self.replicas(partition).contains(&node)
    }
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
    /// The registered brokers, by node id (a single node: itself, not recorded).
    pub brokers: OrdMap<i32, Arc<BrokerInfo>>,
    /// SCRAM credentials, by user and mechanism.
    pub scram_credentials: OrdMap<(String, ScramMechanism), Arc<ScramCredential>>,
    /// The ACL bindings in force.
    pub acls: Acls,
    /// The client quotas in force, by entity.
    pub client_quotas: crate::quota::ClientQuotas,
    /// Feature levels finalized by UpdateFeatures, by name; a feature not here runs at the
    /// code's level (`api_versions::FEATURES`).
    pub feature_levels: OrdMap<String, i16>,
    /// The finalized-features epoch of the last UpdateFeatures (None: the code's).
    pub features_epoch: Option<i64>,
}

impl MetadataImage {
    /// A broker that `isr` adds to `current` although it is fenced or its log directory is
    /// offline (Kafka's ReplicationControlManager refuses such an AlterPartition with
    /// INELIGIBLE_REPLICA, KIP-841 and KIP-858); such a member already in `current` may stay.
    pub fn ineligible_isr_member(&self, current: &[i32], isr: &[i32]) -> Option<i32> {
        isr.iter()
            .copied()
            .find(|r| !current.contains(r) && !self.is_online(*r))
    }

    /// The level `name` runs at: as UpdateFeatures finalized it, else the code's (0 for a
    /// feature Sluice does not know).
    pub fn feature_level(&self, name: &str) -> i16 {
        match self.feature_levels.get(name) {
            Some(level) => *level,
            None => crate::api::api_versions::FEATURES
                .iter()
                .find(|f| f.name == name)
                .map_or(0, |f| f.finalized_level),
        }
    }

    /// The epoch of the finalized feature levels (ApiVersions' `finalized_features_epoch`).
    pub fn finalized_features_epoch(&self) -> i64 {
        self.features_epoch
            .unwrap_or(crate::api::api_versions::FINALIZED_FEATURES_EPOCH)
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicInfo>> {
        self.topics.get(name)
    }

    /// `user`'s SCRAM credential for `mechanism`.
    pub fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.scram_credentials.get(&(user.to_string(), mechanism)).map(|c| &**c)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&Arc<TopicInfo>> {
        self.topic_ids.get(id).and_then(|name| self.topics.get(name))
    }

    /// The brokers clients may use (registered and not fenced), by id.
    pub fn live_brokers(&self) -> impl Iterator<Item = &Arc<BrokerInfo>> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// Whether node `id` is registered and not fenced.
    pub fn is_live(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// Whether node `id`'s log directory failed, as its heartbeat reported (its replicas are
    /// offline: Metadata lists them so).
    pub fn is_log_dir_offline(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.log_dir_offline)
    }

    /// Whether node `id` may lead, join an ISR and take new replicas: live, with its log
    /// directory online.
    pub fn is_online(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced && !b.log_dir_offline)
    }

    /// Whether broker `id`'s log directory is cordoned (KIP-1066: it takes no new replicas):
    /// its dynamic per-broker `cordoned.log.dirs` if set (empty: not cordoned), else its
    /// static one, as it registered. A broker has one log directory, so any entry cordons it.
    pub fn is_cordoned(&self, id: i32) -> bool {
        match self
            .broker_configs
            .get(&id)
            .and_then(|layer| layer.get("cordoned.log.dirs"))
        {
            Some(value) => value.split(',').any(|d| !d.trim().is_empty()),
            None => self.brokers.get(&id).is_some_and(|b| b.cordoned),
        }
    }

    /// The brokers new replicas may be placed on: live, with a log directory online and not
    /// cordoned.
    pub fn placeable_brokers(&self) -> impl Iterator<Item = &Arc<BrokerInfo>> {
        self.live_brokers()
            .filter(|b| !b.log_dir_offline && !self.is_cordoned(b.id))
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
            cluster_id,
            node_id: _,
            offset: _,
            topics,
            topic_ids: _,
            collision_names: _,
            next_producer_id,
            group_configs,
            broker_default_configs,
            broker_configs,
            brokers,
            scram_credentials,
            acls,
            client_quotas,
            feature_levels,
            features_epoch,
        } = self;
        let mut records =
            Vec::with_capacity(topics.len() + group_configs.len() + broker_configs.len() + 2 * brokers.len() + 3);
        if !cluster_id.is_empty() {
            records.push(MetadataRecord::SetClusterId { id: cluster_id.clone() });
        }
        for broker in brokers.values() {
            records.push(broker.registration(None));
            if broker.fenced {
                records.push(MetadataRecord::SetBrokerFenced {
                    id: broker.id,
                    fenced: true,
                });
            }
            if broker.log_dir_offline {
                records.push(MetadataRecord::SetBrokerLogDirOffline {
                    id: broker.id,
                    offline: true,
                });
            }
        }
        records.extend(topics.values().map(|topic| MetadataRecord::CreateTopic {
            name: topic.name.clone(),
            id: topic.id,
            partitions: topic.partitions,
            replication_factor: topic.replication_factor,
            configs: topic.configs.clone(),
            leader: topic.leader(0),
            leader_epoch: topic.leader_epoch,
            assignments: topic.assignments.clone(),
        }));
        let changes: Vec<PartitionChange> = topics
            .values()
            .flat_map(|topic| {
                topic
                    .registrations
                    .iter()
                    .map(|(partition, registration)| PartitionChange {
                        topic: topic.id,
                        partition: *partition,
                        replicas: None,
                        registration: (**registration).clone(),
                    })
            })
            .collect();
        if !changes.is_empty() {
            records.push(MetadataRecord::ChangePartitions { changes });
        }
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
        if !scram_credentials.is_empty() {
            records.push(MetadataRecord::ScramCredentials {
                set: scram_credentials
                    .iter()
                    .map(|((user, mechanism), c)| ScramCredentialEntry::new(user, *mechanism, c))
                    .collect(),
                remove: Vec::new(),
            });
        }
        if !acls.is_empty() {
            records.push(MetadataRecord::Acls {
                add: acls.iter().cloned().collect(),
                remove: Vec::new(),
            });
        }
        if !client_quotas.is_empty() {
            let changes = client_quotas.iter().flat_map(|(entity, values)| {
                values.iter().map(|(key, value)| crate::quota::QuotaChange {
                    entity: entity.clone(),
                    key: key.clone(),
                    value: Some(*value),
                })
            });
            records.push(MetadataRecord::ClientQuotas {
                changes: changes.collect(),
            });
        }
        if !feature_levels.is_empty() {
            records.push(MetadataRecord::SetFeatureLevels {
                levels: feature_levels.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                epoch: *features_epoch,
            });
        }
        records
    }

    /// Whether `record` may be applied to this image: what the quorum's leader checks before
    /// it proposes a record that a broker computed against a possibly older image. The
    /// caller's own validation (names, configs, counts) already ran; this keeps the image's
    /// invariants whoever proposes.
    pub fn check(&self, record: &MetadataRecord) -> Result<()> {
        match record {
            MetadataRecord::CreateTopic {
                name,
                id,
                partitions,
                assignments,
                ..
            } => {
                if self.topics.contains_key(name) {
                    return Err(Error::TopicAlreadyExists(name.clone()));
                }
                if self
                    .collision_names
                    .get(&collision_name(name))
                    .is_some_and(|other| other != name)
                {
                    return Err(Error::InvalidTopic {
                        name: name.clone(),
                        reason: "it collides with an existing topic ('.' and '_' are equivalent)",
                    });
                }
                if self.topic_ids.contains_key(id) {
                    return Err(Error::InvalidRequest(format!("topic id {id} is taken")));
                }
                self.check_assignments(assignments, *partitions, 0)
            }
            MetadataRecord::CreatePartitions {
                id,
                partitions,
                assignments,
            } => {
                let topic = self.topic_by_id(id).ok_or(Error::UnknownTopicId(*id))?;
                if *partitions <= topic.partitions {
                    return Err(Error::InvalidPartitions(*partitions));
                }
                self.check_assignments(assignments, *partitions, topic.partitions)
            }
            MetadataRecord::DeleteTopic { id } | MetadataRecord::SetTopicConfigs { id, .. } => {
                self.topic_by_id(id).map(|_| ()).ok_or(Error::UnknownTopicId(*id))
            }
            MetadataRecord::ProducerIds { next_producer_id } => {
                if next_producer_id - PRODUCER_ID_BLOCK_SIZE < self.next_producer_id {
                    return Err(Error::Stale("another producer id block was taken meanwhile".into()));
                }
                Ok(())
            }
            MetadataRecord::SetBrokerFenced { id, .. } | MetadataRecord::SetBrokerLogDirOffline { id, .. } => {
                match self.brokers.contains_key(id) {
                    true => Ok(()),
                    false => Err(Error::InvalidRequest(format!("broker {id} is not registered"))),
                }
            }
            MetadataRecord::UnregisterBroker { id } => match self.brokers.contains_key(id) {
                true => Ok(()),
                false => Err(broker_not_registered(*id)),
            },
            MetadataRecord::SetClusterId { .. } if !self.cluster_id.is_empty() => {
                Err(Error::Stale("the cluster id is set already".into()))
            }
            MetadataRecord::ChangePartitions { changes } => {
                for change in changes {
                    self.check_change(change)?;
                }
                Ok(())
            }
            MetadataRecord::SetGroupConfigs { .. }
            | MetadataRecord::SetBrokerConfigs { .. }
            | MetadataRecord::RegisterBroker { .. }
            | MetadataRecord::SetClusterId { .. } => Ok(()),
            MetadataRecord::ScramCredentials { set, remove } => {
                let mechanisms = set
                    .iter()
                    .map(|e| &e.mechanism)
                    .chain(remove.iter().map(|k| &k.mechanism));
                match mechanisms.into_iter().find(|m| ScramMechanism::from_name(m).is_none()) {
                    Some(m) => Err(Error::InvalidRequest(format!("{m} is not a SCRAM mechanism"))),
                    None => Ok(()),
                }
            }
            MetadataRecord::Acls { add, .. } => match add.iter().find_map(AclBinding::invalid) {
                Some(reason) => Err(Error::InvalidRequest(reason)),
                None => Ok(()),
            },
            MetadataRecord::ClientQuotas { .. } => Ok(()),
            MetadataRecord::SetFeatureLevels { levels, .. } => {
                for (name, level) in levels {
                    if let Some(reason) = crate::api::api_versions::level_not_supported(name, *level) {
                        return Err(Error::InvalidRequest(format!("{name} {level}: {reason}")));
                    }
                }
                Ok(())
            }
        }
    }

    /// A partition change fits: the partition exists, the change follows its current
    /// registration (partition epoch + 1, leader epoch not going back), new replicas are
    /// registered brokers named once, the ISR and the adding and removing replicas are made
    /// of replicas, and the leader is in the ISR (or there is none).
    fn check_change(&self, change: &PartitionChange) -> Result<()> {
        let topic = self
            .topic_by_id(&change.topic)
            .ok_or(Error::UnknownTopicId(change.topic))?;
        if topic.replicas(change.partition).is_empty() {
            return Err(Error::UnknownTopicOrPartition(format!(
                "{}-{}",
                topic.name, change.partition
            )));
        }
        let replicas = match &change.replicas {
            Some(replicas) => {
                self.check_replicas(replicas)?;
                replicas.as_slice()
            }
            None => topic.replicas(change.partition),
        };
        let next = &change.registration;
        if next
            .adding_replicas
            .iter()
            .chain(&next.removing_replicas)
            .any(|r| !replicas.contains(r))
            || next.adding_replicas.iter().any(|r| next.removing_replicas.contains(r))
        {
            return Err(Error::InvalidReplicaAssignment(format!(
                "adding {:?} and removing {:?} are not disjoint subsets of replicas {replicas:?}",
                next.adding_replicas, next.removing_replicas
            )));
        }
        let current = topic.registration(change.partition);
        if next.partition_epoch != current.partition_epoch + 1 || next.leader_epoch < current.leader_epoch {
            return Err(Error::Stale(format!(
                "partition {}-{} is at partition epoch {}, leader epoch {}",
                topic.name, change.partition, current.partition_epoch, current.leader_epoch
            )));
        }
        // An ISR empties only with eligible leader replicas on, and without a leader.
        if (next.isr.is_empty() && next.leader != -1) || next.isr.iter().any(|r| !replicas.contains(r)) {
            return Err(Error::InvalidRequest(format!(
                "ISR {:?} is not a non-empty subset of replicas {replicas:?}",
                next.isr
            )));
        }
        if next
            .elr
            .iter()
            .chain(&next.last_known_elr)
            .any(|r| !replicas.contains(r))
            || next.elr.iter().any(|r| next.isr.contains(r))
        {
            return Err(Error::InvalidRequest(format!(
                "ELR {:?} and last known ELR {:?} are not replicas {replicas:?} outside the ISR {:?}",
                next.elr, next.last_known_elr, next.isr
            )));
        }
        if next.leader != -1 && !next.isr.contains(&next.leader) {
            return Err(Error::InvalidRequest(format!(
                "leader {} is not in the ISR {:?}",
                next.leader, next.isr
            )));
        }
        Ok(())
    }

    /// The elections the controller owes (Kafka's `ReplicationControlManager` on broker
    /// fencing and unfencing): for each partition whose leader is not live, the first live
    /// replica of the ISR (in replica order) becomes leader, at the next leader epoch; when
    /// none is, the partition has no leader (-1) and keeps its last ISR, unless unclean
    /// election is allowed for its topic, when the first live replica leads with an ISR of
    /// itself. Replicas that are not live leave the ISR of a partition whose leader stays.
    /// A broker whose log directory is offline counts as not live while another in-sync
    /// replica is online (see `elect`).
    /// With eligible leader replicas on (KIP-966, `elr_min_isr`), a partition whose ISR has no
    /// live member empties its ISR, and an eligible leader replica leads (see `elect`).
    /// `unclean_default`: `unclean.leader.election.enable` for topics without an override;
    /// `min_isr_default`: `min.insync.replicas` likewise.
    pub fn elections(&self, unclean_default: bool, min_isr_default: i32) -> Vec<PartitionChange> {
        let mut changes = Vec::new();
        for topic in self.topics.values() {
            let unclean = self.unclean_election_enabled(topic, unclean_default);
            let elr = self.elr_min_isr(topic, min_isr_default);
            for partition in 0..topic.partitions {
                let current = topic.registration(partition);
                if let Some(next) = self.elect(topic.replicas(partition), &current, unclean, elr) {
                    changes.push(PartitionChange {
                        topic: topic.id,
                        partition,
                        replicas: None,
                        registration: next,
                    });
                }
            }
        }
        changes
    }

    /// Whether KIP-966's eligible leader replicas are tracked: `eligible.leader.replicas.version`
    /// 1 or more (Kafka 4.1 finalizes 1 on a new cluster).
    pub fn elr_enabled(&self) -> bool {
        self.feature_level(ELR_FEATURE) >= 1
    }

    /// Broker `id` restarted after an unclean stop: it leaves the ELR and the last known ELR
    /// of every partition where it may have acknowledged records it did not fsync (Kafka
    /// drops it from all of them, `handleBrokerUncleanShutdown`). Where it fsyncs every
    /// message before acknowledging it (`log.flush.interval.messages` 1, Sluice's default,
    /// resolved as the broker does: the topic's `flush.messages`, else the dynamic broker and
    /// cluster layers, else `static_flush_interval`), a kill or a power loss lost nothing it
    /// acknowledged, and it stays eligible.
    fn forget_unflushed_eligibility(&mut self, id: i32, static_flush_interval: i64) {
        const KEY: &str = "log.flush.interval.messages";
        let node_default = self
            .broker_configs
            .get(&id)
            .and_then(|layer| layer.get(KEY))
            .or_else(|| self.broker_default_configs.get(KEY))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(static_flush_interval);
        let eligible = |r: &PartitionRegistration| r.elr.contains(&id) || r.last_known_elr.contains(&id);
        let names: Vec<String> = self
            .topics
            .iter()
            .filter(|(_, t)| t.registrations.values().any(|r| eligible(r)))
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            let Some(topic) = self.topics.get_mut(&name) else {
                continue;
            };
            let interval = topic
                .configs
                .get("flush.messages")
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(node_default);
            if interval <= 1 {
                continue;
            }
            let topic = Arc::make_mut(topic);
            let holding: Vec<i32> = topic
                .registrations
                .iter()
                .filter(|(_, r)| eligible(r))
                .map(|(p, _)| *p)
                .collect();
            for partition in holding {
                if let Some(registration) = topic.registrations.get_mut(&partition) {
                    // As `clear_elr`: eligibility only, the ISR and leader stay.
                    let registration = Arc::make_mut(registration);
                    registration.elr.retain(|r| *r != id);
                    registration.last_known_elr.retain(|r| *r != id);
                }
            }
        }
    }

    /// The broker config layers that must change before eligible leader replicas are safe
    /// (Kafka's `ConfigurationControlManager.maybeGenerateElrSafetyRecords`): the cluster
    /// default (None) when it has no `min.insync.replicas`, and each broker layer that has one.
    /// The controller and every leader must agree on each topic's minimum, and a broker's own
    /// layer is read by that broker alone.
    pub fn elr_safety_targets(&self) -> Vec<Option<i32>> {
        let cluster = (!self.broker_default_configs.contains_key(MIN_ISR)).then_some(None);
        let brokers = self
            .broker_configs
            .iter()
            .filter(|(_, layer)| layer.contains_key(MIN_ISR))
            .map(|(node, _)| Some(*node));
        cluster.into_iter().chain(brokers).collect()
    }

    /// The record that makes layer `node` safe for eligible leader replicas: the cluster
    /// default gains `min.insync.replicas` = `static_min_isr` (the controller's static value,
    /// so that the effective minimum does not change), a broker layer loses its own.
    pub fn elr_safety_record(&self, node: Option<i32>, static_min_isr: i32) -> MetadataRecord {
        let mut configs = match node {
            None => (*self.broker_default_configs).clone(),
            Some(node) => self
                .broker_configs
                .get(&node)
                .map(|l| (**l).clone())
                .unwrap_or_default(),
        };
        match node {
            None => {
                configs
                    .entry(MIN_ISR.to_string())
                    .or_insert_with(|| static_min_isr.to_string());
            }
            Some(_) => {
                configs.remove(MIN_ISR);
            }
        }
        MetadataRecord::SetBrokerConfigs { node, configs }
    }

    /// Why a change of broker layer `node` from `current` to `next` is refused while eligible
    /// leader replicas are on (Kafka's `ConfigurationControlManager.validateAlterConfig`): a
    /// broker's own `min.insync.replicas` cannot change, and the cluster's cannot be removed.
    pub fn elr_config_refusal(
        &self,
        node: Option<i32>,
        current: &BTreeMap<String, String>,
        next: &BTreeMap<String, String>,
    ) -> Option<&'static str> {
        if !self.elr_enabled() || current.get(MIN_ISR) == next.get(MIN_ISR) {
            return None;
        }
        match node {
            Some(_) => Some("Broker-level min.insync.replicas cannot be altered while ELR is enabled."),
            None if !next.contains_key(MIN_ISR) => {
                Some("Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
            }
            None => None,
        }
    }

    /// `min.insync.replicas` for `topic` when eligible leader replicas are tracked (None when
    /// they are not): its override, else the dynamic cluster default, else `default` (the
    /// broker's static config). Kafka's controller takes the configured value, not capped at
    /// the replica count.
    fn elr_min_isr(&self, topic: &TopicInfo, default: i32) -> Option<usize> {
        if !self.elr_enabled() {
            return None;
        }
        let min = topic
            .configs
            .get(MIN_ISR)
            .or_else(|| self.broker_default_configs.get(MIN_ISR))
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(default);
        Some(usize::try_from(min).unwrap_or(0).max(1))
    }

    /// `unclean.leader.election.enable` for `topic`: its override, else the dynamic cluster
    /// default, else `default` (the broker's static config).
    fn unclean_election_enabled(&self, topic: &TopicInfo, default: bool) -> bool {
        topic
            .configs
            .get("unclean.leader.election.enable")
            .or_else(|| self.broker_default_configs.get("unclean.leader.election.enable"))
            .map_or(default, |v| v == "true")
    }

    /// A reassignment an admin asked for (AlterPartitionReassignments, key 45; Kafka's
    /// `ReplicationControlManager.changePartitionReassignment`, KIP-455): `target` becomes the
    /// partition's replicas. Until every target replica is in sync the partition has the
    /// union of both (the target first, then the replicas leaving: Kafka's
    /// `PartitionReassignmentReplicas`), with the adding and removing ones recorded; the
    /// replicas joining fetch as followers outside the ISR, and the ISR change that brings
    /// the last one in completes it (`partition_change`). A target already in sync completes
    /// at once. `target` None cancels the reassignment under way (Kafka's
    /// `PartitionReassignmentRevert`): the adding replicas leave, the removing ones stay.
    /// Refused: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (no replica, a broker
    /// twice or not registered; a cancel that would need an unclean election),
    /// INVALID_REPLICATION_FACTOR (the count changes and `allow_replication_factor_change` is
    /// off, KIP-860), NO_REASSIGNMENT_IN_PROGRESS (a cancel of nothing). Ok(None): nothing
    /// changes.
    pub fn reassignment(
        &self,
        topic: &TopicInfo,
        partition: i32,
        target: Option<&[i32]>,
        allow_replication_factor_change: bool,
        min_isr_default: i32,
    ) -> Result<Option<PartitionChange>> {
        let name = format!("{}-{partition}", topic.name);
        let current_replicas = topic.replicas(partition);
        if current_replicas.is_empty() {
            return Err(Error::UnknownTopicOrPartition(name));
        }
        let current = topic.registration(partition);
        let mut next = current.clone();
        next.partition_epoch += 1;
        let without =
            |list: &[i32], gone: &[i32]| -> Vec<i32> { list.iter().copied().filter(|r| !gone.contains(r)).collect() };
        let replicas = match target {
            None => {
                if !current.is_reassigning() {
                    return Err(Error::NoReassignmentInProgress(name));
                }
                let replicas = without(current_replicas, &current.adding_replicas);
                next.isr = without(&current.isr, &current.adding_replicas);
                if next.isr.is_empty() {
                    // Every in-sync replica was one being added: going back means a replica
                    // outside the ISR leads.
                    if !self.unclean_election_enabled(topic, false) {
                        return Err(Error::InvalidReplicaAssignment(format!(
                            "cancelling the reassignment of {name} would need an unclean leader election"
                        )));
                    }
                    next.isr = replicas.iter().copied().filter(|r| self.is_live(*r)).take(1).collect();
                    if next.isr.is_empty() {
                        return Err(Error::EligibleLeadersNotAvailable(name));
                    }
                }
                next.adding_replicas.clear();
                next.removing_replicas.clear();
                replicas
            }
            Some(target) => {
                self.check_replicas(target)?;
                // The factor the partition is heading for: its target when a reassignment
                // is under way (the replicas not removing), else its replicas.
                let factor = current_replicas.len() - current.removing_replicas.len();
                if !allow_replication_factor_change && target.len() != factor {
                    return Err(Error::ReplicationFactorChanged {
                        from: factor,
                        to: target.len(),
                    });
                }
                // Adding: the target's replicas that were not replicas before any
                // reassignment under way (those it was adding still are).
                let original = without(current_replicas, &current.adding_replicas);
                let mut removing = without(current_replicas, target);
                let mut adding = without(target, &original);
                removing.sort_unstable();
                adding.sort_unstable();
                let mut replicas = target.to_vec();
                replicas.extend(&removing);
                next.adding_replicas = adding;
                next.removing_replicas = removing;
                replicas
            }
        };
        let change = self.partition_change(topic, partition, replicas, next, min_isr_default);
        // Kafka's `changeRecordIsNoOp`: the same replicas and registration need no record.
        let unchanged = PartitionRegistration {
            partition_epoch: current.partition_epoch,
            ..change.registration.clone()
        };
        if change.replicas.is_none() && unchanged == current {
            return Ok(None);
        }
        Ok(Some(change))
    }

    /// The change that gives `partition` of `topic` the registration `next` over `replicas`
    /// (Kafka's `PartitionChangeBuilder.build`). A reassignment completes once every replica
    /// staying (all but the removing ones) is in `next`'s ISR (`completeReassignmentIfNeeded`):
    /// the replicas become those, the removing ones leave the ISR, the adding and removing
    /// lists empty. A leader no longer in the ISR hands over to the first replica in sync
    /// and live (none: -1). The leader epoch moves when the leader does or replicas leave
    /// (`triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`), so the removed replicas'
    /// fetches are fenced.
    ///
    /// The ELR follows the new ISR (`track_elr`) when eligible leader replicas are tracked
    /// (`min_isr_default`: `min.insync.replicas` for topics without an override).
    fn partition_change(
        &self,
        topic: &TopicInfo,
        partition: i32,
        mut replicas: Vec<i32>,
        mut next: PartitionRegistration,
        min_isr_default: i32,
    ) -> PartitionChange {
        if next.is_reassigning() {
            let removing = &next.removing_replicas;
            let staying: Vec<i32> = replicas.iter().copied().filter(|r| !removing.contains(r)).collect();
            let isr: Vec<i32> = next.isr.iter().copied().filter(|r| !removing.contains(r)).collect();
            if !staying.is_empty() && staying.iter().all(|r| isr.contains(r)) {
                replicas = staying;
                next.isr = isr;
                next.adding_replicas.clear();
                next.removing_replicas.clear();
            }
        }
        let before = topic.registration(partition);
        if next.leader != -1 && !next.isr.contains(&next.leader) {
            next.leader = replicas
                .iter()
                .copied()
                .find(|r| next.isr.contains(r) && self.is_live(*r))
                .unwrap_or(-1);
        }
        // Within the replicas the partition keeps (a reassignment may complete).
        track_elr(&before, &mut next, self.elr_min_isr(topic, min_isr_default));
        next.elr.retain(|r| replicas.contains(r));
        next.last_known_elr.retain(|r| replicas.contains(r));
        let current = topic.replicas(partition);
        let replicas_left = current.iter().any(|r| !replicas.contains(r));
        if next.leader_epoch == before.leader_epoch && (next.leader != before.leader || replicas_left) {
            next.leader_epoch += 1;
        }
        PartitionChange {
            topic: topic.id,
            partition,
            replicas: (replicas != current).then_some(replicas),
            registration: next,
        }
    }

    /// The partitions of `topic` being reassigned (ListPartitionReassignments, key 46), among
    /// `partitions` (None: all).
    pub fn reassignments(&self, topic: &TopicInfo, partitions: Option<&[i32]>) -> Vec<OngoingReassignment> {
        let ongoing = |partition: i32| {
            let registration = topic.registrations.get(&partition)?;
            registration.is_reassigning().then(|| OngoingReassignment {
                partition,
                replicas: topic.replicas(partition).to_vec(),
                adding_replicas: registration.adding_replicas.clone(),
                removing_replicas: registration.removing_replicas.clone(),
            })
        };
        match partitions {
            Some(partitions) => partitions.iter().filter_map(|p| ongoing(*p)).collect(),
            None => topic.registrations.keys().filter_map(|p| ongoing(*p)).collect(),
        }
    }

    /// An election an admin asked for (ElectLeaders, key 43; Kafka's
    /// `ReplicationControlManager.electLeader`): `preferred` makes the first replica lead when
    /// it is live and in sync (ELECTION_NOT_NEEDED when it leads already,
    /// PREFERRED_LEADER_NOT_AVAILABLE when it cannot); otherwise (unclean) a partition without
    /// a leader gets the first live replica of its ISR, else (eligible leader replicas on)
    /// of its ELR, else its last known leader, else the first live replica at all
    /// (ELECTION_NOT_NEEDED when it has a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE when no
    /// replica is live). `min_isr_default`: `min.insync.replicas` for topics without an
    /// override.
    pub fn requested_election(
        &self,
        topic: &TopicInfo,
        partition: i32,
        preferred: bool,
        min_isr_default: i32,
    ) -> Result<PartitionRegistration> {
        let elr_min_isr = self.elr_min_isr(topic, min_isr_default);
        let replicas = topic.replicas(partition);
        if replicas.is_empty() {
            return Err(Error::UnknownTopicOrPartition(format!("{}-{partition}", topic.name)));
        }
        let current = topic.registration(partition);
        let mut next = current.clone();
        if preferred {
            let first = replicas[0];
            if current.leader == first {
                return Err(Error::ElectionNotNeeded(format!("{}-{partition}", topic.name)));
            }
            if !self.is_online(first) || !current.isr.contains(&first) {
                return Err(Error::PreferredLeaderNotAvailable(format!(
                    "{}-{partition}",
                    topic.name
                )));
            }
            next.leader = first;
        } else {
            if current.leader != -1 && self.is_live(current.leader) {
                return Err(Error::ElectionNotNeeded(format!("{}-{partition}", topic.name)));
            }
            if let Some(&leader) = replicas
                .iter()
                .find(|r| current.isr.contains(r) && self.is_online(**r))
                .or_else(|| replicas.iter().find(|r| current.isr.contains(r) && self.is_live(**r)))
            {
                next.leader = leader;
                next.isr.retain(|r| self.is_live(*r));
            } else if let Some(elected) = elr_min_isr
                .and_then(|min_isr| self.elect_outside_the_isr(replicas, &current, false, min_isr))
                .filter(|e| e.leader != -1)
            {
                // An eligible leader replica, or the last known leader.
                return Ok(elected);
            } else if let Some(&leader) = replicas.iter().find(|r| self.is_live(**r)) {
                tracing::warn!(partition = %format!("{}-{partition}", topic.name), leader, "unclean leader election asked for: a replica outside the ISR leads");
                next.leader = leader;
                next.isr = vec![leader];
                next.elr.clear();
                next.last_known_elr.clear();
            } else {
                return Err(Error::EligibleLeadersNotAvailable(format!(
                    "{}-{partition}",
                    topic.name
                )));
            }
        }
        if let Some(min_isr) = elr_min_isr
            && next.isr != current.isr
        {
            track_elr(&current, &mut next, Some(min_isr));
        }
        if next.leader != -1 {
            next.last_known_elr.clear();
        }
        next.leader_epoch += 1;
        next.partition_epoch += 1;
        Ok(next)
    }

    /// The preferred-leader elections `auto.leader.rebalance.enable` makes: every partition
    /// whose first replica is live and in sync but does not lead (Kafka checks a per-broker
    /// imbalance ratio first, `leader.imbalance.per.broker.percentage`; Sluice moves every
    /// such partition back).
    pub fn preferred_elections(&self, min_isr_default: i32) -> Vec<PartitionChange> {
        let mut changes = Vec::new();
        for topic in self.topics.values() {
            for partition in 0..topic.partitions {
                if let Ok(registration) = self.requested_election(topic, partition, true, min_isr_default) {
                    changes.push(PartitionChange {
                        topic: topic.id,
                        partition,
                        replicas: None,
                        registration,
                    });
                }
            }
        }
        changes
    }

    /// One partition's election (see `elections`); None when nothing changes.
    ///
    /// A replica whose log directory is offline (`is_online`) leads only when no other
    /// in-sync replica can: it then still serves reads, and refuses writes with
    /// KAFKA_STORAGE_ERROR, which clients retry (Kafka would have no leader). It leaves every
    /// ISR it does not lead, so acks=all does not wait for it.
    ///
    /// `elr_min_isr`: the topic's `min.insync.replicas` when eligible leader replicas are
    /// tracked (KIP-966, Kafka's `PartitionChangeBuilder` with ELR on). Replicas leaving an
    /// ISR smaller than that join the ELR; when no ISR member is live the ISR empties, and a
    /// live eligible leader replica leads with an ISR of itself, else the last leader
    /// (`last_known_elr`) once it is back, else (unclean election) any live replica.
    fn elect(
        &self,
        replicas: &[i32],
        current: &PartitionRegistration,
        unclean: bool,
        elr_min_isr: Option<usize>,
    ) -> Option<PartitionRegistration> {
        // With ELR off again, a partition whose ISR emptied while it was on elects from what
        // the ELR kept.
        let isr_now: Vec<i32> = match elr_min_isr {
            None if current.isr.is_empty() => current.elr.iter().chain(&current.last_known_elr).copied().collect(),
            _ => current.isr.clone(),
        };
        let live_isr: Vec<i32> = isr_now.iter().copied().filter(|r| self.is_live(*r)).collect();
        let online = |r: &i32| live_isr.contains(r) && self.is_online(*r);
        // The ISR under leader `leader`: its live members, less the offline ones but the leader.
        let isr_under = |leader: i32| -> Vec<i32> {
            live_isr
                .iter()
                .copied()
                .filter(|r| *r == leader || self.is_online(*r))
                .collect()
        };
        let mut next = current.clone();
        let leader_live = current.leader != -1 && self.is_live(current.leader);
        let successor = replicas.iter().copied().find(online);
        if leader_live && (self.is_online(current.leader) || successor.is_none()) {
            // The leader stays; fenced and offline followers leave its ISR (never emptying it).
            let isr = isr_under(current.leader);
            if isr.len() == current.isr.len() || isr.is_empty() {
                return None;
            }
            next.isr = isr;
        } else if let Some(leader) = successor {
            next.leader = leader;
            next.isr = isr_under(leader);
            next.leader_epoch += 1;
        } else if let Some(&leader) = replicas.iter().find(|r| live_isr.contains(r)) {
            // Only replicas whose log directory is offline are in sync: one serves reads.
            next.leader = leader;
            next.isr = isr_under(leader);
            next.leader_epoch += 1;
        } else if let Some(min_isr) = elr_min_isr {
            return self.elect_outside_the_isr(replicas, current, unclean, min_isr);
        } else if let Some(leader) = self.unclean_leader(replicas, unclean) {
            tracing::warn!(leader, isr = ?current.isr, "unclean leader election: a replica outside the ISR leads");
            next.leader = leader;
            next.isr = vec![leader];
            next.leader_epoch += 1;
        } else if current.leader != -1 {
            // No eligible replica is live: no leader, and the ISR keeps the last one in it.
            next.leader = -1;
            next.leader_epoch += 1;
        } else {
            return None;
        }
        track_elr(current, &mut next, elr_min_isr);
        next.partition_epoch += 1;
        Some(next)
    }

    /// `elect` with eligible leader replicas on, when no ISR member is live: the ISR empties
    /// and its members join the ELR; a live ELR member (online ones first) leads with an ISR
    /// of itself; else the last leader, if it is the last known ELR and back; else an
    /// unclean election when allowed; else the partition has no leader.
    fn elect_outside_the_isr(
        &self,
        replicas: &[i32],
        current: &PartitionRegistration,
        unclean: bool,
        min_isr: usize,
    ) -> Option<PartitionRegistration> {
        let elr = eligible_leader_replicas(current, &[], min_isr);
        let mut next = current.clone();
        let from_elr = replicas
            .iter()
            .find(|r| elr.contains(r) && self.is_online(**r))
            .or_else(|| replicas.iter().find(|r| elr.contains(r) && self.is_live(**r)));
        let last_leader = match current.last_known_elr.as_slice() {
            [last] if elr.is_empty() && self.is_live(*last) => Some(*last),
            _ => None,
        };
        if let Some(&leader) = from_elr {
            tracing::info!(leader, ?elr, "leader elected from the eligible leader replicas");
            next.leader = leader;
            next.isr = vec![leader];
            next.elr = elr.into_iter().filter(|r| *r != leader).collect();
            next.last_known_elr.clear();
        } else if let Some(leader) = last_leader.or_else(|| self.unclean_leader(replicas, unclean)) {
            // Kafka counts the last known leader as unclean too: it may lack what the others
            // acknowledged after it left.
            tracing::warn!(leader, last_known_elr = ?current.last_known_elr, "leader elected outside the ISR and the eligible leader replicas");
            next.leader = leader;
            next.isr = vec![leader];
            next.elr.clear();
            next.last_known_elr.clear();
        } else {
            next.leader = -1;
            next.isr.clear();
            next.elr = elr;
            if current.leader != -1 {
                next.last_known_elr = vec![current.leader];
            }
            if next == *current {
                return None;
            }
        }
        if next.leader != current.leader {
            next.leader_epoch += 1;
        }
        next.partition_epoch += 1;
        Some(next)
    }

    /// The replica an unclean election picks, when `unclean` allows one: the first live one
    /// whose log directory is online, else the first live one.
    fn unclean_leader(&self, replicas: &[i32], unclean: bool) -> Option<i32> {
        if !unclean {
            return None;
        }
        replicas
            .iter()
            .find(|r| self.is_online(**r))
            .or_else(|| replicas.iter().find(|r| self.is_live(**r)))
            .copied()
    }

    /// Assignments for partitions `from..partitions` name registered brokers, once each.
    fn check_assignments(&self, assignments: &[Vec<i32>], partitions: i32, from: i32) -> Result<()> {
        if assignments.is_empty() {
            return Ok(());
        }
        if i64::try_from(assignments.len()).ok() != Some(i64::from(partitions) - i64::from(from)) {
            return Err(Error::InvalidReplicaAssignment(format!(
                "{} assignments for {} partitions",
                assignments.len(),
                i64::from(partitions) - i64::from(from)
            )));
        }
        for replicas in assignments {
            self.check_replicas(replicas)?;
        }
        Ok(())
    }

    /// One partition's replicas name registered brokers, at least one, none twice.
    fn check_replicas(&self, replicas: &[i32]) -> Result<()> {
        let mut seen = replicas.to_vec();
        seen.sort_unstable();
        seen.dedup();
        if replicas.is_empty() || seen.len() != replicas.len() {
            return Err(Error::InvalidReplicaAssignment(format!("replicas {replicas:?}")));
        }
        if let Some(unknown) = replicas.iter().find(|r| !self.brokers.contains_key(*r)) {
            return Err(Error::InvalidReplicaAssignment(format!(
                "broker {unknown} is not registered"
            )));
        }
        Ok(())
    }

    /// The replicas of new partitions: as recorded, or all on `leader` (the single-node form).
    fn assignments_or_on(assignments: &[Vec<i32>], count: i32, leader: i32) -> Vec<Vec<i32>> {
        if assignments.is_empty() {
            vec![vec![leader]; usize::try_from(count).unwrap_or(0)]
        } else {
            assignments.to_vec()
        }
    }

    /// Applies one record. Records are checked before they are written, so replay never
    /// fails; a record that does not fit the image anyway is skipped with a warning.
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
                assignments,
            } => {
                if self.topics.contains_key(name) || self.topic_ids.contains_key(id) {
                    tracing::warn!(topic = %name, "metadata: skipping the creation of a topic that exists");
                    return;
                }
                let assignments = Self::assignments_or_on(assignments, *partitions, *leader);
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
                        leader_epoch: *leader_epoch,
                        assignments,
                        registrations: OrdMap::new(),
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
                    let topic = Arc::make_mut(topic);
                    if topic.configs.get(MIN_ISR) != configs.get(MIN_ISR) {
                        clear_elr(topic);
                    }
                    topic.configs = configs.clone();
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
                if self.broker_default_configs.get(MIN_ISR) != configs.get(MIN_ISR) {
                    let holding: Vec<String> = self
                        .topics
                        .iter()
                        .filter(|(_, t)| t.registrations.values().any(|r| !r.elr.is_empty()))
                        .map(|(name, _)| name.clone())
                        .collect();
                    for name in holding {
                        if let Some(topic) = self.topics.get_mut(&name) {
                            clear_elr(Arc::make_mut(topic));
                        }
                    }
                }
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
            MetadataRecord::CreatePartitions {
                id,
                partitions,
                assignments,
            } => {
                let Some(name) = self.topic_ids.get(id).cloned() else {
                    return;
                };
                let Some(current) = self.topics.get(&name).map(|t| t.partitions) else {
                    return;
                };
                let added = if assignments.is_empty() {
                    // The single-node form: the new partitions live where the first one does.
                    let here = self.topics.get(&name).map_or(self.node_id, |t| t.leader(0));
                    vec![vec![here]; usize::try_from(*partitions - current).unwrap_or(0)]
                } else {
                    assignments.clone()
                };
                if let Some(topic) = self.topics.get_mut(&name) {
                    let topic = Arc::make_mut(topic);
                    topic.partitions = *partitions;
                    topic.assignments.extend(added);
                }
            }
            MetadataRecord::RegisterBroker {
                id,
                host,
                port,
                rack,
                listeners,
                cordoned,
                unclean_restart,
            } => {
                if let Some(flush_interval) = unclean_restart {
                    self.forget_unflushed_eligibility(*id, *flush_interval);
                }
                let endpoints = if listeners.is_empty() {
                    vec![Endpoint {
                        name: "PLAINTEXT".into(),
                        host: host.clone(),
                        port: *port,
                    }]
                } else {
                    listeners.clone()
                };
                self.brokers.insert(
                    *id,
                    Arc::new(BrokerInfo {
                        id: *id,
                        endpoints,
                        rack: rack.clone(),
                        fenced: false,
                        log_dir_offline: false,
                        cordoned: *cordoned,
                    }),
                );
            }
            MetadataRecord::SetBrokerFenced { id, fenced } => {
                if let Some(broker) = self.brokers.get_mut(id) {
                    Arc::make_mut(broker).fenced = *fenced;
                }
            }
            MetadataRecord::SetBrokerLogDirOffline { id, offline } => {
                if let Some(broker) = self.brokers.get_mut(id) {
                    Arc::make_mut(broker).log_dir_offline = *offline;
                }
            }
            MetadataRecord::UnregisterBroker { id } => {
                self.brokers.remove(id);
            }
            MetadataRecord::ScramCredentials { set, remove } => {
                for key in remove {
                    if let Some(mechanism) = ScramMechanism::from_name(&key.mechanism) {
                        self.scram_credentials.remove(&(key.user.clone(), mechanism));
                    }
                }
                for entry in set {
                    if let Some(mechanism) = ScramMechanism::from_name(&entry.mechanism) {
                        self.scram_credentials
                            .insert((entry.user.clone(), mechanism), Arc::new(entry.credential()));
                    }
                }
            }
            MetadataRecord::Acls { add, remove } => {
                for binding in remove {
                    self.acls.remove(binding);
                }
                for binding in add {
                    self.acls.insert(binding.clone());
                }
            }
            MetadataRecord::ClientQuotas { changes } => {
                for change in changes {
                    crate::quota::apply(&mut self.client_quotas, change);
                }
            }
            MetadataRecord::SetFeatureLevels { levels, epoch } => {
                for (name, level) in levels {
                    self.feature_levels.insert(name.clone(), *level);
                }
                // Above the code's epoch, and growing with the metadata offset.
                self.features_epoch =
                    Some(epoch.unwrap_or(crate::api::api_versions::FINALIZED_FEATURES_EPOCH + self.offset));
            }
            MetadataRecord::SetClusterId { id } => {
                if self.cluster_id.is_empty() {
                    self.cluster_id = id.clone();
                }
            }
            MetadataRecord::ChangePartitions { changes } => {
                for change in changes {
                    let Some(name) = self.topic_ids.get(&change.topic).cloned() else {
                        continue;
                    };
                    if let Some(topic) = self.topics.get_mut(&name) {
                        let topic = Arc::make_mut(topic);
                        if let Some(replicas) = &change.replicas
                            && let Some(assigned) = usize::try_from(change.partition)
                                .ok()
                                .and_then(|p| topic.assignments.get_mut(p))
                        {
                            *assigned = replicas.clone();
                        }
                        topic
                            .registrations
                            .insert(change.partition, Arc::new(change.registration.clone()));
                    }
                }
            }
        }
    }
}

/// Kafka's topic name rules (`org.apache.kafka.common.internals.Topic.validate`).
const MIN_ISR: &str = "min.insync.replicas";

/// A change of `min.insync.replicas` voids what the ELR promised (Kafka's `ClearElrRecord`):
/// a lower value lets the high watermark pass records an ELR member may lack. The last known
/// leader stays: it held everything it acknowledged.
fn clear_elr(topic: &mut TopicInfo) {
    let holding: Vec<i32> = topic
        .registrations
        .iter()
        .filter(|(_, r)| !r.elr.is_empty())
        .map(|(p, _)| *p)
        .collect();
    for partition in holding {
        if let Some(registration) = topic.registrations.get_mut(&partition) {
            Arc::make_mut(registration).elr.clear();
        }
    }
}

/// Kafka's `EligibleLeaderReplicasVersion` feature (KIP-966).
pub const ELR_FEATURE: &str = "eligible.leader.replicas.version";

/// The ELR for a change from `current` to an ISR of `isr` (Kafka's `maybePopulateTargetElr`):
/// empty once the ISR has `min_isr` members; below that, every replica in `current`'s ISR or
/// ELR that is not in `isr`, in id order.
fn eligible_leader_replicas(current: &PartitionRegistration, isr: &[i32], min_isr: usize) -> Vec<i32> {
    if isr.len() >= min_isr {
        return Vec::new();
    }
    let mut elr: Vec<i32> = current
        .elr
        .iter()
        .chain(&current.isr)
        .copied()
        .filter(|r| !isr.contains(r))
        .collect();
    elr.sort_unstable();
    elr.dedup();
    elr
}

/// ELR bookkeeping for a change from `current` to `next` whose leader and ISR are chosen
/// (Kafka's `maybePopulateTargetElr` and `maybeUpdateLastKnownLeader`): the ELR as
/// `eligible_leader_replicas` gives it; the last known ELR becomes the old leader when the
/// ISR empties, and clears once a leader leads. `min_isr` None (ELR off): the ELR clears.
fn track_elr(current: &PartitionRegistration, next: &mut PartitionRegistration, min_isr: Option<usize>) {
    let Some(min_isr) = min_isr else {
        next.elr.clear();
        return;
    };
    next.elr = eligible_leader_replicas(current, &next.isr, min_isr);
    if next.isr.is_empty() && current.leader != -1 {
        next.last_known_elr = vec![current.leader];
    } else if next.leader != -1 {
        next.last_known_elr.clear();
    }
}

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

/// A random starting point for placement (Kafka starts at a random broker too, so that
/// topics created one after another do not all lead on the same node).
fn rand_index() -> usize {
    (Uuid::new_v4().as_u128() % (1 << 32)) as usize
}

/// Kafka's replica placement (`StripedReplicaPlacer` in spirit): the live brokers, ordered so
/// that racks alternate, take the first replica of partition `first + i` in turn from a
/// random start, so leaders spread evenly; the other replicas follow at a shift that grows
/// each time the brokers have been gone round, so that a broker's followers are spread too.
/// Follower `r` sits `1 + (shift + r - 1) % (n - 1)` brokers after the leader (Kafka's
/// `replicaIndex`): never the leader, never twice, whatever the factor up to `n`.
fn place_replicas(
    image: &MetadataImage,
    count: i32,
    replication_factor: i16,
    first: i32,
    start: usize,
) -> Result<Vec<Vec<i32>>> {
    let brokers = rack_alternated(image.placeable_brokers().map(|b| (b.id, b.rack.clone())).collect());
    let n = brokers.len();
    let rf = usize::try_from(replication_factor).unwrap_or(0);
    if rf == 0 || rf > n {
        return Err(Error::InvalidReplicationFactor {
            asked: replication_factor.into(),
            nodes: i32::try_from(n).unwrap_or(i32::MAX),
        });
    }
    let first = usize::try_from(first).unwrap_or(0);
    let count = usize::try_from(count).unwrap_or(0);
    // Kafka's `assignReplicasToBrokers`: follower r of a partition sits at
    // `leader + 1 + (shift + r - 1) mod (n - 1)`, so followers are distinct and never the
    // leader, and the shift grows every round of n partitions to spread followers.
    Ok((first..first + count)
        .map(|p| {
            let leader = (start + p) % n;
            let shift = if n > 1 { (start / n + p / n) % (n - 1) } else { 0 };
            (0..rf)
                .map(|r| match r {
                    0 => brokers[leader],
                    // r >= 1 means rf >= 2, so n >= 2.
                    r => brokers[(leader + 1 + (shift + r - 1) % (n - 1)) % n],
                })
                .collect()
        })
        .collect())
}

/// Broker ids ordered so that consecutive ones are on different racks where racks differ
/// (Kafka's rack-alternated list): round-robin over the racks, each rack's brokers by id.
fn rack_alternated(mut brokers: Vec<(i32, Option<String>)>) -> Vec<i32> {
    brokers.sort();
    let mut racks: BTreeMap<Option<String>, std::collections::VecDeque<i32>> = BTreeMap::new();
    for (id, rack) in brokers {
        racks.entry(rack).or_default().push_back(id);
    }
    let mut out = Vec::new();
    while racks.values().any(|r| !r.is_empty()) {
        for ids in racks.values_mut() {
            if let Some(id) = ids.pop_front() {
                out.push(id);
            }
        }
    }
    out
}

/// Owner of all metadata changes.
pub struct Controller {
    node_id: i32,
    backend: Backend,
    /// The committed image, published: readers take the current one, the replica manager
    /// subscribes and applies each (docs/design/cluster.md, "Metadata flow").
    image: Arc<watch::Sender<Arc<MetadataImage>>>,
    /// This broker's current block of producer ids: the next one to hand out and the block's end.
    producer_ids: Mutex<(i64, i64)>,
    /// Held by the one `allocate_producer_id` that records a new block.
    refilling_producer_ids: tokio::sync::Mutex<()>,
}

/// Where committed metadata records go.
enum Backend {
    /// One node, its own controller: the local metadata log.
    Local(Mutex<MetadataLog>),
    /// A cluster: the raft quorum of controllers (this node is one of them).
    Quorum(Arc<raft::MetadataQuorum>),
}

/// Producer ids taken from the metadata log at a time (Kafka's `ProducerIdsBlock` size).
const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// How many times a change computed against a stale image is computed again.
const STALE_RETRIES: usize = 5;

impl Controller {
    /// Opens the metadata log under `data_dir` and replays it: a single node, which is its
    /// own controller and the only broker (`this`, not recorded: the image lists it).
    pub fn open(data_dir: &Path, this: BrokerInfo) -> Result<Controller> {
        let (log, records, cluster_id) = MetadataLog::open(&data_dir.join("__cluster_metadata-0"))?;
        let node_id = this.id;
        let mut image = MetadataImage {
            cluster_id,
            node_id,
            ..Default::default()
        };
        for record in &records {
            image.apply(record);
        }
        image.brokers.insert(node_id, Arc::new(this));
        Ok(Controller {
            node_id,
            backend: Backend::Local(Mutex::new(log)),
            image: Arc::new(watch::Sender::new(Arc::new(image))),
            producer_ids: Mutex::new((0, 0)),
            refilling_producer_ids: tokio::sync::Mutex::new(()),
        })
    }

    /// A controller whose records go through the metadata quorum (a cluster node).
    pub fn with_quorum(quorum: Arc<raft::MetadataQuorum>) -> Controller {
        Controller {
            node_id: quorum.broker_id(),
            image: quorum.image_sender(),
            backend: Backend::Quorum(quorum),
            producer_ids: Mutex::new((0, 0)),
            refilling_producer_ids: tokio::sync::Mutex::new(()),
        }
    }

    /// The quorum, in a cluster.
    pub fn quorum(&self) -> Option<&Arc<raft::MetadataQuorum>> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Quorum(quorum) => Some(quorum),
        }
    }

    /// The image once this node has applied all the quorum had committed (a read barrier,
    /// `MetadataQuorum::catch_up_with_leader`, up to `within`); a single node's image is
    /// always current. None when a cluster node could not catch up in time.
    pub async fn catch_up_with_leader(&self, within: std::time::Duration) -> Option<Arc<MetadataImage>> {
        match &self.backend {
            Backend::Local(_) => Some(self.image()),
            Backend::Quorum(quorum) => quorum.catch_up_with_leader(within).await,
        }
    }

    /// `min.insync.replicas` of this node's static configuration, for topics without an
    /// override when no cluster default is set: the ELR follows it (`MetadataImage::elr_min_isr`).
    /// A single node's partitions have one replica, whose ELR stays empty.
    fn min_isr_default(&self) -> i32 {
        match &self.backend {
            Backend::Local(_) => 1,
            Backend::Quorum(quorum) => quorum.min_isr_default(),
        }
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

    /// The active controller: this node alone, or the quorum's leader (-1: none known).
    pub fn active_controller(&self) -> i32 {
        match &self.backend {
            Backend::Local(_) => self.node_id,
            Backend::Quorum(quorum) => quorum.leader().and_then(|id| i32::try_from(id).ok()).unwrap_or(-1),
        }
    }

    /// Appends `record` durably, then publishes the image with it applied. The metadata lock
    /// serializes changes, so validation against the current image cannot race.
    fn commit(&self, validate: impl Fn(&MetadataImage) -> Result<MetadataRecord>) -> Result<Arc<MetadataImage>> {
        self.commit_with(validate)
    }

    /// `commit` with the caller's error type (a handler's refusal carries its own code).
    ///
    /// In a cluster, `validate` runs against this node's image, which may lag the quorum;
    /// the quorum's leader checks the record again against its own (`MetadataImage::check`)
    /// before proposing it, and a record found stale is computed again from a newer image.
    /// The call returns once this node has applied the record, so the caller sees its change.
    fn commit_with<E: From<Error>>(
        &self,
        validate: impl Fn(&MetadataImage) -> std::result::Result<MetadataRecord, E>,
    ) -> std::result::Result<Arc<MetadataImage>, E> {
        match &self.backend {
            Backend::Local(log) => {
                let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                let current = self.image();
                let record = validate(&current)?;
                current.check(&record)?;
                log.append(&record)?;
                let mut next = (*current).clone();
                next.apply(&record);
                let next = Arc::new(next);
                self.image.send_replace(next.clone());
                Ok(next)
            }
            Backend::Quorum(quorum) => match quorum.block_on(self.commit_async(validate)) {
                Ok(committed) => committed,
                Err(e) => Err(e.into()),
            },
        }
    }

    /// `commit_with` for async callers: in a cluster it waits for the quorum without holding a
    /// thread (the synchronous form bridges with `block_in_place`); on a single node the local
    /// append and fsync run as in `commit_with`.
    async fn commit_async<E: From<Error>>(
        &self,
        validate: impl Fn(&MetadataImage) -> std::result::Result<MetadataRecord, E>,
    ) -> std::result::Result<Arc<MetadataImage>, E> {
        let quorum = match &self.backend {
            Backend::Local(_) => return self.commit_with(validate),
            Backend::Quorum(quorum) => quorum,
        };
        let mut attempt = 0;
        loop {
            let record = validate(&self.image())?;
            let committed = match quorum.submit(record).await {
                Ok(offset) => quorum.wait_applied(offset).await,
                Err(e) => Err(e),
            };
            match committed {
                Err(Error::Stale(_)) if attempt < STALE_RETRIES => {
                    attempt += 1;
                    // The leader's image is newer: wait a little for ours to follow.
                    tokio::time::sleep(std::time::Duration::from_millis(20 << attempt)).await;
                }
                Err(e) => return Err(e.into()),
                Ok(image) => return Ok(image),
            }
        }
    }

    /// A producer id never handed out before (InitProducerId), from this broker's block;
    /// a new block is recorded durably in the metadata log before any of its ids is used.
    /// Async: in a cluster a new block waits for the quorum, and many InitProducerIds waiting
    /// at once must not hold the runtime's threads meanwhile (one refills, the others wait on
    /// `refilling` without a thread).
    pub async fn allocate_producer_id(&self) -> Result<i64> {
        if let Some(id) = self.take_producer_id() {
            return Ok(id);
        }
        let _refilling = self.refilling_producer_ids.lock().await;
        // Another caller may have refilled the block while this one waited.
        if let Some(id) = self.take_producer_id() {
            return Ok(id);
        }
        // The block is the one this record takes: in a cluster the image returned may hold
        // other brokers' later blocks too.
        let taken = std::sync::atomic::AtomicI64::new(0);
        self.commit_async(|image| {
            let next_producer_id = image
                .next_producer_id
                .checked_add(PRODUCER_ID_BLOCK_SIZE)
                .ok_or_else(|| Error::InvalidRequest("producer ids exhausted".into()))?;
            taken.store(next_producer_id, std::sync::atomic::Ordering::Relaxed);
            Ok(MetadataRecord::ProducerIds { next_producer_id })
        })
        .await?;
        let end = taken.load(std::sync::atomic::Ordering::Relaxed);
        let mut block = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
        *block = (end - PRODUCER_ID_BLOCK_SIZE + 1, end);
        Ok(end - PRODUCER_ID_BLOCK_SIZE)
    }

    /// The next id of the current block, if any is left.
    fn take_producer_id(&self) -> Option<i64> {
        let mut block = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
        (block.0 < block.1).then(|| {
            block.0 += 1;
            block.0 - 1
        })
    }

    /// Checks a new topic as `create_topic` would, without creating it (validate_only): the
    /// image's rules, then placement (a replication factor a cluster cannot serve yet).
    pub fn validate_new_topic(&self, name: &str, partitions: i32, replication_factor: i16) -> Result<()> {
        let image = self.image();
        let nodes = i32::try_from(image.placeable_brokers().count()).unwrap_or(i32::MAX);
        Self::check_new_topic(&image, name, partitions, replication_factor, nodes)?;
        self.place(&image, partitions.min(1), replication_factor, 0).map(drop)
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
        self.create_topic_with(name, partitions, replication_factor, None, configs)
    }

    /// `create_topic` with a manual replica assignment (CreateTopics' `assignments`): each
    /// partition's replicas, which must be live brokers, the same number for every partition.
    pub fn create_topic_assigned(
        &self,
        name: &str,
        assignments: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<TopicInfo>> {
        let partitions = i32::try_from(assignments.len())
            .map_err(|_| Error::InvalidReplicaAssignment("too many partitions".into()))?;
        let replication_factor = assignments
            .first()
            .and_then(|r| i16::try_from(r.len()).ok())
            .unwrap_or(0);
        self.create_topic_with(name, partitions, replication_factor, Some(assignments), configs)
    }

    fn create_topic_with(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        manual: Option<Vec<Vec<i32>>>,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<TopicInfo>> {
        let id = Uuid::new_v4();
        let image = self.commit(|image| {
            let nodes = i32::try_from(image.placeable_brokers().count()).unwrap_or(i32::MAX);
            Self::check_new_topic(image, name, partitions, replication_factor, nodes)?;
            let assignments = match &manual {
                Some(manual) => self.check_manual(image, manual)?,
                None => self.place(image, partitions, replication_factor, 0)?,
            };
            Ok(MetadataRecord::CreateTopic {
                name: name.to_string(),
                id,
                partitions,
                replication_factor,
                configs: configs.clone(),
                leader: self.node_id,
                leader_epoch: 0,
                assignments,
            })
        })?;
        image
            .topic(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))
    }

    /// A manual assignment as the record holds it, once checked as Kafka's
    /// `validateManualPartitionAssignment` does: every partition has replicas, none twice, all
    /// live brokers, as many for each partition. On a single node: not recorded (all here).
    fn check_manual(&self, image: &MetadataImage, manual: &[Vec<i32>]) -> Result<Vec<Vec<i32>>> {
        let width = manual.first().map_or(0, Vec::len);
        for (partition, replicas) in manual.iter().enumerate() {
            let mut seen = replicas.clone();
            seen.sort_unstable();
            seen.dedup();
            let problem = if replicas.is_empty() {
                Some("lists no replica".to_string())
            } else if seen.len() != replicas.len() {
                Some("lists a broker twice".to_string())
            } else if replicas.len() != width {
                Some(format!("has {} replicas where partition 0 has {width}", replicas.len()))
            } else {
                replicas
                    .iter()
                    .find(|r| !image.is_live(**r))
                    .map(|r| format!("names broker {r}, which is not a live broker"))
            };
            if let Some(problem) = problem {
                return Err(Error::InvalidReplicaAssignment(format!(
                    "partition {partition} {problem}"
                )));
            }
        }
        match &self.backend {
            Backend::Local(_) => Ok(Vec::new()),
            Backend::Quorum(_) => Ok(manual.to_vec()),
        }
    }

    /// Where the partitions `first..first + count` of a new or growing topic live: nowhere
    /// recorded on a single node (all on it), else placed over the live brokers.
    fn place(&self, image: &MetadataImage, count: i32, replication_factor: i16, first: i32) -> Result<Vec<Vec<i32>>> {
        match &self.backend {
            // The single node holds every partition, unless its log directory is cordoned.
            Backend::Local(_) if image.placeable_brokers().next().is_none() => Err(Error::InvalidReplicationFactor {
                asked: replication_factor.into(),
                nodes: 0,
            }),
            Backend::Local(_) => Ok(Vec::new()),
            Backend::Quorum(_) => place_replicas(image, count, replication_factor, first, rand_index()),
        }
    }

    /// ElectLeaders (key 43): the elections asked for (`partitions` None: every partition),
    /// committed in one record; each partition's outcome (the error of those not elected).
    /// When every partition is asked for, those that need no election are left out, as Kafka
    /// answers.
    pub async fn elect_leaders(
        &self,
        preferred: bool,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Vec<((String, i32), std::result::Result<(), Error>)> {
        let all = partitions.is_none();
        let min_isr_default = self.min_isr_default();
        let plan = |image: &MetadataImage| {
            let wanted: Vec<(String, i32)> = match &partitions {
                Some(list) => list.clone(),
                None => image
                    .topics
                    .values()
                    .flat_map(|t| (0..t.partitions).map(move |p| (t.name.clone(), p)))
                    .collect(),
            };
            let mut outcomes = Vec::with_capacity(wanted.len());
            let mut changes = Vec::new();
            for (name, partition) in wanted {
                let outcome = match image.topic(&name) {
                    None => Err(Error::UnknownTopicOrPartition(format!("{name}-{partition}"))),
                    Some(topic) => image
                        .requested_election(topic, partition, preferred, min_isr_default)
                        .map(|registration| {
                            changes.push(PartitionChange {
                                topic: topic.id,
                                partition,
                                replicas: None,
                                registration,
                            });
                        }),
                };
                if all && matches!(outcome, Err(Error::ElectionNotNeeded(_))) {
                    continue;
                }
                outcomes.push(((name, partition), outcome));
            }
            (outcomes, changes)
        };
        let (outcomes, changes) = plan(&self.image());
        if changes.is_empty() {
            return outcomes;
        }
        // The outcomes of the plan that was committed (the plan is made again when the
        // image changed meanwhile).
        let planned = std::sync::Mutex::new(outcomes);
        let committed = self
            .commit_async(|image| {
                let (outcomes, changes) = plan(image);
                *planned.lock().unwrap_or_else(|p| p.into_inner()) = outcomes;
                if changes.is_empty() {
                    return Err(Error::Stale("the elections were made meanwhile".into()));
                }
                Ok(MetadataRecord::ChangePartitions { changes })
            })
            .await;
        let mut outcomes = planned.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = committed {
            let code = e.code();
            for (_, outcome) in &mut outcomes {
                if outcome.is_ok() {
                    *outcome = Err(Error::Controller {
                        code,
                        message: e.to_string(),
                    });
                }
            }
        }
        outcomes
    }

    /// AlterPartitionReassignments (key 45): each `(topic, partition, target)` asked for
    /// (`MetadataImage::reassignment`; a target of None cancels), every change committed in
    /// one record, as Kafka commits them atomically; each partition's outcome in request
    /// order. Err: the commit failed (no quorum leader: NOT_CONTROLLER), and nothing changed
    /// or the outcome is unknown.
    pub async fn alter_partition_reassignments(
        &self,
        wanted: &[(String, i32, Option<Vec<i32>>)],
        allow_replication_factor_change: bool,
    ) -> Result<Vec<Result<()>>> {
        let min_isr_default = self.min_isr_default();
        let plan = |image: &MetadataImage| {
            let mut outcomes = Vec::with_capacity(wanted.len());
            let mut changes: Vec<PartitionChange> = Vec::new();
            for (name, partition, target) in wanted {
                let outcome = match image.topic(name) {
                    None => Err(Error::UnknownTopicOrPartition(format!("{name}-{partition}"))),
                    Some(topic) => image
                        .reassignment(
                            topic,
                            *partition,
                            target.as_deref(),
                            allow_replication_factor_change,
                            min_isr_default,
                        )
                        .map(|change| {
                            // A partition named twice: the later target wins.
                            if let Some(change) = change {
                                changes.retain(|c| (c.topic, c.partition) != (change.topic, change.partition));
                                changes.push(change);
                            }
                        }),
                };
                outcomes.push(outcome);
            }
            (outcomes, changes)
        };
        let (outcomes, changes) = plan(&self.image());
        if changes.is_empty() {
            return Ok(outcomes);
        }
        // The outcomes of the plan that was committed (made again when the image changed).
        let planned = Mutex::new((outcomes, false));
        let committed = self
            .commit_async(|image| {
                let (outcomes, changes) = plan(image);
                *planned.lock().unwrap_or_else(|p| p.into_inner()) = (outcomes, changes.is_empty());
                if changes.is_empty() {
                    return Err(Error::Stale("the reassignments were made meanwhile".into()));
                }
                for change in &changes {
                    tracing::info!(partition = %format!("{}-{}", image.topic_ids.get(&change.topic).map_or("?", |n| n.as_str()), change.partition), replicas = ?change.replicas, adding = ?change.registration.adding_replicas, removing = ?change.registration.removing_replicas, "reassigning");
                }
                Ok(MetadataRecord::ChangePartitions { changes })
            })
            .await;
        let (outcomes, nothing_to_change) = planned.into_inner().unwrap_or_else(|p| p.into_inner());
        match committed {
            Ok(_) => Ok(outcomes),
            Err(_) if nothing_to_change => Ok(outcomes),
            Err(e) => Err(e),
        }
    }

    /// ListPartitionReassignments (key 46): the reassignments under way, of every topic
    /// (`topics` None) or of the partitions named (unknown ones are left out, as Kafka does),
    /// by topic, leaving out topics with none.
    pub fn list_partition_reassignments(
        &self,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Vec<(String, Vec<OngoingReassignment>)> {
        let image = self.image();
        let found: Vec<(String, Vec<OngoingReassignment>)> = match topics {
            None => image
                .topics
                .values()
                .map(|topic| (topic.name.clone(), image.reassignments(topic, None)))
                .collect(),
            Some(topics) => topics
                .iter()
                .filter_map(|(name, partitions)| {
                    let topic = image.topic(name)?;
                    Some((name.clone(), image.reassignments(topic, Some(partitions))))
                })
                .collect(),
        };
        found
            .into_iter()
            .filter(|(_, partitions)| !partitions.is_empty())
            .collect()
    }

    /// A leader's ISR change (Kafka's AlterPartition): `isr` becomes the partition's ISR if
    /// this node still leads it at `leader_epoch`; committed before it takes effect, so a
    /// leader cut off from the quorum cannot shrink the ISR and go on acknowledging alone.
    /// An ISR that holds every target replica of a reassignment completes it in the same
    /// change (`MetadataImage::partition_change`): reassignments finish when their last
    /// replica catches up, as in Kafka, not when someone asks. Returns the registration
    /// committed (or the current one when it already has `isr`); FENCED_LEADER_EPOCH when the
    /// leadership moved meanwhile; INELIGIBLE_REPLICA when `isr` adds a fenced broker.
    pub async fn alter_partition(
        &self,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        isr: Vec<i32>,
    ) -> Result<PartitionRegistration> {
        let node = self.node_id;
        let min_isr_default = self.min_isr_default();
        let current = |image: &MetadataImage| -> Result<PartitionRegistration> {
            let topic = image.topic_by_id(&topic_id).ok_or(Error::UnknownTopicId(topic_id))?;
            let registration = topic.registration(partition);
            if registration.leader != node || registration.leader_epoch != leader_epoch {
                return Err(Error::FencedLeaderEpoch {
                    asked: leader_epoch,
                    current: registration.leader_epoch,
                });
            }
            Ok(registration)
        };
        if current(&self.image())?.isr == isr {
            return current(&self.image());
        }
        let image = self
            .commit_async(|image| {
                let mut next = current(image)?;
                if next.isr == isr {
                    return Err(Error::Stale("the ISR is already as asked".into()));
                }
                if let Some(ineligible) = image.ineligible_isr_member(&next.isr, &isr) {
                    let why = match image.is_log_dir_offline(ineligible) {
                        true => "its log directory is offline",
                        false => "it is fenced",
                    };
                    return Err(Error::IneligibleReplica(format!(
                        "broker {ineligible} cannot join the ISR of partition {partition} of {}: {why}",
                        image.topic_by_id(&topic_id).map_or("?", |t| t.name.as_str())
                    )));
                }
                next.isr = isr.clone();
                next.partition_epoch += 1;
                let topic = image.topic_by_id(&topic_id).ok_or(Error::UnknownTopicId(topic_id))?;
                let change =
                    image.partition_change(topic, partition, topic.replicas(partition).to_vec(), next, min_isr_default);
                if change.replicas.is_some() {
                    tracing::info!(topic = %topic.name, partition, replicas = ?change.replicas, leader = change.registration.leader, "reassignment complete");
                }
                Ok(MetadataRecord::ChangePartitions { changes: vec![change] })
            })
            .await;
        match image {
            // Committed: a completed reassignment may have moved the leadership or its epoch.
            Ok(image) => image
                .topic_by_id(&topic_id)
                .map(|topic| topic.registration(partition))
                .ok_or(Error::UnknownTopicId(topic_id)),
            Err(Error::Stale(_)) => current(&self.image()),
            Err(e) => Err(e),
        }
    }

    /// A leader whose storage fails (a full disk: every append refused) hands the partition
    /// over: the first other replica (in replica order) that is in the ISR and live leads at
    /// the next leader epoch, and this node leaves the ISR, to rejoin as a follower once it
    /// has caught up. Kafka reaches the same state by stopping the broker whose log directory
    /// failed. Only while this node leads at `leader_epoch` (FENCED_LEADER_EPOCH otherwise);
    /// Ok(None) when no other in-sync replica is live, and the partition stays here.
    pub async fn resign_leadership(
        &self,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
    ) -> Result<Option<PartitionRegistration>> {
        let node = self.node_id;
        let min_isr_default = self.min_isr_default();
        let plan = |image: &MetadataImage| -> Result<Option<PartitionRegistration>> {
            let topic = image.topic_by_id(&topic_id).ok_or(Error::UnknownTopicId(topic_id))?;
            let current = topic.registration(partition);
            if current.leader != node || current.leader_epoch != leader_epoch {
                return Err(Error::FencedLeaderEpoch {
                    asked: leader_epoch,
                    current: current.leader_epoch,
                });
            }
            let Some(&leader) = topic
                .replicas(partition)
                .iter()
                .find(|r| **r != node && current.isr.contains(r) && image.is_online(**r))
            else {
                return Ok(None);
            };
            let mut next = current.clone();
            next.leader = leader;
            next.isr.retain(|r| *r != node);
            next.leader_epoch += 1;
            next.partition_epoch += 1;
            track_elr(&current, &mut next, image.elr_min_isr(topic, min_isr_default));
            Ok(Some(next))
        };
        if plan(&self.image())?.is_none() {
            return Ok(None);
        }
        let image = self
            .commit_async(|image| {
                let next = plan(image)?.ok_or_else(|| Error::Stale("no other in-sync replica is live".into()))?;
                Ok(MetadataRecord::ChangePartitions {
                    changes: vec![PartitionChange {
                        topic: topic_id,
                        partition,
                        replicas: None,
                        registration: next,
                    }],
                })
            })
            .await;
        match image {
            Ok(image) => Ok(image.topic_by_id(&topic_id).map(|topic| topic.registration(partition))),
            Err(Error::Stale(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replaces a topic's config overrides (validated by the caller).
    pub fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<Arc<TopicInfo>> {
        let image = self.commit(|image| {
            let topic = image
                .topic(name)
                .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
            Ok(MetadataRecord::SetTopicConfigs {
                id: topic.id,
                configs: configs.clone(),
            })
        })?;
        image
            .topic(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))
    }

    /// Sets and removes SCRAM credentials in one record (validated by the caller).
    pub fn alter_scram_credentials(
        &self,
        set: Vec<ScramCredentialEntry>,
        remove: Vec<ScramCredentialKey>,
    ) -> Result<()> {
        self.commit(|_| {
            Ok(MetadataRecord::ScramCredentials {
                set: set.clone(),
                remove: remove.clone(),
            })
        })
        .map(|_| ())
    }

    /// Records the credentials `sluice format --add-scram` left for this node
    /// (`sasl::bootstrap`), but for users that hold a credential of that mechanism already
    /// (another node's format, or a change made since): true once none is missing.
    pub async fn bootstrap_scram_credentials(&self, entries: &[ScramCredentialEntry]) -> Result<()> {
        let missing = |image: &MetadataImage| -> Vec<ScramCredentialEntry> {
            entries
                .iter()
                .filter(|e| {
                    ScramMechanism::from_name(&e.mechanism)
                        .is_some_and(|m| image.scram_credential(&e.user, m).is_none())
                })
                .cloned()
                .collect()
        };
        if missing(&self.image()).is_empty() {
            return Ok(());
        }
        self.commit_async(|image| {
            Ok(MetadataRecord::ScramCredentials {
                set: missing(image),
                remove: Vec::new(),
            })
        })
        .await
        .map(|_| ())
    }

    /// Adds ACL bindings (validated by the caller); those in force already are not recorded
    /// again.
    pub async fn create_acls(&self, bindings: Vec<AclBinding>) -> Result<()> {
        if bindings.iter().all(|b| self.image().acls.contains(b)) {
            return Ok(());
        }
        self.commit_async(|image| {
            Ok(MetadataRecord::Acls {
                add: bindings.iter().filter(|b| !image.acls.contains(*b)).cloned().collect(),
                remove: Vec::new(),
            })
        })
        .await
        .map(|_| ())
    }

    /// Removes broker `id`'s registration (UnregisterBroker). A single node is its own only
    /// broker and records no registration: unregistering itself changes nothing, as a Kafka
    /// broker registers again within a heartbeat; any other id is not registered.
    pub async fn unregister_broker(&self, id: i32) -> Result<()> {
        if let Backend::Local(_) = &self.backend {
            return match id == self.node_id {
                true => Ok(()),
                false => Err(broker_not_registered(id)),
            };
        }
        self.commit_async(|image| match image.brokers.contains_key(&id) {
            true => Ok(MetadataRecord::UnregisterBroker { id }),
            false => Err(broker_not_registered(id)),
        })
        .await
        .map(|_| ())
    }

    /// Finalizes feature levels in one record (validated by the caller). Turning eligible
    /// leader replicas on first makes the broker configs safe for them (`ensure_elr_safety`),
    /// with `static_min_isr` as the cluster's `min.insync.replicas` if it has none.
    pub async fn update_features(&self, levels: BTreeMap<String, i16>, static_min_isr: i32) -> Result<()> {
        if levels.get(ELR_FEATURE).is_some_and(|&level| level >= 1) {
            self.ensure_elr_safety(static_min_isr).await?;
        }
        self.commit_async(|_| {
            Ok(MetadataRecord::SetFeatureLevels {
                levels: levels.clone(),
                epoch: None,
            })
        })
        .await
        .map(|_| ())
    }

    /// Writes the broker config changes eligible leader replicas need (Kafka's
    /// `maybeGenerateElrSafetyRecords`, `MetadataImage::elr_safety_targets`), each computed
    /// again from the image it is committed against. Nothing when they are in place.
    pub async fn ensure_elr_safety(&self, static_min_isr: i32) -> Result<()> {
        for node in self.image().elr_safety_targets() {
            let image = self
                .commit_async(|image| Ok(image.elr_safety_record(node, static_min_isr)))
                .await?;
            tracing::info!(
                layer = node.map_or("cluster default".to_string(), |n| format!("broker {n}")),
                min_insync_replicas = image.broker_default_configs.get(MIN_ISR).map(String::as_str),
                "eligible leader replicas: min.insync.replicas is set once, for the whole cluster"
            );
        }
        Ok(())
    }

    /// Sets and removes client quotas in one record (validated by the caller).
    pub async fn alter_client_quotas(&self, changes: Vec<crate::quota::QuotaChange>) -> Result<()> {
        self.commit_async(|_| {
            Ok(MetadataRecord::ClientQuotas {
                changes: changes.clone(),
            })
        })
        .await
        .map(|_| ())
    }

    /// Removes the ACL bindings each filter matches, in one record; answers what each removed.
    pub async fn delete_acls(&self, filters: &[AclFilter]) -> Result<Vec<Vec<AclBinding>>> {
        let matched = |image: &MetadataImage| -> Vec<Vec<AclBinding>> {
            filters
                .iter()
                .map(|f| image.acls.iter().filter(|b| f.matches(b)).cloned().collect())
                .collect()
        };
        let found = matched(&self.image());
        if found.iter().all(Vec::is_empty) {
            return Ok(found);
        }
        let removed = std::sync::Mutex::new(Vec::new());
        self.commit_async(|image| {
            let now = matched(image);
            let remove: std::collections::BTreeSet<AclBinding> = now.iter().flatten().cloned().collect();
            *removed.lock().unwrap_or_else(|p| p.into_inner()) = now;
            Ok(MetadataRecord::Acls {
                add: Vec::new(),
                remove: remove.into_iter().collect(),
            })
        })
        .await?;
        Ok(removed.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces a consumer group's config overrides (validated by the caller; the group need
    /// not exist, as in Kafka).
    pub fn set_group_configs(&self, group: &str, configs: BTreeMap<String, String>) -> Result<()> {
        self.commit(|_| {
            Ok(MetadataRecord::SetGroupConfigs {
                group: group.to_string(),
                configs: configs.clone(),
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
        update: impl Fn(&MetadataImage, &BTreeMap<String, String>) -> std::result::Result<BTreeMap<String, String>, E>,
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

    /// Grows a topic to `partitions`, the new ones placed by `manual` when given (one replica
    /// list per new partition); `validate_only` checks without changing anything.
    pub fn create_partitions(
        &self,
        name: &str,
        partitions: i32,
        manual: Option<&[Vec<i32>]>,
        validate_only: bool,
    ) -> Result<Arc<TopicInfo>> {
        let check = |image: &MetadataImage| -> Result<Arc<TopicInfo>> {
            let topic = image
                .topic(name)
                .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
            if partitions <= topic.partitions {
                return Err(Error::InvalidPartitions(partitions));
            }
            if let Some(manual) = manual {
                self.check_manual(image, manual)?;
                let factor = usize::try_from(topic.current_replication_factor()).unwrap_or(0);
                if matches!(self.backend, Backend::Quorum(_))
                    && let Some(odd) = manual.iter().find(|replicas| replicas.len() != factor)
                {
                    return Err(Error::InvalidReplicaAssignment(format!(
                        "a new partition has {} replica(s), the topic's partitions have {factor}",
                        odd.len()
                    )));
                }
            }
            Ok(topic.clone())
        };
        if validate_only {
            return check(&self.image());
        }
        let image = self.commit(|image| {
            let topic = check(image)?;
            let assignments = match manual {
                Some(manual) => self.check_manual(image, manual)?,
                None => self.place(
                    image,
                    partitions - topic.partitions,
                    topic.current_replication_factor(),
                    topic.partitions,
                )?,
            };
            Ok(MetadataRecord::CreatePartitions {
                id: topic.id,
                partitions,
                assignments,
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
    use kafka_protocol::error::ResponseError;

    #[test]
    fn placement_never_puts_two_replicas_of_a_partition_on_one_broker() {
        // Kafka's replicaIndex: followers at 1 + (shift + j) % (n - 1) after the leader. A
        // factor equal to the broker count (the internal topics' 3 on 3 nodes) once put the
        // leader in its own follower list.
        for n in 1..=5 {
            let mut image = MetadataImage::default();
            for id in 1..=n {
                image
                    .brokers
                    .insert(id, Arc::new(BrokerInfo::new(id, "localhost", 9092)));
            }
            for rf in 1..=i16::try_from(n).unwrap() {
                for start in 0..12 {
                    let placed = place_replicas(&image, 12, rf, 0, start).unwrap();
                    for (p, replicas) in placed.iter().enumerate() {
                        let mut distinct = replicas.clone();
                        distinct.sort_unstable();
                        distinct.dedup();
                        assert_eq!(
                            distinct.len(),
                            usize::try_from(rf).unwrap(),
                            "n {n} start {start} p {p}: {replicas:?}"
                        );
                    }
                }
            }
        }
    }

    /// Brokers 1..=3 and topic "t" with one partition on `replicas`.
    fn image_with(replicas: Vec<i32>) -> MetadataImage {
        let mut image = MetadataImage::default();
        for id in 1..=3 {
            image
                .brokers
                .insert(id, Arc::new(BrokerInfo::new(id, "localhost", 9092)));
        }
        image.apply(&MetadataRecord::CreateTopic {
            name: "t".into(),
            id: Uuid::new_v4(),
            partitions: 1,
            replication_factor: i16::try_from(replicas.len()).unwrap(),
            configs: BTreeMap::new(),
            leader: replicas[0],
            leader_epoch: 0,
            assignments: vec![replicas],
        });
        image
    }

    /// Checks `change` as the quorum's leader does, then applies it.
    fn commit(image: &mut MetadataImage, change: PartitionChange) {
        let record = MetadataRecord::ChangePartitions { changes: vec![change] };
        image.check(&record).unwrap();
        image.apply(&record);
    }

    /// The leader's ISR change (AlterPartition) as `Controller::alter_partition` computes it.
    fn isr_becomes(image: &MetadataImage, isr: Vec<i32>) -> PartitionChange {
        let topic = image.topic("t").unwrap();
        let mut next = topic.registration(0);
        next.isr = isr;
        next.partition_epoch += 1;
        image.partition_change(topic, 0, topic.replicas(0).to_vec(), next, 1)
    }

    fn reassign(image: &MetadataImage, target: Option<&[i32]>) -> Result<Option<PartitionChange>> {
        image.reassignment(image.topic("t").unwrap(), 0, target, true, 1)
    }

    #[test]
    fn a_move_keeps_both_replica_sets_until_the_target_is_in_sync() {
        // Kafka's PartitionReassignmentReplicas: [1] to [3] is replicas [3, 1] (the target,
        // then the replicas leaving), adding [3], removing [1], the leader and ISR unchanged.
        let mut image = image_with(vec![1]);
        let change = reassign(&image, Some(&[3])).unwrap().unwrap();
        assert_eq!(change.replicas, Some(vec![3, 1]));
        let r = &change.registration;
        assert_eq!((r.leader, r.leader_epoch, r.isr.clone()), (1, 0, vec![1]));
        assert_eq!(
            (r.adding_replicas.clone(), r.removing_replicas.clone()),
            (vec![3], vec![1])
        );
        commit(&mut image, change);
        assert_eq!(image.topic("t").unwrap().replicas(0), [3, 1]);
        assert_eq!(image.reassignments(image.topic("t").unwrap(), None).len(), 1);
        // Asked again for the same target: nothing to change.
        assert_eq!(reassign(&image, Some(&[3])).unwrap(), None);
        // Another target meanwhile: 3, still being added, stays an adding replica.
        let both = reassign(&image, Some(&[3, 1])).unwrap().unwrap();
        assert_eq!(both.replicas, None);
        let r = &both.registration;
        assert_eq!(
            (r.adding_replicas.clone(), r.removing_replicas.clone()),
            (vec![3], vec![])
        );

        // The ISR change that brings 3 in completes it: 3 alone, leading at a new epoch.
        let done = isr_becomes(&image, vec![1, 3]);
        assert_eq!(done.replicas, Some(vec![3]));
        let r = &done.registration;
        assert_eq!((r.leader, r.leader_epoch, r.isr.clone()), (3, 1, vec![3]));
        assert!(!r.is_reassigning());
        commit(&mut image, done);
        assert!(image.reassignments(image.topic("t").unwrap(), None).is_empty());
    }

    #[test]
    fn a_growing_partition_completes_when_its_last_new_replica_is_in_sync() {
        let mut image = image_with(vec![1]);
        let change = reassign(&image, Some(&[1, 2, 3])).unwrap().unwrap();
        assert_eq!(change.replicas, Some(vec![1, 2, 3]));
        assert_eq!(change.registration.adding_replicas, vec![2, 3]);
        commit(&mut image, change);
        let half = isr_becomes(&image, vec![1, 2]);
        assert!(half.registration.is_reassigning(), "3 is not in sync yet: {half:?}");
        commit(&mut image, half);
        let done = isr_becomes(&image, vec![1, 2, 3]);
        // Nobody leaves: the same replicas, leader and leader epoch.
        assert_eq!(done.replicas, None);
        let r = &done.registration;
        assert_eq!((r.leader, r.leader_epoch, r.is_reassigning()), (1, 0, false));
        commit(&mut image, done);
    }

    #[test]
    fn a_target_already_in_sync_completes_at_once() {
        // Dropping a replica needs nobody to catch up: one change, replicas leaving fenced
        // by a new leader epoch.
        let image = image_with(vec![1, 2, 3]);
        let change = reassign(&image, Some(&[2, 3])).unwrap().unwrap();
        assert_eq!(change.replicas, Some(vec![2, 3]));
        let r = &change.registration;
        assert_eq!((r.leader, r.leader_epoch, r.isr.clone()), (2, 1, vec![2, 3]));
        assert!(!r.is_reassigning());
    }

    #[test]
    fn a_cancel_drops_the_adding_replicas_and_keeps_the_removing_ones() {
        let mut image = image_with(vec![1, 2]);
        assert_eq!(
            reassign(&image, None).unwrap_err().code(),
            ResponseError::NoReassignmentInProgress.code()
        );
        let start = reassign(&image, Some(&[2, 3])).unwrap().unwrap();
        commit(&mut image, start);
        assert_eq!(image.topic("t").unwrap().replicas(0), [2, 3, 1]);
        let cancel = reassign(&image, None).unwrap().unwrap();
        // Kafka's revert keeps the union's order: [2, 1].
        assert_eq!(cancel.replicas, Some(vec![2, 1]));
        let r = &cancel.registration;
        assert_eq!((r.leader, r.isr.clone(), r.is_reassigning()), (1, vec![1, 2], false));
        assert_eq!(r.leader_epoch, 1, "replica 3 left: the epoch moves");
        commit(&mut image, cancel);
    }

    #[test]
    fn invalid_targets_get_kafkas_codes() {
        let image = image_with(vec![1]);
        let code = |target: &[i32], allow: bool| {
            image
                .reassignment(image.topic("t").unwrap(), 0, Some(target), allow, 1)
                .unwrap_err()
                .code()
        };
        for bad in [&[][..], &[1, 1], &[1, 9]] {
            assert_eq!(
                code(bad, true),
                ResponseError::InvalidReplicaAssignment.code(),
                "{bad:?}"
            );
        }
        assert_eq!(code(&[1, 2], false), ResponseError::InvalidReplicationFactor.code());
        assert_eq!(
            image
                .reassignment(image.topic("t").unwrap(), 1, Some(&[1]), true, 1)
                .unwrap_err()
                .code(),
            ResponseError::UnknownTopicOrPartition.code()
        );
    }

    #[test]
    fn partition_changes_written_before_reassignments_still_decode() {
        let old = r#"{"type":"ChangePartitions","changes":[{"topic":"00000000-0000-0000-0000-000000000001","partition":0,"leader":2,"leader_epoch":3,"isr":[2,3],"partition_epoch":4}]}"#;
        let MetadataRecord::ChangePartitions { changes } = serde_json::from_str(old).unwrap() else {
            panic!("not a partition change");
        };
        assert_eq!(changes[0].replicas, None);
        assert!(!changes[0].registration.is_reassigning());
        let image = image_with(vec![1]);
        let change = reassign(&image, Some(&[3])).unwrap().unwrap();
        let record = MetadataRecord::ChangePartitions { changes: vec![change] };
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<MetadataRecord>(&text).unwrap(), record);
    }

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
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
        let cluster_id = c.image().cluster_id.clone();
        let t = c
            .create_topic("a", 3, 1, BTreeMap::from([("segment.bytes".into(), "1024".into())]))
            .unwrap();
        c.create_topic("b", 1, 1, BTreeMap::new()).unwrap();
        c.create_partitions("a", 5, None, false).unwrap();
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
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
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
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
        let configs = BTreeMap::from([("consumer.session.timeout.ms".to_string(), "50000".to_string())]);
        c.set_group_configs("g1", configs.clone()).unwrap();
        c.set_group_configs("g2", configs.clone()).unwrap();
        c.set_group_configs("g2", BTreeMap::new()).unwrap();
        drop(c);
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
        let image = c.image();
        assert_eq!(image.group_configs.get("g1").map(|c| (**c).clone()), Some(configs));
        assert!(!image.group_configs.contains_key("g2"));
    }

    #[test]
    fn broker_config_layers_survive_reopen_and_an_empty_set_removes_one() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
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
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
        let (cluster, node) = c.image().broker_config_layers(1);
        assert_eq!(((*cluster).clone(), (*node).clone()), (default, own));
        assert!(!c.image().broker_configs.contains_key(&2));
    }

    #[tokio::test]
    async fn producer_ids_are_never_reissued_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
        let mut first = Vec::new();
        for _ in 0..3 {
            first.push(c.allocate_producer_id().await.unwrap());
        }
        assert_eq!(first, vec![0, 1, 2]);
        drop(c);
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
        // The rest of the first block is lost, never reused.
        assert_eq!(c.allocate_producer_id().await.unwrap(), PRODUCER_ID_BLOCK_SIZE);
        for _ in 0..PRODUCER_ID_BLOCK_SIZE {
            c.allocate_producer_id().await.unwrap();
        }
        assert_eq!(c.allocate_producer_id().await.unwrap(), 2 * PRODUCER_ID_BLOCK_SIZE + 1);
    }

    #[test]
    fn a_broker_whose_log_directory_is_offline_leads_only_when_no_other_can_and_leaves_isrs() {
        let mut image = MetadataImage::default();
        for id in 1..=3 {
            image
                .brokers
                .insert(id, Arc::new(BrokerInfo::new(id, "localhost", 9092)));
        }
        let set = |image: &mut MetadataImage, id: i32, fenced: bool, offline: bool| {
            let broker = Arc::make_mut(image.brokers.get_mut(&id).unwrap());
            broker.fenced = fenced;
            broker.log_dir_offline = offline;
        };
        let registration = |leader: i32, isr: &[i32]| PartitionRegistration {
            leader,
            leader_epoch: 5,
            isr: isr.to_vec(),
            partition_epoch: 7,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        };
        let replicas = [1, 2, 3];
        let elect = |image: &MetadataImage, current: PartitionRegistration| {
            image
                .elect(&replicas, &current, false, None)
                .map(|r| (r.leader, r.isr, r.leader_epoch, r.partition_epoch))
        };
        set(&mut image, 1, false, true);
        // The leader's directory failed: the next online in-sync replica leads, without it.
        assert_eq!(elect(&image, registration(1, &[1, 2, 3])), Some((2, vec![2, 3], 6, 8)));
        // A follower's failed: it leaves the ISR, the leader and its epoch stay.
        assert_eq!(elect(&image, registration(2, &[1, 2, 3])), Some((2, vec![2, 3], 5, 8)));
        // The only replica in sync: it keeps leading (it serves reads) ...
        assert_eq!(elect(&image, registration(1, &[1])), None);
        // ... or, with no leader, leads again; an in-sync online replica goes first.
        assert_eq!(elect(&image, registration(-1, &[1])), Some((1, vec![1], 6, 8)));
        assert_eq!(elect(&image, registration(-1, &[1, 3])), Some((3, vec![3], 6, 8)));
        // Fenced and offline in-sync replicas, no online one: the leader stays with the ISR of
        // itself.
        set(&mut image, 3, true, false);
        assert_eq!(elect(&image, registration(1, &[1, 3])), Some((1, vec![1], 5, 8)));
        set(&mut image, 3, false, false);
        // It may not join an ISR, nor be elected preferred leader, nor get new replicas.
        assert_eq!(image.ineligible_isr_member(&[2], &[2, 1]), Some(1));
        assert_eq!(image.ineligible_isr_member(&[1, 2], &[1, 2, 3]), None, "1 may stay");
        let mut topic = TopicInfo {
            name: "t".into(),
            id: Uuid::nil(),
            partitions: 1,
            replication_factor: 3,
            configs: BTreeMap::new(),
            leader_epoch: 0,
            assignments: vec![vec![1, 2, 3]],
            registrations: OrdMap::new(),
        };
        topic.registrations.insert(0, Arc::new(registration(2, &[1, 2, 3])));
        assert!(matches!(
            image.requested_election(&topic, 0, true, 1),
            Err(Error::PreferredLeaderNotAvailable(_))
        ));
        assert_eq!(image.placeable_brokers().map(|b| b.id).collect::<Vec<_>>(), vec![2, 3]);
        // Back online: everything as before.
        set(&mut image, 1, false, false);
        assert_eq!(elect(&image, registration(2, &[1, 2, 3])), None);
        assert_eq!(image.ineligible_isr_member(&[2], &[2, 1]), None);
        assert_eq!(
            image.requested_election(&topic, 0, true, 1).map(|r| r.leader).ok(),
            Some(1)
        );
    }

    /// One round of the controller's elections (`elections`), committed as the quorum does.
    fn elect_all(image: &mut MetadataImage, min_isr_default: i32) {
        for change in image.elections(false, min_isr_default) {
            commit(image, change);
        }
    }

    fn fence(image: &mut MetadataImage, id: i32, fenced: bool) {
        Arc::make_mut(image.brokers.get_mut(&id).unwrap()).fenced = fenced;
    }

    /// "t" on brokers 1 and 2 with min ISR 2: 2 is fenced, then the leader 1. Both are in the
    /// ELR, 1 the last known leader.
    fn both_gone_at_min_isr_2() -> MetadataImage {
        let mut image = image_with(vec![1, 2]);
        fence(&mut image, 2, true);
        elect_all(&mut image, 2);
        fence(&mut image, 1, true);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image), (-1, vec![], vec![1, 2], vec![1]));
        image
    }

    /// Leader, ISR, ELR and last known ELR of partition 0 of "t".
    fn elr_state(image: &MetadataImage) -> (i32, Vec<i32>, Vec<i32>, Vec<i32>) {
        let r = image.topic("t").unwrap().registration(0);
        (r.leader, r.isr, r.elr, r.last_known_elr)
    }

    #[test]
    fn eligible_leader_replicas_lead_once_the_isr_is_gone() {
        // KIP-966 as Kafka 4.1 runs it by default: min.insync.replicas 2 over 3 replicas.
        let mut image = image_with(vec![1, 2, 3]);
        assert!(image.elr_enabled(), "on by default, as on a new Kafka 4.1 cluster");
        fence(&mut image, 3, true);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image), (1, vec![1, 2], vec![], vec![]), "at min ISR: no ELR");
        fence(&mut image, 2, true);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image), (1, vec![1], vec![2], vec![]), "2 left below min ISR");
        // The leader goes too: the ISR empties, its members join the ELR.
        fence(&mut image, 1, true);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image), (-1, vec![], vec![1, 2], vec![1]));
        let epoch = image.topic("t").unwrap().registration(0).leader_epoch;
        // 3 left at min ISR: it may lack what 1 and 2 acknowledged, and does not lead.
        fence(&mut image, 3, false);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image).0, -1);
        // 2 is back: it holds everything below the high watermark, and leads.
        fence(&mut image, 2, false);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image), (2, vec![2], vec![1], vec![]));
        assert_eq!(image.topic("t").unwrap().registration(0).leader_epoch, epoch + 1);
        // 3 catches up and joins: the ISR is at min ISR again and the ELR clears.
        let joined = isr_becomes(&image, vec![2, 3]);
        commit(&mut image, joined);
        assert_eq!(elr_state(&image), (2, vec![2, 3], vec![], vec![]));
    }

    #[test]
    fn without_eligible_leader_replicas_the_isr_keeps_its_last_member() {
        let mut image = image_with(vec![1, 2, 3]);
        image.apply(&MetadataRecord::SetFeatureLevels {
            levels: BTreeMap::from([(ELR_FEATURE.to_string(), 0)]),
            epoch: Some(10),
        });
        assert!(!image.elr_enabled());
        for id in [3, 2, 1] {
            fence(&mut image, id, true);
            elect_all(&mut image, 2);
        }
        assert_eq!(elr_state(&image), (-1, vec![1], vec![], vec![]));
        fence(&mut image, 2, false);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image).0, -1, "2 is not in the ISR");
        fence(&mut image, 1, false);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image), (1, vec![1], vec![], vec![]));
    }

    #[test]
    fn a_changed_min_isr_clears_the_elr_and_the_last_leader_may_lead_again() {
        let mut image = both_gone_at_min_isr_2();
        let id = image.topic("t").unwrap().id;
        image.apply(&MetadataRecord::SetTopicConfigs {
            id,
            configs: BTreeMap::from([("min.insync.replicas".to_string(), "1".to_string())]),
        });
        assert_eq!(
            elr_state(&image),
            (-1, vec![], vec![], vec![1]),
            "Kafka's ClearElrRecord"
        );
        fence(&mut image, 2, false);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image).0, -1, "2 may lack what 1 acknowledged alone");
        // The last leader is back: it leads (Kafka counts it unclean), and its ISR is itself.
        fence(&mut image, 1, false);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image), (1, vec![1], vec![], vec![]));
    }

    #[test]
    fn an_unclean_restart_ends_eligibility_where_acknowledged_writes_were_not_fsynced() {
        let register = |id: i32, unclean_restart: Option<i64>| MetadataRecord::RegisterBroker {
            id,
            host: "localhost".into(),
            port: 9092,
            rack: None,
            listeners: Vec::new(),
            cordoned: false,
            unclean_restart,
        };
        let mut image = both_gone_at_min_isr_2();
        // A clean restart, or an unclean one of a broker that fsyncs every message: eligible.
        for restart in [None, Some(1)] {
            let mut after = image.clone();
            after.apply(&register(2, restart));
            assert_eq!(elr_state(&after).2, vec![1, 2], "{restart:?}");
        }
        // Its static flush interval above 1, or a dynamic layer's, or the topic's: not.
        let mut after = image.clone();
        after.apply(&register(2, Some(1000)));
        assert_eq!(elr_state(&after), (-1, vec![], vec![1], vec![1]));
        let interval = |value: &str| BTreeMap::from([("log.flush.interval.messages".to_string(), value.to_string())]);
        let mut after = image.clone();
        after.apply(&MetadataRecord::SetBrokerConfigs {
            node: None,
            configs: interval("1000"),
        });
        after.apply(&register(1, Some(1)));
        assert_eq!(elr_state(&after), (-1, vec![], vec![2], vec![]), "from both lists");
        let mut after = image.clone();
        after.apply(&MetadataRecord::SetBrokerConfigs {
            node: Some(2),
            configs: interval("1"),
        });
        after.apply(&MetadataRecord::SetBrokerConfigs {
            node: None,
            configs: interval("1000"),
        });
        after.apply(&register(2, Some(1000)));
        assert_eq!(elr_state(&after).2, vec![1, 2], "its own layer says 1");
        let id = image.topic("t").unwrap().id;
        image.apply(&MetadataRecord::SetTopicConfigs {
            id,
            configs: BTreeMap::from([("flush.messages".to_string(), "1000".to_string())]),
        });
        image.apply(&register(2, Some(1)));
        assert_eq!(
            elr_state(&image),
            (-1, vec![], vec![1], vec![1]),
            "the topic's flush.messages"
        );
        // The last leader is back, eligible: it leads.
        fence(&mut image, 1, false);
        elect_all(&mut image, 2);
        assert_eq!(elr_state(&image).0, 1);
    }

    #[test]
    fn eligible_leader_replicas_get_one_min_isr_for_the_cluster() {
        let layer = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let mut image = MetadataImage::default();
        assert!(image.elr_enabled(), "on by default, as on a new Kafka 4.1 cluster");
        image.apply(&MetadataRecord::SetBrokerConfigs {
            node: Some(2),
            configs: layer(&[(MIN_ISR, "3"), ("log.retention.ms", "1")]),
        });
        image.apply(&MetadataRecord::SetBrokerConfigs {
            node: Some(3),
            configs: layer(&[("log.retention.ms", "2")]),
        });
        assert_eq!(image.elr_safety_targets(), vec![None, Some(2)]);
        for node in image.elr_safety_targets() {
            let record = image.elr_safety_record(node, 2);
            image.apply(&record);
        }
        assert!(image.elr_safety_targets().is_empty(), "nothing more to write");
        assert_eq!(*image.broker_default_configs, layer(&[(MIN_ISR, "2")]));
        assert_eq!(*image.broker_configs[&2], layer(&[("log.retention.ms", "1")]));
        // A cluster value already set is kept, whatever the static one.
        assert!(matches!(
            image.elr_safety_record(None, 5),
            MetadataRecord::SetBrokerConfigs { configs, .. } if configs == layer(&[(MIN_ISR, "2")])
        ));

        let cluster = layer(&[(MIN_ISR, "2")]);
        let empty = BTreeMap::new();
        assert!(
            image
                .elr_config_refusal(Some(2), &empty, &layer(&[(MIN_ISR, "2")]))
                .is_some()
        );
        assert!(image.elr_config_refusal(None, &cluster, &empty).is_some());
        assert!(
            image
                .elr_config_refusal(None, &cluster, &layer(&[(MIN_ISR, "3")]))
                .is_none()
        );
        assert!(
            image
                .elr_config_refusal(Some(2), &empty, &layer(&[("log.retention.ms", "1")]))
                .is_none()
        );
        image.apply(&MetadataRecord::SetFeatureLevels {
            levels: BTreeMap::from([(ELR_FEATURE.to_string(), 0)]),
            epoch: None,
        });
        assert!(
            image
                .elr_config_refusal(Some(2), &empty, &layer(&[(MIN_ISR, "2")]))
                .is_none()
        );
        assert!(image.elr_config_refusal(None, &cluster, &empty).is_none());
    }

    #[test]
    fn an_empty_isr_is_valid_only_without_a_leader_and_the_elr_is_outside_it() {
        let image = image_with(vec![1, 2, 3]);
        let topic = image.topic("t").unwrap();
        let change = |leader: i32, isr: Vec<i32>, elr: Vec<i32>| {
            let mut registration = topic.registration(0);
            registration.leader = leader;
            registration.isr = isr;
            registration.elr = elr;
            registration.partition_epoch += 1;
            MetadataRecord::ChangePartitions {
                changes: vec![PartitionChange {
                    topic: topic.id,
                    partition: 0,
                    replicas: None,
                    registration,
                }],
            }
        };
        assert!(image.check(&change(-1, vec![], vec![1, 2])).is_ok());
        assert!(image.check(&change(1, vec![], vec![2])).is_err());
        assert!(image.check(&change(1, vec![1], vec![1])).is_err());
        assert!(image.check(&change(1, vec![1], vec![4])).is_err());
    }

    #[test]
    fn a_fenced_broker_cannot_join_an_isr() {
        let mut image = MetadataImage::default();
        for id in 1..=3 {
            image
                .brokers
                .insert(id, Arc::new(BrokerInfo::new(id, "localhost", 9092)));
        }
        let mut fenced = BrokerInfo::new(2, "localhost", 9092);
        fenced.fenced = true;
        image.brokers.insert(2, Arc::new(fenced));
        assert_eq!(image.ineligible_isr_member(&[1], &[1, 2]), Some(2));
        assert_eq!(image.ineligible_isr_member(&[1], &[1, 3, 2]), Some(2));
        assert_eq!(image.ineligible_isr_member(&[1], &[1, 3]), None);
        assert_eq!(image.ineligible_isr_member(&[1, 2], &[1, 2, 3]), None, "2 may stay");
        assert_eq!(
            image.ineligible_isr_member(&[1], &[1, 4]),
            Some(4),
            "4 is not registered"
        );
    }

    #[test]
    fn invalid_creates_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = Controller::open(dir.path(), crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap();
        c.create_topic("a.b", 1, 1, BTreeMap::new()).unwrap();
        assert_eq!(c.create_topic("a.b", 1, 1, BTreeMap::new()).unwrap_err().code(), 36);
        assert_eq!(c.create_topic("a_b", 1, 1, BTreeMap::new()).unwrap_err().code(), 17);
        assert_eq!(c.create_topic("c", 0, 1, BTreeMap::new()).unwrap_err().code(), 37);
        assert_eq!(c.create_topic("c", 1, 2, BTreeMap::new()).unwrap_err().code(), 38);
        assert_eq!(c.create_partitions("a.b", 1, None, false).unwrap_err().code(), 37);
    }
}
