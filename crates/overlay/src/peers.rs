//! Peer entries: `{ "subnet": CIDR, "ip": underlay address, "vtepMAC": optional }`, inline in
//! the config and/or in a shared JSON file. Each entry is parsed on its own: a bad one is
//! reported and skipped, the others still apply.

use std::net::IpAddr;
use std::path::Path;

use ipnetwork::IpNetwork;
use serde_json::Value;

use crate::config::{parse_subnet, OverlayConfig};
use crate::error::Error;

/// Largest peers file read (a 5,000-node list is well under 1 MiB).
const MAX_PEERS_FILE_BYTES: u64 = 64 << 20;

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The node's pod subnet; its network address is the node's VTEP address.
    pub subnet: IpNetwork,
    /// The node's underlay address (VXLAN destination, or host-gw gateway).
    pub ip: IpAddr,
    /// The node's VTEP MAC, when given; derived from the VTEP address otherwise.
    pub vtep_mac: Option<[u8; 6]>,
    /// Where the entry came from, for messages ("peers[2]", "/etc/cni/peers.json[7]").
    pub origin: String,
}

/// The peers of one reconcile pass, with the entries that could not be parsed.
#[derive(Debug, Clone, Default)]
pub struct PeerSet {
    pub peers: Vec<Peer>,
    /// One line per rejected entry.
    pub problems: Vec<String>,
}

impl PeerSet {
    /// Collects the inline peers and the peers file of `cfg`. Only an unreadable or
    /// malformed file is an error (deleting every peer because a file is briefly missing
    /// would cut the node off); single bad entries become `problems`.
    pub fn load(cfg: &OverlayConfig) -> Result<PeerSet, Error> {
        let mut set = PeerSet::default();
        set.extend_from_values(&cfg.peers, "peers");
        if let Some(path) = &cfg.peers_file {
            let values = read_peers_file(path)?;
            set.extend_from_values(&values, &path.display().to_string());
        }
        Ok(set)
    }

    /// Parses `values` (origin `label[i]`), appending good entries and problems.
    pub fn extend_from_values(&mut self, values: &[Value], label: &str) {
        for (i, v) in values.iter().enumerate() {
            let origin = format!("{label}[{i}]");
            match parse_peer(v, &origin) {
                Ok(p) => self.peers.push(p),
                Err(why) => self.problems.push(format!("ignoring peer {origin}: {why}")),
            }
        }
    }
}

/// Reads a peers file: a JSON array of entries, or an object with a `peers` array.
pub fn read_peers_file(path: &Path) -> Result<Vec<Value>, Error> {
    let err = |detail: String| Error::PeersFile {
        path: path.to_path_buf(),
        detail,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.len() > MAX_PEERS_FILE_BYTES {
        return Err(err(format!(
            "file is larger than {MAX_PEERS_FILE_BYTES} bytes"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?;
    match v {
        Value::Array(a) => Ok(a),
        Value::Object(mut m) => match m.remove("peers") {
            Some(Value::Array(a)) => Ok(a),
            _ => Err(err(
                "expected a JSON array of peers or an object with a \"peers\" array".into(),
            )),
        },
        _ => Err(err(
            "expected a JSON array of peers or an object with a \"peers\" array".into(),
        )),
    }
}

fn parse_peer(v: &Value, origin: &str) -> Result<Peer, String> {
    let Value::Object(m) = v else {
        return Err("not a JSON object".into());
    };
    let text = |key: &str| -> Result<Option<&str>, String> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(format!("{key:?} must be a string, got {other}")),
        }
    };
    let subnet = text("subnet")?.ok_or("\"subnet\" is missing")?;
    let subnet = parse_subnet("subnet", subnet).map_err(|e| e.to_string())?;
    let ip = text("ip")?.ok_or("\"ip\" is missing")?;
    let ip: IpAddr = ip.parse().map_err(|e| format!("ip {ip:?}: {e}"))?;
    if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
        return Err(format!("ip {ip} is not a unicast underlay address"));
    }
    let vtep_mac = match text("vtepMAC")? {
        Some(s) => {
            let mac = netkit::link::parse_mac(s).map_err(|e| e.to_string())?;
            if mac[0] & 1 == 1 || mac == [0; 6] {
                return Err(format!("vtepMAC {s} is not a unicast MAC"));
            }
            Some(mac)
        }
        None => None,
    };
    Ok(Peer {
        subnet,
        ip,
        vtep_mac,
        origin: origin.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn good_and_bad_entries_are_separated() {
        let mut set = PeerSet::default();
        set.extend_from_values(
            &[
                json!({"subnet": "10.244.1.0/24", "ip": "192.168.1.11"}),
                json!({"subnet": "10.244.2.0/24", "ip": "192.168.1.12", "vtepMAC": "0e:2a:00:00:00:03"}),
                json!({"subnet": "10.244.3.1/24", "ip": "192.168.1.13"}),
                json!({"subnet": "10.244.4.0/24"}),
                json!({"subnet": "10.244.5.0/24", "ip": "224.0.0.1"}),
                json!({"subnet": "10.244.6.0/24", "ip": "192.168.1.16", "vtepMAC": "01:00:00:00:00:01"}),
                json!("nope"),
                json!({"subnet": 5, "ip": "192.168.1.17"}),
            ],
            "peers",
        );
        assert_eq!(set.peers.len(), 2, "{:?}", set.problems);
        assert_eq!(set.problems.len(), 6);
        assert_eq!(set.peers[1].vtep_mac, Some([0x0e, 0x2a, 0, 0, 0, 3]));
        assert!(
            set.problems[0].starts_with("ignoring peer peers[2]"),
            "{}",
            set.problems[0]
        );
    }

    #[test]
    fn file_forms() {
        let dir = std::env::temp_dir().join(format!("vxlan-peers-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.json");
        std::fs::write(&a, r#"[{"subnet":"10.244.1.0/24","ip":"192.168.1.11"}]"#).unwrap();
        assert_eq!(read_peers_file(&a).unwrap().len(), 1);
        std::fs::write(
            &a,
            r#"{"peers":[{"subnet":"10.244.1.0/24","ip":"192.168.1.11"}]}"#,
        )
        .unwrap();
        assert_eq!(read_peers_file(&a).unwrap().len(), 1);
        std::fs::write(&a, r#"{"nodes":[]}"#).unwrap();
        assert!(matches!(read_peers_file(&a), Err(Error::PeersFile { .. })));
        assert!(matches!(
            read_peers_file(&dir.join("missing.json")),
            Err(Error::PeersFile { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
