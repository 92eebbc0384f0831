//! What sysfs tells of a link and netlink does not: how the kernel came by its MAC
//! (`addr_assign_type`).
//!
//! sysfs shows the network namespace it was mounted in, not the reader's: a process whose
//! thread entered a netns with setns alone (no fresh sysfs mount, as `ip netns exec` makes)
//! reads another namespace's devices under `/sys/class/net`, maybe one of the same name. So
//! an answer counts only when the directory of that name shows the very link netlink gave
//! (same ifindex, same MAC); otherwise, or when anything cannot be read, there is no answer.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::link::{format_mac, Link};

/// `addr_assign_type`: how the link's MAC was assigned (the kernel's `NET_ADDR_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacOrigin {
    /// The device's own (hardware) address.
    Permanent,
    /// Generated at random by the kernel (a new bridge, veth, dummy, ...).
    Random,
    /// Taken from another device (a bridge following its lowest port, a bond).
    Stolen,
    /// Set by a user, at creation or later: a bridge then keeps it whatever its ports.
    Set,
}

impl MacOrigin {
    /// Parses the sysfs attribute's text (`"3\n"`).
    pub fn from_sysfs(text: &str) -> Option<MacOrigin> {
        match text.trim_end() {
            "0" => Some(MacOrigin::Permanent),
            "1" => Some(MacOrigin::Random),
            "2" => Some(MacOrigin::Stolen),
            "3" => Some(MacOrigin::Set),
            _ => None,
        }
    }
}

/// How the kernel came by `link`'s MAC, read from `/sys/class/net/<name>` when that
/// directory shows this very link (see the module's comment); `None` otherwise.
pub fn mac_origin(link: &Link) -> Option<MacOrigin> {
    mac_origin_under("/sys/class/net", link)
}

/// [`mac_origin`] under another root (tests).
pub(crate) fn mac_origin_under(root: &str, link: &Link) -> Option<MacOrigin> {
    if matches!(link.name.as_str(), "" | "." | "..") || link.name.contains('/') {
        return None;
    }
    let dir = open_dir(&format!("{root}/{}", link.name))?;
    let shows_this_link = read_attr(&dir, c"ifindex")?.trim_end() == link.index.to_string()
        && read_attr(&dir, c"address")?.trim_end() == format_mac(&link.mac);
    if !shows_this_link {
        return None;
    }
    MacOrigin::from_sysfs(&read_attr(&dir, c"addr_assign_type")?)
}

fn open_dir(path: &str) -> Option<OwnedFd> {
    let path = CString::new(path).ok()?;
    // SAFETY: a valid NUL-terminated path; the returned descriptor is owned below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    // SAFETY: `fd` is a new descriptor nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One small attribute file of `dir` (every netdev attribute fits in a page; these in a line).
fn read_attr(dir: &OwnedFd, name: &std::ffi::CStr) -> Option<String> {
    // SAFETY: `dir` is an open directory and `name` a NUL-terminated relative name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut buf = [0u8; 64];
    // SAFETY: the kernel writes at most `buf.len()` bytes into our own buffer.
    let n = unsafe { libc::read(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).ok()?;
    std::str::from_utf8(buf.get(..n)?).ok().map(str::to_string)
}

#[cfg(test)]
mod tests;
