//! The admin CLI's connection to a cluster: the `--command-config` properties (Kafka's client
//! keys), ApiVersions first and a version per API that both sides speak, and Kafka's routing
//! (Metadata for partition leaders, FindCoordinator for groups, any broker for admin requests).
//!
//! Requests travel through `cluster::broker_client` (framing, bounded answers, correlation
//! ids) over `cluster::peer::DialSecurity` (TLS, then the SASL login of `sasl::client`), the
//! code brokers use to call each other; nothing here is Sluice-specific on the wire.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::find_coordinator_response::FindCoordinatorResponse;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiVersionsRequest, DescribeTopicPartitionsRequest, FindCoordinatorRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};

use super::CliError;
use crate::cluster::BrokerInfo;
use crate::cluster::broker_client::{BrokerClient, CallError, ClientLimits};
use crate::cluster::peer::DialSecurity;
use crate::sasl::Mechanism;
use crate::sasl::client::SaslLogin;

/// The endpoint name every broker is recorded under here: the CLI dials what Metadata
/// answers on the listener it reached, so one name is enough.
const LISTENER: &str = "CLIENT";
/// ApiVersions v3 (KIP-511, Kafka 2.4): a broker that does not speak it answers v0 with
/// UNSUPPORTED_VERSION, which still lists its ranges.
const API_VERSIONS_VERSION: i16 = 3;
/// The largest answer read: a Fetch asks for at most `FETCH_BYTES_MAX`, far below this.
const RESPONSE_BYTES_MAX: usize = 64 << 20;
/// How long a call may take in all: above a Fetch's wait and the 30 s broker timeouts the
/// admin requests carry.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Kafka-style client properties (`--command-config`): `key=value` lines, `#` and `!`
/// comments, a trailing `\` continues a line.
pub fn read_properties(path: &Path) -> Result<BTreeMap<String, String>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("--command-config {}: {e}", path.display())))?;
    Ok(parse_properties(&text))
}

pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim_start();
        if pending.is_empty() && (line.starts_with('#') || line.starts_with('!') || line.trim().is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                continue;
            }
            None => pending.push_str(line),
        }
        let entry = std::mem::take(&mut pending);
        let split = entry.find(['=', ':']).unwrap_or(entry.len());
        let (key, value) = entry.split_at(split);
        let value = value.get(1..).unwrap_or("");
        out.insert(key.trim().to_string(), value.trim().to_string());
    }
    out
}

