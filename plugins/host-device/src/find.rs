//! Finding the host interface: by name, MAC, kernel device path, PCI address or auxiliary
//! device, through sysfs (the netns's own mount, so only its interfaces show), and telling
//! PCI devices bound to a userspace (DPDK) driver.

use std::path::{Component, Path, PathBuf};

use netkit::{Link, Netlink};

use crate::error::{HostDeviceError, NotFound};

/// How the host interface is named in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Name(String),
    Mac([u8; 6]),
    /// A device directory under /sys/devices whose `net/` holds the interface.
    KernelPath(String),
    Pci(String),
    /// A device on the auxiliary bus (`runtimeConfig.deviceID` only).
    Auxiliary(String),
}

/// Drivers that take a PCI network device away from the kernel (DPDK).
const USERSPACE_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];

/// The sysfs root (`/sys`; elsewhere in tests).
pub struct Sysfs(PathBuf);

impl Sysfs {
    pub fn system() -> Sysfs {
        Sysfs(PathBuf::from("/sys"))
    }

    /// A sysfs tree elsewhere (the binary's tests build one; not cfg(test): they link this
    /// library built without it).
    pub fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs(root.into())
    }

    fn pci(&self, addr: &str) -> PathBuf {
        self.0.join("bus/pci/devices").join(addr)
    }

    fn auxiliary(&self, name: &str) -> PathBuf {
        self.0.join("bus/auxiliary/devices").join(name)
    }
}

/// A bus device ID is one path component (no `/`, not `.` or `..`).
pub fn check_bus_id(id: &str) -> Result<(), HostDeviceError> {
    if id.is_empty() || id == "." || id == ".." || id.contains('/') || id.contains('\0') {
        return Err(HostDeviceError::BadBusId { id: id.to_string() });
    }
    Ok(())
}

/// `kernelpath` must be an absolute path under /sys/devices without `..`.
pub fn check_kernel_path(path: &str) -> Result<(), HostDeviceError> {
    let p = Path::new(path);
    let ok = p.is_absolute()
        && path.starts_with("/sys/devices/")
        && p.components().all(|c| !matches!(c, Component::ParentDir));
    if ok {
        Ok(())
    } else {
        Err(HostDeviceError::BadKernelPath {
            path: path.to_string(),
        })
    }
}

/// `runtimeConfig.deviceID`: a PCI address when such a PCI device exists, else an auxiliary
/// device when that exists.
pub fn device_id_selector(sysfs: &Sysfs, id: &str) -> Result<Selector, HostDeviceError> {
    check_bus_id(id)?;
    if sysfs.pci(id).exists() {
        Ok(Selector::Pci(id.to_string()))
    } else if sysfs.auxiliary(id).exists() {
        Ok(Selector::Auxiliary(id.to_string()))
    } else {
        Err(HostDeviceError::DeviceIdNotFound { id: id.to_string() })
    }
}

/// Whether the PCI device is bound to a userspace driver. A device without a driver is not.
pub fn has_dpdk_driver(sysfs: &Sysfs, addr: &str) -> Result<bool, HostDeviceError> {
    let link = sysfs.pci(addr).join("driver");
    match std::fs::read_link(&link) {
        Ok(target) => Ok(target
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| USERSPACE_DRIVERS.contains(&n))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(HostDeviceError::DriverLink { path: link, source }),
    }
}

/// The interface names in a device's `net/` directory, sorted (the reference takes the first
/// one the directory lists; sorting makes the choice stable).
fn net_dir_names(dir: &Path) -> Option<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Some(names)
}

/// The host interface the selector names.
pub fn host_link<S: Netlink>(
    sock: &mut S,
    sysfs: &Sysfs,
    selector: &Selector,
) -> Result<Link, HostDeviceError> {
    let first_in = |sock: &mut S, dir: &Path| -> Result<Link, HostDeviceError> {
        let names = net_dir_names(dir).ok_or_else(|| {
            HostDeviceError::NotFound(NotFound::NoNetDir {
                dir: dir.to_path_buf(),
            })
        })?;
        for name in names {
            if let Some(link) = sock.find_link(&name)? {
                return Ok(link);
            }
        }
        Err(HostDeviceError::NotFound(NotFound::NoInterfaceIn {
            dir: dir.to_path_buf(),
        }))
    };
    match selector {
        Selector::Name(name) => sock.link_by_name(name).map_err(|e| {
            HostDeviceError::NotFound(if e.is_not_found() {
                NotFound::Link
            } else {
                NotFound::Lookup(e)
            })
        }),
        Selector::Mac(mac) => sock
            .links()?
            .into_iter()
            .find(|l| l.mac == mac)
            .ok_or(HostDeviceError::NotFound(NotFound::Mac)),
        Selector::KernelPath(path) => first_in(sock, &Path::new(path).join("net")),
        Selector::Pci(addr) => {
            let dev = sysfs.pci(addr);
            let mut net = dev.join("net");
            if !net.is_dir() {
                // virtio devices keep it one level down: <dev>/virtioN/net.
                let virtio = std::fs::read_dir(&dev).ok().and_then(|d| {
                    let mut dirs: Vec<PathBuf> = d
                        .flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with("virtio"))
                        .map(|e| e.path().join("net"))
                        .filter(|p| p.is_dir())
                        .collect();
                    dirs.sort();
                    dirs.into_iter().next()
                });
                net = virtio.ok_or_else(|| {
                    HostDeviceError::NotFound(NotFound::NoPciNetDir { addr: addr.clone() })
                })?;
            }
            first_in(sock, &net)
        }
        Selector::Auxiliary(name) => first_in(sock, &sysfs.auxiliary(name).join("net")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpdk_drivers_are_recognised_from_the_driver_link() {
        let root = std::env::temp_dir().join(format!("hd-sysfs-{}", std::process::id()));
        let dev = root.join("bus/pci/devices/0000:03:00.1");
        std::fs::create_dir_all(&dev).unwrap();
        let sysfs = Sysfs::at(&root);
        assert!(
            !has_dpdk_driver(&sysfs, "0000:03:00.1").unwrap(),
            "no driver"
        );
        std::os::unix::fs::symlink("../../../bus/pci/drivers/vfio-pci", dev.join("driver"))
            .unwrap();
        assert!(has_dpdk_driver(&sysfs, "0000:03:00.1").unwrap());
        std::fs::remove_file(dev.join("driver")).unwrap();
        std::os::unix::fs::symlink("../../../bus/pci/drivers/ixgbe", dev.join("driver")).unwrap();
        assert!(!has_dpdk_driver(&sysfs, "0000:03:00.1").unwrap());
        assert_eq!(
            device_id_selector(&sysfs, "0000:03:00.1").unwrap(),
            Selector::Pci("0000:03:00.1".into())
        );
        std::fs::create_dir_all(root.join("bus/auxiliary/devices/mlx5_core.sf.2")).unwrap();
        assert_eq!(
            device_id_selector(&sysfs, "mlx5_core.sf.2").unwrap(),
            Selector::Auxiliary("mlx5_core.sf.2".into())
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
