# Shared by the scripts that run a broker of their own with TLS (test_ssl.sh, test_sasl.sh):
# sourced after `set -euo pipefail` with NAME set. broker_common.sh's BIN, PY, TMP, fail, ok,
# port, and in $TMP a CA (ca.pem) and the broker's PEM keystore for localhost and 127.0.0.1
# (broker-keystore.pem).
source "$(dirname "${BASH_SOURCE[0]}")/broker_common.sh"
ossl() { openssl "$@" 2>>"$TMP/openssl.log"; }
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice test CA" -keyout ca.key -out ca.pem
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
ossl req -newkey rsa:2048 -nodes -subj "/CN=broker" -keyout broker.key -out broker.csr
ossl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out broker.crt
cat broker.key broker.crt ca.pem >broker-keystore.pem # Kafka's PEM keystore: key, then chain
