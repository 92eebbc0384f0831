//! The host-device network configuration: which host interface (by name, MAC, kernel path,
//! PCI address or, from the runtime, a PCI or auxiliary device ID), IPAM, DNS, and (ours) where
//! the interface's original state is kept.

use std::path::Path;

use attach::conf::{self, IpamRef};
use libcni::result::Dns;
use libcni::skel::CmdArgs;
use serde::Deserialize;

use crate::error::HostDeviceError;
use crate::find::{self, Selector, Sysfs};

/// Where the original state of each moved device is kept.
pub const DEFAULT_DATA_DIR: &str = "/run/cni/host-device";

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    device: String,
    hwaddr: String,
    kernelpath: String,
    #[serde(rename = "pciBusID")]
    pci_bus_id: String,
    #[serde(rename = "runtimeConfig")]
    runtime_config: Option<RawRuntimeConfig>,
    #[serde(rename = "dataDir")]
    data_dir: String,
    ipam: Option<IpamRef>,
    dns: Option<Dns>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawRuntimeConfig {
    #[serde(rename = "deviceID")]
    device_id: String,
}

#[derive(Debug, Clone)]
pub struct NetConf {
    pub network: String,
    pub selector: Selector,
    /// The device is bound to a userspace (DPDK) driver: it has no netdev to move.
    pub dpdk: bool,
    pub ipam_type: String,
    pub dns: Dns,
    pub data_dir: String,
}

/// The config for DEL, GC and STATUS, which must work when the device is gone: a runtime
/// device ID that sysfs does not know is taken as a PCI address.
pub fn load_lenient(args: &CmdArgs) -> Result<NetConf, HostDeviceError> {
    match load(args, &Sysfs::system()) {
        Err(HostDeviceError::DeviceIdNotFound { .. }) => {
            let raw: RawConf = args.decode_config().map_err(conf::decode_error)?;
            let id = raw.runtime_config.map(|r| r.device_id).unwrap_or_default();
            build(
                args,
                raw.ipam,
                raw.dns,
                raw.data_dir,
                Selector::Pci(id),
                false,
            )
        }
        other => other,
    }
}

/// Parses the config; only PCI and auxiliary IDs are checked against sysfs.
pub fn load(args: &CmdArgs, sysfs: &Sysfs) -> Result<NetConf, HostDeviceError> {
    let raw: RawConf = args.decode_config().map_err(conf::decode_error)?;
    let device_id = raw.runtime_config.map(|r| r.device_id).unwrap_or_default();
    let selector = if !device_id.is_empty() {
        // The runtime's device (a device plugin's allocation) wins over the config.
        find::device_id_selector(sysfs, &device_id)?
    } else if !raw.device.is_empty() {
        conf::ifname("device", &raw.device)?;
        Selector::Name(raw.device)
    } else if !raw.hwaddr.is_empty() {
        let mac = netkit::link::parse_mac(&raw.hwaddr).map_err(|_| HostDeviceError::BadMac {
            reason: conf::go_mac_error(&raw.hwaddr),
            hwaddr: raw.hwaddr.clone(),
        })?;
        Selector::Mac(mac)
    } else if !raw.kernelpath.is_empty() {
        find::check_kernel_path(&raw.kernelpath)?;
        Selector::KernelPath(raw.kernelpath)
    } else if !raw.pci_bus_id.is_empty() {
        find::check_bus_id(&raw.pci_bus_id)?;
        Selector::Pci(raw.pci_bus_id)
    } else {
        return Err(HostDeviceError::NoSelector);
    };
    let dpdk = match &selector {
        Selector::Pci(addr) => find::has_dpdk_driver(sysfs, addr)?,
        _ => false,
    };
    build(args, raw.ipam, raw.dns, raw.data_dir, selector, dpdk)
}

fn build(
    args: &CmdArgs,
    ipam: Option<IpamRef>,
    dns: Option<Dns>,
    data_dir: String,
    selector: Selector,
    dpdk: bool,
) -> Result<NetConf, HostDeviceError> {
    let data_dir = if data_dir.is_empty() {
        DEFAULT_DATA_DIR.to_string()
    } else {
        data_dir
    };
    if !Path::new(&data_dir).is_absolute() {
        return Err(HostDeviceError::RelativeDataDir { data_dir });
    }
    Ok(NetConf {
        network: args.network_name.clone(),
        selector,
        dpdk,
        ipam_type: conf::ipam_type(&ipam),
        dns: conf::dns(dns),
        data_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::CniError;
    use serde_json::{json, Value};

    fn load_json(v: Value) -> Result<NetConf, CniError> {
        load(
            &attach::testing::cmd_args(v, ""),
            &Sysfs::at("/nonexistent-sysfs"),
        )
        .map_err(CniError::from)
    }

    #[test]
    fn selectors_in_the_reference_order() {
        let sel = |v: Value| load_json(v).unwrap().selector;
        assert_eq!(
            sel(json!({"device": "eth1", "hwaddr": "02:00:00:00:00:01"})),
            Selector::Name("eth1".into())
        );
        assert_eq!(
            sel(json!({"hwaddr": "02:00:00:00:00:01", "kernelpath": "/sys/devices/x"})),
            Selector::Mac([2, 0, 0, 0, 0, 1])
        );
        assert_eq!(
            sel(json!({"kernelpath": "/sys/devices/pci0000:00/0000:00:19.0"})),
            Selector::KernelPath("/sys/devices/pci0000:00/0000:00:19.0".into())
        );
        let c = load_json(json!({"device": "eth1"})).unwrap();
        assert_eq!(
            (c.data_dir.as_str(), c.dpdk, c.ipam_type.as_str()),
            (DEFAULT_DATA_DIR, false, "")
        );
    }

    #[test]
    fn bad_values() {
        let msg = |v: Value| load_json(v).unwrap_err().msg;
        assert_eq!(
            msg(json!({})),
            "specify either \"device\", \"hwaddr\", \"kernelpath\" or \"pciBusID\""
        );
        assert_eq!(
            msg(json!({"hwaddr": "zz"})),
            "failed to find host device: failed to parse MAC address \"zz\": address zz: invalid MAC address"
        );
        assert!(msg(json!({"kernelpath": "/etc"}))
            .contains("must be absolute and begin with /sys/devices/"));
        assert!(msg(json!({"kernelpath": "/sys/devices/../../etc"})).contains("must be absolute"));
        assert!(msg(json!({"pciBusID": "../../x"})).contains("invalid PCI address"));
        assert!(msg(json!({"runtimeConfig": {"deviceID": "0000:00:1f.6"}}))
            .contains("not found or unsupported"));
        assert!(msg(json!({"device": "eth1", "dataDir": "rel"})).contains("absolute"));
        assert_eq!(load_json(json!({"device": 5})).unwrap_err().code, 999);
    }
}
