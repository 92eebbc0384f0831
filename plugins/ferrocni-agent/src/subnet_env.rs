//! flannel's `subnet.env`, read by flannel's CNI meta-plugin and by our bridge (`subnetFile`).

use ipnetwork::Ipv4Network;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetEnv {
    pub network: Ipv4Network,
    /// The node's leased subnet; written as its first host address (`10.244.1.1/24`), as flannel does.
    pub subnet: Ipv4Network,
    pub mtu: u32,
    pub ipmasq: bool,
}

impl SubnetEnv {
    pub fn render(&self) -> String {
        let first = Ipv4Addr::from(u32::from(self.subnet.network()).wrapping_add(1));
        format!(
            "FLANNEL_NETWORK={}\nFLANNEL_SUBNET={}/{}\nFLANNEL_MTU={}\nFLANNEL_IPMASQ={}\n",
            self.network,
            first,
            self.subnet.prefix(),
            self.mtu,
            self.ipmasq
        )
    }
}

/// The subnet recorded in an existing subnet.env (`FLANNEL_SUBNET`), normalised to its network.
/// flanneld falls back to it on restart when no lease matches its PublicIP; so do we.
pub fn previous_subnet(contents: &str) -> Option<Ipv4Network> {
    contents.lines().find_map(|line| {
        let value = line.trim().strip_prefix("FLANNEL_SUBNET=")?;
        let net: Ipv4Network = value.trim().parse().ok()?;
        Ipv4Network::new(net.network(), net.prefix()).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_flannel_format() {
        let env = SubnetEnv {
            network: "10.244.0.0/16".parse().unwrap(),
            subnet: "10.244.1.0/24".parse().unwrap(),
            mtu: 1450,
            ipmasq: true,
        };
        assert_eq!(
            env.render(),
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
        );
        assert_eq!(
            previous_subnet(&env.render()),
            Some("10.244.1.0/24".parse().unwrap())
        );
    }

    #[test]
    fn previous_subnet_tolerates_junk() {
        assert_eq!(previous_subnet(""), None);
        assert_eq!(previous_subnet("FLANNEL_SUBNET=garbage\n"), None);
        assert_eq!(
            previous_subnet("X=1\n FLANNEL_SUBNET=10.1.2.1/26 \n"),
            Some("10.1.2.0/26".parse().unwrap())
        );
    }
}
