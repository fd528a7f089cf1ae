#!/usr/bin/env bash
# What TLS and SASL cost: bench.sh's throughput scenarios over SSL and over SASL_SSL,
# as ratios to plaintext, against one broker in one sitting.
#
#   protocol-tests/bench/security.sh [--set key=value ...]    (passed to `sluice serve`)
#
# Makes a CA and the broker's PEM keystore (openssl, for localhost and 127.0.0.1,
# as protocol-tests/clients/tls_common.sh does) in a temporary directory, starts
# ONE release sluice with three listeners on loopback:
#   PLAINTEXT
#   SSL        rustls; clients verify the broker against the CA (no client certificates)
#   SASL_SSL   sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512; the clients authenticate
#              with PLAIN as a user of the listener's JAAS line
# then runs bench.sh's "produce" and "consume" scenarios (SCENARIOS="produce
# consume": 100 B and 1 KiB at acks=1 and acks=all, 1 KiB idempotent, both
# acks=all topics read back from the start) against each listener in turn, with
# the security settings in EXTRA_X for every client. The listeners are
# interleaved per run and their order rotated (run 1: plain tls sasl, run 2:
# tls sasl plain, ...) so machine noise and the data dir's growth fall evenly on
# all three; each turn starts after a sync(1), so none inherits the previous
# one's writeback. Topics are created through the plaintext listener (ADMIN_ADDR).
# The handshake and authentication happen once per connection, before timing
# starts, so the ratios are the cost of encrypting the stream (and of SASL's
# framing, which is none after authentication).
#
# Table: per scenario msgs/s (100 B) or MB/s (1 KiB) for each listener, medians
# over runs, the ratios TLS/plaintext and SASL_SSL/plaintext of those medians
# and of each run, and the medians of brk% and cli% per listener (CPU of
# broker / client over wall time, 100 = one core; broker and client share the
# machine's cores; rdkafka_performance has an application thread and a broker
# thread, so a cli% of 100 or more says the client is the limit, not the broker).
# Other work on the machine skews a turn: for each turn the script also prints
# (and writes to turns.tsv) the CPU used by everything but the broker and the
# benchmark's own processes ("others", 100 = one core; a few % either side of
# 0 is accounting noise), the hypervisor's steal time and the free memory at
# its start (the page cache fills with the topics: 3.2 GB per turn at MSGS=1M).
#
# Environment (all optional):
#   RUNS=3            rounds of the three listeners; the table shows medians
#   MSGS=1000000      messages per produce scenario (bench.sh's MSGS)
#   TIMEOUT=120       seconds allowed per scenario (bench.sh's)
#   OUT=/tmp/sluice-bench/security-<time>   bench.sh's own output per listener
#                     and run (<listener>/run<n>/, its stdout+stderr in bench.out),
#                     runs.tsv (every run of every listener), turns.tsv (others'
#                     CPU per turn), summary.tsv, table.txt
#   SLUICE_BIN=target/release/sluice   built with cargo build --release when missing
#   TOOLS=/tmp/sluice-bench-tools      build.sh's output (built when missing)
#   EXTRA_X="-X k=v"  more librdkafka properties for every client on all three
#                     listeners (e.g. -X socket.nagle.disable=true)
#   SLUICE_KEEP=1     keep the temporary directory (certificates, data, broker.log)
set -uo pipefail   # not -e: a failed scenario is reported in the table, not fatal

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
RUNS=${RUNS:-3}
export MSGS=${MSGS:-1000000}
export TIMEOUT=${TIMEOUT:-120}
export TOOLS=${TOOLS:-${SLUICE_BENCH_TOOLS:-/tmp/sluice-bench-tools}}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-/tmp/sluice-bench/security-$STAMP}
BIN=${SLUICE_BIN:-$ROOT/target/release/sluice}
if [[ ! -x $BIN ]]; then
    (cd "$ROOT" && cargo build --release --quiet) || exit 1
