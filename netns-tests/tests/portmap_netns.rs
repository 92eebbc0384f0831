//! portmap end to end: our bridge + host-local + portmap through cnitool, with the "host" in
//! a namespace of its own. A busybox httpd in one pod must answer on the host's 127.0.0.1,
//! from another pod through the gateway, and from itself (hairpin); CHECK must notice a
//! missing rule; DEL must remove exactly this container's rules.

use std::process::Child;

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir};
use serde_json::{json, Value};

const PAGE: &str = "ferrocni-portmap-ok";

fn busybox_available() -> bool {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .any(|p| std::path::Path::new(p).is_file())
}

/// A busybox httpd serving PAGE on port 80 inside a namespace; killed on drop.
struct Httpd {
    child: Child,
    _root: TempDir,
}

impl Httpd {
    fn start(ns: &Netns) -> Httpd {
        let root = TempDir::new("httpd");
        std::fs::write(root.join("index.html"), PAGE).unwrap();
        let child = ns
            .command(&[
                "busybox",
                "httpd",
                "-f",
                "-p",
                "80",
                "-h",
                root.path().to_str().unwrap(),
            ])
            .spawn()
            .expect("start busybox httpd");
        assert!(
            ns.wait_tcp_listen(80),
            "busybox httpd is not listening on port 80"
        );
        Httpd { child, _root: root }
    }
}

