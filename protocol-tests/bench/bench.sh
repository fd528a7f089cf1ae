#!/usr/bin/env bash
# Sluice's benchmark: throughput and latency of one broker as librdkafka sees it.
#
#   protocol-tests/bench/bench.sh HOST:PORT        a broker that is already running
#   protocol-tests/bench/run-local.sh              builds + starts sluice, then this
#
# Scenarios, each on a fresh one-partition topic created through CreateTopics:
#   produce  MSGS messages of 100 B and of 1 KiB, at acks=1 and at acks=all,
#            and 1 KiB at acks=all with enable.idempotence=true;
#            librdkafka's default batching (linger.ms=5: rdkafka_performance's
#            own default of 1000 ms is put back), no compression, no keys.
#            Timed from the first produce() to the last delivery report.
#   consume  each size's acks=all topic read from offset 0 to its end by the
#            simple (non-group) consumer, default fetch settings. Timed from the
#            first message received.
#   latency  LAT_MSGS x 100 B at LAT_RATE msg/s, linger.ms=0:
#            "ack" = produce() -> delivery report (the broker's answer), at
#            acks=1 and acks=all with no consumer;
#            "e2e" = produce() -> received by a consumer that is already
#            waiting in Fetch (acks=all; its producer's ack latency is shown
#            too, as "+consumer"). The first LAT_SKIP samples (connection and
#            metadata set-up) are left out.
#            rdkafka_performance paces -r by polling without a timeout, so its
#            main thread spins on a core the broker shares. The same three rows
#            come again as "paced": build.sh's sluice_latency, which sleeps
#            until each send is due, producing (LAT_PACED=0 leaves them out).
#
# Environment (all optional):
#   RUNS=1            repeat everything n times; the table shows medians
#   MSGS=1000000      messages per produce scenario
#   LAT_RATE=1000  LAT_MSGS=10000  LAT_SKIP=100  LAT_PACED=1
#   TIMEOUT=120       seconds allowed per scenario (then SIGINT: partial result)
#   TOOLS=/tmp/sluice-bench-tools    build.sh's output (built when missing)
#   PERF=TOOLS/bin/rdkafka_performance  the load generator (CURRENT=1 build.sh also
#                     builds rdkafka_performance-<version> of the rdkafka crate's librdkafka)
#   OUT=/tmp/sluice-bench/<label>-<time>   raw logs, latency samples (*.us),
#                     runs.tsv (every run), summary.tsv and table.txt (medians)
#   LABEL=sluice      name in the header and OUT
#   BROKER_PID=       the broker's pid, for its CPU column (brk%)
#   EXTRA_X="-X k=v"  extra librdkafka properties for every client
#   SCENARIOS="produce consume latency"   the ones to run (consume reads what
#                     produce wrote, so it needs produce); "idempotence" runs only
#                     1 KiB acks=all plain, then idempotent, per run, then idempotent
#                     again with WINDOW_PERF when that exists
#   WINDOW_PERF=TOOLS/bin/rdkafka_performance-reqwindow  librdkafka 2.0.2 whose
#                     idempotent producer keeps up to 5 requests in flight per
#                     partition, as the Java client does (IDEMP_WINDOW=1 build.sh;
#                     stock librdkafka waits for every answer before sending again)
#   ADMIN_ADDR=HOST:PORT  where topics are created (sluice_mktopic takes no -X,
#                     so a plaintext listener of the same broker when ADDR is
#                     TLS or SASL); defaults to ADDR
#
# Columns: msgs/s; MB/s (payload only, 10^6 B); p50/p99/max in ms; brk% and
# cli% = CPU time of broker / client divided by wall time (100 = one core;
# both share this machine's cores, so read produce numbers with cli% in mind:
# for small messages the client is often the limit, not the broker).
set -uo pipefail   # not -e: a failed scenario is reported in the table, not fatal

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
ADDR=$1
RUNS=${RUNS:-1}
MSGS=${MSGS:-1000000}
LAT_RATE=${LAT_RATE:-1000}
LAT_MSGS=${LAT_MSGS:-10000}
LAT_SKIP=${LAT_SKIP:-100}
LAT_PACED=${LAT_PACED:-1}
TIMEOUT=${TIMEOUT:-120}
TOOLS=${TOOLS:-${SLUICE_BENCH_TOOLS:-/tmp/sluice-bench-tools}}
LABEL=${LABEL:-sluice}
BROKER_PID=${BROKER_PID:-}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-/tmp/sluice-bench/$LABEL-$STAMP}
# shellcheck disable=SC2206
XTRA=(${EXTRA_X:-})
SCENARIOS=" ${SCENARIOS:-produce consume latency} "
ADMIN_ADDR=${ADMIN_ADDR:-$ADDR}
want() { [[ $SCENARIOS == *" $1 "* ]]; }

