//! Rule fragments linearized exactly as nft does it (`nft --debug=netlink` shows the same
//! expressions), so `nft list ruleset` prints our rules as if nft had written them.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::expr::{
    ct_key, meta_key, BitwiseOp, CmpOp, Expr, NatType, PayloadBase, Verdict, FIB_F_DADDR,
    FIB_RESULT_ADDRTYPE, NAT_RANGE_PROTO_RANDOM_FULLY, NAT_RANGE_PROTO_SPECIFIED, REG32_00, REG_1,
    REG_2,
};

/// `NFPROTO_IPV4` / `NFPROTO_IPV6`.
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;
/// IFNAMSIZ: nft compares interface names over the whole buffer.
const IFNAMSIZ: usize = 16;
/// `fib daddr type local`: RTN_LOCAL.
const RTN_LOCAL: u32 = 2;
/// `ct status dnat`: IPS_DST_NAT.
const IPS_DST_NAT: u32 = 0x20;

/// An address field of the IPv4/IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    Saddr,
    Daddr,
}

pub(crate) fn cmp(op: CmpOp, data: Vec<u8>) -> Expr {
    Expr::Cmp {
        sreg: REG_1,
        op,
        data,
    }
}

pub(crate) fn payload(base: PayloadBase, offset: u32, len: u32) -> Expr {
    Expr::Payload {
        dreg: REG_1,
        base,
        offset,
        len,
    }
}

pub(crate) fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// `meta nfproto ipv4|ipv6`: what nft prepends to `ip`/`ip6` matches in an `inet` table.
pub fn nfproto(v6: bool) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: meta_key::NFPROTO,
            dreg: REG_1,
        },
        cmp(
            CmpOp::Eq,
            vec![if v6 { NFPROTO_IPV6 } else { NFPROTO_IPV4 }],
        ),
    ]
}

/// `ip saddr|daddr [!=] NET` (or `ip6 ...`): a byte-aligned prefix loads just its bytes, any
/// other prefix loads the whole address and masks it; a host address is a plain compare.
pub fn addr(field: Addr, op: CmpOp, net: IpNetwork) -> Vec<Expr> {
    let v6 = net.is_ipv6();
    let (offset, full) = match (v6, field) {
        (false, Addr::Saddr) => (12, 4),
        (false, Addr::Daddr) => (16, 4),
        (true, Addr::Saddr) => (8, 16),
        (true, Addr::Daddr) => (24, 16),
    };
    let prefix = u32::from(net.prefix());
    let network = ip_bytes(net.network());
    if prefix > 0 && prefix % 8 == 0 {
        let len = prefix / 8;
        return vec![
            payload(PayloadBase::Network, offset, len),
            cmp(op, network[..len as usize].to_vec()),
        ];
    }
    let mask = ip_bytes(net.mask());
    vec![
        payload(PayloadBase::Network, offset, full),
        Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            op: BitwiseOp::IMPLIED,
            mask,
            xor: vec![0; full as usize],
        },
        cmp(op, network),
    ]
}

/// `ip saddr|daddr [!=] IP` for one address.
pub fn host(field: Addr, op: CmpOp, ip: IpAddr) -> Vec<Expr> {
    let bits = if ip.is_ipv6() { 128 } else { 32 };
    match IpNetwork::new(ip, bits) {
        Ok(net) => addr(field, op, net),
        Err(_) => Vec::new(),
    }
}

/// `iifname|oifname [!=] "NAME"` as nft writes it (the name NUL-padded to IFNAMSIZ).
pub fn ifname(input: bool, op: CmpOp, name: &str) -> Vec<Expr> {
    let mut data = name.as_bytes().to_vec();
    data.resize(IFNAMSIZ.max(data.len() + 1), 0);
    vec![
        Expr::Meta {
            key: if input {
                meta_key::IIFNAME
            } else {
                meta_key::OIFNAME
            },
            dreg: REG_1,
        },
        cmp(op, data),
    ]
}

