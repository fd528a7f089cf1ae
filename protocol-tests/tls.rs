//! TLS listeners (issue 13): `listener.security.protocol.map` naming SSL, PEM keystores and
//! truststores as Kafka configures them, mutual TLS with `ssl.client.auth`, per-listener
//! `listener.name.<listener>.ssl.*` overrides, and start-up refusing bad certificates and keys
//! with a message naming the file. Certificates are made by each test (rcgen); the requests are
//! raw Kafka frames over a rustls client, so what is checked is exactly what a TLS client of
//! Kafka sends. kcat over SSL is in `clients/test_kcat.sh`.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::*;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, MetadataRequest, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sluice::config::BrokerConfig;
use sluice::{Broker, StartError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// A CA and what it signed, as PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "sluice test CA");
        let ca = params.self_signed(&ca_key).unwrap();
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca,
            ca_key,
        };
        std::fs::write(pki.path("ca.pem"), pki.ca.pem()).unwrap();
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A certificate for `names` (or subject `cn` for a client) signed by this CA: its
    /// certificate and key as PEM.
    fn issue(&self, names: &[&str], cn: &str, client: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![match client {
            true => rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            false => rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        }];
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A server keystore file (key, then certificate and CA: Kafka's PEM keystore file).
    fn server_keystore(&self, name: &str) -> PathBuf {
        let (cert, key) = self.issue(&["localhost", "127.0.0.1"], "broker", false);
        let path = self.path(name);
        std::fs::write(&path, format!("{key}{cert}{}", self.ca.pem())).unwrap();
        path
    }
}

fn client_config(ca: &Path, identity: Option<(&str, &str)>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
                .map(Result::unwrap)
                .collect();
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap())
                .unwrap()
        }
    })
}

/// Kafka frames over any stream: a request at a version, its decoded response.
struct Conn<S> {
    stream: S,
    correlation_id: i32,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Sends `request` and reads its answer; Err when the connection fails or closes.
    async fn call<R: Request + Encodable>(&mut self, version: i16, request: &R) -> Result<R::Response, String>
    where
        R::Response: Decodable + HeaderVersion,
    {
        self.correlation_id += 1;
        let key = ApiKey::try_from(R::KEY).unwrap();
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("sluice-tls-test")))
            .encode(&mut body, key.request_header_version(version))
            .unwrap();
        request.encode(&mut body, version).unwrap();
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        let exchange = async {
            self.stream.write_all(&frame).await?;
            self.stream.flush().await?;
            let mut len = [0u8; 4];
            self.stream.read_exact(&mut len).await?;
            let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
            self.stream.read_exact(&mut body).await?;
            Ok::<_, std::io::Error>(Bytes::from(body))
        };
        let mut body = tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .map_err(|_| "no answer within 10 s".to_string())?
            .map_err(|e| e.to_string())?;
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation_id);
        let response = R::Response::decode(&mut body, version).unwrap();
        assert_eq!(body.remaining(), 0);
        Ok(response)
    }
}

/// A TLS connection to `addr` verified against `ca` (as "localhost"), with a client
/// certificate when `identity` is given; Err when the handshake fails.
async fn tls_connect(
    addr: SocketAddr,
    ca: &Path,
    identity: Option<(&str, &str)>,
) -> Result<Conn<tokio_rustls::client::TlsStream<TcpStream>>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(client_config(ca, identity));
    let stream = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Conn {
        stream,
        correlation_id: 0,
    })
}

/// Whether a TLS client gets an ApiVersions answer: the handshake and a first exchange (in
/// TLS 1.3 a client learns that its certificate was refused only at its first read).
async fn answers(addr: SocketAddr, ca: &Path, identity: Option<(&str, &str)>) -> Result<(), String> {
    let mut conn = tls_connect(addr, ca, identity).await?;
    let resp = conn.call(0, &ApiVersionsRequest::default()).await?;
    assert_eq!(resp.error_code, 0);
    Ok(())
}

