//! A packet the NetworkPolicy table's log rules send to nfnetlink_log: the message from the
//! kernel, and in it the first bytes of a packet whoever sent it chose. The input is read two
//! ways: as an NFULNL_MSG_PACKET payload (nfgenmsg, then attributes), and as the logged packet
//! itself (from its IP header). The packets are classified as the agent's denied-flow
//! listener does, against a compiled plan, under their own prefix and under each chain's.
//! Invariants: no panic; a message encoded again from what was read reads back the same; a
//! flow's addresses are the header's, of one family; ports only for TCP, UDP and SCTP, an
//! ICMP type only for ICMP and ICMPv6; a classified packet names the chain of its prefix, and
//! a chain's prefix reads back as that chain.
#![no_main]

use std::net::IpAddr;
use std::sync::OnceLock;

use ferrocni_agent::policy::denied::classify;
use libfuzzer_sys::fuzz_target;
use netkit::netfilter::nf_tables::attr::{Attrs, Writer};
use netkit::netfilter::nflog::flow::ip_proto;
use netkit::netfilter::nflog::{Flow, LoggedPacket, Transport};
use netpolicy::{compile, Cluster, Direction, Plan};
use netpolicy_nft::{log_prefix, parse_log_prefix};

/// `NFULA_PAYLOAD`, `NFULA_PREFIX`: the attributes the listener reads.
const ATTR_PAYLOAD: u16 = 9;
const ATTR_PREFIX: u16 = 10;
/// nfgenmsg's length, before the attributes.
const NFGENMSG_LEN: usize = 4;

/// prod/db (10.0.0.10, fd00::10) isolated both ways by prod/db; prod/api (10.0.0.11) free.
fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        let cluster: Cluster = serde_json::from_str(
            r#"{"namespaces":[{"name":"prod","labels":{"env":"prod"}}],
                "pods":[{"namespace":"prod","name":"db","labels":{"app":"db"},
                         "ips":["10.0.0.10","fd00::10"],"hostNetwork":false,
                         "ports":[{"name":"pg","protocol":"TCP","port":5432}]},
                        {"namespace":"prod","name":"api","labels":{"app":"api"},
                         "ips":["10.0.0.11"],"hostNetwork":false,"ports":[]}],
                "policies":[{"namespace":"prod","name":"db",
                             "podSelector":{"matchLabels":{"app":"db"}},
                             "policyTypes":["Ingress","Egress"],
                             "ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"api"}}}],
                                         "ports":[{"protocol":"TCP","port":"pg"}]}],
                             "egress":[{"ports":[{"protocol":"UDP","port":53}]}]}]}"#,
        )
        .expect("the cluster parses");
        let plan = compile(&cluster).plan;
        assert_eq!(
            plan.targets.len(),
            2,
            "both addresses of prod/db are targets"
        );
        plan
    })
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// What a flow says agrees with the packet it was read from.
fn check_flow(flow: &Flow, packet: &[u8]) {
    match (flow.src, flow.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            assert_eq!(packet[0] >> 4, 4, "an IPv4 flow from {packet:02x?}");
            assert_eq!(src.octets(), packet[12..16], "source");
            assert_eq!(dst.octets(), packet[16..20], "destination");
            assert_eq!(flow.protocol, packet[9], "protocol");
            if let Transport::Ports { src, dst } = flow.transport {
                let l4 = usize::from(packet[0] & 0x0f) * 4;
                assert_eq!(
                    (be16(packet, l4), be16(packet, l4 + 2)),
                    (Some(src), Some(dst))
                );
            }
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            assert_eq!(packet[0] >> 4, 6, "an IPv6 flow from {packet:02x?}");
            assert_eq!(src.octets(), packet[8..24], "source");
            assert_eq!(dst.octets(), packet[24..40], "destination");
        }
        _ => panic!("a flow mixes families: {flow:?}"),
    }
    match flow.transport {
        Transport::Ports { .. } => assert!(
            [ip_proto::TCP, ip_proto::UDP, ip_proto::SCTP].contains(&flow.protocol),
            "ports for protocol {}",
            flow.protocol
        ),
        Transport::Icmp { .. } => assert!(
            [ip_proto::ICMP, ip_proto::ICMPV6].contains(&flow.protocol),
            "an ICMP type for protocol {}",
            flow.protocol
        ),
        Transport::Unknown => {}
    }
    assert_eq!(
        flow.dst_port().is_some(),
        matches!(flow.transport, Transport::Ports { .. })
    );
    assert!(!flow.protocol_name().is_empty());
}

