//! Kubernetes' own path to the suite: kubelet → containerd's CRI → libcni → our binaries.
//!
//! A private containerd 1.6 ([`netns_tests::containerd::CriNode`]: own config, root, state,
//! socket, runc root, CNI bin and conf dirs under a temp dir; run in a throw-away netns + mount
//! namespace) runs pod sandboxes through the CRI exactly as kubelet asks for them, with our
//! project's CRI client. Each test checks real outcomes: addresses, pings, a hostPort answering,
//! tbf qdiscs, and that nothing is left after StopPodSandbox + RemovePodSandbox.
//!
//! `FERROCNI_CRI_PLUGINS=reference` runs every test on the reference Go plugins instead (the
//! harness's own check); `FERROCNI_CRI_CYCLES` sets the run/stop/remove cycle count (20).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use netns_tests::cluster::{nth, wait_until};
use netns_tests::containerd::{self, CriNode, Pod, POD_HTTP_PORT, POD_SOMAXCONN};
use netns_tests::cri::{PodSandboxConfig, PodSandboxState, PortMapping, Protocol};
use netns_tests::{our_binary, reference_plugin_dir, require_root, skip_unless, ENGINE_PLUGINS};
use serde_json::{json, Value};

const POD_NET: &str = "k8s-pod-network";
const POD_SUBNET: &str = "10.233.0.0/16";
/// A second network, alphabetically after the first: containerd must not use it.
const OTHER_NET: &str = "other-network";
const OTHER_SUBNET: &str = "10.234.0.0/24";
const HOST_PORT: i32 = 18080;

fn pod_conflist() -> Value {
    containerd::pod_network_conflist(POD_NET, POD_SUBNET)
}

fn other_conflist() -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": OTHER_NET,
        "plugins": [{
            "type": "bridge", "bridge": "cni1", "isGateway": true,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": OTHER_SUBNET}]]}
        }]
    })
}

fn gateway() -> String {
    nth(POD_SUBNET, 1).to_string()
}

/// Which plugins a node runs: ours, or the reference with `FERROCNI_CRI_PLUGINS=reference`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Suite {
    Ours,
    Reference,
}

fn suite_under_test() -> Suite {
    match std::env::var("FERROCNI_CRI_PLUGINS").as_deref() {
        Ok("reference") => Suite::Reference,
        _ => Suite::Ours,
    }
}

fn plugin_dir(suite: Suite) -> Option<PathBuf> {
    match suite {
        Suite::Reference => reference_plugin_dir(ENGINE_PLUGINS),
        Suite::Ours => {
            let dirs: Vec<PathBuf> = ENGINE_PLUGINS
                .iter()
                .map(|p| {
                    our_binary(p)
                        .parent()
                        .map(PathBuf::from)
                        .unwrap_or_default()
                })
                .collect();
            dirs.windows(2)
                .all(|w| w[0] == w[1])
                .then(|| dirs[0].clone())
        }
    }
}

/// A node with an empty conf dir, or `None` (after printing why) when it cannot run here.
fn node(suite: Suite) -> Option<CriNode> {
    if let Some(why) = containerd::missing_tools() {
        eprintln!("containerd node unavailable: {why}");
        return None;
    }
    let dir = plugin_dir(suite)?;
    eprintln!(
        "containerd node on the {suite:?} plugins ({})",
        dir.display()
    );
    Some(CriNode::start(&dir))
}

/// A node whose conf dir holds the pod network, NetworkReady.
fn ready_node(suite: Suite) -> Option<CriNode> {
    let mut node = node(suite)?;
    node.write_conflist("10-pods.conflist", &pod_conflist());
    assert!(
        node.wait_network_ready(true, Duration::from_secs(15)),
        "NetworkReady stayed false after writing the conflist:\n{}",
        node.log_tail(20)
    );
    Some(node)
}

/// RunPodSandbox of `config`, panicking with containerd's log on failure.
fn run_pod(node: &mut CriNode, config: PodSandboxConfig) -> Pod {
    let name = config.metadata.as_ref().map(|m| m.name.clone());
    match node.run_pod(config) {
        Ok(pod) => {
            assert!(pod.pid > 0, "no sandbox pid for {pod:?}");
            pod
        }
        Err(e) => panic!("RunPodSandbox {name:?} failed: {e}\n{}", node.log_tail(15)),
    }
}