/// A broker with a PLAINTEXT and an SSL listener on fixed ports, and `extra` settings.
async fn start_tls_broker(keystore: &Path, extra: &[(&str, &str)]) -> (TestBroker, SocketAddr, SocketAddr) {
    let (plain, tls) = (free_port(), free_port());
    let listeners = format!("PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}");
    let location = keystore.display().to_string();
    let mut settings: Vec<(&str, &str)> = vec![
        ("listeners", &listeners),
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", &location),
    ];
    settings.extend_from_slice(extra);
    let broker = TestBroker::start(&settings).await;
    (
        broker,
        SocketAddr::from(([127, 0, 0, 1], plain)),
        SocketAddr::from(([127, 0, 0, 1], tls)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssl_listener_serves_kafka_over_tls_and_names_its_own_endpoint() {
    let pki = Pki::new();
    let keystore = pki.server_keystore("broker.pem");
    let (broker, plain, tls) = start_tls_broker(&keystore, &[]).await;
    let ca = pki.path("ca.pem");

    let mut conn = tls_connect(tls, &ca, None).await.expect("TLS handshake");
    let versions = conn.call(0, &ApiVersionsRequest::default()).await.unwrap();
    assert_eq!(versions.error_code, 0);
    // Metadata names this broker at the endpoint of the listener asked: SSL here.
    let meta = conn.call(12, &MetadataRequest::default()).await.unwrap();
    assert_eq!(meta.brokers[0].port, i32::from(tls.port()));
    let name = unique("tls");
    let created = conn
        .call(
            5,
            &CreateTopicsRequest::default().with_topics(vec![create_topic(&name)]),
        )
        .await
        .unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..3)
        .map(|i| (None, Some(Bytes::from(format!("over-tls-{i}"))), 1_000 + i))
        .collect();
    let batch = sluice::log::batch::encode_records(&records, kafka_protocol::records::Compression::None).unwrap();
    let produced = conn.call(9, &produce_request(&name, 0, batch, -1)).await.unwrap();
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    let fetched = conn.call(12, &fetch_request(&name, 0, 1 << 20, 1 << 20)).await.unwrap();
    let bytes = fetched.responses[0].partitions[0].records.clone().unwrap_or_default();
    for i in 0..3 {
        let value = format!("over-tls-{i}");
        assert!(
            bytes.windows(value.len()).any(|w| w == value.as_bytes()),
            "{value} fetched back"
        );
    }

    // A plaintext client on the TLS port is closed, and harms no one else.
    // It gets a TLS alert (content type 21), then the end of the stream: no Kafka answer.
    let mut raw = Raw::connect(tls).await;
    let frame = raw.encode(0, &ApiVersionsRequest::default());
    raw.send_bytes(&frame).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), raw.stream.read_to_end(&mut got)).await;
    assert!(matches!(read, Ok(Ok(_)) | Ok(Err(_))), "the connection was not closed");
    assert!(got.first().is_none_or(|b| *b == 21), "not a TLS alert: {got:?}");
    // A client that does not trust the broker's CA fails its handshake.
    let other = Pki::new();
    assert!(answers(tls, &other.path("ca.pem"), None).await.is_err());
    let versions = conn.call(0, &ApiVersionsRequest::default()).await.unwrap();
    assert_eq!(versions.error_code, 0, "the first TLS connection goes on");
    assert!(answers(tls, &ca, None).await.is_ok());
    // The PLAINTEXT listener names itself at its own port.
    let mut raw = Raw::connect(plain).await;
    let meta = raw.call(12, &MetadataRequest::default()).await;
    assert_eq!(meta.brokers[0].port, i32::from(plain.port()));
    broker.handle.shutdown().await;
}

