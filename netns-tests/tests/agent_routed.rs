//! `ferrocni-agent` with flannel's routed backends, `host-gw`, `wireguard` and `ipip`, and its
//! `udp` backend: three simulated nodes (namespaces on one underlay bridge) and a one-member etcd in the switch netns, all
//! made here. Each test checks what a cluster operator would: pods ping across nodes with
//! their own source address, the underlay carries only the backend's encapsulation (captured
//! on the switch), a node whose lease goes is dropped by the others, a restarted agent keeps
//! its key and lease, and iperf3 through the tunnel moves data at a sane rate.
//!
//! The kernel must have the driver (`wireguard`, `ipip`): without it the tests skip, and fail
//! under `FERROCNI_REQUIRE_DRIVERS=1` (the full-kernel run). host-gw needs none and udp only
//! TUN: they run everywhere.

use std::fs;
use std::net::Ipv4Addr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use netns_tests::agent_cluster::{
    have_tools, in_pod_network, iperf_rate, is_node, Cluster, FLANNELD_SUBNET,
};
use netns_tests::cluster::{self, capture, iperf, nth, wait_until, Node, CONVERGE};
use netns_tests::etcd::lease_key;
use netns_tests::udp_proxy;
use netns_tests::{kernel_has, require_driver, require_root, Netns};

fn wg_device(node: &Node, dev: &str) -> Option<netkit::wireguard::Device> {
    let ns = netkit::Netns::open(node.ns.path()).ok()?;
    netkit::wireguard::WgSocket::open_in(&ns)
        .ok()?
        .get_device(dev)
        .ok()
}

#[test]
fn wireguard_cluster_on_etcd() {
    require_root!();
    if !have_tools() {
        return;
    }
    require_driver!(kernel_has("wireguard"), "wireguard driver");
    let mut c = Cluster::start(
        "wg",
        r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":25}}"#,
    );
    wireguard_leases_keys_and_peers(&c);
    c.assert_full_mesh();
    c.assert_source_preserved();
    wireguard_node_set_up_as_flanneld(&mut c);
    only_wireguard_udp_between_the_nodes(&c);

    let rate = iperf_rate(&c.pods[1], &c.pods[0]);
    eprintln!("iperf3 through flannel-wg: {:.1} Mbit/s", rate / 1e6);
    assert!(rate > 1e6, "iperf3 through the tunnel: {rate} bit/s");

    // A restart keeps the key file, the device key and the lease.
    let key_before = fs::read_to_string(c.agents[0].key_file()).unwrap();
    c.assert_restart_keeps_lease();
    assert_eq!(
        fs::read_to_string(c.agents[0].key_file()).unwrap(),
        key_before
    );

    c.remove_node3(|n, subnet| {
        wg_device(n, "flannel-wg").is_some_and(|d| {
            d.peers.len() == 1
                && !d
                    .peers
                    .iter()
                    .any(|p| p.allowed_ips.iter().any(|a| a.to_string() == subnet))
        })
    });
}

/// The leases are flanneld's, with each node's public key; the device, MTU and key file are
/// flanneld's; node 1's peers are the two others, allowed IPs their subnets, endpoint
/// PublicIP:51820.
fn wireguard_leases_keys_and_peers(c: &Cluster) {
    // The leases are flanneld's, with each node's public key.
    for (i, subnet) in c.subnets.iter().enumerate() {
        let value = c.etcd.get(&lease_key(subnet)).expect("lease");
        let v: serde_json::Value = serde_json::from_str(&value).unwrap();
        assert_eq!(v["BackendType"], "wireguard", "{value}");
        assert_eq!(v["PublicIP"], c.nodes[i].ip);
        assert_eq!(v["BackendData"]["Port"], 51820, "{value}");
        let dev = wg_device(&c.nodes[i], "flannel-wg").expect("flannel-wg");
        let public = dev.public_key.expect("device key");
        assert_eq!(
            v["BackendData"]["PublicKey"],
            STANDARD.encode(public),
            "{value}"
        );
        assert_eq!(dev.listen_port, 51820);
        assert_eq!(
            c.agents[i].env_value("FLANNEL_MTU").as_deref(),
            Some("1420")
        );
        assert_eq!(c.nodes[i].ns.link("flannel-wg").unwrap()["mtu"], 1420);
        // The key file is flanneld's format: base64 of the private key, mode 0400.
        let text = fs::read_to_string(c.agents[i].key_file()).unwrap();
        assert_eq!(STANDARD.decode(&text).unwrap().len(), 32);
        assert_eq!(
            Some(STANDARD.decode(&text).unwrap()),
            dev.private_key.map(|k| k.to_vec())
        );
    }
    // Peers: the two others, allowed IPs = their subnets, endpoint = PublicIP:51820.
    let dev = wg_device(&c.nodes[0], "flannel-wg").unwrap();
    assert_eq!(dev.peers.len(), 2, "{dev:?}");
    for p in &dev.peers {
        assert_eq!(p.persistent_keepalive, 25);
        let ep = p.endpoint.expect("endpoint");
        assert_eq!(ep.port(), 51820);
        let i = c
            .nodes
            .iter()
            .position(|n| n.ip == ep.ip().to_string())
            .expect("a node");
        assert_eq!(
            p.allowed_ips
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>(),
            [c.subnets[i].clone()]
        );
    }
}

