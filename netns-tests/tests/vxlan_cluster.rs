//! A simulated 3-node cluster built from namespaces only: an "underlay" switch namespace with
//! a bridge, node namespaces attached to it, and per node a conflist of bridge + host-local +
//! vxlan with two pods added through cnitool run inside the node.
//!
//! The bridge/host-local used in the chain are ours when they build, else the reference Go
//! plugins (`FERROCNI_VXLAN_CHAIN=reference|ours` forces one); each test prints which.

use std::path::PathBuf;

use netns_tests::{
    our_binary, reference_plugin_dir, require_root, Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};

/// Per-process octets so concurrent test runs never share address ranges.
fn octet(offset: u32) -> u8 {
    (100 + (std::process::id() + offset) % 100) as u8
}

/// The CNI_PATH for the chain: a directory of symlinks to the chosen binaries.
struct PluginDir {
    dir: TempDir,
}

fn plugin_dir() -> Option<PluginDir> {
    let dir = TempDir::new("vx-plugins");
    let vxlan = our_binary("vxlan");
    std::os::unix::fs::symlink(&vxlan, dir.join("vxlan")).unwrap();
    let want = std::env::var("FERROCNI_VXLAN_CHAIN").unwrap_or_default();
    let ours = || -> Option<(PathBuf, PathBuf)> {
        let b =
            std::panic::catch_unwind(|| (our_binary("bridge"), our_binary("host-local"))).ok()?;
        Some(b)
    };
    let (bridge, host_local, chain) = match (
        want.as_str(),
        if want == "reference" { None } else { ours() },
    ) {
        (_, Some((b, h))) => (b, h, "ours"),
        ("ours", None) => {
            panic!("FERROCNI_VXLAN_CHAIN=ours but our bridge/host-local do not build")
        }
        _ => {
            let refdir = reference_plugin_dir(&["bridge", "host-local"])?;
            (
                refdir.join("bridge"),
                refdir.join("host-local"),
                "reference",
            )
        }
    };
    std::os::unix::fs::symlink(bridge, dir.join("bridge")).unwrap();
    std::os::unix::fs::symlink(host_local, dir.join("host-local")).unwrap();
    eprintln!("vxlan e2e: chain uses {chain} bridge + host-local");
    Some(PluginDir { dir })
}

fn ip(ns: &Netns, args: &[&str]) -> String {
    let mut argv = vec!["ip"];
    argv.extend_from_slice(args);
    ns.exec_ok(&argv)
}

fn json_of(ns: &Netns, argv: &[&str]) -> Vec<Value> {
    match ns.exec_json(argv) {
        Value::Array(a) => a,
        other => panic!("{argv:?}: expected a JSON array, got {other}"),
    }
}

struct Node {
    ns: Netns,
    _conf: ConfDir,
    _ipam: TempDir,
    _cache: TempDir,
    tool: Cnitool,
    conflist: PathBuf,
    ip: String,
    subnet: String,
}

struct Pod {
    ns: Netns,
    node: usize,
    ip: String,
}

/// How to build the cluster.
struct Spec {
    mode: &'static str,
    port: u16,
    /// Node 3 sits behind a router on another underlay subnet (auto-mode test).
    routed_third_node: bool,
    /// Nodes talk over IPv6 only (fd00:<ul>::1<i>/64).
    ipv6_underlay: bool,
    /// The pod network is IPv6 (fd00:<net>:0:<i>::/64 per node, device flannel-v6.1).
    ipv6_pods: bool,
}

struct Cluster {
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    underlay: Netns,
    router: Option<Netns>,
    peers: TempDir,
    plugins: PluginDir,
    net: u8,
    ul: u8,
    ul2: u8,
    spec: Spec,
}

impl Cluster {
    fn peers_file(&self) -> PathBuf {
        self.peers.join("peers.json")
    }

    fn peer_entries(&self, nodes: &[usize]) -> Value {
        Value::Array(
            nodes
                .iter()
                .map(|&i| json!({"subnet": self.nodes[i].subnet, "ip": self.nodes[i].ip}))
                .collect(),
        )
    }

