//! One attachment, one operation at a time. The spec tells runtimes never to run two
//! operations on the same container at once; a runtime that does anyway (a retry racing the
//! first call, two tools on one pod) could interleave an ADD and a DEL so that a pod keeps an
//! address whose lease was released, or rules outlive their pod. Our list operations take an
//! exclusive lock per (network, container, interface) for their whole duration, so they never
//! interleave.
//!
//! All attachments share one lock file, `<cacheDir>/locks/attachments`, made once and never
//! removed: each attachment locks one byte of it, at an offset hashed from its key, with an
//! open-file-description lock (`F_OFD_SETLKW`). Such a lock belongs to our open file, is
//! released when the process exits however it exits, and excludes every other open of the file,
//! in this process or another. A file per attachment would cost a new inode on every ADD and an
//! unlink on every DEL (on ext4 the inode allocation alone was a sixth of a plain ADD's CPU).
//! Two keys hashing to one byte (a chance of 2⁻⁶²) only serialise two operations.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The shared lock file's name under `<cacheDir>/locks/`. Earlier versions named a file per
/// attachment `<network>-<containerID>-<ifname>`, always with two dashes, so this cannot clash.
const LOCK_FILE: &str = "attachments";

/// A held lock (or, when the lock file cannot be opened, none: the operation goes on unlocked
/// rather than failing, e.g. on a read-only cache dir where DEL must still work). Released on
/// drop, when the file closes.
pub struct AttachmentLock {
    _held: Option<File>,
}

impl AttachmentLock {
    pub fn acquire(cache_dir: &Path, network: &str, container_id: &str, ifname: &str) -> Self {
        let path = cache_dir.join("locks").join(LOCK_FILE);
        let offset = key_offset(network, container_id, ifname);
        match lock(&path, offset) {
            Ok(file) => AttachmentLock { _held: Some(file) },
            Err(e) => {
                eprintln!(
                    "libcni: going on without the attachment lock {} (byte {offset}): {e}",
                    path.display()
                );
                AttachmentLock { _held: None }
            }
        }
    }
}

/// The byte an attachment locks: FNV-1a over its key (stable across processes and builds),
/// kept below `i64::MAX` so that the one-byte range is a valid `off_t` range.
fn key_offset(network: &str, container_id: &str, ifname: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [network, container_id, ifname] {
        // A NUL after each part: ("ab","c") and ("a","bc") are different keys.
        for &byte in part.as_bytes().iter().chain(&[0u8]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    i64::try_from(hash >> 2).unwrap_or(0)
}

fn lock(path: &Path, offset: i64) -> std::io::Result<File> {
    let file = match open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            open(path)?
        }
        other => other?,
    };
    // SAFETY: an all-zero `flock` is a valid value; the fields that matter are set below.
    let mut range: libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = libc::F_WRLCK as libc::c_short;
    range.l_whence = libc::SEEK_SET as libc::c_short;
    range.l_start = offset;
    range.l_len = 1;
    loop {
        // SAFETY: fcntl on a valid, owned descriptor with a valid `flock`; blocks until the
        // byte is ours.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &range) } == 0 {
            return Ok(file);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("libcni-lock-{tag}-{}", std::process::id()))
    }

    #[test]
    fn operations_on_one_attachment_never_overlap() {
        let dir = temp_dir("overlap");
        let inside = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (dir, inside) = (dir.clone(), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let _l = AttachmentLock::acquire(&dir, "net", "cid", "eth0");
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn different_attachments_do_not_wait_for_each_other() {
        let dir = temp_dir("apart");
        let _first = AttachmentLock::acquire(&dir, "net", "cid", "eth0");
        let (tx, rx) = std::sync::mpsc::channel();
        let dir2 = dir.clone();
        std::thread::spawn(move || {
            let _second = AttachmentLock::acquire(&dir2, "net", "cid", "eth1");
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "eth1's lock waited for eth0's"
        );
        // One shared file, whatever the number of attachments.
        let names: Vec<_> = fs::read_dir(dir.join("locks"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![LOCK_FILE]);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_key_is_its_parts_not_their_concatenation() {
        assert_ne!(key_offset("ab", "c", "d"), key_offset("a", "bc", "d"));
        assert_eq!(key_offset("n", "c", "eth0"), key_offset("n", "c", "eth0"));
        assert!(key_offset("n", "c", "eth0") >= 0);
    }
}
