//! The agent's life: start-up (config, backend, lease, first reconcile), then watch, renew and
//! resync until told to stop. The desired peer set is always the full set of leases known, so
//! a missed watch event only delays convergence until the next re-list. The parts it drives
//! are apart: the store of leases (`manager`, through the `SubnetManager` seam), the cluster
//! as known (`membership`), the data plane (`backend`, through `reconcile`), the node's files
//! (`node`).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use tokio::time::{sleep, sleep_until, Instant};

use crate::backend::{registry, Backend, Node};
use crate::error::{AgentError, Stage, StoreFailure};
use crate::manager::etcd::EtcdManager;
use crate::manager::kube::KubeManager;
use crate::manager::{LeaseRequest, LeaseWatch, OwnLease, Snapshot, SubnetManager, WatchEvent};
use crate::membership::Membership;
use crate::node::addr;
use crate::node::outputs::{self, NodeState};
use crate::ops::http;
use crate::ops::metrics;
use crate::options::Options;
use crate::policy;
use crate::reconcile::{masquerade_wanted, PassInput, Reconciler};
use crate::subnet::config::NetConfig;
use crate::{debug, log, warn};

const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Retry delay after a failed reconcile or renewal.
const RETRY: Duration = Duration::from_secs(2);

pub struct Agent<M: SubnetManager> {
    opts: Options,
    manager: M,
    net: NetConfig,
    /// The backend's data plane and the pass around it.
    reconciler: Reconciler,
    /// This node's IPv6 underlay address, on a dual-stack network.
    public_ipv6: Option<Ipv6Addr>,
    own: OwnLease,
    members: Membership,
    /// Where the next watch picks up: after the last listing, or the last changes applied.
    resume: M::Resume,
    /// `<prefix>/config` was found missing at the last resync: no masquerade rules then.
    config_gone: bool,
    /// The network config was seen changed in etcd (said once; applied at the next start).
    config_changed: bool,
}

pub async fn run(mut opts: Options) -> Result<(), AgentError> {
    if !opts.once {
        http::start(&http::Listen {
            ip: opts.healthz_ip,
            healthz_port: opts.healthz_port,
            metrics_port: opts.metrics_port,
        })
        .await?;
    }
    if opts.kube.enabled {
        let (manager, net) = KubeManager::connect(&opts).await?;
        if opts.kube.network_policy && !opts.once {
            let plane = policy::kernel::KernelPlane::open()?;
            let socket = &opts.kube.policy_socket;
            policy::start(manager.client(), manager.node_name(), plane, socket)?;
        } else {
            // A socket a policy-enforcing run left would make the CNI chain fail every ADD.
            policy::admit::remove_stale(&opts.kube.policy_socket);
        }
        // An operator's public-ip-overwrite on the Node wins over the interface's address.
        let (v4, v6) = manager.public_ip_overwrites();
        opts.public_ip = v4.or(opts.public_ip);
        opts.public_ipv6 = v6.or(opts.public_ipv6);
        per_node_flags(&manager, &mut opts)?;
        let public_ip = addr::public_ip(&opts)?;
        let name = manager.node_name().to_string();
        return run_on(opts, manager, net, public_ip, Some(&name)).await;
    }
    let public_ip = addr::public_ip(&opts)?;
    let (manager, net) = EtcdManager::connect(&opts).await?;
    run_on(opts, manager, net, public_ip, None).await
}

/// The backend flags this node's annotations set (`<prefix>/bgp-as`...): a DaemonSet gives every
/// node the same arguments, so what differs from node to node is on the Node. The annotation
/// wins over the flag, as `public-ip-overwrite` wins over the interface's address; a value the
/// flag would refuse stops the agent, naming the annotation.
fn per_node_flags(manager: &KubeManager, opts: &mut Options) -> Result<(), AgentError> {
    for flag in registry::flags().filter(|f| f.per_node) {
        let (name, value) = manager.own_annotation(flag.annotation_suffix());
        let Some(value) = value else { continue };
        (flag.check)(value).map_err(|e| {
            AgentError::Usage(format!(
                "annotation {name} on node {}: {value:?} {e}",
                manager.node_name()
            ))
        })?;
        log!("{} {value} from this node's annotation {name}", flag.name);
        opts.backend_flags.set(flag, value.to_string());
    }
    Ok(())
}

