//! The subnet manager on the Kubernetes API, flanneld's `--kube-subnet-mgr`: a node's lease is
//! its Node object — the subnet its `spec.podCIDR(s)` (assigned by kube-controller-manager's
//! `--allocate-node-cidrs`), the value its annotations (`<prefix>/public-ip`, `backend-type`,
//! `backend-data`, ...) — and the network config is a file (`--net-config-path`, the
//! DaemonSet's ConfigMap). The parts:
//!
//! - [`connect`]: the client (kubeconfig, `--kube-api-url`, the pod's service account) and the
//!   node's name;
//! - [`annotations`]: flanneld's annotations, read and written byte for byte;
//! - [`index`]: the nodes as leases, kept by the watch (re-lists are served from it while the
//!   watch is whole);
//! - [`watch`]: Node watch events as the seam's changes (a resume point is a resourceVersion,
//!   "410 Gone" a re-list);
//! - [`publish`]: what this node writes on its Node (annotations, `NetworkUnavailable`);
//! - [`error`]: the API's failures, worded for the operator.
//!
//! Nothing expires: the subnet is the node's for its life, so there is nothing to renew.

pub mod annotations;
pub mod connect;
pub mod error;
pub mod index;
pub mod publish;
pub mod watch;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, WatchParams};
use kube::core::WatchEvent as KubeEvent;
use tokio::time::sleep;

use crate::backend::LeaseValue;
use crate::error::{AgentError, StoreFailure};
use crate::manager::startup::{retry_until, Attempt, Retried};
use crate::manager::{LeaseRequest, OwnLease, Snapshot, SubnetManager};
use crate::options::Options;
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use crate::{log, warn};
use annotations::{Annotations, NodeFacts};
use error::KubeStoreError;
use index::NodeIndex;
use publish::Publisher;
use watch::KubeWatch;

/// What messages call this store.
pub const STORE_NAME: &str = "the Kubernetes API";

/// Nodes per listing page.
const PAGE: u32 = 500;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The shortest server-side watch timeout; each watch adds up to as much again, so a fleet
/// of agents does not re-watch in step (client-go's informers do the same).
const MIN_WATCH_TIMEOUT: u32 = 300;
/// How long acquiring waits between attempts when the API fails.
const ACQUIRE_RETRY: Duration = Duration::from_secs(2);

pub struct KubeManager {
    nodes: Api<Node>,
    server: String,
    net_conf_path: PathBuf,
    dual_stack: bool,
    set_network_unavailable: bool,
    index: Rc<RefCell<NodeIndex>>,
    publisher: Rc<Publisher>,
    /// The operator's public-ip-overwrite and public-ipv6-overwrite on this node, at start.
    overwrites: (Option<Ipv4Addr>, Option<Ipv6Addr>),
    /// This node's annotations at start (the backend flags set per node).
    own_annotations: BTreeMap<String, String>,
}

impl KubeManager {
    /// A client on the same connection settings (for the policy informers).
    pub fn client(&self) -> kube::Client {
        self.nodes.clone().into_client()
    }

    /// The name of the node the agent runs on.
    pub fn node_name(&self) -> &str {
        &self.publisher.node_name
    }

