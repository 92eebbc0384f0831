#!/usr/bin/env bash
# ferrocni on three nodes: a local etcd holding flannel's network config, ferrocni-agent on each
# node with the chosen backend, two pods per node made by cnitool through the conflist the agent
# renders, every pod pinging every other with its own source address, the agent's /metrics and
# a node's routes — then all of it torn down, and a check that nothing was left behind.
#
#   sudo make demo-cluster [BACKEND=vxlan|host-gw|wireguard|ipip|udp|bgp]
#   sudo tools/demo/demo-cluster.sh [--backend NAME] [--bin-dir DIR] [--agent PATH]
#
#   --backend NAME  the network config's Backend.Type (default vxlan); any the agent runs
#                   (ferrocni-agent --list-backends)
#   --bin-dir DIR   the plugins and cnitool (default: what `make build` built)
#   --agent PATH    the ferrocni-agent binary (default: what `make build` built)
#
# Nothing on the host changes: etcd, the nodes and the pods live in throw-away namespaces, each
# node with its own /run, /etc/cni/net.d and /var/lib/cni, as separate machines would have
# (tools/demo/lib.sh says how). Needs root, etcd and etcdctl (Debian: etcd-server, etcd-client),
# ip, ping, curl and busybox (each pod's web server answers with its caller's address).
# Exit status: 0 done, 1 a step failed or something was left, 2 bad usage, 3 this machine cannot
# run the backend (its kernel driver or a tool it needs is missing).
set -euo pipefail
demo_args=("$@")
demo_tools=(ping curl busybox etcd etcdctl)

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Sets backend_config, backend_probe, backend_template and backend_needs for a backend the agent
# lists (`ferrocni-agent --list-backends`: its name, what it needs of the node, what it is), or
# returns 1 for a name it does not list. The network config's "Backend" is {"Type":"<name>"},
# flannel's defaults (docs/agent-backends.md). backend_probe is the kernel feature it needs (a
# link kind `ip link add` makes, `tun` for /dev/net/tun, - for none), probed before anything
# starts; backend_needs a command it runs beside the agent, as command:Debian-package. The pods'
# conflist template (conflist-examples/<name>.conflist.template) is `agent-podnet` for vxlan,
# which chains the vxlan plugin (it programs the overlay at each ADD too), and
# `agent-podnet-routed` (bridge + portmap: the agent alone routes) for every other backend.
backend_entry() {
    local name needs need
    while read -r name needs _; do
        [ "$name" = "$1" ] || continue
        backend_config="{\"Type\":\"$name\"}" backend_probe=- backend_needs=
        backend_template=agent-podnet-routed
        [ "$name" != vxlan ] || backend_template=agent-podnet
        for need in ${needs//,/ }; do
            case $need in
                kernel:*) backend_probe=${need#kernel:} ;;
                program:*) backend_needs=${need#program:} ;;
            esac
        done
        return 0
    done < <("$demo_agent" --list-backends)
    return 1
}

demo_preflight() {
    [ -n "$demo_agent" ] || die "no ferrocni-agent built: run make build first (or pass --agent)" "$DEMO_USAGE"
    backend_entry "$demo_backend" || {
        echo "unknown backend $demo_backend; the demo knows: $("$demo_agent" --list-backends | awk 'NF {printf "%s ", $1}')" >&2
        exit "$DEMO_USAGE"
    }
}

demo_main /etc/ferrocni
backend_entry "$demo_backend"

network='10.244.0.0/16'
lan_prefix=172.31.250 # the nodes' own network: 172.31.250.1-3, etcd at .254
etcd_url=http://$lan_prefix.254:2379
etcd_log=/run/ferrocni-demo/etcd.log
template=/etc/ferrocni/10-podnet.conflist.template
agent_command="ferrocni-agent --etcd-endpoints $etcd_url --iface eth0 --ip-masq --cni-conf-template $template --metrics-port 9471"
nodes=(1 2 3)
declare -A node_pid agent_pid pod_ip pod_node
pods=()
started=$(date +%s%N)
export ETCDCTL_API=3

# Runs a command on node N: in its network namespace and its mount namespace (its own /run,
# /etc/cni/net.d and /var/lib/cni), both held by that node's holder process.
on() {
    local n=$1
    shift
    nsenter -t "${node_pid[$n]}" -m -n -- "$@"
}

# The command prefix that enters node N (for background commands, whose $! must be the
# command itself: a function run in the background is a subshell of its own).
enter() { echo "nsenter -t ${node_pid[$1]} -m -n --"; }

# `run`, on node N.
on_run() {
    show "node$1" "$2"
    demo_last_command="(node$1) $2"
    on "$1" bash -c "${2#sudo }"
}

# A file of node N, seen from here (through its holder's root).
node_file() { echo "/proc/${node_pid[$1]}/root$2"; }

demo_on_failure() {
    local n
    for n in "${!agent_pid[@]}"; do
        say "--- node$n: the agent's log (last lines)"
        tail -n 5 "$(node_file "$n" /run/ferrocni-agent.log)" 2>/dev/null || true
    done
    if [ -f "$etcd_log" ]; then
        say "--- etcd's log (last lines)"
        tail -n 5 "$etcd_log"
    fi
}

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local deadline=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# Node N: a network namespace on the LAN bridge with eth0 = 172.31.250.N, forwarding on, and a
# holder process keeping a mount namespace with the node's own /run, conf dir and IPAM state.
node_up() {
    local n=$1 ready=$demo_scratch/node$1.ready
    ip netns add "node$n"
    demo_record_ns net "/run/netns/node$n"
    ip link add "lan$n" type veth peer name eth0 netns "node$n"
    ip link set "lan$n" master lan0 up
    ip netns exec "node$n" sh -ec "ip link set lo up; ip address add $lan_prefix.$n/24 dev eth0
        ip link set eth0 up; sysctl -qw net.ipv4.ip_forward=1"
    # shellcheck disable=SC2016 # $1 and $dir are the holder's own
    ip netns exec "node$n" unshare --mount --propagation private sh -ec '
        for dir in /run /etc/cni/net.d /var/lib/cni; do mount -t tmpfs -o mode=0755 ferrocni-demo $dir; done
        mkdir /run/netns; touch "$1"; exec sleep infinity' holder "$ready" &
    node_pid[$n]=$!
    wait_for 30 test -e "$ready" || die "node$n did not come up"
    demo_record_ns mnt "/proc/${node_pid[$n]}/ns/mnt"
}

# Whether the kernel can make what the backend needs (tried in this throw-away namespace).
kernel_has() {
    case $1 in
        -) return 0 ;;
        tun) ip tuntap add dev probe0 mode tun 2>/dev/null ;;
        vxlan) ip link add probe0 type vxlan id 1 dstport 8472 2>/dev/null ;;
        ipip) ip link add probe0 type ipip local 192.0.2.1 2>/dev/null ;;
        *) ip link add probe0 type "$1" 2>/dev/null ;;
    esac || return 1
    ip link del probe0
}

