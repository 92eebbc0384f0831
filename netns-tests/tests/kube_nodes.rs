//! The shipped manifest (packaging/kube-ferrocni.yml) on three real kubelet nodes, as an
//! operator runs it: the control plane (etcd, kube-apiserver, kube-controller-manager
//! assigning podCIDRs, kube-scheduler) in the underlay switch's netns, and three nodes of
//! their own namespaces, each with containerd 1.6, kubelet 1.20 and kube-proxy (iptables),
//! whose CNI directories start empty. `kubectl apply` of the manifest, unchanged: the
//! DaemonSet's init container installs the plugins and the conflist on every node, the agent
//! runs in its pod (host network, unprivileged with NET_ADMIN and NET_RAW) on the in-cluster
//! service-account config, and the nodes go Ready. Then busybox pods spread over the nodes get
//! their node's podCIDR and ping each other, a ClusterIP Service in front of two nodes' pods
//! answers the third's, and a deleted pod's attachment is gone from its node.

use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use serde_json::Value;

use netns_tests::cluster::{wait_until, Underlay};
use netns_tests::containerd::{build_sandbox_image, missing_tools, SANDBOX_IMAGE};
use netns_tests::kube::{kube_bin_dir, ControlPlane, KubeOptions};
use netns_tests::kube_cluster::{manifest, NAMESPACE};
use netns_tests::kubelet::{
    assert_nothing_left, build_node_image, KubeletNode, NodeConfig, BUSYBOX_IMAGE, NODE_IMAGE,
};
use netns_tests::{require_root, TempDir};

/// Nodes Ready, the DaemonSet's and the pods' start: generous for a loaded two-core machine.
const SETTLE: Duration = Duration::from_secs(180);
/// A Service's or a pod's change reaching the nodes.
const PROPAGATE: Duration = Duration::from_secs(60);
const NETWORK: &str = "10.244.0.0/16";

fn busybox_deployment() -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: bb, namespace: default}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: bb}}}}
  template:
    metadata: {{labels: {{app: bb}}}}
    spec:
      # One per node.
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {{matchLabels: {{app: bb}}}}
              topologyKey: kubernetes.io/hostname
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
        - name: bb
          image: {BUSYBOX_IMAGE}
          imagePullPolicy: Never
          command: [/bin/httpd, -f, -p, "8080", -h, /www]
"#
    )
}

const SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: bb, serve: "yes"}
  ports: [{port: 80, targetPort: 8080}]
"#;

/// A pod of the Deployment as the apiserver has it.
#[derive(Clone, Debug)]
struct BusyboxPod {
    name: String,
    node: String,
    ip: String,
}

fn json_of(control: &ControlPlane, args: &[&str]) -> Value {
    let text = control.kubectl_ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}: {text}"))
}

/// The Deployment's Running pods with an IP, not being deleted.
fn running_pods(control: &ControlPlane) -> Vec<BusyboxPod> {
    let pods = json_of(control, &["get", "pods", "-l", "app=bb", "-o", "json"]);
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .filter_map(|p| {
            Some(BusyboxPod {
                name: p["metadata"]["name"].as_str()?.to_string(),
                node: p["spec"]["nodeName"].as_str()?.to_string(),
                ip: p["status"]["podIP"].as_str()?.to_string(),
            })
        })
        .collect()
}

/// Node `name`'s condition `kind`: (status, reason).
fn condition(control: &ControlPlane, name: &str, kind: &str) -> Option<(String, String)> {
    let node = control.node_json(name)?;
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

fn kubectl_exec(control: &ControlPlane, pod: &str, argv: &[&str]) -> std::process::Output {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(argv);
    control.kubectl(&args)
}

/// An ingress policy on the Deployment's pods: only pods labelled `client=yes`, only on 8080.
const CLIENTS_ONLY: &str = r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-clients, namespace: default}
spec:
  podSelector: {matchLabels: {app: bb}}
  policyTypes: [Ingress]
  ingress:
    - from: [{podSelector: {matchLabels: {client: "yes"}}}]
      ports: [{port: 8080}]
"#;

/// The agents' `/metrics`, on each node's loopback (host network), once policy is on.
const METRICS_PORT: &str = "19474";

/// Whether `from` fetches the page of the pod at `ip` (port 8080) within 3 s.
fn wget_ok(control: &ControlPlane, from: &str, ip: &str) -> bool {
    let url = format!("http://{ip}:8080/cgi-bin/hostname");
    kubectl_exec(control, from, &["timeout", "3", "wget", "-qO-", &url])
        .status
        .success()
}

