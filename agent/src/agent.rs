//! The agent's life: start-up (config, backend, lease, first reconcile), then watch, renew and
//! resync until told to stop. The desired peer set is always the full set of leases known, so
//! a missed watch event only delays convergence until the next re-list. The parts it drives
//! are apart: the subnet schema on etcd (`subnet`), the data plane (`backend`, through
//! `reconcile`), the node's files (`node`).

use std::net::Ipv6Addr;
use std::time::Duration;

use tokio::time::{sleep, sleep_until, Instant};

use crate::backend::Node;
use crate::error::AgentError;
use crate::node::addr;
use crate::node::outputs::{self, NodeState};
use crate::ops::metrics;
use crate::options::Options;
use crate::reconcile::{masquerade_wanted, PassInput, Reconciler};
use crate::subnet::acquire::{self, LeaseTiming, OwnLease};
use crate::subnet::config::NetConfig;
use crate::subnet::membership::Membership;
use crate::subnet::startup::connect_and_read_config;
use crate::subnet::store::{Snapshot, Store};
use crate::{debug, log, warn};

const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Retry delay after a failed reconcile or renewal.
const RETRY: Duration = Duration::from_secs(2);

pub struct Agent {
    opts: Options,
    store: Store,
    net: NetConfig,
    /// The backend's data plane and the pass around it.
    reconciler: Reconciler,
    /// This node's IPv6 underlay address, on a dual-stack network.
    public_ipv6: Option<Ipv6Addr>,
    own: OwnLease,
    timing: LeaseTiming,
    members: Membership,
    /// `<prefix>/config` was found missing at the last resync: no masquerade rules then.
    config_gone: bool,
    /// The network config was seen changed in etcd (said once; applied at the next start).
    config_changed: bool,
}

pub async fn run(opts: Options) -> Result<(), AgentError> {
    let public_ip = addr::public_ip(&opts)?;
    if !opts.once {
        crate::ops::http::start(&opts).await?;
    }
    let (mut store, net) = connect_and_read_config(&opts).await?;
    let public_ipv6 = match net.ipv6 {
        Some(_) => Some(addr::public_ipv6(&opts)?),
        None => None,
    };
    let plane = net.backend.start(&Node {
        opts: &opts,
        network: net.networks(),
        public_ip,
        public_ipv6,
    })?;
    let reconciler = Reconciler::new(plane);
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
        net.backend.describe()
    );
    let previous = std::fs::read_to_string(&opts.subnet_file)
        .ok()
        .and_then(|s| crate::node::subnet_env::previous_subnet(&s));
    let timing = LeaseTiming {
        ttl: opts.lease_ttl,
        renew_margin: opts.renew_margin,
    };
    let own = acquire::acquire(
        &mut store,
        &net,
        public_ip,
        &|key| reconciler.lease_attrs(key),
        previous,
        timing,
    )
    .await?;
    metrics::LEASE_ACQUISITIONS.inc();
    let snap = store.list().await?;
    let own_key = own.key;
    let subnets = store.subnets_prefix();
    let mut agent = Agent {
        opts,
        store,
        net,
        reconciler,
        public_ipv6,
        own,
        timing,
        members: Membership::new(own_key, &subnets),
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

impl Agent {
    fn own_key_string(&self) -> String {
        self.store.lease_key(&self.own.key)
    }

    /// Replaces the known leases with a full listing.
    fn take_snapshot(&mut self, snap: Snapshot) -> Result<(), AgentError> {
        let own_key = self.own_key_string();
        self.members.own = self.own.key;
        debug!(
            1,
            "listed {} lease(s) at revision {}",
            snap.leases.len(),
            snap.revision
        );
        self.members.replace(snap, &own_key)
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
            acquire::publish(&mut self.store, &mut self.own, value).await;
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
        let gone = match self.store.config().await {
            Ok(net) => {
                if net != self.net && !self.config_changed {
                    log!("the network config in etcd changed; restart the agent to apply it");
                    self.config_changed = true;
                }
                false
            }
            Err(AgentError::ConfigMissing { key }) => {
                if !self.config_gone {
                    log!("network config {key} is gone from etcd: removing the masquerade rules");
                }
                true
            }
            // Unreachable or unreadable: keep what we have.
            Err(_) => self.config_gone,
        };
        if self.config_gone && !gone {
            log!("network config is back in etcd");
        }
        self.config_gone = gone;
    }

    async fn relist(&mut self) -> Result<(), AgentError> {
        let snap = self.store.list().await?;
        self.take_snapshot(snap)
    }

    /// Serves until a stop signal. A lease that disappears (deleted, or expired while etcd was
    /// unreachable) is acquired again, preferring the same subnet.
    async fn serve(&mut self) -> Result<(), AgentError> {
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| AgentError::io("installing", "SIGTERM handler", e))?;
        loop {
            match self.serve_until_revoked(&mut sigterm).await {
                Err(AgentError::LeaseRevoked { key }) => {
                    log!("our lease {key} disappeared from etcd (deleted or expired); acquiring one again");
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
            let public_ip = self.own.attrs.public_ip;
            let reconciler = &self.reconciler;
            let result = acquire::acquire(
                &mut self.store,
                &self.net,
                public_ip,
                &|key| reconciler.lease_attrs(key),
                Some(self.own.key),
                self.timing,
            )
            .await;
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
            let mut stream = match self.store.watch(self.members.revision + 1).await {
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
                        Some(s) => s.message().await.map(Some),
                        None => {
                            sleep_until(rewatch_at).await;
                            Ok(None)
                        }
                    }
                };
                tokio::select! {
                    msg = message => match msg {
                        Ok(Some(Some(resp))) => {
                            backoff = Duration::from_secs(1);
                            if resp.canceled || resp.compact_revision > 0 {
                                self.store.watch_cancelled(&resp.cancel_reason);
                                warn!("watch cancelled (compact revision {}, reason {:?}); re-listing",
                                    resp.compact_revision, resp.cancel_reason);
                                break;
                            }
                            fragment_changed |= self.members.apply_watch(&resp)?;
                            if fragment_changed && !resp.fragment {
                                fragment_changed = false;
                                reconcile_at = Some(Instant::now());
                            }
                        }
                        Ok(Some(None)) => {
                            log!("watch stream closed by {}; re-listing and watching again", self.store.endpoint());
                            stream = None;
                            rewatch_at = Instant::now() + backoff;
                        }
                        Err(e) => {
                            metrics::ETCD_RECONNECTS.inc();
                            warn!("watch lost ({e}); re-listing and watching again in {backoff:?}");
                            stream = None;
                            rewatch_at = Instant::now() + backoff;
                            self.store.failover().await;
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
                        match acquire::renew(&mut self.store, &mut self.own, self.timing).await {
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
