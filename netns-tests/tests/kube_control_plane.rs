//! The Kubernetes control plane the agent's Kubernetes-mode tests run on (src/kube.rs), and
//! packaging/kube-ferrocni.yml on it: nodes get podCIDRs from the controller-manager, the
//! manifest applies, and its service account may do what the agent does and nothing more.
//! Needs the cached Kubernetes 1.20 binaries (`make kube-bins`); skips without them.

use std::time::Instant;

use netns_tests::cluster::Underlay;
use netns_tests::kube::{kube_bin_dir, ControlPlane, KubeOptions};
use netns_tests::{require_root, skip_unless, workspace_root};

/// Whether the `kube-flannel/flannel` service account may `verb` the resource of `args`
/// (`kubectl auth can-i` with that account's token).
fn can(kube: &ControlPlane, kubeconfig: &std::path::Path, verb: &str, args: &[&str]) -> bool {
    let mut argv = vec!["auth", "can-i", verb];
    argv.extend(args);
    let out = kube.kubectl_with(kubeconfig, &argv);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl auth can-i {verb} {args:?}: {answer} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

#[test]
fn control_plane_assigns_pod_cidrs_and_runs_the_manifest() {
    require_root!();
    skip_unless!(kube_bin_dir(), "no Kubernetes binaries");
    let underlay = Underlay::new("kcp");
    let started = Instant::now();
    let mut kube = ControlPlane::start(&underlay.ns, KubeOptions::default());
    println!(
        "control plane ready in {:.1} s; apiserver + controller-manager RSS {} MiB",
        started.elapsed().as_secs_f64(),
        kube.rss_kib() / 1024
    );
    assert_eq!(
        kube.server(),
        format!("https://{}:6443", Underlay::switch_ip())
    );

    // Two nodes, two distinct /24s of the cluster CIDR.
    kube.register_node("node1", &Underlay::node_ip(1));
    kube.register_node("node2", &Underlay::node_ip(2));
    let (a, b) = (kube.wait_pod_cidr("node1"), kube.wait_pod_cidr("node2"));
    assert_ne!(a, b);
    for cidr in [&a, &b] {
        assert!(
            cidr.starts_with("10.244.") && cidr.ends_with("/24"),
            "{cidr}"
        );
    }
    let node = kube.node_json("node1").expect("node1");
    assert_eq!(
        node["status"]["addresses"][0]["address"],
        Underlay::node_ip(1)
    );
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        "node1"
    );

    // The manifest: accepted by the server's validation and admission, then applied. A dry
    // run creates no namespace, so the namespaced objects would find none: it exists first.
    let manifest = workspace_root().join("packaging/kube-ferrocni.yml");
    let manifest = manifest.to_str().expect("a UTF-8 path");
    kube.kubectl_ok(&["create", "namespace", "kube-flannel"]);
    kube.kubectl_ok(&["apply", "--dry-run=server", "-f", manifest]);
    kube.kubectl_ok(&["apply", "-f", manifest]);
    let ds = kube.kubectl_ok(&[
        "-n",
        "kube-flannel",
        "get",
        "daemonset",
        "kube-flannel-ds",
        "-o",
        "jsonpath={.spec.template.spec.serviceAccountName}",
    ]);
    assert_eq!(ds, "flannel");

    // The agent's token may do what --kube-subnet-mgr and --network-policy do, and nothing
    // beyond.
    let token = kube.service_account_token("kube-flannel", "flannel");
    let agent = kube.kubeconfig_for_token(&token);
    for (verb, args) in [
        ("get", &["nodes"][..]),
        ("list", &["nodes"]),
        ("watch", &["nodes"]),
        ("patch", &["nodes", "--subresource=status"]),
        ("get", &["pods", "-n", "kube-flannel"]),
        ("list", &["pods", "-A"]),
        ("watch", &["pods", "-A"]),
        ("watch", &["namespaces"]),
        ("list", &["networkpolicies.networking.k8s.io", "-A"]),
        ("watch", &["networkpolicies.networking.k8s.io", "-A"]),
    ] {
        assert!(
            can(&kube, &agent, verb, args),
            "flannel cannot {verb} {args:?}"
        );
    }
    for (verb, args) in [
        ("update", &["nodes"][..]),
        ("delete", &["nodes"]),
        ("patch", &["nodes"]),
        ("list", &["secrets", "-n", "kube-flannel"]),
        ("list", &["secrets", "-n", "kube-system"]),
        ("update", &["pods", "-n", "kube-flannel"]),
        (
            "create",
            &["networkpolicies.networking.k8s.io", "-n", "default"],
        ),
    ] {
        assert!(
            !can(&kube, &agent, verb, args),
            "flannel may {verb} {args:?}"
        );
    }
    // And the token works against the API itself, as the agent uses it.
    let nodes = kube.kubectl_with(&agent, &["get", "nodes", "-o", "name"]);
    assert!(nodes.status.success());
    assert_eq!(
        String::from_utf8_lossy(&nodes.stdout).lines().count(),
        2,
        "{nodes:?}"
    );

    // A deleted node is gone; the apiserver comes back on its etcd after a crash.
    kube.delete_node("node2");
    assert!(kube.node_json("node2").is_none());
    kube.restart_apiserver();
    let listed = kube.kubectl_ok(&["get", "nodes", "-o", "name"]);
    assert_eq!(listed.trim(), "node/node1");
    assert_eq!(kube.wait_pod_cidr("node1"), a);
}

#[test]
fn dual_stack_nodes_get_a_pod_cidr_of_each_family() {
    require_root!();
    skip_unless!(kube_bin_dir(), "no Kubernetes binaries");
    let underlay = Underlay::new("kds");
    let kube = ControlPlane::start(
        &underlay.ns,
        KubeOptions {
            cluster_cidr6: Some("fd00:244::/56".into()),
            ..KubeOptions::default()
        },
    );
    kube.register_node("node1", &Underlay::node_ip(1));
    kube.register_node("node2", &Underlay::node_ip(2));
    let cidrs = [kube.wait_pod_cidrs("node1"), kube.wait_pod_cidrs("node2")];
    for c in &cidrs {
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(
            c[0].starts_with("10.244.") && c[0].ends_with("/24"),
            "{c:?}"
        );
        assert!(
            c[1].starts_with("fd00:244:") && c[1].ends_with("/64"),
            "{c:?}"
        );
    }
    assert_ne!(cidrs[0], cidrs[1]);
    // Services get an address of each family.
    kube.kubectl_apply(
        r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dual"},
            "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}}"#,
    );
    let ips = kube.kubectl_ok(&[
        "get",
        "service",
        "dual",
        "-o",
        "jsonpath={.spec.clusterIPs}",
    ]);
    println!("dual-stack service: {ips}");
    assert!(ips.contains("10.96.") && ips.contains("fd00:96::"), "{ips}");
}