/// `ether saddr MAC` (bridge family).
pub fn ether_saddr(mac: [u8; 6]) -> Vec<Expr> {
    vec![
        payload(PayloadBase::Link, 6, 6),
        cmp(CmpOp::Eq, mac.to_vec()),
    ]
}

/// `meta l4proto P th dport PORT`.
pub fn l4proto_dport(proto: u8, port: u16) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: meta_key::L4PROTO,
            dreg: REG_1,
        },
        cmp(CmpOp::Eq, vec![proto]),
        payload(PayloadBase::Transport, 2, 2),
        cmp(CmpOp::Eq, port.to_be_bytes().to_vec()),
    ]
}

/// `fib daddr type local`.
pub fn fib_daddr_local() -> Vec<Expr> {
    vec![
        Expr::Fib {
            flags: FIB_F_DADDR,
            result: FIB_RESULT_ADDRTYPE,
            dreg: REG_1,
        },
        cmp(CmpOp::Eq, RTN_LOCAL.to_ne_bytes().to_vec()),
    ]
}

/// `ct status dnat`.
pub fn ct_status_dnat() -> Vec<Expr> {
    let bit = IPS_DST_NAT.to_ne_bytes().to_vec();
    vec![
        Expr::Ct {
            key: ct_key::STATUS,
            dreg: REG_1,
        },
        Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            op: BitwiseOp::IMPLIED,
            mask: bit,
            xor: vec![0; 4],
        },
        cmp(CmpOp::Neq, vec![0; 4]),
    ]
}

/// `dnat to IP:PORT` (`dnat ip to` / `dnat ip6 to` semantics of nft in ip/ip6 tables).
pub fn dnat(ip: IpAddr, port: u16) -> Vec<Expr> {
    vec![
        Expr::ImmediateData {
            dreg: REG_1,
            data: ip_bytes(ip),
        },
        Expr::ImmediateData {
            dreg: REG_2,
            data: port.to_be_bytes().to_vec(),
        },
        Expr::Nat {
            kind: NatType::Dnat,
            family: u32::from(if ip.is_ipv6() {
                NFPROTO_IPV6
            } else {
                NFPROTO_IPV4
            }),
            reg_addr: Some(REG_1),
            reg_proto: Some(REG_2),
            flags: NAT_RANGE_PROTO_SPECIFIED,
        },
    ]
}

/// `masquerade`.
pub fn masquerade() -> Vec<Expr> {
    vec![Expr::Masq]
}

/// `masquerade fully-random` (iptables `MASQUERADE --random-fully`).
pub fn masquerade_fully_random() -> Vec<Expr> {
    vec![Expr::MasqFlags(NAT_RANGE_PROTO_RANDOM_FULLY)]
}

/// `meta mark & BITS == BITS` (iptables `-m mark --mark BITS/BITS`): every bit of `bits` set.
pub fn mark_has(bits: u32) -> Vec<Expr> {
    let data = bits.to_ne_bytes().to_vec();
    vec![
        Expr::Meta {
            key: meta_key::MARK,
            dreg: REG_1,
        },
        Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            // nft states the operation for an `&` written in the rule.
            op: BitwiseOp::STATED_BOOL,
            mask: data.clone(),
            xor: vec![0; 4],
        },
        cmp(CmpOp::Eq, data),
    ]
}

/// A verdict statement.
pub fn verdict(v: Verdict) -> Vec<Expr> {
    vec![Expr::Verdict(v)]
}

/// Concatenates fragments into one expression list.
pub fn all<const N: usize>(parts: [Vec<Expr>; N]) -> Vec<Expr> {
    parts.into_iter().flatten().collect()
}

/// `ct state STATES` (any of the `ct_state` bits): the state masked, compared to zero.
pub fn ct_state_any(states: u32) -> Vec<Expr> {
    vec![
        Expr::Ct {
            key: ct_key::STATE,
            dreg: REG_1,
        },
        Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            op: BitwiseOp::IMPLIED,
            mask: states.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        },
        cmp(CmpOp::Neq, vec![0; 4]),
    ]
}

/// `meta l4proto P`.
pub fn l4proto(proto: u8) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: meta_key::L4PROTO,
            dreg: REG_1,
        },
        cmp(CmpOp::Eq, vec![proto]),
    ]
}

