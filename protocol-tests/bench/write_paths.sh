#!/usr/bin/env bash
# What one GB written costs the kernel by each way a log could reach the disk (issue 10: "measure
# the alternatives side by side and keep what wins"), on this machine's file system, in one
# sitting:
#
#   protocol-tests/bench/write_paths.sh [DIR]
#
# Each round writes GIB GiB in 1 MiB writes with dd from one reused buffer, four ways:
#   fresh     buffered appends to a new file (what a new segment gets: fresh page-cache pages)
#   reserved  buffered writes into blocks reserved with fallocate (what Sluice's active segment
#             gets, `Segment::preallocate`), the page cache dropped first
#   recycled  buffered writes over pages still in the page cache (a deleted segment's file
#             reused with its pages cached)
#   direct    O_DIRECT writes into reserved blocks (no page cache: Redpanda's way)
# and then `sync`s. Per way it prints MB/s of the writes, the writer's system CPU-s per GB, and
# the whole machine's busy CPU-s per GB over the writes and the sync (the kernel's write-back
# threads do for buffered writes what O_DIRECT does in the writer), then medians over ROUNDS.
# A fifth row, "source", is dd writing to /dev/null: what filling its buffer from /dev/zero
# costs in every row. The medians also give each way net of it, the cost of the write alone.
# Needs root (drop_caches). DIR defaults to /var/tmp and must not be a tmpfs.
#
# On a VM whose balloon reports free pages to the host (virtio free page reporting), a page the
# host took back costs several times the copy at its first touch, and pages freed in the last
# seconds have not been taken back yet: with reporting on, each way's figure depends on what ran
# before it. PAGE_REPORTING=off stops the reporting for the runs (page_reporting.sh).
#
# Environment: ROUNDS=3 GIB=2 PAGE_REPORTING=on|off WARM_GIB=14
set -uo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
DIR=${1:-/var/tmp}
ROUNDS=${ROUNDS:-3}
GIB=${GIB:-2}
[[ $(stat -f -c %T "$DIR") != tmpfs ]] || { echo "write_paths.sh: $DIR is a tmpfs" >&2; exit 2; }
FILE=$(mktemp "$DIR/sluice-write-paths.XXXXXX")
RESULTS=$(mktemp)
cleanup() { rm -f "$FILE" "$RESULTS"; }
trap cleanup EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=page_reporting.sh
. "$HERE/page_reporting.sh"
page_reporting_setup cleanup
COUNT=$((GIB * 1024))
GB=$(awk -v g="$GIB" 'BEGIN { print g * 1073741824 / 1e9 }')
TICKS=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# way: prepares the file, then times `dd ARGS` and the sync after it
way() {
    local name=$1 b0 b1 t0 t1 sys
    shift
    b0=$(busy_ticks)
    t0=$(date +%s%N)
    sys=$( { TIMEFORMAT='%S'; time dd if=/dev/zero of="$FILE" bs=1M count="$COUNT" "$@" status=none; } 2>&1)
    t1=$(date +%s%N)
    sync
    b1=$(busy_ticks)
    awk -v n="$name" -v gb="$GB" -v ns=$((t1 - t0)) -v sys="$sys" -v bt=$((b1 - b0)) -v hz="$TICKS" 'BEGIN {
        printf "%s\t%.0f MB/s\t%.3f writer sys-s/GB\t%.3f machine CPU-s/GB\n", n, gb * 1000 / (ns / 1e9), sys / gb, bt / hz / gb
    }' | tee -a "$RESULTS"
}

echo "# write_paths.sh: $(date -u +%FT%TZ), $ROUNDS rounds x $GIB GiB in 1 MiB writes, $DIR ($(stat -f -c %T "$DIR")), $(uname -r), $REPORTING"
for _ in $(seq "$ROUNDS"); do
    (FILE=/dev/null way source)
    rm -f "$FILE"
    drop
    way fresh
    rm -f "$FILE"
    fallocate -l "${GIB}G" "$FILE"
    drop
    way reserved conv=notrunc
    way recycled conv=notrunc
    rm -f "$FILE"
    fallocate -l "${GIB}G" "$FILE"
    drop
    way direct conv=notrunc oflag=direct
done
echo "# medians"
python3 - "$RESULTS" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    runs.setdefault(f[0], []).append([float(x.split()[0]) for x in f[1:]])
med = {k: [statistics.median(r[i] for r in v) for i in range(3)] for k, v in runs.items()}
_, src_sys, src_cpu = med["source"]
for k, (mb, sys_s, cpu) in med.items():
    net = "" if k == "source" else f"\tnet of source: {sys_s - src_sys:.3f} sys-s/GB, {cpu - src_cpu:.3f} CPU-s/GB"
    print(f"{k}\t{mb:.0f} MB/s\t{sys_s:.3f} writer sys-s/GB\t{cpu:.3f} machine CPU-s/GB{net}\t({len(runs[k])} runs)")
PY