    /// Builds the client, finds this node and reads the network config, retrying an API that
    /// does not answer until `--startup-timeout`. A missing config, client configuration or
    /// node name fails at once, as does a refusal (401/403).
    pub async fn connect(opts: &Options) -> Result<(KubeManager, NetConfig), AgentError> {
        let kube = &opts.kube;
        let names = Annotations::new(&kube.annotation_prefix)
            .map_err(|e| AgentError::Usage(format!("--kube-annotation-prefix: {e}")))?;
        let net = read_net_config(&kube.net_config_path)?;
        let (client, server) = connect::client(kube).await?;
        let source = connect::node_name_source(|k| std::env::var(k).ok())?;
        let nodes: Api<Node> = Api::all(client.clone());
        let (node_name, own) = retry_until(STORE_NAME, opts.startup_timeout, |left| {
            let (client, nodes, server, source) = (&client, &nodes, &server, source.clone());
            async move {
                let attempt = async {
                    let name = connect::node_name(client, server, source).await?;
                    let own = nodes.get_opt(&name).await.map_err(|e| {
                        KubeStoreError::request(server, format!("GET node {name}"), e)
                    })?;
                    Ok::<_, KubeStoreError>((name, own.as_ref().map(NodeFacts::from_node)))
                };
                match tokio::time::timeout(left, attempt).await {
                    Ok(Ok(found)) => Attempt::Done(found),
                    // A refusal is retried too: an apiserver that has just started
                    // answers 403 until its RBAC caches are filled.
                    Ok(Err(
                        e @ (KubeStoreError::Request { .. } | KubeStoreError::Refused { .. }),
                    )) => Attempt::Retry(e.into()),
                    Ok(Err(e)) => Attempt::Fatal(e.into()),
                    Err(_) => Attempt::Retry(
                        KubeStoreError::Request {
                            server: server.clone(),
                            what: "finding this node".into(),
                            detail: "no answer in time".into(),
                        }
                        .into(),
                    ),
                }
            }
        })
        .await
        .map_err(|e| match e {
            Retried::Fatal(e) => e,
            Retried::GaveUp { after, last } => AgentError::Store {
                failure: StoreFailure::Transient,
                source: format!(
                    "gave up after {:.1}s (--startup-timeout {}s): {last}",
                    after.as_secs_f64(),
                    opts.startup_timeout.as_secs()
                )
                .into(),
            },
        })?;
        log!("node {node_name}, Kubernetes API {server}");
        let overwrites = own.as_ref().map_or((None, None), |node| {
            (
                names.public_ip_overwrite(node),
                names.public_ipv6_overwrite(node),
            )
        });
        let own_annotations = own.map(|node| node.annotations).unwrap_or_default();
        let dual_stack = net.ipv6.is_some();
        let index = NodeIndex::new(names.clone(), dual_stack, &node_name);
        let manager = KubeManager {
            publisher: Rc::new(Publisher {
                nodes: nodes.clone(),
                node_name,
                server: server.clone(),
                names,
                desired: RefCell::new(BTreeMap::new()),
            }),
            nodes,
            server,
            net_conf_path: kube.net_config_path.clone(),
            dual_stack,
            set_network_unavailable: kube.set_node_network_unavailable,
            index: Rc::new(RefCell::new(index)),
            overwrites,
            own_annotations,
        };
        Ok((manager, net))
    }

    /// The operator's public-ip-overwrite (and public-ipv6-overwrite) on this node at start:
    /// the addresses the backend uses instead of the interface's.
    pub fn public_ip_overwrites(&self) -> (Option<Ipv4Addr>, Option<Ipv6Addr>) {
        self.overwrites
    }

    /// This node's annotation `suffix` under the annotation prefix, as it was at start: its
    /// full name and its value.
    pub fn own_annotation(&self, suffix: &str) -> (String, Option<&str>) {
        let name = self.publisher.names.named(suffix);
        let value = self.own_annotations.get(&name).map(String::as_str);
        (name, value)
    }

    fn request_failed(&self, what: &str, e: kube::Error) -> AgentError {
        KubeStoreError::request(&self.server, what, e).into()
    }

    async fn get_own(&self) -> Result<Option<NodeFacts>, AgentError> {
        let name = &self.publisher.node_name;
        let what = format!("GET node {name}");
        match tokio::time::timeout(REQUEST_TIMEOUT, self.nodes.get_opt(name)).await {
            Err(_) => Err(self.timed_out(&what)),
            Ok(Err(e)) => Err(self.request_failed(&what, e)),
            Ok(Ok(node)) => Ok(node.as_ref().map(NodeFacts::from_node)),
        }
    }

    fn timed_out(&self, what: &str) -> AgentError {
        KubeStoreError::Request {
            server: self.server.clone(),
            what: what.to_string(),
            detail: format!("no answer within {REQUEST_TIMEOUT:?}"),
        }
        .into()
    }

