//! SASL listeners (issue 13): SASL_PLAINTEXT with PLAIN users from the JAAS line, SCRAM-SHA-256
//! and SCRAM-SHA-512 credentials managed by AlterUserScramCredentials and kept in the metadata
//! log, OAUTHBEARER with unsecured JWTs, re-authentication (KIP-368), and what Kafka answers to
//! misuse: a wrong password, an unknown mechanism, a request before authentication, SASL on a
//! listener without it. PLAIN goes through librdkafka (the rdkafka crate); the rest as raw
//! frames, so each step is checked. kcat and confluent-kafka over SASL_SSL with SCRAM and
//! OAUTHBEARER are in `clients/test_sasl.sh`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::Message;
use rdkafka::consumer::Consumer;
use rdkafka::producer::FutureRecord;
use sluice::config::BrokerConfig;
use sluice::sasl::oauthbearer::unsecured_token;
use sluice::sasl::scram::{self, ScramMechanism};
use tokio::io::AsyncReadExt;

const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;

/// A broker with PLAINTEXT (the first listener) and SASL_PLAINTEXT, PLAIN, both SCRAMs and
/// OAUTHBEARER enabled; `extra` settings after.
async fn start_sasl_broker(extra: &[(&str, &str)]) -> (TestBroker, SocketAddr) {
    let sasl = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl}");
    let mut settings = sasl_settings(&listeners);
    settings.extend_from_slice(extra);
    let broker = TestBroker::start(&settings).await;
    (broker, SocketAddr::from(([127, 0, 0, 1], sasl)))
}

fn sasl_settings(listeners: &str) -> Vec<(&str, &str)> {
    vec![
        ("listeners", listeners),
        (
            "sasl.enabled.mechanisms",
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        ),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
        ("connection.failed.authentication.delay.ms", "300"),
    ]
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

async fn handshake(raw: &mut Raw, mechanism: &str) -> SaslHandshakeResponse {
    raw.call(1, &SaslHandshakeRequest::default().with_mechanism(s(mechanism)))
        .await
}

async fn authenticate(raw: &mut Raw, version: i16, bytes: &[u8]) -> SaslAuthenticateResponse {
    raw.call(
        version,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(bytes)),
    )
    .await
}

/// A connection authenticated with PLAIN as `user`.
async fn plain_login(addr: SocketAddr, user: &str, password: &str) -> (Raw, SaslAuthenticateResponse) {
    let mut raw = Raw::connect(addr).await;
    assert_eq!(handshake(&mut raw, "PLAIN").await.error_code, 0);
    let resp = authenticate(&mut raw, 2, format!("\0{user}\0{password}").as_bytes()).await;
    (raw, resp)
}

/// A full SCRAM exchange as `user`: the last SaslAuthenticate response.
async fn scram_login(raw: &mut Raw, mechanism: ScramMechanism, user: &str, password: &str) -> SaslAuthenticateResponse {
    assert_eq!(handshake(raw, mechanism.name()).await.error_code, 0);
    let first = scram::client::first(user, "fyko+d2lbbFgONRv9qkxdawL");
    let resp = authenticate(raw, 2, first.as_bytes()).await;
    if resp.error_code != 0 {
        return resp;
    }
    let server_first = String::from_utf8(resp.auth_bytes.to_vec()).unwrap();
    let last = scram::client::last(mechanism, password, &first, &server_first);
    authenticate(raw, 2, last.as_bytes()).await
}

