//! The state machine of the metadata quorum: the `MetadataImage`, built by
//! `MetadataImage::apply` from committed records, and published on a `watch` after each apply
//! (the broker subscribes as it does to the single-node `Controller`).
//!
//! The image is kept in memory only; what survives a restart is the latest snapshot plus the
//! log after it, which openraft replays. A snapshot is the image written as the records that
//! rebuild it (`MetadataImage::to_records`), with the image offset (records applied so far,
//! which the rebuilt image takes over so that offsets keep growing), the last applied log id
//! and the membership: `SnapshotContents`, serde_json. The same bytes are what openraft sends
//! a follower that is behind the leader's purged log, and what `snapshot` holds on disk in a
//! CRC32C frame, replaced atomically and durably before openraft may purge the log up to it.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::disk;
use super::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};
use crate::cluster::{MetadataImage, MetadataRecord};
use crate::error::Result;

const SNAPSHOT_FILE: &str = "snapshot";
/// A snapshot holds the whole image: 10,000 topics make a few MB; past this it is corruption.
pub(super) const SNAPSHOT_BYTES_MAX: usize = 1 << 30;

/// What a snapshot holds (serde_json).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct SnapshotContents {
    pub(super) snapshot_id: String,
    pub(super) last_applied: Option<LogId>,
    pub(super) membership: StoredMembership,
    /// The image's offset: how many records were applied to reach it.
    pub(super) offset: i64,
    pub(super) records: Vec<MetadataRecord>,
}

impl SnapshotContents {
    fn meta(&self) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id: self.snapshot_id.clone(),
        }
    }

    /// The image these contents describe, on top of `base` (cluster id and node id).
    fn image(&self, base: &MetadataImage) -> MetadataImage {
        let mut image = base.clone();
        for record in &self.records {
            image.apply(record);
        }
        image.offset = self.offset;
        image
    }

    fn parse(bytes: &[u8], path: &Path) -> Result<SnapshotContents> {
        serde_json::from_slice(bytes).map_err(|e| disk::corrupt(path, format!("snapshot: {e}")))
    }
}

/// The persisted snapshot, shared by the state machine and its snapshot builders.
struct SnapshotFile {
    path: PathBuf,
    /// The current snapshot: its contents and their serialized bytes (what openraft sends).
    current: Mutex<Option<(SnapshotContents, Vec<u8>)>>,
}

impl SnapshotFile {
    /// Replaces the persisted snapshot by `bytes` unless it is older than the current one (a
    /// build that started before a snapshot was installed). Blocking.
    fn save(&self, contents: SnapshotContents, bytes: Vec<u8>) -> Result<()> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current
            .as_ref()
            .is_some_and(|(c, _)| c.last_applied > contents.last_applied)
        {
            return Ok(());
        }
        let mut frame = Vec::new();
        disk::encode_frame(&bytes, &mut frame)?;
        disk::replace_file(&self.path, &frame, true)?;
        *current = Some((contents, bytes));
        Ok(())
    }

    fn current(&self) -> Option<(SnapshotContents, Vec<u8>)> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The state machine openraft drives (`RaftStateMachine`): one per node.
pub(crate) struct StateMachine {
    /// An empty image with this node's cluster id and node id, which snapshots build on.
    base: MetadataImage,
    image: Arc<MetadataImage>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    images: Arc<watch::Sender<Arc<MetadataImage>>>,
    snapshot: Arc<SnapshotFile>,
    /// Snapshots refused by a full disk wait for space instead of stopping the raft.
    full_disk: disk::FullDiskWait,
}

impl StateMachine {
    /// Snapshots wait out a full disk with `wait` (the log store's, which the quorum stops).
    pub(crate) fn wait_out_full_disk(&mut self, wait: disk::FullDiskWait) {
        self.full_disk = wait;
    }