/// A node set up as flanneld sets up its own (key, port, address, route, one peer per lease)
/// with flanneld's lease: agents and it reach each other's pods; its lease gone, the agents
/// drop the peer again.
fn wireguard_node_set_up_as_flanneld(c: &mut Cluster) {
    let agent_keys: Vec<String> = c
        .subnets
        .iter()
        .map(|s| {
            let v: serde_json::Value =
                serde_json::from_str(&c.etcd.get(&lease_key(s)).unwrap()).unwrap();
            v["BackendData"]["PublicKey"].as_str().unwrap().to_string()
        })
        .collect();
    let flanneld_public = std::cell::RefCell::new(String::new());
    c.assert_flanneld_node(
        |node| {
            format!(
                r#"{{"PublicIP":"{}","PublicIPv6":null,"BackendType":"wireguard","BackendData":{{"PublicKey":"{}","Port":51820}}}}"#,
                node.ip,
                flanneld_public.borrow()
            )
        },
        |node, peers| {
            let ns = &node.ns;
            ns.exec_ok(&["ip", "link", "add", "flannel-wg", "type", "wireguard"]);
            ns.exec_ok(&["ip", "link", "set", "flannel-wg", "mtu", "1420"]);
            ns.exec_ok(&["ip", "addr", "add", "10.244.30.0/32", "dev", "flannel-wg"]);
            let kns = netkit::Netns::open(ns.path()).unwrap();
            let mut wg = netkit::wireguard::WgSocket::open_in(&kns).unwrap();
            let update = netkit::wireguard::DeviceUpdate {
                private_key: Some(netkit::wireguard::clamped([0x5a; 32])),
                listen_port: Some(51820),
                replace_peers: true,
                peers: peers
                    .iter()
                    .zip(&agent_keys)
                    .map(|((subnet, ip), key)| netkit::wireguard::PeerUpdate {
                        public_key: STANDARD.decode(key).unwrap().try_into().unwrap(),
                        remove: false,
                        preshared_key: None,
                        endpoint: Some(format!("{ip}:51820").parse().unwrap()),
                        persistent_keepalive: None,
                        allowed_ips: vec![subnet.parse().unwrap()],
                        replace_allowed_ips: true,
                    })
                    .collect(),
            };
            wg.set_device("flannel-wg", &update).unwrap();
            let public = wg.get_device("flannel-wg").unwrap().public_key.unwrap();
            *flanneld_public.borrow_mut() = STANDARD.encode(public);
            ns.exec_ok(&["ip", "link", "set", "flannel-wg", "up"]);
            ns.exec_ok(&[
                "ip", "route", "add", "10.244.0.0/16", "dev", "flannel-wg", "scope", "link",
            ]);
        },
    );
    // Its lease gone, the agents drop the peer again.
    assert!(wait_until(CONVERGE, || wg_device(
        &c.nodes[0],
        "flannel-wg"
    )
    .is_some_and(|d| d.peers.len() == 2)));
}

