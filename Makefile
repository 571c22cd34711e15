# tachy: the two entry points (`make demo`, `make test`) and what they need.

CARGO ?= cargo
APT_PACKAGES := clang libelf-dev zlib1g-dev pkg-config make gcc g++ clang-format binutils xz-utils util-linux
TARGET_DIR := target

.PHONY: deps build demo test check bench soak clean fuzz

# Installs the build dependencies that a fresh Debian machine lacks.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
		dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

build: deps
	$(CARGO) build --release

# Starts the bundled demo workload under tachy and prints its latency.
demo: build
	@mkdir -p $(TARGET_DIR)/demo
	g++ -O2 -g -pthread -o $(TARGET_DIR)/demo/kvdemo examples/demo.cpp
	$(TARGET_DIR)/release/tachy latency -u 'kv::Store::read' 'kv::Store::write' -- $(TARGET_DIR)/demo/kvdemo 400

# The whole test suite: unit tests and root-run BPF integration tests.
test: deps
	$(CARGO) test --no-fail-fast -- --test-threads=1
	@# Tests of kernel features this machine may lack (kprobes) say here
	@# whether they ran or were skipped, and why.
	@$(CARGO) test -q --test kernel -- --show-output 2>&1 | grep -E "^skipped" || true

check: deps
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
	clang-format --dry-run --Werror src/bpf/*.c src/bpf/*.h

clean:
	$(CARGO) clean

# Overhead of tachy against an empty-probe floor and bpftrace on small
# workloads, and start-up on libLLVM; as root, about 5 minutes. Prints the
# tables and writes them to bench/RESULTS.md (BENCH_ROUNDS=N to change rounds;
# BENCH_ONLY=push,cppquiet runs only the named workloads, without start-up).
BENCH_APT_PACKAGES := bpftrace binutils python3 linux-libc-dev

bench: build
	@missing=""; for p in $(BENCH_APT_PACKAGES); do \
		dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	/usr/bin/python3 bench/run.py

# Soak and scale, as root, not part of `make test`: tachy -i 1 on a workload
# making >= 100k calls/s for SOAK_MINUTES (default 10; SOAK_MINUTES=1 for a
# quick run) with its RSS sampled each second, 10,000 short-lived threads, a
# path target while 100 processes start and exit (then no int3 left), and
# --follow through 1,000 forks; every count checked against the calls made.
# Prints the figures and writes them into bench/RESULTS.md (section "Soak");
# exits 1 if a count, an interval, the RSS or a leftover probe is off.
# SOAK_ONLY=rate,threads,path,follow runs only the named checks.
soak: build
	/usr/bin/python3 bench/soak.py

# Fuzzing (fuzz/README.md): every cargo-fuzz target for FUZZ_RUNS executions
# (1M by default; hours with ASan on 2 cores, see fuzz/README.md), from its
# seeds in fuzz/corpus/TARGET and the inputs of past bugs in
# fuzz/regressions/TARGET, new inputs kept in fuzz/target/corpus/TARGET.
# For one target, the command is
#   cd fuzz && RUSTC_BOOTSTRAP=1 ASAN_OPTIONS=allocator_may_return_null=1 \
#     cargo fuzz run TARGET target/corpus/TARGET corpus/TARGET -- -runs=1000000 -malloc_limit_mb=1048576
# (RUSTC_BOOTSTRAP=1: stable Rust then accepts cargo-fuzz's -Zsanitizer
# flags; the ASan and malloc options let fallible huge reservations fail
# or pass as they do outside ASan.) FUZZ_SANITIZER=none runs about 3x
# faster, without AddressSanitizer. A crash, or an input that runs for 10 s
# (-timeout=10: a hang), stops the run; its input is in fuzz/artifacts/TARGET/.
FUZZ_RUNS ?= 1000000
FUZZ_SANITIZER ?= address

fuzz: deps
	$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	cd fuzz && export RUSTC_BOOTSTRAP=1 TMPDIR=$$PWD/target/tmp \
		ASAN_OPTIONS=allocator_may_return_null=1$${ASAN_OPTIONS:+:$$ASAN_OPTIONS} && \
	mkdir -p $$TMPDIR && \
	for t in $$($(CARGO) fuzz list); do \
		mkdir -p target/corpus/$$t && \
		dirs="target/corpus/$$t" && \
		if [ -d corpus/$$t ]; then dirs="$$dirs corpus/$$t"; fi && \
		if [ -d regressions/$$t ]; then dirs="$$dirs regressions/$$t"; fi && \
		$(CARGO) fuzz run --sanitizer $(FUZZ_SANITIZER) $$t $$dirs -- \
			-runs=$(FUZZ_RUNS) -timeout=10 -malloc_limit_mb=1048576 -print_final_stats=1 || exit 1; \
	done
