#!/usr/bin/env bash
# Repeat the real-kernel tests (unit and integration tests on this host's kernel, loop
# devices; not the VM rig) N times and list every test that failed in any run, with how
# often. A test that fails once in twenty fresh runs fails CI once in twenty: a flake is
# a bug. Exit status 1 when any run failed.
#
#   ./scripts/soak.sh 20            # logs in target/soak/run-N.log
#   ./scripts/soak.sh 5 block       # only tests/block.rs (any `cargo test` filter args)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:-20}
shift || true
case "$n" in '' | *[!0-9]*) echo "usage: $0 N [cargo test args...]" >&2; exit 2 ;; esac
export NTPROF_REQUIRE_KERNEL=1 NTPROF_VM=0
# On a fresh machine the tests' tools (fio, DuckDB, ...) are not there yet: without them
# every run fails in seconds on `fio` not found, which says nothing about flakes.
./scripts/deps.sh || exit 1
# The profile-guided build's tests (tests/pgo.rs) run when test.sh or build-pgo.sh made it.
if [ -x target/pgo/release/ntprof-perf ]; then
    export NTPROF_PGO_BIN=$PWD/target/pgo/release/ntprof-perf
fi
logs=target/soak
mkdir -p "$logs"
rm -f "$logs"/run-*.log
cargo test --profile ci --no-run -q "$@" || exit 1
failed_runs=0
start=$(date +%s)
for i in $(seq 1 "$n"); do
    log="$logs/run-$i.log"
    # --nocapture: the exit lines of every run are kept, to count the kernel's drops.
    if cargo test --profile ci "$@" -- --nocapture >"$log" 2>&1; then
        echo "run $i/$n: pass"
    else
        failed_runs=$((failed_runs + 1))
        echo "run $i/$n: FAIL: $(grep -E '^test .* FAILED$' "$log" | awk '{print $2}' | tr '\n' ' ')"
    fi
done
echo "soak: $((n - failed_runs)) of $n runs passed in $(($(date +%s) - start)) s"
# Exit lines that report samples the kernel counted and never wrote: the runs where the
# accounting for them was exercised for real.
drops=$(grep -l 'dropped [1-9]' "$logs"/run-*.log 2>/dev/null | wc -l)
echo "soak: the kernel dropped samples in $drops of $n runs ($(grep -ho 'dropped [1-9][0-9]*' "$logs"/run-*.log | awk '{s += $2} END {print s + 0}') samples in all, each accounted)"
if [ "$failed_runs" -gt 0 ]; then
    echo "flakes (test: failed runs):"
    grep -hE '^test .* FAILED$' "$logs"/run-*.log | awk '{print $2}' | sort | uniq -c |
        awk -v n="$n" '{printf "  %s: %d/%d\n", $2, $1, n}'
    echo "logs: $logs/run-*.log"
    exit 1
fi
