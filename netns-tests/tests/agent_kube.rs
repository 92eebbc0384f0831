//! The agent in Kubernetes mode (`--kube-subnet-mgr`) on a real control plane: etcd,
//! kube-apiserver and kube-controller-manager (which assigns the podCIDRs) built from Debian's
//! source package, three nodes registered as the kubelet registers them, each agent
//! authenticated with the shipped manifest's service account. Pods ping across nodes; the
//! Node objects carry flanneld's annotations; a deleted node is forgotten, removed
//! annotations come back, and an agent restart, an apiserver restart and an expired watch
//! (410 Gone) each lose nothing.

use std::process::Command;

use netns_tests::agent_cluster::require_tools;
use netns_tests::cluster::{assert_ping, http_get, ping, wait_until, CONVERGE};
use netns_tests::kube::KubeOptions;
use netns_tests::kube_cluster::{node_name, KubeCluster, METRICS_PORT, PREFIX};
use netns_tests::{kernel_has, require_driver, require_root};

fn net_conf(backend: &str) -> String {
    format!(r#"{{"Network":"10.244.0.0/16","Backend":{{"Type":"{backend}"}}}}"#)
}

/// Every node carries flanneld's annotations for its lease, and NetworkUnavailable=False.
fn assert_flanneld_annotations(c: &KubeCluster, backend: &str) {
    for (i, node) in c.nodes.iter().enumerate() {
        assert_eq!(
            c.annotation(i, "kube-subnet-manager").as_deref(),
            Some("true")
        );
        assert_eq!(c.annotation(i, "backend-type").as_deref(), Some(backend));
        assert_eq!(c.annotation(i, "public-ip"), Some(node.ip.clone()));
        let data = c.annotation(i, "backend-data").expect("backend-data");
        serde_json::from_str::<serde_json::Value>(&data).expect("backend-data is JSON");
        let json = c.control.node_json(&node_name(node.index)).expect("node");
        let conditions = json["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let unavailable = conditions
            .iter()
            .find(|c| c["type"] == "NetworkUnavailable")
            .unwrap_or_else(|| panic!("node {}: no NetworkUnavailable condition", node.index));
        assert_eq!(unavailable["status"], "False");
        assert_eq!(unavailable["reason"], "FlannelIsUp");
    }
}

/// Nodes written straight into the API with flanneld's annotations, each breaking one rule:
/// a podCIDR outside the network, another node's podCIDR, a pod address as public IP. Every
/// agent refuses each (a log line naming why) and programs none.
fn rogue_nodes_are_refused(c: &KubeCluster) {
    let taken = c.subnets[1].clone();
    let rogues = [
        ("rogue-outside", "10.99.0.0/24", "172.31.250.40", "outside"),
        ("rogue-overlap", taken.as_str(), "172.31.250.41", "held by"),
        (
            "rogue-pod-ip",
            "10.244.200.0/24",
            "10.244.1.7",
            "10.244.1.7",
        ),
    ];
    for (name, cidr, ip, _) in &rogues {
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {
                format!("{PREFIX}/kube-subnet-manager"): "true",
                format!("{PREFIX}/backend-type"): "vxlan",
                format!("{PREFIX}/backend-data"): r#"{"VNI":1,"VtepMAC":"0e:00:00:00:00:99"}"#,
                format!("{PREFIX}/public-ip"): ip,
            }},
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        });
        c.control.kubectl_apply(&node.to_string());
    }
    for (i, agent) in c.agents.iter().enumerate() {
        for (_, cidr, _, why) in &rogues {
            let key = cidr.replace('/', "-");
            c.wait(
                &format!(
                    "node {} did not refuse {cidr} ({why}):\n{}",
                    i + 1,
                    agent.log()
                ),
                || {
                    agent.log().lines().any(|l| {
                        l.contains(&format!("lease {key} is not programmed")) && l.contains(why)
                    }) || (*why == "held by" && agent.log().contains("held by node"))
                },
            );
        }
        assert!(!routes_to(c, i, "10.99.0.0/24"));
        assert!(!routes_to(c, i, "10.244.200.0/24"));
        // Counted as etcd leases are, once each (a Node is updated for other reasons too):
        // a subnet outside the network, an overlap, a public IP that is a pod's.
        let metrics = http_get(&c.nodes[i].ns, METRICS_PORT, "/metrics").expect("metrics");
        let refused = |reason: &str| -> u64 {
            let name = format!("ferrocni_agent_leases_refused_total{{reason=\"{reason}\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name.as_str())?.parse().ok())
                .unwrap_or(0)
        };
        for reason in ["subnet", "overlap", "public_ip"] {
            assert_eq!(refused(reason), 1, "node {}: {reason}:\n{metrics}", i + 1);
        }
        assert_eq!(refused("not_a_lease_key"), 0, "node {}:\n{metrics}", i + 1);
    }
    for (name, ..) in &rogues {
        c.control.delete_node(name);
    }
}

/// Whether node `i` still routes to `subnet` (any route, whatever the backend's device).
fn routes_to(c: &KubeCluster, i: usize, subnet: &str) -> bool {
    c.nodes[i]
        .routes(&[])
        .iter()
        .any(|r| r["dst"].as_str() == Some(subnet))
}

