//! sbr end to end: bridge + host-local + sbr through cnitool, ours against the reference
//! (same conflist, separate namespaces): the same rules and the same routes in every table;
//! a second interface gets the next table; `table` adds only rules; DEL removes the rules,
//! also when the interface or the whole netns is already gone; a failed ADD leaves nothing.

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{
    our_bin_dir, our_binary, reference_plugin_dir, require_root, Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};
use std::path::PathBuf;

/// One pod wired by one implementation: host and pod namespaces, conf dir, cnitool.
struct Pod {
    _host: Netns,
    pod: Netns,
    _conf: ConfDir,
    _cache: TempDir,
    _leases: TempDir,
    tool: Cnitool,
}

fn network(
    name: &str,
    bridge: &str,
    subnet4: &str,
    subnet6: &str,
    sbr: Value,
    leases: &TempDir,
) -> Value {
    json!({"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": true, "isDefaultGateway": true,
         "ipam": {"type": "host-local", "dataDir": leases.path(),
                  "ranges": [[{"subnet": subnet4}], [{"subnet": subnet6}]]}},
        sbr
    ]})
}

fn pod(prefix: &str, bin_dir: PathBuf, networks: &[Value]) -> Pod {
    let host = Netns::new(&format!("{prefix}-host"));
    let pod = Netns::new(&format!("{prefix}-pod"));
    let conf = ConfDir::new();
    let leases = TempDir::new(&format!("{prefix}-leases"));
    for (i, n) in networks.iter().enumerate() {
        let mut n = n.clone();
        n["plugins"][0]["ipam"]["dataDir"] = json!(leases.path());
        conf.write_json(&format!("{i}0-net.conflist"), &n);
    }
    let cache = TempDir::new(&format!("{prefix}-cache"));
    let tool = Cnitool::new(&conf, vec![bin_dir], cache.path()).in_netns(&host);
    Pod {
        _host: host,
        pod,
        _conf: conf,
        _cache: cache,
        _leases: leases,
        tool,
    }
}

impl Pod {
    fn add(&self, net: &str, ifname: &str) -> Value {
        let out =
            self.tool
                .clone()
                .env("CNI_IFNAME", ifname)
                .run_ok(&["add", net, self.pod.path_str()]);
        serde_json::from_str(&out).unwrap()
    }

    fn cnitool(&self, verb: &str, net: &str, ifname: &str) -> std::process::Output {
        self.tool
            .clone()
            .env("CNI_IFNAME", ifname)
            .run(&[verb, net, self.pod.path_str()])
    }

    /// `ip rule` of both families, as sorted text lines.
    fn rules(&self) -> Vec<String> {
        let mut out = Vec::new();
        for fam in ["-4", "-6"] {
            out.extend(
                self.pod
                    .exec_ok(&["ip", fam, "rule", "show"])
                    .lines()
                    .map(|l| format!("{fam} {}", l.trim())),
            );
        }
        out.sort();
        out
    }

    /// Every route of every table (local ones included), as sorted text lines. Link-local
    /// routes are left out: the local ones follow random MACs, and whether the kernel's
    /// `fe80::/64` prefix route exists yet when sbr copies the interface's routes is a race of
    /// IPv6 address configuration, for the reference as for us.
    fn routes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for fam in ["-4", "-6"] {
            out.extend(
                self.pod
                    .exec_ok(&["ip", fam, "route", "show", "table", "all"])
                    .lines()
                    .filter(|l| !l.starts_with("local fe80:") && !l.starts_with("fe80::/64"))
                    .map(|l| format!("{fam} {}", l.trim())),
            );
        }
        out.sort();
        out
    }
}

fn sbr_rules(p: &Pod) -> Vec<String> {
    p.rules()
        .into_iter()
        .filter(|r| r.contains("from ") && !r.contains("from all"))
        .collect()
}

fn build() {
    for b in ["bridge", "host-local", "sbr", "cnitool"] {
        our_binary(b);
    }
}

