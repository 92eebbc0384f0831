//! Network namespace handles and thread-scoped switching.
//!
//! `setns` only affects the calling thread, so switching is always scoped: a guard restores
//! the thread's original netns on drop. Use these from the plugin's main thread only
//! (a CNI plugin is single-threaded); never hold a guard across work on other threads.

use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, NSFS_MAGIC, PROC_SUPER_MAGIC};

use crate::error::{Error, Result};

/// Where the calling thread's own netns is visible (not /proc/self: that is the main thread's).
const THREAD_NETNS: &str = "/proc/thread-self/ns/net";

/// `NS_GET_NSTYPE` ioctl: `_IO(0xb7, 0x3)`.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// `SIOCGSKNS` socket ioctl (Linux 4.9): a new descriptor of the socket's netns.
const SIOCGSKNS: libc::c_ulong = 0x894c;

/// A descriptor of the calling thread's current netns, to come back to after `setns`.
///
/// Asked of a throw-away socket, which is born in the creating thread's netns: three
/// syscalls and no path walk. Opening [`THREAD_NETNS`] instead makes a fresh process
/// instantiate its `/proc/<pid>/task/<tid>/ns` dentries and inodes, which its exit then
/// tears down again; in a plugin that enters a pod's netns once, that was the dearest part
/// of the switch. The ioctl needs CAP_NET_ADMIN over the netns (and a 4.9 kernel); where it
/// is refused, the path is opened as before.
fn open_thread_netns() -> std::io::Result<File> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain socket creation; on success the descriptor is owned by `sock`.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw >= 0 {
        // SAFETY: `raw` is a descriptor we just created and own.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        if let Ok(ns) = netns_of_socket(sock.as_raw_fd()) {
            return Ok(ns);
        }
    }
    File::open(THREAD_NETNS)
}

/// A descriptor of the netns socket `fd` lives in (`SIOCGSKNS`: CAP_NET_ADMIN, Linux 4.9).
fn netns_of_socket(fd: std::os::fd::RawFd) -> std::io::Result<File> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: SIOCGSKNS takes no argument; it returns a new O_CLOEXEC descriptor.
    let ns = unsafe { libc::ioctl(fd, SIOCGSKNS as _) };
    if ns < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the ioctl's result is a fresh descriptor nobody else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(ns) }))
}

/// An open network namespace file (e.g. `/run/netns/x` or `/proc/<pid>/ns/net`).
#[derive(Debug)]
pub struct Netns {
    file: File,
    path: PathBuf,
}

impl Netns {
    /// Opens and validates a netns path. A missing path yields [`Error::NetnsNotFound`]
    /// (DEL treats it as already gone); anything that is not a netns yields [`Error::NotNetns`].
    pub fn open(path: impl AsRef<Path>) -> Result<Netns> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let ctx = || format!("failed to open netns {shown:?}");
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NetnsNotFound {
                    context: ctx(),
                    path: shown,
                });
            }
            Err(e) => return Err(Error::io(ctx(), e)),
        };
        let fs = fstatfs(&file).map_err(|e| Error::io(ctx(), e.into()))?;
        let on_nsfs = fs.filesystem_type() == NSFS_MAGIC;
        if !on_nsfs && fs.filesystem_type() != PROC_SUPER_MAGIC {
            return Err(Error::NotNetns {
                context: ctx(),
                path: shown,
            });
        }
        // Ask the kernel which namespace type this is: a mount or pid ns passes statfs too.
        // Kernels older than 4.11 lack the ioctl; there nsfs alone has to do.
        // SAFETY: NS_GET_NSTYPE takes no argument and only inspects the fd.
        let nstype = unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE as _) };
        let is_netns = nstype == libc::CLONE_NEWNET || (on_nsfs && nstype < 0);
        if !is_netns {
            return Err(Error::NotNetns {
                context: ctx(),
                path: shown,
            });
        }
        Ok(Netns {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The calling thread's current netns.
    pub fn current() -> Result<Netns> {
        Netns::open(THREAD_NETNS)
    }

    /// The netns the socket `fd` lives in (shown as `what` in errors).
    pub(crate) fn of_socket(fd: std::os::fd::RawFd, what: &str) -> Result<Netns> {
        let file = netns_of_socket(fd)
            .map_err(|e| Error::io(format!("failed to find the netns of {what}"), e))?;
        Ok(Netns {
            file,
            path: PathBuf::from(what),
        })
    }

    /// The path this handle was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Switches the calling thread into this netns until the returned guard is dropped
    /// (or [`NetnsGuard::restore`]d).
    pub fn enter(&self) -> Result<NetnsGuard> {
        let original = open_thread_netns()
            .map_err(|e| Error::io("failed to open the current thread's netns", e))?;
        setns(&self.file, CloneFlags::CLONE_NEWNET).map_err(|e| {
            Error::io(
                format!(
                    "failed to enter netns {:?}",
                    self.path.display().to_string()
                ),
                e.into(),
            )
        })?;
        Ok(NetnsGuard {
            original: Some(original),
            _not_send: PhantomData,
        })
    }

    /// Runs `f` with the calling thread inside this netns, then switches back.
    /// For work that follows the thread's netns (sysctl writes, opening sockets).
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let guard = self.enter()?;
        let out = f();
        guard.restore()?;
        Ok(out)
    }

    /// Whether this is the netns the calling thread is currently in.
    pub fn is_current(&self) -> Result<bool> {
        let mine = std::fs::metadata(THREAD_NETNS)
            .map_err(|e| Error::io("failed to stat the current thread's netns", e))?;
        let theirs = self.file.metadata().map_err(|e| {
            Error::io(
                format!("failed to stat netns {:?}", self.path.display().to_string()),
                e,
            )
        })?;
        Ok(mine.dev() == theirs.dev() && mine.ino() == theirs.ino())
    }
}