fi
if [[ ! -x $TOOLS/bin/rdkafka_performance || ! -x $TOOLS/bin/sluice_mktopic ]]; then
    "$HERE/build.sh" "$TOOLS" || exit 1
fi
mkdir -p "$OUT" || exit 1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-security.XXXXXX") || exit 1
PID=
stop() {
    if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
        kill "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
    fi
    if [[ ${SLUICE_KEEP:-0} == 1 ]]; then echo "security.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap stop EXIT
trap 'exit 130' INT TERM

# --- certificates (as tls_common.sh) ---------------------------------------------------------
ossl() { openssl "$@" >>"$WORK/openssl.log" 2>&1 || { echo "security.sh: openssl $1 failed:" >&2; tail -n 5 "$WORK/openssl.log" >&2; exit 1; }; }
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice bench CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem"
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$WORK/server.ext"
ossl req -newkey rsa:2048 -nodes -subj "/CN=broker" -keyout "$WORK/broker.key" -out "$WORK/broker.csr"
ossl x509 -req -in "$WORK/broker.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial -days 2 \
    -extfile "$WORK/server.ext" -out "$WORK/broker.crt"
cat "$WORK/broker.key" "$WORK/broker.crt" "$WORK/ca.pem" >"$WORK/broker-keystore.pem" # key, then chain

# --- the broker ---------------------------------------------------------------------------------
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
P_PLAIN=$(port) P_TLS=$(port) P_SASL=$(port)
SASL_USER=bench SASL_PASS=bench-secret
JAAS="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_$SASL_USER=\"$SASL_PASS\";"
"$BIN" serve --data-dir "$WORK/data" \
    --set "listeners=PLAINTEXT://127.0.0.1:$P_PLAIN,SSL://127.0.0.1:$P_TLS,SASL_SSL://127.0.0.1:$P_SASL" \
    --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512 \
    --set "listener.name.sasl_ssl.plain.sasl.jaas.config=$JAAS" \
    --set ssl.keystore.type=PEM --set "ssl.keystore.location=$WORK/broker-keystore.pem" \
    --set num.partitions=1 "$@" >"$WORK/broker.log" 2>&1 &
PID=$!
up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 100); do
    kill -0 "$PID" 2>/dev/null || break
    up "$P_PLAIN" && up "$P_TLS" && up "$P_SASL" && break
    sleep 0.1
done
if ! { up "$P_PLAIN" && up "$P_TLS" && up "$P_SASL"; }; then
    echo "security.sh: sluice did not open :$P_PLAIN, :$P_TLS and :$P_SASL:" >&2
    tail -n 20 "$WORK/broker.log" >&2
    exit 1
fi

declare -A ADDR XTRA
ADDR[plain]=127.0.0.1:$P_PLAIN
ADDR[tls]=127.0.0.1:$P_TLS
ADDR[sasl]=127.0.0.1:$P_SASL
XTRA[plain]=${EXTRA_X:-}
XTRA[tls]="-X security.protocol=ssl -X ssl.ca.location=$WORK/ca.pem ${EXTRA_X:-}"
XTRA[sasl]="-X security.protocol=sasl_ssl -X sasl.mechanisms=PLAIN -X sasl.username=$SASL_USER -X sasl.password=$SASL_PASS -X ssl.ca.location=$WORK/ca.pem ${EXTRA_X:-}"
LISTENERS=(plain tls sasl)

VERSION=$({ "$TOOLS/bin/rdkafka_performance" -h 2>&1 || true; } | sed -n 's/^librdkafka version \([^ ]*\).*/\1/p' | head -n 1)
HEAD="# $BIN (built $(date -u -r "$BIN" +%Y-%m-%dT%H:%MZ), HEAD $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo -)) over PLAINTEXT :$P_PLAIN, SSL :$P_TLS, SASL_SSL/PLAIN :$P_SASL, $(date -u +%Y-%m-%dT%H:%M:%SZ), rdkafka_performance (librdkafka $VERSION), $(nproc) cores
# RUNS=$RUNS MSGS=$MSGS TIMEOUT=${TIMEOUT}s EXTRA_X='${EXTRA_X:-}', listeners interleaved per run; extra args: ${*:-none}
# raw: $OUT"
echo "$HEAD" >&2

