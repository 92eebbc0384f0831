//! The bgp backend's announced prefixes (`AdvertisePrefixes`: a service range and a
//! load-balancer pool) and accepted ones (`ExternalPrefixes`), with three agents on etcd and
//! FRR's bgpd in the switch namespace as the datacenter's router, running ECMP
//! (`maximum-paths`). What an operator would check: the router has one path per announcing
//! node for each prefix, in its RIB and as a multipath route in its kernel; a prefix limited
//! to two nodes has two paths; no node routes an advertised prefix in its kernel (kube-proxy
//! handles that traffic), and none takes a part of one from the router; the router's external
//! prefix is installed on the nodes (they reach the host behind the router through it), except
//! on one that routes it itself, whose own route stays; a prefix named with another peer is
//! refused; the mesh carries none of it (no refused update between nodes); a node whose agent
//! stops loses its path once its restart time is over. Behind a route reflector instead of the
//! mesh: the reflector has every node's path, and each node refuses the copies it reflects.
//! Needs etcd, bird2 and frr.

use std::time::{Duration, Instant};

use netns_tests::agent::Agent;
use netns_tests::agent_cluster::{require_tools, Cluster};
use netns_tests::bgp::{outside_host, reflector_conf, OUTSIDE_HOST};
use netns_tests::cluster::{ping, wait_until, Node, Underlay, CONVERGE};
use netns_tests::etcd::PREFIX;
use netns_tests::frr::Frr;
use netns_tests::{require_root, Netns};

const ROUTER_AS: u32 = 64513;
/// Announced by every node.
const SERVICES: &str = "10.96.0.0/12";
/// Announced by nodes 1 and 2 only.
const POOL: &str = "10.200.0.0/24";
/// The network behind the router: accepted from the router.
const EXTERNAL: &str = "192.168.77.0/24";
/// Accepted only from a peer that is not there: the router's copy is refused.
const OTHER_PEERS: &str = "192.168.88.0/24";
const ABSENT_PEER: &str = "192.0.2.1";
/// The router's slice of the service range: no node takes it.
const SLICE: &str = "10.96.5.0/24";
/// The restart time the nodes announce: how long the router keeps a stopped node's paths.
const GR_SECS: u64 = 3;

fn router_conf(nodes: &[&str]) -> String {
    let mut c = format!(
        "router bgp {ROUTER_AS}\n bgp router-id {}\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n",
        Underlay::switch_ip()
    );
    for ip in nodes {
        c.push_str(&format!(" neighbor {ip} remote-as 64512\n"));
    }
    c.push_str(" address-family ipv4 unicast\n  maximum-paths 8\n");
    for p in [EXTERNAL, OTHER_PEERS, SLICE] {
        c.push_str(&format!("  network {p}\n"));
    }
    c.push_str(" exit-address-family\n");
    c
}

/// The gateways of `ns`'s kernel route for `prefix` (one per path of a multipath route).
fn fib_next_hops(ns: &Netns, prefix: &str) -> Vec<String> {
    let v = ns.exec_json(&["ip", "-j", "route", "show", prefix]);
    let Some(route) = v.as_array().and_then(|a| a.first()) else {
        return Vec::new();
    };
    let gateway = |r: &serde_json::Value| r.get("gateway")?.as_str().map(str::to_string);
    let mut out: Vec<String> = match route.get("nexthops").and_then(|n| n.as_array()) {
        Some(hops) => hops.iter().filter_map(gateway).collect(),
        None => gateway(route).into_iter().collect(),
    };
    out.sort();
    out
}

/// `birdc <command>` against an agent's BIRD.
fn bird_command(agent: &Agent, command: &[&str]) -> String {
    agent.birdc(command)
}

/// `birdc show protocols all <protocol>` of an agent's BIRD.
fn bird_protocol(agent: &Agent, protocol: &str) -> String {
    bird_command(agent, &["show", "protocols", "all", protocol])
}

/// The import filter's refusals in `birdc show protocols all` ("Import updates:" received,
/// rejected, filtered, ignored, accepted).
fn refused_updates(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("Import updates:"))?;
    line.split_whitespace().nth(4)?.parse().ok()
}

fn has_any_route(node: &Node, prefix: &str) -> bool {
    !node
        .ns
        .exec_ok(&["ip", "route", "show", "table", "all", prefix])
        .trim()
        .is_empty()
}

fn wait_for_paths(frr: &Frr, router: &Netns, prefix: &str, want: &[&str]) -> Duration {
    let started = Instant::now();
    let ok = || frr.used_next_hops(prefix) == want && fib_next_hops(router, prefix) == want;
    assert!(
        wait_until(CONVERGE, ok),
        "{prefix}: the router uses {:?}, its kernel {:?}, expected {want:?}\n{}",
        frr.used_next_hops(prefix),
        fib_next_hops(router, prefix),
        frr.log("bgpd")
    );
    started.elapsed()
}

