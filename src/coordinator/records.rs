//! The record formats of `__consumer_offsets`, as Kafka writes them (`OffsetCommitKey` v1,
//! `OffsetCommitValue` v3, `GroupMetadataKey` v2, `GroupMetadataValue` v3), so the topic reads
//! like Kafka's to anyone who knows it. A null value is a tombstone (compaction removes the key).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::StoredShareState;
use super::consumer::{ConsumerGroupSnapshot, ConsumerMemberSnapshot};
use super::group::{GroupSnapshot, MemberSnapshot};
use super::share::ShareGroupSnapshot;
use crate::share::partition::{Persisted, PersistedBatch};

/// One decoded `__consumer_offsets` record.
#[derive(Debug, Clone, PartialEq)]
pub enum OffsetsRecord {
    Offset {
        group: String,
        topic: String,
        partition: i32,
        value: Option<CommittedOffset>,
    },
    Group {
        group: String,
        value: Option<GroupSnapshot>,
    },
    /// A next-generation (KIP-848) group. The key is Kafka's ConsumerGroupMetadataKey (version
    /// 3: the group id); the value is Sluice's own snapshot of the group (Kafka spreads the
    /// same state over its record types 3 to 8), so that a restart loses no group.
    ConsumerGroup {
        group: String,
        value: Option<ConsumerGroupSnapshot>,
    },
    /// A share group (KIP-932). The key is Kafka's ShareGroupMetadataKey (version 11: the group
    /// id); the value is Sluice's: the group epoch.
    ShareGroup {
        group: String,
        value: Option<ShareGroupSnapshot>,
    },
    /// The state of one share-partition: the group's start offset in one topic partition and
    /// the records of its in-flight window. Kafka keeps it in `__share_group_state`, written by
    /// a share coordinator; Sluice keeps it beside the group (key version 100, Sluice's own:
    /// group id, topic id, partition), so the group's coordinator owns it, loads it and deletes
    /// it with the group.
    ShareState {
        group: String,
        topic_id: uuid::Uuid,
        partition: i32,
        value: Option<StoredShareState>,
    },
}

/// The key version of `OffsetsRecord::ShareGroup` (Kafka's ShareGroupMetadataKey).
const SHARE_GROUP_KEY: i16 = 11;
/// The key version of `OffsetsRecord::ShareState` (Sluice's own).
const SHARE_STATE_KEY: i16 = 100;

#[derive(Debug, Clone, PartialEq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

fn put_string(buf: &mut BytesMut, s: &str) {
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    buf.put_i16(len);
    buf.put_slice(&s.as_bytes()[..len as usize]);
}

fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
    buf.put_slice(b);
}