# The agent's fatal error when it exited, else nothing.
agent_error() {
    kill -0 "${agent_pid[$1]}" 2>/dev/null && return 0
    grep -m1 -e ' ERROR ' -e 'usage:' "$(node_file "$1" /run/ferrocni-agent.log)" || echo "it exited"
}

say "ferrocni cluster demo: etcd, three nodes running ferrocni-agent with the $demo_backend backend,"
say "two pods per node. It runs in namespaces of its own: nothing on the host is touched."
say "Commands are shown as you would type them; node1\$ marks one typed on node1."

step "The $demo_backend backend on this machine"
say "network config Backend: $backend_config"
if ! kernel_has "$backend_probe"; then
    say "This kernel ($(uname -r)) has no $backend_probe driver, which the $demo_backend backend needs."
    say "Run the demo on a kernel that has the driver, e.g. Debian's stock kernel in a VM:"
    say "  sudo netns-tests/vm/run --test demo -- --nocapture"
    exit "$DEMO_UNAVAILABLE"
fi
if [ -n "$backend_needs" ] && ! command -v "${backend_needs%%:*}" >/dev/null; then
    say "The $demo_backend backend needs ${backend_needs%%:*}, which is not installed here (Debian: apt-get install ${backend_needs#*:})."
    exit "$DEMO_UNAVAILABLE"
