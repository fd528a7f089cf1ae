#!/usr/bin/env bash
# Docker cluster test: builds the image (docker/build.sh), starts docker/cluster.yml (three nodes,
# each broker and controller) under a project name of its own on free host ports, waits until
# every node lists all three brokers, creates a 3-partition topic of 3 replicas through one node
# and waits for every replica to be in sync (the followers copy their leaders over the internal
# network's INTERNAL listener), produces 100 keyed records from the host with kcat and reads them
# back through each node's address, restarts one container and checks the records again (and that
# the cluster takes new ones), then removes everything it created (`down -v`). Last, the network
# partition fault of protocol-tests/replication.rs on a cluster of its own: a leader cut off from
# the internal network (`docker network disconnect`) while its clients still reach it. Prints SKIP
# and exits 0 when no Docker engine or Compose tool answers.
#
# Environment: SLUICE_PORT1/2/3 (host ports; default free ones), SLUICE_IMAGE (default
# sluice:latest), SLUICE_TEST_SKIP_BUILD=1 (use the existing image instead of running
# docker/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
compose_file="$repo/docker/cluster.yml"

what="docker cluster"
# shellcheck source=protocol-tests/docker/lib.sh
source "$repo/protocol-tests/docker/lib.sh"
command -v python3 >/dev/null || fail "python3 is missing (free ports, the CreateTopics step)"
nodes=(1 2 3)
declare -A port
# Whether another node already has node $1's port.
port_taken() {
    local m
    for m in "${!port[@]}"; do
        [[ $m != "$1" && ${port[$m]} == "${port[$1]}" ]] && return 0
    done
    return 1
}
for n in "${nodes[@]}"; do
    var="SLUICE_PORT$n"
    port[$n]="${!var:-$(free_port)}"
    # Ports picked one at a time can repeat: pick again (a few times) when this one is taken.
    for _ in 1 2 3 4 5; do
        [[ -z ${!var:-} ]] && port_taken "$n" || break
        port[$n]=$(free_port)
    done
    export "SLUICE_PORT$n=${port[$n]}"
done
[[ ${port[1]} != "${port[2]}" && ${port[1]} != "${port[3]}" && ${port[2]} != "${port[3]}" ]] ||
    fail "the host ports must differ: ${port[*]}"
all_brokers="127.0.0.1:${port[1]},127.0.0.1:${port[2]},127.0.0.1:${port[3]}"
project="sluicecluster$$$(date +%s)"
volume_prefix="${project}_data"
image="${SLUICE_IMAGE:-sluice:latest}"
export SLUICE_ADVERTISE_HOST=127.0.0.1 SLUICE_IMAGE="$image" SLUICE_CLUSTER_VOLUME="$volume_prefix"
volumes=()
for n in "${nodes[@]}"; do volumes+=("$volume_prefix-node$n"); done

build_image "$image"
trap cleanup EXIT

# Healthy means the image's probe got an ApiVersions answer from inside each container.
wait_healthy() {
    local n id health=none
    for n in "${nodes[@]}"; do
        for _ in $(seq 1 120); do
            id=$(compose ps -q "node$n")
            if [[ -n $id ]]; then
                health=$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null || true)
                [[ $health == healthy ]] && continue 2
                [[ $(docker inspect -f '{{.State.Status}}' "$id" 2>/dev/null) == exited ]] &&
                    fail "node$n exited"
                # The restart policy brings a crashing node back: a loop of them is a failure.
                [[ $(docker inspect -f '{{.RestartCount}}' "$id" 2>/dev/null || echo 0) -lt 3 ]] ||
                    fail "node$n keeps exiting (restarted $(docker inspect -f '{{.RestartCount}}' "$id") times)"
            fi
            sleep 0.5
        done
        fail "node$n did not become healthy in 60s (last: $health)"
    done
}

# In the cluster: every node lists all three brokers, each at the host port it is published on.
wait_cluster() {
    local n b meta missing
    for n in "${nodes[@]}"; do
        for _ in $(seq 1 90); do
            meta=$(kcat -b "127.0.0.1:${port[$n]}" -L -m 5 2>&1 || true)
            missing=0
            for b in "${nodes[@]}"; do
                grep -q "broker $b at 127.0.0.1:${port[$b]}" <<<"$meta" || missing=1
            done
            [[ $missing == 0 ]] && continue 2
            sleep 1
        done
        echo "$meta" >&2
        fail "node$n does not list all three brokers at their published ports within 90s"
    done
}

