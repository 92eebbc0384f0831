//! One reconcile pass, the same for every backend: the peer leases that pass the shared checks
//! (`subnet::validate`) and the backend's own, its
//! data plane's pass on a blocking thread (bounded in time), flanneld's masquerade rules, the
//! pass's log lines and metrics. The agent then publishes the lease value the pass wants and
//! writes the node's files.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use crate::backend::{Backend, DataPlane, Pass, TemplateValues};
use crate::error::{AgentError, Stage};
use crate::membership::Membership;
use crate::node::masquerade::{self, Change, MasqFamily};
use crate::ops::metrics;
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
use crate::{debug, log};

/// Bound on one pass (a healthy one takes milliseconds).
const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// The running backend (its options and its data plane), and what every pass around it needs.
pub struct Reconciler {
    /// The options it was started with: which peer leases it can program.
    backend: Box<dyn Backend>,
    /// Shared with the blocking thread of a pass; a pass that outlives its bound still holds
    /// it, and the next one waits for it there (never on the async thread).
    plane: Arc<Mutex<Box<dyn DataPlane>>>,
    template: TemplateValues,
}

/// What one pass is made from.
pub struct PassInput<'a> {
    pub net: &'a NetConfig,
    pub own: &'a SubnetKey,
    /// This node's underlay addresses (no other lease may claim them).
    pub public_ip: Ipv4Addr,
    pub public_ipv6: Option<Ipv6Addr>,
    /// The masquerade rules to keep (none without `--ip-masq` or while the config is gone).
    pub masquerade: Vec<MasqFamily>,
}

impl Reconciler {
    pub fn new(backend: Box<dyn Backend>, plane: Box<dyn DataPlane>) -> Reconciler {
        let template = plane.template_values();
        metrics::set_backend_source(plane.metrics_source());
        Reconciler {
            backend,
            plane: Arc::new(Mutex::new(plane)),
            template,
        }
    }

    /// The running backend's options.
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// A failed pass, named by the backend.
    fn failed(&self, why: String) -> AgentError {
        AgentError::backend(self.backend.type_name(), Stage::Reconcile, why)
    }

    /// This node's lease value for `key`, as the data plane writes it.
    pub fn lease_attrs(&self, key: &SubnetKey) -> Result<LeaseAttrs, AgentError> {
        match self.plane.try_lock() {
            Ok(plane) => Ok(plane.lease_attrs(key)),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner().lease_attrs(key)),
            Err(TryLockError::WouldBlock) => Err(self
                .failed("the data plane is still busy with a pass that outlived its bound".into())),
        }
    }

    pub fn template_values(&self) -> TemplateValues {
        self.template.clone()
    }

    /// One pass for the leases `members` knows. The masquerade rules are reconciled even when
    /// the data plane's pass fails; the pass's own failure is returned first.
    pub async fn pass(
        &self,
        input: PassInput<'_>,
        members: &mut Membership,
    ) -> Result<Pass, AgentError> {
        let started = Instant::now();
        let rules = input
            .net
            .rules(*input.own, input.public_ip, input.public_ipv6);
        let (peers, unusable) = members.peers(&rules, self.backend.as_ref());
        let plane = self.plane.clone();
        let own = *input.own;
        let run = tokio::task::spawn_blocking(move || {
            let mut plane = plane.lock().unwrap_or_else(|p| p.into_inner());
            plane.rules(&rules);
            plane.reconcile(&own, &peers)
        });
        let backend = self.backend.type_name();
        let pass = match tokio::time::timeout(PASS_TIMEOUT, run).await {
            Ok(Ok(result)) => result.map_err(|e| AgentError::backend(backend, Stage::Reconcile, e)),
            Ok(Err(join)) => Err(self.failed(format!("reconcile thread failed: {join}"))),
            Err(_) => Err(self.failed(format!("reconcile did not finish within {PASS_TIMEOUT:?}"))),
        };
        let masq = reconcile_masquerade(input.masquerade).await;
        let took = started.elapsed();
        metrics::reconciled(took, pass.is_ok() && masq.is_ok());
        metrics::LEASES_KNOWN.set(members.known.len() as u64);
        metrics::LEASES_UNUSABLE.set(unusable as u64);
        if let Ok(p) = &pass {
            metrics::PEERS_PROGRAMMED.set(p.programmed as u64);
            for line in &p.log {
                log!("{line}");
            }
        }
        debug!(
            1,
            "reconcile pass took {took:?}: {}",
            match (&pass, &masq) {
                (Ok(_), Ok(())) => "ok".to_string(),
                (Err(e), _) | (_, Err(e)) => e.to_string(),
            }
        );
        let pass = pass?;
        masq?;
        Ok(pass)
    }

    /// Tells the data plane the agent is stopping.
    pub fn stop(&self) {
        match self.plane.try_lock() {
            Ok(mut plane) => plane.stop(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().stop(),
            Err(TryLockError::WouldBlock) => {
                log!("the data plane is busy with a pass; leaving it as it is")
            }
        }
    }
}

/// The masquerade rules flanneld's `--ip-masq` keeps: one set per family of the lease.
pub fn masquerade_wanted(net: &NetConfig, own: &SubnetKey) -> Vec<MasqFamily> {
    let mut want = vec![MasqFamily {
        network: net.network.into(),
        pods: own.v4.into(),
    }];
    if let (Some(v6), Some(pods)) = (&net.ipv6, own.v6) {
        want.push(MasqFamily {
            network: v6.network.into(),
            pods: pods.into(),
        });
    }
    want
}

async fn reconcile_masquerade(want: Vec<MasqFamily>) -> Result<(), AgentError> {
    let changes = tokio::task::spawn_blocking(move || masquerade::reconcile(&want))
        .await
        .map_err(|e| AgentError::Masquerade(format!("reconcile thread failed: {e}")))??;
    for (change, table) in changes
        .iter()
        .zip([masquerade::TABLE_V4, masquerade::TABLE_V6])
    {
        match change {
            Change::Written => log!("masquerade: wrote table {table} (flanneld --ip-masq rules)"),
            Change::Removed => log!("masquerade: removed table {table}"),
            Change::Unchanged | Change::Absent => {}
        }
    }
    Ok(())
}