    fn write_peers(&self, nodes: &[usize]) {
        std::fs::write(self.peers_file(), self.peer_entries(nodes).to_string()).unwrap();
    }

    fn new(spec: Spec) -> Option<Cluster> {
        let plugins = plugin_dir()?;
        let net = octet(0);
        let ul = octet(7);
        let ul2 = octet(13);
        let underlay = Netns::new("vx-switch");
        ip(&underlay, &["link", "set", "lo", "up"]);
        ip(&underlay, &["link", "add", "name", "br0", "type", "bridge"]);
        ip(&underlay, &["link", "set", "br0", "up"]);
        let gw = format!("192.168.{ul}.1");
        let router = if spec.routed_third_node {
            // The router has one leg on the switch and one point-to-point leg to node 3.
            let r = Netns::new("vx-router");
            ip(&r, &["link", "set", "lo", "up"]);
            ip(
                &underlay,
                &[
                    "link",
                    "add",
                    "name",
                    "rtr",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    r.name(),
                ],
            );
            ip(&underlay, &["link", "set", "rtr", "master", "br0"]);
            ip(&underlay, &["link", "set", "rtr", "up"]);
            ip(&r, &["link", "set", "eth0", "up"]);
            ip(&r, &["addr", "add", &format!("{gw}/24"), "dev", "eth0"]);
            r.exec_ok(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
            Some(r)
        } else {
            ip(
                &underlay,
                &["addr", "add", &format!("{gw}/24"), "dev", "br0"],
            );
            None
        };
        let peers = TempDir::new("vx-peers");
        let mut c = Cluster {
            pods: Vec::new(),
            nodes: Vec::new(),
            underlay,
            router,
            peers,
            plugins,
            net,
            ul,
            ul2,
            spec,
        };
        for i in 1..=3u8 {
            c.add_node(i);
        }
        c.write_peers(&[0, 1, 2]);
        Some(c)
    }

    fn add_node(&mut self, i: u8) {
        let ns = Netns::new(&format!("vx-node{i}"));
        ip(&ns, &["link", "set", "lo", "up"]);
        let routed = self.spec.routed_third_node && i == 3;
        let (node_ip, gw) = if routed {
            let r = self.router.as_ref().unwrap();
            ip(
                r,
                &[
                    "link",
                    "add",
                    "name",
                    "n3",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns.name(),
                ],
            );
            ip(r, &["link", "set", "n3", "up"]);
            ip(
                r,
                &[
                    "addr",
                    "add",
                    &format!("192.168.{}.1/24", self.ul2),
                    "dev",
                    "n3",
                ],
            );
            (
                format!("192.168.{}.13", self.ul2),
                format!("192.168.{}.1", self.ul2),
            )
        } else {
            let port = format!("n{i}");
            ip(
                &self.underlay,
                &[
                    "link",
                    "add",
                    "name",
                    &port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns.name(),
                ],
            );
            ip(&self.underlay, &["link", "set", &port, "master", "br0"]);
            ip(&self.underlay, &["link", "set", &port, "up"]);
            if self.spec.ipv6_underlay {
                (
                    format!("fd00:{}::1{i}", self.ul),
                    format!("fd00:{}::1", self.ul),
                )
            } else {
                (
                    format!("192.168.{}.1{i}", self.ul),
                    format!("192.168.{}.1", self.ul),
                )
            }
        };
        ip(&ns, &["link", "set", "eth0", "up"]);
        if self.spec.ipv6_underlay {
            let addr = format!("{node_ip}/64");
            ip(&ns, &["-6", "addr", "add", &addr, "dev", "eth0", "nodad"]);
            ip(&ns, &["-6", "route", "add", "default", "via", &gw]);
        } else {
            let addr = format!("{node_ip}/24");
            ip(&ns, &["addr", "add", &addr, "dev", "eth0"]);
            ip(&ns, &["route", "add", "default", "via", &gw]);
        }
        ns.exec_ok(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        ns.exec_ok(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);

        let (subnet, network, default) = if self.spec.ipv6_pods {
            (
                format!("fd00:{}:0:{i}::/64", self.net),
                format!("fd00:{}::/48", self.net),
                "::/0",
            )
        } else {
            (
                format!("10.{}.{i}.0/24", self.net),
                format!("10.{}.0.0/16", self.net),
                "0.0.0.0/0",
            )
        };
        let ipam = TempDir::new("vx-ipam");
        let cache = TempDir::new("vx-cache");
        let conf = ConfDir::new();
        let pod_mtu = match (self.spec.mode, self.spec.ipv6_underlay) {
            ("host-gw", _) => 1500,
            (_, true) => 1430,
            _ => 1450,
        };
        let conflist = json!({
            "cniVersion": "1.0.0",
            "name": "podnet",
            "plugins": [
                {
                    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "mtu": pod_mtu,
                    "ipam": {
                        "type": "host-local", "dataDir": ipam.path(),
                        "ranges": [[{"subnet": subnet}]], "routes": [{"dst": default}]
                    }
                },
                {
                    "type": "vxlan", "network": network,
                    "peersFile": self.peers_file(), "mode": self.spec.mode, "port": self.spec.port,
                    "lockFile": self.peers.join(format!("node{i}.lock")),
                    "underlayInterface": "eth0"
                }
            ]
        });
        let path = conf.write_json("10-podnet.conflist", &conflist);
        let tool = Cnitool::new(
            &conf,
            vec![self.plugins.dir.path().to_path_buf()],
            cache.path(),
        )
        .in_netns(&ns);
        self.nodes.push(Node {
            ns,
            _conf: conf,
            _ipam: ipam,
            _cache: cache,
            tool,
            conflist: path,
            ip: node_ip,
            subnet,
        });
    }

    /// Adds a pod on node `n` through cnitool (inside the node netns).
    fn add_pod(&mut self, n: usize) -> usize {
        let pod = Netns::new(&format!("vx-pod{}", n + 1));
        let out = self.nodes[n]
            .tool
            .run_ok(&["add", "podnet", pod.path_str()]);
        let result: Value = serde_json::from_str(&out).unwrap();
        let addr = result["ips"][0]["address"].as_str().unwrap();
        let ip = addr.split('/').next().unwrap().to_string();
        let prefix = if self.spec.ipv6_pods {
            format!("fd00:{}:0:{}::", self.net, n + 1)
        } else {
            format!("10.{}.{}.", self.net, n + 1)
        };
        assert!(ip.starts_with(&prefix), "{ip}");
        self.pods.push(Pod {
            ns: pod,
            node: n,
            ip,
        });
        self.pods.len() - 1
    }

    fn add_two_pods_per_node(&mut self) {
        for n in 0..3 {
            self.add_pod(n);
            self.add_pod(n);
        }
    }

    fn sync(&self, n: usize) -> String {
        let bin = self.plugins.dir.join("vxlan");
        let node = &self.nodes[n];
        node.ns.exec_ok(&[
            bin.to_str().unwrap(),
            "sync",
            node.conflist.to_str().unwrap(),
        ])
    }

    /// Every pod pings every pod on the other nodes (and the node ones if `same_node`).
    fn ping_all_across_nodes(&self) {
        for a in &self.pods {
            for b in &self.pods {
                if a.node != b.node {
                    assert!(
                        ping(a, &b.ip),
                        "pod on node{} cannot reach {} on node{}",
                        a.node + 1,
                        b.ip,
                        b.node + 1
                    );
                }
            }
        }
    }
}

fn ping(from: &Pod, to: &str) -> bool {
    from.ns
        .exec(&["ping", "-c", "2", "-i", "0.2", "-W", "2", to])
        .status
        .success()
}

fn ping_df(from: &Pod, to: &str, payload: u32) -> bool {
    let size = payload.to_string();
    from.ns
        .exec(&["ping", "-c", "1", "-W", "2", "-M", "do", "-s", &size, to])
        .status
        .success()
}

/// `udp dport <port>` counter on a node's output hook.
fn add_udp_counter(ns: &Netns, port: u16) {
    ns.exec_ok(&["nft", "add", "table", "inet", "vxtest"]);
    ns.exec_ok(&[
        "nft",
        "add chain inet vxtest out { type filter hook output priority 0; }",
    ]);
    ns.exec_ok(&[
        "nft",
        "add",
        "rule",
        "inet",
        "vxtest",
        "out",
        "udp",
        "dport",
        &port.to_string(),
        "counter",
    ]);
}

fn udp_packets(ns: &Netns) -> u64 {
    let v = ns.exec_json(&["nft", "-j", "list", "chain", "inet", "vxtest", "out"]);
    v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.get("rule"))
        .flat_map(|r| r["expr"].as_array().cloned().unwrap_or_default())
        .filter_map(|x| x.get("counter").and_then(|c| c["packets"].as_u64()))
        .sum()
}

/// (dst, lladdr) of permanent neighbours on the device.
fn neighbours(ns: &Netns, dev: &str) -> Vec<(String, String)> {
    let mut v: Vec<_> = json_of(
        ns,
        &["ip", "-j", "neigh", "show", "dev", dev, "nud", "permanent"],
    )
    .iter()
    .map(|n| {
        (
            n["dst"].as_str().unwrap().to_string(),
            n["lladdr"].as_str().unwrap_or("").to_string(),
        )
    })
    .collect();
    v.sort();
    v
}

/// (mac, dst) FDB entries of the device.
fn fdb(ns: &Netns, dev: &str) -> Vec<(String, String)> {
    let mut v: Vec<_> = json_of(ns, &["bridge", "-j", "fdb", "show", "dev", dev])
        .iter()
        .map(|n| {
            (
                n["mac"].as_str().unwrap().to_string(),
                n["dst"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Routes carrying our protocol (90): (dst, gateway, dev, onlink).
fn our_routes(ns: &Netns) -> Vec<(String, String, String, bool)> {
    let mut v: Vec<_> = json_of(ns, &["ip", "-j", "route", "show", "proto", "90"])
        .iter()
        .map(|r| {
            let onlink = r["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "onlink"));
            (
                r["dst"].as_str().unwrap().to_string(),
                r["gateway"].as_str().unwrap_or("").to_string(),
                r["dev"].as_str().unwrap().to_string(),
                onlink,
            )
        })
        .collect();
    v.sort();
    v
}

fn device_details(ns: &Netns, dev: &str) -> Value {
    json_of(ns, &["ip", "-d", "-j", "link", "show", "dev", dev]).remove(0)
}

#[test]
fn vxlan_mode_connects_pods_across_nodes_over_udp() {
    require_root!();
    let Some(mut c) = Cluster::new(Spec {
        mode: "vxlan",
        port: 4790,
        routed_third_node: false,
        ipv6_underlay: false,
        ipv6_pods: false,
    }) else {
        return;
    };
    for n in &c.nodes {
        add_udp_counter(&n.ns, 4790);
    }
    c.add_two_pods_per_node();
    c.ping_all_across_nodes();
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            udp_packets(&n.ns) > 0,
            "node{} sent no VXLAN UDP on port 4790",
            i + 1
        );
    }

    // The device: flannel's parameters, VTEP /32, MTU = 1500 - 50.
    let node1 = &c.nodes[0];
    let d = device_details(&node1.ns, "flannel.1");
    let info = &d["linkinfo"]["info_data"];
    assert_eq!(d["mtu"], 1450);
    assert_eq!(info["id"], 1);
    assert_eq!(info["port"], 4790);
    assert_eq!(info["local"], node1.ip.as_str());
    assert_eq!(info["link"], "eth0");
    assert_eq!(info["learning"], false);
    assert_eq!(
        node1
            .ns
            .addresses("flannel.1")
            .iter()
            .filter(|a| !a.contains(':'))
            .collect::<Vec<_>>(),
        [&format!("10.{}.1.0/32", c.net)]
    );

    // Peers program each other consistently: node2's entry for node1's VTEP is node1's MAC.
    let mac1 = d["address"].as_str().unwrap().to_string();
    let vtep1 = format!("10.{}.1.0", c.net);
    assert!(neighbours(&c.nodes[1].ns, "flannel.1").contains(&(vtep1.clone(), mac1.clone())));
    assert!(fdb(&c.nodes[1].ns, "flannel.1").contains(&(mac1, node1.ip.clone())));
    let routes = our_routes(&c.nodes[1].ns);
    assert!(
        routes.contains(&(
            format!("10.{}.1.0/24", c.net),
            vtep1,
            "flannel.1".into(),
            true
        )),
        "{routes:?}"
    );
    assert_eq!(routes.len(), 2);

    // Full-size packets with DF set fit: pod MTU 1450 = overlay MTU, 1450 - 28 bytes of ICMP payload.
    let (a, b) = (&c.pods[0], &c.pods[5]);
    assert!(ping_df(a, &b.ip, 1422), "full-size DF ping failed");
    assert!(
        !ping_df(a, &b.ip, 1423),
        "oversized DF ping should not leave the pod"
    );
}

#[test]
fn host_gw_mode_routes_via_node_addresses_without_a_device() {
    require_root!();
    let Some(mut c) = Cluster::new(Spec {
        mode: "host-gw",
        port: 8472,
        routed_third_node: false,
        ipv6_underlay: false,
        ipv6_pods: false,
    }) else {
        return;
    };
    for n in &c.nodes {
        add_udp_counter(&n.ns, 8472);
    }
    c.add_two_pods_per_node();
    c.ping_all_across_nodes();
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            n.ns.link("flannel.1").is_none(),
            "node{} has a VXLAN device in host-gw mode",
            i + 1
        );
        assert_eq!(udp_packets(&n.ns), 0, "host-gw must not encapsulate");
        let mut want: Vec<_> = (0..3)
            .filter(|&j| j != i)
            .map(|j| {
                (
                    c.nodes[j].subnet.clone(),
                    c.nodes[j].ip.clone(),
                    "eth0".to_string(),
                    false,
                )
            })
            .collect();
        want.sort();
        assert_eq!(our_routes(&n.ns), want);
    }
    // Full-size DF pings need no overhead here.
    assert!(ping_df(&c.pods[0], &c.pods[5].ip, 1472));
}

#[test]
fn auto_mode_uses_host_gw_on_link_and_vxlan_through_a_router() {
    require_root!();
    let Some(mut c) = Cluster::new(Spec {
        mode: "auto",
        port: 8472,
        routed_third_node: true,
        ipv6_underlay: false,
        ipv6_pods: false,
    }) else {
        return;
    };
    add_udp_counter(&c.nodes[2].ns, 8472);
    c.add_two_pods_per_node();
    c.ping_all_across_nodes();
    let net = c.net;
    let (n1, n2, n3) = (&c.nodes[0], &c.nodes[1], &c.nodes[2]);
    let r1 = our_routes(&n1.ns);
    assert_eq!(
        r1,
        vec![
            (n2.subnet.clone(), n2.ip.clone(), "eth0".into(), false),
            (
                n3.subnet.clone(),
                format!("10.{net}.3.0"),
                "flannel.1".into(),
                true
            ),
        ]
    );
    assert_eq!(
        neighbours(&n1.ns, "flannel.1").len(),
        1,
        "only node3 is reached over VXLAN"
    );
    let r3 = our_routes(&n3.ns);
    assert_eq!(r3.len(), 2);
    assert!(r3.iter().all(|r| r.2 == "flannel.1" && r.3), "{r3:?}");
    assert!(udp_packets(&n3.ns) > 0);
}

/// What node 1's flannel.1 holds for its peers: neighbours, FDB entries, our routes.
type PeerEntries = (
    Vec<(String, String)>,
    Vec<(String, String)>,
    Vec<(String, String, String, bool)>,
);

fn peer_entries(ns: &Netns) -> PeerEntries {
    (
        neighbours(ns, "flannel.1"),
        fdb(ns, "flannel.1"),
        our_routes(ns),
    )
}

#[test]
fn membership_change_idempotency_and_self_healing() {
    require_root!();
    let Some(mut c) = Cluster::new(Spec {
        mode: "vxlan",
        port: 8472,
        routed_third_node: false,
        ipv6_underlay: false,
        ipv6_pods: false,
    }) else {
        return;
    };
    c.add_two_pods_per_node();
    c.ping_all_across_nodes();
    let before = peer_entries(&c.nodes[0].ns);
    assert_eq!((before.0.len(), before.1.len(), before.2.len()), (2, 2, 2));
    // Unrelated state that must survive every reconcile.
    let n1 = &c.nodes[0].ns;
    ip(
        n1,
        &[
            "route",
            "add",
            "172.31.99.0/24",
            "via",
            &c.nodes[1].ip,
            "dev",
            "eth0",
        ],
    );
    ip(
        n1,
        &[
            "route",
            "add",
            &format!("10.{}.200.0/24", c.net),
            "via",
            &c.nodes[1].ip,
            "proto",
            "static",
        ],
    );

    node3_leaves_and_comes_back_with_exactly_its_entries(&c, &before);

    // The next ADD reconciles too.
    c.write_peers(&[0, 1]);
    c.add_pod(0);
    assert_eq!(our_routes(&c.nodes[0].ns).len(), 1);
    c.write_peers(&[0, 1, 2]);
    c.add_pod(0);
    assert_eq!(peer_entries(&c.nodes[0].ns), before);

    reconciles_change_nothing_and_heal_the_device(&c, &before);
    c.ping_all_across_nodes();
}

/// Node 3 leaves: exactly its neighbour, FDB entry and route go (unrelated routes stay); it
/// comes back: the same entries again, and connectivity.
fn node3_leaves_and_comes_back_with_exactly_its_entries(c: &Cluster, before: &PeerEntries) {
    let n1 = &c.nodes[0].ns;
    let vtep3 = format!("10.{}.3.0", c.net);
    let ip3 = c.nodes[2].ip.clone();
    c.write_peers(&[0, 1]);
    let out = c.sync(0);
    assert!(
        out.contains("neigh +0 -1; fdb +0 -1; routes +0 -1"),
        "{out}"
    );
    let after = peer_entries(n1);
    let keep = |v: &Vec<(String, String)>| {
        v.iter()
            .filter(|e| e.0 != vtep3 && e.1 != ip3)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(after.0, keep(&before.0));
    assert_eq!(after.1, keep(&before.1));
    assert_eq!(
        after.2,
        before
            .2
            .iter()
            .filter(|r| r.1 != vtep3)
            .cloned()
            .collect::<Vec<_>>()
    );
    assert_eq!((after.0.len(), after.1.len(), after.2.len()), (1, 1, 1));
    let unrelated = ip(n1, &["route", "show"]);
    assert!(
        unrelated.contains("172.31.99.0/24")
            && unrelated.contains(&format!("10.{}.200.0/24", c.net))
    );
    let (p1, p3) = (&c.pods[0], &c.pods[4]);
    assert!(!ping(p1, &p3.ip), "node3 still reachable after leaving");

    c.write_peers(&[0, 1, 2]);
    let out = c.sync(0);
    assert!(
        out.contains("neigh +1 -0; fdb +1 -0; routes +1 -0"),
        "{out}"
    );
    assert_eq!(&peer_entries(n1), before);
    assert!(ping(p1, &p3.ip));
}

/// 100 reconciles in a row change nothing (the unrelated route stays); the device deleted by
/// hand comes back with everything on it, its VTEP MAC and MTU too.
fn reconciles_change_nothing_and_heal_the_device(c: &Cluster, before: &PeerEntries) {
    let snapshot = || {
        let n1 = &c.nodes[0].ns;
        (
            device_details(n1, "flannel.1"),
            neighbours(n1, "flannel.1"),
            fdb(n1, "flannel.1"),
            ip(n1, &["route", "show"]),
            n1.addresses("flannel.1"),
        )
    };
    let first = snapshot();
    for i in 0..100 {
        let out = c.sync(0);
        assert!(
            out.contains(
                "device Unchanged; neigh +0 -0; fdb +0 -0; routes +0 -0; 6 unchanged; 0 problems"
            ),
            "pass {i}: {out}"
        );
    }
    assert_eq!(snapshot(), first);
    assert!(ip(&c.nodes[0].ns, &["route", "show"]).contains("172.31.99.0/24"));

    ip(&c.nodes[0].ns, &["link", "del", "flannel.1"]);
    let out = c.sync(0);
    assert!(out.contains("device Created"), "{out}");
    assert_eq!(&peer_entries(&c.nodes[0].ns), before);
    let again = snapshot();
    assert_eq!(
        again.0["address"], first.0["address"],
        "the VTEP MAC survives a recreate"
    );
    assert_eq!(again.0["mtu"], first.0["mtu"]);
}

#[test]
fn vxlan_over_an_ipv6_underlay() {
    require_root!();
    let Some(mut c) = Cluster::new(Spec {
        mode: "vxlan",
        port: 8472,
        routed_third_node: false,
        ipv6_underlay: true,
        ipv6_pods: false,
    }) else {
        return;
    };
    for n in &c.nodes {
        add_udp_counter(&n.ns, 8472);
    }
    c.add_two_pods_per_node();
    c.ping_all_across_nodes();
    let n1 = &c.nodes[0];
    let d = device_details(&n1.ns, "flannel.1");
    assert_eq!(d["mtu"], 1430, "IPv6 underlay: 1500 - 70");
    assert_eq!(d["linkinfo"]["info_data"]["local6"], n1.ip.as_str());
    let fdb1 = fdb(&n1.ns, "flannel.1");
    assert!(
        fdb1.iter().any(|(_, dst)| *dst == c.nodes[1].ip),
        "{fdb1:?}"
    );
    assert!(udp_packets(&n1.ns) > 0);
    // Full-size DF ping: 1430 - 28.
    assert!(ping_df(&c.pods[0], &c.pods[3].ip, 1402));
}

/// flannel's IPv6 overlay: an IPv6 pod network over an IPv6 underlay, on `flannel-v6.<vni>`
/// with one /128 VTEP address, IPv6 neighbours, FDB entries to the peers' IPv6 addresses and
/// onlink IPv6 routes.
#[test]
fn ipv6_pod_network_on_a_flannel_v6_device() {
    require_root!();
    let Some(mut c) = Cluster::new(Spec {
        mode: "vxlan",
        port: 8472,
        routed_third_node: false,
        ipv6_underlay: true,
        ipv6_pods: true,
    }) else {
        return;
    };
    c.add_two_pods_per_node();
    c.ping_all_across_nodes();
    let n1 = &c.nodes[0];
    assert!(n1.ns.link("flannel.1").is_none(), "no IPv4 device");
    let d = device_details(&n1.ns, "flannel-v6.1");
    assert_eq!(d["mtu"], 1430);
    let vtep = format!("fd00:{}:0:1::", c.net);
    let addrs = n1.ns.addresses("flannel-v6.1");
    assert!(addrs.contains(&format!("{vtep}/128")), "{addrs:?}");
    let n2_vtep = format!("fd00:{}:0:2::", c.net);
    let neigh = json_of(
        &n1.ns,
        &["ip", "-6", "-j", "neigh", "show", "dev", "flannel-v6.1"],
    );
    assert!(
        neigh
            .iter()
            .any(|n| n["dst"] == n2_vtep.as_str() && n["state"][0] == "PERMANENT"),
        "{neigh:?}"
    );
    let fdb1 = fdb(&n1.ns, "flannel-v6.1");
    assert!(
        fdb1.iter().any(|(_, dst)| *dst == c.nodes[1].ip),
        "{fdb1:?}"
    );
    let routes = json_of(
        &n1.ns,
        &[
            "ip",
            "-6",
            "-j",
            "route",
            "show",
            &format!("fd00:{}:0:2::/64", c.net),
        ],
    );
    assert!(
        routes.iter().any(|r| r["gateway"] == n2_vtep.as_str()
            && r["dev"] == "flannel-v6.1"
            && r["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "onlink"))),
        "{routes:?}"
    );
    // A second pass changes nothing.
    let out = c.sync(0);
    assert!(
        out.contains("device Unchanged; neigh +0 -0; fdb +0 -0; routes +0 -0"),
        "{out}"
    );
    // Full-size DF ping: 1430 - 48.
    assert!(ping_df(&c.pods[0], &c.pods[3].ip, 1382));
}
