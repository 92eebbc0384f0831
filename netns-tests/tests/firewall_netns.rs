//! firewall end to end: our bridge + host-local + firewall through cnitool, the "host" being
//! a namespace of its own. Rules carry the reference's names; CHECK notices a missing rule;
//! DEL removes the container's rules; `same-bridge` really isolates two bridges.

use netns_tests::{our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir};
use serde_json::{json, Value};

fn plugins() -> Vec<std::path::PathBuf> {
    for p in ["bridge", "host-local", "firewall", "cnitool"] {
        our_binary(p);
    }
    vec![our_bin_dir()]
}

fn conflist(name: &str, bridge: &str, subnet: &str, leases: &TempDir, firewall: Value) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge", "bridge": bridge, "isGateway": true,
                "ipam": { "type": "host-local", "dataDir": leases.path(), "ranges": [[{ "subnet": subnet }]],
                          "routes": [{ "dst": "0.0.0.0/0" }] }
            },
            firewall
        ]
    })
}

fn ip_of(result: &str) -> String {
    let v: Value = serde_json::from_str(result).expect("ADD result");
    v["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

fn pings(from: &Netns, to: &str) -> bool {
    from.exec(&["ping", "-c", "1", "-W", "2", to])
        .status
        .success()
}

#[test]
fn firewall_rules_check_and_del() {
    require_root!();
    let host = Netns::new("fw-host");
    let pod = Netns::new("fw-pod");
    let leases = TempDir::new("fw-leases");
    let cache = TempDir::new("fw-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-fw.conflist",
        &conflist(
            "fwnet",
            "cni-fw0",
            "10.231.30.0/24",
            &leases,
            json!({"type": "firewall", "backend": "iptables"}),
        ),
    );
    let tool = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);

    let ip = ip_of(&tool.run_ok(&["add", "fwnet", pod.path_str()]));
    let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
    for rule in [
        "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD".to_string(),
        "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN"
            .to_string(),
        format!("-A CNI-FORWARD -d {ip}/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        format!("-A CNI-FORWARD -s {ip}/32 -j ACCEPT"),
    ] {
        assert!(filter.contains(&rule), "missing `{rule}` in\n{filter}");
    }
    // An IPv4-only container has nothing in ip6tables.
    assert!(!host
        .exec_ok(&["ip6tables-save", "-t", "filter"])
        .contains("-A CNI-FORWARD -s"));

    tool.run_ok(&["check", "fwnet", pod.path_str()]);
    host.exec_ok(&[
        "iptables",
        "-D",
        "CNI-FORWARD",
        "-s",
        &format!("{ip}/32"),
        "-j",
        "ACCEPT",
    ]);
    assert!(
        !tool
            .run(&["check", "fwnet", pod.path_str()])
            .status
            .success(),
        "CHECK missed a deleted rule"
    );

    tool.run_ok(&["del", "fwnet", pod.path_str()]);
    let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
    assert!(!filter.contains(&ip), "leftover rules:\n{filter}");
    assert!(
        filter.contains(":CNI-FORWARD") && filter.contains(":CNI-ADMIN"),
        "shared chains must stay"
    );
    tool.run_ok(&["del", "fwnet", pod.path_str()]);
}

#[test]
fn firewall_same_bridge_policy_isolates_bridges() {
    require_root!();
    let host = Netns::new("fwi-host");
    let a1 = Netns::new("fwi-a1");
    let a2 = Netns::new("fwi-a2");
    let b1 = Netns::new("fwi-b1");
    let leases = TempDir::new("fwi-leases");
    let cache = TempDir::new("fwi-cache");
    let conf = ConfDir::new();
    let policy = json!({"type": "firewall", "backend": "iptables", "ingressPolicy": "same-bridge"});
    conf.write_json(
        "10-a.conflist",
        &conflist(
            "neta",
            "cni-fwa0",
            "10.231.31.0/24",
            &leases,
            policy.clone(),
        ),
    );
    conf.write_json(
        "20-b.conflist",
        &conflist("netb", "cni-fwb0", "10.231.32.0/24", &leases, policy),
    );
    let tool = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);

    let ip_a1 = ip_of(&tool.run_ok(&["add", "neta", a1.path_str()]));
    let ip_a2 = ip_of(&tool.run_ok(&["add", "neta", a2.path_str()]));
    let ip_b1 = ip_of(&tool.run_ok(&["add", "netb", b1.path_str()]));

    assert!(pings(&a1, &ip_a2), "same bridge must be reachable");
    assert!(
        !pings(&a1, &ip_b1),
        "bridge A reached bridge B despite same-bridge policy"
    );
    assert!(
        !pings(&b1, &ip_a1),
        "bridge B reached bridge A despite same-bridge policy"
    );
    let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
    assert!(
        filter.contains("-A CNI-ISOLATION-STAGE-1 -i cni-fwa0 ! -o cni-fwa0"),
        "{filter}"
    );
    assert!(
        filter.contains("-A CNI-ISOLATION-STAGE-2 -o cni-fwb0"),
        "{filter}"
    );
    tool.run_ok(&["check", "neta", a1.path_str()]);

    // Without the isolation chains the bridges talk (the DROP above came from the policy).
    host.exec_ok(&["iptables", "-F", "CNI-ISOLATION-STAGE-2"]);
    assert!(
        pings(&a1, &ip_b1),
        "routing between bridges broken even without isolation"
    );
    assert!(
        !tool.run(&["check", "neta", a1.path_str()]).status.success(),
        "CHECK missed the flushed isolation chain"
    );

    for (net, ns) in [("neta", &a1), ("neta", &a2), ("netb", &b1)] {
        tool.run_ok(&["del", net, ns.path_str()]);
    }
    let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
    for ip in [&ip_a1, &ip_a2, &ip_b1] {
        assert!(
            !filter.contains(ip.as_str()),
            "leftover rules for {ip}:\n{filter}"
        );
    }
}

/// The `isolated` example conflist: ADD, the intra-bridge DROP next to the same-bridge rules,
/// CHECK, DEL.
#[test]
fn firewall_isolated_example_conflist() {
    require_root!();
    let host = Netns::new("fwe-host");
    let pod = Netns::new("fwe-pod");
    let leases = TempDir::new("fwe-leases");
    let cache = TempDir::new("fwe-cache");
    let text = std::fs::read_to_string(
        netns_tests::workspace_root().join("conflist-examples/firewall-isolated.conflist"),
    )
    .unwrap();
    let mut conflist: Value = serde_json::from_str(&text).unwrap();
    conflist["plugins"][0]["ipam"]["dataDir"] = json!(leases.path());
    let conf = ConfDir::new();
    conf.write_json("10-iso.conflist", &conflist);
    let tool = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);
    let ip = ip_of(&tool.run_ok(&["add", "fw-isolated", pod.path_str()]));
    let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
    assert!(
        filter.contains("-A CNI-ISOLATION-STAGE-1 -i cni-fwiso0 -o cni-fwiso0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: isolated)\" -j DROP"),
        "{filter}"
    );
    assert!(filter.contains(&format!("-A CNI-FORWARD -s {ip}/32 -j ACCEPT")));
    tool.run_ok(&["check", "fw-isolated", pod.path_str()]);
    tool.run_ok(&["del", "fw-isolated", pod.path_str()]);
    assert!(!host.exec_ok(&["iptables-save"]).contains(&ip));
}