#[test]
fn kube_vxlan_cluster() {
    require_root!();
    let Some(mut c) = KubeCluster::start("kvx", &net_conf("vxlan")) else {
        return;
    };
    c.assert_full_mesh();
    assert_flanneld_annotations(&c, "vxlan");
    let data = c.annotation(0, "backend-data").unwrap();
    assert!(
        data.contains(r#""VNI":1"#) && data.contains("VtepMAC"),
        "{data}"
    );

    eprintln!("an operator removes node 1's public-ip annotation: it comes back");
    c.control
        .kubectl_ok(&["annotate", "node", "node1", &format!("{PREFIX}/public-ip-")]);
    c.wait("node 1's public-ip annotation was not restored", || {
        c.annotation(0, "public-ip").as_deref() == Some(c.nodes[0].ip.as_str())
    });

    rogue_nodes_are_refused(&c);

    eprintln!("node 1's agent restarts: same subnet, traffic flows");
    c.agents[0].stop();
    c.agents[0].start();
    c.wait("the restarted agent did not reconcile", || {
        c.agents[0].log().matches("reconciled").count() >= 2
    });
    assert_eq!(c.agents[0].subnet(), Some(c.subnets[0].clone()));
    for (i, node) in c.nodes.iter().enumerate().skip(1) {
        // The other nodes never stopped routing to node 1.
        assert!(routes_to(&c, i, &c.subnets[0]), "node {}", node.index);
    }
    assert_ping(&c.pods[0], &c.pods[1]);
    assert_ping(&c.pods[1], &c.pods[0]);

    eprintln!("the apiserver restarts under the agents");
    c.control.restart_apiserver();
    assert_ping(&c.pods[0], &c.pods[2]);

    eprintln!("node 3 is deleted: the others forget it");
    c.agents[2].stop();
    c.control.delete_node(&node_name(3));
    let gone = c.subnets[2].clone();
    for i in 0..2 {
        c.wait(
            &format!("node {} still routes to node 3's {gone}", i + 1),
            || !routes_to(&c, i, &gone),
        );
    }
    assert!(!ping(&c.pods[0].ns, &c.pods[2].ip));
    assert_ping(&c.pods[0], &c.pods[1]);
}

#[test]
fn kube_host_gw_cluster_and_an_expired_watch() {
    require_root!();
    let Some(mut c) = KubeCluster::start("khg", &net_conf("host-gw")) else {
        return;
    };
    c.assert_full_mesh();
    assert_flanneld_annotations(&c, "host-gw");
    // host-gw: node 1 routes node 2's podCIDR via node 2's underlay address.
    let via: Vec<String> = c.nodes[0]
        .routes(&[&c.subnets[1]])
        .iter()
        .filter_map(|r| r["gateway"].as_str().map(str::to_string))
        .collect();
    assert_eq!(via, vec![c.nodes[1].ip.clone()]);

    // Frozen, node 1's agent reads nothing while node 3 goes, node 2 changes and another
    // object is written (the store's revision moves past every node event); the apiserver then
    // restarts, its new watch cache starting at that revision. Thawed, the agent reads the
    // events its socket held and the watch's end, and watching again from its last node event
    // is answered 410 Gone.
    eprintln!("node 1's agent is frozen while node 3 goes and the apiserver restarts");
    let pid = c.agents[0].pid().expect("agent 1 runs").to_string();
    run(&["kill", "-STOP", &pid]);
    c.control.delete_node(&node_name(3));
    for n in 0..5 {
        c.control.kubectl_ok(&[
            "annotate",
            "--overwrite",
            "node",
            "node2",
            &format!("example.com/churn={n}"),
        ]);
    }
    c.control.kubectl_ok(&[
        "create",
        "configmap",
        "moves-the-revision",
        "--from-literal=a=b",
    ]);
    c.control.restart_apiserver();
    run(&["kill", "-CONT", &pid]);
    let gone = c.subnets[2].clone();
    c.wait("node 1 still routes to the deleted node 3", || {
        !routes_to(&c, 0, &gone)
    });
    assert_ping(&c.pods[0], &c.pods[1]);
    assert!(
        wait_until(CONVERGE, || c.agents[0].log().contains("410 Gone")),
        "node 1's watch did not expire (the test must exercise a 410):\n{}",
        c.agents[0].log()
    );
    assert_ping(&c.pods[1], &c.pods[0]);
}

/// A dual-stack network: each node's lease is its two podCIDRs (`podCIDRs`), it publishes
/// `backend-v6-data` and `public-ipv6`, and routes every other node's IPv6 podCIDR over
/// `flannel-v6.1`.
#[test]
fn kube_vxlan_dual_stack() {
    require_root!();
    let options = KubeOptions {
        cluster_cidr6: Some("fd00:10:244::/56".into()),
        ..KubeOptions::default()
    };
    let conf = r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}"#;
    let Some(mut c) = KubeCluster::new_with("kv6", conf, options) else {
        return;
    };
    c.start_agents();
    c.assert_full_mesh();
    assert_flanneld_annotations(&c, "vxlan");
    let mut v6_cidrs = Vec::new();
    for (i, node) in c.nodes.iter().enumerate() {
        let cidrs = c.control.wait_pod_cidrs(&node_name(node.index));
        let v6 = cidrs
            .iter()
            .find(|s| s.contains(':'))
            .cloned()
            .unwrap_or_else(|| panic!("node {}: no IPv6 podCIDR in {cidrs:?}", node.index));
        assert_eq!(
            c.agents[i]
                .env_value("FLANNEL_IPV6_SUBNET")
                .map(|s| s.split('/').nth(1).map(str::to_string)),
            Some(v6.split('/').nth(1).map(str::to_string)),
            "node {}'s subnet.env",
            node.index
        );
        assert_eq!(c.annotation(i, "public-ipv6"), Some(node.ip6.clone()));
        let data = c.annotation(i, "backend-v6-data").expect("backend-v6-data");
        assert!(data.contains("VtepMAC"), "{data}");
        v6_cidrs.push(v6);
    }
    for (i, node) in c.nodes.iter().enumerate() {
        for (j, cidr) in v6_cidrs.iter().enumerate() {
            if i == j {
                continue;
            }
            let routes =
                node.ns
                    .exec_json(&["ip", "-6", "-j", "route", "show", "dev", "flannel-v6.1"]);
            assert!(
                routes
                    .as_array()
                    .is_some_and(|r| r.iter().any(|r| r["dst"].as_str() == Some(cidr.as_str()))),
                "node {} has no route to {cidr}: {routes:?}",
                node.index
            );
        }
    }
}

