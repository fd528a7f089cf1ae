#!/usr/bin/env bash
# Many trials of each fault of protocol-tests/replication.rs (kill -9 of a leader, SIGSTOP of a
# leader, rolling restart, kill -9 of every node, a power cut of every node, a full disk under
# a leader (root, to mount their volumes), and on the docker cluster a leader cut off by a network partition), which the test
# command runs once each. Not part of the test command
# (protocol-tests/test.sh): about a minute per trial, half that for cut_leader.
#
#   protocol-tests/faults.sh [TRIALS] [FAULT...]   default: 20 trials of each fault
#   FAULT: kill_leader pause_leader rolling_restart kill_all power_cut disk_full cut_leader
#   (cut_leader needs the image: docker/build.sh first; SLUICE_DOCKER_IMAGE, default
#   sluice:latest, names it)
#
# Environment:
#   SLUICE_FAULTS_RELEASE=1   optimised build (debug assertions and overflow checks kept on,
#                             as fuzz.sh does), after a release build of the tests; the
#                             default is the debug build the test command uses
#   SLUICE_CLUSTER_LOG=...    the nodes' RUST_LOG (common/cluster.rs)
#
# Each trial prints one `TRIAL fault=... key=value...` line (replication.rs); this script keeps
# them in a log under target/ and prints, per fault, the trials run and failed and the sums of
# the checker's counts. Exit status: 1 if any trial broke a guarantee.
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "faults.sh: TRIALS must be a positive whole number, not '$trials'" >&2; exit 2; }
shift $(( $# > 0 ? 1 : 0 ))
faults=("$@")
(( ${#faults[@]} )) || faults=(kill_leader pause_leader rolling_restart kill_all power_cut disk_full cut_leader)

declare -A test_of=(
    [kill_leader]=killing_the_leader_loses_no_acknowledged_write_and_the_group_goes_on
    [pause_leader]=a_paused_leader_is_replaced_and_its_writes_as_a_zombie_never_surface
    [rolling_restart]=a_rolling_restart_under_load_loses_no_acknowledged_write
    [kill_all]=killing_every_node_at_once_loses_no_acknowledged_write
    [power_cut]=a_power_cut_of_every_node_loses_no_acknowledged_write
    [disk_full]=a_leader_whose_disk_fills_under_load_loses_no_acknowledged_write
    [cut_leader]=a_leader_cut_off_from_the_cluster_acknowledges_nothing_and_truncates_when_healed
)
export SLUICE_DOCKER_IMAGE=${SLUICE_DOCKER_IMAGE:-sluice:latest}
for fault in "${faults[@]}"; do
    [[ -n ${test_of[$fault]:-} ]] || { echo "faults.sh: unknown fault '$fault' (one of: ${!test_of[*]})" >&2; exit 2; }
done

profile=()
if [[ ${SLUICE_FAULTS_RELEASE:-} == 1 ]]; then
    profile=(--release)
    export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
fi
cargo test "${profile[@]}" --test replication --no-run || exit 1

mkdir -p target
log=target/faults-$(date +%Y%m%d-%H%M%S).log
echo "faults.sh: $trials trial(s) of ${faults[*]}; full output in $log"
status=0
for fault in "${faults[@]}"; do
    start=$SECONDS
    SLUICE_FAULT_TRIALS=$trials cargo test "${profile[@]}" --test replication -- \
        --exact "${test_of[$fault]}" --nocapture --test-threads=1 >>"$log" 2>&1 || status=1
    echo "=== $fault: $((SECONDS - start)) s"
    grep "^TRIAL fault=$fault " "$log" | tail -n "$trials"
done

echo
echo "totals per fault (trials that did not finish print no TRIAL line):"
grep '^TRIAL ' "$log" | awk '
    {
        delete kv
        for (i = 2; i <= NF; i++) {
            split($i, pair, "=")
            kv[pair[1]] = pair[2]
        }
        fault = kv["fault"]
        trials[fault]++
        if (kv["violations"] > 0) failed[fault]++
        for (key in kv) if (key != "fault" && key != "trial") sum[fault, key] += kv[key]
    }
    END {
        n = split("acknowledged lost duplicated duplicated_idempotent divergent unknown failed unexpected group_missing group_rewinds violations", order, " ")
        for (fault in trials) {
            line = sprintf("%-16s trials=%d failed_trials=%d", fault, trials[fault], failed[fault])
            for (j = 1; j <= n; j++) line = line sprintf(" %s=%d", order[j], sum[fault, order[j]])
            line = line sprintf(" mean_seconds=%.1f", sum[fault, "seconds"] / trials[fault])
            print line
        }
    }'
exit $status
