#!/usr/bin/env bash
# Build the benchmark's load generator outside the repository.
#
#   protocol-tests/bench/build.sh [DIR]     DIR defaults to $SLUICE_BENCH_TOOLS,
#                                           else /tmp/sluice-bench-tools
#
# Produces DIR/bin/rdkafka_performance (librdkafka's own load generator),
# DIR/bin/sluice_mktopic (CreateTopics + wait for leaders) and DIR/bin/sluice_latency
# (a producer paced by sleeping, for the latency rows), all statically
# linked against librdkafka built from Debian's source package, so the numbers
# come from the same client code that Debian users run (librdkafka 2.0.2 on
# bookworm), with exactly one upstream fix applied (see step 3).
#
# Idempotent and cheap when already built (each step checks its output).
# Output goes to DIR/build.log; on failure its tail is printed.
# Needs root for apt-get, as on the project's machines.
set -euo pipefail

DIR=${1:-${SLUICE_BENCH_TOOLS:-/tmp/sluice-bench-tools}}
mkdir -p "$DIR/bin" "$DIR/src"
DIR=$(cd "$DIR" && pwd)
LOG=$DIR/build.log
: >"$LOG"
JOBS=$(nproc 2>/dev/null || echo 2)

die() {
    echo "build.sh: FAILED: $*" >&2
    echo "---- tail of $LOG ----" >&2
    tail -n 30 "$LOG" >&2 || true
    exit 1
}
say() { echo "build.sh: $*"; echo "### $*" >>"$LOG"; }

export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=0
apt_update() { # once per run: apt-get source/install need fresh lists
    ((APT_UPDATED)) && return 0
    apt-get update -q >>"$LOG" 2>&1 || die "apt-get update"
    APT_UPDATED=1
}

