//! The per-attachment backup of the link settings tuning changes:
//! `<dataDir>/<containerID>_<ifname>.json`, same shape as the reference
//! (`{"mac":..,"promisc":..,"mtu":..,"allmulti":..,"txQLen":..}`, configured fields only),
//! so a DEL by either implementation restores an ADD by the other. Ours also name their
//! attachment (`"owner"`, which the reference ignores), so GC can find the backups of
//! attachments that never saw a DEL. A backup of an earlier boot of the node (in a dataDir
//! that outlives a boot) is read as absent: the link it describes died with that boot, and an
//! ADD with the same container ID records this boot's originals. GC removes such backups.

use std::path::{Path, PathBuf};

use libcni::statefile;
use serde::{Deserialize, Serialize};

use crate::error::TuningError;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    #[serde(default, rename = "txQLen", skip_serializing_if = "Option::is_none")]
    pub tx_qlen: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
}

/// The attachment a backup belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub network: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

impl Backup {
    /// Whether another network's attachment wrote this backup. The file is named by
    /// (container, ifname), which one interface at a time holds in a container: met by an
    /// ADD of another network, it is a leftover of an interface gone without its DEL, whose
    /// values are not this link's originals. (DEL restores whatever network it names.) The
    /// reference's backups name no owner and are taken as this attachment's.
    pub fn belongs_to_other(&self, network: &str) -> bool {
        self.owner.as_ref().is_some_and(|o| o.network != network)
    }

    /// Fills fields missing here from `older` values: when an earlier backup exists (ADD
    /// retried without DEL), its values are the true originals and must win.
    pub fn keep_originals_from(mut self, older: Backup) -> Backup {
        self.mac = older.mac.or(self.mac);
        self.promisc = older.promisc.or(self.promisc);
        self.mtu = older.mtu.or(self.mtu);
        self.allmulti = older.allmulti.or(self.allmulti);
        self.tx_qlen = older.tx_qlen.or(self.tx_qlen);
        self
    }
}

/// GC: removes our backups of `network` whose attachment is not in `valid`, and every backup
/// of an earlier boot. Backups of this boot without an owner (the reference's) or of other
/// networks are left alone; so is anything that is not a readable backup stored under its
/// owner's own file name. Returns the files removed.
pub fn gc(
    data_dir: &str,
    network: &str,
    valid: &[(String, String)],
) -> Result<Vec<PathBuf>, TuningError> {
    let list_error = |source| TuningError::ListBackups {
        dir: data_dir.to_string(),
        source,
    };
    let mut removed = statefile::earlier_boots(Path::new(data_dir), |n| n.ends_with(".json"))
        .map_err(list_error)?;
    for file in &removed {
        remove(file)?;
    }
    let entries = match std::fs::read_dir(data_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(list_error(source)),
    };
    for entry in entries.flatten() {
        let file = entry.path();
        if file.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(Some(Backup {
            owner: Some(owner), ..
        })) = load(&file)
        else {
            continue;
        };
        let stale = owner.network == network
            && !valid
                .iter()
                .any(|(cid, ifname)| *cid == owner.container_id && *ifname == owner.ifname)
            && file == path(data_dir, &owner.container_id, &owner.ifname);
        if stale {
            remove(&file)?;
            removed.push(file);
        }
    }
    Ok(removed)
}

/// The backup file of one attachment.
pub fn path(data_dir: &str, container_id: &str, ifname: &str) -> PathBuf {
    Path::new(data_dir).join(format!("{container_id}_{ifname}.json"))
}

/// A backup is a few fields; anything much larger is not one.
const MAX_BACKUP_BYTES: u64 = 64 * 1024;