#[test]
fn two_interfaces_match_the_reference_and_del_cleans_up() {
    require_root!();
    let Some(reference) = reference_plugin_dir(&["bridge", "host-local", "sbr"]) else {
        return;
    };
    build();
    let leases = TempDir::new("sbr-unused");
    let nets = [
        network(
            "sbr-a",
            "sbr-br0",
            "10.61.0.0/24",
            "fd61::/64",
            json!({"type": "sbr"}),
            &leases,
        ),
        network(
            "sbr-b",
            "sbr-br1",
            "10.62.0.0/24",
            "fd62::/64",
            json!({"type": "sbr"}),
            &leases,
        ),
    ];
    let ours = pod("sbro", our_bin_dir(), &nets);
    let theirs = pod("sbrr", reference, &nets);
    for p in [&ours, &theirs] {
        p.add("sbr-a", "eth0");
        p.add("sbr-b", "net1");
    }
    assert_eq!(ours.rules(), theirs.rules());
    assert_eq!(ours.routes(), theirs.routes());
    let rules = sbr_rules(&ours);
    // Two addresses per interface, each with its own table from 100 on.
    assert_eq!(rules.len(), 4, "{rules:?}");
    for t in ["100", "101", "102", "103"] {
        assert!(
            rules.iter().any(|r| r.ends_with(&format!("lookup {t}"))),
            "{rules:?}"
        );
    }
    let main4 = ours
        .pod
        .exec_ok(&["ip", "-4", "route", "show", "table", "main"]);
    assert!(
        main4.trim().is_empty(),
        "main table should be emptied: {main4}"
    );
    let t100 = ours
        .pod
        .exec_ok(&["ip", "-4", "route", "show", "table", "100"]);
    assert!(t100.contains("default via 10.61.0.1 dev eth0"), "{t100}");

    // Traffic from each source leaves through its own interface's table.
    let get = ours
        .pod
        .exec_ok(&["ip", "-4", "route", "get", "1.2.3.4", "from", "10.62.0.2"]);
    assert!(
        get.contains("dev net1") && get.contains("table 10"),
        "{get}"
    );

    // (No chain CHECK here: bridge's CHECK looks for the routes sbr moved away, in ours
    // and in the reference alike.)
    for p in [&ours, &theirs] {
        assert!(p.cnitool("del", "sbr-b", "net1").status.success());
        assert!(p.cnitool("del", "sbr-a", "eth0").status.success());
    }
    assert_eq!(ours.rules(), theirs.rules());
    assert!(sbr_rules(&ours).is_empty(), "{:?}", ours.rules());
    assert!(ours.cnitool("del", "sbr-a", "eth0").status.success());
}

#[test]
fn fixed_table_adds_only_rules() {
    require_root!();
    build();
    let text = std::fs::read_to_string(
        netns_tests::workspace_root().join("conflist-examples/sbr-bridge.conflist"),
    )
    .unwrap();
    let net: Value = serde_json::from_str(&text).unwrap();
    let p = pod("sbrt", our_bin_dir(), &[net]);
    let before_main = {
        p.add("sbr-net", "eth0");
        p.pod
            .exec_ok(&["ip", "-4", "route", "show", "table", "main"])
    };
    assert!(
        before_main.contains("default via 10.63.0.1"),
        "{before_main}"
    );
    let rules = sbr_rules(&p);
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert!(
        rules.iter().all(|r| r.ends_with("lookup 5001")),
        "{rules:?}"
    );
    p.tool.run_ok(&["check", "sbr-net", p.pod.path_str()]);
    p.tool.run_ok(&["del", "sbr-net", p.pod.path_str()]);
    assert!(sbr_rules(&p).is_empty(), "{:?}", p.rules());
}

fn prev_result(ip: &str, gw: &str) -> Value {
    json!({"cniVersion": "1.0.0",
           "interfaces": [{"name": "eth0", "sandbox": "/x"}],
           "ips": [{"interface": 0, "address": ip, "gateway": gw}]})
}

