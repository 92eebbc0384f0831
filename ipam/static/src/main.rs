//! `static`: an IPAM plugin that returns the addresses, routes and DNS settings it is given.
//! Nothing is allocated, so DEL and GC have nothing to release.

use static_ipam::{config, error};

use libcni::result::IpConfig;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::{CniError, CniResult};

use crate::config::StaticConfig;
use crate::error::StaticError;

struct Static;

fn result_of(conf: StaticConfig) -> CniResult {
    let mut result = CniResult::new();
    result.ips = conf
        .addresses
        .into_iter()
        .map(|a| IpConfig {
            interface: None,
            address: a.address,
            gateway: a.gateway,
        })
        .collect();
    result.routes = conf.routes;
    result.dns = conf.dns;
    result
}

/// Every configured address must be in prevResult, with the configured gateway when one is
/// set (the reference skips addresses that are missing; we report them).
fn verify(conf: &StaticConfig, prev: &CniResult, ifname: &str) -> Result<(), StaticError> {
    for want in &conf.addresses {
        let found = prev
            .ips
            .iter()
            .find(|ip| ip.address.ip() == want.address.ip());
        match found {
            None => {
                return Err(StaticError::NotInPrevResult {
                    address: want.address,
                    ifname: ifname.to_string(),
                })
            }
            Some(ip) if want.gateway.is_some() && ip.gateway != want.gateway => {
                return Err(StaticError::GatewayMismatch {
                    address: want.address.ip(),
                    ifname: ifname.to_string(),
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn check(args: &CmdArgs) -> Result<(), StaticError> {
    let conf = config::load(args)?;
    let prev = args.prev_result()?.ok_or(StaticError::MissingPrevResult)?;
    verify(&conf, &prev, &args.ifname)
}

impl Plugin for Static {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(config::load(args).map(result_of)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Nothing was allocated; the config is still validated so a broken one is reported.
        Ok(config::load(args).map(|_| ())?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(args)?)
    }
}

fn main() {
    skel::run(&Static, "CNI static plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StaticAddress;

    fn prev(addrs: &[(&str, Option<&str>)]) -> CniResult {
        let mut r = CniResult::new();
        r.ips = addrs
            .iter()
            .map(|(a, g)| IpConfig {
                interface: Some(0),
                address: a.parse().unwrap(),
                gateway: g.map(|g| g.parse().unwrap()),
            })
            .collect();
        r
    }

    #[test]
    fn check_compares_addresses_and_gateways() {
        let conf = StaticConfig {
            addresses: vec![StaticAddress {
                address: "10.0.0.2/24".parse().unwrap(),
                gateway: Some("10.0.0.1".parse().unwrap()),
            }],
            ..Default::default()
        };
        assert!(verify(&conf, &prev(&[("10.0.0.2/24", Some("10.0.0.1"))]), "eth0").is_ok());
        assert!(verify(&conf, &prev(&[("10.0.0.2/24", Some("10.0.0.9"))]), "eth0").is_err());
        assert!(verify(&conf, &prev(&[("10.0.0.3/24", None)]), "eth0").is_err());
    }
}
