//! Which boot of the node a piece of per-container state belongs to.
//!
//! Nothing a plugin makes in the kernel survives a reboot, and no container either: a lease,
//! a cached result or a plugin's record written before the node went down describes something
//! that is gone. After a crash no DEL comes for most of them, so each such file says which boot
//! wrote it, and a reader treats a file of an earlier boot as absent (free).
//!
//! A boot is the kernel's `boot_id`, new at every boot. Files written through this crate (and
//! host-local's leases) carry it in the extended attribute `user.ferrocni.boot`, set on the
//! inode before the file gets its name; the reference binaries ignore it. A file is of an
//! earlier boot when:
//! - it is on a filesystem that does not outlive a boot (tmpfs, ramfs): never;
//! - it carries a boot: when that is not this one;
//! - it carries none (the reference wrote it, or the filesystem keeps no user attributes):
//!   when it was last modified before this boot began (`btime` in `/proc/stat`).
//!
//! When the boot cannot be told (no `/proc`), every file is of this boot: state is kept rather
//! than dropped, as it was before boots were told apart.

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

/// The kernel's identity of the running boot (a UUID, new at every boot).
pub const BOOT_ID_PATH: &CStr = c"/proc/sys/kernel/random/boot_id";
/// Where the kernel tells when the running boot began (`btime <seconds since the epoch>`).
pub const PROC_STAT_PATH: &str = "/proc/stat";
/// The extended attribute holding the boot that wrote a file.
pub const BOOT_XATTR: &CStr = c"user.ferrocni.boot";

/// A boot_id is 36 characters; anything much longer is not one.
const MAX_BOOT_ID: usize = 64;
/// `statfs.f_type` of the filesystems whose content dies with the boot.
const TMPFS_MAGIC: u32 = 0x0102_1994;
const RAMFS_MAGIC: u32 = 0x8584_58f6;

/// One boot of the node: its id, and when it began (read only when a file without a recorded
/// boot must be judged: `/proc/stat` is larger and costlier to produce than the id).
#[derive(Debug)]
pub struct Boot {
    id: String,
    btime: OnceLock<Option<i64>>,
}

impl Boot {
    /// The running boot as the kernel tells it now; `None` without a readable boot_id.
    /// Long-running processes ask again; plugins use [`Boot::current`].
    pub fn read() -> Option<Boot> {
        let mut buf = [0u8; MAX_BOOT_ID + 2];
        let n = read_once(BOOT_ID_PATH, &mut buf)?;
        let id = std::str::from_utf8(&buf[..n]).ok()?.trim();
        // A read that filled the buffer was not a boot_id.
        let valid = n < buf.len() && !id.is_empty() && id.bytes().all(|b| b.is_ascii_graphic());
        valid.then(|| Boot {
            id: id.to_string(),
            btime: OnceLock::new(),
        })
    }