#[test]
fn failed_add_rolls_back_and_del_survives_missing_link_and_netns() {
    require_root!();
    let sbr = our_binary("sbr");
    let pod = Netns::new("sbrf-pod");
    pod.exec_ok(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
    ]);
    pod.exec_ok(&["ip", "link", "set", "eth0", "up"]);
    pod.exec_ok(&["ip", "link", "set", "peer0", "up"]);
    pod.exec_ok(&["ip", "addr", "add", "10.64.0.2/24", "dev", "eth0"]);
    let routes_before = pod.exec_ok(&["ip", "-4", "route", "show", "table", "all"]);
    // The gateway is outside every subnet of eth0: the default route in the new table
    // fails after the rule was added, and the rule must go again.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "sbr",
                      "prevResult": prev_result("10.64.0.2/24", "192.0.2.1")});
    let ours = Impl::alone("sbr", &sbr);
    let plugin = Attachment::at(&ours, "sbr-cid", pod.path_str());
    let out = plugin.run("ADD", &conf);
    assert!(!out.success, "{}", out.stdout);
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    let rules = pod.exec_ok(&["ip", "rule"]);
    assert!(!rules.contains("10.64.0.2"), "rule left behind: {rules}");
    assert_eq!(
        pod.exec_ok(&["ip", "-4", "route", "show", "table", "all"]),
        routes_before
    );

    // A good ADD, then the interface disappears before DEL: prevResult names the rules.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "sbr",
                      "prevResult": prev_result("10.64.0.2/24", "10.64.0.1")});
    plugin.run_ok("ADD", &conf);
    assert!(pod
        .exec_ok(&["ip", "rule"])
        .contains("from 10.64.0.2 lookup 100"));
    pod.exec_ok(&["ip", "link", "del", "eth0"]);
    plugin.run_ok("DEL", &conf);
    assert!(!pod.exec_ok(&["ip", "rule"]).contains("10.64.0.2"));
    plugin.run_ok("DEL", &conf);

    // Bad input is a spec error; a gone netns is a successful DEL.
    let out = plugin.run(
        "ADD",
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "sbr"}),
    );
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    let out = plugin.run("ADD", &json!({"cniVersion": "1.0.0", "name": "n", "type": "sbr",
        "gateways": ["10.0.0.1", "10.0.0.2"], "prevResult": prev_result("10.64.0.2/24", "10.64.0.1")}));
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    Attachment::at(&ours, "sbr-cid", "/run/netns/sbr-gone-for-good").run_ok("DEL", &conf);
}

/// A chain ptp + sbr that ADDed cleanly passes CHECK: ptp finds its subnet and gateway routes
/// in the table sbr moved them to (found by sbr's source rule for the address), not only in
/// the main table as the reference looks (whose CHECK of this chain fails). Still precise: a
/// route gone from that table fails the CHECK.
#[test]
fn ptp_then_sbr_passes_check() {
    main_plugin_then_sbr_passes_check("ptp", json!({"type": "ptp", "ipMasq": false}), "sbrp");
}

/// The same for bridge (its own CHECK of addresses and routes uses the shared one).
#[test]
fn bridge_then_sbr_passes_check() {
    main_plugin_then_sbr_passes_check(
        "bridge",
        json!({"type": "bridge", "bridge": "sbrbr0", "isGateway": true, "ipMasq": false}),
        "sbrb",
    );
}

fn main_plugin_then_sbr_passes_check(plugin: &str, mut first: Value, prefix: &str) {
    require_root!();
    for b in [plugin, "host-local", "sbr", "cnitool"] {
        our_binary(b);
    }
    let leases = TempDir::new(&format!("{prefix}-unused"));
    first["ipam"] = json!({"type": "host-local", "dataDir": leases.path(),
              "ranges": [[{"subnet": "10.65.0.0/24"}], [{"subnet": "fd65::/64"}]],
              "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.166.0.0/16", "gw": "10.65.0.1"}]});
    let net =
        json!({"cniVersion": "1.0.0", "name": "sbr-ptp", "plugins": [first, {"type": "sbr"}]});
    let p = pod(prefix, our_bin_dir(), &[net]);
    let r = p.add("sbr-ptp", "eth0");
    let t100 = p
        .pod
        .exec_ok(&["ip", "-4", "route", "show", "table", "100"]);
    assert!(t100.contains("default via 10.65.0.1 dev eth0"), "{t100}");
    assert!(t100.contains("10.166.0.0/16 via 10.65.0.1"), "{t100}");
    let main4 = p
        .pod
        .exec_ok(&["ip", "-4", "route", "show", "table", "main"]);
    assert!(
        !main4.contains("via 10.65.0.1"),
        "sbr moved the routes: {main4}"
    );
    assert!(r["routes"].as_array().is_some_and(|a| !a.is_empty()), "{r}");
    let check = p.cnitool("check", "sbr-ptp", "eth0");
    assert!(
        check.status.success(),
        "CHECK after sbr: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // Precision: the route sbr moved, gone from its table, is missed.
    p.pod
        .exec_ok(&["ip", "-4", "route", "del", "10.166.0.0/16", "table", "100"]);
    let check = p.cnitool("check", "sbr-ptp", "eth0");
    assert!(!check.status.success(), "CHECK missed a deleted route");
    let err = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(err.contains("10.166.0.0/16"), "{err}");
    assert!(p.cnitool("del", "sbr-ptp", "eth0").status.success());
    assert!(sbr_rules(&p).is_empty(), "{:?}", p.rules());
}
