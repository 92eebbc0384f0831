//! A simulated cluster built from namespaces only: an underlay "switch" netns holding a
//! bridge, one netns per node attached to it by a veth (private underlay address), and pod
//! namespaces behind a `cni0` bridge in each node. Nothing is created in the real host's
//! namespace; dropping an [`Underlay`], [`Node`] or [`Pod`] deletes its namespace (and so
//! every link and address in it).
//!
//! ```no_run
//! use netns_tests::cluster::{Underlay, wait_until, ping};
//! let underlay = Underlay::new("ovl");
//! let mut a = underlay.add_node(1);
//! let pod = a.add_pod("10.244.1.0/24");
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Netns;

/// The underlay network every simulated cluster uses (private, and only ever configured
/// inside the cluster's own namespaces, so concurrent clusters never see each other).
pub const UNDERLAY_PREFIX: &str = "172.31.250";
pub const UNDERLAY_LEN: u8 = 24;
/// The IPv6 underlay every node also has (dual-stack overlays run over it).
pub const UNDERLAY6_PREFIX: &str = "fd00:31:250::";
pub const UNDERLAY6_LEN: u8 = 64;

/// The switch: a netns with bridge `br0`, which also has an underlay address of its own
/// (`.254`) so services for the cluster (etcd...) can run there.
pub struct Underlay {
    pub ns: Netns,
}

impl Underlay {
    pub fn new(tag: &str) -> Underlay {
        let ns = Netns::new(&format!("{tag}-sw"));
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        ns.exec_ok(&["ip", "link", "add", "br0", "type", "bridge"]);
        ns.exec_ok(&[
            "ip",
            "addr",
            "add",
            &format!("{}/{UNDERLAY_LEN}", Underlay::switch_ip()),
            "dev",
            "br0",
        ]);
        ns.exec_ok(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{UNDERLAY6_PREFIX}fe/{UNDERLAY6_LEN}"),
            "dev",
            "br0",
            "nodad",
        ]);
        ns.exec_ok(&["ip", "link", "set", "br0", "up"]);
        Underlay { ns }
    }

    /// The switch's own address on the underlay.
    pub fn switch_ip() -> String {
        format!("{UNDERLAY_PREFIX}.254")
    }

    /// Node `index`'s underlay address.
    pub fn node_ip(index: u8) -> String {
        format!("{UNDERLAY_PREFIX}.{index}")
    }

    /// Node `index`'s IPv6 underlay address.
    pub fn node_ip6(index: u8) -> String {
        format!("{UNDERLAY6_PREFIX}{index:x}")
    }

    /// Adds node `index` (1..=250): its netns gets `eth0` with [`Underlay::node_ip`] and
    /// [`Underlay::node_ip6`], `lo` up and IPv4 and IPv6 forwarding on (it routes for its pods).
    pub fn add_node(&self, index: u8) -> Node {
        let ns = node_netns(index);
        let port = format!("n{index}");
        self.ns.exec_ok(&[
            "ip",
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns.name(),
        ]);
        self.ns
            .exec_ok(&["ip", "link", "set", &port, "master", "br0", "up"]);
        Node::on_eth0(ns, index)
    }
}

/// Node `index`'s netns (without its underlay link yet).
fn node_netns(index: u8) -> Netns {
    assert!(
        (1..=250).contains(&index),
        "node index {index} out of 1..=250"
    );
    Netns::new(&format!("node{index}"))
}

/// Nodes 1 and 2 joined by one veth pair (`eth0` at both ends, their underlay addresses as
/// [`Underlay::add_node`] gives them): a wire with no switch, whose only cost is the nodes'
/// own, as between two machines.
pub fn node_pair() -> [Node; 2] {
    let (a, b) = (node_netns(1), node_netns(2));
    a.exec_ok(&[
        "ip",
        "link",
        "add",
        "eth0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        b.name(),
    ]);
    [Node::on_eth0(a, 1), Node::on_eth0(b, 2)]
}