#[test]
fn kube_udp_cluster() {
    require_root!();
    let Some(c) = KubeCluster::start("kud", &net_conf("udp")) else {
        return;
    };
    c.assert_full_mesh();
    // flanneld's udp backend leaves BackendType empty: so does its annotation.
    assert_flanneld_annotations(&c, "");
}

/// flannel's routed backends that need a driver (run in the VM on a stock kernel): pods ping,
/// the annotations carry the backend's data, a deleted node is forgotten.
fn routed_backend(tag: &str, backend: &str) {
    let Some(mut c) = KubeCluster::start(tag, &net_conf(backend)) else {
        return;
    };
    c.assert_full_mesh();
    assert_flanneld_annotations(&c, backend);
    c.agents[2].stop();
    c.control.delete_node(&node_name(3));
    let gone = c.subnets[2].clone();
    c.wait("node 1 still routes to the deleted node 3", || {
        !routes_to(&c, 0, &gone)
    });
    assert_ping(&c.pods[0], &c.pods[1]);
}

/// wireguard then ipip, one after the other: in the VM (no KVM) two control planes at once
/// do not start in time.
#[test]
fn kube_wireguard_then_ipip_clusters() {
    require_root!();
    require_driver!(kernel_has("wireguard"), "wireguard driver");
    require_driver!(kernel_has("ipip"), "ipip driver");
    routed_backend("kwg", "wireguard");
    routed_backend("kip", "ipip");
}

/// The bgp backend on the Kubernetes datastore, as Calico runs its BGP: a full mesh of BIRDs
/// between the nodes, peers from the Nodes.
#[test]
fn kube_bgp_mesh() {
    require_root!();
    if !require_tools(&["bird"]) {
        return;
    }
    let Some(mut c) = KubeCluster::new("kbg", &net_conf("bgp")) else {
        return;
    };
    // Node 3's AS is set on its Node, as a DaemonSet's nodes get one: the annotation sets
    // `--bgp-as` for that node alone.
    c.control.kubectl_ok(&[
        "annotate",
        "node",
        &node_name(3),
        &format!("{PREFIX}/bgp-as=65003"),
    ]);
    c.start_agents();
    c.assert_full_mesh();
    assert_flanneld_annotations(&c, "bgp");
    let learned = c.nodes[0].routes(&["proto", "bird"]);
    assert_eq!(learned.len(), 2, "node 1's BGP routes: {learned:?}");
    assert_eq!(
        c.annotation(2, "backend-data").as_deref(),
        Some(r#"{"ASNumber":65003}"#),
        "node 3's backend-data"
    );
    assert!(
        c.agents[2]
            .log()
            .contains("--bgp-as 65003 from this node's annotation"),
        "{}",
        c.agents[2].log()
    );
    // Node 1 peers with node 3 by eBGP in node 3's AS, and with node 2 by iBGP.
    let mesh = |peer: usize| {
        let name = format!("mesh_{}", c.nodes[peer].ip.replace('.', "_"));
        c.agents[0].birdc(&["show", "protocols", "all", &name])
    };
    assert!(mesh(2).contains("Neighbor AS:      65003"), "{}", mesh(2));
    assert!(mesh(1).contains("Neighbor AS:      64512"), "{}", mesh(1));
}

fn run(argv: &[&str]) {
    let st = Command::new(argv[0])
        .args(&argv[1..])
        .status()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(st.success(), "{argv:?}: {st}");
}