# 1. Build dependencies.  librdkafka's configure probes for these; without the
#    -dev packages it silently builds without the codec/feature, which would
#    make the binary differ from Debian's.
need=()
for p in gcc make libc6-dev pkg-config python3 dpkg-dev \
         zlib1g-dev libssl-dev libsasl2-dev libzstd-dev liblz4-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if ((${#need[@]})); then
    say "apt-get install ${need[*]}"
    apt_update
    apt-get install -y -q --no-install-recommends "${need[@]}" >>"$LOG" 2>&1 ||
        die "apt-get install ${need[*]}"
fi

# 2. librdkafka source from Debian.  Stock images ship only "Types: deb"
#    entries, so add a deb-src twin of Debian's own sources file (same mirrors,
#    same snapshot, same signing key) when apt-get source cannot find it.
VER=2.0.2
SRC=$DIR/src/librdkafka-$VER
if [[ ! -x $SRC/configure ]]; then
    say "apt-get source librdkafka=$VER"
    if ! (cd "$DIR/src" && apt-get source -q "librdkafka=$VER-1" >>"$LOG" 2>&1); then
        debsrc=/etc/apt/sources.list.d/sluice-deb-src.sources
        if [[ ! -e $debsrc && -r /etc/apt/sources.list.d/debian.sources ]]; then
            say "enabling deb-src in $debsrc"
            sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$debsrc"
        elif [[ ! -e $debsrc && -r /etc/apt/sources.list ]]; then
            grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' >"${debsrc%.sources}.list"
        fi
        APT_UPDATED=0
        apt_update
        (cd "$DIR/src" && apt-get source -q "librdkafka=$VER-1" >>"$LOG" 2>&1) ||
            die "apt-get source librdkafka=$VER-1"
    fi
    [[ -x $SRC/configure ]] || die "apt-get source did not unpack $SRC"
fi

# 3. The one fix.  librdkafka < 2.2.0 skips only (len - 1) bytes of each
#    KIP-482 tagged field it does not know (rd_kafka_buf_skip_tags), so the
#    first response that carries a tagged field (e.g. ApiVersions v3 with
#    SupportedFeatures) is misparsed: "ApiVersionRequest failed: Local: Read
#    underflow" and the client never connects.  Upstream fixed it in 2.2.0
#    (confluentinc/librdkafka PR 4278); the same two-token change goes here so
#    the benchmark measures the broker, not this client bug.  NOTE: Debian's own
#    librdkafka1 (and so Debian's kcat and confluent-kafka built against it) keep
#    the bug, so Sluice should avoid non-empty tagged fields in responses that
#    such clients read, and protocol-tests/clients/test_kcat.sh checks that.
BUF_H=$SRC/src/rdkafka_buf.h
if grep -q '(size_t)(_taglen - 1)' "$BUF_H"; then
    say "patching rd_kafka_buf_skip_tags off-by-one (upstream PR 4278)"
    sed -i -e 's/if (_taglen > 1)/if (_taglen > 0)/' \
        -e 's/(size_t)(_taglen - 1)/(size_t)(_taglen)/' "$BUF_H"
fi
# Verify rather than trust sed: a missed patch gives misleading "broker"
# failures much later.
grep -q '(size_t)(_taglen)' "$BUF_H" && ! grep -q '_taglen - 1' "$BUF_H" ||
    die "tagged-field patch not applied to $BUF_H (source layout changed?)"

# 4. The library: upstream's own mklove configure, no network (--no-download),
#    installed into DIR/prefix so helpers can link its static archive.
PREFIX=$DIR/prefix
if [[ ! -f $SRC/Makefile.config ]]; then
    say "configure librdkafka"
    (cd "$SRC" && ./configure --prefix="$PREFIX" --no-download --disable-curl) \
        >>"$LOG" 2>&1 || die "configure"
fi
if [[ ! -f $PREFIX/lib/librdkafka.a || $BUF_H -nt $PREFIX/lib/librdkafka.a ]]; then
    say "make librdkafka -j$JOBS (a minute or two on 2 cores)"
    make -C "$SRC/src" -j"$JOBS" >>"$LOG" 2>&1 || die "make librdkafka"
    make -C "$SRC/src" install >>"$LOG" 2>&1 || die "make install"
fi

# 5. rdkafka_performance, the upstream example, unmodified.
if [[ ! -x $DIR/bin/rdkafka_performance || $PREFIX/lib/librdkafka.a -nt $DIR/bin/rdkafka_performance ]]; then
    say "make rdkafka_performance"
    rm -f "$SRC/examples/rdkafka_performance"
    make -C "$SRC/examples" rdkafka_performance >>"$LOG" 2>&1 || die "make rdkafka_performance"
    install -m 0755 "$SRC/examples/rdkafka_performance" "$DIR/bin/"
fi

# helper SRC NAME: SRC.new (just written) replaces SRC only when it differs, so
# the mtime check stays meaningful; then DIR/bin/NAME is compiled from it when
# missing or older than SRC or the library. The static archive's own link flags
# (ssl, sasl, zstd, lz4, z) come from the pkg-config file that make install wrote.
helper() {
    local src=$1 name=$2
    cmp -s "$src.new" "$src" && rm -f "$src.new" || mv "$src.new" "$src"
    if [[ ! -x $DIR/bin/$name || $src -nt $DIR/bin/$name || $PREFIX/lib/librdkafka.a -nt $DIR/bin/$name ]]; then
        say "cc $name"
        # shellcheck disable=SC2046
        gcc -O2 -Wall -std=gnu11 -I"$PREFIX/include" -o "$DIR/bin/$name" "$src" \
            "$PREFIX/lib/librdkafka.a" \
            $(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --static --libs-only-l --libs-only-L rdkafka-static 2>/dev/null |
              sed 's/-lrdkafka\b//') \
            -lpthread -lm -ldl -lrt >>"$LOG" 2>&1 || die "cc $name"
    fi
}

# 6. sluice_mktopic: bench.sh wants every topic created explicitly with one
#    partition (not auto-created with the broker's num.partitions), and wants
#    to start producing only once the partition has a leader.
MK_C=$DIR/src/sluice_mktopic.c
cat >"$MK_C.new" <<'EOF'
/* sluice_mktopic -b ADDR -t TOPIC [-p PARTITIONS] [-w WAIT_S]
 * CreateTopics (replication factor 1), then poll Metadata until every
 * partition has a leader.  Exit 0 when ready (TOPIC_ALREADY_EXISTS counts as
 * ready too), 1 otherwise; the reason goes to stderr. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ready(rd_kafka_t *rk, const char *topic, int parts) {
        const struct rd_kafka_metadata *md;
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
        int ok = 0;
        if (rd_kafka_metadata(rk, 0, rkt, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                const struct rd_kafka_metadata_topic *t = &md->topics[0];
                ok = md->topic_cnt == 1 && !t->err && t->partition_cnt == parts;
                for (int i = 0; ok && i < t->partition_cnt; i++)
                        ok = t->partitions[i].leader >= 0 && !t->partitions[i].err;
                rd_kafka_metadata_destroy(md);
        }
        rd_kafka_topic_destroy(rkt);
        return ok;
}

int main(int argc, char **argv) {
        const char *addr = NULL, *topic = NULL;
        int parts = 1, wait_s = 20, c;
        char err[512];
        while ((c = getopt(argc, argv, "b:t:p:w:")) != -1) {
                if (c == 'b') addr = optarg;
                else if (c == 't') topic = optarg;
                else if (c == 'p') parts = atoi(optarg);
                else if (c == 'w') wait_s = atoi(optarg);
                else return 1;
        }
        if (!addr || !topic) {
                fprintf(stderr, "usage: sluice_mktopic -b ADDR -t TOPIC [-p N] [-w S]\n");
                return 1;
        }
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        /* Metadata requests for a topic must not auto-create it behind our back. */
        rd_kafka_conf_set(conf, "allow.auto.create.topics", "false", err, sizeof err);
        if (rd_kafka_conf_set(conf, "bootstrap.servers", addr, err, sizeof err) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "sluice_mktopic: %s\n", err);
                return 1;
        }
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
        if (!rk) {
                fprintf(stderr, "sluice_mktopic: %s\n", err);
                return 1;
        }
        rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, parts, 1, err, sizeof err);
        rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
        rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, wait_s * 1000);
        int rc = 1;
        if (!ev) {
                fprintf(stderr, "sluice_mktopic: CreateTopics: no answer in %d s\n", wait_s);
                goto out;
        }
        if (rd_kafka_event_error(ev)) {
                fprintf(stderr, "sluice_mktopic: CreateTopics: %s\n", rd_kafka_event_error_string(ev));
                goto out;
        }
        size_t n;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
        for (size_t i = 0; i < n; i++) {
                rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);
                if (e && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
                        fprintf(stderr, "sluice_mktopic: %s: %s\n", rd_kafka_topic_result_name(res[i]),
                                rd_kafka_err2str(e));
                        goto out;
                }
        }
        for (time_t end = time(NULL) + wait_s; time(NULL) < end; usleep(100 * 1000))
                if ((rc = !ready(rk, topic, parts)) == 0)
                        break;
        if (rc)
                fprintf(stderr, "sluice_mktopic: %s: no leader for all %d partitions after %d s\n",
                        topic, parts, wait_s);
