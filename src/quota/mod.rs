//! Client quotas, as Kafka's `ClientQuotaManager` keeps them (KIP-13, KIP-55, KIP-124,
//! KIP-219): byte rates for Produce (`producer_byte_rate`) and Fetch (`consumer_byte_rate`),
//! and the share of a handler thread a client may use (`request_percentage`), each set per
//! user, per client id, per user and client id, or as a default of either.
//!
//! - The quotas live in the metadata log (`MetadataRecord::ClientQuotas`, Kafka's
//!   ClientQuotaRecord) and the image (`MetadataImage::client_quotas`); AlterClientQuotas and
//!   DescribeClientQuotas (`api::client_quotas`) write and read them.
//! - Which quota applies to a request is Kafka's precedence (`resolve`), per quota key: the
//!   first entity of user+client-id, user+default client, user, default user+client-id,
//!   default user+default client, default user, client-id, default client that sets the key.
//! - What is measured is shared as Kafka shares it: by the parts the matching entity names
//!   (a quota for user `alice` is one rate for all her clients; a default client-id quota is
//!   one rate per client id).
//! - The rate is Kafka's sampled rate: `Windows::count` samples of `Windows::span` each, the
//!   elapsed time counted as at least `count - 1` spans. A request that takes the rate over its quota
//!   is answered with `throttle_time_ms`, the time until its rate is back within the quota
//!   (`Rate::throttle`, at most `count` × `span`), and its connection is not read again
//!   until then (`server`).
//! - With no quota set (the default) nothing is measured: the request path checks
//!   `ClientQuotas::is_empty` and goes on.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Partitions created, deleted or added per second (KIP-599).
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
/// The quota keys this broker enforces (Kafka also knows the IP entity's
/// `connection_creation_rate`, which is refused here rather than stored unused).
pub const KEYS: [&str; 4] = [
    PRODUCER_BYTE_RATE,
    CONSUMER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    CONTROLLER_MUTATION_RATE,
];

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// How a rate is sampled: `count` samples (`quota.window.num`) of `span` each
/// (`quota.window.size.seconds`).
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub count: u32,
    pub span: Duration,
}

impl Default for Windows {
    /// Kafka's: 11 samples of 1 s.
    fn default() -> Windows {
        Windows {
            count: 11,
            span: Duration::from_secs(1),
        }
    }
}

/// One part of a quota entity: its default (`<default>`, a null name on the wire) or a name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityName {
    Default,
    Name(String),
}

impl EntityName {
    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Name(n.to_string()),
        }
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Name(n) => Some(n),
        }
    }
}

/// Whom a quota is for: a user, a client id, or both (a part absent is not in the entity).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<EntityName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<EntityName>,
}

/// One quota set (`value`) or removed (None): a ClientQuotaRecord.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaChange {
    pub entity: QuotaEntity,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

/// The quotas in force, by entity: each entity's keys and values.
pub type ClientQuotas = OrdMap<QuotaEntity, Arc<BTreeMap<String, f64>>>;

/// Applies `change` to `quotas` (an entity left with no key is dropped).
pub fn apply(quotas: &mut ClientQuotas, change: &QuotaChange) {
    let mut values = quotas.get(&change.entity).map(|v| (**v).clone()).unwrap_or_default();
    match change.value {
        Some(v) => values.insert(change.key.clone(), v),
        None => values.remove(&change.key),
    };
    if values.is_empty() {
        quotas.remove(&change.entity);
    } else {
        quotas.insert(change.entity.clone(), Arc::new(values));
    }
}

/// Who a rate is measured for: the user and the client id, each empty where the matching
/// entity does not name that part (Kafka's quota metric tags).
pub type SensorKey = (String, String);

