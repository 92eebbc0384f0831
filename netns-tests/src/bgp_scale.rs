//! `make bench`'s bgp section: the bgp backend at scale, every node a network namespace on one
//! bridge with one etcd in the switch namespace, on whatever cores the machine has.
//!
//! - Mesh: [`MESH_NODES`] real agents, each with its BIRD, in a full node-to-node mesh; the
//!   last [`JOINS`] join one at a time, then one leaves.
//! - Refusals (the bgp_refusals module, run after this one): a router flooding one node with
//!   routes it refuses.
//! - Reflector: [`REFLECTOR_NODES`] nodes without the mesh, FRR's bgpd as route reflector in
//!   the switch. Plain BIRD speakers stand in for all but the last [`JOINS`] (each with a
//!   reservation lease and the backend's own configuration, rendered by its library), which
//!   are real agents joining one at a time.
//!
//! For each join: the time from the new node's lease (the instant its agent logs it) to its
//! subnet in the kernel of every other node, and to every other subnet in its own kernel (route
//! announcements timed as they arrive, [`RouteWatch`]); the CPU time all the nodes' agents and
//! BIRDs spent on it (with the `bird -p` checks the agents ran, and the machine's idle
//! background over the same time taken off); agent and BIRD RSS per node.

use std::collections::HashMap;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrocni_agent::backend::bgp::options::Peer;
use ferrocni_agent::backend::bgp::render::{render, BirdConfig};
use ferrocni_agent::backend::bgp::sessions::Sessions;

use crate::agent::{bird_pid, Agent};
use crate::agent_scale::{usage, verdict};
use crate::cluster::{Node, Underlay};
use crate::etcd::{Etcd, EtcdOptions, PREFIX};
use crate::frr::Frr;
use crate::private_host::missing_tools;
use crate::route_watch::RouteWatch;
use crate::TempDir;

/// The node counts (`FERROCNI_BENCH_BGP_MESH`, `FERROCNI_BENCH_BGP_REFLECTOR` change them,
/// from 2 + [`JOINS`] to 250).
pub const MESH_NODES: u8 = 50;
pub const REFLECTOR_NODES: u8 = 200;
/// Nodes measured joining in each part (the median of their times is the figure).
pub const JOINS: u8 = 5;
const AS_NUMBER: u32 = 64512;
const NETWORK: &str = "10.244.0.0/16";
const GOAL: Duration = Duration::from_secs(3);
/// How long the whole cluster may take to converge (start-up) or to take a join in.
const CONVERGE: Duration = Duration::from_secs(120);
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Time after a join before its CPU is counted (sessions' first keepalives, passes).
const SETTLE: Duration = Duration::from_secs(3);

/// A node count from the environment, else `default`.
fn count(var: &str, default: u8) -> u8 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<u8>().ok())
        .filter(|n| (JOINS + 2..=250).contains(n))
        .unwrap_or(default)
}

/// The whole section.
pub fn run(agent: &Path) {
    let mesh_nodes = count("FERROCNI_BENCH_BGP_MESH", MESH_NODES);
    let reflector_nodes = count("FERROCNI_BENCH_BGP_REFLECTOR", REFLECTOR_NODES);
    println!(
        "\n## bgp backend at scale: {mesh_nodes} agents in a node-to-node mesh, {reflector_nodes} nodes behind a route reflector"
    );
    if !agent.is_file() {
        println!("  skipped: needs {} (make build)", agent.display());
        return;
    }
    if let Some(missing) = missing_tools(&["etcd", "etcdctl", "bird"]) {
        println!("  skipped: {missing:?} not installed (etcd-server, etcd-client, bird2)");
        return;
    }
    let mut joins = Vec::new();
    mesh(agent, mesh_nodes, &mut joins);
    if Frr::available() {
        reflector(agent, reflector_nodes, &mut joins);
    } else {
        println!("  reflector part skipped: FRR is not installed (frr)");
    }
    for (what, times) in joins {
        let mut t = times.clone();
        t.sort();
        if let Some(median) = t.get(t.len() / 2) {
            println!(
                "  {what}: new node's lease to its route on every node, median {:.2} s over {} joins (goal < {} s: {})",
                median.as_secs_f64(),
                t.len(),
                GOAL.as_secs(),
                verdict(*median < GOAL)
            );
        }
    }
}

