//! What a partition checks of produced batches before they are appended, and the recompression
//! its topic's `compression.type` asks for: Kafka's `ProduceRequest.validateRecords` (one batch,
//! no zstd before v7) and `LogValidator` (compacted topics need keys, KIP-937 timestamp bounds,
//! KIP-467 record errors). The Produce handler encodes a [`Refusal`] per version.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::StrBytes;

use super::{Partition, TopicPartition};
use crate::config::BrokerConfig;
use crate::error::{Error, Result};
use crate::log::{ValidBatch, batch, validate_batches};

/// The record batch attributes' codec for zstd (KIP-110: Produce v7+ only).
const ZSTD_CODEC: i16 = 4;

/// A topic's configs as produce validation reads them.
#[derive(Debug, Clone)]
pub struct ProduceRules {
    /// `max.message.bytes`.
    pub max_message_bytes: usize,
    /// cleanup.policy includes `compact`: every record needs a key.
    pub compacted: bool,
    /// (message.timestamp.before.max.ms, message.timestamp.after.max.ms) when CreateTime
    /// timestamps are bounded (KIP-937).
    pub timestamp_bounds: Option<(i64, i64)>,
    /// compression.type other than `producer`: the codec the broker recompresses to (Kafka does
    /// too).
    pub target_codec: Option<i16>,
}

impl ProduceRules {
    /// The rules of a topic with these config overrides over the broker's defaults.
    pub fn of_topic(config: &BrokerConfig, overrides: &BTreeMap<String, String>) -> ProduceRules {
        let get = |k: &str| overrides.get(k).cloned().or_else(|| config.topic_default(k));
        let log_config = config.topic_log_config(overrides);
        let timestamp_bounds = {
            let get_ms = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
            let log_append = log_config.timestamp_type == crate::log::TimestampType::LogAppendTime;
            match (
                get_ms("message.timestamp.before.max.ms"),
                get_ms("message.timestamp.after.max.ms"),
            ) {
                (Some(before), Some(after)) => {
                    (!log_append && (before != i64::MAX || after != i64::MAX)).then_some((before, after))
                }
                _ => None,
            }
        };
        let target_codec = match get("compression.type").as_deref().map(str::trim) {
            Some("uncompressed") => Some(0),
            Some("gzip") => Some(1),
            Some("snappy") => Some(2),
            Some("lz4") => Some(3),
            Some("zstd") => Some(4),
            _ => None,
        };
        let compacted = get("cleanup.policy").is_some_and(|p| p.split(',').any(|x| x.trim() == "compact"));
        ProduceRules {
            max_message_bytes: log_config.max_message_bytes,
            compacted,
            timestamp_bounds,
            target_codec,
        }
    }
}

/// Why a partition refuses a produce: the Kafka error code, its message and, for record
/// validation (KIP-467, named only when the Produce version can carry them: v8+), the records.
#[derive(Debug)]
pub struct Refusal {
    pub code: i16,
    pub message: String,
    pub record_errors: Vec<RecordError>,
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal {
            code: e.code(),
            message: e.to_string(),
            record_errors: Vec::new(),
        }
    }
}

/// One refused record, by its index in its batch, with Kafka's message.
#[derive(Debug, Clone)]
pub struct RecordError {
    pub batch_index: i32,
    /// Shared between records with the same text (every keyless record), so a batch of many
    /// small records costs no allocation per record for it.
    pub message: StrBytes,
}

impl Partition {
    /// The batches of a Produce (at `version`) to this partition once validated, or why they are
    /// refused. Recompression is a separate step ([`Partition::recompress`]) so that the handler's
    /// KIP-890 verification keeps its place between the two, as in Kafka.
    pub fn validate_produce(
        &self,
        records: &Bytes,
        version: i16,
        rules: &ProduceRules,
        now_ms: i64,
    ) -> std::result::Result<Vec<ValidBatch>, Refusal> {
        validate(records, version, rules, now_ms, &self.tp)
    }

    /// The batches recompressed to the topic's `compression.type`, those already in it as sent.
    pub fn recompress(
        &self,
        batches: Vec<ValidBatch>,
        rules: &ProduceRules,
    ) -> std::result::Result<Vec<ValidBatch>, Refusal> {
        recompress(batches, rules, &self.tp)
    }
}