/// The quota `key` for a request of `user` (the principal's name) with `client_id`, by
/// Kafka's precedence, and whom its rate is shared by.
pub fn resolve(quotas: &ClientQuotas, key: &str, user: &str, client_id: &str) -> Option<(f64, SensorKey)> {
    let named = |s: &str| Some(EntityName::Name(s.to_string()));
    let default = || Some(EntityName::Default);
    let levels = [
        (named(user), named(client_id)),
        (named(user), default()),
        (named(user), None),
        (default(), named(client_id)),
        (default(), default()),
        (default(), None),
        (None, named(client_id)),
        (None, default()),
    ];
    levels.into_iter().find_map(|(u, c)| {
        let sensor = (
            if u.is_some() { user.to_string() } else { String::new() },
            if c.is_some() {
                client_id.to_string()
            } else {
                String::new()
            },
        );
        let entity = QuotaEntity { user: u, client_id: c };
        quotas
            .get(&entity)
            .and_then(|v| v.get(key))
            .map(|&bound| (bound, sensor))
    })
}

/// Kafka's sampled rate: up to `count` samples, each a span's total from its start.
#[derive(Debug, Default)]
struct Rate {
    samples: VecDeque<(Instant, f64)>,
}

impl Rate {
    fn purge(&mut self, now: Instant, w: Windows) {
        let span = w.span * w.count;
        while self
            .samples
            .front()
            .is_some_and(|(start, _)| now.duration_since(*start) >= span)
        {
            self.samples.pop_front();
        }
    }

    fn record(&mut self, now: Instant, value: f64, w: Windows) {
        self.purge(now, w);
        match self.samples.back_mut() {
            Some((start, total)) if now.duration_since(*start) < w.span => *total += value,
            _ => {
                if self.samples.len() >= w.count as usize {
                    self.samples.pop_front();
                }
                self.samples.push_back((now, value));
            }
        }
    }

    /// The time the rate is over: since the oldest sample began, at least `count - 1`
    /// spans. (Kafka's `Rate.windowSize` adds the missing whole windows to the elapsed
    /// time, so its minimum saws between 10 and 11 s within each second and lets a client
    /// through up to 10 % over its quota; this minimum is flat.)
    fn window(&self, now: Instant, w: Windows) -> Duration {
        let elapsed = self
            .samples
            .front()
            .map_or(Duration::ZERO, |(start, _)| now.duration_since(*start));
        elapsed.max(w.span * (w.count - 1))
    }

    /// How long until the rate is back within `bound` with nothing more recorded (at most
    /// `count` spans). Kafka's `QuotaUtils.throttleTime` is (rate - bound) / bound × the
    /// window: the wait were the window to grow from now on. Until `count - 1` spans have
    /// passed it does not grow (its minimum holds), so Kafka's wait is too short and lets a
    /// client through several requests over its quota in its first seconds; measured from the
    /// oldest sample, the wait is total / bound - elapsed, the same once the minimum is past.
    fn throttle(&self, now: Instant, bound: f64, w: Windows) -> Duration {
        let total: f64 = self.samples.iter().map(|(_, v)| v).sum();
        if total / self.window(now, w).as_secs_f64() <= bound {
            return Duration::ZERO;
        }
        let max = w.span * w.count;
        if bound <= 0.0 {
            return max;
        }
        let elapsed = self
            .samples
            .front()
            .map_or(0.0, |(start, _)| now.duration_since(*start).as_secs_f64());
        let wait = (total / bound - elapsed).clamp(0.0, max.as_secs_f64());
        Duration::from_millis((wait * 1000.0).round() as u64)
    }
}

/// What a quota measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Produce request bytes, against `producer_byte_rate`.
    Produce,
    /// Fetch response bytes, against `consumer_byte_rate`.
    Fetch,
    /// Handler time as a percentage of one thread, against `request_percentage`.
    Request,
}

impl Kind {
    pub fn key(self) -> &'static str {
        match self {
            Kind::Produce => PRODUCER_BYTE_RATE,
            Kind::Fetch => CONSUMER_BYTE_RATE,
            Kind::Request => REQUEST_PERCENTAGE,
        }
    }
}

