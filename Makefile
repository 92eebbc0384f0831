# ferrocni — build, install, test, bench, dist.
PREFIX    ?= /opt/cni/bin
# The agent is a daemon, not a plugin: it goes where commands go.
BINDIR    ?= /usr/bin
UNITDIR   ?= /lib/systemd/system
IMAGE     ?= localhost/ferrocni:$(VERSION)
CARGO     ?= cargo
RUSTUP    ?= rustup
# `LIBC=glibc` builds the shipped binaries against glibc (static) even when musl is available.
LIBC      ?= musl
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
HOST      := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
ARCH      := $(shell uname -m)
MUSL      := $(ARCH)-unknown-linux-musl
DEB_ARCH  := $(subst x86_64,amd64,$(subst aarch64,arm64,$(ARCH)))
# Plugins and cnitool are linked statically, as the Go reference binaries are: they run on any
# host whatever its libc, and each exec skips the dynamic loader. musl gives smaller binaries
# with less RSS than glibc-static (docs/benchmarks.md); `build` adds the musl target with
# rustup when it is missing and falls back to glibc-static (with a notice) when it cannot.
# The chosen target triple is recorded in $(TARGET_FILE) for the steps after `build`.
#
# The default build uses the stable toolchain as it is: the release profile (opt-level z, LTO,
# one codegen unit, panic=abort, so a panic prints its message and then aborts) and
# `-C relocation-model=static`: a non-PIE static executable, which carries no relocation table
# and does not relocate itself at each exec. The link drops what a static panic=abort binary
# never reads: `.eh_frame_hdr` (nothing unwinds; it served only backtraces, which a panic no
# longer prints, its message it still does), the page padding of RELRO (which musl does not
# apply in a static binary) and of separate code, and the build ID (docs/benchmarks.md).
comma := ,
LINK_RUSTFLAGS := $(foreach a,--no-eh-frame-hdr -z$(comma)noseparate-code -z$(comma)norelro \
	--build-id=none,-C link-arg=-Wl$(comma)$(a))
BASE_STATIC_RUSTFLAGS := $(RUSTFLAGS) -C target-feature=+crt-static -C relocation-model=static \
	$(LINK_RUSTFLAGS)
# The link itself is tools/layout/link: cc with the toolchain's rust-lld, the functions of a
# pod's ADD and DEL laid out in one block (less peak RSS per plugin run, docs/benchmarks.md;
# the why is in the script). It links as plain cc would when rust-lld is missing.
FERROCNI_GCC_LD := $(shell rustc --print sysroot 2>/dev/null)/lib/rustlib/$(HOST)/bin/gcc-ld
export FERROCNI_GCC_LD
STATIC_RUSTFLAGS := $(BASE_STATIC_RUSTFLAGS) -C linker=$(CURDIR)/tools/layout/link -C linker-flavor=gcc
TARGET_FILE := target/static-target
# `TRIM=1` (for distributors) also compiles the standard library from source (the rust-src
# component, added with rustup when missing), LTO'd with our code, with panics as immediate
# aborts: no panic message, unwinder or backtrace symbolizer is linked in, so smaller binaries
# (docs/benchmarks.md), but a panic then dies with SIGILL and prints nothing. It
# needs unstable cargo/rustc flags, which a stable toolchain accepts under RUSTC_BOOTSTRAP=1.
# A missing rust-src or a failing trimmed build give the default build (with a notice).
# Recorded in $(TRIM_FILE); each kind has its own target dir, so switching does not rebuild.
TRIM      ?= 0
TRIM_FILE := target/static-trim
TRIM_RUSTFLAGS = $(STATIC_RUSTFLAGS) -Zunstable-options -Cpanic=immediate-abort
# Their own target dirs: the trimmed build's RUSTC_BOOTSTRAP would otherwise make every other
# build rebuild the proc-macros they share (and everything after them).
STATIC_DIR      := target/static
STATIC_TRIM_DIR := target/static-trimmed
STATIC    = $$(if [ "$$(cat $(TRIM_FILE))" = 1 ]; then echo $(STATIC_TRIM_DIR); else echo $(STATIC_DIR); fi)/$$(cat $(TARGET_FILE))/release
# Builds the static binaries: $(call static_cargo,<cargo build arguments>).
static_cargo = t=$$(cat $(TARGET_FILE)); \
	if [ "$$(cat $(TRIM_FILE))" = 1 ]; then \
	    CARGO_TARGET_DIR=$(STATIC_TRIM_DIR) RUSTC_BOOTSTRAP=1 RUSTFLAGS="$(TRIM_RUSTFLAGS)" \
	        $(CARGO) build --release --target $$t -Z build-std=std,panic_abort $(1) && exit 0; \
	    echo "notice: the trimmed build (std from source, immediate-abort panics) failed;" \
	        "building with the prebuilt standard library instead"; \
	    echo 0 > $(TRIM_FILE); \
	fi; \
	CARGO_TARGET_DIR=$(STATIC_DIR) RUSTFLAGS="$(STATIC_RUSTFLAGS)" $(CARGO) build --release --target $$t $(1)
