//! `LogConfig`: the settings of one log (Kafka's topic-level keys) and their defaults.

/// How a topic stamps record timestamps (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The settings of one log, from the topic's config over the broker defaults.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// `segment.bytes`: roll to a new segment when the active one would exceed this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is older than this.
    pub segment_ms: i64,
    /// `index.interval.bytes`: bytes of log between two offset index entries.
    pub index_interval_bytes: u64,
    /// `segment.index.bytes`: an index (8-byte entries) never grows past this; roll when full.
    pub segment_index_bytes: u64,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: usize,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `file.delete.delay.ms`: how long a deleted segment's files stay (as `*.deleted`) before
    /// they are removed.
    pub file_delete_delay_ms: i64,
    /// `log.flush.offset.checkpoint.interval.ms` (broker): how often the recovery point is
    /// checkpointed. An older checkpoint costs only a longer scan after a crash (recovery
    /// validates everything past it); writing it at every flush cost a new file per fsync.
    pub recovery_point_checkpoint_ms: u64,
    /// `cleanup.policy` includes `compact` (Kafka's `LogConfig.compact`): the log may hold
    /// offset gaps and batches with fewer records than offsets, its own cleaner's output or,
    /// on a follower, its leader's, which `Log::append_as_follower` and `Log::open` accept.
    pub compact: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            file_delete_delay_ms: 60_000,
            recovery_point_checkpoint_ms: 60_000,
            compact: false,
        }
    }
}
