//! The seam to the `overlay` crate's reconcile, the `vxlan` plugin's pass. The agent writes two
//! files in its state dir, atomically: the peer list (`peers.json`, the vxlan peers format) and
//! an overlay config pointing at it (`overlay.json`, a `vxlan` plugin config with `peersFile`).
//! Then it runs the same pass as `vxlan sync overlay.json`: by default through the `overlay`
//! library (config parsed by `OverlayConfig`, peers loaded from the file by `PeerSet::load`,
//! `reconcile`), or by executing a given `vxlan` binary. A CNI ADD's chained vxlan pass reading
//! the same peers file programs the same state, and both take the same lock file.
//!
//! A dual-stack network has two overlays, as flannel: `flannel.<vni>` for IPv4 pods over the
//! IPv4 underlay and `flannel-v6.<vni>` for IPv6 pods over the IPv6 underlay, each with its
//! own files (`overlay-v6.json`, `peers-v6.json`).
//!
//! Two backends use this seam: `vxlan` (modes `vxlan`, or `auto` with DirectRouting) and
//! `host-gw` (mode `host-gw`: plain routes via each peer's address, no device). Both bring its
//! agent flags ([`FLAGS`]: `--state-dir`, `--vxlan-bin`, `--vxlan-lock-file`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ipnetwork::IpNetwork;
use serde_json::{json, Value};

use crate::backend::flag::Flag;
use crate::backend::{Network, Node, Peer};
use crate::ops::files::{write_atomic, WriteError};
use crate::subnet::key::SubnetKey;

/// `--state-dir`: where the overlay configs and peers files are written.
pub const STATE_DIR: Flag = Flag {
    name: "--state-dir",
    value: "DIR",
    help: &["overlay config and peers file (default /run/ferrocni/agent)"],
    default: Some("/run/ferrocni/agent"),
    check: Flag::any_value,
    per_node: false,
};

/// `--vxlan-bin`: the reconcile run as `PATH sync <config>`.
pub const VXLAN_BIN: Flag = Flag {
    name: "--vxlan-bin",
    value: "PATH",
    help: &[
        "run `PATH sync <config>` for each pass instead of the built-in",
        "vxlan reconcile (the same code, separately installed)",
    ],
    default: None,
    check: Flag::any_value,
    per_node: false,
};

/// `--vxlan-lock-file`: the lock the passes take (the CNI plugin's).
pub const VXLAN_LOCK_FILE: Flag = Flag {
    name: "--vxlan-lock-file",
    value: "PATH",
    help: &[
        "the lock serialising passes with the CNI plugin's; set it to the",
        "conflist's vxlan `lockFile` when that is set (default: the",
        "plugin's default, /run/ferrocni/vxlan-<device>.lock)",
    ],
    default: None,
    check: Flag::any_value,
    per_node: false,
};

/// The agent flags of the backends using this seam.
pub const FLAGS: &[Flag] = &[STATE_DIR, VXLAN_BIN, VXLAN_LOCK_FILE];

/// What a pass of the overlay reconcile fails on.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// The pass itself: the vxlan crate's report, or running `vxlan sync`.
    #[error("{0}")]
    Pass(String),
    /// Its config or peers file.
    #[error(transparent)]
    File(#[from] WriteError),
}

/// Which half of the cluster network an overlay carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    /// File name suffix of this family's state files.
    fn suffix(self) -> &'static str {
        match self {
            IpFamily::V4 => "",
            IpFamily::V6 => "-v6",
        }
    }

    /// This node's subnet of this family.
    pub fn own_subnet(self, key: &SubnetKey) -> Option<IpNetwork> {
        match self {
            IpFamily::V4 => Some(key.v4.into()),
            IpFamily::V6 => key.v6.map(IpNetwork::from),
        }
    }
}

/// Bound on one reconcile pass (a healthy one takes milliseconds).
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// One remote node, as the vxlan peers format spells it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PeerEntry {
    pub subnet: IpNetwork,
    pub ip: IpAddr,
    pub vtep_mac: Option<String>,
}

impl PeerEntry {
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "subnet": self.subnet.to_string(), "ip": self.ip.to_string() });
        if let Some(mac) = &self.vtep_mac {
            v["vtepMAC"] = json!(mac);
        }
        v
    }
}

pub fn peers_json(peers: &[PeerEntry]) -> String {
    let list: Vec<Value> = peers.iter().map(PeerEntry::to_json).collect();
    serde_json::to_string_pretty(&list).unwrap_or_else(|_| "[]".into()) + "\n"
}

