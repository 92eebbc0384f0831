//! A node-wide lock file serialising concurrent reconciles (a runtime may run many ADDs at
//! once). `flock` locks vanish with the process, so a crash never leaves the lock held.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::Error;

/// Holds the exclusive lock until dropped.
#[derive(Debug)]
pub struct LockGuard {
    _file: File,
}

/// Blocks until the exclusive lock on `path` is held; creates the file and its directory.
pub fn lock(path: &Path) -> Result<LockGuard, Error> {
    let err = |source| Error::Lock {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    loop {
        // SAFETY: flock only operates on the descriptor, which `file` keeps open.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(LockGuard { _file: file });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(err(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn second_locker_waits_for_the_first() {
        let dir = std::env::temp_dir().join(format!("vxlan-lock-test-{}", std::process::id()));
        let path = dir.join("sub/x.lock");
        let first = lock(&path).unwrap();
        let released = Arc::new(AtomicBool::new(false));
        let r = released.clone();
        let p = path.clone();
        let t = std::thread::spawn(move || {
            let _g = lock(&p).unwrap();
            assert!(r.load(Ordering::SeqCst), "got the lock while it was held");
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        released.store(true, Ordering::SeqCst);
        drop(first);
        t.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
