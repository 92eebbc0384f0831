//! The delegate config of each attachment, kept in `<dataDir>` so DEL works after subnet.env
//! has changed or gone. flannel's plugin keeps one file per container, `<containerID>`; two
//! attachments of one container (two interfaces, or two flannel networks) would share it, and
//! the first DEL would take the other's. Here the attachment on the runtime's default
//! interface `eth0` keeps flannel's own name, so flannel's plugin and ours find each other's
//! files for the usual single-interface pod, and any other interface has
//! `<containerID>:<ifname>` (neither a container ID nor an interface name holds a `:`).
//! Within a file, the delegate config's `name` is the network it belongs to.

use std::path::{Path, PathBuf};

use libcni::statefile;
use serde_json::{Map, Value};

use crate::error::FlannelError;

/// Bound on a saved config read back (a delegate config is a few hundred bytes).
const MAX_SAVED_BYTES: u64 = 1 << 20;

/// The interface whose attachment keeps flannel's own file name.
const DEFAULT_IFNAME: &str = "eth0";

/// The file of the attachment (`container_id`, `ifname`).
pub fn path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    if ifname == DEFAULT_IFNAME {
        data_dir.join(container_id)
    } else {
        data_dir.join(format!("{container_id}:{ifname}"))
    }
}

/// flannel's file of the container, whatever the interface.
pub fn container_path(data_dir: &Path, container_id: &str) -> PathBuf {
    data_dir.join(container_id)
}

pub fn save(
    data_dir: &Path,
    container_id: &str,
    ifname: &str,
    bytes: &[u8],
) -> Result<(), FlannelError> {
    let p = path(data_dir, container_id, ifname);
    statefile::write_atomic(&p, bytes).map_err(|source| FlannelError::Save { path: p, source })
}

/// The saved bytes at `p`, `None` when nothing is saved there.
pub fn load_at(p: &Path) -> Result<Option<Vec<u8>>, FlannelError> {
    statefile::read_bounded(p, MAX_SAVED_BYTES).map_err(|source| FlannelError::Read {
        path: p.to_path_buf(),
        source,
    })
}

/// Where an attachment's saved config was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The attachment's own file.
    Own(PathBuf),
    /// flannel's container file, for an interface other than `eth0` without a file of its
    /// own (flannel's plugin, or an earlier version, wrote it for whichever interface it had):
    /// its config serves, but the file may be `eth0`'s and stays for that DEL (or GC).
    Container(PathBuf),
}

impl Found {
    pub fn path(&self) -> &Path {
        match self {
            Found::Own(p) | Found::Container(p) => p,
        }
    }
}