/// How a reconcile pass is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    /// In-process, through the `overlay` library.
    Library,
    /// `<bin> sync <config>`, for running a separately installed vxlan.
    Exec(PathBuf),
}

/// Everything fixed for the agent's lifetime that the overlay config needs.
#[derive(Debug, Clone)]
pub struct OverlaySettings {
    pub engine: Engine,
    pub state_dir: PathBuf,
    /// This overlay's underlay address (the lease's PublicIP or PublicIPv6).
    pub public_ip: IpAddr,
    pub iface: Option<String>,
    /// The pass's lock file; `None` leaves the vxlan default.
    pub lock_file: Option<PathBuf>,
}

impl OverlaySettings {
    /// The settings `node` gives (its flags), for the overlay over `public_ip`.
    pub fn for_node(node: &Node<'_>, public_ip: IpAddr) -> OverlaySettings {
        OverlaySettings {
            engine: match node.flag(&VXLAN_BIN) {
                Some(bin) => Engine::Exec(bin.into()),
                None => Engine::Library,
            },
            state_dir: node.flag(&STATE_DIR).map(PathBuf::from).unwrap_or_default(),
            public_ip,
            iface: node.iface(),
            lock_file: node.flag(&VXLAN_LOCK_FILE).map(PathBuf::from),
        }
    }
}

/// The backend's side of the overlay config: the `vxlan` plugin's mode and settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayParams {
    /// `vxlan`, `auto` (flannel's DirectRouting) or `host-gw`.
    pub mode: &'static str,
    pub vni: u32,
    pub port: u16,
    /// The VXLAN device's MTU when the backend fixes it (else the vxlan default: underlay
    /// MTU less the encapsulation).
    pub device_mtu: Option<u32>,
}

pub struct Overlay {
    settings: OverlaySettings,
    params: OverlayParams,
    family: IpFamily,
    config_path: PathBuf,
    peers_path: PathBuf,
    device: String,
}

impl Overlay {
    pub fn new(settings: OverlaySettings, params: OverlayParams, family: IpFamily) -> Overlay {
        let suffix = family.suffix();
        let config_path = settings.state_dir.join(format!("overlay{suffix}.json"));
        let peers_path = settings.state_dir.join(format!("peers{suffix}.json"));
        let device = match family {
            IpFamily::V4 => format!("flannel.{}", params.vni),
            IpFamily::V6 => format!("flannel-v6.{}", params.vni),
        };
        Overlay {
            settings,
            params,
            family,
            config_path,
            peers_path,
            device,
        }
    }

