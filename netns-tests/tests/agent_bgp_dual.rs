//! `ferrocni-agent`'s bgp backend on a dual-stack network (`EnableIPv6`, `IPv6Network`): three
//! simulated nodes with their agents on a one-member etcd, in a node-to-node mesh, and FRR's
//! bgpd in the switch namespace as a router peering with every node. The IPv6 pod subnets
//! travel by multiprotocol BGP over the same IPv4 sessions. What an operator would check:
//! - each lease names both subnets and the node's `PublicIPv6`;
//! - each node's kernel has the other two IPv6 subnets `proto bird via <their PublicIPv6>`
//!   (and the IPv4 ones via their `PublicIP`), and its own IPv6 subnet as a blackhole at metric
//!   1000000;
//! - pods ping across nodes on both families;
//! - the router learns every node's IPv6 subnet with the node's `PublicIPv6` as next hop, and
//!   an IPv6 prefix it announces that no node leases is refused by every node, and so is a
//!   node's IPv6 subnet announced as the router's own;
//! - an IPv6 advertised prefix (`AdvertisePrefixes`) reaches the router from every node, one
//!   path per node (ECMP), is in no node's kernel and no node takes another's copy; the
//!   router's IPv6 external prefix (`ExternalPrefixes`, named with the router's IPv4 session
//!   address) is in every node's kernel `proto bird`;
//! - `/metrics` counts the routes of both families;
//! - without the mesh, behind FRR as route reflector, the nodes learn each other's IPv6 subnets
//!   through it, each via its own node, and pods ping across nodes on both families.
//!
//! The nodes have no default route: pods reach each other only through what BGP taught their
//! nodes. Needs etcd, bird2, frr and curl (`.ci/packages.txt`).

use std::time::Instant;

use netns_tests::agent_cluster::Cluster;
use netns_tests::bgp::{
    bgp_tools_present, kernel_routes, kernel_routes6, reflector_conf, KernelRoute,
};
use netns_tests::cluster::{http_get, ping, wait_until, Underlay, CONVERGE};
use netns_tests::etcd::lease_key;
use netns_tests::frr::Frr;
use netns_tests::{require_root, Netns};
use serde_json::Value;

const ROUTER_AS: u32 = 64513;
/// The nodes' AS (the network's default `ASNumber`).
const NODE_AS: u32 = 64512;
/// What the router announces over IPv6: a /64 inside `IPv6Network` that no node leases.
const BOGUS6: &str = "fd00:10:244:ff::/64";
/// Announced by every node (a service range): the router has one path per node.
const SERVICES6: &str = "fd00:96::/108";
/// Announced by the router, accepted from it by every node.
const EXTERNAL6: &str = "fd00:77::/64";
/// The agent's blackhole route for a node's own subnet, as `ip route` shows it.
const BLACKHOLE: &str = "proto static metric 1000000";
const METRICS_PORT: u16 = 19_474;

fn config() -> String {
    format!(
        r#"{{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{{"Type":"bgp","GracefulRestartTime":5,"Peers":[{{"PeerIP":"{sw}","ASNumber":{ROUTER_AS}}}],"AdvertisePrefixes":[{{"Prefix":"{SERVICES6}"}}],"ExternalPrefixes":[{{"Prefix":"{EXTERNAL6}","Peers":["{sw}"]}}]}}}}"#,
        sw = Underlay::switch_ip()
    )
}

/// bgpd peering with every node over IPv4, the IPv6 address family activated on the same
/// sessions with ECMP, announcing [`BOGUS6`] and [`EXTERNAL6`].
fn router_conf(nodes: &[&str]) -> String {
    let mut c = format!(
        "router bgp {ROUTER_AS}\n bgp router-id {}\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n",
        Underlay::switch_ip()
    );
    for ip in nodes {
        c.push_str(&format!(" neighbor {ip} remote-as {NODE_AS}\n"));
    }
    c.push_str(" address-family ipv6 unicast\n  maximum-paths 8\n");
    for ip in nodes {
        c.push_str(&format!("  neighbor {ip} activate\n"));
    }
    c.push_str(&format!(
        "  network {BOGUS6}\n  network {EXTERNAL6}\n exit-address-family\n"
    ));
    c
}