/// A node's subnet (`10.244.7.0`, 24).
type Subnet = (Ipv4Addr, u8);

/// The nodes of one part: namespaces, etcd, agents or stand-in speakers, the route watch.
struct Lab {
    // Dropped in this order: the watch, the processes, the router, then the namespaces.
    watch: Option<RouteWatch>,
    agents: Vec<Option<Agent>>,
    speakers: Vec<Speaker>,
    frr: Option<Frr>,
    subnets: Vec<Option<Subnet>>,
    nodes: Vec<Node>,
    etcd: Etcd,
    underlay: Underlay,
    dir: TempDir,
    agent_binary: PathBuf,
}

impl Lab {
    /// `count` node namespaces on one switch with etcd holding `config`.
    fn new(tag: &str, count: u8, config: &str, agent_binary: &Path) -> Lab {
        let started = Instant::now();
        let underlay = Underlay::new(tag);
        let etcd = Etcd::start(&underlay.ns, EtcdOptions::on_switch());
        etcd.put(&format!("{PREFIX}/config"), config);
        let nodes: Vec<Node> = (1..=count).map(|i| underlay.add_node(i)).collect();
        println!(
            "  {count} node namespaces and etcd ready in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Lab {
            watch: None,
            agents: (0..count).map(|_| None).collect(),
            speakers: Vec::new(),
            frr: None,
            subnets: vec![None; usize::from(count)],
            nodes,
            etcd,
            underlay,
            dir: TempDir::new(tag),
            agent_binary: agent_binary.to_path_buf(),
        }
    }

    /// Permanent neighbour entries: in every node for the switch and, with `mesh`, for every
    /// other node; in the switch for every node. The kernel's ARP table is one for all
    /// namespaces, and its learned entries are capped (`gc_thresh3`, 1,024 by default): 50
    /// simulated nodes talking to each other would overflow it ("neighbor table overflow",
    /// connections failing with "No route to host"), which 50 real nodes never share.
    /// Permanent entries are not counted.
    fn pin_neighbours(&self, mesh: bool) -> bool {
        let mac = |ns: &crate::Netns, dev: &str| {
            ns.link(dev)
                .and_then(|l| l["address"].as_str().map(String::from))
        };
        let Some(switch_mac) = mac(&self.underlay.ns, "br0") else {
            return false;
        };
        let macs: Option<Vec<String>> = self.nodes.iter().map(|n| mac(&n.ns, "eth0")).collect();
        let Some(macs) = macs else { return false };
        let entry = |ip: &str, mac: &str, dev: &str| {
            format!("neigh replace {ip} lladdr {mac} dev {dev} nud permanent\n")
        };
        let batch = |ns: &crate::Netns, lines: String| {
            crate::run_with_stdin(&mut ns.command(&["ip", "-batch", "-"]), lines.as_bytes())
                .status
                .success()
        };
        let switch: String = self
            .nodes
            .iter()
            .zip(&macs)
            .map(|(n, m)| entry(&n.ip, m, "br0"))
            .collect();
        if !batch(&self.underlay.ns, switch) {
            return false;
        }
        self.nodes.iter().enumerate().all(|(i, node)| {
            let mut lines = entry(&Underlay::switch_ip(), &switch_mac, "eth0");
            if mesh {
                for (j, (other, m)) in self.nodes.iter().zip(&macs).enumerate() {
                    if i != j {
                        lines.push_str(&entry(&other.ip, m, "eth0"));
                    }
                }
            }
            batch(&node.ns, lines)
        })
    }

