//! The agent's life: start-up (config, lease, first reconcile), then watch, renew and resync
//! until told to stop. The desired peer set is always the full set of leases known, so a missed
//! watch event only delays convergence until the next re-list.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnetwork::IpNetwork;
use tokio::time::{sleep, sleep_until, Instant};

use crate::acquire::{self, LeaseTiming, OwnLease};
use crate::error::AgentError;
use crate::etcd::proto::{EventType, WatchResponse};
use crate::files::write_atomic;
use crate::key::SubnetKey;
use crate::lease::LeaseAttrs;
use crate::masquerade::{self, Change, MasqFamily};
use crate::membership::{Event, Membership};
use crate::netconfig::NetConfig;
use crate::node_addr;
use crate::options::Options;
use crate::overlay::{Engine, IpFamily, Overlay, OverlaySettings, PeerEntry};
use crate::startup::connect_and_read_config;
use crate::store::{Binding, Snapshot, Store};
use crate::subnet_env::{self, SubnetEnv};
use crate::template::{self, Ipv6Values, TemplateValues};
use crate::tunnel::Tunnel;
use crate::{debug, log, metrics, warn};

/// MTU written to subnet.env when the device cannot be read back (flannel's 1500 − 50).
const FALLBACK_MTU: u32 = 1450;
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Retry delay after a failed reconcile or renewal.
const RETRY: Duration = Duration::from_secs(2);

/// One overlay (IPv4, or the IPv6 one of a dual-stack network) and the peers it was last
/// reconciled with.
struct FamilyOverlay {
    overlay: Overlay,
    last_peers: Option<Vec<PeerEntry>>,
}

