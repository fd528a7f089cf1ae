#!/usr/bin/env bash
# Consume from the start against loopback TCP, in one sitting (issue 10's consume target:
# >= 90 % of loopback bandwidth), and A/B between broker builds.
#
#   protocol-tests/bench/consume.sh BIN [BIN ...]
#
# For each binary: start it on a fresh data dir, produce MSGS x SIZE B (acks=1) to one
# partition, then read it from offset 0 to its end with rdkafka_performance's simple consumer
# READS times; between binaries, iperf3 measures one loopback stream for 5 s. Prints each run's
# MB/s (payload), the broker's and the client's CPU seconds per GB read, the share of the
# machine's CPU time left idle during the read, and medians. A read that leaves the machine idle
# while neither side is saturated is bound by the fetch round trip: librdkafka keeps one Fetch
# in flight per broker, so its parse of one answer and the broker's sending of the next take
# turns.
#
# The TCP congestion control decides both sides of the ratio on loopback. These VMs default to
# BBR, whose pacing arms a timer per transmit: iperf3 reached 2.6 GB/s with it against 6.7 with
# CUBIC, and the broker's CPU per GB read was bimodal with it, 0.12 or 0.5 CPU-s/GB for one
# binary in one sitting (0.13-0.16 on every read with CUBIC). CONGESTION=cubic sets the
# system's default for the runs and puts it back at exit; the header says which was used.
# PAGE_REPORTING=off stops free page reporting for the runs (page_reporting.sh).
#
# Environment: MSGS=2000000 SIZE=1024 READS=3 ROUNDS=2 (binaries alternate each round)
#   PAGE_REPORTING=on|off WARM_GIB=14  CONGESTION=<a net.ipv4.tcp_congestion_control value>
#   TOOLS=/tmp/sluice-bench-tools (protocol-tests/bench/build.sh)
#   PERF=TOOLS/bin/rdkafka_performance (e.g. rdkafka_performance-2.12.1, CURRENT=1 build.sh)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
(($#)) || { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
MSGS=${MSGS:-2000000}
SIZE=${SIZE:-1024}
READS=${READS:-3}
ROUNDS=${ROUNDS:-2}
TOOLS=${TOOLS:-${SLUICE_BENCH_TOOLS:-/tmp/sluice-bench-tools}}
[[ -x $TOOLS/bin/rdkafka_performance ]] || "$HERE/build.sh" "$TOOLS" >/dev/null
command -v iperf3 >/dev/null || { echo "consume.sh: needs iperf3 (apt-get install iperf3)" >&2; exit 1; }
PERF=${PERF:-$TOOLS/bin/rdkafka_performance}
BENCH_NAME=consume
# shellcheck source=fresh_broker.sh
. "$HERE/fresh_broker.sh"
# shellcheck source=page_reporting.sh
. "$HERE/page_reporting.sh"
page_reporting_setup cleanup
CC_KEY=/proc/sys/net/ipv4/tcp_congestion_control
if [[ -n ${CONGESTION:-} ]]; then
    CC_WAS=$(cat "$CC_KEY")
    echo "$CONGESTION" >"$CC_KEY" || exit 1
    # page_reporting_setup's trap, if any, then the congestion control put back
    # shellcheck disable=SC2064 # the values are meant to be fixed now
    trap "$(trap -p EXIT | sed "s/^trap -- '\(.*\)' EXIT$/\1/"); echo $CC_WAS >$CC_KEY" EXIT
fi
echo "# consume.sh: $(date -u +%FT%TZ), $ROUNDS rounds x $READS reads of $MSGS x $SIZE B, $(uname -r), $REPORTING, TCP congestion control $(cat "$CC_KEY")"
TICKS=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# all CPUs' idle and total ticks
idle_total() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $5 + $6, t }' /proc/stat; }

loopback() {
    local p
    p=$(port)
    timeout 20 iperf3 -s -1 -B 127.0.0.1 -p "$p" >/dev/null 2>&1 &
    sleep 0.5
    timeout 15 iperf3 -c 127.0.0.1 -p "$p" -t 5 -f m 2>/dev/null |
        awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Mbits/sec") printf "%.0f\n", $i / 8 * 1.048576 }'
    wait
}

run_binary() { # label bin
    local label=$1 bin=$2 addr log t0 t1 s0 s1 cli line bytes ms
    start_broker "$bin" --set num.partitions=1
    addr=$ADDR
    "$PERF" -P -t c -p 0 -b "$addr" -s "$SIZE" -c "$MSGS" -a 1 -X linger.ms=5 >"$WORK/produce.log" 2>&1
    for r in $(seq "$READS"); do
        log=$WORK/consume.log
        t0=$(ticks "$PID")
        s0=$(idle_total)
        # the client's CPU: its own utime + stime at exit, from bash's times of a subshell
        cli=$( { TIMEFORMAT='%U %S'; time "$PERF" -C -t c -p 0 -b "$addr" -o beginning -e -c "$MSGS" -i 1000 \
            >"$log" 2>&1; } 2>&1 | awk '{ print $1 + $2 }')
        t1=$(ticks "$PID")
        s1=$(idle_total)
        line=$(grep ' consumed in ' "$log" | tail -n 1)
        bytes=$(sed -n 's/^% [0-9]* messages (\([0-9]*\) bytes).*/\1/p' <<<"$line")
        ms=$(sed -n 's/.* consumed in \([0-9]*\)ms.*/\1/p' <<<"$line")
        [[ -n $bytes && -n $ms ]] || { echo "$label read $r: failed (see $log)" >&2; continue; }
        awk -v l="$label" -v r="$r" -v b="$bytes" -v ms="$ms" -v c=$((t1 - t0)) -v hz="$TICKS" -v cli="${cli:-0}" \
            -v s0="$s0" -v s1="$s1" 'BEGIN {
                split(s0, a, " "); split(s1, z, " "); gb = b / 1e9
                printf "%s\tread %d\t%.0f MB/s\t%.3f broker CPU-s/GB\t%.3f client CPU-s/GB\t%.0f %% idle\n",
                    l, r, b / ms / 1000, c / hz / gb, cli / gb, 100 * (z[1] - a[1]) / (z[2] - a[2])
            }'
    done
    stop_broker
}

out=$WORK/runs.tsv
for round in $(seq "$ROUNDS"); do
    echo "loopback	iperf3	$(loopback) MB/s" | tee -a "$out"
    for bin in "$@"; do
        run_binary "$(basename "$bin")" "$bin" | tee -a "$out"
    done
done
echo "# medians"
python3 - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    runs.setdefault(f[0], []).append([float(x.split()[0]) for x in f[2:]])
loop = statistics.median(r[0] for r in runs.pop("loopback"))
print(f"loopback\t{loop:.0f} MB/s")
for k, v in runs.items():
    mb = statistics.median(r[0] for r in v)
    cpu = statistics.median(r[1] for r in v)
    cli = statistics.median(r[2] for r in v)
    idle = statistics.median(r[3] for r in v)
    print(f"{k}\t{mb:.0f} MB/s\t{mb / loop:.2f} of loopback\t{cpu:.3f} broker CPU-s/GB\t"
          f"{cli:.3f} client CPU-s/GB\t{idle:.0f} % idle\t({len(v)} reads)")
PY