/// See [`Partition::validate_produce`].
pub fn validate(
    records: &Bytes,
    version: i16,
    rules: &ProduceRules,
    now_ms: i64,
    tp: &TopicPartition,
) -> std::result::Result<Vec<ValidBatch>, Refusal> {
    let batches = validate_batches(records, rules.max_message_bytes)?;
    // Kafka's ProduceRequest.validateRecords, per partition (KafkaApis): exactly one batch, and
    // no zstd before v7.
    let framing = match batches.as_slice() {
        [] => Some((
            ResponseError::InvalidRecord,
            format!("Produce requests with version {version} must have at least one record batch per partition"),
        )),
        [_] => None,
        _ => Some((
            ResponseError::InvalidRecord,
            format!(
                "Produce requests with version {version} are only allowed to contain exactly one record batch per partition"
            ),
        )),
    };
    let framing = framing.or_else(|| {
        (version < 7 && batches.iter().any(|b| batch::codec(b) == ZSTD_CODEC)).then(|| {
            (
                ResponseError::UnsupportedCompressionType,
                format!("Produce requests with version {version} are not allowed to use ZStandard compression"),
            )
        })
    });
    if let Some((code, message)) = framing {
        return Err(Refusal {
            code: code.code(),
            message,
            record_errors: Vec::new(),
        });
    }
    if rules.compacted || rules.timestamp_bounds.is_some() {
        let record_rules = RecordRules {
            compacted: rules.compacted,
            timestamp_bounds: rules.timestamp_bounds,
            now_ms,
        };
        let records_bytes_max = batch::records_bytes_cap(rules.max_message_bytes);
        if let Some(refused) = invalid_records(
            &batches,
            &record_rules,
            records_bytes_max,
            &tp.to_string(),
            version >= 8,
        )? {
            return Err(refused.into());
        }
    }
    Ok(batches)
}

/// See [`Partition::recompress`].
pub fn recompress(
    batches: Vec<ValidBatch>,
    rules: &ProduceRules,
    tp: &TopicPartition,
) -> std::result::Result<Vec<ValidBatch>, Refusal> {
    let Some(codec) = rules.target_codec else {
        return Ok(batches);
    };
    let partition = tp.to_string();
    let records_bytes_max = batch::records_bytes_cap(rules.max_message_bytes);
    batches
        .into_iter()
        .map(|b| {
            if batch::codec(&b) == codec {
                Ok(b)
            } else {
                batch::recompress(&b, codec, records_bytes_max).map_err(|e| Refusal::from(unreadable(e, &partition)))
            }
        })
        .collect()
}

/// What Kafka's `LogValidator.validateRecord` checks of each produced record here.
struct RecordRules {
    /// cleanup.policy includes `compact`: every record needs a key.
    compacted: bool,
    /// (message.timestamp.before.max.ms, message.timestamp.after.max.ms) when CreateTime
    /// timestamps are bounded (KIP-937).
    timestamp_bounds: Option<(i64, i64)>,
    now_ms: i64,
}

/// A partition refused for the records of one batch that failed validation (KIP-467).
struct RefusedRecords {
    /// Kafka's `processRecordErrors`: INVALID_TIMESTAMP when any record's timestamp is out of
    /// bounds, else INVALID_RECORD.
    invalid_timestamp: bool,
    /// How many records were refused.
    count: usize,
    /// Every refused record, by its index in its batch, with Kafka's message; left empty when
    /// the answer cannot carry them (Produce v0-v7).
    named: Vec<RecordError>,
}

impl From<RefusedRecords> for Refusal {
    /// Kafka's exception message at the top, the records below (v8+; older versions carry only
    /// the error code, which Kafka sends them unchanged).
    fn from(refused: RefusedRecords) -> Refusal {
        let (code, message) = if refused.invalid_timestamp {
            (
                ResponseError::InvalidTimestamp,
                "One or more records have been rejected due to invalid timestamp".to_string(),
            )
        } else {
            // Kafka's InvalidRecordException text, RecordError's toString included.
            let first: Vec<String> = refused
                .named
                .iter()
                .take(3)
                .map(|e| {
                    format!(
                        "RecordError(batchIndex={}, message='{}')",
                        e.batch_index,
                        e.message.as_str()
                    )
                })
                .collect();
            (
                ResponseError::InvalidRecord,
                format!(
                    "One or more records have been rejected due to {} record errors in total, and only \
                     showing the first three errors at most: [{}]",
                    refused.count,
                    first.join(", ")
                ),
            )
        };
        Refusal {
            code: code.code(),
            message,
            record_errors: refused.named,
        }
    }
}

