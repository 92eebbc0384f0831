//! `ferrocni-agent`'s bgp backend with an AS per node (`--bgp-as`, published in the lease's
//! `BackendData`): three simulated nodes with their agents on a one-member etcd, FRR's bgpd in
//! the switch namespace as the top-of-rack router, in its own AS. What an operator running an
//! AS per rack or per node would check:
//! - ToR only, an AS per node: no node mesh, every node eBGP to the router; the leases name
//!   the nodes' AS, the router's table has each subnet originated in its node's AS, each node
//!   routes the others' subnets (`proto bird`) as the router hands them, pods ping across
//!   nodes, and a node's subnet announced by the router with another origin (another node's
//!   AS) is refused while the lease says which AS the subnet belongs to;
//! - ToR only, nodes sharing an AS: BGP's loop detection drops the other nodes' routes (their
//!   path holds the node's own AS) until the peer has `NumAllowedLocalASNumbers` 1 (from
//!   `--bgp-peers IP:AS:allow-local-as=1` or the network's `Peers`); then pods ping;
//! - the mesh with mixed AS: eBGP between nodes in different AS, iBGP between the two sharing
//!   one, every route via its own node.
//!
//! The nodes have no default route: pods reach each other only through what BGP taught their
//! nodes. Needs etcd, bird2, frr and curl (`.ci/packages.txt`).

use std::time::{Duration, Instant};

use netns_tests::agent::Agent;
use netns_tests::agent_cluster::{assert_pods_mesh, Cluster};
use netns_tests::bgp::{kernel_routes, KernelRoute};
use netns_tests::cluster::{http_get, ping, wait_until, Node, Underlay, CONVERGE};
use netns_tests::etcd::{lease_key, PREFIX};
use netns_tests::frr::Frr;
use netns_tests::require_root;
use serde_json::Value;

const ROUTER_AS: u32 = 65100;
/// The nodes' own AS in the AS-per-node cluster.
const NODE_AS: [u32; 3] = [65001, 65002, 65003];
const METRICS_PORT: u16 = 19_473;

use netns_tests::bgp::{bgp_network_config as network_config, bgp_tools_present as have_tools};

/// The network's bgp backend without the mesh: every node peers with the router alone.
fn tor_only(peer_extra: &str) -> String {
    let sw = Underlay::switch_ip();
    network_config(&format!(
        r#"{{"Type":"bgp","NodeToNodeMesh":false,"GracefulRestartTime":5,"Peers":[{{"PeerIP":"{sw}","ASNumber":{ROUTER_AS}{peer_extra}}}]}}"#
    ))
}

/// bgpd as the rack's router: eBGP with each node whatever its AS (`remote-as external`),
/// relaying every route to every node; it routes between them (forwarding on). On one segment
/// with the nodes, bgpd keeps a node's own address as the next hop of its subnet (a
/// third-party next hop); `next_hop_self` makes it hand its own, as a router whose nodes sit on
/// links of their own does.
fn start_router(c: &Cluster, next_hop_self: bool) -> Option<Frr> {
    c.underlay
        .ns
        .exec_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
    let mut conf = format!(
        "router bgp {ROUTER_AS}\n bgp router-id {}\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n",
        Underlay::switch_ip()
    );
    for n in &c.nodes {
        conf.push_str(&format!(" neighbor {} remote-as external\n", n.ip));
    }
    if next_hop_self {
        conf.push_str(" address-family ipv4 unicast\n");
        for n in &c.nodes {
            conf.push_str(&format!("  neighbor {} next-hop-self\n", n.ip));
        }
        conf.push_str(" exit-address-family\n");
    }
    Frr::start(&c.underlay.ns, &conf)
}

fn with_metrics(agent: &mut Agent) {
    agent.serve_metrics(METRICS_PORT);
}