    /// Loads the persisted snapshot of `dir`, if any. Blocking.
    pub(crate) fn open(dir: &Path, base: MetadataImage) -> Result<StateMachine> {
        crate::log::checkpoint::create_dir_durably(dir)?;
        let path = dir.join(SNAPSHOT_FILE);
        disk::remove_stale_temp(&path)?;
        // Written whole and renamed: a bad frame here is a damaged disk, not a torn write, and
        // the log it replaced may be purged. Refuse to start rather than forget metadata.
        let current = match disk::read_if_exists(&path)? {
            None => None,
            Some(frame) => {
                let (bytes, len) = disk::decode_frame(&frame, SNAPSHOT_BYTES_MAX)
                    .ok_or_else(|| disk::corrupt(&path, "snapshot frame fails its length or CRC"))?;
                if len != frame.len() {
                    return Err(disk::corrupt(&path, "bytes after the snapshot frame"));
                }
                Some((SnapshotContents::parse(bytes, &path)?, bytes.to_vec()))
            }
        };
        let (image, last_applied, membership) = match &current {
            Some((contents, _)) => (
                contents.image(&base),
                contents.last_applied,
                contents.membership.clone(),
            ),
            None => (base.clone(), None, StoredMembership::default()),
        };
        let image = Arc::new(image);
        Ok(StateMachine {
            base,
            image: image.clone(),
            last_applied,
            membership,
            images: Arc::new(watch::Sender::new(image)),
            snapshot: Arc::new(SnapshotFile {
                path,
                current: Mutex::new(current),
            }),
            full_disk: disk::FullDiskWait::default(),
        })
    }

    /// The channel the committed images are published on.
    pub(crate) fn images(&self) -> Arc<watch::Sender<Arc<MetadataImage>>> {
        self.images.clone()
    }
}

/// Builds a snapshot of the state machine as it was when the builder was taken.
pub(crate) struct SnapshotBuilder {
    image: Arc<MetadataImage>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: Arc<SnapshotFile>,
    full_disk: disk::FullDiskWait,
}

fn snapshot_error(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_snapshot(None, AnyError::new(&e)).into()
}

