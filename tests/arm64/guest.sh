#!/bin/busybox sh
# The arm64 suite's guest side: /init of the initramfs that tests/arm64/run.sh
# boots under qemu-system-aarch64. Mounts what tachy needs, runs the arm64
# tachy on the cross-built fixtures in /t with exact expected counts, prints
# one "ok NAME" or "FAIL NAME: ..." line per check and then
# "arm64-suite: PASS N FAIL M", and powers the machine off. busybox only.

/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing
mount -t debugfs nodev /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
ulimit -l unlimited
cd /t || exit 1

pass=0
fail=0
say() { echo "arm64-suite: $*"; }
ok() { say "ok $1"; pass=$((pass + 1)); }
bad() {
	say "FAIL $1: $2"
	fail=$((fail + 1))
	sed 's/^/    /' out err 2>/dev/null | head -40
}

# run NAME ARGS...: tachy ARGS with the fixture's stdin at EOF (its "go"),
# report on stdout (JSON) into ./out, everything else into ./err; the time
# it took is printed.
run() {
	name=$1
	shift
	t0=$(date +%s)
	./tachy "$@" </dev/null >out 2>err
	status=$?
	say "ran $name in $(($(date +%s) - t0)) s (exit $status)"
	[ $status -eq 0 ] || {
		bad "$name" "tachy exited $status"
		return 1
	}
	grep -qx done err out || {
		bad "$name" "the fixture did not finish"
		return 1
	}
	return 0
}

# json FIELD FUNC [KIND]: FIELD ("count", "unwound", "filtered_by_args") of
# the first function or node FUNC (of kind KIND: "function", "call", ...)
# in ./out (one JSON object per report), its inner objects (percentiles,
# --cpu parts, groups) left out. Split at every brace, each line holds the
# fields of one object (a node's own after its children's).
json() {
	sed 's/"[a-z_]*":{[^{}]*}//g; s/"groups":\[[^]]*\]//g' out |
		tr '{}' '\n\n' | grep -F "\"name\":\"$2\"" |
		grep -F -e "\"kind\":\"${3:-function}\"" -e '"avg_ns"' |
		sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" | head -1
}

# tagged TAG FUNC: N of the fixture's "TAG FUNC N" line ("count": the
# calls it counted itself).
tagged() {
	cat err out | awk -v p="$1 $2 " 'index($0, p) == 1 { print $NF; exit }'
}
fixture() { tagged count "$1"; }

# expect NAME WANT GOT
expect() {
	if [ -n "$2" ] && [ "$2" = "$3" ]; then ok "$1 ($3)"; else bad "$1" "want [$2] got [$3]"; fi
}

say "kernel $(uname -r), $(grep -m1 'CPU part' /proc/cpuinfo), $(nproc) CPUs"
T0=$(date +%s)

# Plain C: every call counted, on two threads.
if run plain latency --json slow_sum fast_path mix_local -- ./plain 20 2; then
	for f in slow_sum fast_path mix_local; do
		expect "latency plain $f" "$(fixture $f)" "$(json count $f)"
	done
fi

# C++ exceptions unwinding through probed frames: the target survives, and
# each call is a completed or an unwound one.
if run exits latency --json 'ex::quiet(long)' 'ex::throwing(long)' \
	'ex::indirect(long (*)(long), long)' 'ex::via_plt(long)' \
	'ex::cleanup(long)' -- ./exits 10; then
	for f in 'ex::quiet(long)' 'ex::throwing(long)' \
		'ex::indirect(long (*)(long), long)' 'ex::via_plt(long)' \
		'ex::cleanup(long)'; do
		c=$(json count "$f")
		u=$(json unwound "$f")
		thrown=$(tagged exceptions "$f")
		expect "exceptions $f: calls" "$(fixture "$f")" "$((c + u))"
		expect "exceptions $f: unwound" "${thrown:-0}" "$u"
	done
fi

# Tail calls (b), indirect tail calls (br), calls through a pointer (blr).
if run tails latency --json tail_direct tail_reg chain_end spin_leaf \
	-- ./tails 20; then
	for f in tail_direct tail_reg chain_end spin_leaf; do
		expect "latency tails $f" "$(fixture $f)" "$(json count $f)"
	done
fi

# The probes' own time is subtracted (src/calibrate/arm64.rs measures it
# at start-up): a spin of ~100 us, timed by the fixture untraced in the
# same loop, reads within 10% in tachy's median call, on an entry moved
# past the frame and on one left on the single-stepped stp (whose probes
# add ~20 us under TCG: 20% unsubtracted). arm64 only (kinds.c is
# AArch64 assembly).
[ -x ./kinds ] && for f in spin_moved spin_stp; do
	if run "probe-time $f" latency --json $f -- ./kinds $f 100 80000; then
		got=$(grep -o '"p50":[0-9]*' out | head -1 | cut -d: -f2)
		want=$(tagged untraced $f)
		if [ -n "$got" ] && [ -n "$want" ] &&
			[ $((got - want)) -le $((want * 10 / 100)) ] &&
			[ $((want - got)) -le $((want * 10 / 100)) ]; then
			ok "probe time subtracted: $f reads $got ns, untraced $want ns"
		else
			bad "probe time subtracted: $f" "reads [$got] ns, untraced [$want] ns: not within 10%"
		fi
	fi