    /// This node once it has a podCIDR: waits on a watch of this one node (the
    /// controller-manager assigns it shortly after the kubelet registers the node).
    async fn own_with_pod_cidr(&self) -> Result<NodeFacts, AgentError> {
        let name = self.publisher.node_name.clone();
        let mut said = false;
        loop {
            let selector = format!("metadata.name={name}");
            let what = format!("LIST node {name}");
            let listed = tokio::time::timeout(
                REQUEST_TIMEOUT,
                self.nodes.list(&ListParams::default().fields(&selector)),
            )
            .await
            .map_err(|_| self.timed_out(&what))?
            .map_err(|e| self.request_failed(&what, e))?;
            if let Some(node) = listed.items.first().map(NodeFacts::from_node) {
                if !node.pod_cidrs.is_empty() {
                    return Ok(node);
                }
            }
            if !said {
                log!("waiting for node {name} to be registered with a podCIDR (kube-controller-manager --allocate-node-cidrs assigns it)");
                said = true;
            }
            let rv = listed.metadata.resource_version.unwrap_or_default();
            let params = WatchParams::default().fields(&selector).timeout(60);
            let what = format!("WATCH node {name}");
            let mut events = self
                .nodes
                .watch(&params, &rv)
                .await
                .map_err(|e| self.request_failed(&what, e))?
                .boxed_local();
            while let Ok(Some(event)) =
                tokio::time::timeout(Duration::from_secs(90), events.next()).await
            {
                match event {
                    Ok(KubeEvent::Added(n) | KubeEvent::Modified(n)) => {
                        let facts = NodeFacts::from_node(&n);
                        if !facts.pod_cidrs.is_empty() {
                            return Ok(facts);
                        }
                    }
                    Ok(KubeEvent::Bookmark(_) | KubeEvent::Deleted(_)) => {}
                    Ok(KubeEvent::Error(_)) | Err(_) => break,
                }
            }
        }
    }

    /// This node's subnets, checked against the network config.
    fn own_key(&self, node: &NodeFacts, net: &NetConfig) -> Result<SubnetKey, AgentError> {
        let bad = |msg: String| AgentError::BadConfig {
            key: self.net_conf_path.display().to_string(),
            msg,
        };
        let key = node
            .subnet_key(self.dual_stack)
            .map_err(|why| bad(format!("node {}: {why}", node.name)))?
            .ok_or_else(|| bad(format!("node {} has no podCIDR", node.name)))?;
        if !net.network.contains(key.v4.network()) || key.v4.prefix() < net.network.prefix() {
            return Err(bad(format!(
                "node {}'s podCIDR {} is outside Network {}",
                node.name, key.v4, net.network
            )));
        }
        if key.v4.prefix() != net.subnet_len {
            return Err(bad(format!(
                "node {}'s podCIDR {} is a /{}, but SubnetLen is {}: set SubnetLen to the \
                 controller-manager's --node-cidr-mask-size",
                node.name,
                key.v4,
                key.v4.prefix(),
                net.subnet_len
            )));
        }
        if let (Some(v6), Some(cfg)) = (key.v6, net.ipv6.as_ref()) {
            if !cfg.network.contains(v6.network()) || v6.prefix() != cfg.subnet_len {
                return Err(bad(format!(
                    "node {}'s IPv6 podCIDR {v6} is not a /{} inside IPv6Network {}",
                    node.name, cfg.subnet_len, cfg.network
                )));
            }
        }
        Ok(key)
    }

    async fn try_acquire(&mut self, request: &LeaseRequest<'_>) -> Result<OwnLease, AgentError> {
        let node = self.own_with_pod_cidr().await?;
        let key = self.own_key(&node, request.net)?;
        let attrs = (request.attrs_for)(&key)?;
        self.publisher.publish(&attrs, &node).await?;
        if self.set_network_unavailable {
            self.publisher.network_available().await?;
        }
        Ok(OwnLease {
            key,
            attrs,
            renew_at: None,
        })
    }

    /// Lists every node from the API, page by page, into the index.
    async fn list_from_api(&mut self) -> Result<(), AgentError> {
        let mut nodes = Vec::new();
        let mut token: Option<String> = None;
        let resume = loop {
            let mut params = ListParams::default().limit(PAGE);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            let page = tokio::time::timeout(REQUEST_TIMEOUT, self.nodes.list(&params))
                .await
                .map_err(|_| self.timed_out("LIST nodes"))?
                .map_err(|e| self.request_failed("LIST nodes", e))?;
            nodes.extend(page.items.iter().map(NodeFacts::from_node));
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break page.metadata.resource_version.unwrap_or_default();
            }
        };
        self.index.borrow_mut().replace(nodes, resume);
        Ok(())
    }
}