/// The sample `name` of node `node`'s `/metrics`, if present.
fn metric(node: &Node, name: &str) -> Option<f64> {
    http_get(&node.ns, METRICS_PORT, "/metrics")?
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// Node `i`'s BIRD routes, each other node's subnet via `via(j)`.
fn routes_via(c: &Cluster, i: usize, via: impl Fn(usize) -> String) -> Vec<KernelRoute> {
    let mut v: Vec<KernelRoute> = (0..c.nodes.len())
        .filter(|j| *j != i)
        .map(|j| KernelRoute {
            dst: c.subnets[j].clone(),
            via: Some(via(j)),
            dev: Some("eth0".into()),
        })
        .collect();
    v.sort();
    v
}

/// Waits until node `i`'s BIRD routes are exactly `want`.
fn assert_routes(c: &Cluster, i: usize, want: &[KernelRoute]) {
    let have = || kernel_routes(&c.nodes[i].ns, "bird");
    assert!(
        wait_until(CONVERGE, || have() == want),
        "node {}: BIRD routes {:?}, expected {want:?}\n{}",
        i + 1,
        have(),
        c.agents[i].log()
    );
}

/// The router's paths to `prefix`: `(AS path, next hop)` of each.
fn router_paths(frr: &Frr, prefix: &str) -> Vec<(String, String)> {
    let v = frr.vtysh_json(&format!("show ip bgp {prefix} json"));
    v.get("paths")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let path = p
                .get("aspath")
                .and_then(|a| a.get("string"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let nh = p
                .get("nexthops")
                .and_then(|n| n.get(0))
                .and_then(|n| n.get("ip"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            (path.to_string(), nh.to_string())
        })
        .collect()
}

/// The lease value of `subnet` in etcd.
fn lease_value(c: &Cluster, subnet: &str) -> Value {
    let text = c.etcd.get(&lease_key(subnet)).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// No mesh, an AS per node (65001..65003; node 2's from `FLANNELD_BGP_AS`), the router in
/// 65100.
#[test]
fn bgp_as_per_node_behind_a_router() {
    require_root!();
    if !have_tools() {
        return;
    }
    let started = Instant::now();
    let mut c = Cluster::new("bgpasn", &tor_only(""));
    let Some(frr) = start_router(&c, true) else {
        return;
    };
    c.agents[0].extra.push(format!("--bgp-as={}", NODE_AS[0]));
    c.agents[1]
        .env
        .push(("FLANNELD_BGP_AS".into(), NODE_AS[1].to_string()));
    c.agents[2]
        .extra
        .extend(["--bgp-as".to_string(), NODE_AS[2].to_string()]);
    with_metrics(&mut c.agents[2]);
    c.start_agents();

    // Each lease names its node's AS; the router has each subnet from its node, originated
    // in that AS.
    let sw = Underlay::switch_ip();
    for (i, subnet) in c.subnets.iter().enumerate() {
        let lease = lease_value(&c, subnet);
        assert_eq!(
            lease["BackendData"],
            serde_json::json!({ "ASNumber": NODE_AS[i] }),
            "node {}'s lease: {lease}",
            i + 1
        );
        let want = vec![(NODE_AS[i].to_string(), c.nodes[i].ip.clone())];
        assert!(
            wait_until(CONVERGE, || router_paths(&frr, subnet) == want),
            "router's paths to {subnet}: {:?}, expected {want:?}",
            router_paths(&frr, subnet)
        );
    }
    // Every node routes the others' subnets through the router, and pods talk.
    for i in 0..3 {
        assert_routes(&c, i, &routes_via(&c, i, |_| sw.clone()));
        assert!(
            c.agents[i]
                .log()
                .contains("no node mesh, 1 configured peer"),
            "{}",
            c.agents[i].log()
        );
    }
    assert_pods_mesh(&c.pods);
    eprintln!("AS per node: converged, pods ping, {:?}", started.elapsed());

    // The router announces node 1's subnet itself, as if originated in node 2's AS: its own
    // route, better than node 1's. Node 3 refuses it (the lease puts that subnet in node 1's
    // AS) and loses its way to node 1's pods; node 2 drops it (its own AS in the path).
    let refused =
        format!("ferrocni_agent_bgp_peer_updates_refused_total{{peer=\"{sw}\",kind=\"peer\"}}");
    assert!(wait_until(CONVERGE, || metric(&c.nodes[2], &refused).is_some()));
    assert_eq!(
        metric(&c.nodes[2], &refused),
        Some(0.0),
        "node 3 refused a route before any hijack"
    );
    let node1 = c.subnets[0].clone();
    frr.configure(&[
        "route-map wrong-origin permit 10",
        &format!(" set as-path prepend {}", NODE_AS[1]),
        &format!("router bgp {ROUTER_AS}"),
        " address-family ipv4 unicast",
        &format!("  network {node1} route-map wrong-origin"),
    ]);
    assert!(
        wait_until(CONVERGE, || metric(&c.nodes[2], &refused).unwrap_or(0.0)
            >= 1.0),
        "node 3 refused nothing: router's paths {:?}",
        router_paths(&frr, &node1)
    );
    assert!(
        wait_until(CONVERGE, || !c.nodes[2]
            .ns
            .exec_ok(&["ip", "route", "show", &node1])
            .contains("proto bird")),
        "node 3 kept a route to {node1}: {}",
        c.nodes[2].ns.exec_ok(&["ip", "route"])
    );
    assert!(
        !ping(&c.pods[2].ns, &c.pods[0].ip),
        "pod 3 -> pod 1 still answers"
    );
    // The router takes it back: node 1's own announcement counts again.
    frr.configure(&[
        &format!("router bgp {ROUTER_AS}"),
        " address-family ipv4 unicast",
        &format!("  no network {node1} route-map wrong-origin"),
    ]);
    assert_routes(&c, 2, &routes_via(&c, 2, |_| sw.clone()));
    assert!(ping(&c.pods[2].ns, &c.pods[0].ip), "pod 3 -> pod 1");
    eprintln!("bgp_as_per_node_behind_a_router: {:?}", started.elapsed());
}

/// No mesh, every node in the cluster's AS behind the router: node 3 allows its AS once in
/// the router's paths (`--bgp-peers …:allow-local-as=1`) and learns the others' subnets;
/// nodes 1 and 2 learn nothing until the network's `Peers` entry allows it and they restart.
#[test]
fn bgp_shared_as_behind_a_router_needs_allowed_local_as() {
    require_root!();
    if !have_tools() {
        return;
    }
    let started = Instant::now();
    let sw = Underlay::switch_ip();
    let mut c = Cluster::new("bgpall", &tor_only(""));
    let Some(frr) = start_router(&c, false) else {
        return;
    };
    c.agents[2]
        .extra
        .push(format!("--bgp-peers={sw}:{ROUTER_AS}:allow-local-as=1"));
    c.start_agents();
    // The router has every subnet and sends each node the other two.
    for (i, n) in c.nodes.iter().enumerate() {
        let others: Vec<String> = (0..3)
            .filter(|j| *j != i)
            .map(|j| c.subnets[j].clone())
            .collect();
        assert!(
            wait_until(CONVERGE, || {
                let sent = frr.advertised(&n.ip);
                others.iter().all(|p| sent.contains(p))
            }),
            "the router did not send {others:?} to node {}: {:?}",
            i + 1,
            frr.advertised(&n.ip)
        );
    }
    // Through the router, with each subnet's own node as next hop.
    let via_node = |j: usize| c.nodes[j].ip.clone();
    assert_routes(&c, 2, &routes_via(&c, 2, via_node));
    // Nodes 1 and 2 were sent the same routes; BIRD's loop detection drops them (watched
    // for a second after node 3 has installed its copies).
    let learned_any = || (0..2).any(|i| !kernel_routes(&c.nodes[i].ns, "bird").is_empty());
    assert!(
        !wait_until(Duration::from_secs(1), learned_any),
        "a node without NumAllowedLocalASNumbers learned a route: {:?} {:?}",
        kernel_routes(&c.nodes[0].ns, "bird"),
        kernel_routes(&c.nodes[1].ns, "bird")
    );
    // A node without its own AS publishes no BackendData: the cluster's AS.
    for subnet in &c.subnets {
        let lease = lease_value(&c, subnet);
        assert!(lease.get("BackendData").is_none(), "{lease}");
    }
    assert!(
        !ping(&c.pods[0].ns, &c.pods[1].ip),
        "pod 1 -> pod 2 answers"
    );
    eprintln!(
        "shared AS without allow-local-as: nothing learned, {:?}",
        started.elapsed()
    );

    c.etcd.put(
        &format!("{PREFIX}/config"),
        &tor_only(r#","NumAllowedLocalASNumbers":1"#),
    );
    for i in [0, 1] {
        c.agents[i].stop();
        c.agents[i].start();
    }
    for i in 0..3 {
        assert_routes(&c, i, &routes_via(&c, i, via_node));
    }
    assert_pods_mesh(&c.pods);
    eprintln!(
        "bgp_shared_as_behind_a_router_needs_allowed_local_as: {:?}",
        started.elapsed()
    );
}

/// The mesh with node 1 in its own AS: eBGP between node 1 and each of the others, iBGP
/// between nodes 2 and 3 (the cluster's AS); each subnet via its own node.
#[test]
fn bgp_mesh_with_mixed_as() {
    require_root!();
    if !have_tools() {
        return;
    }
    let started = Instant::now();
    let mut c = Cluster::new(
        "bgpmix",
        &network_config(r#"{"Type":"bgp","GracefulRestartTime":5}"#),
    );
    c.agents[0].extra.push("--bgp-as=65001".into());
    c.start_agents();
    for i in 0..3 {
        assert_routes(&c, i, &routes_via(&c, i, |j| c.nodes[j].ip.clone()));
    }
    // BIRD's view of each session: node 1 is in 65001, the others in 64512.
    for (i, peer, local, remote) in [
        (0, 1, 65001, 64512),
        (1, 0, 64512, 65001),
        (1, 2, 64512, 64512),
    ] {
        let name = format!("mesh_{}", c.nodes[peer].ip.replace('.', "_"));
        let text = c.agents[i].birdc(&["show", "protocols", "all", &name]);
        let has = |label: &str, value: u32| {
            text.lines().any(|l| {
                l.trim()
                    .strip_prefix(label)
                    .is_some_and(|v| v.trim() == value.to_string())
            })
        };
        assert!(
            text.contains("Established") && has("Local AS:", local) && has("Neighbor AS:", remote),
            "node {} session {name}: expected local AS {local}, neighbour AS {remote}:\n{text}",
            i + 1
        );
    }
    assert_pods_mesh(&c.pods);
    // A node cannot be in AS_TRANS: the agent stops before anything, naming the flag.
    let out = c.agents[1].once(&["--bgp-as=23456"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("--bgp-as \"23456\" is AS_TRANS"),
        "{said}"
    );
    eprintln!("bgp_mesh_with_mixed_as: {:?}", started.elapsed());
}
