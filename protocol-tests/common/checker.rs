//! A checker in the spirit of Jepsen's Kafka workload (jepsen.tests.kafka): what producers were
//! told about each unique value they wrote, every (partition, offset, value) a reader saw, and
//! the anomalies between the two. Pure bookkeeping, no clients: the workload that fills a
//! `History` lives in the test using it, and hand-made histories test the checker itself.
//!
//! - **lost**: acknowledged, but absent from every read made after the run (`Pass::After`).
//! - **duplicated**: one value at two or more positions (partition, offset), over all reads.
//!   A producer without idempotence may legitimately duplicate on a retry; an idempotent one
//!   may not, so its duplicates are counted apart.
//! - **divergent**: a position read with two different values (over all reads, during and
//!   after the run), or an acknowledged position that does not hold its value: another value
//!   is read there, or the value is read only elsewhere.
//! - **unexpected**: a value read that no producer wrote, or whose write failed for certain.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// (partition, offset)
pub type Position = (i32, i64);

/// What a producer was told about one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged at this position.
    Acked { partition: i32, offset: i64 },
    /// Certainly not written (refused before it was sent, or with an error that means nothing
    /// was appended).
    Failed,
    /// Maybe written (timed out, connection lost, an error after the append): reading it is
    /// fine, missing it too.
    Unknown,
}

/// When a read was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pass {
    /// While the workload and the fault ran (a consumer group, say).
    During,
    /// The n-th full read of every partition after the run.
    After(u32),
}

/// Everything the producers were told and the readers saw in one trial.
#[derive(Debug, Default)]
pub struct History {
    /// Producer id → whether it is idempotent.
    producers: BTreeMap<usize, bool>,
    /// Value → (producer, outcome).
    writes: HashMap<String, (usize, Outcome)>,
    /// Value → the positions each pass saw it at; position → the values seen there.
    seen_at: HashMap<String, BTreeSet<(Pass, Position)>>,
    at: BTreeMap<Position, BTreeSet<String>>,
    reads: usize,
}

/// One divergent position and what was seen or acknowledged there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    pub position: Position,
    /// Every value read at the position, in any pass.
    pub read: BTreeSet<String>,
    /// The value acknowledged at the position, if one was.
    pub acknowledged: Option<String>,
}

/// The counts of one trial; `summary` prints them on one line.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub acknowledged: usize,
    pub unknown: usize,
    pub failed: usize,
    /// Reads fed to the checker (all passes), and the distinct values among them.
    pub reads: usize,
    pub values_read: usize,
    /// Acknowledged values no read after the run returned.
    pub lost: Vec<String>,
    /// Values read at two or more positions, with those positions.
    pub duplicated: Vec<(String, Vec<Position>)>,
    /// How many of `duplicated` an idempotent producer wrote.
    pub duplicated_idempotent: usize,
    pub divergent: Vec<Divergence>,
    /// Values read that no producer wrote or whose write certainly failed.
    pub unexpected: Vec<String>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// Declares producer `id`; every write names one declared producer.
    pub fn producer(&mut self, id: usize, idempotent: bool) {
        let earlier = self.producers.insert(id, idempotent);
        assert!(earlier.is_none(), "producer {id} declared twice");
    }

    /// Records what producer `producer` was told about `value`. Values are unique per trial:
    /// writing one twice is a bug of the workload, not of the broker.
    pub fn write(&mut self, producer: usize, value: impl Into<String>, outcome: Outcome) {
        let value = value.into();
        assert!(self.producers.contains_key(&producer), "undeclared producer {producer}");
        let earlier = self.writes.insert(value.clone(), (producer, outcome));
        assert!(earlier.is_none(), "value {value} written twice by the workload");
    }

    /// Records that `pass` read `value` at `partition`/`offset`.
    pub fn read(&mut self, pass: Pass, partition: i32, offset: i64, value: impl Into<String>) {
        let value = value.into();
        self.reads += 1;
        self.at.entry((partition, offset)).or_default().insert(value.clone());
        self.seen_at
            .entry(value)
            .or_default()
            .insert((pass, (partition, offset)));
    }

    pub fn check(&self) -> Report {
        let mut report = Report {
            reads: self.reads,
            values_read: self.seen_at.len(),
            ..Report::default()
        };
        let read_after = |value: &str| {
            self.seen_at
                .get(value)
                .is_some_and(|seen| seen.iter().any(|(pass, _)| matches!(pass, Pass::After(_))))
        };
        // Position → the value acknowledged there; two values acknowledged at one position
        // make it divergent as well.
        let mut acknowledged_at: BTreeMap<Position, BTreeSet<&str>> = BTreeMap::new();
        let mut misplaced: BTreeSet<Position> = BTreeSet::new();
        let mut writes: Vec<(&String, &(usize, Outcome))> = self.writes.iter().collect();
        writes.sort_by(|a, b| a.0.cmp(b.0));
        for (value, (_, outcome)) in writes {
            match *outcome {
                Outcome::Acked { partition, offset } => {
                    report.acknowledged += 1;
                    let position = (partition, offset);
                    acknowledged_at.entry(position).or_default().insert(value.as_str());
                    if !read_after(value) {
                        report.lost.push(value.clone());
                    }
                    // Read, but never where it was acknowledged, and nothing else read there:
                    // the acknowledgement named a position that does not hold it.
                    let seen = self.seen_at.get(value);
                    let read_somewhere = seen.is_some_and(|s| !s.is_empty());
                    let read_there = seen.is_some_and(|s| s.iter().any(|(_, p)| *p == position));
                    if read_somewhere && !read_there {
                        misplaced.insert(position);
                    }
                }
                Outcome::Failed => report.failed += 1,
                Outcome::Unknown => report.unknown += 1,
            }
        }

        let mut values: Vec<(&String, &BTreeSet<(Pass, Position)>)> = self.seen_at.iter().collect();
        values.sort_by(|a, b| a.0.cmp(b.0));
        for (value, seen) in values {
            let positions: BTreeSet<Position> = seen.iter().map(|(_, p)| *p).collect();
            let idempotent = match self.writes.get(value) {
                None | Some((_, Outcome::Failed)) => {
                    report.unexpected.push(value.clone());
                    false
                }
                Some((producer, _)) => self.producers[producer],
            };
            if positions.len() > 1 {
                report.duplicated_idempotent += usize::from(idempotent);
                report.duplicated.push((value.clone(), positions.into_iter().collect()));
            }
        }

        let mut divergent: BTreeSet<Position> = misplaced;
        for (position, read) in &self.at {
            let acknowledged = acknowledged_at.get(position);
            let other_than_acknowledged = acknowledged.is_some_and(|a| read.iter().any(|v| !a.contains(v.as_str())));
            if read.len() > 1 || other_than_acknowledged {
                divergent.insert(*position);
            }
        }
        for (position, values) in &acknowledged_at {
            if values.len() > 1 {
                divergent.insert(*position);
            }
        }
        report.divergent = divergent
            .into_iter()
            .map(|position| {
                let acknowledged = acknowledged_at
                    .get(&position)
                    .map(|values| values.iter().copied().collect::<Vec<_>>().join(" and "));
                Divergence {
                    position,
                    read: self.at.get(&position).cloned().unwrap_or_default(),
                    acknowledged,
                }
            })
            .collect();
        report
    }
}

