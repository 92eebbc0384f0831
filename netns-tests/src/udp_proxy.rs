//! flannel's `udp` backend without the agent, on a simulated cluster ([`crate::cluster`]):
//! each node runs `udp-proxy-node` (the packet engine standalone, `src/bin/udp-proxy-node.rs`)
//! with flannel0 set up as flanneld sets it, and a static route table. The end-to-end tests
//! (`tests/udp_proxy.rs`) and the bench's `udp` section use it; the agent's udp backend test
//! (`tests/agent_routed.rs`) uses its checks of the wire and of the ICMP answers.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{node_pair, Node, Pod, Underlay};
use crate::Netns;

/// The cluster network and the backend's port (flanneld's defaults).
pub const NETWORK: &str = "10.244.0.0/16";
pub const PORT: u16 = 8285;
/// flannel0's MTU on the 1500-byte underlay (minus the outer IPv4 and UDP headers), which
/// the pods get too, as flannel's CNI config passes `FLANNEL_MTU` on.
pub const MTU: u32 = 1500 - 28;

/// Node `index`'s lease.
pub fn subnet(index: u8) -> String {
    format!("10.244.{index}.0/24")
}

/// Makes `dev` (an underlay veth) segment and coalesce as a NIC's driver does: UDP and UDP
/// tunnel segmentation done at transmit (in software: `tx-udp-segmentation`,
/// `tx-udp_tnl-segmentation` off), so one big GSO packet does not cross the "wire" unsplit,
/// and (with `gro`) GRO at receive. veth runs its NAPI GRO only for packets from a peer
/// without TSO (or for local UDP with `rx-udp-gro-forwarding`), so TSO is turned off too: every
/// packet then goes through the receiving end's GRO, as on a NIC. Needs `ethtool`; false
/// (after saying why) when it failed.
pub fn wire_like_a_nic(ns: &Netns, dev: &str, gro: bool) -> bool {
    let mut argv = vec![
        "ethtool",
        "-K",
        dev,
        "tso",
        "off",
        "tx-udp-segmentation",
        "off",
        "tx-udp_tnl-segmentation",
        "off",
        "tx-udp_tnl-csum-segmentation",
        "off",
    ];
    if gro {
        argv.extend(["gro", "on"]);
    }
    match ns.command(&argv).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!(
                "ethtool -K {dev} failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            false
        }
        Err(e) => {
            eprintln!("ethtool not runnable ({e}): the underlay keeps veth's defaults");
            false
        }
    }
}

/// Sets the MTU of a pod's link, both ends (`port` is its end in the node, `veth1` for the
/// node's first pod) and of `cni0`.
pub fn set_pod_mtu(node: &Node, pod: &Pod, port: &str, mtu: u32) {
    let mtu = mtu.to_string();
    node.ns.exec_ok(&["ip", "link", "set", port, "mtu", &mtu]);
    node.ns.exec_ok(&["ip", "link", "set", "cni0", "mtu", &mtu]);
    pod.ns.exec_ok(&["ip", "link", "set", "eth0", "mtu", &mtu]);
}

/// How a node's engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Fast,
    PerPacket,
    /// The fast path with features turned off (`--without`: `vnet-hdr,udp-gso,udp-gro,mmsg`),
    /// as on a kernel without them.
    FastWithout(&'static str),
}

impl Mode {
    fn args(self) -> Vec<&'static str> {
        match self {
            Mode::Fast => Vec::new(),
            Mode::PerPacket => vec!["--per-packet"],
            Mode::FastWithout(features) => vec!["--without", features],
        }
    }
}

/// A running `udp-proxy-node`, stopped (and killed if need be) on drop.
pub struct ProxyNode {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// What the engine said runs (`Stats::datapath` as text).
    pub datapath: String,
}

impl ProxyNode {
    /// Starts the engine in `node`'s netns on flannel0, bound to the node's underlay address,
    /// with the node's lease ([`subnet`]); returns once it is ready.
    pub fn start(driver: &Path, node: &Node, mode: Mode) -> ProxyNode {
        ProxyNode::start_with_lease(driver, node, &subnet(node.index), mode)
    }