impl Drop for Httpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `wget` from inside `ns`; the page or None.
fn fetch(ns: &Netns, url: &str) -> Option<String> {
    let out = ns.exec(&["timeout", "10", "busybox", "wget", "-q", "-O", "-", url]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn plugins() -> Vec<std::path::PathBuf> {
    for p in ["bridge", "host-local", "portmap", "cnitool"] {
        our_binary(p);
    }
    vec![our_bin_dir()]
}

fn conflist(name: &str, bridge: &str, subnet: &str, leases: &TempDir, portmap: Value) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge", "bridge": bridge, "isGateway": true, "hairpinMode": true,
                "ipam": { "type": "host-local", "dataDir": leases.path(), "ranges": [[{ "subnet": subnet }]],
                          "routes": [{ "dst": "0.0.0.0/0" }] }
            },
            portmap
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

const MAPPINGS: &str = r#"{"portMappings":[{"hostPort":18082,"containerPort":80,"protocol":"tcp"},{"hostPort":15353,"containerPort":53,"protocol":"udp"}]}"#;

#[test]
fn portmap_iptables_forwards_hairpins_checks_and_cleans_up() {
    require_root!();
    if !busybox_available() {
        eprintln!("skipping: busybox not installed");
        return;
    }
    let host = Netns::new("pm-host");
    let web = Netns::new("pm-web");
    let client = Netns::new("pm-client");
    for ns in [&host, &web, &client] {
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
    }
    let leases = TempDir::new("pm-leases");
    let cache = TempDir::new("pm-cache");
    let conf = ConfDir::new();
    let portmap = json!({ "type": "portmap", "backend": "iptables", "capabilities": { "portMappings": true } });
    conf.write_json(
        "10-pm.conflist",
        &conflist("pmnet", "cni-pm0", "10.231.20.0/24", &leases, portmap),
    );
    let plain = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);
    let mapped = plain.clone().env("CAP_ARGS", MAPPINGS);

    let web_ip = ip_of(&mapped.run_ok(&["add", "pmnet", web.path_str()]));
    let client_ip = ip_of(&plain.run_ok(&["add", "pmnet", client.path_str()]));
    let _httpd = Httpd::start(&web);

    assert_eq!(
        fetch(&host, "http://127.0.0.1:18082/").as_deref(),
        Some(PAGE),
        "host 127.0.0.1"
    );
    assert_eq!(
        fetch(&host, "http://10.231.20.1:18082/").as_deref(),
        Some(PAGE),
        "host address"
    );
    assert_eq!(
        fetch(&client, "http://10.231.20.1:18082/").as_deref(),
        Some(PAGE),
        "from another pod"
    );
    assert_eq!(
        fetch(&web, "http://10.231.20.1:18082/").as_deref(),
        Some(PAGE),
        "hairpin"
    );

    // Reference names and rules; route_localnet on the bridge for the 127.0.0.1 path.
    let nat = host.exec_ok(&["iptables-save", "-t", "nat"]);
    let dn_chain = nat
        .lines()
        .find_map(|l| {
            l.strip_prefix(":CNI-DN-")
                .map(|rest| format!("CNI-DN-{}", rest.split(' ').next().unwrap()))
        })
        .expect("CNI-DN chain");
    assert!(
        nat.contains(&format!("-j DNAT --to-destination {web_ip}:80")),
        "{nat}"
    );
    assert!(
        nat.contains(&format!("-j DNAT --to-destination {web_ip}:53")),
        "{nat}"
    );
    assert!(nat.contains("-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ"), "{nat}");
    assert_eq!(
        host.exec_ok(&["cat", "/proc/sys/net/ipv4/conf/cni-pm0/route_localnet"])
            .trim(),
        "1"
    );

    mapped.run_ok(&["check", "pmnet", web.path_str()]);
    plain.run_ok(&["check", "pmnet", client.path_str()]);
    let dnat = [
        "-p",
        "tcp",
        "--dport",
        "18082",
        "-j",
        "DNAT",
        "--to-destination",
    ];
    let target = format!("{web_ip}:80");
    let mut del_rule = vec!["iptables", "-t", "nat", "-D", dn_chain.as_str()];
    del_rule.extend_from_slice(&dnat);
    del_rule.push(&target);
    host.exec_ok(&del_rule);
    assert!(
        !mapped
            .run(&["check", "pmnet", web.path_str()])
            .status
            .success(),
        "CHECK missed a deleted DNAT rule"
    );

    // DEL removes this container's chain and jumps only; the shared chains stay.
    mapped.run_ok(&["del", "pmnet", web.path_str()]);
    let nat = host.exec_ok(&["iptables-save", "-t", "nat"]);
    assert!(
        !nat.contains("CNI-DN-") && !nat.contains(&web_ip),
        "leftovers:\n{nat}"
    );
    assert!(
        nat.contains(":CNI-HOSTPORT-DNAT") && nat.contains(":CNI-HOSTPORT-SETMARK"),
        "{nat}"
    );
    mapped.run_ok(&["del", "pmnet", web.path_str()]);
    assert!(
        fetch(&host, "http://127.0.0.1:18082/").is_none(),
        "port still forwarded after DEL"
    );
    plain.run_ok(&["del", "pmnet", client.path_str()]);
    assert!(!host.exec_ok(&["iptables-save"]).contains(&client_ip));
}

