//! Configuration pieces every main plugin reads the same way.

use libcni::error::CniError;
use libcni::gojson;
use libcni::result::Dns;
use libcni::skel::CmdArgs;
use serde::Deserialize;
use serde_json::Value;

use crate::error::AttachError;

/// `"ipam": {"type": ...}`; the rest of the object is the IPAM plugin's business.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "IPAM")]
pub struct IpamRef {
    #[serde(rename = "type")]
    pub kind: String,
}

/// `"runtimeConfig": {"mac": ...}` (capability `mac`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RuntimeMac {
    pub mac: String,
}

/// The IPAM type of a raw `ipam` field (empty when absent).
pub fn ipam_type(ipam: &Option<IpamRef>) -> String {
    ipam.as_ref().map(|i| i.kind.clone()).unwrap_or_default()
}

/// Whether the config's `dns` sets anything, as Go's `dnsConfSet` decides: a list present
/// (even empty) or a non-empty domain.
pub fn dns_is_set(args: &CmdArgs) -> bool {
    let Some(dns) = gojson::get(&args.config, "dns") else {
        return false;
    };
    let present = |k: &str| gojson::get_in(dns, k).is_some();
    present("nameservers")
        || present("search")
        || present("options")
        || gojson::get_in(dns, "domain")
            .and_then(Value::as_str)
            .is_some_and(|d| !d.is_empty())
}

/// The config's `dns` object (empty when absent).
pub fn dns(raw: Option<Dns>) -> Dns {
    raw.unwrap_or_default()
}

/// CNI_ARGS `MAC=` (Go `types.LoadArgs` into `{IgnoreUnknown, MAC}`: any other key is an
/// error unless `IgnoreUnknown` is set).
pub fn cni_args_mac(args: &CmdArgs) -> Result<Option<String>, CniError> {
    if args.args.is_empty() {
        return Ok(None);
    }
    let pairs = libcni::args::parse_cni_args(&args.args)?;
    libcni::args::check_known(&pairs, &["IgnoreUnknown", "MAC"])?;
    Ok(libcni::args::get(&pairs, "MAC")
        .filter(|m| !m.is_empty())
        .map(str::to_string))
}

/// The container MAC of macvlan and tap: precedence, lowest first, the config's `mac`,
/// CNI_ARGS `MAC`, `runtimeConfig.mac`.
pub fn mac_by_precedence(
    args: &CmdArgs,
    configured: String,
    runtime: Option<RuntimeMac>,
) -> Result<Option<[u8; 6]>, CniError> {
    let mut text = configured;
    if let Some(m) = cni_args_mac(args)? {
        text = m;
    }
    if let Some(m) = runtime.map(|r| r.mac).filter(|m| !m.is_empty()) {
        text = m;
    }
    if text.is_empty() {
        Ok(None)
    } else {
        parse_mac(&text).map(Some)
    }
}

/// A MAC address from the config or the runtime. The reference reports a malformed one as
/// a plain error (code 999) with Go's `net.ParseMAC` wording.
pub fn parse_mac(text: &str) -> Result<[u8; 6], CniError> {
    netkit::link::parse_mac(text).map_err(|_| {
        AttachError::Mac {
            text: text.to_string(),
        }
        .into()
    })
}

/// Go's `net.ParseMAC` error text for `text`.
pub fn go_mac_error(text: &str) -> String {
    format!("address {text}: invalid MAC address")
}

/// An MTU field: 0 means "kernel default"; negative or too large is an error.
pub fn mtu(raw: i64) -> Result<Option<u32>, CniError> {
    match u32::try_from(raw) {
        Ok(0) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(_) => Err(AttachError::Mtu(raw).into()),
    }
}

/// The MTU check of the plugins with a master (macvlan, ipvlan, vlan): between 0 and the
/// master's MTU, worded and coded (999) as the reference does.
pub fn mtu_within_master(raw: i64, master_mtu: u32) -> Result<Option<u32>, CniError> {
    if raw < 0 || raw > i64::from(master_mtu) {
        return Err(AttachError::MtuOverMaster {
            mtu: raw,
            master_mtu,
        }
        .into());
    }
    mtu(raw)
}

/// A network interface name given in the config (master, bridge, device...). The reference
/// has no such check (the kernel refuses the name later); ours fails early, with the
/// reference's code for a failed ADD (999).
pub fn ifname(field: &str, name: &str) -> Result<(), CniError> {
    netkit::link::validate_ifname(name).map_err(|source| {
        AttachError::IfName {
            field: field.to_string(),
            source,
        }
        .into()
    })
}

/// The decode error of a config, worded like the reference's (`fmt.Errorf`, so code 999).
pub fn decode_error(e: libcni::gojson::Error) -> CniError {
    AttachError::Decode(e).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::cmd_args as args;

    #[test]
    fn dns_set_like_go() {
        let set = |v: Value| dns_is_set(&args(serde_json::json!({ "dns": v }), ""));
        assert!(!dns_is_set(&args(serde_json::json!({}), "")));
        assert!(!set(serde_json::json!({})));
        assert!(!set(serde_json::json!({"domain": ""})));
        assert!(!set(serde_json::json!({"nameservers": null})));
        assert!(set(serde_json::json!({"nameservers": []})));
        assert!(set(serde_json::json!({"Search": ["a"]})));
        assert!(set(serde_json::json!({"domain": "x"})));
    }

    #[test]
    fn mac_from_cni_args() {
        let a = |s: &str| cni_args_mac(&args(serde_json::json!({}), s));
        assert_eq!(a("").unwrap(), None);
        assert_eq!(
            a("MAC=02:00:00:00:00:01").unwrap().as_deref(),
            Some("02:00:00:00:00:01")
        );
        assert!(a("FOO=1").is_err());
        assert_eq!(a("FOO=1;IgnoreUnknown=1").unwrap(), None);
        assert!(parse_mac("zz")
            .unwrap_err()
            .msg
            .contains("invalid args zz for MAC addr"));
    }

    #[test]
    fn mtu_values() {
        assert_eq!(mtu(0).unwrap(), None);
        assert_eq!(mtu(1400).unwrap(), Some(1400));
        assert!(mtu(-1).is_err());
        assert!(mtu(1 << 40).is_err());
    }
}