PERF=${PERF:-$TOOLS/bin/rdkafka_performance}
WINDOW_PERF=${WINDOW_PERF:-$TOOLS/bin/rdkafka_performance-reqwindow}
MKTOPIC=$TOOLS/bin/sluice_mktopic
PACED=$TOOLS/bin/sluice_latency
if [[ ! -x $PERF || ! -x $MKTOPIC || ($LAT_PACED == 1 && ! -x $PACED) ]]; then
    "$HERE/build.sh" "$TOOLS" || exit 1
fi
mkdir -p "$OUT" || exit 1
RUNS_TSV=$OUT/runs.tsv
printf 'run\tscenario\tmsgs\tsecs\tmsgs_per_s\tMB_per_s\tp50_ms\tp99_ms\tmax_ms\tbrk_pct\tcli_pct\tnote\n' >"$RUNS_TSV"
TOPIC_BASE=bench-$STAMP-$$

# --- measuring helpers ---------------------------------------------------------

HZ=$(getconf CLK_TCK)
# utime+stime of the broker (all threads), in clock ticks; "-" when unknown.
broker_ticks() {
    if [[ -n $BROKER_PID && -r /proc/$BROKER_PID/stat ]]; then
        # Field 2 (comm) may contain spaces: cut everything up to ") " first.
        sed 's/^.*) //' "/proc/$BROKER_PID/stat" | awk '{ print $12 + $13 }'
    else
        echo -
    fi
}
cpu_pct() { # ticks_before ticks_after wall_secs
    [[ $1 == - || $2 == - ]] && { echo -; return; }
    awk -v a="$1" -v b="$2" -v s="$3" -v hz="$HZ" 'BEGIN { printf (s > 0 ? "%.0f" : "-"), (b - a) / hz / s * 100 }'
}

# Runs a client under TIMEOUT and the shell's `time`; leaves its exit status in
# RC, wall seconds in WALL and its CPU % in CLI.
run_client() { # logfile command...
    local log=$1 tf TIMEFORMAT='%R %U %S' u s
    shift
    tf=$(mktemp)
    { time timeout -s INT -k 10 "$TIMEOUT" "$@" >"$log" 2>&1; } 2>"$tf"
    RC=$?
    read -r WALL u s <"$tf"
    rm -f "$tf"
    CLI=$(awk -v w="$WALL" -v u="$u" -v s="$s" 'BEGIN { printf (w > 0 ? "%.0f" : "-"), (u + s) / w * 100 }')
}

rc_note() { # exit status -> note
    case $1 in 0) ;; 124 | 130 | 137) echo "TIMEOUT" ;; *) echo "exit=$1" ;; esac
}

# p50 p99 max (ms) of a file of microsecond samples, skipping the first
# LAT_SKIP lines; nearest-rank percentiles. Prints "- - -" when too few.
percentiles() {
    tail -n +$((LAT_SKIP + 1)) "$1" 2>/dev/null | sort -n | awk '
        { v[NR] = $1 }
        function rank(p,  i) { i = int(p * NR); if (i < p * NR) i++; return v[i < 1 ? 1 : i] / 1000 }
        END { if (NR == 0) print "- - -"; else printf "%.2f %.2f %.2f\n", rank(0.50), rank(0.99), v[NR] / 1000 }'
}

rate() { awk -v n="$1" -v ms="$2" -v f="$3" 'BEGIN { printf (ms > 0 ? f : "-"), n / ms * 1000 }'; }