out:
        if (ev)
                rd_kafka_event_destroy(ev);
        rd_kafka_NewTopic_destroy(nt);
        rd_kafka_queue_destroy(q);
        rd_kafka_destroy(rk);
        return rc;
}
EOF
helper "$MK_C" sluice_mktopic

# 6b. sluice_latency: a producer paced by sleeping. rdkafka_performance -r
#     paces by calling rd_kafka_poll(rk, 0) until the next send is due, so at
#     1,000 msg/s its main thread spins on one of this machine's two cores and
#     the broker's threads wait behind it for a core (`perf sched`: wake-ups
#     waiting up to 2 ms). This one sleeps until each send is due
#     (clock_nanosleep), and a second thread blocks in rd_kafka_poll, so each
#     delivery report is timed as it arrives. Same payload ("LATENCY:<wall
#     clock us>", padded), so rdkafka_performance -C -l times it end to end.
LAT_C=$DIR/src/sluice_latency.c
cat >"$LAT_C.new" <<'EOF'
/* sluice_latency -b ADDR -t TOPIC [-p PARTITION] [-s SIZE] [-c COUNT] [-r RATE]
 *                [-a ACKS] [-A FILE] [-X key=value]...
 * Produces COUNT messages of SIZE bytes at RATE msg/s (linger.ms=0), each sent
 * when due, and writes each one's produce() -> delivery report time in
 * microseconds to FILE, one per line, in delivery order. Exit 0 when every
 * message was delivered without error, 1 otherwise. */
