//! `make bench`'s agent section: a 5,000-node flannel cluster simulated in a real etcd, and one
//! real `ferrocni-agent` joining it. A loader writes the 5,000 leases (one transaction), the
//! agent starts and must program every peer into its `flannel.1` within 5 s; then the cluster
//! churns at 50 nodes/s (25 leave, 25 join each second) and each change must reach the data
//! plane (the new peer's ARP entry on `flannel.1`) within 1 s. Watch traffic is measured as the
//! bytes etcd sent its gRPC clients per change, and the agent's RSS and CPU are reported.
//! Everything runs in a netns made here (etcd on its loopback, the underlay a veth pair in it).

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::etcd::{Etcd, EtcdOptions, PREFIX};
use crate::{Netns, TempDir};

/// Room for 32,768 /24s.
const CONFIG: &str = r#"{"Network":"10.128.0.0/9","SubnetLen":24,"Backend":{"Type":"vxlan"}}"#;
const NODE_IP: &str = "10.99.0.1";
const NODES: usize = 5_000;
const CHURN_PER_SECOND: usize = 50;
const CHURN_SECONDS: usize = 10;
const JOIN_GOAL: Duration = Duration::from_secs(5);
const CHANGE_GOAL: Duration = Duration::from_secs(1);
const METRICS_PORT: u16 = 19_471;
const JOIN_WITHIN: Duration = Duration::from_secs(60);

/// Peer `i`'s addresses, the same in both the etcd and the Kubernetes sections: its subnet
/// `10.<a>.<b>.0/24` as (a, b), its underlay address and its VTEP's MAC.
pub(crate) fn peer_addresses(i: usize) -> ((usize, usize), String, String) {
    let underlay = format!("10.99.{}.{}", 1 + i / 250, 2 + i % 250);
    let mac = format!(
        "0e:00:00:{:02x}:{:02x}:{:02x}",
        i >> 16,
        (i >> 8) & 0xff,
        i & 0xff
    );
    ((128 + i / 256, i % 256), underlay, mac)
}

/// Peer `i`'s lease: subnet key, value, VTEP address (what its ARP entry is for) and MAC.
fn peer(i: usize) -> (String, String, String, String) {
    let ((a, b), underlay, mac) = peer_addresses(i);
    let value = format!(
        r#"{{"PublicIP":"{underlay}","PublicIPv6":null,"BackendType":"vxlan","BackendData":{{"VNI":1,"VtepMAC":"{mac}"}}}}"#
    );
    (
        format!("{PREFIX}/subnets/10.{a}.{b}.0-24"),
        value,
        format!("10.{a}.{b}.0"),
        mac,
    )
}

pub(crate) fn http_get(ns: &Netns, url: &str) -> Option<String> {
    let out = ns
        .command(&["curl", "-sf", "--max-time", "5", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
}

fn programmed(ns: &Netns) -> Option<f64> {
    programmed_on(ns, METRICS_PORT)
}

/// The peers the agent whose metrics listen on loopback `port` has programmed.
pub(crate) fn programmed_on(ns: &Netns, port: u16) -> Option<f64> {
    let page = http_get(ns, &format!("http://127.0.0.1:{port}/metrics"))?;
    sample(&page, "ferrocni_agent_leases{state=\"programmed\"}")
}

/// The ARP entry of VTEP `ip` on flannel.1 carries `mac`.
fn neighbour_is(ns: &Netns, ip: &str, mac: &str) -> bool {
    ns.command(&["ip", "neigh", "show", "dev", "flannel.1", "to", ip])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(mac))
}

/// Starts `agent` and waits until its metrics (on loopback `port`) count `peers` programmed:
/// its pid and how long that took; `None`, with the agent's last lines, if it did not within
/// `within`.
pub(crate) fn start_until_programmed(
    agent: &mut Agent,
    ns: &Netns,
    port: u16,
    peers: usize,
    within: Duration,
) -> Option<(u32, Duration)> {
    let started = Instant::now();
    agent.start();
    let pid = agent.pid()?;
    while started.elapsed() < within && !agent.exited() {
        if programmed_on(ns, port) == Some(peers as f64) {
            return Some((pid, started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "  the agent did not program {peers} peers within {} s; its last lines:\n  {}",
        within.as_secs(),
        log_tail(agent)
    );
    None
}

/// The agent's last five log lines, newest first, for a report.
pub(crate) fn log_tail(agent: &Agent) -> String {
    let log = agent.log();
    let tail: Vec<&str> = log.lines().rev().take(5).collect();
    tail.join("\n  ")
}

/// A netns for one simulated node: its loopback up, the underlay a veth pair with `eth0` at
/// 10.99.0.1/16; `None`, saying why, if it cannot be set up.
pub(crate) fn node_netns(prefix: &str) -> Option<Netns> {
    let ns = Netns::new(prefix);
    for cmd in [
        vec!["ip", "link", "set", "lo", "up"],
        vec![
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ],
        vec!["ip", "addr", "add", "10.99.0.1/16", "dev", "eth0"],
        vec!["ip", "link", "set", "eth0", "up"],
        vec!["ip", "link", "set", "eth1", "up"],
    ] {
        if !ns.command(&cmd).status().is_ok_and(|s| s.success()) {
            println!("  skipped: {cmd:?} failed");
            return None;
        }
    }
    Some(ns)
}

/// The permanent ARP entries on flannel.1 (one per programmed peer).
pub(crate) fn arp_entries(ns: &Netns) -> usize {
    ns.command(&["ip", "neigh", "show", "dev", "flannel.1"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains("PERMANENT"))
                .count()
        })
        .unwrap_or(0)
}

/// (RSS now, peak RSS) in KiB and CPU seconds (user + system) of `pid`.
pub fn usage(pid: u32) -> (u64, u64, f64) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the ")" that ends the command name: utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (kib("VmRSS:"), kib("VmHWM:"), (ticks(11) + ticks(12)) / hz)
}

/// Bytes etcd has sent to gRPC clients (its own /metrics).
fn etcd_sent_bytes(ns: &Netns) -> f64 {
    http_get(ns, "http://127.0.0.1:2379/metrics")
        .and_then(|p| sample(&p, "etcd_network_client_grpc_sent_bytes_total"))
        .unwrap_or(0.0)
}

pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT MET"
    }
}

