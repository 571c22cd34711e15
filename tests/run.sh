#!/usr/bin/env bash
# Runs the whole test suite (`make test`): unit tests, then the root-run BPF
# integration tests, one at a time. Arguments are libtest's (a name filter).
#
# An integration test that fails is run once more, alone. Some tests bound
# durations (a probe's single-step, a 200 us sleep, a spin's p50) and the
# machines they run on are shared virtual machines whose steal time and
# preemption can, now and then, stretch one call past any bound that still
# tells a right answer from a wrong one. A test that fails twice fails the
# suite; one that passes the second time is named at the end ("failed once,
# passed alone"), so a test that flickers stays in sight. Counts are exact in
# every test: a miscount fails both runs. More than MAX_RERUN failures, or a
# failure outside the integration binary, fails at once.
set -uo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
MAX_RERUN=${MAX_RERUN:-3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "$CARGO test --release --no-fail-fast -- --test-threads=1 $*"
"$CARGO" test --release --no-fail-fast -- --test-threads=1 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && exit 0

# Failed tests, each as "BINARY TEST": the binary from the "Running" line
# that precedes it (tests/it/main.rs for the integration tests).
failed=$(awk '
    /^ *Running / { bin = $2 }
    /^ *Doc-tests / { bin = "doc-tests" }
    /^test .* \.\.\. FAILED$/ { print bin, $2 }
' "$log" | sort -u)
if [ -z "$failed" ]; then
    echo "the suite failed before or outside its tests (exit $status)" >&2
    exit "$status"
fi
n=$(printf '%s\n' "$failed" | wc -l)
if printf '%s\n' "$failed" | grep -qv '^tests/it/main.rs '; then
    echo "a test outside the integration binary failed: not run again" >&2
    exit "$status"
fi
if [ "$n" -gt "$MAX_RERUN" ]; then
    echo "$n integration tests failed (more than $MAX_RERUN): not run again" >&2
    exit "$status"
fi

flickered=()
for t in $(printf '%s\n' "$failed" | cut -d' ' -f2); do
    echo
    echo "running $t again, alone"
    "$CARGO" test --release --test it -- --test-threads=1 --exact "$t" 2>&1 | tee "$log"
    if [ "${PIPESTATUS[0]}" -eq 0 ] && grep -q '^test result: ok\. 1 passed' "$log"; then
        flickered+=("$t")
    else
        echo "$t failed twice" >&2
        exit 1
    fi
done
echo
echo "Failed once, passed alone (${#flickered[@]}): ${flickered[*]}"
exit 0
