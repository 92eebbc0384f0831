//! Address intervals: an ipBlock with its `except` blocks carved out, and the union of a rule's
//! blocks, as the sorted, non-overlapping, non-adjacent intervals an nf_tables interval set
//! must be given.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

use crate::plan::Family;

/// An inclusive range of addresses of one family, as integers (IPv4 in the low 32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Span {
    pub(crate) family: Family,
    pub(crate) first: u128,
    pub(crate) last: u128,
}

impl Span {
    pub(crate) fn of(net: IpNetwork) -> Span {
        match net {
            IpNetwork::V4(n) => {
                let first = u32::from(n.network());
                let last = u32::from(n.broadcast());
                Span {
                    family: Family::V4,
                    first: first.into(),
                    last: last.into(),
                }
            }
            IpNetwork::V6(n) => {
                let bits = 128 - u32::from(n.prefix());
                let first = u128::from(n.network());
                let last = if bits == 128 {
                    u128::MAX
                } else {
                    first | ((1u128 << bits) - 1)
                };
                Span {
                    family: Family::V6,
                    first,
                    last,
                }
            }
        }
    }

    pub(crate) fn addr(family: Family, value: u128) -> IpAddr {
        match family {
            // IPv4 values never exceed 32 bits: they come from u32s.
            Family::V4 => IpAddr::V4(Ipv4Addr::from(value as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
        }
    }

    pub(crate) fn first_addr(&self) -> IpAddr {
        Span::addr(self.family, self.first)
    }

    pub(crate) fn last_addr(&self) -> IpAddr {
        Span::addr(self.family, self.last)
    }
}

/// The value of an address, for comparing with spans.
pub(crate) fn value(addr: IpAddr) -> (Family, u128) {
    match addr {
        IpAddr::V4(a) => (Family::V4, u32::from(a).into()),
        IpAddr::V6(a) => (Family::V6, u128::from(a)),
    }
}

/// `block` without every `except` (all of the block's family, validated inside it).
pub(crate) fn carve(block: Span, except: &[Span]) -> Vec<Span> {
    let mut holes: Vec<Span> = except.to_vec();
    holes.sort();
    let mut out = Vec::new();
    let mut next = Some(block.first);
    for hole in holes {
        let Some(start) = next else { break };
        if hole.last < start {
            continue;
        }
        if hole.first > start {
            out.push(Span {
                family: block.family,
                first: start,
                last: hole.first - 1,
            });
        }
        next = hole.last.checked_add(1).filter(|n| *n <= block.last);
    }
    if let Some(start) = next {
        out.push(Span {
            family: block.family,
            first: start,
            last: block.last,
        });
    }
    out
}

/// The union of spans as sorted spans that neither overlap nor touch, per family (IPv4 first).
pub(crate) fn union(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort();
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        if let Some(last) = out.last_mut() {
            if last.family == s.family && s.first <= last.last.saturating_add(1) {
                last.last = last.last.max(s.last);
                continue;
            }
        }
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(cidr: &str) -> Span {
        Span::of(cidr.parse().expect("test cidr"))
    }

    fn show(spans: &[Span]) -> Vec<String> {
        spans
            .iter()
            .map(|s| format!("{}-{}", s.first_addr(), s.last_addr()))
            .collect()
    }

    #[test]
    fn except_carved_out() {
        let got = carve(
            span("10.0.0.0/16"),
            &[span("10.0.1.0/24"), span("10.0.3.0/24")],
        );
        assert_eq!(
            show(&got),
            [
                "10.0.0.0-10.0.0.255",
                "10.0.2.0-10.0.2.255",
                "10.0.4.0-10.0.255.255"
            ]
        );
    }

    #[test]
    fn except_at_the_edges_and_nested() {
        let got = carve(
            span("10.0.0.0/24"),
            &[
                span("10.0.0.0/26"),
                span("10.0.0.192/26"),
                span("10.0.0.0/27"),
            ],
        );
        assert_eq!(show(&got), ["10.0.0.64-10.0.0.191"]);
        // Everything carved: nothing left.
        assert!(carve(
            span("10.0.0.0/24"),
            &[span("10.0.0.0/25"), span("10.0.0.128/25")]
        )
        .is_empty());
    }

    #[test]
    fn whole_spaces() {
        assert_eq!(show(&[span("0.0.0.0/0")]), ["0.0.0.0-255.255.255.255"]);
        assert_eq!(
            show(&[span("::/0")]),
            ["::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]
        );
        let got = carve(span("::/0"), &[span("fd00::/8")]);
        assert_eq!(
            show(&got),
            [
                "::-fcff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "fe00::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
            ]
        );
    }

    #[test]
    fn union_merges_overlapping_and_adjacent_per_family() {
        let got = union(vec![
            span("10.0.1.0/24"),
            span("fd00::/64"),
            span("10.0.0.0/24"),
            span("10.0.0.128/25"),
            span("10.0.5.0/24"),
        ]);
        assert_eq!(
            show(&got),
            [
                "10.0.0.0-10.0.1.255",
                "10.0.5.0-10.0.5.255",
                "fd00::-fd00::ffff:ffff:ffff:ffff"
            ]
        );
    }

    #[test]
    fn a_block_restores_what_another_carved() {
        let a = carve(span("10.0.0.0/16"), &[span("10.0.1.0/24")]);
        let mut all = a;
        all.push(span("10.0.1.0/25"));
        assert_eq!(
            show(&union(all)),
            ["10.0.0.0-10.0.1.127", "10.0.2.0-10.0.255.255"]
        );
    }
}