/// The agent on `manager`, whose network config is `net`; `node_name`: this node's name, when
/// the agent knows it.
async fn run_on<M: SubnetManager>(
    opts: Options,
    mut manager: M,
    net: NetConfig,
    public_ip: Ipv4Addr,
    node_name: Option<&str>,
) -> Result<(), AgentError> {
    let (registration, backend) = registry::backend_of(&manager.config_name(), &net)?;
    let public_ipv6 = match net.ipv6 {
        Some(_) => Some(addr::public_ipv6(&opts)?),
        None => None,
    };
    let flags = opts.backend_flags.only(registration.flags);
    let plane = backend
        .start(&Node {
            network: net.networks(),
            public_ip,
            public_ipv6,
            iface: opts.iface.as_deref(),
            name: node_name,
            flags: &flags,
        })
        .map_err(|e| AgentError::backend(backend.type_name(), Stage::Start, e))?;
    log!(
        "network {} (/{} subnets in {}..{}){}, {}",
        net.network,
        net.subnet_len,
        net.subnet_min,
        net.subnet_max,
        net.ipv6
            .as_ref()
            .map(|v6| format!(
                " and {} (/{} subnets in {}..{})",
                v6.network, v6.subnet_len, v6.subnet_min, v6.subnet_max
            ))
            .unwrap_or_default(),
        backend.describe()
    );
    let reconciler = Reconciler::new(backend, plane);
    let previous = std::fs::read_to_string(&opts.subnet_file)
        .ok()
        .and_then(|s| crate::node::subnet_env::previous_subnet(&s));
    let own = manager
        .acquire(&LeaseRequest {
            net: &net,
            public_ip,
            attrs_for: &|key| reconciler.lease_attrs(key),
            previous,
        })
        .await?;
    metrics::LEASE_ACQUISITIONS.inc();
    let snap = manager.list().await?;
    let members = Membership::new(own.key, manager.store_name());
    let resume = snap.resume.clone();
    let mut agent = Agent {
        opts,
        manager,
        net,
        reconciler,
        public_ipv6,
        own,
        members,
        resume,
        config_gone: false,
        config_changed: false,
    };
    agent.take_snapshot(snap)?;
    let first = agent.reconcile().await;
    if agent.opts.once {
        return first;
    }
    if let Err(e) = first {
        warn!("{e}; retrying");
    }
    let served = agent.serve().await;
    agent.reconciler.stop();
    served
}

impl<M: SubnetManager> Agent<M> {
    /// Replaces the known leases with a full listing.
    fn take_snapshot(&mut self, snap: Snapshot<M::Resume>) -> Result<(), AgentError> {
        let own_name = self.manager.lease_name(&self.own.key);
        self.members.own = self.own.key;
        debug!(
            1,
            "listed {} lease(s) at revision {}",
            snap.leases.len(),
            snap.resume
        );
        let Snapshot {
            resume,
            leases,
            junk,
        } = snap;
        self.members.replace(leases, &junk, &own_name)?;
        self.resume = resume;
        Ok(())
    }

    /// One pass of the backend's data plane for the known peers (with the masquerade rules),
    /// then our lease value as the pass wants it, and the node's files.
    async fn reconcile(&mut self) -> Result<(), AgentError> {
        let masquerade = if self.opts.ip_masq && !self.config_gone {
            masquerade_wanted(&self.net, &self.own.key)
        } else {
            Vec::new()
        };
        let input = PassInput {
            net: &self.net,
            own: &self.own.key,
            public_ip: self.own.attrs.public_ip,
            public_ipv6: self.public_ipv6,
            masquerade,
        };
        let pass = self.reconciler.pass(input, &mut self.members).await?;
        if let Some(value) = pass.lease_attrs {
            self.manager.publish(&mut self.own, value).await;
        }
        let state = NodeState {
            net: &self.net,
            own: &self.own.key,
            attrs: &self.own.attrs,
            public_ipv6: self.public_ipv6,
            mtu: pass.mtu,
            backend: self.reconciler.template_values(),
        };
        outputs::write(&self.opts, &state)
    }

