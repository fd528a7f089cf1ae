# Shared by the Docker tests (sourced, with `what` set to the test's name): messages, the Docker
# engine and Compose tool checks (SKIP when absent), kcat (installed with apt-get as root when
# missing) and free host ports.
# shellcheck shell=bash
: "${what:?set what before sourcing lib.sh}"

skip() { echo "SKIP $what: $*"; exit 0; }
fail() { echo "FAIL $what: $*" >&2; exit 1; }
step() { echo "== $*"; }

command -v docker >/dev/null || skip "no docker command"
docker info >/dev/null 2>&1 || skip "no Docker engine answers (docker info failed)"
if docker compose version >/dev/null 2>&1; then
    compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null && docker-compose version >/dev/null 2>&1; then
    compose_cmd=(docker-compose)
else
    skip "no Compose tool (neither 'docker compose' nor 'docker-compose')"
fi
export compose_cmd

if ! command -v kcat >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        step "installing kcat"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null 2>&1 ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }
    fi
    command -v kcat >/dev/null || fail "kcat is missing and could not be installed"
fi

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The Compose project of the test: set `project` (and `compose_file`) before calling these, and
# list in `volumes` the named volumes that `compose down -v` must remove.
compose() { "${compose_cmd[@]}" -p "$project" -f "$compose_file" "$@"; }

status=1
work=$(mktemp -d)
# On exit: the containers' logs when the test failed, the project and its volumes removed (a
# volume left behind fails the test), the verdict.
cleanup() {
    local volume
    if [[ $status != 0 ]]; then
        echo "-- container logs" >&2
        compose logs --no-color --tail 50 >&2 2>&1 || true
    fi
    compose down -v --remove-orphans >/dev/null 2>&1 || true
    for volume in "${volumes[@]}"; do
        if docker volume inspect "$volume" >/dev/null 2>&1; then
            echo "compose down -v left the volume $volume; removing it" >&2
            docker volume rm "$volume" >/dev/null || true
            status=1
        fi
    done
    rm -rf "$work"
    if [[ $status == 0 ]]; then echo "PASS $what"; else echo "FAIL $what" >&2; fi
    exit "$status"
}

# Builds the image (unless SLUICE_TEST_SKIP_BUILD=1) and checks that it exists.
build_image() {
    local image=$1 start
    if [[ ${SLUICE_TEST_SKIP_BUILD:-0} != 1 ]]; then
        step "building the image (docker/build.sh)"
        start=$(date +%s)
        docker/build.sh "$image"
        echo "   image built in $(($(date +%s) - start))s"
    fi
    docker image inspect "$image" >/dev/null 2>&1 || fail "no image $image"
}
