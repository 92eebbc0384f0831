#!/usr/bin/env bash
# ferrocni on one node, start to finish: the README's quick start with cnitool — the plugins in
# /opt/cni/bin, the bridge + host-local + portmap chain in /etc/cni/net.d, two pods ADDed (the
# result printed), a pod's eth0 and routes, pings pod to pod and pod to gateway, a port mapping
# reached from the host side, CHECK, DEL — and then a check that nothing was left behind.
#
#   sudo make demo                         builds if needed, then runs this
#   sudo tools/demo/demo.sh [--bin-dir DIR]
#
#   --bin-dir DIR   the plugins and cnitool to run (default: what `make build` built)
#
# Nothing on the host changes: the demo runs in a mount namespace of its own, where /opt/cni/bin,
# /etc/cni/net.d, /var/lib/cni and /run are fresh and private, and in throw-away network
# namespaces for the host side and the pods (tools/demo/lib.sh says how). Needs root, and ip,
# ping, curl, nft and busybox (for the pod's web server).
# Exit status: 0 done, 1 a step failed or something was left, 2 bad usage, 3 missing tools.
set -euo pipefail
demo_args=("$@")
demo_tools=(ping curl nft busybox)
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck disable=SC2119 # its arguments are directories, not the script's
demo_main

network=bridge-dualstack
conflist=/etc/cni/net.d/10-bridge-dualstack.conflist
cnitool="CNI_PATH=/opt/cni/bin cnitool"
port_mapping='{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}'
started=$(date +%s%N)

# The pod's address of one family (`pod_address pod1 -4`), without its prefix length.
pod_address() {
    ip netns exec "$1" ip "$2" -o address show dev eth0 scope global |
        awk '{sub(/\/.*/, "", $4); print $4; exit}'
}

# The pod's default gateway of one family.
pod_gateway() {
    ip netns exec "$1" ip "$2" route show default | awk '{print $3; exit}'
}

# Shows `ping -c 1` from a pod and the reply line; stops the demo when no reply comes.
ping_from() {
    local pod=$1 address=$2 reply
    show "sudo ip netns exec $pod ping -c 1 $address"
    demo_last_command="ip netns exec $pod ping -c 1 $address"
    reply=$(ip netns exec "$pod" ping -n -c 1 -W 2 "$address" | grep 'bytes from') ||
        die "no reply from $address"
    say "$reply"
}

say "ferrocni demo: one node, two pods, the README's quick start through cnitool."
say "It runs in namespaces of its own: the host's network, /opt/cni/bin, /etc/cni/net.d and"
say "/var/lib/cni are not touched. Commands are shown as you would type them on a host."

step "Install the plugins, and the network config"
show "sudo make install"
say "(here: $(find /opt/cni/bin -mindepth 1 | wc -l) binaries linked into the demo's own /opt/cni/bin from $demo_bin_dir)"
run "sudo mkdir -p /etc/cni/net.d"
run "sudo cp conflist-examples/bridge-gateway-dualstack.conflist $conflist"
run "cat $conflist"

step "ADD: two pods join the network"
netns_add pod1
run "sudo CAP_ARGS='$port_mapping' $cnitool add $network /run/netns/pod1"
netns_add pod2
run "sudo $cnitool add $network /run/netns/pod2 >/dev/null"
pod1_v4=$(pod_address pod1 -4) pod1_v6=$(pod_address pod1 -6)
pod2_v4=$(pod_address pod2 -4) pod2_v6=$(pod_address pod2 -6)
gateway_v4=$(pod_gateway pod1 -4) gateway_v6=$(pod_gateway pod1 -6)
say "pod1: $pod1_v4 $pod1_v6    pod2: $pod2_v4 $pod2_v6"

step "The pod's eth0 and routes"
run "sudo ip netns exec pod1 ip -brief address show eth0"
run "sudo ip netns exec pod1 ip route"
run "sudo ip netns exec pod1 ip -6 route"

step "Pod to pod, pod to gateway"
ping_from pod1 "$pod2_v4"
ping_from pod1 "$pod2_v6"
ping_from pod1 "$gateway_v4"
ping_from pod1 "$gateway_v6"

step "The port mapping: port 8080 of the host to port 80 of pod1"
www=/run/ferrocni-demo/pod1-www
mkdir -p "$www"
echo "hello from pod1 ($pod1_v4)" >"$www/index.html"
show "sudo ip netns exec pod1 busybox httpd -f -p 80 -h $www &"
ip netns exec pod1 busybox httpd -f -p 80 -h "$www" &
httpd=$!
for _ in $(seq 50); do
    ip netns exec pod1 busybox netstat -ltn 2>/dev/null | grep -q ':80 ' && break
    sleep 0.05
done
run "curl -sS http://127.0.0.1:8080/"
run "curl -sS http://$gateway_v4:8080/"
kill "$httpd"
wait "$httpd" 2>/dev/null || true

step "CHECK: the pods' attachments are as ADD left them"
run "sudo $cnitool check $network /run/netns/pod1"
run "sudo $cnitool check $network /run/netns/pod2"
say "(no output: CHECK passed)"

step "DEL: the pods leave the network"
run "sudo $cnitool del $network /run/netns/pod1"
run "sudo $cnitool del $network /run/netns/pod2"
run "sudo ip netns del pod1"
run "sudo ip netns del pod2"

step "Nothing left of the pods"
run "ls /var/lib/cni/networks/$network   # host-local's leases are files named by address"
run_expecting_nothing "ls /var/lib/cni/results   # cnitool's cache of results"
run_expecting_nothing "ip -brief link show type veth"
run_expecting_nothing "sudo nft list ruleset | grep -w -e $pod1_v4 -e $pod2_v4 -e $pod1_v6 -e $pod2_v6 -e 8080"
leases=$(lease_files /var/lib/cni/networks/$network)
cache=$(ls -A /var/lib/cni/results)
veths=$(ip -o link show type veth)
rules=$({ nft list ruleset; iptables-save; ip6tables-save; } 2>/dev/null |
    grep -w -e "$pod1_v4" -e "$pod2_v4" -e "$pod1_v6" -e "$pod2_v6" -e 8080 || true)
pods=$(ip netns list)
[ -z "$leases$cache$veths$rules$pods" ] ||
    die "left behind: ${leases:+leases $leases; }${cache:+cache $cache; }${veths:+links $veths; }${rules:+rules $rules; }${pods:+namespaces $pods}"
elapsed=$((($(date +%s%N) - started) / 1000000))
say "checked: no lease, cached result, veth, pod namespace or rule naming a pod or port 8080 is left (the demo took $elapsed ms)"
