//! The IPv6 half of flannel's network config (`EnableIPv6`, `IPv6Network`, `IPv6SubnetLen`,
//! `IPv6SubnetMin`, `IPv6SubnetMax`), with flannel's defaults and checks, and allocation of
//! the node's IPv6 subnet.

use ipnetwork::Ipv6Network;
use std::net::Ipv6Addr;

use crate::error::AgentError;
use crate::subnet::pick::pick_seeded;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Config {
    pub network: Ipv6Network,
    pub subnet_len: u8,
    pub subnet_min: Ipv6Addr,
    pub subnet_max: Ipv6Addr,
}

fn bad(key: &str, msg: impl Into<String>) -> AgentError {
    AgentError::BadConfig {
        key: key.to_string(),
        msg: msg.into(),
    }
}

/// The number of addresses in a subnet of `len` bits (saturating at /0).
fn subnet_size(len: u8) -> u128 {
    1u128.checked_shl(128 - u32::from(len)).unwrap_or(u128::MAX)
}

impl Ipv6Config {
    /// Validates the raw fields of the config at `key` (for messages only).
    pub fn parse(
        key: &str,
        network: Option<&str>,
        subnet_len: u8,
        subnet_min: Option<&str>,
        subnet_max: Option<&str>,
    ) -> Result<Ipv6Config, AgentError> {
        let text = network.ok_or_else(|| {
            bad(
                key,
                "\"EnableIPv6\" is true but \"IPv6Network\" is missing (please define a correct IPv6Network parameter)",
            )
        })?;
        let parsed: Ipv6Network = text.parse().map_err(|e| {
            bad(
                key,
                format!("\"IPv6Network\" {text:?} is not an IPv6 CIDR: {e}"),
            )
        })?;
        let network = Ipv6Network::new(parsed.network(), parsed.prefix())
            .map_err(|e| bad(key, format!("\"IPv6Network\": {e}")))?;
        let subnet_len = if subnet_len > 0 {
            if subnet_len > 126 {
                return Err(bad(key, "\"IPv6SubnetLen\" must be less than /127"));
            }
            if u32::from(subnet_len) < u32::from(network.prefix()) + 2 {
                return Err(bad(
                    key,
                    "\"IPv6Network\" must be able to accommodate at least four subnets of \"IPv6SubnetLen\"",
                ));
            }
            subnet_len
        } else if network.prefix() > 124 {
            return Err(bad(
                key,
                "\"IPv6Network\" is too small: the minimum useful prefix is /124",
            ));
        } else if network.prefix() <= 62 {
            64
        } else {
            network.prefix() + 2
        };
        let size = subnet_size(subnet_len);
        let start = u128::from(network.network());
        let end = u128::from(network.broadcast());
        let mask = u128::MAX << (128 - u32::from(subnet_len));
        let bound = |name: &str, v: Option<&str>, default: u128| -> Result<Ipv6Addr, AgentError> {
            let Some(s) = v else {
                return Ok(Ipv6Addr::from(default));
            };
            let ip: Ipv6Addr = s
                .parse()
                .map_err(|e| bad(key, format!("\"{name}\" {s:?}: {e}")))?;
            if !network.contains(ip) {
                return Err(bad(
                    key,
                    format!("\"{name}\" {ip} is not in the range of the IPv6Network {network}"),
                ));
            }
            if u128::from(ip) & mask != u128::from(ip) {
                return Err(bad(
                    key,
                    format!("\"{name}\" {ip} is not on an IPv6SubnetLen (/{subnet_len}) boundary"),
                ));
            }
            Ok(ip)
        };
        // As for IPv4, the first subnet is skipped: its network address is the Network's.
        let subnet_min = bound("IPv6SubnetMin", subnet_min, start.wrapping_add(size))?;
        let subnet_max = bound("IPv6SubnetMax", subnet_max, end & mask)?;
        if u128::from(subnet_min) > u128::from(subnet_max) {
            return Err(bad(
                key,
                format!("\"IPv6SubnetMin\" {subnet_min} is above \"IPv6SubnetMax\" {subnet_max}"),
            ));
        }
        Ok(Ipv6Config {
            network,
            subnet_len,
            subnet_min,
            subnet_max,
        })
    }