    /// [`ProxyNode::start`] with the lease `lease` (`10.244.30.0/24`).
    pub fn start_with_lease(driver: &Path, node: &Node, lease: &str, mode: Mode) -> ProxyNode {
        let mut argv = vec![
            driver.to_str().unwrap_or_default().to_string(),
            "--tun".into(),
            "flannel0".into(),
            "--mtu".into(),
            MTU.to_string(),
            "--port".into(),
            PORT.to_string(),
            "--bind".into(),
            node.ip.clone(),
            "--subnet".into(),
            lease.to_string(),
            "--network".into(),
            NETWORK.into(),
        ];
        argv.extend(mode.args().into_iter().map(String::from));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut child = node
            .ns
            .command(&argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let Some(datapath) = line.trim_end().strip_prefix("ready ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "udp-proxy-node in {} did not start: {line:?}",
                node.ns.name()
            );
        };
        ProxyNode {
            datapath: datapath.to_string(),
            child,
            stdin,
            stdout,
        }
    }

    fn command(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().expect("the engine's stdin");
        writeln!(stdin, "{line}").expect("write to udp-proxy-node");
        stdin.flush().expect("write to udp-proxy-node");
        let mut reply = String::new();
        self.stdout
            .read_line(&mut reply)
            .expect("read from udp-proxy-node");
        reply.trim_end().to_string()
    }

    /// Replaces the route table: `(subnet, "ip:port")` pairs.
    pub fn set_routes(&mut self, routes: &[(String, String)]) {
        let mut line = String::from("routes");
        for (subnet, hop) in routes {
            line.push_str(&format!(" {subnet}={hop}"));
        }
        let reply = self.command(&line);
        assert_eq!(reply, "ok", "routes refused: {reply}");
    }

    /// The engine's counters (see the driver's `stats_json`).
    pub fn stats(&mut self) -> serde_json::Value {
        let reply = self.command("stats");
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("stats {reply:?}: {e}"))
    }

    /// The engine's process (for its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the engine and waits for it.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "stop");
        }
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ProxyNode {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Routes of every node but `me` among `nodes`: `(lease, "underlay ip:PORT")`.
pub fn peer_routes(nodes: &[Node], me: usize) -> Vec<(String, String)> {
    nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != me)
        .map(|(_, n)| (subnet(n.index), format!("{}:{PORT}", n.ip)))
        .collect()
}

/// Nodes each with one pod, and their engines: on one underlay switch ([`UdpCluster::new`]),
/// or two joined by a bare wire ([`UdpCluster::pair`]). Dropped in field order: pods, engines,
/// nodes (their flannel0 goes with their netns), the switch.
pub struct UdpCluster {
    pub pods: Vec<Pod>,
    pub proxies: Vec<ProxyNode>,
    pub nodes: Vec<Node>,
    pub underlay: Option<Underlay>,
}

impl UdpCluster {
    /// `nodes` nodes with a pod each (MTU [`MTU`]), no engine yet. Each node's underlay link
    /// segments and coalesces as a NIC does ([`wire_like_a_nic`]); the switch's ports pass
    /// frames on as they come (no GRO there, so a capture on the switch sees every datagram
    /// on its own) but without TSO, so the node behind each port coalesces what it receives.
    pub fn new(tag: &str, nodes: usize) -> UdpCluster {
        let underlay = Underlay::new(tag);
        let nodes: Vec<Node> = (0..nodes)
            .map(|i| {
                let node = underlay.add_node(i as u8 + 1);
                wire_like_a_nic(&underlay.ns, &format!("n{}", node.index), false);
                node
            })
            .collect();
        UdpCluster::with_pods(nodes, Some(underlay))
    }

    /// Two nodes joined by one veth pair, both ends segmenting and coalescing as NICs do: the
    /// bench's wire (a switch netns would add its own per-frame work to every path).
    pub fn pair() -> UdpCluster {
        UdpCluster::with_pods(node_pair().into(), None)
    }

