#!/usr/bin/env bash
# make deps-arm64: what `make cross-arm64` and `make test-arm64` need on a
# Debian x86-64 machine: the arm64 architecture in dpkg (for the arm64
# libelf and zlib that tachy links statically), Debian's cross compilers,
# qemu-system-aarch64, and, unpacked under target/arm64/, the arm64
# kernel and busybox-static packages (downloaded once, not installed).
# KERNEL_PKG picks the kernel package (default below). `deps.sh bench`
# also fetches bpftrace for arm64 (for `make bench-arm64`).
#
# `deps.sh x86` instead: what `ARCH=x86_64 tests/arm64/run.sh` needs, the
# suite on bookworm's own x86-64 kernel (6.1): qemu-system-x86 installed,
# the newest linux-image-6.1.0-*-amd64-unsigned (or KERNEL61_PKG) and
# busybox-static unpacked under target/x86/.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=target/arm64
fetch() { # fetch PACKAGE DIR [APT OPTIONS]: downloads and unpacks PACKAGE into DIR once
	local pkg=$1 dir=$2
	shift 2
	[ -e "$dir/.done" ] && return
	rm -rf "$dir" && mkdir -p "$dir" "$OUT/debs"
	(cd "$OUT/debs" && apt-get "$@" download "$pkg") || return 1
	dpkg-deb -x "$(ls -t "$OUT"/debs/"${pkg%%:*}"_*.deb | head -1)" "$dir"
	echo "$pkg" > "$dir/.done"
}
if [ "${1:-}" = x86 ]; then
	OUT=target/x86
	dpkg -s qemu-system-x86 >/dev/null 2>&1 || {
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86
	}
	if [ ! -e "$OUT/kernel-6.1/.done" ]; then
		KERNEL61_PKG=${KERNEL61_PKG:-$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]*-amd64-unsigned$' |
			sort -V | tail -1 | cut -d' ' -f1)}
		fetch "$KERNEL61_PKG" "$OUT/kernel-6.1"
	fi
	fetch busybox-static "$OUT/busybox"
	echo "x86-64 kernel: $(cat "$OUT/kernel-6.1/.done"), busybox: $(cat "$OUT/busybox/.done")"
	exit 0
fi
PKGS="gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-system-arm libelf-dev:arm64 zlib1g-dev:arm64 python3"

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	dpkg --add-architecture arm64
	apt-get update -qq
fi
missing=""
for p in $PKGS; do
	dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$(dpkg --print-architecture)" >/dev/null 2>&1 ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi

# The default kernel comes from bookworm-backports (6.12); bookworm's own
# 6.1 is fetched below. Read through apt lists of its own under $OUT/apt,
# so the machine's apt sources stay as they are.
APT_DIR=$PWD/$OUT/apt
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
echo "deb [arch=arm64] http://deb.debian.org/debian bookworm-backports main" > "$APT_DIR/sources.list"
BP=(-o Dir::Etc::SourceList="$APT_DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache"
	-o APT::Architecture=arm64)

if [ ! -e "$OUT/kernel/.done" ]; then
	apt-get "${BP[@]}" update -qq
	if [ -z "${KERNEL_PKG:-}" ]; then
		# The one the suite was last run on, else (once the archive
		# drops it) the newest 6.12.
		KERNEL_PKG=linux-image-6.12.95+deb12-arm64-unsigned
		apt-cache "${BP[@]}" show "$KERNEL_PKG" >/dev/null 2>&1 ||
			KERNEL_PKG=$(apt-cache "${BP[@]}" search --names-only '^linux-image-6\.12.*-arm64-unsigned$' |
				grep -v -e cloud -e rt- | sort -V | tail -1 | cut -d' ' -f1)
	fi
	fetch "$KERNEL_PKG" "$OUT/kernel" "${BP[@]}"
fi
# Bookworm's own kernel (6.1, from the machine's apt sources, where the
# arm64 architecture was added above) for `make test-arm64-6.1`: the
# newest 6.1 arm64 image, or KERNEL61_PKG.
if [ ! -e "$OUT/kernel-6.1/.done" ]; then
	KERNEL61_PKG=${KERNEL61_PKG:-$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]*-arm64-unsigned$' |
		sort -V | tail -1 | cut -d' ' -f1)}
	fetch "$KERNEL61_PKG:arm64" "$OUT/kernel-6.1"
fi
fetch busybox-static:arm64 "$OUT/busybox"
# `make bench-arm64`: bookworm's bpftrace for arm64 and the libraries it
# loads (LLVM, clang, BCC, ...), unpacked together under $OUT/bpftrace.
# The C and C++ runtimes come from the cross compilers instead, as for
# the fixtures.
if [ "${1:-}" = bench ] && [ ! -e "$OUT/bpftrace/.done" ]; then
	pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances --no-pre-depends bpftrace:arm64 |
		grep '^[a-z]' | grep -v -e '^libc6:' -e '^libgcc-s1:' -e '^libstdc++6:' \
			-e '^gcc-12-base:' | sort -u)
	rm -rf "$OUT/bpftrace" && mkdir -p "$OUT/bpftrace" "$OUT/debs"
	(cd "$OUT/debs" && apt-get download $pkgs)
	for p in $pkgs; do
		dpkg-deb -x "$(ls -t "$OUT"/debs/"${p%%:*}"_*_arm64.deb | head -1)" "$OUT/bpftrace"
	done
	rm -rf "$OUT"/bpftrace/usr/share
	echo "$pkgs" > "$OUT/bpftrace/.done"
fi
echo "arm64 kernels: $(cat "$OUT/kernel/.done") and $(cat "$OUT/kernel-6.1/.done"), busybox: $(cat "$OUT/busybox/.done")"