fn metrics_of(node: &KubeletNode) -> String {
    let url = format!("http://127.0.0.1:{METRICS_PORT}/metrics");
    let out = node.host().exec(&["curl", "-sf", "--max-time", "5", &url]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pods the node's agent admitted at ADD (`ferrocni_agent_policy_admissions_total`).
fn admissions(node: &KubeletNode) -> u64 {
    let needle = "ferrocni_agent_policy_admissions_total{result=\"admitted\"} ";
    metrics_of(node)
        .lines()
        .find_map(|l| l.strip_prefix(needle)?.trim().parse().ok())
        .unwrap_or(0)
}

/// NetworkPolicy turned on as an operator does (the DaemonSet's env): the agents roll, each
/// enforces on its node, and a policy isolates the Deployment's pods except from the client.
fn policy_on_the_nodes(control: &ControlPlane, nodes: &[KubeletNode], pods: &[BusyboxPod]) {
    eprintln!("NetworkPolicy on: the DaemonSet's agents roll with FLANNELD_NETWORK_POLICY=true");
    let rolled = Instant::now();
    let port = format!("FLANNELD_METRICS_PORT={METRICS_PORT}");
    control.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "set",
        "env",
        "daemonset/kube-flannel-ds",
        "FLANNELD_NETWORK_POLICY=true",
        &port,
    ]);
    control.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        "daemonset/kube-flannel-ds",
        "--timeout=180s",
    ]);
    let enforcing = wait_until(SETTLE, || {
        nodes.iter().all(|n| {
            n.container_logs("kube-flannel", 200)
                .contains("policy: enforcing")
        })
    });
    if !enforcing {
        fail_with_logs("the agents do not all enforce NetworkPolicy", control);
    }
    eprintln!("the agents enforce {:?} after the change", rolled.elapsed());

    let (client, other, target) = (&pods[0], &pods[1], &pods[2]);
    assert!(
        wget_ok(control, &other.name, &target.ip),
        "before any policy"
    );
    control.kubectl_apply(CLIENTS_ONLY);
    let mut probes = 0;
    assert!(
        wait_until(PROPAGATE, || {
            probes += 1;
            !wget_ok(control, &other.name, &target.ip)
        }),
        "{} still reaches {} under the policy",
        other.name,
        target.name
    );
    eprintln!("the policy denied probe {probes} after kubectl returned (each takes up to 3 s)");
    assert!(
        !kubectl_exec(
            control,
            &other.name,
            &["ping", "-c", "1", "-W", "2", &target.ip]
        )
        .status
        .success(),
        "ping is not in the policy's ports"
    );
    control.kubectl_ok(&["label", "pod", &client.name, "client=yes"]);
    assert!(
        wait_until(PROPAGATE, || wget_ok(control, &client.name, &target.ip)),
        "the labelled client {} does not reach {}",
        client.name,
        target.name
    );
    // The client is a target too: the others do not reach it.
    assert!(!wget_ok(control, &other.name, &client.ip));
}

fn daemonset_ready(control: &ControlPlane) -> u64 {
    let ds = json_of(
        control,
        &[
            "-n",
            NAMESPACE,
            "get",
            "daemonset",
            "kube-flannel-ds",
            "-o",
            "json",
        ],
    );
    ds["status"]["numberReady"].as_u64().unwrap_or(0)
}

/// The sandbox ID of the one pod network attachment on `node` (from libcni's cache,
/// `cbr0-<sandbox>-eth0`).
fn sandbox_of(node: &KubeletNode) -> Option<String> {
    node.files("/var/lib/cni/results").iter().find_map(|f| {
        f.strip_prefix("cbr0-")
            .and_then(|f| f.strip_suffix("-eth0"))
            .map(str::to_string)
    })
}

/// The agent pods (the DaemonSet's) as the apiserver has them.
fn agent_pod_items(control: &ControlPlane) -> Vec<Value> {
    let pods = json_of(
        control,
        &[
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-l",
            "app=flannel",
            "-o",
            "json",
        ],
    );
    pods["items"].as_array().cloned().unwrap_or_default()
}

/// The most restarts of an agent container.
fn agent_restarts(control: &ControlPlane) -> u64 {
    agent_pod_items(control)
        .iter()
        .flat_map(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c["restartCount"].as_u64())
        .max()
        .unwrap_or(0)
}

