//! flannel's etcd layout: `<prefix>/config` and `<prefix>/subnets/<ip>-<len>` leases.
//! Every unary request is bounded by a timeout, and fails over to the next endpoint when a
//! member cannot serve, so one dead member never stalls the agent.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
    WatchStream,
};

use crate::error::AgentError;
use crate::key::SubnetKey;
use crate::lease::LeaseAttrs;
use crate::log;
use crate::netconfig::NetConfig;

/// Bound on one etcd request (a member that accepted the connection but stalls counts as down).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// One lease as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLease {
    /// `None` when the value is not a lease we can read (logged, never programmed).
    pub attrs: Option<LeaseAttrs>,
    /// The etcd lease the key is attached to; 0 = no TTL (a flannel reservation).
    pub etcd_lease: i64,
    pub mod_revision: i64,
}

/// All leases at one store revision.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub revision: i64,
    pub leases: BTreeMap<SubnetKey, StoredLease>,
}

/// How an updated key is tied to an etcd lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// No TTL: a flannel reservation stays one.
    Reservation,
    /// Keep the current etcd lease (attribute change only).
    Existing(i64),
    /// A freshly granted lease of this many seconds (flannel's renewal).
    Fresh(i64),
}

pub struct Store {
    /// One client per endpoint, used one at a time: tonic's balanced channel keeps routing
    /// requests to a dead member, so the agent fails over itself.
    endpoints: Vec<String>,
    current: usize,
    /// The endpoint of the last successful request, to log changes only.
    serving: Option<usize>,
    client: Client,
    prefix: String,
}

/// Why one request failed; `retry` marks failures another member may not have.
struct CallError {
    retry: bool,
    error: AgentError,
}

/// Errors meaning "this member cannot serve now" (dead, partitioned, without leader).
fn is_member_failure(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        // Cancelled, Unknown, DeadlineExceeded, Aborted, Internal, Unavailable.
        etcd_client::Error::GRpcStatus(s) => {
            matches!(i32::from(s.code()), 1 | 2 | 4 | 10 | 13 | 14)
        }
        _ => false,
    }
}

/// gRPC status errors without tonic's debug dump of the transport error chain.
pub fn brief(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("{:?}: {}", s.code(), s.message()),
        other => other.to_string(),
    }
}

async fn bounded<T>(
    what: &str,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CallError {
            retry: is_member_failure(&e),
            error: AgentError::etcd(what, brief(&e)),
        }),
        Err(_) => Err(CallError {
            retry: true,
            error: AgentError::etcd(what, format!("no answer within {REQUEST_TIMEOUT:?}")),
        }),
    }
}

fn client_options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
        .with_keep_alive_while_idle(true)
        // A watch on a member cut off from the quorum must fail rather than go silent.
        .with_require_leader(true)
}

async fn client_for(endpoint: &str) -> Result<Client, AgentError> {
    let unreachable = |detail: String| AgentError::Unreachable {
        endpoints: endpoint.to_string(),
        detail,
    };
    match tokio::time::timeout(
        REQUEST_TIMEOUT,
        Client::connect([endpoint], Some(client_options())),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable("connect timed out".into())),
    }
}

