#!/bin/sh
# Builds ferrocni's node image FROM scratch out of a directory of release binaries (the
# tarball's, or `make install`'s): build-image.sh BIN_DIR TAG.
# The plugins are static; the agent links glibc, so its libraries (as ldd lists them) and the
# dynamic loader go in at their own paths. Uses podman, else buildah.
set -eu
bin_dir=$1
tag=$2
here=$(cd "$(dirname "$0")" && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root/opt/cni/bin" "$root/usr/bin" "$root/etc/ferrocni" "$root/tmp" "$root/run"
agent=$bin_dir/ferrocni-agent
[ -x "$agent" ] || { echo "build-image.sh: no ferrocni-agent in $bin_dir" >&2; exit 1; }
for f in "$bin_dir"/*; do
    name=$(basename "$f")
    [ -f "$f" ] && [ -x "$f" ] && [ "$name" != ferrocni-agent ] && [ "$name" != cnitool ] || continue
    cp "$f" "$root/opt/cni/bin/$name"
done
cp "$agent" "$root/usr/bin/ferrocni-agent"
# Every library ldd resolves, and the loader (the line without "=>").
ldd "$agent" | awk '/=> \//{print $3} /^[[:space:]]*\/[^ ]+ \(/{print $1}' | sort -u |
while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
cp "$here/10-flannel.conflist" "$root/etc/ferrocni/10-flannel.conflist"
cp "$here/Containerfile" "$ctx/Containerfile"
if command -v podman >/dev/null; then
    podman build --quiet --no-cache -t "$tag" -f "$ctx/Containerfile" "$ctx"
else
    buildah bud --quiet -t "$tag" -f "$ctx/Containerfile" "$ctx"
fi