/// Kafka's `TokenBucket` for `controller_mutation_rate` (KIP-599): full at `bound` × the
/// whole window (`count` spans), refilled at `bound` per second, and taken below zero by a
/// mutation larger than what is left.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(now: Instant, bound: f64, w: Windows) -> Bucket {
        Bucket {
            tokens: Bucket::burst(bound, w),
            at: now,
        }
    }

    fn burst(bound: f64, w: Windows) -> f64 {
        bound * (w.span * w.count).as_secs_f64()
    }

    fn refill(&mut self, now: Instant, bound: f64, w: Windows) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + bound * elapsed).min(Bucket::burst(bound, w));
        self.at = now;
    }

    /// How long until the bucket is back at zero (none while it is not below).
    fn debt(&self, bound: f64) -> Duration {
        match self.tokens < 0.0 && bound > 0.0 {
            true => Duration::from_millis((-self.tokens / bound * 1000.0).round() as u64),
            false => Duration::ZERO,
        }
    }
}

/// Whether a request's partition mutations are refused once the client's bucket is empty
/// (strict: CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) or accepted and the
/// client throttled for them (permissive: older versions, whose clients know no
/// THROTTLING_QUOTA_EXCEEDED). Kafka's `ControllerMutationQuotaManager.newQuotaFor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutations {
    Strict,
    Permissive,
}

struct Sensor {
    rate: Rate,
    used: Instant,
}

/// Sensors unused this long are dropped (Kafka's quota sensors expire after an hour).
const SENSOR_IDLE_MAX: Duration = Duration::from_secs(3600);

/// The rates of every client a quota applies to.
#[derive(Default)]
pub struct QuotaManager {
    sensors: Mutex<HashMap<(Kind, SensorKey), Sensor>>,
    buckets: Mutex<HashMap<SensorKey, Bucket>>,
    windows: Windows,
}

impl QuotaManager {
    pub fn new(windows: Windows) -> QuotaManager {
        QuotaManager {
            sensors: Mutex::default(),
            buckets: Mutex::default(),
            windows,
        }
    }

    /// Records `value` for the client, if a quota of `kind` applies to it, and answers how
    /// long it must be throttled (zero when within its quota or when no quota applies).
    pub fn record(&self, quotas: &ClientQuotas, kind: Kind, user: &str, client_id: &str, value: f64) -> Duration {
        self.record_at(quotas, kind, user, client_id, value, Instant::now())
    }

    fn record_at(
        &self,
        quotas: &ClientQuotas,
        kind: Kind,
        user: &str,
        client_id: &str,
        value: f64,
        now: Instant,
    ) -> Duration {
        if quotas.is_empty() {
            return Duration::ZERO;
        }
        let Some((bound, key)) = resolve(quotas, kind.key(), user, client_id) else {
            return Duration::ZERO;
        };
        let mut sensors = self.sensors.lock().unwrap_or_else(|p| p.into_inner());
        if sensors.len() >= 1024 {
            sensors.retain(|_, s| now.duration_since(s.used) < SENSOR_IDLE_MAX);
        }
        let sensor = sensors.entry((kind, key)).or_insert_with(|| Sensor {
            rate: Rate::default(),
            used: now,
        });
        sensor.used = now;
        sensor.rate.record(now, value, self.windows);
        sensor.rate.throttle(now, bound, self.windows)
    }

    /// Takes `partitions` created, deleted or added from the client's `controller_mutation_rate`
    /// bucket, if one applies. Strict: refused (Err, with how long until the bucket is back at
    /// zero) while the bucket is below zero, else taken whatever its size; permissive: always
    /// taken. Ok carries how long the client is throttled for (permissive, once below zero).
    /// `now` is the time of the mutation.
    pub fn mutate(
        &self,
        quotas: &ClientQuotas,
        user: &str,
        client_id: &str,
        partitions: f64,
        mode: Mutations,
        now: Instant,
    ) -> Result<Duration, Duration> {
        if quotas.is_empty() {
            return Ok(Duration::ZERO);
        }
        let Some((bound, key)) = resolve(quotas, CONTROLLER_MUTATION_RATE, user, client_id) else {
            return Ok(Duration::ZERO);
        };
        let w = self.windows;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= 1024 {
            buckets.retain(|_, b| now.saturating_duration_since(b.at) < SENSOR_IDLE_MAX);
        }
        let bucket = buckets.entry(key).or_insert_with(|| Bucket::full(now, bound, w));
        bucket.refill(now, bound, w);
        if mode == Mutations::Strict && bucket.tokens < 0.0 {
            return Err(bucket.debt(bound));
        }
        bucket.tokens -= partitions;
        Ok(match mode {
            Mutations::Strict => Duration::ZERO,
            Mutations::Permissive => bucket.debt(bound),
        })
    }

