//! Shared helpers of the bridge e2e tests: which bridge runs (ours or the reference; run
//! directly inside a "host" netns through [`netns_tests::plugin`]), configs and kernel state.
#![allow(dead_code)]

use netns_tests::{Netns, TempDir};
use serde_json::{json, Value};

#[allow(unused_imports)]
pub use netns_tests::plugin::{text, Attachment, Impl};

/// Our bridge with our host-local.
pub fn ours() -> Impl {
    Impl::ours("bridge")
}

/// The reference Go bridge with the reference host-local, if installed.
pub fn reference() -> Option<Impl> {
    Impl::reference("bridge")
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
