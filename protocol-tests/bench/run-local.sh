#!/usr/bin/env bash
# Build Sluice (release), start it on loopback with a throw-away data dir, run
# bench.sh against it, stop it.
#
#   protocol-tests/bench/run-local.sh [--set key=value ...]
#
# Arguments are passed to `sluice serve` (e.g. --set log.flush... to compare
# flush policies). Everything bench.sh reads from the environment (RUNS, MSGS,
# OUT, ...) works here too; LABEL defaults to sluice-<git short hash>.
# The data dir lives under $TMPDIR (default /tmp, on this project's machines a
# real disk) and is removed at the end unless SLUICE_KEEP=1.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

cargo build --release --quiet
BIN=$ROOT/target/release/sluice

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-run.XXXXXX")
PID=
stop() {
    if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    if [[ ${SLUICE_KEEP:-0} == 1 ]]; then echo "run-local.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap stop EXIT
trap 'exit 130' INT TERM

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$PORT
# num.partitions=1 only matters if a client auto-creates a topic by mistake;
# bench.sh creates its topics explicitly with one partition.
"$BIN" serve --listen "$ADDR" --data-dir "$WORK/data" --set num.partitions=1 "$@" >"$WORK/broker.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
    kill -0 "$PID" 2>/dev/null || break
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
done
if ! (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "run-local.sh: sluice did not start on $ADDR:" >&2
    tail -n 20 "$WORK/broker.log" >&2
    exit 1
fi

rc=0
LABEL=${LABEL:-sluice-$(git rev-parse --short HEAD 2>/dev/null || echo dev)} BROKER_PID=$PID \
    "$HERE/bench.sh" "$ADDR" || rc=$?

if ! kill -0 "$PID" 2>/dev/null; then
    echo "run-local.sh: sluice exited during the benchmark; last log lines:" >&2
    tail -n 20 "$WORK/broker.log" >&2
    rc=1
fi
echo "run-local.sh: data dir size at the end: $(du -sh "$WORK/data" | cut -f1)" >&2
exit $rc