    /// Every subnet this config may hand out, in address order.
    pub fn candidate_subnets(&self) -> impl Iterator<Item = Ipv6Network> + '_ {
        let size = subnet_size(self.subnet_len);
        let end = u128::from(self.subnet_max);
        std::iter::successors(Some(u128::from(self.subnet_min)), move |ip| {
            ip.checked_add(size).filter(|next| *next <= end)
        })
        .filter_map(move |ip| Ipv6Network::new(Ipv6Addr::from(ip), self.subnet_len).ok())
    }

    /// Whether `subnet` is one this config could have allocated.
    pub fn is_allocatable(&self, subnet: Ipv6Network) -> bool {
        subnet.prefix() == self.subnet_len
            && u128::from(subnet.network()) >= u128::from(self.subnet_min)
            && u128::from(subnet.network()) <= u128::from(self.subnet_max)
    }

    /// A free subnet among the first 100 free ones (flannel's rule), chosen by `seed`.
    pub fn pick_free_subnet(
        &self,
        taken: &[Ipv6Network],
        seed: u64,
    ) -> Result<Ipv6Network, AgentError> {
        let free = self
            .candidate_subnets()
            .filter(|sn| !taken.iter().any(|t| overlaps(*t, *sn)));
        pick_seeded(free, seed).ok_or(AgentError::Ipv6SubnetsExhausted {
            network: self.network,
            min: self.subnet_min,
            max: self.subnet_max,
            len: self.subnet_len,
        })
    }
}

pub fn overlaps(a: Ipv6Network, b: Ipv6Network) -> bool {
    a.contains(b.network()) || b.contains(a.network())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(
        net: &str,
        len: u8,
        min: Option<&str>,
        max: Option<&str>,
    ) -> Result<Ipv6Config, AgentError> {
        Ipv6Config::parse("k", Some(net), len, min, max)
    }

    #[test]
    fn flannel_defaults() {
        let c = parse("fd00:10:244::/56", 0, None, None).unwrap();
        assert_eq!(c.subnet_len, 64);
        assert_eq!(c.subnet_min, "fd00:10:244:1::".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            c.subnet_max,
            "fd00:10:244:ff::".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(c.candidate_subnets().count(), 255);
        let small = parse("fd00::/120", 0, None, None).unwrap();
        assert_eq!(small.subnet_len, 122);
        assert_eq!(small.candidate_subnets().count(), 3);
        let all = parse("::/0", 2, None, None).unwrap();
        assert_eq!(all.candidate_subnets().count(), 3);
    }

    #[test]
    fn bad_fields_are_named() {
        for (net, len, min, needle) in [
            ("fd00::/56", 127, None, "/127"),
            ("fd00::/56", 57, None, "four subnets"),
            ("fd00::/125", 0, None, "too small"),
            ("10.0.0.0/8", 0, None, "not an IPv6 CIDR"),
            ("fd00::/56", 0, Some("fd01::"), "not in the range"),
            ("fd00::/56", 0, Some("fd00::1"), "boundary"),
        ] {
            let err = parse(net, len, min, None).unwrap_err().to_string();
            assert!(err.contains(needle), "{net} {len}: {err}");
        }
        assert!(Ipv6Config::parse("k", None, 0, None, None)
            .unwrap_err()
            .to_string()
            .contains("IPv6Network"));
    }

    #[test]
    fn allocation_skips_taken_and_runs_out() {
        let c = parse("fd00::/56", 0, Some("fd00:0:0:1::"), Some("fd00:0:0:2::")).unwrap();
        let a = c.pick_free_subnet(&[], 5).unwrap();
        let b = c.pick_free_subnet(&[a], 5).unwrap();
        assert_ne!(a, b);
        assert!(c.is_allocatable(a) && c.is_allocatable(b));
        assert!(matches!(
            c.pick_free_subnet(&[a, b], 0),
            Err(AgentError::Ipv6SubnetsExhausted { .. })
        ));
    }
}
