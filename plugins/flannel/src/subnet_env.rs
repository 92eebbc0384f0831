//! flannel's `subnet.env` as flannel's CNI plugin reads it: `KEY=value` lines, unknown keys
//! ignored, `FLANNEL_NETWORK`/`FLANNEL_IPV6_NETWORK` comma-separated lists, subnets read as
//! their network (`10.244.1.1/24` is `10.244.1.0/24`).

use std::path::Path;

use ipnetwork::IpNetwork;

/// The values a delegate is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetEnv {
    pub networks: Vec<IpNetwork>,
    pub subnet: Option<IpNetwork>,
    pub ipv6_networks: Vec<IpNetwork>,
    pub ipv6_subnet: Option<IpNetwork>,
    pub mtu: u32,
    /// `FLANNEL_IPMASQ=true`: flanneld masquerades, so the bridge must not.
    pub ipmasq: bool,
}

/// Why the file cannot be used; the text names the file and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError(pub String);

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A CIDR as Go's `net.ParseCIDR` returns it: the network, host bits cleared.
fn parse_cidr(key: &str, text: &str) -> Result<IpNetwork, String> {
    let net: IpNetwork = text
        .trim()
        .parse()
        .map_err(|e| format!("{key} {text:?} is not a CIDR: {e}"))?;
    IpNetwork::new(net.network(), net.prefix()).map_err(|e| format!("{key} {text:?}: {e}"))
}

fn parse_list(key: &str, text: &str) -> Result<Vec<IpNetwork>, String> {
    let mut nets: Vec<IpNetwork> = Vec::new();
    for part in text.split(',') {
        let net = parse_cidr(key, part)?;
        if !nets.contains(&net) {
            nets.push(net);
        }
    }
    Ok(nets)
}

impl SubnetEnv {
    pub fn load(path: &Path) -> Result<SubnetEnv, EnvError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| EnvError(format!("failed to read {}: {e}", path.display())))?;
        SubnetEnv::parse(&text).map_err(|e| EnvError(format!("{}: {e}", path.display())))
    }

    pub fn parse(text: &str) -> Result<SubnetEnv, String> {
        let mut networks = Vec::new();
        let mut ipv6_networks = Vec::new();
        let (mut subnet, mut ipv6_subnet, mut mtu, mut ipmasq) = (None, None, None, None);
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            match key.trim() {
                "FLANNEL_NETWORK" => networks = parse_list("FLANNEL_NETWORK", value)?,
                "FLANNEL_SUBNET" => subnet = Some(parse_cidr("FLANNEL_SUBNET", value)?),
                "FLANNEL_IPV6_NETWORK" => {
                    ipv6_networks = parse_list("FLANNEL_IPV6_NETWORK", value)?
                }
                "FLANNEL_IPV6_SUBNET" => {
                    ipv6_subnet = Some(parse_cidr("FLANNEL_IPV6_SUBNET", value)?)
                }
                "FLANNEL_MTU" => {
                    mtu = Some(value.trim().parse::<u32>().map_err(|e| {
                        format!("FLANNEL_MTU {value:?} is not a 32-bit unsigned number: {e}")
                    })?)
                }
                // Anything but "true" is false, as in flannel.
                "FLANNEL_IPMASQ" => ipmasq = Some(value.trim() == "true"),
                _ => {}
            }
        }
        let mut missing = Vec::new();
        if networks.is_empty() && ipv6_networks.is_empty() {
            missing.extend(["FLANNEL_NETWORK", "FLANNEL_IPV6_NETWORK"]);
        }
        if subnet.is_none() && ipv6_subnet.is_none() {
            missing.extend(["FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET"]);
        }
        if mtu.is_none() {
            missing.push("FLANNEL_MTU");
        }
        if ipmasq.is_none() {
            missing.push("FLANNEL_IPMASQ");
        }
        match (mtu, ipmasq) {
            (Some(mtu), Some(ipmasq)) if missing.is_empty() => Ok(SubnetEnv {
                networks,
                subnet,
                ipv6_networks,
                ipv6_subnet,
                mtu,
                ipmasq,
            }),
            _ => Err(format!("is missing {}", missing.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flanneld_dual_stack_file() {
        let env = SubnetEnv::parse(
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n\
             FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n\
             FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        )
        .unwrap();
        assert_eq!(env.networks, ["10.244.0.0/16".parse().unwrap()]);
        assert_eq!(env.subnet, Some("10.244.1.0/24".parse().unwrap()));
        assert_eq!(env.ipv6_subnet, Some("fd00:10:244:1::/64".parse().unwrap()));
        assert_eq!((env.mtu, env.ipmasq), (1450, true));
    }

    #[test]
    fn network_lists_are_deduplicated_and_ipmasq_is_true_only_for_true() {
        let env = SubnetEnv::parse(
            "FLANNEL_NETWORK=10.42.0.0/16,192.168.0.0/16,10.42.0.0/16\nFLANNEL_SUBNET=10.42.0.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=yes\nOTHER=1\n",
        )
        .unwrap();
        assert_eq!(env.networks.len(), 2);
        assert!(!env.ipmasq);
    }

    #[test]
    fn missing_and_bad_values_are_named() {
        let err = SubnetEnv::parse("FLANNEL_MTU=1450\n").unwrap_err();
        assert_eq!(
            err,
            "is missing FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK, FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET, FLANNEL_IPMASQ"
        );
        for bad in [
            "FLANNEL_SUBNET=10.244.1.1\n",
            "FLANNEL_NETWORK=10.0.0.0/8,nope\n",
            "FLANNEL_MTU=-1\n",
        ] {
            assert!(SubnetEnv::parse(bad).is_err(), "{bad}");
        }
    }
}
