//! The agent's bgp backend driving real BIRDs: simulated nodes (namespaces on one underlay
//! bridge, `cluster::Underlay`), each running the backend through the `bgp-node` driver as the
//! agent's reconcile would call it, and FRR in the switch namespace as the datacenter's router.
//! What an operator would check: other nodes' subnets installed `proto bird` via the announcing
//! node, pods talking across nodes unencapsulated, the router learning every subnet and a host
//! behind it reaching a pod by its own address, bogus announcements changing nothing, a removed
//! member withdrawn at once while the other sessions stay up, pod traffic kept across a
//! graceful stop and restart, a BIRD crash and an agent crash, and a route reflector instead of
//! the mesh; the node's subnet a kernel blackhole that follows the subnet and goes with a
//! shutdown. Needs `bird2` (bird, birdc) and `frr`.

use std::path::Path;
use std::time::{Duration, Instant};

use netns_tests::bgp::{
    kernel_routes, outside_host, reflector_conf, router_conf, sessions_moved, BgpNode, KernelRoute,
    NodeSpec, Session, OUTSIDE_HOST,
};
use netns_tests::cluster::{
    ping, udp_source_seen, wait_until, Node, Pinger, Pod, Underlay, CONVERGE,
};
use netns_tests::frr::Frr;
use netns_tests::private_host::missing_tools;
use netns_tests::{require_root, Netns, TempDir};

const NETWORK: &str = "10.244.0.0/16";
const ROUTER_AS: u32 = 64513;
const PASSWORD: &str = "frr-md5-secret";
/// The restart time the external-router test announces (peers keep a stopped node's routes
/// this long).
const GR_SECS: u64 = 4;
/// What FRR announces besides relaying the nodes' subnets: a default route, a host route and a
/// slice of node 2's subnet, a prefix outside the network. Every node must refuse all four.
const BOGUS: &[&str] = &[
    "0.0.0.0/0",
    "10.244.2.5/32",
    "10.244.2.128/25",
    "192.168.99.0/24",
];

fn have_bird() -> bool {
    match missing_tools(&["bird", "birdc"]) {
        None => true,
        Some(m) => {
            eprintln!("skipping: {m:?} not installed (apt-get install bird2)");
            false
        }
    }
}

fn subnet(i: u8) -> String {
    format!("10.244.{i}.0/24")
}

/// A mesh member as `bgp-node` takes it: node `j`'s address with its lease, `subnet(j)`.
fn with_lease(ip: &str) -> String {
    let j: u8 = ip
        .rsplit('.')
        .next()
        .and_then(|o| o.parse().ok())
        .unwrap_or_else(|| panic!("{ip} is not a node's address"));
    format!("{ip}={}", subnet(j))
}

/// A cluster of `count` nodes, each with one pod and a default route via the switch (the
/// router), and their backends (not started yet: [`Cluster::start`]).
struct Cluster {
    // Dropped in this order: backends (BIRDs killed) before the namespaces.
    bgp: Vec<BgpNode>,
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    underlay: Underlay,
    dir: TempDir,
}

impl Cluster {
    /// [`Cluster::new`], or `None` (with a line saying why) when BIRD is not installed.
    fn with_bird(tag: &str, count: u8) -> Option<Cluster> {
        have_bird().then(|| Cluster::new(tag, count))
    }

    fn new(tag: &str, count: u8) -> Cluster {
        let underlay = Underlay::new(tag);
        underlay
            .ns
            .exec_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        for i in 1..=count {
            let mut node = underlay.add_node(i);
            node.route_default_via_switch();
            pods.push(node.add_pod(&subnet(i)));
            nodes.push(node);
        }
        Cluster {
            bgp: Vec::new(),
            pods,
            nodes,
            underlay,
            dir: TempDir::new("bgp"),
        }
    }

    /// Starts node `i`'s backend (1-based) with the `Backend` object `options`.
    fn backend(&self, i: u8, options: &str, extra: &[&str]) -> BgpNode {
        let node = &self.nodes[usize::from(i - 1)];
        let dir = self.dir.join(format!("node{i}"));
        BgpNode::start(
            &node.ns,
            &NodeSpec {
                driver: Path::new(env!("CARGO_BIN_EXE_bgp-node")),
                dir: &dir,
                public_ip: &node.ip,
                network: NETWORK,
                options,
                extra,
            },
        )
    }

