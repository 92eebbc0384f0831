//! Agents in Kubernetes mode (`--kube-subnet-mgr`) in a simulated cluster: the real control
//! plane ([`ControlPlane`]: etcd, kube-apiserver, kube-controller-manager assigning podCIDRs)
//! in the switch netns, three nodes registered as the kubelet registers them, the project's
//! manifest applied, and each agent authenticated with the manifest's service-account token
//! (bound to its ClusterRole, never an administrator's). Dropping a [`KubeCluster`] stops
//! everything it started.
//!
//! ```no_run
//! use netns_tests::kube_cluster::KubeCluster;
//! let Some(c) = KubeCluster::start("kvx", r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#)
//! else { return };
//! c.assert_full_mesh();
//! ```

use std::fs;
use std::path::PathBuf;

use crate::agent::Agent;
use crate::agent_cluster::{assert_pods_mesh, have_tools};
use crate::cluster::{wait_until, Node, Pod, Underlay, CONVERGE};
use crate::kube::{kube_bin_dir, ControlPlane, KubeOptions};
use crate::{workspace_root, TempDir};

/// The manifest operators apply, as shipped.
pub fn manifest() -> String {
    let path = workspace_root().join("packaging/kube-ferrocni.yml");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The manifest's namespace and service account (flannel's names, for a drop-in).
pub const NAMESPACE: &str = "kube-flannel";
pub const SERVICE_ACCOUNT: &str = "flannel";
/// flanneld's annotation prefix.
pub const PREFIX: &str = "flannel.alpha.coreos.com";

/// The agents' metrics port (each node has its own netns).
pub const METRICS_PORT: u16 = 19_473;

/// The name node `index` is registered under.
pub fn node_name(index: u8) -> String {
    format!("node{index}")
}

pub struct KubeCluster {
    pub pods: Vec<Pod>,
    pub agents: Vec<Agent>,
    /// Each node's podCIDR, in node order.
    pub subnets: Vec<String>,
    pub nodes: Vec<Node>,
    /// The kubeconfig of the manifest's service account.
    pub kubeconfig: PathBuf,
    pub net_conf: PathBuf,
    pub control: ControlPlane,
    pub underlay: Underlay,
    files: TempDir,
}

impl KubeCluster {
    /// [`KubeCluster::new`] and [`KubeCluster::start_agents`]; `None` (with a printed line)
    /// when the Kubernetes binaries or the cluster tools are missing.
    pub fn start(tag: &str, net_conf: &str) -> Option<KubeCluster> {
        let mut c = KubeCluster::new(tag, net_conf)?;
        c.start_agents();
        Some(c)
    }

    /// The control plane with the manifest applied and three registered nodes, whose
    /// agents are not started yet.
    pub fn new(tag: &str, net_conf: &str) -> Option<KubeCluster> {
        KubeCluster::new_with(tag, net_conf, KubeOptions::default())
    }

    /// [`KubeCluster::new`] on a control plane started with `options` (a dual-stack cluster
    /// CIDR...); on a dual-stack network (`EnableIPv6`) the agents get `--public-ipv6`.
    pub fn new_with(tag: &str, net_conf: &str, options: KubeOptions) -> Option<KubeCluster> {
        if !have_tools() {
            return None;
        }
        kube_bin_dir()?;
        let underlay = Underlay::new(tag);
        eprintln!("{tag}: starting the control plane");
        let control = ControlPlane::start(&underlay.ns, options);
        control.kubectl_apply(&manifest());
        let token = control.service_account_token(NAMESPACE, SERVICE_ACCOUNT);
        let kubeconfig = control.kubeconfig_for_token(&token);
        let files = TempDir::new(tag);
        let conf = files.join("net-conf.json");
        fs::write(&conf, net_conf).unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
        let nodes: Vec<Node> = (1..=3).map(|i| underlay.add_node(i)).collect();
        let mut c = KubeCluster {
            pods: Vec::new(),
            agents: Vec::new(),
            subnets: Vec::new(),
            nodes,
            kubeconfig,
            net_conf: conf,
            control,
            underlay,
            files,
        };
        for i in 0..c.nodes.len() {
            let node = &c.nodes[i];
            c.control.register_node(&node_name(node.index), &node.ip);
            let mut agent = c.agent_for(i);
            agent.dual = net_conf.contains(r#""EnableIPv6":true"#);
            c.agents.push(agent);
        }
        Some(c)
    }

    /// An agent for node `i` (0-based) in Kubernetes mode, with the service account's
    /// kubeconfig; its etcd endpoint points nowhere (it must not be used).
    pub fn agent_for(&self, i: usize) -> Agent {
        let node = &self.nodes[i];
        let mut agent = Agent::in_netns(
            &node.ns,
            &node.ip,
            &self.files.join(format!("node{}", node.index)),
            "http://127.0.0.1:9",
        )
        .args(&[
            "--kube-subnet-mgr",
            &format!("--kubeconfig-file={}", self.kubeconfig.display()),
            &format!("--net-config-path={}", self.net_conf.display()),
            "--resync-interval=3",
            &format!("--metrics-port={METRICS_PORT}"),
        ]);
        agent.ip6 = node.ip6.clone();
        agent.env.push(("NODE_NAME".into(), node_name(node.index)));
        agent
    }

    /// Starts every agent not running yet, waits for each node's subnet (which must be its
    /// podCIDR) and gives each node a pod in it.
    pub fn start_agents(&mut self) {
        for a in self.agents.iter_mut().filter(|a| !a.running()) {
            a.start();
        }
        self.subnets = self.agents.iter().map(Agent::wait_for_subnet).collect();
        for (node, subnet) in self.nodes.iter().zip(&self.subnets) {
            let pod_cidr = self.control.wait_pod_cidr(&node_name(node.index));
            assert_eq!(
                *subnet, pod_cidr,
                "node {}: the agent's subnet is not the node's podCIDR",
                node.index
            );
        }
        self.pods = self
            .nodes
            .iter_mut()
            .zip(&self.subnets)
            .map(|(n, s)| n.add_pod(s))
            .collect();
    }

    pub fn assert_full_mesh(&self) {
        assert_pods_mesh(&self.pods);
    }

    /// Node `i`'s annotation `name` (under flanneld's prefix).
    pub fn annotation(&self, i: usize, name: &str) -> Option<String> {
        let node = self.control.node_json(&node_name(self.nodes[i].index))?;
        node["metadata"]["annotations"][format!("{PREFIX}/{name}")]
            .as_str()
            .map(str::to_string)
    }

    /// Appends `args` (a feature flag such as `--network-policy`) to every agent's command
    /// line: the ones not started yet run with them, and so does every later restart.
    pub fn add_agent_args(&mut self, args: &[&str]) {
        for agent in &mut self.agents {
            agent.extra.extend(args.iter().map(|a| a.to_string()));
        }
    }

    /// Waits until `check` holds (bounded by [`CONVERGE`]); panics with `what` otherwise.
    pub fn wait(&self, what: &str, check: impl FnMut() -> bool) {
        assert!(wait_until(CONVERGE, check), "{what}");
    }
}
