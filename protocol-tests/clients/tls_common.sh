# Shared by the scripts that run a broker of their own with TLS (test_ssl.sh, test_sasl.sh):
# sourced after `set -euo pipefail` with NAME set. Gives TMP (the working directory, removed
# at exit with the broker in PID), PY (absolute), fail, ok, port, and in $TMP a CA (ca.pem)
# and the broker's PEM keystore for localhost and 127.0.0.1 (broker-keystore.pem).
BIN=${SLUICE_BIN:?run.sh sets SLUICE_BIN}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
PY=${SLUICE_PYTHON:-python3}
# The script works in its own directory: a relative path would no longer name the same file.
[[ $PY == */* ]] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
TMP=$(mktemp -d "/tmp/sluice-$NAME.XXXXXX")
PID=
cleanup() {
    [[ -n $PID ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "  FAILED: $*"
    [[ -f $TMP/broker.log ]] && tail -n 15 "$TMP/broker.log" | sed 's/^/    broker: /'
    exit 1
}
ok() { echo "  ok: $*"; }
port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

cd "$TMP"
ossl() { openssl "$@" 2>>"$TMP/openssl.log"; }
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice test CA" -keyout ca.key -out ca.pem
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
ossl req -newkey rsa:2048 -nodes -subj "/CN=broker" -keyout broker.key -out broker.csr
ossl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out broker.crt
cat broker.key broker.crt ca.pem >broker-keystore.pem # Kafka's PEM keystore: key, then chain
