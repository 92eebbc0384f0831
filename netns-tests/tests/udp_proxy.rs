//! flannel's `udp` backend data path (`crates/udp-proxy`), end to end: simulated nodes
//! (namespaces on one underlay bridge, their veths segmenting and coalescing as NICs do), each
//! with flannel0 set up as flanneld sets it and a pod behind `cni0`, the engine running
//! standalone (`udp-proxy-node`) with a static route table. Checked: pods reach each other
//! with their own source address and a TTL of 64 arriving as 60; the underlay carries only
//! UDP from port 8285 to port 8285 whose payload is the pod's packet byte for byte but the TTL
//! and its checksum; a destination without a route is answered with ICMP network unreachable
//! that reaches the pod at once (ping and TCP connect); a route removed at run time is
//! forgotten; TCP moves data without a retransmission storm; datagrams flanneld's proxy would
//! have mishandled are dropped and counted; the fast path and the per-packet path carry the
//! same traffic, to each other too, on a device one left and the other reuses.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

use netns_tests::cluster::{assert_ping, capture, iperf, udp_source_seen, wait_until, Pod};
use netns_tests::udp_proxy::Mode::{Fast, FastWithout, PerPacket};
use netns_tests::udp_proxy::{
    assert_net_unreachable_at_once, echo_requests_carried_byte_for_byte, in_netns, inner_packets,
    internet_sum, missing_tools, peer_routes, UdpCluster, MTU, PORT,
};
use netns_tests::{kernel_has, require_driver, require_root};

fn driver() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_udp-proxy-node"))
}

/// Skips unless root, TUN and the tools are here.
macro_rules! require_udp_backend {
    () => {
        require_root!();
        require_driver!(kernel_has("tap"), "TUN/TAP driver");
        if let Some(why) = missing_tools() {
            eprintln!("skipping: {why}");
            return;
        }
    };
}

/// Sends `data` over one TCP connection from `client` to `server` (port 5001); returns what
/// the server read.
fn tcp_transfer(client: &Pod, server: &Pod, data: Vec<u8>) -> Vec<u8> {
    let addr: SocketAddr = format!("{}:5001", server.ip).parse().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = in_netns(&server.ns, move || {
        let listener = TcpListener::bind(addr).expect("bind in the server pod");
        ready_tx.send(()).unwrap();
        let (mut conn, _) = listener.accept().expect("accept");
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).expect("read the transfer");
        got
    });
    ready_rx.recv().unwrap();
    in_netns(&client.ns, move || {
        let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
        // A stalled path fails the test in seconds, not after TCP's own timeouts.
        conn.set_write_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        conn.write_all(&data).expect("send the transfer");
    })
    .join()
    .unwrap();
    reader.join().unwrap()
}

