//! A directory handle whose every operation is relative to the directory's fd and never
//! follows a symlink, so no name can lead the plugin outside the store.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Lease files are a few dozen bytes; never read more than this from one.
pub const MAX_LEASE_BYTES: u64 = 4096;

fn cstr(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name contains NUL"))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// What reading a lease-like entry found.
#[derive(Debug, PartialEq, Eq)]
pub enum EntryRead {
    Missing,
    /// A symlink, directory, FIFO, socket or device: never a lease of ours.
    NotAFile,
    File(Vec<u8>),
}

pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens `parent/name` as a directory, refusing a symlink in the last component.
    pub fn open_child(parent: &Dir, name: &str) -> io::Result<Dir> {
        let c = cstr(name)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid dirfd and NUL-terminated name; the returned fd is owned below.
        let fd = check(unsafe { libc::openat(parent.fd.as_raw_fd(), c.as_ptr(), flags) })?;
        // SAFETY: fd was just returned by openat and is not owned elsewhere.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: parent.path.join(name),
        })
    }

    /// Opens a directory by path (used for the admin-configured dataDir only).
    pub fn open_path(path: &Path) -> io::Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: NUL-terminated path; the fd is owned below.
        let fd = check(unsafe { libc::open(c.as_ptr(), flags) })?;
        // SAFETY: fresh fd from open.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// mkdirat; an existing entry is not an error (the caller then opens it with O_NOFOLLOW).
    pub fn make_dir(&self, name: &str, mode: libc::mode_t) -> io::Result<()> {
        let c = cstr(name)?;
        // SAFETY: valid dirfd and NUL-terminated name.
        match check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode) }) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// openat with O_NOFOLLOW | O_CLOEXEC always added.
    pub fn open_file(
        &self,
        name: &str,
        flags: libc::c_int,
        mode: libc::mode_t,
    ) -> io::Result<File> {
        let c = cstr(name)?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid dirfd and NUL-terminated name; mode is passed as the variadic argument.
        let fd = check(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags,
                libc::c_uint::from(mode),
            )
        })?;
        // SAFETY: fresh fd from openat.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Creates a hard link `to` of `from` (both in this directory); fails with EEXIST when
    /// `to` exists, which is what makes a reservation exclusive.
    pub fn link(&self, from: &str, to: &str) -> io::Result<()> {
        let (f, t) = (cstr(from)?, cstr(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid dirfds and NUL-terminated names; flags 0 = do not follow `from`.
        check(unsafe { libc::linkat(fd, f.as_ptr(), fd, t.as_ptr(), 0) }).map(|_| ())
    }

    pub fn unlink(&self, name: &str) -> io::Result<()> {
        let c = cstr(name)?;
        // SAFETY: valid dirfd and NUL-terminated name; unlinkat never follows symlinks.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(|_| ())
    }

    /// unlink that treats "already gone" as success.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        match self.unlink(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    pub fn stat(&self) -> io::Result<libc::stat> {
        // SAFETY: zeroed stat is a valid out-buffer for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and out-pointer.
        check(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?;
        Ok(st)
    }

    /// Reads a small regular file without following symlinks or blocking on FIFOs.
    pub fn read_entry(&self, name: &str) -> io::Result<EntryRead> {
        let file = match self.open_file(name, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(EntryRead::Missing),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(EntryRead::NotAFile),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Ok(EntryRead::NotAFile);
        }
        let mut buf = Vec::with_capacity(64);
        file.take(MAX_LEASE_BYTES).read_to_end(&mut buf)?;
        Ok(EntryRead::File(buf))
    }

    /// Names in the directory (without `.` and `..`).
    pub fn list(&self) -> io::Result<Vec<String>> {
        let dot = cstr(".")?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: a second fd on the same directory, so closedir does not close ours.
        let fd = check(unsafe { libc::openat(self.fd.as_raw_fd(), dot.as_ptr(), flags) })?;
        // SAFETY: fd is a directory fd we own; on success DIR* owns it.
        let dir = unsafe { libc::fdopendir(fd) };
        if dir.is_null() {
            let err = io::Error::last_os_error();
            // SAFETY: fdopendir failed so we still own fd.
            unsafe { libc::close(fd) };
            return Err(err);
        }
        let mut names = Vec::new();
        loop {
            // SAFETY: dir is a valid DIR*; readdir's result is valid until the next call.
            let entry = unsafe { libc::readdir(dir) };
            if entry.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated within the dirent.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            if let Ok(s) = std::str::from_utf8(bytes) {
                names.push(s.to_string());
            }
        }
        // SAFETY: dir is valid and closed exactly once.
        unsafe { libc::closedir(dir) };
        Ok(names)
    }

    pub fn raw_fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }
}

/// Holds an exclusive flock on an open file until dropped (closing the fd releases it).
pub struct FileLock {
    _file: File,
}

impl FileLock {
    pub fn acquire(file: File) -> io::Result<FileLock> {
        loop {
            // SAFETY: valid fd.
            match check(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }) {
                Ok(_) => return Ok(FileLock { _file: file }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
