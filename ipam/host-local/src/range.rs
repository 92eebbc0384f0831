//! Ranges and range sets: canonicalisation and validation with the reference's defaults and
//! messages, membership, overlap, and the round-robin iterator.

use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::ip::{canonical, from_u128, host_mask, to_u128, Family};

/// A range as written in the configuration (before defaults are applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSpec {
    /// Subnet address as written (host bits possibly set) and prefix length.
    pub subnet: (IpAddr, u8),
    pub range_start: Option<IpAddr>,
    pub range_end: Option<IpAddr>,
    pub gateway: Option<IpAddr>,
}

/// A canonical range: every bound present, inside the subnet, start <= end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub family: Family,
    pub network: IpAddr,
    pub prefix: u8,
    pub range_start: IpAddr,
    pub range_end: IpAddr,
    pub gateway: IpAddr,
    net_value: u128,
    start_value: u128,
    end_value: u128,
    /// The gateway as a number when it has the range's family (only then can it be skipped).
    gateway_value: Option<u128>,
}

impl Range {
    /// Applies the reference's defaults and checks (Range.Canonicalize).
    pub fn canonicalize(spec: &RangeSpec) -> Result<Range, String> {
        let (written, prefix) = (canonical(spec.subnet.0), spec.subnet.1);
        let family = Family::of(&written);
        if prefix > family.bits() {
            return Err(format!("invalid CIDR address: {written}/{prefix}"));
        }
        if prefix > family.bits() - 2 {
            return Err(format!(
                "Network {written}/{prefix} too small to allocate from"
            ));
        }
        let mask = host_mask(family, prefix);
        let written_value = to_u128(&written);
        let net_value = written_value & !mask;
        let network = from_u128(net_value, family);
        if written_value != net_value {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {prefix} the network address is {network}"
            ));
        }
        let gateway = spec
            .gateway
            .map(canonical)
            .unwrap_or_else(|| from_u128(net_value + 1, family));
        let last = if family == Family::V4 {
            (net_value | mask) - 1
        } else {
            net_value | mask
        };
        let mut range = Range {
            family,
            network,
            prefix,
            range_start: from_u128(net_value + 1, family),
            range_end: from_u128(last, family),
            gateway,
            net_value,
            start_value: net_value + 1,
            end_value: last,
            gateway_value: (Family::of(&gateway) == family).then(|| to_u128(&gateway)),
        };
        // As the reference: a given start is checked against a given (not yet checked) end.
        let given_end = spec.range_end.map(canonical);
        if let Some(start) = spec.range_start.map(canonical) {
            let mut probe = range.clone();
            probe.start_value = to_u128(&start);
            if let Some(end) = given_end.filter(|e| Family::of(e) == family) {
                probe.end_value = to_u128(&end);
            }
            if !probe.in_subnet(&start) || to_u128(&start) > probe.end_value {
                return Err(format!(
                    "RangeStart {start} not in network {network}/{prefix}"
                ));
            }
            range.range_start = start;
            range.start_value = to_u128(&start);
        }
        if let Some(end) = given_end {
            if !range.contains(&end) {
                return Err(format!("RangeEnd {end} not in network {network}/{prefix}"));
            }
            range.range_end = end;
            range.end_value = to_u128(&end);
        }
        Ok(range)
    }

    fn in_subnet(&self, ip: &IpAddr) -> bool {
        Family::of(ip) == self.family
            && to_u128(ip) & !host_mask(self.family, self.prefix) == self.net_value
    }

    /// Inside the subnet and between range_start and range_end (inclusive).
    pub fn contains(&self, ip: &IpAddr) -> bool {
        let ip = canonical(*ip);
        self.in_subnet(&ip) && (self.start_value..=self.end_value).contains(&to_u128(&ip))
    }

    pub fn overlaps(&self, other: &Range) -> bool {
        self.family == other.family
            && (self.contains(&other.range_start)
                || self.contains(&other.range_end)
                || other.contains(&self.range_start)
                || other.contains(&self.range_end))
    }

    pub fn is_gateway(&self, value: u128) -> bool {
        self.gateway_value == Some(value)
    }

    /// The subnet with the host part of `ip` kept (the form a result carries).
    pub fn address_of(&self, ip: IpAddr) -> IpNetwork {
        // The prefix fits the family by construction, so this cannot fail; fall back to a
        // host route rather than panic.
        IpNetwork::new(ip, self.prefix).unwrap_or_else(|_| IpNetwork::from(ip))
    }

    /// Number of allocatable addresses (the gateway is never handed out).
    pub fn capacity(&self) -> u128 {
        let all = self.end_value - self.start_value + 1;
        match self.gateway_value {
            Some(g) if (self.start_value..=self.end_value).contains(&g) => all - 1,
            _ => all,
        }
    }

    pub fn subnet_string(&self) -> String {
        format!("{}/{}", self.network, self.prefix)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.range_start, self.range_end)
    }
}