impl Report {
    /// `acknowledged=N lost=N duplicated=N duplicated_idempotent=N divergent=N unknown=N
    /// failed=N unexpected=N reads=N values_read=N`: key=value pairs, so a script can add
    /// trials up.
    pub fn summary(&self) -> String {
        format!(
            "acknowledged={} lost={} duplicated={} duplicated_idempotent={} divergent={} unknown={} failed={} \
             unexpected={} reads={} values_read={}",
            self.acknowledged,
            self.lost.len(),
            self.duplicated.len(),
            self.duplicated_idempotent,
            self.divergent.len(),
            self.unknown,
            self.failed,
            self.unexpected.len(),
            self.reads,
            self.values_read,
        )
    }

    /// The anomalies a correct broker never shows (duplicates of producers without
    /// idempotence are allowed), each with up to `examples` instances.
    pub fn violations(&self, examples: usize) -> Vec<String> {
        let mut out = Vec::new();
        if !self.lost.is_empty() {
            out.push(format!(
                "{} acknowledged value(s) lost, e.g. {:?}",
                self.lost.len(),
                &self.lost[..self.lost.len().min(examples)]
            ));
        }
        if self.duplicated_idempotent > 0 {
            out.push(format!(
                "{} value(s) of an idempotent producer duplicated; duplicates of any producer, e.g. {:?}",
                self.duplicated_idempotent,
                &self.duplicated[..self.duplicated.len().min(examples)]
            ));
        }
        if !self.divergent.is_empty() {
            let shown: Vec<String> = self
                .divergent
                .iter()
                .take(examples)
                .map(Divergence::to_string)
                .collect();
            out.push(format!(
                "{} divergent position(s), e.g. {}",
                self.divergent.len(),
                shown.join("; ")
            ));
        }
        if !self.unexpected.is_empty() {
            out.push(format!(
                "{} value(s) read that were never written or certainly failed, e.g. {:?}",
                self.unexpected.len(),
                &self.unexpected[..self.unexpected.len().min(examples)]
            ));
        }
        out
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (partition, offset) = self.position;
        write!(f, "{partition}/{offset}: read {:?}", self.read)?;
        if let Some(acknowledged) = &self.acknowledged {
            write!(f, ", acknowledged {acknowledged}")?;
        }
        Ok(())
    }
}
