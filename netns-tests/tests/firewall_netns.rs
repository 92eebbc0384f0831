//! firewall end to end: our bridge + host-local + firewall through cnitool, the "host" being
//! a namespace of its own. Rules carry the reference's names; CHECK notices a missing rule;
//! DEL removes the container's rules; `same-bridge` really isolates two bridges.

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{
    lease_files, our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir,
};
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
    let records = TempDir::new("fw-records");
    let cache = TempDir::new("fw-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-fw.conflist",
        &conflist(
            "fwnet",
            "cni-fw0",
            "10.231.30.0/24",
            &leases,
            json!({"type": "firewall", "backend": "iptables", "dataDir": records.path()}),
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

/// An operator's `iptables -P FORWARD DROP` stays: ADD (with the isolation policy too) does
/// not set the FORWARD chain's policy back to accept, as the reference's iptables never does,
/// and the pod's traffic is let through by the container's rules alone.
#[test]
fn firewall_keeps_the_forward_policy() {
    require_root!();
    let host = Netns::new("fwp-host");
    let pod = Netns::new("fwp-pod");
    let leases = TempDir::new("fwp-leases");
    let records = TempDir::new("fwp-records");
    let cache = TempDir::new("fwp-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-fwp.conflist",
        &conflist(
            "fwpnet",
            "cni-fwp0",
            "10.231.38.0/24",
            &leases,
            json!({"type": "firewall", "backend": "iptables", "dataDir": records.path(),
                   "ingressPolicy": "same-bridge"}),
        ),
    );
    host.exec_ok(&["ip", "link", "set", "lo", "up"]);
    for tool in ["iptables", "ip6tables"] {
        host.exec_ok(&[tool, "-P", "FORWARD", "DROP"]);
    }
    let tool = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);
    tool.run_ok(&["add", "fwpnet", pod.path_str()]);
    for save in ["iptables-save", "ip6tables-save"] {
        let filter = host.exec_ok(&[save, "-t", "filter"]);
        assert!(filter.contains(":FORWARD DROP"), "{save}:\n{filter}");
    }
    tool.run_ok(&["check", "fwpnet", pod.path_str()]);
    tool.run_ok(&["del", "fwpnet", pod.path_str()]);
    assert!(host
        .exec_ok(&["iptables-save", "-t", "filter"])
        .contains(":FORWARD DROP"));
}

#[test]
fn firewall_same_bridge_policy_isolates_bridges() {
    require_root!();
    let host = Netns::new("fwi-host");
    let a1 = Netns::new("fwi-a1");
    let a2 = Netns::new("fwi-a2");
    let b1 = Netns::new("fwi-b1");
    let leases = TempDir::new("fwi-leases");
    let records = TempDir::new("fwi-records");
    let cache = TempDir::new("fwi-cache");
    let conf = ConfDir::new();
    let policy = json!({"type": "firewall", "backend": "iptables", "ingressPolicy": "same-bridge",
                        "dataDir": records.path()});
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
    let records = TempDir::new("fwe-records");
    let cache = TempDir::new("fwe-cache");
    let text = std::fs::read_to_string(
        netns_tests::workspace_root().join("conflist-examples/firewall-isolated.conflist"),
    )
    .unwrap();
    let mut conflist: Value = serde_json::from_str(&text).unwrap();
    conflist["plugins"][0]["ipam"]["dataDir"] = json!(leases.path());
    conflist["plugins"][1]["dataDir"] = json!(records.path());
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

/// Runs our firewall binary in `host` for `command`, without prevResult: what containerd's
/// second DEL (empty CNI_NETNS) and the DEL after a failed ADD (nothing cached) look like.
fn firewall_call(host: &Netns, command: &str, cid: &str, config: &Value) -> std::process::Output {
    let ours = Impl {
        label: "ours",
        bin: our_binary("firewall"),
        cni_path: our_bin_dir().display().to_string(),
    };
    Attachment::at(&ours, cid, "")
        .in_host(host)
        .call(command, config)
}

/// The firewall records what it allowed, so DEL without prevResult and GC still find the
/// rules of an attachment (the reference leaks them: it needs prevResult).
#[test]
fn firewall_del_without_prev_result_and_gc() {
    require_root!();
    let host = Netns::new("fwr-host");
    let pods = [
        Netns::new("fwr-p1"),
        Netns::new("fwr-p2"),
        Netns::new("fwr-p3"),
    ];
    let leases = TempDir::new("fwr-leases");
    let records = TempDir::new("fwr-records");
    let cache = TempDir::new("fwr-cache");
    let conf = ConfDir::new();
    let firewall = json!({"type": "firewall", "backend": "iptables", "dataDir": records.path()});
    conf.write_json(
        "10-fwr.conflist",
        &conflist(
            "fwrec",
            "cni-fwr0",
            "10.231.33.0/24",
            &leases,
            firewall.clone(),
        ),
    );
    let tool = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);
    let ips: Vec<String> = pods
        .iter()
        .map(|p| ip_of(&tool.run_ok(&["add", "fwrec", p.path_str()])))
        .collect();
    let cids: Vec<String> = pods
        .iter()
        .map(|p| Cnitool::container_id(p.path_str()))
        .collect();
    let filter = || host.exec_ok(&["iptables-save", "-t", "filter"]);
    let has_rules = |ip: &str| filter().contains(&format!("-s {ip}/32 -j ACCEPT"));
    let record_dir = records.join("fwrec");
    let recorded = || {
        let mut names: Vec<String> = std::fs::read_dir(&record_dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    assert_eq!(recorded().len(), 3, "one record per attachment");
    assert!(ips.iter().all(|ip| has_rules(ip)));

    let mut plugin_conf = firewall.clone();
    plugin_conf["cniVersion"] = json!("1.1.0");
    plugin_conf["name"] = json!("fwrec");

    // DEL with no prevResult and no netns, twice.
    for _ in 0..2 {
        let out = firewall_call(&host, "DEL", &cids[0], &plugin_conf);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    assert!(
        !has_rules(&ips[0]),
        "DEL without prevResult left rules of {}",
        ips[0]
    );
    assert!(has_rules(&ips[1]) && has_rules(&ips[2]));

    // GC with only pod 3 valid: pod 2 (never DEL'd) loses its rules, pod 3 keeps them.
    let mut gc_conf = plugin_conf.clone();
    gc_conf["cni.dev/valid-attachments"] = json!([{"containerID": cids[2], "ifname": "eth0"}]);
    let out = firewall_call(&host, "GC", "", &gc_conf);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!has_rules(&ips[1]), "GC left rules of {}", ips[1]);
    assert!(
        has_rules(&ips[2]),
        "GC removed the rules of a valid attachment"
    );
    assert_eq!(recorded(), [format!("{}:eth0", cids[2])]);
    tool.run_ok(&["check", "fwrec", pods[2].path_str()]);

    // The rest of the chain still has its DELs to run; nothing may be left after them.
    for p in &pods {
        tool.run_ok(&["del", "fwrec", p.path_str()]);
    }
    let filter = filter();
    for ip in &ips {
        assert!(
            !filter.contains(ip.as_str()),
            "leftover rules for {ip}:\n{filter}"
        );
    }
    assert!(recorded().is_empty(), "records left: {:?}", recorded());
    assert!(lease_files(&leases.join("fwrec")).is_empty());
}

/// The filter table as `iptables-save` prints it, counters and comment lines left out.
fn filter_rules(host: &Netns, tool: &str) -> Vec<String> {
    host.exec_ok(&[tool, "-t", "filter"])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.strip_suffix(" [0:0]") {
            Some(chain) => chain.to_string(),
            None => l.split(" [").next().unwrap_or(l).to_string(),
        })
        .collect()
}

/// The same same-bridge network through the reference Go plugins and through ours, each in
/// its own host netns: `iptables-save` / `ip6tables-save` of the filter table are identical
/// (ours are written over netlink, theirs by iptables-nft).
#[test]
fn firewall_same_bridge_rules_equal_the_reference() {
    require_root!();
    let Some(reference) = netns_tests::reference_plugin_dir(&["bridge", "host-local", "firewall"])
    else {
        return;
    };
    let mut saved = Vec::new();
    for (label, cni_path) in [("ours", plugins()), ("reference", vec![reference])] {
        let host = Netns::new("fwo-host");
        let pods = [Netns::new("fwo-a"), Netns::new("fwo-b")];
        let leases = TempDir::new("fwo-leases");
        let records = TempDir::new("fwo-records");
        let cache = TempDir::new("fwo-cache");
        let conf = ConfDir::new();
        let policy = json!({"type": "firewall", "backend": "iptables",
                            "ingressPolicy": "same-bridge", "dataDir": records.path()});
        conf.write_json(
            "10-a.conflist",
            &conflist(
                "fwoa",
                "cni-fwoa0",
                "10.231.34.0/24",
                &leases,
                policy.clone(),
            ),
        );
        conf.write_json(
            "20-b.conflist",
            &conflist("fwob", "cni-fwob0", "10.231.35.0/24", &leases, policy),
        );
        let tool = Cnitool::new(&conf, cni_path, cache.path()).in_netns(&host);
        tool.run_ok(&["add", "fwoa", pods[0].path_str()]);
        tool.run_ok(&["add", "fwob", pods[1].path_str()]);
        saved.push((
            label,
            filter_rules(&host, "iptables-save"),
            filter_rules(&host, "ip6tables-save"),
        ));
        tool.run_ok(&["del", "fwoa", pods[0].path_str()]);
        tool.run_ok(&["del", "fwob", pods[1].path_str()]);
    }
    let (ours, theirs) = (&saved[0], &saved[1]);
    assert_eq!(ours.1, theirs.1, "iptables filter table differs");
    assert_eq!(ours.2, theirs.2, "ip6tables filter table differs");
    assert!(
        ours.1.iter().any(|l| l
            == "-A CNI-ISOLATION-STAGE-2 -o cni-fwob0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\" -j DROP"),
        "{:#?}",
        ours.1
    );
}

/// On an iptables-nft host the firewall needs no iptables tool at all: with `iptables` and
/// `ip6tables` hidden (bind-mounted away in a private mount namespace), STATUS is ready and
/// ADD, CHECK and DEL with an ingress policy work over netlink.
#[test]
fn firewall_works_without_iptables_tools() {
    require_root!();
    let host = Netns::new("fwt-host");
    let pod = Netns::new("fwt-pod");
    let leases = TempDir::new("fwt-leases");
    let records = TempDir::new("fwt-records");
    let cache = TempDir::new("fwt-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-fwt.conflist",
        &conflist(
            "fwtnet",
            "cni-fwt0",
            "10.231.36.0/24",
            &leases,
            json!({"type": "firewall", "backend": "iptables", "ingressPolicy": "isolated",
                   "dataDir": records.path()}),
        ),
    );
    // Every iptables-nft command is a link to one multi-call binary: hide it.
    let Ok(multi) = std::fs::canonicalize("/usr/sbin/iptables") else {
        eprintln!("skipping: no /usr/sbin/iptables");
        return;
    };
    if multi.to_string_lossy().contains("legacy") {
        eprintln!("skipping: iptables is iptables-legacy here");
        return;
    }
    let run = |verb: &str| {
        let script = format!(
            "mount --bind /dev/null {} && test ! -f /usr/sbin/iptables && test ! -f /usr/sbin/ip6tables && \
             NETCONFPATH={} CNI_PATH={} CNI_CACHE_DIR={} exec {} {verb} fwtnet {}",
            multi.display(),
            conf.path().display(),
            our_bin_dir().display(),
            cache.path().display(),
            our_binary("cnitool").display(),
            pod.path_str(),
        );
        host.command(&[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap()
    };
    for verb in ["add", "check", "status", "del"] {
        let out = run(verb);
        assert!(
            out.status.success(),
            "{verb} without iptables tools: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if verb == "add" {
            let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
            assert!(
                filter.contains("-A CNI-ISOLATION-STAGE-1 -i cni-fwt0 -o cni-fwt0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: isolated)\" -j DROP"),
                "{filter}"
            );
        }
    }
}
