//! The calls containerd's CRI makes, replayed against our chain without containerd (the
//! real containerd runs in `containerd_cri.rs`): capability args with Go's field names and
//! MaxUint32 bursts, containerd's CNI_ARGS, DEL twice — the second with an empty CNI_NETNS and
//! no prevResult, after the netns is gone — and the same after an ADD that failed half-way.
//! After the last DEL the "host" netns holds nothing of the pod: no veth, ifb, rule, lease,
//! firewall record or cache entry.

use std::path::Path;

use libcni::conf::{build_plugin_config, NetworkConfigList};
use netns_tests::{
    lease_files, our_bin_dir, our_binary, require_root, run_with_stdin, Cnitool, ConfDir, Netns,
    TempDir,
};
use serde_json::{json, Map, Value};

const NET: &str = "k8s-pod-network";
const SUBNET: &str = "10.231.40.0/24";

fn cap_args() -> Value {
    // What containerd 1.6 puts into CAP_ARGS for a pod with a hostPort and bandwidth
    // annotations (go-cni's PortMapping and BandWidth structs have no JSON tags).
    json!({
        "portMappings": [{"HostPort": 18080, "ContainerPort": 8080, "Protocol": "tcp", "HostIP": ""}],
        "bandwidth": {"IngressRate": 10_000_000, "IngressBurst": 4_294_967_295u64,
                      "EgressRate": 20_000_000, "EgressBurst": 4_294_967_295u64}
    })
}

fn cni_args(cid: &str) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-{cid};\
         K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=0b7e6c2e-{cid}"
    )
}

