//! The BGP test bed's node side: [`BgpNode`] runs the agent's bgp backend (the `bgp-node`
//! driver binary) inside a node's network namespace, its BIRD files in a directory of the
//! test's; [`kernel_routes`] reads a namespace's routes of one protocol (`bird`, `bgp`). And the
//! router's side, for FRR in the switch namespace of a [`cluster`](crate::cluster): its bgpd
//! configurations ([`router_conf`], [`reflector_conf`]) and a host behind it
//! ([`outside_host`]).
//! Dropping a [`BgpNode`] kills the driver and its BIRD (SIGKILL, so nothing is withdrawn on
//! the way out: the namespaces go next).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use ferrocni_agent::backend::bgp::status::same_moment;
use serde_json::Value;

use crate::cluster::Underlay;
use crate::{wait_or_kill, Netns};

/// Bound on one driver command (a BIRD start waits up to 10 s for its socket).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A kernel route: destination, gateway, device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelRoute {
    pub dst: String,
    pub via: Option<String>,
    pub dev: Option<String>,
}

/// Whether the tools of the agent's bgp tests are installed (a line says which are not).
pub fn bgp_tools_present() -> bool {
    crate::agent_cluster::require_tools(&["etcd", "etcdctl", "bird", "curl"])
}

/// A network config of the bgp tests: 10.244.0.0/16 with its subnets in 10.244.1-20.0/24
/// (free ones stay for the router's announcements), and the `Backend` object `backend`.
pub fn bgp_network_config(backend: &str) -> String {
    format!(
        r#"{{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{backend}}}"#
    )
}

/// A BGP session as `birdc show protocols` prints it: protocol name, state, since.
pub type Session = (String, String, String);

/// The BGP sessions in `birdc show protocols` output.
pub fn parse_sessions(text: &str) -> Vec<Session> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 7 && w[1] == "BGP").then(|| {
                (
                    w[0].to_string(),
                    w[6].to_string(),
                    format!("{} {}", w[4], w[5]),
                )
            })
        })
        .collect()
}

/// The sessions of `after` that are not as in `before`: new, gone, in another state, or
/// changed state at another moment. BIRD prints the same `since` a millisecond apart now and
/// then, which is not a restart (the agent's own comparison is the one used here).
pub fn sessions_moved(before: &[Session], after: &[Session]) -> Vec<String> {
    let same = |a: &Session, b: &Session| a.0 == b.0 && a.1 == b.1 && same_moment(&a.2, &b.2);
    let mut moved: Vec<String> = after
        .iter()
        .filter(|a| !before.iter().any(|b| same(a, b)))
        .chain(before.iter().filter(|b| !after.iter().any(|a| a.0 == b.0)))
        .map(|s| format!("{} {} {}", s.0, s.1, s.2))
        .collect();
    moved.sort();
    moved
}

/// The main table's routes of `protocol` (`ip route show proto <protocol>`) in `ns`, sorted.
pub fn kernel_routes(ns: &Netns, protocol: &str) -> Vec<KernelRoute> {
    routes_of(ns, "-4", protocol)
}

/// [`kernel_routes`] of IPv6.
pub fn kernel_routes6(ns: &Netns, protocol: &str) -> Vec<KernelRoute> {
    routes_of(ns, "-6", protocol)
}

fn routes_of(ns: &Netns, family: &str, protocol: &str) -> Vec<KernelRoute> {
    let v = ns.exec_json(&["ip", family, "-j", "route", "show", "proto", protocol]);
    let mut out: Vec<KernelRoute> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
            KernelRoute {
                dst: s("dst").unwrap_or_default(),
                via: s("gateway"),
                dev: s("dev"),
            }
        })
        .collect();
    out.sort();
    out
}

/// One node's backend: the driver process and its BIRD.
pub struct BgpNode {
    name: String,
    ns_name: String,
    dir: PathBuf,
    driver: Option<Child>,
    stdin: Option<ChildStdin>,
    replies: Option<Receiver<String>>,
    /// Whether dropping this kills BIRD (not after [`BgpNode::crash`]: the next node on the
    /// same directory owns it).
    owns_bird: bool,
}

/// How to start a node's backend.
pub struct NodeSpec<'a> {
    /// The `bgp-node` binary (`env!("CARGO_BIN_EXE_bgp-node")` in a test).
    pub driver: &'a Path,
    /// BIRD's directory (`--bgp-dir`), made by the caller.
    pub dir: &'a Path,
    pub public_ip: &'a str,
    pub network: &'a str,
    /// The network config's `Backend` object.
    pub options: &'a str,
    /// Extra driver flags (`--bgp-peers ...`).
    pub extra: &'a [&'a str],
}

