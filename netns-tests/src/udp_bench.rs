//! `make bench`'s udp section: one TCP stream (iperf3) from a pod on one node to a pod on
//! another, through flannel's `udp` backend's fast path, its per-packet path, and the kernel's
//! vxlan (flannel's `vxlan` backend, programmed by hand) between the same two nodes, in one run.
//! The three take turns, round after round, so a drift in the machine's load hits them alike.
//!
//! The two nodes are joined by one veth pair, the wire, whose ends segment at transmit and
//! coalesce (GRO) at receive as a NIC's driver does ([`crate::udp_proxy::UdpCluster::pair`]);
//! no switch netns, whose bridge would add its own per-frame work to every path (a real switch
//! costs the nodes nothing). Each path runs with its own MTU, as flannel
//! configures pods: 1472 for udp, 1450 for vxlan.
//!
//! CPU is counted two ways, per gigabyte received:
//! - the traffic's own processes: both engines (every thread), the iperf3 client and server,
//!   and the kernel's `ksoftirqd` threads. The kernel here charges softirq time to the task it
//!   interrupts (tick-based accounting), and on veths the softirq work runs in the context of
//!   the sending system calls or in ksoftirqd, so this holds the kernel's packet work too while
//!   leaving out whatever else the machine runs. This is the figure the goal is judged on.
//! - the whole machine's busy time from `/proc/stat` (all CPUs, softirq included wherever it
//!   ran), printed beside the busy time of the same length measured right before the
//!   transfer: on an idle machine the background is near zero and this is the plainest
//!   figure; on a machine other work shares, it mostly measures that work.
//!
//! The goals are judged on ratios within a round (the three paths ran on the same load), their
//! median over the rounds.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::cluster::{iperf_client_argv, parse_iperf, ping, wait_until};
use crate::kernel_has;
use crate::udp_proxy::{missing_tools, set_pod_mtu, Mode, UdpCluster, MTU};

/// flannel's vxlan backend: VNI 1, port 8472, MTU = underlay − 50.
const VXLAN_MTU: u32 = 1500 - 50;
/// Goals: the fast path against the per-packet path.
const THROUGHPUT_GOAL: f64 = 3.0;
const CPU_GOAL: f64 = 1.0 / 3.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path3 {
    Fast,
    PerPacket,
    Vxlan,
}

impl Path3 {
    fn label(self) -> &'static str {
        match self {
            Path3::Fast => "udp fast path",
            Path3::PerPacket => "udp per-packet path",
            Path3::Vxlan => "kernel vxlan",
        }
    }
}

/// One measured transfer.
#[derive(Debug, Clone, Copy)]
struct Run {
    gbits: f64,
    bytes: f64,
    retransmits: u64,
    /// CPU seconds of the traffic's processes.
    own_cpu: f64,
    /// The machine's busy CPU seconds during the transfer, and the same length of its busy
    /// time in the second before (the background the transfer ran on).
    machine_cpu: f64,
    background_cpu: f64,
    /// Packets per system call on the sending engine (TUN reads and UDP sends) and the
    /// receiving one (UDP receives and TUN writes); 0 for vxlan.
    per_call: [f64; 4],
}

impl Run {
    fn per_gb(&self, cpu: f64) -> f64 {
        cpu / (self.bytes / 1e9)
    }
}

/// One round: each path's run, when it ran.
type Round = [Option<Run>; 3];