    /// Reads `<prefix>/config` again (periodic resync). flanneld reads it once, at start; so
    /// does the agent for everything but one thing: while the config is gone from etcd, the
    /// masquerade rules are removed (by the reconcile that follows every resync).
    async fn check_config(&mut self) {
        let read = self.manager.network_config().await.and_then(|net| {
            let (_, backend) = registry::backend_of(&self.manager.config_name(), &net)?;
            Ok((net, backend))
        });
        let gone = match read {
            Ok((net, backend)) => {
                if !self.same_config(&net, backend.as_ref()) && !self.config_changed {
                    log!(
                        "the network config in {} changed; restart the agent to apply it",
                        self.manager.store_name()
                    );
                    self.config_changed = true;
                }
                false
            }
            Err(e) if e.store_failure() == Some(StoreFailure::ConfigMissing) => {
                if !self.config_gone {
                    log!(
                        "network config {} is gone from {}: removing the masquerade rules",
                        self.manager.config_name(),
                        self.manager.store_name()
                    );
                }
                true
            }
            // Unreachable or unreadable: keep what we have.
            Err(_) => self.config_gone,
        };
        if self.config_gone && !gone {
            log!("network config is back in {}", self.manager.store_name());
        }
        self.config_gone = gone;
    }

    /// Whether `net` with `backend` is the config the agent runs (the backend's options
    /// compared parsed, as written differently they may mean the same).
    fn same_config(&self, net: &NetConfig, backend: &dyn Backend) -> bool {
        let running = self.reconciler.backend();
        net.same_network(&self.net)
            && running.type_name() == backend.type_name()
            && running.same_options(backend)
    }

    async fn relist(&mut self) -> Result<(), AgentError> {
        let snap = self.manager.list().await?;
        self.take_snapshot(snap)
    }

