//! The plugin's errors and their CNI codes.

use std::path::PathBuf;

use libcni::error::CniError;

/// Why the host device named by the config was not found.
#[derive(Debug, thiserror::Error)]
pub enum NotFound {
    /// Go's netlink words a missing link "Link not found"; operators match on it.
    #[error("Link not found")]
    Link,
    #[error("{0}")]
    Lookup(netkit::Error),
    /// The reference's words when no interface has the MAC.
    #[error("failed to find physical interface")]
    Mac,
    #[error("failed to find network devices at {dir:?}")]
    NoNetDir { dir: PathBuf },
    #[error("no interface of this netns in {}", .dir.display())]
    NoInterfaceIn { dir: PathBuf },
    #[error("no net directory under pci device {addr}")]
    NoPciNetDir { addr: String },
}

#[derive(Debug, thiserror::Error)]
pub enum HostDeviceError {
    // The configuration (code 999: plain errors upstream).
    #[error("specify either \"device\", \"hwaddr\", \"kernelpath\" or \"pciBusID\"")]
    NoSelector,
    #[error("failed to find host device: failed to parse MAC address {hwaddr:?}: {reason}")]
    BadMac { hwaddr: String, reason: String },
    #[error("invalid PCI address {id:?}")]
    BadBusId { id: String },
    #[error("kernel device path {path:?} must be absolute and begin with /sys/devices/")]
    BadKernelPath { path: String },
    #[error("runtime config DeviceID {id} not found or unsupported")]
    DeviceIdNotFound { id: String },
    #[error("dataDir {data_dir:?} must be an absolute path")]
    RelativeDataDir { data_dir: String },
    /// The PCI device's driver link could not be read (code 5, I/O).
    #[error("error with host device: {}: {source}", .path.display())]
    DriverLink {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to find host device: {0}")]
    NotFound(NotFound),

    // Moving the device in and out.
    #[error("failed to set {name:?} down: {source}")]
    SetDown { name: String, source: netkit::Error },
    #[error("failed to set {name:?} up: {source}")]
    SetUp { name: String, source: netkit::Error },
    #[error("failed to rename device {name:?} to temporary name {temp:?}: {source}")]
    RenameToTemp {
        name: String,
        temp: String,
        source: netkit::Error,
    },
    #[error("failed to move {temp:?} to container ns: {source}")]
    MoveIn { temp: String, source: netkit::Error },
    #[error("failed to find {temp:?}: {source}")]
    FindMoved { temp: String, source: netkit::Error },
    #[error("failed to rename device {temp:?} to {ifname:?}: {source}")]
    RenameInContainer {
        temp: String,
        ifname: String,
        source: netkit::Error,
    },
    #[error("failed to move {temp:?} to host netns: {source}")]
    MoveOut { temp: String, source: netkit::Error },
    #[error("failed to find {temp:?} in host namespace: {source}")]
    FindOnHost { temp: String, source: netkit::Error },
    #[error("failed to restore {name:?} to original name {original:?}: {source}")]
    RestoreName {
        name: String,
        original: String,
        source: netkit::Error,
    },
    /// DEL without saved state of a container link whose alias does not name its host device.
    #[error("failed to restore {ifname:?}: it has no alias naming its host device")]
    NoAlias { ifname: String },

    // The saved state (codes 999 for encoding, 5 for the file system).
    #[error("failed to encode {}: {source}", .file.display())]
    EncodeState {
        file: PathBuf,
        source: serde_json::Error,
    },
    #[error("failed to save the state of {device}: {}: {source}", .file.display())]
    SaveState {
        device: String,
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to remove {}: {source}", .file.display())]
    RemoveState {
        file: PathBuf,
        source: std::io::Error,
    },

    /// A kernel operation failed; the netkit error says what and on which object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// What attach, libcni or the IPAM plugin returned, passed on with its code.
    #[error("{}", .0.msg)]
    Delegated(#[from] CniError),
}

impl From<HostDeviceError> for CniError {
    fn from(e: HostDeviceError) -> CniError {
        match e {
            HostDeviceError::Delegated(e) => e,
            HostDeviceError::DriverLink { .. }
            | HostDeviceError::SaveState { .. }
            | HostDeviceError::RemoveState { .. } => CniError::io(e.to_string()),
            // Plain errors upstream, which its skeleton reports with code 999.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_texts() {
        let eexist = || netkit::Error::kernel("failed to rename to \"eth1\" temp_3", 17);
        let cases: Vec<(HostDeviceError, u32, &str)> = vec![
            (
                HostDeviceError::NoSelector,
                999,
                "specify either \"device\", \"hwaddr\", \"kernelpath\" or \"pciBusID\"",
            ),
            (
                HostDeviceError::NotFound(NotFound::Link),
                999,
                "failed to find host device: Link not found",
            ),
            (
                HostDeviceError::DeviceIdNotFound { id: "x".into() },
                999,
                "runtime config DeviceID x not found or unsupported",
            ),
            (
                HostDeviceError::RestoreName {
                    name: "temp_3".into(),
                    original: "eth1".into(),
                    source: eexist(),
                },
                999,
                "failed to restore \"temp_3\" to original name \"eth1\": failed to rename to \"eth1\" temp_3: File exists (os error 17)",
            ),
            (
                HostDeviceError::RemoveState {
                    file: "/run/x.json".into(),
                    source: std::io::Error::from_raw_os_error(13),
                },
                5,
                "failed to remove /run/x.json: Permission denied (os error 13)",
            ),
            (
                HostDeviceError::NoAlias {
                    ifname: "net1".into(),
                },
                999,
                "failed to restore \"net1\": it has no alias naming its host device",
            ),
            (
                HostDeviceError::Delegated(CniError::invalid_config("bad")),
                7,
                "bad",
            ),
        ];
        for (e, code, text) in cases {
            let c = CniError::from(e);
            assert_eq!((c.code, c.msg.as_str()), (code, text));
        }
    }
}
