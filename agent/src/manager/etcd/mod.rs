//! The subnet manager on etcd, in flannel's layout: the network config at `<prefix>/config`,
//! one key per lease under `<prefix>/subnets/` (`10.244.3.0-24`, its value flannel's lease
//! JSON), attached to an etcd lease of `--subnet-lease-ttl` seconds (none for an operator's
//! reservation). The parts:
//!
//! - [`client`]: etcd v3 over gRPC (tonic), TLS (rustls), users and tokens; it knows nothing
//!   of flannel;
//! - [`store`]: the layout on it (config, listings, create, update, watch), failing over
//!   between members; [`listing`]: how a listing is read, page by page;
//! - [`acquire`]: acquiring and renewing this node's lease as flanneld does;
//! - [`watch`]: watch responses as the seam's changes (a resume point is a revision);
//! - [`error`]: etcd's failures, worded for the operator.

pub mod acquire;
pub mod client;
pub mod error;
pub mod listing;
pub mod store;
pub mod watch;

use crate::backend::LeaseValue;
use crate::error::{AgentError, StoreFailure};
use crate::manager::startup::{retry_until, Attempt, Retried};
use crate::manager::{LeaseRequest, OwnLease, Snapshot, SubnetManager};
use crate::options::Options;
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use acquire::LeaseTiming;
use client::Security;
use error::EtcdStoreError;
use store::Store;
use watch::EtcdWatch;

/// What messages call this store.
pub const STORE_NAME: &str = "etcd";

/// The agent's leases in etcd.
pub struct EtcdManager {
    store: Store,
    timing: LeaseTiming,
    /// The etcd lease this node's lease key is attached to (0: none, a reservation).
    etcd_lease: i64,
}

impl EtcdManager {
    /// Connects and reads the network config, retrying transport failures until
    /// `--startup-timeout`. A missing or invalid config fails at once: waiting would not fix
    /// it. A wrong CA, client certificate or password fails at once too.
    pub async fn connect(opts: &Options) -> Result<(EtcdManager, NetConfig), AgentError> {
        let security = &Security::load(&opts.etcd_tls, opts.etcd_credentials.clone())
            .map_err(|e| EtcdStoreError::Refused(e.to_string()))?;
        let outcome = retry_until(STORE_NAME, opts.startup_timeout, |left| async move {
            let attempt = async {
                let mut store =
                    Store::connect(&opts.etcd_endpoints, &opts.etcd_prefix, security).await?;
                let net = store.config().await?;
                Ok::<_, AgentError>((store, net))
            };
            match tokio::time::timeout(left, attempt).await {
                Ok(Err(e)) if fatal(&e) => Attempt::Fatal(e),
                Ok(Err(e)) => Attempt::Retry(e),
                Ok(Ok(v)) => Attempt::Done(v),
                Err(_) => Attempt::Retry(
                    EtcdStoreError::request("GET config", "no answer in time").into(),
                ),
            }
        })
        .await;
        let (store, net) = outcome.map_err(|e| match e {
            Retried::Fatal(e) => e,
            Retried::GaveUp { after, last } => EtcdStoreError::Unreachable {
                endpoints: opts.etcd_endpoints.join(","),
                detail: format!(
                    "gave up after {:.1}s (--startup-timeout {}s): {last}",
                    after.as_secs_f64(),
                    opts.startup_timeout.as_secs()
                ),
            }
            .into(),
        })?;
        let manager = EtcdManager {
            store,
            timing: LeaseTiming {
                ttl: opts.lease_ttl,
                renew_margin: opts.renew_margin,
            },
            etcd_lease: 0,
        };
        Ok((manager, net))
    }
}

/// Whether a start-up attempt's failure is one waiting would not fix.
fn fatal(e: &AgentError) -> bool {
    matches!(e, AgentError::BadConfig { .. })
        || matches!(
            e.store_failure(),
            Some(StoreFailure::ConfigMissing | StoreFailure::Refused)
        )
}

impl SubnetManager for EtcdManager {
    type Resume = i64;
    type Watch = EtcdWatch;

    fn store_name(&self) -> &'static str {
        STORE_NAME
    }

    fn server(&self) -> &str {
        self.store.endpoint()
    }

    fn config_name(&self) -> String {
        self.store.config_key()
    }

    fn lease_name(&self, key: &SubnetKey) -> String {
        self.store.lease_key(key)
    }

    async fn network_config(&mut self) -> Result<NetConfig, AgentError> {
        self.store.config().await
    }

    async fn acquire(&mut self, request: &LeaseRequest<'_>) -> Result<OwnLease, AgentError> {
        let held = acquire::acquire(&mut self.store, request, self.timing).await?;
        self.etcd_lease = held.etcd_lease;
        Ok(held.own)
    }

    async fn renew(&mut self, own: &mut OwnLease) -> Result<(), AgentError> {
        acquire::renew(&mut self.store, own, &mut self.etcd_lease, self.timing).await
    }

    async fn publish(&mut self, own: &mut OwnLease, value: LeaseValue) {
        acquire::publish(&mut self.store, own, self.etcd_lease, value).await
    }

    async fn list(&mut self) -> Result<Snapshot<i64>, AgentError> {
        self.store.list().await
    }

    /// A watch starts right after the revision the leases are known at.
    async fn watch(&mut self, resume: &i64) -> Result<EtcdWatch, AgentError> {
        let stream = self.store.watch(resume + 1).await?;
        Ok(EtcdWatch {
            stream,
            subnets: self.store.subnets_prefix(),
            client: self.store.client(),
        })
    }

    async fn watch_lost(&mut self) {
        crate::ops::metrics::ETCD_RECONNECTS.inc();
        self.store.failover().await;
    }
}