row() { # run scenario msgs secs msgs/s MB/s p50 p99 max brk cli note
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RUNS_TSV"
    printf '  run %s: %-32s %9s msgs %8s msgs/s %8s MB/s  p50 %s p99 %s max %s  %s\n' \
        "$1" "$2" "$3" "$5" "$6" "$7" "$8" "$9" "${12}" >&2
}

new_topic() { # topic -> 0 when the topic exists with a leader
    if ! timeout 60 "$MKTOPIC" -b "$ADMIN_ADDR" -t "$1" -p 1 -w 30 >"$DIR/topic-$1.log" 2>&1; then
        echo "bench.sh: could not create $1: $(tail -n 1 "$DIR/topic-$1.log")" >&2
        return 1
    fi
}

# --- scenarios --------------------------------------------------------------

produce() { # run size acks(1|all|idem: acks=all with enable.idempotence=true|idemw: idem by WINDOW_PERF)
    local run=$1 size=$2 acks=$3 topic=$TOPIC_BASE-r$1-s$2-a$3 name="produce ${2}B acks=$3"
    local log=$DIR/produce-s$size-a$acks.log note t0 t1 line n ms failed idem=() perf=$PERF
    [[ $acks == idem ]] && { idem=(-X enable.idempotence=true); name="produce ${2}B acks=all idempotent"; }
    [[ $acks == idemw ]] && { idem=(-X enable.idempotence=true); name="produce ${2}B acks=all idempotent 5-window"; perf=$WINDOW_PERF; }
    new_topic "$topic" || { row "$run" "$name" 0 - - - - - - - - "FAIL create topic"; return; }
    t0=$(broker_ticks)
    run_client "$log" "$perf" -P -t "$topic" -p 0 -b "$ADDR" -s "$size" -c "$MSGS" \
        -a "$([[ $acks == 1 ]] && echo 1 || echo -1)" -X linger.ms=5 -i 1000 "${idem[@]}" "${XTRA[@]}"
    t1=$(broker_ticks)
    note=$(rc_note $RC)
    # Final line: "% N messages produced (B bytes), D delivered (offset O, F failed) in Tms: ..."
    line=$(grep ' messages produced ' "$log" | tail -n 1)
    n=$(sed -n 's/.*, \([0-9]*\) delivered .*/\1/p' <<<"$line")
    failed=$(sed -n 's/.* \([0-9]*\) failed).*/\1/p' <<<"$line")
    ms=$(sed -n 's/.* in \([0-9]*\)ms:.*/\1/p' <<<"$line")
    if [[ -z $n || -z $ms ]]; then
        row "$run" "$name" 0 "$WALL" - - - - - "$(cpu_pct "$t0" "$t1" "$WALL")" "$CLI" "FAIL $note"
        return
    fi
    ((failed > 0)) && note="$note $failed-failed"
    ((n < MSGS)) && note="$note PARTIAL"
    ((ms < 1000)) && note="$note short"
    [[ $acks == all ]] && DONE[$size]=$n TOPIC[$size]=$topic   # consume reads the acks=all topics
    row "$run" "$name" "$n" "$(awk -v ms="$ms" 'BEGIN { printf "%.2f", ms / 1000 }')" \
        "$(rate "$n" "$ms" '%.0f')" "$(awk -v b="$((n * size))" -v ms="$ms" 'BEGIN { printf (ms > 0 ? "%.2f" : "-"), b / ms / 1000 }')" \
        - - - "$(cpu_pct "$t0" "$t1" "$WALL")" "$CLI" "${note# }"
}

