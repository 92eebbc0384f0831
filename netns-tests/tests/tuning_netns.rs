//! tuning end to end: link attributes and sysctls set in the container netns, CHECK
//! (including `IFNAME` sysctl keys), and the original values restored by DEL.

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir};
use serde_json::{json, Value};

/// Runs our tuning binary directly (the "host" side in `host`).
fn tuning(host: &Netns, command: &str, pod: &Netns, config: &Value) -> (bool, String) {
    let ours = Impl::alone("ours", &our_binary("tuning"));
    let out = Attachment::new(&ours, host, "tuned-cid", pod).run(command, config);
    (out.success, out.stdout)
}

fn link(pod: &Netns) -> Value {
    pod.exec_json(&["ip", "-j", "-d", "link", "show", "dev", "eth0"])[0].clone()
}

fn flags(l: &Value) -> Vec<String> {
    l["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn tuning_applies_checks_and_restores() {
    require_root!();
    let host = Netns::new("tun-host");
    let pod = Netns::new("tun-pod");
    let data = TempDir::new("tun-data");
    host.exec_ok(&[
        "ip",
        "link",
        "add",
        "vtun0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        pod.name(),
    ]);
    let before = link(&pod);

    let config = json!({
        "cniVersion": "1.0.0", "name": "tuned", "type": "tuning", "dataDir": data.path(),
        "sysctl": { "net.ipv4.conf.IFNAME.arp_filter": "1", "net/ipv4/conf/IFNAME/arp_announce": "2" },
        "mac": "02:11:22:33:44:55", "mtu": 1400, "promisc": true, "allmulti": true, "txQLen": 500,
        "prevResult": { "cniVersion": "1.0.0",
            "interfaces": [{ "name": "eth0", "sandbox": pod.path_str(), "mac": before["address"] }],
            "ips": [{ "address": "10.231.40.5/24", "interface": 0 }] }
    });
    let (ok, out) = tuning(&host, "ADD", &pod, &config);
    assert!(ok, "ADD failed: {out}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        result["interfaces"][0]["mac"], "02:11:22:33:44:55",
        "result carries the new MAC"
    );

    let after = link(&pod);
    assert_eq!(after["address"], "02:11:22:33:44:55");
    assert_eq!(after["mtu"], 1400);
    assert_eq!(after["txqlen"], 500);
    assert!(
        flags(&after).contains(&"PROMISC".to_string())
            && flags(&after).contains(&"ALLMULTI".to_string()),
        "{after}"
    );
    assert_eq!(
        pod.exec_ok(&["cat", "/proc/sys/net/ipv4/conf/eth0/arp_filter"])
            .trim(),
        "1"
    );
    assert_eq!(
        pod.exec_ok(&["cat", "/proc/sys/net/ipv4/conf/eth0/arp_announce"])
            .trim(),
        "2"
    );
    let backup = data.join("tuned-cid_eth0.json");
    let saved: Value = serde_json::from_slice(&std::fs::read(&backup).unwrap()).unwrap();
    assert_eq!(saved["mtu"], before["mtu"]);
    assert_eq!(saved["mac"], before["address"]);
    assert_eq!(
        saved["owner"],
        json!({"network": "tuned", "containerID": "tuned-cid", "ifname": "eth0"})
    );

    // CHECK passes (IFNAME keys resolved), then notices a changed MTU and a changed sysctl.
    let (ok, out) = tuning(&host, "CHECK", &pod, &config);
    assert!(ok, "CHECK failed: {out}");
    pod.exec_ok(&["ip", "link", "set", "eth0", "mtu", "1300"]);
    assert!(
        !tuning(&host, "CHECK", &pod, &config).0,
        "CHECK missed the MTU change"
    );
    pod.exec_ok(&["ip", "link", "set", "eth0", "mtu", "1400"]);
    pod.exec_ok(&[
        "sh",
        "-c",
        "echo 0 > /proc/sys/net/ipv4/conf/eth0/arp_filter",
    ]);
    assert!(
        !tuning(&host, "CHECK", &pod, &config).0,
        "CHECK missed the sysctl change"
    );

    // DEL restores every link attribute and drops the backup, even when it names another
    // network than ADD did (the container and interface name the attachment, as for the
    // reference); a second DEL is fine.
    let mut renamed = config.clone();
    renamed["name"] = json!("renamed-net");
    let (ok, out) = tuning(&host, "DEL", &pod, &renamed);
    assert!(ok, "DEL failed: {out}");
    let restored = link(&pod);
    for key in ["address", "mtu", "txqlen"] {
        assert_eq!(restored[key], before[key], "{key} not restored");
    }
    assert!(
        !flags(&restored).contains(&"PROMISC".to_string())
            && !flags(&restored).contains(&"ALLMULTI".to_string())
    );
    assert!(!backup.exists());
    assert!(tuning(&host, "DEL", &pod, &config).0);

    // GC (1.1.0) keeps the backup of a valid attachment and drops it once the attachment is
    // no longer valid (its pod went away without a DEL).
    let (ok, out) = tuning(&host, "ADD", &pod, &config);
    assert!(ok, "ADD failed: {out}");
    let gc = |valid: Value| {
        let conf = json!({"cniVersion": "1.1.0", "name": "tuned", "type": "tuning",
                          "dataDir": data.path(), "cni.dev/valid-attachments": valid});
        tuning(&host, "GC", &pod, &conf)
    };
    assert!(gc(json!([{"containerID": "tuned-cid", "ifname": "eth0"}])).0);
    assert!(backup.exists());
    assert!(gc(json!([])).0);
    assert!(!backup.exists());
    assert!(tuning(&host, "DEL", &pod, &config).0);
}

#[test]
fn tuning_rejects_sysctls_outside_net_and_leaves_nothing() {
    require_root!();
    let host = Netns::new("tunx-host");
    let pod = Netns::new("tunx-pod");
    let data = TempDir::new("tunx-data");
    host.exec_ok(&[
        "ip",
        "link",
        "add",
        "vtun1",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        pod.name(),
    ]);
    let before = link(&pod);
    let prev = json!({ "cniVersion": "1.0.0", "interfaces": [{ "name": "eth0", "sandbox": pod.path_str() }], "ips": [] });
    for sysctl in [
        json!({"kernel.hostname": "x"}),
        json!({"net.ipv4.conf.IFNAME.no_such_key": "1"}),
    ] {
        let config = json!({ "cniVersion": "1.0.0", "name": "tuned", "type": "tuning", "dataDir": data.path(),
            "mtu": 1280, "sysctl": sysctl, "prevResult": prev });
        let (ok, out) = tuning(&host, "ADD", &pod, &config);
        assert!(!ok, "ADD accepted {sysctl}: {out}");
        assert_eq!(
            link(&pod)["mtu"],
            before["mtu"],
            "failed ADD changed the link"
        );
        assert!(
            std::fs::read_dir(data.path()).unwrap().next().is_none(),
            "failed ADD left a backup"
        );
    }
}

#[test]
fn tuning_in_a_chain_through_cnitool() {
    require_root!();
    for p in ["bridge", "host-local", "tuning", "cnitool"] {
        our_binary(p);
    }
    let host = Netns::new("tunc-host");
    let pod = Netns::new("tunc-pod");
    let leases = TempDir::new("tunc-leases");
    let data = TempDir::new("tunc-data");
    let cache = TempDir::new("tunc-cache");
    let text = std::fs::read_to_string(
        netns_tests::workspace_root().join("conflist-examples/tuning-sysctl-link.conflist"),
    )
    .unwrap();
    let mut conflist: Value = serde_json::from_str(&text).unwrap();
    conflist["plugins"][0]["ipam"]["dataDir"] = json!(leases.path());
    conflist["plugins"][1]["dataDir"] = json!(data.path());
    let conf = ConfDir::new();
    conf.write_json("10-tuned.conflist", &conflist);
    let tool = Cnitool::new(&conf, vec![our_bin_dir()], cache.path())
        .in_netns(&host)
        .env("CAP_ARGS", r#"{"mac":"02:aa:bb:cc:dd:ee"}"#);

    let result: Value =
        serde_json::from_str(&tool.run_ok(&["add", "tuned", pod.path_str()])).unwrap();
    let eth0 = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["sandbox"] == pod.path_str())
        .unwrap();
    assert_eq!(eth0["mac"], "02:aa:bb:cc:dd:ee");
    let l = link(&pod);
    assert_eq!(
        (
            l["address"].as_str(),
            l["mtu"].as_u64(),
            l["txqlen"].as_u64()
        ),
        (Some("02:aa:bb:cc:dd:ee"), Some(1400), Some(500))
    );
    assert_eq!(
        pod.exec_ok(&["cat", "/proc/sys/net/core/somaxconn"]).trim(),
        "512"
    );
    // The reference 1.1.1 fails this CHECK on the IFNAME key; ours resolves it.
    tool.run_ok(&["check", "tuned", pod.path_str()]);
    tool.run_ok(&["del", "tuned", pod.path_str()]);
    assert!(pod.link("eth0").is_none());
    assert!(
        std::fs::read_dir(data.path()).unwrap().next().is_none(),
        "backup left behind"
    );
}