    /// Starts every node's backend and applies the full mesh; each BIRD starts.
    fn start(&mut self, options: &str) {
        for i in 1..=self.nodes.len() as u8 {
            let b = self.backend(i, options, &[]);
            self.bgp.push(b);
        }
        for i in 1..=self.nodes.len() as u8 {
            let action = self.apply(i, &self.all_but(i));
            assert_eq!(action, "started", "node {i}");
        }
    }

    /// Node `i` applies its subnet with the mesh `peers`, each with its lease (node `j`'s
    /// address with [`subnet`]`(j)`).
    fn apply(&mut self, i: u8, peers: &[String]) -> String {
        let members: Vec<String> = peers.iter().map(|ip| with_lease(ip)).collect();
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        self.bgp[usize::from(i - 1)].apply(&subnet(i), &members)
    }

    fn all_but(&self, i: u8) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.index != i)
            .map(|n| n.ip.clone())
            .collect()
    }

    /// The BIRD routes node `i` should have: every other node's subnet via that node.
    fn expected_routes(&self, i: u8, members: &[u8]) -> Vec<KernelRoute> {
        let mut v: Vec<KernelRoute> = members
            .iter()
            .filter(|j| **j != i)
            .map(|j| KernelRoute {
                dst: subnet(*j),
                via: Some(Underlay::node_ip(*j)),
                dev: Some("eth0".into()),
            })
            .collect();
        v.sort();
        v
    }

    fn bird_routes(&self, i: u8) -> Vec<KernelRoute> {
        kernel_routes(&self.nodes[usize::from(i - 1)].ns, "bird")
    }

    /// Node `i`'s blackhole routes (`ip route show type blackhole`), one per line.
    fn blackholes(&self, i: u8) -> Vec<String> {
        self.nodes[usize::from(i - 1)]
            .ns
            .exec_ok(&["ip", "route", "show", "type", "blackhole"])
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    }

    /// Waits until every node in `members` has exactly the routes to the other members.
    fn converge(&self, members: &[u8]) {
        for &i in members {
            let want = self.expected_routes(i, members);
            let ok = wait_until(CONVERGE, || self.bird_routes(i) == want);
            assert!(
                ok,
                "node {i}: routes {:?}, expected {want:?}\n{}",
                self.bird_routes(i),
                self.logs()
            );
        }
    }

    fn logs(&self) -> String {
        self.bgp
            .iter()
            .map(BgpNode::logs)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn pod_ip(&self, i: u8) -> &str {
        &self.pods[usize::from(i - 1)].ip
    }

    fn assert_pods_ping(&self) {
        for (a, from) in self.pods.iter().enumerate() {
            for (b, to) in self.pods.iter().enumerate() {
                if a != b {
                    assert!(
                        wait_until(Duration::from_secs(5), || ping(&from.ns, &to.ip)),
                        "pod {} cannot reach pod {} ({})",
                        a + 1,
                        b + 1,
                        to.ip
                    );
                }
            }
        }
    }
}

/// The router's bgpd configuration: eBGP to every node (TCP MD5), announcing [`BOGUS`].
fn ebgp_router_conf(nodes: &[Node]) -> String {
    let ips: Vec<&str> = nodes.iter().map(|n| n.ip.as_str()).collect();
    router_conf(&ips, ROUTER_AS, PASSWORD, BOGUS)
}