fi
if [ "$backend_probe" = - ]; then
    say "kernel $(uname -r): no driver needed"
else
    say "kernel $(uname -r): it can make a $backend_probe device"
fi

step "etcd, and flannel's network config in it"
ip link add lan0 type bridge
ip address add "$lan_prefix.254/24" dev lan0
ip link set lan0 up
say "(the nodes' network: bridge lan0, $lan_prefix.254/24 here; nodes at $lan_prefix.1-3)"
run "etcd --name demo --data-dir /run/ferrocni-demo/etcd --listen-client-urls http://127.0.0.1:2379,$etcd_url --advertise-client-urls $etcd_url --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster demo=http://127.0.0.1:2380 2>$etcd_log &"
etcd_pid=$!
wait_for 60 etcdctl --endpoints http://127.0.0.1:2379 endpoint health >/dev/null 2>&1 ||
    die "etcd did not become healthy"
run "etcdctl put /coreos.com/network/config '{\"Network\":\"$network\",\"Backend\":$backend_config}'"

step "Three nodes, each running ferrocni-agent"
for n in "${nodes[@]}"; do node_up "$n"; done
say "(node1-3: network namespaces on lan0, each with its own /run, /etc/cni/net.d, /var/lib/cni)"
run "sudo mkdir -p /etc/ferrocni"
run "sudo cp conflist-examples/$backend_template.conflist.template $template"
# Whether node N's agent wrote subnet.env, or exited.
leased_or_stopped() { [ -n "$(agent_error "$1")" ] || [ -s "$(node_file "$1" /run/flannel/subnet.env)" ]; }

# One node after another, each once the last has its lease: on a slow machine (the VM's
# emulated CPUs) three agents starting at once can keep etcd from answering within the agent's
# start-up timeout. The waits are bounds: here an agent takes well under a second.
for n in "${nodes[@]}"; do
    show "node$n" "sudo $agent_command 2>/run/ferrocni-agent.log &"
    demo_last_command="(node$n) $agent_command"
    $(enter "$n") bash -c "exec $agent_command 2>/run/ferrocni-agent.log" &
    agent_pid[$n]=$!
    wait_for 60 leased_or_stopped "$n" || die "the agent on node$n wrote no subnet.env within 60 s"
    refused=$(agent_error "$n")
    if [ -n "$refused" ]; then
        say "node$n: $refused"
        die "the agent on node$n stopped (its log is below)"
    fi
    say "node$n: $(grep FLANNEL_SUBNET= "$(node_file "$n" /run/flannel/subnet.env)")"
done
run "etcdctl get --prefix /coreos.com/network/subnets/   # the leases, in flannel's layout"
on_run 1 "cat /run/flannel/subnet.env"
on_run 1 "grep -h subnet /etc/cni/net.d/10-podnet.conflist   # rendered by the agent from the template"

step "Two pods on each node, through the rendered conflist"
www=$demo_scratch/www
mkdir -p "$www/cgi-bin"
# shellcheck disable=SC2016 # $REMOTE_ADDR is the CGI's, set by httpd
printf '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n%%s\\n" "$REMOTE_ADDR"\n' >"$www/cgi-bin/whoami"
chmod +x "$www/cgi-bin/whoami"
for n in "${nodes[@]}"; do
    for p in a b; do
        pod=pod-$n$p
        on_run "$n" "sudo ip netns add $pod"
        demo_record_ns net "$(node_file "$n" "/run/netns/$pod")"
        on_run "$n" "sudo CNI_PATH=/opt/cni/bin cnitool add podnet /run/netns/$pod >/dev/null"
        pod_ip[$pod]=$(on "$n" ip netns exec "$pod" ip -4 -o address show dev eth0 | awk '{sub(/\/.*/, "", $4); print $4}')
        pod_node[$pod]=$n
        pods+=("$pod")
        # Its web server answers /cgi-bin/whoami with the caller's address as the pod sees it.
        $(enter "$n") ip netns exec "$pod" busybox httpd -f -p "${pod_ip[$pod]}:80" -h "$www" &
        disown
    done
