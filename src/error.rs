//! The crate's error type: what happened in broker terms. Only `Error::code` maps it to a Kafka
//! error code, so the mapping lives in one table.

use std::path::PathBuf;

use kafka_protocol::error::ResponseError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("offset {asked} outside [{log_start}, {log_end}]")]
    OffsetOutOfRange { asked: i64, log_start: i64, log_end: i64 },
    #[error("{op} {}: {source}", .path.display())]
    Storage {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt record batch: {0}")]
    CorruptBatch(String),
    /// A follower's append whose batch does not start where the log (or the batch before it)
    /// ends (Kafka's `UnexpectedAppendOffsetException`): nothing was appended. Below: the
    /// leader's log start fell inside a batch; above: a gap, which this log cannot hold.
    #[error("batch [{first_offset}, {last_offset}] appended where offset {expected} was expected")]
    UnexpectedAppendOffset {
        first_offset: i64,
        last_offset: i64,
        expected: i64,
    },
    /// A read of a segment that a follower's truncation cut meanwhile: what it had located
    /// may be gone, so nothing is returned; the partition no longer leads.
    #[error("{} was truncated during the read", .path.display())]
    TruncatedDuringRead { path: PathBuf },
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: usize },
    /// A compressed batch whose records decompress past the bound its reader allows (the
    /// topic's max.message.bytes on produce): decompression stops there (issue 10).
    #[error("records of a batch decompress to more than {max} bytes")]
    RecordsTooLarge { max: usize },
    #[error("unsupported record batch magic {0} (only magic 2 is accepted)")]
    UnsupportedMagic(i8),
    #[error("record timestamp {timestamp} outside the topic's accepted range")]
    InvalidTimestamp { timestamp: i64 },
    #[error("unknown topic or partition {0}")]
    UnknownTopicOrPartition(String),
    /// The principal may not do this to the topic (ACLs).
    #[error("Topic authorization failed.")]
    TopicAuthorizationFailed,
    #[error("unknown topic id {0}")]
    UnknownTopicId(uuid::Uuid),
    #[error("topic {0} already exists")]
    TopicAlreadyExists(String),
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopic { name: String, reason: &'static str },
    #[error("invalid partition count {0}")]
    InvalidPartitions(i32),
    #[error(
        "Unable to replicate the partition {asked} time(s): The target replication factor of {asked} cannot be reached because only {nodes} broker(s) are registered or some brokers have all their log directories cordoned."
    )]
    InvalidReplicationFactor { asked: i32, nodes: i32 },
    /// A metadata change computed against an image that changed meanwhile; the caller retries
    /// against a newer one.
    #[error("metadata changed meanwhile: {0}")]
    Stale(String),
    /// The metadata quorum could not commit a change (no leader, no majority, stopped), or
    /// its leader refused it: the code is what the client gets.
    #[error("{message}")]
    Controller { code: i16, message: String },
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    /// A reassignment would change a partition's replica count, and the request forbids it
    /// (KIP-860).
    #[error("the replication factor would change from {from} to {to}")]
    ReplicationFactorChanged { from: usize, to: usize },
    #[error("no partition reassignment is in progress for {0}")]
    NoReassignmentInProgress(String),
    #[error("invalid config {key}: {reason}")]
    InvalidConfig { key: String, reason: String },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("leader epoch {asked} is newer than the current {current}")]
    UnknownLeaderEpoch { asked: i32, current: i32 },
    #[error("leader epoch {asked} is older than the current {current}")]
    FencedLeaderEpoch { asked: i32, current: i32 },
    #[error("this broker is not the leader of {0}")]
    NotLeader(String),
    #[error("{0}: the leader is already the one asked for")]
    ElectionNotNeeded(String),
    #[error("{0}: the preferred replica is not live or not in sync")]
    PreferredLeaderNotAvailable(String),
    #[error("{0}: no replica is live")]
    EligibleLeadersNotAvailable(String),
    /// An ISR change would add a broker that is fenced (KIP-841): Kafka's controller refuses
    /// it, and the leader asks again once the broker is back.
    #[error("{0}")]
    IneligibleReplica(String),
    /// acks=all with fewer in-sync replicas than `min.insync.replicas`: nothing was written.
    #[error("{partition}: {isr} in-sync replica(s), min.insync.replicas is {min}")]
    NotEnoughReplicas { partition: String, isr: usize, min: i32 },
    /// Written, but the ISR shrank below `min.insync.replicas` before it was acknowledged.
    #[error("{partition}: written, but the ISR fell to {isr} replica(s), below min.insync.replicas {min}")]
    NotEnoughReplicasAfterAppend { partition: String, isr: usize, min: i32 },
    #[error("the broker is shutting down")]
    ShuttingDown,
    #[error("producer {producer_id}: sequence {sequence} out of order (expected {expected})")]
    OutOfOrderSequence {
        producer_id: i64,
        sequence: i32,
        expected: i32,
    },
    #[error("producer {producer_id}: epoch {epoch} is older than the current {current}")]
    InvalidProducerEpoch { producer_id: i64, epoch: i16, current: i16 },
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    #[error("producer {producer_id}: coordinator epoch {coordinator_epoch} is older than {current}")]
    TransactionCoordinatorFenced {
        producer_id: i64,
        coordinator_epoch: i32,
        current: i32,
    },
}