/// The router learned every subnet from its node, and put it in its kernel; a host behind
/// it reaches pods, which see its own address (no NAT, no tunnel).
fn router_learns_every_subnet_and_routes_to_pods(c: &Cluster, frr: &Frr, host: &Netns) {
    let want: Vec<(String, String)> = (1..=3).map(|i| (subnet(i), Underlay::node_ip(i))).collect();
    let learned = || {
        frr.bgp_routes()
            .into_iter()
            .filter(|(p, _)| p.starts_with("10.244.") && p.ends_with("/24"))
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(CONVERGE, || learned() == want),
        "FRR learned {:?}\n{}",
        learned(),
        frr.log("bgpd")
    );
    let in_router_kernel: Vec<String> = kernel_routes(&c.underlay.ns, "bgp")
        .into_iter()
        .filter(|r| r.dst.starts_with("10.244."))
        .map(|r| format!("{} via {}", r.dst, r.via.unwrap_or_default()))
        .collect();
    assert!(
        (1..=3).all(|i| in_router_kernel.contains(&format!(
            "{} via {}",
            subnet(i),
            Underlay::node_ip(i)
        ))),
        "{in_router_kernel:?}"
    );
    for i in [1, 3] {
        assert!(ping(host, c.pod_ip(i)), "outside host cannot reach pod {i}");
    }
    let seen = udp_source_seen(&c.pods[0].ns, host, c.pod_ip(1));
    assert_eq!(seen, Some(OUTSIDE_HOST.parse().unwrap()));
}

/// The router sent every node the bogus prefixes; every node refused (and counted) them:
/// its BIRD routes and default route unchanged.
fn bogus_announcements_refused(c: &mut Cluster, frr: &Frr) {
    let refused = format!(
        "ferrocni_agent_bgp_peer_updates_refused_total{{peer=\"{}\",kind=\"peer\"}}",
        Underlay::switch_ip()
    );
    for i in 1..=3u8 {
        let sent_all = || {
            let sent = frr.advertised(&Underlay::node_ip(i));
            BOGUS.iter().all(|p| sent.iter().any(|a| a == p))
        };
        assert!(
            wait_until(CONVERGE, sent_all),
            "router did not send {BOGUS:?} to node {i}: {:?}",
            frr.advertised(&Underlay::node_ip(i))
        );
        let b = &mut c.bgp[usize::from(i - 1)];
        let n = BOGUS.len() as f64;
        assert!(
            wait_until(CONVERGE, || b.metric(&refused).is_some_and(|v| v >= n)),
            "node {i}: {}",
            b.metrics()
        );
    }
    for i in 1..=3u8 {
        assert_eq!(
            c.bird_routes(i),
            c.expected_routes(i, &[1, 2, 3]),
            "node {i}"
        );
        let default = c.nodes[usize::from(i - 1)]
            .ns
            .exec_ok(&["ip", "route", "show", "default"]);
        assert_eq!(
            default.trim(),
            format!("default via {} dev eth0", Underlay::switch_ip()).as_str(),
            "node {i}"
        );
    }
}