/// Runs the section: `rounds` rounds of the three paths, `seconds` each.
pub fn run(driver: &Path, seconds: u32, rounds: u32) {
    println!(
        "\n## udp backend: one TCP stream pod to pod across two nodes (iperf3, {seconds} s), \
         fast path / per-packet path / kernel vxlan, {rounds} round(s) interleaved"
    );
    println!(
        "  CPU per GB: the traffic's processes (engines, iperf3, ksoftirqd); machine: all CPUs' \
         busy time (background: the same time's worth of the second before)"
    );
    if let Some(why) = missing_tools() {
        println!("  skipped: {why}");
        return;
    }
    if !driver.is_file() {
        println!(
            "  skipped: no {} (cargo build --release -p netns-tests --bin udp-proxy-node)",
            driver.display()
        );
        return;
    }
    if !kernel_has("tap") {
        println!("  skipped: this kernel has no TUN driver");
        return;
    }
    let mut c = UdpCluster::pair();
    let mut all: Vec<Round> = Vec::new();
    for round in 1..=rounds {
        let mut this: Round = [None; 3];
        for (k, path) in PATHS.into_iter().enumerate() {
            match measure(&mut c, driver, path, seconds) {
                Ok(r) => {
                    print_run(&format!("{} (round {round})", path.label()), &r);
                    this[k] = Some(r);
                }
                Err(why) => println!("  {} (round {round}): {why}", path.label()),
            }
        }
        all.push(this);
    }
    // Ratios within a round, where the three ran on the same machine's load; their median
    // over the rounds.
    let ratio = |path: usize, of: fn(&Run) -> f64| {
        median(
            all.iter()
                .filter_map(|r| Some(of(r[0].as_ref()?) / of(r[path].as_ref()?)))
                .collect(),
        )
    };
    let throughput = |r: &Run| r.gbits;
    let cpu = |r: &Run| r.per_gb(r.own_cpu);
    let gbits = |path: usize| median(all.iter().filter_map(|r| Some(r[path]?.gbits)).collect());
    let (Some(speedup), Some(cpu_ratio)) = (ratio(1, throughput), ratio(1, cpu)) else {
        println!("  goals: not measured (a path did not run)");
        return;
    };
    println!(
        "  {} udp fast path ≥ {THROUGHPUT_GOAL}x the per-packet path's throughput: {speedup:.1}x \
         (median of the rounds' ratios; medians {:.2} vs {:.2} Gbit/s)",
        verdict(speedup >= THROUGHPUT_GOAL),
        gbits(0).unwrap_or(0.0),
        gbits(1).unwrap_or(0.0)
    );
    println!(
        "  {} udp fast path CPU per GB ≤ 1/3 of the per-packet path's: {cpu_ratio:.2}x \
         (the traffic's processes, median of the rounds' ratios)",
        verdict(cpu_ratio <= CPU_GOAL)
    );
    if let (Some(t), Some(c)) = (ratio(2, throughput), ratio(2, cpu)) {
        println!(
            "  udp fast path against kernel vxlan: {t:.2}x the throughput, {c:.2}x the CPU per GB \
             (medians {:.2} vs {:.2} Gbit/s)",
            gbits(0).unwrap_or(0.0),
            gbits(2).unwrap_or(0.0)
        );
    }
}

const PATHS: [Path3; 3] = [Path3::Fast, Path3::PerPacket, Path3::Vxlan];

fn verdict(met: bool) -> &'static str {
    if met {
        "PASS"
    } else {
        "FAIL"
    }
}

fn print_run(label: &str, r: &Run) {
    let calls = if r.per_call[0] > 0.0 {
        format!(
            "; packets per call: TUN read {:.1}, UDP send {:.1}, UDP receive {:.1}, TUN write {:.1}",
            r.per_call[0], r.per_call[1], r.per_call[2], r.per_call[3]
        )
    } else {
        String::new()
    };
    println!(
        "  {label:<32} {:>6.2} Gbit/s  {:>6} retransmits  CPU {:.2} s/GB (machine {:.2}, background {:.2}){calls}",
        r.gbits,
        r.retransmits,
        r.per_gb(r.own_cpu),
        r.per_gb(r.machine_cpu),
        r.per_gb(r.background_cpu)
    );
}

/// The median (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Sets `path` up on the cluster, measures one transfer, and takes the path down again.
fn measure(c: &mut UdpCluster, driver: &Path, path: Path3, seconds: u32) -> Result<Run, String> {
    let vxlan = path == Path3::Vxlan;
    if vxlan {
        setup_vxlan(c)?;
    } else {
        let mode = if path == Path3::PerPacket {
            Mode::PerPacket
        } else {
            Mode::Fast
        };
        c.start_engines(driver, &[mode; 2]);
    }
    let mtu = if vxlan { VXLAN_MTU } else { MTU };
    for (node, pod) in c.nodes.iter().zip(&c.pods) {
        set_pod_mtu(node, pod, "veth1", mtu);
    }
    let result = if wait_until(Duration::from_secs(10), || {
        ping(&c.pods[0].ns, &c.pods[1].ip)
    }) {
        transfer(c, seconds)
    } else {
        Err("the pods do not reach each other".to_string())
    };
    let per_call = if vxlan {
        [0.0; 4]
    } else {
        let (tx, rx) = (c.proxies[0].stats(), c.proxies[1].stats());
        let ratio = |s: &serde_json::Value, packets: &str, calls: &str| {
            s[packets]["packets"].as_f64().unwrap_or(0.0)
                / s["syscalls"][calls].as_f64().unwrap_or(0.0).max(1.0)
        };
        [
            ratio(&tx, "sent", "tun_reads"),
            ratio(&tx, "sent", "udp_sends"),
            ratio(&rx, "received", "udp_recvs"),
            ratio(&rx, "received", "tun_writes"),
        ]
    };
    if vxlan {
        for n in &c.nodes {
            n.ns.exec(&["ip", "link", "del", "flannel.1"]);
        }
    } else {
        c.stop_engines();
    }
    result.map(|r| Run { per_call, ..r })
}

