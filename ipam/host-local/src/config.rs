//! The network configuration as host-local reads it: the `ipam` section plus `name`,
//! `cniVersion`, `runtimeConfig` (`ips`, `ipRanges`) and `args.cni.ips` of the full netconf.
//! Keys are matched like Go's encoding/json (`libcni::gojson`).

use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::error::IpamError;
use crate::ip::{canonical, parse_ip_maybe_prefix, Family};
use crate::range::{RangeSet, RangeSpec};

pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";
/// The `ipam` key that keeps leases across reboots of the node.
const KEEP_ACROSS_REBOOTS: &str = "keepLeasesAcrossReboots";

/// A route of the `routes` list, returned verbatim in the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamConfig {
    pub name: String,
    pub cni_version: String,
    /// runtimeConfig.ipRanges, then the legacy single range, then `ranges` (reference order).
    pub ranges: Vec<RangeSet>,
    pub routes: Vec<RouteSpec>,
    pub data_dir: PathBuf,
    pub resolv_conf: Option<String>,
    /// CNI_ARGS `IP`, then `args.cni.ips`, then `runtimeConfig.ips`, duplicates removed.
    pub requested_ips: Vec<IpAddr>,
    /// `keepLeasesAcrossReboots`: the leases of an earlier boot of the node are kept (as the
    /// reference keeps them) instead of being freed by the first call of a new boot.
    pub keep_leases_across_reboots: bool,
}

/// Go-style key lookup (exact or case-folded, last wins); `null` counts as absent.
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    libcni::gojson::get(obj, key)
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, IpamError> {
    v.as_object()
        .ok_or_else(|| wrong_type(what, "an object", v))
}

fn array<'a>(v: &'a Value, what: &str) -> Result<&'a Vec<Value>, IpamError> {
    v.as_array().ok_or_else(|| wrong_type(what, "a list", v))
}

fn string<'a>(v: &'a Value, what: &str) -> Result<&'a str, IpamError> {
    v.as_str().ok_or_else(|| wrong_type(what, "a string", v))
}

fn wrong_type(field: &str, expected: &'static str, value: &Value) -> IpamError {
    IpamError::WrongType {
        field: field.to_string(),
        expected,
        value: value.clone(),
    }
}

/// An optional IP field; "" means absent, as with Go's net.IP.
fn ip_field(obj: &Map<String, Value>, key: &str) -> Result<Option<IpAddr>, IpamError> {
    match field(obj, key) {
        None => Ok(None),
        Some(v) => {
            let s = string(v, key)?;
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<IpAddr>()
                .map(|ip| Some(canonical(ip)))
                .map_err(|_| IpamError::InvalidIp(s.to_string()))
        }
    }
}

fn parse_cidr(s: &str) -> Result<(IpAddr, u8), IpamError> {
    let err = || IpamError::InvalidCidr(s.to_string());
    let (ip, prefix) = s.split_once('/').ok_or_else(err)?;
    let ip: IpAddr = ip.parse().map_err(|_| err())?;
    let prefix: u8 = prefix.parse().map_err(|_| err())?;
    // IPv4-mapped IPv6 keeps its IPv6 prefix; canonicalising it would need a mask conversion
    // the reference rejects anyway ("IPNet IP and Mask version mismatch").
    if prefix > Family::of(&ip).bits() {
        return Err(err());
    }
    Ok((ip, prefix))
}

fn range_spec(v: &Value) -> Result<RangeSpec, IpamError> {
    let obj = object(v, "range")?;
    let subnet = match field(obj, "subnet") {
        Some(s) => parse_cidr(string(s, "subnet")?)?,
        None => return Err(IpamError::MissingSubnet),
    };
    Ok(RangeSpec {
        subnet,
        range_start: ip_field(obj, "rangeStart")?,
        range_end: ip_field(obj, "rangeEnd")?,
        gateway: ip_field(obj, "gateway")?,
    })
}