pub struct Agent {
    opts: Options,
    store: Store,
    net: NetConfig,
    /// IPv4 first, then IPv6 on a dual-stack network (vxlan; none for a routed backend).
    overlays: Vec<FamilyOverlay>,
    /// The wireguard or ipip backend, when the network config names one.
    tunnel: Option<Tunnel>,
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
    let public_ip = node_addr::public_ip(&opts)?;
    if !opts.once {
        crate::http::start(&opts).await?;
    }
    let (mut store, net) = connect_and_read_config(&opts).await?;
    let public_ipv6 = match net.ipv6 {
        Some(_) => Some(node_addr::public_ipv6(&opts)?),
        None => None,
    };
    let tunnel = Tunnel::new(&net, opts.iface.clone(), public_ip, public_ipv6)?;
    let backend = match &tunnel {
        Some(t) => t.describe(),
        None => format!(
            "vxlan VNI {} port {}{}",
            net.backend.vni,
            net.backend.effective_port(),
            if net.backend.direct_routing {
                ", DirectRouting"
            } else {
                ""
            }
        ),
    };
    log!(
        "network {} (/{} subnets in {}..{}){}, {backend}",
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
    );
    let settings = |public_ip: IpAddr| OverlaySettings {
        engine: match &opts.vxlan_bin {
            Some(bin) => Engine::Exec(bin.clone()),
            None => Engine::Library,
        },
        state_dir: opts.state_dir.clone(),
        public_ip,
        iface: opts.iface.clone(),
        lock_file: opts.vxlan_lock_file.clone(),
    };
    let mut overlays = vec![FamilyOverlay {
        overlay: Overlay::new(settings(public_ip.into()), &net, IpFamily::V4),
        last_peers: None,
    }];
    if tunnel.is_some() {
        overlays.clear();
    } else if let Some(ip6) = public_ipv6 {
        overlays.push(FamilyOverlay {
            overlay: Overlay::new(settings(ip6.into()), &net, IpFamily::V6),
            last_peers: None,
        });
    }
    let previous = std::fs::read_to_string(&opts.subnet_file)
        .ok()
        .and_then(|s| subnet_env::previous_subnet(&s));
    let timing = LeaseTiming {
        ttl: opts.lease_ttl,
        renew_margin: opts.renew_margin,
    };
    let routed_attrs = tunnel.as_ref().map(Tunnel::lease_attrs);
    let own = acquire::acquire(
        &mut store,
        &net,
        public_ip,
        &|key| lease_attrs(routed_attrs.as_ref(), public_ip, public_ipv6, &net, key),
        previous,
        timing,
    )
    .await?;
    metrics::LEASE_ACQUISITIONS.inc();
    let snap = store.list().await?;
    let own_key = own.key;
    let mut agent = Agent {
        opts,
        store,
        net,
        overlays,
        tunnel,
        public_ipv6,
        own,
        timing,
        members: Membership::new(own_key),
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
    agent.serve().await
}

/// The VTEP MAC the vxlan reconcile gives a device whose VTEP is `subnet`'s network address.
fn derived_mac(subnet: IpNetwork) -> String {
    netkit::link::format_mac(&vxlan::mac::vtep_mac(subnet.network()))
}

/// Our lease value for `key`. The VTEP MACs are the ones the vxlan reconcile gives the
/// devices (derived from the VTEP addresses), so flanneld peers can program us from the first
/// moment; [`Agent::publish_macs`] corrects them should the devices say otherwise.
/// A routed backend's value (`routed`) does not depend on the key.
fn lease_attrs(
    routed: Option<&LeaseAttrs>,
    public_ip: Ipv4Addr,
    public_ipv6: Option<Ipv6Addr>,
    net: &NetConfig,
    key: &SubnetKey,
) -> LeaseAttrs {
    if let Some(attrs) = routed {
        return attrs.clone();
    }
    let vni = net.backend.vni;
    let attrs = LeaseAttrs::vxlan(public_ip, vni, Some(derived_mac(key.v4.into())));
    match (key.v6, public_ipv6) {
        (Some(sn6), Some(ip6)) => attrs.with_ipv6(ip6, vni, Some(derived_mac(sn6.into()))),
        _ => attrs,
    }
}

/// This node's subnet of one family.
fn own_subnet(key: &SubnetKey, family: IpFamily) -> Option<IpNetwork> {
    match family {
        IpFamily::V4 => Some(key.v4.into()),
        IpFamily::V6 => key.v6.map(IpNetwork::from),
    }
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

    /// Applies one watch response. Returns whether the peer set may have changed.
    fn apply_events(&mut self, resp: &WatchResponse) -> Result<bool, AgentError> {
        let mut changed = false;
        for ev in &resp.events {
            let Some(kv) = &ev.kv else { continue };
            let name = String::from_utf8_lossy(&kv.key);
            metrics::WATCH_EVENTS.inc();
            debug!(
                1,
                "watch: {} {name} at revision {}",
                if ev.r#type == EventType::Delete as i32 {
                    "DELETE"
                } else {
                    "PUT"
                },
                kv.mod_revision
            );
            let event = if ev.r#type == EventType::Delete as i32 {
                Event::Delete
            } else {
                Event::Put {
                    value: &kv.value,
                    etcd_lease: kv.lease,
                }
            };
            changed |= self.members.apply(&name, event, kv.mod_revision)?;
        }
        // Only event revisions advance ours: a response header may be ahead of events still
        // to come on this stream (a re-list always precedes a new watch anyway).
        Ok(changed)
    }

    /// Runs the overlay reconciles (one per family) for the known peers, then publishes our
    /// VTEP MACs if the lease lacks them and writes subnet.env and the conflist. A failing
    /// family does not keep the other from being reconciled.
    async fn reconcile(&mut self) -> Result<(), AgentError> {
        let started = std::time::Instant::now();
        let result = self.reconcile_pass().await;
        let took = started.elapsed();
        metrics::reconciled(took, result.is_ok());
        let programmed: usize = match &self.tunnel {
            Some(tunnel) => tunnel.programmed(),
            None => self
                .overlays
                .iter()
                .filter_map(|fo| fo.last_peers.as_ref().map(Vec::len))
                .sum(),
        };
        metrics::PEERS_PROGRAMMED.set(programmed as u64);
        metrics::LEASES_KNOWN.set(self.members.known.len() as u64);
        let usable = self.members.peers(IpFamily::V4).len() + 1;
        metrics::LEASES_UNUSABLE.set(self.members.known.len().saturating_sub(usable) as u64);
        debug!(
            1,
            "reconcile pass took {took:?}: {}",
            match &result {
                Ok(()) => "ok".to_string(),
                Err(e) => e.to_string(),
            }
        );
        result
    }

    async fn reconcile_pass(&mut self) -> Result<(), AgentError> {
        if let Some(tunnel) = &mut self.tunnel {
            let pass = tunnel
                .reconcile(&self.net, &self.own.key, &self.members.known)
                .await;
            let masq = self.reconcile_masquerade().await;
            let mtu = pass?;
            masq?;
            return self.write_node_files(mtu);
        }
        let mut mtu: Option<u32> = None;
        let mut macs = Vec::new();
        let mut failure = None;
        for fo in &mut self.overlays {
            let family = fo.overlay.family();
            let Some(subnet) = own_subnet(&self.own.key, family) else {
                continue;
            };
            let peers = self.members.peers(family);
            let report = match fo.overlay.sync(&self.net, subnet, &peers).await {
                Ok(r) => r,
                Err(e) => {
                    failure.get_or_insert(e);
                    continue;
                }
            };
            if fo.last_peers.as_ref() != Some(&peers) {
                log!(
                    "overlay {} reconciled with {} peer(s): {report}",
                    fo.overlay.device(),
                    peers.len()
                );
            }
            fo.last_peers = Some(peers);
            match fo.overlay.device_info() {
                Some((mac, dev_mtu)) => {
                    macs.push((family, mac));
                    // Pods have one MTU for both families: the smaller device's.
                    mtu = Some(mtu.map_or(dev_mtu, |m| m.min(dev_mtu)));
                }
                None => log!(
                    "device {} not found after reconcile; assuming MTU {FALLBACK_MTU}",
                    fo.overlay.device()
                ),
            }
        }
        if let Err(e) = self.reconcile_masquerade().await {
            failure.get_or_insert(e);
        }
        if let Some(e) = failure {
            return Err(e);
        }
        self.publish_macs(&macs).await;
        self.write_node_files(mtu.unwrap_or(FALLBACK_MTU))
    }

    /// The masquerade rules flanneld's `--ip-masq` keeps: one set per family of the lease,
    /// none without `--ip-masq` or while the network config is gone from etcd.
    fn masquerade_wanted(&self) -> Vec<MasqFamily> {
        if !self.opts.ip_masq || self.config_gone {
            return Vec::new();
        }
        let mut want = vec![MasqFamily {
            network: self.net.network.into(),
            pods: self.own.key.v4.into(),
        }];
        if let (Some(v6), Some(pods)) = (&self.net.ipv6, self.own.key.v6) {
            want.push(MasqFamily {
                network: v6.network.into(),
                pods: pods.into(),
            });
        }
        want
    }

    async fn reconcile_masquerade(&mut self) -> Result<(), AgentError> {
        let want = self.masquerade_wanted();
        let changes = tokio::task::spawn_blocking(move || masquerade::reconcile(&want))
            .await
            .map_err(|e| AgentError::Masquerade(format!("reconcile thread failed: {e}")))??;
        for (change, table) in changes
            .iter()
            .zip([masquerade::TABLE_V4, masquerade::TABLE_V6])
        {
            match change {
                Change::Written => {
                    log!("masquerade: wrote table {table} (flanneld --ip-masq rules)")
                }
                Change::Removed => log!("masquerade: removed table {table}"),
                Change::Unchanged | Change::Absent => {}
            }
        }
        Ok(())
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

    /// Rewrites our lease when a device's MAC differs from the one it advertises.
    async fn publish_macs(&mut self, macs: &[(IpFamily, String)]) {
        let vni = self.net.backend.vni;
        let mut attrs = self.own.attrs.clone();
        for (family, mac) in macs {
            match family {
                IpFamily::V4 => {
                    if attrs.vxlan_data().and_then(|d| d.vtep_mac).as_ref() != Some(mac) {
                        attrs.backend_data =
                            LeaseAttrs::vxlan(attrs.public_ip, vni, Some(mac.clone())).backend_data;
                    }
                }
                IpFamily::V6 => {
                    let current = attrs.vxlan_v6_data().and_then(|(_, d)| d.vtep_mac);
                    if let (true, Some(ip6)) = (current.as_ref() != Some(mac), self.public_ipv6) {
                        attrs = attrs.with_ipv6(ip6, vni, Some(mac.clone()));
                    }
                }
            }
        }
        if attrs == self.own.attrs {
            return;
        }
        let previous = std::mem::replace(&mut self.own.attrs, attrs);
        let binding = if self.own.etcd_lease == 0 {
            Binding::Reservation
        } else {
            Binding::Existing(self.own.etcd_lease)
        };
        let shown: Vec<&str> = macs.iter().map(|(_, m)| m.as_str()).collect();
        let shown = shown.join(", ");
        match acquire::rewrite(&mut self.store, &self.own, binding).await {
            Ok(_) => log!("published VtepMAC {shown} in lease {}", self.own.key),
            Err(e) => {
                warn!("could not publish VtepMAC {shown}: {e}; will retry");
                self.own.attrs = previous;
            }
        }
    }

    fn write_node_files(&self, mtu: u32) -> Result<(), AgentError> {
        let ipv6 = match (&self.net.ipv6, self.own.key.v6) {
            (Some(v6), Some(sn6)) => Some((v6.network, sn6)),
            _ => None,
        };
        let env = SubnetEnv {
            network: self.net.network,
            subnet: self.own.key.v4,
            ipv6,
            mtu,
            ipmasq: self.opts.ip_masq,
        };
        if write_atomic(&self.opts.subnet_file, env.render().as_bytes())? {
            log!("wrote {}", self.opts.subnet_file.display());
        }
        let Some(tpl_path) = &self.opts.cni_conf_template else {
            return Ok(());
        };
        let text = std::fs::read_to_string(tpl_path)
            .map_err(|e| AgentError::io("reading template", tpl_path, e))?;
        let peers_file = |family: IpFamily| {
            self.overlays
                .iter()
                .find(|fo| fo.overlay.family() == family)
                .map(|fo| fo.overlay.peers_path().display().to_string())
                .unwrap_or_default()
        };
        let values = TemplateValues {
            subnet: self.own.key.v4,
            network: self.net.network,
            mtu,
            public_ip: self.own.attrs.public_ip,
            vni: self.net.backend.vni,
            port: self.net.backend.effective_port(),
            subnet_file: self.opts.subnet_file.display().to_string(),
            peers_file: peers_file(IpFamily::V4),
            mode: Overlay::mode(&self.net).to_string(),
            ipv6: match (ipv6, self.public_ipv6) {
                (Some((network, subnet)), Some(public_ip)) => Some(Ipv6Values {
                    subnet,
                    network,
                    public_ip,
                    peers_file: peers_file(IpFamily::V6),
                }),
                _ => None,
            },
        };
        let rendered = template::render(&text, &values).map_err(|msg| AgentError::Template {
            path: tpl_path.clone(),
            msg,
        })?;
        let name = tpl_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let out = self.opts.cni_conf_dir.join(template::output_name(&name));
        if write_atomic(&out, rendered.as_bytes())? {
            log!("wrote {}", out.display());
        }
        Ok(())
    }

    async fn relist(&mut self) -> Result<(), AgentError> {
        let snap = self.store.list().await?;
        self.take_snapshot(snap)
    }

    async fn renew(&mut self) -> Result<(), AgentError> {
        let now = Instant::now();
        let id =
            acquire::rewrite(&mut self.store, &self.own, Binding::Fresh(self.timing.ttl)).await?;
        self.own.etcd_lease = id;
        self.own.renew_at = Some(self.timing.renew_at(now.into_std()));
        metrics::LEASE_RENEWALS.inc();
        log!("renewed lease {} for {}s", self.own.key, self.timing.ttl);
        Ok(())
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
            let public_ipv6 = self.public_ipv6;
            let net = self.net.clone();
            let routed_attrs = self.tunnel.as_ref().map(Tunnel::lease_attrs);
            let result = acquire::acquire(
                &mut self.store,
                &self.net,
                public_ip,
                &|key| lease_attrs(routed_attrs.as_ref(), public_ip, public_ipv6, &net, key),
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
                            if self.apply_events(&resp)? {
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
                        match self.renew().await {
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
