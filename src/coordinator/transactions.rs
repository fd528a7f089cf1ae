//! The transaction coordinator: transactional ids, their producer ids and epochs, and the
//! two-phase end of each transaction, with the state kept in the internal compacted topic
//! `__transaction_state` (Kafka's record formats, txn_records.rs; id → partition by Kafka's
//! hash). The ids of a partition are loaded from it when this node becomes its leader, and
//! dropped when it stops leading it (loading.rs; Kafka's
//! `loadTransactionsForTxnTopicPartition` / `removeTransactionsForTxnTopicPartition`); a
//! transaction found in Prepare* at load is finished. Writes wait until every in-sync replica
//! holds them.
//!
//! `TxnStates` is the state machine (Kafka's `TransactionMetadata` transitions), a plain struct
//! taking `now`. A transition is prepared under the lock (the id is then *pending*: other
//! requests for it get CONCURRENT_TRANSACTIONS, as in Kafka), written to `__transaction_state`
//! without the lock, then applied, or dropped when the write failed. Both happen only if the
//! id's partition is still loaded at the epoch it was prepared under (Kafka's coordinator-epoch
//! check in `appendTransactionToLog`'s callback): after a failover and back the id's state is
//! another load's, which neither the write nor its failure may touch.
//!
//! Ending a transaction (EndTxn, a fence by InitProducerId, a timeout) writes PrepareCommit or
//! PrepareAbort, then a marker to every partition of the transaction (`MarkerWriter`: written
//! here for partitions hosted here, one WriteTxnMarkers request per other leader), then
//! CompleteCommit or CompleteAbort. A transaction left in Prepare* (markers that failed, a
//! leader unreachable, a crash) is finished by the timer task and at load.
//!
//! Transaction versions follow the request, as Kafka's `TransactionVersion.transactionVersionFor*`
//! derive them: EndTxn v5 and AddPartitionsToTxn v4+ (the broker's add on a Produce) speak
//! version 2 (KIP-890 part 2: every commit or abort bumps the epoch, an exhausted epoch moves to
//! a new producer id at the end of a transaction, an abort needs no partition); older requests
//! keep the version 0/1 rules.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

use super::loading::{self, LOAD_ROUNDS_MAX, LoadedPartitions, Readiness};
use super::records::partition_for;
use super::txn_records::{self, TxnLogValue};
use super::{GroupCoordinator, internal_replication_factor};
use crate::cluster::broker_client::BrokerClient;
use crate::cluster::{Controller, MetadataImage};
use crate::config::BrokerConfig;
use crate::error::Error;
use crate::log::batch::encode_records;
use crate::log::validate_batches;
use crate::replica::{Partition, ReplicaManager, TopicPartition, now_ms};

pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;

fn code(e: ResponseError) -> i16 {
    e.code()
}

/// Kafka's `TransactionState`, with its ids (the byte stored) and names (ListTransactions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Kafka's `TransactionMetadata.isEpochExhausted`: the last epoch is kept for fencing.
fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// One transactional id.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub previous_producer_id: i64,
    /// The producer id the transaction moves to when it completes (version 2, the epoch
    /// exhausted), or -1.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so a retried InitProducerId whose answer was lost gets
    /// the same answer (KIP-360); -1 after a bump by another producer.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the ongoing transaction began (its first AddPartitions), or -1.
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// The transaction version of the client's last AddPartitions or EndTxn: 0 or 2.
    pub client_transaction_version: i16,
    /// The state a write in flight moves to (Kafka's `pendingState`).
    pub pending: Option<TxnState>,
}

/// A transition to write, then apply (Kafka's `TxnTransitMetadata`).
#[derive(Debug, Clone, PartialEq)]
pub struct Transit {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
    pub client_transaction_version: i16,
}

impl Transit {
    /// The stored form. Kafka writes no partitions (null) for Empty.
    pub fn to_record(&self) -> TxnLogValue {
        let partitions = if self.state == TxnState::Empty {
            None
        } else {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in &self.partitions {
                by_topic.entry(&tp.topic).or_default().push(tp.partition);
            }
            Some(by_topic.into_iter().map(|(t, p)| (t.to_string(), p)).collect())
        };
        TxnLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            transaction_timeout_ms: self.timeout_ms,
            transaction_status: self.state.id(),
            transaction_partitions: partitions,
            transaction_last_update_timestamp_ms: self.last_update_ms,
            transaction_start_timestamp_ms: self.start_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }
}

impl TxnMetadata {
    fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now: i64) -> TxnMetadata {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now,
            client_transaction_version: 0,
            pending: None,
        }
    }

    fn from_record(transactional_id: &str, v: &TxnLogValue) -> Option<TxnMetadata> {
        let state = TxnState::from_id(v.transaction_status)?;
        let partitions = v
            .transaction_partitions
            .iter()
            .flatten()
            .flat_map(|(topic, ps)| {
                ps.iter().map(|p| TopicPartition {
                    topic: topic.clone(),
                    partition: *p,
                })
            })
            .collect();
        Some(TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id: v.producer_id,
            previous_producer_id: v.previous_producer_id,
            next_producer_id: v.next_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: v.transaction_timeout_ms,
            state,
            partitions,
            start_ms: v.transaction_start_timestamp_ms,
            last_update_ms: v.transaction_last_update_timestamp_ms,
            client_transaction_version: v.client_transaction_version,
            pending: None,
        })
    }

    /// A transit from the current state; the caller changes what the transition changes.
    /// As in Kafka's `prepareTransitionTo`, the previous producer id is the current one.
    fn transit(&self, state: TxnState, now: i64) -> Transit {
        Transit {
            producer_id: self.producer_id,
            previous_producer_id: self.producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            timeout_ms: self.timeout_ms,
            state,
            partitions: self.partitions.clone(),
            start_ms: self.start_ms,
            last_update_ms: now,
            client_transaction_version: self.client_transaction_version,
        }
    }

    /// Marks `transit` as in flight and hands it back.
    fn begin(&mut self, transit: Transit) -> Transit {
        debug_assert!(self.pending.is_none(), "one transition at a time");
        self.pending = Some(transit.state);
        transit
    }

    fn apply(&mut self, t: &Transit) {
        debug_assert!(
            t.producer_id != self.producer_id || t.producer_epoch >= self.producer_epoch,
            "epochs never fall"
        );
        self.producer_id = t.producer_id;
        self.previous_producer_id = t.previous_producer_id;
        self.next_producer_id = t.next_producer_id;
        self.client_transaction_version = t.client_transaction_version;
        self.producer_epoch = t.producer_epoch;
        self.last_producer_epoch = t.last_producer_epoch;
        self.timeout_ms = t.timeout_ms;
        self.state = t.state;
        self.partitions = t.partitions.clone();
        self.start_ms = t.start_ms;
        self.last_update_ms = t.last_update_ms;
        self.pending = None;
    }

    /// Kafka's `prepareIncrementProducerEpoch`: a fresh InitProducerId bumps the epoch; a
    /// producer recovering with its current epoch bumps it too; a retry whose answer was lost
    /// (the expected epoch is the last one) gets the current epoch again.
    fn prepare_increment_epoch(&self, timeout_ms: i32, expected_epoch: Option<i16>, now: i64) -> Result<Transit, i16> {
        let bumped = self.producer_epoch.saturating_add(1);
        let (epoch, last) = match expected_epoch {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (bumped, self.producer_epoch)
            }
            Some(e) if e == self.last_producer_epoch => (self.producer_epoch, self.last_producer_epoch),
            Some(_) => return Err(code(ResponseError::ProducerFenced)),
        };
        let mut t = self.transit(TxnState::Empty, now);
        t.producer_epoch = epoch;
        t.last_producer_epoch = last;
        t.timeout_ms = timeout_ms;
        t.partitions.clear();
        t.start_ms = -1;
        Ok(t)
    }

    /// Kafka's `prepareProducerIdRotation`: the epoch is exhausted, a new producer id starts at 0.
    fn prepare_rotation(&self, new_producer_id: i64, timeout_ms: i32, record_last_epoch: bool, now: i64) -> Transit {
        let mut t = self.transit(TxnState::Empty, now);
        t.producer_id = new_producer_id;
        t.producer_epoch = 0;
        t.last_producer_epoch = if record_last_epoch {
            self.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        t.timeout_ms = timeout_ms;
        t.partitions.clear();
        t.start_ms = -1;
        t
    }

    /// Kafka's `prepareFenceProducerEpoch` followed by `endTransaction(ABORT)` from the
    /// coordinator: the epoch is bumped in memory at once (the old producer is fenced from now
    /// on, even if the write fails) and PrepareAbort is prepared with it.
    fn fence_and_prepare_abort(&mut self, now: i64) -> Transit {
        debug_assert_eq!(self.state, TxnState::Ongoing);
        self.producer_epoch = self.producer_epoch.saturating_add(1);
        self.last_producer_epoch = NO_PRODUCER_EPOCH;
        let tv2 = self.client_transaction_version >= 2;
        let start = self.start_ms;
        let t = self.prepare_end(TxnState::PrepareAbort, tv2, NO_PRODUCER_ID, start, now);
        self.begin(t)
    }

    /// Kafka's `prepareAbortOrCommit`. Version 2 bumps the epoch (not past i16::MAX, where only
    /// an abort can still go through) and may name the producer id the transaction moves to.
    fn prepare_end(&self, state: TxnState, tv2: bool, next_producer_id: i64, start_ms: i64, now: i64) -> Transit {
        let mut t = self.transit(state, now);
        if tv2 {
            if !(self.producer_epoch == i16::MAX && state == TxnState::PrepareAbort) {
                t.producer_epoch = self.producer_epoch.saturating_add(1);
            }
            t.last_producer_epoch = self.producer_epoch;
            t.client_transaction_version = 2;
        } else {
            t.client_transaction_version = 0;
        }
        t.next_producer_id = next_producer_id;
        t.start_ms = start_ms;
        t
    }
}

/// What InitProducerId must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum InitStep {
    /// Write this (state Empty, new epoch or producer id), then answer with its id and epoch.
    Write(Transit),
    /// An ongoing transaction must be aborted first (its producer fenced): write this
    /// PrepareAbort, finish the abort, then answer CONCURRENT_TRANSACTIONS so the client
    /// retries (Kafka's PrepareEpochFence path).
    FenceOngoing(Transit),
}

/// What EndTxn must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum EndStep {
    /// A retry of an EndTxn that already completed with the same result: answered with the
    /// current producer id and epoch (EndTxn v5 carries them).
    AlreadyDone { producer_id: i64, producer_epoch: i16 },
    /// Write this PrepareCommit / PrepareAbort, then the markers, then complete.
    Write(Transit),
}

/// Broker settings the state machine uses.
#[derive(Debug, Clone, Copy)]
pub struct TxnLimits {
    /// `transaction.max.timeout.ms`.
    pub max_timeout_ms: i64,
    /// `transactional.id.expiration.ms`.
    pub id_expiration_ms: i64,
}

/// Every transactional id this coordinator owns.
pub struct TxnStates {
    pub txns: HashMap<String, TxnMetadata>,
    pub limits: TxnLimits,
}

impl TxnStates {
    pub fn new(limits: TxnLimits) -> TxnStates {
        TxnStates {
            txns: HashMap::new(),
            limits,
        }
    }

    /// Applies a record read from `__transaction_state` (load): the last one per id wins.
    pub fn load_record(&mut self, transactional_id: &str, value: Option<&TxnLogValue>) {
        match value.and_then(|v| TxnMetadata::from_record(transactional_id, v)) {
            Some(m) if m.state != TxnState::Dead => {
                self.txns.insert(transactional_id.to_string(), m);
            }
            _ => {
                self.txns.remove(transactional_id);
            }
        }
    }