fn create_topic(name: &str) -> kafka_protocol::messages::create_topics_request::CreatableTopic {
    kafka_protocol::messages::create_topics_request::CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(1)
        .with_replication_factor(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_only_clients_with_a_certificate_from_the_truststore() {
    let pki = Pki::new();
    let keystore = pki.server_keystore("broker.pem");
    let ca = pki.path("ca.pem");
    let truststore = ca.display().to_string();
    // Kafka's per-listener form: listener.name.<listener, lower case>.<key>.
    let (broker, _, tls) = start_tls_broker(
        &keystore,
        &[
            ("listener.name.ssl.ssl.client.auth", "required"),
            ("listener.name.ssl.ssl.truststore.location", &truststore),
        ],
    )
    .await;
    let (cert, key) = pki.issue(&[], "alice", true);
    assert!(answers(tls, &ca, Some((&cert, &key))).await.is_ok());
    let refused = answers(tls, &ca, None).await;
    assert!(refused.is_err(), "no client certificate: {refused:?}");
    let stranger = Pki::new();
    let (cert, key) = stranger.issue(&[], "mallory", true);
    let refused = answers(tls, &ca, Some((&cert, &key))).await;
    assert!(refused.is_err(), "a certificate of another CA: {refused:?}");
    broker.handle.shutdown().await;
}

/// Starts a broker with an SSL listener and `settings`: the start-up error's text.
async fn start_error(settings: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::default();
    config.set("log.dirs", dir.path().to_str().unwrap()).unwrap();
    config.set("listeners", "SSL://127.0.0.1:0").unwrap();
    config.set("inter.broker.listener.name", "SSL").unwrap();
    for (k, v) in settings {
        if let Err(e) = config.set(k, v) {
            return e.to_string();
        }
    }
    match Broker::start(config).await {
        Ok(handle) => {
            handle.shutdown().await;
            "started".into()
        }
        Err(e @ (StartError::Tls(_) | StartError::Config(_))) => e.to_string(),
        Err(other) => panic!("an unexpected start-up error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificates_and_keys_stop_start_up_naming_the_key_and_file() {
    let pki = Pki::new();
    let good = pki.server_keystore("good.pem");
    let good = good.display().to_string();
    assert_eq!(start_error(&[("ssl.keystore.location", &good)]).await, "started");

    let missing = pki.path("missing.pem").display().to_string();
    let said = start_error(&[("ssl.keystore.location", &missing)]).await;
    assert!(
        said.contains("ssl.keystore.location") && said.contains("missing.pem"),
        "{said}"
    );

    // A certificate with another certificate's key.
    let (cert, _) = pki.issue(&["localhost"], "broker", false);
    let (_, other_key) = pki.issue(&["localhost"], "broker", false);
    let mismatched = pki.path("mismatched.pem");
    std::fs::write(&mismatched, format!("{other_key}{cert}")).unwrap();
    let mismatched = mismatched.display().to_string();
    let said = start_error(&[("ssl.keystore.location", &mismatched)]).await;
    assert!(
        said.contains("mismatched.pem") && said.contains("do not go together"),
        "{said}"
    );

    // No key at all, and no certificate at all.
    let no_key = pki.path("no-key.pem");
    std::fs::write(&no_key, &cert).unwrap();
    let said = start_error(&[("ssl.keystore.location", no_key.to_str().unwrap())]).await;
    assert!(said.contains("no-key.pem") && said.contains("private key"), "{said}");
    let garbage = pki.path("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let said = start_error(&[("ssl.keystore.location", garbage.to_str().unwrap())]).await;
    assert!(
        said.contains("garbage.pem") && said.contains("no certificate"),
        "{said}"
    );

    // An expired certificate.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let expired = params.signed_by(&key, &pki.ca, &pki.ca_key).unwrap();
    let expired_path = pki.path("expired.pem");
    std::fs::write(&expired_path, format!("{}{}", key.serialize_pem(), expired.pem())).unwrap();
    let said = start_error(&[("ssl.keystore.location", expired_path.to_str().unwrap())]).await;
    assert!(said.contains("expired.pem") && said.contains("expired"), "{said}");

    // The inline form, and what is not served: no keystore, passwords, other store types,
    // SASL listeners, client authentication without a truststore.
    let (cert, key) = pki.issue(&["localhost"], "broker", false);
    assert_eq!(
        start_error(&[("ssl.keystore.certificate.chain", &cert), ("ssl.keystore.key", &key)]).await,
        "started"
    );
    let said = start_error(&[]).await;
    assert!(said.contains("ssl.keystore.location"), "{said}");
    let said = start_error(&[("ssl.key.password", "secret")]).await;
    assert!(said.contains("ssl.key.password"), "{said}");
    let said = start_error(&[("ssl.keystore.type", "JKS")]).await;
    assert!(said.contains("only PEM"), "{said}");
    let said = start_error(&[("ssl.keystore.location", &good), ("ssl.client.auth", "required")]).await;
    assert!(said.contains("ssl.truststore.location"), "{said}");
    // SASL_SSL needs the keystore too (its SASL side is in sasl.rs).
    let said = start_error(&[
        ("listeners", "SASL_SSL://127.0.0.1:0"),
        ("inter.broker.listener.name", "SASL_SSL"),
    ])
    .await;
    assert!(
        said.contains("listener SASL_SSL is SASL_SSL: set ssl.keystore.location"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_principals_through_the_mapping_rules() {
    // Kafka's DefaultKafkaPrincipalBuilder: User:<subject, RFC 2253>, mapped by
    // ssl.principal.mapping.rules; a subject no rule applies to fails the connection. The
    // principals then meet the ACLs (super user admin; alice may describe one topic).
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::{CreateAclsRequest, MetadataRequest};
    let pki = Pki::new();
    let keystore = pki.server_keystore("broker.pem");
    let ca = pki.path("ca.pem");
    let truststore = ca.display().to_string();
    let (broker, _, tls) = start_tls_broker(
        &keystore,
        &[
            ("ssl.client.auth", "required"),
            ("ssl.truststore.location", &truststore),
            (
                "ssl.principal.mapping.rules",
                "RULE:^CN=(alice|admin)$/$1/,RULE:^CN=(carol)$/$1/U",
            ),
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ),
            ("super.users", "User:admin"),
        ],
    )
    .await;
    let identity = |cn: &str| pki.issue(&[], cn, true);
    let (cert, key) = identity("admin");
    let mut admin = tls_connect(tls, &ca, Some((&cert, &key))).await.unwrap();
    let created = admin
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_topics(vec![create_topic("visible"), create_topic("hidden")])
                .with_timeout_ms(10_000),
        )
        .await
        .unwrap();
    assert!(
        created.topics.iter().all(|t| t.error_code == 0),
        "the super user creates: {created:?}"
    );
    let allow = |principal: &str| {
        AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("visible"))
            .with_resource_pattern_type(3)
            .with_principal(StrBytes::from_string(principal.to_string()))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(8)
            .with_permission_type(3)
    };
    let acls = admin
        .call(
            3,
            &CreateAclsRequest::default().with_creations(vec![allow("User:alice"), allow("User:CAROL")]),
        )
        .await
        .unwrap();
    assert!(acls.results.iter().all(|r| r.error_code == 0), "{acls:?}");
    let names = |resp: &kafka_protocol::messages::MetadataResponse| -> Vec<String> {
        resp.topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect()
    };
    for cn in ["alice", "carol"] {
        let (cert, key) = identity(cn);
        let mut conn = tls_connect(tls, &ca, Some((&cert, &key))).await.unwrap();
        let resp = conn
            .call(12, &MetadataRequest::default().with_topics(None))
            .await
            .unwrap();
        assert_eq!(
            names(&resp),
            ["visible"],
            "{cn} is named by the rules and sees what its ACL allows"
        );
    }
    // No rule applies to CN=mallory: the connection fails at its first request.
    let (cert, key) = identity("mallory");
    let refused = match tls_connect(tls, &ca, Some((&cert, &key))).await {
        Err(e) => Err(e),
        Ok(mut conn) => conn
            .call(12, &MetadataRequest::default().with_topics(None))
            .await
            .map(|_| ()),
    };
    assert!(refused.is_err(), "no rule applies: {refused:?}");
    broker.handle.shutdown().await;
}
