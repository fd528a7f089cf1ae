# Shared by the bench scripts that start a broker of their own for each run (consume.sh,
# idempotence.sh): sourced after `set -uo pipefail` (or -euo), BENCH_NAME naming it. Gives WORK (a
# working directory, removed at exit with the broker in PID), port, and start_broker /
# stop_broker, each run on an empty data directory.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-${BENCH_NAME:-bench}.XXXXXX")
PID=
cleanup() {
    [[ -n $PID ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_broker BIN [serve args...]: a broker on a free loopback port with an empty
# $WORK/data, its log in $WORK/broker.log; sets ADDR and PID once it accepts connections
# (or after 10 s).
start_broker() {
    local bin=$1
    shift
    ADDR=127.0.0.1:$(port)
    rm -rf "$WORK/data"
    "$bin" serve --listen "$ADDR" --data-dir "$WORK/data" "$@" >"$WORK/broker.log" 2>&1 &
    PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/${ADDR%:*}/${ADDR##*:}") 2>/dev/null && break
        sleep 0.1
    done
}

stop_broker() {
    kill "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null || true
    PID=
}