/// One node of the cluster.
pub struct Node {
    pub ns: Netns,
    pub index: u8,
    /// Underlay address.
    pub ip: String,
    /// IPv6 underlay address.
    pub ip6: String,
    pods: u32,
}

/// A pod netns with `eth0` on its node's `cni0` bridge.
pub struct Pod {
    pub ns: Netns,
    pub ip: String,
}

/// `(network, prefix)` of an IPv4 CIDR; panics on bad input (test helper).
pub fn parse_cidr(cidr: &str) -> (Ipv4Addr, u8) {
    let (ip, len) = cidr
        .split_once('/')
        .unwrap_or_else(|| panic!("{cidr} is not a CIDR"));
    let ip: Ipv4Addr = ip.parse().unwrap_or_else(|e| panic!("{cidr}: {e}"));
    let len: u8 = len.parse().unwrap_or_else(|e| panic!("{cidr}: {e}"));
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    (Ipv4Addr::from(u32::from(ip) & mask), len)
}

/// The `n`-th address of a subnet (`nth("10.1.2.0/24", 1)` = 10.1.2.1).
pub fn nth(cidr: &str, n: u32) -> Ipv4Addr {
    let (net, _) = parse_cidr(cidr);
    Ipv4Addr::from(u32::from(net) + n)
}

impl Node {
    /// A default route to the underlay switch (the control plane's address, and Service
    /// addresses kube-proxy translates, are reached through it).
    pub fn route_default_via_switch(&self) {
        self.ns.exec_ok(&[
            "ip",
            "route",
            "add",
            "default",
            "via",
            &Underlay::switch_ip(),
        ]);
    }

