//! The static IPAM configuration: `ipam.addresses`, `ipam.routes`, `ipam.dns`, plus the
//! addresses a runtime may request (CNI_ARGS `IP`/`GATEWAY`, `args.cni.ips`,
//! `runtimeConfig.ips`), merged with the reference's precedence.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::result::{Dns, Route};
use libcni::skel::CmdArgs;
use serde::Deserialize;

use crate::error::StaticError;

/// One address of the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticAddress {
    /// The address with its prefix (host bits kept).
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
}

/// Everything ADD returns and CHECK compares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StaticConfig {
    pub addresses: Vec<StaticAddress>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "Net")]
struct NetConf {
    #[serde(default, rename = "cniVersion")]
    cni_version: String,
    ipam: Option<IpamConf>,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: RuntimeConf,
    args: Option<ArgsConf>,
}

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "IPAMConfig")]
struct IpamConf {
    #[serde(default)]
    routes: Vec<RouteConf>,
    #[serde(default)]
    addresses: Vec<AddressConf>,
    #[serde(default)]
    dns: DnsConf,
}

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "Address")]
struct AddressConf {
    #[serde(default)]
    address: String,
    #[serde(default)]
    gateway: String,
}

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "Route")]
struct RouteConf {
    #[serde(default)]
    dst: String,
    #[serde(default)]
    gw: String,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default, rename = "advmss")]
    adv_mss: Option<u32>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    table: Option<u32>,
    #[serde(default)]
    scope: Option<u8>,
}

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "DNS")]
struct DnsConf {
    #[serde(default)]
    nameservers: Vec<String>,
    #[serde(default)]
    domain: String,
    #[serde(default)]
    search: Vec<String>,
    #[serde(default)]
    options: Vec<String>,
}

#[derive(Deserialize, Default)]
struct RuntimeConf {
    #[serde(default)]
    ips: Vec<String>,
}

#[derive(Deserialize, Default)]
struct ArgsConf {
    cni: Option<CniArgsConf>,
}

#[derive(Deserialize, Default)]
struct CniArgsConf {
    #[serde(default)]
    ips: Vec<String>,
}

/// Go's `net.ParseIP`, plus `To4()` canonicalisation of IPv4-mapped IPv6 addresses.
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    let ip: IpAddr = s.parse().ok()?;
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

/// Go's `net.ParseCIDR` keeping the host bits (`10.1.2.3/24` stays `10.1.2.3/24`). An
/// IPv4-mapped IPv6 address becomes IPv4 with the prefix shortened accordingly.
pub fn parse_cidr(s: &str) -> Option<IpNetwork> {
    let (ip, prefix) = s.split_once('/')?;
    if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u8 = prefix.parse().ok()?;
    let parsed: IpAddr = ip.parse().ok()?;
    let (ip, prefix) = match parsed {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) if prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
            _ => (parsed, prefix),
        },
        v4 => (v4, prefix),
    };
    IpNetwork::new(ip, prefix).ok()
}

/// An address of the result from `text`, or the reference's error naming the field it came
/// from (`not_cidr(text)`).
fn address(text: &str, not_cidr: fn(String) -> StaticError) -> Result<StaticAddress, StaticError> {
    let address = parse_cidr(text).ok_or_else(|| not_cidr(text.to_string()))?;
    Ok(StaticAddress {
        address,
        gateway: None,
    })
}

/// A `gateway` or route `gw`: Go decodes it as a `net.IP`, whose decoder words the error.
fn parse_gateway(s: &str) -> Result<Option<IpAddr>, StaticError> {
    if s.is_empty() {
        return Ok(None);
    }
    parse_ip(s)
        .map(Some)
        .ok_or_else(|| StaticError::InvalidIp(s.to_string()))
}

fn route(r: &RouteConf) -> Result<Route, StaticError> {
    // The reference accepts a route without dst (and prints a broken result): ours refuses.
    if r.dst.is_empty() {
        return Err(StaticError::RouteWithoutDst);
    }
    // Go decodes dst as a `types.IPNet`, whose decoder words the error.
    let dst = parse_cidr(&r.dst).ok_or_else(|| StaticError::InvalidCidr(r.dst.clone()))?;
    let gw = parse_gateway(&r.gw)?;
    Ok(Route {
        dst,
        gw,
        mtu: r.mtu,
        advmss: r.adv_mss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    })
}

/// A comma-separated CNI_ARGS list, items trimmed as the reference does.
fn comma_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim)
}

