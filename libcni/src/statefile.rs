//! Small state files that plugins keep beside the kernel objects they create (what a DEL
//! without prevResult, or a GC, needs to find those objects again). Written atomically: a
//! reader sees the old file or the new one, never a partial one. Each file records the boot
//! that wrote it ([`crate::boot`]): the objects it describes die with that boot, so
//! [`read_this_boot`] reads the file of an earlier boot as absent and [`earlier_boots`]
//! finds it for GC to remove.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the temporary files of `path` are made: `.<name>.tmp.d/` beside it. A writer killed
/// before its rename leaves its temporary there, and the next write or removal of `path`
/// removes the whole directory (one lookup when there is none), so no crash leaves litter that
/// only a directory scan would find.
fn temp_dir_of(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.parent()
        .unwrap_or(Path::new("."))
        .join(format!(".{name}.tmp.d"))
}

fn remove_tree_if_exists(dir: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so readers see the old file
/// or the new one, never a part. Missing parent directories are created (0700); the file is
/// 0600. No fsync: callers that need durability across power loss are not served by this
/// (kernel state does not survive it either).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    if write_new(path, bytes)? {
        return Ok(());
    }
    replace(path, bytes)
}

/// A file that does not exist yet (a result cached by ADD, the usual case) is written as an
/// unnamed inode (`O_TMPFILE`) and then linked under its name, which fails if the name exists:
/// a reader sees the whole file or none, and a writer killed before the link leaves nothing.
/// This costs one inode, where the temporary directory costs two more (making and removing a
/// directory is most of a small write's work on ext4). Returns false when `path` exists or
/// the filesystem cannot do this, for [`replace`] to do it.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut file = match fs::OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
    {
        Ok(f) => f,
        // EOPNOTSUPP / EISDIR / EINVAL: no O_TMPFILE on this filesystem or kernel.
        Err(_) => return Ok(false),
    };
    crate::boot::stamp(&file);
    file.write_all(bytes)?;
    let Ok(to) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return Ok(false);
    };
    // The descriptor itself (AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH, which a runtime running
    // as root has; it spares the walk through /proc/self/fd, whose dentries a fresh process
    // would instantiate and its exit tear down again.
    // SAFETY: a descriptor we own, an empty and a NUL-terminated path; linkat keeps neither.
    let rc = unsafe {
        libc::linkat(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
        return Ok(false);
    }
    let Ok(from) = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
        return Ok(false);
    };
    // SAFETY: two NUL-terminated paths we own; linkat does not keep them.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    // EEXIST: the file exists (replace it); ENOENT: no /proc; anything else: the slow path
    // reports it if it is real.
    Ok(false)
}

/// Replaces `path` through a temporary file in `.<name>.tmp.d/` and a rename.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let temps = temp_dir_of(path);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&temps)?;
    let tmp = temps.join(format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        crate::boot::stamp(&file);
        file.write_all(bytes)?;
        fs::rename(&tmp, path)
    })();
    // Also takes what killed writers left.
    let cleaned = remove_tree_if_exists(&temps);
    result.and(cleaned)
}

/// Reads a file of at most `max` bytes; `Ok(None)` when it does not exist.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    match open_if_exists(path)? {
        Some(file) => read_open(file, max).map(Some),
        None => Ok(None),
    }
}

/// [`read_bounded`] for state that cannot outlive its boot: a file written in an earlier boot
/// of the node reads as `Ok(None)`, as if it did not exist.
pub fn read_this_boot(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    match open_if_exists(path)? {
        Some(file) if !crate::boot::is_from_earlier_boot(&file) => read_open(file, max).map(Some),
        _ => Ok(None),
    }
}

fn open_if_exists(path: &Path) -> std::io::Result<Option<fs::File>> {
    match fs::File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn read_open(file: fs::File, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// The state files of earlier boots in `dir`, for GC to remove: the regular files whose name
/// `ours` accepts (never a dot-file) and that [`read_this_boot`] reads as absent. What they
/// describe died with their boot, so removing them is all there is to do. A missing
/// directory holds none; the error is the directory's listing failing.
pub fn earlier_boots(
    dir: &Path,
    ours: impl Fn(&str) -> bool,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let named_ours = name
            .to_str()
            .is_some_and(|n| !n.starts_with('.') && ours(n));
        if !named_ours || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if fs::File::open(&path).is_ok_and(|f| crate::boot::is_from_earlier_boot(&f)) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Removes a file and what interrupted writes of it left; what is already gone is fine.
pub fn remove_if_exists(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    remove_tree_if_exists(&temp_dir_of(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_remove() {
        let dir = std::env::temp_dir().join(format!("libcni-statefile-{}", std::process::id()));
        let path = dir.join("sub").join("a:eth0");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(
            read_bounded(&path, 10).unwrap().as_deref(),
            Some(&b"two"[..])
        );
        assert!(read_bounded(&path, 2).is_err());
        let leftovers: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
        // A new file takes the unnamed-inode path: mode 0600, whole content, nothing beside it.
        let fresh = path.with_file_name("b:eth0");
        write_atomic(&fresh, b"new").unwrap();
        assert_eq!(fs::read(&fresh).unwrap(), b"new");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 2);
        remove_if_exists(&fresh).unwrap();
        // A writer killed before its rename leaves a temporary: the next removal takes it.
        let temps = temp_dir_of(&path);
        fs::create_dir_all(&temps).unwrap();
        fs::write(temps.join("4242-0"), b"half").unwrap();
        remove_if_exists(&path).unwrap();
        assert!(!temps.exists());
        remove_if_exists(&path).unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn state_of_an_earlier_boot_reads_as_absent_and_gc_finds_it() {
        let Some(boot) = crate::boot::Boot::current() else {
            return;
        };
        let dir =
            std::env::temp_dir().join(format!("libcni-statefile-boot-{}", std::process::id()));
        let (ours, old, theirs) = (dir.join("a:eth0"), dir.join("b:eth0"), dir.join("c:eth0"));
        write_atomic(&ours, b"this boot").unwrap();
        write_atomic(&old, b"earlier boot").unwrap();
        fs::write(&theirs, b"unstamped, written now").unwrap();
        fs::write(dir.join(".hidden"), b"").unwrap();
        // Mark one as written by another boot: only where files keep user attributes (a tmpfs
        // is never of an earlier boot, whatever it holds).
        let marked = crate::boot::Boot::known("another-boot", None)
            .stamp(&fs::File::open(&old).unwrap())
            .is_ok()
            && fs::File::open(&old).is_ok_and(|f| boot.predates(&f));
        assert_eq!(
            read_this_boot(&ours, 64).unwrap().as_deref(),
            Some(&b"this boot"[..])
        );
        assert!(read_this_boot(&theirs, 64).unwrap().is_some());
        assert_eq!(read_this_boot(&dir.join("none"), 64).unwrap(), None);
        let found = earlier_boots(&dir, |n| n.contains(':')).unwrap();
        if marked {
            assert_eq!(read_this_boot(&old, 64).unwrap(), None);
            assert!(read_bounded(&old, 64).unwrap().is_some(), "still there");
            assert_eq!(found, vec![old.clone()]);
        } else {
            assert!(found.is_empty());
        }
        assert!(earlier_boots(&dir, |n| n.starts_with('x'))
            .unwrap()
            .is_empty());
        assert!(earlier_boots(&dir.join("none"), |_| true)
            .unwrap()
            .is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