impl BgpNode {
    /// Starts the driver in `ns` (BIRD starts at the first [`BgpNode::apply`]).
    pub fn start(ns: &Netns, spec: &NodeSpec) -> BgpNode {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(spec.dir.with_extension("agent.log"))
            .expect("driver log");
        let driver = spec.driver.to_str().expect("driver path");
        let mut cmd = ns.command(&[driver]);
        cmd.args(["--public-ip", spec.public_ip])
            .args(["--network", spec.network])
            .arg("--bgp-dir")
            .arg(spec.dir)
            .args(["--options", spec.options])
            .args(spec.extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {driver}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("driver stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        BgpNode {
            name: spec.public_ip.to_string(),
            ns_name: ns.name().to_string(),
            dir: spec.dir.to_path_buf(),
            driver: Some(child),
            stdin,
            replies: Some(rx),
            owns_bird: true,
        }
    }

    fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("driver running");
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| {
                panic!(
                    "node {}: cannot send {command:?}: {e}\n{}",
                    self.name,
                    self.logs()
                )
            });
    }

    fn reply(&mut self, command: &str) -> String {
        let rx = self.replies.as_ref().expect("driver running");
        match rx.recv_timeout(REPLY_TIMEOUT) {
            Ok(line) => line,
            Err(e) => panic!(
                "node {}: no answer to {command:?} ({e})\n{}",
                self.name,
                self.logs()
            ),
        }
    }

    /// `apply SUBNET PEERS`: the action taken (`started`, `recovering`, `adopted`,
    /// `reconfigured`, `unchanged`) or the backend's error.
    pub fn try_apply(&mut self, subnet: &str, peers: &[&str]) -> Result<String, String> {
        let command = format!("apply {subnet} {}", peers.join(","));
        self.send(&command);
        let answer = self.reply(&command);
        match answer.split_once(' ') {
            Some(("ok", action)) => Ok(action.to_string()),
            Some(("err", e)) => Err(e.to_string()),
            _ => Err(format!("unexpected answer {answer:?}")),
        }
    }

    /// [`BgpNode::try_apply`], panicking (with the logs) on an error.
    pub fn apply(&mut self, subnet: &str, peers: &[&str]) -> String {
        self.try_apply(subnet, peers).unwrap_or_else(|e| {
            panic!(
                "node {}: apply {subnet} {peers:?}: {e}\n{}",
                self.name,
                self.logs()
            )
        })
    }

    /// The backend's metrics, read fresh.
    pub fn metrics(&mut self) -> String {
        self.send("refresh");
        self.reply("refresh");
        self.send("metrics");
        let mut text = String::new();
        loop {
            let line = self.reply("metrics");
            if line == "end" {
                return text;
            }
            text.push_str(&line);
            text.push('\n');
        }
    }

    /// The value of the sample `name{labels}` (exactly as written) in [`BgpNode::metrics`].
    pub fn metric(&mut self, sample: &str) -> Option<f64> {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
    }

    /// `stop` (graceful): what the backend says stays; the driver exits.
    pub fn stop(&mut self) -> String {
        self.send("stop");
        let answer = self.reply("stop");
        self.wait_driver();
        answer
    }

    /// `shutdown` (withdraw everything): what the backend says; the driver exits.
    pub fn shutdown(&mut self) -> String {
        self.send("shutdown");
        let answer = self.reply("shutdown");
        self.wait_driver();
        answer
    }

    /// Kills the driver as a crash would. BIRD keeps running, and is left to the next
    /// [`BgpNode`] started on the same directory (which kills it when dropped).
    pub fn crash(&mut self) {
        self.kill_driver();
        self.owns_bird = false;
    }

    fn kill_driver(&mut self) {
        if let Some(mut c) = self.driver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stdin = None;
        self.replies = None;
    }

    fn wait_driver(&mut self) {
        self.stdin = None;
        if let Some(mut c) = self.driver.take() {
            wait_or_kill(&mut c, Duration::from_secs(20));
        }
    }

    /// BIRD's pid (from its pid file) while it runs.
    pub fn bird_pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join("bird.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }

    /// `birdc -s <socket> <command>` (BIRD's own client, as an operator would run it).
    pub fn birdc(&self, command: &str) -> String {
        let out = Command::new(birdc_path())
            .arg("-s")
            .arg(self.dir.join("bird.ctl"))
            .args(command.split_whitespace())
            .output()
            .unwrap_or_else(|e| panic!("cannot run birdc: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `(protocol, state, since)` of BIRD's BGP sessions (`birdc show protocols`).
    pub fn sessions(&self) -> Vec<Session> {
        parse_sessions(&self.birdc("show protocols"))
    }

    /// The driver's log and BIRD's, for failure messages.
    pub fn logs(&self) -> String {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "--- agent log of {} (netns {})\n{}--- bird.log\n{}--- bird.stderr\n{}",
            self.name,
            self.ns_name,
            read(self.dir.with_extension("agent.log")),
            read(self.dir.join("bird.log")),
            read(self.dir.join("bird.stderr")),
        )
    }

    /// Kills BIRD (SIGKILL) and waits until it is gone.
    pub fn kill_bird(&self) {
        let Some(pid) = self.bird_pid() else { return };
        if let Ok(p) = i32::try_from(pid) {
            // SAFETY: kill(2) on the test's own BIRD; no memory-safety preconditions.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next());
            if stat.is_empty() || state == Some("Z") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BgpNode {
    fn drop(&mut self) {
        self.kill_driver();
        if self.owns_bird {
            self.kill_bird();
        }
    }
}

/// `birdc` from PATH, or where Debian puts it (not on every PATH).
fn birdc_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("birdc"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("birdc"))
}

/// The network behind the router (the switch namespace), and the host there.
pub const OUTSIDE_GATEWAY: &str = "192.168.77.1";
pub const OUTSIDE_HOST: &str = "192.168.77.2";

/// A host on its own network behind the router: a veth from the switch namespace, the host's
/// default route via the switch.
pub fn outside_host(underlay: &Underlay) -> Netns {
    let host = Netns::new("outside");
    underlay.ns.exec_ok(&[
        "ip",
        "link",
        "add",
        "out0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        host.name(),
    ]);
    underlay.ns.exec_ok(&[
        "ip",
        "addr",
        "add",
        &format!("{OUTSIDE_GATEWAY}/24"),
        "dev",
        "out0",
    ]);
    underlay.ns.exec_ok(&["ip", "link", "set", "out0", "up"]);
    host.exec_ok(&["ip", "link", "set", "lo", "up"]);
    host.exec_ok(&[
        "ip",
        "addr",
        "add",
        &format!("{OUTSIDE_HOST}/24"),
        "dev",
        "eth0",
    ]);
    host.exec_ok(&["ip", "link", "set", "eth0", "up"]);
    host.exec_ok(&["ip", "route", "add", "default", "via", OUTSIDE_GATEWAY]);
    host
}

/// bgpd as the datacenter's router in AS `router_as`: eBGP to each of `nodes` (AS 64512, TCP
/// MD5 with `password`), announcing `networks` on top of what it relays.
pub fn router_conf(nodes: &[&str], router_as: u32, password: &str, networks: &[&str]) -> String {
    let mut c = format!(
        "router bgp {router_as}\n bgp router-id {sw}\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n bgp graceful-restart\n",
        sw = Underlay::switch_ip()
    );
    for ip in nodes {
        c.push_str(&format!(
            " neighbor {ip} remote-as 64512\n neighbor {ip} password {password}\n"
        ));
    }
    c.push_str(" address-family ipv4 unicast\n");
    for p in networks {
        c.push_str(&format!("  network {p}\n"));
    }
    c.push_str(" exit-address-family\n");
    c
}

/// bgpd lines to append to [`router_conf`]: BFD with each of `nodes`, with bfdd's profile
/// `profile`. The nodes' sessions are multihop (BIRD's `multihop`), so bgpd's must be too
/// (`ebgp-multihop`): BFD is then multihop BFD on both sides.
pub fn router_bfd_lines(nodes: &[&str], profile: &str) -> String {
    nodes
        .iter()
        .map(|ip| {
            format!(
                " neighbor {ip} ebgp-multihop 2\n neighbor {ip} bfd\n neighbor {ip} bfd profile {profile}\n"
            )
        })
        .collect()
}

/// bfdd's configuration: profile `name` with `interval_ms` transmit and receive intervals and
/// a detection multiplier of 3. `minimum-ttl 60`: bfdd takes multihop BFD packets arriving with
/// a TTL of 254 or more by default, and BIRD sends its multihop ones with the system's default
/// TTL (64).
pub fn bfdd_conf(name: &str, interval_ms: u32) -> String {
    format!(
        "bfd\n profile {name}\n  receive-interval {interval_ms}\n  transmit-interval {interval_ms}\n  detect-multiplier 3\n  minimum-ttl 60\n exit\n!\n"
    )
}

/// bgpd as a route reflector in AS `as_number`: every address of the underlay may connect
/// (`bgp listen range`) and is a reflector client. `coalesce-time`: bgpd holds a new client's
/// first table back for 1 s + 50 ms per known peer (10 s from 180 peers on) by default, to
/// share the work between clients starting together; 200 ms keeps a joining node's wait short.
pub fn reflector_conf(as_number: u32) -> String {
    let sw = Underlay::switch_ip();
    let range = format!(
        "{}.0/{}",
        crate::cluster::UNDERLAY_PREFIX,
        crate::cluster::UNDERLAY_LEN
    );
    format!(
        "router bgp {as_number}\n bgp router-id {sw}\n bgp cluster-id {sw}\n \
         no bgp network import-check\n bgp listen limit 1000\n coalesce-time 200\n \
         neighbor nodes peer-group\n neighbor nodes remote-as {as_number}\n \
         bgp listen range {range} peer-group nodes\n \
         address-family ipv4 unicast\n  neighbor nodes route-reflector-client\n exit-address-family\n"
    )
}
