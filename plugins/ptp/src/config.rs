//! The ptp network configuration: `ipMasq`, `ipMasqBackend`, `mtu`, `ipam`, `dns`.

use attach::conf::{self, IpamRef};
use libcni::result::Dns;
use libcni::skel::CmdArgs;
use netkit::netfilter::ipmasq::Backend;
use serde::Deserialize;

use crate::error::PtpError;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    ip_masq: bool,
    ip_masq_backend: Option<String>,
    mtu: i64,
    ipam: Option<IpamRef>,
    dns: Option<Dns>,
}

#[derive(Debug, Clone)]
pub struct NetConf {
    pub network: String,
    pub ip_masq: bool,
    /// `None`: the host default at ADD time.
    pub ip_masq_backend: Option<Backend>,
    /// Both veth ends; `None` = kernel default.
    pub mtu: Option<u32>,
    pub ipam_type: String,
    /// Replaces IPAM's DNS when the config sets any of it.
    pub dns: Option<Dns>,
}

pub fn load(args: &CmdArgs) -> Result<NetConf, PtpError> {
    let raw: RawConf = args.decode_config().map_err(conf::decode_error)?;
    let ip_masq_backend = match raw.ip_masq_backend.as_deref() {
        None => None,
        Some(s) => Some(Backend::parse(s).ok_or_else(|| PtpError::UnknownBackend {
            name: s.to_string(),
        })?),
    };
    let dns = conf::dns_is_set(args).then(|| conf::dns(raw.dns));
    Ok(NetConf {
        network: args.network_name.clone(),
        ip_masq: raw.ip_masq,
        ip_masq_backend,
        mtu: conf::mtu(raw.mtu)?,
        ipam_type: conf::ipam_type(&raw.ipam),
        dns,
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
    fn fields_and_defaults() {
        let c = load_json(json!({"type": "ptp", "ipam": {"type": "host-local"}})).unwrap();
        assert!(!c.ip_masq && c.ip_masq_backend.is_none() && c.mtu.is_none() && c.dns.is_none());
        assert_eq!(c.ipam_type, "host-local");
        let c = load_json(
            json!({"IPMasq": true, "ipMasqBackend": "nftables", "MTU": 1400,
            "dns": {"nameservers": []}}),
        )
        .unwrap();
        assert!(c.ip_masq && c.dns.is_some());
        assert_eq!(
            (c.ip_masq_backend, c.mtu),
            (Some(Backend::Nftables), Some(1400))
        );
    }

    #[test]
    fn bad_values() {
        assert_eq!(
            load_json(json!({"ipMasqBackend": "x"})).unwrap_err().code,
            999
        );
        // Plain errors upstream: code 999.
        assert_eq!(load_json(json!({"mtu": -1})).unwrap_err().code, 999);
        assert_eq!(load_json(json!({"mtu": "1400"})).unwrap_err().code, 999);
        assert_eq!(load_json(json!({"ipMasq": "yes"})).unwrap_err().code, 999);
    }
}
