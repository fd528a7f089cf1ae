#!/usr/bin/env bash
# Cluster figures (issue 11), on loopback with a release build:
#   1. metadata operations: COUNT topics of 10 partitions created one CreateTopics at a time,
#      through the active controller's node and through another node (forwarded);
#   2. failover: kill -9 of the active controller, then the time until a CreateTopics through
#      a surviving node commits (RUNS times, the killed node restarted between runs);
#   3. produce throughput, 1 KiB acks=all, rdkafka_performance: a 6-partition topic spread over
#      3 nodes against the same topic on one single-node broker, alternating, RUNS pairs.
#
#   protocol-tests/bench/cluster.sh            (COUNT=1000 RUNS=3 MSGS=300000)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
COUNT=${COUNT:-1000}
RUNS=${RUNS:-3}
MSGS=${MSGS:-300000}
TOOLS=${TOOLS:-/tmp/sluice-bench-tools}
[[ -x $TOOLS/bin/rdkafka_performance ]] || "$HERE/build.sh"
cargo build --release --quiet
BIN=$ROOT/target/release/sluice
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cluster-bench.XXXXXX")
declare -A PID
voters="1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093"
start_node() {
    local n=$1
    RUST_LOG=warn "$BIN" serve --node-id "$n" --data-dir "$WORK/d$n" --set process.roles=broker,controller \
        --set "listeners=PLAINTEXT://127.0.0.1:${n}9092,CONTROLLER://127.0.0.1:${n}9093" \
        --set "advertised.listeners=PLAINTEXT://127.0.0.1:${n}9092" --set controller.listener.names=CONTROLLER \
        --set "controller.quorum.voters=$voters" --set auto.create.topics.enable=false \
        >>"$WORK/log$n" 2>&1 &
    PID[$n]=$!
}
stop() {
    for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [[ ${SLUICE_KEEP:-0} == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap stop EXIT
wait_port() { for _ in $(seq 1 300); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
controller() { kcat -b 127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:39092 -L 2>/dev/null | sed -n 's/.*broker \([0-9]\) at.*(controller).*/\1/p' | head -1; }

for n in 1 2 3; do start_node "$n"; done
for n in 1 2 3; do wait_port "${n}9092"; done
sleep 1
c=$(controller)
other=$(( c % 3 + 1 ))
echo "== metadata: $COUNT topics x 10 partitions, one CreateTopics each (count, s, topics/s, p50 ms, p99 ms)"
echo -n "through the controller (node $c):  "; python3 "$HERE/cluster_admin.py" create "127.0.0.1:${c}9092" "$COUNT" 10 direct
echo -n "through node $other (forwarded):     "; python3 "$HERE/cluster_admin.py" create "127.0.0.1:${other}9092" "$COUNT" 10 forwarded

echo "== failover: kill -9 of the active controller -> next committed CreateTopics (s)"
for r in $(seq 1 "$RUNS"); do
    c=$(controller)
    survivor=$(( c % 3 + 1 ))
    kill -9 "${PID[$c]}"; wait "${PID[$c]}" 2>/dev/null || true
    echo -n "run $r (killed node $c): "
    python3 "$HERE/cluster_admin.py" until-created "127.0.0.1:${survivor}9092" "failover-$r" 30
    start_node "$c"; wait_port "${c}9092"; sleep 2
done

echo "== produce 1 KiB acks=all, $MSGS messages, 6 partitions: 3 nodes vs 1 (MB/s)"
python3 "$HERE/cluster_admin.py" create 127.0.0.1:19092 1 6 spread >/dev/null
mkdir -p "$WORK/single"
"$BIN" serve --node-id 1 --data-dir "$WORK/single" --listen 127.0.0.1:49092 --set auto.create.topics.enable=false >"$WORK/single.log" 2>&1 &
PID[single]=$!
wait_port 49092
python3 "$HERE/cluster_admin.py" create 127.0.0.1:49092 1 6 spread >/dev/null
perf() { # prints MB/s (payload) from rdkafka_performance's final line
    local line n ms
    line=$("$TOOLS/bin/rdkafka_performance" -P -t spread-0 -s 1024 -c "$MSGS" -b "$1" -a -1 -X linger.ms=5 -i 1000 2>&1 |
        grep ' messages produced ' | tail -n 1)
    n=$(sed -n 's/.*, \([0-9]*\) delivered .*/\1/p' <<<"$line")
    ms=$(sed -n 's/.* in \([0-9]*\)ms:.*/\1/p' <<<"$line")
    awk -v n="${n:-0}" -v ms="${ms:-0}" 'BEGIN { printf "%.1f", (ms > 0 ? n * 1024 / ms / 1000 : 0) }'
}
for r in $(seq 1 "$RUNS"); do
    three=$(perf 127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:39092)
    one=$(perf 127.0.0.1:49092)
    echo "pair $r: 3 nodes $three MB/s, 1 node $one MB/s, ratio $(python3 -c "print(round($three/$one, 2))")"
done
