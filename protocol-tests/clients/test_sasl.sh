#!/usr/bin/env bash
# SASL listeners through real clients: Debian's kcat (librdkafka 2.0.2) and confluent-kafka
# (its bundled librdkafka), against a broker of its own configured as Kafka is:
#   SASL_PLAINTEXT  PLAIN (users from the JAAS line), SCRAM-SHA-256/512, OAUTHBEARER
#   SASL_SSL        the same mechanisms over TLS (certificates made here with openssl)
# Checks: an admin (PLAIN) creates SCRAM users with AlterUserScramCredentials and reads them
# back with DescribeUserScramCredentials; kcat over SASL_SSL with SCRAM-SHA-512 and
# confluent-kafka over SASL_SSL with SCRAM-SHA-256 produce and consume; confluent-kafka with an
# unsecured OAUTHBEARER token, and with one fetched by OIDC (sasl.oauthbearer.method=oidc) from
# librdkafka/oidc_server.py, whose expired and malformed tokens the client refuses, and whose
# signed one (alg RS256) the broker's unsecured validator refuses; a wrong SCRAM password, an unknown mechanism and a client
# without SASL are refused; the broker is unharmed by all of it.
#
#   protocol-tests/clients/test_sasl.sh          (SLUICE_BIN, SLUICE_PYTHON from run.sh)
set -euo pipefail

NAME=sasl
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/tls_common.sh"

PLAIN=$(port) SASLP=$(port) SASLS=$(port)
JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
OAUTH='org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;'
"$BIN" serve --data-dir "$TMP/data" \
    --set "listeners=PLAINTEXT://127.0.0.1:$PLAIN,SASL_PLAINTEXT://127.0.0.1:$SASLP,SASL_SSL://127.0.0.1:$SASLS" \
    --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER \
    --set "listener.name.sasl_plaintext.plain.sasl.jaas.config=$JAAS" \
    --set "listener.name.sasl_ssl.plain.sasl.jaas.config=$JAAS" \
    --set "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=$OAUTH" \
    --set ssl.keystore.type=PEM --set "ssl.keystore.location=$TMP/broker-keystore.pem" \
    --set num.partitions=1 >"$TMP/broker.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$SASLS") 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || fail "the broker did not start"
    sleep 0.1
done
ok "broker with SASL_PLAINTEXT :$SASLP and SASL_SSL :$SASLS"

# --- SCRAM users, made by an admin over PLAIN ------------------------------------------------
cat >admin.py <<'PYEOF'
import sys
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
admin = AdminClient({"bootstrap.servers": sys.argv[1], "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanisms": "PLAIN", "sasl.username": "admin",
                     "sasl.password": "admin-secret"})