# create_topic NAME PARTITIONS NODE: a CreateTopics v2 frame (replication factor 3,
# min.insync.replicas=2) to that node alone; prints the topic's error code. kcat has no admin commands, and a topic created by
# producing to it would get the broker's default partition count.
create_topic() {
    python3 - "$1" "$2" "${port[$3]}" <<'EOF'
import socket, struct, sys

name, partitions, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def string(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw

# Header v1: api key 19 (CreateTopics), version 2, correlation id 1, client id.
body = struct.pack(">hhi", 19, 2, 1) + string("cluster.sh")
# One topic: name, partitions, replication factor, no assignments, one config.
body += struct.pack(">i", 1) + string(name) + struct.pack(">ihi", partitions, 3, 0)
body += struct.pack(">i", 1) + string("min.insync.replicas") + string("2")
body += struct.pack(">i?", 10000, False)  # timeout_ms, validate_only
sock = socket.create_connection(("127.0.0.1", port), timeout=20)
sock.sendall(struct.pack(">i", len(body)) + body)

def read(n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            sys.exit("the broker closed the connection")
        buf += chunk
    return buf

(size,) = struct.unpack(">i", read(4))
resp = read(size)
# correlation id, throttle_time_ms, topic count, then the first topic's name and error code.
correlation, _throttle, count = struct.unpack(">iii", resp[:12])
if correlation != 1 or count != 1:
    sys.exit(f"unexpected answer: correlation id {correlation}, {count} topics")
(name_len,) = struct.unpack(">h", resp[12:14])
(code,) = struct.unpack(">h", resp[14 + name_len:16 + name_len])
print(code)
EOF
}

# consume NODE TOPIC COUNT: COUNT records of every partition as key:value, bootstrapped at
# NODE alone (kcat then fetches each partition from its leader), sorted.
consume() {
    timeout 60 kcat -b "127.0.0.1:${port[$1]}" -C -t "$2" -e -o beginning -q -m 15 -f '%k:%s\n' -c "$3" |
        sort
}

# check_all TOPIC EXPECTED: every node's bootstrap reads back exactly EXPECTED.
check_all() {
    local n count
    count=$(wc -l <"$2")
    for n in "${nodes[@]}"; do
        consume "$n" "$1" "$count" >"$work/got" || fail "consume through node$n failed"
        diff -q "$2" "$work/got" >/dev/null || {
            diff "$2" "$work/got" | head
            fail "records read through node$n differ from those produced"
        }
        echo "   node$n: all $count records"
    done
}

step "compose up (project $project, host ports ${port[*]})"
out=$(compose up -d 2>&1) || { echo "$out" >&2; fail "compose up failed"; }
wait_healthy
wait_cluster
echo "   every node lists the three brokers"

topic=cluster-test
step "create $topic (3 partitions, 3 replicas) through node2"
created=0
tries=0
for _ in $(seq 1 30); do
    tries=$((tries + 1))
    code=$(create_topic "$topic" 3 2 2>"$work/create.err") || code="no answer: $(cat "$work/create.err")"
    # An earlier attempt that failed may have committed all the same.
    if [[ $code == 0 ]] || [[ $code == 36 && $tries -gt 1 ]]; then
        created=1
        break
    fi
    echo "   CreateTopics: $code; retrying"
    sleep 1
done
[[ $created == 1 ]] || fail "CreateTopics through node2 did not succeed in 30 attempts (last: $code)"

leaders=""
for _ in $(seq 1 30); do
    leaders=$(kcat -b "$all_brokers" -L -t "$topic" -m 5 2>/dev/null | sed -n 's/.*partition \([0-9]*\), leader \(-\?[0-9]*\),.*/\1:\2/p' | sort)
    if [[ $(grep -c ':[123]$' <<<"$leaders") == 3 ]]; then break; fi
    sleep 1
done
[[ $(grep -c ':[123]$' <<<"$leaders") == 3 ]] ||
    fail "$topic does not have 3 partitions each led by a node: $(tr '\n' ' ' <<<"$leaders")"
echo "   partition:leader $(tr '\n' ' ' <<<"$leaders")"

# Every partition's three replicas in sync: the followers fetch from their leaders over INTERNAL.
in_sync=0
for _ in $(seq 1 30); do
    in_sync=$(kcat -b "$all_brokers" -L -t "$topic" -m 5 2>/dev/null | grep -cE 'replicas: [123],[123],[123], isrs: [123],[123],[123]$' || true)
    [[ $in_sync == 3 ]] && break
    sleep 1
done
[[ $in_sync == 3 ]] || {
    kcat -b "$all_brokers" -L -t "$topic" -m 5 >&2 || true
    fail "$topic: $in_sync of 3 partitions have all 3 replicas in sync within 30s"
}
echo "   every partition has 3 replicas, all in sync"

n=100
for i in $(seq 1 $n); do echo "k$i:value-$i"; done >"$work/produced"
sort "$work/produced" >"$work/expected"

step "produce $n keyed records (acks=all) through all three nodes"
kcat -b "$all_brokers" -P -t "$topic" -K: -X acks=all -m 30 <"$work/produced" || fail "produce failed"
check_all "$topic" "$work/expected"

step "compose restart node2"
out=$(compose restart node2 2>&1) || { echo "$out" >&2; fail "compose restart node2 failed"; }
wait_healthy
wait_cluster
# Read the whole log first: `grep -q` stops reading at its match, and under pipefail the
# writer's SIGPIPE would fail the test although the line is there.
logs=$(compose logs --no-color node2 2>&1)
grep -q "shutting down" <<<"$logs" ||
    fail "node2 did not log a clean shutdown (SIGTERM not handled?)"

step "records survive the restart"
check_all "$topic" "$work/expected"

step "the cluster takes records after the restart"
for i in $(seq 1 10); do echo "after$i:after-restart-$i"; done >"$work/after"
kcat -b "$all_brokers" -P -t "$topic" -K: -X acks=all -m 30 <"$work/after" || fail "produce after restart failed"
sort "$work/produced" "$work/after" >"$work/expected2"
check_all "$topic" "$work/expected2"

step "a leader cut off from the cluster (network partition), on a cluster of its own"
compose down -v --remove-orphans >/dev/null 2>&1 || true
SLUICE_DOCKER_IMAGE="$image" timeout 600 cargo test -q --test replication -- a_leader_cut_off --nocapture ||
    fail "the network partition trial failed"

status=0