#[test]
fn mesh_and_external_router() {
    require_root!();
    let Some(mut c) = Cluster::with_bird("bgpm", 3) else {
        return;
    };
    let Some(frr) = Frr::start(&c.underlay.ns, &ebgp_router_conf(&c.nodes)) else {
        return;
    };
    let host = outside_host(&c.underlay);
    let options = format!(
        r#"{{"Type":"bgp","GracefulRestartTime":{GR_SECS},"Peers":[{{"PeerIP":"{}","ASNumber":{ROUTER_AS},"Password":"{PASSWORD}"}}]}}"#,
        Underlay::switch_ip()
    );
    let started = Instant::now();
    c.start(&options);

    // Every node: the two other subnets, via their node, proto bird; pods ping across.
    c.converge(&[1, 2, 3]);
    eprintln!(
        "three nodes converged {:?} after the first BIRD start",
        started.elapsed()
    );
    c.assert_pods_ping();
    let route = c.nodes[0]
        .ns
        .exec_ok(&["ip", "route", "show", "10.244.2.0/24"]);
    assert!(
        route.contains("via 172.31.250.2 dev eth0 proto bird metric 32"),
        "{route}"
    );

    router_learns_every_subnet_and_routes_to_pods(&c, &frr, &host);
    bogus_announcements_refused(&mut c, &frr);

    // What /metrics says: three sessions up (two nodes, the router), two subnets learned.
    let m = c.bgp[0].metrics();
    for line in [
        "ferrocni_agent_bgp_bird_up 1",
        "ferrocni_agent_bgp_sessions{state=\"established\"} 3",
        "ferrocni_agent_bgp_routes_learned 2",
        "ferrocni_agent_bgp_session_established{peer=\"172.31.250.2\",kind=\"mesh\"} 1",
        "ferrocni_agent_bgp_session_established{peer=\"172.31.250.254\",kind=\"peer\"} 1",
        "ferrocni_agent_bgp_peer_routes_imported{peer=\"172.31.250.3\",kind=\"mesh\"} 1",
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line:?}:\n{m}");
    }
    // The router's neighbours: all three nodes, established (with the MD5 password).
    let states: Vec<String> = frr.neighbours().into_iter().map(|(_, s)| s).collect();
    assert_eq!(states, vec!["Established"; 3], "{}", frr.log("bgpd"));

    // Node 3's agent stops for good (no next agent): the router and the other nodes keep its
    // subnet for the restart time it announced, then give up on it.
    c.bgp[2].stop();
    let stopped = Instant::now();
    let has3 = |r: &[(String, String)]| r.iter().any(|(p, _)| *p == subnet(3));
    assert!(has3(&frr.bgp_routes()), "the router dropped node 3 at once");
    assert_eq!(c.bird_routes(1), c.expected_routes(1, &[1, 2, 3]));
    let gone = || !has3(&frr.bgp_routes()) && c.bird_routes(1) == c.expected_routes(1, &[1, 2]);
    assert!(
        wait_until(CONVERGE, gone),
        "node 3's subnet stayed\n{}",
        frr.log("bgpd")
    );
    let held = stopped.elapsed();
    eprintln!("node 3's subnet held {held:?} after its graceful stop (restart time {GR_SECS} s)");
    assert!(
        held >= Duration::from_secs(GR_SECS - 1),
        "node 3's subnet went after {held:?}"
    );

    // Node 3 leaves the backend for good: the routes its stopped BIRD left go too.
    assert_eq!(c.bird_routes(3), c.expected_routes(3, &[1, 2, 3]));
    c.bgp[2] = c.backend(3, &options, &[]);
    let said = c.bgp[2].shutdown();
    assert!(
        said.contains("BIRD was not running; 2 BIRD route(s) left in the kernel removed"),
        "{said}"
    );
    assert_eq!(c.bird_routes(3), vec![]);
}