    pub fn family(&self) -> IpFamily {
        self.family
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn peers_path(&self) -> &Path {
        &self.peers_path
    }

    /// The vxlan plugin config for this node's lease (`own_subnet` of this overlay's family).
    pub fn config_json(&self, net: &Network, own_subnet: IpNetwork) -> Value {
        let p = &self.params;
        let network = match (self.family, net.v6) {
            (IpFamily::V6, Some(v6)) => v6.to_string(),
            _ => net.v4.to_string(),
        };
        let mut cfg = json!({
            "type": "vxlan",
            "network": network,
            "subnet": own_subnet.to_string(),
            "peersFile": self.peers_path.display().to_string(),
            "mode": p.mode,
            "vni": p.vni,
            "port": p.port,
            "device": self.device,
            "localIP": self.settings.public_ip.to_string(),
        });
        // No stateDir: the default lock file is the one a CNI ADD's vxlan pass takes too, so
        // the agent's reconciles and the plugin's are serialised. An explicit one must match
        // the conflist's `lockFile`.
        if let Some(lock) = &self.settings.lock_file {
            cfg["lockFile"] = json!(lock);
        }
        if let Some(iface) = &self.settings.iface {
            cfg["underlayInterface"] = json!(iface);
        }
        if let Some(mtu) = p.device_mtu {
            cfg["mtu"] = json!(mtu);
        }
        cfg
    }

    pub fn params(&self) -> &OverlayParams {
        &self.params
    }

    /// This family's peers among `peers`, in the vxlan peers format: `entry` reads a lease's
    /// underlay address and VTEP MAC for this family (`None`: not a peer of this family).
    pub fn entries(
        &self,
        peers: &[Peer],
        entry: impl Fn(&Peer) -> Option<(IpAddr, Option<String>)>,
    ) -> Vec<PeerEntry> {
        let mut list: Vec<PeerEntry> = peers
            .iter()
            .filter_map(|p| {
                let subnet = self.family.own_subnet(&p.key)?;
                let (ip, vtep_mac) = entry(p)?;
                Some(PeerEntry {
                    subnet,
                    ip,
                    vtep_mac,
                })
            })
            .collect();
        list.sort();
        list
    }

    /// Writes the config (when changed) and the peer list, then runs one reconcile (blocking).
    /// Returns the reconcile's own report (its stdout) for the log.
    pub fn sync(
        &self,
        net: &Network,
        own_subnet: IpNetwork,
        peers: &[PeerEntry],
    ) -> Result<String, OverlayError> {
        let config = self.config_json(net, own_subnet);
        let text = serde_json::to_string_pretty(&config).unwrap_or_default() + "\n";
        write_atomic(&self.config_path, text.as_bytes())?;
        write_atomic(&self.peers_path, peers_json(peers).as_bytes())?;
        match &self.settings.engine {
            Engine::Library => run_library(config),
            Engine::Exec(bin) => run_sync(bin, &self.config_path),
        }
    }

    /// The VXLAN device's MAC and MTU as the kernel has them, once a reconcile created it.
    pub fn device_info(&self) -> Option<(String, u32)> {
        let mut sock = netkit::Socket::new().ok()?;
        let link = sock.find_link(&self.device).ok()??;
        (link.mac.len() == 6).then(|| (netkit::link::format_mac(&link.mac), link.mtu))
    }
}

/// A node's overlays, IPv4 and (on a dual-stack network) IPv6, each with the peers it was
/// last reconciled with.
pub struct Overlays {
    net: Network,
    families: Vec<(Overlay, Option<Vec<PeerEntry>>)>,
}

/// What one family's pass left: the device's MAC and MTU, when it has a device.
pub type DeviceInfo = Option<(String, u32)>;

impl Overlays {
    /// The IPv4 overlay, and the IPv6 one (with `params_v6`) when the node has an IPv6
    /// underlay address.
    pub fn new(node: &Node<'_>, params: OverlayParams, params_v6: OverlayParams) -> Overlays {
        let mut families = vec![(
            Overlay::new(
                OverlaySettings::for_node(node, node.public_ip.into()),
                params,
                IpFamily::V4,
            ),
            None,
        )];
        if let Some(ip6) = node.public_ipv6 {
            families.push((
                Overlay::new(
                    OverlaySettings::for_node(node, ip6.into()),
                    params_v6,
                    IpFamily::V6,
                ),
                None,
            ));
        }
        Overlays {
            net: node.network,
            families,
        }
    }