fn range_sets(v: &Value, what: &str) -> Result<Vec<Vec<RangeSpec>>, IpamError> {
    array(v, what)?
        .iter()
        .map(|set| {
            array(set, what)?
                .iter()
                .map(range_spec)
                .collect::<Result<Vec<_>, _>>()
        })
        .collect()
}

fn ip_list(v: &Value, what: &str, out: &mut Vec<IpAddr>) -> Result<(), IpamError> {
    for item in array(v, what)? {
        let s = string(item, what)?;
        let ip = parse_ip_maybe_prefix(s).ok_or_else(|| IpamError::RequestedIp(s.to_string()))?;
        out.push(ip);
    }
    Ok(())
}

fn routes(v: &Value) -> Result<Vec<RouteSpec>, IpamError> {
    let mut out = Vec::new();
    for item in array(v, "routes")? {
        let obj = object(item, "route")?;
        let dst = match field(obj, "dst") {
            Some(d) => {
                let s = string(d, "dst")?;
                let (ip, prefix) = parse_cidr(s)?;
                IpNetwork::new(ip, prefix).map_err(|_| IpamError::InvalidCidr(s.to_string()))?
            }
            None => return Err(IpamError::MissingDst),
        };
        out.push(RouteSpec {
            dst,
            gw: ip_field(obj, "gw")?,
        });
    }
    Ok(out)
}

/// `a.b.c` >= `0.3.0`; anything unparsable (including "") is not.
fn at_least_0_3_0(version: &str) -> bool {
    let parts: Vec<Option<u64>> = version.split('.').map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [Some(a), Some(b), Some(_)] => (*a, *b) >= (0, 3),
        _ => false,
    }
}

