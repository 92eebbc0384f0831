//! The ipvlan network configuration (fields of the reference at its latest release, plus
//! `flag`, ours).

use attach::conf::{self, IpamRef};
use libcni::result::{CniResult, Dns};
use libcni::skel::{CmdArgs, Command};
use netkit::packet_route::link::{IpVlanFlags, IpVlanMode};
use serde::Deserialize;

use crate::error::IpvlanError;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    master: String,
    mode: String,
    flag: String,
    mtu: i64,
    link_in_container: bool,
    ipam: Option<IpamRef>,
    dns: Option<Dns>,
}

#[derive(Debug, Clone)]
pub struct NetConf {
    /// For ADD resolved: the configured master, or the single interface of prevResult
    /// (chained), or empty for the interface of the default route. For the other commands
    /// only the configured one: their prevResult is ipvlan's own result (or a whole chain's),
    /// whose interface is the container link, not the master.
    pub master: String,
    pub mode: IpVlanMode,
    pub flags: IpVlanFlags,
    pub mtu: Option<u32>,
    /// `mtu` as configured (may be negative): checked against the master's MTU once the
    /// master is found, as the reference does.
    pub requested_mtu: i64,
    pub link_in_container: bool,
    pub ipam_type: String,
    pub dns: Dns,
    /// prevResult, when chained.
    pub prev: Option<CniResult>,
}

/// The reference's mode names ("" is l2).
pub fn mode_from_str(s: &str) -> Result<IpVlanMode, IpvlanError> {
    match s {
        "" | "l2" => Ok(IpVlanMode::L2),
        "l3" => Ok(IpVlanMode::L3),
        "l3s" => Ok(IpVlanMode::L3S),
        other => Err(IpvlanError::UnknownMode {
            mode: other.to_string(),
        }),
    }
}

/// The kernel's ipvlan flags, as `ip link` names them ("" is bridge).
pub fn flag_from_str(s: &str) -> Result<IpVlanFlags, IpvlanError> {
    match s {
        "" | "bridge" => Ok(IpVlanFlags::empty()),
        "private" => Ok(IpVlanFlags::Private),
        "vepa" => Ok(IpVlanFlags::Vepa),
        other => Err(IpvlanError::UnknownFlag {
            flag: other.to_string(),
        }),
    }
}

pub fn flag_name(f: IpVlanFlags) -> &'static str {
    if f.contains(IpVlanFlags::Private) {
        "private"
    } else if f.contains(IpVlanFlags::Vepa) {
        "vepa"
    } else {
        "bridge"
    }
}

pub fn load(args: &CmdArgs) -> Result<NetConf, IpvlanError> {
    let raw: RawConf = args.decode_config().map_err(conf::decode_error)?;
    let prev = args
        .prev_result()
        .map_err(|e| attach::errors::context(e, "could not parse prevResult"))?;
    let mut master = raw.master;
    if master.is_empty() && args.command == Command::Add {
        if let Some(p) = &prev {
            // Chained after a plugin that made the master: it is prevResult's only interface.
            match p.interfaces.as_slice() {
                [only] if !only.name.is_empty() => master = only.name.clone(),
                _ => return Err(IpvlanError::ChainedMaster),
            }
        }
    }
    if !master.is_empty() {
        conf::ifname("master", &master)?;
    }
    Ok(NetConf {
        master,
        mode: mode_from_str(&raw.mode)?,
        flags: flag_from_str(&raw.flag)?,
        mtu: u32::try_from(raw.mtu).ok().filter(|m| *m != 0),
        requested_mtu: raw.mtu,
        link_in_container: raw.link_in_container,
        ipam_type: conf::ipam_type(&raw.ipam),
        dns: conf::dns(raw.dns),
        prev,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::CniError;
    use serde_json::{json, Value};

    fn load_json(v: Value) -> Result<NetConf, CniError> {
        load(&attach::testing::cmd_args(v, "")).map_err(CniError::from)
    }

    #[test]
    fn defaults_and_fields() {
        let c = load_json(json!({"type": "ipvlan"})).unwrap();
        assert_eq!(
            (c.master.as_str(), c.mode, c.flags),
            ("", IpVlanMode::L2, IpVlanFlags::empty())
        );
        let c = load_json(
            json!({"master": "eth1", "mode": "l3s", "flag": "private", "mtu": 1400,
            "linkInContainer": true, "ipam": {"type": "static"}}),
        )
        .unwrap();
        assert_eq!(
            (c.mode, c.flags, c.mtu),
            (IpVlanMode::L3S, IpVlanFlags::Private, Some(1400))
        );
        assert!(c.link_in_container && c.ipam_type == "static");
        assert_eq!(flag_name(flag_from_str("vepa").unwrap()), "vepa");
    }

    #[test]
    fn chained_master_comes_from_prev_result() {
        let prev = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/x"}],
            "ips": [{"address": "10.1.0.5/24", "interface": 0}]});
        let c = load_json(json!({"cniVersion": "1.0.0", "prevResult": prev})).unwrap();
        assert_eq!(c.master, "net1");
        assert_eq!(c.prev.unwrap().ips.len(), 1);
        // A configured master wins.
        let c = load_json(json!({"cniVersion": "1.0.0", "master": "eth9", "prevResult": prev}))
            .unwrap();
        assert_eq!(c.master, "eth9");
        let two = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "a"}, {"name": "b"}]});
        let e = load_json(json!({"cniVersion": "1.0.0", "prevResult": two})).unwrap_err();
        assert_eq!(
            e.msg,
            "chained master failure. PrevResult lacks a single named interface"
        );
        // CHECK and DEL get ipvlan's own result (or a chain's) as prevResult: its interface is
        // the container link, not the master, and several interfaces are no error.
        for command in [Command::Check, Command::Del] {
            for p in [&prev, &two] {
                let args = CmdArgs {
                    command,
                    ..attach::testing::cmd_args(json!({"cniVersion": "1.0.0", "prevResult": p}), "")
                };
                assert_eq!(load(&args).unwrap().master, "", "{command:?}");
            }
        }
    }

    #[test]
    fn bad_values() {
        let code = |v: Value| load_json(v).unwrap_err().code;
        assert_eq!(code(json!({"mode": "bridge"})), 999);
        assert_eq!(code(json!({"flag": "l2"})), 999);
        assert_eq!(load_json(json!({"mtu": -2})).unwrap().requested_mtu, -2);
        assert_eq!(code(json!({"master": "a b"})), 999);
        assert_eq!(code(json!({"mode": 2})), 999);
    }
}
