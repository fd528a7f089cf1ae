# Shared by the bench scripts that measure the kernel's cost per byte written (produce_cpu.sh,
# write_paths.sh): sourced after `set -uo pipefail`. On a VM whose balloon reports free pages to
# the host (virtio free page reporting), the first touch of a page the host took back costs
# several times the copy into it, so which pages a run gets decides its figure.
#
# page_reporting_setup CLEANUP: with PAGE_REPORTING=off, stops the reporting (page_reporting_order
# past the largest order), touches WARM_GIB GiB once so that the freed pages stay backed, and sets
# an EXIT trap that puts the setting back and then runs CLEANUP. Sets REPORTING to a line saying
# which state the runs use.
page_reporting_setup() {
    local cleanup=$1 order=/sys/module/page_reporting/parameters/page_reporting_order
    REPORTING="not reported (no $order)"
    [[ -w $order ]] || return 0
    REPORTING="free page reporting on (order $(cat "$order"))"
    [[ ${PAGE_REPORTING:-on} == off ]] || return 0
    PAGE_REPORTING_WAS=$(cat "$order")
    # shellcheck disable=SC2064 # the values are meant to be fixed now
    trap "echo $PAGE_REPORTING_WAS >$order; $cleanup" EXIT
    echo 11 >"$order" # past MAX_PAGE_ORDER (10): no free block is reported
    dd if=/dev/zero of=/dev/shm/sluice-warm bs=1M count=$((${WARM_GIB:-14} * 1024)) status=none
    rm -f /dev/shm/sluice-warm
    REPORTING="free page reporting off for the runs, ${WARM_GIB:-14} GiB touched first"
}
