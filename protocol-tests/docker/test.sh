#!/usr/bin/env bash
# Docker test: builds the image (docker/build.sh), starts docker/docker-compose.yml under a
# project name of its own on a free host port, produces and consumes from the host with kcat,
# restarts the container and checks the records survived, replaces the container (down, up)
# and checks them again (they live in the named volume), then removes everything it created
# (`down -v`). Prints SKIP and exits 0 when no Docker engine or Compose tool answers.
#
# Environment: SLUICE_PORT (host port; default a free one), SLUICE_TEST_SKIP_BUILD=1 (use the
# existing sluice:latest instead of running docker/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
compose_file="$repo/docker/docker-compose.yml"

what="docker"
# shellcheck source=protocol-tests/docker/lib.sh
source "$repo/protocol-tests/docker/lib.sh"
port="${SLUICE_PORT:-$(free_port)}"
project="sluicetest$$$(date +%s)"
broker="127.0.0.1:$port"
volume="${project}_data"
export SLUICE_PORT="$port" SLUICE_ADVERTISE_HOST=127.0.0.1 SLUICE_IMAGE=sluice:latest SLUICE_VOLUME="$volume"
volumes=("$volume")

build_image sluice:latest
trap cleanup EXIT

# Healthy means the image's probe got an ApiVersions answer from inside the container.
wait_healthy() {
    local id health
    for _ in $(seq 1 120); do
        id=$(compose ps -q sluice)
        if [[ -n $id ]]; then
            health=$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null || true)
            [[ $health == healthy ]] && return 0
            [[ $(docker inspect -f '{{.State.Status}}' "$id" 2>/dev/null) == exited ]] &&
                fail "the container exited"
        fi
        sleep 0.5
    done
    fail "the container did not become healthy in 60s (last: ${health:-none})"
}

wait_port() {
    for _ in $(seq 1 60); do
        kcat -b "$broker" -L -m 2 >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    fail "no broker answers at $broker"
}

# consume TOPIC COUNT: every record from the beginning as key:value, in partition order.
consume() {
    kcat -b "$broker" -C -t "$1" -e -o beginning -q -m 15 -f '%k:%s\n' -c "$2"
}

step "compose up (project $project, host port $port)"
out=$(compose up -d 2>&1) || { echo "$out" >&2; fail "compose up failed"; }
wait_healthy
wait_port
echo "   healthy, answering at $broker"

id=$(compose ps -q sluice)
user=$(docker inspect -f '{{.Config.User}}' "$id")
[[ $user == 65532:65532 ]] || fail "container runs as '$user', expected 65532:65532"

step "metadata advertises $broker"
meta=$(kcat -b "$broker" -L -m 10)
grep -q "broker 1 at $broker" <<<"$meta" || fail "advertised listener is not $broker: $meta"

topic=docker-test
n=200
for i in $(seq 1 $n); do echo "k$i:value-$i"; done >"$work/expected"

step "produce $n records (acks=all)"
kcat -b "$broker" -P -t "$topic" -K: -X acks=all -m 30 <"$work/expected" || fail "produce failed"
consume "$topic" "$n" >"$work/got" || fail "consume failed"
diff -q "$work/expected" "$work/got" >/dev/null || {
    diff "$work/expected" "$work/got" | head
    fail "consumed records differ from produced"
}
echo "   consumed $n records back"

step "compose restart"
out=$(compose restart 2>&1) || { echo "$out" >&2; fail "compose restart failed"; }
wait_healthy
wait_port
started=$(docker inspect -f '{{.State.StartedAt}}' "$(compose ps -q sluice)")
echo "   restarted at $started"
# Read the whole log first: `grep -q` stops reading at its match, and under pipefail the
# writer's SIGPIPE would fail the test although the line is there.
logs=$(compose logs --no-color sluice 2>&1)
grep -q "shutting down" <<<"$logs" ||
    fail "the broker did not log a clean shutdown (SIGTERM not handled?)"

step "records survive the restart"
consume "$topic" "$n" >"$work/got" || fail "consume after restart failed"
diff -q "$work/expected" "$work/got" >/dev/null || {
    diff "$work/expected" "$work/got" | head
    fail "records after restart differ"
}
echo "   all $n records still there"

step "produce after restart continues the log"
echo "k-after:after-restart" | kcat -b "$broker" -P -t "$topic" -K: -X acks=all -m 30 || fail "produce after restart failed"
last=$(kcat -b "$broker" -C -t "$topic" -e -o -1 -q -m 15 -f '%o %k:%s\n' -c 1)
[[ $last == "$n k-after:after-restart" ]] || fail "expected offset $n for the new record, got: $last"
echo "   new record at offset $n"

step "compose down (keeping the volume) and up: a new container on the same volume"
old_id=$(compose ps -q sluice)
out=$(compose down 2>&1) || { echo "$out" >&2; fail "compose down failed"; }
docker volume inspect "$volume" >/dev/null 2>&1 || fail "named volume $volume is missing"
out=$(compose up -d 2>&1) || { echo "$out" >&2; fail "compose up after down failed"; }
wait_healthy
wait_port
[[ $(compose ps -q sluice) != "$old_id" ]] || fail "expected a new container"
printf '%s\n' "$(cat "$work/expected")" "k-after:after-restart" >"$work/expected2"
consume "$topic" $((n + 1)) >"$work/got" || fail "consume after down/up failed"
diff -q "$work/expected2" "$work/got" >/dev/null || {
    diff "$work/expected2" "$work/got" | head
    fail "records after down/up differ"
}
echo "   all $((n + 1)) records read from the volume by a new container"

status=0