impl Store {
    /// Opens a client to the first endpoint. The gRPC channel connects lazily: the first
    /// request tells whether anyone answers.
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Store, AgentError> {
        let first = endpoints
            .first()
            .ok_or_else(|| AgentError::Usage("no etcd endpoint given".into()))?;
        let client = client_for(first).await?;
        Ok(Store {
            endpoints: endpoints.to_vec(),
            current: 0,
            serving: None,
            client,
            prefix: prefix.trim_end_matches('/').to_string(),
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoints[self.current]
    }

    /// Moves to the next endpoint (round robin).
    pub async fn failover(&mut self) {
        if self.endpoints.len() < 2 {
            return;
        }
        let next = (self.current + 1) % self.endpoints.len();
        match client_for(&self.endpoints[next]).await {
            Ok(c) => {
                self.client = c;
                self.current = next;
            }
            Err(e) => log!(
                "cannot switch to etcd endpoint {}: {e}",
                self.endpoints[next]
            ),
        }
    }

    /// Runs `op` on the current member, failing over to the others on member failures.
    async fn call<T, F, Fut>(&mut self, what: &str, mut op: F) -> Result<T, AgentError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut last = None;
        for _ in 0..self.endpoints.len() {
            match bounded(what, op(self.client.clone())).await {
                Ok(v) => {
                    if self.serving != Some(self.current) {
                        log!("talking to etcd at {}", self.endpoint());
                        self.serving = Some(self.current);
                    }
                    return Ok(v);
                }
                Err(CallError { retry: true, error }) => {
                    last = Some(error);
                    self.failover().await;
                }
                Err(CallError { error, .. }) => return Err(error),
            }
        }
        Err(last.unwrap_or_else(|| AgentError::etcd(what, "no endpoint configured")))
    }

    pub fn config_key(&self) -> String {
        format!("{}/config", self.prefix)
    }

    pub fn subnets_prefix(&self) -> String {
        format!("{}/subnets/", self.prefix)
    }

    pub fn lease_key(&self, key: &SubnetKey) -> String {
        format!("{}{key}", self.subnets_prefix())
    }

    /// Reads and validates `<prefix>/config`.
    pub async fn config(&mut self) -> Result<NetConfig, AgentError> {
        let key = self.config_key();
        let resp = self
            .call(&format!("GET {key}"), |mut c| {
                let key = key.clone();
                async move { c.get(key, None).await }
            })
            .await?;
        let kv = resp
            .kvs()
            .first()
            .ok_or(AgentError::ConfigMissing { key: key.clone() })?;
        NetConfig::parse(&key, kv.value())
    }

    /// Range-reads every lease under `<prefix>/subnets/`.
    pub async fn list(&mut self) -> Result<Snapshot, AgentError> {
        let prefix = self.subnets_prefix();
        let resp = self
            .call(&format!("GET {prefix}*"), |mut c| {
                let prefix = prefix.clone();
                async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let mut leases = BTreeMap::new();
        for kv in resp.kvs() {
            let name = String::from_utf8_lossy(kv.key());
            match SubnetKey::parse(&name) {
                Some(key) => {
                    leases.insert(
                        key,
                        stored(&name, kv.value(), kv.lease(), kv.mod_revision()),
                    );
                }
                None => log!("ignoring key {name}: not a flannel subnet lease key"),
            }
        }
        Ok(Snapshot { revision, leases })
    }

    async fn grant(&mut self, key: &str, ttl: i64) -> Result<i64, AgentError> {
        let resp = self
            .call(&format!("lease grant for {key}"), |mut c| async move {
                c.lease_grant(ttl, None).await
            })
            .await?;
        Ok(resp.id())
    }

    async fn txn(&mut self, what: &str, txn: Txn) -> Result<bool, AgentError> {
        let resp = self
            .call(what, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        Ok(resp.succeeded())
    }

    /// Creates the lease key only if it does not exist yet (flannel's `createSubnet`).
    /// Returns the etcd lease id, or `None` when another node won the key.
    pub async fn create(
        &mut self,
        key: &SubnetKey,
        attrs: &LeaseAttrs,
        ttl: i64,
    ) -> Result<Option<i64>, AgentError> {
        let k = self.lease_key(key);
        let id = self.grant(&k, ttl).await?;
        let txn = Txn::new()
            .when([Compare::version(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                k.clone(),
                attrs.to_json(),
                Some(PutOptions::new().with_lease(id)),
            )]);
        let result = self.txn(&format!("create {k}"), txn).await;
        if !matches!(result, Ok(true)) {
            self.revoke_quietly(id).await;
        }
        Ok(result?.then_some(id))
    }

    /// Rewrites an existing lease key with `attrs`, only if it was not modified since
    /// `mod_revision` (0 = only if it still exists), bound as `binding` says.
    /// Returns whether it was written and the etcd lease the key is now attached to.
    pub async fn update(
        &mut self,
        key: &SubnetKey,
        attrs: &LeaseAttrs,
        binding: Binding,
        mod_revision: i64,
    ) -> Result<(bool, i64), AgentError> {
        let k = self.lease_key(key);
        let (id, fresh) = match binding {
            Binding::Reservation => (0, false),
            Binding::Existing(id) => (id, false),
            Binding::Fresh(ttl) => (self.grant(&k, ttl).await?, true),
        };
        let guard = if mod_revision > 0 {
            Compare::mod_revision(k.clone(), CompareOp::Equal, mod_revision)
        } else {
            Compare::version(k.clone(), CompareOp::Greater, 0)
        };
        let put_opts = (id != 0).then(|| PutOptions::new().with_lease(id));
        let txn =
            Txn::new()
                .when([guard])
                .and_then([TxnOp::put(k.clone(), attrs.to_json(), put_opts)]);
        let result = self.txn(&format!("update {k}"), txn).await;
        if fresh && !matches!(result, Ok(true)) {
            self.revoke_quietly(id).await;
        }
        Ok((result?, id))
    }

    /// Deletes a lease key if unchanged since `mod_revision` (our own lease, when the network
    /// config changed under it, as flanneld does).
    pub async fn delete_if_unchanged(
        &mut self,
        key: &SubnetKey,
        mod_revision: i64,
    ) -> Result<bool, AgentError> {
        let k = self.lease_key(key);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                k.clone(),
                CompareOp::Equal,
                mod_revision,
            )])
            .and_then([TxnOp::delete(k.clone(), None)]);
        self.txn(&format!("delete {k}"), txn).await
    }

    async fn revoke_quietly(&mut self, id: i64) {
        let result = self
            .call(
                "lease revoke",
                |mut c| async move { c.lease_revoke(id).await },
            )
            .await;
        if let Err(e) = result {
            log!("could not revoke unused etcd lease {id:x} (it expires on its own): {e}");
        }
    }

    /// Watches `<prefix>/subnets/` from `start_revision`.
    pub async fn watch(&mut self, start_revision: i64) -> Result<WatchStream, AgentError> {
        let prefix = self.subnets_prefix();
        self.call(&format!("WATCH {prefix}*"), |mut c| {
            let prefix = prefix.clone();
            let opts = WatchOptions::new()
                .with_prefix()
                .with_start_revision(start_revision);
            async move { c.watch(prefix, Some(opts)).await }
        })
        .await
    }
}

/// Decodes one stored value; unreadable values are kept as `attrs: None` so they still
/// occupy their subnet.
pub fn stored(key: &str, value: &[u8], etcd_lease: i64, mod_revision: i64) -> StoredLease {
    let attrs = match LeaseAttrs::parse(value) {
        Ok(a) => Some(a),
        Err(e) => {
            log!("ignoring lease {key}: value is not flannel lease JSON: {e}");
            None
        }
    };
    StoredLease {
        attrs,
        etcd_lease,
        mod_revision,
    }
}
