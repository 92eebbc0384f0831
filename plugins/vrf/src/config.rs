//! vrf configuration: `vrfname` (required) and `table` (optional; 0 or absent = pick one).

use libcni::skel::CmdArgs;

use crate::error::VrfError;
use serde::Deserialize;

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "VRFNetConf")]
struct Raw {
    #[serde(default)]
    vrfname: String,
    #[serde(default)]
    table: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VrfConf {
    pub name: String,
    /// `None`: an existing VRF's table is accepted, a new one gets the first free table.
    pub table: Option<u32>,
}

impl VrfConf {
    pub fn parse(args: &CmdArgs) -> Result<VrfConf, VrfError> {
        let raw: Raw = args.decode_config().map_err(VrfError::Load)?;
        from_raw(raw)
    }
}

fn from_raw(raw: Raw) -> Result<VrfConf, VrfError> {
    if raw.vrfname.is_empty() {
        return Err(VrfError::MissingName);
    }
    netkit::link::validate_ifname(&raw.vrfname).map_err(VrfError::InvalidName)?;
    Ok(VrfConf {
        name: raw.vrfname,
        table: (raw.table != 0).then_some(raw.table),
    })
}

/// The first table from 1 on that no existing VRF uses (as the reference picks it).
pub fn first_free_table(taken: &[u32]) -> Option<u32> {
    (1..u32::MAX).find(|t| !taken.contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> Result<VrfConf, VrfError> {
        from_raw(libcni::gojson::from_value(&v).unwrap())
    }

    #[test]
    fn fields() {
        assert_eq!(
            raw(json!({"vrfname": "blue", "table": 1001})).unwrap(),
            VrfConf {
                name: "blue".into(),
                table: Some(1001)
            }
        );
        assert_eq!(
            raw(json!({"VRFName": "red", "table": 0})).unwrap().table,
            None
        );
        let e = libcni::CniError::from(raw(json!({"table": 5})).unwrap_err());
        assert_eq!(e.msg, "configuration is expected to have a valid vrf name");
        assert_eq!(e.code, 999);
        assert!(raw(json!({"vrfname": "a/b"})).is_err());
        assert!(raw(json!({"vrfname": "much-too-long-vrf-name"})).is_err());
    }

    #[test]
    fn free_tables() {
        assert_eq!(first_free_table(&[]), Some(1));
        assert_eq!(first_free_table(&[1, 2, 4]), Some(3));
    }
}
