//! Failure injection: an ADD that fails at any step leaves no veth, lease or rule behind.

mod bridge_support;

use std::os::unix::fs::PermissionsExt;

use bridge_support::*;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::json;

/// A CNI_PATH dir holding a fake IPAM `failipam` that always fails ADD (and logs its calls).
fn failing_ipam(dir: &TempDir) -> String {
    let script = dir.join("failipam");
    let log = dir.join("calls.log");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$CNI_COMMAND\" >> {}\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then\n  echo '{{\"code\": 11, \"msg\": \"injected IPAM failure\"}}'\n  exit 1\nfi\nexit 0\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir.path().display().to_string()
}

#[test]
fn failing_ipam_rolls_back_veth_and_spoofcheck() {
    require_root!();
    let host = Netns::new("brrb-host");
    let pod = Netns::new("brrb-pod");
    let dir = TempDir::new("brrb-path");
    let mut imp = ours();
    imp.cni_path = failing_ipam(&dir);
    let c = json!({"cniVersion": "1.0.0", "name": "rbnet", "type": "bridge", "isGateway": true, "macspoofchk": true,
        "ipMasq": true, "ipam": {"type": "failipam"}});
    let a = Attachment::new(&imp, &host, "rbpod", &pod);
    let e = a.error("ADD", &c);
    assert_eq!(e["code"], 11, "{e}");
    assert_eq!(e["msg"], "injected IPAM failure");
    assert!(veths(&host).is_empty(), "{:?}", veths(&host));
    assert!(pod.link("eth0").is_none());
    assert!(
        !nft_ruleset(&host).contains("cni-br-iface-rbpod"),
        "{}",
        nft_ruleset(&host)
    );
    assert!(cni_nat_rules(&host).is_empty());
    // The IPAM ADD failed, so it is not asked to DEL what it never gave.
    let calls = std::fs::read_to_string(dir.join("calls.log")).unwrap();
    assert_eq!(calls.trim(), "ADD");
}

#[test]
fn late_failure_releases_the_lease() {
    require_root!();
    let host = Netns::new("brrl-host");
    let pod = Netns::new("brrl-pod");
    let ipam = TempDir::new("brrl-ipam");
    let imp = ours();
    // The bridge already holds another gateway: the failure comes after the IPAM ADD.
    host.exec_ok(&["ip", "link", "add", "cni0", "type", "bridge"]);
    host.exec_ok(&["ip", "addr", "add", "10.89.5.1/24", "dev", "cni0"]);
    let c = conf(
        "1.0.0",
        "rlnet",
        Some(&ipam),
        json!([[{"subnet": "10.89.0.0/24"}]]),
        json!({"isGateway": true, "ipMasq": true}),
    );
    let a = Attachment::new(&imp, &host, "rlpod", &pod);
    let e = a.error("ADD", &c);
    assert!(e["msg"].as_str().unwrap().contains("forceAddress"), "{e}");
    assert!(
        leases(&ipam, "rlnet").is_empty(),
        "{:?}",
        leases(&ipam, "rlnet")
    );
    assert!(veths(&host).is_empty());
    assert!(pod.link("eth0").is_none());
    assert!(cni_nat_rules(&host).is_empty());
}

#[test]
fn duplicate_ifname_fails_without_side_effects() {
    require_root!();
    let host = Netns::new("brdu-host");
    let pod = Netns::new("brdu-pod");
    let imp = ours();
    pod.exec_ok(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "other0",
    ]);
    let c = conf("1.0.0", "dunet", None, json!(null), json!({}));
    let a = Attachment::new(&imp, &host, "dupod", &pod);
    let e = a.error("ADD", &c);
    assert_eq!(
        e["msg"],
        "container veth name provided (eth0) already exists"
    );
    assert!(veths(&host).is_empty());
}

#[test]
fn bad_config_is_rejected_before_touching_the_kernel() {
    require_root!();
    let host = Netns::new("brbc-host");
    let pod = Netns::new("brbc-pod");
    let a = Attachment::new(&ours(), &host, "bcpod", &pod);
    for (extra, want) in [
        (json!({"vlan": 5000}), "invalid VLAN ID 5000"),
        (json!({"hairpinMode": true, "promiscMode": true}), "hairpin"),
        (json!({"ipMasqBackend": "pf"}), "unknown ipmasq backend"),
    ] {
        let e = a.error("ADD", &conf("1.0.0", "bcnet", None, json!(null), extra));
        assert!(e["msg"].as_str().unwrap().contains(want), "{e}");
        // Plain errors upstream, which its skeleton reports with code 999.
        assert_eq!(e["code"], 999);
    }
    assert!(host.link("cni0").is_none());
}