done
for n in "${nodes[@]}"; do
    say "node$n: pod-${n}a ${pod_ip[pod-${n}a]}, pod-${n}b ${pod_ip[pod-${n}b]}"
done

step "Every pod pings every other, and is seen by its own address"
say "Each pod runs busybox httpd, whose /cgi-bin/whoami answers with the address the call came from."
first=${pods[0]} far=${pods[4]}
wait_for 60 on 1 ip netns exec "$first" ping -c 1 -W 1 "${pod_ip[$far]}" >/dev/null ||
    die "$first cannot reach $far (${pod_ip[$far]})"
on_run 1 "sudo ip netns exec $first ping -c 1 ${pod_ip[$far]} | grep 'bytes from'"
on_run 1 "sudo ip netns exec $first curl -s http://${pod_ip[$far]}/cgi-bin/whoami"
failures=0
for from in "${pods[@]}"; do
    n=${pod_node[$from]} problems=()
    for to in "${pods[@]}"; do
        [ "$to" != "$from" ] || continue
        if ! wait_for 5 on "$n" ip netns exec "$from" ping -c 1 -W 1 "${pod_ip[$to]}" >/dev/null; then
            problems+=("$to: no answer")
            continue
        fi
        seen=$(on "$n" ip netns exec "$from" curl -s --max-time 10 "http://${pod_ip[$to]}/cgi-bin/whoami" || true)
        [ "$seen" = "${pod_ip[$from]}" ] || problems+=("$to saw ${seen:-nothing}")
    done
    if [ ${#problems[@]} -eq 0 ]; then
        say "$from (node$n, ${pod_ip[$from]}) -> the 5 others: every ping answered, every pod saw ${pod_ip[$from]}"
    else
        say "$from (node$n, ${pod_ip[$from]}) -> ${problems[*]}"
        failures=$((failures + ${#problems[@]}))
    fi
done
[ "$failures" = 0 ] || die "$failures of 30 pod pairs failed"
say "30 of 30 pairs: every pod reached every other, with its own address (no NAT inside the cluster)"

step "The agent's metrics, and node1's routes"
on_run 1 "curl -s http://127.0.0.1:9471/metrics | grep -E '^ferrocni_agent_(lease_acquisitions_total|leases|reconciles_total|reconcile_failures_total|watch_events_total)'"
on_run 1 "ip route"

step "Tear down"
for pod in "${pods[@]}"; do
    on_run "${pod_node[$pod]}" "sudo CNI_PATH=/opt/cni/bin cnitool del podnet /run/netns/$pod"
    on "${pod_node[$pod]}" ip netns pids "$pod" | xargs -r kill
    on "${pod_node[$pod]}" ip netns del "$pod"
done
say "(and each pod's namespace deleted: sudo ip netns del pod-1a, ...)"
for n in "${nodes[@]}"; do
    on_run "$n" "sudo kill ${agent_pid[$n]}   # the agent: it leaves its lease in etcd, as flanneld does"
    wait "${agent_pid[$n]}" 2>/dev/null || true
done
run "kill $etcd_pid   # etcd"
wait "$etcd_pid" 2>/dev/null || true
left=()
for n in "${nodes[@]}"; do
    leases=$(lease_files "$(node_file "$n" /var/lib/cni/networks/podnet)")
    [ -z "$leases" ] || left+=("node$n leases: $leases")
    [ -z "$(ls -A "$(node_file "$n" /var/lib/cni/results)")" ] || left+=("node$n: cached results")
    ! on "$n" ip -o link show type veth | grep -qv ': eth0@' || left+=("node$n: pod veths")
    [ -z "$(on "$n" ip netns list)" ] || left+=("node$n: pod namespaces")
done
[ ${#left[@]} -eq 0 ] || die "left behind: ${left[*]}"
elapsed=$((($(date +%s%N) - started) / 1000000))
say "checked: no pod namespace, veth, lease or cached result is left on any node (the demo took $elapsed ms)"
say "The nodes, the LAN and etcd's data go with the demo's namespaces."