/// The agent pods' names.
fn agent_pods(control: &ControlPlane) -> Vec<String> {
    agent_pod_items(control)
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

fn fail_with_logs(what: &str, control: &ControlPlane) -> ! {
    let text = |out: std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let pods = text(control.kubectl(&["get", "pods", "-A", "-o", "wide"]));
    let events = text(control.kubectl(&["get", "events", "-A"]));
    let mut logs = String::new();
    for pod in agent_pods(control) {
        for previous in ["--previous=true", "--previous=false"] {
            let out = control.kubectl(&[
                "-n",
                NAMESPACE,
                "logs",
                "--tail=20",
                previous,
                &pod,
                "-c",
                "kube-flannel",
            ]);
            logs.push_str(&format!("--- {pod} {previous} ---\n{}", text(out)));
        }
    }
    panic!("{what}\n{pods}\n{events}\n{logs}");
}

#[test]
fn manifest_on_three_kubelet_nodes() {
    require_root!();
    if kube_bin_dir().is_none() {
        return;
    }
    if let Some(missing) = missing_tools() {
        eprintln!("skipping: {missing}");
        return;
    }
    let underlay = Underlay::new("kn");
    // The apiserver reaches kubelets (logs, exec) at their InternalIP: the nodes' names are in
    // no DNS.
    let mut control = ControlPlane::start_with(
        &underlay.ns,
        KubeOptions::default(),
        &["--kubelet-preferred-address-types=InternalIP"],
    );
    control.start_scheduler();
    let images = TempDir::new("kn-images");
    let archives = vec![
        (build_node_image(images.path()), NODE_IMAGE.to_string()),
        (
            build_sandbox_image(images.path()),
            SANDBOX_IMAGE.to_string(),
        ),
    ];
    let kubeconfig = control.admin_kubeconfig();
    let config = NodeConfig {
        kubeconfig: &kubeconfig,
        cluster_cidr: NETWORK,
        images: &archives,
    };
    let started = Instant::now();
    let nodes: Vec<KubeletNode> = (1..=3)
        .map(|i| KubeletNode::start(&underlay, i, &config))
        .collect();
    eprintln!(
        "nodes started in {:?}; applying the manifest",
        started.elapsed()
    );
    control.kubectl_apply(&manifest());

    let all_ready = wait_until(SETTLE, || {
        nodes
            .iter()
            .all(|n| condition(&control, &n.name, "Ready").is_some_and(|(s, _)| s == "True"))
    });
    if !all_ready {
        fail_with_logs("the nodes did not all go Ready", &control);
    }
    let to_ready = started.elapsed();
    eprintln!("three nodes Ready {to_ready:?} after their start");
    let network_up = wait_until(SETTLE, || {
        assert!(
            agent_restarts(&control) < 2,
            "the agent restarts:\n{}",
            nodes
                .iter()
                .map(|n| n.container_logs("kube-flannel", 10))
                .collect::<String>()
        );
        nodes.iter().all(|n| {
            condition(&control, &n.name, "NetworkUnavailable")
                == Some(("False".into(), "FlannelIsUp".into()))
        })
    });
    if !network_up {
        fail_with_logs(
            "the agents did not set NetworkUnavailable=False on every node",
            &control,
        );
    }
    eprintln!(
        "the agents are up {:?} after the nodes' start",
        started.elapsed()
    );
    for n in &nodes {
        // In-cluster config: the `kubernetes` Service's address, through kube-proxy's rules.
        let log = n.container_logs("kube-flannel", 50);
        assert!(log.contains("Kubernetes API https://10.96.0.1"), "{log}");
        let bins = n.files("/opt/cni/bin");
        for plugin in ["flannel", "bridge", "host-local", "portmap", "loopback"] {
            assert!(
                bins.iter().any(|b| b == plugin),
                "{}: {plugin} not installed: {bins:?}",
                n.name
            );
        }
        assert_eq!(
            n.files("/etc/cni/net.d"),
            vec!["10-flannel.conflist".to_string()]
        );
        assert!(
            n.files("/run/flannel").contains(&"subnet.env".to_string()),
            "{}: no subnet.env",
            n.name
        );
    }
    if !wait_until(PROPAGATE, || daemonset_ready(&control) == 3) {
        fail_with_logs("the DaemonSet has not 3 ready pods", &control);
    }

    eprintln!("busybox pods, one per node");
    control.kubectl_apply(&busybox_deployment());
    let mut pods = Vec::new();
    if !wait_until(SETTLE, || {
        pods = running_pods(&control);
        pods.len() == 3
    }) {
        fail_with_logs("the busybox pods did not all run", &control);
    }
    pods.sort_by(|a, b| a.node.cmp(&b.node));
    for (pod, node) in pods.iter().zip(&nodes) {
        assert_eq!(pod.node, node.name, "one pod per node: {pods:?}");
        let cidr: IpNetwork = control
            .wait_pod_cidr(&node.name)
            .parse()
            .expect("a podCIDR");
        let ip = pod.ip.parse().expect("a pod IP");
        assert!(
            cidr.contains(ip),
            "{}: {} is not in {cidr}",
            pod.name,
            pod.ip
        );
    }
    for from in &pods {
        for to in pods.iter().filter(|p| p.name != from.name) {
            let pinged = wait_until(PROPAGATE, || {
                kubectl_exec(
                    &control,
                    &from.name,
                    &["ping", "-c", "1", "-W", "2", &to.ip],
                )
                .status
                .success()
            });
            assert!(
                pinged,
                "{} ({}) does not ping {} ({})",
                from.name, from.node, to.name, to.ip
            );
        }
    }

    eprintln!("a ClusterIP Service in front of node1's and node2's pods, from node3's");
    for pod in &pods[..2] {
        control.kubectl_ok(&["label", "pod", &pod.name, "serve=yes"]);
    }
    control.kubectl_apply(SERVICE);
    let cluster_ip = control
        .kubectl_ok(&["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"])
        .trim()
        .to_string();
    let url = format!("http://{cluster_ip}/cgi-bin/hostname");
    let mut answered = std::collections::BTreeSet::new();
    let both = wait_until(PROPAGATE, || {
        let out = kubectl_exec(
            &control,
            &pods[2].name,
            &["timeout", "5", "wget", "-qO-", &url],
        );
        if out.status.success() {
            answered.insert(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        answered.len() == 2
    });
    let backends: std::collections::BTreeSet<String> =
        pods[..2].iter().map(|p| p.name.clone()).collect();
    assert!(
        both && answered == backends,
        "{url} answered from {answered:?}, not {backends:?}"
    );

    policy_on_the_nodes(&control, &nodes, &pods);

    eprintln!("a deleted pod's attachment goes (DEL); its replacement's ADD waits for policy");
    let (gone, node) = (&pods[2], &nodes[2]);
    let sandbox = sandbox_of(node).expect("node3's pod in libcni's cache");
    let admitted_before = admissions(node);
    control.kubectl_ok(&["delete", "pod", &gone.name, "--wait=true"]);
    // The Deployment's replacement can only go to node3: one attachment there again.
    let mut replacement = None;
    let replaced = wait_until(SETTLE, || {
        replacement = running_pods(&control)
            .into_iter()
            .find(|p| p.node == node.name && p.name != gone.name);
        replacement.is_some() && sandbox_of(node).is_some_and(|s| s != sandbox)
    });
    assert!(replaced, "no replacement pod on {}", node.name);
    let new = replacement.expect("the replacement pod");
    // The chain's last step asked node3's agent, and returned once a commit covered the pod:
    // the policy isolates it from its first packet.
    assert!(
        admissions(node) > admitted_before,
        "node3's agent admitted no pod at ADD:\n{}",
        metrics_of(node)
    );
    assert!(
        !wget_ok(&control, &pods[1].name, &new.ip),
        "{} reached the new pod {} before the policy did",
        pods[1].name,
        new.ip
    );
    assert!(
        wait_until(PROPAGATE, || wget_ok(&control, &pods[0].name, &new.ip)),
        "the client {} does not reach the new pod {}",
        pods[0].name,
        new.ip
    );
    node.host()
        .assert_attachment_gone("cbr0", &gone.ip, &sandbox, 1);
    assert!(
        !node.files("/var/lib/cni/flannel").contains(&sandbox),
        "the flannel plugin's saved delegate of {sandbox} is left"
    );

    let node_rss: u64 = nodes.iter().map(KubeletNode::rss_kib).sum();
    eprintln!(
        "RSS: control plane {} MiB, three nodes (containerd, kubelet, kube-proxy, pods) {} MiB",
        control.rss_kib() / 1024,
        node_rss / 1024
    );
    eprintln!("{}", nodes[0].container_logs("kube-flannel", 30));
    drop(nodes);
    drop(control);
    drop(underlay);
    assert_nothing_left();
}
