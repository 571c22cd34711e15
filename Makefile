# tachy: the two entry points (`make demo`, `make test`) and what they need.

CARGO ?= cargo
APT_PACKAGES := clang libelf-dev zlib1g-dev pkg-config make gcc g++ clang-format binutils xz-utils util-linux
TARGET_DIR := target

.PHONY: deps build demo test check bench clean

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
# tables and writes them to bench/RESULTS.md (BENCH_ROUNDS=N to change rounds).
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