/// `records` holds the firewall's records and tuning's backups: both must be empty at the end.
fn conflist(leases: &TempDir, records: &TempDir, mut tuning: Value) -> Value {
    tuning["dataDir"] = json!(records.join("tuning"));
    json!({
        "cniVersion": "1.0.0",
        "name": NET,
        "plugins": [
            {"type": "bridge", "bridge": "cni-k8s0", "isGateway": true, "ipMasq": true,
             "hairpinMode": true,
             "ipam": {"type": "host-local", "dataDir": leases.path(),
                      "ranges": [[{"subnet": SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}},
            {"type": "firewall", "dataDir": records.path()},
            tuning
        ]
    })
}

struct Node {
    host: Netns,
    leases: TempDir,
    records: TempDir,
    cache: TempDir,
    conf: ConfDir,
}

impl Node {
    fn new(tag: &str, tuning: Value) -> Node {
        for p in [
            "bridge",
            "host-local",
            "portmap",
            "bandwidth",
            "firewall",
            "tuning",
            "cnitool",
        ] {
            our_binary(p);
        }
        let node = Node {
            host: Netns::new(&format!("{tag}-host")),
            leases: TempDir::new(&format!("{tag}-leases")),
            records: TempDir::new(&format!("{tag}-records")),
            cache: TempDir::new(&format!("{tag}-cache")),
            conf: ConfDir::new(),
        };
        node.conf.write_json(
            "10-k8s.conflist",
            &conflist(&node.leases, &node.records, tuning),
        );
        node
    }

    fn cnitool(&self, cid: &str) -> Cnitool {
        Cnitool::new(&self.conf, vec![our_bin_dir()], self.cache.path())
            .in_netns(&self.host)
            .env("CAP_ARGS", &cap_args().to_string())
            .env("CNI_ARGS", &cni_args(cid))
    }

    /// DEL as containerd's RemovePodSandbox sends it once the netns is gone: every plugin in
    /// reverse order, CNI_NETNS empty, no prevResult, the capability args again.
    fn del_without_netns(&self, cid: &str) {
        let text = std::fs::read(self.conf.path().join("10-k8s.conflist")).unwrap();
        let list = NetworkConfigList::from_bytes(&text).unwrap();
        let caps = cap_args().as_object().cloned().unwrap_or_default();
        for plugin in list.plugins.iter().rev() {
            let config: Map<String, Value> =
                build_plugin_config(&list, plugin, None, Some(&caps)).unwrap();
            let bin = our_binary(&plugin.plugin_type);
            let mut cmd = self.host.command(&[bin.to_str().unwrap()]);
            cmd.env("CNI_COMMAND", "DEL")
                .env("CNI_CONTAINERID", cid)
                .env("CNI_NETNS", "")
                .env("CNI_IFNAME", "eth0")
                .env("CNI_ARGS", cni_args(cid))
                .env("CNI_PATH", our_bin_dir());
            let out = run_with_stdin(&mut cmd, Value::Object(config).to_string().as_bytes());
            assert!(
                out.status.success(),
                "DEL without netns of {} failed: {}{}",
                plugin.plugin_type,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Everything in the host netns and on disk that could belong to a pod.
    fn leftovers(&self, ip: &str, cid: &str) -> Vec<String> {
        let mut left = Vec::new();
        let links = self.host.exec_ok(&["ip", "-o", "link", "show"]);
        for line in links.lines() {
            let name = line
                .split(": ")
                .nth(1)
                .unwrap_or("")
                .split('@')
                .next()
                .unwrap_or("");
            if name.starts_with("veth") || name.starts_with("bwp") {
                left.push(format!("link {name}"));
            }
        }
        let rules = self.host.exec_ok(&["iptables-save"])
            + &self.host.exec_ok(&["ip6tables-save"])
            + &self.host.exec_ok(&["nft", "list", "ruleset"]);
        for line in rules.lines() {
            if line.contains(ip) || line.contains(cid) || line.contains(":CNI-DN-") {
                left.push(format!("rule {line}"));
            }
        }
        let leases = lease_files(&self.leases.join(NET));
        left.extend(leases.into_iter().map(|l| format!("lease {l}")));
        left.extend(
            files_under(self.records.path())
                .into_iter()
                .map(|f| format!("record {f}")),
        );
        left.extend(
            files_under(&self.cache.join("results"))
                .into_iter()
                .map(|f| format!("cache {f}")),
        );
        left
    }
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            out.extend(files_under(&entry.path()));
        } else {
            out.push(entry.path().display().to_string());
        }
    }
    out
}

fn pod_ip(node: &Node) -> Option<String> {
    lease_files(&node.leases.join(NET)).into_iter().next()
}

#[test]
fn stop_then_remove_after_a_successful_add() {
    require_root!();
    let node = Node::new(
        "k8s-ok",
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}}),
    );
    let pod = Netns::new("k8s-ok-pod");
    let cid = Cnitool::container_id(pod.path_str());
    let tool = node.cnitool(&cid);
    let result: Value = serde_json::from_str(&tool.run_ok(&["add", NET, pod.path_str()])).unwrap();
    let ip = pod_ip(&node).expect("a lease");

    // The capitalised capability args took effect: DNAT for the hostPort, shaping both ways.
    let nat = node.host.exec_ok(&["iptables-save", "-t", "nat"])
        + &node.host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(nat.contains("18080"), "no hostPort rule:\n{nat}");
    let ifbs = node
        .host
        .exec_ok(&["ip", "-o", "link", "show", "type", "ifb"]);
    let ifb = ifbs
        .lines()
        .find_map(|l| l.split(": ").nth(1).filter(|n| n.starts_with("bwp")))
        .unwrap_or_else(|| panic!("no ifb: {ifbs}"))
        .to_string();
    let egress = node.host.exec_ok(&["tc", "qdisc", "show", "dev", &ifb]);
    assert!(egress.contains("rate 20Mbit"), "{egress}");
    let host_veth = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i.get("sandbox").is_none() && i["name"].as_str().unwrap().starts_with("veth"))
        .and_then(|i| i["name"].as_str())
        .unwrap()
        .to_string();
    let ingress = node
        .host
        .exec_ok(&["tc", "qdisc", "show", "dev", &host_veth]);
    assert!(
        ingress.contains("rate 10Mbit") && ingress.contains("burst 193273526b"),
        "containerd's MaxUint32 burst must give the reference's qdisc: {ingress}"
    );

    // StopPodSandbox: DEL with the netns and the cached result.
    tool.run_ok(&["del", NET, pod.path_str()]);
    drop(pod);
    // RemovePodSandbox: DEL again, empty CNI_NETNS, nothing cached.
    node.del_without_netns(&cid);
    let left = node.leftovers(&ip, &cid);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

#[test]
fn teardown_after_an_add_that_failed_half_way() {
    require_root!();
    // tuning, last in the chain, fails: bridge, IPAM, portmap, bandwidth and firewall have
    // done their work and nothing is cached.
    let node = Node::new(
        "k8s-fail",
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.no_such_sysctl": "1"}}),
    );
    let pod = Netns::new("k8s-fail-pod");
    let cid = Cnitool::container_id(pod.path_str());
    let tool = node.cnitool(&cid);
    let out = tool.run(&["add", NET, pod.path_str()]);
    assert!(!out.status.success(), "the tuning step was meant to fail");
    let ip = pod_ip(&node).expect("IPAM ran before tuning failed");
    let records = files_under(node.records.path());
    assert_eq!(records.len(), 1, "firewall ran before tuning failed");

    // containerd tears the network down (netns still there, no cached result) ...
    tool.run_ok(&["del", NET, pod.path_str()]);
    drop(pod);
    // ... and RemovePodSandbox of the NOTREADY sandbox deletes it again without a netns.
    node.del_without_netns(&cid);
    let left = node.leftovers(&ip, &cid);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

#[test]
fn remove_without_netns_is_enough_on_its_own() {
    require_root!();
    // A runtime that never got to StopPodSandbox: the netns is gone (the kernel took the veth
    // with it) and the only DEL has no netns and no prevResult.
    let node = Node::new("k8s-gone", json!({"type": "tuning", "mtu": 1400}));
    let pod = Netns::new("k8s-gone-pod");
    let cid = Cnitool::container_id(pod.path_str());
    let tool = node.cnitool(&cid);
    tool.run_ok(&["add", NET, pod.path_str()]);
    let ip = pod_ip(&node).expect("a lease");
    drop(pod);
    node.del_without_netns(&cid);
    let mut left = node.leftovers(&ip, &cid);
    // The cache entry is the runtime's to drop (cnitool never ran a DEL here).
    left.retain(|l| !l.starts_with("cache "));
    assert!(left.is_empty(), "left behind: {left:#?}");
}
