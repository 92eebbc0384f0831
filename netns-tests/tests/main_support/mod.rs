//! Shared helpers of the main-plugin e2e tests (ptp, macvlan, ipvlan, vlan, host-device, dummy,
//! tap): the crate's way of running a plugin binary (ours or the reference) directly inside a
//! "host" netns ([`netns_tests::plugin`]), configs, and snapshots of the kernel state two
//! implementations must agree on.
#![allow(dead_code)]

use std::process::Command;

use netns_tests::{run_with_stdin, Netns, TempDir};
use serde_json::{json, Value};

#[allow(unused_imports)]
pub use netns_tests::plugin::{text, with_prev, Attachment, Impl};

/// A plugin config with host-local in `ipam_dir` (ranges given), plus `extra` fields.
pub fn conf(
    version: &str,
    plugin: &str,
    ipam_dir: Option<&TempDir>,
    ranges: Value,
    extra: Value,
) -> Value {
    let mut c = json!({"cniVersion": version, "name": "mainnet", "type": plugin});
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

/// Lease files of the network `mainnet` in `ipam_dir`.
pub fn leases(ipam_dir: &TempDir) -> Vec<String> {
    netns_tests::lease_files(&ipam_dir.join("mainnet"))
}

/// Replaces what is random per run (MACs, veth names, netns paths) and drops an empty `dns`.
pub fn normalize(mut v: Value) -> Value {
    if let Some(ifs) = v["interfaces"].as_array_mut() {
        for i in ifs {
            if i.get("mac").is_some() {
                i["mac"] = json!("<mac>");
            }
            if i["name"].as_str().is_some_and(|n| n.starts_with("veth")) {
                i["name"] = json!("<veth>");
            }
            if i.get("sandbox").is_some() {
                i["sandbox"] = json!("<netns>");
            }
        }
    }
    if v.get("dns")
        .is_some_and(|d| d.as_object().is_some_and(|o| o.is_empty()))
    {
        v.as_object_mut().unwrap().remove("dns");
    }
    v
}

/// Global addresses of `ifname` in `ns`, sorted.
pub fn global_addrs(ns: &Netns, ifname: &str) -> Vec<String> {
    let mut a: Vec<String> = ns
        .addresses(ifname)
        .into_iter()
        .filter(|a| !a.starts_with("fe80"))
        .collect();
    a.sort();
    a
}

/// Main-table routes of `ns` (link-local and multicast left out) as comparable text, with
/// `veth*` device names normalised.
pub fn routes(ns: &Netns) -> Vec<String> {
    let mut out = Vec::new();
    for fam in ["-4", "-6"] {
        let v = ns.exec_json(&["ip", "-j", fam, "route", "show", "table", "main"]);
        for r in v.as_array().into_iter().flatten() {
            let dst = r["dst"].as_str().unwrap_or_default();
            if dst.starts_with("fe80") || dst.starts_with("ff00") || dst.starts_with("multicast") {
                continue;
            }
            let dev = r["dev"].as_str().unwrap_or_default();
            let dev = if dev.starts_with("veth") {
                "<veth>"
            } else {
                dev
            };
            out.push(format!(
                "{dst} via {} dev {dev} scope {} src {} proto {}",
                r["gateway"].as_str().unwrap_or("-"),
                r["scope"].as_str().unwrap_or("global"),
                r["prefsrc"].as_str().unwrap_or("-"),
                r["protocol"].as_str().unwrap_or("boot"),
            ));
        }
    }
    out.sort();
    out
}

/// `iptables -t nat -S` + `ip6tables -t nat -S` lines mentioning CNI.
pub fn nat_rules(ns: &Netns) -> Vec<String> {
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
    out.sort();
    out
}

/// Masquerade rules of either backend: [`nat_rules`] plus the per-address rules of the
/// nftables table `inet cni_plugins_masquerade`.
pub fn masquerade_rules(ns: &Netns) -> Vec<String> {
    let mut out = nat_rules(ns);
    let nft = ns.exec(&["nft", "list", "table", "inet", "cni_plugins_masquerade"]);
    out.extend(
        text(&nft.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| l.contains(" saddr "))
            .map(|l| format!("nft {l}")),
    );
    out
}

/// Names of the links of `kind` in `ns`.
pub fn links_of_kind(ns: &Netns, kind: &str) -> Vec<String> {
    let v = ns.exec_json(&["ip", "-j", "link", "show", "type", kind]);
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `ip -d -j link show dev <ifname>`: the details iproute2 decodes (kind data, mtu, master...).
pub fn link_details(ns: &Netns, ifname: &str) -> Value {
    ns.exec_json(&["ip", "-d", "-j", "link", "show", "dev", ifname])[0].clone()
}

/// One ping that must succeed (`ping -c1 -W2`).
pub fn ping_ok(from: &Netns, to: &str) {
    from.exec_ok(&["ping", "-c", "1", "-W", "2", to]);
}

/// The shared driver probe (netns-tests' `kernel_has`).
#[allow(unused_imports)]
pub use netns_tests::kernel_has;

/// Runs `conflist-examples/<file>` through our cnitool (ADD, CHECK, DEL, DEL) with the host
/// side in a fresh netns prepared by `setup`, every IPAM `dataDir` in a temp dir; asserts
/// that no lease is left and returns the ADD result with the netns pair, for more checks.
pub fn run_example(file: &str, setup: impl Fn(&Netns)) -> Value {
    use netns_tests::{Cnitool, ConfDir};
    let path = netns_tests::workspace_root()
        .join("conflist-examples")
        .join(file);
    let mut list: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let name = list["name"].as_str().unwrap().to_string();
    let ipam = TempDir::new("ex-ipam");
    let state = TempDir::new("ex-state");
    for p in list["plugins"].as_array_mut().unwrap() {
        if p.get("ipam").is_some_and(|i| i.get("type").is_some()) {
            p["ipam"]["dataDir"] = json!(ipam.path());
        }
        if p["type"] == "host-device" {
            p["dataDir"] = json!(state.path());
        }
    }
    let host = Netns::new("ex-host");
    let pod = Netns::new("ex-pod");
    setup(&host);
    let conf = ConfDir::new();
    conf.write_json("10-example.conflist", &list);
    let cache = TempDir::new("ex-cache");
    for p in list["plugins"].as_array().unwrap() {
        netns_tests::our_binary(p["type"].as_str().unwrap());
    }
    netns_tests::our_binary("host-local");
    let tool = Cnitool::new(&conf, vec![netns_tests::our_bin_dir()], cache.path()).in_netns(&host);
    let out = tool.run_ok(&["add", &name, pod.path_str()]);
    let result: Value = serde_json::from_str(&out).unwrap();
    if libcni::version::at_least(list["cniVersion"].as_str().unwrap_or_default(), "0.4.0") {
        tool.run_ok(&["check", &name, pod.path_str()]);
    }
    tool.run_ok(&["del", &name, pod.path_str()]);
    tool.run_ok(&["del", &name, pod.path_str()]);
    let left = netns_tests::lease_files(&ipam.join(&name));
    assert!(left.is_empty(), "{file}: leases left: {left:?}");
    result
}

/// Whether `strace` is installed (the by-message tests need it).
pub fn have_strace() -> bool {
    Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `argv` under `strace` inside `ns` (with `env` and `stdin`) and returns the bytes of
/// the first RTM_NEWLINK request with NLM_F_CREATE it sent (iproute2 sends a probe first),
/// normalised (sequence number, the name in
/// `IFLA_IFNAME` and the netns fd number zeroed), and the command's stdout.
pub fn first_newlink(
    ns: &Netns,
    argv: &[&str],
    env: &[(&str, &str)],
    stdin: &[u8],
) -> (Option<Vec<u8>>, String) {
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        ns.name(),
        "strace",
        "-f",
        "-qq",
        "-e",
        "trace=sendmsg,sendto",
        "-e",
        "write=all",
        "-o",
        "/dev/stderr",
    ])
    .args(argv);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_with_stdin(&mut cmd, stdin);
    let trace = text(&out.stderr);
    let mut requests: Vec<Vec<u8>> = Vec::new();
    let mut inside = false;
    for line in trace.lines() {
        let line = line.trim_start();
        let line = match line.strip_prefix("[pid") {
            Some(rest) => rest
                .split_once(']')
                .map(|(_, r)| r.trim_start())
                .unwrap_or(rest),
            None => line,
        };
        if line.contains("RTM_NEWLINK") {
            inside = true;
            requests.push(Vec::new());
            continue;
        }
        if let (true, Some(bytes)) = (inside, requests.last_mut()) {
            if let Some(dump) = line.strip_prefix("| ") {
                // "00000  4c 00 .. 00  00 .. 00  ascii |": 16 hex columns in fixed positions
                // after the offset, then the ASCII rendering.
                let hex = dump.get(5..dump.len().min(5 + 2 + 49)).unwrap_or_default();
                bytes.extend(
                    hex.split_whitespace()
                        .filter_map(|t| u8::from_str_radix(t, 16).ok()),
                );
            } else if !line.starts_with('*') {
                inside = false;
            }
        }
    }
    const NLM_F_CREATE: u16 = 0x400;
    let create = requests
        .into_iter()
        .find(|b| b.len() >= 8 && u16::from_ne_bytes([b[6], b[7]]) & NLM_F_CREATE != 0);
    (create.map(normalize_newlink), text(&out.stdout))
}

fn normalize_newlink(mut b: Vec<u8>) -> Vec<u8> {
    if b.len() >= 12 {
        b[8..12].fill(0);
    }
    let mut off = 32;
    while off + 4 <= b.len() {
        let len = u16::from_ne_bytes([b[off], b[off + 1]]) as usize;
        let kind = u16::from_ne_bytes([b[off + 2], b[off + 3]]);
        if len < 4 || off + len > b.len() {
            break;
        }
        if kind == 3 || kind == 28 {
            b[off + 4..off + len].fill(0);
        }
        off += (len + 3) & !3;
    }
    b
}

/// ADD of `conf` by `imp` for container `cid` in `pod`, run under strace in `host`, and
/// `ip link add <ip_args>` under strace in `host`: the two link creation requests (normalised,
/// see [`first_newlink`]) must be identical. Returns the plugin's stdout (its result or error).
/// The link iproute2 may have created is deleted again.
pub fn assert_request_matches_iproute2(
    host: &Netns,
    pod: &Netns,
    imp: &Impl,
    cid: &str,
    conf: &Value,
    ip_args: &[&str],
) -> Value {
    let bin = imp.bin.display().to_string();
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", cid),
        ("CNI_NETNS", pod.path_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", imp.cni_path.as_str()),
    ];
    let (ours, stdout) = first_newlink(host, &[&bin], &env, conf.to_string().as_bytes());
    let ours = ours.unwrap_or_else(|| panic!("no RTM_NEWLINK from {bin}: {stdout}"));
    let mut argv = vec!["ip", "link", "add"];
    argv.extend(ip_args);
    let (iproute2, _) = first_newlink(host, &argv, &[], b"");
    assert_eq!(
        Some(ours),
        iproute2,
        "the request differs from `{}`",
        argv.join(" ")
    );
    for ns in [host, pod] {
        ns.exec(&["ip", "link", "del", "veth00000000"]);
    }
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad plugin output ({e}): {stdout}"))
}
