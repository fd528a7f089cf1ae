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
