//! The agent in Kubernetes mode (`--kube-subnet-mgr`) on a real control plane: etcd,
//! kube-apiserver and kube-controller-manager (which assigns the podCIDRs) built from Debian's
//! source package, three nodes registered as the kubelet registers them, each agent
//! authenticated with the shipped manifest's service account. Pods ping across nodes; the
//! Node objects carry flanneld's annotations; a deleted node is forgotten, removed
//! annotations come back, and an agent restart, an apiserver restart and an expired watch
//! (410 Gone) each lose nothing.

use std::process::Command;

use netns_tests::agent_cluster::require_tools;
use netns_tests::cluster::{assert_ping, ping, wait_until, CONVERGE};
use netns_tests::kube_cluster::{node_name, KubeCluster, PREFIX};
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

    eprintln!("node 1's agent restarts: same subnet, traffic flows");
    c.agents[0].stop();
    c.agents[0].start();
    assert_eq!(c.agents[0].wait_for_subnet(), c.subnets[0]);
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

    // Frozen, node 1's agent misses node 3's deletion and the churn after it; the apiserver
    // restarts meanwhile (its new watch cache starts after them): the agent's watch ends, and
    // watching again from where it was answers 410 Gone.
    eprintln!(
        "node 1's agent is frozen while node 3 goes, the nodes churn and the apiserver restarts"
    );
    let pid = c.agents[0].pid().expect("agent 1 runs").to_string();
    run(&["kill", "-STOP", &pid]);
    c.control.delete_node(&node_name(3));
    for n in 0..20 {
        c.control.kubectl_ok(&[
            "annotate",
            "--overwrite",
            "node",
            "node2",
            &format!("example.com/churn={n}"),
        ]);
    }
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

#[test]
fn kube_udp_cluster() {
    require_root!();
    let Some(c) = KubeCluster::start("kud", &net_conf("udp")) else {
        return;
    };
    c.assert_full_mesh();
    assert_flanneld_annotations(&c, "udp");
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

#[test]
fn kube_wireguard_cluster() {
    require_root!();
    require_driver!(kernel_has("wireguard"), "wireguard driver");
    routed_backend("kwg", "wireguard");
}

#[test]
fn kube_ipip_cluster() {
    require_root!();
    require_driver!(kernel_has("ipip"), "ipip driver");
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
    let Some(c) = KubeCluster::start("kbg", &net_conf("bgp")) else {
        return;
    };
    c.assert_full_mesh();
    assert_flanneld_annotations(&c, "bgp");
    let learned = c.nodes[0].routes(&["proto", "bird"]);
    assert_eq!(learned.len(), 2, "node 1's BGP routes: {learned:?}");
}

fn run(argv: &[&str]) {
    let st = Command::new(argv[0])
        .args(&argv[1..])
        .status()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(st.success(), "{argv:?}: {st}");
}
