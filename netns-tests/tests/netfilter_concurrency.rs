//! Many pods at once on a node that already holds foreign nat rules: 50 concurrent ADDs, then
//! 50 concurrent DELs, of bridge (ipMasq) + host-local + portmap (a hostPort each) +
//! firewall, next to a few thousand kube-proxy-like rules. After the ADDs every pod has
//! exactly its rules (masquerade, DNAT and hairpin, firewall), none lost and none twice, and
//! the shared jumps exist once; after the DELs nothing of any pod is left and the foreign
//! rules are as they were. No netfilter tool runs (strace of every call), so nothing waits
//! on the xtables lock either.
//!
//! `FERROCNI_CONCURRENT_PODS` and `FERROCNI_CONCURRENT_FOREIGN_RULES` change the counts.

use std::collections::BTreeMap;

use netns_tests::{
    lease_files, netfilter, our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const ALLOWED: &[&str] = &["cnitool", "bridge", "host-local", "portmap", "firewall"];
const HOST_PORT_BASE: usize = 20000;

/// Runs `cnitool VERB ccnet POD` (pod `i`, hostPort `HOST_PORT_BASE + i`) under strace;
/// returns the programs it executed.
fn traced(tool: &Cnitool, trace: &TempDir, verb: &str, i: usize, pod: &str) -> Vec<String> {
    let caps = format!(
        r#"{{"portMappings":[{{"hostPort":{},"containerPort":80,"protocol":"tcp"}}]}}"#,
        HOST_PORT_BASE + i
    );
    let tool = tool.clone().env("CAP_ARGS", &caps);
    netfilter::traced_cnitool(
        &tool,
        &[verb, "ccnet", pod],
        &trace.join(format!("{verb}-{i}")),
    )
}

/// Runs `verb` for every pod at once; returns what each run executed.
fn all_at_once(tool: &Cnitool, trace: &TempDir, verb: &str, pods: &[Netns]) -> Vec<Vec<String>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| s.spawn(move || traced(tool, trace, verb, i, p.path_str())))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// The foreign (KUBE-*) part of the nat table, as iptables-save prints it.
fn foreign_rules(host: &Netns) -> Vec<String> {
    host.exec_ok(&["iptables-save", "-t", "nat"])
        .lines()
        .filter(|l| l.contains("KUBE-"))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect()
}