impl AsRawFd for Netns {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Runs `f` inside `ns` on the calling thread (see [`Netns::run`]).
pub fn run_in<T>(ns: &Netns, f: impl FnOnce() -> T) -> Result<T> {
    ns.run(f)
}

/// Whether `ns` is the calling thread's current netns (e.g. CNI_NETNS names the plugin's own netns).
pub fn is_current(ns: &Netns) -> Result<bool> {
    ns.is_current()
}

/// Keeps the thread in another netns; switches back on drop. Not `Send`: the netns belongs
/// to the thread that entered it.
#[must_use = "dropping the guard immediately switches back"]
pub struct NetnsGuard {
    original: Option<File>,
    _not_send: PhantomData<*const ()>,
}

impl NetnsGuard {
    /// Switches back now, reporting failure instead of aborting.
    pub fn restore(mut self) -> Result<()> {
        match self.original.take() {
            Some(f) => setns(&f, CloneFlags::CLONE_NEWNET)
                .map_err(|e| Error::io("failed to return to the original netns", e.into())),
            None => Ok(()),
        }
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Some(f) = self.original.take() {
            if let Err(e) = setns(&f, CloneFlags::CLONE_NEWNET) {
                // Continuing in the wrong netns could configure the wrong interfaces: stop hard.
                eprintln!("netkit: failed to return to the original netns: {e}");
                std::process::abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_path_is_netns_not_found() {
        let e = Netns::open("/run/netns/definitely-not-here-netkit").unwrap_err();
        assert!(e.is_netns_not_found(), "{e}");
    }

    #[test]
    fn regular_file_is_not_a_netns() {
        let e = Netns::open("/proc/self/status").unwrap_err();
        assert!(matches!(e, Error::NotNetns { .. }), "{e}");
        let e = Netns::open("/etc/hostname")
            .or_else(|_| Netns::open("/etc/passwd"))
            .unwrap_err();
        assert!(matches!(e, Error::NotNetns { .. }), "{e}");
    }

    #[test]
    fn other_namespace_types_are_rejected() {
        let e = Netns::open("/proc/self/ns/mnt").unwrap_err();
        assert!(matches!(e, Error::NotNetns { .. }), "{e}");
    }

    #[test]
    fn the_descriptor_to_come_back_to_is_the_threads_netns() {
        let fd = open_thread_netns().unwrap().metadata().unwrap();
        let proc = std::fs::metadata(THREAD_NETNS).unwrap();
        assert_eq!((fd.dev(), fd.ino()), (proc.dev(), proc.ino()));
    }

    #[test]
    fn own_netns_is_current() {
        let ns = Netns::current().unwrap();
        assert!(ns.is_current().unwrap());
        let ns = Netns::open("/proc/self/ns/net").unwrap();
        assert!(ns.is_current().unwrap());
    }
}
