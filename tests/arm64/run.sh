#!/usr/bin/env bash
# make test-arm64: the arm64 tachy on a real arm64 kernel, from this x86-64
# machine. Boots Debian's arm64 kernel under qemu-system-aarch64 (TCG
# emulation) with an initramfs holding busybox, the cross-built tachy
# (make cross-arm64), the fixtures built by Debian's cross compilers (and
# GOARCH=arm64 Go where go is installed), the arm64 C and C++ runtime
# libraries, and tests/arm64/guest.sh as /init, which runs the checks and
# powers off. Passes when every check in the guest passed.
#
# Needs what `make deps-arm64` installs and downloads (tests/arm64/deps.sh);
# downloads nothing itself. Environment: TACHY (the arm64 binary),
# KERNEL (the kernel directory under target/arm64: kernel, Debian's 6.12,
# by default; kernel-6.1 for bookworm's own), QEMU_CPU (default
# max,pauth-impdef=on), QEMU_SMP (2), TIMEOUT (seconds).
#
# BENCH=1 (make bench-arm64) boots the same machine with bpftrace for
# arm64 and its libraries added (`deps.sh bench` unpacks them) and
# tests/arm64/bench.sh as /init: tachy's plan against bpftrace per probed
# instruction kind, as ratios; the table is kept in target/arm64/bench.txt.
# ROUNDS, ITER, SPIN go to the guest.
#
# ARCH=x86_64 runs the same checks with the x86-64 tachy (default
# target/release/tachy) and fixtures built by gcc on an x86-64 kernel from
# target/x86 (`tests/arm64/deps.sh x86`: bookworm's 6.1) under
# qemu-system-x86_64 (TCG): the oldest kernel tachy supports on x86-64.
set -euo pipefail
cd "$(dirname "$0")/../.."

ARCH=${ARCH:-aarch64}
if [ "$ARCH" = x86_64 ]; then
	OUT=target/x86
	TACHY=${TACHY:-target/release/tachy}
	QEMU_CPU=${QEMU_CPU:-max}
	SYSLIB=/lib/x86_64-linux-gnu
	LIBS="libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1"
	cc=gcc
	cxx=g++
	GOARCH=amd64
	QEMU=(qemu-system-x86_64 -accel tcg -M pc)
	CONSOLE=ttyS0
else
	OUT=target/arm64
	TACHY=${TACHY:-target/aarch64-unknown-linux-gnu/release/tachy}
	QEMU_CPU=${QEMU_CPU:-max,pauth-impdef=on}
	SYSLIB=/usr/aarch64-linux-gnu/lib
	LIBS="ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1"
	cc=aarch64-linux-gnu-gcc
	cxx=aarch64-linux-gnu-g++
	GOARCH=arm64
	QEMU=(qemu-system-aarch64 -M virt)
	CONSOLE=ttyAMA0
fi
QEMU_SMP=${QEMU_SMP:-2}
QEMU_MEM=1024
GUEST=${GUEST:-tests/arm64/guest.sh}
APPEND=""
if [ -n "${BENCH:-}" ]; then
	[ -e "$OUT/bpftrace/.done" ] || {
		echo "no bpftrace under $OUT: run tests/arm64/deps.sh bench" >&2
		exit 2
	}
	GUEST=tests/arm64/bench.sh
	# bpftrace and LLVM unpacked in the initramfs.
	QEMU_MEM=3072
	APPEND="ROUNDS=${ROUNDS:-3} ITER=${ITER:-200} SPIN=${SPIN:-2000}"
fi
TIMEOUT=${TIMEOUT:-1200}
SRC=tests/fixtures
ROOT=$OUT/root

kernel=$(ls "$OUT/${KERNEL:-kernel}"/boot/vmlinuz-* 2>/dev/null | head -1)
busybox=$OUT/busybox/bin/busybox
[ -n "$kernel" ] && [ -x "$busybox" ] || {
	echo "no kernel or busybox under $OUT: run make deps-arm64 (tests/arm64/deps.sh x86 for ARCH=x86_64)" >&2
	exit 2
}
[ -x "$TACHY" ] || {
	echo "no tachy at $TACHY: run make cross-arm64 (make build for ARCH=x86_64)" >&2
	exit 2
}

