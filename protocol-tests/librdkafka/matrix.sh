#!/usr/bin/env bash
# Turn the last run.sh run into a markdown section for compat-matrix.md: counts per group,
# then one row per test (result, what expected.txt expects, and why for the others).
#
#   protocol-tests/librdkafka/matrix.sh [RUN_DIR]     (default: $RDK_BUILD_DIR/last-run,
#                                                      RDK_BUILD_DIR defaulting to /tmp/sluice-rdk)
#
# Writes the section to protocol-tests/librdkafka/last-results.md and to stdout. Tests listed
# in expected.txt but not in that run appear as "not run". When a test ran in several runs,
# only the given run counts: run every group in one run.sh call for a complete picture
# (e.g. `run.sh all`).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${1:-${RDK_BUILD_DIR:-/tmp/sluice-rdk}/last-run}
[[ -f $RUN/results.tsv ]] || { echo "matrix.sh: no $RUN/results.tsv (run run.sh first)" >&2; exit 2; }
MD=$HERE/last-results.md

info() { sed -n "s/^$1=//p" "$RUN/run.info" 2>/dev/null | head -n1; }

awk -F'\t' -v OFS='' \
    -v date="$(info date)" -v sluice="$(info sluice)" -v rdk="$(info librdkafka)" \
    -v kver="$(info kafka_version)" -v quick="$(info quick)" -v scen="$(info scenario)" \
    -v args="$(info args)" '
    function cell(s) { gsub(/\|/, "\\|", s); return s }
    # expected.txt: test name group expectation reason...
    FILENAME ~ /expected\.txt$/ {
        line = $0; sub(/#.*/, "", line)
        n = split(line, f, /[ \t]+/)
        if (f[1] == "") { for (i = 1; i < n; i++) f[i] = f[i + 1]; n-- }
        if (n < 4) next
        t = f[1]; order[++cnt] = t; name[t] = f[2]; group[t] = f[3]; ex[t] = f[4]
        r = ""; for (i = 5; i <= n; i++) r = r (r == "" ? "" : " ") f[i]; why[t] = r
        if (!(f[3] in gseen)) { gseen[f[3]] = 1; gorder[++gcnt] = f[3] }
        next
    }
    FNR == 1 { next }     # results.tsv header
    {
        t = $1; res[t] = $3; secs[t] = $5; reason[t] = $6
        if (!(t in name)) { order[++cnt] = t; name[t] = $2; group[t] = "unlisted"; ex[t] = "-"
            if (!("unlisted" in gseen)) { gseen["unlisted"] = 1; gorder[++gcnt] = "unlisted" } }
    }
    END {
        print "## librdkafka 2.0.2 regression tests"
        print ""
        print "librdkafka'"'"'s own test suite (Debian bookworm'"'"'s source package, `test-runner` built",
              " unpatched) against one Sluice broker: `protocol-tests/librdkafka/run.sh`, expectations in",
              " `protocol-tests/librdkafka/expected.txt`. Run ", date, " on Sluice ", sluice,
              ", librdkafka ", rdk, ", TEST_KAFKA_VERSION=", kver, ", scenario ", scen,
              ", quick mode ", quick, "; selected: `", args, "`."
        print ""
        print "| Group | Tests | Passed | Failed | Skipped | Not run | Expected to pass |"
        print "|---|---|---|---|---|---|---|"
        for (i = 1; i <= cnt; i++) {
            t = order[i]; g = group[t]; tot[g]++; T["all"]++
            r = (t in res) ? res[t] : "NOTRUN"; c[g, r]++; c["all", r]++
            if (ex[t] == "pass") { ep[g]++; ep["all"]++ }
        }
        for (k = 1; k <= gcnt + 1; k++) {
            g = (k <= gcnt) ? gorder[k] : "all"
            n = (g == "all") ? T["all"] : tot[g]
            print "| ", (g == "all" ? "**total**" : g), " | ", n, " | ", c[g, "PASS"] + 0, " | ",
                  c[g, "FAIL"] + 0, " | ", c[g, "SKIP"] + 0, " | ", c[g, "NOTRUN"] + 0, " | ", ep[g] + 0, " |"
        }
        print ""
        print "| Test | Name | Group | Result | Expected | Why (failure or pending reason) |"
        print "|---|---|---|---|---|---|"
        for (i = 1; i <= cnt; i++) {
            t = order[i]
            r = (t in res) ? res[t] : "not run"
            e = ex[t] (why[t] != "" ? ": " why[t] : "")
            note = ""
            if (r == "FAIL" || r == "SKIP") note = reason[t]
            if (length(note) > 160) note = substr(note, 1, 157) "..."
            if (r == "PASS" && ex[t] == "pending") r = "PASS (new)"
            else if (r != "PASS" && r != "not run" && ex[t] == "pass") r = "**" r "**"
            print "| ", t, " | ", name[t], " | ", group[t], " | ", r, (t in secs ? " (" secs[t] " s)" : ""),
                  " | ", cell(e), " | ", cell(note), " |"
        }
    }' "$HERE/expected.txt" "$RUN/results.tsv" | tee "$MD"
