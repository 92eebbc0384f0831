//! `ferrocni-agent` with the `bgp` backend (Calico's routed mode on BIRD 2): three simulated
//! nodes (namespaces on one underlay bridge) with their agents on a one-member etcd, and FRR's
//! bgpd in the switch namespace as the datacenter's router. What an operator would check: the
//! leases and `FLANNEL_MTU` are what the backend promises, each node learns the others' subnets
//! by BGP (`proto bird`, via the announcing node), pods talk across nodes unencapsulated with
//! their own addresses, the router learns every subnet and a host behind it reaches a pod
//! directly, the router's bogus announcements change nothing, an agent restart loses no ping, a
//! node leaving is withdrawn, a route reflector replaces the mesh, `/metrics` shows the
//! sessions, and bad options stop the agent at start naming the option. Needs etcd, bird2,
//! frr and curl (`.ci/packages.txt`); no special kernel driver (BGP is TCP).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use netns_tests::agent::Agent;
use netns_tests::agent_cluster::{require_tools, Cluster};
use netns_tests::bgp::{
    kernel_routes, outside_host, reflector_conf, router_conf, KernelRoute, OUTSIDE_HOST,
};
use netns_tests::cluster::{ping, udp_source_seen, wait_until, Node, Pinger, Underlay, CONVERGE};
use netns_tests::etcd::{lease_key, Etcd, EtcdOptions, PREFIX};
use netns_tests::frr::Frr;
use netns_tests::{require_root, wait_or_kill, Netns, TempDir};

const ROUTER_AS: u32 = 64513;
const PASSWORD: &str = "frr-md5-secret";
/// The restart time the nodes announce: how long peers keep a stopped node's routes.
const GR_SECS: u64 = 8;
/// What the router announces besides relaying: a default route, a host route inside the
/// cluster network and a prefix outside it. No node may take any of them.
const BOGUS: &[&str] = &["0.0.0.0/0", "10.244.250.5/32", "192.168.99.0/24"];
const METRICS_PORT: u16 = 19_472;

fn have_tools() -> bool {
    require_tools(&["etcd", "etcdctl", "bird", "curl"])
}

fn network_config(backend: &str) -> String {
    format!(
        r#"{{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{backend}}}"#
    )
}

/// Each agent serves `/metrics` on its node's loopback.
fn with_metrics(c: &mut Cluster) {
    for a in &mut c.agents {
        a.extra.extend([
            "--healthz-ip=127.0.0.1".to_string(),
            format!("--metrics-port={METRICS_PORT}"),
        ]);
    }
}