consume() { # run size
    local run=$1 size=$2 name="consume ${2}B from start" topic=${TOPIC[$2]:-} want=${DONE[$2]:-0}
    local log=$DIR/consume-s$size.log note t0 t1 line n bytes ms
    ((want > 0)) || { row "$run" "$name" 0 - - - - - - - - "SKIP nothing produced"; return; }
    t0=$(broker_ticks)
    run_client "$log" "$PERF" -C -t "$topic" -p 0 -b "$ADDR" -o beginning -e -c "$want" -i 1000 "${XTRA[@]}"
    t1=$(broker_ticks)
    note=$(rc_note $RC)
    # Final line: "% N messages (B bytes) consumed in Tms: R msgs/s (M MB/s)"
    line=$(grep ' consumed in ' "$log" | tail -n 1)
    n=$(sed -n 's/^% \([0-9]*\) messages .*/\1/p' <<<"$line")
    bytes=$(sed -n 's/^% [0-9]* messages (\([0-9]*\) bytes).*/\1/p' <<<"$line")
    ms=$(sed -n 's/.* consumed in \([0-9]*\)ms.*/\1/p' <<<"$line")
    if [[ -z $n || -z $ms ]]; then
        row "$run" "$name" 0 "$WALL" - - - - - "$(cpu_pct "$t0" "$t1" "$WALL")" "$CLI" "FAIL $note"
        return
    fi
    ((n < want)) && note="$note PARTIAL($n/$want)"
    ((ms < 1000)) && note="$note short"
    row "$run" "$name" "$n" "$(awk -v ms="$ms" 'BEGIN { printf "%.2f", ms / 1000 }')" \
        "$(rate "$n" "$ms" '%.0f')" "$(awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf (ms > 0 ? "%.2f" : "-"), b / ms / 1000 }')" \
        - - - "$(cpu_pct "$t0" "$t1" "$WALL")" "$CLI" "${note# }"
}

latency() { # run acks(1|all) with_consumer(0|1) [paced]
    local run=$1 acks=$2 e2e=$3 paced=${4:-}
    local topic=$TOPIC_BASE-r$run-lat$paced-a$acks-c$e2e tag=lat$paced-a$acks-c$e2e
    local plog=$DIR/$tag-producer.log pus=$DIR/$tag-producer.us
    local clog=$DIR/$tag-consumer.log cus=$DIR/$tag-consumer.us cpid= crc=0 note t0 t1 n p50 p99 max
    local name="lat ${paced:+$paced }ack acks=$acks" lat=lat${paced:+ $paced}
    ((e2e)) && name="$name +consumer"
    new_topic "$topic" || { row "$run" "$name" 0 - - - - - - - - "FAIL create topic"; return; }
    t0=$(broker_ticks)
    if ((e2e)); then
        # The consumer must already be waiting in Fetch when messages arrive,
        # else we would measure its start-up instead of the broker's wake-up.
        timeout -s INT -k 10 "$TIMEOUT" "$PERF" -C -t "$topic" -p 0 -b "$ADDR" -o beginning \
            -c "$LAT_MSGS" -l -A "$cus" -i 1000 "${XTRA[@]}" >"$clog" 2>&1 &
        cpid=$!
        sleep 2
    fi
    local a; a=$([[ $acks == all ]] && echo -1 || echo 1)
    if [[ -n $paced ]]; then
        # linger.ms=0 is its own default; the same payload, so the consumer times it too.
        run_client "$plog" "$PACED" -t "$topic" -p 0 -b "$ADDR" -s 100 -c "$LAT_MSGS" \
            -a "$a" -r "$LAT_RATE" -A "$pus" "${XTRA[@]}"
    else
        run_client "$plog" "$PERF" -P -t "$topic" -p 0 -b "$ADDR" -s 100 -c "$LAT_MSGS" \
            -a "$a" -r "$LAT_RATE" -l -A "$pus" -X linger.ms=0 -i 1000 "${XTRA[@]}"
    fi
    local prc=$RC pwall=$WALL pcli=$CLI
    if [[ -n $cpid ]]; then wait "$cpid"; crc=$?; fi
    t1=$(broker_ticks)
    note=$(rc_note $prc)
    n=$(wc -l <"$pus" 2>/dev/null || echo 0)
    ((n < LAT_MSGS)) && note="$note PARTIAL($n/$LAT_MSGS)"
    read -r p50 p99 max < <(percentiles "$pus")
    # Achieved rate (rdkafka_performance's -r limiter can fall short when the
    # CPU is busy): samples over the producer's wall time.
    row "$run" "$name" "$n" "$(printf '%.2f' "$pwall")" "$(awk -v n="$n" -v w="$pwall" 'BEGIN { printf (w > 0 ? "%.0f" : "-"), n / w }')" - \
        "$p50" "$p99" "$max" "$(cpu_pct "$t0" "$t1" "$pwall")" "$pcli" "${note# }"
    if ((e2e)); then
        note=$(rc_note $crc)
        n=$(wc -l <"$cus" 2>/dev/null || echo 0)
        ((n < LAT_MSGS)) && note="$note PARTIAL($n/$LAT_MSGS)"
        read -r p50 p99 max < <(percentiles "$cus")
        row "$run" "$lat e2e acks=$acks" "$n" - - - "$p50" "$p99" "$max" - - "${note# }"
    fi
}

