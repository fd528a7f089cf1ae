//! Listeners on three processes: clients on PLAINTEXT, brokers on INTERNAL
//! (`inter.broker.listener.name`), as a docker-compose cluster or a NATed network needs it.
//! Each answer that names brokers names them at their endpoint on the listener the request came
//! in on (Kafka answers Metadata per listener), and followers and transaction markers dial the
//! INTERNAL endpoints.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, POLL_REQUEST_TIMEOUT, create, metadata_request, try_call};
use common::*;
use kafka_protocol::messages::{DescribeClusterRequest, FindCoordinatorRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset};

/// (id, host, port) of every broker a Metadata answer lists.
fn brokers(resp: &MetadataResponse) -> BTreeSet<(i32, String, i32)> {
    resp.brokers
        .iter()
        .map(|b| (b.node_id.0, b.host.to_string(), b.port))
        .collect()
}

/// Every node's (id, host, port) on one listener.
fn expected(cluster: &Cluster, listener: impl Fn(i32) -> SocketAddr) -> BTreeSet<(i32, String, i32)> {
    cluster
        .ids()
        .into_iter()
        .map(|id| {
            let addr = listener(id);
            (id, addr.ip().to_string(), i32::from(addr.port()))
        })
        .collect()
}

/// The ESTABLISHED TCP connections whose local end is `addr` (accepted by a listener there),
/// from /proc/net/tcp.
fn established_at(addr: SocketAddr) -> usize {
    let SocketAddr::V4(v4) = addr else {
        panic!("{addr} is not IPv4");
    };
    // /proc/net/tcp writes an IPv4 address as its 32-bit value in host (little-endian) order.
    let local = format!("{:08X}:{:04X}", u32::from_le_bytes(v4.ip().octets()), v4.port());
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"01")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_get_their_listener_and_brokers_replicate_on_theirs() {
    let mut cluster = Cluster::start_split(3, &[("replica.lag.time.max.ms", "3000")]).await;
    let internal = |id: i32| cluster.node(id).internal.expect("a split cluster");

    // Metadata and DescribeCluster name every broker at the listener asked.
    let on_plaintext = cluster.metadata(1, &[]).await.unwrap();
    assert_eq!(brokers(&on_plaintext), expected(&cluster, |id| cluster.addr(id)));
    let on_internal: MetadataResponse = try_call(internal(2), 12, &metadata_request(&[]), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(brokers(&on_internal), expected(&cluster, internal));
    for (addr, want) in [
        (cluster.addr(3), expected(&cluster, |id| cluster.addr(id))),
        (internal(3), expected(&cluster, internal)),
    ] {
        let resp = try_call(addr, 1, &DescribeClusterRequest::default(), POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let listed: BTreeSet<(i32, String, i32)> = resp
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.host.to_string(), b.port))
            .collect();
        assert_eq!(listed, want, "DescribeCluster via {addr}");
    }

    // A topic of three replicas, written with acks=all through PLAINTEXT.
    let name = unique("split");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "2")]).await;
    produce_acks_all(&cluster, &name, 200).await;
    let view = cluster.partition_view(1, &name, 0).await.unwrap();
    let leader = view.leader;

    // Its followers fetch from the leader's INTERNAL listener: their connections are there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while established_at(internal(leader)) < 2 {
        assert!(
            Instant::now() < deadline,
            "followers of {name} hold {} connections to leader {leader}'s INTERNAL listener {}",
            established_at(internal(leader)),
            internal(leader)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // FindCoordinator answers with the coordinator's endpoint on the listener asked.
    for (addr, listener) in [(cluster.addr(1), "PLAINTEXT"), (internal(1), "INTERNAL")] {
        let request = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_static_str("split-group"))
            .with_key_type(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        let resp = loop {
            let resp = try_call(addr, 3, &request, POLL_REQUEST_TIMEOUT).await.unwrap();
            if resp.error_code == 0 || Instant::now() > deadline {
                break resp;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(resp.error_code, 0, "{listener}: {resp:?}");
        let id = resp.node_id.0;
        let want = if listener == "PLAINTEXT" {
            cluster.addr(id)
        } else {
            internal(id)
        };
        assert_eq!(
            (resp.host.to_string(), resp.port),
            (want.ip().to_string(), i32::from(want.port())),
            "FindCoordinator via {listener}"
        );
    }

    // The leader dies: a follower that copied it over INTERNAL serves every acknowledged record.
    cluster.kill(leader);
    let consumer = consumer(&cluster.bootstrap(), &[]);
    assign(&consumer, &name, &[0], Offset::Beginning);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while seen.len() < 200 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            seen.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        }
    }
    let want: Vec<String> = (0..200).map(|i| format!("v{i}")).collect();
    assert_eq!(seen, want, "after leader {leader} died (node logs follow)");
    cluster.stop_all().await;
}

/// Writes `v0`..`v{count}` to partition 0 of `name` with acks=all, each acknowledged.
async fn produce_acks_all(cluster: &Cluster, name: &str, count: usize) {
    let producer = producer(
        &cluster.bootstrap(),
        &[("acks", "all"), ("message.timeout.ms", "30000")],
    );
    for i in 0..count {
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::<(), _>::to(name).partition(0).payload(&value),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("acks=all produce of {value} to {name}: {e}"));
    }
}

