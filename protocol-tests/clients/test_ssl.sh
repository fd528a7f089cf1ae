#!/usr/bin/env bash
# TLS listeners through real clients: Debian's kcat (librdkafka 2.0.2 with OpenSSL) and
# confluent-kafka (its bundled librdkafka), against a broker of its own with two listeners
# mapped to SSL, configured as Kafka is (PEM keystore and truststore files):
#   SSL   server authentication only;
#   MTLS  ssl.client.auth=required (listener.name.mtls.ssl.*): clients need a certificate
#         from the truststore's CA.
# Certificates are made here with openssl. Checks: produce and consume over each listener
# (kcat, confluent-kafka, and aiokafka with Python's ssl module),
# a client without a certificate refused by MTLS, a client that does not trust the broker's
# CA refused, and the broker unharmed by all of it.
#
#   protocol-tests/clients/test_ssl.sh          (SLUICE_BIN, SLUICE_PYTHON from run.sh)
set -euo pipefail

NAME=ssl
source "$(dirname "${BASH_SOURCE[0]}")/tls_common.sh"
# --- certificates: besides tls_common's CA and broker keystore, a client's and a stranger CA ---
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=stranger CA" -keyout other-ca.key -out other-ca.pem
make_client_cert "$TMP" alice "$TMP/openssl.log"
ok "certificates made with $(openssl version | cut -d' ' -f1-2)"

# --- the broker -------------------------------------------------------------------------
PLAIN=$(port) SSLP=$(port) MTLS=$(port)
"$BIN" serve --data-dir "$TMP/data" \
    --set "listeners=PLAINTEXT://127.0.0.1:$PLAIN,SSL://127.0.0.1:$SSLP,MTLS://127.0.0.1:$MTLS" \
    --set listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL \
    --set ssl.keystore.type=PEM --set "ssl.keystore.location=$TMP/broker-keystore.pem" \
    --set listener.name.mtls.ssl.client.auth=required \
    --set "listener.name.mtls.ssl.truststore.location=$TMP/ca.pem" \
    --set num.partitions=1 >"$TMP/broker.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PLAIN") 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || fail "the broker did not start"
    sleep 0.1
done
ok "broker with PLAINTEXT :$PLAIN, SSL :$SSLP, MTLS (client auth required) :$MTLS"

# --- kcat ---------------------------------------------------------------------------------
SSL_OPTS=(-X security.protocol=ssl -X "ssl.ca.location=$TMP/ca.pem")
MTLS_OPTS=("${SSL_OPTS[@]}" -X "ssl.certificate.location=$TMP/client.crt" -X "ssl.key.location=$TMP/client.key")
kc() { timeout 30 kcat "$@" 2>>"$TMP/kcat.err"; }

kc -b "127.0.0.1:$SSLP" "${SSL_OPTS[@]}" -L >"$TMP/list" || fail "kcat -L over SSL: $(tail -n 3 "$TMP/kcat.err")"
grep -Eq "broker [0-9]+ at [^ ]+:$SSLP" "$TMP/list" || fail "kcat -L over SSL does not name the SSL endpoint: $(cat "$TMP/list")"
ok "kcat -L over SSL names the broker at the SSL listener's port"

T=ssl-$$-$RANDOM
seq 1 100 | sed 's/^/ssl-/' | kc -b "127.0.0.1:$SSLP" "${SSL_OPTS[@]}" -P -t "$T" -X acks=all ||
    fail "kcat -P over SSL: $(tail -n 3 "$TMP/kcat.err")"
kc -b "127.0.0.1:$SSLP" "${SSL_OPTS[@]}" -C -t "$T" -o beginning -e -q >"$TMP/read" ||
    fail "kcat -C over SSL: $(tail -n 3 "$TMP/kcat.err")"
[[ $(wc -l <"$TMP/read") == 100 ]] || fail "kcat -C over SSL read $(wc -l <"$TMP/read") of 100"
ok "100 records produced and consumed over SSL"

kc -b "127.0.0.1:$MTLS" "${MTLS_OPTS[@]}" -C -t "$T" -o beginning -e -q >"$TMP/read" ||
    fail "kcat -C over mutual TLS: $(tail -n 3 "$TMP/kcat.err")"
[[ $(wc -l <"$TMP/read") == 100 ]] || fail "kcat -C over mutual TLS read $(wc -l <"$TMP/read") of 100"
ok "the same 100 read over mutual TLS with the client's certificate"

# Enough records that each fetch carries more than 16 KiB of them: what a plaintext connection
# sends from the log file (sendfile) is read and encrypted here.
TB=ssl-big-$$-$RANDOM
N=20000
seq 1 $N | sed 's/^/ssl-big-/' >"$TMP/sent"
kc -b "127.0.0.1:$SSLP" "${SSL_OPTS[@]}" -P -t "$TB" -X acks=all <"$TMP/sent" ||
    fail "kcat -P of $N over SSL: $(tail -n 3 "$TMP/kcat.err")"