# The agent is a daemon, not exec'd per pod: it stays dynamic (it resolves host names via NSS).
RELEASE   := target/release
AGENT     := ferrocni-agent
# Every binary the suite ships: plugins/ and ipam/ hold exactly the plugins, each named as its
# CNI `type` (the libraries are in crates/, the agent in agent/).
PLUGINS   := $(shell awk -F'"' '/^name = /{print $$2; nextfile}' plugins/*/Cargo.toml ipam/*/Cargo.toml)
BINS      := $(PLUGINS) cnitool
# The Debian packages the tests use (one list, shared with .ci/run and the README).
TEST_PACKAGES := $(shell sed 's/\#.*//' .ci/packages.txt)
DIST      := target/dist
UNITS     := $(wildcard packaging/systemd/*.service packaging/systemd/*.socket)
DIST_NAME := ferrocni-linux-$(DEB_ARCH)-v$(VERSION)
DEB_NAME  := ferrocni_$(VERSION)_$(DEB_ARCH)

.PHONY: all build static-target install install-units image test test-deps test-release test-dist \
        test-unit test-kernel test-kernel-run test-kernel-tmp lint bench layout-profile dist clean fuzz fuzz-check \
        demo demo-cluster kube-bins

all: build

# Picks the target of the shipped binaries: musl when its standard library is installed or
# `rustup target add` can add it, else the host's glibc (statically); and whether to trim.
static-target:
	@mkdir -p target; \
	have_musl() { ls "$$(rustc --print target-libdir --target $(MUSL) 2>/dev/null)"/libstd-*.rlib >/dev/null 2>&1; }; \
	if [ "$(LIBC)" = musl ] && ! have_musl; then \
	    echo "adding the Rust target $(MUSL) (rustup target add)"; \
	    $(RUSTUP) target add $(MUSL) || true; \
	fi; \
	if [ "$(LIBC)" = musl ] && have_musl; then t=$(MUSL); else \
	    [ "$(LIBC)" = musl ] && echo "notice: the Rust target $(MUSL) cannot be installed here;" \
	        "building the plugins and cnitool statically against glibc instead (larger binaries," \
	        "slower exec; see docs/building-and-testing.md)"; \
	    t=$(HOST); \
	fi; \
	echo $$t > $(TARGET_FILE); \
	rust_src="$$(rustc --print sysroot)/lib/rustlib/src/rust/library/std"; \
	if [ "$(TRIM)" = 1 ] && [ ! -d "$$rust_src" ]; then \
	    echo "adding the rust-src component (rustup component add), for the trimmed build"; \
	    $(RUSTUP) component add rust-src || true; \
	fi; \
	if [ "$(TRIM)" = 1 ] && [ -d "$$rust_src" ]; then echo 1; else \
	    [ "$(TRIM)" = 1 ] && echo "notice: no rust-src component here; building with the prebuilt" \
	        "standard library (larger binaries; see docs/building-and-testing.md)" >&2; \
	    echo 0; \
	fi > $(TRIM_FILE)

# `--target` keeps the static flags away from build scripts and proc-macros.
build: static-target
	@$(call static_cargo,--workspace --bins --exclude $(AGENT) --exclude netns-tests)
	$(CARGO) build --release -p $(AGENT)

# Without cargo on PATH (`sudo` and a toolchain in your home), installs what `make build` built.
install: $(if $(shell command -v $(CARGO) 2>/dev/null),build)
	@test -f $(TARGET_FILE) || { echo "nothing built yet: run make build first"; exit 1; }
	install -d $(DESTDIR)$(PREFIX) $(DESTDIR)$(BINDIR)
	for b in $(BINS); do install -m 0755 $(STATIC)/$$b $(DESTDIR)$(PREFIX)/$$b; done
	install -m 0755 $(RELEASE)/$(AGENT) $(DESTDIR)$(BINDIR)/$(AGENT)
	@# cnitool is a command for people too: on PATH, beside the plugins it runs.
	if [ "$(PREFIX)" != "$(BINDIR)" ]; then ln -sf $(PREFIX)/cnitool $(DESTDIR)$(BINDIR)/cnitool; fi

# The suite at work, in throw-away namespaces that leave the host as it was (tools/demo/): one
# node's chain through cnitool (`demo`), or etcd and three nodes running the agent with BACKEND
# (`demo-cluster`). Root. Like `install`, they build first when cargo is on PATH.
BACKEND ?= vxlan
demo: $(if $(shell command -v $(CARGO) 2>/dev/null),build)
	@test -f $(TARGET_FILE) || { echo "nothing built yet: run make build first"; exit 1; }
	@tools/demo/demo.sh --bin-dir $(STATIC)

demo-cluster: $(if $(shell command -v $(CARGO) 2>/dev/null),build)
	@test -f $(TARGET_FILE) || { echo "nothing built yet: run make build first"; exit 1; }
	@tools/demo/demo-cluster.sh --backend $(BACKEND) --bin-dir $(STATIC) --agent $(RELEASE)/$(AGENT)

# The systemd units (agent, dhcp daemon and its socket) and the agent's FLANNELD_* environment
# file, which an existing one is never replaced by. Then: systemctl daemon-reload.
install-units:
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)/etc/default
	install -m 0644 $(UNITS) $(DESTDIR)$(UNITDIR)/
	test -e $(DESTDIR)/etc/default/$(AGENT) || \
	    install -m 0600 packaging/$(AGENT).default $(DESTDIR)/etc/default/$(AGENT)

# The release tarball (every binary at its top level, like upstream's
# cni-plugins-linux-<arch>-<version>.tgz, with SHA256SUMS inside and a .sha256 beside it) and a
# .deb: the plugins in /opt/cni/bin, the agent in /usr/bin, systemd units for the agent and the
# dhcp daemon, and /etc/default/ferrocni-agent (a conffile) for the FLANNELD_* settings. No
# maintainer scripts: `systemctl daemon-reload` and `enable --now` are the operator's call.
dist: build
	rm -rf $(DIST) && mkdir -p $(DIST)/tgz $(DIST)/deb/DEBIAN
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(DIST)/tgz) PREFIX= BINDIR= >/dev/null
	cp LICENSE README.md $(DIST)/tgz/
	cd $(DIST)/tgz && sha256sum $(BINS) $(AGENT) > SHA256SUMS
	tar -C $(DIST)/tgz --owner=0 --group=0 --sort=name -czf $(DIST)/$(DIST_NAME).tgz .
	cd $(DIST) && sha256sum $(DIST_NAME).tgz > $(DIST_NAME).tgz.sha256
	$(MAKE) --no-print-directory install install-units DESTDIR=$(abspath $(DIST)/deb) >/dev/null
	install -d $(DIST)/deb/usr/share/doc/ferrocni
	cp LICENSE README.md $(DIST)/deb/usr/share/doc/ferrocni/
	echo /etc/default/$(AGENT) > $(DIST)/deb/DEBIAN/conffiles
	@glibc=$$(objdump -T $(RELEASE)/$(AGENT) | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1 | cut -d_ -f2); \
	{ echo "Package: ferrocni"; echo "Version: $(VERSION)"; echo "Architecture: $(DEB_ARCH)"; \
	  echo "Maintainer: ferrocni developers <ferrocni@localhost>"; \
	  echo "Depends: libc6 (>= $$glibc), libgcc-s1"; \
	  echo "Section: net"; echo "Priority: optional"; \
	  echo "Installed-Size: $$(du -sk --exclude=DEBIAN $(DIST)/deb | cut -f1)"; \
	  echo "Description: CNI plugins in Rust (drop-in for the reference plugins)"; \
	  echo " ferrocni's plugins and cnitool in $(PREFIX), its node agent (flanneld's etcd"; \
	  echo " layout) in $(BINDIR), with systemd units for the agent and the dhcp daemon."; \
	} > $(DIST)/deb/DEBIAN/control
	dpkg-deb --root-owner-group -Zgzip --build $(DIST)/deb $(DIST)/$(DEB_NAME).deb >/dev/null
	cd $(DIST) && sha256sum $(DEB_NAME).deb > $(DEB_NAME).deb.sha256
	@rm -rf $(DIST)/tgz $(DIST)/deb; ls -l $(DIST)

# The node image for Kubernetes (docs/kubernetes.md): FROM scratch, built with podman (or
# buildah) from the release tarball's binaries, saved beside it as an OCI archive.
image: dist
	set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	tar -C $$tmp -xzf $(DIST)/$(DIST_NAME).tgz; \
	sh packaging/container/build-image.sh $$tmp $(IMAGE); \
	rm -f $(DIST)/$(DIST_NAME)-image.tar; \
	podman save --format oci-archive -o $(DIST)/$(DIST_NAME)-image.tar $(IMAGE)
	@echo "image $(IMAGE), saved as $(DIST)/$(DIST_NAME)-image.tar"

# Installs the missing test packages of .ci/packages.txt when run as root on Debian (and says
# which); otherwise only names the missing ones: the tests that need them skip themselves.
test-deps:
	@missing=""; for p in $(TEST_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q ' installed$$' || missing="$$missing $$p"; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "note: test packages missing:$$missing (sudo make test installs them); the tests needing them skip"; \
	    exit 0; \
	fi; \
	echo "installing test packages:$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq $$missing >/dev/null

# The full test suite: unit tests everywhere, netns end-to-end tests when run as root, then
# (as root) the driver-dependent ones in a VM on a stock kernel (test-kernel).
# Binaries are built first because end-to-end tests exec them.
test: test-deps
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory kube-bins; else \
	    echo "note: the Kubernetes binaries (make kube-bins) are built as root only; the tests needing them skip"; fi
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast
	$(MAKE) --no-print-directory fuzz-check
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory test-kernel-run; else \
	    echo "note: the kernel tests (make test-kernel) need root; not run"; fi
	$(MAKE) test-release

# Kubernetes 1.20.2 (apiserver, controller-manager, scheduler, kubelet, kube-proxy, kubectl)
# built from Debian 12's source package for the Kubernetes tests, into a cache outside the
# checkout: ${FERROCNI_KUBE_CACHE:-$HOME/.cache/ferrocni}/kubernetes-1.20.2/bin. About 6-8
# minutes the first time (and a 34 MB download, kept in the cache), seconds once built.
kube-bins:
	netns-tests/kube/build-kubernetes

# The end-to-end tests listed in netns-tests/vm/kernel-tests.txt, in a QEMU VM booted on the
# stock kernel (Debian's linux-image-amd64) with this machine's root filesystem, where a missing
# driver fails instead of skipping (docs/building-and-testing.md). Root. VM_ARGS passes options to the runner:
# `make test-kernel VM_ARGS="--kernel /boot/vmlinuz-6.12.0-1-amd64 --cpus 4"`.
VM_ARGS ?=
test-kernel: test-deps test-kernel-run
test-kernel-run:
	netns-tests/vm/run $(VM_ARGS)
	$(MAKE) --no-print-directory test-kernel-tmp

# A checkout under /tmp, where people often try a project, runs in the VM too (the VM mounts a
# /tmp of its own, which must not hide it): one target, from this checkout bound under /tmp in
# a mount namespace of its own, built in a target dir of its own there that goes afterwards (a
# build through another path would leave that path in the shared target's test executables).
test-kernel-tmp:
	@unshare --mount --propagation private sh -c 'dir=$$(mktemp -d /tmp/ferrocni-checkout.XXXXXX) && \
	    mount --bind "$(CURDIR)" "$$dir" && CARGO_TARGET_DIR="$$dir/target/tmp-checkout" \
	    "$$dir/netns-tests/vm/run" --test tap_netns; rc=$$?; \
	    rm -rf "$$dir/target/tmp-checkout"; umount "$$dir"; rmdir "$$dir"; exit $$rc'

# The shipped binaries as users get them, through the end-to-end tests that run the example
# conflists of every plugin, pods on a bridge, cnitool and the bad-input fuzzing (where a
# panic would abort the process): `make install` into a scratch DESTDIR must ship every binary,
# byte for byte the release tarball's; the tarball (checksums verified) and the .deb (installed
# by dpkg into a scratch root, then removed) each run the smoke set. The scratch root's dpkg
# database is empty, so it knows no libc6 (hence --force-depends).
RELEASE_TESTS := examples bridge_pods bridge_conflists portmap_netns firewall_netns tuning_netns \
                 vxlan_plugin cnitool_loopback bad_input ptp_netns macvlan_netns tap_netns \
                 host_device_netns containerd_shapes netfilter_netlink static_ipam
SMOKE = $(CARGO) test -q -p netns-tests $(addprefix --test ,$(RELEASE_TESTS))
test-release: dist
	$(CARGO) build -q -p netns-tests --tests
	set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(MAKE) --no-print-directory install DESTDIR=$$tmp/install >/dev/null; \
	mkdir $$tmp/tgz && tar -C $$tmp/tgz -xzf $(DIST)/$(DIST_NAME).tgz; \
	(cd $(DIST) && sha256sum --quiet -c $(DIST_NAME).tgz.sha256); \
	(cd $$tmp/tgz && sha256sum --quiet -c SHA256SUMS); \
	for b in $(addprefix $(PREFIX)/,$(BINS)) $(BINDIR)/$(AGENT); do \
	    cmp $$tmp/install$$b $$tmp/tgz/$$(basename $$b) || { echo "make install and the tarball differ on $$b"; exit 1; }; \
	done; \
	echo "== smoke set on the tarball's binaries"; \
	FERROCNI_BIN_DIR=$$tmp/tgz $(SMOKE); \
	mkdir -p $$tmp/root/var/lib/dpkg/info $$tmp/root/var/lib/dpkg/updates; \
	touch $$tmp/root/var/lib/dpkg/status; \
	dpkg --root=$$tmp/root --force-depends --force-script-chrootless -i $(DIST)/$(DEB_NAME).deb \
	    >/dev/null 2>&1; \
	for b in $(addprefix $(PREFIX)/,$(BINS)) $(BINDIR)/$(AGENT); do \
	    test -x $$tmp/root$$b || { echo "the .deb misses $$b"; exit 1; }; \
	done; \
	for u in $(notdir $(UNITS)); do \
	    test -f $$tmp/root$(UNITDIR)/$$u || { echo "the .deb misses $(UNITDIR)/$$u"; exit 1; }; \
	done; \
	test -f $$tmp/root/etc/default/$(AGENT) || { echo "the .deb misses /etc/default/$(AGENT)"; exit 1; }; \
	echo "== systemd-analyze verify on the .deb's units"; \
	cp -n /lib/systemd/system/*.target $$tmp/root$(UNITDIR)/; \
	systemd-analyze verify --root=$$tmp/root $(addprefix $$tmp/root$(UNITDIR)/,$(notdir $(UNITS))); \
	echo "== smoke set on the .deb's binaries (dpkg --root into a scratch root)"; \
	FERROCNI_BIN_DIR=$$tmp/root$(PREFIX) $(SMOKE); \
	dpkg --root=$$tmp/root --force-script-chrootless -r ferrocni >/dev/null; \
	left=$$(ls -A $$tmp/root$(PREFIX) 2>/dev/null || true); \
	[ -z "$$left" ] || { echo "dpkg -r left files in $(PREFIX): $$left"; exit 1; }; \
	[ ! -e $$tmp/root$(BINDIR)/$(AGENT) ] || { echo "dpkg -r left $(BINDIR)/$(AGENT)"; exit 1; }; \
	echo "== the node image (podman, FROM scratch) from the tarball's binaries"; \
	FERROCNI_BIN_DIR=$$tmp/tgz $(CARGO) test -q -p netns-tests --test container_image; \
	echo "== the README's quick start, as written (private mount and network namespace)"; \
	FERROCNI_QUICKSTART=1 $(CARGO) test -q -p netns-tests --test readme_quickstart; \
	echo "== make demo and make demo-cluster, as a newcomer runs them"; \
	for demo in demo demo-cluster; do \
	    $(MAKE) --no-print-directory $$demo >$$tmp/$$demo.out 2>&1 || { cat $$tmp/$$demo.out; exit 1; }; \
	    tail -n 1 $$tmp/$$demo.out; \
	done

# Unit tests only (no root needed).
test-unit:
	$(CARGO) test --workspace --lib --bins

# Coverage-guided fuzzing (libFuzzer) of every parser that reads outside input: fuzz/, its
# own workspace, one target per parser (docs/building-and-testing.md). `make fuzz` fuzzes
# each target FUZZ_SECONDS (FUZZ_TARGETS="a b" for some) and reports what it found;
# `make fuzz-check`, part of `make test`, builds them all and runs each on its committed
# inputs (fuzz/seeds/<target>/ and fuzz/corpus.tar.xz) and for FUZZ_CHECK_SECONDS, so a
# target that stops building or crashes on one of them fails.
FUZZ_SECONDS ?= 60
FUZZ_CHECK_SECONDS ?= 1
FUZZ_TARGETS ?=
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run run $(FUZZ_TARGETS)

fuzz-check:
	FUZZ_SECONDS=$(FUZZ_CHECK_SECONDS) fuzz/run check $(FUZZ_TARGETS)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Side-by-side benchmarks against the reference Go plugins (root; reference in /usr/lib/cni).
bench: test-deps build
	$(CARGO) build --release -p netns-tests --bin ferrocni-bench --bin udp-proxy-node
	@$(call static_cargo,-p overlay --example reconcile_bench)
	$(RELEASE)/ferrocni-bench --ours $(STATIC) --reference /usr/lib/cni \
	    $$([ "$$(cat $(TRIM_FILE))" = 1 ] && echo --trimmed)

# Regenerates tools/layout/hot-functions.txt, the layout of the static binaries (root and
# valgrind; see tools/layout/profile). Then `make build` and `make bench` show the effect.
layout-profile: static-target
	tools/layout/profile $$(cat $(TARGET_FILE)) "$(BASE_STATIC_RUSTFLAGS)"

clean:
	$(CARGO) clean
	rm -rf fuzz/target
