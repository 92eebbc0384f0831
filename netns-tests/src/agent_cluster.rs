//! Agents on etcd in a simulated cluster ([`cluster`](crate::cluster)'s namespaces): a
//! one-member [`Etcd`] in the switch netns, one [`Agent`] per node (every file of its own in a
//! temporary directory), one pod per node, and what the agent tests check with them (pings
//! across nodes, the pod's source address kept, frames captured on the switch, a restart, a
//! node leaving). Dropping a [`Cluster`] stops everything it started. Tests that need another
//! shape (more etcd members, TLS, fewer nodes) build it from [`Etcd`] and [`Agent`] directly,
//! with the same [`assert_ping`] and [`CONVERGE`].
//!
//! ```no_run
//! use netns_tests::agent_cluster::Cluster;
//! let c = Cluster::start("hgw", r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#);
//! c.assert_full_mesh();
//! ```

use std::net::Ipv4Addr;

use crate::agent::Agent;
use crate::cluster::{
    assert_ping, ping, udp_source_seen, wait_until, Node, Pod, Underlay, CONVERGE,
};
use crate::etcd::{lease_key, Etcd, EtcdOptions, PREFIX};
use crate::private_host::missing_tools;
use crate::TempDir;

/// The cluster agents' lease TTL and resync interval: short, so renewals and resyncs happen
/// within a test.
pub const CADENCE: [&str; 2] = ["--subnet-lease-ttl=60", "--resync-interval=3"];
/// The subnet of the node programmed by hand as flanneld would (outside the agents' range).
pub const FLANNELD_SUBNET: &str = "10.244.30.0/24";

/// Whether the cluster tests' tools are here (etcd, etcdctl, iperf3); says which are not.
pub fn have_tools() -> bool {
    require_tools(&["etcd", "etcdctl", "iperf3"])
}

/// Whether every tool of `tools` is installed; prints which are not (the test then skips).
pub fn require_tools(tools: &[&str]) -> bool {
    match missing_tools(tools) {
        None => true,
        Some(missing) => {
            eprintln!("skipping: {missing:?} not installed (.ci/packages.txt)");
            false
        }
    }
}

/// An IPv4 packet seen on the wire: source, destination, protocol, header length, the packet.
pub type Frame = (Ipv4Addr, Ipv4Addr, u8, usize, Vec<u8>);

pub use crate::cluster::capture;

pub fn in_pod_network(ip: Ipv4Addr) -> bool {
    ip.octets()[0] == 10 && ip.octets()[1] == 244
}

pub fn is_node(ip: Ipv4Addr) -> bool {
    ip.to_string().starts_with("172.31.250.") && ip.octets()[3] != 254
}

/// iperf3 from `client` to `server` for two seconds: received bits per second (0 when it
/// could not run).
pub fn iperf_rate(server: &Pod, client: &Pod) -> f64 {
    crate::cluster::iperf(server, client, 2).map_or(0.0, |r| r.bits_per_second)
}

/// Every pod pings every other.
pub fn assert_pods_mesh(pods: &[Pod]) {
    eprintln!("pods: {:?}", pods.iter().map(|p| &p.ip).collect::<Vec<_>>());
    for (i, from) in pods.iter().enumerate() {
        for (j, to) in pods.iter().enumerate() {
            if i != j {
                assert_ping(from, to);
            }
        }
    }
}

/// Three nodes with an agent and a pod each, on one etcd.
pub struct Cluster {
    pub pods: Vec<Pod>,
    pub agents: Vec<Agent>,
    /// Each node's leased subnet (`10.244.3.0/24`), in node order.
    pub subnets: Vec<String>,
    pub nodes: Vec<Node>,
    pub etcd: Etcd,
    pub underlay: Underlay,
    files: TempDir,
}

impl Cluster {
    /// [`Cluster::new`] and [`Cluster::start_agents`].
    pub fn start(tag: &str, config: &str) -> Cluster {
        let mut c = Cluster::new(tag, config);
        c.start_agents();
        c
    }