    /// One pass per family for `peers`; `entry` reads a peer's underlay address and VTEP MAC
    /// for a family. A failing family does not keep the other from being reconciled; the
    /// first failure is returned. A family whose peers changed adds a line to `log`.
    pub fn sync(
        &mut self,
        own: &SubnetKey,
        peers: &[Peer],
        entry: impl Fn(IpFamily, &Peer) -> Option<(IpAddr, Option<String>)>,
        log: &mut Vec<String>,
    ) -> Result<Vec<(IpFamily, DeviceInfo)>, OverlayError> {
        let mut done = Vec::new();
        let mut failure = None;
        for (overlay, last) in &mut self.families {
            let family = overlay.family();
            let Some(subnet) = family.own_subnet(own) else {
                continue;
            };
            let entries = overlay.entries(peers, |p| entry(family, p));
            match overlay.sync(&self.net, subnet, &entries) {
                Ok(report) => {
                    if last.as_ref() != Some(&entries) {
                        log.push(format!(
                            "overlay {} reconciled with {} peer(s): {report}",
                            overlay.device(),
                            entries.len()
                        ));
                    }
                    *last = Some(entries);
                    let info = if overlay.params().mode == "host-gw" {
                        None
                    } else {
                        overlay.device_info()
                    };
                    done.push((family, info));
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }

    /// Peers in the last successful passes, all families.
    pub fn programmed(&self) -> usize {
        self.families
            .iter()
            .filter_map(|(_, last)| last.as_ref().map(Vec::len))
            .sum()
    }

    /// The peers file of a family's overlay (empty when the node has none of that family).
    pub fn peers_file(&self, family: IpFamily) -> String {
        self.families
            .iter()
            .find(|(o, _)| o.family() == family)
            .map(|(o, _)| o.peers_path().display().to_string())
            .unwrap_or_default()
    }

    /// No overlay at all (unit tests of a backend's other duties).
    #[cfg(test)]
    pub fn empty() -> Overlays {
        Overlays {
            net: Network {
                v4: ipnetwork::Ipv4Network::new(std::net::Ipv4Addr::new(10, 0, 0, 0), 8)
                    .unwrap_or_else(|_| unreachable!()),
                v6: None,
            },
            families: Vec::new(),
        }
    }

    /// Every overlay's device name, for the log.
    pub fn devices(&self) -> Vec<&str> {
        self.families.iter().map(|(o, _)| o.device()).collect()
    }
}

/// One pass through the library, on the calling (blocking) thread.
fn run_library(config: Value) -> Result<String, OverlayError> {
    let Value::Object(map) = config else {
        return Err(OverlayError::Pass(
            "overlay config is not a JSON object".into(),
        ));
    };
    let cfg =
        overlay::OverlayConfig::from_map(&map).map_err(|e| OverlayError::Pass(e.to_string()))?;
    let peers = overlay::PeerSet::load(&cfg).map_err(|e| OverlayError::Pass(e.to_string()))?;
    let report = overlay::reconcile(&cfg, &peers);
    if !report.is_ok() {
        return Err(OverlayError::Pass(report.to_string()));
    }
    let mut text = report.to_string();
    for p in &report.problems {
        text.push_str(" | ");
        text.push_str(p);
    }
    Ok(text)
}

/// `<bin> sync <config>`, killed when it outlives [`SYNC_TIMEOUT`].
fn run_sync(bin: &Path, config: &Path) -> Result<String, OverlayError> {
    let mut cmd = Command::new(bin);
    cmd.arg("sync")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The vxlan binary doubles as a CNI plugin; make sure it never believes it is one.
    for var in [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_PATH",
    ] {
        cmd.env_remove(var);
    }
    let child = cmd
        .spawn()
        .map_err(|e| OverlayError::Pass(format!("running {} sync: {e}", bin.display())))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(SYNC_TIMEOUT) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            return Err(OverlayError::Pass(format!(
                "running {} sync: {e}",
                bin.display()
            )))
        }
        Err(_) => {
            // The waiting thread reaps it.
            if let Ok(pid) = i32::try_from(pid) {
                // SAFETY: kill(2) on our own child's pid, which is not reaped before it exits.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            return Err(OverlayError::Pass(format!(
                "{} sync did not finish within {SYNC_TIMEOUT:?}",
                bin.display()
            )));
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if !out.status.success() {
        return Err(OverlayError::Pass(format!(
            "{} sync {} exited with {}: {} {}",
            bin.display(),
            config.display(),
            out.status,
            stderr,
            stdout
        )));
    }
    Ok([stdout, stderr]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vxlan::Vxlan;
    use crate::subnet::config::NetConfig;

    /// The overlay settings the vxlan backend gives a family's device.
    fn params(n: &NetConfig, ipv6_underlay: bool) -> OverlayParams {
        let (_, b) = crate::backend::registry::backend_of("k", n).unwrap();
        let v = b.as_any().downcast_ref::<Vxlan>().unwrap();
        v.overlay_params(ipv6_underlay)
    }

    fn net() -> NetConfig {
        NetConfig::parse(
            "k",
            br#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":3,"DirectRouting":true,"MTU":9000}}"#,
        )
        .unwrap()
    }

    #[test]
    fn peers_file_format() {
        let peers = [
            PeerEntry {
                subnet: "10.244.1.0/24".parse().unwrap(),
                ip: "192.168.9.1".parse().unwrap(),
                vtep_mac: None,
            },
            PeerEntry {
                subnet: "10.244.2.0/24".parse().unwrap(),
                ip: "192.168.9.2".parse().unwrap(),
                vtep_mac: Some("0e:2a:00:00:00:03".into()),
            },
        ];
        let v: Value = serde_json::from_str(&peers_json(&peers)).unwrap();
        assert_eq!(
            v,
            json!([{"subnet":"10.244.1.0/24","ip":"192.168.9.1"},
                   {"subnet":"10.244.2.0/24","ip":"192.168.9.2","vtepMAC":"0e:2a:00:00:00:03"}])
        );
    }

    #[test]
    fn overlay_config_follows_flannel_backend() {
        let settings = OverlaySettings {
            engine: Engine::Exec("/bin/vxlan".into()),
            state_dir: "/run/x".into(),
            public_ip: "192.168.9.1".parse().unwrap(),
            iface: Some("eth0".into()),
            lock_file: None,
        };
        let n = net();
        let o = Overlay::new(settings, params(&n, false), IpFamily::V4);
        let c = o.config_json(&n.networks(), "10.244.7.0/24".parse().unwrap());
        assert_eq!(c["device"], "flannel.3");
        assert_eq!(c["vni"], 3);
        assert_eq!(c["port"], 8472);
        assert_eq!(c["mode"], "auto");
        assert_eq!(c["mtu"], 8950);
        assert_eq!(c["subnet"], "10.244.7.0/24");
        assert_eq!(c["peersFile"], "/run/x/peers.json");
        assert_eq!(c["underlayInterface"], "eth0");
        assert!(c.get("lockFile").is_none(), "the plugin's default lock");
        let locked = OverlaySettings {
            lock_file: Some("/run/x/vxlan.lock".into()),
            ..o.settings.clone()
        };
        let c = Overlay::new(locked, params(&n, false), IpFamily::V4)
            .config_json(&n.networks(), "10.244.7.0/24".parse().unwrap());
        assert_eq!(c["lockFile"], "/run/x/vxlan.lock");
    }

    #[test]
    fn ipv6_overlay_has_its_own_device_and_files() {
        let n = NetConfig::parse(
            "k",
            br#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":3,"MTU":9000}}"#,
        )
        .unwrap();
        let settings = OverlaySettings {
            engine: Engine::Library,
            state_dir: "/run/x".into(),
            public_ip: "fd00:9::1".parse().unwrap(),
            iface: None,
            lock_file: None,
        };
        let o = Overlay::new(settings, params(&n, true), IpFamily::V6);
        assert_eq!(o.device(), "flannel-v6.3");
        assert_eq!(o.peers_path(), Path::new("/run/x/peers-v6.json"));
        let c = o.config_json(&n.networks(), "fd00:10:244:7::/64".parse().unwrap());
        assert_eq!(c["network"], "fd00:10:244::/56");
        assert_eq!(c["subnet"], "fd00:10:244:7::/64");
        assert_eq!(c["localIP"], "fd00:9::1");
        assert_eq!(c["mtu"], 8930, "9000 - 70 over an IPv6 underlay");
    }
}

#[cfg(test)]
mod sync_tests {
    use super::*;
    use crate::backend::vxlan::Vxlan;
    use crate::subnet::config::NetConfig;

    /// The overlay settings the vxlan backend gives a family's device.
    fn params(n: &NetConfig, ipv6_underlay: bool) -> OverlayParams {
        let (_, b) = crate::backend::registry::backend_of("k", n).unwrap();
        let v = b.as_any().downcast_ref::<Vxlan>().unwrap();
        v.overlay_params(ipv6_underlay)
    }
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `vxlan` that records its arguments and the peers file, then exits `code`.
    fn fake_vxlan(dir: &Path, code: i32) -> PathBuf {
        let bin = dir.join(format!("vxlan-{code}"));
        let script = format!(
            "#!/bin/sh\necho \"$@\" > {dir}/args\ncp {dir}/state/peers.json {dir}/seen.json\necho report-line\necho oops >&2\nexit {code}\n",
            dir = dir.display()
        );
        std::fs::write(&bin, script).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    #[test]
    fn sync_writes_files_then_runs_vxlan_sync() {
        let dir = std::env::temp_dir().join(format!("agent-sync-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let net = NetConfig::parse(
            "k",
            br#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#,
        )
        .unwrap();
        let peers = [PeerEntry {
            subnet: "10.244.1.0/24".parse().unwrap(),
            ip: "192.168.9.1".parse().unwrap(),
            vtep_mac: None,
        }];
        let settings = |bin| OverlaySettings {
            engine: Engine::Exec(bin),
            state_dir: dir.join("state"),
            public_ip: "192.168.9.2".parse().unwrap(),
            iface: None,
            lock_file: None,
        };

        let ok = Overlay::new(
            settings(fake_vxlan(&dir, 0)),
            params(&net, false),
            IpFamily::V4,
        );
        let report = ok
            .sync(&net.networks(), "10.244.2.0/24".parse().unwrap(), &peers)
            .unwrap();
        assert!(report.contains("report-line"), "{report}");
        let args = std::fs::read_to_string(dir.join("args")).unwrap();
        assert_eq!(
            args.trim(),
            format!("sync {}", dir.join("state/overlay.json").display())
        );
        let seen: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("seen.json")).unwrap()).unwrap();
        assert_eq!(
            seen,
            json!([{"subnet": "10.244.1.0/24", "ip": "192.168.9.1"}])
        );

        let failing = Overlay::new(
            settings(fake_vxlan(&dir, 3)),
            params(&net, false),
            IpFamily::V4,
        );
        let err = failing
            .sync(&net.networks(), "10.244.2.0/24".parse().unwrap(), &peers)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exit status: 3") && err.contains("oops"),
            "{err}"
        );

        let missing = Overlay::new(
            settings(dir.join("no-such-vxlan")),
            params(&net, false),
            IpFamily::V4,
        );
        assert!(missing
            .sync(&net.networks(), "10.244.2.0/24".parse().unwrap(), &peers)
            .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