/// Plain pods named `names`, run one after the other.
fn run_pods(node: &mut CriNode, names: &[&str]) -> Vec<Pod> {
    names
        .iter()
        .map(|name| {
            let config = node.pod_config(name);
            run_pod(node, config)
        })
        .collect()
}

/// ListPodSandbox reports every pod of `pods` READY.
fn assert_ready(node: &mut CriNode, pods: &[Pod]) {
    let states = sandbox_states(node);
    for pod in pods {
        assert_eq!(
            states.get(&pod.id),
            Some(&(PodSandboxState::SandboxReady as i32)),
            "{}: {states:?}",
            pod.name
        );
    }
}

fn stop_and_remove(node: &mut CriNode, pod: &Pod) {
    if let Err(e) = node.stop_and_remove(&pod.id) {
        panic!(
            "StopPodSandbox/RemovePodSandbox {} failed: {e}\n{}",
            pod.name,
            node.log_tail(15)
        );
    }
}

fn in_pod_subnet(ip: &str) -> bool {
    let Ok(ip) = ip.parse::<std::net::Ipv4Addr>() else {
        return false;
    };
    let (net, len) = netns_tests::cluster::parse_cidr(POD_SUBNET);
    u32::from(ip) >> (32 - len) == u32::from(net) >> (32 - len)
}

fn ping(node: &CriNode, from: &Pod, ip: &str) -> bool {
    node.pod_exec(from, &["ping", "-n", "-q", "-c", "1", "-W", "2", ip])
        .status
        .success()
}

/// `wget` of the sandbox's hostname CGI at `ip:port`, from the node (`None`) or a pod.
fn who_answers(node: &CriNode, from: Option<&Pod>, ip: &str, port: u16) -> Option<String> {
    let url = format!("http://{ip}:{port}/cgi-bin/hostname");
    // (busybox 1.35's wget crashes on -T: the timeout comes from `timeout`.)
    let argv = [
        "timeout",
        "10",
        "busybox",
        "wget",
        "-q",
        "-O",
        "-",
        url.as_str(),
    ];
    let out = match from {
        Some(pod) => node.pod_exec(pod, &argv),
        None => node.host().exec(&argv),
    };
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Nothing of `pod` is left on the node: host veth (only `others` remain), ifb, lease, libcni
/// cache entries, firewall rules and portmap chains, its netns file.
fn assert_pod_gone(node: &CriNode, pod: &Pod, others: usize) {
    assert!(!pod.ip.is_empty(), "{pod:?} never had an address");
    node.host()
        .assert_attachment_gone(POD_NET, &pod.ip, &pod.id, others);
    let netns_files = std::fs::read_dir(node.netns_dir())
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(
        netns_files,
        others,
        "netns files left in {:?}",
        node.netns_dir()
    );
    // Our firewall's record of the attachment (the reference keeps none).
    let records = node
        .host()
        .private_files(&format!("/run/cni/firewall/{POD_NET}"));
    assert!(
        !records.iter().any(|r| r.contains(&pod.id)),
        "firewall records left: {records:?}"
    );
    // And nothing of it ever reached the real host's libcni cache.
    let real_cache: Vec<String> = std::fs::read_dir("/var/lib/cni/results")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&pod.id))
                .collect()
        })
        .unwrap_or_default();
    assert!(real_cache.is_empty(), "on the real host: {real_cache:?}");
}

/// The node's state that must come back to the same after a pod's life: links, firewall
/// (counters dropped), leases, libcni cache, netns files.
fn node_state(node: &CriNode) -> Value {
    let mut links = node.host().link_names();
    links.sort();
    let firewall: Vec<String> = node
        .host()
        .firewall_dump()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(without_counters)
        .collect();
    let mut cache = node.host().private_files("/var/lib/cni/results");
    cache.sort();
    let leases = netns_tests::lease_files(
        &node
            .host()
            .private_path(&format!("/var/lib/cni/networks/{POD_NET}")),
    );
    let netns: Vec<String> = std::fs::read_dir(node.netns_dir())
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut records = node
        .host()
        .private_files(&format!("/run/cni/firewall/{POD_NET}"));
    records.sort();
    json!({
        "links": links, "firewall": firewall, "cache": cache, "leases": leases, "netns": netns,
        "firewall_records": records,
    })
}

