//! `ferrocni-agent` with the `bgp` backend (Calico's routed mode on BIRD 2): three simulated
//! nodes (namespaces on one underlay bridge) with their agents on a one-member etcd, and FRR's
//! bgpd in the switch namespace as the datacenter's router. What an operator would check: the
//! leases and `FLANNEL_MTU` are what the backend promises, each node learns the others' subnets
//! by BGP (`proto bird`, via the announcing node), pods talk across nodes unencapsulated with
//! their own addresses, the router learns every subnet and a host behind it reaches a pod
//! directly, the router's bogus announcements change nothing, nor do its hijacks of a subnet
//! (unleased, a slice of a node's, a node's own through the router's next hop and AS), each
//! refusal counted by its reason and each refused route logged once, a lease appearing makes
//! its already-learned route count with no session restarted, an agent restart loses no ping, a
//! node leaving is withdrawn, a route reflector replaces the mesh, `/metrics` shows the
//! sessions, and bad options stop the agent at start naming the option. The secrets: the
//! router's TCP MD5 password comes from files (`PasswordFile`, `--bgp-peers IP:AS:@FILE`) and
//! shows in no log. Safety: a node's subnet is a kernel blackhole before its first pod, and a
//! BIRD stopped from outside with SIGTERM leaves the routes in the kernel until the agent has
//! started it again. Failure detection: a node's link cut is noticed within a second with BFD
//! (by the other nodes and by FRR's bfdd), within the hold time without. Needs etcd, bird2,
//! frr and curl (`.ci/packages.txt`); no special kernel driver (BGP is TCP).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use netns_tests::agent::{bird_pid, Agent};
use netns_tests::agent_cluster::Cluster;
use netns_tests::bgp::{
    bfdd_conf, kernel_routes, outside_host, parse_sessions, reflector_conf, router_bfd_lines,
    router_conf, sessions_moved, KernelRoute, Session, OUTSIDE_HOST,
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
/// The agent's blackhole route for a node's own subnet, as `ip route` shows it.
const BLACKHOLE: &str = "proto static metric 1000000";

use netns_tests::bgp::{bgp_network_config as network_config, bgp_tools_present as have_tools};

/// Each agent serves `/metrics` on its node's loopback.
fn with_metrics(c: &mut Cluster) {
    for a in &mut c.agents {
        a.serve_metrics(METRICS_PORT);
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
    // The router's password in files, as a mounted secret: one for the network's Peers, one
    // for node 2's own flag (the same password: no conflict). Node 1's flag entry names the
    // router without a password: the network's stays.
    let secrets = TempDir::new("bgpe-md5");
    let (net_file, node_file) = (secrets.join("router.md5"), secrets.join("node2.md5"));
    fs::write(&net_file, format!("{PASSWORD}\n")).unwrap();
    fs::write(&node_file, PASSWORD).unwrap();
    let backend = format!(
        r#"{{"Type":"bgp","GracefulRestartTime":{GR_SECS},"Peers":[{{"PeerIP":"{sw}","ASNumber":{ROUTER_AS},"PasswordFile":"{}"}}]}}"#,
        net_file.display()
    );
    let mut c = Cluster::new("bgpe", &network_config(&backend));
    c.agents[0]
        .extra
        .push(format!("--bgp-peers={sw}:{ROUTER_AS}"));
    c.agents[1].extra.push(format!(
        "--bgp-peers={sw}:{ROUTER_AS}:@{}",
        node_file.display()
    ));
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
    for a in &mut c.agents {
        a.start();
    }
    blackhole_before_any_pod(&c);
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
    hijacks_refused_and_a_new_lease_learned(&c, &frr);

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
    bird_sigterm_keeps_the_routes(&c);
    no_password_in_any_log(&c);
    node3_leaves_and_is_withdrawn(&mut c, &frr);
}

/// Whether node `node` has the agent's blackhole route for `subnet`.
fn has_blackhole(node: &Node, subnet: &str) -> bool {
    let want = format!("blackhole {subnet} {BLACKHOLE}");
    node.ns
        .exec_ok(&["ip", "route", "show", "type", "blackhole"])
        .lines()
        .any(|l| l.trim() == want)
}

/// Each node has its lease, no pod yet (no `cni0`), and its subnet is a blackhole in its
/// kernel: traffic for pod addresses not yet in use is dropped, not sent back to the router.
fn blackhole_before_any_pod(c: &Cluster) {
    for (i, a) in c.agents.iter().enumerate() {
        let subnet = a.wait_for_subnet();
        let node = &c.nodes[i];
        assert!(
            wait_until(CONVERGE, || has_blackhole(node, &subnet)),
            "node {}: no blackhole route for {subnet}: {}\n{}",
            i + 1,
            node.ns.exec_ok(&["ip", "route"]),
            a.log()
        );
        assert!(
            !node.ns.exec_ok(&["ip", "link"]).contains("cni0"),
            "node {} has a pod bridge already",
            i + 1
        );
    }
}

/// The routes are the agent's to remove: BIRD stopped from outside with SIGTERM (an orderly
/// shutdown, which used to flush its routes) leaves every route in node 1's kernel, polled
/// without a gap until the agent has started BIRD again; then the sessions come back.
fn bird_sigterm_keeps_the_routes(c: &Cluster) {
    let want = expected_routes(c, 0, &[0, 1, 2]);
    let dir = c.agents[0].bgp_dir();
    let pid = bird_pid(&dir).expect("node 1's BIRD");
    let restarts_before = c.agents[0].log().matches("BIRD started again").count();
    // SAFETY: kill(2) on the test's own BIRD; no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let killed = Instant::now();
    // Polls while BIRD is gone and not started again yet.
    let mut polls = 0;
    let mut exited_after = None;
    loop {
        let have = kernel_routes(&c.nodes[0].ns, "bird");
        assert_eq!(
            have,
            want,
            "node 1's BIRD routes {:?} after BIRD's SIGTERM\n{}",
            killed.elapsed(),
            c.agents[0].log()
        );
        if exited_after.is_some() {
            polls += 1;
        } else if !Path::new(&format!("/proc/{pid}/comm")).exists() {
            exited_after = Some(killed.elapsed());
        }
        if c.agents[0].log().matches("BIRD started again").count() > restarts_before {
            break;
        }
        assert!(
            killed.elapsed() < CONVERGE,
            "the agent did not start BIRD again\n{}",
            c.agents[0].log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let restarted = killed.elapsed();
    let exited_after = exited_after.expect("BIRD exits on SIGTERM");
    assert!(polls > 0, "no poll while BIRD was gone");
    eprintln!(
        "BIRD SIGTERMed on node 1: exited after {exited_after:?}, started again by the agent after {restarted:?}; the {} routes stayed in the kernel, {polls} polls in between",
        want.len()
    );
    let log = c.agents[0].log();
    assert!(
        log.contains("BIRD started again in graceful recovery"),
        "{log}"
    );
    assert!(
        has_blackhole(&c.nodes[0], &c.subnets[0]),
        "the blackhole route went with BIRD"
    );
    assert_metrics(
        c,
        0,
        &["ferrocni_agent_bgp_sessions{state=\"established\"} 3"],
    );
    converge(c, &[0, 1, 2]);
}

/// The password is in BIRD's configuration (mode 0600) and nowhere else: not in the agents'
/// logs, not in BIRD's.
fn no_password_in_any_log(c: &Cluster) {
    for (i, a) in c.agents.iter().enumerate() {
        let dir = a.bgp_dir();
        for (what, text) in [
            ("agent log", a.log()),
            (
                "bird.log",
                fs::read_to_string(dir.join("bird.log")).unwrap_or_default(),
            ),
            (
                "bird.stderr",
                fs::read_to_string(dir.join("bird.stderr")).unwrap_or_default(),
            ),
        ] {
            assert!(
                !text.contains(PASSWORD),
                "node {}: the password is in its {what}",
                i + 1
            );
        }
        assert!(
            a.log().len() > 1000,
            "node {}: a suspiciously short log",
            i + 1
        );
    }
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
    // With pods, the bridge's route for the subnet wins over the blackhole.
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(has_blackhole(n, &c.subnets[i]), "node {}", i + 1);
        let via = n.ns.exec_ok(&["ip", "route", "get", &c.pods[i].ip]);
        assert!(via.contains("dev cni0"), "node {}: {via}", i + 1);
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
        // By reason: the default route and 192.168.99.0/24 are outside the network, the /32
        // inside it is no node's.
        wait_refused_for(c, i, "outside-network", 2);
        wait_refused_for(c, i, "unleased", 1);
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

/// `birdc show protocols` of an agent's BIRD: each BGP session's name, state and since.
fn bird_sessions(agent: &Agent) -> Vec<Session> {
    parse_sessions(&agent.birdc(&["show", "protocols"]))
}

/// Waits until node `n`'s count of refused updates from the router reaches `at_least`.
fn wait_refused(c: &Cluster, i: usize, at_least: usize) {
    let sw = Underlay::switch_ip();
    let refused =
        format!("ferrocni_agent_bgp_peer_updates_refused_total{{peer=\"{sw}\",kind=\"peer\"}}");
    let counted = || {
        metrics(&c.nodes[i]).lines().any(|l| {
            l.strip_prefix(&refused)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .is_some_and(|v| v >= at_least as f64)
        })
    };
    assert!(
        wait_until(CONVERGE, counted),
        "node {}: fewer than {at_least} refused:\n{}",
        i + 1,
        metrics(&c.nodes[i])
    );
}

/// Node `i`'s count of refusals from the router for `reason`.
fn refused_for(c: &Cluster, i: usize, reason: &str) -> f64 {
    let sw = Underlay::switch_ip();
    let series = format!(
        "ferrocni_agent_bgp_peer_refusals_total{{peer=\"{sw}\",kind=\"peer\",reason=\"{reason}\"}}"
    );
    metrics(&c.nodes[i])
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// Waits until node `i` counted at least `at_least` refusals from the router for `reason`.
fn wait_refused_for(c: &Cluster, i: usize, reason: &str, at_least: usize) {
    assert!(
        wait_until(CONVERGE, || refused_for(c, i, reason) >= at_least as f64),
        "node {}: fewer than {at_least} refusals for {reason}:\n{}",
        i + 1,
        metrics(&c.nodes[i])
    );
}

/// How many lines of node `i`'s agent log say that `prefix` from the router was refused.
fn refusal_log_lines(c: &Cluster, i: usize, prefix: &str) -> usize {
    let said = format!("bgp: refused {prefix} from peer {} ", Underlay::switch_ip());
    c.agents[i]
        .log()
        .lines()
        .filter(|l| l.contains(&said))
        .count()
}

/// Origin validation against the leases. The router announces, with its own next hop and its
/// own AS as the path's origin: a subnet no node leases, a slice of node 1's subnet, and node
/// 1's subnet itself (an eBGP route, which BGP would prefer to the mesh's). No node takes any;
/// nodes 2 and 3 keep reaching node 1's subnet through node 1. Then a lease appears for the
/// unleased subnet, naming the router as its node: every node installs the route it had
/// refused, with no session restarted; the lease goes, and so does the route.
fn hijacks_refused_and_a_new_lease_learned(c: &Cluster, frr: &Frr) {
    let sw = Underlay::switch_ip();
    let unleased = (1..=20)
        .map(|k| format!("10.244.{k}.0/24"))
        .find(|s| !c.subnets.contains(s))
        .expect("a free subnet");
    let node1 = &c.subnets[0];
    let slice = node1.replace(".0/24", ".128/25");
    let hijacks = [unleased.clone(), slice.clone(), node1.clone()];
    let lines: Vec<String> = hijacks.iter().map(|p| format!(" network {p}")).collect();
    let router = format!("router bgp {ROUTER_AS}");
    let mut config = vec![router.as_str(), " address-family ipv4 unicast"];
    config.extend(lines.iter().map(String::as_str));
    frr.configure(&config);
    let sessions_before: Vec<Vec<Session>> = c.agents.iter().map(bird_sessions).collect();
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            wait_until(CONVERGE, || {
                let sent = frr.advertised(&n.ip);
                hijacks.iter().all(|p| sent.contains(p))
            }),
            "the router did not send {hijacks:?} to node {}: {:?}",
            i + 1,
            frr.advertised(&n.ip)
        );
        wait_refused(c, i, BOGUS.len() + hijacks.len());
        // Each for its reason: no lease, a slice of a lease, a lease's subnet from outside
        // its node's AS; node 1 sees both of the latter as its own subnet sent back.
        wait_refused_for(c, i, "unleased", 2);
        if i == 0 {
            wait_refused_for(c, i, "own-subnet", 2);
        } else {
            wait_refused_for(c, i, "more-specific", 1);
            wait_refused_for(c, i, "wrong-origin", 1);
        }
        assert_eq!(
            kernel_routes(&n.ns, "bird"),
            expected_routes(c, i, &[0, 1, 2]),
            "node {}",
            i + 1
        );
        for p in [&unleased, &slice] {
            assert!(
                !n.ns
                    .exec_ok(&["ip", "route", "show", p])
                    .contains("proto bird"),
                "node {} took {p}",
                i + 1
            );
        }
    }
    // Nodes 2 and 3 still reach node 1's pod through node 1.
    for i in [1, 2] {
        assert!(ping(&c.pods[i].ns, &c.pods[0].ip), "pod {} -> pod 1", i + 1);
    }

    // The lease appears: the route already learned (and refused) is taken, no session flaps.
    let key = lease_key(&unleased);
    c.etcd.put(
        &key,
        &format!(r#"{{"PublicIP":"{sw}","PublicIPv6":null,"BackendType":"bgp"}}"#),
    );
    let learned_at = Instant::now();
    let via_router = format!("via {sw} dev eth0 proto bird");
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            wait_until(CONVERGE, || n
                .ns
                .exec_ok(&["ip", "route", "show", &unleased])
                .contains(&via_router)),
            "node {}: no route to {unleased} via the router once leased:\n{}\n{}",
            i + 1,
            n.ns.exec_ok(&["ip", "route"]),
            c.agents[i].log()
        );
    }
    eprintln!(
        "a refused route was installed on every node {:?} after its lease appeared",
        learned_at.elapsed()
    );
    // The others stay refused: the lease is for its subnet only.
    for n in &c.nodes {
        assert!(!n
            .ns
            .exec_ok(&["ip", "route", "show", &slice])
            .contains("proto bird"));
    }
    c.etcd.ctl_ok(&["del", &key]);
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(
            wait_until(CONVERGE, || !n
                .ns
                .exec_ok(&["ip", "route", "show", &unleased])
                .contains("proto bird")),
            "node {}: the route to {unleased} stayed after its lease went",
            i + 1
        );
    }
    // The lease's coming and going made BIRD evaluate the router's routes again (the slice
    // was refused again, and counted), but each refused route is in the agent's log once.
    for i in 0..c.nodes.len() {
        if i == 0 {
            wait_refused_for(c, i, "own-subnet", 4);
        } else {
            wait_refused_for(c, i, "more-specific", 2);
        }
        // (Node 1's subnet is refused for another reason while the router's address is a
        // lease's, and logged for it: once per route and reason.)
        for p in [&slice, &BOGUS[0].to_string()] {
            assert_eq!(
                refusal_log_lines(c, i, p),
                1,
                "node {}: refusals of {p} in the log:\n{}",
                i + 1,
                c.agents[i].log()
            );
        }
    }
    for (i, before) in sessions_before.iter().enumerate() {
        let moved = sessions_moved(before, &bird_sessions(&c.agents[i]));
        assert!(
            moved.is_empty(),
            "node {}: a session restarted while the import rules changed: {moved:?} (before: {before:?})",
            i + 1
        );
    }

    let lines: Vec<String> = hijacks.iter().map(|p| format!(" no network {p}")).collect();
    let router = format!("router bgp {ROUTER_AS}");
    let mut config = vec![router.as_str(), " address-family ipv4 unicast"];
    config.extend(lines.iter().map(String::as_str));
    frr.configure(&config);
    converge(c, &[0, 1, 2]);
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
    let pw_b = files.join("pw-b");
    fs::write(&pw_b, "pw-b\n").unwrap();
    let with_b = format!("--bgp-peers=192.0.2.1:64512:@{}", pw_b.display());
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
        (
            network_config(&format!(
                r#"{{"Type":"bgp","Peers":[{{"PeerIP":"192.0.2.1","Password":"a","PasswordFile":"{}"}}]}}"#,
                pw_b.display()
            )),
            None,
            "\"Backend.Peers[0].PasswordFile\" is given beside Password: give one of them",
        ),
        (
            network_config(r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":"pw-a"}]}"#),
            Some(with_b.as_str()),
            "\"--bgp-peers\" gives peer 192.0.2.1 another password than the network's Backend.Peers",
        ),
        (
            good.clone(),
            Some("--bgp-peers=192.0.2.1:64512:pw-inline"),
            "the third field must be @FILE",
        ),
        (
            network_config(r#"{"Type":"bgp","HoldTime":2}"#),
            None,
            "\"Backend.HoldTime\" 2 is outside 0 or 3..65535 seconds",
        ),
        (
            network_config(r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","KeepaliveTime":5,"HoldTime":3}]}"#),
            None,
            "\"Backend.Peers[0].KeepaliveTime\" 5 s is not shorter than the hold time (3 s)",
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
        for secret in ["pw-a", "pw-b", "pw-inline"] {
            assert!(!said.contains(secret), "a password in the error: {said}");
        }
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

/// `birdc show bfd sessions` of an agent's BIRD.
fn bfd_sessions(agent: &Agent) -> String {
    agent.birdc(&["show", "bfd", "sessions"])
}

/// How many of an agent's BFD sessions are up.
fn bfd_up(agent: &Agent) -> usize {
    bfd_sessions(agent)
        .lines()
        .filter(|l| l.contains(" Up "))
        .count()
}

/// How long after node 3's link went down its subnet left node 1's kernel and the router's
/// BGP table.
struct Detection {
    node: Duration,
    router: Duration,
}

/// Three agents and FRR (with bfdd), every session with a 1 s keepalive and a 3 s hold time,
/// BFD on all of them or none (with BFD, node 2's agent restarts first, under pings: what a
/// planned restart costs with BFD); then node 3's link is cut (`ip link set eth0 down` in its
/// namespace) and node 1 and the router are watched until node 3's subnet is gone.
fn failure_detection(tag: &str, bfd: bool) -> Option<Detection> {
    let sw = Underlay::switch_ip();
    let timers = r#""KeepaliveTime":1,"HoldTime":3"#;
    let backend = format!(
        r#"{{"Type":"bgp","GracefulRestartTime":{GR_SECS},"BFD":{bfd},{timers},"Peers":[{{"PeerIP":"{sw}","ASNumber":{ROUTER_AS},"Password":"{PASSWORD}","BFD":{bfd},{timers}}}]}}"#
    );
    let mut c = Cluster::new(tag, &network_config(&backend));
    for n in &c.nodes {
        n.ns.exec_ok(&["ip", "route", "add", "default", "via", &sw]);
    }
    let node_ips: Vec<&str> = c.nodes.iter().map(|n| n.ip.as_str()).collect();
    let mut conf = router_conf(&node_ips, ROUTER_AS, PASSWORD, &[]);
    if bfd {
        conf.push_str(&router_bfd_lines(&node_ips, "fast"));
    }
    let frr = Frr::start_with_bfd(&c.underlay.ns, &conf, &bfdd_conf("fast", 100))?;
    c.start_agents();
    converge(&c, &[0, 1, 2]);
    let subnet3 = c.subnets[2].clone();
    let router_has3 = || router_pod_routes(&frr).iter().any(|(p, _)| *p == subnet3);
    assert!(
        wait_until(CONVERGE, router_has3),
        "the router did not learn node 3's subnet\n{}",
        frr.log("bgpd")
    );
    if bfd {
        let all_up = || {
            let peers = frr.bfd_peers();
            peers.len() == 3 && peers.iter().all(|(_, s)| s == "up")
        };
        assert!(
            wait_until(CONVERGE, all_up),
            "FRR's BFD peers: {}\nnode 1's: {}\n{}",
            String::from_utf8_lossy(&frr.vtysh(&["show bfd peers"]).stdout),
            bfd_sessions(&c.agents[0]),
            frr.log("bfdd")
        );
        // Node 1: BFD with node 2, node 3 and the router.
        assert!(
            wait_until(CONVERGE, || bfd_up(&c.agents[0]) == 3),
            "node 1's BFD sessions: {}",
            bfd_sessions(&c.agents[0])
        );
    } else {
        assert!(frr.bfd_peers().is_empty(), "{:?}", frr.bfd_peers());
    }
    if bfd {
        // A planned restart with BFD: BIRD brings a session down whenever its BFD session
        // goes down, graceful restart or not, so the other nodes and the router drop node 2's
        // routes until its BIRD is back. Measured, and bounded: traffic comes back.
        let (forth, back) = (
            Pinger::start(&c.pods[0].ns, &c.pods[1].ip, 8),
            Pinger::start(&c.pods[1].ns, &c.pods[0].ip, 8),
        );
        std::thread::sleep(Duration::from_millis(500));
        c.agents[1].stop();
        c.agents[1].start();
        for (what, pinger) in [("pod 1 -> pod 2", forth), ("pod 2 -> pod 1", back)] {
            let (sent, received) = pinger.finish();
            eprintln!(
                "{what} across node 2's agent restart with BFD: {received} of {sent} pings answered ({} ms without answer)",
                (sent - received) * 50
            );
            assert!(sent > 100, "only {sent} pings sent");
            // 20 pings a second: no more than 3 s lost.
            assert!(sent - received <= 60, "{what}: {received} of {sent}");
        }
        converge(&c, &[0, 1, 2]);
        assert!(
            wait_until(CONVERGE, || bfd_up(&c.agents[0]) == 3),
            "node 1's BFD sessions after node 2's restart: {}",
            bfd_sessions(&c.agents[0])
        );
    }
    let node1 = &c.nodes[0];
    let node1_has3 = || {
        kernel_routes(&node1.ns, "bird")
            .iter()
            .any(|r| r.dst == subnet3)
    };
    assert!(node1_has3());
    let cut = Instant::now();
    c.nodes[2]
        .ns
        .exec_ok(&["ip", "link", "set", "eth0", "down"]);
    let gone_within = |has: &(dyn Fn() -> bool + Sync)| -> Duration {
        while has() {
            assert!(cut.elapsed() < CONVERGE, "node 3's subnet stayed");
            std::thread::sleep(Duration::from_millis(5));
        }
        cut.elapsed()
    };
    let (node, router) = std::thread::scope(|s| {
        let node = s.spawn(|| gone_within(&node1_has3));
        let router = s.spawn(|| gone_within(&router_has3));
        (node.join().unwrap(), router.join().unwrap())
    });
    eprintln!(
        "node 3's link cut ({}): its subnet left node 1's kernel after {node:?}, the router's table after {router:?}",
        if bfd { "BFD 100 ms x 3, hold time 3 s" } else { "no BFD, hold time 3 s, keepalive 1 s" }
    );
    // Node 2 is untouched: its session with node 1 and the router stay, so do its routes.
    assert!(kernel_routes(&c.nodes[1].ns, "bird")
        .iter()
        .any(|r| r.dst == c.subnets[0]));
    Some(Detection { node, router })
}

/// BFD on the mesh (`Backend.BFD`) and on the router's session (`Peers[].BFD`): a node whose
/// link is cut loses its routes on the other nodes and on the router within a second.
#[test]
fn bgp_bfd_detects_a_cut_link_within_a_second() {
    require_root!();
    if !have_tools() {
        return;
    }
    let Some(d) = failure_detection("bgpbfd", true) else {
        return;
    };
    assert!(d.node < Duration::from_secs(1), "node 1: {:?}", d.node);
    assert!(
        d.router < Duration::from_secs(1),
        "the router: {:?}",
        d.router
    );
}

/// Without BFD the hold time (3 s here, keepalives every second) bounds the same detection:
/// more than a second, no more than the hold time (and a second of polling and scheduling
/// slack on a loaded machine).
#[test]
fn bgp_hold_time_detects_a_cut_link() {
    require_root!();
    if !have_tools() {
        return;
    }
    let Some(d) = failure_detection("bgphold", false) else {
        return;
    };
    for (who, t) in [("node 1", d.node), ("the router", d.router)] {
        assert!(
            t > Duration::from_secs(1) && t < Duration::from_secs(4),
            "{who}: {t:?}"
        );
    }
}