/// Loads the configuration of a call: the request's config and its CNI_ARGS.
pub fn load(args: &CmdArgs) -> Result<StaticConfig, StaticError> {
    // The reference returns the JSON decoder's error unwrapped.
    let conf: NetConf = args.decode_config().map_err(StaticError::Decode)?;
    let pairs = args.cni_args()?;
    libcni::args::check_known(&pairs, &["IP", "GATEWAY"])?;
    let env_ip = libcni::args::get(&pairs, "IP").unwrap_or_default();
    let env_gateway = libcni::args::get(&pairs, "GATEWAY").unwrap_or_default();
    build(&conf, env_ip, env_gateway)
}

/// The configured addresses with the reference's precedence and validation order: the
/// CNI_ARGS ones (with GATEWAY) are checked first, then `args.cni.ips`, then
/// `runtimeConfig.ips` (each of the last two replacing what came before), and the
/// `ipam.addresses` last, only when nothing replaced them.
fn addresses(
    conf: &NetConf,
    ipam: &IpamConf,
    env_ip: &str,
    env_gateway: &str,
) -> Result<Vec<StaticAddress>, StaticError> {
    let mut from_env = Vec::new();
    if !env_ip.is_empty() {
        for item in comma_list(env_ip) {
            from_env.push(address(item, StaticError::EnvIpNotCidr)?);
        }
    }
    // GATEWAY applies to the CNI_ARGS addresses whose subnet contains it.
    if !env_gateway.is_empty() {
        for item in env_gateway.split(',') {
            let gw = parse_ip(item.trim())
                .ok_or_else(|| StaticError::InvalidGateway(item.to_string()))?;
            for a in from_env.iter_mut().filter(|a| a.address.contains(gw)) {
                a.gateway = Some(gw);
            }
        }
    }
    let requested = |ips: &[String]| -> Result<Vec<StaticAddress>, StaticError> {
        ips.iter()
            .map(|s| address(s, StaticError::IpsEntryNotCidr))
            .collect()
    };
    let from_args = match conf.args.as_ref().and_then(|a| a.cni.as_ref()) {
        Some(c) if !c.ips.is_empty() => Some(requested(&c.ips)?),
        _ => None,
    };
    if !conf.runtime_config.ips.is_empty() {
        return requested(&conf.runtime_config.ips);
    }
    if let Some(a) = from_args {
        return Ok(a);
    }
    let mut addresses = Vec::new();
    for a in &ipam.addresses {
        let mut parsed = address(&a.address, StaticError::AddressNotCidr)?;
        parsed.gateway = parse_gateway(&a.gateway)?;
        addresses.push(parsed);
    }
    addresses.extend(from_env);
    Ok(addresses)
}