async fn metadata_answers(raw: &mut Raw) -> bool {
    let frame = raw.encode(12, &MetadataRequest::default().with_topics(Some(vec![])));
    raw.send_bytes(&frame).await;
    raw.read_frame().await.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_produces_and_consumes_as_a_plain_user_and_a_wrong_password_is_refused() {
    let (broker, sasl) = start_sasl_broker(&[]).await;
    let bootstrap = sasl.to_string();
    let auth = |password: &'static str| {
        vec![
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", "alice"),
            ("sasl.password", password),
        ]
    };
    let producer = producer(&bootstrap, &auth("alice-secret"));
    let topic = unique("sasl-plain");
    for i in 0..10 {
        producer
            .send(
                FutureRecord::to(&topic).key("k").payload(&format!("v{i}")),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce over SASL/PLAIN: {e}"));
    }
    let consumer = consumer(&bootstrap, &auth("alice-secret"));
    assign(&consumer, &topic, &[0], rdkafka::Offset::Beginning);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 10 && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("consume over SASL/PLAIN");
            got.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(got, (0..10).map(|i| format!("v{i}")).collect::<Vec<_>>());

    let wrong = self::consumer(&bootstrap, &auth("not-her-password"));
    let refused = wrong.fetch_metadata(None, Duration::from_secs(5));
    assert!(
        refused.is_err(),
        "a wrong password gets no metadata: {:?}",
        refused.map(|m| m.topics().len())
    );
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_gets_kafkas_answers_and_the_connection_closes() {
    let (broker, sasl) = start_sasl_broker(&[]).await;

    // ApiVersions before authentication is answered, and lists the SASL APIs.
    let mut raw = Raw::connect(sasl).await;
    let versions = raw.call(2, &ApiVersionsRequest::default()).await;
    assert!(
        versions
            .api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::SaslAuthenticate as i16 && k.max_version == 2)
    );
    // Any other request before authentication closes the connection, answered with nothing.
    assert!(
        !metadata_answers(&mut raw).await,
        "Metadata before authentication is not answered"
    );
    assert!(raw.is_closed().await);

    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the close.
    let mut raw = Raw::connect(sasl).await;
    let resp = handshake(&mut raw, "GSSAPI").await;
    assert_eq!(resp.error_code, 33, "UNSUPPORTED_SASL_MECHANISM");
    let offered: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(offered, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]);
    assert!(raw.is_closed().await);

    // SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE.
    let mut raw = Raw::connect(sasl).await;
    assert_eq!(authenticate(&mut raw, 1, b"\0alice\0alice-secret").await.error_code, 34);
    assert!(raw.is_closed().await);

    // A wrong password: SASL_AUTHENTICATION_FAILED after the failure delay (300 ms here),
    // with Kafka's message, then the close. An unknown user gets the same answer.
    for (user, password) in [("alice", "guess"), ("mallory", "alice-secret")] {
        let start = Instant::now();
        let (mut raw, resp) = plain_login(sasl, user, password).await;
        assert_eq!(resp.error_code, 58, "SASL_AUTHENTICATION_FAILED");
        assert_eq!(
            resp.error_message.as_deref(),
            Some("Authentication failed: Invalid username or password")
        );
        assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
        assert!(raw.is_closed().await);
    }

    // The right password: then requests are served.
    let (mut raw, resp) = plain_login(sasl, "alice", "alice-secret").await;
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    assert_eq!(resp.session_lifetime_ms, 0, "no connections.max.reauth.ms, no lifetime");
    assert!(metadata_answers(&mut raw).await);
    // A second SaslAuthenticate after success: ILLEGAL_SASL_STATE.
    assert_eq!(authenticate(&mut raw, 2, b"\0alice\0alice-secret").await.error_code, 34);

    // On the PLAINTEXT listener SASL requests get ILLEGAL_SASL_STATE, and the connection stays.
    let mut plain = Raw::connect(broker.addr).await;
    assert_eq!(handshake(&mut plain, "PLAIN").await.error_code, 34);
    assert_eq!(
        authenticate(&mut plain, 2, b"\0alice\0alice-secret").await.error_code,
        34
    );
    assert!(metadata_answers(&mut plain).await);

    // A token over sasl.server.max.receive.size before authentication closes the connection.
    let mut raw = Raw::connect(sasl).await;
    let mut frame = BytesMut::new();
    frame.put_i32(600_000);
    raw.send_bytes(&frame).await;
    assert!(raw.is_closed().await, "a 600 kB frame before authentication closes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_v0_takes_bare_tokens() {
    let (_broker, sasl) = start_sasl_broker(&[]).await;
    let mut raw = Raw::connect(sasl).await;
    let resp = raw
        .call(0, &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")))
        .await;
    assert_eq!(resp.error_code, 0);
    let token = b"\0alice\0alice-secret";
    let mut frame = BytesMut::new();
    frame.put_i32(token.len() as i32);
    frame.extend_from_slice(token);
    raw.send_bytes(&frame).await;
    let answer = raw.read_frame().await.expect("an empty token answers PLAIN");
    assert!(answer.is_empty());
    assert!(metadata_answers(&mut raw).await);

    // A wrong password over v0: the connection closes without an answer.
    let mut raw = Raw::connect(sasl).await;
    raw.call(0, &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")))
        .await;
    let token = b"\0alice\0nope";
    let mut frame = BytesMut::new();
    frame.put_i32(token.len() as i32);
    frame.extend_from_slice(token);
    raw.send_bytes(&frame).await;
    assert!(raw.read_frame().await.is_none());
}

fn upsertion(user: &str, mechanism: ScramMechanism, password: &str, iterations: i32) -> ScramCredentialUpsertion {
    let salt = format!("salt-of-{user}").into_bytes();
    let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
    ScramCredentialUpsertion::default()
        .with_name(s(user))
        .with_mechanism(mechanism.wire())
        .with_iterations(iterations)
        .with_salt(Bytes::from(salt))
        .with_salted_password(Bytes::from(salted))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_credentials_are_managed_authenticate_and_survive_a_restart() {
    let (broker, sasl) = start_sasl_broker(&[]).await;
    let (mut admin, resp) = plain_login(sasl, "admin", "admin-secret").await;
    assert_eq!(resp.error_code, 0);

    let alter = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
        upsertion("bob", ScramMechanism::Sha256, "bob-secret", 4096),
        upsertion("bob", ScramMechanism::Sha512, "bob-secret-512", 8192),
        upsertion("carol", ScramMechanism::Sha256, "c", 100),
        upsertion("", ScramMechanism::Sha256, "c", 4096),
        upsertion("dave", ScramMechanism::Sha256, "d", 4096),
        upsertion("dave", ScramMechanism::Sha256, "d2", 4096),
    ]);
    let resp = admin.call(0, &alter).await;
    let codes: Vec<(String, i16)> = resp
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    assert_eq!(
        codes,
        [
            ("".to_string(), 93), // UNACCEPTABLE_CREDENTIAL: no name
            ("bob".to_string(), 0),
            ("carol".to_string(), 93), // too few iterations
            ("dave".to_string(), 92),  // DUPLICATE_RESOURCE
        ]
    );

    let all = admin.call(0, &DescribeUserScramCredentialsRequest::default()).await;
    assert_eq!(all.results.len(), 1, "only bob has credentials");
    let infos: Vec<(i8, i32)> = all.results[0]
        .credential_infos
        .iter()
        .map(|c| (c.mechanism, c.iterations))
        .collect();
    assert_eq!(infos, [(1, 4096), (2, 8192)]);
    let named = admin
        .call(
            0,
            &DescribeUserScramCredentialsRequest::default()
                .with_users(Some(vec![UserName::default().with_name(s("nobody"))])),
        )
        .await;
    assert_eq!(named.results[0].error_code, 91, "RESOURCE_NOT_FOUND");

    for (mechanism, password) in [
        (ScramMechanism::Sha256, "bob-secret"),
        (ScramMechanism::Sha512, "bob-secret-512"),
    ] {
        let mut raw = Raw::connect(sasl).await;
        let resp = scram_login(&mut raw, mechanism, "bob", password).await;
        assert_eq!(resp.error_code, 0, "{mechanism:?}: {:?}", resp.error_message);
        assert!(resp.auth_bytes.starts_with(b"v="), "the server proves it knows the key");
        assert!(metadata_answers(&mut raw).await);
        let mut raw = Raw::connect(sasl).await;
        let resp = scram_login(&mut raw, mechanism, "bob", "wrong").await;
        assert_eq!(resp.error_code, 58);
        assert!(raw.is_closed().await);
    }

    // The credentials are in the metadata log: they authenticate after a restart.
    let port = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}");
    let broker = broker.restart(&sasl_settings(&listeners)).await;
    let sasl = SocketAddr::from(([127, 0, 0, 1], port));
    let mut raw = Raw::connect(sasl).await;
    assert_eq!(
        scram_login(&mut raw, ScramMechanism::Sha256, "bob", "bob-secret")
            .await
            .error_code,
        0
    );

    // Deleting: once, then RESOURCE_NOT_FOUND; the user no longer authenticates.
    let delete = AlterUserScramCredentialsRequest::default().with_deletions(vec![
        ScramCredentialDeletion::default().with_name(s("bob")).with_mechanism(1),
    ]);
    assert_eq!(raw.call(0, &delete).await.results[0].error_code, 0);
    assert_eq!(raw.call(0, &delete).await.results[0].error_code, 91);
    let mut again = Raw::connect(sasl).await;
    assert_eq!(
        scram_login(&mut again, ScramMechanism::Sha256, "bob", "bob-secret")
            .await
            .error_code,
        58
    );
    let mut still = Raw::connect(sasl).await;
    assert_eq!(
        scram_login(&mut still, ScramMechanism::Sha512, "bob", "bob-secret-512")
            .await
            .error_code,
        0
    );
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_accepts_unsecured_tokens_and_refuses_expired_ones() {
    let (_broker, sasl) = start_sasl_broker(&[]).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let message = |claims: serde_json::Value| format!("n,,\x01auth=Bearer {}\x01\x01", unsecured_token(&claims));

    let mut raw = Raw::connect(sasl).await;
    assert_eq!(handshake(&mut raw, "OAUTHBEARER").await.error_code, 0);
    let good = message(serde_json::json!({"sub": "alice", "iat": now, "exp": now + 3600}));
    let resp = authenticate(&mut raw, 2, good.as_bytes()).await;
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    assert!(metadata_answers(&mut raw).await);

    // An expired token: the RFC 7628 error challenge, then (after the client's \x01) failure.
    let mut raw = Raw::connect(sasl).await;
    handshake(&mut raw, "OAUTHBEARER").await;
    let expired = message(serde_json::json!({"sub": "alice", "exp": now - 60}));
    let resp = authenticate(&mut raw, 2, expired.as_bytes()).await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(&resp.auth_bytes[..], br#"{"status":"invalid_token"}"#);
    let resp = authenticate(&mut raw, 2, b"\x01").await;
    assert_eq!(resp.error_code, 58);
    assert!(raw.is_closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire_at_connections_max_reauth_ms_unless_renewed() {
    let (_broker, sasl) = start_sasl_broker(&[("connections.max.reauth.ms", "1500")]).await;
    let (mut stale, resp) = plain_login(sasl, "alice", "alice-secret").await;
    assert_eq!(resp.session_lifetime_ms, 1500, "KIP-368: the lifetime is announced");
    let (mut renewed, _) = plain_login(sasl, "alice", "alice-secret").await;
    assert!(metadata_answers(&mut stale).await);

    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Re-authentication on the same connection, as the same user, renews the session.
    assert_eq!(handshake(&mut renewed, "PLAIN").await.error_code, 0);
    let resp = authenticate(&mut renewed, 2, b"\0alice\0alice-secret").await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.session_lifetime_ms, 1500);

    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(metadata_answers(&mut renewed).await, "the renewed session is live");
    assert!(
        !metadata_answers(&mut stale).await,
        "the expired session is closed at its next request"
    );

    // Re-authenticating as someone else fails.
    assert_eq!(handshake(&mut renewed, "PLAIN").await.error_code, 0);
    let resp = authenticate(&mut renewed, 2, b"\0admin\0admin-secret").await;
    assert_eq!(resp.error_code, 58);
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), renewed.stream.read_to_end(&mut rest)).await;
}

#[test]
fn sasl_listeners_that_cannot_work_stop_start_up_naming_the_key() {
    let check = |settings: &[(&str, &str)]| {
        let mut c = BrokerConfig::default();
        for (k, v) in settings {
            c.set(k, v)?;
        }
        c.check()
    };
    let listeners = ("listeners", "SASL_PLAINTEXT://127.0.0.1:9092");
    // Kafka's default mechanism, GSSAPI, is not served.
    let e = check(&[listeners]).unwrap_err();
    assert_eq!(e.key, "sasl.enabled.mechanisms");
    assert!(e.reason.contains("GSSAPI"), "{e}");
    // PLAIN without users.
    let e = check(&[listeners, ("sasl.enabled.mechanisms", "PLAIN")]).unwrap_err();
    assert_eq!(e.key, "listener.name.sasl_plaintext.plain.sasl.jaas.config");
    // The wrong login module, a broken line.
    for jaas in [
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required user_a="b";"#,
        r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b""#,
    ] {
        let e = check(&[
            listeners,
            ("sasl.enabled.mechanisms", "PLAIN"),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", jaas),
        ])
        .unwrap_err();
        assert_eq!(e.key, "listener.name.sasl_plaintext.plain.sasl.jaas.config", "{e}");
    }
    // The broker-wide sasl.jaas.config is not how a broker is configured.
    assert_eq!(
        check(&[("sasl.jaas.config", JAAS)]).unwrap_err().key,
        "sasl.jaas.config"
    );
    // SCRAM alone needs no JAAS line; the issue's own example configuration passes.
    check(&[listeners, ("sasl.enabled.mechanisms", "SCRAM-SHA-512")]).unwrap();
    check(&[
        listeners,
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
    ])
    .unwrap();
}

/// The four delegation-token APIs (38-41), every version, on `raw`: each answers `code`;
/// CreateDelegationToken names its owner (`owner`, else the requester) and `requester`.
async fn token_requests_answer(raw: &mut Raw, code: i16, requester: &str, owner: Option<&str>) {
    for version in 1..=3 {
        let mut req = CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1);
        if let (Some(owner), true) = (owner, version >= 3) {
            req = req
                .with_owner_principal_type(Some(s("User")))
                .with_owner_principal_name(Some(s(owner)));
        }
        let resp: CreateDelegationTokenResponse = raw.call(version, &req).await;
        let named_owner = if version >= 3 {
            owner.unwrap_or(requester)
        } else {
            requester
        };
        assert_eq!(resp.error_code, code, "CreateDelegationToken v{version}");
        assert_eq!(
            (resp.principal_type.as_str(), resp.principal_name.as_str()),
            ("User", named_owner),
            "CreateDelegationToken v{version} owner"
        );
        if version >= 3 {
            assert_eq!(resp.token_requester_principal_name.as_str(), requester);
        }
        assert_eq!((resp.issue_timestamp_ms, resp.expiry_timestamp_ms), (-1, -1));
        assert!(resp.token_id.is_empty() && resp.hmac.is_empty(), "no token is issued");
        let resp: DescribeDelegationTokenResponse = raw.call(version, &DescribeDelegationTokenRequest::default()).await;
        assert_eq!(resp.error_code, code, "DescribeDelegationToken v{version}");
        assert!(resp.tokens.is_empty());
    }
    for version in 1..=2 {
        let hmac = Bytes::from_static(b"not a token");
        let resp: RenewDelegationTokenResponse = raw
            .call(version, &RenewDelegationTokenRequest::default().with_hmac(hmac.clone()))
            .await;
        assert_eq!(
            (resp.error_code, resp.expiry_timestamp_ms),
            (code, -1),
            "RenewDelegationToken v{version}"
        );
        let resp: ExpireDelegationTokenResponse = raw
            .call(version, &ExpireDelegationTokenRequest::default().with_hmac(hmac))
            .await;
        assert_eq!(
            (resp.error_code, resp.expiry_timestamp_ms),
            (code, -1),
            "ExpireDelegationToken v{version}"
        );
    }
}

/// Sluice issues no delegation tokens, and answers the token APIs as Kafka 4.1 does with tokens
/// disabled (its default): DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (64) on a PLAINTEXT
/// connection, DELEGATION_TOKEN_AUTH_DISABLED (61) after SASL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegation_token_requests_get_kafkas_answers_with_tokens_disabled() {
    let (broker, sasl) = start_sasl_broker(&[]).await;
    let mut plaintext = Raw::connect(broker.addr).await;
    token_requests_answer(&mut plaintext, 64, "ANONYMOUS", None).await;
    let (mut alice, resp) = plain_login(sasl, "alice", "alice-secret").await;
    assert_eq!(resp.error_code, 0);
    token_requests_answer(&mut alice, 61, "alice", Some("bob")).await;
    token_requests_answer(&mut alice, 61, "alice", None).await;
}