    /// The running boot, read once per process.
    pub fn current() -> Option<&'static Boot> {
        static CURRENT: OnceLock<Option<Boot>> = OnceLock::new();
        CURRENT.get_or_init(Boot::read).as_ref()
    }

    /// A boot known by its id and start time (`None`: unknown), e.g. to judge files as of
    /// another boot.
    pub fn known(id: &str, btime: Option<i64>) -> Boot {
        let cell = OnceLock::new();
        let _ = cell.set(btime);
        Boot {
            id: id.to_string(),
            btime: cell,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// When this boot began, in seconds since the epoch; `None` when `/proc/stat` says not.
    pub fn btime(&self) -> Option<i64> {
        *self.btime.get_or_init(read_btime)
    }

    /// Records this boot on an open file. Fails where the filesystem keeps no user
    /// attributes; such a file is then judged by its modification time.
    pub fn stamp(&self, file: &File) -> io::Result<()> {
        // SAFETY: a descriptor we borrow, a NUL-terminated name and a buffer of the given
        // length; fsetxattr keeps none of them.
        let rc = unsafe {
            libc::fsetxattr(
                file.as_raw_fd(),
                BOOT_XATTR.as_ptr(),
                self.id.as_ptr().cast(),
                self.id.len(),
                0,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Whether the open file was written in a boot before this one (see the module's rules).
    pub fn predates(&self, file: &File) -> bool {
        if dies_with_the_boot(file) {
            return false;
        }
        match recorded_boot(file) {
            Some(id) => id != self.id.as_bytes(),
            None => match (file.metadata(), self.btime()) {
                (Ok(meta), Some(btime)) => meta.mtime() < btime,
                _ => false,
            },
        }
    }
}

/// Records the running boot on a file about to be given its name. Best effort: a filesystem
/// without user attributes leaves the file to be judged by its modification time.
pub fn stamp(file: &File) {
    if let Some(boot) = Boot::current() {
        let _ = boot.stamp(file);
    }
}

/// Whether the open file is state of an earlier boot of this node (never, when the running
/// boot is unknown).
pub fn is_from_earlier_boot(file: &File) -> bool {
    Boot::current().is_some_and(|boot| boot.predates(file))
}

/// The boot recorded on the file, if any.
fn recorded_boot(file: &File) -> Option<Vec<u8>> {
    let mut buf = [0u8; MAX_BOOT_ID];
    // SAFETY: a descriptor we borrow, a NUL-terminated name and a buffer of the given length.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            BOOT_XATTR.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    // ENODATA: not recorded; ENOTSUP: not recordable here; ERANGE: not one of ours.
    usize::try_from(n).ok().map(|n| buf[..n].to_vec())
}

/// Whether the file is on a filesystem that starts empty at every boot.
fn dies_with_the_boot(file: &File) -> bool {
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we borrow and a valid out-pointer.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    // f_type's width differs between C libraries; the magic numbers are 32-bit.
    #[allow(clippy::unnecessary_cast)]
    let kind = st.f_type as u32;
    kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
}

/// One read of a small file into `buf` (the size read): open, read, close, and nothing more,
/// as this runs on every ADD (`openat`, since musl's `open` adds an `fcntl` for O_CLOEXEC).
fn read_once(path: &CStr, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
    let fd = unsafe {
        libc::openat(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor we just opened, owned (and closed) by the File from here on.
    let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.read(buf).ok()
}

fn read_btime() -> Option<i64> {
    let text = std::fs::read_to_string(PROC_STAT_PATH).ok()?;
    parse_btime(&text)
}

/// The `btime` line of a `/proc/stat`.
fn parse_btime(stat: &str) -> Option<i64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct Scratch(PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A scratch directory on a filesystem that outlives a boot, if this machine has one
    /// where the tests may write.
    fn disk_scratch(tag: &str) -> Option<Scratch> {
        let name = format!("libcni-boot-{tag}-{}", std::process::id());
        let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
        [std::env::temp_dir(), PathBuf::from("/var/tmp"), target]
            .into_iter()
            .map(|root| root.join(&name))
            .find(|dir| {
                std::fs::create_dir_all(dir).is_ok()
                    && !File::open(dir).is_ok_and(|f| dies_with_the_boot(&f))
            })
            .map(Scratch)
    }

    #[test]
    fn btime_is_read_from_proc_stat_text() {
        let stat = "cpu  1 2 3\nintr 5 6\nctxt 9\nbtime 1700000000\nprocesses 4\n";
        assert_eq!(parse_btime(stat), Some(1_700_000_000));
        assert_eq!(parse_btime("cpu 1\n"), None);
        assert_eq!(parse_btime("btime x\n"), None);
    }

    #[test]
    fn the_running_boot_is_read() {
        // Every Linux with /proc has both; a sandbox without them has no boot to tell.
        if let Some(boot) = Boot::read() {
            assert_eq!(boot.id().len(), 36, "{}", boot.id());
            assert!(boot.btime().is_some_and(|t| t > 0));
            assert_eq!(Boot::current().map(Boot::id), Some(boot.id()));
        }
    }

    #[test]
    fn files_are_judged_by_their_boot_then_by_their_age() {
        let Some(dir) = disk_scratch("judge") else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let this = Boot::known("11111111-1111-1111-1111-111111111111", Some(now - 3600));
        let later = Boot::known("22222222-2222-2222-2222-222222222222", Some(now + 3600));
        let path = dir.0.join("state");
        std::fs::write(&path, b"x").unwrap();
        let file = File::open(&path).unwrap();
        // Without a record: its age against the boot's start.
        assert!(!this.predates(&file));
        assert!(later.predates(&file));
        assert!(!Boot::known("b", None).predates(&file), "no btime: kept");
        if this.stamp(&file).is_err() {
            eprintln!(
                "no user xattrs on {}: the record is not tested",
                dir.0.display()
            );
            return;
        }
        // With one: the record decides, whatever the clock says.
        let before = Boot::known(this.id(), Some(now + 3600));
        assert!(!before.predates(&file));
        assert!(later.predates(&file));
        assert!(Boot::known("33", Some(now - 7200)).predates(&file));
    }

    #[test]
    fn a_tmpfs_file_is_always_of_this_boot() {
        let Ok(shm) = File::open("/dev/shm") else {
            return;
        };
        if !dies_with_the_boot(&shm) {
            return;
        }
        let later = Boot::known("2", Some(i64::MAX));
        assert!(!later.predates(&shm));
    }
}
