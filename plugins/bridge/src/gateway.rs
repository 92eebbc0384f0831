//! Gateway computation and gateway addresses on the bridge (reference `calcGateways`,
//! `ensureAddr`).

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::result::{CniResult, Route};
use netkit::{AddressOptions, Family, Netlink};

use crate::config::NetConf;
use crate::error::BridgeError;

/// Index of the container interface in the result's `interfaces` list.
pub const CONTAINER_IF_INDEX: usize = 2;

/// Gateway addresses (gateway IP with the container address's prefix) per family.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Gateways {
    pub v4: Vec<IpNetwork>,
    pub v6: Vec<IpNetwork>,
}

fn first_in_subnet(addr: &IpNetwork) -> Option<IpAddr> {
    match addr {
        IpNetwork::V4(n) => Some(IpAddr::V4(std::net::Ipv4Addr::from(
            u32::from(n.network()).wrapping_add(1),
        ))),
        IpNetwork::V6(n) => Some(IpAddr::V6(std::net::Ipv6Addr::from(
            u128::from(n.network()).wrapping_add(1),
        ))),
    }
}

fn default_dst(v6: bool) -> IpNetwork {
    let any = if v6 {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    };
    // A zero prefix is valid for both families, so this cannot fail; fall back to the host route form anyway.
    IpNetwork::new(any, 0).unwrap_or_else(|_| IpNetwork::from(any))
}

/// Points every IP at the container interface, fills in missing gateways (subnet + 1) when the
/// bridge is a gateway, adds default routes for `isDefaultGateway`, and returns the gateway
/// addresses to put on the bridge.
pub fn calc(result: &mut CniResult, conf: &NetConf) -> Result<Gateways, BridgeError> {
    let mut gws = Gateways::default();
    let mut default_found = [false, false];
    for i in 0..result.ips.len() {
        let v6 = result.ips[i].address.is_ipv6();
        result.ips[i].interface = Some(CONTAINER_IF_INDEX);
        if result.ips[i].gateway.is_none() && conf.is_gateway {
            result.ips[i].gateway = first_in_subnet(&result.ips[i].address);
        }
        let fam = usize::from(v6);
        if conf.is_default_gateway && !default_found[fam] {
            let dst = default_dst(v6);
            default_found[fam] = result.routes.iter().any(|r| r.gw.is_some() && r.dst == dst);
            if !default_found[fam] {
                result.routes.push(Route::new(dst, result.ips[i].gateway));
                default_found[fam] = true;
            }
        }
        if conf.is_gateway {
            if let Some(gw) = result.ips[i].gateway {
                let net = IpNetwork::new(gw, result.ips[i].address.prefix()).map_err(|source| {
                    BridgeError::Gateway {
                        gateway: gw,
                        source,
                    }
                })?;
                if v6 {
                    gws.v6.push(net);
                } else {
                    gws.v4.push(net);
                }
            }
        }
    }
    Ok(gws)
}

/// Makes sure `link` holds the gateway address `gw`. Another IPv4 address (or an overlapping
/// IPv6 one) is an error unless `force`, which replaces it.
pub fn ensure_addr<S: Netlink>(
    sock: &mut S,
    index: u32,
    name: &str,
    gw: IpNetwork,
    force: bool,
) -> Result<(), BridgeError> {
    let family = Family::of(gw.ip());
    let addrs = sock.addresses(Some(index), family)?;
    for a in addrs {
        if a.address == gw {
            return Ok(());
        }
        let overlaps = a.address.contains(gw.ip()) || gw.contains(a.address.ip());
        if gw.is_ipv4() || overlaps {
            if force {
                match sock.delete_address(index, a.address) {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            } else {
                return Err(BridgeError::AddressTaken {
                    link: name.to_string(),
                    gateway: gw,
                    existing: a.address,
                });
            }
        }
    }
    // No DAD for the gateway: pods must be able to reach it as soon as ADD returns.
    let opts = AddressOptions {
        nodad: gw.is_ipv6(),
        ..Default::default()
    };
    match sock.add_address(index, gw, &opts) {
        Ok(()) => Ok(()),
        Err(e) if e.is_exists() => Ok(()),
        Err(source) => Err(BridgeError::GatewayAddress {
            link: name.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::result::IpConfig;

    fn conf(gw: bool, default_gw: bool) -> NetConf {
        let raw = serde_json::json!({"isGateway": gw, "isDefaultGateway": default_gw, "ipam": {"type": "x"}});
        let args = libcni::skel::CmdArgs {
            command: libcni::skel::Command::Add,
            container_id: "c".into(),
            netns: String::new(),
            ifname: "eth0".into(),
            args: String::new(),
            path: vec![],
            stdin: vec![],
            config: raw.as_object().unwrap().clone(),
            cni_version: "1.0.0".into(),
            network_name: "n".into(),
        };
        crate::config::load(&args).unwrap()
    }

    fn ip(a: &str, gw: Option<&str>) -> IpConfig {
        IpConfig {
            interface: None,
            address: a.parse().unwrap(),
            gateway: gw.map(|g| g.parse().unwrap()),
        }
    }

    #[test]
    fn gateways_and_default_routes() {
        let mut r = CniResult {
            ips: vec![ip("10.1.0.5/24", None), ip("fd00::5/64", Some("fd00::1"))],
            ..Default::default()
        };
        let gws = calc(&mut r, &conf(true, true)).unwrap();
        assert_eq!(r.ips[0].gateway, Some("10.1.0.1".parse().unwrap()));
        assert!(r.ips.iter().all(|i| i.interface == Some(2)));
        assert_eq!(gws.v4, vec!["10.1.0.1/24".parse::<IpNetwork>().unwrap()]);
        assert_eq!(gws.v6, vec!["fd00::1/64".parse::<IpNetwork>().unwrap()]);
        assert_eq!(r.routes.len(), 2);
        assert_eq!(r.routes[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(r.routes[1].dst.to_string(), "::/0");
    }

    #[test]
    fn existing_default_route_is_kept() {
        let mut r = CniResult {
            ips: vec![ip("10.1.0.5/24", None)],
            ..Default::default()
        };
        r.routes.push(Route::new(
            "0.0.0.0/0".parse().unwrap(),
            Some("10.1.0.254".parse().unwrap()),
        ));
        calc(&mut r, &conf(true, true)).unwrap();
        assert_eq!(r.routes.len(), 1);
    }

    #[test]
    fn no_gateway_without_is_gateway() {
        let mut r = CniResult {
            ips: vec![ip("10.1.0.5/24", None)],
            ..Default::default()
        };
        let gws = calc(&mut r, &conf(false, false)).unwrap();
        assert_eq!(r.ips[0].gateway, None);
        assert_eq!(gws, Gateways::default());
    }
}