#define _GNU_SOURCE
#include <librdkafka/rdkafka.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static FILE *out;
static atomic_long delivered, failed;
static atomic_int stop;

static uint64_t wall_us(void) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

static void dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        uint64_t now = wall_us(), sent = (uint64_t)(uintptr_t)m->_private;
        (void)rk, (void)opaque;
        if (m->err) {
                if (atomic_fetch_add(&failed, 1) < 5)
                        fprintf(stderr, "sluice_latency: delivery failed: %s\n", rd_kafka_err2str(m->err));
                return;
        }
        atomic_fetch_add(&delivered, 1);
        if (out)
                fprintf(out, "%" PRIu64 "\n", now - sent);
}

/* Serves delivery reports as they arrive: rd_kafka_poll blocks until one is there. */
static void *poller(void *arg) {
        rd_kafka_t *rk = arg;
        while (!atomic_load(&stop))
                rd_kafka_poll(rk, 100);
        return NULL;
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v) {
        char err[512];
        if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "sluice_latency: %s\n", err);
                exit(1);
        }
}

int main(int argc, char **argv) {
        const char *addr = NULL, *topic = NULL, *file = NULL, *acks = "-1";
        int partition = 0, size = 100, c;
        long count = 10000;
        double rate = 1000;
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        set(conf, "linger.ms", "0");
        while ((c = getopt(argc, argv, "b:t:p:s:c:r:a:A:X:")) != -1) {
                char *eq;
                switch (c) {
                case 'b': addr = optarg; break;
                case 't': topic = optarg; break;
                case 'p': partition = atoi(optarg); break;
                case 's': size = atoi(optarg); break;
                case 'c': count = atol(optarg); break;
                case 'r': rate = atof(optarg); break;
                case 'a': acks = optarg; break;
                case 'A': file = optarg; break;
                case 'X':
                        if (!(eq = strchr(optarg, '='))) {
                                fprintf(stderr, "sluice_latency: -X wants key=value\n");
                                return 1;
                        }
                        *eq = '\0';
                        set(conf, optarg, eq + 1);
                        break;
                default: return 1;
                }
        }
        if (!addr || !topic || size < 32 || count < 1 || rate <= 0) {
                fprintf(stderr, "usage: sluice_latency -b ADDR -t TOPIC [-p P] [-s SIZE>=32] [-c N] [-r RATE] "
                                "[-a ACKS] [-A FILE] [-X k=v]...\n");
                return 1;
        }
        set(conf, "bootstrap.servers", addr);
        set(conf, "acks", acks);
        rd_kafka_conf_set_dr_msg_cb(conf, dr);
        if (file && !(out = fopen(file, "w"))) {
                perror(file);
                return 1;
        }
        char err[512];
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
        if (!rk) {
                fprintf(stderr, "sluice_latency: %s\n", err);
                return 1;
        }
        pthread_t th;
        pthread_create(&th, NULL, poller, rk);
        char *buf = malloc((size_t)size);
        struct timespec due;
        clock_gettime(CLOCK_MONOTONIC, &due);
        const long step_ns = (long)(1e9 / rate);
        for (long i = 0; i < count; i++) {
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
                uint64_t now = wall_us();
                int n = snprintf(buf, (size_t)size, "LATENCY:%" PRIu64, now);
                memset(buf + n, ' ', (size_t)(size - n));
                rd_kafka_resp_err_t e;
                while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                                              RD_KAFKA_V_VALUE(buf, (size_t)size),
                                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                              RD_KAFKA_V_OPAQUE((void *)(uintptr_t)now), RD_KAFKA_V_END)) ==
                       RD_KAFKA_RESP_ERR__QUEUE_FULL)
                        usleep(1000);
                if (e) {
                        fprintf(stderr, "sluice_latency: produce: %s\n", rd_kafka_err2str(e));
                        atomic_fetch_add(&failed, 1);
                }
                due.tv_nsec += step_ns;
                while (due.tv_nsec >= 1000000000L) {
                        due.tv_nsec -= 1000000000L;
                        due.tv_sec++;
                }
        }
        rd_kafka_flush(rk, 60 * 1000);
        atomic_store(&stop, 1);
        pthread_join(th, NULL);
        long ok = atomic_load(&delivered), bad = atomic_load(&failed);
        fprintf(stderr, "sluice_latency: %ld delivered, %ld failed, of %ld\n", ok, bad, count);
        if (out)
                fclose(out);
        rd_kafka_destroy(rk);
        free(buf);
        return ok == count && bad == 0 ? 0 : 1;
}
EOF
helper "$LAT_C" sluice_latency