#[test]
fn removed_member_withdrawn_at_once_others_undisturbed() {
    require_root!();
    let Some(mut c) = Cluster::with_bird("bgpr", 3) else {
        return;
    };
    c.start(r#"{"Type":"bgp"}"#);
    c.converge(&[1, 2, 3]);
    assert!(wait_until(CONVERGE, || c.bgp[1]
        .sessions()
        .iter()
        .all(|s| s.1 == "Established")));
    let before = c.bgp[1].sessions();

    // Node 1's lease goes: nodes 2 and 3 drop it; its subnet leaves both within a second.
    let (n2, n3) = (Underlay::node_ip(2), Underlay::node_ip(3));
    let started = Instant::now();
    assert_eq!(c.apply(2, std::slice::from_ref(&n3)), "reconfigured");
    assert_eq!(c.apply(3, std::slice::from_ref(&n2)), "reconfigured");
    c.converge(&[2, 3]);
    let took = started.elapsed();
    eprintln!("node 1's subnet left nodes 2 and 3 {took:?} after their apply");
    assert!(took < Duration::from_secs(2), "withdrawal took {took:?}");
    // Nodes 2 and 3 keep their session, untouched (same state, same since).
    let after = c.bgp[1].sessions();
    let mesh3 = |v: &[Session]| -> Vec<Session> {
        v.iter()
            .filter(|s| s.0 == "mesh_172_31_250_3")
            .cloned()
            .collect()
    };
    assert_eq!(mesh3(&before).len(), 1, "{before:?}");
    assert_eq!(
        sessions_moved(&mesh3(&before), &mesh3(&after)),
        Vec::<String>::new()
    );
    assert!(
        !after.iter().any(|s| s.0 == "mesh_172_31_250_1"),
        "{after:?}"
    );

    // A member that is not there yet: configured, nothing else moves; the same set again is
    // no change at all.
    let with_new = vec![n3.clone(), Underlay::node_ip(9)];
    assert_eq!(c.apply(2, &with_new), "reconfigured");
    assert_eq!(c.apply(2, &with_new), "unchanged");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        sessions_moved(&mesh3(&before), &mesh3(&c.bgp[1].sessions())),
        Vec::<String>::new()
    );
    assert_eq!(c.bird_routes(2), c.expected_routes(2, &[2, 3]));
    let m = c.bgp[1].metrics();
    assert!(
        m.contains("ferrocni_agent_bgp_reconfigurations_total 2\n"),
        "{m}"
    );
    assert!(
        m.contains(
            "ferrocni_agent_bgp_session_established{peer=\"172.31.250.9\",kind=\"mesh\"} 0\n"
        ),
        "{m}"
    );
    eprintln!(
        "node 1 after its peers dropped it: sessions {:?}, routes {:?}",
        c.bgp[0].sessions(),
        c.bird_routes(1)
    );

    // Node 3 given another subnet (its lease acquired again): the blackhole moves with it.
    let blackhole = |s: &str| vec![format!("blackhole {s} proto static metric 1000000")];
    assert_eq!(c.blackholes(3), blackhole(&subnet(3)));
    c.bgp[2].apply("10.244.33.0/24", &[n2.as_str()]);
    assert_eq!(c.blackholes(3), blackhole("10.244.33.0/24"));
    c.apply(3, std::slice::from_ref(&n2));
    assert_eq!(c.blackholes(3), blackhole(&subnet(3)));

    // Node 3 leaves the backend for good (shutdown, not a graceful stop): node 2 loses its
    // subnet at once, and node 3's kernel loses BIRD's routes and the subnet's blackhole.
    assert_eq!(
        c.blackholes(3),
        vec![format!(
            "blackhole {} proto static metric 1000000",
            subnet(3)
        )]
    );
    let said = c.bgp[2].shutdown();
    assert!(said.contains("withdrawn"), "{said}");
    assert!(
        said.ends_with("and 1 blackhole route(s) of this node's subnet"),
        "{said}"
    );
    c.converge(&[2]);
    assert_eq!(c.bird_routes(3), vec![]);
    assert_eq!(c.blackholes(3), Vec::<String>::new());
}

/// Waits until node `restarted` is out of graceful recovery and node `helper` holds none of
/// its routes as stale.
fn wait_restart_over(c: &Cluster, restarted: u8, helper: u8) {
    let b = &c.bgp[usize::from(restarted - 1)];
    let h = &c.bgp[usize::from(helper - 1)];
    let session = format!("mesh_{}", Underlay::node_ip(restarted).replace('.', "_"));
    let over = || {
        !b.birdc("show status").contains("recovery")
            && !h
                .birdc(&format!("show protocols all {session}"))
                .contains("graceful restart active")
    };
    assert!(
        wait_until(CONVERGE, over),
        "graceful restart not over\n{}",
        c.logs()
    );
}