/// Node `i`'s IPv6 pod subnet (from subnet.env); gives its `cni0` the gateway address and its
/// pod the next address with a default route. `(subnet, pod address)`.
fn pod_network6(c: &Cluster, i: usize) -> (String, String) {
    let first = c.agents[i]
        .env_value("FLANNEL_IPV6_SUBNET")
        .unwrap_or_else(|| {
            panic!(
                "node {} has no FLANNEL_IPV6_SUBNET:\n{}",
                i + 1,
                c.agents[i].log()
            )
        });
    let (gw, len) = first.split_once('/').expect("a CIDR");
    let gw: std::net::Ipv6Addr = gw.parse().expect("an IPv6 address");
    let pod = std::net::Ipv6Addr::from(u128::from(gw) + 1);
    let subnet = std::net::Ipv6Addr::from(u128::from(gw) - 1);
    let gw_cidr = format!("{gw}/{len}");
    let pod_cidr = format!("{pod}/{len}");
    let gw = gw.to_string();
    c.nodes[i]
        .ns
        .exec_ok(&["ip", "-6", "addr", "add", &gw_cidr, "dev", "cni0", "nodad"]);
    let ns = &c.pods[i].ns;
    ns.exec_ok(&["ip", "-6", "addr", "add", &pod_cidr, "dev", "eth0", "nodad"]);
    ns.exec_ok(&["ip", "-6", "route", "add", "default", "via", &gw]);
    (format!("{subnet}/{len}"), pod.to_string())
}

/// Every other node's subnet, via `via(j)` on eth0.
fn others(i: usize, subnets: &[String], via: impl Fn(usize) -> String) -> Vec<KernelRoute> {
    let mut v: Vec<KernelRoute> = (0..subnets.len())
        .filter(|j| *j != i)
        .map(|j| KernelRoute {
            dst: subnets[j].clone(),
            via: Some(via(j)),
            dev: Some("eth0".into()),
        })
        .collect();
    v.sort();
    v
}

/// bgpd's best IPv6 routes inside the pods' IPv6 network: `(prefix, next hop)`.
fn router_routes6(frr: &Frr) -> Vec<(String, String)> {
    frr.bgp_routes6()
        .into_iter()
        .filter(|(prefix, _)| prefix.starts_with("fd00:10:244:") && prefix != BOGUS6)
        .collect()
}

/// BIRD's IPv6 pod routes in `ns`'s kernel (its routes but the external prefix's).
fn pod_routes6(ns: &Netns) -> Vec<KernelRoute> {
    kernel_routes6(ns, "bird")
        .into_iter()
        .filter(|r| r.dst != EXTERNAL6)
        .collect()
}

/// The prefixes bgpd announces to `neighbour` over IPv6.
fn advertised6(frr: &Frr, neighbour: &str) -> Vec<String> {
    let v = frr.vtysh_json(&format!(
        "show bgp ipv6 unicast neighbors {neighbour} advertised-routes json"
    ));
    v.get("advertisedRoutes")
        .and_then(Value::as_object)
        .map(|routes| routes.keys().cloned().collect())
        .unwrap_or_default()
}

/// Waits until node `i`'s kernel has every other node's subnet of both families, each via
/// that node (`PublicIP`, `PublicIPv6`).
fn wait_other_subnets(c: &Cluster, i: usize, subnets6: &[String]) {
    let n = &c.nodes[i];
    let want4 = others(i, &c.subnets, |j| c.nodes[j].ip.clone());
    let want6 = others(i, subnets6, |j| c.nodes[j].ip6.clone());
    let have = || (kernel_routes(&n.ns, "bird"), pod_routes6(&n.ns));
    assert!(
        wait_until(CONVERGE, || have() == (want4.clone(), want6.clone())),
        "node {}: BIRD routes {:?}, expected {want4:?} and {want6:?}\n{}",
        i + 1,
        have(),
        c.agents[i].log()
    );
}

/// Every pod reaches every other node's pod over IPv4 and over IPv6 (`v6`: each node's IPv6
/// subnet and pod address).
fn pods_ping_on_both_families(c: &Cluster, v6: &[(String, String)]) {
    c.assert_full_mesh();
    for (i, from) in c.pods.iter().enumerate() {
        for (j, (_, to)) in v6.iter().enumerate() {
            if i != j {
                assert_ping6(&from.ns, to);
            }
        }
    }
}

fn assert_ping6(from: &Netns, ip: &str) {
    assert!(
        wait_until(CONVERGE, || ping(from, ip)),
        "{} cannot reach {ip} over IPv6",
        from.name()
    );
}