/// Disjoint ranges of one family; ADD takes exactly one address per set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet(pub Vec<Range>);

impl RangeSet {
    pub fn canonicalize(specs: &[RangeSpec]) -> Result<RangeSet, String> {
        if specs.is_empty() {
            return Err("empty range set".to_string());
        }
        let mut ranges: Vec<Range> = Vec::with_capacity(specs.len());
        for spec in specs {
            let r = Range::canonicalize(spec)?;
            if ranges.first().is_some_and(|first| first.family != r.family) {
                return Err("mixed address families".to_string());
            }
            ranges.push(r);
        }
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                if a.overlaps(b) {
                    return Err(format!("subnets {a} and {b} overlap"));
                }
            }
        }
        Ok(RangeSet(ranges))
    }

    pub fn family(&self) -> Family {
        self.0.first().map_or(Family::V4, |r| r.family)
    }

    pub fn range_for(&self, ip: &IpAddr) -> Option<&Range> {
        self.0.iter().find(|r| r.contains(ip))
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.range_for(ip).is_some()
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|a| other.0.iter().any(|b| a.overlaps(b)))
    }

    pub fn capacity(&self) -> u128 {
        self.0
            .iter()
            .fold(0u128, |acc, r| acc.saturating_add(r.capacity()))
    }

    /// Round-robin iterator: starts after `last_reserved` when it lies in the set, otherwise
    /// at the first range's start; visits every address once, skipping gateways.
    pub fn iter_from(&self, last_reserved: Option<IpAddr>) -> RangeIter<'_> {
        let mut iter = RangeIter {
            set: self,
            range_idx: 0,
            cur: None,
            start: None,
        };
        if let Some(last) = last_reserved.map(canonical) {
            if let Some(idx) = self.0.iter().position(|r| r.contains(&last)) {
                iter.range_idx = idx;
                iter.cur = Some(to_u128(&last));
            }
        }
        iter
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Yields `(address, range)`; mirrors the reference's RangeIter step for step.
pub struct RangeIter<'a> {
    set: &'a RangeSet,
    range_idx: usize,
    cur: Option<u128>,
    start: Option<u128>,
}