/// On the underlay: only WireGuard's UDP between the nodes, no pod address in clear.
fn only_wireguard_udp_between_the_nodes(c: &Cluster) {
    let pod0 = &c.pods[0];
    let seen = c.capture_pod_pings();
    let between_nodes: Vec<_> = seen
        .iter()
        .filter(|(s, d, ..)| is_node(*s) && is_node(*d))
        .collect();
    assert!(
        !between_nodes.is_empty(),
        "no node-to-node traffic captured"
    );
    for (s, d, proto, ihl, pkt) in &between_nodes {
        assert_eq!(
            *proto, 17,
            "{s} -> {d}: protocol {proto}, not WireGuard's UDP"
        );
        let ports = (
            u16::from_be_bytes([pkt[*ihl], pkt[ihl + 1]]),
            u16::from_be_bytes([pkt[ihl + 2], pkt[ihl + 3]]),
        );
        assert_eq!(ports, (51820, 51820), "{s} -> {d}");
        let p0: Ipv4Addr = pod0.ip.parse().unwrap();
        assert!(
            !pkt.windows(4).any(|w| w == p0.octets()),
            "pod address {p0} in clear inside {s} -> {d}"
        );
    }
    assert!(
        !seen
            .iter()
            .any(|(s, d, ..)| in_pod_network(*s) || in_pod_network(*d)),
        "a pod address crossed the underlay unencrypted"
    );
}