# --- main ------------------------------------------------------------------------

VERSION=$({ "$PERF" -h 2>&1 || true; } | sed -n 's/^librdkafka version \([^ ]*\).*/\1/p' | head -n 1)
HEAD="# $LABEL at $ADDR, $(date -u +%Y-%m-%dT%H:%M:%SZ), rdkafka_performance (librdkafka $VERSION + tagged-field fix), $(nproc) cores
# SCENARIOS='${SCENARIOS# }' RUNS=$RUNS MSGS=$MSGS LAT_RATE=$LAT_RATE LAT_MSGS=$LAT_MSGS LAT_SKIP=$LAT_SKIP LAT_PACED=$LAT_PACED TIMEOUT=${TIMEOUT}s EXTRA_X='${EXTRA_X:-}'
# raw: $OUT"
echo "$HEAD" >&2
declare -A DONE TOPIC
for ((r = 1; r <= RUNS; r++)); do
    DIR=$OUT/run$r
    mkdir -p "$DIR"
    DONE=() TOPIC=()
    if want produce; then
        for size in 100 1024; do
            produce "$r" "$size" 1
            produce "$r" "$size" all
        done
        # Idempotence costs within the same run as plain acks=all (issue 8: within 10 %).
        produce "$r" 1024 idem
    fi
    if want idempotence; then
        # Only the pair issue 8 compares: 1 KiB acks=all, plain then idempotent.
        produce "$r" 1024 all
        produce "$r" 1024 idem
        [[ -x $WINDOW_PERF ]] && produce "$r" 1024 idemw
    fi
    if want consume; then
        consume "$r" 100
        consume "$r" 1024
    fi
    if want latency; then
        latency "$r" 1 0
        latency "$r" all 0
        latency "$r" all 1
        if ((LAT_PACED)); then
            latency "$r" 1 0 paced
            latency "$r" all 0 paced
            latency "$r" all 1 paced
        fi
    fi
done

# Medians over runs, per scenario and column ("-" values ignored); notes are
# joined so a flaky run stays visible.
awk -F'\t' -v OFS='\t' -v runs="$RUNS" '
    NR == 1 { next }
    !($2 in seen) { seen[$2] = 1; order[++k] = $2 }
    { for (c = 3; c <= 11; c++) if ($c != "-" && $c != "") vals[$2, c] = vals[$2, c] " " $c
      if ($12 != "") notes[$2] = notes[$2] (notes[$2] == "" ? "" : "; ") (runs > 1 ? "run" $1 ": " : "") $12 }
    function median(s,   a, n, i, j, t) {
        n = split(s, a, " "); if (n == 0) return "-"
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        if (n % 2) return a[(n + 1) / 2]
        # Even count: the mean of the middle two, kept integral for integral columns.
        return sprintf(a[n / 2] a[n / 2 + 1] ~ /\./ ? "%.2f" : "%.0f", (a[n / 2] + a[n / 2 + 1]) / 2)
    }
    END {
        print "scenario", "msgs", "secs", "msgs_per_s", "MB_per_s", "p50_ms", "p99_ms", "max_ms", "brk_pct", "cli_pct", "notes"
        for (i = 1; i <= k; i++) {
            s = order[i]; line = s
            for (c = 3; c <= 11; c++) line = line OFS median(vals[s, c])
            print line, notes[s]
        }
    }' "$RUNS_TSV" >"$OUT/summary.tsv"

{
    echo "$HEAD"
    ((RUNS > 1)) && echo "# medians of $RUNS runs (every run: runs.tsv)"
    awk -F'\t' '{ printf "%-32s %9s %7s %9s %8s %8s %8s %8s %5s %5s  %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$OUT/summary.tsv"
} | tee "$OUT/table.txt"

# Non-zero when any scenario failed outright, so scripts can notice.
! grep -q $'\tFAIL' "$RUNS_TSV"