impl Error {
    /// The topic exists already: raised here, or by the quorum's leader (`Controller` with
    /// TOPIC_ALREADY_EXISTS) when another broker created it first.
    pub fn is_topic_already_exists(&self) -> bool {
        match self {
            Error::TopicAlreadyExists(_) => true,
            Error::Controller { code, .. } => *code == kafka_protocol::error::ResponseError::TopicAlreadyExists.code(),
            _ => false,
        }
    }

    /// The Kafka error code for this error. No `_` arm: a new variant does not compile until
    /// someone picks its code.
    pub fn code(&self) -> i16 {
        match self {
            Error::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            Error::Storage { .. } => ResponseError::KafkaStorageError,
            Error::CorruptBatch(_) => ResponseError::CorruptMessage,
            // Never on the wire: the fetcher handles it (Kafka has no code for it either).
            Error::UnexpectedAppendOffset { .. } => ResponseError::UnknownServerError,
            // Only a follower truncates: the reader's partition has lost its leadership.
            Error::TruncatedDuringRead { .. } => ResponseError::NotLeaderOrFollower,
            Error::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            // Kafka's answer to a batch over max.message.bytes (RecordTooLargeException).
            Error::RecordsTooLarge { .. } => ResponseError::MessageTooLarge,
            // Kafka answers a v0/v1 message set on Produce v3+ with UNSUPPORTED_FOR_MESSAGE_FORMAT.
            Error::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat,
            Error::InvalidTimestamp { .. } => ResponseError::InvalidTimestamp,
            Error::UnknownTopicOrPartition(_) => ResponseError::UnknownTopicOrPartition,
            Error::TopicAuthorizationFailed => ResponseError::TopicAuthorizationFailed,
            Error::UnknownTopicId(_) => ResponseError::UnknownTopicId,
            Error::TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists,
            Error::InvalidTopic { .. } => ResponseError::InvalidTopicException,
            Error::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            Error::InvalidReplicationFactor { .. } => ResponseError::InvalidReplicationFactor,
            // Kafka's retriable answer when the active controller moved.
            Error::Stale(_) => ResponseError::NotController,
            Error::Controller { code, .. } => return *code,
            Error::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            Error::ReplicationFactorChanged { .. } => ResponseError::InvalidReplicationFactor,
            Error::NoReassignmentInProgress(_) => ResponseError::NoReassignmentInProgress,
            Error::InvalidConfig { .. } => ResponseError::InvalidConfig,
            Error::InvalidRequest(_) => ResponseError::InvalidRequest,
            Error::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch,
            Error::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
            Error::ShuttingDown => ResponseError::NotLeaderOrFollower,
            Error::NotLeader(_) => ResponseError::NotLeaderOrFollower,
            Error::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
            Error::ElectionNotNeeded(_) => ResponseError::ElectionNotNeeded,
            Error::PreferredLeaderNotAvailable(_) => ResponseError::PreferredLeaderNotAvailable,
            Error::EligibleLeadersNotAvailable(_) => ResponseError::EligibleLeadersNotAvailable,
            Error::IneligibleReplica(_) => ResponseError::IneligibleReplica,
            Error::NotEnoughReplicasAfterAppend { .. } => ResponseError::NotEnoughReplicasAfterAppend,
            Error::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
            Error::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
            Error::InvalidTxnState(_) => ResponseError::InvalidTxnState,
            Error::InvalidRecord(_) => ResponseError::InvalidRecord,
            Error::TransactionCoordinatorFenced { .. } => ResponseError::TransactionCoordinatorFenced,
        }
        .code()
    }