    fn with_pods(mut nodes: Vec<Node>, underlay: Option<Underlay>) -> UdpCluster {
        let pods = nodes
            .iter_mut()
            .map(|node| {
                wire_like_a_nic(&node.ns, "eth0", true);
                let pod = node.add_pod(&subnet(node.index));
                set_pod_mtu(node, &pod, "veth1", MTU);
                pod
            })
            .collect();
        UdpCluster {
            pods,
            proxies: Vec::new(),
            nodes,
            underlay,
        }
    }

    /// The switch's netns (clusters made by [`UdpCluster::new`]).
    pub fn switch(&self) -> &Netns {
        &self
            .underlay
            .as_ref()
            .expect("a cluster on a switch (UdpCluster::new)")
            .ns
    }

    /// A cluster whose node `i + 1` runs its engine in `modes[i]`.
    pub fn start(driver: &Path, tag: &str, modes: &[Mode]) -> UdpCluster {
        let mut c = UdpCluster::new(tag, modes.len());
        c.start_engines(driver, modes);
        c
    }

    /// Starts one engine per node (stopping any running first) and gives each the routes to
    /// every other node.
    pub fn start_engines(&mut self, driver: &Path, modes: &[Mode]) {
        self.stop_engines();
        self.proxies = self
            .nodes
            .iter()
            .zip(modes)
            .map(|(n, &mode)| ProxyNode::start(driver, n, mode))
            .collect();
        for (i, p) in self.proxies.iter_mut().enumerate() {
            p.set_routes(&peer_routes(&self.nodes, i));
        }
    }

    /// Stops the engines (flannel0 stays: it is persistent).
    pub fn stop_engines(&mut self) {
        for p in self.proxies.drain(..) {
            p.stop();
        }
    }
}

