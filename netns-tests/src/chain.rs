//! A node running the suite's full chain the way a Kubernetes node does — bridge (gateway,
//! masquerade, hairpin) + host-local (IPv4, optionally IPv6) + portmap + bandwidth + firewall +
//! tuning — in a throw-away "host" netns, with every state directory in temp dirs. Besides
//! running the chain (through cnitool, or plugin by plugin as a runtime does for DEL without a
//! netns and for GC), it takes an inventory of everything a pod can leave behind, so tests can
//! assert that nothing of a dead pod remains.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Output;

use libcni::conf::{build_plugin_config, NetworkConfigList};
use serde_json::{json, Map, Value};

use crate::plugin::{Attachment, Impl};
use crate::{our_binary, Cnitool, ConfDir, Netns, TempDir};

pub const NETWORK: &str = "k8s-pod-network";
/// Every binary the chain runs (host-local is delegated to by bridge).
pub const CHAIN_PLUGINS: &[&str] = &[
    "bridge",
    "host-local",
    "portmap",
    "bandwidth",
    "firewall",
    "tuning",
];

/// What the node's conflist holds.
pub struct ChainOptions {
    /// IPv4 subnet of the pods, e.g. `10.231.40.0/24`.
    pub subnet_v4: String,
    /// IPv6 subnet as a second range set (dual stack), if any.
    pub subnet_v6: Option<String>,
    /// The tuning plugin's object (its `dataDir` is set by the node).
    pub tuning: Value,
    /// The bridge's name.
    pub bridge: String,
}

/// The node: its host netns and state.
pub struct ChainNode {
    pub host: Netns,
    pub leases: TempDir,
    /// Firewall records (`firewall/`) and tuning backups (`tuning/`).
    pub state: TempDir,
    pub cache: TempDir,
    pub conf: ConfDir,
    /// Directories the plugins are found in (`CNI_PATH`).
    pub cni_path: Vec<PathBuf>,
    /// Extra environment for every plugin the node runs.
    pub env: Vec<(String, String)>,
    /// A command every plugin and cnitool run is wrapped in (a private mount namespace).
    pub prefix: Vec<String>,
    /// Where the state directories are seen from this process (`/proc/<pid>/root` of the
    /// mount namespace the plugins run in), if not here.
    pub fs_view: Option<PathBuf>,
}

/// One pod's capability args as containerd sends them (Go field names, MaxUint32 bursts).
pub fn containerd_cap_args(host_port: u16) -> Value {
    json!({
        "portMappings": [{"HostPort": host_port, "ContainerPort": 8080, "Protocol": "tcp", "HostIP": ""}],
        "bandwidth": {"IngressRate": 10_000_000, "IngressBurst": 4_294_967_295u64,
                      "EgressRate": 20_000_000, "EgressBurst": 4_294_967_295u64}
    })
}

/// containerd's CNI_ARGS for a pod.
pub fn containerd_cni_args(cid: &str) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-{cid};\
         K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=0b7e6c2e-{cid}"
    )
}

impl ChainNode {
    /// A node whose plugins are ours (built on demand) unless `cni_path` says otherwise.
    pub fn new(tag: &str, opts: ChainOptions, cni_path: Option<Vec<PathBuf>>) -> ChainNode {
        for p in CHAIN_PLUGINS.iter().chain(&["cnitool"]) {
            our_binary(p);
        }
        let node = ChainNode {
            host: Netns::new(&format!("{tag}-host")),
            leases: TempDir::new(&format!("{tag}-leases")),
            state: TempDir::new(&format!("{tag}-state")),
            cache: TempDir::new(&format!("{tag}-cache")),
            conf: ConfDir::new(),
            cni_path: cni_path.unwrap_or_else(|| vec![crate::our_bin_dir()]),
            env: Vec::new(),
            prefix: Vec::new(),
            fs_view: None,
        };
        node.host.exec_ok(&["ip", "link", "set", "lo", "up"]);
        node.conf
            .write_json("10-k8s.conflist", &node.conflist(&opts));
        node
    }

