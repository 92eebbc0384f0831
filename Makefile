# ferrocni — build, install, test, bench.
PREFIX    ?= /opt/cni/bin
CARGO     ?= cargo
HOST      := $(shell rustc -vV | sed -n 's/^host: //p')
# Plugins and cnitool are linked statically (glibc static-pie), as the Go reference binaries
# are: they run on any host whatever its glibc, and each exec skips the dynamic loader
# (about 0.4 ms and 0.8 MiB of RSS less per plugin call; see README, Benchmarks).
STATIC    := target/$(HOST)/release
STATIC_RUSTFLAGS := $(RUSTFLAGS) -C target-feature=+crt-static
# The agent is a daemon, not exec'd per pod: it stays dynamic (it resolves host names via NSS).
RELEASE   := target/release
AGENT     := ferrocni-agent
# Every binary the suite ships (plugin binaries are named exactly as their CNI `type`; netkit and
# attach are libraries).
PLUGINS   := $(shell awk -F'"' '/^name = /{print $$2; nextfile}' plugins/*/Cargo.toml ipam/*/Cargo.toml \
	       | grep -v -e '^netkit$$' -e '^attach$$' -e '^$(AGENT)$$')
BINS      := $(PLUGINS) cnitool

.PHONY: all build install test test-release test-unit lint bench clean

all: build

# `--target` keeps the static flags away from build scripts and proc-macros.
build:
	RUSTFLAGS="$(STATIC_RUSTFLAGS)" $(CARGO) build --release --target $(HOST) --workspace --bins \
	    --exclude $(AGENT) --exclude netns-tests
	$(CARGO) build --release -p $(AGENT)

install: build
	install -d $(DESTDIR)$(PREFIX)
	for b in $(BINS); do install -m 0755 $(STATIC)/$$b $(DESTDIR)$(PREFIX)/$$b; done
	install -m 0755 $(RELEASE)/$(AGENT) $(DESTDIR)$(PREFIX)/$(AGENT)

# The full test suite: unit tests everywhere, netns end-to-end tests when run as root.
# Binaries are built first because end-to-end tests exec them.
test:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast
	$(MAKE) test-release

# `make install` into a scratch DESTDIR, then the shipped (static, release) binaries through
# the end-to-end tests that run the example conflists of every plugin, pods on a bridge,
# cnitool and the bad-input fuzzing (where a panic would abort the process).
RELEASE_TESTS := examples bridge_pods bridge_conflists portmap_netns firewall_netns tuning_netns \
                 vxlan_plugin cnitool_loopback bad_input ptp_netns macvlan_netns tap_netns \
                 host_device_netns
test-release: build
	tmp=$$(mktemp -d); $(MAKE) --no-print-directory install DESTDIR=$$tmp >/dev/null; st=$$?; \
	    for b in $(BINS) $(AGENT); do \
	        test -x $$tmp$(PREFIX)/$$b || { echo "make install missed $$b"; st=1; }; \
	    done; rm -rf $$tmp; exit $$st
	FERROCNI_BIN_DIR=$(abspath $(STATIC)) $(CARGO) test -p netns-tests \
	    $(addprefix --test ,$(RELEASE_TESTS))

# Unit tests only (no root needed).
test-unit:
	$(CARGO) test --workspace --lib --bins

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Side-by-side benchmarks against the reference Go plugins (root; reference in /usr/lib/cni).
bench: build
	$(CARGO) build --release -p netns-tests --bin ferrocni-bench
	RUSTFLAGS="$(STATIC_RUSTFLAGS)" $(CARGO) build --release --target $(HOST) -p vxlan \
	    --example reconcile_bench
	$(RELEASE)/ferrocni-bench --ours $(STATIC) --reference /usr/lib/cni

clean:
	$(CARGO) clean