impl OffsetsRecord {
    /// The record key and value (None for a tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        let mut key = BytesMut::new();
        match self {
            OffsetsRecord::ShareGroup { group, value } => {
                key.put_i16(SHARE_GROUP_KEY);
                put_string(&mut key, group);
                let value = value.as_ref().map(|g| {
                    let mut b = BytesMut::new();
                    b.put_i16(0);
                    b.put_i32(g.epoch);
                    b.freeze()
                });
                (key.freeze(), value)
            }
            OffsetsRecord::ShareState {
                group,
                topic_id,
                partition,
                value,
            } => {
                key.put_i16(SHARE_STATE_KEY);
                put_string(&mut key, group);
                key.put_slice(topic_id.as_bytes());
                key.put_i32(*partition);
                let value = value.as_ref().map(|stored| {
                    let mut b = BytesMut::new();
                    b.put_i16(0);
                    b.put_i32(stored.epoch);
                    let empty = Persisted {
                        start_offset: -1,
                        batches: Vec::new(),
                    };
                    let state = stored.state.as_ref().unwrap_or(&empty);
                    b.put_i64(state.start_offset);
                    b.put_i32(i32::try_from(state.batches.len()).unwrap_or(i32::MAX));
                    for batch in &state.batches {
                        b.put_i64(batch.first_offset);
                        b.put_i64(batch.last_offset);
                        b.put_i8(batch.state);
                        b.put_i16(batch.delivery_count);
                    }
                    b.freeze()
                });
                (key.freeze(), value)
            }
            OffsetsRecord::ConsumerGroup { group, value } => {
                key.put_i16(3);
                put_string(&mut key, group);
                let value = value.as_ref().map(|g| {
                    let mut b = BytesMut::new();
                    // Sluice snapshot format: version 1 adds each member's regex, version 2 each
                    // assigned partition's assignment epoch (KIP-1251).
                    b.put_i16(2);
                    b.put_i32(g.epoch);
                    put_string(&mut b, &g.assignor);
                    b.put_i32(i32::try_from(g.members.len()).unwrap_or(i32::MAX));
                    for m in &g.members {
                        put_string(&mut b, &m.member_id);
                        put_nullable_string(&mut b, m.instance_id.as_deref());
                        put_nullable_string(&mut b, m.rack_id.as_deref());
                        put_string(&mut b, &m.client_id);
                        put_string(&mut b, &m.client_host);
                        b.put_i32(m.rebalance_timeout_ms);
                        b.put_i32(m.member_epoch);
                        b.put_i32(i32::try_from(m.subscribed.len()).unwrap_or(i32::MAX));
                        for t in &m.subscribed {
                            put_string(&mut b, t);
                        }
                        put_nullable_string(&mut b, m.subscribed_regex.as_deref());
                        b.put_i32(i32::try_from(m.assigned.len()).unwrap_or(i32::MAX));
                        for ((topic, partition), since) in &m.assigned {
                            b.put_slice(topic.as_bytes());
                            b.put_i32(*partition);
                            b.put_i32(*since);
                        }
                    }
                    b.freeze()
                });
                (key.freeze(), value)
            }
            OffsetsRecord::Offset {
                group,
                topic,
                partition,
                value,
            } => {
                key.put_i16(1);
                put_string(&mut key, group);
                put_string(&mut key, topic);
                key.put_i32(*partition);
                let value = value.as_ref().map(|v| {
                    let mut b = BytesMut::new();
                    b.put_i16(3);
                    b.put_i64(v.offset);
                    b.put_i32(v.leader_epoch);
                    put_string(&mut b, &v.metadata);
                    b.put_i64(v.commit_timestamp);
                    b.freeze()
                });
                (key.freeze(), value)
            }
            OffsetsRecord::Group { group, value } => {
                key.put_i16(2);
                put_string(&mut key, group);
                let value = value.as_ref().map(|g| {
                    let mut b = BytesMut::new();
                    b.put_i16(3);
                    put_string(&mut b, &g.protocol_type);
                    b.put_i32(g.generation);
                    put_nullable_string(&mut b, g.protocol.as_deref());
                    put_nullable_string(&mut b, g.leader.as_deref());
                    b.put_i64(crate::replica::now_ms());
                    b.put_i32(i32::try_from(g.members.len()).unwrap_or(i32::MAX));
                    for m in &g.members {
                        put_string(&mut b, &m.member_id);
                        put_nullable_string(&mut b, m.instance_id.as_deref());
                        put_string(&mut b, &m.client_id);
                        put_string(&mut b, &m.client_host);
                        b.put_i32(m.rebalance_timeout_ms);
                        b.put_i32(m.session_timeout_ms);
                        put_bytes(&mut b, &m.subscription);
                        put_bytes(&mut b, &m.assignment);
                    }
                    b.freeze()
                });
                (key.freeze(), value)
            }
        }
    }

    /// Decodes a record; None for keys of other kinds or malformed bytes (skipped at load, with
    /// a log line by the caller).
    pub fn decode(key: &Bytes, value: Option<&Bytes>) -> Option<OffsetsRecord> {
        let mut k = Reader(key.clone());
        match k.i16()? {
            0 | 1 => {
                let group = k.string()?;
                let topic = k.string()?;
                let partition = k.i32()?;
                let value = match value {
                    None => None,
                    Some(v) => {
                        let mut r = Reader(v.clone());
                        let version = r.i16()?;
                        let offset = r.i64()?;
                        let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
                        let metadata = r.string()?;
                        let commit_timestamp = r.i64()?;
                        Some(CommittedOffset {
                            offset,
                            leader_epoch,
                            metadata,
                            commit_timestamp,
                        })
                    }
                };
                Some(OffsetsRecord::Offset {
                    group,
                    topic,
                    partition,
                    value,
                })
            }
            3 => {
                let group = k.string()?;
                let value = match value {
                    None => None,
                    Some(v) => {
                        let mut r = Reader(v.clone());
                        let version = r.i16()?;
                        if !(0..=2).contains(&version) {
                            return None;
                        }
                        let epoch = r.i32()?;
                        let assignor = r.string()?;
                        let count = r.i32()?;
                        let mut members = Vec::new();
                        for _ in 0..count.max(0) {
                            let member_id = r.string()?;
                            let instance_id = r.nullable_string()?;
                            let rack_id = r.nullable_string()?;
                            let client_id = r.string()?;
                            let client_host = r.string()?;
                            let rebalance_timeout_ms = r.i32()?;
                            let member_epoch = r.i32()?;
                            let mut subscribed = Vec::new();
                            for _ in 0..r.i32()?.max(0) {
                                subscribed.push(r.string()?);
                            }
                            let subscribed_regex = if version >= 1 { r.nullable_string()? } else { None };
                            let mut assigned = Vec::new();
                            for _ in 0..r.i32()?.max(0) {
                                let id = r.uuid()?;
                                let partition = r.i32()?;
                                // Before version 2, held since the member's epoch: a commit at
                                // an older one is refused, as before KIP-1251.
                                let since = if version >= 2 { r.i32()? } else { member_epoch };
                                assigned.push(((id, partition), since));
                            }
                            members.push(ConsumerMemberSnapshot {
                                member_id,
                                instance_id,
                                rack_id,
                                client_id,
                                client_host,
                                rebalance_timeout_ms,
                                member_epoch,
                                subscribed,
                                subscribed_regex,
                                assigned,
                            });
                        }
                        Some(ConsumerGroupSnapshot {
                            epoch,
                            assignor,
                            members,
                        })
                    }
                };
                Some(OffsetsRecord::ConsumerGroup { group, value })
            }
            2 => {
                let group = k.string()?;
                let value = match value {
                    None => None,
                    Some(v) => {
                        let mut r = Reader(v.clone());
                        let version = r.i16()?;
                        let protocol_type = r.string()?;
                        let generation = r.i32()?;
                        let protocol = r.nullable_string()?;
                        let leader = r.nullable_string()?;
                        if version >= 2 {
                            r.i64()?; // current state timestamp
                        }
                        let count = r.i32()?;
                        let mut members = Vec::new();
                        for _ in 0..count.max(0) {
                            let member_id = r.string()?;
                            let instance_id = if version >= 3 { r.nullable_string()? } else { None };
                            let client_id = r.string()?;
                            let client_host = r.string()?;
                            let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { 0 };
                            let session_timeout_ms = r.i32()?;
                            let subscription = r.bytes()?;
                            let assignment = r.bytes()?;
                            members.push(MemberSnapshot {
                                member_id,
                                instance_id,
                                client_id,
                                client_host,
                                rebalance_timeout_ms,
                                session_timeout_ms,
                                subscription,
                                assignment,
                            });
                        }
                        Some(GroupSnapshot {
                            protocol_type,
                            generation,
                            protocol,
                            leader,
                            members,
                        })
                    }
                };
                Some(OffsetsRecord::Group { group, value })
            }
            SHARE_GROUP_KEY => {
                let group = k.string()?;
                let value = match value {
                    None => None,
                    Some(v) => {
                        let mut r = Reader(v.clone());
                        if r.i16()? != 0 {
                            return None;
                        }
                        Some(ShareGroupSnapshot { epoch: r.i32()? })
                    }
                };
                Some(OffsetsRecord::ShareGroup { group, value })
            }
            SHARE_STATE_KEY => {
                let group = k.string()?;
                let topic_id = k.uuid()?;
                let partition = k.i32()?;
                let value = match value {
                    None => None,
                    Some(v) => {
                        let mut r = Reader(v.clone());
                        if r.i16()? != 0 {
                            return None;
                        }
                        let epoch = r.i32()?;
                        let start_offset = r.i64()?;
                        let count = r.i32()?;
                        let mut batches = Vec::new();
                        for _ in 0..count.max(0) {
                            batches.push(PersistedBatch {
                                first_offset: r.i64()?,
                                last_offset: r.i64()?,
                                state: r.i8()?,
                                delivery_count: r.i16()?,
                            });
                        }
                        Some(StoredShareState {
                            epoch,
                            state: (start_offset >= 0).then_some(Persisted { start_offset, batches }),
                        })
                    }
                };
                Some(OffsetsRecord::ShareState {
                    group,
                    topic_id,
                    partition,
                    value,
                })
            }
            _ => None,
        }
    }
}

