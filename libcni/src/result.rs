//! Results in every spec version and the conversions between them.
//!
//! Plugins build a [`CniResult`] (the 1.x shape) and print it with [`CniResult::to_value`] in the
//! request's version; a prevResult of any version is read with [`CniResult::from_value`].

use crate::error::{codes, CniError};
use crate::{gojson, version};
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::IpAddr;

/// The current (1.0.0 / 1.1.0) result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniResult {
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "is_none_or_zero")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    #[serde(
        default,
        rename = "socketPath",
        skip_serializing_if = "is_none_or_empty"
    )]
    pub socket_path: Option<String>,
    #[serde(default, rename = "pciID", skip_serializing_if = "is_none_or_empty")]
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
    pub address: IpNetwork,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_opt_ip"
    )]
    pub gateway: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNetwork,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_opt_ip"
    )]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "is_none_or_zero")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "is_none_or_zero")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "is_none_or_zero")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    /// A route with only destination and gateway set.
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_vec"
    )]
    pub nameservers: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "de_null_string"
    )]
    pub domain: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_vec"
    )]
    pub search: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_vec"
    )]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

fn is_none_or_zero(v: &Option<u32>) -> bool {
    matches!(v, None | Some(0))
}

fn is_none_or_empty(v: &Option<String>) -> bool {
    v.as_deref().is_none_or(str::is_empty)
}

fn de_opt_ip<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    match s.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => s.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

fn de_null_vec<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

fn de_null_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

// ---- wire shapes per version -------------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct Wire100 {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    cni_version: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_seq"
    )]
    interfaces: Vec<Interface>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_seq"
    )]
    ips: Vec<IpConfig>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_seq"
    )]
    routes: Vec<Route>,
    // The latest libcni omits an empty DNS in 0.3.x/0.4.0 and 1.x results (1.1.1 printed
    // `"dns": {}`).
    #[serde(
        default,
        skip_serializing_if = "Dns::is_empty",
        deserialize_with = "de_null_default"
    )]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct Interface040 {
    name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "de_null_string"
    )]
    mac: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "de_null_string"
    )]
    sandbox: String,
}

#[derive(Serialize, Deserialize)]
struct IpConfig040 {
    #[serde(default)]
    version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: IpNetwork,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_opt_ip"
    )]
    gateway: Option<IpAddr>,
}

#[derive(Serialize, Deserialize)]
struct Wire040 {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    cni_version: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_seq"
    )]
    interfaces: Vec<Interface040>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_seq"
    )]
    ips: Vec<IpConfig040>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_seq"
    )]
    routes: Vec<Route>,
    // The latest libcni omits an empty DNS in 0.3.x/0.4.0 and 1.x results (1.1.1 printed
    // `"dns": {}`).
    #[serde(
        default,
        skip_serializing_if = "Dns::is_empty",
        deserialize_with = "de_null_default"
    )]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct IpConfig020 {
    ip: IpNetwork,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_opt_ip"
    )]
    gateway: Option<IpAddr>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de_null_seq"
    )]
    routes: Vec<Route>,
}

#[derive(Serialize, Deserialize)]
struct Wire020 {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<IpConfig020>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<IpConfig020>,
    // Go's 0.2.0 `types.DNS` is a plain struct, which `omitempty` never drops: `"dns": {}` is
    // always there, in 1.1.1 and in the latest release.
    #[serde(default, deserialize_with = "de_null_default")]
    dns: Dns,
}

fn de_null_seq<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

fn de_null_default<'de, D: serde::Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The result family a version belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V020,
    V040,
    V100,
}

fn family(v: &str) -> Option<Family> {
    match v {
        "" | "0.1.0" | "0.2.0" => Some(Family::V020),
        "0.3.0" | "0.3.1" | "0.4.0" => Some(Family::V040),
        "1.0.0" | "1.1.0" => Some(Family::V100),
        _ => None,
    }
}

fn unsupported_version(v: &str) -> CniError {
    CniError::new(
        codes::INCOMPATIBLE_VERSION,
        "unsupported CNI result version",
        format!(
            "result version {v:?}, supported {:?}",
            version::SUPPORTED_VERSIONS
        ),
    )
}

fn decode_err(e: serde_json::Error) -> CniError {
    CniError::decode(format!("failed to decode CNI result: {e}"))
}

fn ip_version(addr: &IpNetwork) -> &'static str {
    if addr.is_ipv4() {
        "4"
    } else {
        "6"
    }
}

impl CniResult {
    /// An empty result of the current version.
    pub fn new() -> CniResult {
        CniResult {
            cni_version: version::CURRENT.to_string(),
            ..Default::default()
        }
    }

    /// Reads a result of any version into the current shape. A result without `cniVersion` is
    /// read as 0.1.0/0.2.0 when it has `ip4`/`ip6`, else as the current shape.
    pub fn from_value(v: &Value) -> Result<CniResult, CniError> {
        let obj = v
            .as_object()
            .ok_or_else(|| CniError::decode("failed to decode CNI result: not a JSON object"))?;
        let ver = match gojson::get(obj, "cniVersion") {
            Some(Value::String(s)) => s.clone(),
            None => String::new(),
            Some(_) => {
                return Err(CniError::decode(
                    "failed to decode CNI result: cniVersion is not a string",
                ))
            }
        };
        let fam = if ver.is_empty() {
            if gojson::get(obj, "ip4").is_some() || gojson::get(obj, "ip6").is_some() {
                Family::V020
            } else {
                Family::V100
            }
        } else {
            family(&ver).ok_or_else(|| unsupported_version(&ver))?
        };
        let mut r = match fam {
            Family::V100 => {
                let w: Wire100 = gojson::from_value(v).map_err(decode_err)?;
                CniResult {
                    cni_version: w.cni_version,
                    interfaces: w.interfaces,
                    ips: w.ips,
                    routes: w.routes,
                    dns: w.dns,
                }
            }
            Family::V040 => {
                let w: Wire040 = gojson::from_value(v).map_err(decode_err)?;
                from_040(w)
            }
            Family::V020 => {
                let w: Wire020 = gojson::from_value(v).map_err(decode_err)?;
                from_020(w)
            }
        };
        r.cni_version = if ver.is_empty() {
            match fam {
                Family::V020 => "0.1.0".into(),
                _ => version::CURRENT.into(),
            }
        } else {
            ver
        };
        Ok(r)
    }

