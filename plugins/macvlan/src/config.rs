//! The macvlan network configuration (fields of the reference at its latest release).

use attach::conf::{self, IpamRef, RuntimeMac};
use libcni::result::Dns;
use libcni::skel::CmdArgs;
use netkit::packet_route::link::MacVlanMode;
use serde::Deserialize;

use crate::error::MacvlanError;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    master: String,
    mode: String,
    mtu: i64,
    mac: String,
    link_in_container: bool,
    bcqueuelen: u32,
    ipam: Option<IpamRef>,
    dns: Option<Dns>,
    runtime_config: Option<RuntimeMac>,
}

#[derive(Debug, Clone)]
pub struct NetConf {
    /// Empty: the interface of the default route (in the container with `link_in_container`).
    pub master: String,
    pub mode: MacVlanMode,
    pub mtu: Option<u32>,
    /// `mtu` as configured (may be negative): checked against the master's MTU once the
    /// master is found, as the reference does.
    pub requested_mtu: i64,
    /// `mac` < CNI_ARGS `MAC` < `runtimeConfig.mac`.
    pub mac: Option<[u8; 6]>,
    /// The master lives in the container netns (created there by an earlier plugin).
    pub link_in_container: bool,
    pub bc_queue_len: Option<u32>,
    pub ipam_type: String,
    pub dns: Dns,
}

/// The reference's mode names ("" is bridge).
pub fn mode_from_str(s: &str) -> Result<MacVlanMode, MacvlanError> {
    match s {
        "" | "bridge" => Ok(MacVlanMode::Bridge),
        "private" => Ok(MacVlanMode::Private),
        "vepa" => Ok(MacVlanMode::Vepa),
        "passthru" => Ok(MacVlanMode::Passthrough),
        other => Err(MacvlanError::UnknownMode(other.to_string())),
    }
}

pub fn mode_name(mode: MacVlanMode) -> String {
    match mode {
        MacVlanMode::Bridge => "bridge".into(),
        MacVlanMode::Private => "private".into(),
        MacVlanMode::Vepa => "vepa".into(),
        MacVlanMode::Passthrough => "passthru".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

pub fn load(args: &CmdArgs) -> Result<NetConf, MacvlanError> {
    let raw: RawConf = args.decode_config().map_err(conf::decode_error)?;
    if !raw.master.is_empty() {
        conf::ifname("master", &raw.master)?;
    }
    let mac = conf::mac_by_precedence(args, raw.mac, raw.runtime_config)?;
    Ok(NetConf {
        master: raw.master,
        mode: mode_from_str(&raw.mode)?,
        mtu: u32::try_from(raw.mtu).ok().filter(|m| *m != 0),
        requested_mtu: raw.mtu,
        mac,
        link_in_container: raw.link_in_container,
        bc_queue_len: (raw.bcqueuelen != 0).then_some(raw.bcqueuelen),
        ipam_type: conf::ipam_type(&raw.ipam),
        dns: conf::dns(raw.dns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn load_json(v: Value, cni_args: &str) -> Result<NetConf, libcni::error::CniError> {
        Ok(load(&attach::testing::cmd_args(v, cni_args))?)
    }

    #[test]
    fn defaults() {
        let c = load_json(json!({"type": "macvlan"}), "").unwrap();
        assert_eq!((c.master.as_str(), c.mode), ("", MacVlanMode::Bridge));
        assert!(
            c.mtu.is_none() && c.mac.is_none() && !c.link_in_container && c.ipam_type.is_empty()
        );
        assert!(c.bc_queue_len.is_none());
    }

    #[test]
    fn every_field() {
        let c = load_json(
            json!({"master": "eth1", "mode": "passthru", "mtu": 1400, "mac": "02:00:00:00:00:01",
                   "linkInContainer": true, "bcqueuelen": 500, "ipam": {"type": "host-local"}}),
            "",
        )
        .unwrap();
        assert_eq!(
            (c.mode, c.mtu, c.bc_queue_len),
            (MacVlanMode::Passthrough, Some(1400), Some(500))
        );
        assert!(c.link_in_container && c.ipam_type == "host-local");
        assert_eq!(mode_name(c.mode), "passthru");
    }

    #[test]
    fn mac_precedence() {
        let v = json!({"mac": "02:00:00:00:00:01"});
        assert_eq!(
            load_json(v.clone(), "").unwrap().mac,
            Some([2, 0, 0, 0, 0, 1])
        );
        assert_eq!(
            load_json(v.clone(), "MAC=02:00:00:00:00:02").unwrap().mac,
            Some([2, 0, 0, 0, 0, 2])
        );
        let mut v2 = v;
        v2["runtimeConfig"] = json!({"mac": "02:00:00:00:00:03"});
        assert_eq!(
            load_json(v2, "MAC=02:00:00:00:00:02").unwrap().mac,
            Some([2, 0, 0, 0, 0, 3])
        );
        assert!(load_json(json!({}), "FOO=1").is_err());
        assert!(load_json(json!({}), "IgnoreUnknown=1;FOO=1").is_ok());
    }

    #[test]
    fn bad_values() {
        let code = |v: Value| load_json(v, "").unwrap_err().code;
        assert_eq!(code(json!({"mode": "l2"})), 999);
        assert_eq!(
            load_json(json!({"mode": "l2"}), "").unwrap_err().msg,
            "unknown macvlan mode: \"l2\""
        );
        // A negative MTU is refused against the master's, once it is found.
        assert_eq!(load_json(json!({"mtu": -1}), "").unwrap().requested_mtu, -1);
        assert_eq!(code(json!({"mac": "02:00"})), 999);
        assert_eq!(code(json!({"master": "a/b"})), 999);
        assert_eq!(code(json!({"bcqueuelen": -1})), 999);
        assert_eq!(code(json!({"linkInContainer": "yes"})), 999);
    }
}
