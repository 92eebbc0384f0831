//! What each ADD allowed through the firewall, kept on disk so that a DEL without prevResult
//! (containerd's second DEL, the DEL after a failed ADD) and GC can still find it. The rules
//! themselves are the reference's, which name no container: without this record an
//! interrupted ADD would leave `CNI-FORWARD` rules of a dead pod behind for ever.
//!
//! One file per attachment, `<dataDir>/<network>/<containerID>:<ifname>` (neither a container
//! ID nor an interface name may contain `:`), written atomically before the first rule is
//! added and removed after the last one is gone. The default dataDir is under /run: the rules
//! do not survive a reboot and neither do the records. In a dataDir that outlives a boot, a
//! record of an earlier boot is read as absent (its addresses may be another pod's now) and
//! GC removes it without touching any rule (`libcni::statefile`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use libcni::statefile;
use serde::{Deserialize, Serialize};

use crate::config::BackendKind;
use crate::error::FirewallError;

/// A record holds a few addresses; anything much larger is not ours.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    pub backend: String,
    /// The firewalld zone the addresses were bound to (firewalld backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub ips: Vec<IpAddr>,
}

impl Record {
    pub fn new(
        container_id: &str,
        ifname: &str,
        backend: BackendKind,
        zone: &str,
        ips: &[IpAddr],
    ) -> Record {
        Record {
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
            backend: backend.as_str().to_string(),
            zone: (backend == BackendKind::Firewalld).then(|| zone.to_string()),
            ips: ips.to_vec(),
        }
    }

    /// The backend the record's rules were made with (`None`: a record of an unknown one).
    pub fn backend(&self) -> Option<BackendKind> {
        BackendKind::from_name(&self.backend)
    }
}

/// The records of one network.
pub struct Records {
    dir: PathBuf,
}

impl Records {
    pub fn new(data_dir: &Path, network: &str) -> Records {
        Records {
            dir: data_dir.join(network),
        }
    }

    /// The record of the attachment (`container_id`, `ifname`) with the records it is among:
    /// `network`'s, else another network's. A container holds one interface of a name, so a
    /// DEL naming another network than its ADD did (a renamed network) still finds it; the
    /// other directories are read only when `network`'s has no such record.
    pub fn find(
        data_dir: &Path,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Option<(Records, Record)> {
        let own = Records::new(data_dir, network);
        if let Some(record) = own.load(container_id, ifname) {
            return Some((own, record));
        }
        std::fs::read_dir(data_dir)
            .ok()?
            .flatten()
            .filter(|e| e.file_name() != network && e.path().is_dir())
            .find_map(|e| {
                let records = Records { dir: e.path() };
                let record = records.load(container_id, ifname)?;
                Some((records, record))
            })
    }

    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}:{ifname}"))
    }

    pub fn save(&self, record: &Record) -> Result<(), FirewallError> {
        let path = self.path(&record.container_id, &record.ifname);
        let bytes = serde_json::to_vec(record).map_err(FirewallError::EncodeRecord)?;
        statefile::write_atomic(&path, &bytes)
            .map_err(|source| FirewallError::WriteRecord { path, source })
    }

    /// The record of an attachment; a missing or unreadable one is `None` (an unreadable one
    /// is reported: DEL must not fail on it).
    pub fn load(&self, container_id: &str, ifname: &str) -> Option<Record> {
        read(&self.path(container_id, ifname))
    }

    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<(), FirewallError> {
        let path = self.path(container_id, ifname);
        statefile::remove_if_exists(&path)
            .map_err(|source| FirewallError::RemoveRecord { path, source })
    }

    /// Removes the records of earlier boots (their rules died with that boot); goes on past a
    /// failure and returns the first.
    pub fn forget_earlier_boots(&self) -> Result<(), FirewallError> {
        let stale =
            statefile::earlier_boots(&self.dir, |name| name.contains(':')).map_err(|source| {
                FirewallError::ListRecords {
                    dir: self.dir.clone(),
                    source,
                }
            })?;
        let mut first_failure = Ok(());
        for path in stale {
            if let Err(source) = statefile::remove_if_exists(&path) {
                first_failure =
                    first_failure.and(Err(FirewallError::RemoveRecord { path, source }));
            }
        }
        first_failure
    }

    /// Every readable record of this boot of the network stored under its own attachment's
    /// name.
    pub fn list(&self) -> Result<Vec<Record>, FirewallError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(FirewallError::ListRecords {
                    dir: self.dir.clone(),
                    source,
                })
            }
        };
        Ok(entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| {
                let record = read(&e.path())?;
                (e.path() == self.path(&record.container_id, &record.ifname)).then_some(record)
            })
            .collect())
    }
}

