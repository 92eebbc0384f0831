//! Every file in `conflist-examples/` is a valid configuration naming only plugins we ship, and
//! the examples no other test runs (loopback, bandwidth) work end to end through cnitool.

use netns_tests::{
    lease_files, our_bin_dir, our_binary, require_root, workspace_root, Cnitool, ConfDir, Netns,
    TempDir,
};
use serde_json::Value;
use std::path::PathBuf;

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("conflist-examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "conflist"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_loads_and_names_only_plugins_we_ship() {
    let files = examples();
    assert!(files.len() >= 10, "{files:?}");
    for path in files {
        let list =
            libcni::conf::load_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!list.plugins.is_empty(), "{}", path.display());
        for plugin in &list.plugins {
            let mut types = vec![plugin.plugin_type.clone()];
            if let Some(ipam) = plugin.raw.get("ipam").and_then(|i| i.get("type")) {
                types.push(ipam.as_str().unwrap_or_default().to_string());
            }
            for t in types {
                assert!(
                    our_binary(&t).is_file(),
                    "{}: no ferrocni binary for type {t:?}",
                    path.display()
                );
            }
        }
    }
}

/// Runs one example through cnitool ADD/CHECK/DEL with the host side in a namespace; host-local
/// state goes to a temp dir instead of /var/lib/cni.
fn run_example(file: &str, ifname: &str, cap_args: Option<&str>) -> (Netns, Value) {
    let path = workspace_root().join("conflist-examples").join(file);
    let mut list: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let name = list["name"].as_str().unwrap().to_string();
    let ipam_dir = TempDir::new("ex-ipam");
    for p in list["plugins"].as_array_mut().unwrap() {
        if let Some(ipam) = p.get_mut("ipam") {
            ipam["dataDir"] = Value::String(ipam_dir.path().display().to_string());
        }
    }
    let host = Netns::new("ex-host");
    let pod = Netns::new("ex-pod");
    let conf = ConfDir::new();
    conf.write_json("10-example.conflist", &list);
    let cache = TempDir::new("ex-cache");
    // Build every binary the examples run; they all land in our_bin_dir().
    for t in ["cnitool", "loopback", "bridge", "host-local", "bandwidth"] {
        our_binary(t);
    }
    let mut tool = Cnitool::new(&conf, vec![our_bin_dir()], cache.path())
        .in_netns(&host)
        .env("CNI_IFNAME", ifname);
    if let Some(caps) = cap_args {
        tool = tool.env("CAP_ARGS", caps);
    }
    let out = tool.run_ok(&["add", &name, pod.path_str()]);
    let result: Value = serde_json::from_str(&out).unwrap();
    tool.run_ok(&["check", &name, pod.path_str()]);
    let after_add = host.exec_json(&["ip", "-j", "link", "show"]);
    tool.run_ok(&["del", &name, pod.path_str()]);
    tool.run_ok(&["del", &name, pod.path_str()]);
    let leases = lease_files(&ipam_dir.join(&name));
    assert!(leases.is_empty(), "{file}: leases left: {leases:?}");
    (
        host,
        serde_json::json!({"result": result, "links_after_add": after_add}),
    )
}

fn ifb_names(links: &Value) -> Vec<String> {
    links
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["ifname"].as_str())
        .filter(|n| n.starts_with("bwp"))
        .map(str::to_string)
        .collect()
}

#[test]
fn loopback_example_runs() {
    require_root!();
    let (_host, out) = run_example("loopback.conflist", "lo", None);
    assert_eq!(out["result"]["interfaces"][0]["name"], "lo");
}

#[test]
fn bandwidth_examples_run_and_leave_no_ifb() {
    require_root!();
    for (file, caps) in [
        (
            "bandwidth-bridge.conflist",
            Some(
                r#"{"bandwidth":{"ingressRate":1000000,"ingressBurst":100000,"egressRate":2000000,"egressBurst":200000}}"#,
            ),
        ),
        ("bandwidth-fixed-limits.conflist", None),
    ] {
        let (host, out) = run_example(file, "eth0", caps);
        let ifbs = ifb_names(&out["links_after_add"]);
        assert_eq!(ifbs.len(), 1, "{file}: {}", out["links_after_add"]);
        let now = host.exec_json(&["ip", "-j", "link", "show"]);
        assert!(
            ifb_names(&now).is_empty(),
            "{file}: IFB left after DEL: {now}"
        );
    }
}