fn patterned(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn pods_talk_across_nodes_in_flanneld_wire_format() {
    require_udp_backend!();
    let c = UdpCluster::start(driver(), "udpw", &[Fast, Fast, Fast]);
    assert!(
        c.proxies[0].datapath.starts_with("fast"),
        "{}",
        c.proxies[0].datapath
    );
    let p = &c.pods;
    for (a, b) in [(0, 1), (0, 2), (2, 1), (1, 0)] {
        assert_ping(&p[a], &p[b]);
    }
    let out = p[0]
        .ns
        .exec_ok(&["ping", "-n", "-c", "1", "-W", "2", &p[1].ip]);
    assert!(
        out.contains("ttl=60"),
        "TTL 64 arrives as 60 (two kernels, two proxies): {out}"
    );
    assert_eq!(
        udp_source_seen(&p[1].ns, &p[0].ns, &p[1].ip),
        Some(p[0].ip.parse().unwrap()),
        "the pod's own source address arrives"
    );

    let data = patterned(1 << 20, 7);
    let mut from_pod = Vec::new();
    let mut received = Vec::new();
    let wire = capture(c.switch(), || {
        from_pod = capture(&p[0].ns, || {
            p[0].ns.exec_ok(&[
                "ping", "-n", "-c", "2", "-i", "0.2", "-s", "1000", "-p", "5a5b5c5d", &p[1].ip,
            ]);
            let udp = format!("echo udp-through-flannel0 > /dev/udp/{}/9999", p[2].ip);
            p[0].ns.exec_ok(&["bash", "-c", &udp]);
        });
        received = tcp_transfer(&p[0], &p[1], data.clone());
    });
    assert!(
        received == data,
        "the TCP stream arrived whole and in order"
    );
    let inner = inner_packets(&wire);
    let count = |proto: u8| inner.iter().filter(|i| i[9] == proto).count();
    assert!(count(6) > 100, "TCP segments on the wire: {}", count(6));
    assert!(count(17) >= 1 && count(1) >= 4, "UDP and ICMP on the wire");
    assert!(
        inner.iter().all(|i| i[8] == 62),
        "inner TTLs are the pods' 64 less two (their node's kernel, the engine)"
    );
    // Byte for byte: each echo request the pod sent is on the wire, TTL and checksum aside.
    assert_eq!(
        echo_requests_carried_byte_for_byte(&from_pod, &p[0].ip, &inner),
        2,
        "the pod's two echo requests"
    );
}

#[test]
fn unknown_destinations_get_net_unreachable_at_once_and_routes_change_at_run_time() {
    require_udp_backend!();
    let mut c = UdpCluster::start(driver(), "udpi", &[Fast, Fast]);
    // Strict reverse-path filtering everywhere: accept_local on flannel0 must still do.
    for ns in [&c.nodes[0].ns, &c.pods[0].ns] {
        for key in [
            "net.ipv4.conf.all.rp_filter=1",
            "net.ipv4.conf.default.rp_filter=1",
        ] {
            ns.exec_ok(&["sysctl", "-q", "-w", key]);
        }
    }
    c.nodes[0]
        .ns
        .exec_ok(&["sysctl", "-q", "-w", "net.ipv4.conf.flannel0.rp_filter=1"]);
    let (pod, other) = (&c.pods[0], &c.pods[1]);
    assert_ping(pod, other);

    assert_net_unreachable_at_once(pod, "10.244.99.9", "10.244.1.0");

    let stats = c.proxies[0].stats();
    assert!(stats["drops"]["no_route"].as_u64() >= Some(2), "{stats}");
    assert!(stats["icmp_unreachable"].as_u64() >= Some(2), "{stats}");

    // The peer's route goes at run time: its pod is unreachable, at once; then it comes back.
    c.proxies[0].set_routes(&[]);
    let out = pod
        .ns
        .exec(&["ping", "-n", "-c", "1", "-W", "5", &other.ip]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Destination Net Unreachable"),
        "a removed route is forgotten"
    );
    let routes = peer_routes(&c.nodes, 0);
    c.proxies[0].set_routes(&routes);
    assert_ping(pod, other);
}

#[test]
fn tcp_through_the_fast_path_moves_data_without_a_retransmission_storm() {
    require_udp_backend!();
    let mut c = UdpCluster::start(driver(), "udpt", &[Fast, Fast]);
    assert_ping(&c.pods[0], &c.pods[1]);
    let run = iperf(&c.pods[1], &c.pods[0], 3).expect("iperf3 through the fast path");
    eprintln!(
        "fast path: {:.2} Gbit/s, {} retransmits; {}",
        run.bits_per_second / 1e9,
        run.retransmits,
        c.proxies[0].datapath
    );
    assert!(run.bits_per_second > 1e6, "data moves: {run:?}");
    let segments = run.bytes / 1400.0;
    assert!(
        (run.retransmits as f64) < segments / 100.0,
        "retransmits under 1% of the segments: {run:?}"
    );
    let (sender, receiver) = (c.proxies[0].stats(), c.proxies[1].stats());
    if sender["datapath"]["tun_tso"] == true {
        assert!(
            sender["super_packets_split"].as_u64() > Some(0),
            "TSO super-packets were cut: {sender}"
        );
    }
    if receiver["datapath"]["udp_gro"] == true {
        // recvmmsg takes at most 8 messages a call: more packets a call than that means the
        // kernel coalesced datagrams (UDP GRO) and the engine split them.
        let per_call = receiver["received"]["packets"].as_f64().unwrap()
            / receiver["syscalls"]["udp_recvs"].as_f64().unwrap().max(1.0);
        assert!(
            per_call > 8.0,
            "{per_call:.1} packets per recvmmsg: {receiver}"
        );
    }
    if receiver["datapath"]["vnet_hdr"] == true {
        assert!(
            receiver["segments_coalesced"].as_u64() > Some(0),
            "segments coalesced into super-packets: {receiver}"
        );
    }
    for s in [&sender, &receiver] {
        for (why, n) in s["drops"].as_object().unwrap() {
            if why != "not_ipv4" {
                assert_eq!(n, 0, "dropped as {why}: {s}");
            }
        }
    }
}

#[test]
fn per_packet_path_carries_the_same_traffic_one_packet_per_call() {
    require_udp_backend!();
    let mut c = UdpCluster::start(driver(), "udpp", &[PerPacket, PerPacket]);
    assert!(c.proxies[0].datapath.starts_with("per-packet"));
    assert_ping(&c.pods[0], &c.pods[1]);
    let out = c.pods[0]
        .ns
        .exec_ok(&["ping", "-n", "-c", "1", "-W", "2", &c.pods[1].ip]);
    assert!(out.contains("ttl=60"), "{out}");
    assert_eq!(
        udp_source_seen(&c.pods[1].ns, &c.pods[0].ns, &c.pods[1].ip),
        Some(c.pods[0].ip.parse().unwrap())
    );
    let data = patterned(1 << 20, 11);
    let wire = capture(c.switch(), || {
        assert!(tcp_transfer(&c.pods[0], &c.pods[1], data.clone()) == data);
    });
    assert!(inner_packets(&wire).iter().filter(|i| i[9] == 6).count() > 100);
    let run = iperf(&c.pods[1], &c.pods[0], 2).expect("iperf3 through the per-packet path");
    eprintln!(
        "per-packet path: {:.2} Gbit/s, {} retransmits",
        run.bits_per_second / 1e9,
        run.retransmits
    );
    assert!(run.bits_per_second > 1e6, "data moves: {run:?}");
    let (sender, receiver) = (c.proxies[0].stats(), c.proxies[1].stats());
    let sent = sender["sent"]["packets"].as_u64().unwrap();
    assert_eq!(
        sender["syscalls"]["udp_sends"].as_u64(),
        Some(sent),
        "one sendto each"
    );
    let got = receiver["received"]["packets"].as_u64().unwrap();
    assert_eq!(
        receiver["syscalls"]["tun_writes"].as_u64(),
        Some(got),
        "one write each"
    );
    assert_eq!(sender["super_packets_split"], 0);
    assert_eq!(receiver["segments_coalesced"], 0);
}

#[test]
fn fast_and_per_packet_nodes_interoperate_and_share_a_device_across_restarts() {
    require_udp_backend!();
    // Node 2 plays flanneld's proxy: plain TUN writes, so its kernel checks every checksum
    // the fast node computed while cutting super-packets.
    let mut c = UdpCluster::start(driver(), "udpx", &[Fast, PerPacket]);
    let (a, b) = (&c.pods[0], &c.pods[1]);
    assert_ping(a, b);
    let data = patterned(4 << 20, 3);
    assert!(
        tcp_transfer(a, b, data.clone()) == data,
        "fast -> per-packet"
    );
    assert!(
        tcp_transfer(b, a, data.clone()) == data,
        "per-packet -> fast"
    );

    // Swap the paths on the same (persistent) flannel0 devices: the per-packet engine must
    // turn off the offloads the fast one left.
    c.stop_engines();
    for n in &c.nodes {
        assert!(
            n.ns.link("flannel0").is_some(),
            "flannel0 outlives its engine"
        );
    }
    c.start_engines(driver(), &[PerPacket, Fast]);
    let (a, b) = (&c.pods[0], &c.pods[1]);
    assert_ping(a, b);
    assert!(
        tcp_transfer(a, b, data.clone()) == data,
        "per-packet -> fast, swapped"
    );
    assert!(
        tcp_transfer(b, a, data.clone()) == data,
        "fast -> per-packet, swapped"
    );
    let stats = c.proxies[0].stats();
    assert_eq!(
        stats["super_packets_split"], 0,
        "no super-packet reached the per-packet engine"
    );
    assert_eq!(stats["drops"]["malformed"], 0, "{stats}");
    assert_eq!(stats["drops"]["oversize"], 0, "{stats}");
}

#[test]
fn each_fallback_of_the_fast_path_carries_the_traffic() {
    require_udp_backend!();
    let mut c = UdpCluster::new("udpb", 2);
    let data = patterned(2 << 20, 5);
    for (without, says) in [
        ("vnet-hdr", "virtio-net header off, TSO off, USO off"),
        ("udp-gso,udp-gro", "UDP GSO off, UDP GRO off"),
        ("mmsg", "sendmmsg/recvmmsg off"),
        (
            "vnet-hdr,udp-gso,udp-gro,mmsg",
            "header off, TSO off, USO off, TCP coalescing to TUN off; sendmmsg/recvmmsg off, UDP GSO off, UDP GRO off",
        ),
    ] {
        // Node 1 without the features, node 2 with all: both directions meet each fallback.
        c.start_engines(driver(), &[FastWithout(without), Fast]);
        let datapath = c.proxies[0].datapath.clone();
        assert!(datapath.contains(says), "without {without}: {datapath}");
        let (a, b) = (&c.pods[0], &c.pods[1]);
        assert_ping(a, b);
        assert!(tcp_transfer(a, b, data.clone()) == data, "without {without}: out");
        assert!(tcp_transfer(b, a, data.clone()) == data, "without {without}: in");
        let stats = c.proxies[0].stats();
        for why in ["malformed", "oversize", "send_failed", "tun_write_failed"] {
            assert_eq!(stats["drops"][why], 0, "without {without}: {stats}");
        }
    }
}

#[test]
fn a_peer_behind_a_smaller_route_mtu_still_gets_everything() {
    require_udp_backend!();
    let mut c = UdpCluster::start(driver(), "udpm", &[Fast, Fast]);
    // The route to node 2 carries less than the 1500-byte datagrams: the kernel refuses the
    // segmented sends to it (EINVAL), which go again one per message and are fragmented, as
    // flanneld's datagrams are on such a path.
    let peer = format!("{}/32", c.nodes[1].ip);
    c.nodes[0]
        .ns
        .exec_ok(&["ip", "route", "add", &peer, "dev", "eth0", "mtu", "1400"]);
    let data = patterned(2 << 20, 9);
    let (a, b) = (&c.pods[0], &c.pods[1]);
    assert_ping(a, b);
    assert!(
        tcp_transfer(a, b, data.clone()) == data,
        "through the small route"
    );
    assert!(tcp_transfer(b, a, data.clone()) == data, "back");
    let stats = c.proxies[0].stats();
    assert_eq!(stats["drops"]["send_failed"], 0, "{stats}");
    assert_eq!(
        stats["datapath"]["udp_gso"], true,
        "one peer's route does not turn segmentation off: {stats}"
    );
}

/// A datagram sent to node 1's engine from the switch's address.
fn send_to_engine(c: &UdpCluster, payload: Vec<u8>) {
    let to: SocketAddr = format!("{}:{PORT}", c.nodes[0].ip).parse().unwrap();
    in_netns(c.switch(), move || {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.send_to(&payload, to).unwrap();
    })
    .join()
    .unwrap();
}

/// An IPv4/UDP packet from `src` to `dst`:`port` with `payload`, checksums filled in.
fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, port: u16, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let len = 28 + payload.len();
    let mut p = vec![0u8; 28];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = !internet_sum(&[&p[..20]]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&40000u16.to_be_bytes());
    p[22..24].copy_from_slice(&port.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(payload);
    let pseudo = [&p[12..20], &[0, 17], &p[24..26]].concat();
    let c = !internet_sum(&[&pseudo, &p[20..]]);
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn hand_made_datagrams_are_delivered_or_dropped_as_they_deserve() {
    require_udp_backend!();
    let mut c = UdpCluster::start(driver(), "udpd", &[Fast]);
    let pod_ip: Ipv4Addr = c.pods[0].ip.parse().unwrap();
    let remote: Ipv4Addr = "10.244.7.7".parse().unwrap();
    // A datagram as flanneld's proxy sends it reaches the pod, TTL decremented twice more
    // (the engine, the node's kernel).
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let listener = in_netns(&c.pods[0].ns, move || {
        let sock = UdpSocket::bind((pod_ip, 7070)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 64];
        sock.recv_from(&mut buf)
            .map(|(n, from)| (buf[..n].to_vec(), from))
    });
    ready_rx.recv().unwrap();
    send_to_engine(&c, udp_packet(remote, pod_ip, 7070, 9, b"from flanneld"));
    let (got, from) = listener.join().unwrap().expect("the pod got the datagram");
    assert_eq!(got, b"from flanneld");
    assert_eq!(from.ip().to_string(), remote.to_string());

    // The engine counts a batch after writing it: wait for the count of the delivered one.
    let mut before = c.proxies[0].stats();
    assert!(wait_until(Duration::from_secs(5), || {
        before = c.proxies[0].stats();
        before["received"]["packets"] == 1
    }));
    let elsewhere: Ipv4Addr = "10.244.9.9".parse().unwrap();
    send_to_engine(&c, udp_packet(remote, elsewhere, 7070, 9, b"relay me"));
    send_to_engine(&c, udp_packet(remote, pod_ip, 7070, 1, b"last hop"));
    send_to_engine(
        &c,
        udp_packet(remote, pod_ip, 7070, 9, &vec![0; MTU as usize]),
    );
    let mut v6 = vec![0u8; 60];
    v6[0] = 0x60;
    send_to_engine(&c, v6);
    send_to_engine(&c, vec![0x45, 0, 0]);
    // IPv6 that the kernel sends into flannel0 counts as not_ipv4 too: only at least one.
    let reasons = ["not_for_this_node", "ttl_expired", "oversize", "malformed"];
    let delta = |after: &serde_json::Value, why: &str| {
        after["drops"][why].as_u64().unwrap() - before["drops"][why].as_u64().unwrap()
    };
    let mut after = before.clone();
    assert!(
        wait_until(Duration::from_secs(5), || {
            after = c.proxies[0].stats();
            reasons.iter().all(|why| delta(&after, why) == 1) && delta(&after, "not_ipv4") >= 1
        }),
        "each counted once: before {before}, after {after}"
    );
    assert_eq!(after["received"]["packets"], before["received"]["packets"]);

    // The device deleted under the engine: it says so instead of spinning.
    c.nodes[0].ns.exec_ok(&["ip", "link", "del", "flannel0"]);
    assert!(
        wait_until(Duration::from_secs(5), || {
            after = c.proxies[0].stats();
            after["failure"]
                .as_str()
                .is_some_and(|f| f.contains("the device is gone"))
        }),
        "no failure reported: {after}"
    );
}