/// A CA, and one keystore file (key, certificate for 127.0.0.1 and 127.0.0.2, CA) that every
/// node uses, in `dir`; returns (keystore, truststore).
fn node_pki(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sluice cluster CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "127.0.0.2".to_string()]).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "broker");
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let (keystore, truststore) = (dir.join("node.pem"), dir.join("ca.pem"));
    std::fs::write(&keystore, format!("{}{}{}", key.serialize_pem(), cert.pem(), ca.pem())).unwrap();
    std::fs::write(&truststore, ca.pem()).unwrap();
    (keystore, truststore)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_and_controllers_authenticate_to_each_other() {
    // INTERNAL is SASL_SSL (PLAIN, the peer's certificate checked against the CA and the
    // address dialled), CONTROLLER is SASL_PLAINTEXT (PLAIN). A quorum that forms and
    // followers that keep a min.insync.replicas=3 topic writable prove both logins.
    let pki = tempfile::tempdir().unwrap();
    let (keystore, truststore) = node_pki(pki.path());
    let (keystore, truststore) = (keystore.display().to_string(), truststore.display().to_string());
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";"#;
    let settings = [
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        ),
        ("listener.name.internal.ssl.keystore.location", keystore.as_str()),
        ("listener.name.internal.ssl.truststore.location", truststore.as_str()),
        ("listener.name.internal.sasl.enabled.mechanisms", "PLAIN"),
        ("listener.name.internal.plain.sasl.jaas.config", jaas),
        ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
        ("listener.name.controller.sasl.enabled.mechanisms", "PLAIN"),
        ("listener.name.controller.plain.sasl.jaas.config", jaas),
        ("sasl.mechanism.controller.protocol", "PLAIN"),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:broker"),
        ("allow.everyone.if.no.acl.found", "true"),
    ];
    let mut cluster = Cluster::start_split(3, &settings).await;
    let name = unique("secured");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "3")]).await;
    produce_acks_all(&cluster, &name, 50).await;
    let view = cluster.partition_view(1, &name, 0).await.unwrap();
    assert_eq!(view.isr.len(), 3, "every replica in sync over SASL_SSL: {:?}", view.isr);

    // On the controller listener: a request before the login closes the connection unanswered,
    // a wrong password is refused, the right one accepted.
    let controller = SocketAddr::from(([127, 0, 0, 1], cluster.node(1).controller_port));
    let unanswered = quorum_exchange(controller, &serde_json::json!({"to": 1, "rpc": "LeaderMetrics"})).await;
    assert_eq!(unanswered, None, "a request before the login was answered");
    for (password, ok) in [("wrong", false), ("broker-secret", true)] {
        let token = format!("\0broker\0{password}").into_bytes();
        let answer = quorum_exchange(
            controller,
            &serde_json::json!({"to": 1, "rpc": {"SaslAuthenticate": {"mechanism": "PLAIN", "token": token}}}),
        )
        .await
        .expect("a login gets an answer");
        match ok {
            true => assert!(answer["Sasl"]["Ok"].is_array(), "the right password: {answer}"),
            false => assert!(answer["Sasl"]["Err"].is_string(), "a wrong password: {answer}"),
        }
    }
    cluster.stop_all().await;
}

/// Sends one frame of the quorum's protocol (`[length][JSON]`) on a new connection and reads
/// the answer, None if the connection closes first.
async fn quorum_exchange(addr: SocketAddr, frame: &serde_json::Value) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = serde_json::to_vec(frame).unwrap();
    let mut bytes = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
    bytes.extend_from_slice(&body);
    stream.write_all(&bytes).await.unwrap();
    let mut len = [0u8; 4];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut len))
        .await
        .expect("the controller answers or closes within 10 s");
    read.ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).await.ok()?;
    Some(serde_json::from_slice(&body).unwrap())
}

/// SCRAM between brokers, with the credential from `sluice format --add-scram`: INTERNAL is
/// SASL_PLAINTEXT with SCRAM-SHA-256 only, so no broker could log in to another to create it.
/// Followers keeping a min.insync.replicas=3 topic writable prove the logins; each node
/// removes its bootstrap file once the credential is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_log_in_to_each_other_with_scram_from_format() {
    let scram_jaas = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";"#;
    let settings = [
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        ),
        ("listener.name.internal.sasl.enabled.mechanisms", "SCRAM-SHA-256"),
        ("listener.name.internal.scram-sha-256.sasl.jaas.config", scram_jaas),
        ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256"),
    ];
    let mut cluster = Cluster::start_split_formatted(
        3,
        &settings,
        &[
            "--add-scram",
            "SCRAM-SHA-256=[name=broker,password=broker-secret,iterations=4096]",
        ],
    )
    .await;
    let name = unique("scram-isr");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "3")]).await;
    produce_acks_all(&cluster, &name, 50).await;
    let view = cluster.partition_view(1, &name, 0).await.unwrap();
    assert_eq!(view.isr.len(), 3, "every replica in sync over SCRAM: {:?}", view.isr);
    for id in cluster.ids() {
        let file = cluster.node(id).dir.path().join("bootstrap-scram.json");
        let mut gone = false;
        for _ in 0..100 {
            if !file.exists() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            gone,
            "node {id} still holds {} after the credential is in use",
            file.display()
        );
    }

    // A client logs in to INTERNAL with the formatted credential, and not with a wrong one.
    let internal = cluster.node(2).internal.unwrap();
    assert_eq!(scram_login(internal, "broker-secret").await, Ok(()));
    assert!(
        scram_login(internal, "wrong").await.is_err(),
        "a wrong password logged in"
    );
    cluster.stop_all().await;
}