/// A bounds-checked reader: every getter is None past the end.
struct Reader(Bytes);

impl Reader {
    fn i8(&mut self) -> Option<i8> {
        (self.0.remaining() >= 1).then(|| self.0.get_i8())
    }
    fn i16(&mut self) -> Option<i16> {
        (self.0.remaining() >= 2).then(|| self.0.get_i16())
    }
    fn i32(&mut self) -> Option<i32> {
        (self.0.remaining() >= 4).then(|| self.0.get_i32())
    }
    fn i64(&mut self) -> Option<i64> {
        (self.0.remaining() >= 8).then(|| self.0.get_i64())
    }
    fn nullable_string(&mut self) -> Option<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Some(None);
        }
        let len = usize::try_from(len).ok()?;
        if self.0.remaining() < len {
            return None;
        }
        let bytes = self.0.split_to(len);
        String::from_utf8(bytes.to_vec()).ok().map(Some)
    }
    fn string(&mut self) -> Option<String> {
        self.nullable_string()?
    }
    fn uuid(&mut self) -> Option<uuid::Uuid> {
        if self.0.remaining() < 16 {
            return None;
        }
        let bytes = self.0.split_to(16);
        uuid::Uuid::from_slice(&bytes).ok()
    }
    fn bytes(&mut self) -> Option<Bytes> {
        let len = self.i32()?;
        if len < 0 {
            return Some(Bytes::new());
        }
        let len = usize::try_from(len).ok()?;
        (self.0.remaining() >= len).then(|| self.0.split_to(len))
    }
}

