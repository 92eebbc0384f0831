//! Persistent tap devices, created through `/dev/net/tun` (TUNSETIFF, TUNSETOWNER,
//! TUNSETGROUP, TUNSETPERSIST), as `ip tuntap add mode tap` does. Everything else about the
//! device (MTU, MAC, name, controller, up) is plain netlink afterwards.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::{Error, Result};
use crate::link::validate_ifname;
use crate::netns::Netns;

// <linux/if_tun.h>
const IFF_TAP: i16 = 0x0002;
const IFF_MULTI_QUEUE: i16 = 0x0100;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;
// _IOW('T', n, int); the request type is libc's (c_ulong on glibc, c_int on musl).
const TUNSETIFF: libc::Ioctl = 0x4004_54ca;
const TUNSETPERSIST: libc::Ioctl = 0x4004_54cb;
const TUNSETOWNER: libc::Ioctl = 0x4004_54cc;
const TUNSETGROUP: libc::Ioctl = 0x4004_54ce;

/// A tap device to create.
#[derive(Debug, Clone, Copy, Default)]
pub struct TapSpec<'a> {
    pub name: &'a str,
    /// IFF_MULTI_QUEUE: several file descriptors may attach as queues.
    pub multi_queue: bool,
    /// IFF_VNET_HDR: frames carry a virtio-net header.
    pub vnet_hdr: bool,
    /// Prepend the 4-byte packet information header (the absence of IFF_NO_PI).
    pub packet_info: bool,
    /// The only user allowed to attach (besides CAP_NET_ADMIN); `None` = anyone.
    pub owner: Option<u32>,
    /// The only group allowed to attach; `None` = anyone.
    pub group: Option<u32>,
}

impl TapSpec<'_> {
    fn flags(&self) -> i16 {
        let mut f = IFF_TAP;
        if self.multi_queue {
            f |= IFF_MULTI_QUEUE;
        }
        if self.vnet_hdr {
            f |= IFF_VNET_HDR;
        }
        if !self.packet_info {
            f |= IFF_NO_PI;
        }
        f
    }
}

/// `struct ifreq` with the name and the flags member of its union.
#[repr(C)]
struct IfreqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: i16,
    _pad: [u8; 22],
}

/// Creates the persistent tap `spec.name` inside `ns`. The device only becomes persistent
/// in the last step, so a failure half-way leaves nothing behind (closing the descriptor
/// destroys a non-persistent device).
pub fn create_tap(ns: &Netns, spec: &TapSpec<'_>) -> Result<()> {
    validate_ifname(spec.name)?;
    let ctx = |step: &str| format!("failed to create tap {:?}: {step}", spec.name);
    // The device belongs to the netns /dev/net/tun is opened in.
    let opened = ns.run(|| {
        // SAFETY: a NUL-terminated path and plain flags; the result is checked.
        let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            Err(Error::last_os_error(ctx("open /dev/net/tun")))
        } else {
            // SAFETY: fd was just returned by open and is owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    })??;
    let mut req = IfreqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: spec.flags(),
        _pad: [0; 22],
    };
    req.name[..spec.name.len()].copy_from_slice(spec.name.as_bytes());
    let fd = opened.as_raw_fd();
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `req` is laid out as.
    if unsafe { libc::ioctl(fd, TUNSETIFF, &mut req as *mut IfreqFlags) } < 0 {
        return Err(Error::last_os_error(ctx("TUNSETIFF")));
    }
    let by_value = |request: libc::Ioctl, value: libc::c_ulong, step: &str| -> Result<()> {
        // SAFETY: these tun ioctls take their argument by value.
        if unsafe { libc::ioctl(fd, request, value) } < 0 {
            return Err(Error::last_os_error(ctx(step)));
        }
        Ok(())
    };
    if let Some(uid) = spec.owner {
        by_value(TUNSETOWNER, uid.into(), "TUNSETOWNER")?;
    }
    if let Some(gid) = spec.group {
        by_value(TUNSETGROUP, gid.into(), "TUNSETGROUP")?;
    }
    by_value(TUNSETPERSIST, 1, "TUNSETPERSIST")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_the_spec() {
        let plain = TapSpec {
            name: "tap0",
            ..Default::default()
        };
        assert_eq!(plain.flags(), IFF_TAP | IFF_NO_PI);
        let all = TapSpec {
            multi_queue: true,
            vnet_hdr: true,
            packet_info: true,
            ..plain
        };
        assert_eq!(all.flags(), IFF_TAP | IFF_MULTI_QUEUE | IFF_VNET_HDR);
        assert_eq!(std::mem::size_of::<IfreqFlags>(), 40);
    }

    #[test]
    fn bad_names_are_refused_before_any_syscall() {
        let ns = Netns::current().unwrap();
        for bad in ["", "a/b", "a23456789012345678"] {
            let spec = TapSpec {
                name: bad,
                ..Default::default()
            };
            assert!(create_tap(&ns, &spec).is_err(), "{bad}");
        }
    }
}
