//! Atomic file replacement: readers (CNI plugins, the vxlan sync) never see a half-written file.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::AgentError;

/// A file that could not be written: what was being done, on which path.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {source}")]
pub struct WriteError {
    pub what: &'static str,
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl WriteError {
    fn new(what: &'static str, path: &Path, source: std::io::Error) -> WriteError {
        WriteError {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<WriteError> for AgentError {
    fn from(e: WriteError) -> AgentError {
        AgentError::Io {
            what: e.what,
            path: e.path,
            source: e.source,
        }
    }
}

/// Writes `contents` to a temporary file beside `path`, fsyncs it and renames it over `path`.
/// Parent directories are created. Unchanged files are left alone so watchers see no churn.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<bool, WriteError> {
    if fs::read(path).is_ok_and(|old| old == contents) {
        return Ok(false);
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| WriteError::new("creating directory", dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A leading dot keeps the temporary out of `*.conflist` globs in the CNI conf dir.
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(WriteError::new("writing", path, e));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_and_reports_changes() {
        let dir = std::env::temp_dir().join(format!("agent-files-{}", std::process::id()));
        let path = dir.join("sub/x.conflist");
        assert!(write_atomic(&path, b"one").unwrap());
        assert!(!write_atomic(&path, b"one").unwrap());
        assert!(write_atomic(&path, b"two").unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let leftovers: Vec<_> = fs::read_dir(dir.join("sub")).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }
}