fn metrics(node: &Node) -> String {
    let url = format!("http://127.0.0.1:{METRICS_PORT}/metrics");
    let out = node.ns.exec(&["curl", "-sf", "--max-time", "5", &url]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until every line of `want` is in node `i`'s `/metrics`.
fn assert_metrics(c: &Cluster, i: usize, want: &[&str]) {
    let has_all = || {
        let m = metrics(&c.nodes[i]);
        want.iter().all(|w| m.lines().any(|l| l == *w))
    };
    assert!(
        wait_until(CONVERGE, has_all),
        "node {}: /metrics lacks one of {want:?}:\n{}",
        i + 1,
        metrics(&c.nodes[i])
    );
}

/// BIRD's routes node `i` should have: every other node's subnet via that node's address.
fn expected_routes(c: &Cluster, i: usize, members: &[usize]) -> Vec<KernelRoute> {
    let mut v: Vec<KernelRoute> = members
        .iter()
        .filter(|j| **j != i)
        .map(|&j| KernelRoute {
            dst: c.subnets[j].clone(),
            via: Some(c.nodes[j].ip.clone()),
            dev: Some("eth0".into()),
        })
        .collect();
    v.sort();
    v
}

/// Waits until each node in `members` has exactly the BIRD routes to the other members.
fn converge(c: &Cluster, members: &[usize]) {
    for &i in members {
        let want = expected_routes(c, i, members);
        let have = || kernel_routes(&c.nodes[i].ns, "bird");
        assert!(
            wait_until(CONVERGE, || have() == want),
            "node {}: BIRD routes {:?}, expected {want:?}\n{}",
            i + 1,
            have(),
            c.agents[i].log()
        );
    }
}

/// The router's best routes to the pod subnets: `(prefix, next hop)`.
fn router_pod_routes(frr: &Frr) -> Vec<(String, String)> {
    frr.bgp_routes()
        .into_iter()
        .filter(|(p, _)| p.starts_with("10.244.") && p.ends_with("/24"))
        .collect()
}

/// The main test: a node-to-node mesh with an external eBGP router (TCP MD5).
#[test]
fn bgp_mesh_with_router_on_etcd() {
    require_root!();
    if !have_tools() {
        return;
    }
    let sw = Underlay::switch_ip();
    let backend = format!(
        r#"{{"Type":"bgp","GracefulRestartTime":{GR_SECS},"Peers":[{{"PeerIP":"{sw}","ASNumber":{ROUTER_AS},"Password":"{PASSWORD}"}}]}}"#
    );
    let mut c = Cluster::new("bgpe", &network_config(&backend));
    // The switch routes: between the nodes and the network behind it, where a host is.
    c.underlay
        .ns
        .exec_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
    let host = outside_host(&c.underlay);
    for n in &c.nodes {
        n.ns.exec_ok(&["ip", "route", "add", "default", "via", &sw]);
    }
    let node_ips: Vec<&str> = c.nodes.iter().map(|n| n.ip.as_str()).collect();
    let Some(frr) = Frr::start(
        &c.underlay.ns,
        &router_conf(&node_ips, ROUTER_AS, PASSWORD, BOGUS),
    ) else {
        return;
    };
    with_metrics(&mut c);
    let started = Instant::now();
    c.start_agents();
    converge(&c, &[0, 1, 2]);
    eprintln!(
        "three agents started and converged in {:?}",
        started.elapsed()
    );

    leases_and_bird_files_as_promised(&c);
    c.assert_full_mesh();
    c.assert_source_preserved();
    // On the underlay: the pods' own packets between the nodes, nothing encapsulated (no
    // VXLAN, no IP-in-IP).
    c.assert_routed_unencapsulated();
    router_learns_every_subnet_and_routes_to_pods(&c, &frr, &host);
    bogus_announcements_refused_on_every_node(&c, &frr);

    // /metrics: three sessions up (two nodes, the router), two subnets learned.
    assert_metrics(
        &c,
        0,
        &[
            "ferrocni_agent_bgp_bird_up 1",
            "ferrocni_agent_bgp_sessions{state=\"established\"} 3",
            "ferrocni_agent_bgp_routes_learned 2",
            &format!(
                "ferrocni_agent_bgp_session_established{{peer=\"{}\",kind=\"mesh\"}} 1",
                c.nodes[1].ip
            ),
            &format!("ferrocni_agent_bgp_session_established{{peer=\"{sw}\",kind=\"peer\"}} 1"),
            "ferrocni_agent_leases{state=\"programmed\"} 2",
        ],
    );
    let neighbours = frr.neighbours();
    assert!(
        neighbours.len() == 3 && neighbours.iter().all(|(_, s)| s == "Established"),
        "{neighbours:?}"
    );

    agent_restart_loses_no_ping(&mut c);
    node3_leaves_and_is_withdrawn(&mut c, &frr);
}

/// The leases, subnet.env and BIRD's files are what the backend promises, and node 1 routes
/// to node 2's subnet by BIRD.
fn leases_and_bird_files_as_promised(c: &Cluster) {
    for (i, subnet) in c.subnets.iter().enumerate() {
        assert_eq!(
            c.etcd.get(&lease_key(subnet)).as_deref(),
            Some(
                format!(
                    r#"{{"PublicIP":"{}","PublicIPv6":null,"BackendType":"bgp"}}"#,
                    c.nodes[i].ip
                )
                .as_str()
            )
        );
        assert_eq!(
            c.agents[i].env_value("FLANNEL_MTU").as_deref(),
            Some("1500"),
            "the underlay's MTU: nothing is encapsulated"
        );
        let dir = c.agents[i].bgp_dir();
        let conf = dir.join("bird.conf");
        let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode(&conf),
            0o600,
            "{} holds the peer password",
            conf.display()
        );
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        assert!(fs::read_to_string(&conf)
            .unwrap()
            .contains(&format!("password \"{PASSWORD}\";")));
        assert!(!dir.join("bird.conf.new").exists());
        assert!(c.agents[i].log().contains("BIRD started"));
    }
    let route = c.nodes[0]
        .ns
        .exec_ok(&["ip", "route", "show", &c.subnets[1]]);
    assert!(
        route.contains(&format!("via {} dev eth0 proto bird", c.nodes[1].ip)),
        "{route}"
    );
}

/// The router learned every subnet from its own node and routes it; a host behind the
/// router reaches pods, which see its own address (no NAT, no tunnel).
fn router_learns_every_subnet_and_routes_to_pods(c: &Cluster, frr: &Frr, host: &Netns) {
    let mut want: Vec<(String, String)> = c
        .subnets
        .iter()
        .zip(&c.nodes)
        .map(|(s, n)| (s.clone(), n.ip.clone()))
        .collect();
    want.sort();
    assert!(
        wait_until(CONVERGE, || router_pod_routes(frr) == want),
        "the router learned {:?}\n{}",
        router_pod_routes(frr),
        frr.log("bgpd")
    );
    for p in &c.pods {
        assert!(
            wait_until(CONVERGE, || ping(host, &p.ip)),
            "the outside host cannot reach pod {}",
            p.ip
        );
    }
    let seen = udp_source_seen(&c.pods[2].ns, host, &c.pods[2].ip);
    assert_eq!(seen, Some(OUTSIDE_HOST.parse().unwrap()));
}

/// The router sent every node its bogus prefixes; every node refused (and counted) them: its
/// BIRD routes, its default route are untouched.
fn bogus_announcements_refused_on_every_node(c: &Cluster, frr: &Frr) {
    let sw = Underlay::switch_ip();
    for (i, n) in c.nodes.iter().enumerate() {
        let sent_all = || {
            let sent = frr.advertised(&n.ip);
            BOGUS.iter().all(|p| sent.iter().any(|a| a == p))
        };
        assert!(
            wait_until(CONVERGE, sent_all),
            "the router did not send {BOGUS:?} to node {}: {:?}",
            i + 1,
            frr.advertised(&n.ip)
        );
        let refused =
            format!("ferrocni_agent_bgp_peer_updates_refused_total{{peer=\"{sw}\",kind=\"peer\"}}");
        let counted = || {
            metrics(n).lines().any(|l| {
                l.strip_prefix(&refused)
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .is_some_and(|v| v >= BOGUS.len() as f64)
            })
        };
        assert!(
            wait_until(CONVERGE, counted),
            "node {}: {}",
            i + 1,
            metrics(n)
        );
        assert_eq!(
            kernel_routes(&n.ns, "bird"),
            expected_routes(c, i, &[0, 1, 2]),
            "node {}",
            i + 1
        );
        assert_eq!(
            n.ns.exec_ok(&["ip", "route", "show", "default"]).trim(),
            format!("default via {sw} dev eth0"),
            "node {}'s default route",
            i + 1
        );
        for p in ["10.244.250.5", "192.168.99.0/24"] {
            assert!(
                !n.ns
                    .exec_ok(&["ip", "route", "show", p])
                    .contains("proto bird"),
                "node {} took {p}",
                i + 1
            );
        }
    }
}

/// Node 2's agent restarts (SIGTERM, then started again) while pod 1 pings pod 2 and pod 2
/// pings pod 1: BIRD stops for a graceful restart and the next agent's BIRD recovers; no
/// ping is lost.
fn agent_restart_loses_no_ping(c: &mut Cluster) {
    let (forth, back) = (
        Pinger::start(&c.pods[0].ns, &c.pods[1].ip, 8),
        Pinger::start(&c.pods[1].ns, &c.pods[0].ip, 8),
    );
    std::thread::sleep(Duration::from_millis(500));
    let restarted = Instant::now();
    c.agents[1].stop();
    assert!(
        c.agents[1]
            .log()
            .contains("BIRD stopped for a graceful restart"),
        "{}",
        c.agents[1].log()
    );
    c.agents[1].start();
    assert!(
        wait_until(CONVERGE, || c.agents[1]
            .log()
            .contains("BIRD started in graceful recovery")),
        "{}",
        c.agents[1].log()
    );
    assert_metrics(
        c,
        1,
        &["ferrocni_agent_bgp_sessions{state=\"established\"} 3"],
    );
    eprintln!(
        "node 2's agent restarted and its sessions were back {:?} after the SIGTERM",
        restarted.elapsed()
    );
    for (what, pinger) in [("pod 1 -> pod 2", forth), ("pod 2 -> pod 1", back)] {
        let (sent, received) = pinger.finish();
        eprintln!("{what} across the agent restart: {received} of {sent} pings answered");
        assert!(sent > 100, "only {sent} pings sent");
        assert_eq!(
            received, sent,
            "{what}: pings lost across the agent restart"
        );
    }
    converge(c, &[0, 1, 2]);
}

/// Node 3 leaves: its agent stops and its lease is deleted. The other nodes drop its session
/// and its subnet at once; the router, which holds it as stale after the graceful stop (and
/// still routes there meanwhile), gives it up after the restart time.
fn node3_leaves_and_is_withdrawn(c: &mut Cluster, frr: &Frr) {
    c.agents[2].stop();
    let gone = Instant::now();
    c.etcd.ctl_ok(&["del", &lease_key(&c.subnets[2])]);
    converge(c, &[0, 1]);
    eprintln!(
        "node 3's subnet left nodes 1 and 2 {:?} after its lease was deleted",
        gone.elapsed()
    );
    let has3 = || {
        router_pod_routes(frr)
            .iter()
            .any(|(p, _)| *p == c.subnets[2])
    };
    assert!(
        wait_until(Duration::from_secs(GR_SECS + 10), || !has3()),
        "the router kept node 3's subnet\n{}",
        frr.log("bgpd")
    );
    eprintln!(
        "the router dropped node 3's subnet {:?} after the agent stopped (restart time {GR_SECS} s)",
        gone.elapsed()
    );
    // Until then the router, the nodes' default gateway, still led there.
    assert!(!ping(&c.pods[0].ns, &c.pods[2].ip));
    assert_metrics(
        c,
        0,
        &[
            "ferrocni_agent_bgp_sessions{state=\"established\"} 2",
            "ferrocni_agent_bgp_routes_learned 1",
            "ferrocni_agent_leases{state=\"programmed\"} 1",
        ],
    );
}

/// No mesh: FRR reflects the routes. Node 3 starts first, under a config without `Peers`,
/// with the reflector as its own `--bgp-peers`; nodes 1 and 2 start once the config names the
/// reflector in `Peers` (a config change is read at an agent's start).
#[test]
fn bgp_route_reflector_on_etcd() {
    require_root!();
    if !have_tools() {
        return;
    }
    let sw = Underlay::switch_ip();
    let mut c = Cluster::new(
        "bgprr",
        &network_config(r#"{"Type":"bgp","NodeToNodeMesh":false}"#),
    );
    let Some(frr) = Frr::start(&c.underlay.ns, &reflector_conf(64512)) else {
        return;
    };
    with_metrics(&mut c);
    c.agents[2].extra.push(format!("--bgp-peers={sw}:64512"));
    c.agents[2].start();
    c.agents[2].wait_for_subnet();
    c.etcd.ctl_ok(&[
        "put",
        &format!("{PREFIX}/config"),
        &network_config(&format!(
            r#"{{"Type":"bgp","NodeToNodeMesh":false,"Peers":[{{"PeerIP":"{sw}"}}]}}"#
        )),
    ]);
    c.start_agents();
    // Reflected routes keep their next hop: each subnet via its own node, not the reflector.
    converge(&c, &[0, 1, 2]);
    c.assert_full_mesh();
    for (i, said) in [
        "no node mesh, 1 configured peer",
        "no node mesh, 1 configured peer",
        "no node mesh, 0 configured peers",
    ]
    .iter()
    .enumerate()
    {
        assert!(c.agents[i].log().contains(said), "{}", c.agents[i].log());
        assert_metrics(
            &c,
            i,
            &[
                &format!("ferrocni_agent_bgp_session_established{{peer=\"{sw}\",kind=\"peer\"}} 1"),
                "ferrocni_agent_bgp_sessions{state=\"established\"} 1",
                "ferrocni_agent_bgp_routes_learned 2",
            ],
        );
        assert!(
            !metrics(&c.nodes[i]).contains("kind=\"mesh\""),
            "node {} has mesh sessions",
            i + 1
        );
    }
    let neighbours = frr.neighbours();
    assert!(
        neighbours.len() == 3 && neighbours.iter().all(|(_, s)| s == "Established"),
        "{neighbours:?}"
    );
}

/// Bad options stop the agent at start, before it takes a lease, with the option named.
#[test]
fn bgp_bad_options_refused_at_start() {
    require_root!();
    if !have_tools() {
        return;
    }
    let underlay = Underlay::new("bgpbad");
    let etcd = Etcd::start(&underlay.ns, EtcdOptions::on_switch());
    let node = underlay.add_node(1);
    let files = TempDir::new("bgpbad");
    let agent = Agent::new(&node, &etcd, files.path()).args(&["--startup-timeout=5"]);
    let good = network_config(r#"{"Type":"bgp"}"#);
    for (config, flag, needle) in [
        (
            network_config(r#"{"Type":"bgp","ASNumber":0}"#),
            None,
            "\"Backend.ASNumber\" 0 is outside 1..4294967295",
        ),
        (
            network_config(r#"{"Type":"bgp","Peer":[]}"#),
            None,
            "\"Backend.Peer\" is not an option of the bgp backend",
        ),
        (
            network_config(r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":7}]}"#),
            None,
            "\"Backend.Peers[0].Password\" cannot be decoded",
        ),
        (
            good.clone(),
            Some("--bgp-peers=192.0.2.1"),
            "\"--bgp-peers\" entry \"192.0.2.1\" is not IP:AS",
        ),
        (
            good.clone(),
            Some("--bird-binary=/nonexistent/bird"),
            "BIRD binary \"/nonexistent/bird\" not found",
        ),
    ] {
        etcd.ctl_ok(&["put", &format!("{PREFIX}/config"), &config]);
        let stderr = files.join("stderr");
        let mut cmd = agent.command();
        cmd.args(flag)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr).unwrap());
        let mut child = cmd.spawn().expect("start ferrocni-agent");
        assert!(
            wait_or_kill(&mut child, Duration::from_secs(20)),
            "the agent did not exit ({config} {flag:?})"
        );
        let status = child.wait().unwrap();
        let said = fs::read_to_string(&stderr).unwrap_or_default();
        assert!(!status.success(), "{config} {flag:?}: {said}");
        assert!(
            said.contains(" ERROR ferrocni-agent: fatal: ") && said.contains(needle),
            "{config} {flag:?}: {said}"
        );
        assert_eq!(
            etcd.ctl_ok(&[
                "get",
                "--prefix",
                "--keys-only",
                &format!("{PREFIX}/subnets/")
            ])
            .trim(),
            "",
            "a lease was taken ({config} {flag:?})"
        );
        assert!(!agent.bgp_dir().join("bird.pid").exists());
    }
}