    fn conflist(&self, opts: &ChainOptions) -> Value {
        let mut ranges = vec![json!([{"subnet": opts.subnet_v4}])];
        let mut routes = vec![json!({"dst": "0.0.0.0/0"})];
        if let Some(v6) = &opts.subnet_v6 {
            ranges.push(json!([{"subnet": v6}]));
            routes.push(json!({"dst": "::/0"}));
        }
        let mut tuning = opts.tuning.clone();
        tuning["dataDir"] = json!(self.state.join("tuning"));
        json!({
            "cniVersion": "1.1.0",
            "name": NETWORK,
            "plugins": [
                {"type": "bridge", "bridge": opts.bridge, "isGateway": true, "ipMasq": true,
                 "hairpinMode": true,
                 "ipam": {"type": "host-local", "dataDir": self.leases.path(),
                          "ranges": ranges, "routes": routes}},
                {"type": "portmap", "capabilities": {"portMappings": true}},
                {"type": "bandwidth", "capabilities": {"bandwidth": true}},
                {"type": "firewall", "dataDir": self.state.join("firewall")},
                tuning
            ]
        })
    }

    /// Rewrites the node's conflist (e.g. to pin a backend).
    pub fn edit_conflist(&self, edit: impl FnOnce(&mut Value)) {
        let path = self.conf.path().join("10-k8s.conflist");
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("conflist")).expect("JSON");
        edit(&mut v);
        self.conf.write_json("10-k8s.conflist", &v);
    }

    pub fn list(&self) -> NetworkConfigList {
        let text = std::fs::read(self.conf.path().join("10-k8s.conflist")).expect("conflist");
        NetworkConfigList::from_bytes(&text).expect("valid conflist")
    }

    /// cnitool for the pod `cid`, with containerd's CAP_ARGS and CNI_ARGS.
    pub fn cnitool(&self, cid: &str, host_port: u16) -> Cnitool {
        let mut tool = Cnitool::new(&self.conf, self.cni_path.clone(), self.cache.path())
            .in_netns(&self.host)
            .under(&self.prefix)
            .env("CAP_ARGS", &containerd_cap_args(host_port).to_string())
            .env("CNI_ARGS", &containerd_cni_args(cid));
        for (k, v) in &self.env {
            tool = tool.env(k, v);
        }
        tool
    }

    /// Runs one plugin binary of the chain in the host netns, its config built as libcni
    /// builds it (no prevResult).
    pub fn call_plugin(
        &self,
        plugin_type: &str,
        command: &str,
        cid: &str,
        netns: &str,
        extra: &[(&str, Value)],
        cap_args: Option<&Value>,
    ) -> Output {
        let list = self.list();
        let plugin = list
            .plugins
            .iter()
            .find(|p| p.plugin_type == plugin_type)
            .unwrap_or_else(|| panic!("no {plugin_type} in the chain"));
        let caps = cap_args.and_then(Value::as_object).cloned();
        let mut config: Map<String, Value> =
            build_plugin_config(&list, plugin, None, caps.as_ref()).expect("plugin config");
        for (k, v) in extra {
            config.insert(k.to_string(), v.clone());
        }
        let path = self
            .cni_path
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let imp = Impl {
            label: "chain",
            bin: self.cni_path[0].join(plugin_type),
            cni_path: path,
        };
        let mut plugin = Attachment::at(&imp, cid, netns)
            .in_host(&self.host)
            .under(&self.prefix)
            .cni_args(&containerd_cni_args(cid));
        for (k, v) in &self.env {
            plugin = plugin.env(k, Some(v));
        }
        plugin.call(command, &Value::Object(config))
    }

    /// DEL as containerd's RemovePodSandbox sends it once the netns is gone: every plugin in
    /// reverse order, CNI_NETNS empty, no prevResult, the capability args again.
    pub fn del_without_netns(&self, cid: &str, host_port: u16) -> Result<(), String> {
        let caps = containerd_cap_args(host_port);
        for plugin in self.list().plugins.iter().rev() {
            let out = self.call_plugin(&plugin.plugin_type, "DEL", cid, "", &[], Some(&caps));
            if !out.status.success() {
                return Err(format!(
                    "DEL without netns of {} failed: {}{}",
                    plugin.plugin_type,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    }

    /// GC as libcni sends it to every plugin (after DELing the invalid cached attachments):
    /// `cni.dev/valid-attachments` = `valid` (container IDs, ifname eth0).
    pub fn gc(&self, valid: &[String]) -> Result<(), String> {
        let attachments: Vec<Value> = valid
            .iter()
            .map(|cid| json!({"containerID": cid, "ifname": "eth0"}))
            .collect();
        let extra = [("cni.dev/valid-attachments", Value::Array(attachments))];
        for plugin in self.list().plugins.iter() {
            let out = self.call_plugin(&plugin.plugin_type, "GC", "", "", &extra, None);
            if !out.status.success() {
                return Err(format!(
                    "GC of {} failed: {}{}",
                    plugin.plugin_type,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    }

    /// Waits (up to 10 s) until the host holds at most `at_most` pod links: the kernel tears a
    /// deleted netns down asynchronously, and the host end of its veth goes with it a moment
    /// after `ip netns del`.
    pub fn settle_links(&self, at_most: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.inventory().links.len() > at_most && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Everything of the node that pods leave behind.
    pub fn inventory(&self) -> Inventory {
        let links = self
            .host
            .exec_ok(&["ip", "-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .filter(|n| n.starts_with("veth") || n.starts_with("bwp"))
            .collect();
        let rules = [
            self.host.exec_ok(&["iptables-save"]),
            self.host.exec_ok(&["ip6tables-save"]),
            self.host.exec_ok(&["nft", "list", "ruleset"]),
        ]
        .join("\n")
        .lines()
        .map(str::to_string)
        .collect();
        Inventory {
            links,
            rules,
            leases: leases_by_owner(&self.seen(&self.leases.join(NETWORK))),
            state_files: files_under(&self.seen(self.state.path())),
            cache_files: files_under(&self.seen(&self.cache.join("results"))),
        }
    }

    /// `path` as this process sees the plugins' view of it.
    pub fn seen(&self, path: &Path) -> PathBuf {
        match &self.fs_view {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_path_buf(),
        }
    }
}

/// What pods can leave on a node.
#[derive(Debug, Default)]
pub struct Inventory {
    /// Host links a pod creates: `veth*` (bridge) and `bwp*` (bandwidth's ifb).
    pub links: Vec<String>,
    /// Every line of iptables-save, ip6tables-save and `nft list ruleset`.
    pub rules: Vec<String>,
    /// Leased address → owning container ID.
    pub leases: BTreeMap<IpAddr, String>,
    /// Firewall records and tuning backups.
    pub state_files: Vec<String>,
    /// libcni result cache entries.
    pub cache_files: Vec<String>,
}

impl Inventory {
    /// The addresses leased to `cid`.
    pub fn addresses_of(&self, cid: &str) -> Vec<IpAddr> {
        self.leases
            .iter()
            .filter(|(_, owner)| owner.as_str() == cid)
            .map(|(ip, _)| *ip)
            .collect()
    }

    /// What of the pod `cid` (which held `ips`) is still there, one line per object.
    pub fn traces_of(&self, cid: &str, ips: &[IpAddr]) -> Vec<String> {
        let mut found = Vec::new();
        for rule in &self.rules {
            if rule.contains(cid) || ips.iter().any(|ip| mentions(rule, *ip)) {
                found.push(format!("rule: {rule}"));
            }
        }
        for (ip, owner) in &self.leases {
            if owner == cid || ips.contains(ip) {
                found.push(format!("lease: {ip} ({owner})"));
            }
        }
        for f in self.state_files.iter().chain(&self.cache_files) {
            if f.contains(cid) {
                found.push(format!("file: {f}"));
            }
        }
        found
    }
}

/// Whether `line` names `ip` as a whole token (not as the prefix of a longer address).
pub fn mentions(line: &str, ip: IpAddr) -> bool {
    let text = ip.to_string();
    let in_token = |c: char| match ip {
        IpAddr::V4(_) => c.is_ascii_digit() || c == '.',
        IpAddr::V6(_) => c.is_ascii_hexdigit() || c == ':',
    };
    line.split(|c: char| !in_token(c)).any(|t| t == text)
}

/// host-local's leases: files named by an address, holding `<cid>\r\n<ifname>`.
pub fn leases_by_owner(store: &Path) -> BTreeMap<IpAddr, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(store).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(ip) = name.parse::<IpAddr>() else {
            continue;
        };
        let owner = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let cid = owner.split(['\r', '\n']).next().unwrap_or("").to_string();
        out.insert(ip, cid);
    }
    out
}

/// Every file under `dir`, recursively (dot-files too: a leftover temp file is a leak).
pub fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            out.extend(files_under(&entry.path()));
        } else {
            out.push(entry.path().display().to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_whole_addresses_only() {
        let v4: IpAddr = "10.1.0.5".parse().unwrap();
        assert!(mentions("-A CNI-FORWARD -s 10.1.0.5/32 -j ACCEPT", v4));
        assert!(mentions("--to-destination 10.1.0.5:8080", v4));
        assert!(!mentions("-s 10.1.0.50/32", v4));
        assert!(!mentions("-s 110.1.0.5/32", v4));
        let v6: IpAddr = "fd00::5".parse().unwrap();
        assert!(mentions("ip6 saddr fd00::5 masquerade", v6));
        assert!(mentions("--to-destination [fd00::5]:8080", v6));
        assert!(!mentions("ip6 saddr fd00::50", v6));
    }
}
