//! The agent's life: start-up (config, lease, first reconcile), then watch, renew and resync
//! until told to stop. The desired peer set is always the full set of leases known, so a missed
//! watch event only delays convergence until the next re-list.

use std::time::Duration;

use tokio::time::{sleep, sleep_until, Instant};

use crate::acquire::{self, LeaseTiming, OwnLease};
use crate::error::AgentError;
use crate::files::write_atomic;
use crate::lease::LeaseAttrs;
use crate::log;
use crate::membership::{Event, Membership};
use crate::netconfig::NetConfig;
use crate::options::Options;
use crate::overlay::{Engine, Overlay, OverlaySettings, PeerEntry};
use crate::store::{self, Binding, Snapshot, Store};
use crate::subnet_env::{self, SubnetEnv};
use crate::template::{self, TemplateValues};

/// MTU written to subnet.env when the device cannot be read back (flannel's 1500 − 50).
const FALLBACK_MTU: u32 = 1450;
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Retry delay after a failed reconcile or renewal.
const RETRY: Duration = Duration::from_secs(2);

pub struct Agent {
    opts: Options,
    store: Store,
    net: NetConfig,
    overlay: Overlay,
    own: OwnLease,
    timing: LeaseTiming,
    members: Membership,
    /// Peers handed to the last successful reconcile.
    last_peers: Option<Vec<PeerEntry>>,
}

pub async fn run(opts: Options) -> Result<(), AgentError> {
    let public_ip = resolve_public_ip(&opts)?;
    let (mut store, net) = connect_and_read_config(&opts).await?;
    log!(
        "network {} (/{} subnets in {}..{}), vxlan VNI {} port {}{}",
        net.network,
        net.subnet_len,
        net.subnet_min,
        net.subnet_max,
        net.backend.vni,
        net.backend.effective_port(),
        if net.backend.direct_routing {
            ", DirectRouting"
        } else {
            ""
        }
    );
    let settings = OverlaySettings {
        engine: match &opts.vxlan_bin {
            Some(bin) => Engine::Exec(bin.clone()),
            None => Engine::Library,
        },
        state_dir: opts.state_dir.clone(),
        public_ip,
        iface: opts.iface.clone(),
        lock_file: opts.vxlan_lock_file.clone(),
    };
    let overlay = Overlay::new(settings, &net);
    let previous = std::fs::read_to_string(&opts.subnet_file)
        .ok()
        .and_then(|s| subnet_env::previous_subnet(&s));
    let timing = LeaseTiming {
        ttl: opts.lease_ttl,
        renew_margin: opts.renew_margin,
    };
    let own = acquire::acquire(
        &mut store,
        &net,
        public_ip,
        &|subnet| lease_attrs(public_ip, &net, subnet),
        previous,
        timing,
    )
    .await?;
    let snap = store.list().await?;
    let own_key = own.key;
    let mut agent = Agent {
        opts,
        store,
        net,
        overlay,
        own,
        timing,
        members: Membership::new(own_key),
        last_peers: None,
    };
    agent.take_snapshot(snap)?;
    let first = agent.reconcile().await;
    if agent.opts.once {
        return first;
    }
    if let Err(e) = first {
        log!("{e}; retrying");
    }
    agent.serve().await
}

/// Our lease value for `subnet`. The VTEP MAC is the one the vxlan reconcile gives the device
/// (derived from the VTEP address), so flanneld peers can program us from the first moment;
/// [`Agent::publish_mac`] corrects it should the device say otherwise.
fn lease_attrs(
    public_ip: std::net::Ipv4Addr,
    net: &NetConfig,
    subnet: ipnetwork::Ipv4Network,
) -> LeaseAttrs {
    let mac = netkit::link::format_mac(&vxlan::mac::vtep_mac(std::net::IpAddr::V4(
        subnet.network(),
    )));
    LeaseAttrs::vxlan(public_ip, net.backend.vni, Some(mac))
}