#[test]
fn ipip_cluster_on_etcd() {
    require_root!();
    if !have_tools() {
        return;
    }
    require_driver!(kernel_has("ipip"), "ipip driver");
    let mut c = Cluster::start(
        "ipip",
        r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{"Type":"ipip"}}"#,
    );
    for (i, subnet) in c.subnets.iter().enumerate() {
        let value = c.etcd.get(&lease_key(subnet)).expect("lease");
        assert_eq!(
            value,
            format!(
                r#"{{"PublicIP":"{}","PublicIPv6":null,"BackendType":"ipip"}}"#,
                c.nodes[i].ip
            )
        );
        assert_eq!(
            c.agents[i].env_value("FLANNEL_MTU").as_deref(),
            Some("1480")
        );
        let link =
            c.nodes[i]
                .ns
                .exec_json(&["ip", "-j", "-d", "link", "show", "dev", "flannel.ipip"]);
        let link = &link[0];
        assert_eq!(link["mtu"], 1480);
        assert_eq!(link["linkinfo"]["info_kind"], "ipip");
        assert_eq!(link["linkinfo"]["info_data"]["local"], c.nodes[i].ip);
        // The kernel's IPv6 link-local address aside, only the node's /32.
        let v4: Vec<String> = c.nodes[i]
            .ns
            .addresses("flannel.ipip")
            .into_iter()
            .filter(|a| !a.contains(':'))
            .collect();
        assert_eq!(v4, [format!("{}/32", nth(subnet, 0))]);
    }
    // node 1: one onlink route per peer through the tunnel.
    for j in [1, 2] {
        let routes = c.nodes[0].routes(&[&c.subnets[j]]);
        assert!(
            routes.iter().any(|r| r["gateway"] == c.nodes[j].ip.as_str()
                && r["dev"] == "flannel.ipip"
                && r["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "onlink"))),
            "{routes:?}"
        );
    }
    c.assert_full_mesh();
    c.assert_source_preserved();

    // A node set up as flanneld sets up its own, with flanneld's lease.
    c.assert_flanneld_node(
        |node| {
            format!(
                r#"{{"PublicIP":"{}","PublicIPv6":null,"BackendType":"ipip"}}"#,
                node.ip
            )
        },
        |node, peers| {
            let ns = &node.ns;
            ns.exec_ok(&[
                "ip",
                "link",
                "add",
                "flannel.ipip",
                "type",
                "ipip",
                "local",
                &node.ip,
            ]);
            ns.exec_ok(&["ip", "link", "set", "flannel.ipip", "mtu", "1480", "up"]);
            ns.exec_ok(&["ip", "addr", "add", "10.244.30.0/32", "dev", "flannel.ipip"]);
            for (subnet, ip) in peers {
                ns.exec_ok(&[
                    "ip",
                    "route",
                    "add",
                    subnet,
                    "via",
                    ip,
                    "dev",
                    "flannel.ipip",
                    "onlink",
                ]);
            }
        },
    );
    assert!(wait_until(CONVERGE, || !c.nodes[0]
        .route_dsts("flannel.ipip")
        .iter()
        .any(|d| d == FLANNELD_SUBNET)));

    // On the underlay: IP-in-IP (protocol 4) between the nodes, the pod addresses inside.
    let pod0 = &c.pods[0];
    let seen = c.capture_pod_pings();
    let between_nodes: Vec<_> = seen
        .iter()
        .filter(|(s, d, ..)| is_node(*s) && is_node(*d))
        .collect();
    assert!(
        !between_nodes.is_empty(),
        "no node-to-node traffic captured"
    );
    let mut inner_seen = false;
    for (s, d, proto, ihl, pkt) in &between_nodes {
        assert_eq!(*proto, 4, "{s} -> {d}: protocol {proto}, not IP-in-IP");
        let inner = &pkt[*ihl..];
        let inner_src = Ipv4Addr::new(inner[12], inner[13], inner[14], inner[15]);
        assert!(in_pod_network(inner_src), "inner source {inner_src}");
        inner_seen |= inner_src.to_string() == pod0.ip;
    }
    assert!(
        inner_seen,
        "pod 1's packets were not seen inside the tunnel"
    );
    assert!(
        !seen
            .iter()
            .any(|(s, d, ..)| in_pod_network(*s) || in_pod_network(*d)),
        "a pod packet crossed the underlay unencapsulated"
    );

    let rate = iperf_rate(&c.pods[1], &c.pods[0]);
    eprintln!("iperf3 through flannel.ipip: {:.1} Mbit/s", rate / 1e6);
    assert!(rate > 1e6, "iperf3 through the tunnel: {rate} bit/s");

    c.assert_restart_keeps_lease();
    c.remove_node3(|n, subnet| !n.route_dsts("flannel.ipip").iter().any(|d| d == subnet));
}

/// ipip with `DirectRouting`: the nodes share the underlay's subnet, so each peer is reached by
/// a plain route through the underlay interface (as flanneld does) and nothing is encapsulated.
#[test]
fn ipip_direct_routing_on_etcd() {
    require_root!();
    if !have_tools() {
        return;
    }
    require_driver!(kernel_has("ipip"), "ipip driver");
    let mut c = Cluster::start(
        "ipipdr",
        r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{"Type":"ipip","DirectRouting":true}}"#,
    );
    for j in [1, 2] {
        let routes = c.nodes[0].routes(&[&c.subnets[j]]);
        assert!(
            routes
                .iter()
                .any(|r| r["gateway"] == c.nodes[j].ip.as_str() && r["dev"] == "eth0"),
            "node 1 has no direct route to {}: {routes:?}",
            c.subnets[j]
        );
        assert!(
            !c.nodes[0]
                .route_dsts("flannel.ipip")
                .iter()
                .any(|d| d == &c.subnets[j]),
            "{} also routed through the tunnel",
            c.subnets[j]
        );
    }
    c.assert_full_mesh();
    c.assert_source_preserved();

    // On the underlay: the pods' own packets, never IP-in-IP.
    c.assert_routed_unencapsulated();

    c.remove_node3(|n, subnet| !n.routes(&[subnet]).iter().any(|r| r["dev"] == "eth0"));
}

/// host-gw: no encapsulation and no device. Each peer is reached by a plain route via its
/// address on the shared underlay segment, as flanneld's host-gw routes it; pods get the
/// underlay's full MTU.
#[test]
fn host_gw_cluster_on_etcd() {
    require_root!();
    if !have_tools() {
        return;
    }
    let mut c = Cluster::start(
        "hostgw",
        r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{"Type":"host-gw"}}"#,
    );
    for (i, subnet) in c.subnets.iter().enumerate() {
        let value = c.etcd.get(&lease_key(subnet)).expect("lease");
        assert_eq!(
            value,
            format!(
                r#"{{"PublicIP":"{}","PublicIPv6":null,"BackendType":"host-gw"}}"#,
                c.nodes[i].ip
            ),
            "flanneld's host-gw lease, byte for byte"
        );
        assert_eq!(
            c.agents[i].env_value("FLANNEL_MTU").as_deref(),
            Some("1500"),
            "no overhead"
        );
        assert!(
            c.nodes[i].ns.link("flannel.1").is_none(),
            "host-gw makes no device"
        );
    }
    for j in [1, 2] {
        let routes = c.nodes[0].routes(&[&c.subnets[j]]);
        assert!(
            routes
                .iter()
                .any(|r| r["gateway"] == c.nodes[j].ip.as_str() && r["dev"] == "eth0"),
            "node 1 has no route to {} via node {}: {routes:?}",
            c.subnets[j],
            j + 1
        );
    }
    c.assert_full_mesh();
    c.assert_source_preserved();

    // On the underlay: the pods' own packets, nothing encapsulated.
    c.assert_routed_unencapsulated();

    c.assert_restart_keeps_lease();
    c.remove_node3(|n, subnet| n.routes(&[subnet]).is_empty());
}