# 7. Optional (CURRENT=1): rdkafka_performance of the librdkafka that the rdkafka
#    crate bundles (the version Rust users of `rdkafka` run, far newer than
#    Debian's), from cargo's own copy of the crate source: no download. Installed
#    as DIR/bin/rdkafka_performance-<version>; bench.sh takes it as PERF=.
if [[ ${CURRENT:-0} == 1 ]]; then
    CARGO_SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka 2>/dev/null | sort -V | tail -n 1)
    [[ -x $CARGO_SRC/configure ]] || die "no rdkafka-sys source in cargo's registry (run cargo build first)"
    CUR_VER=$(sed -n 's/.*rdkafka-sys-[^+]*+\([0-9.]*\)\/librdkafka$/\1/p' <<<"$CARGO_SRC")
    CUR_SRC=$DIR/src/librdkafka-$CUR_VER
    if [[ ! -x $DIR/bin/rdkafka_performance-$CUR_VER ]]; then
        say "librdkafka $CUR_VER from $CARGO_SRC"
        rm -rf "$CUR_SRC" && cp -a "$CARGO_SRC" "$CUR_SRC"
        (cd "$CUR_SRC" && ./configure --no-download --disable-curl --install-deps=no) >>"$LOG" 2>&1 ||
            (cd "$CUR_SRC" && ./configure --no-download --disable-curl) >>"$LOG" 2>&1 || die "configure $CUR_VER"
        make -C "$CUR_SRC/src" -j"$JOBS" >>"$LOG" 2>&1 || die "make librdkafka $CUR_VER"
        make -C "$CUR_SRC/examples" rdkafka_performance >>"$LOG" 2>&1 || die "make rdkafka_performance $CUR_VER"
        install -m 0755 "$CUR_SRC/examples/rdkafka_performance" "$DIR/bin/rdkafka_performance-$CUR_VER"
    fi
    echo "build.sh: ready: $DIR/bin/rdkafka_performance-$CUR_VER (librdkafka $CUR_VER, unmodified)"
fi