/// An NFULNL_MSG_PACKET payload as the kernel lays it out (the packet header, the prefix, the
/// input interface, the payload last).
fn encode(family: u8, group: u16, prefix: Option<&str>, packet: Option<&[u8]>) -> Vec<u8> {
    let mut out = vec![family, 0];
    out.extend(group.to_be_bytes());
    let mut w = Writer::new();
    w.bytes(1, &[0x08, 0x00, 2, 0]);
    if let Some(prefix) = prefix {
        w.string(ATTR_PREFIX, prefix);
    }
    w.be32(4, 3);
    if let Some(packet) = packet {
        w.bytes(ATTR_PAYLOAD, packet);
    }
    out.extend(w.buf);
    out
}

/// Classifies `p` against the plan and without one; what comes out names the chain of its
/// prefix, the flow's other end and its port.
fn check_classified(p: &LoggedPacket) {
    for plan in [Some(plan()), None] {
        let Some(d) = classify(plan, p) else {
            assert!(
                p.flow.is_none() || parse_log_prefix(&p.prefix).is_none(),
                "a flow under chain prefix {:?} not classified",
                p.prefix
            );
            continue;
        };
        let flow = p.flow.expect("a classified packet has a flow");
        assert_eq!(
            parse_log_prefix(&p.prefix),
            Some((d.class.direction, d.class.target))
        );
        let peer = match d.class.direction {
            Direction::Ingress => flow.src,
            Direction::Egress => flow.dst,
        };
        assert_eq!(d.class.peer, peer);
        assert_eq!(d.class.dst_port, flow.dst_port());
        assert_eq!(d.class.protocol, flow.protocol);
        assert!(!d.target.pod.is_empty() && d.text.starts_with("denied "));
        if let Some(target) = plan.and_then(|plan| plan.targets.get(&d.class.target)) {
            assert_eq!(d.target.pod, target.pod.to_string());
            let isolated = target.direction(d.class.direction).isolated();
            assert_eq!(!d.target.policy.is_empty(), isolated, "{d:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The bytes as the logged packet.
    let flow = Flow::parse(data);
    if let Some(flow) = &flow {
        check_flow(flow, data);
    }
    // Under each chain's prefix (as its log rule writes it), and under a prefix no chain has.
    for &target in plan()
        .targets
        .keys()
        .chain(&["10.9.9.9".parse().expect("ip")])
    {
        for direction in [Direction::Ingress, Direction::Egress] {
            let prefix = log_prefix(direction, target);
            assert_eq!(parse_log_prefix(&prefix), Some((direction, target)));
            let packet = LoggedPacket {
                group: netpolicy_nft::LOG_GROUP,
                prefix,
                flow,
            };
            check_classified(&packet);
        }
    }

    // The bytes as a message.
    let Some(logged) = LoggedPacket::parse(data) else {
        assert!(
            data.len() < NFGENMSG_LEN,
            "a message of {} bytes",
            data.len()
        );
        return;
    };
    let attrs = Attrs::new(&data[NFGENMSG_LEN..]);
    let payload = attrs.get(ATTR_PAYLOAD).map(|a| a.value);
    let prefix = attrs.get(ATTR_PREFIX).map(|_| logged.prefix.as_str());
    assert_eq!(logged.flow, payload.and_then(Flow::parse));
    if let (Some(flow), Some(packet)) = (&logged.flow, payload) {
        check_flow(flow, packet);
    }
    let again = encode(data[0], logged.group, prefix, payload);
    assert_eq!(
        LoggedPacket::parse(&again).as_ref(),
        Some(&logged),
        "the message encoded again reads differently: {again:02x?}"
    );
    check_classified(&logged);
});
