#!/usr/bin/env bash
# Smoke test of the fuzz targets (fuzz/README.md): builds them with
# cargo-fuzz (installed from crates.io if missing) and runs each for a few
# seconds on its seed corpus. Exits non-zero on the first crash (a panic, an
# arithmetic overflow, an AddressSanitizer report), whose input libFuzzer
# leaves in fuzz/artifacts/TARGET/.
#
#   bash fuzz/smoke.sh                    # every target, 5 s each
#   FUZZ_SECONDS=60 bash fuzz/smoke.sh decode patterns
#   FUZZ_SANITIZER=none bash fuzz/smoke.sh   # without ASan (3x faster)
#
# cargo-fuzz passes -Zsanitizer and other unstable flags; RUSTC_BOOTSTRAP=1
# lets the stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${FUZZ_SECONDS:-5}
sanitizer=${FUZZ_SANITIZER:-address}
export RUSTC_BOOTSTRAP=1
# A fallible allocation of an absurd size (Vec::try_reserve of a compressed
# section's claimed size) fails as it does outside ASan instead of aborting;
# -malloc_limit_mb below likewise lets large reservations through, while
# -rss_limit_mb (2 GB) still catches memory really used.
export ASAN_OPTIONS="allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

if ! cargo fuzz --version >/dev/null 2>&1; then
	cargo install cargo-fuzz --locked
fi

# The targets write their input to a file under TMPDIR; a crash leaves it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work

if [ $# -gt 0 ]; then
	targets=("$@")
else
	mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build --sanitizer "$sanitizer"
for t in "${targets[@]}"; do
	echo "== fuzz target $t, ${seconds} s"
	# New inputs go to a scratch corpus; the seeds in corpus/$t stay as they
	# are. The inputs of bugs found before (regressions/$t) run first, too.
	mkdir -p "$work/corpus/$t"
	dirs=("$work/corpus/$t")
	if [ -d "corpus/$t" ]; then
		dirs+=("corpus/$t")
	fi
	if [ -d "regressions/$t" ]; then
		dirs+=("regressions/$t")
	fi
	log=$work/$t.log
	if ! cargo fuzz run --sanitizer "$sanitizer" "$t" "${dirs[@]}" -- \
		-max_total_time="$seconds" -timeout=10 -malloc_limit_mb=1048576 -print_final_stats=1 >"$log" 2>&1; then
		# The panic (or sanitizer report), then libFuzzer's summary.
		grep -m1 -A2 -E 'panicked at|ERROR: AddressSanitizer|ERROR: libFuzzer' "$log" >&2 || true
		tail -n 12 "$log" >&2
		echo "fuzz target $t crashed: the input is in fuzz/artifacts/$t/ (see fuzz/README.md)" >&2
		exit 1
	fi
	grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$log" || true
done
echo "fuzz smoke test: ${#targets[@]} target(s), no crash"