/// The saved config of the attachment: its own file, else (see [`Found::Container`])
/// flannel's container file when it is of `network`.
pub fn load(
    data_dir: &Path,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Result<Option<(Found, Vec<u8>)>, FlannelError> {
    let own = path(data_dir, container_id, ifname);
    if let Some(bytes) = load_at(&own)? {
        return Ok(Some((Found::Own(own), bytes)));
    }
    let shared = container_path(data_dir, container_id);
    if shared == own {
        return Ok(None);
    }
    Ok(load_at(&shared)?
        .filter(|b| network_of(b).as_deref() == Some(network))
        .map(|b| (Found::Container(shared), b)))
}

pub fn remove_at(p: &Path) -> Result<(), FlannelError> {
    statefile::remove_if_exists(p).map_err(|source| FlannelError::Remove {
        path: p.to_path_buf(),
        source,
    })
}

/// The network a saved config belongs to (its `name`).
pub fn network_of(bytes: &[u8]) -> Option<String> {
    parse(bytes)?
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A saved config as an object, or `None` when it is not one.
pub fn parse(bytes: &[u8]) -> Option<Map<String, Value>> {
    match libcni::gojson::parse(bytes) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// One saved delegate config: its file, the container it belongs to and, for a file of its
/// own, the interface (`None`: flannel's container file, whatever interface it was for).
pub struct Saved {
    pub path: PathBuf,
    pub container_id: String,
    pub ifname: Option<String>,
    pub config: Map<String, Value>,
}

impl Saved {
    /// Whether an attachment in `valid` (container ID, ifname) still needs this config.
    pub fn is_valid(&self, valid: &[(String, String)]) -> bool {
        valid.iter().any(|(cid, ifname)| {
            *cid == self.container_id
                && self
                    .ifname
                    .as_deref()
                    .is_none_or(|own| own == ifname.as_str())
        })
    }
}

/// (container ID, interface) named by a file name; `None` for what is not a saved config's.
fn parse_name(name: &str) -> Option<(String, Option<String>)> {
    let (cid, ifname) = match name.split_once(':') {
        Some((cid, ifname)) => (cid, Some(ifname)),
        None => (name, None),
    };
    libcni::validate::container_id(cid).ok()?;
    if let Some(i) = ifname {
        libcni::validate::interface_name(i).ok()?;
    }
    Some((cid.to_string(), ifname.map(str::to_string)))
}

/// Every saved config of network `name`, in file name order. Other files in the directory
/// (another network's, temporaries, junk) are left out.
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
        let Some((container_id, ifname)) = entry.file_name().to_str().and_then(parse_name) else {
            continue;
        };
        let Ok(Some(bytes)) = statefile::read_bounded(&entry.path(), MAX_SAVED_BYTES) else {
            continue;
        };
        if let Some(config) = parse(&bytes) {
            if config.get("name").and_then(Value::as_str) == Some(name) {
                saved.push(Saved {
                    path: entry.path(),
                    container_id,
                    ifname,
                    config,
                });
            }
        }
    }
    saved.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_list_remove() {
        let dir = std::env::temp_dir().join(format!("flannel-scratch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(load(&dir, "cbr0", "c1", "eth0").unwrap(), None);
        assert!(list(&dir, "cbr0").unwrap().is_empty());
        save(&dir, "c1", "eth0", br#"{"name":"cbr0","type":"bridge"}"#).unwrap();
        save(
            &dir,
            "c1",
            "net1",
            br#"{"name":"cbr0","type":"bridge","x":1}"#,
        )
        .unwrap();
        save(&dir, "c2", "eth0", br#"{"name":"other","type":"bridge"}"#).unwrap();
        std::fs::write(dir.join("junk"), b"not json").unwrap();
        std::fs::write(dir.join("c3:"), br#"{"name":"cbr0"}"#).unwrap();
        // eth0 keeps flannel's name; another interface has a file of its own.
        assert!(dir.join("c1").is_file() && dir.join("c1:net1").is_file());
        let (p, bytes) = load(&dir, "cbr0", "c1", "eth0").unwrap().unwrap();
        assert_eq!(
            (p, &bytes[..]),
            (
                Found::Own(dir.join("c1")),
                &br#"{"name":"cbr0","type":"bridge"}"#[..]
            )
        );
        let l = list(&dir, "cbr0").unwrap();
        let names: Vec<_> = l
            .iter()
            .map(|s| (s.container_id.as_str(), s.ifname.as_deref()))
            .collect();
        assert_eq!(names, [("c1", None), ("c1", Some("net1"))]);
        let valid = |c: &str, i: &str| vec![(c.to_string(), i.to_string())];
        assert!(l[0].is_valid(&valid("c1", "net9")) && !l[0].is_valid(&valid("c2", "eth0")));
        assert!(l[1].is_valid(&valid("c1", "net1")) && !l[1].is_valid(&valid("c1", "eth0")));

        // Without a file of its own, another interface falls back to flannel's container
        // file of its network only.
        remove_at(&path(&dir, "c1", "net1")).unwrap();
        assert_eq!(
            load(&dir, "cbr0", "c1", "net1").unwrap().map(|(p, _)| p),
            Some(Found::Container(dir.join("c1")))
        );
        assert_eq!(load(&dir, "cbr1", "c1", "net1").unwrap(), None);
        remove_at(&dir.join("c1")).unwrap();
        remove_at(&dir.join("c1")).unwrap();
        assert_eq!(load(&dir, "cbr0", "c1", "eth0").unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