# 8. Optional (IDEMP_WINDOW=1): rdkafka_performance-reqwindow, librdkafka 2.0.2 whose
#    idempotent producer counts its 5-request window in requests. Stock librdkafka
#    (2.0.2 up to at least 2.12.1) subtracts the partition's in-flight *message* count
#    from 5 (rd_kafka_toppar_producer_serve), so with batches of more than 5 messages
#    it waits for every answer before it sends again: one request round trip at a
#    time, where the Java client keeps 5 requests in flight per partition
#    (max.in.flight.requests.per.connection). Upstream PR confluentinc/librdkafka#4989
#    proposes the same change. This build shows what the broker does for a client that
#    pipelines as the Java client does; it is a benchmark variant, never a test client.
#    The change: one more per-partition counter, raised when a batch is handed to a
#    ProduceRequest (rd_kafka_msgbatch_ready_produce) and lowered when its result is
#    handled (rd_kafka_msgbatch_handle_Produce_result), read in place of the message
#    count where the window is computed.
if [[ ${IDEMP_WINDOW:-0} == 1 ]]; then
    WIN_SRC=$DIR/src/librdkafka-$VER-reqwindow
    if [[ ! -x $DIR/bin/rdkafka_performance-reqwindow ]]; then
        say "librdkafka $VER with a request-counted idempotent window"
        rm -rf "$WIN_SRC" && cp -a "$SRC" "$WIN_SRC"
        make -C "$WIN_SRC" clean >>"$LOG" 2>&1 || true
        rm -f "$WIN_SRC/Makefile.config"
        s=$WIN_SRC/src
        # The field, before the message count; zeroed with the partition (rd_calloc).
        sed -i 's|^\(\s*\)rd_atomic32_t rktp_msgs_inflight;|\1rd_atomic32_t rktp_reqs_inflight; /* sluice bench: requests in flight */\n&|' \
            "$s/rdkafka_partition.h"
        sed -i 's|^\(\s*\)if (rd_atomic32_add(&rktp->rktp_msgs_inflight,|\1rd_atomic32_add(\&rktp->rktp_reqs_inflight, 1);\n&|' \
            "$s/rdkafka_msg.c"
        sed -i 's|^\(\s*\)last_inflight = !rd_atomic32_sub(&rktp->rktp_msgs_inflight,|\1rd_atomic32_sub(\&rktp->rktp_reqs_inflight, 1);\n&|' \
            "$s/rdkafka_request.c"
        sed -i 's|RD_KAFKA_IDEMP_MAX_INFLIGHT - inflight);|RD_KAFKA_IDEMP_MAX_INFLIGHT - rd_atomic32_get(\&rktp->rktp_reqs_inflight));|' \
            "$s/rdkafka_broker.c"
        for f in rdkafka_partition.h rdkafka_msg.c rdkafka_request.c rdkafka_broker.c; do
            grep -q rktp_reqs_inflight "$s/$f" || die "request-window patch did not apply to $f"
        done
        (cd "$WIN_SRC" && ./configure --no-download --disable-curl) >>"$LOG" 2>&1 || die "configure reqwindow"
        make -C "$WIN_SRC/src" -j"$JOBS" >>"$LOG" 2>&1 || die "make librdkafka reqwindow"
        rm -f "$WIN_SRC/examples/rdkafka_performance"
        make -C "$WIN_SRC/examples" rdkafka_performance >>"$LOG" 2>&1 || die "make rdkafka_performance reqwindow"
        install -m 0755 "$WIN_SRC/examples/rdkafka_performance" "$DIR/bin/rdkafka_performance-reqwindow"
    fi
    echo "build.sh: ready: $DIR/bin/rdkafka_performance-reqwindow (librdkafka $VER, idempotent window in requests)"
fi

# (rdkafka_performance prints its version in the usage text and exits 1.)
v=$({ "$DIR/bin/rdkafka_performance" -h 2>&1 || true; } | sed -n 's/^librdkafka version \([^ ]*\).*/\1/p' | head -n1)
echo "build.sh: ready: $DIR/bin (rdkafka_performance, librdkafka ${v:-?} + tagged-field fix; sluice_mktopic, sluice_latency)"
