//! The tap network configuration (fields of the reference at its latest release).

use attach::conf::{self, IpamRef, RuntimeMac};
use libcni::result::Dns;
use libcni::skel::CmdArgs;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::TapError;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    multi_queue: bool,
    mtu: i64,
    mac: String,
    owner: Option<u32>,
    group: Option<u32>,
    selinux_context: String,
    bridge: String,
    /// Only its type matters (an object, as the reference's `*struct{}`).
    args: Option<Map<String, Value>>,
    ipam: Option<IpamRef>,
    dns: Option<Dns>,
    runtime_config: Option<RuntimeMac>,
}

#[derive(Debug, Clone)]
pub struct NetConf {
    pub multi_queue: bool,
    pub mtu: Option<u32>,
    /// `mac` < CNI_ARGS `MAC` < `runtimeConfig.mac`.
    pub mac: Option<[u8; 6]>,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    /// Accepted and left to the host's policy (not applied).
    pub selinux_context: String,
    /// A bridge inside the container netns to attach the tap to.
    pub bridge: String,
    pub ipam_type: String,
    pub dns: Dns,
}

impl NetConf {
    /// The reference creates the tap through netlink with IFF_VNET_HDR (and, unless
    /// multi-queue, without IFF_NO_PI) when both owner and group are given, and with
    /// `ip tuntap add` (IFF_NO_PI) otherwise; the device flags follow the same rule.
    pub fn vnet_hdr(&self) -> bool {
        self.owner.is_some() && self.group.is_some()
    }
}

pub fn load(args: &CmdArgs) -> Result<NetConf, TapError> {
    let raw: RawConf = args.decode_config().map_err(conf::decode_error)?;
    let _ = raw.args;
    if !raw.bridge.is_empty() {
        conf::ifname("bridge", &raw.bridge)?;
    }
    let mac = conf::mac_by_precedence(args, raw.mac, raw.runtime_config)?;
    Ok(NetConf {
        multi_queue: raw.multi_queue,
        mtu: conf::mtu(raw.mtu)?,
        mac,
        owner: raw.owner,
        group: raw.group,
        selinux_context: raw.selinux_context,
        bridge: raw.bridge,
        ipam_type: conf::ipam_type(&raw.ipam),
        dns: conf::dns(raw.dns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load_json(v: Value, cni_args: &str) -> Result<NetConf, libcni::error::CniError> {
        Ok(load(&attach::testing::cmd_args(v, cni_args))?)
    }

    #[test]
    fn fields() {
        let c = load_json(json!({"type": "tap"}), "").unwrap();
        assert!(
            !c.multi_queue
                && c.mtu.is_none()
                && c.mac.is_none()
                && !c.vnet_hdr()
                && c.ipam_type.is_empty()
        );
        let c = load_json(
            json!({"multiQueue": true, "mtu": 1400, "mac": "02:00:00:00:00:09",
            "owner": 1000, "group": 0, "selinuxContext": "system_u:system_r:container_t:s0",
            "bridge": "br0", "args": {}, "ipam": {"type": "host-local"}}),
            "",
        )
        .unwrap();
        assert!(c.multi_queue && c.vnet_hdr() && !c.ipam_type.is_empty());
        assert_eq!(
            (c.mtu, c.owner, c.group, c.bridge.as_str()),
            (Some(1400), Some(1000), Some(0), "br0")
        );
        assert!(!load_json(json!({"owner": 5}), "").unwrap().vnet_hdr());
    }

    #[test]
    fn mac_precedence_and_bad_values() {
        let v = json!({"mac": "02:00:00:00:00:01", "runtimeConfig": {"mac": "02:00:00:00:00:03"}});
        assert_eq!(
            load_json(v, "MAC=02:00:00:00:00:02").unwrap().mac,
            Some([2, 0, 0, 0, 0, 3])
        );
        assert_eq!(
            load_json(json!({"mac": "02:00:00:00:00:01"}), "MAC=02:00:00:00:00:02")
                .unwrap()
                .mac,
            Some([2, 0, 0, 0, 0, 2])
        );
        // Upstream returns every config error as a plain Go error: code 999.
        let code = |v: Value| load_json(v, "").unwrap_err().code;
        assert_eq!(code(json!({"owner": -1})), 999);
        assert_eq!(code(json!({"group": 4294967296u64})), 999);
        assert_eq!(code(json!({"args": "x"})), 999);
        assert_eq!(code(json!({"mtu": -1})), 999);
        assert_eq!(code(json!({"bridge": "a/b"})), 999);
        assert_eq!(code(json!({"mac": "nope"})), 999);
    }
}