    /// InitProducerId with a transactional id (Kafka's `handleInitProducerId` and
    /// `prepareInitProducerIdTransit`). `allocate` hands out a new producer id when one is needed.
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        allocate: &mut dyn FnMut() -> Result<i64, i16>,
        now: i64,
    ) -> Result<InitStep, i16> {
        if transactional_id.is_empty() {
            return Err(code(ResponseError::InvalidRequest));
        }
        if timeout_ms <= 0 || i64::from(timeout_ms) > self.limits.max_timeout_ms {
            return Err(code(ResponseError::InvalidTransactionTimeout));
        }
        if !self.txns.contains_key(transactional_id) {
            let producer_id = allocate()?;
            self.txns.insert(
                transactional_id.to_string(),
                TxnMetadata::new(transactional_id, producer_id, timeout_ms, now),
            );
        }
        let Some(m) = self.txns.get_mut(transactional_id) else {
            return Err(code(ResponseError::UnknownServerError));
        };
        if m.pending.is_some() {
            return Err(code(ResponseError::ConcurrentTransactions));
        }
        // KIP-360: a producer naming its id and epoch continues only if it is still the
        // current producer, just created, or retrying a bump that rotated its id.
        if let Some((pid, epoch)) = expected {
            let valid = m.producer_epoch == NO_PRODUCER_EPOCH
                || pid == m.producer_id
                || (pid == m.previous_producer_id && epoch_exhausted(epoch));
            if !valid {
                return Err(code(ResponseError::ProducerFenced));
            }
        }
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => Err(code(ResponseError::ConcurrentTransactions)),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let t = if epoch_exhausted(m.producer_epoch) && expected.is_none_or(|(_, e)| e == m.producer_epoch) {
                    let new_id = allocate()?;
                    m.prepare_rotation(new_id, timeout_ms, expected.is_some(), now)
                } else {
                    m.prepare_increment_epoch(timeout_ms, expected.map(|(_, e)| e), now)?
                };
                Ok(InitStep::Write(m.begin(t)))
            }
            TxnState::Ongoing => Ok(InitStep::FenceOngoing(m.fence_and_prepare_abort(now))),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(code(ResponseError::ConcurrentTransactions)),
        }
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (Kafka's `handleAddPartitionsToTransaction`):
    /// None when every partition is already in the ongoing transaction.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        tv2: bool,
        now: i64,
    ) -> Result<Option<Transit>, i16> {
        if transactional_id.is_empty() {
            return Err(code(ResponseError::InvalidRequest));
        }
        let m = self
            .txns
            .get_mut(transactional_id)
            .ok_or(code(ResponseError::InvalidProducerIdMapping))?;
        if m.pending.is_some() {
            return Err(code(ResponseError::ConcurrentTransactions));
        }
        if m.producer_id != producer_id {
            return Err(code(ResponseError::InvalidProducerIdMapping));
        }
        if m.producer_epoch != producer_epoch {
            return Err(code(ResponseError::ProducerFenced));
        }
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => Err(code(ResponseError::ConcurrentTransactions)),
            TxnState::Ongoing if partitions.iter().all(|p| m.partitions.contains(p)) => Ok(None),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(code(ResponseError::ConcurrentTransactions)),
            TxnState::Ongoing | TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut t = m.transit(TxnState::Ongoing, now);
                if m.state != TxnState::Ongoing {
                    t.start_ms = now;
                    t.partitions.clear();
                }
                t.partitions.extend(partitions.iter().cloned());
                t.client_transaction_version = if tv2 { 2 } else { 0 };
                Ok(Some(m.begin(t)))
            }
        }
    }

    /// AddPartitionsToTxn v4+ verify_only, and Produce's check (KIP-890 part 1; Kafka's
    /// `handleVerifyPartitionsInTransaction`): per partition, NONE when it is in the ongoing
    /// transaction, TRANSACTION_ABORTABLE when not.
    pub fn verify(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Vec<i16>, i16> {
        if transactional_id.is_empty() {
            return Err(code(ResponseError::InvalidRequest));
        }
        let m = self
            .txns
            .get(transactional_id)
            .ok_or(code(ResponseError::InvalidProducerIdMapping))?;
        if m.producer_id != producer_id {
            return Err(code(ResponseError::InvalidProducerIdMapping));
        }
        if m.producer_epoch != producer_epoch {
            return Err(code(ResponseError::ProducerFenced));
        }
        if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(code(ResponseError::ConcurrentTransactions));
        }
        Ok(partitions
            .iter()
            .map(|p| {
                if m.state == TxnState::Ongoing && m.partitions.contains(p) {
                    0
                } else {
                    code(ResponseError::TransactionAbortable)
                }
            })
            .collect())
    }

    /// EndTxn (Kafka's `endTransaction`). `tv2` is an EndTxn v5 (transaction version 2: the
    /// epoch is bumped at every end); `allocate` gives the next producer id when that bump
    /// exhausts the epoch.
    #[allow(clippy::too_many_arguments)]
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        tv2: bool,
        allocate: &mut dyn FnMut() -> Result<i64, i16>,
        now: i64,
    ) -> Result<EndStep, i16> {
        if transactional_id.is_empty() {
            return Err(code(ResponseError::InvalidRequest));
        }
        let m = self
            .txns
            .get_mut(transactional_id)
            .ok_or(code(ResponseError::InvalidProducerIdMapping))?;
        let concurrent = || Err(code(ResponseError::ConcurrentTransactions));
        let invalid = || Err(code(ResponseError::InvalidTxnState));
        let next = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        if !tv2 {
            if m.producer_id != producer_id {
                return Err(code(ResponseError::InvalidProducerIdMapping));
            }
            // Strict equality for the client: it never bumps the epoch itself.
            if m.producer_epoch != producer_epoch {
                return Err(code(ResponseError::ProducerFenced));
            }
            if m.pending.is_some() {
                return concurrent();
            }
            return match (m.state, commit) {
                (TxnState::Ongoing, _) => {
                    let t = m.prepare_end(next, false, NO_PRODUCER_ID, m.start_ms, now);
                    Ok(EndStep::Write(m.begin(t)))
                }
                (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(EndStep::AlreadyDone {
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                }),
                (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => concurrent(),
                (TxnState::CompleteCommit, false)
                | (TxnState::CompleteAbort, true)
                | (TxnState::PrepareCommit, false)
                | (TxnState::PrepareAbort, true)
                | (TxnState::Empty, _) => invalid(),
                (TxnState::Dead | TxnState::PrepareEpochFence, _) => concurrent(),
            };
        }
        // Version 2: the same epoch names the next end, the epoch below it a retry of the
        // last one (or, after an overflow, the last epoch of the previous producer id).
        let retry_on_overflow = m.previous_producer_id == producer_id
            && producer_epoch == i16::MAX - 1
            && m.producer_epoch == 0
            && m.producer_id != producer_id;
        let retry_on_bump =
            m.producer_id == producer_id && i32::from(m.producer_epoch) == i32::from(producer_epoch) + 1;
        let valid = match m.state {
            TxnState::Ongoing | TxnState::Empty | TxnState::Dead | TxnState::PrepareEpochFence => {
                producer_epoch == m.producer_epoch
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                retry_on_bump || retry_on_overflow || producer_epoch == m.producer_epoch
            }
        };
        if m.producer_id != producer_id && !retry_on_overflow {
            return Err(code(ResponseError::InvalidProducerIdMapping));
        }
        if !valid {
            return Err(code(ResponseError::ProducerFenced));
        }
        if m.pending.is_some() {
            return concurrent();
        }
        let is_retry = retry_on_bump || retry_on_overflow;
        let done = EndStep::AlreadyDone {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
        };
        let mut prepare = |m: &mut TxnMetadata, state: TxnState, no_partition_added: bool| -> Result<EndStep, i16> {
            let next_producer_id = if epoch_exhausted(m.producer_epoch) {
                allocate()?
            } else {
                NO_PRODUCER_ID
            };
            // An abort with no partition (allowed in version 2) starts now.
            let start = if no_partition_added { now } else { m.start_ms };
            let t = m.prepare_end(state, true, next_producer_id, start, now);
            Ok(EndStep::Write(m.begin(t)))
        };
        match (m.state, commit) {
            (TxnState::Ongoing, _) => prepare(m, next, false),
            (TxnState::CompleteCommit, true) if is_retry => Ok(done),
            (TxnState::CompleteCommit, true) => invalid(),
            (TxnState::CompleteCommit, false) if is_retry => invalid(),
            (TxnState::CompleteAbort, false) if is_retry => Ok(done),
            (TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty, false) => {
                prepare(m, TxnState::PrepareAbort, true)
            }
            (TxnState::CompleteAbort | TxnState::Empty, true) => invalid(),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => concurrent(),
            (TxnState::PrepareCommit, false) | (TxnState::PrepareAbort, true) => invalid(),
            (TxnState::Dead | TxnState::PrepareEpochFence, _) => concurrent(),
        }
    }

    /// After Prepare* is written: the markers go out while CompleteCommit / CompleteAbort is
    /// pending (Kafka's `prepareComplete`). In version 2 a transaction whose epoch was exhausted
    /// completes on its next producer id, at epoch 0. None when the id is not in Prepare* or is
    /// busy.
    pub fn prepare_complete(&mut self, transactional_id: &str, now: i64) -> Option<Transit> {
        let m = self.txns.get_mut(transactional_id)?;
        if m.pending.is_some() {
            return None;
        }
        let next = match m.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return None,
        };
        let mut t = m.transit(next, now);
        t.partitions.clear();
        if m.client_transaction_version >= 2 && m.next_producer_id != NO_PRODUCER_ID {
            t.producer_id = m.next_producer_id;
            t.producer_epoch = 0;
        }
        t.next_producer_id = NO_PRODUCER_ID;
        Some(m.begin(t))
    }

    /// Applies a transition once it is durable.
    pub fn complete(&mut self, transactional_id: &str, t: &Transit) {
        if let Some(m) = self.txns.get_mut(transactional_id) {
            m.apply(t);
        }
    }

    /// Drops a transition whose write failed; the id stays as it was.
    pub fn fail(&mut self, transactional_id: &str) {
        if let Some(m) = self.txns.get_mut(transactional_id) {
            m.pending = None;
        }
    }

    /// Ongoing transactions older than their timeout, fenced and prepared for abort (Kafka's
    /// `abortTimedOutTransactions`): (id, producer id, PrepareAbort transit).
    pub fn fence_timed_out(&mut self, now: i64) -> Vec<(String, Transit)> {
        let mut out = Vec::new();
        for (id, m) in self.txns.iter_mut() {
            let expired = m.state == TxnState::Ongoing
                && m.pending.is_none()
                && m.start_ms.saturating_add(i64::from(m.timeout_ms)) < now;
            if expired {
                out.push((id.clone(), m.fence_and_prepare_abort(now)));
            }
        }
        out
    }

    /// Ids idle past `transactional.id.expiration.ms` (Kafka's `removeExpiredTransactionalIds`),
    /// marked Dead-pending until their tombstone is written (then `remove`).
    pub fn expire_ids(&mut self, now: i64) -> Vec<String> {
        let expiration = self.limits.id_expiration_ms;
        let mut out = Vec::new();
        for (id, m) in self.txns.iter_mut() {
            let idle = matches!(
                m.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ) && m.pending.is_none()
                && m.last_update_ms.saturating_add(expiration) <= now;
            if idle {
                m.pending = Some(TxnState::Dead);
                out.push(id.clone());
            }
        }
        out
    }

    /// Removes an id whose tombstone is durable.
    pub fn remove(&mut self, transactional_id: &str) {
        if self
            .txns
            .get(transactional_id)
            .is_some_and(|m| m.pending == Some(TxnState::Dead))
        {
            self.txns.remove(transactional_id);
        }
    }

    /// Ids left in Prepare* with nothing in flight: their markers must be (re)written.
    pub fn unfinished(&self) -> Vec<String> {
        self.txns
            .values()
            .filter(|m| m.pending.is_none() && matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|m| m.transactional_id.clone())
            .collect()
    }
}

