#!/bin/busybox sh
# make bench-arm64: the guest side (/init of the initramfs that
# tests/arm64/run.sh boots with BENCH=1). Per kind of instruction tachy
# probes on arm64, what tachy's plan costs each call of a function of
# tests/arm64/kinds.c, against bpftrace's uprobe + uretprobe on the same
# function(s), in the same boot: each cost is the fixture's own median
# call, traced, minus its untraced twin's, timed in the same loop. Under
# emulation both slow alike, so only the ratio means anything. Prints one
# "arm64-bench: ..." line per row, "met" where tachy's plan costs at most
# bpftrace's, then "arm64-bench: done" and powers the machine off.
# ROUNDS (3), ITER (calls per run, 200) and SPIN (the spin, 2000) from the
# kernel command line.

/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing
mount -t debugfs nodev /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
ulimit -l unlimited
cd /t || exit 1
# bpftrace's libraries, unpacked from Debian's packages (no ld.so.cache).
export LD_LIBRARY_PATH=/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu:/usr/lib/llvm-14/lib
ROUNDS=${ROUNDS:-3}
ITER=${ITER:-200}
SPIN=${SPIN:-2000}

say() { echo "arm64-bench: $*"; }
# cost FILE FUNC: traced minus untraced median ns of FUNC in FILE.
cost() {
	awk -v f="$2" '$1 == "traced" && $2 == f { t = $3 } $1 == "untraced" && $2 == f { u = $3 }
		END { if (t != "" && u != "") print t - u }' "$1"
}

say "kernel $(uname -r), $(grep -m1 'CPU part' /proc/cpuinfo), $(nproc) CPUs"
say "$(./tachy --version 2>&1), $(bpftrace --version 2>&1)"
say "$ROUNDS rounds of $ITER calls, spin $SPIN"

# The rows: name | tachy's arguments | the functions bpftrace times (the
# first one is the one the fixture calls).
ROWS='entry on stp, ret exit|latency spin_stp|spin_stp
entry moved past stp, ret exit|latency spin_moved|spin_moved
tail call by b, ret of its callee|latency spin_tail|spin_tail
indirect tail call by br|latency spin_br|spin_br
call site ended on cbz (nested)|nested site_parent|site_parent spin_callee
uretprobe (--uretprobe)|latency --uretprobe spin_moved|spin_moved'

# bpftrace's program: uprobe + uretprobe per function, funclatency's way.
program() {
	p=""
	k=0
	for f in "$@"; do
		p="$p uprobe:/t/kinds:$f { @s$k[tid] = nsecs; }"
		p="$p uretprobe:/t/kinds:$f /@s$k[tid]/ { @h$k = hist(nsecs - @s$k[tid]); @n$k = count(); delete(@s$k[tid]); }"
		k=$((k + 1))
	done
	echo "$p"
}

T0=$(date +%s)
r=1
while [ $r -le "$ROUNDS" ]; do
	n=0
	echo "$ROWS" | while IFS='|' read -r name targs funcs; do
		n=$((n + 1))
		set -- $funcs
		fn=$1
		# shellcheck disable=SC2086
		./tachy $targs -- ./kinds "$fn" "$ITER" "$SPIN" </dev/null >out 2>err
		st=$?
		c=$(cost out "$fn")
		[ $st -eq 0 ] && [ -n "$c" ] || {
			say "tachy failed on row $n (exit $st)"
			sed 's/^/    /' out err | head -20
		}
		echo "$c" >>"/tmp/tachy.$n"
		bpftrace -e "$(program "$@")" -c "./kinds $fn $ITER $SPIN" </dev/null >out 2>err
		st=$?
		c=$(cost out "$fn")
		grep -q "^@n0: $ITER\$" out && [ -n "$c" ] || {
			say "bpftrace failed on row $n (exit $st)"
			sed 's/^/    /' out err | head -20
		}
		echo "$c" >>"/tmp/bpftrace.$n"
	done
	say "round $r done at $(($(date +%s) - T0)) s"
	r=$((r + 1))
done

# median FILE: the median of the numbers in FILE.
median() {
	sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}
say "per call, median of $ROUNDS rounds (us): tachy's plan, bpftrace's uprobe + uretprobe, ratio"
n=0
echo "$ROWS" | while IFS='|' read -r name targs funcs; do
	n=$((n + 1))
	t=$(median "/tmp/tachy.$n")
	b=$(median "/tmp/bpftrace.$n")
	awk -v name="$name" -v t="$t" -v b="$b" 'BEGIN {
		if (t == "" || b == "" || b <= 0) { printf "arm64-bench: %-36s no measure\n", name; exit }
		printf "arm64-bench: %-36s %7.1f %7.1f  %5.2f  %s\n", name, t / 1000, b / 1000, t / b,
			t <= b ? "met" : "NOT met"
	}'
done
say "took $(($(date +%s) - T0)) s"
say done
poweroff -f