done

# --cpu: the same counts with the scheduler's tracepoints attached.
if run cpu latency --json --cpu slow_sum fast_path -- ./plain 10 2; then
	for f in slow_sum fast_path; do
		expect "latency --cpu $f" "$(fixture $f)" "$(json count $f)"
	done
fi

# --filter on x0: pick(v, ...) is called with v = i % 10.
if run filter latency --json pick --filter 'arg0 == 3' -- ./args 100; then
	expect "--filter arg0 == 3: timed" 10 "$(json count pick)"
	expect "--filter arg0 == 3: filtered out" 90 "$(json filtered_by_args pick)"
fi

# --filter on a parameter named by DWARF: pick(int v, long w, ...) has v
# in x0 and w in x1 (AAPCS64).
if run filter-named latency --json pick --filter 'v == 3 && w == 300' -- ./args 100; then
	expect "--filter v == 3 && w == 300: timed" 10 "$(json count pick)"
	expect "--filter v == 3 && w == 300: filtered out" 90 "$(json filtered_by_args pick)"
fi

# --filter on parameters past x7, named by DWARF: AAPCS64 passes wide10's
# a8 and a9 in the stack's first two slots. a8 == 103 holds for i % 10 ==
# 3, a9 == 203 for i % 5 == 3: both for 10 of 100 calls.
if run filter-stack latency --json wide10 --filter 'a8 == 103 && a9 == 203' -- ./stackargs 100; then
	expect "--filter a8 == 103 && a9 == 203 (stack): timed" 10 "$(json count wide10)"
	expect "--filter a8 == 103 && a9 == 203 (stack): filtered out" 90 "$(json filtered_by_args wide10)"
fi

# --by caller: the return address is x30 at the `ret`.
if run by latency --json --by caller 'grp::Table::scan(int)' -- ./by 10 2; then
	front=$(grep -o '"function":"grp::front[^}]*},"count":[0-9]*' out | sed 's/.*://')
	back=$(grep -o '"function":"grp::back[^}]*},"count":[0-9]*' out | sed 's/.*://')
	expect "--by caller grp::front" 10 "$front"
	expect "--by caller grp::back" 30 "$back"
fi

# tachy nested: the function's own count, and its sites'.
if run nested nested --json 'app::handle(int)' -- ./nested 8 1; then
	expect "nested app::handle(int)" "$(fixture 'app::handle(int)')" \
		"$(json count 'app::handle(int)')"
fi

# tachy nested --depth 2: app::parse(int), a traced callee of handle, and
# its two tokenize call sites (a bl leaves SP as it was: the site in
# handle and parse's own frame must still be told apart).
if run nested2 nested --json --depth 2 'app::handle(int)' -- ./nested 8 1; then
	expect "nested --depth 2 app::parse(int)" 8 "$(json count 'app::parse(int)' call)"
	expect "nested --depth 2 app::tokenize(int)" 8 "$(json count 'app::tokenize(int)' call)"
fi

# A traced function that calls itself: the recursive call's site (keyed by
# SP at its bl) and the callee's frame (SP at its entry: the same SP) must
# nest. walk(2) recurses twice per handle call.
if run nested-rec nested --json 'app::walk(int)' -- ./nested 8 1; then
	expect "nested app::walk(int)" "$(fixture 'app::walk(int)')" \
		"$(json count 'app::walk(int)' function)"
	expect "nested app::walk(int): its recursive site" 16 \
		"$(json count 'app::walk(int)' call)"
	expect "nested app::walk(int): unwound" 0 "$(json unwound 'app::walk(int)' function)"
fi

# --stack reads x86-64 user stacks only: refused on arm64 as a usage
# error (exit 2), before anything is started; on x86-64 (an old kernel
# here) --by stack groups the calls by their callers.
if [ "$(uname -m)" = x86_64 ]; then
	./tachy latency --by stack pick -- ./args 1 </dev/null >out 2>err
	status=$?
	if [ $status -eq 0 ] && grep -q '^by stack:' out && grep -q '^  stack .*main' out; then
		ok "--by stack (x86-64)"
	else
		bad "--by stack (x86-64)" "exit $status: $(tail -3 err)"
	fi
else
	./tachy latency --record-slower-than 1ms --stack pick -- ./args 1 </dev/null >out 2>err
	status=$?
	if [ $status -eq 2 ] && grep -q '^error: --stack takes x86-64 user stacks only' err; then
		ok "--stack refused (exit 2)"
	else
		bad "--stack refused" "exit $status"
	fi
fi

# Go: goroutine stacks that grow (and move) while the traced call is open.
if [ -x ./gowork ]; then
	if run go latency --json main.grow -- ./gowork grow 20; then
		expect "go main.grow" "$(fixture main.grow)" "$(json count main.grow)"
	fi
fi

say "took $(($(date +%s) - T0)) s"
say "PASS $pass FAIL $fail"
poweroff -f