/// The records of the first batch with any invalid record (None when every record is valid).
/// Like Kafka's `LogValidator`, a record is named by its index within its batch, fails on its
/// key before its timestamp, and validation stops after the first batch with an invalid record
/// (Kafka refuses several batches per partition outright, so this only differs from it there).
/// Each batch is decompressed once and walked without materialising records; with `name` false
/// (Produce v0-v7) nothing is allocated per record. A batch whose records do not fit is `InvalidRecord`;
/// one whose records decompress past `records_bytes_max` (`batch::records_bytes_cap`) is
/// `RecordsTooLarge`, found once that many bytes are out (a few KB of zstd can claim gigabytes).
fn invalid_records(
    batches: &[ValidBatch],
    rules: &RecordRules,
    records_bytes_max: usize,
    partition: &str,
    name: bool,
) -> Result<Option<RefusedRecords>> {
    // Kafka's texts (LogValidator.validateKey / validateTimestamp). The keyless one is the same
    // for every record, so the records share one copy.
    let keyless = StrBytes::from_string(format!(
        "Compacted topic cannot accept message without key in topic partition {partition}"
    ));
    let bounds = rules
        .timestamp_bounds
        .map(|(before, after)| (rules.now_ms.saturating_sub(before), rules.now_ms.saturating_add(after)));
    for batch in batches {
        let mut refused = RefusedRecords {
            invalid_timestamp: false,
            count: 0,
            named: Vec::new(),
        };
        let mut batch_index = 0i32;
        batch::scan_records(batch.bytes(), records_bytes_max, |record| {
            // -1 is Kafka's NO_TIMESTAMP, never out of bounds.
            let out_of_bounds = bounds
                .filter(|(low, high)| record.timestamp != -1 && (record.timestamp < *low || record.timestamp > *high));
            if rules.compacted && !record.has_key {
                refused.count += 1;
                if name {
                    refused.named.push(RecordError {
                        batch_index,
                        message: keyless.clone(),
                    });
                }
            } else if let Some((low, high)) = out_of_bounds {
                refused.count += 1;
                refused.invalid_timestamp = true;
                if name {
                    let (timestamp, offset) = (record.timestamp, record.offset);
                    let message = StrBytes::from_string(format!(
                        "Timestamp {timestamp} of message with offset {offset} is out of range. The timestamp \
                         should be within [{low}, {high}]"
                    ));
                    refused.named.push(RecordError { batch_index, message });
                }
            }
            batch_index = batch_index.saturating_add(1);
        })
        .map_err(|e| unreadable(e, partition))?;
        if refused.count > 0 {
            return Ok(Some(refused));
        }
    }
    Ok(None)
}