/// Whether the tools these runs need are here (`iperf3`, `ethtool`), naming what is missing.
pub fn missing_tools() -> Option<String> {
    let missing: Vec<&str> = [("iperf3", "--version"), ("ethtool", "--version")]
        .into_iter()
        .filter(|(bin, arg)| {
            !Command::new(bin)
                .arg(arg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|(bin, _)| bin)
        .collect();
    (!missing.is_empty())
        .then(|| format!("{} not installed (.ci/packages.txt)", missing.join(", ")))
}

/// Runs `f` on a thread of its own inside `ns` (setns affects that thread only).
pub fn in_netns<T: Send + 'static>(
    ns: &Netns,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let file = std::fs::File::open(ns.path()).expect("open the netns");
    std::thread::spawn(move || {
        // SAFETY: setns(2) on a namespace descriptor we own, on this thread only.
        assert_eq!(
            unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
            0,
            "setns"
        );
        f()
    })
}

/// RFC 1071, word by word (independent of the engine's own checksum code).
pub fn internet_sum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        for pair in part.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Whether an IPv4 packet's header and TCP/UDP/ICMP checksums hold.
pub fn checksums_hold(pkt: &[u8]) -> bool {
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    if internet_sum(&[&pkt[..ihl]]) != 0xffff {
        return false;
    }
    let l4 = &pkt[ihl..];
    match pkt[9] {
        1 => internet_sum(&[l4]) == 0xffff,
        6 | 17 => {
            let len = (l4.len() as u16).to_be_bytes();
            let pseudo = [&pkt[12..20], &[0, pkt[9]], &len[..]].concat();
            pkt[9] == 17 && l4[6..8] == [0, 0] || internet_sum(&[&pseudo, l4]) == 0xffff
        }
        _ => true,
    }
}

/// The UDP payloads of the IPv4 frames captured on the underlay, checked to be flanneld's
/// encapsulation: UDP from PORT to PORT between node addresses, the payload one complete IPv4
/// packet of the pod network within the MTU, its checksums right. Link-local multicast
/// (IGMP reports of the bridge and the nodes' interfaces) is no pod traffic and is left out,
/// and so is what goes to or from the switch's own address (etcd, for the agents).
pub fn inner_packets(frames: &[(Ipv4Addr, Ipv4Addr, u8, usize, Vec<u8>)]) -> Vec<Vec<u8>> {
    let link_local_multicast = |ip: &Ipv4Addr| ip.octets()[..3] == [224, 0, 0];
    let is_node = |ip: &Ipv4Addr| {
        ip.to_string() != Underlay::switch_ip() && ip.to_string().starts_with("172.31.250.")
    };
    let in_pods = |ip: &[u8]| ip[0] == 10 && ip[1] == 244;
    frames
        .iter()
        .filter(|(src, dst, ..)| {
            let switch = Underlay::switch_ip();
            !link_local_multicast(dst) && src.to_string() != switch && dst.to_string() != switch
        })
        .map(|(src, dst, proto, ihl, ip)| {
            assert_eq!(
                *proto, 17,
                "not UDP on the underlay: {src} -> {dst} proto {proto}"
            );
            assert!(
                is_node(src) && is_node(dst),
                "{src} -> {dst} is not node to node"
            );
            let udp = &ip[*ihl..];
            let ports = (
                u16::from_be_bytes([udp[0], udp[1]]),
                u16::from_be_bytes([udp[2], udp[3]]),
            );
            assert_eq!(ports, (PORT, PORT), "{src} -> {dst}: UDP ports");
            let inner = &udp[8..usize::from(u16::from_be_bytes([udp[4], udp[5]]))];
            assert!(inner.len() <= MTU as usize, "a datagram past the MTU");
            assert_eq!(inner[0] >> 4, 4, "the payload is an IPv4 packet");
            assert_eq!(
                usize::from(u16::from_be_bytes([inner[2], inner[3]])),
                inner.len(),
                "the payload is exactly one packet"
            );
            assert!(
                in_pods(&inner[12..16]) && in_pods(&inner[16..20]),
                "inner addresses outside the pod network"
            );
            assert!(checksums_hold(inner), "inner checksums of {inner:02x?}");
            inner.to_vec()
        })
        .collect()
}

/// The packets `pod_ip` sent (frames captured in its netns) that are ICMP echo requests,
/// each checked to be on the wire among `inner` (the underlay's payloads, [`inner_packets`])
/// byte for byte but for the TTL, 64 in the pod and 62 on the wire (its node's kernel and the
/// sending engine took one each), and the header checksum; returns how many there were.
pub fn echo_requests_carried_byte_for_byte(
    from_pod: &[(Ipv4Addr, Ipv4Addr, u8, usize, Vec<u8>)],
    pod_ip: &str,
    inner: &[Vec<u8>],
) -> usize {
    let requests: Vec<&Vec<u8>> = from_pod
        .iter()
        .filter(|(src, _, proto, ihl, ip)| {
            src.to_string() == pod_ip && *proto == 1 && ip[*ihl] == 8
        })
        .map(|f| &f.4)
        .collect();
    for sent in &requests {
        assert_eq!(sent[8], 64, "the pod's TTL");
        let on_wire = inner.iter().find(|i| {
            i.len() == sent.len()
                && i[..8] == sent[..8]
                && i[9..10] == sent[9..10]
                && i[12..] == sent[12..]
        });
        let on_wire = on_wire.expect("the echo request, byte for byte, on the wire");
        assert_eq!(on_wire[8], 62, "wire TTL");
    }
    requests.len()
}

/// A destination of the cluster network that no node holds, from `pod`: `ping` prints
/// "Destination Net Unreachable" from `answered_by` (its node's flannel0 address) at once,
/// and a TCP connect fails at once with ENETUNREACH (not after a timeout).
pub fn assert_net_unreachable_at_once(pod: &Pod, dst: &str, answered_by: &str) {
    let started = Instant::now();
    let out = pod.ns.exec(&["ping", "-n", "-c", "1", "-W", "5", dst]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("From {answered_by}"))
            && text.contains("Destination Net Unreachable"),
        "ping {dst}: {text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered at once"
    );
    let started = Instant::now();
    let to: SocketAddr = format!("{dst}:80").parse().expect("an IPv4 address");
    let connect = in_netns(&pod.ns, move || {
        TcpStream::connect_timeout(&to, Duration::from_secs(5)).map(|_| ())
    })
    .join()
    .expect("the connecting thread");
    let err = connect.expect_err("a connect to nowhere fails");
    assert_eq!(err.raw_os_error(), Some(libc::ENETUNREACH), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "failed at once: {err}"
    );
}