fn join_error(e: tokio::task::JoinError) -> StorageError {
    StorageIOError::write_snapshot(None, AnyError::new(&e)).into()
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> std::result::Result<Snapshot<TypeConfig>, StorageError> {
        let snapshot_id = match self.last_applied {
            Some(id) => format!("{}-{}-{}", id.leader_id.term, id.index, self.image.offset),
            None => format!("0-0-{}", self.image.offset),
        };
        let contents = SnapshotContents {
            snapshot_id,
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            offset: self.image.offset,
            records: self.image.to_records(),
        };
        let bytes = serde_json::to_vec(&contents).map_err(snapshot_error)?;
        if bytes.len() > SNAPSHOT_BYTES_MAX {
            return Err(snapshot_error(std::io::Error::other(format!(
                "a snapshot of {} bytes exceeds {SNAPSHOT_BYTES_MAX}",
                bytes.len()
            ))));
        }
        let meta = contents.meta();
        let file = self.snapshot.clone();
        let data = bytes.clone();
        // Durable before openraft learns of it: it may purge the log up to it.
        let dir = self.snapshot.path.parent().map(Path::to_path_buf).unwrap_or_default();
        self.full_disk
            .run(&dir, move || file.save(contents.clone(), bytes.clone()))
            .await
            .map_err(snapshot_error)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> std::result::Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> std::result::Result<Vec<i64>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut responses = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(record) => Arc::make_mut(&mut self.image).apply(&record),
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                }
            }
            responses.push(self.image.offset);
        }
        // One image per batch: the subscriber wants the latest, not each step.
        if !responses.is_empty() {
            self.images.send_replace(self.image.clone());
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            image: self.image.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshot: self.snapshot.clone(),
            full_disk: self.full_disk.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> std::result::Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> std::result::Result<(), StorageError> {
        let bytes = snapshot.into_inner();
        let path = self.snapshot.path.clone();
        let invalid = |why: String| -> StorageError {
            let e = disk::corrupt(&path, why);
            StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e)).into()
        };
        if bytes.len() > SNAPSHOT_BYTES_MAX {
            return Err(invalid(format!("a received snapshot of {} bytes", bytes.len())));
        }
        let contents = SnapshotContents::parse(&bytes, &path).map_err(|e| invalid(e.to_string()))?;
        if contents.last_applied != meta.last_log_id || contents.membership != meta.last_membership {
            return Err(invalid(format!(
                "snapshot {} holds {:?}, its meta says {:?}",
                meta.snapshot_id, contents.last_applied, meta.last_log_id
            )));
        }
        let image = Arc::new(contents.image(&self.base));
        let file = self.snapshot.clone();
        let to_save = contents.clone();
        tokio::task::spawn_blocking(move || file.save(to_save, bytes))
            .await
            .map_err(join_error)?
            .map_err(snapshot_error)?;
        self.image = image;
        self.last_applied = contents.last_applied;
        self.membership = contents.membership;
        self.images.send_replace(self.image.clone());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> std::result::Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.snapshot.current().map(|(contents, bytes)| Snapshot {
            meta: contents.meta(),
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use openraft::CommittedLeaderId;
    use uuid::Uuid;

    use super::*;

    /// What two images must share to be the same metadata: the records that rebuild each and
    /// the offset.
    pub(in crate::cluster::raft) fn fingerprint(image: &MetadataImage) -> (i64, Vec<MetadataRecord>) {
        (image.offset, image.to_records())
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// One record of each kind, changing what earlier ones made.
    pub(in crate::cluster::raft) fn every_kind_of_record() -> Vec<MetadataRecord> {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let create = |name: &str, id| MetadataRecord::CreateTopic {
            name: name.to_string(),
            id,
            partitions: 3,
            replication_factor: 1,
            configs: configs(&[("cleanup.policy", "compact")]),
            leader: 1,
            leader_epoch: 0,
            assignments: Vec::new(),
        };
        vec![
            MetadataRecord::SetClusterId {
                id: "q1ClusterId-AAAAAAAAAA".into(),
            },
            MetadataRecord::RegisterBroker {
                id: 1,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: Some("r1".into()),
                listeners: Vec::new(),
                cordoned: true,
                unclean_restart: None,
            },
            MetadataRecord::RegisterBroker {
                id: 2,
                host: "127.0.0.1".into(),
                port: 9192,
                rack: None,
                listeners: Vec::new(),
                cordoned: false,
                unclean_restart: None,
            },
            MetadataRecord::SetBrokerFenced { id: 2, fenced: true },
            MetadataRecord::SetBrokerLogDirOffline { id: 1, offline: true },
            create("orders.v1", a),
            create("doomed", b),
            MetadataRecord::CreatePartitions {
                id: a,
                partitions: 8,
                assignments: Vec::new(),
            },
            MetadataRecord::SetTopicConfigs {
                id: a,
                configs: configs(&[("retention.ms", "5")]),
            },
            MetadataRecord::DeleteTopic { id: b },
            MetadataRecord::ProducerIds { next_producer_id: 2000 },
            MetadataRecord::SetGroupConfigs {
                group: "g1".into(),
                configs: configs(&[("consumer.session.timeout.ms", "50000")]),
            },
            MetadataRecord::SetGroupConfigs {
                group: "g2".into(),
                configs: configs(&[("consumer.session.timeout.ms", "50000")]),
            },
            MetadataRecord::SetGroupConfigs {
                group: "g2".into(),
                configs: BTreeMap::new(),
            },
            MetadataRecord::SetBrokerConfigs {
                node: None,
                configs: configs(&[("log.retention.ms", "1000")]),
            },
            MetadataRecord::SetBrokerConfigs {
                node: Some(2),
                configs: configs(&[("message.max.bytes", "2000")]),
            },
            MetadataRecord::SetFeatureLevels {
                levels: [("group.version".to_string(), 0)].into_iter().collect(),
                epoch: None,
            },
            MetadataRecord::SetFeatureLevels {
                levels: [("transaction.version".to_string(), 1)].into_iter().collect(),
                epoch: None,
            },
        ]
    }

    #[test]
    fn to_records_rebuilds_the_same_image() {
        let mut image = MetadataImage::default();
        for record in every_kind_of_record() {
            image.apply(&record);
        }
        let records = image.to_records();
        let mut rebuilt = MetadataImage::default();
        for record in &records {
            rebuilt.apply(record);
        }
        assert_eq!(rebuilt.to_records(), records);
        assert_eq!(rebuilt.topics, image.topics);
        assert_eq!(rebuilt.topic_ids, image.topic_ids);
        assert_eq!(rebuilt.collision_names, image.collision_names);
        assert_eq!(rebuilt.next_producer_id, 2000);
        assert_eq!(rebuilt.group_configs, image.group_configs);
        assert_eq!(rebuilt.broker_default_configs, image.broker_default_configs);
        assert_eq!(rebuilt.broker_configs, image.broker_configs);
        // The feature levels, and their epoch: the offset of the last change, not of the
        // snapshot's one record (clients keep the highest epoch they saw).
        assert_eq!(rebuilt.feature_level("group.version"), 0);
        assert_eq!(rebuilt.feature_level("transaction.version"), 1);
        assert_eq!(
            rebuilt.finalized_features_epoch(),
            crate::api::api_versions::FINALIZED_FEATURES_EPOCH + every_kind_of_record().len() as i64
        );
        assert_eq!(rebuilt.finalized_features_epoch(), image.finalized_features_epoch());
        // The topic carries every change made to it.
        let topic = rebuilt.topic("orders.v1").unwrap();
        assert_eq!(
            (topic.partitions, topic.configs.clone()),
            (8, configs(&[("retention.ms", "5")]))
        );
        assert!(rebuilt.topic("doomed").is_none());
        assert!(rebuilt.is_log_dir_offline(1) && !rebuilt.is_log_dir_offline(2));
        assert_eq!(rebuilt.brokers, image.brokers);
    }

    fn normal(index: u64, record: MetadataRecord) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(record),
        }
    }

    #[tokio::test]
    async fn a_snapshot_survives_reopen_and_installs_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let base = MetadataImage {
            cluster_id: "c1".into(),
            node_id: 1,
            ..Default::default()
        };
        let mut sm = StateMachine::open(dir.path(), base.clone()).unwrap();
        let mut images = sm.images().subscribe();
        let records = every_kind_of_record();
        let entries: Vec<Entry> = records.iter().cloned().zip(1..).map(|(r, i)| normal(i, r)).collect();
        let offsets = sm.apply(entries).await.unwrap();
        assert_eq!(offsets, (1..=records.len() as i64).collect::<Vec<_>>());
        assert!(images.has_changed().unwrap());
        let applied = images.borrow_and_update().clone();
        assert_eq!(applied.offset, records.len() as i64);

        let snapshot = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        assert_eq!(snapshot.meta.last_log_id.map(|id| id.index), Some(records.len() as u64));
        drop(sm);

        // Reopened: the image comes from the snapshot, offset included.
        let mut reopened = StateMachine::open(dir.path(), base).unwrap();
        let image = reopened.images().borrow().clone();
        assert_eq!(fingerprint(&image), fingerprint(&applied));
        assert_eq!(image.cluster_id, "c1");
        let (last_applied, _) = reopened.applied_state().await.unwrap();
        assert_eq!(last_applied, snapshot.meta.last_log_id);

        // Installed on another node: same image there, persisted there too.
        let other = tempfile::tempdir().unwrap();
        let other_base = MetadataImage {
            node_id: 2,
            ..Default::default()
        };
        let mut follower = StateMachine::open(other.path(), other_base.clone()).unwrap();
        let current = reopened.get_current_snapshot().await.unwrap().unwrap();
        follower
            .install_snapshot(&current.meta, current.snapshot)
            .await
            .unwrap();
        let installed = follower.images().borrow().clone();
        assert_eq!(fingerprint(&installed), fingerprint(&applied));
        assert_eq!(installed.node_id, 2);
        drop(follower);
        let follower = StateMachine::open(other.path(), other_base).unwrap();
        assert_eq!(fingerprint(&follower.images().borrow()), fingerprint(&applied));
    }

    #[tokio::test]
    async fn a_damaged_snapshot_file_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = StateMachine::open(dir.path(), MetadataImage::default()).unwrap();
        sm.apply([normal(1, every_kind_of_record().remove(0))]).await.unwrap();
        sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        drop(sm);
        let path = dir.path().join(SNAPSHOT_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x11;
        std::fs::write(&path, bytes).unwrap();
        assert!(StateMachine::open(dir.path(), MetadataImage::default()).is_err());
    }
}