    fn watch(&mut self) -> bool {
        let namespaces: Vec<&crate::Netns> = self.nodes.iter().map(|n| &n.ns).collect();
        match RouteWatch::start(&namespaces) {
            Ok(w) => {
                self.watch = Some(w);
                true
            }
            Err(e) => {
                println!("  cannot watch the nodes' routes: {e}");
                false
            }
        }
    }

    /// Starts a real agent on node `i` (0-based).
    fn start_agent(&mut self, i: usize) {
        // A production cadence, not the tests' (a resync every 3 s on every node).
        let mut a = Agent::new(&self.nodes[i], &self.etcd, self.dir.path())
            .args(&["--resync-interval=60", "--subnet-lease-ttl=86400"]);
        a.binary = Some(self.agent_binary.clone());
        a.start();
        self.agents[i] = Some(a);
    }

    /// The pids of the agents and BIRDs running (and of the stand-in speakers).
    fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for a in self.agents.iter().flatten() {
            pids.extend(a.pid());
            pids.extend(bird_pid(&a.bgp_dir()).and_then(|p| u32::try_from(p).ok()));
        }
        pids.extend(self.speakers.iter().map(|s| s.child.id()));
        pids
    }

    /// Waits until node `i`'s agent logged its new lease: when, and the subnet.
    fn lease_of(&self, i: usize) -> Option<(SystemTime, Subnet)> {
        let agent = self.agents[i].as_ref()?;
        let deadline = Instant::now() + JOIN_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(found) = agent.log().lines().find_map(acquired) {
                return Some(found);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Node `i`'s subnet from its subnet.env, once written.
    fn wait_subnet(&mut self, i: usize) -> bool {
        let deadline = Instant::now() + CONVERGE;
        while Instant::now() < deadline {
            let env = self.agents[i]
                .as_ref()
                .and_then(|a| a.env_value("FLANNEL_SUBNET"));
            if let Some(s) = env.as_deref().and_then(subnet_from_env) {
                self.subnets[i] = Some(s);
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Whether every node of `members` has seen every other member's subnet added since
    /// `since`.
    fn converged(&self, members: &[usize], since: SystemTime) -> bool {
        let Some(w) = &self.watch else { return false };
        members.iter().all(|&i| {
            members.iter().all(|&j| {
                i == j
                    || self.subnets[j]
                        .is_some_and(|(ip, len)| w.seen(i, ip, len, true, since).is_some())
            })
        })
    }

    /// Whether node `i` and every node of `members` have seen each other's subnet added since
    /// `since`.
    fn joined(&self, i: usize, members: &[usize], since: SystemTime) -> bool {
        let (Some(w), Some((ip, len))) = (&self.watch, self.subnets[i]) else {
            return false;
        };
        members.iter().all(|&j| {
            w.seen(j, ip, len, true, since).is_some()
                && self.subnets[j].is_some_and(|(jp, jl)| w.seen(i, jp, jl, true, since).is_some())
        })
    }

    /// The CPU the nodes use per second while nothing changes.
    fn idle_rate(&self) -> f64 {
        let pids = self.pids();
        let (before, t) = (Cpu::read(&pids), Instant::now());
        std::thread::sleep(Duration::from_secs(5));
        let rate = Cpu::read(&pids).since(&before) / t.elapsed().as_secs_f64();
        println!(
            "  idle: {} processes use {:.1} % of a core together (BIRD's 1 s device scans, keepalives, the agents' timers)",
            pids.len(),
            rate * 100.0
        );
        rate
    }

    /// Node `i`'s agent starts (its namespace is ready and watched): the times from its lease
    /// to its subnet on every other node of `members` and to theirs on it, and the CPU.
    fn join(&mut self, i: usize, members: &[usize], idle: f64) -> Option<Duration> {
        let before = self.pids();
        let router = self.frr.as_ref().map(Frr::pids).unwrap_or_default();
        let (cpu_before, started) = (Cpu::read(&before), Instant::now());
        let router_before = Cpu::read(&router);
        self.start_agent(i);
        let Some((lease_at, subnet)) = self.lease_of(i) else {
            println!("  node {}: no lease logged within {JOIN_TIMEOUT:?}", i + 1);
            return None;
        };
        self.subnets[i] = Some(subnet);
        let w = self.watch.as_ref()?;
        let done = w.wait(JOIN_TIMEOUT, |_| self.joined(i, members, lease_at));
        let after = |t: Option<SystemTime>| {
            t.and_then(|t| t.duration_since(lease_at).ok())
                .unwrap_or(JOIN_TIMEOUT)
        };
        let (ip, len) = subnet;
        let mut there: Vec<Duration> = members
            .iter()
            .map(|&j| after(w.seen(j, ip, len, true, lease_at)))
            .collect();
        let mut here: Vec<Duration> = members
            .iter()
            .filter_map(|&j| self.subnets[j])
            .map(|(jp, jl)| after(w.seen(i, jp, jl, true, lease_at)))
            .collect();
        there.sort();
        here.sort();
        std::thread::sleep(SETTLE);
        let spent = Cpu::read(&before).since(&cpu_before) - idle * started.elapsed().as_secs_f64();
        let router_spent = (!router.is_empty()).then(|| Cpu::read(&router).since(&router_before));
        let own: f64 = self.agents[i]
            .as_ref()
            .map(|a| {
                let bird = bird_pid(&a.bgp_dir()).and_then(|p| u32::try_from(p).ok());
                let pids: Vec<u32> = a.pid().into_iter().chain(bird).collect();
                Cpu::read(&pids).since(&Cpu::default())
            })
            .unwrap_or(0.0);
        if !done {
            self.explain(i);
        }
        let last = *there.last()?;
        println!(
            "  node {} joins{}: its subnet on all {} other nodes {:.2} s after its lease (median node {:.2} s), their {} subnets on it after {:.2} s; CPU {:.2} s on the other nodes (their agents and BIRDs, idle taken off) + {:.2} s on the new node{}",
            i + 1,
            if done { "" } else { " (NOT converged)" },
            there.len(),
            last.as_secs_f64(),
            there[there.len() / 2].as_secs_f64(),
            here.len(),
            here.last().copied().unwrap_or_default().as_secs_f64(),
            spent.max(0.0),
            own,
            router_spent
                .map(|c| format!(" + {c:.2} s in the reflector"))
                .unwrap_or_default()
        );
        done.then_some(last)
    }

    /// Why node `i` did not converge: the end of its agent's log, its sessions not up.
    fn explain(&self, i: usize) {
        let Some(a) = self.agents[i].as_ref() else {
            return;
        };
        let log = a.log();
        let tail: Vec<&str> = log.lines().rev().take(6).collect();
        println!("    its agent's last lines:");
        for l in tail.iter().rev() {
            println!("      {l}");
        }
        let sock = a.bgp_dir().join("bird.ctl");
        let out = Command::new("birdc")
            .arg("-s")
            .arg(&sock)
            .args(["show", "protocols"])
            .output();
        if let Ok(out) = out {
            let text = String::from_utf8_lossy(&out.stdout);
            let down: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(" BGP ") && !l.contains("Established"))
                .take(5)
                .collect();
            println!("    its sessions not established (first 5): {down:?}");
        }
    }

    /// Agent and BIRD RSS of the nodes with an agent (median and largest, KiB).
    fn report_rss(&self) {
        let mut agents = Vec::new();
        let mut birds = Vec::new();
        for a in self.agents.iter().flatten() {
            agents.extend(a.pid().map(|p| usage(p).0));
            birds.extend(
                bird_pid(&a.bgp_dir())
                    .and_then(|p| u32::try_from(p).ok())
                    .map(|p| usage(p).0),
            );
        }
        let speakers: Vec<u64> = self
            .speakers
            .iter()
            .map(|s| usage(s.child.id()).0)
            .collect();
        let stat = |mut v: Vec<u64>| {
            v.sort();
            let med = v.get(v.len() / 2).copied().unwrap_or(0);
            (med, v.last().copied().unwrap_or(0))
        };
        let ((am, ax), (bm, bx)) = (stat(agents.clone()), stat(birds));
        println!(
            "  RSS per node ({} agents): agent {:.1} MiB (largest {:.1}), BIRD {:.1} MiB (largest {:.1}), together {:.1} MiB",
            agents.len(),
            am as f64 / 1024.0,
            ax as f64 / 1024.0,
            bm as f64 / 1024.0,
            bx as f64 / 1024.0,
            (am + bm) as f64 / 1024.0
        );
        if !speakers.is_empty() {
            let (sm, sx) = stat(speakers);
            println!(
                "  RSS of a stand-in BIRD: {:.1} MiB (largest {:.1})",
                sm as f64 / 1024.0,
                sx as f64 / 1024.0
            );
        }
    }
}

/// CPU time of a set of processes, to the microsecond: each thread's run time as the scheduler
/// counts it (`/proc/<pid>/task/<tid>/schedstat`; `/proc/<pid>/stat` counts whole clock ticks,
/// which the sub-millisecond work of a BIRD taking one route mostly falls between), plus the
/// children each has waited for (the agents' `bird -p` checks: only counted in ticks).
#[derive(Default)]
pub(crate) struct Cpu {
    threads: HashMap<(u32, u32), u64>,
    children: HashMap<u32, f64>,
}

impl Cpu {
    pub(crate) fn read(pids: &[u32]) -> Cpu {
        let mut cpu = Cpu::default();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        for &pid in pids {
            let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let ns = fs::read_to_string(task.path().join("schedstat"))
                    .ok()
                    .and_then(|s| s.split_whitespace().next()?.parse().ok());
                if let Some(ns) = ns {
                    cpu.threads.insert((pid, tid), ns);
                }
            }
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // After the ")" ending the command name, cutime and cstime are the 14th and 15th.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().collect())
                .unwrap_or_default();
            let ticks = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            cpu.children.insert(pid, (ticks(13) + ticks(14)) / hz);
        }
        cpu
    }

    /// Seconds used since `before` (threads started since count whole, threads gone since are
    /// left out).
    pub(crate) fn since(&self, before: &Cpu) -> f64 {
        let threads: u64 = self
            .threads
            .iter()
            .map(|(k, ns)| ns.saturating_sub(before.threads.get(k).copied().unwrap_or(0)))
            .sum();
        let children: f64 = self
            .children
            .iter()
            .map(|(pid, s)| s - before.children.get(pid).copied().unwrap_or(0.0))
            .sum();
        threads as f64 / 1e9 + children
    }
}

/// `... acquired new lease 10.244.16.0-24 for 86400s`: when and which subnet.
fn acquired(line: &str) -> Option<(SystemTime, Subnet)> {
    let (stamp, rest) = line.split_once(' ')?;
    let key = rest
        .split("acquired new lease ")
        .nth(1)?
        .split(' ')
        .next()?;
    let (ip, len) = key.split_once('-')?;
    Some((
        parse_timestamp(stamp)?,
        (ip.parse().ok()?, len.parse().ok()?),
    ))
}

/// `FLANNEL_SUBNET=10.244.7.1/24` (the first address) -> the subnet.
fn subnet_from_env(first: &str) -> Option<Subnet> {
    let (ip, len) = first.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    Some((Ipv4Addr::from(u32::from(ip) & mask), len))
}

/// The agent's log timestamps: `2026-12-04T10:46:57.881Z` (RFC 3339, UTC, milliseconds).
fn parse_timestamp(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, millis) = time.split_once('.')?;
    let t: Vec<u64> = hms
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (&[y, m, day], &[h, min, sec]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's method).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    let secs = days * 86_400 + h * 3600 + min * 60 + sec;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis.parse().ok()?))
}

/// The backend's configuration `text` with its import filter (which, with no lease given,
/// refuses everything) replaced by one taking every /24 of the network but the node's own.
fn stand_in_import(text: &str) -> Option<String> {
    let start = text.find("filter import_pod_subnets {")?;
    let end = start + text[start..].find("\n}\n")? + 3;
    let filter = format!(
        "filter import_pod_subnets {{\n  if net = OWN_SUBNET then reject;\n  if net ~ [ {NETWORK}{{24,24}} ] then accept;\n  reject;\n}}\n"
    );
    Some(format!("{}{filter}{}", &text[..start], &text[end..]))
}

/// The backend's configuration for `node` in `as_number` with `own_subnet` in [`NETWORK`], no
/// mesh and no other node's lease, one peer (address, AS), logging to `log`: as the library
/// renders it.
pub(crate) fn peer_only_config(
    node: &Node,
    as_number: u32,
    own_subnet: &str,
    peer: (&str, u32),
    log: &Path,
) -> Option<String> {
    let sessions = Sessions {
        peers: vec![Peer::new(peer.0.parse().ok()?, peer.1)],
        ..Sessions::default()
    };
    Some(render(&BirdConfig {
        router_id: node.ip.parse().ok()?,
        as_number,
        own_subnet: own_subnet.parse().ok()?,
        network: NETWORK.parse().ok()?,
        sessions: &sessions,
        leases: &[],
        graceful_restart: true,
        graceful_restart_time: 120,
        mesh_timers: Default::default(),
        mesh_bfd: false,
        prefixes: &Default::default(),
        prefixes6: &Default::default(),
        log_file: log,
        v6: None,
    }))
}

/// A plain BIRD speaking for a node without an agent (the reflector part's stand-ins).
struct Speaker {
    child: Child,
}

impl Speaker {
    /// BIRD in `node`'s namespace with the backend's configuration for `subnet`, peering with
    /// the reflector only. A stand-in knows no lease, so its import filter takes any node-sized
    /// prefix of the network ([`stand_in_import`]); the agents' nodes are the ones measured.
    fn start(node: &Node, subnet: Subnet, dir: &Path) -> Option<Speaker> {
        fs::create_dir_all(dir).ok()?;
        let text = peer_only_config(
            node,
            AS_NUMBER,
            &format!("{}/{}", subnet.0, subnet.1),
            (&Underlay::switch_ip(), AS_NUMBER),
            &dir.join("bird.log"),
        )?;
        let text = stand_in_import(&text)?;
        let conf = dir.join("bird.conf");
        fs::write(&conf, text).ok()?;
        let child = node
            .ns
            .command(&["bird", "-f", "-c"])
            .arg(&conf)
            .arg("-s")
            .arg(dir.join("bird.ctl"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("bird.stderr")).ok()?)
            .spawn()
            .ok()?;
        Some(Speaker { child })
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The mesh part.
fn mesh(agent: &Path, nodes: u8, joins: &mut Vec<(String, Vec<Duration>)>) {
    println!("\n  mesh: {nodes} nodes, each an agent with its BIRD, a session to every other node");
    let config = format!(r#"{{"Network":"{NETWORK}","Backend":{{"Type":"bgp"}}}}"#);
    let mut lab = Lab::new("bgpmesh", nodes, &config, agent);
    if !lab.pin_neighbours(true) {
        println!("  cannot set the nodes' neighbour entries");
        return;
    }
    if !lab.watch() {
        return;
    }
    let count = usize::from(nodes);
    let initial = count - usize::from(JOINS);
    let (since, started) = (SystemTime::now(), Instant::now());
    for i in 0..initial {
        lab.start_agent(i);
    }
    let members: Vec<usize> = (0..initial).collect();
    if !members.iter().all(|&i| lab.wait_subnet(i)) {
        println!("  an agent wrote no subnet.env within {CONVERGE:?}");
        return;
    }
    let w = lab.watch.as_ref().expect("watching");
    if !w.wait(CONVERGE, |_| lab.converged(&members, since)) {
        println!("  the first {initial} nodes did not converge within {CONVERGE:?}");
        return;
    }
    println!(
        "  {initial} agents started together and converged in {:.1} s ({} routes in the nodes' kernels)",
        started.elapsed().as_secs_f64(),
        initial * (initial - 1)
    );
    let idle = lab.idle_rate();
    let mut times = Vec::new();
    let mut members = members;
    for i in initial..count {
        times.extend(lab.join(i, &members, idle));
        members.push(i);
    }
    lab.report_rss();
    leave(&mut lab, count - 1, &members[..count - 1]);
    if let Some(w) = &lab.watch {
        if w.overflows() > 0 {
            println!("  note: {} route announcements were dropped by the kernel (socket buffers full): some times may be late", w.overflows());
        }
    }
    joins.push((format!("mesh of {nodes}"), times));
}

/// Node `i` leaves the mesh: its agent stops (BIRD stops for a graceful restart, so the others
/// keep its routes), then its lease is deleted: the time until its subnet is gone from every
/// other node.
fn leave(lab: &mut Lab, i: usize, others: &[usize]) {
    let Some(mut agent) = lab.agents[i].take() else {
        return;
    };
    let Some((ip, len)) = lab.subnets[i] else {
        return;
    };
    agent.stop();
    let key = format!("{PREFIX}/subnets/{ip}-{len}");
    let deleted = SystemTime::now();
    if !lab.etcd.ctl(&["del", &key]).status.success() {
        println!("  deleting the lease {key} failed");
        return;
    }
    let Some(w) = &lab.watch else { return };
    let gone = |w: &RouteWatch| {
        others
            .iter()
            .all(|&j| w.seen(j, ip, len, false, deleted).is_some())
    };
    let done = w.wait(JOIN_TIMEOUT, gone);
    let last = others
        .iter()
        .filter_map(|&j| w.seen(j, ip, len, false, deleted))
        .filter_map(|t| t.duration_since(deleted).ok())
        .max()
        .unwrap_or_default();
    println!(
        "  node {} leaves (agent stopped, lease deleted): its subnet gone from {} other nodes {:.2} s after the delete{}",
        i + 1,
        others.len(),
        last.as_secs_f64(),
        if done { "" } else { " (NOT everywhere)" }
    );
}

/// The route reflector part.
fn reflector(agent: &Path, nodes: u8, joins: &mut Vec<(String, Vec<Duration>)>) {
    let count = usize::from(nodes);
    let speakers = count - usize::from(JOINS);
    println!(
        "\n  reflector: {nodes} nodes without the mesh, FRR's bgpd as route reflector; {speakers} plain BIRD speakers stand in, {JOINS} real agents join"
    );
    let sw = Underlay::switch_ip();
    let config = format!(
        r#"{{"Network":"{NETWORK}","Backend":{{"Type":"bgp","NodeToNodeMesh":false,"Peers":[{{"PeerIP":"{sw}"}}]}}}}"#
    );
    let mut lab = Lab::new("bgprefl", nodes, &config, agent);
    lab.frr = Frr::start(&lab.underlay.ns, &crate::bgp::reflector_conf(AS_NUMBER));
    if !lab.pin_neighbours(false) {
        println!("  cannot set the nodes' neighbour entries");
        return;
    }
    if lab.frr.is_none() || !lab.watch() {
        return;
    }
    // Stand-ins: node i has 10.244.(i+1).0/24, reserved (no TTL) so agents leave it alone.
    let leases: Vec<(String, String)> = (0..speakers)
        .map(|i| {
            let n = &lab.nodes[i];
            (
                format!("{PREFIX}/subnets/10.244.{}.0-24", i + 1),
                format!(
                    r#"{{"PublicIP":"{}","PublicIPv6":null,"BackendType":"bgp"}}"#,
                    n.ip
                ),
            )
        })
        .collect();
    if !leases.chunks(100).all(|c| lab.etcd.txn(c, &[])) {
        println!("  writing the stand-ins' leases failed");
        return;
    }
    let (since, started) = (SystemTime::now(), Instant::now());
    for i in 0..speakers {
        let subnet = (Ipv4Addr::new(10, 244, (i + 1) as u8, 0), 24);
        lab.subnets[i] = Some(subnet);
        let dir = lab.dir.join(format!("speaker{}", i + 1));
        match Speaker::start(&lab.nodes[i], subnet, &dir) {
            Some(s) => lab.speakers.push(s),
            None => {
                println!("  cannot start the stand-in BIRD of node {}", i + 1);
                return;
            }
        }
    }
    let members: Vec<usize> = (0..speakers).collect();
    let w = lab.watch.as_ref().expect("watching");
    if !w.wait(CONVERGE, |_| lab.converged(&members, since)) {
        println!("  the {speakers} stand-ins did not converge within {CONVERGE:?}");
        return;
    }
    println!(
        "  {speakers} stand-in BIRDs started together and converged through the reflector in {:.1} s ({} routes in the nodes' kernels)",
        started.elapsed().as_secs_f64(),
        speakers * (speakers - 1)
    );
    w.clear();
    let idle = lab.idle_rate();
    let mut times = Vec::new();
    let mut members = members;
    for i in speakers..count {
        times.extend(lab.join(i, &members, idle));
        members.push(i);
    }
    lab.report_rss();
    joins.push((format!("{nodes} behind a reflector"), times));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_import_every_node_subnet() {
        let sessions = Sessions::default();
        let text = render(&BirdConfig {
            router_id: Ipv4Addr::new(172, 31, 250, 1),
            as_number: AS_NUMBER,
            own_subnet: "10.244.1.0/24".parse().unwrap(),
            network: NETWORK.parse().unwrap(),
            sessions: &sessions,
            leases: &[],
            graceful_restart: true,
            graceful_restart_time: 120,
            mesh_timers: Default::default(),
            mesh_bfd: false,
            prefixes: &Default::default(),
            prefixes6: &Default::default(),
            log_file: Path::new("/tmp/bird.log"),
            v6: None,
        });
        let out = stand_in_import(&text).unwrap();
        assert!(out.contains("filter import_pod_subnets {\n  if net = OWN_SUBNET then reject;\n  if net ~ [ 10.244.0.0/16{24,24} ] then accept;\n  reject;\n}\nfilter export_own_subnet {"), "{out}");
        assert_eq!(
            out.matches("filter import_pod_subnets {").count(),
            1,
            "{out}"
        );
        assert!(!out.contains("case"), "{out}");
    }

    #[test]
    fn reads_the_agents_log() {
        let line = "2026-12-04T10:46:57.881Z INFO ferrocni-agent: acquired new lease 10.244.16.0-24 for 60s";
        let (at, subnet) = acquired(line).unwrap();
        assert_eq!(subnet, (Ipv4Addr::new(10, 244, 16, 0), 24));
        assert_eq!(
            at.duration_since(UNIX_EPOCH).unwrap(),
            Duration::from_millis(1_796_381_217_881)
        );
        assert_eq!(
            parse_timestamp("1970-01-01T00:00:00.000Z"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_timestamp("2026-11-29T00:47:33.042Z"),
            Some(UNIX_EPOCH + Duration::from_millis(1_795_913_253_042))
        );
        assert!(acquired("2026-12-04T10:46:57.881Z INFO ferrocni-agent: renewed lease").is_none());
        assert_eq!(
            subnet_from_env("10.244.7.1/24"),
            Some((Ipv4Addr::new(10, 244, 7, 0), 24))
        );
    }
}