fn resolve_public_ip(opts: &Options) -> Result<std::net::Ipv4Addr, AgentError> {
    if let Some(ip) = opts.public_ip {
        return Ok(ip);
    }
    let Some(iface) = &opts.iface else {
        return Err(AgentError::Usage(
            "give --public-ip or --iface (the underlay address or interface)".into(),
        ));
    };
    let lookup = || -> Result<Option<std::net::Ipv4Addr>, netkit::Error> {
        let mut sock = netkit::Socket::new()?;
        let link = sock.link_by_name(iface)?;
        Ok(sock
            .addresses(Some(link.index), netkit::Family::V4)?
            .into_iter()
            .find_map(|a| match a.ip() {
                std::net::IpAddr::V4(v4) => Some(v4),
                std::net::IpAddr::V6(_) => None,
            }))
    };
    match lookup() {
        Ok(Some(ip)) => Ok(ip),
        Ok(None) => Err(AgentError::Usage(format!(
            "interface {iface} has no IPv4 address; give --public-ip"
        ))),
        Err(e) => Err(AgentError::Usage(format!(
            "reading the address of --iface {iface}: {e}"
        ))),
    }
}

/// Connects and reads the config, retrying transport failures until the start-up timeout.
/// A missing or invalid config fails at once: waiting would not fix it.
async fn connect_and_read_config(opts: &Options) -> Result<(Store, NetConfig), AgentError> {
    let outcome = retry_until(opts.startup_timeout, |left| async move {
        let attempt = async {
            let mut store = Store::connect(&opts.etcd_endpoints, &opts.etcd_prefix).await?;
            let net = store.config().await?;
            Ok::<_, AgentError>((store, net))
        };
        match tokio::time::timeout(left, attempt).await {
            Ok(Err(e @ (AgentError::ConfigMissing { .. } | AgentError::BadConfig { .. }))) => {
                Attempt::Fatal(e)
            }
            Ok(Err(e)) => Attempt::Retry(e),
            Ok(Ok(v)) => Attempt::Done(v),
            Err(_) => Attempt::Retry(AgentError::etcd("GET config", "no answer in time")),
        }
    })
    .await;
    outcome.map_err(|e| match e {
        Retried::Fatal(e) => e,
        Retried::GaveUp { after, last } => AgentError::Unreachable {
            endpoints: opts.etcd_endpoints.join(","),
            detail: format!(
                "gave up after {:.1}s (--startup-timeout {}s): {last}",
                after.as_secs_f64(),
                opts.startup_timeout.as_secs()
            ),
        },
    })
}

/// The outcome of one start-up attempt.
enum Attempt<T> {
    Done(T),
    /// Worth another try (etcd not reachable yet).
    Retry(AgentError),
    /// Waiting would not help.
    Fatal(AgentError),
}

enum Retried {
    Fatal(AgentError),
    /// The deadline passed; `after` is the time actually spent.
    GaveUp {
        after: Duration,
        last: AgentError,
    },
}

/// First back-off step of the start-up retries; it doubles up to [`MAX_STARTUP_BACKOFF`].
const FIRST_STARTUP_BACKOFF: Duration = Duration::from_millis(250);
const MAX_STARTUP_BACKOFF: Duration = Duration::from_secs(2);
/// The least time an attempt gets, even right at the deadline.
const MIN_ATTEMPT: Duration = Duration::from_millis(100);

