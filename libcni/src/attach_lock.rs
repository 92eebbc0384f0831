//! One attachment, one operation at a time. The spec tells runtimes never to run two
//! operations on the same container at once; a runtime that does anyway (a retry racing the
//! first call, two tools on one pod) could interleave an ADD and a DEL so that a pod keeps an
//! address whose lease was released, or rules outlive their pod. Our list operations take an
//! exclusive lock per (network, container, interface) for their whole duration, so they never
//! interleave. The lock is a file under `<cacheDir>/locks/`, flock'ed; a successful DEL removes
//! it (waiters notice the file changed and lock the new one).

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A held lock (or, when the lock file cannot be made, none: the operation goes on unlocked
/// rather than failing, e.g. on a read-only cache dir where DEL must still work).
pub struct AttachmentLock {
    held: Option<(File, PathBuf)>,
}

impl AttachmentLock {
    pub fn acquire(cache_dir: &Path, network: &str, container_id: &str, ifname: &str) -> Self {
        let name = format!("{network}-{container_id}-{ifname}");
        if name.contains('/') || name.contains('\0') {
            // Unvalidated input (DEL does not validate): no file name to lock by.
            return AttachmentLock { held: None };
        }
        let path = cache_dir.join("locks").join(name);
        match lock(&path) {
            Ok(file) => AttachmentLock {
                held: Some((file, path)),
            },
            Err(e) => {
                eprintln!(
                    "libcni: going on without the attachment lock {}: {e}",
                    path.display()
                );
                AttachmentLock { held: None }
            }
        }
    }

    /// Removes the lock file (the attachment is gone), then releases the lock.
    pub fn remove(self) {
        if let Some((_, path)) = &self.held {
            let _ = fs::remove_file(path);
        }
    }
}

fn lock(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    loop {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        // SAFETY: flock on a valid, owned descriptor; blocks until the lock is ours.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // A DEL may have removed the file while we waited: then lock the one at the path now.
        let held = file.metadata()?;
        match fs::metadata(path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => return Ok(file),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn operations_on_one_attachment_never_overlap() {
        let dir = std::env::temp_dir().join(format!("libcni-lock-{}", std::process::id()));
        let inside = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (dir, inside) = (dir.clone(), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let l = AttachmentLock::acquire(&dir, "net", "cid", "eth0");
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        if i % 2 == 0 {
                            l.remove();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