/// Runs the section with the agent binary `agent`.
pub fn run(agent: &Path) {
    println!(
        "\n## ferrocni-agent at scale: {NODES} nodes in a real etcd, churn {CHURN_PER_SECOND} nodes/s"
    );
    let have = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    if !agent.is_file() || !have("etcd") || !have("curl") {
        println!(
            "  skipped: needs {} (make build), etcd (etcd-server) and curl",
            agent.display()
        );
        return;
    }
    let Some(lab) = Lab::start() else { return };
    if !lab.load() {
        return;
    }
    let Some(joined) = lab.join(agent) else {
        return;
    };
    lab.churn(&joined);
}

/// The node's netns with etcd on its loopback, the node's files in `dir`.
struct Lab {
    etcd: Etcd,
    ns: Netns,
    dir: TempDir,
}

/// The agent as it runs in the lab, and its CPU time when it had joined.
struct Joined {
    agent: Agent,
    pid: u32,
    cpu_join: f64,
}

impl Lab {
    /// The netns (the underlay a veth pair in it) and etcd, sized for the load.
    fn start() -> Option<Lab> {
        let dir = TempDir::new("agent-scale");
        let ns = node_netns("fcb-agent")?;
        let options = EtcdOptions::default().args(&[
            "--max-txn-ops=20000",
            "--max-request-bytes=33554432",
            "--quota-backend-bytes=4294967296",
        ]);
        match Etcd::try_start(&ns, options) {
            Ok(etcd) => Some(Lab { etcd, ns, dir }),
            Err(e) => {
                println!("  etcd did not come up: {}", e.lines().next().unwrap_or(""));
                None
            }
        }
    }