/// An iptables-save / nft line without its packet and byte counters.
fn without_counters(line: &str) -> String {
    let mut out = Vec::new();
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "packets" || w == "bytes" {
            words.next();
            continue;
        }
        if w.starts_with('[') && w.ends_with(']') && w.contains(':') {
            continue;
        }
        out.push(w);
    }
    out.join(" ")
}

fn sandbox_states(node: &mut CriNode) -> HashMap<String, i32> {
    node.cri()
        .list_pod_sandbox(None)
        .expect("ListPodSandbox")
        .into_iter()
        .map(|p| (p.id, p.state))
        .collect()
}

/// The annotations kubelet copies from a pod that limits its bandwidth (`10M` = 10 Mbit/s).
fn limit_bandwidth(config: &mut PodSandboxConfig, ingress: &str, egress: &str) {
    for (key, value) in [
        ("kubernetes.io/ingress-bandwidth", ingress),
        ("kubernetes.io/egress-bandwidth", egress),
    ] {
        config.annotations.insert(key.into(), value.into());
    }
}

fn port_mapping(host_port: i32, container_port: u16) -> PortMapping {
    PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: i32::from(container_port),
        host_port,
        host_ip: String::new(),
    }
}

#[test]
fn network_ready_follows_the_conf_dir_and_the_first_conflist_is_used() {
    require_root!();
    let mut node = skip_unless!(node(suite_under_test()), "containerd node unavailable");
    let version = node.cri().version().expect("Version");
    assert_eq!(version.runtime_name, "containerd");
    assert_eq!(version.runtime_api_version, "v1");

    // An empty conf dir: the runtime is up, the network is not.
    let condition = node
        .cri()
        .network_ready()
        .expect("Status")
        .expect("a NetworkReady condition");
    assert!(!condition.status, "NetworkReady on an empty conf dir");
    assert!(
        condition.message.contains("cni"),
        "NetworkReady false without a reason: {condition:?}"
    );

    // The second network alone is loaded ...
    node.write_conflist("20-other.conflist", &other_conflist());
    assert!(
        node.wait_network_ready(true, Duration::from_secs(15)),
        "NetworkReady stayed false:\n{}",
        node.log_tail(20)
    );
    assert!(
        wait_until(Duration::from_secs(10), || node
            .loaded_networks()
            .contains(&OTHER_NET.to_string())),
        "{OTHER_NET} not loaded: {:?}",
        node.loaded_networks()
    );
    // ... and replaced by the alphabetically-first file once that one is written.
    node.write_conflist("10-pods.conflist", &pod_conflist());
    assert!(
        wait_until(Duration::from_secs(10), || node.loaded_networks()
            == ["cni-loopback", POD_NET]),
        "loaded networks: {:?}",
        node.loaded_networks()
    );

    let config = node.pod_config("first");
    let pod = run_pod(&mut node, config);
    assert!(in_pod_subnet(&pod.ip), "{pod:?} not in {POD_SUBNET}");
    let links = node.host().link_names();
    assert!(
        links.contains(&"cni0".to_string()) && !links.contains(&"cni1".to_string()),
        "{links:?}"
    );
    assert!(
        ping(&node, &pod, &gateway()),
        "pod cannot reach its gateway"
    );
    stop_and_remove(&mut node, &pod);
    assert_pod_gone(&node, &pod, 0);
}