#[test]
fn bgp_advertised_and_external_prefixes() {
    require_root!();
    if !require_tools(&["etcd", "etcdctl", "bird", "birdc"]) {
        return;
    }
    let sw = Underlay::switch_ip();
    // The config names nodes by address: written once the nodes exist, before any agent.
    let mut c = Cluster::new("bgpp", "{}");
    let ips: Vec<String> = c.nodes.iter().map(|n| n.ip.clone()).collect();
    let backend = format!(
        r#"{{"Type":"bgp","GracefulRestartTime":{GR_SECS},
            "Peers":[{{"PeerIP":"{sw}","ASNumber":{ROUTER_AS}}}],
            "AdvertisePrefixes":[{{"Prefix":"{SERVICES}"}},{{"Prefix":"{POOL}","Nodes":["{}","{}"]}}],
            "ExternalPrefixes":[{{"Prefix":"{EXTERNAL}","Peers":["{sw}"]}},{{"Prefix":"{OTHER_PEERS}","Peers":["{ABSENT_PEER}"]}}]}}"#,
        ips[0], ips[1]
    );
    let config = format!(
        r#"{{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{backend}}}"#
    );
    c.etcd.put(&format!("{PREFIX}/config"), &config);
    c.underlay
        .ns
        .exec_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
    // Kept until the end: the network behind the router, where the external prefix leads.
    let _host = outside_host(&c.underlay);
    let all: Vec<&str> = ips.iter().map(String::as_str).collect();
    let Some(frr) = Frr::start(&c.underlay.ns, &router_conf(&all)) else {
        return;
    };
    let started = Instant::now();
    // Node 3 routes the external prefix itself: its own route is to stay the one in use.
    c.nodes[2]
        .ns
        .exec_ok(&["ip", "route", "add", EXTERNAL, "via", &sw, "dev", "eth0"]);
    // No pods: what is checked here is routes (a pod's packets take its node's routes).
    for a in &mut c.agents {
        a.start();
    }
    c.subnets = c.agents.iter().map(Agent::wait_for_subnet).collect();
    let took = wait_for_paths(&frr, &c.underlay.ns, SERVICES, &all);
    eprintln!(
        "{SERVICES}: 3 paths in the router's RIB and kernel {:?} after the agents started ({took:?} after the leases)",
        started.elapsed()
    );
    wait_for_paths(&frr, &c.underlay.ns, POOL, &all[..2]);
    let log = c.agents[0].log();
    assert!(
        log.contains("2 advertised prefixes, 2 external prefixes")
            && log.contains(&format!(
                "this node announces {SERVICES}, {POOL} besides its subnet"
            )),
        "{log}"
    );
    let log = c.agents[2].log();
    assert!(
        log.contains(&format!(
            "this node announces {SERVICES} besides its subnet"
        )),
        "{log}"
    );

    // The external prefix: from the router only, on the nodes without a route of their own
    // for it (and no default route), and it leads to the host behind the router.
    for (i, n) in c.nodes[..2].iter().enumerate() {
        let installed = || {
            n.ns.exec_ok(&["ip", "route", "show", EXTERNAL])
                .contains(&format!("via {sw} dev eth0 proto bird"))
        };
        assert!(
            wait_until(CONVERGE, installed),
            "node {}: no route to {EXTERNAL}: {}",
            i + 1,
            n.ns.exec_ok(&["ip", "route"])
        );
    }
    // Node 3's BIRD has the router's route too, but its own kernel route ranks first.
    let learned = || bird_command(&c.agents[2], &["show", "route", EXTERNAL, "all"]);
    assert!(
        wait_until(CONVERGE, || learned().contains("BGP.as_path: 64513")),
        "node 3's BIRD lacks the router's {EXTERNAL}:\n{}",
        learned()
    );
    let node3_routes = c.nodes[2].ns.exec_ok(&["ip", "route", "show", EXTERNAL]);
    assert_eq!(
        node3_routes.trim(),
        format!("{EXTERNAL} via {sw} dev eth0"),
        "node 3's own route for {EXTERNAL} must stay the only one"
    );
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            wait_until(CONVERGE, || ping(&n.ns, OUTSIDE_HOST)),
            "node {} cannot reach {OUTSIDE_HOST} through the external route",
            i + 1
        );
    }

    // Refused: the external prefix of another peer, a slice of the service range; no node has
    // a kernel route for an advertised prefix; the router's session counts the two refusals
    // and the mesh sessions none (the nodes do not send each other their prefixes).
    let router_session = format!("peer_{}", sw.replace('.', "_"));
    for (i, n) in c.nodes.iter().enumerate() {
        let text = || bird_protocol(&c.agents[i], &router_session);
        assert!(
            wait_until(CONVERGE, || refused_updates(&text()) >= Some(2)),
            "node {}: the router's refused updates:\n{}",
            i + 1,
            text()
        );
        let text = text();
        // The router's session keeps the template's import filter beside its own export.
        assert!(
            text.contains("Input filter:   import_pod_subnets"),
            "{text}"
        );
        assert!(text.contains("Output filter:  export_to_peers"), "{text}");
        for prefix in [OTHER_PEERS, SLICE, SERVICES, POOL] {
            assert!(
                !has_any_route(n, prefix),
                "node {} has a route for {prefix}:\n{}",
                i + 1,
                n.ns.exec_ok(&["ip", "route", "show", "table", "all"])
            );
        }
        for (j, other) in c.nodes.iter().enumerate().filter(|(j, _)| *j != i) {
            let mesh = bird_protocol(
                &c.agents[i],
                &format!("mesh_{}", other.ip.replace('.', "_")),
            );
            assert_eq!(
                refused_updates(&mesh),
                Some(0),
                "node {} refused updates from node {}:\n{mesh}",
                i + 1,
                j + 1
            );
        }
    }
    assert!(
        c.agents[0].log().contains(&format!(
            "ExternalPrefixes names {ABSENT_PEER} for {OTHER_PEERS}, but {ABSENT_PEER} is not a peer of this node"
        )),
        "{}",
        c.agents[0].log()
    );

    // Node 3's agent stops (a graceful restart that does not come back): the router drops its
    // path once the restart time is over.
    let stopped = Instant::now();
    c.agents[2].stop();
    wait_for_paths(&frr, &c.underlay.ns, SERVICES, &all[..2]);
    eprintln!(
        "{SERVICES}: node 3's path left the router {:?} after its agent stopped (restart time {GR_SECS} s)",
        stopped.elapsed()
    );
    assert_eq!(frr.used_next_hops(POOL), all[..2]);
}

