#!/usr/bin/env bash
# Sustained acks=all produce against the disk's own fdatasync bandwidth, in one sitting (issue
# 10's target: 5 GB with acks=all at >= 90 % of what the disk takes with fdatasync):
#
#   protocol-tests/bench/sustained.sh BIN [BIN ...]
#
# Each round first measures the disk under the brokers' data directory: GIB GiB written in 1 MiB
# blocks, then fdatasync (dd conv=fdatasync), the page cache dropped before. Then each binary, on
# a fresh broker and an empty data directory, takes MSGS x SIZE B at acks=all on one partition
# from rdkafka_performance (linger.ms=5, default batching). Prints MB/s (payload) and the ratio to
# the same round's disk figure, then medians. Needs root (drop_caches).
#
# On a VM whose balloon reports free pages to the host, the broker's first touch of each page-cache
# page costs several times the copy into it (see produce_cpu.sh), and the broker, which shares the
# two cores with the client, falls to a third of the disk while dd does not. PAGE_REPORTING=off
# stops the reporting for the runs (page_reporting.sh); the header says which state was measured.
#
# Environment: ROUNDS=3 MSGS=5000000 SIZE=1024 GIB=2 TOOLS=/tmp/sluice-bench-tools
#   PAGE_REPORTING=on|off WARM_GIB=14
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
(($#)) || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
ROUNDS=${ROUNDS:-3}
MSGS=${MSGS:-5000000}
SIZE=${SIZE:-1024}
GIB=${GIB:-2}
TOOLS=${TOOLS:-${SLUICE_BENCH_TOOLS:-/tmp/sluice-bench-tools}}
[[ -x $TOOLS/bin/rdkafka_performance ]] || "$HERE/build.sh" "$TOOLS" >/dev/null || exit 1
BENCH_NAME=sustained
# shellcheck source=fresh_broker.sh
. "$HERE/fresh_broker.sh"
RESULTS=$WORK/results.tsv
: >"$RESULTS"
# shellcheck source=page_reporting.sh
. "$HERE/page_reporting.sh"
page_reporting_setup cleanup
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

disk() { # MB/s of GIB GiB in 1 MiB writes then fdatasync, in WORK (the brokers' file system)
    local f=$WORK/dd.tmp t0 t1
    drop
    t0=$(date +%s%N)
    dd if=/dev/zero of="$f" bs=1M count=$((GIB * 1024)) conv=fdatasync status=none || return 1
    t1=$(date +%s%N)
    rm -f "$f"
    awk -v b=$((GIB * 1073741824)) -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f\n", b / (ns / 1e9) / 1e6 }'
}

produce() { # bin: MB/s of MSGS x SIZE B at acks=all
    local log=$WORK/run.log
    drop
    start_broker "$1" --set num.partitions=1
    "$TOOLS/bin/sluice_mktopic" -b "$ADDR" -t bench >"$log" 2>&1 || { stop_broker; return 1; }
    timeout -s INT -k 10 300 "$TOOLS/bin/rdkafka_performance" -P -t bench -p 0 -b "$ADDR" -s "$SIZE" \
        -c "$MSGS" -a -1 -X linger.ms=5 -i 1000 >>"$log" 2>&1
    stop_broker
    # "% N messages produced (B bytes), N delivered (...) in Tms: R msgs/s and M MB/s, ..."
    grep ' messages produced ' "$log" | tail -n 1 |
        sed -n 's/.* produced (\([0-9]*\) bytes), \([0-9]*\) delivered .* in \([0-9]*\)ms.*/\1 \2 \3/p' |
        awk -v msgs="$MSGS" '$2 == msgs { printf "%.0f\n", $1 / $3 / 1000 }'
}

echo "# sustained.sh: $(date -u +%FT%TZ), $ROUNDS rounds, $MSGS x $SIZE B acks=all per binary, disk: $GIB GiB + fdatasync in $WORK ($(stat -f -c %T "$WORK")), $(uname -r), $REPORTING"
for _ in $(seq "$ROUNDS"); do
    d=$(disk) || { echo "disk: dd failed" >&2; exit 1; }
    echo "disk	$d MB/s" | tee -a "$RESULTS"
    for bin in "$@"; do
        mb=$(produce "$bin")
        [[ -n $mb ]] || { echo "$(basename "$bin")	failed or not every record delivered (see $WORK/run.log)" >&2; continue; }
        awk -v l="$(basename "$bin")" -v mb="$mb" -v d="$d" 'BEGIN { printf "%s\t%d MB/s\t%.2f of disk\n", l, mb, mb / d }' |
            tee -a "$RESULTS"
    done
done
echo "# medians"
python3 - "$RESULTS" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    runs.setdefault(f[0], []).append([float(x.split()[0]) for x in f[1:]])
for k, v in runs.items():
    ratio = "" if k == "disk" else f"\t{statistics.median(r[1] for r in v):.2f} of disk"
    print(f"{k}\t{statistics.median(r[0] for r in v):.0f} MB/s{ratio}\t({len(v)} runs)")
PY
