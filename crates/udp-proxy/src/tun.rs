//! The TUN device: created when missing, attached, offloads asked for and what the kernel
//! grants recorded, made persistent once the engine has started.
//!
//! The device is persistent (unlike flanneld's, which vanishes with the process): across an
//! agent restart its address, MTU and the cluster route through it stay, so pod traffic to
//! other nodes is dropped at the device meanwhile instead of leaking out of the default route,
//! and the restarted agent finds nothing to redo. Offloads are set on every attach, because a
//! persistent device keeps them: a per-packet engine attaching after a fast one must turn them
//! off, or the kernel would hand it super-packets it cannot read.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::UdpProxyError;
use crate::vnet;

/// `struct ifreq` with the name and the flags member of its union.
#[repr(C)]
struct IfreqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An attached TUN device and what it offers.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    /// Packets carry a virtio-net header (`IFF_VNET_HDR`).
    pub vnet_hdr: bool,
    /// The kernel hands over TCP (`TUN_F_TSO4`) and UDP (`TUN_F_USO4`) super-packets.
    pub tso: bool,
    pub uso: bool,
    /// The device did not exist before this attach.
    pub created: bool,
}

impl Tun {
    /// Attaches to TUN device `name`, creating it if missing (not persistent yet: see
    /// [`Tun::persist`]). With `offloads`, asks for virtio-net headers, checksum offload, TSO
    /// and USO, keeping whatever subset the kernel grants; without, turns them all off.
    pub fn open(name: &str, offloads: bool) -> Result<Tun, UdpProxyError> {
        netkit::link::validate_ifname(name).map_err(|source| UdpProxyError::TunName {
            name: name.to_string(),
            source,
        })?;
        let created = !exists(name);
        let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
        if offloads {
            flags |= libc::IFF_VNET_HDR;
        }
        let fd = match attach(name, flags) {
            Ok(fd) => fd,
            // A kernel without virtio-net headers on TUN: plain packets.
            Err(AttachError::Attach(e)) if offloads && e.raw_os_error() == Some(libc::EINVAL) => {
                attach(name, libc::IFF_TUN | libc::IFF_NO_PI).map_err(|e| e.into_error(name))?
            }
            Err(e) => return Err(e.into_error(name)),
        };
        let vnet_hdr = offloads && tun_flags(&fd).is_ok_and(|f| f & libc::IFF_VNET_HDR != 0);
        let mut tun = Tun {
            fd,
            name: name.to_string(),
            vnet_hdr,
            tso: false,
            uso: false,
            created,
        };
        if vnet_hdr {
            // A persistent device keeps the size another user set.
            tun.set_vnet_hdr_size()
                .map_err(|source| tun.ioctl_error("set the virtio-net header size", source))?;
            tun.negotiate_offloads();
        } else if let Err(source) = tun.ioctl_value(libc::TUNSETOFFLOAD, 0) {
            // Kernels without TUNSETOFFLOAD never had offloads on the device.
            if source.raw_os_error() != Some(libc::EINVAL)
                && source.raw_os_error() != Some(libc::ENOTTY)
            {
                return Err(tun.ioctl_error("turn offloads off", source));
            }
        }
        Ok(tun)
    }

    /// Asks for the most offload the kernel grants: TSO and USO with checksum offload, then
    /// TSO alone (kernels before 6.2 have no USO), then checksum offload alone, then none.
    fn negotiate_offloads(&mut self) {
        let csum = libc::TUN_F_CSUM;
        let tso = libc::TUN_F_TSO4 | libc::TUN_F_TSO_ECN;
        // The kernel takes USO for both families or neither; IPv6 packets are ignored anyway.
        let uso = libc::TUN_F_USO4 | libc::TUN_F_USO6;
        for (wanted, has_tso, has_uso) in [
            (csum | tso | uso, true, true),
            (csum | tso, true, false),
            (csum, false, false),
            (0, false, false),
        ] {
            if self
                .ioctl_value(libc::TUNSETOFFLOAD, libc::c_ulong::from(wanted))
                .is_ok()
            {
                self.tso = has_tso;
                self.uso = has_uso;
                return;
            }
        }
    }

    /// Keeps the device after the last descriptor closes (TUNSETPERSIST).
    pub fn persist(&self) -> Result<(), UdpProxyError> {
        self.ioctl_value(libc::TUNSETPERSIST, 1)
            .map_err(|source| self.ioctl_error("make the device persistent", source))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    fn set_vnet_hdr_size(&self) -> io::Result<()> {
        let size = vnet::LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads an int through the pointer, which outlives the call.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn ioctl_value(&self, request: libc::Ioctl, value: libc::c_ulong) -> io::Result<()> {
        // SAFETY: these TUN ioctls take their argument by value; the descriptor is ours.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), request, value) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn ioctl_error(&self, what: &'static str, source: io::Error) -> UdpProxyError {
        UdpProxyError::TunIoctl {
            tun: self.name.clone(),
            what,
            source,
        }
    }
}

enum AttachError {
    Open(io::Error),
    Attach(io::Error),
}

impl AttachError {
    fn into_error(self, name: &str) -> UdpProxyError {
        match self {
            AttachError::Open(source) => UdpProxyError::OpenTun {
                tun: name.to_string(),
                source,
            },
            AttachError::Attach(source) => UdpProxyError::AttachTun {
                tun: name.to_string(),
                source,
            },
        }
    }
}

/// Opens `/dev/net/tun` (non-blocking: the engine's threads poll) and attaches it to `name`.
fn attach(name: &str, flags: libc::c_int) -> Result<OwnedFd, AttachError> {
    let path = c"/dev/net/tun";
    // SAFETY: a NUL-terminated path and plain flags; the result is checked.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if raw < 0 {
        return Err(AttachError::Open(io::Error::last_os_error()));
    }
    // SAFETY: `raw` was just returned by open and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = IfreqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: flags as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `req` is laid out as.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfreqFlags) } < 0 {
        return Err(AttachError::Attach(io::Error::last_os_error()));
    }
    Ok(fd)
}

/// The flags the device was attached with (TUNGETIFF).
fn tun_flags(fd: &OwnedFd) -> io::Result<libc::c_int> {
    let mut req = IfreqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    // SAFETY: TUNGETIFF fills a `struct ifreq`, which `req` is laid out as.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNGETIFF, &mut req as *mut IfreqFlags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(libc::c_int::from(req.flags) & 0xffff)
}

/// Whether an interface of that name exists in the calling thread's network namespace.
fn exists(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_is_the_kernels_size() {
        assert_eq!(std::mem::size_of::<IfreqFlags>(), 40);
    }

    #[test]
    fn bad_names_are_refused_before_any_syscall() {
        for bad in ["", "a/b", "flannel0123456789"] {
            assert!(matches!(
                Tun::open(bad, true),
                Err(UdpProxyError::TunName { .. })
            ));
        }
    }
}