/// No mesh: FRR is the nodes' route reflector (iBGP, ECMP over iBGP paths). It has a path
/// from every node; the nodes refuse the copy it reflects (counted on the reflector's
/// session) and keep their own, inside BIRD only.
#[test]
fn bgp_advertised_prefixes_behind_a_reflector() {
    require_root!();
    if !require_tools(&["etcd", "etcdctl", "bird", "birdc"]) {
        return;
    }
    let sw = Underlay::switch_ip();
    let backend = format!(
        r#"{{"Type":"bgp","NodeToNodeMesh":false,"Peers":[{{"PeerIP":"{sw}"}}],"AdvertisePrefixes":[{{"Prefix":"{SERVICES}"}}]}}"#
    );
    let mut c = Cluster::new(
        "bgppr",
        &format!(r#"{{"Network":"10.244.0.0/16","Backend":{backend}}}"#),
    );
    let Some(frr) = Frr::start(&c.underlay.ns, &reflector_conf(64512)) else {
        return;
    };
    frr.configure(&[
        "router bgp 64512",
        " address-family ipv4 unicast",
        "  maximum-paths ibgp 8",
    ]);
    for a in &mut c.agents {
        a.start();
    }
    c.subnets = c.agents.iter().map(Agent::wait_for_subnet).collect();
    let ips: Vec<&str> = c.nodes.iter().map(|n| n.ip.as_str()).collect();
    wait_for_paths(&frr, &c.underlay.ns, SERVICES, &ips);
    // The reflector sends its best path to every client but the one it came from.
    let reflector = format!("peer_{}", sw.replace('.', "_"));
    let refusing = || {
        c.agents
            .iter()
            .filter(|a| refused_updates(&bird_protocol(a, &reflector)) >= Some(1))
            .count()
    };
    assert!(
        wait_until(CONVERGE, || refusing() >= 2),
        "{} nodes refused a reflected copy:\n{}",
        refusing(),
        bird_protocol(&c.agents[0], &reflector)
    );
    for (i, n) in c.nodes.iter().enumerate() {
        let routes = bird_command(&c.agents[i], &["show", "route", SERVICES, "all"]);
        assert!(
            routes.contains("[announced ") && !routes.contains("BGP.as_path"),
            "node {}: BIRD's routes for {SERVICES}:\n{routes}",
            i + 1
        );
        assert!(!has_any_route(n, SERVICES), "node {}", i + 1);
    }
}