/// Loads and validates the configuration. `env_ip` is the CNI_ARGS `IP` value, if any.
pub fn load(conf: &Map<String, Value>, env_ip: Option<&str>) -> Result<IpamConfig, IpamError> {
    let ipam = match field(conf, "ipam") {
        Some(v) => object(v, "ipam")?,
        None => return Err(IpamError::MissingIpam),
    };
    let name = field(conf, "name")
        .map(|v| string(v, "name"))
        .transpose()?
        .unwrap_or("")
        .to_string();
    let cni_version = field(conf, "cniVersion")
        .map(|v| string(v, "cniVersion"))
        .transpose()?
        .unwrap_or("")
        .to_string();
    let runtime = field(conf, "runtimeConfig")
        .map(|v| object(v, "runtimeConfig"))
        .transpose()?;
    let args_cni = match field(conf, "args") {
        Some(a) => field(object(a, "args")?, "cni")
            .map(|c| object(c, "args.cni"))
            .transpose()?,
        None => None,
    };

    let mut requested = Vec::new();
    if let Some(ip) = env_ip.filter(|s| !s.is_empty()) {
        requested.push(parse_ip_maybe_prefix(ip).ok_or_else(|| IpamError::EnvIp(ip.to_string()))?);
    }
    if let Some(ips) = args_cni.and_then(|a| field(a, "ips")) {
        ip_list(ips, "args.cni.ips", &mut requested)?;
    }
    if let Some(ips) = runtime.and_then(|r| field(r, "ips")) {
        ip_list(ips, "runtimeConfig.ips", &mut requested)?;
    }
    let mut requested_ips: Vec<IpAddr> = Vec::with_capacity(requested.len());
    for ip in requested {
        if !requested_ips.contains(&ip) {
            requested_ips.push(ip);
        }
    }

    let mut specs: Vec<Vec<RangeSpec>> = Vec::new();
    if let Some(v) = runtime.and_then(|r| field(r, "ipRanges")) {
        specs.extend(range_sets(v, "runtimeConfig.ipRanges")?);
    }
    if let Some(s) = field(ipam, "subnet") {
        let subnet = parse_cidr(string(s, "subnet")?)?;
        specs.push(vec![RangeSpec {
            subnet,
            range_start: ip_field(ipam, "rangeStart")?,
            range_end: ip_field(ipam, "rangeEnd")?,
            gateway: ip_field(ipam, "gateway")?,
        }]);
    }
    if let Some(v) = field(ipam, "ranges") {
        specs.extend(range_sets(v, "ranges")?);
    }
    if specs.is_empty() {
        return Err(IpamError::NoRanges);
    }
    let mut ranges = Vec::with_capacity(specs.len());
    for (i, set) in specs.iter().enumerate() {
        ranges.push(
            RangeSet::canonicalize(set)
                .map_err(|reason| IpamError::RangeSet { index: i, reason })?,
        );
    }
    let v4 = ranges.iter().filter(|s| s.family() == Family::V4).count();
    let v6 = ranges.len() - v4;
    if (v4 > 1 || v6 > 1) && !at_least_0_3_0(&cni_version) {
        return Err(IpamError::TooManyAddresses(cni_version));
    }
    for (i, a) in ranges.iter().enumerate() {
        for (j, b) in ranges.iter().enumerate().skip(i + 1) {
            if a.overlaps(b) {
                return Err(IpamError::Overlap(i, j));
            }
        }
    }

    let data_dir = match field(ipam, "dataDir")
        .map(|v| string(v, "dataDir"))
        .transpose()?
    {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_DATA_DIR),
    };
    let resolv_conf = field(ipam, "resolvConf")
        .map(|v| string(v, "resolvConf"))
        .transpose()?
        .filter(|s| !s.is_empty());
    let routes = field(ipam, "routes")
        .map(routes)
        .transpose()?
        .unwrap_or_default();
    let keep_leases_across_reboots = field(ipam, KEEP_ACROSS_REBOOTS)
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| wrong_type(KEEP_ACROSS_REBOOTS, "a boolean", v))
        })
        .transpose()?
        .unwrap_or(false);

    Ok(IpamConfig {
        name,
        cni_version,
        ranges,
        routes,
        data_dir,
        resolv_conf: resolv_conf.map(str::to_string),
        requested_ips,
        keep_leases_across_reboots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load_json(v: Value, env_ip: Option<&str>) -> Result<IpamConfig, IpamError> {
        load(v.as_object().unwrap(), env_ip)
    }

    #[test]
    fn orders_runtime_legacy_then_ranges() {
        let c = load_json(
            json!({"cniVersion":"1.0.0","name":"n","runtimeConfig":{"ipRanges":[[{"subnet":"10.9.0.0/24"}]]},
                   "ipam":{"type":"host-local","subnet":"10.1.0.0/24","gateway":"10.1.0.254",
                           "ranges":[[{"subnet":"fd00::/64"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"10.5.0.0/16","gw":"10.1.0.9"}],
                           "dataDir":"/tmp/x","resolvConf":"/etc/r"}}),
            None,
        )
        .unwrap();
        let first: Vec<String> = c.ranges.iter().map(|s| s.0[0].subnet_string()).collect();
        assert_eq!(first, ["10.9.0.0/24", "10.1.0.0/24", "fd00::/64"]);
        assert_eq!(c.ranges[1].0[0].gateway.to_string(), "10.1.0.254");
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[1].gw.unwrap().to_string(), "10.1.0.9");
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.resolv_conf.as_deref(), Some("/etc/r"));
    }

    #[test]
    fn containerd_ip_ranges_with_go_field_names() {
        // go-cni's IPRanges struct has no JSON tags, and empty strings for unset fields.
        let c = load_json(
            json!({"cniVersion":"1.0.0","name":"n","runtimeConfig":{"ipRanges":[[
                      {"Subnet":"10.9.0.0/24","RangeStart":"","RangeEnd":"10.9.0.99","Gateway":""}]]},
                   "IPAM":{"type":"host-local","Ranges":[[{"Subnet":"fd00::/64"}]],"DataDir":"/tmp/y"}}),
            None,
        )
        .unwrap();
        let first: Vec<String> = c.ranges.iter().map(|s| s.0[0].subnet_string()).collect();
        assert_eq!(first, ["10.9.0.0/24", "fd00::/64"]);
        assert_eq!(c.ranges[0].0[0].range_end.to_string(), "10.9.0.99");
        assert_eq!(c.ranges[0].0[0].gateway.to_string(), "10.9.0.1");
        assert_eq!(c.data_dir, PathBuf::from("/tmp/y"));
    }

    #[test]
    fn collects_requested_ips_from_all_sources() {
        let c = load_json(
            json!({"cniVersion":"1.0.0","name":"n","args":{"cni":{"ips":["10.1.0.7","fd00::7"]}},
                   "runtimeConfig":{"ips":["10.1.0.7/24","10.1.0.8/24"]},
                   "ipam":{"ranges":[[{"subnet":"10.1.0.0/24"}]]}}),
            Some("10.1.0.9"),
        )
        .unwrap();
        let ips: Vec<String> = c.requested_ips.iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["10.1.0.9", "10.1.0.7", "fd00::7", "10.1.0.8"]);
        assert!(load_json(
            json!({"name":"n","ipam":{"subnet":"10.1.0.0/24"}}),
            Some("nope")
        )
        .is_err());
    }

    #[test]
    fn reference_errors() {
        let e = |v: Value| load_json(v, None).unwrap_err().to_string();
        assert_eq!(e(json!({"name":"n"})), "IPAM config missing 'ipam' key");
        assert_eq!(
            e(json!({"name":"n","ipam":{"ranges":[]}})),
            "no IP ranges specified"
        );
        assert_eq!(
            e(json!({"name":"n","ipam":{"ranges":[[]]}})),
            "invalid range set 0: empty range set"
        );
        assert_eq!(
            e(
                json!({"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"10.2.0.0/25"}]]}})
            ),
            "range set 0 overlaps with 1"
        );
        assert_eq!(
            e(
                json!({"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"10.3.0.0/24"}]]}})
            ),
            "CNI version 0.2.0 does not support more than 1 address per family"
        );
        assert_eq!(e(json!({"name":"n","ipam":{"subnet":"10.1.0.5/24"}})),
            "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.1.0.0");
        assert_eq!(
            e(json!({"name":"n","ipam":{"subnet":"10.1.0.0/33"}})),
            "invalid CIDR address: 10.1.0.0/33"
        );
        assert_eq!(
            e(json!({"name":"n","ipam":{"subnet":"10.1.0.0/24","rangeStart":"x"}})),
            "invalid IP address: x"
        );
        // v4 + v6 with 0.2.0 is fine
        load_json(json!({"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"fd00::/64"}]]}}), None).unwrap();
    }

    #[test]
    fn keep_leases_across_reboots_decodes_like_the_other_fields() {
        let keep = |ipam: Value| {
            let mut ipam = ipam;
            ipam["subnet"] = json!("10.1.0.0/24");
            load_json(json!({"name": "n", "ipam": ipam}), None)
                .map(|c| c.keep_leases_across_reboots)
        };
        assert!(!keep(json!({})).unwrap());
        assert!(keep(json!({"keepLeasesAcrossReboots": true})).unwrap());
        assert!(keep(json!({"KeepLeasesAcrossReboots": true})).unwrap());
        assert!(!keep(json!({"keepLeasesAcrossReboots": null})).unwrap());
        // A repeated key: the last one wins, as Go decodes it.
        let repeated = libcni::gojson::parse(
            br#"{"name":"n","ipam":{"subnet":"10.1.0.0/24","keepLeasesAcrossReboots":false,"keepLeasesAcrossReboots":true}}"#,
        )
        .unwrap();
        assert!(
            load_json(repeated, None)
                .unwrap()
                .keep_leases_across_reboots
        );
        assert_eq!(
            keep(json!({"keepLeasesAcrossReboots": "yes"}))
                .unwrap_err()
                .to_string(),
            "keepLeasesAcrossReboots: expected a boolean, got \"yes\""
        );
    }

    #[test]
    fn keys_match_case_insensitively_like_go() {
        let c = load_json(
            json!({"name":"n","IPAM":{"Subnet":"10.1.0.0/24","RANGESTART":"10.1.0.100"}}),
            None,
        )
        .unwrap();
        assert_eq!(c.ranges[0].0[0].range_start.to_string(), "10.1.0.100");
    }
}