    /// Serves until a stop signal. A lease that disappears (deleted, or expired while etcd was
    /// unreachable) is acquired again, preferring the same subnet.
    async fn serve(&mut self) -> Result<(), AgentError> {
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| AgentError::io("installing", "SIGTERM handler", e))?;
        loop {
            match self.serve_until_revoked(&mut sigterm).await {
                Err(AgentError::LeaseRevoked { key, store }) => {
                    log!("our lease {key} disappeared from {store} (deleted or expired); acquiring one again");
                    if !self.reacquire(&mut sigterm).await? {
                        return Ok(());
                    }
                }
                other => return other,
            }
        }
    }

    /// Returns `Ok(false)` when a stop signal came first.
    async fn reacquire(
        &mut self,
        sigterm: &mut tokio::signal::unix::Signal,
    ) -> Result<bool, AgentError> {
        let mut backoff = Duration::from_secs(1);
        loop {
            let reconciler = &self.reconciler;
            let request = LeaseRequest {
                net: &self.net,
                public_ip: self.own.attrs.public_ip,
                attrs_for: &|key| reconciler.lease_attrs(key),
                previous: Some(self.own.key),
            };
            let result = self.manager.acquire(&request).await;
            match result {
                Ok(own) => {
                    metrics::LEASE_ACQUISITIONS.inc();
                    self.own = own;
                    match self.relist().await {
                        Ok(()) | Err(AgentError::LeaseRevoked { .. }) => {}
                        Err(e) => log!("re-list failed: {e}"),
                    }
                    if let Err(e) = self.reconcile().await {
                        warn!("{e}; retrying");
                    }
                    return Ok(true);
                }
                Err(
                    e @ (AgentError::SubnetsExhausted { .. }
                    | AgentError::Ipv6SubnetsExhausted { .. }
                    | AgentError::LeaseContention { .. }),
                ) => return Err(e),
                Err(e) => warn!("acquiring a lease failed: {e}; retrying in {backoff:?}"),
            }
            tokio::select! {
                _ = sleep(backoff) => {}
                _ = tokio::signal::ctrl_c() => return Ok(false),
                _ = sigterm.recv() => return Ok(false),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Watches, renews and resyncs until a stop signal (Ok) or our lease disappears.
    async fn serve_until_revoked(
        &mut self,
        sigterm: &mut tokio::signal::unix::Signal,
    ) -> Result<(), AgentError> {
        let far = Duration::from_secs(365 * 86_400);
        let mut backoff = Duration::from_secs(1);
        let mut next_resync = Instant::now() + self.opts.resync_interval;
        // Reconcile right away: whatever happened before (start-up, re-acquire) is settled here.
        let mut reconcile_at: Option<Instant> = Some(Instant::now());
        // A change seen in a fragment waits for the revision's last fragment.
        let mut fragment_changed = false;
        loop {
            let mut stream = match self.manager.watch(&self.resume).await {
                Ok(s) => Some(s),
                Err(e) => {
                    warn!(
                        "cannot watch ({e}); serving the last known {} lease(s)",
                        self.members.known.len()
                    );
                    None
                }
            };
            // Without a watch, wait out the back-off (still renewing, resyncing, reconciling).
            let mut rewatch_at = Instant::now() + backoff;
            loop {
                let renew_at = self
                    .own
                    .renew_at
                    .map(Instant::from_std)
                    .unwrap_or_else(|| Instant::now() + far);
                let retry_at = reconcile_at.unwrap_or_else(|| Instant::now() + far);
                let message = async {
                    match stream.as_mut() {
                        Some(s) => s.next().await.map(Some),
                        None => {
                            sleep_until(rewatch_at).await;
                            Ok(None)
                        }
                    }
                };
                tokio::select! {
                    msg = message => match msg {
                        Ok(Some(Some(WatchEvent::Relist))) => {
                            backoff = Duration::from_secs(1);
                            break;
                        }
                        Ok(Some(Some(WatchEvent::Changes { changes, resume, partial }))) => {
                            backoff = Duration::from_secs(1);
                            if let Some(resume) = resume {
                                self.resume = resume;
                            }
                            fragment_changed |= self.members.apply_all(changes)?;
                            if fragment_changed && !partial {
                                fragment_changed = false;
                                reconcile_at = Some(Instant::now());
                            }
                        }
                        Ok(Some(None)) => {
                            log!("watch stream closed by {}; re-listing and watching again", self.manager.server());
                            stream = None;
                            rewatch_at = Instant::now() + backoff;
                        }
                        Err(e) => {
                            warn!("watch lost ({e}); re-listing and watching again in {backoff:?}");
                            stream = None;
                            rewatch_at = Instant::now() + backoff;
                            self.manager.watch_lost().await;
                        }
                        Ok(None) => break,
                    },
                    _ = sleep_until(retry_at) => {
                        reconcile_at = None;
                        if let Err(e) = self.reconcile().await {
                            warn!("{e}; retrying in {RETRY:?}");
                            reconcile_at = Some(Instant::now() + RETRY);
                        }
                    }
                    _ = sleep_until(renew_at) => {
                        match self.manager.renew(&mut self.own).await {
                            Ok(()) => {}
                            Err(e @ AgentError::LeaseRevoked { .. }) => return Err(e),
                            Err(e) => {
                                metrics::LEASE_RENEWAL_FAILURES.inc();
                                warn!("lease renewal failed: {e}; retrying in {RETRY:?}");
                                self.own.renew_at = Some((Instant::now() + RETRY).into_std());
                            }
                        }
                    }
                    _ = sleep_until(next_resync) => {
                        next_resync = Instant::now() + self.opts.resync_interval;
                        self.check_config().await;
                        let relisted = match self.relist().await {
                            Ok(()) => true,
                            Err(e @ AgentError::LeaseRevoked { .. }) => return Err(e),
                            Err(e) => {
                                warn!("periodic re-list failed ({e}); reconciling the last known leases");
                                false
                            }
                        };
                        reconcile_at = Some(Instant::now());
                        if relisted && stream.is_none() {
                            // etcd answers again: watch now rather than after the back-off.
                            backoff = Duration::from_secs(1);
                            break;
                        }
                    }
                    _ = tokio::signal::ctrl_c() => { log!("interrupted; exiting (the lease stays for a restart)"); return Ok(()); }
                    _ = sigterm.recv() => { log!("terminated; exiting (the lease stays for a restart)"); return Ok(()); }
                }
            }
            drop(stream);
            // Re-list before watching again: it catches up on whatever the lost or compacted
            // watch did not deliver, and the new watch starts right after the listing.
            match self.relist().await {
                Ok(()) => reconcile_at = Some(Instant::now()),
                Err(e @ AgentError::LeaseRevoked { .. }) => return Err(e),
                Err(e) => warn!(
                    "re-list failed ({e}); serving the last known {} lease(s)",
                    self.members.known.len()
                ),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}