for port in "$SSLP" "$MTLS"; do
    opts=("${SSL_OPTS[@]}")
    [[ $port == "$MTLS" ]] && opts=("${MTLS_OPTS[@]}")
    kc -b "127.0.0.1:$port" "${opts[@]}" -C -t "$TB" -o beginning -e -q >"$TMP/read" ||
        fail "kcat -C of $N over TLS: $(tail -n 3 "$TMP/kcat.err")"
    [[ $(sort "$TMP/read" | sha1sum) == $(sort "$TMP/sent" | sha1sum) ]] ||
        fail "kcat -C over TLS (port $port) read $(wc -l <"$TMP/read") records, not the $N sent"
done
ok "$N records (fetches of more than 16 KiB) read back exactly over SSL and mutual TLS"

if timeout 15 kcat -b "127.0.0.1:$MTLS" "${SSL_OPTS[@]}" -m 5 -L >/dev/null 2>&1; then
    fail "kcat without a client certificate was let in on the MTLS listener"
fi
ok "kcat without a client certificate is refused by the MTLS listener"
if timeout 15 kcat -b "127.0.0.1:$SSLP" -X security.protocol=ssl -X "ssl.ca.location=$TMP/other-ca.pem" -m 5 -L >/dev/null 2>&1; then
    fail "kcat trusting another CA accepted the broker's certificate"
fi
ok "kcat that does not trust the broker's CA fails its handshake"

# --- confluent-kafka over mutual TLS --------------------------------------------------------
"$PY" - "$MTLS" "$TMP" "$T" <<'EOF' || fail "confluent-kafka over mutual TLS"
import sys
from confluent_kafka import Consumer, Producer
port, tmp, topic = sys.argv[1], sys.argv[2], sys.argv[3]
tls = {
    "bootstrap.servers": f"127.0.0.1:{port}",
    "security.protocol": "SSL",
    "ssl.ca.location": f"{tmp}/ca.pem",
    "ssl.certificate.location": f"{tmp}/client.crt",
    "ssl.key.location": f"{tmp}/client.key",
}
p = Producer({**tls, "enable.idempotence": True})
errors = []
for i in range(50):
    p.produce(topic, value=f"mtls-{i}".encode(), on_delivery=lambda e, m: e and errors.append(e))
left = p.flush(30)
assert left == 0 and not errors, (left, errors)
c = Consumer({**tls, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
c.subscribe([topic])
seen = []
for _ in range(300):
    m = c.poll(0.2)
    if m is not None and m.error() is None:
        seen.append(m.value().decode())
    if len(seen) >= 150:
        break
c.close()
assert len(seen) == 150 and sum(v.startswith("mtls-") for v in seen) == 50, seen[-5:]
print("  ok: confluent-kafka (idempotent producer, group consumer) over mutual TLS: 50 produced, 150 read")
EOF

# --- aiokafka (Python's own ssl module, not OpenSSL through librdkafka) --------------------
"$PY" - "$SSLP" "$MTLS" "$TMP" <<'EOF' || fail "aiokafka over SSL and mutual TLS"
import asyncio, sys, uuid
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
ssl_port, mtls_port, tmp = sys.argv[1], sys.argv[2], sys.argv[3]

async def roundtrip(port, context, label):
    topic = f"aio-{label}-{uuid.uuid4().hex[:8]}"
    common = dict(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL",
                  ssl_context=context, request_timeout_ms=15000)
    producer = AIOKafkaProducer(acks="all", **common)
    try:
        await producer.start()
        for i in range(20):
            await producer.send_and_wait(topic, f"{label}-{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", group_id="g-" + topic, **common)
    await consumer.start()
    try:
        seen = []
        while len(seen) < 20:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
            seen += [m.value.decode() for msgs in batch.values() for m in msgs]
        assert seen == [f"{label}-{i}" for i in range(20)], seen
    finally:
        await consumer.stop()

async def main():
    await asyncio.wait_for(roundtrip(ssl_port, create_ssl_context(cafile=f"{tmp}/ca.pem"), "ssl"), 60)
    mtls = create_ssl_context(cafile=f"{tmp}/ca.pem", certfile=f"{tmp}/client.crt", keyfile=f"{tmp}/client.key")
    await asyncio.wait_for(roundtrip(mtls_port, mtls, "mtls"), 60)
    # Without a client certificate the MTLS listener refuses the handshake.
    try:
        await asyncio.wait_for(roundtrip(mtls_port, create_ssl_context(cafile=f"{tmp}/ca.pem"), "anon"), 20)
    except Exception:
        pass
    else:
        raise AssertionError("MTLS accepted aiokafka without a client certificate")

asyncio.run(main())
print("  ok: aiokafka over SSL and mutual TLS: 20 produced and consumed on each; no certificate refused")
EOF

kill -0 "$PID" 2>/dev/null || fail "the broker died"
if grep -qiE 'panick' "$TMP/broker.log"; then fail "the broker logged a panic"; fi
ok "the broker is still up, no panic"
