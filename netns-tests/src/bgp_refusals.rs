//! `make bench`'s bgp section, refusals part: what a router flooding a node with routes no
//! node leases costs. Every refused route is one line in BIRD's log, which the agent follows
//! and counts by reason; this puts a figure on that design.
//!
//! A plain BIRD in a second namespace plays the router: it sends node 1 [`ROUTES`] /32s
//! outside the cluster network (`FERROCNI_BENCH_BGP_REFUSALS` changes the count), over eBGP.
//! Measured, each from the moment the router starts:
//! - BIRD alone, with the backend's configuration as the library renders it, and with the
//!   refusal's `print` taken out (what the same filter costs silent): BIRD's CPU until it has
//!   filtered every route;
//! - the agent with its BIRD: the time until `/metrics` counts every refusal by reason, the
//!   CPU of the agent and of BIRD, their RSS, the bytes BIRD logged and the agent's log lines;
//! - then a lease appearing (the import filter changes, BIRD evaluates the routes again): the
//!   time until every route is counted a second time, and the CPU.

use std::fs;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::agent::{bird_pid, Agent};
use crate::agent_scale::usage;
use crate::bgp_scale::{peer_only_config, Cpu};
use crate::cluster::{http_get, Node, Underlay};
use crate::etcd::{Etcd, EtcdOptions, PREFIX};
use crate::private_host::missing_tools;
use crate::TempDir;

/// Routes the router sends (the default count).
pub const ROUTES: u32 = 100_000;
const ROUTER_AS: u32 = 64999;
const NODE_AS: u32 = 64512;
/// In the bench's network (10.244.0.0/16).
const OWN_SUBNET: &str = "10.244.1.0/24";
const METRICS_PORT: u16 = 19_475;
const TIMEOUT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(100);

/// The route count from the environment, else [`ROUTES`].
fn count() -> u32 {
    std::env::var("FERROCNI_BENCH_BGP_REFUSALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| (1..=1_000_000).contains(n))
        .unwrap_or(ROUTES)
}

/// The part.
pub fn run(agent: &Path) {
    let routes = count();
    println!(
        "\n  refusals: a router sends one node {routes} routes outside the network (each refused, printed to BIRD's log, counted by the agent)"
    );
    if !agent.is_file() {
        println!("  skipped: needs {} (make build)", agent.display());
        return;
    }
    if let Some(missing) = missing_tools(&["etcd", "etcdctl", "bird", "birdc", "curl"]) {
        println!("  skipped: {missing:?} not installed (etcd-server, etcd-client, bird2, curl)");
        return;
    }
    let underlay = Underlay::new("bgpflood");
    let etcd = Etcd::start(&underlay.ns, EtcdOptions::on_switch());
    let node = underlay.add_node(1);
    let router = underlay.add_node(2);
    let dir = TempDir::new("bgpflood");
    let router_conf = dir.path().join("router.conf");
    if fs::write(&router_conf, flood_conf(&router, &node, routes)).is_err() {
        println!("  cannot write the router's configuration");
        return;
    }
    for (what, print) in [("as rendered", true), ("its print taken out", false)] {
        match bird_alone(&node, &router, &router_conf, dir.path(), routes, print) {
            Some((_, cpu)) => println!(
                "  BIRD alone, the backend's filter {what}: BIRD CPU {:.2} s to filter every route ({:.1} µs a route)",
                cpu,
                cpu * 1e6 / f64::from(routes)
            ),
            None => println!("  BIRD alone ({what}): not every route filtered within {TIMEOUT:?}"),
        }
    }
    with_agent(
        agent,
        &etcd,
        &node,
        &router,
        &router_conf,
        dir.path(),
        routes,
    );
}

/// The router: `routes` /32s from 10.0.0.0 up (outside 10.244.0.0/16 below a million), sent
/// to the node over eBGP.
fn flood_conf(router: &Node, node: &Node, routes: u32) -> String {
    let mut text = format!(
        "router id {};\nprotocol device {{}}\nprotocol static flood {{\n  ipv4;\n",
        router.ip
    );
    for i in 0..routes {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        text.push_str(&format!("  route {ip}/32 blackhole;\n"));
    }
    text.push_str(&format!(
        "}}\nprotocol bgp node {{\n  local {} as {ROUTER_AS};\n  neighbor {} as {NODE_AS};\n  ipv4 {{ import none; export all; }};\n}}\n",
        router.ip, node.ip
    ));
    text
}

/// A BIRD in `ns` with `conf`, its socket in `dir`.
fn start_bird(node: &Node, conf: &Path, dir: &Path, name: &str) -> Option<Child> {
    node.ns
        .command(&["bird", "-f", "-c"])
        .arg(conf)
        .arg("-s")
        .arg(dir.join(format!("{name}.ctl")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The `filtered` column of the node's session's import updates (`birdc show protocols all`).
fn filtered(node: &Node, socket: &Path, protocol: &str) -> u64 {
    let out = node
        .ns
        .command(&["birdc", "-s"])
        .arg(socket)
        .args(["show", "protocols", "all", protocol])
        .output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"Import") && f.get(1) == Some(&"updates:"))
                .then(|| f.get(4)?.parse().ok())
                .flatten()
        })
        .unwrap_or(0)
}