    /// Node `index` in `ns`, whose `eth0` is there: its underlay addresses on `eth0`, `lo` and
    /// `eth0` up, IPv4 and IPv6 forwarding on (it routes for its pods).
    fn on_eth0(ns: Netns, index: u8) -> Node {
        let ip = Underlay::node_ip(index);
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        ns.exec_ok(&[
            "ip",
            "addr",
            "add",
            &format!("{ip}/{UNDERLAY_LEN}"),
            "dev",
            "eth0",
        ]);
        ns.exec_ok(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{}/{UNDERLAY6_LEN}", Underlay::node_ip6(index)),
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.exec_ok(&["ip", "link", "set", "eth0", "up"]);
        ns.exec_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
        ns.exec_ok(&["sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"]);
        Node {
            ns,
            index,
            ip,
            ip6: Underlay::node_ip6(index),
            pods: 0,
        }
    }

    /// Adds a pod with an address from `subnet` (the node's pod subnet): the node gets `cni0`
    /// with the first address as gateway (on the first call), the pod the next free one and a
    /// default route via the gateway.
    pub fn add_pod(&mut self, subnet: &str) -> Pod {
        let (_, len) = parse_cidr(subnet);
        let gateway = nth(subnet, 1);
        if self.pods == 0 {
            self.ns
                .exec_ok(&["ip", "link", "add", "cni0", "type", "bridge"]);
            self.ns.exec_ok(&[
                "ip",
                "addr",
                "add",
                &format!("{gateway}/{len}"),
                "dev",
                "cni0",
            ]);
            self.ns.exec_ok(&["ip", "link", "set", "cni0", "up"]);
        }
        self.pods += 1;
        let ip = nth(subnet, 1 + self.pods).to_string();
        let ns = Netns::new(&format!("pod{}", self.index));
        let port = format!("veth{}", self.pods);
        self.ns.exec_ok(&[
            "ip",
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns.name(),
        ]);
        self.ns
            .exec_ok(&["ip", "link", "set", &port, "master", "cni0", "up"]);
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        ns.exec_ok(&["ip", "addr", "add", &format!("{ip}/{len}"), "dev", "eth0"]);
        ns.exec_ok(&["ip", "link", "set", "eth0", "up"]);
        ns.exec_ok(&["ip", "route", "add", "default", "via", &gateway.to_string()]);
        Pod { ns, ip }
    }

    /// `ip -j route show <args>` in the node, as JSON.
    pub fn routes(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let mut argv = vec!["ip", "-j", "route", "show"];
        argv.extend_from_slice(args);
        json_array(self.ns.exec_json(&argv))
    }

    /// Destinations (`"10.244.2.0/24"`) of the routes through `dev`.
    pub fn route_dsts(&self, dev: &str) -> Vec<String> {
        if self.ns.link(dev).is_none() {
            return Vec::new();
        }
        let mut dsts: Vec<String> = self
            .routes(&["dev", dev])
            .iter()
            .filter_map(|r| r.get("dst").and_then(|d| d.as_str()).map(String::from))
            .collect();
        dsts.sort();
        dsts
    }
}

fn json_array(v: serde_json::Value) -> Vec<serde_json::Value> {
    match v {
        serde_json::Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// The source address `receiver` sees on UDP datagrams that `sender` sends to `to` (an
/// address of `receiver`): a socket bound inside `receiver` on a thread of its own (setns
/// affects that thread only) reads what `sender` sends with bash's `/dev/udp`. `None` when
/// nothing arrives within a few seconds.
pub fn udp_source_seen(receiver: &Netns, sender: &Netns, to: &str) -> Option<IpAddr> {
    let ip: IpAddr = to.parse().ok()?;
    let ns_file = std::fs::File::open(receiver.path()).ok()?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let listener = std::thread::spawn(move || -> Option<IpAddr> {
        // SAFETY: setns(2) on a namespace fd we own, on this short-lived thread only.
        if unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            let _ = ready_tx.send(None);
            return None;
        }
        let sock = UdpSocket::bind(SocketAddr::new(ip, 0)).ok();
        let port = sock
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .map(|a| a.port());
        let _ = ready_tx.send(port);
        let sock = sock?;
        sock.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut buf = [0u8; 64];
        sock.recv_from(&mut buf).ok().map(|(_, from)| from.ip())
    });
    let port = ready_rx.recv().ok().flatten()?;
    let host = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => v6.to_string(),
    };
    let script =
        format!("for i in 1 2 3 4 5 6 7 8; do echo x > /dev/udp/{host}/{port}; sleep 0.3; done");
    let mut send = sender.command(&["bash", "-c", &script]);
    send.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = send.spawn().ok()?;
    let seen = listener.join().ok().flatten();
    let _ = child.kill();
    let _ = child.wait();
    seen
}

/// `GET http://127.0.0.1:<port><path>` from inside `ns` (an agent's health or metrics
/// endpoint); `None` unless it answers 2xx within 5 s.
pub fn http_get(ns: &Netns, port: u16, path: &str) -> Option<String> {
    let out = ns
        .command(&["curl", "-sf", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of one sample (`name` with its labels) in a Prometheus text page.
pub fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// IPv4 headers of the frames seen in `ns` while `during` runs: `(src, dst, protocol,
/// header length, packet)`. An AF_PACKET socket on a thread inside `ns`, so it sees every
/// frame crossing the switch's bridge and ports.
pub fn capture(ns: &Netns, during: impl FnOnce()) -> Vec<(Ipv4Addr, Ipv4Addr, u8, usize, Vec<u8>)> {
    let ns_file = std::fs::File::open(ns.path()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        // SAFETY: setns(2) on a namespace fd we own, on this thread only; socket(2) and
        // setsockopt(2) on a descriptor we own; recv(2) into our own buffer.
        let fd = unsafe {
            assert_eq!(libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET), 0);
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from((libc::ETH_P_ALL as u16).to_be()),
            )
        };
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        ready_tx.send(()).unwrap();
        let mut frames = Vec::new();
        let mut buf = vec![0u8; 65536];
        while !stop2.load(Ordering::Relaxed) {
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n > 0 {
                frames.push(buf[..n as usize].to_vec());
            }
        }
        unsafe { libc::close(fd) };
        frames
    });
    ready_rx.recv().unwrap();
    during();
    stop.store(true, Ordering::Relaxed);
    let frames = reader.join().unwrap();
    frames
        .into_iter()
        .filter(|f| f.len() >= 34 && f[12..14] == [0x08, 0x00])
        .map(|f| {
            let ip = f[14..].to_vec();
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (src, dst, ip[9], ihl, ip)
        })
        .collect()
}

/// What one iperf3 run measured (the client's `-J` report).
#[derive(Debug, Clone, Copy)]
pub struct Iperf {
    pub bits_per_second: f64,
    pub bytes: f64,
    pub retransmits: u64,
}

/// A single TCP stream from `client` to `server` for `seconds` (iperf3, server started and
/// stopped here); `None` (after printing iperf3's words) when it could not run.
pub fn iperf(server: &Pod, client: &Pod, seconds: u32) -> Option<Iperf> {
    let mut srv = server
        .ns
        .command(&["iperf3", "-s", "-1", "-B", &server.ip])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut result = None;
    let mut last = String::new();
    let argv = iperf_client_argv(&server.ip, seconds);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    for _ in 0..20 {
        let o = client.ns.exec(&argv);
        last = String::from_utf8_lossy(&o.stdout).into_owned();
        result = parse_iperf(&o.stdout);
        if result.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = srv.kill();
    let _ = srv.wait();
    if result.is_none() {
        eprintln!("iperf3 said: {last}");
    }
    result
}

/// An iperf3 client's command line: one TCP stream to `server` for `seconds`, reported as JSON
/// (`-J`, which exits 0 even when it could not connect: the JSON says so).
pub fn iperf_client_argv(server: &str, seconds: u32) -> Vec<String> {
    [
        "iperf3",
        "-c",
        server,
        "-t",
        &seconds.to_string(),
        "-J",
        "--connect-timeout",
        "3000",
    ]
    .map(String::from)
    .to_vec()
}

/// The figures of an `iperf3 -J` client report; `None` when it says the run failed.
pub fn parse_iperf(json: &[u8]) -> Option<Iperf> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    if v.get("error").is_some() {
        return None;
    }
    let end = v.get("end")?;
    Some(Iperf {
        bits_per_second: end["sum_received"]["bits_per_second"].as_f64()?,
        bytes: end["sum_received"]["bytes"].as_f64()?,
        retransmits: end["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
    })
}

/// Bound on every wait for a simulated cluster to converge (a lease, a route, a ping): agents
/// and routers react within milliseconds, but a loaded machine runs many clusters at once.
pub const CONVERGE: Duration = Duration::from_secs(20);

/// Waits until `from` pings `to`, bounded by [`CONVERGE`].
pub fn assert_ping(from: &Pod, to: &Pod) {
    assert!(
        wait_until(CONVERGE, || ping(&from.ns, &to.ip)),
        "{} cannot reach {}",
        from.ip,
        to.ip
    );
}

/// One ICMP echo from `from` to `ip`, waiting at most a second.
pub fn ping(from: &Netns, ip: &str) -> bool {
    from.exec(&["ping", "-n", "-q", "-c", "1", "-W", "1", ip])
        .status
        .success()
}

/// Polls `check` every 100 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Pings every 50 ms from a namespace for a while (`ping -w`), counting what comes back: how
/// much traffic a restart or a reconfiguration loses while it runs.
pub struct Pinger {
    child: Option<std::process::Child>,
}

impl Pinger {
    /// Pings `to` from `from` for `secs` seconds.
    pub fn start(from: &Netns, to: &str, secs: u32) -> Pinger {
        let child = from
            .command(&[
                "ping",
                "-n",
                "-q",
                "-i",
                "0.05",
                "-W",
                "1",
                "-w",
                &secs.to_string(),
                to,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start ping");
        Pinger { child: Some(child) }
    }

    /// Waits for the end: (sent, received).
    pub fn finish(mut self) -> (u64, u64) {
        let Some(child) = self.child.take() else {
            return (0, 0);
        };
        let out = child.wait_with_output().expect("ping");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .unwrap_or_default();
        let num = |word: &str| -> u64 {
            line.split(',')
                .find(|p| p.contains(word))
                .and_then(|p| p.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        (num("transmitted"), num("received"))
    }
}

impl Drop for Pinger {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
