# Shared by the scripts that run a broker of their own with TLS (test_ssl.sh, test_sasl.sh):
# sourced after `set -euo pipefail` with NAME set. broker_common.sh's BIN, PY, TMP, fail, ok,
# port, and in $TMP a CA (ca.pem, ca.key) and the broker's PEM keystore for localhost and
# 127.0.0.1 (broker-keystore.pem); `ossl` runs openssl with its messages in $TMP/openssl.log.
source "$(dirname "${BASH_SOURCE[0]}")/broker_common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/certs_common.sh"
ossl() { openssl "$@" 2>>"$TMP/openssl.log"; }
make_broker_certs "$TMP" "$TMP/openssl.log"