/// Every pod's address, from its cached result; no address handed out twice.
fn pod_addresses(tool: &Cnitool, pods: &[Netns]) -> Vec<String> {
    let ips: Vec<String> = pods
        .iter()
        .map(|p| {
            let cached: Value = serde_json::from_str(
                &std::fs::read_to_string(tool.cache_file("ccnet", p.path_str(), "eth0")).unwrap(),
            )
            .unwrap();
            let result = cached.get("result").unwrap_or(&cached);
            result["ips"][0]["address"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut distinct = ips.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        pods.len(),
        "addresses handed out twice: {ips:?}"
    );

    ips
}

/// After the ADDs every pod has exactly its rules (masquerade, DNAT, hairpin and localhost,
/// firewall), none lost and none twice, and the shared jumps exist once.
fn each_pod_has_exactly_its_rules(host: &Netns, pods: &[Netns], ips: &[String]) {
    let n = pods.len();
    let masq = host.exec_ok(&[
        "nft",
        "list",
        "chain",
        "inet",
        "cni_plugins_masquerade",
        "masq_checks",
    ]);
    let hostports = host.exec_ok(&["nft", "list", "chain", "ip", "cni_hostport", "hostports"]);
    let masquerading =
        host.exec_ok(&["nft", "list", "chain", "ip", "cni_hostport", "masquerading"]);
    let filter = host.exec_ok(&["iptables-save", "-t", "filter"]);
    let mut wrong = BTreeMap::new();
    for (i, (ip, pod)) in ips.iter().zip(pods).enumerate() {
        let cid = Cnitool::container_id(pod.path_str());
        let found = [
            count(&masq, &format!("ip saddr {ip} ip daddr != 10.231.48.0/22")),
            count(
                &hostports,
                &format!(
                    "tcp dport {} dnat to {ip}:80 comment \"{}\"",
                    HOST_PORT_BASE + i,
                    netkit::netfilter::naming::instance_comment("ccnet", "eth0", &cid)
                ),
            ),
            count(&masquerading, &format!("ip daddr {ip} ")),
            count(&filter, &format!("-A CNI-FORWARD -s {ip}/32 -j ACCEPT")),
            count(
                &filter,
                &format!("-A CNI-FORWARD -d {ip}/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
            ),
        ];
        if found != [1, 1, 2, 1, 1] {
            wrong.insert(i, found);
        }
    }
    assert!(
        wrong.is_empty(),
        "pods without exactly their rules ([masq, dnat, hairpin+localhost, fw -s, fw -d]): {wrong:?}\n{masq}\n{hostports}\n{filter}"
    );
    assert_eq!(count(&masq, " masquerade comment "), n, "{masq}");
    assert_eq!(count(&hostports, " dnat to "), n);
    assert_eq!(
        count(
            &filter,
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"
        ),
        1,
        "{filter}"
    );
    assert_eq!(count(&filter, "-j CNI-ADMIN"), 1, "{filter}");
    for chain in ["prerouting", "output"] {
        let c = host.exec_ok(&["nft", "list", "chain", "ip", "cni_hostport", chain]);
        assert_eq!(count(&c, "jump hostports_all"), 1, "{c}");
    }
}

#[test]
fn concurrent_adds_and_dels_next_to_foreign_rules() {
    require_root!();
    if !std::path::Path::new("/usr/bin/strace").is_file() {
        eprintln!("skipping: strace not installed");
        return;
    }
    let n = knob("FERROCNI_CONCURRENT_PODS", 50).clamp(1, 200);
    let foreign = knob("FERROCNI_CONCURRENT_FOREIGN_RULES", 3000);
    for p in ALLOWED {
        our_binary(p);
    }
    let host = Netns::new("cc-host");
    host.exec_ok(&["ip", "link", "set", "lo", "up"]);
    assert!(netfilter::load_nat_rules(
        host.command(&["iptables-restore", "--noflush"]),
        foreign
    ));
    let foreign_before = foreign_rules(&host);
    assert_eq!(foreign_before.len(), 2 + foreign + foreign / 2 + 1);

    let pods: Vec<Netns> = (0..n).map(|_| Netns::new("cc-pod")).collect();
    let state = TempDir::new("cc-state");
    let cache = TempDir::new("cc-cache");
    let trace = TempDir::new("cc-trace");
    let conf = ConfDir::new();
    conf.write_json(
        "10-cc.conflist",
        &json!({
            "cniVersion": "1.0.0",
            "name": "ccnet",
            "plugins": [
                { "type": "bridge", "bridge": "cni-cc0", "isGateway": true, "ipMasq": true,
                  "ipam": { "type": "host-local", "dataDir": state.join("ipam"),
                            "ranges": [[{ "subnet": "10.231.48.0/22" }]] } },
                { "type": "portmap", "capabilities": { "portMappings": true } },
                { "type": "firewall", "dataDir": state.join("firewall") }
            ]
        }),
    );
    let tool = Cnitool::new(&conf, vec![our_bin_dir()], cache.path()).in_netns(&host);

    let execs = all_at_once(&tool, &trace, "add", &pods);
    for (i, e) in execs.iter().enumerate() {
        assert!(
            e.iter().all(|x| ALLOWED.contains(&x.as_str())),
            "ADD of pod {i} executed {e:?}"
        );
    }

    let ips = pod_addresses(&tool, &pods);
    each_pod_has_exactly_its_rules(&host, &pods, &ips);
    assert_eq!(lease_files(&state.join("ipam/ccnet")).len(), n);
    assert_eq!(
        foreign_rules(&host),
        foreign_before,
        "foreign rules changed by ADD"
    );

    let execs = all_at_once(&tool, &trace, "del", &pods);
    for (i, e) in execs.iter().enumerate() {
        assert!(
            e.iter().all(|x| ALLOWED.contains(&x.as_str())),
            "DEL of pod {i} executed {e:?}"
        );
    }
    let ruleset = host.exec_ok(&["nft", "list", "ruleset"]);
    for (ip, pod) in ips.iter().zip(&pods) {
        let cid = Cnitool::container_id(pod.path_str());
        for needle in [format!("{ip} "), format!("{ip}/"), format!("{ip}:"), cid] {
            assert!(
                !ruleset.contains(&needle),
                "`{needle}` left after DEL:\n{ruleset}"
            );
        }
    }
    assert_eq!(count(&ruleset, " masquerade comment "), 0);
    assert_eq!(count(&ruleset, " dnat to 10.231."), 0);
    assert_eq!(
        foreign_rules(&host),
        foreign_before,
        "foreign rules changed by DEL"
    );
    assert!(lease_files(&state.join("ipam/ccnet")).is_empty());
}