/// Runs `attempt(time left)` until it succeeds, fails fatally or `timeout` has passed. The
/// last back-off sleep is cut to end at the deadline and one final attempt runs there, so the
/// whole takes `timeout` plus at most [`MIN_ATTEMPT`] (and never gives up early).
async fn retry_until<T, F, Fut>(timeout: Duration, mut attempt: F) -> Result<T, Retried>
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = Attempt<T>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let mut backoff = FIRST_STARTUP_BACKOFF;
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(MIN_ATTEMPT);
        let e = match attempt(left).await {
            Attempt::Done(v) => return Ok(v),
            Attempt::Fatal(e) => return Err(Retried::Fatal(e)),
            Attempt::Retry(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(Retried::GaveUp {
                after: now - started,
                last: e,
            });
        }
        let wait = backoff.min(deadline - now);
        log!("etcd not reachable yet ({e}); retrying in {wait:?}");
        sleep(wait).await;
        backoff = (backoff * 2).min(MAX_STARTUP_BACKOFF);
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
        self.members.replace(snap, &own_key)
    }

    /// Applies one watch response. Returns whether the peer set may have changed.
    fn apply_events(&mut self, resp: &etcd_client::WatchResponse) -> Result<bool, AgentError> {
        let mut changed = false;
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let name = String::from_utf8_lossy(kv.key());
            let event = match ev.event_type() {
                etcd_client::EventType::Put => Event::Put {
                    value: kv.value(),
                    etcd_lease: kv.lease(),
                },
                etcd_client::EventType::Delete => Event::Delete,
            };
            changed |= self.members.apply(&name, event, kv.mod_revision())?;
        }
        // Only event revisions advance ours: a response header may be ahead of events still
        // to come on this stream (a re-list always precedes a new watch anyway).
        Ok(changed)
    }

    /// Runs the overlay reconcile for the known peers, then publishes our VTEP MAC if the
    /// lease lacks it and writes subnet.env and the conflist.
    async fn reconcile(&mut self) -> Result<(), AgentError> {
        let peers = self.members.peers();
        let report = self
            .overlay
            .sync(&self.net, self.own.key.v4, &peers)
            .await?;
        if self.last_peers.as_ref() != Some(&peers) {
            log!("overlay reconciled with {} peer(s): {report}", peers.len());
        }
        self.last_peers = Some(peers);
        let (mac, mtu) = match self.overlay.device_info() {
            Some((mac, mtu)) => (Some(mac), mtu),
            None => {
                log!(
                    "device {} not found after reconcile; assuming MTU {FALLBACK_MTU}",
                    self.overlay.device()
                );
                (None, FALLBACK_MTU)
            }
        };
        if let Some(mac) = mac {
            self.publish_mac(mac).await;
        }
        self.write_node_files(mtu)
    }

    async fn publish_mac(&mut self, mac: String) {
        let current = self.own.attrs.vxlan_data().and_then(|d| d.vtep_mac);
        if current.as_deref() == Some(mac.as_str()) {
            return;
        }
        let mut attrs = self.own.attrs.clone();
        attrs.backend_data =
            LeaseAttrs::vxlan(attrs.public_ip, self.net.backend.vni, Some(mac.clone()))
                .backend_data;
        let previous = std::mem::replace(&mut self.own.attrs, attrs);
        let binding = if self.own.etcd_lease == 0 {
            Binding::Reservation
        } else {
            Binding::Existing(self.own.etcd_lease)
        };
        match acquire::rewrite(&mut self.store, &self.own, binding).await {
            Ok(_) => log!("published VtepMAC {mac} in lease {}", self.own.key),
            Err(e) => {
                log!("could not publish VtepMAC {mac}: {e}; will retry");
                self.own.attrs = previous;
            }
        }
    }

    fn write_node_files(&self, mtu: u32) -> Result<(), AgentError> {
        let env = SubnetEnv {
            network: self.net.network,
            subnet: self.own.key.v4,
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
        let values = TemplateValues {
            subnet: self.own.key.v4,
            network: self.net.network,
            mtu,
            public_ip: self.own.attrs.public_ip,
            vni: self.net.backend.vni,
            port: self.net.backend.effective_port(),
            subnet_file: self.opts.subnet_file.display().to_string(),
            peers_file: self.overlay.peers_path().display().to_string(),
            mode: Overlay::mode(&self.net).to_string(),
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
            let net = self.net.clone();
            let result = acquire::acquire(
                &mut self.store,
                &self.net,
                public_ip,
                &|subnet| lease_attrs(public_ip, &net, subnet),
                Some(self.own.key.v4),
                self.timing,
            )
            .await;
            match result {
                Ok(own) => {
                    self.own = own;
                    match self.relist().await {
                        Ok(()) | Err(AgentError::LeaseRevoked { .. }) => {}
                        Err(e) => log!("re-list failed: {e}"),
                    }
                    if let Err(e) = self.reconcile().await {
                        log!("{e}; retrying");
                    }
                    return Ok(true);
                }
                Err(
                    e @ (AgentError::SubnetsExhausted { .. } | AgentError::LeaseContention { .. }),
                ) => return Err(e),
                Err(e) => log!("acquiring a lease failed: {e}; retrying in {backoff:?}"),
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
                    log!(
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
                            if resp.canceled() || resp.compact_revision() > 0 {
                                log!("watch cancelled (compact revision {}, reason {:?}); re-listing",
                                    resp.compact_revision(), resp.cancel_reason());
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
                            log!("watch lost ({}); re-listing and watching again in {backoff:?}", store::brief(&e));
                            stream = None;
                            rewatch_at = Instant::now() + backoff;
                            self.store.failover().await;
                        }
                        Ok(None) => break,
                    },
                    _ = sleep_until(retry_at) => {
                        reconcile_at = None;
                        if let Err(e) = self.reconcile().await {
                            log!("{e}; retrying in {RETRY:?}");
                            reconcile_at = Some(Instant::now() + RETRY);
                        }
                    }
                    _ = sleep_until(renew_at) => {
                        match self.renew().await {
                            Ok(()) => {}
                            Err(e @ AgentError::LeaseRevoked { .. }) => return Err(e),
                            Err(e) => {
                                log!("lease renewal failed: {e}; retrying in {RETRY:?}");
                                self.own.renew_at = Some((Instant::now() + RETRY).into_std());
                            }
                        }
                    }
                    _ = sleep_until(next_resync) => {
                        next_resync = Instant::now() + self.opts.resync_interval;
                        let relisted = match self.relist().await {
                            Ok(()) => true,
                            Err(e @ AgentError::LeaseRevoked { .. }) => return Err(e),
                            Err(e) => {
                                log!("periodic re-list failed ({e}); reconciling the last known leases");
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
                Err(e) => log!(
                    "re-list failed ({e}); serving the last known {} lease(s)",
                    self.members.known.len()
                ),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With time paused, sleeps complete instantly and `Instant` follows the virtual clock.
    #[tokio::test(start_paused = true)]
    async fn start_up_retries_last_until_the_deadline_and_not_longer() {
        for secs in [1u64, 3, 10] {
            let timeout = Duration::from_secs(secs);
            let started = Instant::now();
            let mut attempts = 0;
            let out: Result<(), Retried> = retry_until(timeout, |_| {
                attempts += 1;
                async { Attempt::Retry(AgentError::etcd("GET config", "refused")) }
            })
            .await;
            let took = Instant::now() - started;
            match out {
                Err(Retried::GaveUp { after, .. }) => assert_eq!(after, took),
                _ => panic!("expected to give up"),
            }
            assert!(
                took >= timeout && took <= timeout + MIN_ATTEMPT,
                "{secs}s: {took:?}"
            );
            assert!(attempts >= 3, "{attempts}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slow_attempts_are_bounded_by_the_time_left() {
        let started = Instant::now();
        let out: Result<(), Retried> = retry_until(Duration::from_secs(3), |left| async move {
            // An attempt that hangs until its bound (an etcd that accepts but never answers).
            sleep(left).await;
            Attempt::Retry(AgentError::etcd("GET config", "no answer in time"))
        })
        .await;
        let took = Instant::now() - started;
        assert!(matches!(out, Err(Retried::GaveUp { .. })));
        assert!(
            took >= Duration::from_secs(3) && took <= Duration::from_secs(3) + MIN_ATTEMPT,
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fatal_errors_and_success_end_at_once() {
        let out: Result<(), Retried> = retry_until(Duration::from_secs(5), |_| async {
            Attempt::Fatal(AgentError::ConfigMissing { key: "k".into() })
        })
        .await;
        assert!(matches!(out, Err(Retried::Fatal(_))));
        let mut n = 0;
        let out = retry_until(Duration::from_secs(5), |_| {
            n += 1;
            let v = n;
            async move {
                if v < 3 {
                    Attempt::Retry(AgentError::etcd("x", "y"))
                } else {
                    Attempt::Done(v)
                }
            }
        })
        .await;
        assert!(matches!(out, Ok(3)));
    }
}