#[test]
fn bgp_dual_stack_mesh_and_router() {
    require_root!();
    if !bgp_tools_present() {
        return;
    }
    let started = Instant::now();
    let mut c = Cluster::new("bgp6", &config());
    let node_ips: Vec<&str> = c.nodes.iter().map(|n| n.ip.as_str()).collect();
    let Some(frr) = Frr::start(&c.underlay.ns, &router_conf(&node_ips)) else {
        return;
    };
    for a in &mut c.agents {
        a.extra.extend([
            "--healthz-ip=127.0.0.1".to_string(),
            format!("--metrics-port={METRICS_PORT}"),
        ]);
    }
    c.start_agents();
    let agents_up = Instant::now();
    let v6: Vec<(String, String)> = (0..3).map(|i| pod_network6(&c, i)).collect();
    let subnets6: Vec<String> = v6.iter().map(|(s, _)| s.clone()).collect();

    // The leases: both subnets in the key, the node's PublicIPv6 in the value.
    for (i, n) in c.nodes.iter().enumerate() {
        let key = format!(
            "{}&{}",
            lease_key(&c.subnets[i]),
            subnets6[i].replace('/', "-")
        );
        let value = c.etcd.get(&key).unwrap_or_default();
        assert!(
            value.contains(&format!(r#""PublicIPv6":"{}""#, n.ip6))
                && value.contains(r#""BackendType":"bgp""#),
            "node {}'s lease {key}: {value:?}",
            i + 1
        );
    }

    // Each node's kernel: the other subnets of both families, each via its own node.
    for (i, n) in c.nodes.iter().enumerate() {
        wait_other_subnets(&c, i, &subnets6);
        let blackholes =
            n.ns.exec_ok(&["ip", "-6", "route", "show", "type", "blackhole"]);
        assert!(
            blackholes
                .lines()
                .any(|l| l.starts_with(&format!("blackhole {} ", subnets6[i]))
                    && l.contains(BLACKHOLE)),
            "node {}: no IPv6 blackhole of its own subnet:\n{blackholes}",
            i + 1
        );
    }
    eprintln!(
        "converged on both families {:?} after the agents' leases ({:?} in all)",
        agents_up.elapsed(),
        started.elapsed()
    );

    pods_ping_on_both_families(&c, &v6);

    // The router learned every IPv6 subnet from its node.
    let mut want: Vec<(String, String)> = subnets6
        .iter()
        .cloned()
        .zip(c.nodes.iter().map(|n| n.ip6.clone()))
        .collect();
    want.sort();
    assert!(
        wait_until(CONVERGE, || router_routes6(&frr) == want),
        "the router learned {:?}, expected {want:?}\n{}",
        router_routes6(&frr),
        frr.log("bgpd")
    );

    // The IPv6 advertised prefix: one path per node on the router, in no node's kernel, and
    // in each node's BIRD only its own copy (a static route, no BGP one).
    let prefixes_from = Instant::now();
    let mut all6: Vec<String> = c.nodes.iter().map(|n| n.ip6.clone()).collect();
    all6.sort();
    assert!(
        wait_until(CONVERGE, || frr.used_next_hops6(SERVICES6) == all6),
        "{SERVICES6}: the router uses {:?}, expected {all6:?}\n{}",
        frr.used_next_hops6(SERVICES6),
        frr.log("bgpd")
    );
    for (i, n) in c.nodes.iter().enumerate() {
        let routes =
            n.ns.exec_ok(&["ip", "-6", "route", "show", "table", "all", SERVICES6]);
        assert!(
            routes.trim().is_empty(),
            "node {} has a kernel route for {SERVICES6}: {routes}",
            i + 1
        );
        let bird = c.agents[i].birdc(&["show", "route", SERVICES6, "all"]);
        assert!(
            bird.contains("[announced6 ") && !bird.contains("BGP.as_path"),
            "node {}: BIRD's routes for {SERVICES6}:\n{bird}",
            i + 1
        );
        // The router's IPv6 external prefix, in the kernel as BIRD's.
        let external = || n.ns.exec_ok(&["ip", "-6", "route", "show", EXTERNAL6]);
        assert!(
            wait_until(CONVERGE, || external().contains(" proto bird ")),
            "node {}: no route to {EXTERNAL6} from the router: {:?}\n{}",
            i + 1,
            external(),
            c.agents[i].birdc(&["show", "route", EXTERNAL6, "all"])
        );
    }
    eprintln!(
        "{SERVICES6}: 3 paths on the router, {EXTERNAL6} on every node ({:?} checking; node 1: {})",
        prefixes_from.elapsed(),
        c.nodes[0]
            .ns
            .exec_ok(&["ip", "-6", "route", "show", EXTERNAL6])
            .trim()
    );

    // The router's unleased IPv6 prefix reached every node, and none took it.
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            wait_until(CONVERGE, || advertised6(&frr, &n.ip)
                .iter()
                .any(|p| p == BOGUS6)),
            "the router did not send {BOGUS6} to node {}: {:?}",
            i + 1,
            advertised6(&frr, &n.ip)
        );
    }
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            wait_until(CONVERGE, || router_updates_filtered6(&c, i) >= Some(1)),
            "node {}: BIRD filtered no IPv6 update from the router ({:?})",
            i + 1,
            router_updates_filtered6(&c, i)
        );
        // Refused for its reason, and logged as such.
        let said = format!("bgp: refused {BOGUS6} from peer {} ", Underlay::switch_ip());
        assert!(
            wait_until(CONVERGE, || c.agents[i]
                .log()
                .lines()
                .any(|l| l.contains(&said) && l.ends_with("[unleased]"))),
            "node {}: no refusal of {BOGUS6} logged:\n{}",
            i + 1,
            c.agents[i].log()
        );
        assert_eq!(
            pod_routes6(&n.ns),
            others(i, &subnets6, |j| c.nodes[j].ip6.clone()),
            "node {}",
            i + 1
        );
        let route = n.ns.exec_ok(&["ip", "-6", "route", "show", BOGUS6]);
        assert!(
            route.trim().is_empty(),
            "node {} took {BOGUS6}: {route}",
            i + 1
        );
    }
    // The router announces node 1's IPv6 subnet as its own (its next hop, its AS as origin):
    // nodes 2 and 3 refuse it and keep reaching node 1's subnet through node 1.
    let before: Vec<Option<u64>> = (0..3).map(|i| router_updates_filtered6(&c, i)).collect();
    frr.configure(&[
        &format!("router bgp {ROUTER_AS}"),
        "address-family ipv6 unicast",
        &format!("network {}", subnets6[0]),
    ]);
    for (i, filtered_before) in before.iter().enumerate().skip(1) {
        assert!(
            wait_until(CONVERGE, || router_updates_filtered6(&c, i)
                > *filtered_before),
            "node {}: the router's announcement of {} was not refused ({:?} filtered)",
            i + 1,
            subnets6[0],
            router_updates_filtered6(&c, i)
        );
        assert_eq!(
            pod_routes6(&c.nodes[i].ns),
            others(i, &subnets6, |j| c.nodes[j].ip6.clone()),
            "node {}",
            i + 1
        );
    }
    assert_ping6(&c.pods[1].ns, &v6[0].1);

    // /metrics counts both families: two IPv4 and two IPv6 subnets learned, and the IPv6
    // external prefix.
    for (i, n) in c.nodes.iter().enumerate() {
        let learned = || {
            http_get(&n.ns, METRICS_PORT, "/metrics").is_some_and(|m| {
                m.lines()
                    .any(|l| l == "ferrocni_agent_bgp_routes_learned 5")
            })
        };
        assert!(
            wait_until(CONVERGE, learned),
            "node {}: /metrics does not count 5 learned routes",
            i + 1
        );
    }
    eprintln!("bgp_dual_stack_mesh_and_router: {:?}", started.elapsed());
}

