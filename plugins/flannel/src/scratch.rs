//! The delegate config of each container, kept as `<dataDir>/<containerID>` (flannel's
//! layout) so DEL works after subnet.env has changed or gone.

use std::path::{Path, PathBuf};

use libcni::statefile;
use serde_json::{Map, Value};

use crate::error::FlannelError;

/// Bound on a saved config read back (a delegate config is a few hundred bytes).
const MAX_SAVED_BYTES: u64 = 1 << 20;

pub fn path(data_dir: &Path, container_id: &str) -> PathBuf {
    data_dir.join(container_id)
}

pub fn save(data_dir: &Path, container_id: &str, bytes: &[u8]) -> Result<(), FlannelError> {
    let p = path(data_dir, container_id);
    statefile::write_atomic(&p, bytes).map_err(|source| FlannelError::Save { path: p, source })
}

/// The saved bytes, `None` when nothing was saved for this container.
pub fn load(data_dir: &Path, container_id: &str) -> Result<Option<Vec<u8>>, FlannelError> {
    let p = path(data_dir, container_id);
    statefile::read_bounded(&p, MAX_SAVED_BYTES)
        .map_err(|source| FlannelError::Read { path: p, source })
}

pub fn remove(data_dir: &Path, container_id: &str) -> Result<(), FlannelError> {
    let p = path(data_dir, container_id);
    statefile::remove_if_exists(&p).map_err(|source| FlannelError::Remove { path: p, source })
}

/// A saved config as an object, or `None` when it is not one.
pub fn parse(bytes: &[u8]) -> Option<Map<String, Value>> {
    match libcni::gojson::parse(bytes) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// One saved delegate config and the container it belongs to.
pub type Saved = (String, Map<String, Value>);

/// Every saved config of network `name`. Other files in the directory (another network's,
/// temporaries, junk) are left out.
pub fn list(data_dir: &Path, name: &str) -> Result<Vec<Saved>, FlannelError> {
    let entries = match std::fs::read_dir(data_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(FlannelError::List {
                dir: data_dir.to_path_buf(),
                source,
            })
        }
    };
    let mut saved = Vec::new();
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if libcni::validate::container_id(&id).is_err() {
            continue;
        }
        let Ok(Some(bytes)) = statefile::read_bounded(&entry.path(), MAX_SAVED_BYTES) else {
            continue;
        };
        if let Some(conf) = parse(&bytes) {
            if conf.get("name").and_then(Value::as_str) == Some(name) {
                saved.push((id, conf));
            }
        }
    }
    saved.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_list_remove() {
        let dir = std::env::temp_dir().join(format!("flannel-scratch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(load(&dir, "c1").unwrap(), None);
        assert!(list(&dir, "cbr0").unwrap().is_empty());
        save(&dir, "c1", br#"{"name":"cbr0","type":"bridge"}"#).unwrap();
        save(&dir, "c2", br#"{"name":"other","type":"bridge"}"#).unwrap();
        std::fs::write(dir.join("junk"), b"not json").unwrap();
        assert_eq!(
            load(&dir, "c1").unwrap().as_deref(),
            Some(&br#"{"name":"cbr0","type":"bridge"}"#[..])
        );
        let l = list(&dir, "cbr0").unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].0, "c1");
        remove(&dir, "c1").unwrap();
        remove(&dir, "c1").unwrap();
        assert_eq!(load(&dir, "c1").unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