/// SaslHandshake v1 and SaslAuthenticate v2 with SCRAM-SHA-256 as user `broker` (the server's
/// signature checked by `sluice::sasl::client`), as raw frames: the bundled librdkafka of the
/// rdkafka crate has no SCRAM.
async fn scram_login(addr: SocketAddr, password: &str) -> Result<(), String> {
    use bytes::Bytes;
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    use sluice::sasl::Mechanism;
    use sluice::sasl::client::{SaslClient, SaslLogin};
    use sluice::sasl::scram::ScramMechanism;
    let mut raw = Raw::connect(addr).await;
    let handshake = raw
        .call(
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256")),
        )
        .await;
    assert_eq!(handshake.error_code, 0, "SCRAM-SHA-256 is offered");
    let mut client = SaslClient::new(SaslLogin {
        mechanism: Mechanism::Scram(ScramMechanism::Sha256),
        username: "broker".into(),
        password: password.into(),
        token: None,
    });
    let mut message = client.start();
    loop {
        let answer = raw
            .call(
                2,
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message)),
            )
            .await;
        if answer.error_code != 0 {
            return Err(format!("error {}: {:?}", answer.error_code, answer.error_message));
        }
        match client.step(&answer.auth_bytes)? {
            Some(next) => message = next,
            None => return Ok(()),
        }
    }
}

/// Node-to-node mutual TLS with nothing else: INTERNAL is SSL with `ssl.client.auth=required`,
/// the authorizer on and the brokers' certificate subject (`User:CN=broker`, Kafka's default
/// mapping) the only super user. A follower that could not present its certificate, or whose
/// principal were not the super user, could not fetch, and the min.insync.replicas=3 topic
/// would refuse acks=all. (Clients refused without a certificate: `tls.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_fetch_from_each_other_over_mutual_tls() {
    let pki = tempfile::tempdir().unwrap();
    let (keystore, truststore) = node_pki(pki.path());
    let (keystore, truststore) = (keystore.display().to_string(), truststore.display().to_string());
    let settings = [
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:PLAINTEXT",
        ),
        ("listener.name.internal.ssl.keystore.location", keystore.as_str()),
        ("listener.name.internal.ssl.truststore.location", truststore.as_str()),
        ("listener.name.internal.ssl.client.auth", "required"),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:CN=broker"),
        ("allow.everyone.if.no.acl.found", "true"),
    ];
    let mut cluster = Cluster::start_split(3, &settings).await;
    let name = unique("mtls-isr");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "3")]).await;
    produce_acks_all(&cluster, &name, 50).await;
    let view = cluster.partition_view(1, &name, 0).await.unwrap();
    assert_eq!(
        view.isr.len(),
        3,
        "every replica in sync over mutual TLS: {:?}",
        view.isr
    );

    cluster.stop_all().await;
}

/// OAUTHBEARER between brokers and to the controllers, with Kafka's unsecured tokens (for tests
/// and development): the JAAS line gives both the login's claims and the listeners' validator,
/// which requires a scope the login's token carries. The quorum forming proves the controller
/// logins, a min.insync.replicas=3 topic kept writable the brokers'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_log_in_to_each_other_with_oauthbearer() {
    let jaas = r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker" unsecuredLoginListClaim_scope=",cluster" unsecuredValidatorRequiredScope="cluster";"#;
    let settings = [
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        ),
        ("listener.name.internal.sasl.enabled.mechanisms", "OAUTHBEARER"),
        ("listener.name.internal.oauthbearer.sasl.jaas.config", jaas),
        ("sasl.mechanism.inter.broker.protocol", "OAUTHBEARER"),
        ("listener.name.controller.sasl.enabled.mechanisms", "OAUTHBEARER"),
        ("listener.name.controller.oauthbearer.sasl.jaas.config", jaas),
        ("sasl.mechanism.controller.protocol", "OAUTHBEARER"),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:broker"),
        ("allow.everyone.if.no.acl.found", "true"),
    ];
    let mut cluster = Cluster::start_split(3, &settings).await;
    let name = unique("oauth-isr");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "3")]).await;
    produce_acks_all(&cluster, &name, 50).await;
    let view = cluster.partition_view(1, &name, 0).await.unwrap();
    assert_eq!(
        view.isr.len(),
        3,
        "every replica in sync over OAUTHBEARER: {:?}",
        view.isr
    );
    cluster.stop_all().await;
}
