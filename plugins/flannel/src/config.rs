//! The plugin's own config, with flannel's defaults, decoded as flannel (Go encoding/json)
//! decodes it.

use std::path::PathBuf;

use libcni::skel::CmdArgs;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::FlannelError;

pub const DEFAULT_SUBNET_FILE: &str = "/run/flannel/subnet.env";
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/flannel";

#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    pub name: String,
    /// The config's `cniVersion` as written; passed down only when not empty.
    pub cni_version: String,
    pub subnet_file: PathBuf,
    /// Where the delegate config of each container is kept for DEL.
    pub data_dir: PathBuf,
    pub delegate: Option<Map<String, Value>>,
    pub ipam: Option<Map<String, Value>>,
    pub runtime_config: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    #[serde(default)]
    name: String,
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(rename = "subnetFile")]
    subnet_file: Option<String>,
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
    delegate: Option<Map<String, Value>>,
    ipam: Option<Map<String, Value>>,
    #[serde(rename = "runtimeConfig")]
    runtime_config: Option<Map<String, Value>>,
}

impl NetConf {
    pub fn from_map(map: &Map<String, Value>) -> Result<NetConf, FlannelError> {
        let raw: RawConf = libcni::gojson::from_map(map).map_err(FlannelError::Decode)?;
        Ok(NetConf {
            name: raw.name,
            cni_version: raw.cni_version,
            subnet_file: raw
                .subnet_file
                .unwrap_or_else(|| DEFAULT_SUBNET_FILE.into())
                .into(),
            data_dir: raw
                .data_dir
                .unwrap_or_else(|| DEFAULT_DATA_DIR.into())
                .into(),
            delegate: raw.delegate,
            ipam: raw.ipam,
            runtime_config: raw.runtime_config,
        })
    }

    pub fn load(args: &CmdArgs) -> Result<NetConf, FlannelError> {
        NetConf::from_map(&args.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: Value) -> Result<NetConf, FlannelError> {
        NetConf::from_map(v.as_object().unwrap())
    }

    #[test]
    fn defaults_and_go_key_matching() {
        let c = conf(json!({"name": "cbr0", "type": "flannel", "delegate": {"hairpinMode": true}}))
            .unwrap();
        assert_eq!(c.subnet_file, PathBuf::from(DEFAULT_SUBNET_FILE));
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(c.cni_version, "");
        let c = conf(
            json!({"name": "n", "SubnetFile": "/x/env", "datadir": "/x/d", "subnetFile": null}),
        )
        .unwrap();
        assert_eq!(c.subnet_file, PathBuf::from("/x/env"));
        assert_eq!(c.data_dir, PathBuf::from("/x/d"));
        assert!(c.delegate.is_none());
        assert!(conf(json!({"name": "n", "delegate": "bridge"})).is_err());
    }
}
