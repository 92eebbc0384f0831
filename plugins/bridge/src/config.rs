//! The bridge network configuration: fields, defaults and validation.

use libcni::result::Dns;
use libcni::skel::CmdArgs;
use netkit::netfilter::ipmasq::Backend;
use serde::Deserialize;

use crate::error::BridgeError;

/// Default bridge name.
pub const DEFAULT_BRIDGE: &str = "cni0";
/// Highest usable VLAN ID.
const MAX_VLAN: i64 = 4094;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    bridge: String,
    is_gateway: bool,
    is_default_gateway: bool,
    force_address: bool,
    ip_masq: bool,
    ip_masq_backend: Option<String>,
    mtu: i64,
    hairpin_mode: bool,
    promisc_mode: bool,
    vlan: i64,
    vlan_trunk: Option<Vec<RawTrunk>>,
    /// Absent (or null): true, as upstream (the port keeps the bridge's default VLAN).
    preserve_default_vlan: Option<bool>,
    macspoofchk: bool,
    enabledad: bool,
    disable_container_interface: bool,
    port_isolation: bool,
    ipam: Option<RawIpam>,
    dns: Option<Dns>,
    args: Option<RawArgs>,
    runtime_config: Option<RawRuntimeConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawIpam {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawArgs {
    cni: Option<RawCniArgs>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawCniArgs {
    mac: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawRuntimeConfig {
    mac: String,
}

#[derive(Debug, Default, Deserialize)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "VlanTrunk")]
struct RawTrunk {
    #[serde(rename = "minID")]
    min_id: Option<i64>,
    #[serde(rename = "maxID")]
    max_id: Option<i64>,
    id: Option<i64>,
}

/// A validated bridge configuration.
#[derive(Debug, Clone)]
pub struct NetConf {
    pub network: String,
    pub bridge: String,
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    pub ip_masq: bool,
    /// `None`: pick the host default at setup time (iptables unless only nftables works).
    pub ip_masq_backend: Option<Backend>,
    /// 0 = kernel default.
    pub mtu: u32,
    pub hairpin: bool,
    pub promisc: bool,
    /// Access (native) VLAN, 0 = none.
    pub vlan: u16,
    /// Tagged trunk VLANs, sorted and deduplicated; `Some(empty)` never happens.
    pub trunk: Option<Vec<u16>>,
    pub preserve_default_vlan: bool,
    pub macspoofchk: bool,
    pub enable_dad: bool,
    pub disable_container_interface: bool,
    pub port_isolation: bool,
    /// IPAM plugin type; empty = L2 only.
    pub ipam_type: String,
    pub dns: Option<Dns>,
    /// Container MAC from CNI_ARGS MAC < args.cni.mac < runtimeConfig.mac.
    pub mac: Option<[u8; 6]>,
}

impl NetConf {
    /// Whether addresses are managed (an IPAM plugin is configured).
    pub fn is_layer3(&self) -> bool {
        !self.ipam_type.is_empty()
    }

    /// Whether the port needs VLAN settings.
    pub fn uses_vlans(&self) -> bool {
        self.vlan != 0 || self.trunk.is_some()
    }

    /// The VLAN untagged frames from the container belong to (v1.8 semantics: a trunk without
    /// `vlan` keeps VLAN 1 as its native VLAN).
    pub fn native_vlan(&self) -> u16 {
        if self.vlan != 0 {
            self.vlan
        } else if self.trunk.is_some() {
            1
        } else {
            0
        }
    }
}

/// Parses and validates the configuration of a call (stdin + CNI_ARGS).
pub fn load(args: &CmdArgs) -> Result<NetConf, BridgeError> {
    let raw: RawConf = args.decode_config().map_err(BridgeError::LoadConf)?;
    from_raw(raw, &args.network_name, &args.args)
}

fn from_raw(raw: RawConf, network: &str, cni_args: &str) -> Result<NetConf, BridgeError> {
    let bridge = if raw.bridge.is_empty() {
        DEFAULT_BRIDGE.to_string()
    } else {
        raw.bridge
    };
    netkit::link::validate_ifname(&bridge).map_err(BridgeError::BridgeName)?;
    if !(0..=MAX_VLAN).contains(&raw.vlan) {
        return Err(BridgeError::VlanId(raw.vlan));
    }
    let trunk = collect_trunk(raw.vlan_trunk.as_deref())?;
    let mtu = u32::try_from(raw.mtu).map_err(|_| BridgeError::Mtu(raw.mtu))?;
    let ip_masq_backend = match raw.ip_masq_backend.as_deref() {
        None => None,
        Some(s) => Some(Backend::parse(s).ok_or_else(|| BridgeError::MasqBackend(s.to_string()))?),
    };
    let ipam_type = raw.ipam.map(|i| i.kind).unwrap_or_default();
    if raw.disable_container_interface && !ipam_type.is_empty() {
        return Err(BridgeError::IpamWithoutInterface);
    }
    if raw.hairpin_mode && raw.promisc_mode {
        return Err(BridgeError::HairpinAndPromisc);
    }

    let mut mac_text = String::new();
    if !cni_args.is_empty() {
        let pairs = libcni::args::parse_cni_args(cni_args)?;
        libcni::args::check_known(&pairs, &["IgnoreUnknown", "MAC"])?;
        if let Some(m) = libcni::args::get(&pairs, "MAC") {
            mac_text = m.to_string();
        }
    }
    if let Some(m) = raw
        .args
        .and_then(|a| a.cni)
        .map(|c| c.mac)
        .filter(|m| !m.is_empty())
    {
        mac_text = m;
    }
    if let Some(m) = raw.runtime_config.map(|r| r.mac).filter(|m| !m.is_empty()) {
        mac_text = m;
    }
    let mac = if mac_text.is_empty() {
        None
    } else {
        // Refused before anything is made.
        Some(netkit::link::parse_mac(&mac_text).map_err(|_| BridgeError::Mac(mac_text.clone()))?)
    };

    let dns = raw.dns.filter(|d| !d.is_empty());
    Ok(NetConf {
        network: network.to_string(),
        bridge,
        is_gateway: raw.is_gateway || raw.is_default_gateway,
        is_default_gateway: raw.is_default_gateway,
        force_address: raw.force_address,
        ip_masq: raw.ip_masq,
        ip_masq_backend,
        mtu,
        hairpin: raw.hairpin_mode,
        promisc: raw.promisc_mode,
        vlan: raw.vlan as u16,
        trunk,
        preserve_default_vlan: raw.preserve_default_vlan.unwrap_or(true),
        macspoofchk: raw.macspoofchk,
        enable_dad: raw.enabledad,
        disable_container_interface: raw.disable_container_interface,
        port_isolation: raw.port_isolation,
        ipam_type,
        dns,
        mac,
    })
}

/// Expands `vlanTrunk` into a sorted list of IDs, with the reference's error messages.
fn collect_trunk(items: Option<&[RawTrunk]>) -> Result<Option<Vec<u16>>, BridgeError> {
    let Some(items) = items else { return Ok(None) };
    let valid = |v: i64| (1..=MAX_VLAN).contains(&v);
    let mut ids = std::collections::BTreeSet::new();
    for item in items {
        match (item.min_id, item.max_id) {
            (Some(min), Some(max)) => {
                if !valid(min) {
                    return Err(BridgeError::TrunkMinId);
                }
                if !valid(max) {
                    return Err(BridgeError::TrunkMaxId);
                }
                if max < min {
                    return Err(BridgeError::TrunkMinAboveMax);
                }
                ids.extend((min..=max).map(|v| v as u16));
            }
            (None, Some(_)) => {
                return Err(BridgeError::TrunkMinMissing);
            }
            (Some(_), None) => {
                return Err(BridgeError::TrunkMaxMissing);
            }
            (None, None) => {}
        }
        if let Some(id) = item.id {
            if !valid(id) {
                return Err(BridgeError::TrunkId);
            }
            ids.insert(id as u16);
        }
    }
    Ok(if ids.is_empty() {
        None
    } else {
        Some(ids.into_iter().collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parse(v: Value, cni_args: &str) -> Result<NetConf, BridgeError> {
        let raw: RawConf = libcni::gojson::from_value(&v).map_err(BridgeError::LoadConf)?;
        from_raw(raw, "net", cni_args)
    }

    #[test]
    fn defaults() {
        let c = parse(serde_json::json!({"type": "bridge"}), "").unwrap();
        assert_eq!(c.bridge, "cni0");
        assert!(!c.is_gateway && !c.is_layer3() && !c.uses_vlans());
        assert_eq!(
            (c.mtu, c.vlan, c.mac, c.ip_masq_backend),
            (0, 0, None, None)
        );
    }

    #[test]
    fn default_gateway_implies_gateway() {
        let c = parse(serde_json::json!({"isDefaultGateway": true}), "").unwrap();
        assert!(c.is_gateway);
    }

    #[test]
    fn validation_errors() {
        let msg = |v: Value| parse(v, "").unwrap_err().to_string();
        assert_eq!(
            msg(serde_json::json!({"vlan": 5000})),
            "invalid VLAN ID 5000 (must be between 0 and 4094)"
        );
        assert_eq!(
            msg(serde_json::json!({"vlan": -1})),
            "invalid VLAN ID -1 (must be between 0 and 4094)"
        );
        assert_eq!(
            msg(serde_json::json!({"vlanTrunk": [{"minID": 0, "maxID": 3}]})),
            "incorrect trunk minID parameter"
        );
        assert_eq!(
            msg(serde_json::json!({"vlanTrunk": [{"minID": 3, "maxID": 5000}]})),
            "incorrect trunk maxID parameter"
        );
        assert_eq!(
            msg(serde_json::json!({"vlanTrunk": [{"minID": 5, "maxID": 3}]})),
            "minID is greater than maxID in trunk parameter"
        );
        assert!(msg(serde_json::json!({"vlanTrunk": [{"maxID": 3}]})).contains("minID is missing"));
        assert!(msg(serde_json::json!({"vlanTrunk": [{"minID": 3}]})).contains("maxID is missing"));
        assert_eq!(
            msg(serde_json::json!({"vlanTrunk": [{"id": 0}]})),
            "incorrect trunk id parameter"
        );
        assert_eq!(
            msg(serde_json::json!({"ipMasqBackend": "x"})),
            "unknown ipmasq backend \"x\""
        );
        assert_eq!(
            msg(
                serde_json::json!({"disableContainerInterface": true, "ipam": {"type": "host-local"}})
            ),
            "cannot use IPAM when DisableContainerInterface flag is set"
        );
        assert!(
            msg(serde_json::json!({"hairpinMode": true, "promiscMode": true})).contains("hairpin")
        );
        assert!(parse(serde_json::json!({"mtu": "x"}), "").is_err());
        assert!(parse(serde_json::json!({"bridge": "a/b"}), "").is_err());
    }

    #[test]
    fn trunk_expansion() {
        let c = parse(
            serde_json::json!({"vlanTrunk": [{"minID": 10, "maxID": 12}, {"id": 11}, {"id": 20}]}),
            "",
        )
        .unwrap();
        assert_eq!(c.trunk, Some(vec![10, 11, 12, 20]));
        assert_eq!(c.native_vlan(), 1);
        let c = parse(serde_json::json!({"vlan": 7, "vlanTrunk": [{"id": 8}]}), "").unwrap();
        assert_eq!(c.native_vlan(), 7);
        assert_eq!(
            parse(serde_json::json!({"vlanTrunk": []}), "")
                .unwrap()
                .trunk,
            None
        );
    }

    #[test]
    fn the_default_vlan_is_preserved_unless_disabled() {
        let preserve = |v| parse(v, "").unwrap().preserve_default_vlan;
        assert!(preserve(serde_json::json!({"vlan": 5})));
        assert!(preserve(
            serde_json::json!({"vlan": 5, "preserveDefaultVlan": null})
        ));
        assert!(!preserve(
            serde_json::json!({"vlan": 5, "preserveDefaultVlan": false})
        ));
    }

    #[test]
    fn mac_precedence() {
        let v = serde_json::json!({"args": {"cni": {"mac": "02:00:00:00:00:02"}}});
        let c = parse(v.clone(), "MAC=02:00:00:00:00:01").unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 2]));
        let mut v2 = v;
        v2["runtimeConfig"] = serde_json::json!({"mac": "02:00:00:00:00:03"});
        assert_eq!(
            parse(v2, "MAC=02:00:00:00:00:01").unwrap().mac,
            Some([2, 0, 0, 0, 0, 3])
        );
        assert_eq!(
            parse(serde_json::json!({}), "MAC=02:00:00:00:00:01")
                .unwrap()
                .mac,
            Some([2, 0, 0, 0, 0, 1])
        );
        assert!(parse(serde_json::json!({}), "FOO=1").is_err());
        assert!(parse(serde_json::json!({}), "FOO=1;IgnoreUnknown=1").is_ok());
        assert!(parse(serde_json::json!({}), "MAC=zz").is_err());
    }
}