    /// Takes back a recorded `value` (Kafka unrecords a throttled Fetch, answered empty).
    pub fn unrecord(&self, quotas: &ClientQuotas, kind: Kind, user: &str, client_id: &str, value: f64) {
        if let Some((_, key)) = resolve(quotas, kind.key(), user, client_id) {
            let mut sensors = self.sensors.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(sensor) = sensors.get_mut(&(kind, key)) {
                sensor.rate.record(Instant::now(), -value, self.windows);
            }
        }
    }
}

/// The user a quota names for `principal` (`User:alice` is `alice`; Kafka's sanitized user).
pub fn user_of(principal: &str) -> &str {
    principal.strip_prefix("User:").unwrap_or(principal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<Option<&str>>, client: Option<Option<&str>>) -> QuotaEntity {
        QuotaEntity {
            user: user.map(EntityName::from_wire),
            client_id: client.map(EntityName::from_wire),
        }
    }

    fn set(quotas: &mut ClientQuotas, e: QuotaEntity, key: &str, value: f64) {
        apply(
            quotas,
            &QuotaChange {
                entity: e,
                key: key.into(),
                value: Some(value),
            },
        );
    }

    #[test]
    fn precedence_is_kafkas() {
        let mut q = ClientQuotas::new();
        set(&mut q, entity(None, Some(None)), PRODUCER_BYTE_RATE, 8.0);
        assert_eq!(
            resolve(&q, PRODUCER_BYTE_RATE, "alice", "app"),
            Some((8.0, (String::new(), "app".into())))
        );
        set(&mut q, entity(None, Some(Some("app"))), PRODUCER_BYTE_RATE, 7.0);
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "alice", "app").unwrap().0, 7.0);
        set(&mut q, entity(Some(None), None), PRODUCER_BYTE_RATE, 6.0);
        assert_eq!(
            resolve(&q, PRODUCER_BYTE_RATE, "alice", "app"),
            Some((6.0, ("alice".into(), String::new())))
        );
        set(&mut q, entity(Some(None), Some(None)), PRODUCER_BYTE_RATE, 5.0);
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "alice", "app").unwrap().0, 5.0);
        set(&mut q, entity(Some(None), Some(Some("app"))), PRODUCER_BYTE_RATE, 4.0);
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "alice", "app").unwrap().0, 4.0);
        set(&mut q, entity(Some(Some("alice")), None), PRODUCER_BYTE_RATE, 3.0);
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "alice", "app").unwrap().0, 3.0);
        set(&mut q, entity(Some(Some("alice")), Some(None)), PRODUCER_BYTE_RATE, 2.0);
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "alice", "app").unwrap().0, 2.0);
        set(
            &mut q,
            entity(Some(Some("alice")), Some(Some("app"))),
            PRODUCER_BYTE_RATE,
            1.0,
        );
        assert_eq!(
            resolve(&q, PRODUCER_BYTE_RATE, "alice", "app"),
            Some((1.0, ("alice".into(), "app".into())))
        );
        // Another user falls back to the defaults; another key has no quota.
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "bob", "app").unwrap().0, 4.0);
        assert_eq!(resolve(&q, CONSUMER_BYTE_RATE, "alice", "app"), None);
        // Removing the last key drops the entity.
        apply(
            &mut q,
            &QuotaChange {
                entity: entity(Some(Some("alice")), Some(Some("app"))),
                key: PRODUCER_BYTE_RATE.into(),
                value: None,
            },
        );
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "alice", "app").unwrap().0, 2.0);
        assert_eq!(q.len(), 7);
    }

    #[test]
    fn a_rate_over_its_quota_is_throttled_for_the_excess() {
        let mut q = ClientQuotas::new();
        set(&mut q, entity(None, Some(Some("app"))), PRODUCER_BYTE_RATE, 1000.0);
        let m = QuotaManager::default();
        let t0 = Instant::now();
        // 10,000 bytes over the first (minimum 10 s) window is exactly the quota.
        assert_eq!(m.record_at(&q, Kind::Produce, "u", "app", 10_000.0, t0), Duration::ZERO);
        // 1,000 more, 5 s later: 11,000 bytes are within 1,000 B/s once 11 s have passed,
        // 6 s from now.
        assert_eq!(
            m.record_at(&q, Kind::Produce, "u", "app", 1_000.0, t0 + Duration::from_secs(5)),
            Duration::from_secs(6)
        );
        // Another client has no quota; the fetch side has none either.
        assert_eq!(m.record_at(&q, Kind::Produce, "u", "other", 1e9, t0), Duration::ZERO);
        assert_eq!(m.record_at(&q, Kind::Fetch, "u", "app", 1e9, t0), Duration::ZERO);
        // Past the samples' span the old bytes no longer count.
        let w = Windows::default();
        let later = t0 + w.span * w.count;
        assert_eq!(m.record_at(&q, Kind::Produce, "u", "app", 100.0, later), Duration::ZERO);
        // A huge excess is bounded by the samples' span.
        assert_eq!(
            m.record_at(&q, Kind::Produce, "u", "app", 1e12, later),
            w.span * w.count
        );
    }

    #[test]
    fn a_mutation_bucket_refuses_strict_requests_only_once_below_zero() {
        let mut q = ClientQuotas::new();
        set(&mut q, entity(Some(Some("ops")), None), CONTROLLER_MUTATION_RATE, 2.0);
        let m = QuotaManager::default();
        let w = Windows::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let strict = Mutations::Strict;
        // Full at 2/s × 11 s = 22: any strict mutation is taken while the bucket is not below
        // zero, unthrottled, even one larger than what is left.
        assert_eq!(m.mutate(&q, "ops", "c", 20.0, strict, t0), Ok(Duration::ZERO));
        assert_eq!(m.mutate(&q, "ops", "c", 10.0, strict, t0), Ok(Duration::ZERO));
        // At -8 it refuses, with the time until zero at 2/s; refused mutations take nothing.
        assert_eq!(m.mutate(&q, "ops", "c", 1.0, strict, t0), Err(Duration::from_secs(4)));
        assert_eq!(
            m.mutate(&q, "ops", "c", 1.0, strict, at(1)),
            Err(Duration::from_secs(3))
        );
        // Permissive mutations are always taken, and throttled while below zero.
        let permissive = Mutations::Permissive;
        assert_eq!(
            m.mutate(&q, "ops", "c", 4.0, permissive, at(2)),
            Ok(Duration::from_secs(4))
        );
        // Back at zero 4 s later: strict mutations go through again.
        assert_eq!(m.mutate(&q, "ops", "c", 1.0, strict, at(6)), Ok(Duration::ZERO));
        // It refills to the burst (22), not past it: after a long idle time 22.5 leave it below zero.
        let later = at(1000);
        assert_eq!(m.mutate(&q, "ops", "c", 22.5, strict, later), Ok(Duration::ZERO));
        assert!(m.mutate(&q, "ops", "c", 1.0, strict, later).is_err());
        // The user's other clients share the bucket; a client without the quota is free.
        assert!(m.mutate(&q, "ops", "other", 1.0, strict, later).is_err());
        assert_eq!(m.mutate(&q, "dev", "c", 1e6, strict, later), Ok(Duration::ZERO));
        assert_eq!(Bucket::burst(2.0, w), 22.0);
    }

    #[test]
    fn users_are_named_without_the_principal_type() {
        assert_eq!(user_of("User:alice"), "alice");
        assert_eq!(user_of("User:ANONYMOUS"), "ANONYMOUS");
    }
}