#[test]
fn portmap_nftables_backend_forwards_checks_and_cleans_up() {
    require_root!();
    if !busybox_available() || !std::path::Path::new("/usr/sbin/nft").is_file() {
        eprintln!("skipping: busybox or nft not installed");
        return;
    }
    let host = Netns::new("pmn-host");
    let web = Netns::new("pmn-web");
    let client = Netns::new("pmn-client");
    for ns in [&host, &web, &client] {
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
    }
    let leases = TempDir::new("pmn-leases");
    let cache = TempDir::new("pmn-cache");
    let conf = ConfDir::new();
    let portmap = json!({ "type": "portmap", "backend": "nftables", "capabilities": { "portMappings": true } });
    conf.write_json(
        "10-pmn.conflist",
        &conflist("pmnft", "cni-pmn0", "10.231.21.0/24", &leases, portmap),
    );
    let plain = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);
    let mapped = plain.clone().env("CAP_ARGS", MAPPINGS);

    let web_ip = ip_of(&mapped.run_ok(&["add", "pmnft", web.path_str()]));
    plain.run_ok(&["add", "pmnft", client.path_str()]);
    let _httpd = Httpd::start(&web);
    assert_eq!(
        fetch(&host, "http://127.0.0.1:18082/").as_deref(),
        Some(PAGE),
        "host 127.0.0.1"
    );
    assert_eq!(
        fetch(&client, "http://10.231.21.1:18082/").as_deref(),
        Some(PAGE),
        "from another pod"
    );
    assert_eq!(
        fetch(&web, "http://10.231.21.1:18082/").as_deref(),
        Some(PAGE),
        "hairpin"
    );

    let ruleset = host.exec_ok(&["nft", "list", "table", "ip", "cni_hostport"]);
    assert!(
        ruleset.contains(&format!("dnat to {web_ip}:80")),
        "{ruleset}"
    );
    assert!(
        !host
            .exec_ok(&["iptables-save", "-t", "nat"])
            .contains("CNI-DN-"),
        "iptables used despite backend nftables"
    );
    mapped.run_ok(&["check", "pmnft", web.path_str()]);
    // CHECK notices a missing rule.
    host.exec_ok(&[
        "nft",
        "flush",
        "chain",
        "ip",
        "cni_hostport",
        "masquerading",
    ]);
    assert!(!mapped
        .run(&["check", "pmnft", web.path_str()])
        .status
        .success());

    mapped.run_ok(&["del", "pmnft", web.path_str()]);
    let ruleset = host.exec_ok(&["nft", "list", "table", "ip", "cni_hostport"]);
    assert!(!ruleset.contains(&web_ip), "leftovers:\n{ruleset}");
    mapped.run_ok(&["del", "pmnft", web.path_str()]);
    plain.run_ok(&["del", "pmnft", client.path_str()]);
}

/// Our portmap removes what the reference portmap installed (same names), and vice versa.
#[test]
fn portmap_cleans_up_after_the_reference_plugin() {
    require_root!();
    let reference = match netns_tests::reference_plugin_dir(&["portmap"]) {
        Some(d) => d,
        None => return,
    };
    let host = Netns::new("pmr-host");
    let pod = Netns::new("pmr-pod");
    let config = json!({
        "cniVersion": "1.0.0", "name": "pmref", "type": "portmap",
        "runtimeConfig": serde_json::from_str::<Value>(MAPPINGS).unwrap(),
        "prevResult": { "cniVersion": "1.0.0",
            "interfaces": [{ "name": "eth0", "sandbox": pod.path_str() }],
            "ips": [{ "address": "10.231.22.5/24", "interface": 0 }] }
    });
    let run_with = |binary: std::path::PathBuf, command: &str, config: &Value| {
        let imp = Impl::alone("portmap", &binary);
        Attachment::new(&imp, &host, "refcid", &pod).run_ok(command, config);
    };
    let run = |binary: std::path::PathBuf, command: &str| run_with(binary, command, &config);
    let ours = our_binary("portmap");
    // With the reference's iptables rules present, our default backend sticks to iptables
    // for this network (CHECK finds them), and DEL removes them over netlink.
    run(reference.join("portmap"), "ADD");
    let theirs = host.exec_ok(&["iptables-save", "-t", "nat"]);
    run(ours.clone(), "CHECK");
    run(ours.clone(), "DEL");
    assert!(!host
        .exec_ok(&["iptables-save", "-t", "nat"])
        .contains("CNI-DN-"));
    // And the rule sets are identical.
    let mut iptables_config = config.clone();
    iptables_config["backend"] = json!("iptables");
    run_with(ours, "ADD", &iptables_config);
    let mine = host.exec_ok(&["iptables-save", "-t", "nat"]);
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&mine), strip(&theirs));
    run(reference.join("portmap"), "DEL");
    assert!(!host
        .exec_ok(&["iptables-save", "-t", "nat"])
        .contains("CNI-DN-"));
}

