#!/usr/bin/env bash
# Rebuilds the seed ELF files of the fuzz corpora from hello.c, hello.cpp and
# lib.c (gcc/g++ -O2, Debian 12). Output goes to ../corpus/{elf_symbols,debuginfo}
# and the debug file the debuginfo target installs next to its input.
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# MiniDebugInfo the way Fedora's find-debuginfo makes it: the function
# symbols that .dynsym lacks, in an xz-compressed ELF in .gnu_debugdata.
minidebug() { # in out
	local b=$1 o=$2 t
	t=$(mktemp -d)
	nm -D "$b" --format=posix --defined-only | awk '{print $1}' | sort >"$t/dyn"
	nm "$b" --format=posix --defined-only | awk '{ if ($2 == "T" || $2 == "t") print $1 }' | sort >"$t/funcs"
	comm -13 "$t/dyn" "$t/funcs" >"$t/keep"
	objcopy --only-keep-debug "$b" "$t/debug"
	objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols="$t/keep" "$t/debug" "$t/mini"
	xz -9 "$t/mini"
	strip --strip-all -R .comment -o "$o" "$b"
	objcopy --add-section .gnu_debugdata="$t/mini.xz" "$o"
	rm -rf "$t"
}

gcc -O2 -g -o "$out/c_debug" hello.c
gcc -O2 -o "$out/c_nodebug" hello.c
gcc -O2 -g -gz=zlib -o "$out/c_debug_zlib" hello.c
strip -o "$out/c_stripped" "$out/c_nodebug"
g++ -O2 -g -o "$out/cpp_debug" hello.cpp
g++ -O2 -o "$out/cpp_nodebug" hello.cpp
strip -o "$out/cpp_stripped" "$out/cpp_nodebug"
gcc -O2 -g -shared -fPIC -o "$out/lib_debug.so" lib.c
strip -o "$out/lib_stripped.so" "$out/lib_debug.so"
gcc -O2 -g -fno-plt -o "$out/c_noplt" hello.c
minidebug "$out/c_nodebug" "$out/c_minidebug"
minidebug "$out/cpp_nodebug" "$out/cpp_minidebug"
# A stripped copy that names its debug file by .gnu_debuglink (CRC-checked).
objcopy --only-keep-debug "$out/c_debug" hello.debug
strip --strip-all -o "$out/c_debuglink" "$out/c_debug"
objcopy --add-gnu-debuglink=hello.debug "$out/c_debuglink"

mkdir -p ../corpus/elf_symbols ../corpus/debuginfo
for f in c_debug c_nodebug c_debug_zlib c_stripped cpp_debug cpp_nodebug cpp_stripped \
	lib_debug.so lib_stripped.so c_noplt c_minidebug cpp_minidebug c_debuglink; do
	cp "$out/$f" ../corpus/elf_symbols/seed_$f
done
for f in c_debuglink c_minidebug cpp_minidebug c_stripped c_debug lib_stripped.so; do
	cp "$out/$f" ../corpus/debuginfo/seed_$f
done