fn read(path: &Path) -> Option<Record> {
    let bytes = match statefile::read_this_boot(path, MAX_RECORD_BYTES) {
        Ok(b) => b?,
        Err(e) => {
            eprintln!(
                "firewall: ignoring unreadable record {}: {e}",
                path.display()
            );
            return None;
        }
    };
    match libcni::gojson::from_slice(&bytes) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("firewall: ignoring corrupt record {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn save_load_list_remove() {
        let dir = Scratch(std::env::temp_dir().join(format!("fw-records-{}", std::process::id())));
        let net = Records::new(&dir.0, "net");
        let other = Records::new(&dir.0, "other");
        let ips: Vec<IpAddr> = vec!["10.1.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        let r = Record::new("c1", "eth0", BackendKind::Iptables, "trusted", &ips);
        net.save(&r).unwrap();
        net.save(&Record::new(
            "c2",
            "net1",
            BackendKind::Firewalld,
            "public",
            &ips[..1],
        ))
        .unwrap();
        other
            .save(&Record::new("c3", "eth0", BackendKind::Iptables, "", &ips))
            .unwrap();
        assert_eq!(net.load("c1", "eth0"), Some(r.clone()));
        assert_eq!(r.backend(), Some(BackendKind::Iptables));
        assert_eq!(net.load("c1", "eth1"), None);
        let mut ids: Vec<String> = net
            .list()
            .unwrap()
            .into_iter()
            .map(|r| r.container_id)
            .collect();
        ids.sort();
        assert_eq!(ids, ["c1", "c2"]);
        assert_eq!(
            net.load("c2", "net1").unwrap().zone.as_deref(),
            Some("public")
        );
        // A record stored under another attachment's name, or garbage, is not listed.
        std::fs::copy(dir.0.join("net/c1:eth0"), dir.0.join("net/c9:eth0")).unwrap();
        std::fs::write(dir.0.join("net/junk:eth0"), b"{").unwrap();
        assert_eq!(net.list().unwrap().len(), 2);
        net.remove("c1", "eth0").unwrap();
        net.remove("c1", "eth0").unwrap();
        assert_eq!(net.load("c1", "eth0"), None);
        assert!(Records::new(&dir.0, "none").list().unwrap().is_empty());
    }

    #[test]
    fn found_under_another_network() {
        let dir = Scratch(std::env::temp_dir().join(format!("fw-find-{}", std::process::id())));
        let ips: Vec<IpAddr> = vec!["10.1.0.5".parse().unwrap()];
        let r = Record::new("c1", "eth0", BackendKind::Iptables, "", &ips);
        Records::new(&dir.0, "net").save(&r).unwrap();
        assert!(Records::find(&dir.0, "none", "c1", "eth1").is_none());
        let (records, found) = Records::find(&dir.0, "renamed", "c1", "eth0").unwrap();
        assert_eq!(found, r);
        records.remove("c1", "eth0").unwrap();
        assert!(Records::find(&dir.0, "net", "c1", "eth0").is_none());
        // No data directory at all: nothing, no error.
        assert!(Records::find(&dir.0.join("missing"), "net", "c1", "eth0").is_none());
    }
}