    /// An I/O error on `path` during `op`.
    pub fn storage(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Storage {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether this is a storage error of a device or filesystem that failed (EIO, a
    /// filesystem gone read-only, a device gone): unlike a full disk or too many open files,
    /// nothing written there can be trusted to succeed again before a restart.
    pub fn is_device_failure(&self) -> bool {
        matches!(self, Error::Storage { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EIO | libc::EROFS | libc::ENXIO | libc::ENODEV)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_device_is_told_from_a_full_disk() {
        let storage = |errno| Error::storage("append to", "/x", std::io::Error::from_raw_os_error(errno));
        assert!(storage(libc::EIO).is_device_failure());
        assert!(storage(libc::EROFS).is_device_failure());
        assert!(!storage(libc::ENOSPC).is_device_failure());
        assert!(!storage(libc::EMFILE).is_device_failure());
        assert!(!Error::CorruptBatch("x".into()).is_device_failure());
    }

    #[test]
    fn codes_match_kafka() {
        // Codes from Kafka's org.apache.kafka.common.protocol.Errors.
        assert_eq!(
            Error::OffsetOutOfRange {
                asked: 9,
                log_start: 0,
                log_end: 1
            }
            .code(),
            1
        );
        assert_eq!(Error::CorruptBatch("x".into()).code(), 2);
        assert_eq!(Error::UnknownTopicOrPartition("t".into()).code(), 3);
        assert_eq!(Error::IneligibleReplica("t".into()).code(), 107);
        assert_eq!(Error::MessageTooLarge { size: 2, max: 1 }.code(), 10);
        assert_eq!(Error::RecordsTooLarge { max: 1 }.code(), 10);
        assert_eq!(
            Error::InvalidTopic {
                name: "".into(),
                reason: ""
            }
            .code(),
            17
        );
        assert_eq!(Error::InvalidPartitions(0).code(), 37);
        assert_eq!(Error::InvalidReplicationFactor { asked: 3, nodes: 1 }.code(), 38);
        assert_eq!(Error::ReplicationFactorChanged { from: 1, to: 3 }.code(), 38);
        assert_eq!(Error::InvalidReplicaAssignment("r".into()).code(), 39);
        assert_eq!(Error::NoReassignmentInProgress("t-0".into()).code(), 85);
        assert_eq!(Error::TopicAlreadyExists("t".into()).code(), 36);
        assert_eq!(
            Error::InvalidConfig {
                key: "k".into(),
                reason: "r".into()
            }
            .code(),
            40
        );
        assert_eq!(Error::UnknownTopicId(uuid::Uuid::nil()).code(), 100);
        assert_eq!(Error::storage("open", "/x", std::io::Error::other("e")).code(), 56);
    }
}