/// One commit or abort marker, as WriteTxnMarkers carries it (Kafka's `TxnMarkerEntry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    /// The producer's epoch the transaction ends with (bumped first under version 2).
    pub producer_epoch: i16,
    /// The leader epoch of the coordinator's `__transaction_state` partition: a partition
    /// refuses markers of an older coordinator (TRANSACTION_COORDINATOR_FENCED).
    pub coordinator_epoch: i32,
    pub commit: bool,
    /// The transaction's version (KIP-1228): under 2 a partition takes only a marker newer
    /// than the producer's epoch there.
    pub transaction_version: i8,
}

/// What became of a marker on each partition.
pub type MarkerResults = Vec<(TopicPartition, Result<(), i16>)>;

/// The WriteTxnMarkers version sent: 2 carries the transaction version (KIP-1228).
pub const WRITE_TXN_MARKERS_VERSION: i16 = 2;

/// Writes transaction markers: the one place a coordinator touches the data partitions of a
/// transaction (Kafka's `TransactionMarkerChannelManager`). Partitions hosted here are written
/// directly; each other broker leading some of the partitions gets one WriteTxnMarkers request
/// for all of them, sent concurrently, and its per-partition answers are the results. That
/// broker writes them with `write_hosted`, as this one writes its own.
pub struct MarkerWriter {
    node_id: i32,
    controller: Arc<Controller>,
    replicas: Arc<ReplicaManager>,
    groups: Arc<GroupCoordinator>,
    brokers: Arc<BrokerClient>,
}

/// Where each partition's marker goes: written here, sent to its leader, or settled without a
/// write.
#[derive(Debug)]
struct MarkerRoute<P> {
    hosted: Vec<(TopicPartition, P)>,
    remote: BTreeMap<i32, Vec<TopicPartition>>,
    settled: MarkerResults,
}

/// Routes each partition's marker by `image`: hosted here (`hosted_here` finds the open
/// partition), else to the leader the image names. A partition whose topic is gone needs no
/// marker (Kafka drops it too); one with no leader, or led here but not open, fails for now
/// and is retried with the transaction.
fn route_markers<P>(
    image: &MetadataImage,
    node_id: i32,
    partitions: &[TopicPartition],
    hosted_here: impl Fn(&TopicPartition) -> Option<P>,
) -> MarkerRoute<P> {
    let mut route = MarkerRoute {
        hosted: Vec::new(),
        remote: BTreeMap::new(),
        settled: Vec::new(),
    };
    for tp in partitions {
        if let Some(partition) = hosted_here(tp) {
            route.hosted.push((tp.clone(), partition));
            continue;
        }
        let settled = match image.topic(&tp.topic) {
            None => Ok(()),
            Some(topic) if tp.partition < 0 || tp.partition >= topic.partitions => Ok(()),
            Some(topic) => match topic.leader(tp.partition) {
                -1 => Err(code(ResponseError::LeaderNotAvailable)),
                leader if leader == node_id => Err(code(ResponseError::NotLeaderOrFollower)),
                leader => {
                    route.remote.entry(leader).or_default().push(tp.clone());
                    continue;
                }
            },
        };
        route.settled.push((tp.clone(), settled));
    }
    route
}

/// Whether the metadata no longer has `tp`: its marker is moot.
fn partition_gone(image: &MetadataImage, tp: &TopicPartition) -> bool {
    image
        .topic(&tp.topic)
        .is_none_or(|t| tp.partition < 0 || tp.partition >= t.partitions)
}

/// The WriteTxnMarkers request for `marker` on `partitions` (one leader's).
fn marker_request(marker: TxnMarker, partitions: &[TopicPartition]) -> WriteTxnMarkersRequest {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let topics = by_topic
        .into_iter()
        .map(|(topic, indexes)| {
            WritableTxnMarkerTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_indexes(indexes)
        })
        .collect();
    WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(marker.producer_id))
            .with_producer_epoch(marker.producer_epoch)
            .with_transaction_result(marker.commit)
            .with_coordinator_epoch(marker.coordinator_epoch)
            .with_transaction_version(marker.transaction_version)
            .with_topics(topics),
    ])
}

/// Each partition's result in a WriteTxnMarkers answer. UNKNOWN_TOPIC_OR_PARTITION for a
/// partition `gone` from the metadata meanwhile settles it (deleted since); a partition the
/// answer leaves out failed.
fn marker_results(
    partitions: Vec<TopicPartition>,
    producer_id: i64,
    response: &WriteTxnMarkersResponse,
    gone: impl Fn(&TopicPartition) -> bool,
) -> MarkerResults {
    let mut codes: HashMap<(&str, i32), i16> = HashMap::new();
    for marker in response.markers.iter().filter(|m| m.producer_id.0 == producer_id) {
        for topic in &marker.topics {
            for p in &topic.partitions {
                codes.insert((topic.name.0.as_str(), p.partition_index), p.error_code);
            }
        }
    }
    let unknown = code(ResponseError::UnknownTopicOrPartition);
    partitions
        .into_iter()
        .map(|tp| {
            let result = match codes.get(&(tp.topic.as_str(), tp.partition)) {
                Some(0) => Ok(()),
                Some(c) if *c == unknown && gone(&tp) => Ok(()),
                Some(c) => Err(*c),
                None => Err(code(ResponseError::UnknownServerError)),
            };
            (tp, result)
        })
        .collect()
}

impl MarkerWriter {
    pub fn new(
        node_id: i32,
        controller: Arc<Controller>,
        replicas: Arc<ReplicaManager>,
        groups: Arc<GroupCoordinator>,
        brokers: Arc<BrokerClient>,
    ) -> MarkerWriter {
        MarkerWriter {
            node_id,
            controller,
            replicas,
            groups,
            brokers,
        }
    }

    /// The client for requests to other brokers (Produce's KIP-890 verification uses it too).
    pub fn broker_client(&self) -> &Arc<BrokerClient> {
        &self.brokers
    }

    /// Writes `marker` to each of `partitions`, wherever it is led, and waits until each is
    /// durable. A partition whose topic no longer exists counts as done.
    pub async fn write_markers(&self, marker: TxnMarker, partitions: &[TopicPartition]) -> MarkerResults {
        let image = self.controller.image();
        let route = route_markers(&image, self.node_id, partitions, |tp| {
            self.replicas.get(&tp.topic, tp.partition)
        });
        let (hosted_tps, hosted): (Vec<TopicPartition>, Vec<Arc<Partition>>) = route.hosted.into_iter().unzip();
        let local = self.write_hosted(marker, hosted);
        let remote = futures::future::join_all(
            route
                .remote
                .into_iter()
                .map(|(leader, tps)| self.write_remote(&image, leader, marker, tps)),
        );
        let (local, remote) = futures::join!(local, remote);
        let mut done = route.settled;
        done.extend(hosted_tps.into_iter().zip(local));
        done.extend(remote.into_iter().flatten());
        done
    }

    /// Writes `marker` to partitions hosted here and waits until each is acknowledged as an
    /// acks=all produce is (Kafka appends markers with acks=-1): refused before the write below
    /// `min.insync.replicas`, then durable here and held by every in-sync replica, so a marker
    /// reported written survives the loss of the partition's leader. All are appended first,
    /// then waited for together (the fsyncs and replication overlap); a `__consumer_offsets`
    /// partition then applies or drops the offsets the transaction committed there. The one
    /// write path of markers: the coordinator's own partitions and WriteTxnMarkers from another
    /// broker's coordinator. Results are in the order of `partitions`.
    pub async fn write_hosted(&self, marker: TxnMarker, partitions: Vec<Arc<Partition>>) -> Vec<Result<(), i16>> {
        let appended: Vec<Result<i64, i16>> =
            futures::future::join_all(partitions.iter().map(|partition| async move {
                partition.check_enough_replicas().map_err(|e| e.code())?;
                partition
                    .write_txn_marker(
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        marker.commit,
                        marker.transaction_version,
                    )
                    .await
                    .map(|info| info.last_offset)
                    .map_err(|e| e.code())
            }))
            .await;
        let waits = partitions
            .iter()
            .zip(&appended)
            .map(|(partition, appended)| async move {
                match appended {
                    Ok(offset) => partition.wait_acknowledged(*offset).await.map_err(|e| e.code()),
                    Err(c) => Err(*c),
                }
            });
        let acknowledged = futures::future::join_all(waits).await;
        for (partition, result) in partitions.iter().zip(&acknowledged) {
            if result.is_ok() && partition.tp.topic == super::OFFSETS_TOPIC {
                // Offsets committed in the transaction become visible, or are dropped.
                self.groups
                    .complete_txn(partition.tp.partition, marker.producer_id, marker.commit);
            }
        }
        acknowledged
    }

    /// One WriteTxnMarkers to `leader` for its `partitions`. A broker not registered or fenced
    /// gets nothing (Kafka's marker manager waits for a live leader); one that cannot be reached
    /// fails its partitions with the network error. Both are retried with the transaction.
    async fn write_remote(
        &self,
        image: &MetadataImage,
        leader: i32,
        marker: TxnMarker,
        partitions: Vec<TopicPartition>,
    ) -> MarkerResults {
        let failed = |partitions: Vec<TopicPartition>, c: i16| partitions.into_iter().map(|tp| (tp, Err(c))).collect();
        let Some(broker) = image.brokers.get(&leader).filter(|b| !b.fenced) else {
            return failed(partitions, code(ResponseError::LeaderNotAvailable));
        };
        let request = marker_request(marker, &partitions);
        match self.brokers.call(broker, WRITE_TXN_MARKERS_VERSION, &request).await {
            Ok(response) => {
                let now = self.controller.image();
                marker_results(partitions, marker.producer_id, &response, |tp| partition_gone(&now, tp))
            }
            Err(e) => {
                tracing::warn!(leader, error = %e, "sending transaction markers");
                failed(partitions, e.code())
            }
        }
    }
}

/// A transaction as DescribeTransactions reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnDescription {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    pub start_ms: i64,
    pub partitions: Vec<TopicPartition>,
}

/// ListTransactions filters (v0 states and producer ids, v1 duration, v2 id pattern).
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub states: Vec<String>,
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this; -1 for all.
    pub duration_ms: i64,
    pub pattern: Option<String>,
}

/// The transaction coordinator service: `TxnStates` behind a lock, `__transaction_state`
/// writes, markers.
pub struct TransactionCoordinator {
    config: Arc<BrokerConfig>,
    controller: Arc<Controller>,
    replicas: Arc<ReplicaManager>,
    states: Mutex<TxnStates>,
    markers: MarkerWriter,
    /// The `__transaction_state` partitions whose ids are loaded here, and at which epoch:
    /// the coordinator epoch of their transactions' markers. Changed only under `states`,
    /// read under it when a transition is prepared (lock order: `states`, then this).
    loaded: LoadedPartitions,
    /// Set when a partition was loaded (by the pass or a request) since the background pass
    /// last finished the transactions found in Prepare*.
    loaded_unfinished: AtomicBool,
}

