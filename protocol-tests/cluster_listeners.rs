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
    let producer = producer(
        &cluster.bootstrap(),
        &[("acks", "all"), ("message.timeout.ms", "30000")],
    );
    for i in 0..200 {
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::<(), _>::to(&name).partition(0).payload(&value),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("acks=all produce of {value}: {e} (node logs follow)"));
    }
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