/// Java's `String.hashCode` over UTF-16 code units, which Kafka uses to place a group.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition of a group (Kafka's `Utils.abs(hashCode) % count`).
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    let h = java_string_hash(group);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_placement_matches_kafka() {
        // Values printed by Java: s.hashCode() and Math.abs(s.hashCode()) % 50.
        assert_eq!(java_string_hash("my-group"), -1906497762);
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(java_string_hash("test-group-éx"), -559018600);
        assert_eq!(partition_for("test-group-éx", 50), 0);
        assert_eq!(partition_for("console-consumer-12345", 50), 6);
    }

    #[test]
    fn records_round_trip_and_truncation_is_rejected() {
        let offset = OffsetsRecord::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
            value: Some(CommittedOffset {
                offset: 42,
                leader_epoch: 0,
                metadata: "m".into(),
                commit_timestamp: 7,
            }),
        };
        let group = OffsetsRecord::Group {
            group: "g".into(),
            value: Some(GroupSnapshot {
                protocol_type: "consumer".into(),
                generation: 4,
                protocol: Some("range".into()),
                leader: Some("a".into()),
                members: vec![MemberSnapshot {
                    member_id: "a".into(),
                    instance_id: Some("i".into()),
                    client_id: "c".into(),
                    client_host: "/h".into(),
                    rebalance_timeout_ms: 1,
                    session_timeout_ms: 2,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"asg"),
                }],
            }),
        };
        let consumer = OffsetsRecord::ConsumerGroup {
            group: "cg".into(),
            value: Some(ConsumerGroupSnapshot {
                epoch: 7,
                assignor: "uniform".into(),
                members: vec![ConsumerMemberSnapshot {
                    member_id: "m".into(),
                    instance_id: None,
                    rack_id: Some("r".into()),
                    client_id: "c".into(),
                    client_host: "/h".into(),
                    rebalance_timeout_ms: 30_000,
                    member_epoch: 7,
                    subscribed: vec!["t".into()],
                    subscribed_regex: Some("t-.*".into()),
                    assigned: vec![((uuid::Uuid::from_u128(9), 0), 5), ((uuid::Uuid::from_u128(9), 3), 7)],
                }],
            }),
        };
        for record in [
            offset,
            group,
            consumer,
            OffsetsRecord::Group {
                group: "g".into(),
                value: None,
            },
        ] {
            let (k, v) = record.encode();
            assert_eq!(OffsetsRecord::decode(&k, v.as_ref()), Some(record.clone()));
            if let Some(v) = v {
                for cut in 0..v.len() {
                    assert_eq!(OffsetsRecord::decode(&k, Some(&v.slice(..cut))), None, "cut {cut}");
                }
            }
        }
    }

    #[test]
    fn consumer_group_snapshots_of_version_0_still_load() {
        // Version 0 had no regex: the same bytes without the member's nullable string.
        let member = ConsumerMemberSnapshot {
            member_id: "m".into(),
            instance_id: Some("i".into()),
            rack_id: None,
            client_id: "c".into(),
            client_host: "/h".into(),
            rebalance_timeout_ms: 30_000,
            member_epoch: -2,
            subscribed: vec!["t".into()],
            subscribed_regex: None,
            assigned: vec![],
        };
        let record = OffsetsRecord::ConsumerGroup {
            group: "cg".into(),
            value: Some(ConsumerGroupSnapshot {
                epoch: 3,
                assignor: "range".into(),
                members: vec![member],
            }),
        };
        let (k, v) = record.encode();
        let v1 = v.unwrap();
        // The regex (i16 -1) sits just before the empty assignment's count (i32 0).
        let cut = v1.len() - 6;
        assert_eq!(&v1[cut..], &[0xff, 0xff, 0, 0, 0, 0]);
        let mut v0 = BytesMut::new();
        v0.put_i16(0);
        v0.put_slice(&v1[2..cut]);
        v0.put_slice(&v1[cut + 2..]);
        assert_eq!(OffsetsRecord::decode(&k, Some(&v0.freeze())), Some(record));
    }

    #[test]
    fn consumer_group_snapshots_of_version_1_hold_partitions_since_the_members_epoch() {
        // Version 1 had no assignment epochs: the same bytes without each partition's i32.
        let id = uuid::Uuid::from_u128(9);
        let snapshot = |assigned| ConsumerGroupSnapshot {
            epoch: 4,
            assignor: "uniform".into(),
            members: vec![ConsumerMemberSnapshot {
                member_id: "m".into(),
                instance_id: None,
                rack_id: None,
                client_id: "c".into(),
                client_host: "/h".into(),
                rebalance_timeout_ms: 30_000,
                member_epoch: 4,
                subscribed: vec!["t".into()],
                subscribed_regex: None,
                assigned,
            }],
        };
        let record = OffsetsRecord::ConsumerGroup {
            group: "cg".into(),
            value: Some(snapshot(vec![((id, 1), 2)])),
        };
        let (k, v) = record.encode();
        let v2 = v.unwrap();
        // The last partition's assignment epoch is the value's last 4 bytes.
        let mut v1 = BytesMut::new();
        v1.put_i16(1);
        v1.put_slice(&v2[2..v2.len() - 4]);
        let expected = OffsetsRecord::ConsumerGroup {
            group: "cg".into(),
            value: Some(snapshot(vec![((id, 1), 4)])),
        };
        assert_eq!(OffsetsRecord::decode(&k, Some(&v1.freeze())), Some(expected));
    }
}