/// GC (spec 1.1.0) removes the port mappings of this network's containers that are no
/// longer valid attachments, and nothing of other networks.
#[test]
fn portmap_gc_removes_stale_attachments_only() {
    require_root!();
    let host = Netns::new("pmgc-host");
    let pod = Netns::new("pmgc-pod");
    let run = |network: &str, cid: &str, command: &str, extra: Value| {
        let mut config = json!({
            "cniVersion": "1.1.0", "name": network, "type": "portmap", "backend": "iptables",
            "runtimeConfig": serde_json::from_str::<Value>(MAPPINGS).unwrap(),
            "prevResult": { "cniVersion": "1.1.0",
                "interfaces": [{ "name": "eth0", "sandbox": pod.path_str() }],
                "ips": [{ "address": "10.231.23.5/24", "interface": 0 }] }
        });
        if command == "GC" {
            config = json!({ "cniVersion": "1.1.0", "name": network, "type": "portmap" });
        }
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
        let ours = Impl::alone("ours", &our_binary("portmap"));
        Attachment::new(&ours, &host, cid, &pod).run_ok(command, &config);
    };
    run("gcnet", "keep", "ADD", json!({}));
    run("gcnet", "stale", "ADD", json!({}));
    run("othernet", "other", "ADD", json!({}));
    let comments = || {
        let nat = host.exec_ok(&["iptables-save", "-t", "nat"]);
        nat.lines()
            .filter(|l| l.starts_with("-A CNI-HOSTPORT-DNAT"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        comments().len(),
        6,
        "two protocols for each of three containers"
    );
    run(
        "gcnet",
        "",
        "GC",
        json!({ "cni.dev/valid-attachments": [{ "containerID": "keep", "ifname": "eth0" }] }),
    );
    let left = comments();
    assert_eq!(left.len(), 4, "{left:#?}");
    assert!(
        left.iter().all(|l| !l.contains("\\\"stale\\\"")),
        "{left:#?}"
    );
    assert!(
        left.iter().any(|l| l.contains("\\\"keep\\\""))
            && left.iter().any(|l| l.contains("\\\"other\\\""))
    );
}

/// nftables rules are keyed by the attachment (network, container ID, interface): one
/// container on two networks, each attachment's ADD, CHECK, DEL and GC touch its own rules
/// only. Rules commented with the container ID alone (the reference's nftables portmap, or an
/// earlier version of ours) belong to the attachment whose address they name; a DEL without
/// prevResult takes all of the container's.
#[test]
fn portmap_nftables_rules_belong_to_their_attachment() {
    require_root!();
    if !std::path::Path::new("/usr/sbin/nft").is_file() {
        eprintln!("skipping: nft not installed");
        return;
    }
    let host = Netns::new("pma-host");
    let pod = Netns::new("pma-pod");
    let attachments = [
        ("pma", "eth0", "10.231.24.5"),
        ("pmb", "eth1", "10.231.25.5"),
    ];
    let call = |command: &str, (net, ifname, ip): (&str, &str, &str), cid: &str, extra: Value| {
        let mut config = json!({
            "cniVersion": "1.1.0", "name": net, "type": "portmap", "backend": "nftables",
            "runtimeConfig": serde_json::from_str::<Value>(MAPPINGS).unwrap(),
            "prevResult": { "cniVersion": "1.1.0",
                "interfaces": [{ "name": ifname, "sandbox": pod.path_str() }],
                "ips": [{ "address": format!("{ip}/24"), "interface": 0 }] }
        });
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                config.as_object_mut().unwrap().remove(k);
            } else {
                config[k] = v.clone();
            }
        }
        let ours = Impl::alone("ours", &our_binary("portmap"));
        Attachment::new(&ours, &host, cid, &pod)
            .ifname(ifname)
            .call(command, &config)
    };
    let ok = |command: &str, a, cid: &str, extra: Value| {
        let out = call(command, a, cid, extra);
        assert!(
            out.status.success(),
            "{command} {a:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    };
    // Rules naming an address, per address (DNAT targets and masquerade destinations).
    let rules_of = |ip: &str| {
        let table = host.exec_ok(&["nft", "list", "table", "ip", "cni_hostport"]);
        table
            .lines()
            .filter(|l| l.contains(&format!("{ip}:")) || l.contains(&format!("daddr {ip} ")))
            .count()
    };
    let [a, b] = attachments;
    for at in attachments {
        ok("ADD", at, "pmcid", json!({}));
    }
    // Two DNATs and two masquerades (subnet, localhost) each.
    assert_eq!((rules_of(a.2), rules_of(b.2)), (4, 4));
    // Re-adding one keeps the other's.
    ok("ADD", a, "pmcid", json!({}));
    assert_eq!((rules_of(a.2), rules_of(b.2)), (4, 4));
    ok("CHECK", a, "pmcid", json!({}));
    ok("CHECK", b, "pmcid", json!({}));
    ok("DEL", a, "pmcid", json!({}));
    assert_eq!((rules_of(a.2), rules_of(b.2)), (0, 4));
    ok("CHECK", b, "pmcid", json!({}));
    assert!(!call("CHECK", a, "pmcid", json!({})).status.success());

    // Rules as the reference's nftables portmap writes them, commented with the container ID.
    let legacy = |ip: &str| {
        format!(
            "add rule ip cni_hostport hostports tcp dport 18082 dnat to {ip}:80 comment \"pmcid\"\n\
             add rule ip cni_hostport masquerading ip saddr {ip} ip daddr {ip} masquerade comment \"pmcid\"\n"
        )
    };
    let script = legacy(a.2) + &legacy(b.2);
    let mut nft = host.command(&["nft", "-f", "-"]);
    let out = netns_tests::run_with_stdin(&mut nft, script.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!((rules_of(a.2), rules_of(b.2)), (2, 6));
    // A DEL with prevResult takes the container-ID rules of its own address only...
    ok("DEL", a, "pmcid", json!({}));
    assert_eq!((rules_of(a.2), rules_of(b.2)), (0, 6));
    // ...an ADD replaces them...
    ok("ADD", b, "pmcid", json!({}));
    assert_eq!(rules_of(b.2), 4);
    // ...and a DEL without prevResult takes every rule of the container's attachment, and
    // the container-ID ones whatever address they name.
    let out = netns_tests::run_with_stdin(
        &mut host.command(&["nft", "-f", "-"]),
        legacy(a.2).as_bytes(),
    );
    assert!(out.status.success());
    ok("DEL", b, "pmcid", json!({"prevResult": null}));
    assert_eq!((rules_of(a.2), rules_of(b.2)), (0, 0));

    // GC: the rules of this network's attachments not in the list go; another network's and
    // the listed attachment's stay.
    ok("ADD", a, "pmcid", json!({}));
    ok("ADD", a, "pmstale", json!({}));
    ok("ADD", b, "pmstale", json!({}));
    ok(
        "GC",
        a,
        "",
        json!({"cni.dev/valid-attachments": [{"containerID": "pmcid", "ifname": "eth0"}],
               "prevResult": null, "runtimeConfig": null}),
    );
    let table = host.exec_ok(&["nft", "list", "table", "ip", "cni_hostport"]);
    let comments = |net: &str, cid: &str| {
        table
            .lines()
            .filter(|l| l.contains(&format!("net: {net},")) && l.contains(&format!("id: {cid}\"")))
            .count()
    };
    assert_eq!(
        (
            comments("pma", "pmcid"),
            comments("pma", "pmstale"),
            comments("pmb", "pmstale")
        ),
        (4, 0, 4),
        "{table}"
    );
}

/// The nftables example conflist (bridge masquerading and portmap both on nftables): ADD,
/// CHECK and DEL leave no rule of the container behind.
#[test]
fn portmap_nftables_example_conflist() {
    require_root!();
    if !std::path::Path::new("/usr/sbin/nft").is_file() {
        eprintln!("skipping: nft not installed");
        return;
    }
    let host = Netns::new("pme-host");
    let pod = Netns::new("pme-pod");
    let leases = TempDir::new("pme-leases");
    let cache = TempDir::new("pme-cache");
    let text = std::fs::read_to_string(
        netns_tests::workspace_root().join("conflist-examples/portmap-nftables.conflist"),
    )
    .unwrap();
    let mut conflist: Value = serde_json::from_str(&text).unwrap();
    conflist["plugins"][0]["ipam"]["dataDir"] = json!(leases.path());
    let conf = ConfDir::new();
    conf.write_json("10-nft.conflist", &conflist);
    let tool = Cnitool::new(&conf, plugins(), cache.path())
        .in_netns(&host)
        .env("CAP_ARGS", MAPPINGS);
    let ip = ip_of(&tool.run_ok(&["add", "portmap-nft", pod.path_str()]));
    let ruleset = host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(ruleset.contains(&format!("dnat to {ip}:80")), "{ruleset}");
    tool.run_ok(&["check", "portmap-nft", pod.path_str()]);
    tool.run_ok(&["del", "portmap-nft", pod.path_str()]);
    let ruleset = host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(!ruleset.contains(&ip), "leftovers:\n{ruleset}");
}

/// `masqAll`, `markMasqBit`, `conditionsV4` and `externalSetMarkChain` (iptables backend) as
/// traffic sees them, not only as rule text.
#[test]
fn portmap_iptables_options_act_in_the_kernel() {
    require_root!();
    if !busybox_available() {
        eprintln!("skipping: busybox not installed");
        return;
    }
    let host = Netns::new("pmo-host");
    let web = Netns::new("pmo-web");
    let client = Netns::new("pmo-client");
    for ns in [&host, &web, &client] {
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
    }
    let leases = TempDir::new("pmo-leases");
    let cache = TempDir::new("pmo-cache");
    let conf = ConfDir::new();
    let write = |portmap: Value| {
        conf.write_json(
            "10-pmo.conflist",
            &conflist("pmonet", "cni-pmo0", "10.231.23.0/24", &leases, portmap),
        );
    };
    let mapping = r#"{"portMappings":[{"hostPort":18083,"containerPort":80,"protocol":"tcp"}]}"#;
    write(json!({ "type": "portmap", "capabilities": { "portMappings": true } }));
    let plain = Cnitool::new(&conf, plugins(), cache.path()).in_netns(&host);
    let mapped = plain.clone().env("CAP_ARGS", mapping);
    let client_ip = ip_of(&plain.run_ok(&["add", "pmonet", client.path_str()]));

    // masqAll, mark bit 5, and a condition that keeps the client pod out of the forwarding.
    write(json!({
        "type": "portmap", "capabilities": { "portMappings": true },
        "masqAll": true, "markMasqBit": 5, "conditionsV4": ["!", "-s", client_ip],
    }));
    let web_ip = ip_of(&mapped.run_ok(&["add", "pmonet", web.path_str()]));
    let _httpd = Httpd::start(&web);
    assert_eq!(
        fetch(&host, "http://127.0.0.1:18083/").as_deref(),
        Some(PAGE),
        "host 127.0.0.1"
    );
    assert_eq!(
        fetch(&web, "http://10.231.23.1:18083/").as_deref(),
        Some(PAGE),
        "hairpin"
    );
    // The client pod reaches the web pod itself, but not through the excluded host port.
    assert_eq!(
        fetch(&client, &format!("http://{web_ip}:80/")).as_deref(),
        Some(PAGE),
        "pod to pod"
    );
    assert_eq!(
        fetch(&client, "http://10.231.23.1:18083/"),
        None,
        "the condition excludes the client pod, yet its connection was forwarded"
    );
    let nat = host.exec_ok(&["iptables-save", "-t", "nat"]);
    assert!(nat.contains("--set-xmark 0x20/0x20"), "mark bit 5:\n{nat}");
    assert!(
        nat.contains("-m mark --mark 0x20/0x20 -j MASQUERADE"),
        "{nat}"
    );
    assert!(nat.contains(&format!("! -s {client_ip}/32")), "{nat}");
    // masqAll: every source is marked (no subnet match), and no separate 127.0.0.1 rule.
    assert!(
        !nat.contains("-s 10.231.23.0/24") && !nat.contains("-s 127.0.0.1"),
        "{nat}"
    );
    let masq = host.exec_ok(&[
        "iptables",
        "-t",
        "nat",
        "-L",
        "CNI-HOSTPORT-MASQ",
        "-v",
        "-x",
        "-n",
    ]);
    let masqueraded: u64 = masq
        .lines()
        .find(|l| l.contains("MASQUERADE"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        masqueraded > 0,
        "nothing went through the mark-5 masquerade:\n{masq}"
    );
    mapped.run_ok(&["del", "pmonet", web.path_str()]);

    // externalSetMarkChain: the operator's chain marks and masquerades; the plugin only jumps.
    for rule in [
        vec!["-N", "EXT-MARK"],
        vec![
            "-A",
            "EXT-MARK",
            "-j",
            "MARK",
            "--set-xmark",
            "0x4000/0x4000",
        ],
        vec![
            "-A",
            "POSTROUTING",
            "-m",
            "mark",
            "--mark",
            "0x4000/0x4000",
            "-j",
            "MASQUERADE",
        ],
    ] {
        let mut argv = vec!["iptables", "-t", "nat"];
        argv.extend(rule);
        host.exec_ok(&argv);
    }
    write(json!({
        "type": "portmap", "capabilities": { "portMappings": true },
        "externalSetMarkChain": "EXT-MARK",
    }));
    mapped.run_ok(&["add", "pmonet", web.path_str()]);
    let nat = host.exec_ok(&["iptables-save", "-t", "nat"]);
    assert!(nat.contains("-j EXT-MARK"), "{nat}");
    assert_eq!(
        fetch(&host, "http://127.0.0.1:18083/").as_deref(),
        Some(PAGE),
        "host 127.0.0.1 through the external mark chain"
    );
    mapped.run_ok(&["check", "pmonet", web.path_str()]);
    mapped.run_ok(&["del", "pmonet", web.path_str()]);
    let nat = host.exec_ok(&["iptables-save", "-t", "nat"]);
    assert!(
        !nat.contains(&web_ip) && !nat.contains("-j EXT-MARK"),
        "{nat}"
    );
    assert!(
        nat.contains(":EXT-MARK"),
        "the operator's chain must stay:\n{nat}"
    );
    plain.run_ok(&["del", "pmonet", client.path_str()]);
}

/// An "outside" client behind its own veth into the host netns, routed through it.
fn outside_client(host: &Netns, name: &str, host_ip: &str, client_ip: &str) -> Netns {
    let client = Netns::new(name);
    client.exec_ok(&["ip", "link", "set", "lo", "up"]);
    let host_if = format!("pmc{}", &host_ip[host_ip.len() - 1..]);
    netns_tests::netfilter::link_outside(
        host,
        &host_if,
        &format!("{host_ip}/30"),
        &client,
        &format!("{client_ip}/30"),
        Some(host_ip),
    );
    client
}

/// The programs cnitool's run of `verb` executed (strace), by file name.
fn traced_execs(tool: &Cnitool, verb: &str, net: &str, pod: &Netns) -> Vec<String> {
    let trace = TempDir::new("pmc-trace");
    netns_tests::netfilter::traced_cnitool(tool, &[verb, net, pod.path_str()], &trace.join("t"))
}

/// nft-syntax `conditionsV4` decide who may use the host port: a set with a prefix, written
/// over netlink (no process runs), excludes one outside client and not the other; syntax the
/// plugin does not encode (`ip ttl`) goes through `nft -f` and filters just the same.
#[test]
fn portmap_nft_conditions_filter_sources() {
    require_root!();
    if !busybox_available() || !std::path::Path::new("/usr/bin/strace").is_file() {
        eprintln!("skipping: busybox or strace not installed");
        return;
    }
    let host = Netns::new("pmc-host");
    let web = Netns::new("pmc-web");
    for ns in [&host, &web] {
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
    }
    let a = outside_client(&host, "pmc-a", "192.168.241.1", "192.168.241.2");
    let b = outside_client(&host, "pmc-b", "192.168.241.5", "192.168.241.6");
    let leases = TempDir::new("pmc-leases");
    let cache = TempDir::new("pmc-cache");
    let conf = ConfDir::new();
    let write = |conditions: Value| {
        conf.write_json(
            "10-pmc.conflist",
            &conflist(
                "pmcnet",
                "cni-pmc0",
                "10.231.24.0/24",
                &leases,
                json!({ "type": "portmap", "capabilities": { "portMappings": true },
                        "conditionsV4": conditions }),
            ),
        );
    };
    let tool = Cnitool::new(&conf, plugins(), cache.path())
        .in_netns(&host)
        .env(
            "CAP_ARGS",
            r#"{"portMappings":[{"hostPort":18084,"containerPort":80,"protocol":"tcp"}]}"#,
        );
    let url_a = "http://192.168.241.1:18084/";
    let url_b = "http://192.168.241.5:18084/";

    write(json!([
        "ip",
        "saddr",
        "!=",
        "{ 192.168.241.2, 192.168.250.0/24 }",
        "tcp",
        "dport",
        "18084"
    ]));
    let execs = traced_execs(&tool, "add", "pmcnet", &web);
    assert!(
        !execs.iter().any(|e| e == "nft" || e.starts_with("xtables")),
        "conditions the plugin encodes ran a tool: {execs:?}"
    );
    let _httpd = Httpd::start(&web);
    let chain = host.exec_ok(&["nft", "list", "chain", "ip", "cni_hostport", "prerouting"]);
    assert!(
        chain.contains("ip saddr != { 192.168.241.2, 192.168.250.0/24 } tcp dport 18084 fib daddr type local jump hostports_all"),
        "{chain}"
    );
    assert_eq!(fetch(&a, url_a), None, "excluded client A was forwarded");
    assert_eq!(fetch(&b, url_b).as_deref(), Some(PAGE), "client B");
    tool.run_ok(&["check", "pmcnet", web.path_str()]);
    tool.run_ok(&["del", "pmcnet", web.path_str()]);

    // Not encoded here: nft writes the entry rules; now B is the one kept out.
    write(json!([
        "ip",
        "ttl",
        "!=",
        "0",
        "ip",
        "saddr",
        "!=",
        "192.168.241.6"
    ]));
    let execs = traced_execs(&tool, "add", "pmcnet", &web);
    assert!(execs.iter().any(|e| e == "nft"), "{execs:?}");
    let chain = host.exec_ok(&["nft", "list", "chain", "ip", "cni_hostport", "prerouting"]);
    assert!(
        chain.contains("ip ttl != 0 ip saddr != 192.168.241.6"),
        "{chain}"
    );
    assert_eq!(fetch(&a, url_a).as_deref(), Some(PAGE), "client A");
    assert_eq!(fetch(&b, url_b), None, "excluded client B was forwarded");
    tool.run_ok(&["del", "pmcnet", web.path_str()]);
    let ruleset = host.exec_ok(&["nft", "list", "table", "ip", "cni_hostport"]);
    assert!(!ruleset.contains("dnat"), "{ruleset}");
}
