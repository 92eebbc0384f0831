//! The vlan network configuration (fields of the reference at its latest release).

use attach::conf::{self, IpamRef};
use libcni::result::Dns;
use libcni::skel::CmdArgs;
use serde::Deserialize;

use crate::error::VlanError;

/// Highest VLAN ID (4095 is reserved).
const MAX_VLAN_ID: i64 = 4094;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    master: String,
    vlan_id: i64,
    mtu: i64,
    link_in_container: bool,
    ipam: Option<IpamRef>,
    dns: Option<Dns>,
}

#[derive(Debug, Clone)]
pub struct NetConf {
    pub master: String,
    pub vlan_id: u16,
    pub mtu: Option<u32>,
    /// `mtu` as configured (may be negative): checked against the master's MTU once the
    /// master is found, as the reference does.
    pub requested_mtu: i64,
    pub link_in_container: bool,
    pub ipam_type: String,
    pub dns: Dns,
}

pub fn load(args: &CmdArgs) -> Result<NetConf, VlanError> {
    let raw: RawConf = args.decode_config().map_err(conf::decode_error)?;
    if raw.master.is_empty() {
        return Err(VlanError::MasterRequired);
    }
    conf::ifname("master", &raw.master)?;
    if !(0..=MAX_VLAN_ID).contains(&raw.vlan_id) {
        return Err(VlanError::VlanId(raw.vlan_id));
    }
    Ok(NetConf {
        master: raw.master,
        vlan_id: raw.vlan_id as u16,
        mtu: u32::try_from(raw.mtu).ok().filter(|m| *m != 0),
        requested_mtu: raw.mtu,
        link_in_container: raw.link_in_container,
        ipam_type: conf::ipam_type(&raw.ipam),
        dns: conf::dns(raw.dns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn load_json(v: Value) -> Result<NetConf, libcni::error::CniError> {
        Ok(load(&attach::testing::cmd_args(v, ""))?)
    }

    #[test]
    fn fields() {
        let c = load_json(
            json!({"master": "eth0", "vlanId": 42, "mtu": 1400, "linkInContainer": true,
            "ipam": {"type": "host-local"}}),
        )
        .unwrap();
        assert_eq!(
            (c.master.as_str(), c.vlan_id, c.mtu),
            ("eth0", 42, Some(1400))
        );
        assert!(c.link_in_container && c.ipam_type == "host-local");
        let c = load_json(json!({"master": "eth0"})).unwrap();
        assert_eq!((c.vlan_id, c.mtu, c.link_in_container), (0, None, false));
        // Go's case-insensitive keys.
        assert_eq!(
            load_json(json!({"Master": "eth0", "VLANID": 7}))
                .unwrap()
                .vlan_id,
            7
        );
    }

    #[test]
    fn bad_values() {
        let e = |v: Value| load_json(v).unwrap_err();
        assert!(e(json!({"vlanId": 1}))
            .msg
            .starts_with("\"master\" field is required"));
        assert_eq!(
            e(json!({"master": "eth0", "vlanId": 4095})).msg,
            "invalid VLAN ID 4095 (must be between 0 and 4095 inclusive)"
        );
        assert_eq!(e(json!({"master": "eth0", "vlanId": -1})).code, 999);
        // A negative MTU is refused against the master's, once it is found.
        assert_eq!(
            load_json(json!({"master": "eth0", "mtu": -1}))
                .unwrap()
                .requested_mtu,
            -1
        );
        assert_eq!(e(json!({"master": "eth0", "vlanId": "1"})).code, 999);
    }
}