    /// The loader: the config and 5,000 leases.
    fn load(&self) -> bool {
        let started = Instant::now();
        let leases: Vec<(String, String)> = (1..=NODES)
            .map(|i| {
                let (k, v, _, _) = peer(i);
                (k, v)
            })
            .collect();
        let config = self.etcd.ctl(&["put", &format!("{PREFIX}/config"), CONFIG]);
        if !config.status.success() || !self.etcd.txn(&leases, &[]) {
            println!("  loading the leases failed");
            return false;
        }
        println!(
            "  loader: {NODES} leases written in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        true
    }

    /// The agent joins: the time until it programmed every peer, checked in the kernel.
    fn join(&self, binary: &Path) -> Option<Joined> {
        let mut agent = Agent::in_netns(&self.ns, NODE_IP, self.dir.path(), &self.etcd.endpoints())
            .args(&[
                &format!("--metrics-port={METRICS_PORT}"),
                "--healthz-ip=127.0.0.1",
            ]);
        agent.binary = Some(binary.to_path_buf());
        let (pid, join) =
            start_until_programmed(&mut agent, &self.ns, METRICS_PORT, NODES, JOIN_WITHIN)?;
        // Check the kernel, not just the agent's word: every peer's ARP entry.
        let neigh = arp_entries(&self.ns);
        let (rss, _, cpu_join) = usage(pid);
        println!(
            "  join: {NODES} peers programmed in {:.2} s (goal ≤ {} s: {}); {neigh} ARP entries on flannel.1",
            join.as_secs_f64(),
            JOIN_GOAL.as_secs(),
            verdict(join <= JOIN_GOAL && neigh >= NODES)
        );
        println!(
            "  agent after join: RSS {:.1} MiB, CPU {cpu_join:.2} s",
            rss as f64 / 1024.0
        );
        Some(Joined {
            agent,
            pid,
            cpu_join,
        })
    }

    fn metric(&self, name: &str) -> f64 {
        http_get(
            &self.ns,
            &format!("http://127.0.0.1:{METRICS_PORT}/metrics"),
        )
        .and_then(|p| sample(&p, name))
        .unwrap_or(0.0)
    }

    /// Churn: each second 25 nodes leave and 25 new ones join, in one transaction; the time
    /// from each transaction to the last joining peer's ARP entry, and what it cost.
    fn churn(&self, joined: &Joined) {
        let events_before = self.metric("ferrocni_agent_watch_events_total");
        let sent_before = etcd_sent_bytes(&self.ns);
        let own = own_vtep(&joined.agent);
        let churn_started = Instant::now();
        let Some(mut latencies) = self.churn_rounds(own.as_deref(), churn_started) else {
            return;
        };
        // Let the last changes land before counting.
        std::thread::sleep(Duration::from_millis(500));
        let churn_time = churn_started.elapsed();
        let changes = (CHURN_SECONDS * CHURN_PER_SECOND) as f64;
        let events = self.metric("ferrocni_agent_watch_events_total") - events_before;
        let sent = etcd_sent_bytes(&self.ns) - sent_before;
        latencies.sort();
        let median = latencies[latencies.len() / 2];
        let worst = latencies[latencies.len() - 1];
        println!(
            "  churn: {} changes in {:.1} s; lease change to ARP entry: median {:.0} ms, worst {:.0} ms (goal ≤ {} ms: {})",
            changes,
            churn_time.as_secs_f64(),
            median.as_secs_f64() * 1e3,
            worst.as_secs_f64() * 1e3,
            CHANGE_GOAL.as_millis(),
            verdict(worst <= CHANGE_GOAL)
        );
        println!(
            "  watch traffic: {events:.0} events for {changes:.0} changes; etcd sent {:.0} bytes per change to its clients (proportional to changes: {})",
            sent / changes,
            verdict((events - changes).abs() < 1.0 && sent / changes < 4096.0)
        );
        let (rss, peak, cpu) = usage(joined.pid);
        let cpu_churn = cpu - joined.cpu_join;
        println!(
            "  agent after churn: RSS {:.1} MiB (peak {:.1} MiB), CPU {cpu_churn:.2} s during churn ({:.0} % of one core)",
            rss as f64 / 1024.0,
            peak as f64 / 1024.0,
            cpu_churn / churn_time.as_secs_f64() * 100.0
        );
        let programmed_end = programmed(&self.ns).unwrap_or(0.0);
        if programmed_end != NODES as f64 {
            println!("  note: {programmed_end} peers programmed at the end (expected {NODES})");
        }
    }

    /// The churn's transactions, one a second (joining nodes never take `own`, the agent's
    /// subnet's VTEP); each one's latency, `None` when a transaction failed.
    fn churn_rounds(&self, own: Option<&str>, churn_started: Instant) -> Option<Vec<Duration>> {
        let half = CHURN_PER_SECOND / 2;
        let mut latencies = Vec::new();
        let mut next_new = NODES + 1;
        let mut next_gone = 1;
        for second in 0..CHURN_SECONDS {
            let tick = churn_started + Duration::from_secs(second as u64);
            if let Some(wait) = tick.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let mut joining = Vec::new();
            while joining.len() < half {
                if own != Some(peer(next_new).2.as_str()) {
                    joining.push(next_new);
                }
                next_new += 1;
            }
            let leaving: Vec<String> = (next_gone..next_gone + half).map(|i| peer(i).0).collect();
            next_gone += half;
            let puts: Vec<(String, String)> = joining
                .iter()
                .map(|&i| {
                    let (k, v, _, _) = peer(i);
                    (k, v)
                })
                .collect();
            if !self.etcd.txn(&puts, &leaving) {
                println!("  churn transaction {second} failed");
                return None;
            }
            let written = Instant::now();
            let (_, _, vtep, mac) = peer(*joining.last().unwrap_or(&next_new));
            while !neighbour_is(&self.ns, &vtep, &mac)
                && written.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            latencies.push(written.elapsed());
        }
        Some(latencies)
    }
}

/// The VTEP of the subnet the agent leased: one of the free subnets right after the loaded
/// ones, which joining nodes must not take.
fn own_vtep(agent: &Agent) -> Option<String> {
    let subnet = agent.env_value("FLANNEL_SUBNET")?;
    let ip = subnet.split('/').next()?;
    let (_, _, vtep, _) = (0..NODES * 2).map(peer).find(|p| {
        let mut first = p.2.clone();
        first.replace_range(first.len() - 1.., "1");
        first == ip
    })?;
    Some(vtep)
}