# CPU accounting for a turn, in clock ticks: the machine's user+nice+system+irq+softirq and
# steal (/proc/stat), the broker's utime+stime, and this shell's waited-for
# descendants' (bench.sh and its clients: cutime+cstime).
HZ=$(getconf CLK_TCK)
ticks() {
    awk '/^cpu / { printf "%d %d ", $2 + $3 + $4 + $7 + $8, $9 }' /proc/stat
    sed 's/^.*) //' "/proc/$PID/stat" | awk '{ printf "%d ", $12 + $13 }'
    sed 's/^.*) //' "/proc/$$/stat" | awk '{ print $14 + $15 }'
}
TURNS_TSV=$OUT/turns.tsv
printf 'run\tlistener\tsecs\tothers_pct\tsteal_pct\tmem_free_gb_at_start\n' >"$TURNS_TSV"
RUNS_TSV=$OUT/runs.tsv
printf 'run\tlistener\tscenario\tmsgs\tsecs\tmsgs_per_s\tMB_per_s\tbrk_pct\tcli_pct\tnote\n' >"$RUNS_TSV"
rc=0
for ((r = 1; r <= RUNS; r++)); do
    for ((i = 0; i < 3; i++)); do
        l=${LISTENERS[$(((i + r - 1) % 3))]}
        dir=$OUT/$l/run$r
        echo "security.sh: run $r/$RUNS $l (${ADDR[$l]})" >&2
        mkdir -p "$dir"
        t0=$(date +%s.%N)
        sync
        echo "security.sh:   sync took $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" >&2
        read -r m0 st0 b0 c0 < <(ticks)
        free0=$(awk '/^MemFree:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
        w0=$(date +%s.%N)
        RUNS=1 OUT=$dir LABEL=sluice-$l BROKER_PID=$PID SCENARIOS="produce consume" \
            ADMIN_ADDR=${ADDR[plain]} EXTRA_X=${XTRA[$l]} \
            "$HERE/bench.sh" "${ADDR[$l]}" >"$dir/bench.out" 2>&1 || rc=1
        w1=$(date +%s.%N)
        if kill -0 "$PID" 2>/dev/null; then
            read -r m1 st1 b1 c1 < <(ticks)
            awk -v OFS='\t' -v r="$r" -v l="$l" -v s="$(awk -v a="$w0" -v b="$w1" 'BEGIN { print b - a }')" -v hz="$HZ" \
                -v o="$(((m1 - m0) - (b1 - b0) - (c1 - c0)))" -v st="$((st1 - st0))" -v free="$free0" \
                'BEGIN { printf "%s\t%s\t%.0f\t%.0f\t%.0f\t%s\n", r, l, s, o / hz / s * 100, st / hz / s * 100, free }' >>"$TURNS_TSV"
            tail -n 1 "$TURNS_TSV" | awk -F'\t' '{ printf "security.sh:   %s s; others used %s%% of a core, steal %s%%; %s GB of memory free at the start\n", $3, $4, $5, $6 }' >&2
        fi
        if [[ -f $dir/runs.tsv ]]; then
            awk -F'\t' -v OFS='\t' -v r="$r" -v l="$l" 'NR > 1 { print r, l, $2, $3, $4, $5, $6, $10, $11, $12 }' \
                "$dir/runs.tsv" >>"$RUNS_TSV"
            awk -F'\t' 'NR > 1 { printf "  %-32s %9s msgs/s %8s MB/s  brk%% %4s cli%% %4s  %s\n", $2, $5, $6, $10, $11, $12 }' \
                "$dir/runs.tsv" >&2
        else
            echo "security.sh: bench.sh wrote no results for $l run $r:" >&2
            tail -n 5 "$dir/bench.out" >&2
            rc=1
        fi
        if ! kill -0 "$PID" 2>/dev/null; then
            echo "security.sh: sluice exited during the benchmark; last log lines:" >&2
            tail -n 20 "$WORK/broker.log" >&2
            exit 1
        fi
    done
done

# Medians per scenario and listener; ratios of the medians and of each run's
# paired values. 100 B scenarios are read in msgs/s, 1 KiB ones in MB/s (same
# ratio either way, the size being fixed).
awk -F'\t' -v OFS='\t' -v runs="$RUNS" '
    function median(s,   a, n, i, j, t) {
        n = split(s, a, " "); if (n == 0) return "-"
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function ratio(a, b) { return (a == "-" || b == "-" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
    function fmt(v, unit) { return v == "-" ? "-" : sprintf(unit == "MB/s" ? "%.1f" : "%.0f", v) }
    NR == 1 { next }
    !($3 in seen) { seen[$3] = 1; order[++k] = $3 }
    {
        unit[$3] = $3 ~ / 100B / ? "msgs/s" : "MB/s"
        v = unit[$3] == "msgs/s" ? $6 : $7
        if (v != "-" && v != "") { vals[$3, $2] = vals[$3, $2] " " v; per[$3, $2, $1] = v }
        if ($8 != "-" && $8 != "") brk[$3, $2] = brk[$3, $2] " " $8
        if ($9 != "-" && $9 != "") cli[$3, $2] = cli[$3, $2] " " $9
        if ($10 != "") notes[$3] = notes[$3] (notes[$3] == "" ? "" : "; ") "run" $1 " " $2 ": " $10
    }
    END {
        print "scenario", "unit", "plain", "tls", "sasl_ssl", "tls/plain", "sasl/plain", "tls/plain_runs", "sasl/plain_runs", "brk_pct", "cli_pct", "notes"
        for (i = 1; i <= k; i++) {
            s = order[i]; u = unit[s]
            p = median(vals[s, "plain"]); t = median(vals[s, "tls"]); q = median(vals[s, "sasl"])
            rt = ""; rq = ""
            for (r = 1; r <= runs; r++) {
                rt = rt (r > 1 ? " " : "") ratio((s, "tls", r) in per ? per[s, "tls", r] : "-", (s, "plain", r) in per ? per[s, "plain", r] : "-")
                rq = rq (r > 1 ? " " : "") ratio((s, "sasl", r) in per ? per[s, "sasl", r] : "-", (s, "plain", r) in per ? per[s, "plain", r] : "-")
            }
            b = c = ""
            split("plain tls sasl", L, " ")
            for (j = 1; j <= 3; j++) {
                bm = median(brk[s, L[j]]); cm = median(cli[s, L[j]])
                b = b (j > 1 ? "/" : "") (bm == "-" ? "-" : sprintf("%.0f", bm))
                c = c (j > 1 ? "/" : "") (cm == "-" ? "-" : sprintf("%.0f", cm))
            }
            print s, u, fmt(p, u), fmt(t, u), fmt(q, u), ratio(t, p), ratio(q, p), rt, rq, b, c, notes[s]
        }
    }' "$RUNS_TSV" >"$OUT/summary.tsv"

{
    echo "$HEAD"
    ((RUNS > 1)) && echo "# medians of $RUNS runs; ratios of the medians, then of each run's pair; brk%/cli% as plain/tls/sasl"
    awk -F'\t' '{ printf "%-34s %-6s %9s %9s %9s %9s %10s  %-16s %-16s %-12s %-12s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }' "$OUT/summary.tsv"
} | tee "$OUT/table.txt"

grep -q $'\tFAIL' "$RUNS_TSV" && rc=1
exit $rc