/// flannel's vxlan backend by hand: `flannel.1` (VNI 1, port 8472, no learning), the lease's
/// network address on it, and per peer a route via its VTEP address, its ARP entry and its
/// FDB entry.
fn setup_vxlan(c: &UdpCluster) -> Result<(), String> {
    let mac = |index: u8| format!("0e:00:00:00:00:{index:02x}");
    for n in &c.nodes {
        let ip = |args: &[&str]| -> Result<(), String> {
            let mut argv = vec!["ip"];
            argv.extend_from_slice(args);
            let out = n.ns.exec(&argv);
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{argv:?} in {}: {}",
                    n.ns.name(),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        let vtep = format!("10.244.{}.0", n.index);
        ip(&[
            "link",
            "add",
            "flannel.1",
            "address",
            &mac(n.index),
            "mtu",
            &VXLAN_MTU.to_string(),
            "type",
            "vxlan",
            "id",
            "1",
            "local",
            &n.ip,
            "dev",
            "eth0",
            "dstport",
            "8472",
            "nolearning",
        ])?;
        ip(&["addr", "add", &format!("{vtep}/32"), "dev", "flannel.1"])?;
        ip(&["link", "set", "flannel.1", "up"])?;
        for peer in c.nodes.iter().filter(|p| p.index != n.index) {
            let peer_vtep = format!("10.244.{}.0", peer.index);
            ip(&[
                "route",
                "replace",
                &format!("10.244.{}.0/24", peer.index),
                "via",
                &peer_vtep,
                "dev",
                "flannel.1",
                "onlink",
            ])?;
            ip(&[
                "neigh",
                "replace",
                &peer_vtep,
                "lladdr",
                &mac(peer.index),
                "dev",
                "flannel.1",
                "nud",
                "permanent",
            ])?;
            let out = n.ns.exec(&[
                "bridge",
                "fdb",
                "append",
                &mac(peer.index),
                "dev",
                "flannel.1",
                "dst",
                &peer.ip,
            ]);
            if !out.status.success() {
                return Err(format!(
                    "bridge fdb append in {}: {}",
                    n.ns.name(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    Ok(())
}

/// One iperf3 stream from pod 0 to pod 1, with the CPU it cost.
fn transfer(c: &UdpCluster, seconds: u32) -> Result<Run, String> {
    let (client, server) = (&c.pods[0], &c.pods[1]);
    let srv = server
        .ns
        .command(&["iperf3", "-s", "-1", "-B", &server.ip])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("iperf3 server: {e}"))?;
    let srv_pid = srv.id() as i32;
    if !server.ns.wait_tcp_listen(5201) {
        stop_child(srv_pid);
        return Err("the iperf3 server did not listen".into());
    }
    let engines: Vec<u32> = c.proxies.iter().map(|p| p.pid()).collect();
    let softirqd = ksoftirqd_pids();
    // The machine's background: its busy time over one second just before.
    let b0 = machine_busy();
    std::thread::sleep(Duration::from_secs(1));
    let background_rate = machine_busy() - b0;
    let own_before: f64 = engines.iter().chain(&softirqd).map(|&p| task_cpu(p)).sum();
    let machine_before = machine_busy();
    let started = Instant::now();
    let argv = iperf_client_argv(&server.ip, seconds);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut cli = client
        .ns
        .command(&argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("iperf3 client: {e}"))?;
    let mut json = Vec::new();
    if let Some(mut out) = cli.stdout.take() {
        let _ = out.read_to_end(&mut json);
    }
    let client_cpu = wait_cpu(cli.id() as i32);
    let figures = parse_iperf(&json);
    if figures.is_none() {
        // The server waits for its one test forever when the client never connected.
        stop_child(srv_pid);
    }
    let server_cpu = wait_cpu(srv_pid);
    let elapsed = started.elapsed().as_secs_f64();
    let machine = machine_busy() - machine_before;
    let own_after: f64 = engines.iter().chain(&softirqd).map(|&p| task_cpu(p)).sum();
    let figures = figures.ok_or_else(|| {
        format!(
            "iperf3 failed: {}",
            String::from_utf8_lossy(&json)
                .chars()
                .take(300)
                .collect::<String>()
        )
    })?;
    Ok(Run {
        gbits: figures.bits_per_second / 1e9,
        bytes: figures.bytes,
        retransmits: figures.retransmits,
        own_cpu: own_after - own_before + client_cpu + server_cpu,
        machine_cpu: machine,
        background_cpu: background_rate * elapsed,
        per_call: [0.0; 4],
    })
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The machine's busy CPU seconds so far (all CPUs): user, nice, system, irq, softirq, steal.
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().next() else {
        return 0.0;
    };
    let f: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0.0);
    (at(0) + at(1) + at(2) + at(5) + at(6) + at(7)) / clock_ticks()
}

/// A task's CPU seconds so far (user + system, every thread), from `/proc/<pid>/stat`.
fn task_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces, in parentheses).
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / clock_ticks()
}

/// The kernel's softirq threads.
fn ksoftirqd_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.starts_with("ksoftirqd/"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Stops child `pid` (SIGTERM) and reaps it.
fn stop_child(pid: i32) {
    // SAFETY: kill(2) on our own child's pid, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_cpu(pid);
}

/// Waits for child `pid`; its CPU seconds (user + system).
fn wait_cpu(pid: i32) -> f64 {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::wait4(pid, &mut status, 0, &mut ru) } < 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}