impl TransactionCoordinator {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: Arc<Controller>,
        replicas: Arc<ReplicaManager>,
        groups: Arc<GroupCoordinator>,
    ) -> TransactionCoordinator {
        let brokers = Arc::new(BrokerClient::for_config(&config, Default::default()));
        TransactionCoordinator {
            markers: MarkerWriter::new(config.node_id, controller.clone(), replicas.clone(), groups, brokers),
            states: Mutex::new(TxnStates::new(Self::limits(&config))),
            config,
            controller,
            replicas,
            loaded: LoadedPartitions::new(TRANSACTION_STATE_TOPIC),
            loaded_unfinished: AtomicBool::new(false),
        }
    }

    fn limits(config: &BrokerConfig) -> TxnLimits {
        TxnLimits {
            max_timeout_ms: config.transaction_max_timeout_ms,
            id_expiration_ms: config.transactional_id_expiration_ms,
        }
    }

    /// The markers' writer: WriteTxnMarkers from other coordinators writes through it.
    pub fn markers(&self) -> &MarkerWriter {
        &self.markers
    }

    fn lock(&self) -> MutexGuard<'_, TxnStates> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn partition_count(&self) -> i32 {
        self.controller
            .image()
            .topic(TRANSACTION_STATE_TOPIC)
            .map_or(self.config.transaction_state_log_num_partitions, |t| t.partitions)
    }

    /// The `__transaction_state` partition of `transactional_id`.
    fn partition_of(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.partition_count())
    }

    /// Creates `__transaction_state` on first use, as Kafka does on the first transaction
    /// coordinator lookup: replicated `transaction.state.log.replication.factor` times and
    /// with `min.insync.replicas` = `transaction.state.log.min.isr`, both capped
    /// (`internal_replication_factor`; a minimum above the factor would refuse every write).
    pub fn ensure_topic(&self) -> Result<(), Error> {
        if let Some(topic) = self.controller.image().topic(TRANSACTION_STATE_TOPIC) {
            if self
                .replicas
                .get(TRANSACTION_STATE_TOPIC, topic.partitions - 1)
                .is_some()
            {
                return Ok(());
            }
            return self.replicas.catch_up(&self.controller.image());
        }
        // Held from the creation until the new partitions are marked loaded (see
        // `GroupCoordinator::ensure_offsets_topic`).
        let _pass = self.loaded.pass();
        let image = self.controller.image();
        let factor = internal_replication_factor(&image, self.config.transaction_state_log_replication_factor);
        let min_isr = self.config.transaction_state_log_min_isr.min(i32::from(factor));
        let configs = BTreeMap::from([
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("min.insync.replicas".to_string(), min_isr.to_string()),
        ]);
        let partitions = self.config.transaction_state_log_num_partitions;
        match self
            .controller
            .create_topic(TRANSACTION_STATE_TOPIC, partitions, factor, configs)
        {
            Ok(_) => {
                self.replicas.catch_up(&self.controller.image())?;
                // Under `states`, as every change of what is loaded.
                let _states = self.lock();
                self.loaded.mark_created(&self.replicas, partitions);
                Ok(())
            }
            Err(e) if e.is_topic_already_exists() => self.replicas.catch_up(&self.controller.image()),
            Err(e) => Err(e),
        }
    }

    /// Whether a request for the id may be served here now: its partition is led here and its
    /// ids are loaded at the current leader epoch, loaded by this call if the partition is
    /// small (loading.rs; its transactions in Prepare* are then finished by the background
    /// pass, woken for it). False wakes the background pass.
    pub fn ready(&self, transactional_id: &str) -> bool {
        let partitions = self.partition_count();
        let p = partition_for(transactional_id, partitions);
        match self.loaded.check(&self.replicas, p) {
            Readiness::Loaded => true,
            Readiness::Wait => false,
            Readiness::LoadNow(partition, _claim) => {
                match self.load_partition(p, &partition, partitions) {
                    Ok(_) => self.loaded.wake(),
                    Err(e) => {
                        tracing::warn!(partition = p, error = %e, "loading the transactions of {TRANSACTION_STATE_TOPIC}-{p}");
                    }
                }
                self.loaded.epoch(p) == Some(partition.leader_epoch())
            }
        }
    }

    /// Whether a partition was loaded since the last call: its transactions in Prepare* are
    /// to be finished (`finish_unfinished`).
    pub fn take_loaded(&self) -> bool {
        self.loaded_unfinished.swap(false, Ordering::AcqRel)
    }

    /// Resolves when a request found its partition led here but not loaded.
    pub async fn loading_wanted(&self) {
        self.loaded.wanted().await;
    }

    /// The epoch the id's partition is loaded at; callers hold `states`, so that it is the
    /// epoch of the state they prepare a transition from.
    fn loaded_epoch(&self, index: i32) -> Option<i32> {
        self.loaded.epoch(index)
    }

    /// Loads the ids of every `__transaction_state` partition led here (start-up).
    /// Transactions found in Prepare* are finished by `finish_unfinished` (the caller
    /// spawns it).
    pub fn load(&self) -> Result<(), Error> {
        self.sync_partitions()
    }

    /// One failover pass (Kafka's `onElection` / `onResignation` for the transaction log):
    /// partitions no longer led here at their loaded epoch are unloaded, partitions led here at
    /// a new epoch loaded (their transactions in Prepare* are for the caller to finish:
    /// `take_loaded`). The first load error, after trying every partition (the failed ones are
    /// tried again by the next pass).
    pub fn sync_partitions(&self) -> Result<(), Error> {
        let _pass = self.loaded.pass();
        let partitions = self
            .controller
            .image()
            .topic(TRANSACTION_STATE_TOPIC)
            .map_or(0, |t| t.partitions);
        let plan = self.loaded.plan(&self.replicas, partitions);
        for p in plan.unload {
            // A partition a request is loading now is left to the next pass.
            let Some(_claim) = self.loaded.claim(p) else { continue };
            let dropped = self.unload_partition(p, partitions);
            tracing::info!(
                partition = p,
                transactional_ids = dropped,
                "unloaded the transactions of {TRANSACTION_STATE_TOPIC}-{p}"
            );
        }
        let mut first_error = None;
        for (p, partition) in plan.load {
            let Some(_claim) = self.loaded.claim(p) else { continue };
            if self.loaded.epoch(p) == Some(partition.leader_epoch()) {
                continue; // a request loaded it meanwhile
            }
            if let Err(e) = self.load_partition(p, &partition, partitions) {
                tracing::warn!(partition = p, error = %e, "loading the transactions of {TRANSACTION_STATE_TOPIC}-{p}");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Drops the ids of partition `p` (of `partitions`) and marks it unloaded; answers how
    /// many went. A write in flight for one of them finds its load gone and touches nothing.
    fn unload_partition(&self, p: i32, partitions: i32) -> usize {
        let mut states = self.lock();
        let before = states.txns.len();
        states.txns.retain(|id, _| partition_for(id, partitions) != p);
        self.loaded.set(p, None);
        before - states.txns.len()
    }

    /// Loads partition `p` (of `partitions`) at its current leader epoch (the caller holds its
    /// claim): anything left of it goes first, then its records from the log start to the log end are replayed (the last
    /// one per id wins) and installed in one step. False when the leadership moved on while it
    /// read (the next pass loads the new epoch).
    fn load_partition(&self, p: i32, partition: &Partition, partitions: i32) -> Result<bool, Error> {
        let epoch = partition.leader_epoch();
        self.unload_partition(p, partitions);
        let mut replayed = TxnStates::new(Self::limits(&self.config));
        let mut records = 0usize;
        let mut next = partition.offsets()?.log_start_offset;
        for _ in 0..LOAD_ROUNDS_MAX {
            next = loading::replay(partition, next, |r| {
                if r.control {
                    return;
                }
                let Some(key) = r.key.as_ref() else { return };
                let Ok(id) = txn_records::decode_key(key) else {
                    tracing::warn!(partition = p, offset = r.offset, "skipping an unreadable key");
                    return;
                };
                match r.value.as_ref().map(|v| txn_records::decode_value(v)) {
                    None => replayed.load_record(&id, None),
                    Some(Ok(v)) => replayed.load_record(&id, Some(&v)),
                    Some(Err(e)) => {
                        tracing::warn!(partition = p, offset = r.offset, error = %e, "skipping an unreadable value");
                    }
                }
                records += 1;
            })?;
            let mut states = self.lock();
            if partition.offsets()?.log_end_offset > next {
                continue;
            }
            if partition.leader_epoch() != epoch {
                return Ok(false);
            }
            // Ids a request in flight since the unload created: the loaded state replaces them.
            states.txns.retain(|id, _| partition_for(id, partitions) != p);
            let ids = replayed.txns.len();
            states.txns.extend(replayed.txns.drain());
            self.loaded.set(p, Some(epoch));
            drop(states);
            self.loaded_unfinished.store(true, Ordering::Release);
            if records > 0 {
                tracing::info!(
                    partition = p,
                    epoch,
                    records,
                    transactional_ids = ids,
                    "loaded the transactions of {TRANSACTION_STATE_TOPIC}-{p}"
                );
            }
            return Ok(true);
        }
        Err(Error::Storage {
            op: "load transactions from",
            path: format!("{TRANSACTION_STATE_TOPIC}-{p}").into(),
            source: std::io::Error::other(format!("the log end kept moving in {LOAD_ROUNDS_MAX} reads")),
        })
    }

    /// Appends one record for `transactional_id` and waits until every in-sync replica holds
    /// it, if the id's partition is still loaded at `epoch` (the one the record was prepared
    /// under) and led at it; answers that epoch, the coordinator epoch of the transaction's
    /// markers. Errors are mapped as Kafka's `TransactionStateManager.appendTransactionToLog`
    /// maps them.
    async fn persist(&self, transactional_id: &str, value: Option<TxnLogValue>, epoch: i32) -> Result<i32, i16> {
        self.ensure_topic()
            .map_err(|_| code(ResponseError::CoordinatorNotAvailable))?;
        let index = self.partition_of(transactional_id);
        let partition = self
            .replicas
            .get(TRANSACTION_STATE_TOPIC, index)
            .filter(|p| p.leader_epoch() == epoch && self.loaded.epoch(index) == Some(epoch))
            .ok_or(code(ResponseError::NotCoordinator))?;
        let key = txn_records::encode_key(transactional_id);
        let value = value.map(|v| txn_records::encode_value(&v, txn_records::VALUE_VERSION));
        let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = vec![(Some(key), value, now_ms())];
        let written = async {
            partition.check_enough_replicas()?;
            let encoded = encode_records(&records, Compression::None)?;
            let batches = validate_batches(&encoded, usize::MAX)?;
            let info = partition.append(batches, true).await?;
            partition.wait_acknowledged(info.last_offset).await
        }
        .await;
        match written {
            Ok(()) => Ok(epoch),
            Err(e) => {
                tracing::warn!(transactional_id, error = %e, "writing {TRANSACTION_STATE_TOPIC}");
                Err(super::replication_error_code(&e).unwrap_or(match e {
                    Error::ShuttingDown => code(ResponseError::NotCoordinator),
                    Error::MessageTooLarge { .. } => code(ResponseError::UnknownServerError),
                    _ => code(ResponseError::CoordinatorNotAvailable),
                }))
            }
        }
    }

    /// Writes a transit prepared under the load at `epoch` (None: the id's partition was not
    /// loaded); applies it when acknowledged, drops it otherwise, but only while that load is
    /// still the current one: NOT_COORDINATOR when it is gone.
    async fn write(&self, transactional_id: &str, t: &Transit, epoch: Option<i32>) -> Result<i32, i16> {
        let written = match epoch {
            Some(epoch) => self.persist(transactional_id, Some(t.to_record()), epoch).await,
            None => Err(code(ResponseError::NotCoordinator)),
        };
        let index = self.partition_of(transactional_id);
        let mut states = self.lock();
        let same_load = epoch.is_some() && self.loaded_epoch(index) == epoch;
        match written {
            Ok(coordinator_epoch) if same_load => {
                states.complete(transactional_id, t);
                Ok(coordinator_epoch)
            }
            Ok(_) => Err(code(ResponseError::NotCoordinator)),
            Err(e) => {
                if same_load {
                    states.fail(transactional_id);
                }
                Err(e)
            }
        }
    }

    /// Runs `prepare` on the states and reads the epoch of the id's load under the same lock.
    fn prepare<T>(&self, transactional_id: &str, prepare: impl FnOnce(&mut TxnStates) -> T) -> (T, Option<i32>) {
        let index = self.partition_of(transactional_id);
        let mut states = self.lock();
        let prepared = prepare(&mut states);
        (prepared, self.loaded_epoch(index))
    }

    /// InitProducerId. Without a transactional id Kafka always hands out a fresh producer id
    /// at epoch 0, whatever id and epoch the request names (an idempotent producer's KIP-360
    /// bump gets a new id).
    pub async fn init_producer_id(
        &self,
        transactional_id: Option<&str>,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), i16> {
        let Some(id) = transactional_id else {
            return self.allocate().await.map(|pid| (pid, 0));
        };
        if !id.is_empty() && self.ensure_topic().is_err() {
            return Err(code(ResponseError::CoordinatorNotAvailable));
        }
        // A new id gets its producer id before the lock is taken: allocation may write the
        // metadata log, and Produce's verification waits on this lock.
        let fresh = if self.lock().txns.contains_key(id) {
            None
        } else {
            Some(self.allocate().await?)
        };
        let (step, epoch) = self
            .with_fresh_id(fresh, |allocate| {
                let (step, epoch) = self.prepare(id, |states| {
                    states.init_producer_id(id, timeout_ms, expected, allocate, now_ms())
                });
                step.map(|step| (step, epoch))
            })
            .await?;
        match step {
            InitStep::Write(t) => {
                self.write(id, &t, epoch).await?;
                tracing::info!(
                    transactional_id = id,
                    producer_id = t.producer_id,
                    epoch = t.producer_epoch,
                    "initialized"
                );
                Ok((t.producer_id, t.producer_epoch))
            }
            InitStep::FenceOngoing(t) => {
                tracing::info!(
                    transactional_id = id,
                    producer_id = t.producer_id,
                    "fencing the ongoing transaction"
                );
                self.end_prepared(id, t, epoch).await?;
                Err(code(ResponseError::ConcurrentTransactions))
            }
        }
    }

    /// Runs a step of the state machine that may need a fresh producer id. Ids are allocated
    /// outside the coordinator's lock (a new block waits for the metadata quorum): the step
    /// runs with `fresh` (or none); if it asked for an id it did not get, it failed before
    /// changing anything, and runs again with one allocated meanwhile.
    async fn with_fresh_id<T>(
        &self,
        mut fresh: Option<i64>,
        step: impl Fn(&mut dyn FnMut() -> Result<i64, i16>) -> Result<T, i16>,
    ) -> Result<T, i16> {
        for _ in 0..3 {
            let mut wanted = false;
            let result = step(&mut || {
                fresh.take().ok_or_else(|| {
                    wanted = true;
                    code(ResponseError::CoordinatorNotAvailable)
                })
            });
            if !wanted {
                return result;
            }
            fresh = Some(self.allocate().await?);
        }
        Err(code(ResponseError::CoordinatorNotAvailable))
    }

    async fn allocate(&self) -> Result<i64, i16> {
        self.controller.allocate_producer_id().await.map_err(|e| {
            tracing::warn!(error = %e, "allocating a producer id");
            code(ResponseError::CoordinatorNotAvailable)
        })
    }

    /// AddPartitionsToTxn (not verify_only) and AddOffsetsToTxn. `tv2` for AddPartitionsToTxn
    /// v4+ and TxnOffsetCommit v5 (Kafka's `transactionVersionForAddPartitionsToTxn`): the
    /// transaction then ends by version 2 rules when the coordinator ends it (fence, timeout).
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        tv2: bool,
    ) -> Result<(), i16> {
        let (step, epoch) = self.prepare(transactional_id, |states| {
            states.add_partitions(transactional_id, producer_id, producer_epoch, partitions, tv2, now_ms())
        });
        match step? {
            None => Ok(()),
            Some(t) => self.write(transactional_id, &t, epoch).await.map(|_| ()),
        }
    }

    /// AddPartitionsToTxn v4+ verify_only, TxnOffsetCommit and Produce (KIP-890 part 1): per
    /// partition, NONE or TRANSACTION_ABORTABLE; Produce maps the codes with
    /// `produce_verification_code`.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Vec<i16>, i16> {
        self.lock()
            .verify(transactional_id, producer_id, producer_epoch, partitions)
    }

    /// EndTxn: Prepare* durable, then the markers and Complete*, then the answer: the
    /// producer id and epoch the client goes on with (EndTxn v5; with `tv2` the epoch was
    /// bumped, or the producer id moved on at an exhausted epoch). Kafka answers as soon as
    /// Prepare* is durable; answering after the markers saves the client the
    /// CONCURRENT_TRANSACTIONS retries of its next transaction. Markers that fail are retried
    /// by the timer task, and the answer is still success: the outcome is decided.
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        tv2: bool,
    ) -> Result<(i64, i16), i16> {
        let (step, epoch) = self
            .with_fresh_id(None, |allocate| {
                let (step, epoch) = self.prepare(transactional_id, |states| {
                    states.end_txn(
                        transactional_id,
                        producer_id,
                        producer_epoch,
                        commit,
                        tv2,
                        allocate,
                        now_ms(),
                    )
                });
                step.map(|step| (step, epoch))
            })
            .await?;
        match step {
            EndStep::AlreadyDone {
                producer_id,
                producer_epoch,
            } => Ok((producer_id, producer_epoch)),
            EndStep::Write(t) => {
                let next = if t.next_producer_id != NO_PRODUCER_ID {
                    (t.next_producer_id, 0)
                } else {
                    (t.producer_id, t.producer_epoch)
                };
                self.end_prepared(transactional_id, t, epoch).await?;
                Ok(next)
            }
        }
    }

    /// Writes a PrepareCommit / PrepareAbort prepared under the load at `epoch`, then
    /// finishes the transaction.
    async fn end_prepared(&self, transactional_id: &str, t: Transit, epoch: Option<i32>) -> Result<(), i16> {
        self.write(transactional_id, &t, epoch).await?;
        self.finish(transactional_id).await;
        Ok(())
    }

    /// Markers then Complete* for a transaction in Prepare*. The markers carry the epoch the
    /// id's partition is loaded at (Kafka's coordinator epoch): a partition refuses markers of
    /// an older coordinator, so one that lost the partition cannot end the transaction there
    /// after the new one. Failures leave it in Prepare* for the timer task to retry.
    async fn finish(&self, transactional_id: &str) {
        let (prepared, epoch) = self.prepare(transactional_id, |states| {
            let t = states.prepare_complete(transactional_id, now_ms())?;
            let m = states.txns.get(transactional_id)?;
            Some((
                t,
                m.partitions.iter().cloned().collect::<Vec<_>>(),
                m.producer_id,
                m.producer_epoch,
                i8::try_from(m.client_transaction_version).unwrap_or(i8::MAX),
            ))
        });
        let Some((t, partitions, producer_id, producer_epoch, transaction_version)) = prepared else {
            return;
        };
        let Some(coordinator_epoch) = epoch else {
            // Not loaded (a stray of an unloaded partition): whoever loads it finishes it.
            self.lock().fail(transactional_id);
            return;
        };
        let commit = t.state == TxnState::CompleteCommit;
        let marker = TxnMarker {
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            transaction_version,
        };
        let results = self.markers.write_markers(marker, &partitions).await;
        let failed: Vec<String> = results
            .iter()
            .filter_map(|(tp, r)| r.err().map(|c| format!("{tp}: {c}")))
            .collect();
        if !failed.is_empty() {
            tracing::warn!(
                transactional_id,
                ?failed,
                "transaction markers not written; retrying later"
            );
            self.fail_if_loaded(transactional_id, coordinator_epoch);
            return;
        }
        if self.write(transactional_id, &t, epoch).await.is_ok() {
            tracing::debug!(transactional_id, commit, "transaction completed");
        }
    }

    /// Drops the pending transition of an id, if its partition is still loaded at `epoch`.
    fn fail_if_loaded(&self, transactional_id: &str, epoch: i32) {
        let index = self.partition_of(transactional_id);
        let mut states = self.lock();
        if self.loaded_epoch(index) == Some(epoch) {
            states.fail(transactional_id);
        }
    }

    /// Finishes transactions left in Prepare* (found at load, or markers that failed).
    pub async fn finish_unfinished(&self) {
        let ids = self.lock().unfinished();
        for id in ids {
            self.finish(&id).await;
        }
    }

    /// Aborts transactions past their `transaction.timeout.ms`, fencing their producers.
    pub async fn abort_timed_out(&self, now: i64) {
        let timed_out: Vec<(String, Transit, Option<i32>)> = {
            let partitions = self.partition_count();
            let mut states = self.lock();
            states
                .fence_timed_out(now)
                .into_iter()
                .map(|(id, t)| {
                    let epoch = self.loaded_epoch(partition_for(&id, partitions));
                    (id, t, epoch)
                })
                .collect()
        };
        for (id, t, epoch) in timed_out {
            tracing::info!(transactional_id = %id, producer_id = t.producer_id, epoch = t.producer_epoch, "aborting a timed-out transaction");
            if let Err(c) = self.end_prepared(&id, t, epoch).await {
                tracing::warn!(transactional_id = %id, code = c, "aborting a timed-out transaction");
            }
        }
    }

    /// Removes transactional ids idle past `transactional.id.expiration.ms` (a tombstone each).
    pub async fn expire_ids(&self, now: i64) {
        let expired: Vec<(String, Option<i32>)> = {
            let partitions = self.partition_count();
            let mut states = self.lock();
            states
                .expire_ids(now)
                .into_iter()
                .map(|id| {
                    let epoch = self.loaded_epoch(partition_for(&id, partitions));
                    (id, epoch)
                })
                .collect()
        };
        for (id, epoch) in expired {
            let written = match epoch {
                Some(epoch) => self.persist(&id, None, epoch).await,
                None => Err(code(ResponseError::NotCoordinator)),
            };
            let index = self.partition_of(&id);
            let mut states = self.lock();
            if self.loaded_epoch(index) != epoch {
                continue; // unloaded meanwhile: the id is the new coordinator's
            }
            match written {
                Ok(_) => {
                    tracing::info!(transactional_id = %id, "transactional id expired");
                    states.remove(&id);
                }
                Err(_) => states.fail(&id),
            }
        }
    }

    /// DescribeTransactions for one id: TRANSACTIONAL_ID_NOT_FOUND when unknown.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnDescription, i16> {
        if transactional_id.is_empty() {
            return Err(code(ResponseError::InvalidRequest));
        }
        let states = self.lock();
        let m = states
            .txns
            .get(transactional_id)
            .filter(|m| m.state != TxnState::Dead && m.pending != Some(TxnState::Dead))
            .ok_or(code(ResponseError::TransactionalIdNotFound))?;
        Ok(TxnDescription {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            state: m.state,
            timeout_ms: m.timeout_ms,
            start_ms: m.start_ms,
            partitions: m.partitions.iter().cloned().collect(),
        })
    }

    /// ListTransactions (Kafka's `listTransactionStates`): (id, producer id, state) of every
    /// id passing the filters, and the state filters that name no state.
    #[allow(clippy::type_complexity)]
    pub fn list(&self, filter: &ListFilter, now: i64) -> Result<(Vec<(String, i64, TxnState)>, Vec<String>), i16> {
        let mut states_wanted = Vec::new();
        let mut unknown = Vec::new();
        for name in &filter.states {
            match TxnState::from_name(name) {
                Some(s) => states_wanted.push(s),
                None => unknown.push(name.clone()),
            }
        }
        let pattern = match filter.pattern.as_deref().filter(|p| !p.is_empty()) {
            None => None,
            // Java's `Matcher.matches`: the whole id must match.
            Some(p) => Some(
                regex_automata::meta::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|_| code(ResponseError::InvalidRegularExpression))?,
            ),
        };
        let states = self.lock();
        let mut out: Vec<(String, i64, TxnState)> = states
            .txns
            .values()
            .filter(|m| m.state != TxnState::Dead && m.pending != Some(TxnState::Dead))
            .filter(|m| filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id))
            .filter(|m| states_wanted.is_empty() || states_wanted.contains(&m.state))
            .filter(|m| filter.duration_ms < 0 || now.saturating_sub(m.start_ms) > filter.duration_ms)
            .filter(|m| {
                pattern
                    .as_ref()
                    .is_none_or(|re| re.is_match(m.transactional_id.as_str()))
            })
            .map(|m| (m.transactional_id.clone(), m.producer_id, m.state))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((out, unknown))
    }
}

