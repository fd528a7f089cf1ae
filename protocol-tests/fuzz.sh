#!/usr/bin/env bash
# A longer run of the fuzzer in protocol-tests/fuzz.rs (request decoding, record batch
# validation, log recovery), which `cargo test` runs for about a second per target.
#
#   protocol-tests/fuzz.sh [SECONDS] [TEST_FILTER]    default: 60 seconds per target, all of them
#
# Environment (read by fuzz.rs):
#   SLUICE_FUZZ_SEED=0x...   only this seed; a failure prints its seed and case
#   SLUICE_FUZZ_CASE=N       with SLUICE_FUZZ_SEED, that seed's cases up to N: the replay
#   SLUICE_FUZZ_RELEASE=1    build optimised (debug assertions and overflow checks kept on):
#                            many more cases per second, after a release build of the tests
#
# Each target prints its seeds, how many cases ran and what became of them.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
filter=()
[[ -n ${2:-} ]] && filter=("$2")
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2; }
export SLUICE_FUZZ_MS=$((seconds * 1000))
profile=()
if [[ ${SLUICE_FUZZ_RELEASE:-} == 1 ]]; then
    profile=(--release)
    export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
fi
# One thread per target, side by side; the address-space test runs once, quickly.
exec cargo test "${profile[@]}" --test fuzz -- --nocapture --test-threads=3 "${filter[@]}"