/// The error for a batch whose records cannot be read. Kafka's record iterator
/// (`DefaultRecordBatch.RecordIterator`) throws InvalidRecordException at a record that does not
/// fit and at bytes left after the declared count: the non-retriable INVALID_RECORD, not the
/// retriable CORRUPT_MESSAGE. Records past max.message.bytes stay `RecordsTooLarge`
/// (RECORD_TOO_LARGE, also non-retriable), so a client does not resend a bomb.
fn unreadable(e: Error, partition: &str) -> Error {
    match e {
        Error::CorruptBatch(text) => Error::InvalidRecord(format!("{text} in topic partition {partition}")),
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::Compression;

    use super::*;
    use crate::log::batch::encode_records;

    const NOW: i64 = 1_700_000_000_000;
    /// max.message.bytes of the tests (Kafka's default).
    const MAX: usize = 1_048_588;

    /// One validated batch per element of `batches`, each (key?, timestamp) per record.
    fn batches(batches: &[&[(bool, i64)]]) -> Vec<ValidBatch> {
        let mut all = BytesMut::new();
        for records in batches {
            let records: Vec<_> = records
                .iter()
                .enumerate()
                .map(|(i, (keyed, timestamp))| {
                    let key = keyed.then(|| Bytes::from(format!("k{i}")));
                    (key, Some(Bytes::from_static(b"v")), *timestamp)
                })
                .collect();
            all.extend_from_slice(&encode_records(&records, Compression::None).unwrap());
        }
        validate_batches(&all.freeze(), 1 << 20).unwrap()
    }

    fn rules(compacted: bool, timestamp_bounds: Option<(i64, i64)>) -> RecordRules {
        RecordRules {
            compacted,
            timestamp_bounds,
            now_ms: NOW,
        }
    }

    fn indexes(refused: &RefusedRecords) -> Vec<i32> {
        refused.named.iter().map(|e| e.batch_index).collect()
    }

    #[test]
    fn every_keyless_record_is_named_by_its_index_in_the_batch() {
        // Kafka's LogValidator.validateKey, one RecordError per keyless record (KIP-467).
        let b = batches(&[&[(true, NOW), (false, NOW), (true, NOW), (false, NOW), (false, NOW)]]);
        let refused = invalid_records(&b, &rules(true, None), MAX, "t-0", true)
            .unwrap()
            .unwrap();
        assert_eq!(indexes(&refused), [1, 3, 4]);
        assert!(!refused.invalid_timestamp);
        assert_eq!(
            refused.named[0].message.as_str(),
            "Compacted topic cannot accept message without key in topic partition t-0"
        );
        assert!(
            invalid_records(&b, &rules(false, None), MAX, "t-0", true)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_record_fails_on_its_key_before_its_timestamp_and_any_timestamp_error_sets_the_code() {
        // Kafka's validateRecord: validateKey first, validateTimestamp only for a keyed record;
        // processRecordErrors answers INVALID_TIMESTAMP when any error is a timestamp's.
        let bounds = Some((1_000, 1_000));
        let b = batches(&[&[(false, 5), (true, 5), (true, NOW), (true, -1), (true, NOW + 1_001)]]);
        let refused = invalid_records(&b, &rules(true, bounds), MAX, "t-0", true)
            .unwrap()
            .unwrap();
        assert_eq!(indexes(&refused), [0, 1, 4], "-1 (NO_TIMESTAMP) is never out of bounds");
        assert!(refused.invalid_timestamp);
        assert!(refused.named[0].message.as_str().starts_with("Compacted"));
        assert_eq!(
            refused.named[1].message.as_str(),
            "Timestamp 5 of message with offset 1 is out of range. The timestamp should be within \
             [1699999999000, 1700000001000]"
        );
        let refusal = Refusal::from(refused);
        assert_eq!(refusal.code, ResponseError::InvalidTimestamp.code());
        assert_eq!(refusal.record_errors.len(), 3);
    }

    #[test]
    fn indexes_restart_in_each_batch_and_only_the_first_refused_batch_is_named() {
        // LogValidator numbers records within their batch and throws after the first batch with
        // record errors.
        let b = batches(&[
            &[(true, NOW), (true, NOW)],
            &[(true, NOW), (false, NOW), (true, NOW), (false, NOW)],
            &[(false, NOW)],
        ]);
        let refused = invalid_records(&b, &rules(true, None), MAX, "t-0", true)
            .unwrap()
            .unwrap();
        assert_eq!(indexes(&refused), [1, 3]);
    }

    #[test]
    fn a_record_that_does_not_fit_refuses_the_partition_as_invalid() {
        let good = encode_records(&[(None, Some(Bytes::from_static(b"v")), NOW)], Compression::None).unwrap();
        let mut bad = BytesMut::from(&good[..]);
        bad[batch::HEADER_LEN] = 0x7e; // the record claims 63 bytes
        let crc = crc32c::crc32c(&bad[batch::ATTRIBUTES..]);
        bad[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let b = validate_batches(&bad.freeze(), 1 << 20).unwrap();
        let err = invalid_records(&b, &rules(true, None), MAX, "t-0", true).err().unwrap();
        assert_eq!(err.code(), ResponseError::InvalidRecord.code(), "{err}");
    }

    #[test]
    fn the_invalid_record_summary_counts_every_error_and_shows_three() {
        // Kafka's processRecordErrors message for InvalidRecordException.
        let b = batches(&[&[(false, NOW); 5]]);
        let refusal = Refusal::from(
            invalid_records(&b, &rules(true, None), MAX, "t-0", true)
                .unwrap()
                .unwrap(),
        );
        let record = "message='Compacted topic cannot accept message without key in topic partition t-0'";
        assert_eq!(
            refusal.message,
            format!(
                "One or more records have been rejected due to 5 record errors in total, and only showing \
                 the first three errors at most: [RecordError(batchIndex=0, {record}), \
                 RecordError(batchIndex=1, {record}), RecordError(batchIndex=2, {record})]"
            )
        );
        assert_eq!(refusal.record_errors.len(), 5);
    }
}
