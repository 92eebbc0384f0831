//! Test harness: throw-away network namespaces wired as a small node (pods behind a router or
//! on a bridge), servers and probes run on threads inside them (no helper process), and the
//! cluster model built in a few lines.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use netpolicy::{
    Cluster, IpBlock, LabelSelector, NamedPort, Namespace, Peer, Pod, Policy, PolicyPort, PortSpec,
    Protocol, Rule,
};

pub const PROBE_TIMEOUT: Duration = Duration::from_millis(400);

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

macro_rules! require_root {
    () => {
        if !common::is_root() {
            eprintln!("skipped: needs root (network namespaces)");
            return;
        }
    };
}
pub(crate) use require_root;

pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A named netns (`ip netns add`), deleted on drop.
pub struct Ns {
    pub name: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Ns {
    pub fn new(tag: &str) -> Ns {
        let name = format!(
            "npnft-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        run(&["ip", "netns", "add", &name]);
        let ns = Ns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    pub fn netns(&self) -> netkit::Netns {
        netkit::Netns::open(format!("/run/netns/{}", self.name)).expect("open netns")
    }

    pub fn socket(&self) -> netkit::netfilter::nf_tables::Socket {
        netkit::netfilter::nf_tables::Socket::open_in(&self.netns()).expect("nft socket")
    }

    /// Runs `f` on a new thread inside this netns.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let ns = self.netns();
        std::thread::spawn(move || {
            let _guard = ns.enter().expect("enter netns");
            f()
        })
    }

    pub fn in_ns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.spawn(f).join().expect("thread in netns")
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// TCP and UDP echo servers on some ports of every address of a netns; stopped on drop.
pub struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Servers {
    pub fn start(ns: &Ns, tcp: &[u16], udp: &[u16]) -> Servers {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &port in tcp {
            let stop = stop.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            threads.push(ns.spawn(move || {
                let l = TcpListener::bind(("::", port)).expect("tcp bind");
                l.set_nonblocking(true).unwrap();
                tx.send(()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(false).unwrap();
                            s.set_read_timeout(Some(PROBE_TIMEOUT)).unwrap();
                            let mut b = [0u8; 64];
                            if let Ok(n) = s.read(&mut b) {
                                let _ = s.write_all(&b[..n]);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }));
            rx.recv().unwrap();
        }
        for &port in udp {
            let stop = stop.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            threads.push(ns.spawn(move || {
                let s = UdpSocket::bind(("::", port)).expect("udp bind");
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                tx.send(()).unwrap();
                let mut b = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = s.recv_from(&mut b) {
                        let _ = s.send_to(&b[..n], from);
                    }
                }
            }));
            rx.recv().unwrap();
        }
        Servers { stop, threads }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Whether a TCP connection from `ns` to `to:port` opens and echoes (the reply passes).
pub fn tcp_ok(ns: &Ns, to: IpAddr, port: u16) -> bool {
    ns.in_ns(move || {
        let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::new(to, port), PROBE_TIMEOUT)
        else {
            return false;
        };
        s.set_read_timeout(Some(PROBE_TIMEOUT)).unwrap();
        if s.write_all(b"ping").is_err() {
            return false;
        }
        let mut b = [0u8; 4];
        s.read_exact(&mut b).is_ok() && &b == b"ping"
    })
}

/// Whether a UDP datagram from `ns` to `to:port` is echoed back.
pub fn udp_ok(ns: &Ns, to: IpAddr, port: u16) -> bool {
    ns.in_ns(move || {
        let bind: IpAddr = if to.is_ipv6() {
            "::".parse().unwrap()
        } else {
            "0.0.0.0".parse().unwrap()
        };
        let s = UdpSocket::bind((bind, 0)).unwrap();
        s.set_read_timeout(Some(PROBE_TIMEOUT)).unwrap();
        s.send_to(b"ping", (to, port)).unwrap();
        let mut b = [0u8; 8];
        matches!(s.recv_from(&mut b), Ok((4, _)))
    })
}

/// A node: `pods` netns each with one veth `eth0`, wired either to a router netns (each pod
/// in its own /24 and /64, routed) or to a bridge `cni0` in the node netns (one /24 and /64).
pub struct Node {
    pub node: Ns,
    pub pods: Vec<(Ns, IpAddr, IpAddr)>,
}

/// A new netns `name` wired to `node` by a veth pair: the node's end `host` (left down and
/// without an address), the pod's end `eth0`, up with `v4` and `v6` (each with its prefix).
fn veth_pod(node: &Ns, name: &str, host: &str, v4: &str, v6: &str) -> Ns {
    let pod = Ns::new(name);
    let peer = format!("{host}-pod");
    node.exec(&[
        "ip", "link", "add", host, "type", "veth", "peer", "name", &peer,
    ]);
    node.exec(&["ip", "link", "set", &peer, "netns", &pod.name]);
    pod.exec(&["ip", "link", "set", &peer, "name", "eth0"]);
    pod.exec(&["ip", "addr", "add", v4, "dev", "eth0"]);
    pod.exec(&["ip", "addr", "add", v6, "dev", "eth0", "nodad"]);
    pod.exec(&["ip", "link", "set", "eth0", "up"]);
    pod
}

/// Asserts that `listing` (an nft listing) contains each of `wanted`.
pub fn assert_listing_has(listing: &str, wanted: &[&str]) {
    for want in wanted {
        assert!(listing.contains(want), "missing {want:?} in\n{listing}");
    }
}

/// Waits until `ns` reaches `to` (IPv6 addresses and neighbours take a moment to be usable).
fn wait_reachable(ns: &Ns, to: &str) {
    for _ in 0..50 {
        let ok = Command::new("ip")
            .args(["netns", "exec", &ns.name, "ping", "-c1", "-W1", "-q", to])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{} cannot reach {to}", ns.name);
}

impl Node {
    /// Waits until every pod reaches the first pod on both families (no table yet).
    fn settle(&self) {
        let first = &self.pods[0];
        for p in &self.pods[1..] {
            wait_reachable(&p.0, &first.1.to_string());
            wait_reachable(&p.0, &first.2.to_string());
        }
    }

    pub fn routed(count: usize) -> Node {
        let node = Ns::new("router");
        node.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        node.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        let mut pods = Vec::new();
        for i in 0..count {
            let n = i + 1;
            let host = format!("r{n}");
            let pod = veth_pod(
                &node,
                &format!("pod{i}"),
                &host,
                &format!("10.77.{n}.2/24"),
                &format!("fd77:{n}::2/64"),
            );
            node.exec(&[
                "ip",
                "addr",
                "add",
                &format!("10.77.{n}.1/24"),
                "dev",
                &host,
            ]);
            node.exec(&[
                "ip",
                "addr",
                "add",
                &format!("fd77:{n}::1/64"),
                "dev",
                &host,
                "nodad",
            ]);
            node.exec(&["ip", "link", "set", &host, "up"]);
            pod.exec(&[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &format!("10.77.{n}.1"),
            ]);
            pod.exec(&[
                "ip",
                "-6",
                "route",
                "add",
                "default",
                "via",
                &format!("fd77:{n}::1"),
            ]);
            let v4 = format!("10.77.{n}.2").parse().unwrap();
            let v6 = format!("fd77:{n}::2").parse().unwrap();
            pods.push((pod, v4, v6));
        }
        let node = Node { node, pods };
        node.settle();
        node
    }

    pub fn bridged(count: usize) -> Node {
        let node = Ns::new("bridge");
        node.exec(&["ip", "link", "add", "cni0", "type", "bridge"]);
        node.exec(&["ip", "link", "set", "cni0", "up"]);
        node.exec(&["ip", "addr", "add", "10.78.0.1/24", "dev", "cni0"]);
        // br_netfilter: bridged IPv4/IPv6 through the inet hooks.
        node.exec(&["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"]);
        node.exec(&["sysctl", "-qw", "net.bridge.bridge-nf-call-ip6tables=1"]);
        let mut pods = Vec::new();
        for i in 0..count {
            let n = i + 2;
            let host = format!("veth{n}");
            let pod = veth_pod(
                &node,
                &format!("bpod{i}"),
                &host,
                &format!("10.78.0.{n}/24"),
                &format!("fd78::{n}/64"),
            );
            node.exec(&["ip", "link", "set", &host, "master", "cni0", "up"]);
            let v4 = format!("10.78.0.{n}").parse().unwrap();
            let v6 = format!("fd78::{n}").parse().unwrap();
            pods.push((pod, v4, v6));
        }
        let node = Node { node, pods };
        node.settle();
        node
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(pairs),
        match_expressions: vec![],
    }
}

pub fn namespace(name: &str) -> Namespace {
    Namespace {
        name: name.into(),
        labels: labels(&[("kubernetes.io/metadata.name", name)]),
    }
}

pub fn pod(ns: &str, name: &str, app: &str, ips: &[IpAddr]) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        labels: labels(&[("app", app)]),
        ips: ips.to_vec(),
        host_network: false,
        ports: vec![],
    }
}

pub fn named_port(name: &str, protocol: Protocol, port: u16) -> NamedPort {
    NamedPort {
        name: name.into(),
        protocol,
        port,
    }
}

/// A policy selecting `app=<app>` of `ns`, for the given directions.
pub fn policy(ns: &str, name: &str, app: &str, ingress: Vec<Rule>, egress: Vec<Rule>) -> Policy {
    let mut types = vec![];
    types.push("Ingress".to_string());
    if !egress.is_empty() {
        types.push("Egress".to_string());
    }
    Policy {
        namespace: ns.into(),
        name: name.into(),
        pod_selector: selector(&[("app", app)]),
        policy_types: Some(types),
        ingress,
        egress,
    }
}

/// An egress-only policy.
pub fn egress_policy(ns: &str, name: &str, app: &str, egress: Vec<Rule>) -> Policy {
    Policy {
        namespace: ns.into(),
        name: name.into(),
        pod_selector: selector(&[("app", app)]),
        policy_types: Some(vec!["Egress".into()]),
        ingress: vec![],
        egress,
    }
}

pub fn from_app(app: &str) -> Peer {
    Peer {
        pod_selector: Some(selector(&[("app", app)])),
        ..Peer::default()
    }
}

pub fn block(cidr: &str, except: &[&str]) -> Peer {
    Peer {
        ip_block: Some(IpBlock {
            cidr: cidr.into(),
            except: except.iter().map(|s| s.to_string()).collect(),
        }),
        ..Peer::default()
    }
}

pub fn port(protocol: &str, port: u16, end: Option<u16>) -> PolicyPort {
    PolicyPort {
        protocol: Some(protocol.into()),
        port: Some(PortSpec::Number(port as i32)),
        end_port: end.map(|e| e as i32),
    }
}

pub fn named(protocol: &str, name: &str) -> PolicyPort {
    PolicyPort {
        protocol: Some(protocol.into()),
        port: Some(PortSpec::Name(name.into())),
        end_port: None,
    }
}

pub fn rule(peers: Vec<Peer>, ports: Vec<PolicyPort>) -> Rule {
    Rule { ports, peers }
}

pub fn compile(c: &Cluster) -> netpolicy::Plan {
    let out = netpolicy::compile(c);
    assert!(out.refused.is_empty(), "{:?}", out.refused);
    out.plan
}