impl<'a> Iterator for RangeIter<'a> {
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        let set = self.set;
        if set.0.is_empty() {
            return None;
        }
        loop {
            let mut r = &set.0[self.range_idx];
            let cur = match self.cur {
                None => {
                    self.cur = Some(r.start_value);
                    self.start = Some(r.start_value);
                    if r.is_gateway(r.start_value) {
                        continue;
                    }
                    return Some((from_u128(r.start_value, r.family), r));
                }
                Some(cur) => cur,
            };
            let next = if cur == r.end_value {
                self.range_idx = (self.range_idx + 1) % set.0.len();
                r = &set.0[self.range_idx];
                r.start_value
            } else {
                cur + 1
            };
            self.cur = Some(next);
            match self.start {
                None => self.start = Some(next),
                Some(s) if s == next => return None,
                Some(_) => {}
            }
            if r.is_gateway(next) {
                continue;
            }
            return Some((from_u128(next, r.family), r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(subnet: &str) -> RangeSpec {
        let (ip, prefix) = subnet.split_once('/').unwrap();
        RangeSpec {
            subnet: (ip.parse().unwrap(), prefix.parse().unwrap()),
            range_start: None,
            range_end: None,
            gateway: None,
        }
    }

    fn with(
        mut s: RangeSpec,
        start: Option<&str>,
        end: Option<&str>,
        gw: Option<&str>,
    ) -> RangeSpec {
        s.range_start = start.map(|x| x.parse().unwrap());
        s.range_end = end.map(|x| x.parse().unwrap());
        s.gateway = gw.map(|x| x.parse().unwrap());
        s
    }

    fn ips(it: RangeIter<'_>, n: usize) -> Vec<String> {
        it.take(n).map(|(ip, _)| ip.to_string()).collect()
    }

    #[test]
    fn v4_defaults() {
        let r = Range::canonicalize(&spec("10.1.2.0/24")).unwrap();
        assert_eq!(r.range_start.to_string(), "10.1.2.1");
        assert_eq!(r.range_end.to_string(), "10.1.2.254");
        assert_eq!(r.gateway.to_string(), "10.1.2.1");
        assert_eq!(r.to_string(), "10.1.2.1-10.1.2.254");
        assert_eq!(r.capacity(), 253);
    }

    #[test]
    fn v6_defaults() {
        let r = Range::canonicalize(&spec("fd00::/120")).unwrap();
        assert_eq!(r.range_start.to_string(), "fd00::1");
        assert_eq!(r.range_end.to_string(), "fd00::ff");
        assert_eq!(r.gateway.to_string(), "fd00::1");
    }

    #[test]
    fn rejects_like_the_reference() {
        assert_eq!(
            Range::canonicalize(&spec("10.1.0.5/32")).unwrap_err(),
            "Network 10.1.0.5/32 too small to allocate from"
        );
        assert_eq!(
            Range::canonicalize(&spec("10.1.0.0/31")).unwrap_err(),
            "Network 10.1.0.0/31 too small to allocate from"
        );
        assert!(Range::canonicalize(&spec("fd00::/127")).is_err());
        assert_eq!(
            Range::canonicalize(&spec("10.1.0.5/24")).unwrap_err(),
            "Network has host bits set. For a subnet mask of length 24 the network address is 10.1.0.0"
        );
        assert_eq!(
            Range::canonicalize(&with(spec("10.2.0.0/24"), Some("10.3.0.1"), None, None))
                .unwrap_err(),
            "RangeStart 10.3.0.1 not in network 10.2.0.0/24"
        );
        assert_eq!(
            Range::canonicalize(&with(spec("10.2.0.0/24"), None, Some("10.2.1.1"), None))
                .unwrap_err(),
            "RangeEnd 10.2.1.1 not in network 10.2.0.0/24"
        );
        // start after end: the reference reports the start
        assert!(Range::canonicalize(&with(
            spec("10.2.0.0/24"),
            Some("10.2.0.50"),
            Some("10.2.0.40"),
            None
        ))
        .unwrap_err()
        .starts_with("RangeStart 10.2.0.50"));
        // the reference accepts a gateway outside the subnet
        let r =
            Range::canonicalize(&with(spec("10.2.0.0/24"), None, None, Some("10.3.0.1"))).unwrap();
        assert_eq!(r.capacity(), 254);
    }

    #[test]
    fn set_validation() {
        assert_eq!(RangeSet::canonicalize(&[]).unwrap_err(), "empty range set");
        assert_eq!(
            RangeSet::canonicalize(&[spec("10.2.0.0/24"), spec("10.2.0.0/25")]).unwrap_err(),
            "subnets 10.2.0.1-10.2.0.254 and 10.2.0.1-10.2.0.126 overlap"
        );
        assert_eq!(
            RangeSet::canonicalize(&[spec("10.2.0.0/24"), spec("fd::/64")]).unwrap_err(),
            "mixed address families"
        );
        let a = RangeSet::canonicalize(&[spec("10.2.0.0/24")]).unwrap();
        let b = RangeSet::canonicalize(&[spec("10.2.0.128/25")]).unwrap();
        let c = RangeSet::canonicalize(&[spec("fd00::/64")]).unwrap();
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&c));
    }

    #[test]
    fn iterates_skipping_gateway_and_wrapping() {
        let set = RangeSet::canonicalize(&[spec("10.0.0.0/29")]).unwrap();
        // .1 is the gateway: first address is .2; .7 is broadcast (excluded)
        assert_eq!(
            ips(set.iter_from(None), 10),
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
        );
        // after the last reserved, wrap round and end just before it again
        assert_eq!(
            ips(set.iter_from(Some("10.0.0.4".parse().unwrap())), 10),
            ["10.0.0.5", "10.0.0.6", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
        );
        // a last_reserved outside the set is ignored
        assert_eq!(
            ips(set.iter_from(Some("10.9.0.4".parse().unwrap())), 1),
            ["10.0.0.2"]
        );
    }

    #[test]
    fn iterates_across_ranges() {
        let set = RangeSet::canonicalize(&[
            with(
                spec("10.0.0.0/24"),
                Some("10.0.0.10"),
                Some("10.0.0.11"),
                None,
            ),
            with(
                spec("10.0.1.0/24"),
                Some("10.0.1.1"),
                Some("10.0.1.3"),
                Some("10.0.1.2"),
            ),
        ])
        .unwrap();
        assert_eq!(
            ips(set.iter_from(None), 10),
            ["10.0.0.10", "10.0.0.11", "10.0.1.1", "10.0.1.3"]
        );
        assert_eq!(
            ips(set.iter_from(Some("10.0.1.1".parse().unwrap())), 10),
            ["10.0.1.3", "10.0.0.10", "10.0.0.11", "10.0.1.1"]
        );
        assert_eq!(set.capacity(), 4);
        assert_eq!(set.to_string(), "10.0.0.10-10.0.0.11,10.0.1.1-10.0.1.3");
    }

    #[test]
    fn iterates_v6() {
        let set = RangeSet::canonicalize(&[with(spec("fd00::/64"), None, Some("fd00::3"), None)])
            .unwrap();
        assert_eq!(ips(set.iter_from(None), 10), ["fd00::2", "fd00::3"]);
        let r = &set.0[0];
        assert_eq!(
            r.address_of("fd00::2".parse().unwrap()).to_string(),
            "fd00::2/64"
        );
    }

    #[test]
    fn gateway_only_range_is_empty() {
        let set = RangeSet::canonicalize(&[with(
            spec("10.0.0.0/24"),
            Some("10.0.0.1"),
            Some("10.0.0.1"),
            None,
        )])
        .unwrap();
        assert_eq!(set.iter_from(None).count(), 0);
        assert_eq!(set.capacity(), 0);
    }
}