    /// The switch with etcd holding `config`, three nodes and their agents, none started yet
    /// (set [`Agent::extra`], start routers first...).
    pub fn new(tag: &str, config: &str) -> Cluster {
        eprintln!("{tag}: starting etcd");
        let underlay = Underlay::new(tag);
        let etcd = Etcd::start(&underlay.ns, EtcdOptions::on_switch());
        etcd.put(&format!("{PREFIX}/config"), config);
        let files = TempDir::new(tag);
        let nodes: Vec<Node> = (1..=3).map(|i| underlay.add_node(i)).collect();
        let mut agents: Vec<Agent> = nodes
            .iter()
            .map(|n| Agent::new(n, &etcd, files.path()).args(&CADENCE))
            .collect();
        for a in &mut agents {
            a.dual = config.contains(r#""EnableIPv6":true"#);
        }
        Cluster {
            pods: Vec::new(),
            agents,
            subnets: Vec::new(),
            nodes,
            etcd,
            underlay,
            files,
        }
    }

    /// Starts every agent not running yet, waits for each node's lease and gives each node a
    /// pod in it.
    pub fn start_agents(&mut self) {
        eprintln!("starting the agents");
        for a in self.agents.iter_mut().filter(|a| !a.running()) {
            a.start();
        }
        self.subnets = self.agents.iter().map(Agent::wait_for_subnet).collect();
        self.pods = self
            .nodes
            .iter_mut()
            .zip(&self.subnets)
            .map(|(n, s)| n.add_pod(s))
            .collect();
    }

    /// The directory holding the agents' files (one directory per node).
    pub fn files(&self) -> &TempDir {
        &self.files
    }

    /// Adds node 4 programmed by hand exactly as flanneld programs its node (`program`
    /// gets the node and the agents' subnets and public addresses), with a pod on
    /// `FLANNELD_SUBNET` and `lease` stored under it as flanneld stores it; then pods reach
    /// each other both ways between it and the agents' nodes.
    pub fn assert_flanneld_node(
        &mut self,
        lease: impl FnOnce(&Node) -> String,
        program: impl FnOnce(&Node, &[(String, String)]),
    ) {
        let mut node = self.underlay.add_node(4);
        let peers: Vec<(String, String)> = self
            .subnets
            .iter()
            .cloned()
            .zip(self.nodes.iter().map(|n| n.ip.clone()))
            .collect();
        eprintln!("programming node 4 as flanneld would");
        program(&node, &peers);
        let value = lease(&node);
        self.etcd
            .ctl_ok(&["put", &lease_key(FLANNELD_SUBNET), &value]);
        let pod = node.add_pod(FLANNELD_SUBNET);
        eprintln!("node 4's pod: {}", pod.ip);
        for p in &self.pods {
            assert_ping(p, &pod);
            assert_ping(&pod, p);
        }
        self.etcd.ctl_ok(&["del", &lease_key(FLANNELD_SUBNET)]);
        drop(pod);
        drop(node);
    }

    pub fn assert_full_mesh(&self) {
        assert_pods_mesh(&self.pods);
    }

    /// The frames the switch sees while pod 1 pings pod 2 three times.
    pub fn capture_pod_pings(&self) -> Vec<Frame> {
        let (pod0, pod1) = (&self.pods[0], &self.pods[1]);
        capture(&self.underlay.ns, || {
            for _ in 0..3 {
                ping(&pod0.ns, &pod1.ip);
            }
        })
    }

    /// Routed without encapsulation: pod 1's own packets to pod 2 cross the underlay, and
    /// nothing between the nodes is encapsulated (no IP-in-IP, no UDP: VXLAN, WireGuard).
    pub fn assert_routed_unencapsulated(&self) {
        let (pod0, pod1) = (&self.pods[0], &self.pods[1]);
        let seen = self.capture_pod_pings();
        assert!(
            seen.iter()
                .any(|(s, d, ..)| s.to_string() == pod0.ip && d.to_string() == pod1.ip),
            "pod 1's packets were not seen routed on the underlay"
        );
        assert!(
            !seen.iter().any(|(s, d, proto, ..)| is_node(*s)
                && is_node(*d)
                && (*proto == 4 || *proto == 17)),
            "encapsulated traffic between the nodes"
        );
    }

    pub fn assert_source_preserved(&self) {
        let seen = udp_source_seen(&self.pods[1].ns, &self.pods[0].ns, &self.pods[1].ip);
        assert_eq!(
            seen.map(|ip| ip.to_string()),
            Some(self.pods[0].ip.clone()),
            "the pod's source address must survive the tunnel"
        );
    }

    /// Stops node 1's agent and starts it again: same lease value, same subnet, pods still
    /// reach each other.
    pub fn assert_restart_keeps_lease(&mut self) -> String {
        let key = lease_key(&self.subnets[0]);
        let before = self.etcd.get(&key).expect("node 1's lease");
        self.agents[0].stop();
        self.agents[0].start();
        assert_eq!(self.agents[0].wait_for_subnet(), self.subnets[0]);
        assert!(
            wait_until(CONVERGE, || self.agents[0]
                .log()
                .matches("reconciled")
                .count()
                >= 2),
            "the restarted agent did not reconcile:\n{}",
            self.agents[0].log()
        );
        assert_eq!(self.etcd.get(&key).as_deref(), Some(before.as_str()));
        assert_ping(&self.pods[0], &self.pods[1]);
        assert_ping(&self.pods[1], &self.pods[0]);
        before
    }

    /// Node 3 leaves (agent stopped, lease deleted): `gone(node)` must come true on the others.
    pub fn remove_node3(&mut self, gone: impl Fn(&Node, &str) -> bool) {
        self.agents[2].stop();
        self.etcd.ctl_ok(&["del", &lease_key(&self.subnets[2])]);
        for n in &self.nodes[..2] {
            assert!(
                wait_until(CONVERGE, || gone(n, &self.subnets[2])),
                "{} still has node 3 ({})",
                n.ns.name(),
                self.subnets[2]
            );
        }
        assert!(!ping(&self.pods[0].ns, &self.pods[2].ip));
        assert_ping(&self.pods[0], &self.pods[1]);
    }
}