/// Reads and checks the network config file.
fn read_net_config(path: &PathBuf) -> Result<NetConfig, AgentError> {
    let bytes = std::fs::read(path).map_err(|e| KubeStoreError::ConfigMissing {
        path: path.clone(),
        detail: e.to_string(),
    })?;
    NetConfig::parse(&path.display().to_string(), &bytes)
}

impl SubnetManager for KubeManager {
    type Resume = String;
    type Watch = KubeWatch;

    fn store_name(&self) -> &'static str {
        STORE_NAME
    }

    fn server(&self) -> &str {
        &self.server
    }

    fn config_name(&self) -> String {
        self.net_conf_path.display().to_string()
    }

    fn lease_name(&self, key: &SubnetKey) -> String {
        match self.index.borrow().holder_name(key) {
            Some(name) => format!("node {name}"),
            None => format!("the node with podCIDR {key}"),
        }
    }

    async fn network_config(&mut self) -> Result<NetConfig, AgentError> {
        read_net_config(&self.net_conf_path)
    }

    /// Waits for this node's podCIDR and publishes the lease's annotations; API failures are
    /// retried (as flanneld does), a podCIDR the config cannot use is not.
    async fn acquire(&mut self, request: &LeaseRequest<'_>) -> Result<OwnLease, AgentError> {
        loop {
            match self.try_acquire(request).await {
                Ok(own) => return Ok(own),
                // Refusals too: RBAC may be filling its caches after an apiserver restart
                // (a missing ClusterRole says so in every retry's line).
                Err(e)
                    if matches!(
                        e.store_failure(),
                        Some(StoreFailure::Transient | StoreFailure::Refused)
                    ) && !matches!(e, AgentError::BadConfig { .. }) =>
                {
                    warn!("acquiring this node's subnet: {e}; retrying in {ACQUIRE_RETRY:?}");
                    sleep(ACQUIRE_RETRY).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn renew(&mut self, _own: &mut OwnLease) -> Result<(), AgentError> {
        Ok(())
    }

    async fn publish(&mut self, own: &mut OwnLease, value: LeaseValue) {
        if value.attrs == own.attrs {
            return;
        }
        let node = match self.get_own().await {
            Ok(Some(node)) => node,
            Ok(None) => return,
            Err(e) => {
                warn!("could not publish {}: {e}; will retry", value.what);
                return;
            }
        };
        match self.publisher.publish(&value.attrs, &node).await {
            Ok(()) => {
                log!("published {} on node {}", value.what, node.name);
                own.attrs = value.attrs;
            }
            Err(e) => warn!("could not publish {}: {e}; will retry", value.what),
        }
    }

    /// From the index while the watch has delivered everything (an informer's re-list),
    /// else from the API.
    async fn list(&mut self) -> Result<Snapshot<String>, AgentError> {
        if !self.index.borrow().synced {
            self.list_from_api().await?;
        }
        self.publisher.repair(&self.index).await;
        Ok(self.index.borrow().snapshot())
    }

    async fn watch(&mut self, resume: &String) -> Result<KubeWatch, AgentError> {
        let spread = std::process::id() % MIN_WATCH_TIMEOUT;
        let timeout = MIN_WATCH_TIMEOUT + spread;
        let params = WatchParams::default().timeout(timeout);
        let events = match self.nodes.watch(&params, resume).await {
            Ok(events) => events.boxed_local(),
            Err(e) => {
                self.index.borrow_mut().synced = false;
                return Err(self.request_failed("WATCH nodes", e));
            }
        };
        Ok(KubeWatch {
            events,
            index: self.index.clone(),
            publisher: self.publisher.clone(),
            silence_limit: Duration::from_secs(u64::from(timeout) + 60),
        })
    }

    async fn watch_lost(&mut self) {
        self.index.borrow_mut().synced = false;
    }
}