    /// Parses JSON bytes as a result of any version.
    pub fn from_slice(b: &[u8]) -> Result<CniResult, CniError> {
        let v: Value = gojson::parse(b).map_err(decode_err)?;
        Self::from_value(&v)
    }

    /// The result in `version`'s exact JSON shape (`""` means 0.1.0, as the reference does).
    pub fn to_value(&self, version: &str) -> Result<Value, CniError> {
        let target = if version.is_empty() { "0.1.0" } else { version };
        let fam = family(target).ok_or_else(|| unsupported_version(target))?;
        let v = match fam {
            // The latest libcni prints a 1.x result through a map (to drop an empty DNS), so
            // its keys come out sorted, at every level.
            Family::V100 => serde_json::to_value(Wire100 {
                cni_version: target.into(),
                interfaces: self.interfaces.clone(),
                ips: self.ips.clone(),
                routes: self.routes.clone(),
                dns: self.dns.clone(),
            })
            .map(sorted_keys),
            Family::V040 => serde_json::to_value(to_040(self, target)),
            Family::V020 => serde_json::to_value(to_020(self, target)?),
        };
        v.map_err(|e| CniError::internal(format!("failed to encode CNI result: {e}")))
    }
}

fn from_040(w: Wire040) -> CniResult {
    CniResult {
        cni_version: w.cni_version,
        interfaces: w
            .interfaces
            .into_iter()
            .map(|i| Interface {
                name: i.name,
                mac: i.mac,
                sandbox: i.sandbox,
                ..Default::default()
            })
            .collect(),
        ips: w
            .ips
            .into_iter()
            .map(|i| IpConfig {
                interface: i.interface,
                address: i.address,
                gateway: i.gateway,
            })
            .collect(),
        routes: w.routes,
        dns: w.dns,
    }
}

fn from_020(w: Wire020) -> CniResult {
    let mut r = CniResult {
        cni_version: w.cni_version,
        dns: w.dns,
        ..Default::default()
    };
    for ipc in [w.ip4, w.ip6].into_iter().flatten() {
        r.ips.push(IpConfig {
            interface: None,
            address: ipc.ip,
            gateway: ipc.gateway,
        });
        r.routes.extend(ipc.routes);
    }
    r
}

fn to_040(r: &CniResult, target: &str) -> Wire040 {
    Wire040 {
        cni_version: target.into(),
        interfaces: r
            .interfaces
            .iter()
            .map(|i| Interface040 {
                name: i.name.clone(),
                mac: i.mac.clone(),
                sandbox: i.sandbox.clone(),
            })
            .collect(),
        ips: r
            .ips
            .iter()
            .map(|i| IpConfig040 {
                version: ip_version(&i.address).into(),
                interface: i.interface,
                address: i.address,
                gateway: i.gateway,
            })
            .collect(),
        routes: r.routes.clone(),
        dns: r.dns.clone(),
    }
}

fn to_020(r: &CniResult, target: &str) -> Result<Wire020, CniError> {
    let mut w = Wire020 {
        cni_version: target.into(),
        ip4: None,
        ip6: None,
        dns: r.dns.clone(),
    };
    for ip in &r.ips {
        let slot = if ip.address.is_ipv4() {
            &mut w.ip4
        } else {
            &mut w.ip6
        };
        if slot.is_none() {
            *slot = Some(IpConfig020 {
                ip: ip.address,
                gateway: ip.gateway,
                routes: Vec::new(),
            });
        }
    }
    if w.ip4.is_none() && w.ip6.is_none() {
        return Err(CniError::internal("cannot convert: no valid IP addresses"));
    }
    for rt in &r.routes {
        let slot = if rt.dst.is_ipv4() {
            &mut w.ip4
        } else {
            &mut w.ip6
        };
        if let Some(ipc) = slot {
            // The latest libcni's 0.2.0 conversion keeps only these two.
            ipc.routes.push(Route::new(rt.dst, rt.gw));
        }
    }
    Ok(w)
}

/// `v` with the keys of every object in byte order, as Go's `json.Marshal` of a map. Sorted
/// in place: the objects keep their entries (and the hashes of their keys).
fn sorted_keys(mut v: Value) -> Value {
    sort_keys_in_place(&mut v);
    v
}

fn sort_keys_in_place(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.sort_keys();
            m.values_mut().for_each(sort_keys_in_place);
        }
        Value::Array(a) => a.iter_mut().for_each(sort_keys_in_place),
        _ => {}
    }
}

/// Converts a result JSON of any version to `to_version`.
pub fn convert(v: &Value, to_version: &str) -> Result<Value, CniError> {
    CniResult::from_value(v)?.to_value(to_version)
}

#[cfg(test)]
mod tests;
