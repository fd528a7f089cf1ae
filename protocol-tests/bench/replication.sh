#!/usr/bin/env bash
# Replication figures (issue 12), three release nodes on loopback (each broker and controller):
#   1. produce 1 KiB acks=all, MSGS messages, rdkafka_performance: a 6-partition topic with
#      replication factor 3 against one with replication factor 1, on the same cluster,
#      alternating, RUNS pairs (ratios);
#   2. produce->ack latency at LAT_RATE msg/s, acks=all, replication factor 3 vs 1 (p50, p99),
#      by rdkafka_performance (whose -r pacing spins on a core) and by build.sh's
#      sluice_latency (paced by sleeping);
#   3. failover: kill -9 of partition 0's leader, then the time until an acks=all produce to
#      it is acknowledged by the new leader (kcat with librdkafka's retries), FAILOVERS times,
#      the killed node restarted and back in the ISR between runs.
# Durability settings are the defaults (acks=all fsynced on every in-sync replica) unless
# FLUSH_MESSAGES is set (log.flush.interval.messages, e.g. 1000 for page-cache replication).
#
#   protocol-tests/bench/replication.sh      (RUNS=3 MSGS=200000 LAT_RATE=1000 LAT_MSGS=5000 FAILOVERS=10
#                                             SLUICE_BIN=<a sluice binary>; LAT_MSGS=0 or
#                                             FAILOVERS=0 skips that part; DROP_CACHES=1
#                                             empties the page cache before each produce run,
#                                             DROP_CACHES=sync only writes it back;
#                                             PROFILE=FILE records `perf record -g` of the three
#                                             nodes during the RF 3 runs into FILE)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
RUNS=${RUNS:-3}
MSGS=${MSGS:-200000}
LAT_RATE=${LAT_RATE:-1000}
LAT_MSGS=${LAT_MSGS:-5000}
FAILOVERS=${FAILOVERS:-10}
TOOLS=${TOOLS:-/tmp/sluice-bench-tools}
[[ -x $TOOLS/bin/rdkafka_performance && -x $TOOLS/bin/sluice_latency ]] || "$HERE/build.sh"
command -v kcat >/dev/null || { echo "replication.sh reads metadata with kcat: apt-get install kcat" >&2; exit 1; }
# SLUICE_BIN: a broker binary to measure instead of this tree's release build.
if [[ -n ${SLUICE_BIN:-} ]]; then BIN=$SLUICE_BIN; else cargo build --release --quiet; BIN=$ROOT/target/release/sluice; fi
PERF=$TOOLS/bin/rdkafka_performance
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-replication-bench.XXXXXX")
ALL=127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:39092
declare -A PID
voters="1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093"
extra=()
[[ -n ${FLUSH_MESSAGES:-} ]] && extra+=(--set "log.flush.interval.messages=$FLUSH_MESSAGES")
start_node() {
    local n=$1
    RUST_LOG=warn "$BIN" serve --node-id "$n" --data-dir "$WORK/d$n" --set process.roles=broker,controller \
        --set "listeners=PLAINTEXT://127.0.0.1:${n}9092,CONTROLLER://127.0.0.1:${n}9093" \
        --set "advertised.listeners=PLAINTEXT://127.0.0.1:${n}9092" --set controller.listener.names=CONTROLLER \
        --set "controller.quorum.voters=$voters" --set auto.create.topics.enable=false \
        --set broker.session.timeout.ms=3000 --set broker.heartbeat.interval.ms=500 \
        --set replica.lag.time.max.ms=10000 --set auto.leader.rebalance.enable=false \
        "${extra[@]}" >>"$WORK/log$n" 2>&1 &
    PID[$n]=$!
}
stop() {
    for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [[ ${SLUICE_KEEP:-0} == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap stop EXIT
wait_port() { for _ in $(seq 1 300); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# "leader isr,isr,.." of partition 0 of $1, from kcat's metadata listing.
leader_of() {
    kcat -b "$ALL" -L -t "$1" 2>/dev/null |
        sed -n 's/.*partition 0, leader \(-\{0,1\}[0-9]*\), replicas: [0-9,]*, isrs: \([0-9,]*\).*/\1 \2/p' | head -1
}
create() { # name partitions replication_factor
    kcat -b "$ALL" -L >/dev/null 2>&1 || true
    python3 - "$1" "$2" "$3" <<'EOF'
import socket, struct, sys
name, parts, rf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def s(t): b = t.encode(); return struct.pack(">h", len(b)) + b
cfg = [("min.insync.replicas", "2" if rf >= 2 else "1")]
body = struct.pack(">i", 1) + s(name) + struct.pack(">ihi", parts, rf, 0) + struct.pack(">i", len(cfg))
for k, v in cfg: body += s(k) + s(v)
body += struct.pack(">i?", 10000, False)
req = struct.pack(">hhi", 19, 4, 1) + s("bench") + body
import time
for attempt in range(60):
    try:
        c = socket.create_connection(("127.0.0.1", 19092), timeout=15)
        c.sendall(struct.pack(">i", len(req)) + req)
        head = b""
        while len(head) < 4: head += c.recv(4 - len(head))
        n = struct.unpack(">i", head)[0]
        data = b""
        while len(data) < n: data += c.recv(n - len(data))
        # correlation id, throttle, topic count, name, then the topic's error code
        off = 4 + 4 + 4
        off += 2 + struct.unpack(">h", data[off:off + 2])[0]
        code = struct.unpack(">h", data[off:off + 2])[0]
        if code in (0, 36):
            sys.exit(0)
        print(f"CreateTopics {name}: error {code}", file=sys.stderr)
    except OSError as e:
        print(f"CreateTopics {name}: {e}", file=sys.stderr)
    time.sleep(0.5)
sys.exit(1)
EOF
    for _ in $(seq 1 100); do
        read -r l isr < <(leader_of "$1") || true
        if [[ -n ${l:-} && $l != -1 && $(tr ',' '\n' <<<"${isr:-}" | grep -c .) -eq $3 ]]; then return 0; fi
        sleep 0.2
    done
    echo "topic $1 did not get $3 in-sync replicas" >&2
    return 1
}

for n in 1 2 3; do start_node "$n"; done
for n in 1 2 3; do wait_port "${n}9092"; done
sleep 2
create rf3 6 3
create rf1 6 1

cpu_ticks() { # user + system clock ticks of the three nodes so far
    local total=0 p f
    for p in "${PID[@]}"; do
        read -ra f < <(sed 's/.*) //' "/proc/$p/stat")
        total=$((total + f[11] + f[12]))
    done
    echo "$total"
}
perf() { # topic -> "MB/s CPU-s/GB": payload MB/s from rdkafka_performance's final line, and
    # the three nodes' CPU seconds per GB of payload while it ran
    local line n ms before after
    # DROP_CACHES=1: every run starts from an empty page cache (the previous runs' pages
    # written back first, outside the measured window); DROP_CACHES=sync: written back only.
    case ${DROP_CACHES:-0} in
        1) sync; echo 3 >/proc/sys/vm/drop_caches ;;
        sync) sync ;;
    esac
    local rec=
    if [[ -n ${PROFILE:-} && $1 == rf3 ]]; then
        command perf record -q -g -o "$PROFILE" -p "$(IFS=,; echo "${PID[*]}")" >/dev/null 2>&1 &
        rec=$!
        sleep 0.5
    fi
    before=$(cpu_ticks)
    line=$("$PERF" -P -t "$1" -s 1024 -c "$MSGS" -b "$ALL" -a -1 -X linger.ms=5 -i 1000 2>&1 |
        grep ' messages produced ' | tail -n 1)
    after=$(cpu_ticks)
    if [[ -n $rec ]]; then kill -INT "$rec"; wait "$rec" || true; fi
    n=$(sed -n 's/.*, \([0-9]*\) delivered .*/\1/p' <<<"$line")
    ms=$(sed -n 's/.* in \([0-9]*\)ms:.*/\1/p' <<<"$line")
    awk -v n="${n:-0}" -v ms="${ms:-0}" -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.1f %.2f\n", (ms > 0 ? n * 1024 / ms / 1000 : 0), (n > 0 ? t / hz / (n * 1024 / 1e9) : 0) }'
}
echo "== produce 1 KiB acks=all, $MSGS messages, 6 partitions over 3 nodes: replication factor 3 vs 1 (MB/s; the nodes' CPU-s per GB)"
for r in $(seq 1 "$RUNS"); do
    read -r three three_cpu < <(perf rf3)
    read -r one one_cpu < <(perf rf1)
    echo "pair $r: RF 3 $three MB/s ($three_cpu CPU-s/GB), RF 1 $one MB/s ($one_cpu CPU-s/GB), ratio $(python3 -c "print(round($three/max($one,0.001), 2))")"
done

percentiles() { # file of microsecond samples -> "p50_ms p99_ms"
    sort -n "$1" | awk '{ a[NR] = $1 } END { if (NR == 0) { print "- -"; exit }
        printf "%.2f %.2f\n", a[int(NR * 0.50) + 1] / 1000, a[int(NR * 0.99) + 1] / 1000 }'
}
echo "== produce->ack latency, 100 B, acks=all, $LAT_RATE msg/s, $LAT_MSGS messages, partition 0 (p50 ms, p99 ms)"
for r in $(seq 1 "$((LAT_MSGS > 0 ? RUNS : 0))"); do
    for t in rf3 rf1; do
        "$PERF" -P -t "$t" -p 0 -b "$ALL" -s 100 -c "$LAT_MSGS" -a -1 -r "$LAT_RATE" -l -A "$WORK/$t-$r.us" \
            -X linger.ms=0 -i 1000 >"$WORK/$t-$r-lat.log" 2>&1 || true
        echo "run $r $t: $(percentiles "$WORK/$t-$r.us")"
        "$TOOLS/bin/sluice_latency" -t "$t" -p 0 -b "$ALL" -s 100 -c "$LAT_MSGS" -a -1 -r "$LAT_RATE" \
            -A "$WORK/$t-$r-paced.us" >"$WORK/$t-$r-paced.log" 2>&1 || true
        echo "run $r $t paced: $(percentiles "$WORK/$t-$r-paced.us")"
    done
done

echo "== failover: kill -9 of rf3-0's leader -> first acks=all produce acknowledged by the new leader (s)"
times=()
for r in $(seq 1 "$FAILOVERS"); do
    read -r leader _ < <(leader_of rf3)
    kill -9 "${PID[$leader]}"
    wait "${PID[$leader]}" 2>/dev/null || true
    t0=$(date +%s.%N)
    echo "failover-$r" | kcat -b "$ALL" -t rf3 -p 0 -P -X acks=all -X message.timeout.ms=60000 \
        -X topic.metadata.refresh.interval.ms=200 2>/dev/null
    t1=$(date +%s.%N)
    s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    read -r now _ < <(leader_of rf3)
    echo "run $r: killed node $leader, new leader $now, acknowledged after $s s"
    times+=("$s")
    start_node "$leader"; wait_port "${leader}9092"
    for _ in $(seq 1 150); do
        read -r _ isr < <(leader_of rf3) || true
        [[ $(tr ',' '\n' <<<"${isr:-}" | grep -c .) -eq 3 ]] && break
        sleep 0.2
    done
done
echo "failover median: $(printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }') s"
