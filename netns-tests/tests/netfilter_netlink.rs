//! The nftables backends over netlink end to end: no netfilter tool is executed on ADD or DEL
//! (strace; the firewall with an ingress policy included), and with 20,000 foreign
//! (kube-proxy-like) nat rules on the node masquerade and hostPort DNAT still work and DEL
//! leaves no per-pod rule behind.

use std::process::Command;

use netns_tests::{
    netfilter, our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};

fn plugins() -> Vec<std::path::PathBuf> {
    for p in ["bridge", "host-local", "portmap", "firewall", "cnitool"] {
        our_binary(p);
    }
    vec![our_bin_dir()]
}

fn conflist(name: &str, bridge: &str, subnet: &str, leases: &TempDir) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            { "type": "bridge", "bridge": bridge, "isDefaultGateway": true, "ipMasq": true,
              "macspoofchk": true,
              "ipam": { "type": "host-local", "dataDir": leases.path(), "ranges": [[{ "subnet": subnet }]] } },
            { "type": "portmap", "capabilities": { "portMappings": true } },
            // Its records stay out of the real /run/cni.
            { "type": "firewall", "ingressPolicy": "same-bridge", "dataDir": leases.join("firewall") }
        ]
    })
}

const TOOLS: &[&str] = &[
    "nft",
    "iptables",
    "ip6tables",
    "iptables-restore",
    "ip6tables-restore",
    "iptables-save",
    "xtables-nft-multi",
    "xtables-legacy-multi",
    "conntrack",
];

#[test]
fn add_and_del_exec_only_plugins() {
    require_root!();
    if !std::path::Path::new("/usr/bin/strace").is_file() {
        eprintln!("skipping: strace not installed");
        return;
    }
    let host = Netns::new("nlx-host");
    let pod = Netns::new("nlx-pod");
    let leases = TempDir::new("nlx-leases");
    let cache = TempDir::new("nlx-cache");
    let trace = TempDir::new("nlx-trace");
    let conf = ConfDir::new();
    conf.write_json(
        "10-nlx.conflist",
        &conflist("nlxnet", "cni-nlx0", "10.232.10.0/24", &leases),
    );
    let tool = Cnitool::new(&conf, plugins(), cache.path())
        .in_netns(&host)
        .env(
            "CAP_ARGS",
            r#"{"portMappings":[{"hostPort":18095,"containerPort":80,"protocol":"tcp"}]}"#,
        );
    for verb in ["add", "del"] {
        let out_file = trace.join(format!("{verb}.trace"));
        let execs = netfilter::traced_cnitool(&tool, &[verb, "nlxnet", pod.path_str()], &out_file);
        for e in &execs {
            assert!(
                ["cnitool", "bridge", "host-local", "portmap", "firewall"].contains(&e.as_str()),
                "{verb} executed {e}: {execs:?}"
            );
            assert!(!TOOLS.contains(&e.as_str()));
        }
        assert!(execs.iter().any(|e| e == "portmap") && execs.iter().any(|e| e == "firewall"));
        if verb == "add" {
            // The ingress policy went over netlink too, as iptables-nft would have written it.
            let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
            assert!(
                filter.contains(
                    "-A CNI-ISOLATION-STAGE-1 -i cni-nlx0 ! -o cni-nlx0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\" -j CNI-ISOLATION-STAGE-2"
                ),
                "{filter}"
            );
        }
    }
    let rs = host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(!rs.contains("10.232.10.2"), "{rs}");
}

/// Loads kube-proxy-like nat rules (KUBE-SERVICES jumps plus one DNAT chain per service).
fn load_foreign_rules(ns: &Netns, rules: usize) {
    assert!(
        netfilter::load_nat_rules(ns.command(&["iptables-restore", "--noflush"]), rules),
        "iptables-restore of {rules} rules"
    );
}

fn busybox() -> bool {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .any(|p| std::path::Path::new(p).is_file())
}

#[test]
fn masquerade_and_hostport_work_next_to_20000_foreign_rules() {
    require_root!();
    if !busybox() {
        eprintln!("skipping: busybox not installed");
        return;
    }
    let host = Netns::new("nls-host");
    let outside = Netns::new("nls-out");
    let pod = Netns::new("nls-pod");
    for ns in [&host, &outside, &pod] {
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
    }
    netfilter::link_outside(
        &host,
        "uplink",
        "192.168.232.1/30",
        &outside,
        "192.168.232.2/30",
        None,
    );
    load_foreign_rules(&host, 20_000);

    let leases = TempDir::new("nls-leases");
    let cache = TempDir::new("nls-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-nls.conflist",
        &conflist("nlsnet", "cni-nls0", "10.232.11.0/24", &leases),
    );
    let tool = Cnitool::new(&conf, plugins(), cache.path())
        .in_netns(&host)
        .env(
            "CAP_ARGS",
            r#"{"portMappings":[{"hostPort":18096,"containerPort":80,"protocol":"tcp"}]}"#,
        );
    let result: Value =
        serde_json::from_str(&tool.run_ok(&["add", "nlsnet", pod.path_str()])).unwrap();
    let ip = result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();

    // Masquerade: the outside has no route to the pod subnet.
    pod.exec_ok(&["ping", "-c", "1", "-W", "2", "192.168.232.2"]);
    // hostPort: from 127.0.0.1 on the host and from another netns.
    let root = TempDir::new("nls-www");
    std::fs::write(root.join("index.html"), "nls-ok").unwrap();
    let mut httpd = pod
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
        .unwrap();
    // A fixed pause was not always enough on a loaded machine.
    assert!(pod.wait_tcp_listen(80), "busybox httpd is not listening");
    let fetch = |ns: &Netns, url: &str| {
        let out = ns.exec(&["timeout", "10", "busybox", "wget", "-q", "-O", "-", url]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let local = fetch(&host, "http://127.0.0.1:18096/");
    let remote = fetch(&outside, "http://192.168.232.1:18096/");
    let _ = httpd.kill();
    let _ = httpd.wait();
    assert_eq!(local, "nls-ok", "hostPort from 127.0.0.1");
    assert_eq!(remote, "nls-ok", "hostPort from another netns");
    tool.run_ok(&["check", "nlsnet", pod.path_str()]);

    tool.run_ok(&["del", "nlsnet", pod.path_str()]);
    let cid = Cnitool::container_id(pod.path_str());
    let ours = |family: &str, table: &str| {
        let out = host.exec(&["nft", "list", "table", family, table]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (family, table) in [
        ("inet", "cni_plugins_masquerade"),
        ("ip", "cni_hostport"),
        ("ip6", "cni_hostport"),
        ("bridge", "nat"),
        ("ip", "filter"),
    ] {
        let text = ours(family, table);
        assert!(
            !text.contains(&ip) && !text.contains(&cid),
            "per-pod leftovers in {family} {table}:\n{text}"
        );
    }
    let nat = host.exec_ok(&["iptables-save", "-t", "nat"]);
    assert!(!nat.contains("CNI-"), "iptables leftovers");
    assert_eq!(
        nat.matches("-j DNAT").count(),
        10_000,
        "foreign rules untouched"
    );
    let _ = Command::new("true").status();
}
