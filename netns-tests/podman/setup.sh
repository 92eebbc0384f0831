#!/bin/bash
# Prepares a private, throw-away podman environment for the ferrocni podman end-to-end test
# (netns-tests/tests/podman_e2e.rs). Idempotent; installs nothing and touches nothing outside
# WORKDIR.
#
# Needs these Debian packages (the lead puts them in .ci/run):
#   apt-get install -y podman runc busybox-static iptables nftables
# (plus util-linux `unshare`/`nsenter` and iproute2 `ip`, present on any Debian base image).
#
# Usage: setup.sh WORKDIR CNI_PLUGIN_DIR
# Writes:
#   WORKDIR/containers.conf  CNI backend, cni_plugin_dirs = CNI_PLUGIN_DIR, network_config_dir =
#                            WORKDIR/netconf, runtime runc (crun 1.8 rejects this machine's cgroup
#                            layout), cgroupfs, no event log, ulimits of 4096 (capped at the hard
#                            limits: root cannot raise rlimits here)
#   WORKDIR/storage.conf     vfs driver, graphroot WORKDIR/storage, runroot WORKDIR/run
#   WORKDIR/busybox.tar      a root filesystem made of busybox-static and its applet links
# and imports that tarball as image localhost/ferrocni-busybox:latest.
# Use the environment it prints on stdout (CONTAINERS_CONF=..., CONTAINERS_STORAGE_CONF=...).
# Networking is not touched here: the test runs podman inside its own network and mount
# namespaces.
set -euo pipefail

WORKDIR=${1:?usage: setup.sh WORKDIR CNI_PLUGIN_DIR}
PLUGINS=${2:?usage: setup.sh WORKDIR CNI_PLUGIN_DIR}
IMAGE=localhost/ferrocni-busybox:latest

for tool in podman runc busybox unshare nsenter ip iptables; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "setup.sh: $tool is missing (apt-get install -y podman runc busybox-static iptables nftables)" >&2
        exit 2
    }
done

mkdir -p "$WORKDIR/netconf" "$WORKDIR/storage" "$WORKDIR/run" "$WORKDIR/tmp"

# Root cannot raise rlimits here, and runc's init runs with limits below this shell's hard
# limits (asking for the hard limit itself fails): use modest values, capped at the hard limits.
cap() { local hard=$1 want=$2; if [ "$hard" = unlimited ] || [ "$hard" -gt "$want" ]; then echo "$want"; else echo "$hard"; fi; }
nofile=$(cap "$(ulimit -Hn)" 4096)
nproc=$(cap "$(ulimit -Hu)" 4096)

cat > "$WORKDIR/containers.conf.tmp" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
log_driver = "k8s-file"
netns = "bridge"

[network]
network_backend = "cni"
cni_plugin_dirs = ["$PLUGINS"]
network_config_dir = "$WORKDIR/netconf"
default_network = "podman"
default_subnet = "10.231.100.0/24"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
tmp_dir = "$WORKDIR/tmp"
CONF
mv "$WORKDIR/containers.conf.tmp" "$WORKDIR/containers.conf"

cat > "$WORKDIR/storage.conf.tmp" <<CONF
[storage]
driver = "vfs"
graphroot = "$WORKDIR/storage"
runroot = "$WORKDIR/run"
CONF
mv "$WORKDIR/storage.conf.tmp" "$WORKDIR/storage.conf"

export CONTAINERS_CONF="$WORKDIR/containers.conf"
export CONTAINERS_STORAGE_CONF="$WORKDIR/storage.conf"

if [ ! -s "$WORKDIR/busybox.tar" ]; then
    rootfs="$WORKDIR/rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/www" "$rootfs/tmp"
    cp "$(command -v busybox)" "$rootfs/bin/busybox"
    for applet in $("$rootfs/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
    done
    echo "root:x:0:0:root:/root:/bin/sh" > "$rootfs/etc/passwd"
    echo "root:x:0:" > "$rootfs/etc/group"
    echo "ferrocni-podman-ok" > "$rootfs/www/index.html"
    tar -C "$rootfs" -cf "$WORKDIR/busybox.tar.tmp" .
    mv "$WORKDIR/busybox.tar.tmp" "$WORKDIR/busybox.tar"
    rm -rf "$rootfs"
fi

if ! podman image exists "$IMAGE" 2>/dev/null; then
    # Inside a private mount namespace with an empty /var/lib and /run: podman's image code
    # keeps a blob-info cache under /var/lib/containers that must not land on the host.
    unshare --mount --propagation private -- sh -c '
        mount -t tmpfs ferrocni-varlib /var/lib && mount -t tmpfs ferrocni-run /run &&
        podman import --quiet --change "CMD [\"/bin/sh\"]" "$1" "$2" >/dev/null' import "$WORKDIR/busybox.tar" "$IMAGE"
fi

echo "CONTAINERS_CONF=$CONTAINERS_CONF"
echo "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
