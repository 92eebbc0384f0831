//! A node whose NAT state lives in legacy (x_tables) iptables, next to an iptables-nft
//! `iptables` command: the reference plugins ran with an iptables-legacy (as from a container
//! image), so the network's masquerade, port mappings and firewall rules are in the legacy
//! tables. Our plugins then take the iptables path for that network and reach those tables
//! with iptables-legacy: a new pod's rules go next to the reference's, CHECK finds them, and
//! DEL removes ours and the reference's pod alike. A network without such state still gets
//! nftables over netlink.

use std::path::Path;

use netns_tests::{
    netfilter, our_bin_dir, our_binary, reference_plugin_dir, require_root, Cnitool, ConfDir,
    Netns, TempDir,
};
use serde_json::{json, Value};

fn conflist(name: &str, bridge: &str, subnet: &str, dir: &TempDir) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": name,
        "plugins": [
            { "type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": true,
              "ipam": { "type": "host-local", "dataDir": dir.join("ipam"),
                        "ranges": [[{ "subnet": subnet }]] } },
            { "type": "portmap", "capabilities": { "portMappings": true } },
            { "type": "firewall", "dataDir": dir.join("firewall") }
        ]
    })
}

/// A directory whose `iptables*` commands are iptables-legacy, for the reference's PATH.
fn legacy_path_dir() -> Option<TempDir> {
    let multi = Path::new("/usr/sbin/xtables-legacy-multi");
    if !multi.is_file() {
        return None;
    }
    let dir = TempDir::new("lg-bin");
    for name in [
        "iptables",
        "ip6tables",
        "iptables-save",
        "ip6tables-save",
        "iptables-restore",
        "ip6tables-restore",
    ] {
        std::os::unix::fs::symlink(multi, dir.join(name)).unwrap();
    }
    Some(dir)
}

fn save(host: &Netns, tool: &str, table: &str) -> String {
    host.exec_ok(&[tool, "-t", table])
}

#[test]
fn legacy_tables_keep_their_network_on_the_iptables_path() {
    require_root!();
    let Some(reference) = reference_plugin_dir(&["bridge", "host-local", "portmap", "firewall"])
    else {
        return;
    };
    let Some(legacy_bin) = legacy_path_dir() else {
        eprintln!("skipping: no iptables-legacy (package iptables)");
        return;
    };
    if !std::fs::canonicalize("/usr/sbin/iptables")
        .is_ok_and(|p| p.to_string_lossy().contains("nft"))
    {
        eprintln!("skipping: the host's iptables is not iptables-nft");
        return;
    }
    for p in ["bridge", "host-local", "portmap", "firewall", "cnitool"] {
        our_binary(p);
    }
    let host = Netns::new("lg-host");
    let ref_pod = Netns::new("lg-ref");
    let our_pod = Netns::new("lg-ours");
    let fresh_pod = Netns::new("lg-fresh");
    let dir = TempDir::new("lg-state");
    let cache = TempDir::new("lg-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-lg.conflist",
        &conflist("lgnet", "cni-lg0", "10.231.40.0/24", &dir),
    );
    conf.write_json(
        "20-fresh.conflist",
        &conflist("lgfresh", "cni-lg1", "10.231.41.0/24", &dir),
    );
    let maps = |port: u16| {
        format!(r#"{{"portMappings":[{{"hostPort":{port},"containerPort":80,"protocol":"tcp"}}]}}"#)
    };

    // The reference, with iptables-legacy first in its PATH.
    let path = format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        legacy_bin.path().display()
    );
    let theirs = Cnitool::new(&conf, vec![reference], cache.path())
        .in_netns(&host)
        .env("PATH", &path)
        .env("CAP_ARGS", &maps(18090));
    theirs.run_ok(&["add", "lgnet", ref_pod.path_str()]);
    let ref_cid = Cnitool::container_id(ref_pod.path_str());
    let legacy_nat = save(&host, "iptables-legacy-save", "nat");
    assert!(
        legacy_nat.contains(&format!("id: \\\"{ref_cid}\\\"")),
        "the reference did not write legacy rules:\n{legacy_nat}"
    );
    assert!(!save(&host, "iptables-nft-save", "nat").contains("CNI-"));
    let in_host = host.exec_ok(&["cat", "/proc/net/ip_tables_names"]);
    assert!(in_host.lines().any(|l| l == "nat"), "{in_host}");

    // Ours, with the usual PATH (where `iptables` is iptables-nft).
    let ours = Cnitool::new(&conf, vec![our_bin_dir()], cache.path())
        .in_netns(&host)
        .env("CAP_ARGS", &maps(18091));
    let our_ip = netfilter::first_ip(&ours.run_ok(&["add", "lgnet", our_pod.path_str()]));
    let our_cid = Cnitool::container_id(our_pod.path_str());
    let legacy_nat = save(&host, "iptables-legacy-save", "nat");
    for want in [
        format!(
            "-s {our_ip}/32 -m comment --comment \"name: \\\"lgnet\\\" id: \\\"{our_cid}\\\"\""
        ),
        format!("--to-destination {our_ip}:80"),
    ] {
        assert!(
            legacy_nat.contains(&want),
            "missing `{want}`:\n{legacy_nat}"
        );
    }
    let legacy_filter = save(&host, "iptables-legacy-save", "filter");
    assert!(
        legacy_filter.contains(&format!("-A CNI-FORWARD -s {our_ip}/32 -j ACCEPT")),
        "{legacy_filter}"
    );
    let nft = host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(!nft.contains(&our_ip), "our pod went to nf_tables:\n{nft}");
    ours.run_ok(&["check", "lgnet", our_pod.path_str()]);

    // A network without legacy state: nftables over netlink for its NAT.
    let fresh = ours.clone().env("CAP_ARGS", &maps(18092));
    let fresh_ip = netfilter::first_ip(&fresh.run_ok(&["add", "lgfresh", fresh_pod.path_str()]));
    let nft = host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(
        nft.contains(&format!("ip saddr {fresh_ip} ip daddr != 10.231.41.0/24")),
        "{nft}"
    );
    assert!(nft.contains(&format!("dnat to {fresh_ip}:80")), "{nft}");
    assert!(!save(&host, "iptables-legacy-save", "nat").contains(&fresh_ip));

    // Our DEL removes ours and the reference's pod from the legacy tables.
    for (net, pod) in [
        ("lgnet", &our_pod),
        ("lgnet", &ref_pod),
        ("lgfresh", &fresh_pod),
    ] {
        ours.run_ok(&["del", net, pod.path_str()]);
    }
    let legacy = format!(
        "{}{}",
        save(&host, "iptables-legacy-save", "nat"),
        save(&host, "iptables-legacy-save", "filter")
    );
    for gone in [&our_ip, &our_cid, &ref_cid, &fresh_ip] {
        assert!(!legacy.contains(gone.as_str()), "{gone} left:\n{legacy}");
    }
    assert!(!legacy.contains("-j CNI-DN-"), "{legacy}");
    let nft = host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(!nft.contains(&fresh_ip), "{nft}");
}
