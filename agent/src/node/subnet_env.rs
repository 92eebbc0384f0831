//! flannel's `subnet.env`, read by flannel's CNI meta-plugin and by our bridge (`subnetFile`).

use ipnetwork::{Ipv4Network, Ipv6Network};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::subnet::key::SubnetKey;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetEnv {
    pub network: Ipv4Network,
    /// The node's leased subnet; written as its first host address (`10.244.1.1/24`), as flannel does.
    pub subnet: Ipv4Network,
    /// The IPv6 network and the node's IPv6 subnet, on a dual-stack network.
    pub ipv6: Option<(Ipv6Network, Ipv6Network)>,
    pub mtu: u32,
    pub ipmasq: bool,
}

impl SubnetEnv {
    /// flannel's lines, in flannel's order.
    pub fn render(&self) -> String {
        let first = Ipv4Addr::from(u32::from(self.subnet.network()).wrapping_add(1));
        let mut out = format!(
            "FLANNEL_NETWORK={}\nFLANNEL_SUBNET={}/{}\n",
            self.network,
            first,
            self.subnet.prefix()
        );
        if let Some((network, subnet)) = self.ipv6 {
            let first = Ipv6Addr::from(u128::from(subnet.network()).wrapping_add(1));
            out += &format!(
                "FLANNEL_IPV6_NETWORK={network}\nFLANNEL_IPV6_SUBNET={first}/{}\n",
                subnet.prefix()
            );
        }
        out + &format!("FLANNEL_MTU={}\nFLANNEL_IPMASQ={}\n", self.mtu, self.ipmasq)
    }
}

fn value<'a>(contents: &'a str, key: &str) -> Option<&'a str> {
    contents.lines().find_map(|line| {
        line.trim()
            .strip_prefix(key)?
            .strip_prefix('=')
            .map(str::trim)
    })
}

/// The subnets recorded in an existing subnet.env (`FLANNEL_SUBNET`, `FLANNEL_IPV6_SUBNET`),
/// normalised to their networks. flanneld falls back to them on restart when no lease
/// matches its PublicIP; so do we.
pub fn previous_subnet(contents: &str) -> Option<SubnetKey> {
    let v4: Ipv4Network = value(contents, "FLANNEL_SUBNET")?.parse().ok()?;
    // No lease is longer than /30 (flannel's SubnetLen limit): a /31 or /32 there (a hand
    // edit, `10.244.1.1` without its length) names no subnet to ask for again.
    if v4.prefix() > 30 {
        return None;
    }
    let v6 = value(contents, "FLANNEL_IPV6_SUBNET")
        .and_then(|v| v.parse::<Ipv6Network>().ok())
        // Nor longer than /126 for IPv6 (flannel's IPv6SubnetLen limit).
        .filter(|n| n.prefix() <= 126)
        .and_then(|n| Ipv6Network::new(n.network(), n.prefix()).ok());
    Some(SubnetKey {
        v4: Ipv4Network::new(v4.network(), v4.prefix()).ok()?,
        v6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_address_is_no_previous_subnet() {
        // Found by the agent_subnet_env fuzz target: read back as 10.244.1.2/32.
        assert_eq!(previous_subnet("FLANNEL_SUBNET=10.244.1.1\n"), None);
        assert_eq!(previous_subnet("FLANNEL_SUBNET=10.244.1.1/31\n"), None);
        assert!(previous_subnet("FLANNEL_SUBNET=10.244.1.1/30\n").is_some());
        let key = previous_subnet("FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_SUBNET=fd00::1\n");
        assert_eq!(key.and_then(|k| k.v6), None);
    }

    #[test]
    fn renders_flannel_format() {
        let mut env = SubnetEnv {
            network: "10.244.0.0/16".parse().unwrap(),
            subnet: "10.244.1.0/24".parse().unwrap(),
            ipv6: None,
            mtu: 1450,
            ipmasq: true,
        };
        assert_eq!(
            env.render(),
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
        );
        assert_eq!(
            previous_subnet(&env.render()),
            Some(SubnetKey::v4("10.244.1.0/24".parse().unwrap()))
        );
        env.ipv6 = Some((
            "fd00:10:244::/56".parse().unwrap(),
            "fd00:10:244:1::/64".parse().unwrap(),
        ));
        assert_eq!(
            env.render(),
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n\
             FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n\
             FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
        );
        assert_eq!(
            previous_subnet(&env.render()).and_then(|k| k.v6),
            Some("fd00:10:244:1::/64".parse().unwrap())
        );
    }

    #[test]
    fn previous_subnet_tolerates_junk() {
        assert_eq!(previous_subnet(""), None);
        assert_eq!(previous_subnet("FLANNEL_SUBNET=garbage\n"), None);
        assert_eq!(
            previous_subnet("X=1\n FLANNEL_SUBNET=10.1.2.1/26 \nFLANNEL_IPV6_SUBNET=junk\n"),
            Some(SubnetKey::v4("10.1.2.0/26".parse().unwrap()))
        );
    }
}