/// `ping -6` once from `from` to `ip`, retried until CONVERGE.
fn assert_ping6(from: &Netns, ip: &str) {
    assert!(
        wait_until(CONVERGE, || from
            .exec(&["ping", "-6", "-c", "1", "-W", "1", ip])
            .status
            .success()),
        "{} cannot reach {ip} over IPv6",
        from.name()
    );
}

/// Received bytes of `dev` in `node`.
fn rx_bytes(node: &Node, dev: &str) -> u64 {
    let v = node
        .ns
        .exec_json(&["ip", "-j", "-s", "link", "show", "dev", dev]);
    v[0]["stats64"]["rx"]["bytes"].as_u64().unwrap_or(0)
}

/// A dual-stack network on the wireguard backend in its default mode (`separate`): each node
/// has `flannel-wg` for IPv4 and `flannel-wg-v6` (port 51821, peers at their IPv6 underlay
/// addresses) for IPv6, and pods reach each other over both families.
#[test]
fn wireguard_dual_stack_on_etcd() {
    require_root!();
    if !have_tools() {
        return;
    }
    require_driver!(kernel_has("wireguard"), "wireguard driver");
    let c = Cluster::start(
        "wg6",
        r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"wireguard"}}"#,
    );
    // Each node's IPv6 pod subnet (from subnet.env), its gateway on cni0 and one pod address.
    let mut v6 = Vec::new();
    for (i, a) in c.agents.iter().enumerate() {
        let first = a
            .env_value("FLANNEL_IPV6_SUBNET")
            .unwrap_or_else(|| panic!("node {} has no FLANNEL_IPV6_SUBNET:\n{}", i + 1, a.log()));
        let (gw, len) = first.split_once('/').expect("a CIDR");
        let gw: std::net::Ipv6Addr = gw.parse().expect("an IPv6 address");
        let pod = std::net::Ipv6Addr::from(u128::from(gw) + 1);
        let subnet = std::net::Ipv6Addr::from(u128::from(gw) - 1);
        c.nodes[i].ns.exec_ok(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{gw}/{len}"),
            "dev",
            "cni0",
            "nodad",
        ]);
        let ns = &c.pods[i].ns;
        ns.exec_ok(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{pod}/{len}"),
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.exec_ok(&[
            "ip",
            "-6",
            "route",
            "add",
            "default",
            "via",
            &gw.to_string(),
        ]);
        // A dual-stack lease's key names both subnets.
        let key = format!("{}&{subnet}-{len}", lease_key(&c.subnets[i]));
        let value = c.etcd.get(&key).expect("lease");
        assert!(
            value.contains(&format!(r#""PublicIPv6":"{}""#, c.nodes[i].ip6))
                && value.contains(r#""BackendV6Data":{"PublicKey":"#),
            "node {}'s lease: {value}",
            i + 1
        );
        v6.push((format!("{subnet}/{len}"), pod.to_string()));
    }
    for (i, node) in c.nodes.iter().enumerate() {
        let dev = wg_device(node, "flannel-wg-v6").expect("flannel-wg-v6");
        assert_eq!(dev.listen_port, 51821);
        assert_eq!(dev.peers.len(), 2, "{:?}", dev.peers);
        for (j, other) in c.nodes.iter().enumerate() {
            if i == j {
                continue;
            }
            let want: std::net::SocketAddr = format!("[{}]:51821", other.ip6).parse().unwrap();
            let peer = dev
                .peers
                .iter()
                .find(|p| p.endpoint == Some(want))
                .unwrap_or_else(|| panic!("node {} has no IPv6 peer at {want}", i + 1));
            assert_eq!(
                peer.allowed_ips,
                vec![v6[j].0.parse::<netkit::ipnetwork::IpNetwork>().unwrap()]
            );
        }
        assert_eq!(
            wg_device(node, "flannel-wg")
                .expect("flannel-wg")
                .peers
                .len(),
            2
        );
    }
    c.assert_full_mesh();
    let before = rx_bytes(&c.nodes[1], "flannel-wg-v6");
    for (i, from) in c.pods.iter().enumerate() {
        for (j, (_, to)) in v6.iter().enumerate() {
            if i != j {
                assert_ping6(&from.ns, to);
            }
        }
    }
    assert!(
        rx_bytes(&c.nodes[1], "flannel-wg-v6") > before,
        "IPv6 pod traffic did not come in through flannel-wg-v6"
    );
}

/// The agents' metrics port in the udp tests (each node is a netns of its own).
const METRICS_PORT: u16 = 9471;

/// A udp network: flannel's `udp` backend (port 8285 by default) on the agents' subnets.
const UDP_CONFIG: &str = r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{"Type":"udp"}}"#;

/// A udp cluster (agents not started yet, each with its metrics on [`METRICS_PORT`]), or
/// `None` (after saying why) when the tools the udp tests need are missing.
fn udp_cluster(tag: &str) -> Option<Cluster> {
    if !have_tools() {
        return None;
    }
    if let Some(why) = udp_proxy::missing_tools() {
        eprintln!("skipping: {why}");
        return None;
    }
    let mut c = Cluster::new(tag, UDP_CONFIG);
    for a in &mut c.agents {
        a.extra.push(format!("--metrics-port={METRICS_PORT}"));
    }
    Some(c)
}

/// The value of `sample` (name and labels) on `node`'s agent's /metrics, once it is there.
fn agent_sample(node: &Node, sample: &str) -> Option<f64> {
    cluster::sample(
        &cluster::http_get(&node.ns, METRICS_PORT, "/metrics")?,
        sample,
    )
}

/// flannel0 on `node` as flanneld sets it up for `lease`, with our transmit queue.
fn assert_flannel0(node: &Node, lease: &str, mtu: u32) {
    let link = node.ns.link("flannel0").expect("flannel0");
    assert_eq!(link["mtu"], mtu, "{link}");
    assert_eq!(link["txqlen"], 2000, "{link}");
    let v4: Vec<String> = node
        .ns
        .addresses("flannel0")
        .into_iter()
        .filter(|a| !a.contains(':'))
        .collect();
    assert_eq!(v4, [format!("{}/32", nth(lease, 0))]);
    assert_eq!(node.route_dsts("flannel0"), ["10.244.0.0/16"]);
}

/// Gives every node's underlay link NIC-like segmentation and coalescing (a veth passes one
/// 64 KiB GSO datagram unsplit, which no wire does) and every pod flannel0's MTU, as the
/// CNI config would from FLANNEL_MTU.
fn udp_wire_and_pod_mtu(c: &Cluster, mtus: &[u32]) {
    for (i, node) in c.nodes.iter().enumerate() {
        udp_proxy::wire_like_a_nic(&c.underlay.ns, &format!("n{}", node.index), false);
        udp_proxy::wire_like_a_nic(&node.ns, "eth0", true);
        udp_proxy::set_pod_mtu(node, &c.pods[i], "veth1", mtus[i]);
    }
}

/// flannel's udp backend on three agents, nodes 1 and 2 on the fast path, node 3 on the
/// per-packet path: flanneld's lease and device, pods reaching each other with their own
/// address across both paths, only flanneld's datagrams on the underlay (the pods' packets
/// byte for byte inside), ICMP net unreachable at once for a subnet nobody holds, TCP at a
/// sane rate, the engine's metrics, a restart keeping the lease and the path, a node leaving.
#[test]
fn udp_cluster_on_etcd() {
    require_root!();
    require_driver!(netns_tests::kernel_has("tap"), "TUN/TAP driver");
    let Some(mut c) = udp_cluster("udp") else {
        return;
    };
    c.agents[2].extra.push("--udp-datapath=per-packet".into());
    c.start_agents();
    for (i, subnet) in c.subnets.iter().enumerate() {
        assert_eq!(
            c.etcd.get(&lease_key(subnet)).as_deref(),
            Some(format!(r#"{{"PublicIP":"{}","PublicIPv6":null}}"#, c.nodes[i].ip).as_str()),
            "flanneld's udp lease, byte for byte"
        );
        assert_eq!(
            c.agents[i].env_value("FLANNEL_MTU").as_deref(),
            Some("1472")
        );
        assert_flannel0(&c.nodes[i], subnet, 1472);
    }
    let mode = |i: usize| {
        let page = cluster::http_get(&c.nodes[i].ns, METRICS_PORT, "/metrics").unwrap_or_default();
        page.lines()
            .find(|l| l.starts_with("ferrocni_agent_udp_datapath_info{"))
            .map(String::from)
            .unwrap_or_default()
    };
    assert!(
        wait_until(CONVERGE, || mode(0).contains(r#"mode="fast""#)),
        "{}",
        mode(0)
    );
    assert!(mode(2).contains(r#"mode="per-packet""#), "{}", mode(2));
    assert!(c.agents[2]
        .log()
        .contains("per-packet: one read and sendto per packet"));
    udp_wire_and_pod_mtu(&c, &[1472; 3]);
    c.assert_full_mesh();
    c.assert_source_preserved();
    let (pod0, pod1, pod2) = (&c.pods[0], &c.pods[1], &c.pods[2]);
    let out = pod0
        .ns
        .exec_ok(&["ping", "-n", "-c", "1", "-W", "2", &pod2.ip]);
    assert!(out.contains("ttl=60"), "TTL 64 arrives as 60: {out}");

    // On the underlay: UDP 8285 -> 8285 between the nodes, each payload one pod packet, the
    // pod's own echo requests byte for byte (to the fast and to the per-packet node).
    let mut from_pod = Vec::new();
    let wire = capture(&c.underlay.ns, || {
        from_pod = capture(&pod0.ns, || {
            for to in [pod1, pod2] {
                pod0.ns.exec_ok(&[
                    "ping", "-n", "-c", "2", "-i", "0.2", "-s", "1000", "-p", "5a5b5c5d", &to.ip,
                ]);
            }
        });
    });
    let inner = udp_proxy::inner_packets(&wire);
    assert!(inner.iter().any(|i| i[9] == 1), "no echo on the wire");
    assert_eq!(
        udp_proxy::echo_requests_carried_byte_for_byte(&from_pod, &pod0.ip, &inner),
        4
    );

    // A subnet of the network that no node holds: answered at once, by node 1's flannel0.
    let flannel0 = nth(&c.subnets[0], 0).to_string();
    udp_proxy::assert_net_unreachable_at_once(pod0, "10.244.99.9", &flannel0);

    // TCP through the fast path both ways, and from the per-packet node.
    for (server, client, what) in [(pod1, pod0, "fast"), (pod0, pod2, "per-packet")] {
        let run = iperf(server, client, 3).expect("iperf3 through flannel0");
        eprintln!(
            "iperf3 from the {what} path: {:.2} Gbit/s, {} retransmits",
            run.bits_per_second / 1e9,
            run.retransmits
        );
        assert!(run.bits_per_second > 100e6, "{what}: {run:?}");
        assert!(
            (run.retransmits as f64) < run.bytes / 1400.0 / 100.0,
            "{what}: retransmits under 1% of the segments: {run:?}"
        );
    }
    let sample = |i: usize, s: &str| agent_sample(&c.nodes[i], s).unwrap_or(-1.0);
    assert_eq!(sample(0, "ferrocni_agent_udp_engine_up"), 1.0);
    assert_eq!(sample(0, "ferrocni_agent_udp_routes"), 2.0);
    assert!(sample(0, "ferrocni_agent_udp_packets_total{direction=\"sent\"}") > 1000.0);
    assert!(sample(0, "ferrocni_agent_udp_bytes_total{direction=\"received\"}") > 1e6);
    assert!(sample(0, "ferrocni_agent_udp_drops_total{reason=\"no_route\"}") >= 2.0);
    assert!(
        sample(
            0,
            "ferrocni_agent_udp_icmp_unreachable_total{outcome=\"sent\"}"
        ) >= 2.0
    );
    let sends = sample(2, "ferrocni_agent_udp_syscalls_total{call=\"udp_send\"}");
    assert_eq!(
        sends,
        sample(2, "ferrocni_agent_udp_packets_total{direction=\"sent\"}"),
        "the per-packet node sends one datagram per call"
    );

    // A restart: the engine stops, flannel0 stays, the same lease and path come back.
    c.assert_restart_keeps_lease();
    assert!(
        c.agents[0]
            .log()
            .contains("udp packet engine stopped; flannel0 stays"),
        "{}",
        c.agents[0].log()
    );
    assert_flannel0(&c.nodes[0], &c.subnets[0], 1472);
    c.assert_full_mesh();

    // Node 3 leaves: the others' engines forget its subnet, and answer for it at once.
    c.remove_node3(|n, _| agent_sample(n, "ferrocni_agent_udp_routes") == Some(1.0));
    udp_proxy::assert_net_unreachable_at_once(&c.pods[0], &c.pods[2].ip, &flannel0);
}

/// A node set up as flanneld sets up its own (its lease without BackendType, flannel0 and a
/// per-packet engine run by `udp-proxy-node`) reaches the agents' pods and is reached; once
/// its lease goes the agents answer for its subnet with ICMP. An underlay MTU of 1400 gives
/// FLANNEL_MTU 1372. flannel0 deleted under a running engine is made again by the next pass.
#[test]
fn udp_beside_flanneld_nodes_mtu_and_a_lost_device() {
    require_root!();
    require_driver!(netns_tests::kernel_has("tap"), "TUN/TAP driver");
    let Some(mut c) = udp_cluster("udpf") else {
        return;
    };
    // An underlay of 1400 bytes (a cloud network's, say).
    for node in &c.nodes {
        let port = format!("n{}", node.index);
        c.underlay
            .ns
            .exec_ok(&["ip", "link", "set", &port, "mtu", "1400"]);
        node.ns
            .exec_ok(&["ip", "link", "set", "eth0", "mtu", "1400"]);
    }
    c.start_agents();
    for (i, agent) in c.agents.iter().enumerate() {
        assert_eq!(agent.env_value("FLANNEL_MTU").as_deref(), Some("1372"));
        assert_flannel0(&c.nodes[i], &c.subnets[i], 1372);
    }
    c.assert_full_mesh();

    let driver = std::path::Path::new(env!("CARGO_BIN_EXE_udp-proxy-node"));
    let flanneld = std::cell::RefCell::new(None);
    c.assert_flanneld_node(
        |node| format!(r#"{{"PublicIP":"{}","PublicIPv6":null}}"#, node.ip),
        |node, peers| {
            let mut proxy = udp_proxy::ProxyNode::start_with_lease(
                driver,
                node,
                FLANNELD_SUBNET,
                udp_proxy::Mode::PerPacket,
            );
            let routes: Vec<(String, String)> = peers
                .iter()
                .map(|(subnet, ip)| (subnet.clone(), format!("{ip}:8285")))
                .collect();
            proxy.set_routes(&routes);
            *flanneld.borrow_mut() = Some(proxy);
        },
    );
    drop(flanneld);
    let flannel0 = nth(&c.subnets[0], 0).to_string();
    let gone = nth(FLANNELD_SUBNET, 2).to_string();
    assert!(wait_until(CONVERGE, || agent_sample(
        &c.nodes[0],
        "ferrocni_agent_udp_routes"
    ) == Some(2.0)));
    udp_proxy::assert_net_unreachable_at_once(&c.pods[0], &gone, &flannel0);

    // flannel0 deleted: the engine's thread stops; the next pass starts one on a new device.
    c.nodes[0].ns.exec_ok(&["ip", "link", "del", "flannel0"]);
    assert!(
        wait_until(CONVERGE, || c.agents[0]
            .log()
            .contains("restarting the udp packet engine on flannel0")),
        "{}",
        c.agents[0].log()
    );
    assert!(wait_until(CONVERGE, || c.nodes[0]
        .ns
        .link("flannel0")
        .is_some()));
    assert_flannel0(&c.nodes[0], &c.subnets[0], 1372);
    c.assert_full_mesh();
    assert_eq!(
        agent_sample(&c.nodes[0], "ferrocni_agent_udp_engine_restarts_total"),
        Some(1.0)
    );
}
