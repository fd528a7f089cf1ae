# Shared by the scripts that run a broker of their own (test_ssl.sh, test_sasl.sh through
# tls_common.sh, test_acl.sh): sourced after `set -euo pipefail` with NAME set. Gives BIN and
# PY (absolute), TMP (the working directory, removed at exit with the broker in PID), fail, ok
# and port, and leaves the script in $TMP.
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
