#!/usr/bin/env bash
# Idempotent against plain acks=all produce (issue 8's "within 10 %"), each run on a fresh
# broker with the page cache written back and dropped first, so no run inherits another's
# dirty pages (on these VMs a few GB of earlier writes slow the page-cache copy 3-4x):
#
#   protocol-tests/bench/idempotence.sh        ROUNDS=6 MSGS=1000000 SLUICE_BIN=<a sluice binary>
#
# Each round runs, interleaved: plain acks=all; enable.idempotence=true with librdkafka 2.0.2
# as shipped (its window counts messages, so it waits for every answer before sending again);
# and, when built (IDEMP_WINDOW=1 build.sh), the same with a 5-request window, as the Java
# client keeps. 1 KiB records, one partition, linger.ms=5, default batching. Prints one line
# per run and the ratios to plain per round, then their medians. Needs root (drop_caches).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-6}
MSGS=${MSGS:-1000000}
TOOLS=${TOOLS:-/tmp/sluice-bench-tools}
[[ -x $TOOLS/bin/rdkafka_performance ]] || "$HERE/build.sh" "$TOOLS" || exit 1
if [[ -n ${SLUICE_BIN:-} ]]; then BIN=$SLUICE_BIN; else (cd "$ROOT" && cargo build --release --quiet) || exit 1; BIN=$ROOT/target/release/sluice; fi
BENCH_NAME=idempotence
# shellcheck source=fresh_broker.sh
. "$HERE/fresh_broker.sh"

# run LABEL PERF [-X ...]: prints "LABEL MB/s" (0 when the run failed)
run() {
    local label=$1 perf=$2 log mb
    shift 2
    sync
    echo 3 >/proc/sys/vm/drop_caches
    start_broker "$BIN"
    log=$WORK/$label.log
    "$TOOLS/bin/sluice_mktopic" -b "$ADDR" -t bench >"$log" 2>&1 &&
        timeout -s INT -k 10 120 "$perf" -P -t bench -p 0 -b "$ADDR" -s 1024 -c "$MSGS" \
            -a -1 -X linger.ms=5 -i 1000 "$@" >>"$log" 2>&1
    stop_broker
    # "% N messages produced (B bytes), N delivered (...) in Tms: R msgs/s and M MB/s, ..."
    mb=$(grep ' messages produced ' "$log" | tail -n 1 | sed -n 's/.* and \([0-9.]*\) MB\/s.*/\1/p')
    echo "$label ${mb:-0}"
}

WINDOW=$TOOLS/bin/rdkafka_performance-reqwindow
echo "# $BIN, $MSGS x 1 KiB acks=all per run, $ROUNDS rounds; MB/s (ratio to plain in the same round)"
declare -a stock_ratios window_ratios
for r in $(seq 1 "$ROUNDS"); do
    read -r _ plain < <(run plain "$TOOLS/bin/rdkafka_performance")
    read -r _ stock < <(run idempotent "$TOOLS/bin/rdkafka_performance" -X enable.idempotence=true)
    line="round $r: plain $plain, idempotent $stock ($(awk -v a="$stock" -v b="$plain" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'))"
    stock_ratios+=("$(awk -v a="$stock" -v b="$plain" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')")
    if [[ -x $WINDOW ]]; then
        read -r _ win < <(run idempotent-5-window "$WINDOW" -X enable.idempotence=true)
        line="$line, idempotent with a 5-request window $win ($(awk -v a="$win" -v b="$plain" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'))"
        window_ratios+=("$(awk -v a="$win" -v b="$plain" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')")
    fi
    echo "$line"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "median ratio: idempotent $(median "${stock_ratios[@]}")${window_ratios[*]:+, with a 5-request window $(median "${window_ratios[@]}")}"