/// `th dport FIRST-LAST` (one port: `th dport FIRST`); follows an `l4proto` match, which
/// makes nft show it as `tcp dport`/`udp dport`/`sctp dport`.
pub fn th_dport(first: u16, last: u16) -> Vec<Expr> {
    let load = payload(PayloadBase::Transport, 2, 2);
    if first == last {
        return vec![load, cmp(CmpOp::Eq, first.to_be_bytes().to_vec())];
    }
    vec![
        load,
        Expr::Range {
            sreg: REG_1,
            op: CmpOp::Eq,
            from: first.to_be_bytes().to_vec(),
            to: last.to_be_bytes().to_vec(),
        },
    ]
}

/// The header offset and length of an address field.
fn addr_field(field: Addr, v6: bool) -> (u32, u32) {
    match (v6, field) {
        (false, Addr::Saddr) => (12, 4),
        (false, Addr::Daddr) => (16, 4),
        (true, Addr::Saddr) => (8, 16),
        (true, Addr::Daddr) => (24, 16),
    }
}

/// `ip saddr|daddr @set` (`ip6 ...` with `v6`), the family checked first as nft does in an
/// `inet` table.
pub fn addr_in_set(field: Addr, v6: bool, set: &str) -> Vec<Expr> {
    let (offset, len) = addr_field(field, v6);
    let mut e = nfproto(v6);
    e.push(payload(PayloadBase::Network, offset, len));
    e.push(Expr::Lookup {
        sreg: REG_1,
        set: set.to_string(),
        set_id: None,
        invert: false,
    });
    e
}

/// `ip saddr|daddr vmap @map`.
pub fn addr_vmap(field: Addr, v6: bool, map: &str) -> Vec<Expr> {
    let (offset, len) = addr_field(field, v6);
    let mut e = nfproto(v6);
    e.push(payload(PayloadBase::Network, offset, len));
    e.push(Expr::Vmap {
        sreg: REG_1,
        set: map.to_string(),
        set_id: None,
    });
    e
}

/// `ip saddr|daddr . meta l4proto . th dport @set`: each field into consecutive 32-bit
/// registers (an address takes one or four), then one lookup of the whole concatenation.
pub fn addr_proto_port_in_set(field: Addr, v6: bool, set: &str) -> Vec<Expr> {
    let (offset, len) = addr_field(field, v6);
    let proto_reg = REG32_00 + len / 4;
    let mut e = nfproto(v6);
    e.push(Expr::Payload {
        dreg: REG32_00,
        base: PayloadBase::Network,
        offset,
        len,
    });
    e.push(Expr::Meta {
        key: meta_key::L4PROTO,
        dreg: proto_reg,
    });
    e.push(Expr::Payload {
        dreg: proto_reg + 1,
        base: PayloadBase::Transport,
        offset: 2,
        len: 2,
    });
    e.push(Expr::Lookup {
        sreg: REG32_00,
        set: set.to_string(),
        set_id: None,
        invert: false,
    });
    e
}

/// `counter` (starting at zero).
pub fn counter() -> Vec<Expr> {
    vec![Expr::Counter {
        bytes: 0,
        packets: 0,
    }]
}

/// `limit rate RATE/second burst BURST packets`: true while the rule's own token bucket has
/// a token (each rule holding it has a bucket of its own).
pub fn limit_packets_per_second(rate: u64, burst: u32) -> Vec<Expr> {
    vec![Expr::Limit {
        rate,
        unit_seconds: 1,
        burst,
        bytes: false,
        invert: false,
    }]
}

/// `log prefix "PREFIX" group GROUP snaplen SNAPLEN`: the packet's first `snaplen` bytes go
/// to the nfnetlink_log listener of `group` (none listening: nothing happens).
pub fn log_to_group(prefix: &str, group: u16, snaplen: u32) -> Vec<Expr> {
    vec![Expr::Log {
        prefix: Some(prefix.to_string()),
        group: Some(group),
        snaplen: Some(snaplen),
    }]
}
