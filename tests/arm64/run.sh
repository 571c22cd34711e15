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
# QEMU_CPU (default max,pauth-impdef=on), QEMU_SMP (2), TIMEOUT (seconds).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=target/arm64
TACHY=${TACHY:-target/aarch64-unknown-linux-gnu/release/tachy}
QEMU_CPU=${QEMU_CPU:-max,pauth-impdef=on}
QEMU_SMP=${QEMU_SMP:-2}
TIMEOUT=${TIMEOUT:-1200}
SRC=tests/fixtures
ROOT=$OUT/root
SYSLIB=/usr/aarch64-linux-gnu/lib

kernel=$(ls "$OUT"/kernel/boot/vmlinuz-* 2>/dev/null | head -1)
busybox=$OUT/busybox/bin/busybox
[ -n "$kernel" ] && [ -x "$busybox" ] || {
	echo "no arm64 kernel or busybox under $OUT: run make deps-arm64" >&2
	exit 2
}
[ -x "$TACHY" ] || {
	echo "no arm64 tachy at $TACHY: run make cross-arm64" >&2
	exit 2
}

start=$(date +%s)
rm -rf "$ROOT"
mkdir -p "$ROOT/bin" "$ROOT/lib" "$ROOT/t"
cp "$busybox" "$ROOT/bin/"
cp "${GUEST:-tests/arm64/guest.sh}" "$ROOT/init"
chmod 755 "$ROOT/init"
for l in ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do
	cp -L "$SYSLIB/$l" "$ROOT/lib/"
done
cp "$TACHY" "$ROOT/t/tachy"

# The fixtures, with the flags the x86 suite builds them with
# (tests/it/common/fixtures.rs).
cc=aarch64-linux-gnu-gcc
cxx=aarch64-linux-gnu-g++
C=(-std=c11 -O2 -g -pthread -Wall -Wextra)
CXX=(-std=c++17 -O2 -g -pthread -Wall -Wextra -I"$SRC")
t=$ROOT/t
$cc "${C[@]}" -o "$t/plain" "$SRC/plain.c"
$cc "${C[@]}" -I"$SRC" -o "$t/tails" tests/arm64/tails.c
$cxx -O2 -g -o "$t/exits" "$SRC/exits.cpp"
$cxx "${CXX[@]}" -o "$t/args" "$SRC/args.cpp"
$cxx "${CXX[@]}" -o "$t/by" "$SRC/by.cpp"
$cc -std=c11 -O2 -g -fPIC -shared -Wall -Wextra -Wl,-soname,libfixture.so \
	-o "$t/libfixture.so" "$SRC/libfixture.c"
$cxx "${CXX[@]}" -o "$t/nested" "$SRC/nested.cpp" "$t/libfixture.so" \
	-Wl,-rpath,'$ORIGIN'
if command -v go >/dev/null; then
	GOCACHE=$PWD/$OUT/.gocache GOARCH=arm64 CGO_ENABLED=0 \
		go build -o "$t/gowork" "$SRC/gowork.go"
else
	echo "go is not installed: the Go check is left out"
fi

python3 tests/arm64/mkinitramfs.py "$ROOT" "$OUT/initramfs.cpio.gz"
echo "booting $(basename "$kernel") on qemu-system-aarch64 -cpu $QEMU_CPU -smp $QEMU_SMP"
timeout "$TIMEOUT" qemu-system-aarch64 -M virt -cpu "$QEMU_CPU" -smp "$QEMU_SMP" \
	-m 1024 -nographic -no-reboot -kernel "$kernel" \
	-initrd "$OUT/initramfs.cpio.gz" \
	-append "console=ttyAMA0 rdinit=/init panic=-1 quiet" </dev/null |
	tee "$OUT/console.log" | grep --line-buffered -E '^(arm64-suite|    )'
echo "test-arm64 took $(($(date +%s) - start)) s (console: $OUT/console.log)"
grep -q '^arm64-suite: PASS [0-9]* FAIL 0' "$OUT/console.log"
