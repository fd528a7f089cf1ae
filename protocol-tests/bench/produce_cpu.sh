#!/usr/bin/env bash
# Broker CPU seconds per GB of produce (issue 10's "halve the produce figure, measured before and
# after in one run"), A/B between broker builds in one sitting:
#
#   protocol-tests/bench/produce_cpu.sh BIN [BIN ...]
#
# Each round runs every binary at acks=1 and at acks=all (interleaved), each run on a fresh broker
# with the page cache written back and dropped first (on these VMs a few GB of earlier writes make
# the page-cache copy 3-4x dearer, so no run may inherit another's dirty pages). A run produces
# MSGS x SIZE B with rdkafka_performance (linger.ms=5, default batching) to one partition.
#
# Per run it prints MB/s (payload), the broker's CPU-s per GB (user + system, from /proc/PID/stat),
# and "other": the machine's busy CPU-s per GB outside the broker and the client (from /proc/stat;
# the kernel's write-back threads and interrupts, which do for acks=1 what fdatasync does inside
# the broker for acks=all). Then the medians per binary and acks, and each binary's ratio to the
# first. Needs root (drop_caches).
#
# On a VM whose balloon reports free pages to the host (virtio free page reporting, as on this
# project's machines), the first touch of a page the host took back costs 5-10x the copy itself:
# 2 GiB written with dd took 2.3-4.9 sys-s on such pages against 0.42-0.58 on pages in use
# before. Which pages a run gets then decides its figure more than the broker does. With
# PAGE_REPORTING=off the script stops the reporting for its runs (page_reporting_order past the
# largest order), touches WARM_GIB of memory once so that the freed pages stay backed, and puts
# the setting back at exit. The header says which state the figures come from.
#
# Environment: ROUNDS=3 MSGS=2000000 SIZE=1024 TOOLS=/tmp/sluice-bench-tools
#   PAGE_REPORTING=on|off (on: leave the machine as it is)  WARM_GIB=14
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
(($#)) || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
ROUNDS=${ROUNDS:-3}
MSGS=${MSGS:-2000000}
SIZE=${SIZE:-1024}
TOOLS=${TOOLS:-${SLUICE_BENCH_TOOLS:-/tmp/sluice-bench-tools}}
[[ -x $TOOLS/bin/rdkafka_performance ]] || "$HERE/build.sh" "$TOOLS" >/dev/null || exit 1
BENCH_NAME=produce-cpu
# shellcheck source=fresh_broker.sh
. "$HERE/fresh_broker.sh"
TICKS=$(getconf CLK_TCK)
proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# all CPUs' busy ticks (everything but idle and iowait)
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

RESULTS=$WORK/results.tsv
: >"$RESULTS"

# shellcheck source=page_reporting.sh
. "$HERE/page_reporting.sh"
page_reporting_setup cleanup

run() { # label bin acks
    local label=$1 bin=$2 acks=$3 log b0 b1 c0 c1 cli mb bytes ms
    sync
    echo 3 >/proc/sys/vm/drop_caches
    start_broker "$bin" --set num.partitions=1
    log=$WORK/run.log
    "$TOOLS/bin/sluice_mktopic" -b "$ADDR" -t bench >"$log" 2>&1 || { echo "$label acks=$acks: no topic"; stop_broker; return; }
    b0=$(proc_ticks "$PID")
    c0=$(busy_ticks)
    # the client's CPU: its own utime + stime at exit, from bash's times of a subshell
    cli=$( { TIMEFORMAT='%U %S'; time timeout -s INT -k 10 180 "$TOOLS/bin/rdkafka_performance" -P -t bench -p 0 \
        -b "$ADDR" -s "$SIZE" -c "$MSGS" -a "$acks" -X linger.ms=5 -i 1000 >>"$log" 2>&1; } 2>&1 |
        awk '{ print $1 + $2 }')
    b1=$(proc_ticks "$PID")
    c1=$(busy_ticks)
    stop_broker
    # "% N messages produced (B bytes), N delivered (...) in Tms: R msgs/s and M MB/s, ..."
    bytes=$(grep ' messages produced ' "$log" | tail -n 1 | sed -n 's/.* produced (\([0-9]*\) bytes).*/\1/p')
    ms=$(grep ' messages produced ' "$log" | tail -n 1 | sed -n 's/.* in \([0-9]*\)ms.*/\1/p')
    [[ -n $bytes && -n $ms ]] || { echo "$label acks=$acks: failed (see $log)"; cat "$log" >&2; return; }
    awk -v l="$label" -v a="$acks" -v b="$bytes" -v ms="$ms" -v bt=$((b1 - b0)) -v ct=$((c1 - c0)) \
        -v cli="$cli" -v hz="$TICKS" 'BEGIN {
            gb = b / 1e9; brk = bt / hz / gb; other = (ct / hz - bt / hz - cli) / gb
            if (other < 0) other = 0
            printf "%s\tacks=%s\t%.0f MB/s\t%.3f broker CPU-s/GB\t%.3f other\n", l, a, b / ms / 1000, brk, other
        }' | tee -a "$RESULTS"
}

echo "# produce_cpu.sh: $(date -u +%FT%TZ), $ROUNDS rounds x $# binaries x acks 1/all, $MSGS x $SIZE B, $(uname -r), $REPORTING"
for r in $(seq "$ROUNDS"); do
    i=0
    for bin in "$@"; do
        i=$((i + 1))
        for acks in 1 all; do run "b$i" "$bin" "$acks"; done
    done
done
echo "# medians (b1 = $1)"
python3 - "$RESULTS" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, acks, mb, brk, other = line.rstrip("\n").split("\t")
    runs.setdefault((label, acks), []).append((float(mb.split()[0]), float(brk.split()[0]), float(other.split()[0])))
base = {}
for (label, acks), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    mb, brk, other = (statistics.median(x[i] for x in v) for i in range(3))
    base.setdefault(acks, brk)
    print(f"{label}\t{acks}\t{mb:.0f} MB/s\t{brk:.3f} broker CPU-s/GB ({brk / base[acks]:.2f} of b1)\t{other:.3f} other\t({len(v)} runs)")
EOF
