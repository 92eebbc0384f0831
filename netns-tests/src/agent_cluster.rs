//! Agents on etcd in a simulated cluster ([`cluster`](crate::cluster)'s namespaces): a
//! one-member etcd in the switch netns, one `ferrocni-agent` per node with every file of its
//! own in a temporary directory (subnet.env, state, WireGuard key, the bgp backend's BIRD
//! directory), one pod per node, and what the backend tests check with them (pings across
//! nodes, the pod's source address kept, frames captured on the switch, a restart, a node
//! leaving). Dropping a [`Cluster`] stops everything it started.
//!
//! ```no_run
//! use netns_tests::agent_cluster::Cluster;
//! let c = Cluster::start("hgw", r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#);
//! c.assert_full_mesh();
//! ```

use std::fs;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{ping, udp_source_seen, wait_until, Node, Pod, Underlay};
use crate::{our_binary, TempDir};

pub const PREFIX: &str = "/coreos.com/network";
pub const CONVERGE: Duration = Duration::from_secs(20);
/// The subnet of the node programmed by hand as flanneld would (outside the agents' range).
pub const FLANNELD_SUBNET: &str = "10.244.30.0/24";

pub fn have_tools() -> bool {
    let found = [
        ("etcd", "--version"),
        ("etcdctl", "version"),
        ("iperf3", "--version"),
    ]
    .iter()
    .all(|(bin, arg)| {
        Command::new(bin)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !found {
        eprintln!("skipping: etcd, etcdctl or iperf3 not installed (.ci/packages.txt)");
    }
    found
}

/// A one-member etcd in the switch netns, killed on drop.
pub struct Etcd {
    ns: String,
    child: Option<Child>,
    dir: TempDir,
}

impl Etcd {
    pub fn start(underlay: &Underlay) -> Etcd {
        let dir = TempDir::new("etcd");
        let ns = underlay.ns.name().to_string();
        let client = format!("http://{}:2379", Underlay::switch_ip());
        let log = fs::File::create(dir.join("etcd.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "etcd"])
            .args(["--name", "m0", "--data-dir"])
            .arg(dir.join("m0"))
            .args(["--listen-peer-urls", "http://127.0.0.1:2380"])
            .args(["--initial-advertise-peer-urls", "http://127.0.0.1:2380"])
            .args(["--initial-cluster", "m0=http://127.0.0.1:2380"])
            .arg(format!(
                "--listen-client-urls={client},http://127.0.0.1:2379"
            ))
            .arg(format!("--advertise-client-urls={client}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let etcd = Etcd {
            ns,
            child: Some(child),
            dir,
        };
        assert!(
            wait_until(Duration::from_secs(20), || etcd
                .ctl(&["endpoint", "health"])
                .status
                .success()),
            "etcd did not become healthy"
        );
        etcd
    }

    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, "etcdctl", "--command-timeout=5s"])
            .arg("--endpoints=http://127.0.0.1:2379")
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
            .expect("run etcdctl")
    }

    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn get(&self, key: &str) -> Option<String> {
        let out = self.ctl_ok(&["get", key, "--print-value-only"]);
        let v = out.trim_end();
        (!v.is_empty()).then(|| v.to_string())
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            eprintln!(
                "--- etcd (last lines, newest first) ---\n{}",
                tail.join("\n")
            );
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One long-running agent inside a node's netns, its files (WireGuard key, BIRD's directory)
/// in `dir`.
pub struct Agent {
    pub ns: String,
    pub dir: PathBuf,
    pub ip: String,
    pub ip6: String,
    /// Whether the network is dual-stack (the agent then gets `--public-ipv6`).
    pub dual: bool,
    /// More arguments for the next [`Agent::start`] (`--bgp-peers ...`, `--metrics-port ...`).
    pub extra: Vec<String>,
    /// The agent binary; the workspace's debug build when `None`.
    pub binary: Option<PathBuf>,
    child: Option<Child>,
}

impl Agent {
    pub fn new(node: &Node, root: &TempDir) -> Agent {
        let dir = root.join(format!("node{}", node.index));
        fs::create_dir_all(&dir).unwrap();
        Agent {
            ns: node.ns.name().to_string(),
            dir,
            ip: node.ip.clone(),
            ip6: node.ip6.clone(),
            dual: false,
            extra: Vec::new(),
            binary: None,
            child: None,
        }
    }

    pub fn key_file(&self) -> PathBuf {
        self.dir.join("wgkey")
    }

    /// The bgp backend's directory (`--bgp-dir`): BIRD's configuration, socket, pid file.
    pub fn bgp_dir(&self) -> PathBuf {
        self.dir.join("bgp")
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// The agent's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none());
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .unwrap();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns])
            .arg(
                self.binary
                    .clone()
                    .unwrap_or_else(|| our_binary("ferrocni-agent")),
            )
            .arg(format!(
                "--etcd-endpoints=http://{}:2379",
                Underlay::switch_ip()
            ))
            .arg(format!("--public-ip={}", self.ip))
            .arg("--iface=eth0")
            .arg(format!(
                "--subnet-file={}",
                self.dir.join("subnet.env").display()
            ))
            .arg(format!("--state-dir={}", self.dir.join("state").display()))
            .arg(format!("--bgp-dir={}", self.bgp_dir().display()))
            .arg("--subnet-lease-ttl=60")
            .arg("--resync-interval=3")
            // flanneld's variable: each node its own key file.
            .env("WIREGUARD_KEY_FILE", self.key_file());
        if self.dual {
            cmd.arg(format!("--public-ipv6={}", self.ip6));
        }
        cmd.args(&self.extra);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start ferrocni-agent");
        self.child = Some(child);
    }

    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    pub fn subnet_env(&self) -> Option<String> {
        fs::read_to_string(self.dir.join("subnet.env")).ok()
    }

    pub fn env_value(&self, key: &str) -> Option<String> {
        let env = self.subnet_env()?;
        env.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(String::from)
    }

    /// The leased subnet (`10.244.3.0/24`) from subnet.env.
    pub fn wait_for_subnet(&self) -> String {
        let mut subnet = None;
        let ok = wait_until(CONVERGE, || {
            subnet = self.env_value("FLANNEL_SUBNET").and_then(|first| {
                let (ip, len) = first.split_once('/')?;
                let ip: Ipv4Addr = ip.parse().ok()?;
                Some(format!("{}/{len}", Ipv4Addr::from(u32::from(ip) - 1)))
            });
            subnet.is_some()
        });
        assert!(
            ok,
            "agent in {} wrote no subnet.env:\n{}",
            self.ns,
            self.log()
        );
        subnet.unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ({}) ---\n{}", self.ns, self.log());
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The bgp backend's BIRD runs on after its agent (so a restarted agent adopts it).
        if let Some(pid) = bird_pid(&self.bgp_dir()) {
            // SAFETY: kill(2) on the BIRD this agent started; no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The pid of the BIRD running from `bgp_dir` (its pid file), if it is alive.
pub fn bird_pid(bgp_dir: &std::path::Path) -> Option<i32> {
    let pid: i32 = fs::read_to_string(bgp_dir.join("bird.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim_end() == "bird").then_some(pid)
}

pub fn lease_key(subnet: &str) -> String {
    format!("{PREFIX}/subnets/{}", subnet.replace('/', "-"))
}

pub fn assert_ping(from: &Pod, to: &Pod) {
    assert!(
        wait_until(CONVERGE, || ping(&from.ns, &to.ip)),
        "{} cannot reach {}",
        from.ip,
        to.ip
    );
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
        let etcd = Etcd::start(&underlay);
        etcd.ctl_ok(&["put", &format!("{PREFIX}/config"), config]);
        let files = TempDir::new(tag);
        let nodes: Vec<Node> = (1..=3).map(|i| underlay.add_node(i)).collect();
        let mut agents: Vec<Agent> = nodes.iter().map(|n| Agent::new(n, &files)).collect();
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
        eprintln!(
            "pods: {:?}",
            self.pods.iter().map(|p| &p.ip).collect::<Vec<_>>()
        );
        for (i, from) in self.pods.iter().enumerate() {
            for (j, to) in self.pods.iter().enumerate() {
                if i != j {
                    assert_ping(from, to);
                }
            }
        }
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