/// Reads a backup; `Ok(None)` when there is none, or only one of an earlier boot.
pub fn load(path: &Path) -> Result<Option<Backup>, TuningError> {
    let bytes = match statefile::read_this_boot(path, MAX_BACKUP_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(source) => {
            return Err(TuningError::ReadBackup {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    libcni::gojson::from_slice(&bytes)
        .map(Some)
        .map_err(|source| TuningError::ParseBackup {
            path: path.to_path_buf(),
            source,
        })
}

/// Writes a backup atomically (`libcni::statefile`: a writer killed half-way leaves nothing
/// that the next write or removal does not take), creating the directory (0700) if needed.
pub fn store(path: &Path, backup: &Backup) -> Result<(), TuningError> {
    let data = serde_json::to_vec_pretty(backup).map_err(TuningError::EncodeBackup)?;
    statefile::write_atomic(path, &data).map_err(|source| TuningError::WriteBackup {
        path: path.to_path_buf(),
        source,
    })
}

/// Removes a backup; a missing file is fine.
pub fn remove(path: &Path) -> Result<(), TuningError> {
    statefile::remove_if_exists(path).map_err(|source| TuningError::RemoveBackup {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory under the system temp dir, removed even when the test fails.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            Scratch(std::env::temp_dir().join(format!("tuning-{tag}-{}", std::process::id())))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reference_shape_round_trips() {
        let text = r#"{"mac":"02:00:00:00:00:01","promisc":false,"mtu":1500}"#;
        let b: Backup = serde_json::from_str(text).unwrap();
        assert_eq!(b.mtu, Some(1500));
        assert_eq!(b.allmulti, None);
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(v, serde_json::from_str::<serde_json::Value>(text).unwrap());
        let b: Backup = serde_json::from_str(r#"{"txQLen":1000,"allmulti":true}"#).unwrap();
        assert_eq!((b.tx_qlen, b.allmulti), (Some(1000), Some(true)));
        assert_eq!(b.owner, None);
    }

    #[test]
    fn gc_removes_only_our_unlisted_backups_of_the_network() {
        let scratch = Scratch::new("gc-test");
        let dir = &scratch.0;
        let dir_s = dir.to_str().unwrap();
        let owned = |net: &str, cid: &str| Backup {
            mtu: Some(1500),
            owner: Some(Owner {
                network: net.into(),
                container_id: cid.into(),
                ifname: "eth0".into(),
            }),
            ..Default::default()
        };
        for (net, cid) in [("n1", "keep"), ("n1", "gone"), ("n2", "other")] {
            store(&path(dir_s, cid, "eth0"), &owned(net, cid)).unwrap();
        }
        // The reference's backups carry no owner.
        let reference = path(dir_s, "ref", "eth0");
        std::fs::write(&reference, r#"{"mtu":1500}"#).unwrap();
        // An owner that does not match the file name is not trusted.
        store(&path(dir_s, "renamed", "eth0"), &owned("n1", "elsewhere")).unwrap();
        std::fs::write(dir.join("garbage.json"), "{").unwrap();

        let valid = vec![("keep".to_string(), "eth0".to_string())];
        let removed = gc(dir_s, "n1", &valid).unwrap();
        assert_eq!(removed, vec![path(dir_s, "gone", "eth0")]);
        assert!(gc(dir_s, "n1", &valid).unwrap().is_empty());
        for kept in ["keep", "other", "ref", "renamed"] {
            assert!(path(dir_s, kept, "eth0").exists(), "{kept}");
        }
        assert!(gc(dir_s, "n9", &[]).unwrap().is_empty());
        assert!(gc("/nonexistent-tuning-dir", "n1", &[]).unwrap().is_empty());
    }

    #[test]
    fn a_backup_of_an_earlier_boot_is_absent_and_gc_removes_it() {
        let Some(boot) = libcni::boot::Boot::current() else {
            return;
        };
        let scratch = Scratch::new("boot-test");
        let dir_s = scratch.0.to_str().unwrap();
        let p = path(dir_s, "valid", "eth0");
        let b = Backup {
            mtu: Some(1450),
            owner: Some(Owner {
                network: "n1".into(),
                container_id: "valid".into(),
                ifname: "eth0".into(),
            }),
            ..Default::default()
        };
        store(&p, &b).unwrap();
        assert_eq!(load(&p).unwrap(), Some(b));
        // The node rebooted since (where files keep a record and outlive a boot).
        let file = std::fs::File::open(&p).unwrap();
        let other = libcni::boot::Boot::known("an-earlier-boot", None);
        if other.stamp(&file).is_err() || !boot.predates(&file) {
            return;
        }
        assert_eq!(load(&p).unwrap(), None);
        // Even listed as valid (the runtime's view is of this boot), it goes.
        let valid = vec![("valid".to_string(), "eth0".to_string())];
        assert_eq!(gc(dir_s, "n9", &valid).unwrap(), vec![p.clone()]);
        assert!(!p.exists());
    }

    #[test]
    fn store_load_remove() {
        let scratch = Scratch::new("backup-test");
        let dir = &scratch.0;
        let p = path(dir.to_str().unwrap(), "cid", "eth0");
        assert_eq!(load(&p).unwrap(), None);
        let b = Backup {
            mtu: Some(1500),
            ..Default::default()
        };
        store(&p, &b).unwrap();
        assert_eq!(load(&p).unwrap(), Some(b));
        remove(&p).unwrap();
        remove(&p).unwrap();
    }

    #[test]
    fn older_backup_wins() {
        let older = Backup {
            mtu: Some(1500),
            ..Default::default()
        };
        let newer = Backup {
            mtu: Some(9000),
            promisc: Some(false),
            ..Default::default()
        };
        let merged = newer.keep_originals_from(older);
        assert_eq!((merged.mtu, merged.promisc), (Some(1500), Some(false)));
    }

    #[test]
    fn owned_by_the_network_that_wrote_it() {
        let mut b = Backup::default();
        // The reference's name no owner: anyone's.
        assert!(!b.belongs_to_other("n1"));
        b.owner = Some(Owner {
            network: "n1".into(),
            container_id: "c".into(),
            ifname: "eth0".into(),
        });
        assert!(!b.belongs_to_other("n1"));
        assert!(b.belongs_to_other("n2"));
    }
}
