# ferrocni — build, install, test, bench.
PREFIX    ?= /opt/cni/bin
CARGO     ?= cargo
RELEASE   := target/release
# Every binary the suite ships (plugin binaries are named exactly as their CNI `type`).
PLUGINS   := $(shell sed -n 's/^name = "\(.*\)"/\1/p' plugins/*/Cargo.toml ipam/*/Cargo.toml | grep -v '^netkit$$')
BINS      := $(PLUGINS) cnitool

.PHONY: all build install test test-unit lint bench clean

all: build

build:
	$(CARGO) build --release --workspace --bins

install: build
	install -d $(DESTDIR)$(PREFIX)
	for b in $(BINS); do install -m 0755 $(RELEASE)/$$b $(DESTDIR)$(PREFIX)/$$b; done

# The full test suite: unit tests everywhere, netns end-to-end tests when run as root.
# Binaries are built first because end-to-end tests exec them.
test:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast

# Unit tests only (no root needed).
test-unit:
	$(CARGO) test --workspace --lib --bins

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Side-by-side benchmarks against the reference Go plugins (root; reference in /usr/lib/cni).
bench: build
	$(CARGO) build --release -p netns-tests --bin ferrocni-bench
	$(CARGO) build --release -p vxlan --example reconcile_bench
	$(RELEASE)/ferrocni-bench --ours $(RELEASE) --reference /usr/lib/cni

clean:
	$(CARGO) clean