/// How to dial the brokers, from the properties: `security.protocol` (PLAINTEXT, SSL,
/// SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism` with `sasl.username`/`sasl.password` or the
/// `username`/`password` of `sasl.jaas.config`, and for TLS the broker's own `ssl.*` keys
/// (PEM: `ssl.truststore.location`, or librdkafka's `ssl.ca.location`).
pub fn dial_security(props: &BTreeMap<String, String>) -> Result<DialSecurity, CliError> {
    let usage = |m: String| CliError::Usage(format!("--command-config: {m}"));
    let protocol = props
        .get("security.protocol")
        .map(|p| p.to_ascii_uppercase())
        .unwrap_or_else(|| "PLAINTEXT".into());
    let (tls, sasl) = match protocol.as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (true, false),
        "SASL_PLAINTEXT" => (false, true),
        "SASL_SSL" => (true, true),
        other => {
            return Err(usage(format!(
                "security.protocol {other}: not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            )));
        }
    };
    let tls = match tls {
        false => None,
        true => {
            // The broker's TLS client (`tls::connector`) reads the same Kafka keys.
            let mut config = crate::config::BrokerConfig::default();
            for (key, value) in props {
                let key = match key.as_str() {
                    "ssl.ca.location" => "ssl.truststore.location",
                    k if crate::config::SSL_KEYS.contains(&k) => k,
                    _ => continue,
                };
                config.set(key, value).map_err(|e| usage(e.to_string()))?;
            }
            Some(crate::tls::connector(&config, LISTENER).map_err(|e| usage(e.to_string()))?)
        }
    };
    let sasl = match sasl {
        false => None,
        true => Some(sasl_login(props).map_err(usage)?),
    };
    Ok(DialSecurity::client(LISTENER, tls, sasl))
}

fn sasl_login(props: &BTreeMap<String, String>) -> Result<SaslLogin, String> {
    let name = props.get("sasl.mechanism").map(String::as_str).unwrap_or("GSSAPI");
    let mechanism = Mechanism::from_name(&name.to_ascii_uppercase())
        .filter(|m| !matches!(m, Mechanism::OAuthBearer))
        .ok_or_else(|| format!("sasl.mechanism {name}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"))?;
    let (mut username, mut password) = (props.get("sasl.username").cloned(), props.get("sasl.password").cloned());
    if let Some(jaas) = props.get("sasl.jaas.config") {
        let entry = crate::sasl::jaas::parse(jaas).map_err(|e| format!("sasl.jaas.config: {e}"))?;
        username = username.or_else(|| entry.options.get("username").cloned());
        password = password.or_else(|| entry.options.get("password").cloned());
    }
    match (username, password) {
        (Some(username), Some(password)) => Ok(SaslLogin {
            mechanism,
            username,
            password,
            token: None,
        }),
        _ => Err("SASL needs sasl.username and sasl.password (or sasl.jaas.config with username and password)".into()),
    }
}

/// `host:port` → (host, port), IPv6 hosts in brackets.
fn split_address(address: &str) -> Option<(String, i32)> {
    let (host, port) = address.trim().rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let port: u16 = port.parse().ok()?;
    (!host.is_empty()).then(|| (host.to_string(), i32::from(port)))
}

fn broker_at(id: i32, host: &str, port: i32) -> BrokerInfo {
    let mut broker = BrokerInfo::new(id, host, port);
    for endpoint in &mut broker.endpoints {
        endpoint.name = LISTENER.into();
    }
    broker
}

/// One partition as Metadata describes it.
#[derive(Debug, Clone)]
pub struct PartitionInfo {
    pub partition: i32,
    pub error_code: i16,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A partition's eligible leader replicas and last known ELR (KIP-966), by topic and
/// partition.
pub type EligibleLeaders = HashMap<(String, i32), (Vec<i32>, Vec<i32>)>;

#[derive(Debug, Clone)]
pub struct TopicInfo {
    pub name: String,
    pub error_code: i16,
    pub internal: bool,
    pub partitions: Vec<PartitionInfo>,
}

/// A Metadata answer, as the commands use it.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: Vec<TopicInfo>,
}

/// A connection to a cluster.
pub struct Client {
    calls: BrokerClient,
    /// The bootstrap broker that answered ApiVersions (ids below zero, as Kafka's clients
    /// number bootstrap servers).
    bootstrap: BrokerInfo,
    /// The broker's range per API key.
    broker_versions: HashMap<i16, (i16, i16)>,
}

impl Client {
    /// Dials the first bootstrap address that answers ApiVersions.
    pub async fn connect(brokers: &str, security: DialSecurity) -> Result<Client, CliError> {
        let limits = ClientLimits {
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            response_bytes_max: RESPONSE_BYTES_MAX,
            connections_per_broker_max: 2,
            idle_reuse_max: Duration::from_secs(300),
        };
        let calls = BrokerClient::with_security("sluice-cli", LISTENER, limits, Arc::new(security));
        let mut failures = Vec::new();
        for (i, address) in brokers.split(',').filter(|a| !a.trim().is_empty()).enumerate() {
            let (host, port) = split_address(address)
                .ok_or_else(|| CliError::Usage(format!("--brokers {address}: expected HOST:PORT")))?;
            let id = -1 - i32::try_from(i).unwrap_or(i32::MAX - 1);
            let broker = broker_at(id, &host, port);
            let request = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("sluice-cli"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
            match calls.call(&broker, API_VERSIONS_VERSION, &request).await {
                Ok(answer) => {
                    let broker_versions = answer
                        .api_keys
                        .iter()
                        .map(|k| (k.api_key, (k.min_version, k.max_version)))
                        .collect();
                    return Ok(Client {
                        calls,
                        bootstrap: broker,
                        broker_versions,
                    });
                }
                Err(CallError::Authentication { reason, .. }) => {
                    return Err(CliError::Kafka {
                        code: kafka_protocol::error::ResponseError::SaslAuthenticationFailed.code(),
                        message: format!("{address}: {reason}"),
                    });
                }
                Err(e) => failures.push(network_reason(&e)),
            }
        }
        Err(CliError::Network(match failures.is_empty() {
            true => "no broker address given".into(),
            false => failures.join("; "),
        }))
    }

    /// The highest version of `R` both this CLI (kafka-protocol, up to `cap`: the versions
    /// whose request shape the commands fill) and the broker speak.
    pub fn version<R: Request>(&self, cap: i16) -> Result<i16, CliError> {
        let ours = R::VERSIONS;
        let name = api_name(R::KEY);
        let Some(&(min, max)) = self.broker_versions.get(&R::KEY) else {
            return Err(CliError::Kafka {
                code: kafka_protocol::error::ResponseError::UnsupportedVersion.code(),
                message: format!("the broker does not serve {name}"),
            });
        };
        let high = max.min(ours.max).min(cap);
        let low = min.max(ours.min);
        if high < low {
            return Err(CliError::Kafka {
                code: kafka_protocol::error::ResponseError::UnsupportedVersion.code(),
                message: format!(
                    "{name}: the broker serves v{min}-v{max}, this CLI v{}-v{}",
                    ours.min,
                    ours.max.min(cap)
                ),
            });
        }
        Ok(high)
    }

    /// Sends `request` at `version` to `broker`.
    pub async fn send<R: Request>(
        &self,
        broker: &BrokerInfo,
        version: i16,
        request: &R,
    ) -> Result<R::Response, CliError> {
        self.calls.call(broker, version, request).await.map_err(|e| match e {
            CallError::Authentication { reason, .. } => CliError::Kafka {
                code: kafka_protocol::error::ResponseError::SaslAuthenticationFailed.code(),
                message: reason,
            },
            other => CliError::Network(format!("{}: {}", api_name(R::KEY), network_reason(&other))),
        })
    }

    /// Sends an admin request to any broker (the one bootstrapped: Kafka 4 brokers forward to
    /// the controller what it must decide).
    pub async fn admin<R: Request>(&self, version: i16, request: &R) -> Result<R::Response, CliError> {
        self.send(&self.bootstrap, version, request).await
    }

    /// Metadata for `topics` (None: every topic), without creating any.
    pub async fn metadata(&self, topics: Option<&[String]>) -> Result<Metadata, CliError> {
        let version = self.version::<MetadataRequest>(12)?;
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        let answer = self.admin(version, &request).await?;
        let brokers = answer
            .brokers
            .iter()
            .map(|b| (b.node_id.0, broker_at(b.node_id.0, &b.host, b.port)))
            .collect();
        let topics = answer
            .topics
            .iter()
            .map(|t| TopicInfo {
                name: t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                error_code: t.error_code,
                internal: t.is_internal,
                partitions: {
                    let mut partitions: Vec<PartitionInfo> = t
                        .partitions
                        .iter()
                        .map(|p| PartitionInfo {
                            partition: p.partition_index,
                            error_code: p.error_code,
                            leader: p.leader_id.0,
                            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                        })
                        .collect();
                    partitions.sort_by_key(|p| p.partition);
                    partitions
                },
            })
            .collect();
        Ok(Metadata {
            cluster_id: answer.cluster_id.map(|c| c.to_string()),
            controller_id: answer.controller_id.0,
            brokers,
            topics,
        })
    }

    /// The eligible leader replicas of `topics`' partitions (DescribeTopicPartitions, as
    /// Kafka 4's kafka-topics.sh reads them), following the cursor page by page. Empty when
    /// the broker does not serve the API.
    pub async fn eligible_leaders(&self, topics: &[String]) -> Result<EligibleLeaders, CliError> {
        let mut found = EligibleLeaders::new();
        let Ok(version) = self.version::<DescribeTopicPartitionsRequest>(0) else {
            return Ok(found);
        };
        let mut cursor: Option<Cursor> = None;
        // A page holds at least one partition, so the walk ends; the bound guards a broker
        // whose cursor never moves.
        for _ in 0..100_000 {
            let request = DescribeTopicPartitionsRequest::default()
                .with_topics(
                    topics
                        .iter()
                        .map(|t| TopicRequest::default().with_name(topic_name(t)))
                        .collect(),
                )
                .with_response_partition_limit(2000)
                .with_cursor(cursor.take());
            let answer = self.admin(version, &request).await?;
            for t in &answer.topics {
                let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                for p in &t.partitions {
                    let ids = |list: &Option<Vec<kafka_protocol::messages::BrokerId>>| {
                        list.iter().flatten().map(|b| b.0).collect::<Vec<i32>>()
                    };
                    found.insert(
                        (name.clone(), p.partition_index),
                        (ids(&p.eligible_leader_replicas), ids(&p.last_known_elr)),
                    );
                }
            }
            match answer.next_cursor {
                Some(next) if !found.contains_key(&(next.topic_name.0.to_string(), next.partition_index)) => {
                    cursor = Some(
                        Cursor::default()
                            .with_topic_name(next.topic_name)
                            .with_partition_index(next.partition_index),
                    );
                }
                // A cursor that does not move ends the walk.
                _ => break,
            }
        }
        Ok(found)
    }

    /// The coordinator of group `group` (FindCoordinator, key type 0).
    pub async fn coordinator(&self, group: &str) -> Result<BrokerInfo, CliError> {
        let version = self.version::<FindCoordinatorRequest>(6)?;
        let mut request = FindCoordinatorRequest::default().with_key_type(0);
        // v4 (KIP-699) asks for several keys at once instead of one.
        request = match version >= 4 {
            true => request.with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]),
            false => request.with_key(StrBytes::from_string(group.to_string())),
        };
        let answer: FindCoordinatorResponse = self.admin(version, &request).await?;
        let (code, message, node, host, port) = match answer.coordinators.first() {
            Some(c) if version >= 4 => (
                c.error_code,
                c.error_message.clone(),
                c.node_id.0,
                c.host.clone(),
                c.port,
            ),
            _ => (
                answer.error_code,
                answer.error_message.clone(),
                answer.node_id.0,
                answer.host.clone(),
                answer.port,
            ),
        };
        kafka_result(code, message.as_deref())?;
        Ok(broker_at(node, &host, port))
    }
}

/// Why a call got no answer, naming the address (a bootstrap broker has no id of its own).
fn network_reason(e: &CallError) -> String {
    match e {
        CallError::Connect { addr, source, .. } => format!("cannot connect to {addr}: {source}"),
        CallError::TimedOut { addr, waited_ms, .. } => format!("{addr}: no answer within {waited_ms} ms"),
        CallError::Io { addr, op, source, .. } => format!("{addr}: {op}: {source}"),
        other => other.to_string(),
    }
}

/// `Ok` for code 0, else the Kafka error with the broker's message.
pub fn kafka_result(code: i16, message: Option<&str>) -> Result<(), CliError> {
    match code {
        0 => Ok(()),
        code => Err(CliError::Kafka {
            code,
            message: message.unwrap_or_default().to_string(),
        }),
    }
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub fn str_bytes(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn api_name(key: i16) -> String {
    match kafka_protocol::messages::ApiKey::try_from(key) {
        Ok(k) => format!("{k:?}"),
        Err(()) => format!("API {key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_as_java_reads_them() {
        let props = parse_properties(
            "# comment\n! other\nsecurity.protocol = SASL_PLAINTEXT\nsasl.mechanism:PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n  \
             username=\"alice\" password=\"a=b\";\n",
        );
        assert_eq!(props["security.protocol"], "SASL_PLAINTEXT");
        assert_eq!(props["sasl.mechanism"], "PLAIN");
        let login = sasl_login(&props).unwrap();
        assert_eq!((login.username.as_str(), login.password.as_str()), ("alice", "a=b"));
    }

    #[test]
    fn plain_username_keys_and_unknown_protocols() {
        let props = parse_properties(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=u\nsasl.password=p\n",
        );
        let login = sasl_login(&props).unwrap();
        assert_eq!(login.mechanism.name(), "SCRAM-SHA-512");
        assert!(dial_security(&parse_properties("security.protocol=KERBEROS")).is_err());
        assert!(sasl_login(&parse_properties("sasl.mechanism=PLAIN")).is_err());
    }

    #[test]
    fn addresses_split() {
        assert_eq!(split_address("127.0.0.1:9092"), Some(("127.0.0.1".into(), 9092)));
        assert_eq!(split_address("[::1]:9092"), Some(("::1".into(), 9092)));
        assert_eq!(split_address("host"), None);
        assert_eq!(split_address(":9092"), None);
    }
}