start=$(date +%s)
rm -rf "$ROOT"
mkdir -p "$ROOT/bin" "$ROOT/lib" "$ROOT/t"
cp "$busybox" "$ROOT/bin/"
cp "$GUEST" "$ROOT/init"
chmod 755 "$ROOT/init"
for l in $LIBS; do
	cp -L "$SYSLIB/$l" "$ROOT/lib/"
done
if [ "$ARCH" = x86_64 ]; then
	# The x86-64 program interpreter's path, and the libraries' for it.
	mkdir -p "$ROOT/lib64" "$ROOT/lib/x86_64-linux-gnu"
	cp -L /lib64/ld-linux-x86-64.so.2 "$ROOT/lib64/"
	mv "$ROOT"/lib/*.so.* "$ROOT/lib/x86_64-linux-gnu/"
fi
cp "$TACHY" "$ROOT/t/tachy"
if [ -n "${BENCH:-}" ]; then
	cp -a "$OUT/bpftrace/." "$ROOT/"
	rm -f "$ROOT/.done"
fi

# The fixtures, with the flags the x86 suite builds them with
# (tests/it/common/fixtures.rs).
C=(-std=c11 -O2 -g -pthread -Wall -Wextra)
CXX=(-std=c++17 -O2 -g -pthread -Wall -Wextra -I"$SRC")
t=$ROOT/t
$cc "${C[@]}" -o "$t/plain" "$SRC/plain.c"
$cc "${C[@]}" -I"$SRC" -o "$t/tails" tests/arm64/tails.c
[ "$ARCH" = x86_64 ] || $cc "${C[@]}" -I"$SRC" -o "$t/kinds" tests/arm64/kinds.c
$cc "${C[@]}" -I"$SRC" -o "$t/stackargs" tests/arm64/stackargs.c
$cxx -O2 -g -o "$t/exits" "$SRC/exits.cpp"
$cxx "${CXX[@]}" -o "$t/args" "$SRC/args.cpp"
$cxx "${CXX[@]}" -o "$t/by" "$SRC/by.cpp"
$cc -std=c11 -O2 -g -fPIC -shared -Wall -Wextra -Wl,-soname,libfixture.so \
	-o "$t/libfixture.so" "$SRC/libfixture.c"
$cxx "${CXX[@]}" -o "$t/nested" "$SRC/nested.cpp" "$t/libfixture.so" \
	-Wl,-rpath,'$ORIGIN'
if command -v go >/dev/null; then
	GOCACHE=$PWD/$OUT/.gocache GOARCH=$GOARCH CGO_ENABLED=0 \
		go build -o "$t/gowork" "$SRC/gowork.go"
else
	echo "go is not installed: the Go check is left out"
fi

python3 tests/arm64/mkinitramfs.py "$ROOT" "$OUT/initramfs.cpio.gz"
echo "booting $(basename "$kernel") on ${QEMU[0]} -cpu $QEMU_CPU -smp $QEMU_SMP"
# The guest prints "arm64-suite: ..." on either architecture.
timeout "$TIMEOUT" "${QEMU[@]}" -cpu "$QEMU_CPU" -smp "$QEMU_SMP" \
	-m $QEMU_MEM -nographic -no-reboot -kernel "$kernel" \
	-initrd "$OUT/initramfs.cpio.gz" \
	-append "console=$CONSOLE rdinit=/init panic=-1 quiet $APPEND" </dev/null |
	tee "$OUT/console.log" | grep --line-buffered -E '^(arm64-suite|arm64-bench|    )'
what=test-arm64
[ -z "${BENCH:-}" ] || what=bench-arm64
echo "$what ($ARCH) took $(($(date +%s) - start)) s (console: $OUT/console.log)"
if [ -n "${BENCH:-}" ]; then
	grep '^arm64-bench: ' "$OUT/console.log" | sed 's/^arm64-bench: //' >"$OUT/bench.txt"
	grep -q '^done' "$OUT/bench.txt" && ! grep -q -e 'failed' -e 'no measure' "$OUT/bench.txt"
else
	grep -q '^arm64-suite: PASS [0-9]* FAIL 0' "$OUT/console.log"
fi