/// Kafka's mapping of a verification failure to what Produce answers (`AddPartitionsToTxnManager`
/// and `ReplicaManager.appendRecords`): a fenced epoch is INVALID_PRODUCER_EPOCH; a partition
/// not in the transaction is TRANSACTION_ABORTABLE for Produce v11+ and INVALID_TXN_STATE
/// before; a transaction being ended, a coordinator not ready or not reached (the network
/// errors of a verification sent to another broker), or a partition the coordinator did not
/// check because another of the request was unknown to it (OPERATION_NOT_ATTEMPTED) is
/// NOT_ENOUGH_REPLICAS, which every client retries: nothing was written.
pub fn produce_verification_code(c: i16, produce_version: i16) -> i16 {
    if c == code(ResponseError::ProducerFenced) {
        code(ResponseError::InvalidProducerEpoch)
    } else if c == code(ResponseError::TransactionAbortable) && produce_version <= 10 {
        code(ResponseError::InvalidTxnState)
    } else if c == code(ResponseError::ConcurrentTransactions)
        || c == code(ResponseError::CoordinatorLoadInProgress)
        || c == code(ResponseError::CoordinatorNotAvailable)
        || c == code(ResponseError::NotCoordinator)
        || c == code(ResponseError::NetworkException)
        || c == code(ResponseError::RequestTimedOut)
        || c == code(ResponseError::OperationNotAttempted)
    {
        code(ResponseError::NotEnoughReplicas)
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: i64 = 900_000;

    fn states() -> TxnStates {
        TxnStates::new(TxnLimits {
            max_timeout_ms: MAX,
            id_expiration_ms: 604_800_000,
        })
    }

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// A producer id counter standing in for the controller.
    fn ids() -> impl FnMut() -> Result<i64, i16> {
        let mut next = 1000;
        move || {
            next += 1;
            Ok(next)
        }
    }

    /// Runs InitProducerId to completion (the write succeeds).
    fn init(
        s: &mut TxnStates,
        id: &str,
        expected: Option<(i64, i16)>,
        alloc: &mut dyn FnMut() -> Result<i64, i16>,
        now: i64,
    ) -> Result<(i64, i16), i16> {
        match s.init_producer_id(id, 60_000, expected, alloc, now)? {
            InitStep::Write(t) => {
                s.complete(id, &t);
                Ok((t.producer_id, t.producer_epoch))
            }
            InitStep::FenceOngoing(t) => {
                s.complete(id, &t);
                let done = s.prepare_complete(id, now).unwrap();
                s.complete(id, &done);
                Err(code(ResponseError::ConcurrentTransactions))
            }
        }
    }

    fn add(s: &mut TxnStates, id: &str, pid: i64, epoch: i16, parts: &[TopicPartition], now: i64) -> Result<(), i16> {
        if let Some(t) = s.add_partitions(id, pid, epoch, parts, false, now)? {
            s.complete(id, &t);
        }
        Ok(())
    }

    fn end(s: &mut TxnStates, id: &str, pid: i64, epoch: i16, commit: bool, now: i64) -> Result<(), i16> {
        match s.end_txn(id, pid, epoch, commit, false, &mut ids(), now)? {
            EndStep::AlreadyDone { .. } => Ok(()),
            EndStep::Write(t) => {
                s.complete(id, &t);
                let done = s.prepare_complete(id, now).unwrap();
                s.complete(id, &done);
                Ok(())
            }
        }
    }

    #[test]
    fn a_new_transactional_id_gets_a_new_producer_at_epoch_zero_then_bumps() {
        // Kafka's TransactionCoordinator.handleInitProducerId: new id → new producer id, epoch 0;
        // each later InitProducerId bumps the epoch.
        let mut s = states();
        let mut alloc = ids();
        assert_eq!(init(&mut s, "t", None, &mut alloc, 1), Ok((1001, 0)));
        assert_eq!(init(&mut s, "t", None, &mut alloc, 2), Ok((1001, 1)));
        assert_eq!(s.txns["t"].state, TxnState::Empty);
    }

    #[test]
    fn timeouts_over_the_maximum_are_refused() {
        let mut s = states();
        let mut alloc = ids();
        let r = s.init_producer_id("t", (MAX + 1) as i32, None, &mut alloc, 0);
        assert_eq!(r, Err(code(ResponseError::InvalidTransactionTimeout)));
        let r = s.init_producer_id("t", 0, None, &mut alloc, 0);
        assert_eq!(r, Err(code(ResponseError::InvalidTransactionTimeout)));
        assert_eq!(
            s.init_producer_id("", 1000, None, &mut alloc, 0),
            Err(code(ResponseError::InvalidRequest))
        );
    }

    #[test]
    fn a_second_producer_fences_the_first_and_aborts_its_transaction() {
        // Zombie fencing: InitProducerId on an Ongoing transaction aborts it with a bumped epoch
        // (PrepareEpochFence) and answers CONCURRENT_TRANSACTIONS; the retry bumps again.
        let mut s = states();
        let mut alloc = ids();
        let (pid, e0) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        add(&mut s, "t", pid, e0, &[tp("a", 0)], 1).unwrap();
        assert_eq!(
            init(&mut s, "t", None, &mut alloc, 2),
            Err(code(ResponseError::ConcurrentTransactions))
        );
        assert_eq!(s.txns["t"].state, TxnState::CompleteAbort);
        assert_eq!(s.txns["t"].producer_epoch, e0 + 1);
        assert_eq!(init(&mut s, "t", None, &mut alloc, 3), Ok((pid, e0 + 2)));
        // The old producer is fenced everywhere.
        assert_eq!(
            s.add_partitions("t", pid, e0, &[tp("a", 1)], false, 4),
            Err(code(ResponseError::ProducerFenced))
        );
        assert_eq!(
            s.end_txn("t", pid, e0, true, false, &mut ids(), 4),
            Err(code(ResponseError::ProducerFenced))
        );
        assert_eq!(
            s.verify("t", pid, e0, &[tp("a", 0)]),
            Err(code(ResponseError::ProducerFenced))
        );
    }

    #[test]
    fn the_fence_takes_effect_before_the_abort_is_written() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, e0) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        add(&mut s, "t", pid, e0, &[tp("a", 0)], 1).unwrap();
        let InitStep::FenceOngoing(t) = s.init_producer_id("t", 60_000, None, &mut alloc, 2).unwrap() else {
            panic!("expected a fence");
        };
        assert_eq!((t.state, t.producer_epoch), (TxnState::PrepareAbort, e0 + 1));
        // While the abort is being written, the old producer cannot end or extend it.
        assert_eq!(
            s.end_txn("t", pid, e0, true, false, &mut ids(), 3),
            Err(code(ResponseError::ProducerFenced))
        );
        assert_eq!(
            s.init_producer_id("t", 60_000, None, &mut alloc, 3),
            Err(code(ResponseError::ConcurrentTransactions))
        );
    }

    #[test]
    fn end_txn_retries_succeed_and_the_other_result_is_invalid() {
        // Kafka: CompleteCommit + commit → NONE; CompleteCommit + abort → INVALID_TXN_STATE.
        let mut s = states();
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        add(&mut s, "t", pid, e, &[tp("a", 0), tp("a", 1)], 1).unwrap();
        end(&mut s, "t", pid, e, true, 2).unwrap();
        assert_eq!(s.txns["t"].state, TxnState::CompleteCommit);
        assert!(s.txns["t"].partitions.is_empty());
        assert!(matches!(
            s.end_txn("t", pid, e, true, false, &mut ids(), 3),
            Ok(EndStep::AlreadyDone { .. })
        ));
        assert_eq!(
            s.end_txn("t", pid, e, false, false, &mut ids(), 3),
            Err(code(ResponseError::InvalidTxnState))
        );
        // Abort side.
        add(&mut s, "t", pid, e, &[tp("a", 0)], 4).unwrap();
        end(&mut s, "t", pid, e, false, 5).unwrap();
        assert!(matches!(
            s.end_txn("t", pid, e, false, false, &mut ids(), 6),
            Ok(EndStep::AlreadyDone { .. })
        ));
        assert_eq!(
            s.end_txn("t", pid, e, true, false, &mut ids(), 6),
            Err(code(ResponseError::InvalidTxnState))
        );
    }

    #[test]
    fn invalid_transitions_get_kafkas_codes() {
        let mut s = states();
        let mut alloc = ids();
        assert_eq!(
            s.end_txn("nope", 1, 0, true, false, &mut ids(), 0),
            Err(code(ResponseError::InvalidProducerIdMapping))
        );
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        // EndTxn with nothing begun.
        assert_eq!(
            s.end_txn("t", pid, e, true, false, &mut ids(), 1),
            Err(code(ResponseError::InvalidTxnState))
        );
        // Wrong producer id.
        assert_eq!(
            s.add_partitions("t", pid + 1, e, &[tp("a", 0)], false, 1),
            Err(code(ResponseError::InvalidProducerIdMapping))
        );
        // While PrepareCommit is in flight: CONCURRENT_TRANSACTIONS for everything.
        add(&mut s, "t", pid, e, &[tp("a", 0)], 1).unwrap();
        let EndStep::Write(t) = s.end_txn("t", pid, e, true, false, &mut ids(), 2).unwrap() else {
            panic!()
        };
        s.complete("t", &t);
        assert_eq!(s.txns["t"].state, TxnState::PrepareCommit);
        assert_eq!(
            s.end_txn("t", pid, e, true, false, &mut ids(), 3),
            Err(code(ResponseError::ConcurrentTransactions))
        );
        assert_eq!(
            s.end_txn("t", pid, e, false, false, &mut ids(), 3),
            Err(code(ResponseError::InvalidTxnState))
        );
        assert_eq!(
            s.add_partitions("t", pid, e, &[tp("a", 1)], false, 3),
            Err(code(ResponseError::ConcurrentTransactions))
        );
        assert_eq!(
            s.init_producer_id("t", 60_000, None, &mut alloc, 3),
            Err(code(ResponseError::ConcurrentTransactions))
        );
        assert_eq!(s.unfinished(), vec!["t".to_string()]);
    }

    #[test]
    fn a_failed_write_leaves_the_state_unchanged() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        let before = s.txns["t"].clone();
        let _ = s.add_partitions("t", pid, e, &[tp("a", 0)], false, 1).unwrap().unwrap();
        assert_eq!(
            s.add_partitions("t", pid, e, &[tp("a", 0)], false, 1),
            Err(code(ResponseError::ConcurrentTransactions))
        );
        s.fail("t");
        assert_eq!(s.txns["t"], before);
    }

    #[test]
    fn a_transaction_past_its_timeout_is_fenced_and_aborted() {
        // Kafka's abortTimedOutTransactions: epoch bump, then abort.
        let mut s = states();
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        add(&mut s, "t", pid, e, &[tp("a", 0)], 1_000).unwrap();
        assert!(s.fence_timed_out(61_000).is_empty(), "exactly at the timeout: not yet");
        let out = s.fence_timed_out(61_001);
        assert_eq!(out.len(), 1);
        let (id, t) = &out[0];
        assert_eq!(
            (id.as_str(), t.state, t.producer_epoch),
            ("t", TxnState::PrepareAbort, e + 1)
        );
        s.complete("t", t);
        let done = s.prepare_complete("t", 61_002).unwrap();
        s.complete("t", &done);
        assert_eq!(s.txns["t"].state, TxnState::CompleteAbort);
        assert_eq!(
            s.end_txn("t", pid, e, true, false, &mut ids(), 61_003),
            Err(code(ResponseError::ProducerFenced))
        );
        // The producer's own retry of InitProducerId with its old epoch is fenced (KIP-360).
        assert_eq!(
            s.init_producer_id("t", 60_000, Some((pid, e)), &mut alloc, 61_004),
            Err(code(ResponseError::ProducerFenced))
        );
    }

    #[test]
    fn kip_360_retries_and_bumps_with_the_current_epoch() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, e0) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        // The producer bumps its own epoch after an error.
        assert_eq!(init(&mut s, "t", Some((pid, e0)), &mut alloc, 1), Ok((pid, e0 + 1)));
        // Its answer was lost: the retry names the old epoch and gets the same answer.
        assert_eq!(init(&mut s, "t", Some((pid, e0)), &mut alloc, 2), Ok((pid, e0 + 1)));
        // Another producer id entirely is fenced.
        assert_eq!(
            s.init_producer_id("t", 60_000, Some((pid + 7, 0)), &mut alloc, 3),
            Err(code(ResponseError::ProducerFenced))
        );
    }

    #[test]
    fn an_exhausted_epoch_rotates_the_producer_id() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, _) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        s.txns.get_mut("t").unwrap().producer_epoch = i16::MAX - 1;
        // The producer bumps (KIP-360) at the last epoch: a new producer id at epoch 0.
        let (new_pid, epoch) = init(&mut s, "t", Some((pid, i16::MAX - 1)), &mut alloc, 1).unwrap();
        assert_ne!(new_pid, pid);
        assert_eq!(epoch, 0);
        assert_eq!(s.txns["t"].previous_producer_id, pid);
        // Its answer was lost: the retry from the old id gets the same answer.
        assert_eq!(
            init(&mut s, "t", Some((pid, i16::MAX - 1)), &mut alloc, 2),
            Ok((new_pid, 0))
        );
        // A fresh InitProducerId at an exhausted epoch rotates too.
        s.txns.get_mut("t").unwrap().producer_epoch = i16::MAX - 1;
        let (third, epoch) = init(&mut s, "t", None, &mut alloc, 3).unwrap();
        assert!(third != new_pid && epoch == 0);
    }

    #[test]
    fn verification_reports_partitions_outside_the_transaction() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        assert_eq!(
            s.verify("t", pid, e, &[tp("a", 0)]),
            Ok(vec![code(ResponseError::TransactionAbortable)])
        );
        add(&mut s, "t", pid, e, &[tp("a", 0)], 1).unwrap();
        assert_eq!(
            s.verify("t", pid, e, &[tp("a", 0), tp("a", 1)]),
            Ok(vec![0, code(ResponseError::TransactionAbortable)])
        );
        assert_eq!(
            produce_verification_code(code(ResponseError::TransactionAbortable), 9),
            48
        );
        assert_eq!(
            produce_verification_code(code(ResponseError::TransactionAbortable), 11),
            120
        );
        assert_eq!(produce_verification_code(code(ResponseError::ProducerFenced), 9), 47);
        assert_eq!(
            produce_verification_code(code(ResponseError::ConcurrentTransactions), 9),
            19
        );
    }

    #[test]
    fn idle_ids_expire_and_busy_ones_stay() {
        let mut s = states();
        s.limits.id_expiration_ms = 1000;
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "idle", None, &mut alloc, 0).unwrap();
        let _ = (pid, e);
        let (pid2, e2) = init(&mut s, "busy", None, &mut alloc, 0).unwrap();
        add(&mut s, "busy", pid2, e2, &[tp("a", 0)], 500).unwrap();
        assert!(s.expire_ids(999).is_empty());
        assert_eq!(s.expire_ids(1000), vec!["idle".to_string()]);
        s.remove("idle");
        assert!(!s.txns.contains_key("idle"));
        assert!(s.txns.contains_key("busy"), "an ongoing transaction never expires");
    }

    #[test]
    fn state_survives_a_round_trip_through_its_records() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        let t = s
            .add_partitions("t", pid, e, &[tp("a", 0), tp("b", 3)], false, 7)
            .unwrap()
            .unwrap();
        s.complete("t", &t);
        let mut loaded = states();
        loaded.load_record("t", Some(&t.to_record()));
        let (a, b) = (&s.txns["t"], &loaded.txns["t"]);
        assert_eq!(
            (a.producer_id, a.producer_epoch, a.state, &a.partitions, a.start_ms),
            (b.producer_id, b.producer_epoch, b.state, &b.partitions, b.start_ms)
        );
        loaded.load_record("t", None);
        assert!(loaded.txns.is_empty(), "a tombstone removes the id");
    }

    /// Runs a version 2 EndTxn to completion; the (producer id, epoch) to go on with.
    fn end_v2(s: &mut TxnStates, id: &str, pid: i64, epoch: i16, commit: bool, now: i64) -> Result<(i64, i16), i16> {
        match s.end_txn(id, pid, epoch, commit, true, &mut ids(), now)? {
            EndStep::AlreadyDone {
                producer_id,
                producer_epoch,
            } => Ok((producer_id, producer_epoch)),
            EndStep::Write(t) => {
                s.complete(id, &t);
                let done = s.prepare_complete(id, now).unwrap();
                s.complete(id, &done);
                Ok((done.producer_id, done.producer_epoch))
            }
        }
    }

    #[test]
    fn version_2_bumps_the_epoch_at_every_end_and_answers_retries() {
        // KIP-890 part 2 (Kafka's endTransaction for TV_2): each end bumps the epoch; a retry
        // names the epoch below the current one.
        let mut s = states();
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        let t = s.add_partitions("t", pid, e, &[tp("a", 0)], true, 1).unwrap().unwrap();
        s.complete("t", &t);
        assert_eq!(end_v2(&mut s, "t", pid, e, true, 2), Ok((pid, e + 1)));
        assert_eq!(s.txns["t"].state, TxnState::CompleteCommit);
        // The retry gets the same answer; the other result is refused.
        assert_eq!(end_v2(&mut s, "t", pid, e, true, 3), Ok((pid, e + 1)));
        assert_eq!(
            end_v2(&mut s, "t", pid, e, false, 3),
            Err(code(ResponseError::InvalidTxnState))
        );
        // An abort with no partition is allowed and bumps again; a commit of nothing is not.
        assert_eq!(
            end_v2(&mut s, "t", pid, e + 1, true, 4),
            Err(code(ResponseError::InvalidTxnState))
        );
        assert_eq!(end_v2(&mut s, "t", pid, e + 1, false, 4), Ok((pid, e + 2)));
        assert_eq!(s.txns["t"].start_ms, 4, "an empty abort starts when it ends");
        // An epoch two behind is fenced.
        assert_eq!(
            end_v2(&mut s, "t", pid, e, false, 5),
            Err(code(ResponseError::ProducerFenced))
        );
        // Version 0/1 requests keep their rules on the same id.
        assert!(matches!(
            s.end_txn("t", pid, e + 2, false, false, &mut ids(), 6),
            Ok(EndStep::AlreadyDone { .. })
        ));
    }

    #[test]
    fn version_2_moves_to_the_next_producer_id_when_the_epoch_is_exhausted() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, _) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        let last = i16::MAX - 1;
        s.txns.get_mut("t").unwrap().producer_epoch = last;
        let t = s
            .add_partitions("t", pid, last, &[tp("a", 0)], true, 1)
            .unwrap()
            .unwrap();
        s.complete("t", &t);
        let EndStep::Write(prepare) = s.end_txn("t", pid, last, true, true, &mut alloc, 2).unwrap() else {
            panic!("expected a write")
        };
        assert_eq!(prepare.producer_epoch, i16::MAX, "the markers carry the last epoch");
        let next = prepare.next_producer_id;
        assert!(next > pid);
        s.complete("t", &prepare);
        let done = s.prepare_complete("t", 3).unwrap();
        assert_eq!(
            (done.producer_id, done.producer_epoch, done.previous_producer_id),
            (next, 0, pid)
        );
        s.complete("t", &done);
        // A retry from the old producer id at its last epoch is answered with the new one.
        assert_eq!(end_v2(&mut s, "t", pid, last, true, 4), Ok((next, 0)));
        assert_eq!(
            end_v2(&mut s, "t", pid, 3, true, 4),
            Err(code(ResponseError::InvalidProducerIdMapping))
        );
    }

    #[test]
    fn version_2_fencing_bumps_for_the_fence_and_for_the_abort() {
        let mut s = states();
        let mut alloc = ids();
        let (pid, e) = init(&mut s, "t", None, &mut alloc, 0).unwrap();
        let t = s.add_partitions("t", pid, e, &[tp("a", 0)], true, 1).unwrap().unwrap();
        s.complete("t", &t);
        let InitStep::FenceOngoing(abort) = s.init_producer_id("t", 60_000, None, &mut alloc, 2).unwrap() else {
            panic!("expected a fence")
        };
        assert_eq!(abort.producer_epoch, e + 2);
        s.complete("t", &abort);
        let done = s.prepare_complete("t", 3).unwrap();
        s.complete("t", &done);
        assert_eq!(init(&mut s, "t", None, &mut alloc, 4), Ok((pid, e + 3)));
    }

    /// A coordinator over a data directory with topic `t` (2 partitions).
    fn service(dir: &std::path::Path) -> TransactionCoordinator {
        let config = Arc::new(BrokerConfig {
            data_dir: dir.to_path_buf(),
            offsets_topic_num_partitions: 3,
            transaction_state_log_num_partitions: 3,
            ..BrokerConfig::default()
        });
        let controller =
            Arc::new(Controller::open(dir, crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap());
        let replicas = Arc::new(ReplicaManager::new(config.clone()));
        replicas.start_applier(controller.subscribe()).unwrap();
        if controller.image().topic("t").is_none() {
            controller.create_topic("t", 2, 1, BTreeMap::new()).unwrap();
        }
        replicas.catch_up(&controller.image()).unwrap();
        let groups = Arc::new(GroupCoordinator::new(
            config.clone(),
            controller.clone(),
            replicas.clone(),
        ));
        groups.load().unwrap();
        let c = TransactionCoordinator::new(config, controller, replicas, groups);
        c.load().unwrap();
        c
    }

    #[tokio::test]
    async fn a_transaction_left_in_prepare_commit_is_finished_after_a_restart() {
        // Kafka's TransactionStateManager.loadTransactionsForTxnTopicPartition: a transaction
        // loaded in PrepareCommit/PrepareAbort gets its markers written and completes.
        let dir = tempfile::tempdir().unwrap();
        let c = service(dir.path());
        let (pid, epoch) = c.init_producer_id(Some("t1"), 60_000, None).await.unwrap();
        let parts = [tp("t", 0), tp("t", 1)];
        c.add_partitions("t1", pid, epoch, &parts, false).await.unwrap();
        // The broker dies right after PrepareCommit is durable: write it as the coordinator
        // would, without markers.
        let prepare = match c
            .lock()
            .end_txn("t1", pid, epoch, true, false, &mut ids(), now_ms())
            .unwrap()
        {
            EndStep::Write(t) => t,
            other => panic!("{other:?}"),
        };
        let load = c.loaded.epoch(c.partition_of("t1"));
        c.write("t1", &prepare, load).await.unwrap();
        let ends_before: Vec<i64> = parts
            .iter()
            .map(|p| {
                c.replicas
                    .get(&p.topic, p.partition)
                    .unwrap()
                    .offsets()
                    .unwrap()
                    .log_end_offset
            })
            .collect();
        drop(c);

        let c = service(dir.path());
        assert_eq!(c.describe("t1").unwrap().state, TxnState::PrepareCommit);
        c.finish_unfinished().await;
        let d = c.describe("t1").unwrap();
        assert_eq!(
            (d.state, d.producer_id, d.producer_epoch),
            (TxnState::CompleteCommit, pid, epoch)
        );
        for (p, before) in parts.iter().zip(ends_before) {
            let end = c
                .replicas
                .get(&p.topic, p.partition)
                .unwrap()
                .offsets()
                .unwrap()
                .log_end_offset;
            assert_eq!(end, before + 1, "one marker in {p}");
        }
        // The client's retry of its EndTxn now succeeds.
        assert_eq!(c.end_txn("t1", pid, epoch, true, false).await, Ok((pid, epoch)));
    }

    /// Moves the leadership of the id's `__transaction_state` partition away and back: epoch
    /// +1 on another broker, then +2 here. Runs a failover pass after each move.
    fn fail_over_and_back(c: &TransactionCoordinator, transactional_id: &str) -> (i32, bool) {
        let index = c.partition_of(transactional_id);
        let partition = c.replicas.hosted(TRANSACTION_STATE_TOPIC, index).unwrap();
        let epoch = partition.leader_epoch();
        partition.become_follower(epoch + 1, 2, 1);
        c.take_loaded();
        c.sync_partitions().unwrap();
        assert!(!c.take_loaded(), "nothing loaded");
        assert!(!c.ready(transactional_id));
        assert_eq!(
            c.describe(transactional_id),
            Err(code(ResponseError::TransactionalIdNotFound)),
            "unloaded with its partition"
        );
        partition.become_leader(epoch + 2, 1, vec![1], vec![1], 1);
        c.sync_partitions().unwrap();
        (epoch + 2, c.take_loaded())
    }

    #[tokio::test]
    async fn a_transaction_in_prepare_commit_found_at_load_is_completed() {
        // Kafka's TransactionStateManager.loadTransactionsForTxnTopicPartition: the ids of a
        // partition this node leads again are read back from the log, and a transaction in
        // PrepareCommit gets its markers, at the new coordinator epoch, then CompleteCommit.
        let dir = tempfile::tempdir().unwrap();
        let c = service(dir.path());
        let (pid, epoch) = c.init_producer_id(Some("t1"), 60_000, None).await.unwrap();
        let parts = [tp("t", 0), tp("t", 1)];
        c.add_partitions("t1", pid, epoch, &parts, false).await.unwrap();
        // The old leader wrote PrepareCommit and lost the partition before its markers.
        let (prepare, load) = c.prepare("t1", |s| s.end_txn("t1", pid, epoch, true, false, &mut ids(), now_ms()));
        let EndStep::Write(prepare) = prepare.unwrap() else {
            panic!("not a write")
        };
        c.write("t1", &prepare, load).await.unwrap();

        let (new_epoch, loaded) = fail_over_and_back(&c, "t1");
        assert!(loaded, "the pass loaded the partition: its Prepare* are to be finished");
        assert!(c.ready("t1"));
        assert_eq!(c.describe("t1").unwrap().state, TxnState::PrepareCommit);
        c.finish_unfinished().await;
        let d = c.describe("t1").unwrap();
        assert_eq!((d.state, d.producer_id), (TxnState::CompleteCommit, pid));
        for p in &parts {
            let producers = c.replicas.get(&p.topic, p.partition).unwrap().producers().unwrap();
            let (_, entry) = producers.iter().find(|(id, _)| *id == pid).unwrap();
            assert_eq!(
                entry.coordinator_epoch, new_epoch,
                "the marker in {p} is the new coordinator's"
            );
            assert_eq!(entry.current_txn_first_offset, None, "{p} ended");
        }
    }

    #[tokio::test]
    async fn a_transition_prepared_before_a_failover_is_refused_after_it() {
        // Kafka's coordinator-epoch check in appendTransactionToLog's callback: a transition
        // prepared under the old load is neither written nor applied to the reloaded state.
        let dir = tempfile::tempdir().unwrap();
        let c = service(dir.path());
        let (pid, epoch) = c.init_producer_id(Some("t1"), 60_000, None).await.unwrap();
        let (step, load) = c.prepare("t1", |s| {
            s.add_partitions("t1", pid, epoch, &[tp("t", 0)], false, now_ms())
        });
        let stale = step.unwrap().unwrap();
        let partition = c.replicas.get(TRANSACTION_STATE_TOPIC, c.partition_of("t1")).unwrap();
        fail_over_and_back(&c, "t1");
        let end = partition.offsets().unwrap().log_end_offset;
        assert_eq!(
            c.write("t1", &stale, load).await,
            Err(code(ResponseError::NotCoordinator))
        );
        assert_eq!(partition.offsets().unwrap().log_end_offset, end, "nothing written");
        let d = c.describe("t1").unwrap();
        assert_eq!((d.state, d.partitions.len()), (TxnState::Empty, 0));
        // The reloaded id serves the producer's retry.
        c.add_partitions("t1", pid, epoch, &[tp("t", 0)], false).await.unwrap();
        assert_eq!(c.describe("t1").unwrap().state, TxnState::Ongoing);
    }

    #[tokio::test]
    async fn internal_topics_on_one_node_get_one_replica_whatever_the_configured_factor() {
        // Kafka's defaults (offsets.topic.replication.factor and
        // transaction.state.log.replication.factor 3, transaction.state.log.min.isr 2) would
        // refuse both topics on one broker; Sluice caps them so `sluice serve` keeps working.
        let dir = tempfile::tempdir().unwrap();
        let c = service(dir.path());
        assert_eq!(c.config.transaction_state_log_replication_factor, 3);
        c.ensure_topic().unwrap();
        c.markers.groups.ensure_offsets_topic().unwrap();
        let image = c.controller.image();
        let txn = image.topic(TRANSACTION_STATE_TOPIC).unwrap();
        assert_eq!(txn.replication_factor, 1);
        assert_eq!(txn.configs.get("min.insync.replicas").map(String::as_str), Some("1"));
        assert_eq!(image.topic(super::super::OFFSETS_TOPIC).unwrap().replication_factor, 1);
        // And both serve: writes are acknowledged by the single in-sync replica.
        assert!(c.init_producer_id(Some("t1"), 60_000, None).await.is_ok());
    }

    #[tokio::test]
    async fn an_expired_transactional_id_is_gone_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let c = service(dir.path());
        let (pid, _) = c.init_producer_id(Some("old"), 60_000, None).await.unwrap();
        c.init_producer_id(Some("young"), 60_000, None).await.unwrap();
        c.lock().txns.get_mut("old").unwrap().last_update_ms = 0;
        c.expire_ids(now_ms()).await;
        assert_eq!(c.describe("old"), Err(code(ResponseError::TransactionalIdNotFound)));
        drop(c);
        let c = service(dir.path());
        assert_eq!(c.describe("old"), Err(code(ResponseError::TransactionalIdNotFound)));
        assert!(c.describe("young").is_ok());
        // A new producer for the expired id gets a new producer id.
        let (again, epoch) = c.init_producer_id(Some("old"), 60_000, None).await.unwrap();
        assert!(again != pid && epoch == 0);
    }

    /// Brokers 1–3 (3 fenced); topic "t" with partitions led by 1, 2, 3, 2; "x" whose one
    /// partition has no replica; "y" led by 1.
    fn placed() -> MetadataImage {
        use crate::cluster::{BrokerInfo, TopicInfo};
        let mut image = MetadataImage::default();
        for id in 1..=3 {
            let mut broker = BrokerInfo::new(id, "127.0.0.1", 9000 + id);
            broker.fenced = id == 3;
            image.brokers.insert(id, Arc::new(broker));
        }
        for (name, assignments) in [
            ("t", vec![vec![1], vec![2], vec![3], vec![2]]),
            ("x", vec![vec![]]),
            ("y", vec![vec![1]]),
        ] {
            let topic = TopicInfo {
                name: name.to_string(),
                id: uuid::Uuid::new_v4(),
                partitions: i32::try_from(assignments.len()).unwrap(),
                replication_factor: 1,
                configs: BTreeMap::new(),
                leader_epoch: 0,
                assignments,
                registrations: Default::default(),
            };
            image.topics.insert(name.to_string(), Arc::new(topic));
        }
        image
    }

    #[test]
    fn markers_go_to_each_partitions_leader_and_moot_ones_are_settled() {
        // Kafka's TransactionMarkerChannelManager: markers are queued per leader; a deleted
        // topic's partition needs none; one without a live leader waits (here: fails, retried).
        let image = placed();
        let partitions = [
            tp("t", 0),
            tp("t", 1),
            tp("t", 2),
            tp("t", 3),
            tp("gone", 0),
            tp("t", 9),
            tp("x", 0),
            tp("y", 0),
        ];
        let route = route_markers(&image, 1, &partitions, |p| (*p == tp("t", 0)).then_some("open"));
        assert_eq!(route.hosted, vec![(tp("t", 0), "open")]);
        assert_eq!(
            route.remote,
            BTreeMap::from([(2, vec![tp("t", 1), tp("t", 3)]), (3, vec![tp("t", 2)])]),
            "one request per leader; the fenced one is refused when sending"
        );
        assert_eq!(
            route.settled,
            vec![
                (tp("gone", 0), Ok(())),
                (tp("t", 9), Ok(())),
                (tp("x", 0), Err(code(ResponseError::LeaderNotAvailable))),
                (tp("y", 0), Err(code(ResponseError::NotLeaderOrFollower))),
            ]
        );
    }

    #[test]
    fn a_marker_request_names_each_topic_once() {
        let marker = TxnMarker {
            producer_id: 7,
            producer_epoch: 3,
            coordinator_epoch: 2,
            commit: false,
            transaction_version: 2,
        };
        let req = marker_request(marker, &[tp("b", 1), tp("a", 0), tp("b", 0)]);
        assert_eq!(req.markers.len(), 1);
        let m = &req.markers[0];
        assert_eq!(
            (
                m.producer_id.0,
                m.producer_epoch,
                m.coordinator_epoch,
                m.transaction_result
            ),
            (7, 3, 2, false)
        );
        let topics: Vec<(&str, Vec<i32>)> = m
            .topics
            .iter()
            .map(|t| (t.name.0.as_str(), t.partition_indexes.clone()))
            .collect();
        assert_eq!(topics, vec![("a", vec![0]), ("b", vec![1, 0])]);
    }

    #[test]
    fn marker_answers_map_back_to_their_partitions() {
        use kafka_protocol::messages::write_txn_markers_response::{
            WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
        };
        let result = |producer_id: i64, topic: &str, codes: &[(i32, i16)]| {
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(producer_id))
                .with_topics(vec![
                    WritableTxnMarkerTopicResult::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(
                            codes
                                .iter()
                                .map(|(p, c)| {
                                    WritableTxnMarkerPartitionResult::default()
                                        .with_partition_index(*p)
                                        .with_error_code(*c)
                                })
                                .collect(),
                        ),
                ])
        };
        let not_leader = code(ResponseError::NotLeaderOrFollower);
        let unknown = code(ResponseError::UnknownTopicOrPartition);
        let response = WriteTxnMarkersResponse::default().with_markers(vec![
            // Another producer's answer says nothing about ours.
            result(8, "u", &[(1, 0)]),
            result(7, "t", &[(1, 0), (3, not_leader)]),
            result(7, "u", &[(0, unknown), (2, unknown)]),
        ]);
        let asked = vec![tp("t", 1), tp("t", 3), tp("u", 0), tp("u", 1), tp("u", 2)];
        let results = marker_results(asked, 7, &response, |p| *p == tp("u", 0));
        assert_eq!(
            results,
            vec![
                (tp("t", 1), Ok(())),
                (tp("t", 3), Err(not_leader)),
                (tp("u", 0), Ok(())), // deleted meanwhile: nothing to mark
                (tp("u", 1), Err(code(ResponseError::UnknownServerError))), // left out
                (tp("u", 2), Err(unknown)), // not deleted here: the leader lags, retry
            ]
        );
    }

    #[test]
    fn a_verification_not_answered_is_retried_by_the_producer() {
        // Kafka's AddPartitionsToTxnManager: a coordinator not reached is NETWORK_EXCEPTION,
        // which ReplicaManager answers as NOT_ENOUGH_REPLICAS (retriable).
        let retriable = code(ResponseError::NotEnoughReplicas);
        for c in [
            ResponseError::NetworkException,
            ResponseError::RequestTimedOut,
            ResponseError::NotCoordinator,
            ResponseError::CoordinatorNotAvailable,
            ResponseError::ConcurrentTransactions,
            ResponseError::OperationNotAttempted,
        ] {
            assert_eq!(produce_verification_code(code(c), 11), retriable, "{c:?}");
        }
        assert_eq!(
            produce_verification_code(code(ResponseError::TransactionAbortable), 9),
            code(ResponseError::InvalidTxnState)
        );
        assert_eq!(produce_verification_code(0, 9), 0);
    }

    #[test]
    fn state_names_and_ids_match_kafka() {
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_id(s.id()), Some(s));
            assert_eq!(TxnState::from_name(s.name()), Some(s));
        }
        assert_eq!(TxnState::PrepareEpochFence.id(), 7);
        assert_eq!(TxnState::CompleteAbort.id(), 5);
    }
}