/// The node's BIRD on its own, with the backend's configuration (`print`: as rendered, else
/// with the refusal's print line taken out): how long until it filtered every route, and its
/// CPU.
fn bird_alone(
    node: &Node,
    router: &Node,
    router_conf: &Path,
    dir: &Path,
    routes: u32,
    print: bool,
) -> Option<(Duration, f64)> {
    let log = dir.join(format!("alone-{print}.log"));
    let mut text = peer_only_config(node, NODE_AS, OWN_SUBNET, (&router.ip, ROUTER_AS), &log)?;
    if !print {
        text = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("print \"ferrocni-refused"))
            .map(|l| format!("{l}\n"))
            .collect();
    }
    let conf = dir.join(format!("alone-{print}.conf"));
    fs::write(&conf, text).ok()?;
    let bird = start_bird(node, &conf, dir, "alone")?;
    let socket = dir.join("alone.ctl");
    let protocol = format!("peer_{}", router.ip.replace('.', "_"));
    let result = (|| {
        let pid = bird.id();
        std::thread::sleep(Duration::from_millis(300));
        let before = Cpu::read(&[pid]);
        let started = Instant::now();
        let flood = start_bird(router, router_conf, dir, "router")?;
        let mut done = false;
        while started.elapsed() < TIMEOUT {
            if filtered(node, &socket, &protocol) >= u64::from(routes) {
                done = true;
                break;
            }
            std::thread::sleep(POLL);
        }
        let took = started.elapsed();
        let cpu = Cpu::read(&[pid]).since(&before);
        stop(flood);
        done.then_some((took, cpu))
    })();
    stop(bird);
    result
}

/// Bytes process `pid` has written (`/proc/<pid>/io`: `wchar`, every write(2); BIRD's here are
/// its log's, and a few keepalives).
fn bytes_written(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The sum of the agent's refusal counts, by reason.
fn counted(node: &Node) -> (u64, Vec<String>) {
    let text = http_get(&node.ns, METRICS_PORT, "/metrics").unwrap_or_default();
    let mut sum = 0;
    let mut series = Vec::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("ferrocni_agent_bgp_peer_refusals_total{"))
    {
        if let Some(v) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            sum += v as u64;
            series.push(l.to_string());
        }
    }
    (sum, series)
}

/// Waits until the agent counted `at_least` refusals: how long it took.
fn wait_counted(node: &Node, at_least: u64) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < TIMEOUT {
        if counted(node).0 >= at_least {
            return Some(started.elapsed());
        }
        std::thread::sleep(POLL);
    }
    None
}

/// The agent's part: the flood, then the same routes evaluated again after a lease appears.
fn with_agent(
    agent_binary: &Path,
    etcd: &Etcd,
    node: &Node,
    router: &Node,
    router_conf: &Path,
    dir: &Path,
    routes: u32,
) {
    etcd.put(
        &format!("{PREFIX}/config"),
        &format!(
            r#"{{"Network":"10.244.0.0/16","Backend":{{"Type":"bgp","NodeToNodeMesh":false,"Peers":[{{"PeerIP":"{}","ASNumber":{ROUTER_AS}}}]}}}}"#,
            router.ip
        ),
    );
    let mut agent = Agent::new(node, etcd, dir).args(&["--resync-interval=60"]);
    agent.binary = Some(agent_binary.to_path_buf());
    agent.serve_metrics(METRICS_PORT);
    agent.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    let bird = loop {
        if let Some(pid) = bird_pid(&agent.bgp_dir()).and_then(|p| u32::try_from(p).ok()) {
            if http_get(&node.ns, METRICS_PORT, "/metrics").is_some() {
                break Some(pid);
            }
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(POLL);
    };
    let (Some(bird), Some(agent_pid)) = (bird, agent.pid()) else {
        println!("  the agent did not start BIRD and serve /metrics within 30 s");
        return;
    };
    let pids = [agent_pid, bird];
    let written_before = bytes_written(bird);
    let before = Cpu::read(&pids);
    let Some(flood) = start_bird(router, router_conf, dir, "router") else {
        println!("  cannot start the router's BIRD");
        return;
    };
    let total = u64::from(routes);
    let first = wait_counted(node, total);
    let agent_cpu = Cpu::read(&[agent_pid]).since(&before);
    let all_cpu = Cpu::read(&pids).since(&before);
    let bird_log = bytes_written(bird).saturating_sub(written_before);
    let logged = agent
        .log()
        .lines()
        .filter(|l| l.contains("bgp: refused "))
        .count();
    match first {
        Some(t) => println!(
            "  agent: every refusal counted {:.2} s after the router started (its start-up and the session's opening included); CPU agent {:.2} s, BIRD {:.2} s; BIRD wrote {:.1} MiB (its log, rotated by the agent every 4 MiB), the agent logged {logged} lines",
            t.as_secs_f64(),
            agent_cpu,
            all_cpu - agent_cpu,
            bird_log as f64 / 1048576.0
        ),
        None => println!(
            "  agent: only {} of {total} refusals counted within {TIMEOUT:?}",
            counted(node).0
        ),
    }
    println!(
        "  RSS after the flood: agent {} KiB, BIRD {} KiB",
        usage(agent_pid).0,
        usage(bird).0
    );
    // A lease appears: the import filter changes and BIRD evaluates every route again.
    let before = Cpu::read(&pids);
    etcd.put(
        &format!("{PREFIX}/subnets/10.244.7.0-24"),
        r#"{"PublicIP":"172.31.250.77","PublicIPv6":null,"BackendType":"bgp"}"#,
    );
    match wait_counted(node, 2 * total) {
        Some(t) => println!(
            "  a lease appears: every route refused and counted again {:.2} s after it; CPU agent {:.2} s, BIRD {:.2} s",
            t.as_secs_f64(),
            Cpu::read(&[agent_pid]).since(&before),
            Cpu::read(&[bird]).since(&before)
        ),
        None => println!(
            "  a lease appears: {} of {} refusals counted within {TIMEOUT:?}",
            counted(node).0,
            2 * total
        ),
    }
    for s in counted(node).1 {
        println!("    {s}");
    }
    stop(flood);
    agent.stop();
}