#[test]
fn restarts_keep_pod_traffic() {
    require_root!();
    let Some(mut c) = Cluster::with_bird("bgpg", 2) else {
        return;
    };
    c.start(r#"{"Type":"bgp","GracefulRestartTime":60}"#);
    c.converge(&[1, 2]);
    c.assert_pods_ping();
    let pinger = Pinger::start(&c.pods[0].ns, c.pod_ip(2), 14);
    let established =
        |b: &BgpNode| b.sessions().iter().all(|s| s.1 == "Established") && !b.sessions().is_empty();

    // The agent on node 2 stops: BIRD stops for a graceful restart. Node 1 keeps node 2's
    // subnet (stale, for the restart time) and node 2's kernel keeps node 1's.
    let said = c.bgp[1].stop();
    assert!(said.contains("graceful restart"), "{said}");
    assert!(said.contains("for 60 s"), "{said}");
    assert_eq!(c.bgp[1].bird_pid(), None);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        c.bird_routes(1),
        c.expected_routes(1, &[1, 2]),
        "node 1 dropped node 2"
    );
    assert_eq!(
        c.bird_routes(2),
        c.expected_routes(2, &[1, 2]),
        "node 2 flushed its routes"
    );
    let helper = c.bgp[0].birdc("show protocols all mesh_172_31_250_2");
    assert!(
        helper.contains("Neighbor graceful restart active"),
        "{helper}"
    );

    // The next agent: BIRD starts in graceful recovery and takes over.
    c.bgp[1] = c.backend(2, r#"{"Type":"bgp","GracefulRestartTime":60}"#, &[]);
    assert_eq!(c.apply(2, &[Underlay::node_ip(1)]), "recovering");
    assert!(
        wait_until(CONVERGE, || established(&c.bgp[1])),
        "{}",
        c.logs()
    );
    c.converge(&[1, 2]);
    // The restart is over once node 2 has left recovery and node 1 holds none of its routes
    // as stale (a second restart before that makes node 1 drop them, as RFC 4724 wants).
    wait_restart_over(&c, 2, 1);

    // BIRD on node 2 dies: the backend starts it again (in recovery), routes stay meanwhile.
    let old_pid = c.bgp[1].bird_pid();
    c.bgp[1].kill_bird();
    assert!(
        wait_until(CONVERGE, || c.bgp[1]
            .bird_pid()
            .is_some_and(|p| Some(p) != old_pid)),
        "BIRD not restarted\n{}",
        c.logs()
    );
    assert!(
        wait_until(CONVERGE, || established(&c.bgp[1])),
        "{}",
        c.logs()
    );
    c.converge(&[1, 2]);
    wait_restart_over(&c, 2, 1);
    assert_eq!(
        c.bgp[1].metric("ferrocni_agent_bgp_bird_restarts_total"),
        Some(1.0)
    );

    // The agent on node 1 crashes: its BIRD runs on, the next agent adopts it and no session
    // moves.
    let before = c.bgp[0].sessions();
    c.bgp[0].crash();
    c.bgp[0] = c.backend(1, r#"{"Type":"bgp","GracefulRestartTime":60}"#, &[]);
    assert_eq!(c.apply(1, &[Underlay::node_ip(2)]), "adopted");
    assert_eq!(
        sessions_moved(&before, &c.bgp[0].sessions()),
        Vec::<String>::new()
    );

    let (sent, received) = pinger.finish();
    eprintln!("pod 1 -> pod 2 across the restarts: {received} of {sent} pings answered");
    assert!(sent > 100, "only {sent} pings sent");
    assert_eq!(
        received,
        sent,
        "pod traffic lost across the restarts\n{}",
        c.logs()
    );
}

#[test]
fn route_reflector_instead_of_mesh() {
    require_root!();
    let Some(mut c) = Cluster::with_bird("bgpx", 3) else {
        return;
    };
    let sw = Underlay::switch_ip();
    let Some(frr) = Frr::start(&c.underlay.ns, &reflector_conf(64512)) else {
        return;
    };
    // Nodes 1 and 2 have the reflector in the network's Peers; node 3 only by its flag.
    let with_peer =
        format!(r#"{{"Type":"bgp","NodeToNodeMesh":false,"Peers":[{{"PeerIP":"{sw}"}}]}}"#);
    let flag = format!("{sw}:64512");
    for i in 1..=3u8 {
        let b = if i < 3 {
            c.backend(i, &with_peer, &[])
        } else {
            c.backend(
                i,
                r#"{"Type":"bgp","NodeToNodeMesh":false}"#,
                &["--bgp-peers", &flag],
            )
        };
        c.bgp.push(b);
    }
    for i in 1..=3u8 {
        // The mesh members are passed as always; without the mesh they get no session.
        assert_eq!(c.apply(i, &c.all_but(i)), "started");
    }
    // Routes reflected keep their next hop: each subnet via its own node, not the reflector.
    c.converge(&[1, 2, 3]);
    c.assert_pods_ping();
    for i in 1..=3u8 {
        let sessions = c.bgp[usize::from(i - 1)].sessions();
        let names: Vec<&str> = sessions.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names, vec!["peer_172_31_250_254"], "node {i}");
    }
    let neighbours = frr.neighbours();
    assert_eq!(neighbours.len(), 3, "{neighbours:?}");
}
