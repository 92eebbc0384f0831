# shellcheck shell=bash
# What both demos (demo.sh, demo-cluster.sh) share: their options, the throw-away namespaces
# they run in, headed steps with the commands shown as they would be typed, and the check that
# the host is left as it was. Sourced, not run.
#
# How the host is kept out of it: the script re-runs itself under
#   unshare --mount --net --pid --fork --kill-child --mount-proc --propagation private
# so it has its own mount table, its own network namespace (the demo's "host side") and its own
# PID namespace. Inside, /run, /opt/cni/bin, /etc/cni/net.d and /var/lib/cni (and whatever the
# demo lists) are fresh tmpfs mounts seen by the demo alone. When the script ends, however it
# ends (done, failed, Ctrl-C, killed), the kernel kills every process left in its PID namespace,
# and with the last of them go its mounts, its namespaces' bind mounts under /run/netns, and so
# the network namespaces with every link, address, route and rule in them. The outer half then
# checks that: none of the demo's processes still runs, and the host's links, mounts and CNI
# directories are what they were before.

demo_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Exit statuses: 0 the demo ran, 1 a step failed, 2 bad usage, 3 it cannot run on this machine
# (a tool, a kernel driver or the agent's support for a backend is missing).
readonly DEMO_FAILED=1 DEMO_USAGE=2 DEMO_UNAVAILABLE=3

# Directories the demo may write to, made private inside; the host check compares them.
demo_watched_dirs=(/opt/cni /etc/cni /var/lib/cni /etc/ferrocni /run/flannel /run/ferrocni)

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
    demo_bold=$'\e[1m' demo_dim=$'\e[36m' demo_red=$'\e[31m' demo_reset=$'\e[0m'
else
    demo_bold='' demo_dim='' demo_red='' demo_reset=''
fi

# --- Output -----------------------------------------------------------------------------------

demo_step_number=0 demo_step_title='' demo_last_command=''

# A numbered heading.
step() {
    demo_step_number=$((demo_step_number + 1))
    demo_step_title=$*
    printf '\n%s%d. %s%s\n' "$demo_bold" "$demo_step_number" "$*" "$demo_reset"
}

# An explanation line.
say() { printf '%s\n' "$*"; }

# A command as it would be typed (`show node1 CMD` prefixes the node's name to the prompt).
show() {
    local where=
    [ $# -lt 2 ] || { where=$1; shift; }
    printf '%s%s$ %s%s\n' "$demo_dim" "$where" "$1" "$demo_reset"
}

# Shows a command, then runs it. A leading `sudo` is shown (it is what you would type) but not
# run: the demo already runs as root, and `sudo` may not even be installed.
run() {
    show "$1"
    demo_last_command=$1
    eval "${1#sudo }"
}

# Prints why the demo stops, and stops it (status $DEMO_FAILED unless given).
die() {
    printf '%s%s%s\n' "$demo_red" "$1" "$demo_reset" >&2
    exit "${2:-$DEMO_FAILED}"
}

# --- Options ----------------------------------------------------------------------------------

demo_usage() {
    sed -n '2,/^set -/s/^# \{0,1\}//p' "$0" | sed '$d' >&2
    exit "$DEMO_USAGE"
}

# The built binaries: `make build`'s static plugins, or any directory holding them.
demo_default_bin_dir() {
    local target
    target=$(cat "$demo_repo/target/static-target" 2>/dev/null) || return 0
    for dir in static-trimmed static; do
        if [ "$dir" = static-trimmed ] && [ "$(cat "$demo_repo/target/static-trim" 2>/dev/null)" != 1 ]; then
            continue
        fi
        [ -x "$demo_repo/target/$dir/$target/release/cnitool" ] && echo "$demo_repo/target/$dir/$target/release" && return
    done
}

# Sets demo_bin_dir, demo_agent and demo_backend from the command line.
demo_parse_options() {
    demo_bin_dir='' demo_agent='' demo_backend=vxlan
    while [ $# -gt 0 ]; do
        case $1 in
            --bin-dir) demo_bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
            --agent) demo_agent=${2:?--agent needs a path}; shift 2 ;;
            --backend) demo_backend=${2:?--backend needs a name}; shift 2 ;;
            -h|--help) demo_usage ;;
            *) echo "unknown option $1" >&2; demo_usage ;;
        esac
    done
    [ -n "$demo_bin_dir" ] || demo_bin_dir=$(demo_default_bin_dir)
    [ -n "$demo_bin_dir" ] || die "nothing built yet: run make build first (or pass --bin-dir)" "$DEMO_USAGE"
    demo_bin_dir=$(cd "$demo_bin_dir" && pwd) || die "no directory $demo_bin_dir" "$DEMO_USAGE"
    [ -x "$demo_bin_dir/cnitool" ] || die "$demo_bin_dir holds no cnitool: run make build first" "$DEMO_USAGE"
    if [ -z "$demo_agent" ]; then
        for a in "$demo_bin_dir/ferrocni-agent" "$demo_repo/target/release/ferrocni-agent"; do
            [ -x "$a" ] && demo_agent=$a && break
        done
    fi
    [ -z "$demo_agent" ] || demo_agent=$(realpath "$demo_agent")
}

