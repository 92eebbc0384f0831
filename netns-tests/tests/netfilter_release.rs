//! The shared nf_tables objects and the socket release, end to end through cnitool with the
//! chain bridge (ipMasq) + host-local + portmap (hostPort) + bandwidth:
//!
//! * an ADD that finds the shared chains as they should be leaves them untouched (same rule
//!   handles: nothing flushed, nothing re-added), and still adds its own rules;
//! * a shared chain someone emptied or changed is rebuilt by the next ADD;
//! * DEL removes the pod's rules and, once it has returned, no plugin process (nor the child
//!   that closes its nf_tables socket after a grace period) is left running for long.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use netns_tests::{our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir};
use serde_json::json;

const MASQ_TABLE: &str = "cni_plugins_masquerade";
const PORTMAP_TABLE: &str = "cni_hostport";

fn tool_in(host: &Netns, conf: &ConfDir, cache: &TempDir) -> Cnitool {
    for p in ["bridge", "host-local", "portmap", "bandwidth", "cnitool"] {
        our_binary(p);
    }
    Cnitool::new(conf, vec![our_bin_dir()], cache.path())
        .in_netns(host)
        .env(
            "CAP_ARGS",
            r#"{"portMappings":[{"hostPort":18097,"containerPort":80,"protocol":"tcp"}]}"#,
        )
}

fn write_conflist(conf: &ConfDir, leases: &TempDir) {
    conf.write_json(
        "10-nfrel.conflist",
        &json!({
            "cniVersion": "1.0.0",
            "name": "nfrel",
            "plugins": [
                { "type": "bridge", "bridge": "cni-nfrel0", "isGateway": true, "ipMasq": true,
                  "ipam": { "type": "host-local", "dataDir": leases.path(),
                            "ranges": [[{ "subnet": "10.233.40.0/24" }]] } },
                { "type": "portmap", "capabilities": { "portMappings": true } },
                { "type": "bandwidth", "ingressRate": 10000000, "ingressBurst": 100000,
                  "egressRate": 20000000, "egressBurst": 200000 }
            ]
        }),
    );
}

/// `nft -a list chain ...` in `host`: each rule line (not the chain's own), and its handle.
fn rules(host: &Netns, family: &str, table: &str, chain: &str) -> Vec<(String, u64)> {
    let out = host.exec_ok(&["nft", "-a", "list", "chain", family, table, chain]);
    out.lines()
        .filter(|l| !l.trim_start().starts_with("chain "))
        .filter_map(|l| {
            let (rule, handle) = l.trim().rsplit_once(" # handle ")?;
            Some((rule.to_string(), handle.trim().parse().ok()?))
        })
        .collect()
}

fn handles(rules: &[(String, u64)]) -> Vec<u64> {
    rules.iter().map(|(_, h)| *h).collect()
}

/// The shared chains whose whole content the plugins own, with their rules.
fn owned_chains(host: &Netns) -> Vec<Vec<(String, u64)>> {
    vec![
        rules(host, "inet", MASQ_TABLE, "postrouting"),
        rules(host, "ip", PORTMAP_TABLE, "hostports_all"),
        rules(host, "ip", PORTMAP_TABLE, "prerouting"),
        rules(host, "ip", PORTMAP_TABLE, "output"),
    ]
}

/// Pids of processes running one of our plugin binaries.
fn our_processes() -> BTreeSet<u32> {
    let bins: Vec<std::path::PathBuf> = ["bridge", "portmap", "bandwidth", "host-local"]
        .iter()
        .filter_map(|b| our_bin_dir().join(b).canonicalize().ok())
        .collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let exe = std::fs::read_link(e.path().join("exe")).ok()?;
        bins.contains(&exe).then_some(pid)
    })
    .collect()
}

#[test]
fn an_add_finding_the_shared_chains_right_leaves_them_untouched() {
    require_root!();
    let host = Netns::new("nfrel-host");
    let pods: Vec<Netns> = (0..3).map(|_| Netns::new("nfrel-pod")).collect();
    let leases = TempDir::new("nfrel-leases");
    let cache = TempDir::new("nfrel-cache");
    let conf = ConfDir::new();
    write_conflist(&conf, &leases);
    let tool = tool_in(&host, &conf, &cache);

    tool.run_ok(&["add", "nfrel", pods[0].path_str()]);
    let first = owned_chains(&host);
    assert_eq!(first[0].len(), 3, "postrouting: {:?}", first[0]);
    assert_eq!(first[1].len(), 2, "hostports_all: {:?}", first[1]);

    tool.run_ok(&["add", "nfrel", pods[1].path_str()]);
    let second = owned_chains(&host);
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(
            handles(a),
            handles(b),
            "a shared chain was rebuilt: {a:?} -> {b:?}"
        );
    }
    let masq = rules(&host, "inet", MASQ_TABLE, "masq_checks");
    assert!(masq.len() >= 2, "one masquerade rule per pod: {masq:?}");
    let dnat = rules(&host, "ip", PORTMAP_TABLE, "hostports");
    assert_eq!(dnat.len(), 2, "one hostport rule per pod: {dnat:?}");

    // Emptied by hand: the next ADD rebuilds it with the same rules.
    host.exec_ok(&["nft", "flush", "chain", "inet", MASQ_TABLE, "postrouting"]);
    host.exec_ok(&[
        "nft",
        "flush",
        "chain",
        "ip",
        PORTMAP_TABLE,
        "hostports_all",
    ]);
    tool.run_ok(&["add", "nfrel", pods[2].path_str()]);
    let rebuilt = owned_chains(&host);
    let text = |c: &[(String, u64)]| c.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>();
    assert_eq!(text(&rebuilt[0]), text(&first[0]));
    assert_eq!(text(&rebuilt[1]), text(&first[1]));

    for p in &pods {
        tool.run_ok(&["del", "nfrel", p.path_str()]);
    }
    assert!(rules(&host, "inet", MASQ_TABLE, "masq_checks").is_empty());
    assert!(rules(&host, "ip", PORTMAP_TABLE, "hostports").is_empty());
    assert!(rules(&host, "ip", PORTMAP_TABLE, "masquerading").is_empty());
}

#[test]
fn nothing_of_a_del_keeps_running_after_it() {
    require_root!();
    let host = Netns::new("nfrel-host");
    let pod = Netns::new("nfrel-pod");
    let leases = TempDir::new("nfrel-leases");
    let cache = TempDir::new("nfrel-cache");
    let conf = ConfDir::new();
    write_conflist(&conf, &leases);
    let tool = tool_in(&host, &conf, &cache);

    tool.run_ok(&["add", "nfrel", pod.path_str()]);
    // DEL deletes rules: its plugins leave their sockets to a child that closes them after a
    // grace period. DEL's effect is complete when cnitool returns...
    tool.run_ok(&["del", "nfrel", pod.path_str()]);
    assert!(rules(&host, "inet", MASQ_TABLE, "masq_checks").is_empty());
    assert!(rules(&host, "ip", PORTMAP_TABLE, "hostports").is_empty());
    // ...and the children are gone within moments (a grace period is tens of milliseconds).
    // (Processes of tests running alongside may be in the snapshot: they end too.)
    let running = our_processes();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: BTreeSet<u32> = our_processes().intersection(&running).copied().collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "plugin processes still running 5 s after DEL: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
