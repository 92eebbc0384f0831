//! Shared helpers of the bridge e2e tests: run a bridge plugin binary (ours or the reference)
//! directly, inside a "host" netns, with full control over env and stdin.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use netns_tests::{run_with_stdin, Netns, TempDir};
use serde_json::{json, Value};

/// Which implementation runs: the plugin binary and the CNI_PATH its IPAM is found in.
#[derive(Clone, Debug)]
pub struct Impl {
    pub bridge: PathBuf,
    pub cni_path: String,
}

/// Our bridge with our host-local.
pub fn ours() -> Impl {
    let bridge = netns_tests::our_binary("bridge");
    let host_local = netns_tests::our_binary("host-local");
    let dir = host_local
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    Impl {
        bridge,
        cni_path: dir.display().to_string(),
    }
}

/// The reference Go bridge with the reference host-local, if installed.
pub fn reference() -> Option<Impl> {
    let dir = netns_tests::reference_plugin_dir(&["bridge", "host-local"])?;
    Some(Impl {
        bridge: dir.join("bridge"),
        cni_path: dir.display().to_string(),
    })
}

/// One attachment: who runs, where, and as which container/interface.
pub struct Attachment<'a> {
    pub imp: Impl,
    pub host: &'a Netns,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub cni_args: String,
}

impl<'a> Attachment<'a> {
    pub fn new(imp: &Impl, host: &'a Netns, container_id: &str, pod: &Netns) -> Attachment<'a> {
        Attachment {
            imp: imp.clone(),
            host,
            container_id: container_id.to_string(),
            netns: pod.path_str().to_string(),
            ifname: "eth0".into(),
            cni_args: String::new(),
        }
    }

    /// Runs the plugin with `command` and `conf` on stdin.
    pub fn call(&self, command: &str, conf: &Value) -> Output {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.host.name()])
            .arg(&self.imp.bridge)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_ARGS", &self.cni_args)
            .env("CNI_PATH", &self.imp.cni_path);
        run_with_stdin(&mut cmd, conf.to_string().as_bytes())
    }

    /// ADD that must succeed; returns the result.
    pub fn add(&self, conf: &Value) -> Value {
        let out = self.call("ADD", conf);
        assert!(
            out.status.success(),
            "ADD failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("bad ADD output ({e}): {}", text(&out.stdout)))
    }

    /// ADD that must fail; returns the error JSON.
    pub fn add_err(&self, conf: &Value) -> Value {
        let out = self.call("ADD", conf);
        assert!(
            !out.status.success(),
            "ADD unexpectedly succeeded: {}",
            text(&out.stdout)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| json!({"msg": text(&out.stdout), "stderr": text(&out.stderr)}))
    }

    /// DEL (with prevResult when given) that must succeed.
    pub fn del(&self, conf: &Value, prev: Option<&Value>) {
        let out = self.call("DEL", &with_prev(conf, prev));
        assert!(
            out.status.success(),
            "DEL failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }

    /// CHECK with prevResult; returns the output.
    pub fn check(&self, conf: &Value, prev: &Value) -> Output {
        self.call("CHECK", &with_prev(conf, Some(prev)))
    }
}

pub fn with_prev(conf: &Value, prev: Option<&Value>) -> Value {
    let mut c = conf.clone();
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    c
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A bridge plugin config with host-local in `ipam_dir` (ranges given), plus `extra` fields.
pub fn conf(
    version: &str,
    name: &str,
    ipam_dir: Option<&TempDir>,
    ranges: Value,
    extra: Value,
) -> Value {
    let mut c = json!({"cniVersion": version, "name": name, "type": "bridge", "bridge": "cni0"});
    if let Some(dir) = ipam_dir {
        c["ipam"] = json!({"type": "host-local", "dataDir": dir.path(), "ranges": ranges});
    }
    if let Value::Object(m) = extra {
        for (k, v) in m {
            c[k] = v;
        }
    }
    c
}

/// Names of the veth links in `ns`.
pub fn veths(ns: &Netns) -> Vec<String> {
    let v = ns.exec_json(&["ip", "-j", "link", "show", "type", "veth"]);
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Lease files of network `net` (bookkeeping files excluded).
pub fn leases(ipam_dir: &TempDir, net: &str) -> Vec<String> {
    netns_tests::lease_files(&ipam_dir.join(net))
}

/// `iptables -t nat -S` + `ip6tables -t nat -S` lines mentioning CNI.
pub fn cni_nat_rules(ns: &Netns) -> Vec<String> {
    let mut out = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        let o = ns.exec(&[tool, "-w", "5", "-t", "nat", "-S"]);
        out.extend(
            text(&o.stdout)
                .lines()
                .filter(|l| l.contains("CNI-"))
                .map(|l| format!("{tool} {l}")),
        );
    }
    out
}

/// The per-address masquerade entries of either backend: iptables POSTROUTING jumps to a
/// `CNI-` chain, nftables `masq_checks` rules (one per pod address in both).
pub fn masquerade_entries(ns: &Netns) -> Vec<String> {
    let mut out: Vec<String> = cni_nat_rules(ns)
        .into_iter()
        .filter(|l| l.contains("-A POSTROUTING") && l.contains("-j CNI-"))
        .collect();
    let chain = ns.exec(&[
        "nft",
        "list",
        "chain",
        "inet",
        "cni_plugins_masquerade",
        "masq_checks",
    ]);
    out.extend(
        text(&chain.stdout)
            .lines()
            .filter(|l| l.contains("saddr") && l.contains("masquerade"))
            .map(|l| format!("nft {}", l.trim())),
    );
    out
}

/// `nft list ruleset` text.
pub fn nft_ruleset(ns: &Netns) -> String {
    text(&ns.exec(&["nft", "list", "ruleset"]).stdout)
}

/// The first address of `family` ("inet"/"inet6", global scope) of `ifname` in `ns`.
pub fn ip_of(ns: &Netns, ifname: &str, v6: bool) -> String {
    ns.addresses(ifname)
        .into_iter()
        .find(|a| a.contains(':') == v6 && !a.starts_with("fe80"))
        .map(|a| a.split('/').next().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no {} address on {ifname}", if v6 { "v6" } else { "v4" }))
}

/// One ping that must succeed (`ping -c1 -W2`).
pub fn ping_ok(from: &Netns, to: &str) {
    from.exec_ok(&["ping", "-c", "1", "-W", "2", to]);
}

/// True when one ping gets an answer within a second.
pub fn ping(from: &Netns, to: &str) -> bool {
    from.exec(&["ping", "-c", "1", "-W", "1", to])
        .status
        .success()
}

/// Polls `cond` for up to 3 s (netns teardown, and the veths with it, is asynchronous).
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(3) {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cond()
}