ups = [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret"),
       UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-secret")]
for user, f in admin.alter_user_scram_credentials(ups, request_timeout=15).items():
    f.result()
described = admin.describe_user_scram_credentials(["bob"], request_timeout=15)
desc = described["bob"].result()
got = sorted((str(i.mechanism), i.iterations) for i in desc.scram_credential_infos)
assert got == [("ScramMechanism.SCRAM_SHA_256", 4096), ("ScramMechanism.SCRAM_SHA_512", 8192)], got
print("bob:", got)
PYEOF
timeout 60 "$PY" admin.py "127.0.0.1:$SASLP" >admin.out 2>&1 || fail "SCRAM admin: $(tail -n 5 admin.out)"
ok "confluent-kafka admin (PLAIN) altered and described bob's SCRAM credentials: $(tail -n 1 admin.out)"

# --- kcat over SASL_SSL with SCRAM-SHA-512 ------------------------------------------------------
SCRAM512=(-X security.protocol=SASL_SSL -X "ssl.ca.location=$TMP/ca.pem" -X sasl.mechanisms=SCRAM-SHA-512
    -X sasl.username=bob -X sasl.password=bob-secret)
kc() { timeout 30 kcat "$@" 2>>"$TMP/kcat.err"; }
T=sasl-$$-$RANDOM
seq 1 100 | sed 's/^/scram-/' | kc -b "127.0.0.1:$SASLS" "${SCRAM512[@]}" -P -t "$T" -X acks=all ||
    fail "kcat -P over SASL_SSL/SCRAM-SHA-512: $(tail -n 3 "$TMP/kcat.err")"
kc -b "127.0.0.1:$SASLS" "${SCRAM512[@]}" -C -t "$T" -o beginning -e -q >read ||
    fail "kcat -C over SASL_SSL/SCRAM-SHA-512: $(tail -n 3 "$TMP/kcat.err")"
[[ $(wc -l <read) == 100 ]] || fail "kcat -C read $(wc -l <read) of 100"
ok "kcat: 100 records produced and consumed over SASL_SSL with SCRAM-SHA-512"

# --- confluent-kafka: SCRAM-SHA-256 over SASL_SSL, OAUTHBEARER over SASL_PLAINTEXT ------------
# The OIDC token endpoint (unsecured JWTs: valid, expired, malformed), as trivup serves 0126.
"$PY" "$HERE/../librdkafka/oidc_server.py" "$TMP/oidc.port" 2>"$TMP/oidc.log" &
OIDC_PID=$!
trap 'kill "$OIDC_PID" 2>/dev/null; cleanup' EXIT
for _ in $(seq 50); do [[ -s $TMP/oidc.port ]] && break; sleep 0.1; done
[[ -s $TMP/oidc.port ]] || fail "oidc_server.py did not start: $(tail -n 3 "$TMP/oidc.log")"
OIDC=http://127.0.0.1:$(cat "$TMP/oidc.port")
cat >clients.py <<'PYEOF'
import sys, uuid
from confluent_kafka import Consumer, Producer, KafkaException

def roundtrip(conf, topic, n):
    p = Producer(dict(conf, **{"acks": "all"}))
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0, "unflushed records"
    c = Consumer(dict(conf, **{"group.id": "g-" + uuid.uuid4().hex, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []
    for _ in range(300):
        m = c.poll(0.2)
        if m is None:
            if len(got) == n:
                break
            continue
        if m.error():
            raise KafkaException(m.error())
        got.append(m.value().decode())
    c.close()
    assert got == [f"v{i}" for i in range(n)], got[:5]

saslp, sasls, ca, oidc_url = sys.argv[1:5]
roundtrip({"bootstrap.servers": sasls, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
           "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-secret"},
          "scram256-" + uuid.uuid4().hex[:8], 50)
print("SCRAM-SHA-256 over SASL_SSL: 50 records")
roundtrip({"bootstrap.servers": saslp, "security.protocol": "SASL_PLAINTEXT",
           "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
           "sasl.oauthbearer.config": "principal=carol"},
          "oauth-" + uuid.uuid4().hex[:8], 50)
print("OAUTHBEARER (unsecured JWT) over SASL_PLAINTEXT: 50 records")
oidc = lambda path: {"bootstrap.servers": saslp, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                     "sasl.oauthbearer.client.id": "sluice-test", "sasl.oauthbearer.client.secret": "s3cret",
                     "sasl.oauthbearer.scope": "test", "sasl.oauthbearer.token.endpoint.url": oidc_url + path}
roundtrip(oidc("/valid"), "oidc-" + uuid.uuid4().hex[:8], 50)
print("OAUTHBEARER with a token fetched by OIDC: 50 records")
for path in ("/expired", "/invalid", "/signed"):
    errors = []
    c = Consumer(dict(oidc(path), **{"group.id": "g", "error_cb": lambda e: errors.append(e)}))
    try:
        c.list_topics(timeout=5)
        raise SystemExit(f"an OIDC token from {path} listed topics")
    except KafkaException:
        pass
    c.close()
    assert errors, f"no error reported for the {path} token"
    if path == "/signed":  # taken by the client, refused by the broker
        assert any("SASL authentication error" in str(e) for e in errors), errors
    print(f"OIDC token from {path} refused:", errors[0])
# A wrong SCRAM password: no metadata, an authentication error.
errors = []
c = Consumer({"bootstrap.servers": sasls, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
              "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "guess",
              "group.id": "g", "error_cb": lambda e: errors.append(e)})
try:
    c.list_topics(timeout=5)
    raise SystemExit("a wrong password listed topics")
except KafkaException:
    pass
c.close()
assert any("uthentication" in str(e) for e in errors), errors
print("wrong password refused:", errors[0])
PYEOF
timeout 120 "$PY" clients.py "127.0.0.1:$SASLP" "127.0.0.1:$SASLS" "$TMP/ca.pem" "$OIDC" >clients.out 2>clients.err ||
    fail "confluent-kafka: $(tail -n 3 clients.out) $(tail -n 5 clients.err)"
while read -r line; do ok "confluent-kafka: $line"; done <clients.out

# --- refusals seen by kcat --------------------------------------------------------------------
if timeout 20 kcat -b "127.0.0.1:$SASLS" -X security.protocol=SASL_SSL -X "ssl.ca.location=$TMP/ca.pem" \
    -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=bob -X sasl.password=guess -m 5 -L >/dev/null 2>kcat.bad; then
    fail "kcat with a wrong SCRAM password listed metadata"
fi
grep -qi "authentication" kcat.bad || fail "kcat's wrong password error does not say authentication: $(tail -n 2 kcat.bad)"
ok "kcat with a wrong SCRAM password is refused ($(grep -oi 'authentication[^(]*' kcat.bad | head -n 1))"
if timeout 20 kcat -b "127.0.0.1:$SASLP" -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-1 \
    -X sasl.username=bob -X sasl.password=x -m 5 -L >/dev/null 2>kcat.mech; then
    fail "kcat with an unknown mechanism listed metadata"
fi
ok "kcat with an unknown mechanism is refused"
if timeout 20 kcat -b "127.0.0.1:$SASLP" -m 5 -L >/dev/null 2>kcat.plain; then
    fail "kcat without SASL listed metadata on the SASL listener"
fi
ok "kcat without SASL gets nothing from the SASL listener"

kill -0 "$PID" 2>/dev/null || fail "the broker died"
kc -b "127.0.0.1:$SASLS" "${SCRAM512[@]}" -L >list || fail "kcat -L after the refusals: $(tail -n 3 "$TMP/kcat.err")"
grep -Eq "broker [0-9]+ at [^ ]+:$SASLS" list || fail "kcat -L does not name the SASL_SSL endpoint: $(cat list)"
ok "the broker still serves, naming itself at the SASL_SSL listener's port"