#[test]
fn three_pods_ping_each_other_and_stop_remove_leaves_nothing() {
    require_root!();
    let suite = suite_under_test();
    let mut node = skip_unless!(ready_node(suite), "containerd node unavailable");
    let pods = run_pods(&mut node, &["alpha", "beta", "gamma"]);
    let ips: Vec<&str> = pods.iter().map(|p| p.ip.as_str()).collect();
    assert!(ips.iter().all(|ip| in_pod_subnet(ip)), "{ips:?}");
    assert!(
        ips[0] != ips[1] && ips[1] != ips[2] && ips[0] != ips[2],
        "{ips:?}"
    );
    if suite == Suite::Ours {
        // Our firewall records each attachment (what lets a DEL without prevResult clean up);
        // assert_pod_gone checks that the records go with the pods.
        let records = node
            .host()
            .private_files(&format!("/run/cni/firewall/{POD_NET}"));
        assert_eq!(records.len(), pods.len(), "{records:?}");
    }
    assert_ready(&mut node, &pods);
    for pod in &pods {
        // containerd ran loopback as its own network; tuning ran in the chain.
        node.pod_exec_ok(
            pod,
            &["ping", "-n", "-q", "-c", "1", "-W", "2", "127.0.0.1"],
        );
        let eth0 = node.pod_exec_ok(pod, &["ip", "-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(eth0.contains(&format!("{}/16", pod.ip)), "{eth0}");
        assert_eq!(
            node.pod_exec_ok(pod, &["sysctl", "-n", "net.core.somaxconn"]),
            POD_SOMAXCONN
        );
    }
    for from in &pods {
        for to in &pods {
            if from.id != to.id {
                assert!(
                    ping(&node, from, &to.ip),
                    "{} cannot ping {}",
                    from.name,
                    to.name
                );
            }
        }
        assert!(ping(&node, from, &gateway()), "{} -> gateway", from.name);
    }
    // The node reaches every pod's own httpd directly.
    for pod in &pods {
        assert_eq!(
            who_answers(&node, None, &pod.ip, POD_HTTP_PORT).as_deref(),
            Some(pod.name.as_str())
        );
    }

    for (done, pod) in pods.iter().enumerate() {
        // StopPodSandbox alone tears the network down (kubelet's first DEL) ...
        if let Err(e) = node.cri().stop_pod_sandbox(&pod.id) {
            panic!("StopPodSandbox: {e}\n{}", node.log_tail(15));
        }
        let left = pods.len() - done - 1;
        node.host()
            .assert_attachment_gone(POD_NET, &pod.ip, &pod.id, left);
        // ... and the pods still running are untouched by it.
        for other in &pods[done + 1..] {
            assert!(
                ping(&node, other, &gateway()),
                "{} lost its network",
                other.name
            );
        }
        // RemovePodSandbox (DEL again, with no netns) succeeds and leaves nothing either.
        if let Err(e) = node.cri().remove_pod_sandbox(&pod.id) {
            panic!("RemovePodSandbox: {e}\n{}", node.log_tail(15));
        }
        assert_pod_gone(&node, pod, left);
    }
    assert!(sandbox_states(&mut node).is_empty());
}

#[test]
fn host_port_answers_on_localhost_and_from_another_pod() {
    require_root!();
    let mut node = skip_unless!(
        ready_node(suite_under_test()),
        "containerd node unavailable"
    );
    let mut config = node.pod_config("web");
    config
        .port_mappings
        .push(port_mapping(HOST_PORT, POD_HTTP_PORT));
    let web = run_pod(&mut node, config);
    let config = node.pod_config("client");
    let client = run_pod(&mut node, config);
    let port = HOST_PORT as u16;

    assert_eq!(
        who_answers(&node, None, "127.0.0.1", port).as_deref(),
        Some("web"),
        "hostPort on the node's 127.0.0.1"
    );
    assert_eq!(
        who_answers(&node, Some(&client), &gateway(), port).as_deref(),
        Some("web"),
        "hostPort from another pod"
    );
    assert_eq!(
        who_answers(&node, Some(&web), &gateway(), port).as_deref(),
        Some("web"),
        "hostPort from the pod itself (hairpin)"
    );
    let rules = node.host().firewall_dump();
    assert!(
        // iptables `--to-destination IP:80`, nftables `dnat to IP:80`.
        rules.contains(&format!("{}:{POD_HTTP_PORT}", web.ip)),
        "no DNAT to the pod:\n{rules}"
    );

    stop_and_remove(&mut node, &web);
    assert_pod_gone(&node, &web, 1);
    assert_eq!(
        who_answers(&node, None, "127.0.0.1", port),
        None,
        "the hostPort still answers after the pod is gone"
    );
    stop_and_remove(&mut node, &client);
    assert_pod_gone(&node, &client, 0);
}

/// The tbf a bandwidth-annotated pod gets on its host veth (ingress limit) and on its ifb
/// (egress limit), with device names left out.
fn shaping_of(node: &mut CriNode, suite: Suite) -> Value {
    let mut config = node.pod_config("shaped");
    limit_bandwidth(&mut config, "10M", "20M");
    let pod = run_pod(node, config);
    let eth0: Value =
        serde_json::from_str(&node.pod_exec_ok(&pod, &["ip", "-j", "link", "show", "dev", "eth0"]))
            .expect("ip -j link");
    let peer = eth0[0]["link_index"].as_u64().expect("eth0's peer index");
    let links: Value =
        serde_json::from_str(&node.host().exec_ok(&["ip", "-j", "-d", "link", "show"]))
            .expect("ip -j link");
    let links = links.as_array().cloned().unwrap_or_default();
    let name_of = |pred: &dyn Fn(&Value) -> bool| -> Vec<String> {
        links
            .iter()
            .filter(|l| pred(l))
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect()
    };
    let veth = name_of(&|l| l["ifindex"].as_u64() == Some(peer));
    let ifbs = name_of(&|l| l["linkinfo"]["info_kind"] == "ifb");
    assert_eq!(veth.len(), 1, "host veth of {pod:?}: {links:?}");
    assert_eq!(ifbs.len(), 1, "{suite:?}: one ifb expected: {ifbs:?}");
    let tbf = |dev: &str| -> Value {
        let qdiscs: Value = serde_json::from_str(
            &node
                .host()
                .exec_ok(&["tc", "-j", "qdisc", "show", "dev", dev]),
        )
        .expect("tc -j qdisc");
        qdiscs
            .as_array()
            .into_iter()
            .flatten()
            .find(|q| q["kind"] == "tbf")
            .map(|q| json!({"parent": q["parent"], "options": q["options"]}))
            .unwrap_or_else(|| panic!("{suite:?}: no tbf on {dev}: {qdiscs}"))
    };
    let shaping = json!({"veth": tbf(&veth[0]), "ifb": tbf(&ifbs[0])});
    eprintln!("{suite:?} shaping for 10M/20M annotations: {shaping}");
    stop_and_remove(node, &pod);
    assert_pod_gone(node, &pod, 0);
    shaping
}

#[test]
fn bandwidth_annotations_shape_both_sides_as_the_reference_does() {
    require_root!();
    let suite = suite_under_test();
    let mut node = skip_unless!(ready_node(suite), "containerd node unavailable");
    let ours = shaping_of(&mut node, suite);
    drop(node);
    // tc prints rates in bytes per second.
    assert_eq!(ours["veth"]["options"]["rate"], 10_000_000 / 8, "{ours}");
    assert_eq!(ours["ifb"]["options"]["rate"], 20_000_000 / 8, "{ours}");
    if suite == Suite::Reference {
        return;
    }
    let mut reference = skip_unless!(
        ready_node(Suite::Reference),
        "reference plugins unavailable"
    );
    let theirs = shaping_of(&mut reference, Suite::Reference);
    assert_eq!(
        ours, theirs,
        "ours vs the reference's tbf for the same annotations"
    );
}

#[test]
fn pods_survive_a_containerd_restart() {
    require_root!();
    let mut node = skip_unless!(
        ready_node(suite_under_test()),
        "containerd node unavailable"
    );
    let pods = run_pods(&mut node, &["left", "right"]);
    assert!(ping(&node, &pods[0], &pods[1].ip));

    node.kill_containerd();
    assert!(
        ping(&node, &pods[0], &pods[1].ip),
        "pods lost their network with containerd down"
    );
    node.start_containerd();
    assert_ready(&mut node, &pods);
    for pod in &pods {
        let again = node.pod(&pod.id, &pod.name).expect("PodSandboxStatus");
        assert_eq!(again.ip, pod.ip, "containerd forgot {}'s address", pod.name);
    }
    assert!(
        wait_until(Duration::from_secs(10), || node
            .wait_network_ready(true, Duration::from_secs(1))),
        "NetworkReady false after the restart"
    );
    assert!(ping(&node, &pods[1], &pods[0].ip));
    // A new pod joins the same bridge after the restart.
    let config = node.pod_config("late");
    let late = run_pod(&mut node, config);
    assert!(ping(&node, &late, &pods[0].ip) && ping(&node, &pods[1], &late.ip));

    let all = [pods[0].clone(), pods[1].clone(), late];
    for (done, pod) in all.iter().enumerate() {
        stop_and_remove(&mut node, pod);
        assert_pod_gone(&node, pod, all.len() - done - 1);
    }
    assert!(sandbox_states(&mut node).is_empty());
}

#[test]
fn run_stop_remove_cycles_leak_nothing() {
    require_root!();
    let cycles: usize = std::env::var("FERROCNI_CRI_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(20);
    let mut node = skip_unless!(
        ready_node(suite_under_test()),
        "containerd node unavailable"
    );
    // Every cycle's pod uses every plugin: a hostPort and both bandwidth annotations.
    let full_pod = |node: &mut CriNode, name: &str| {
        let mut config = node.pod_config(name);
        config
            .port_mappings
            .push(port_mapping(HOST_PORT, POD_HTTP_PORT));
        limit_bandwidth(&mut config, "50M", "50M");
        config
    };
    // The first pod creates the node's lasting objects (bridge, top-level chains).
    let config = full_pod(&mut node, "warmup");
    let warmup = run_pod(&mut node, config);
    stop_and_remove(&mut node, &warmup);
    let baseline = node_state(&node);

    let start = Instant::now();
    let mut addresses = Vec::new();
    for i in 0..cycles {
        let config = full_pod(&mut node, &format!("cycle{i}"));
        let pod = run_pod(&mut node, config);
        assert!(ping(&node, &pod, &gateway()), "cycle {i}: no network");
        assert_eq!(
            who_answers(&node, None, "127.0.0.1", HOST_PORT as u16).as_deref(),
            Some(pod.name.as_str()),
            "cycle {i}: hostPort"
        );
        addresses.push(pod.ip.clone());
        stop_and_remove(&mut node, &pod);
        assert_pod_gone(&node, &pod, 0);
    }
    eprintln!(
        "{cycles} run/stop/remove cycles in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        node_state(&node),
        baseline,
        "the node changed over {cycles} cycles"
    );
    assert!(sandbox_states(&mut node).is_empty());
    // host-local hands out the next address each time (its round-robin survived the cycles).
    addresses.dedup();
    assert_eq!(addresses.len(), cycles, "{addresses:?}");
}

#[test]
fn a_failed_run_pod_sandbox_leaves_nothing() {
    require_root!();
    let suite = suite_under_test();
    let mut node = skip_unless!(node(suite), "containerd node unavailable");
    // tuning fails half-way through the chain: bridge, host-local, portmap and firewall have
    // run, and containerd's DEL of the failed ADD must take all of it back.
    let mut conflist = pod_conflist();
    conflist["plugins"][3]["sysctl"] = json!({"net.ipv4.conf.eth0.ferrocni_no_such_sysctl": "1"});
    node.write_conflist("10-pods.conflist", &conflist);
    assert!(node.wait_network_ready(true, Duration::from_secs(15)));
    let mut config = node.pod_config("doomed");
    config
        .port_mappings
        .push(port_mapping(HOST_PORT, POD_HTTP_PORT));
    limit_bandwidth(&mut config, "10M", "10M");
    let failure = node
        .run_pod(config)
        .expect_err("RunPodSandbox succeeded despite tuning's error");
    assert!(failure.to_string().contains("tuning"), "{failure}");
    // Whatever sandbox the failure left behind, kubelet removes it.
    for sandbox in node.cri().list_pod_sandbox(None).expect("ListPodSandbox") {
        eprintln!(
            "left after the failure: {} state {}",
            sandbox.id, sandbox.state
        );
        if let Err(e) = node.stop_and_remove(&sandbox.id) {
            panic!("removing the failed sandbox: {e}\n{}", node.log_tail(15));
        }
    }
    let state = node_state(&node);
    let pod_links = node
        .host()
        .link_names()
        .into_iter()
        .filter(|l| l.starts_with("veth") || l.starts_with("bwp"))
        .count();
    assert_eq!(pod_links, 0, "{state}");
    assert_eq!(state["leases"], json!([]), "{state}");
    assert_eq!(state["cache"], json!([]), "{state}");
    assert_eq!(state["netns"], json!([]), "{state}");
    assert_eq!(state["firewall_records"], json!([]), "{state}");
    let rules = node.host().firewall_dump();
    let mut left: Vec<&str> = rules
        .lines()
        .filter(|l| l.contains("CNI-DN-") || l.contains("10.233."))
        .collect();
    if suite == Suite::Reference {
        // The reference firewall plugin finds its rules by the prevResult's addresses only, and
        // a failed ADD caches none: its accept rules for the pod stay behind.
        eprintln!("reference firewall rules left after the failed ADD: {left:#?}");
        left.retain(|l| !l.contains("accept") && !l.contains("CNI-FORWARD"));
    }
    assert!(left.is_empty(), "rules left by the failed pod: {left:#?}");
}