/// How many IPv6 updates from the router node `i`'s BIRD filtered out (`birdc show protocols
/// all`: the `ipv6` channel's "Import updates" line, column "filtered").
fn router_updates_filtered6(c: &Cluster, i: usize) -> Option<u64> {
    let socket = c.agents[i].bgp_dir().join("bird.ctl");
    let name = format!("peer_{}", Underlay::switch_ip().replace('.', "_"));
    let out = std::process::Command::new("birdc")
        .arg("-s")
        .arg(&socket)
        .args(["show", "protocols", "all", &name])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let channel = text.split("Channel ipv6").nth(1)?;
    let line = channel
        .lines()
        .find_map(|l| l.trim().strip_prefix("Import updates:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Dual-stack without the mesh, behind FRR's bgpd as route reflector (the nodes' AS, the IPv6
/// address family activated on the same sessions): every node learns the others' IPv6 subnets
/// through the reflector, each with its own node's `PublicIPv6` as next hop (a reflector keeps
/// the next hop), origin validation takes them as from their node, and pods ping across nodes
/// on both families.
#[test]
fn bgp_dual_stack_behind_a_reflector() {
    require_root!();
    if !bgp_tools_present() {
        return;
    }
    let sw = Underlay::switch_ip();
    let config = format!(
        r#"{{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{{"Type":"bgp","GracefulRestartTime":5,"NodeToNodeMesh":false,"Peers":[{{"PeerIP":"{sw}"}}]}}}}"#
    );
    let mut c = Cluster::new("bgp6rr", &config);
    let reflector = format!(
        "{} address-family ipv6 unicast\n  neighbor nodes activate\n  neighbor nodes route-reflector-client\n exit-address-family\n",
        reflector_conf(NODE_AS)
    );
    let Some(_frr) = Frr::start(&c.underlay.ns, &reflector) else {
        return;
    };
    c.start_agents();
    let v6: Vec<(String, String)> = (0..3).map(|i| pod_network6(&c, i)).collect();
    let subnets6: Vec<String> = v6.iter().map(|(s, _)| s.clone()).collect();
    for i in 0..c.nodes.len() {
        wait_other_subnets(&c, i, &subnets6);
    }
    pods_ping_on_both_families(&c, &v6);
    // Nothing refused: every reflected route is a lease's subnet from its own node.
    for (i, a) in c.agents.iter().enumerate() {
        assert!(
            !a.log().contains("bgp: refused "),
            "node {}:\n{}",
            i + 1,
            a.log()
        );
    }
}