# Stops with $DEMO_UNAVAILABLE unless root and every command named is there.
demo_require() {
    [ "$(id -u)" = 0 ] || die "the demo needs root: sudo make demo" "$DEMO_UNAVAILABLE"
    local missing=() tool
    for tool in unshare nsenter ip "$@"; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [ ${#missing[@]} -eq 0 ] ||
        die "missing: ${missing[*]} (the packages in .ci/packages.txt have them; sudo make test-deps installs them)" "$DEMO_UNAVAILABLE"
}

# --- Outside: run isolated, then check the host -----------------------------------------------

# The devices a tunnel module adds to every network namespace, the host's included, when it
# loads (ipip: tunl0; ip_gre: gre0...): the kernel's, not the demo's, though a demo's tunnel may
# be what loaded the module.
demo_fallback_devices='^(tunl0|gre0|gretap0|erspan0|sit0|ip6tnl0|ip6gre0|ip_vti0|ip6_vti0)$'

# The host's link names.
demo_host_links() {
    ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort
}

# Snapshot of what the demo must leave as it was: the host's links, the mounts at or under the
# watched directories, and every file there.
demo_host_snapshot() {
    local d pattern
    pattern=$(printf '%s|' "${demo_watched_dirs[@]}" "$demo_state")
    pattern="^(${pattern%|})(/|\$)"
    echo "## links"
    demo_host_links | grep -Ev "$demo_fallback_devices" || true
    echo "## mounts"
    awk '{print $5}' /proc/self/mountinfo | grep -E "$pattern" | sort || true
    echo "## mounts made by the demo"
    grep -E ' - [^ ]+ ferrocni-demo ' /proc/self/mountinfo || true
    echo "## files"
    for d in "${demo_watched_dirs[@]}"; do
        if [ -e "$d" ]; then
            find "$d" -printf '%p %y %m %s %T@\n' 2>/dev/null | sort
        else
            echo "$d absent"
        fi
    done
}

# The demo's processes still running: every process it starts inherits FERROCNI_DEMO_STATE,
# this run's own directory. (Not namespace numbers: the kernel gives a freed namespace's number
# to the next one made, maybe by another demo running at the same time.)
demo_leftover_processes() {
    local environ pid
    grep -lzxF "FERROCNI_DEMO_STATE=$demo_state" /proc/[0-9]*/environ 2>/dev/null |
        while read -r environ; do
            pid=${environ#/proc/} pid=${pid%/environ}
            echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
        done || true
}

# Runs this script again isolated (see the top of this file), then checks and says whether
# anything was left. Exits with the demo's status (or $DEMO_FAILED if something was left).
demo_run_isolated() {
    local base=${TMPDIR:-/tmp} status=0 interrupted=
    case $base in /run | /run/*) base=/tmp ;; esac # the demo hides the host's /run
    demo_state=$(mktemp -d "$base/ferrocni-demo.XXXXXX")
    mkdir "$demo_state/scratch"
    demo_host_snapshot >"$demo_state/before"
    demo_host_links >"$demo_state/links-before"
    # In the foreground, so Ctrl-C reaches the demo itself (which then stops); this half waits
    # for it and checks the host either way.
    trap 'interrupted=1' INT
    FERROCNI_DEMO_STATE=$demo_state FERROCNI_DEMO_BIN_DIR=$demo_bin_dir \
        FERROCNI_DEMO_AGENT=$demo_agent FERROCNI_DEMO_BACKEND=$demo_backend \
        unshare --mount --net --pid --fork --kill-child --mount-proc --propagation private \
        -- bash "$0" || status=$?
    trap - INT
    demo_check_host "$status" "$interrupted"
}

demo_check_host() {
    local status=$1 interrupted=$2 processes changes net mnt fallback
    processes=$(demo_leftover_processes)
    demo_host_snapshot >"$demo_state/after"
    changes=$(diff "$demo_state/before" "$demo_state/after" | grep '^[<>]' || true)
    net=$(grep -c '^net:' "$demo_state/namespaces" 2>/dev/null || true)
    mnt=$(grep -c '^mnt:' "$demo_state/namespaces" 2>/dev/null || true)
    echo
    [ -z "$interrupted" ] || say "interrupted: the demo's namespaces were torn down"
    if [ -n "$processes" ] || [ -n "$changes" ]; then
        [ -z "$processes" ] || printf 'still running:\n%s\n' "$processes"
        [ -z "$changes" ] || printf 'changed on the host while the demo ran (< before, > after):\n%s\n' "$changes"
        say "the demo's namespaces and files are kept for inspection in $demo_state"
        say "${demo_red}something was left behind (above)${demo_reset}"
        exit "$DEMO_FAILED"
    fi
    fallback=$(demo_host_links | comm -13 "$demo_state/links-before" - | paste -sd' ')
    [ -z "$fallback" ] || say "note: the kernel added $fallback to the host, as to every namespace, when a tunnel's module loaded (it stays until the module is unloaded)"
    rm -rf "$demo_state"
    say "nothing left: none of the demo's processes runs, its namespaces went with them (${net:-0} network, ${mnt:-0} mount), and the host's links, mounts, /opt/cni, /etc/cni and /var/lib/cni are as they were"
    exit "$status"
}

# --- Inside -----------------------------------------------------------------------------------

# Notes a namespace the demo made (the final line counts them), as the kernel names it (`net:[4026532...]`): PATH is
# a process's /proc/PID/ns/TYPE link or a file bound to a namespace (/run/netns/NAME).
demo_record_ns() {
    if [ -L "$2" ]; then
        readlink "$2"
    else
        printf '%s:[%s]\n' "$1" "$(stat -L -c %i "$2")"
    fi >>"$demo_state/namespaces"
}

# `ip netns add NAME`, shown, and the new namespace recorded.
netns_add() {
    run "sudo ip netns add $1"
    demo_record_ns net "/run/netns/$1"
}

# host-local's leases in a network's directory: files named by address (not its `lock` and
# `last_reserved_ip.N`).
lease_files() {
    find "$1" -maxdepth 1 -type f -regex '.*/[0-9a-f.:]+' -printf '%f\n' 2>/dev/null
}

# Shows a command whose output should be empty, runs it, and says "(nothing)" when it is;
# its exit status (grep's 1 when nothing matched) does not stop the demo.
run_expecting_nothing() {
    local out
    show "$1"
    out=$(eval "${1#sudo }" 2>&1 || true)
    say "${out:-(nothing)}"
}

# Gives this mount namespace its own empty copy of each directory: a tmpfs over it. One the
# host lacks is made in an overlay of its nearest existing parent, whose writes go to the
# scratch tmpfs, so the host never sees the new directory either. Overlays first: an overlay
# mounted later would hide the tmpfs mounts beneath it.
demo_private_dirs() {
    local dir parent overlaid=" " layer
    for dir in "$@"; do
        parent=$dir
        while [ ! -d "$parent" ]; do parent=$(dirname "$parent"); done
        [ "$parent" != "$dir" ] || continue
        [ "$parent" != / ] || die "cannot keep $dir private: $(dirname "$dir") does not exist"
        case $overlaid in *" $parent "*) ;; *)
            layer=$demo_scratch/layers$(printf '%s' "$parent" | tr / _)
            mkdir -p "$layer/upper" "$layer/work"
            mount -t overlay ferrocni-demo \
                -o "lowerdir=$parent,upperdir=$layer/upper,workdir=$layer/work" "$parent"
            overlaid="$overlaid$parent "
        esac
        mkdir -p "$dir"
    done
    for dir in "$@"; do
        mount -t tmpfs -o mode=0755 ferrocni-demo "$dir"
    done
}

# Sets up the inside: scratch space, the private directories, its own /run and /sys, loopback
# up, and the binaries where `make install` puts them (links to the built ones).
demo_enter() {
    demo_state=$FERROCNI_DEMO_STATE demo_bin_dir=$FERROCNI_DEMO_BIN_DIR
    demo_agent=$FERROCNI_DEMO_AGENT demo_backend=$FERROCNI_DEMO_BACKEND
    demo_scratch=$demo_state/scratch
    demo_record_ns net /proc/self/ns/net
    demo_record_ns mnt /proc/self/ns/mnt
    demo_record_ns pid /proc/self/ns/pid
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap demo_on_exit EXIT
    mount -t tmpfs -o mode=0755 ferrocni-demo "$demo_scratch"
    demo_private_dirs /opt/cni/bin /etc/cni/net.d /var/lib/cni "$@"
    mount -t tmpfs -o mode=0755 ferrocni-demo /run
    mkdir -p /run/netns /run/ferrocni-demo
    # sysfs shows the devices of the network namespace that mounts it: this one's.
    mount -t sysfs ferrocni-demo /sys
    ip link set lo up
    local dir bin
    for dir in "$demo_repo"/plugins/* "$demo_repo"/ipam/*; do
        bin=$demo_bin_dir/$(basename "$dir")
        [ ! -x "$bin" ] || [ "$(basename "$dir")" = ferrocni-agent ] || ln -s "$bin" /opt/cni/bin/
    done
    ln -s "$demo_bin_dir/cnitool" /opt/cni/bin/cnitool
    # cnitool and the agent on PATH, as `make install` puts them in /usr/bin.
    mkdir "$demo_scratch/bin"
    ln -s /opt/cni/bin/cnitool "$demo_scratch/bin/cnitool"
    [ -z "$demo_agent" ] || ln -s "$demo_agent" "$demo_scratch/bin/ferrocni-agent"
    export PATH=$demo_scratch/bin:$PATH
    cd "$demo_repo" || exit
}

# Hooks for the demo: what to print when it fails (e.g. logs).
demo_on_failure() { :; }

demo_on_exit() {
    local status=$?
    trap - EXIT
    case $status in
        0 | "$DEMO_UNAVAILABLE") ;;
        130 | 143) say "stopped during step $demo_step_number ($demo_step_title)" ;;
        *)
            printf '%sthe demo failed in step %d (%s)%s\n' "$demo_red" "$demo_step_number" \
                "$demo_step_title" "$demo_reset"
            [ -z "$demo_last_command" ] || say "last command: $demo_last_command"
            demo_on_failure
            ;;
    esac
    exit "$status"
}

# The entry point both demos call first: outside, this runs the script isolated and exits;
# inside, it returns, set up (the arguments name more directories to keep private). The script
# sets demo_args (its arguments) and demo_tools (the commands it needs) before sourcing this.
# shellcheck disable=SC2154
demo_main() {
    if [ -z "${FERROCNI_DEMO_STATE:-}" ]; then
        demo_parse_options "${demo_args[@]}"
        demo_require "${demo_tools[@]}"
        demo_preflight
        demo_run_isolated
    fi
    demo_enter "$@"
}

# Checks before anything is set up (a backend's driver, say); the demo may replace it.
demo_preflight() { :; }