fn build(conf: &NetConf, env_ip: &str, env_gateway: &str) -> Result<StaticConfig, StaticError> {
    let ipam = conf.ipam.as_ref().ok_or(StaticError::MissingIpam)?;
    let addresses = addresses(conf, ipam, env_ip, env_gateway)?;

    let v4 = addresses.iter().filter(|a| a.address.is_ipv4()).count();
    let v6 = addresses.len() - v4;
    if (v4 > 1 || v6 > 1) && !libcni::version::at_least(&conf.cni_version, "0.3.0") {
        return Err(StaticError::TooManyAddresses(conf.cni_version.clone()));
    }

    let routes = ipam.routes.iter().map(route).collect::<Result<_, _>>()?;
    let dns = Dns {
        nameservers: ipam.dns.nameservers.clone(),
        domain: ipam.dns.domain.clone(),
        search: ipam.dns.search.clone(),
        options: ipam.dns.options.clone(),
    };
    Ok(StaticConfig {
        addresses,
        routes,
        dns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn load_json(v: Value, ip: &str, gw: &str) -> Result<StaticConfig, libcni::CniError> {
        let conf: NetConf = libcni::gojson::from_value(&v).unwrap();
        Ok(build(&conf, ip, gw)?)
    }

    fn addrs(c: &StaticConfig) -> Vec<String> {
        c.addresses
            .iter()
            .map(|a| match a.gateway {
                Some(g) => format!("{} gw {g}", a.address),
                None => a.address.to_string(),
            })
            .collect()
    }

    #[test]
    fn config_addresses_routes_dns() {
        let c = load_json(
            json!({"cniVersion":"1.0.0","ipam":{"type":"static",
              "addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"3ffe:ffff:0:01ff::1/64"}],
              "routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.10.5.1","mtu":1400,"table":100}],
              "dns":{"nameservers":["8.8.8.8"],"domain":"example.com","search":["example.com"]}}}),
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            addrs(&c),
            ["10.10.0.1/24 gw 10.10.0.254", "3ffe:ffff:0:1ff::1/64"]
        );
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[1].gw, Some("10.10.5.1".parse().unwrap()));
        assert_eq!(
            (c.routes[1].mtu, c.routes[1].table),
            (Some(1400), Some(100))
        );
        assert_eq!(c.dns.domain, "example.com");
    }

    #[test]
    fn cni_args_append_and_gateway_matches_only_their_subnet() {
        let c = load_json(
            json!({"cniVersion":"1.0.0","ipam":{"addresses":[{"address":"10.10.0.1/24"}]}}),
            "10.20.0.5/24, fd00::5/64",
            "10.20.0.1,10.10.0.254",
        )
        .unwrap();
        assert_eq!(
            addrs(&c),
            ["10.10.0.1/24", "10.20.0.5/24 gw 10.20.0.1", "fd00::5/64"]
        );
    }

    #[test]
    fn args_then_runtime_config_replace_everything() {
        let base = json!({"cniVersion":"1.0.0","ipam":{"addresses":[{"address":"10.10.0.1/24"}]},
                          "args":{"cni":{"ips":["10.30.0.2/24"]}}});
        let c = load_json(base.clone(), "10.20.0.5/24", "").unwrap();
        assert_eq!(addrs(&c), ["10.30.0.2/24"]);
        let mut with_rc = base;
        with_rc["runtimeConfig"] = json!({"ips":["10.40.0.2/24","fd00::2/64"]});
        let c = load_json(with_rc, "", "").unwrap();
        assert_eq!(addrs(&c), ["10.40.0.2/24", "fd00::2/64"]);
    }

    #[test]
    fn go_key_matching_and_nulls() {
        let c = load_json(
            json!({"cniVersion":"1.0.0","IPAM":{"Addresses":[{"Address":"10.1.0.2/16","Gateway":null}],"routes":null},
                   "RuntimeConfig":{"IPs":null}}),
            "",
            "",
        )
        .unwrap();
        assert_eq!(addrs(&c), ["10.1.0.2/16"]);
    }

    #[test]
    fn errors() {
        let e = load_json(json!({"cniVersion":"1.0.0"}), "", "").unwrap_err();
        assert_eq!(e.msg, "IPAM config missing 'ipam' key");
        assert_eq!(e.code, 999);
        let e = load_json(
            json!({"cniVersion":"1.0.0","ipam":{"addresses":[{"address":"10.1.0.2"}]}}),
            "",
            "",
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                999,
                "the 'address' field is expected to be in CIDR notation, got: '10.1.0.2'"
            )
        );
        let e = load_json(json!({"cniVersion":"1.0.0","ipam":{}}), "10.1.0.2", "").unwrap_err();
        assert_eq!(
            e.msg,
            "the 'ip' field is expected to be in CIDR notation, got: '10.1.0.2'"
        );
        for requested in [
            json!({"cniVersion":"1.0.0","ipam":{},"args":{"cni":{"ips":["10.1.0.2"]}}}),
            json!({"cniVersion":"1.0.0","ipam":{},"runtimeConfig":{"ips":["10.1.0.2"]}}),
        ] {
            assert_eq!(
                load_json(requested, "", "").unwrap_err().msg,
                "an entry in the 'ips' field is NOT in CIDR notation, got: '10.1.0.2'"
            );
        }
        // Replaced addresses are not looked at, as upstream.
        assert!(load_json(
            json!({"cniVersion":"1.0.0","ipam":{"addresses":[{"address":"bad"}]},
                   "runtimeConfig":{"ips":["10.1.0.2/24"]}}),
            "",
            ""
        )
        .is_ok());
        let e = load_json(
            json!({"cniVersion":"1.0.0","ipam":{}}),
            "10.0.0.2/24",
            "nope",
        )
        .unwrap_err();
        assert_eq!(e.msg, "invalid gateway address: nope");
        let e = load_json(
            json!({"cniVersion":"0.2.0","ipam":{"addresses":[{"address":"10.1.0.2/24"},{"address":"10.2.0.2/24"}]}}),
            "",
            "",
        )
        .unwrap_err();
        assert!(e
            .msg
            .contains("does not support more than 1 address per family"));
        assert!(load_json(
            json!({"cniVersion":"1.0.0","ipam":{"routes":[{"gw":"10.0.0.1"}]}}),
            "",
            ""
        )
        .is_err());
        assert!(load_json(
            json!({"cniVersion":"1.0.0","ipam":{"addresses":[{"address":"10.0.0.2/33"}]}}),
            "",
            ""
        )
        .is_err());
    }

    #[test]
    fn ipv4_mapped_addresses_become_ipv4() {
        assert_eq!(
            parse_cidr("::ffff:10.0.0.2/120").unwrap().to_string(),
            "10.0.0.2/24"
        );
        assert_eq!(
            parse_ip("::ffff:10.0.0.1"),
            Some("10.0.0.1".parse().unwrap())
        );
    }
}
