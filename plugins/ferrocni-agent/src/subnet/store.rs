//! flannel's etcd layout: `<prefix>/config` and `<prefix>/subnets/<ip>-<len>` leases.
//! Every unary request is bounded by a timeout, and fails over to the next endpoint when a
//! member cannot serve, so one dead member never stalls the agent.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use crate::error::AgentError;
use crate::etcd::proto::{
    prefix_range_end, Compare, CompareResult, CompareTarget, DeleteRangeRequest, PutRequest,
    RangeRequest, Request, RequestOp, TargetUnion, TxnRequest,
};
use crate::etcd::{Client, EtcdError, Security, WatchStream};
use crate::ops::metrics;
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
use crate::{debug, log, warn};

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
    security: Security,
    prefix: String,
}

/// Why one request failed; `retry` marks failures another member may not have.
struct CallError {
    retry: bool,
    error: AgentError,
}

async fn bounded<T>(
    what: &str,
    fut: impl Future<Output = Result<T, EtcdError>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if e.is_refusal() => Err(CallError {
            retry: false,
            error: AgentError::EtcdRefused(format!("etcd request {what}: {e}")),
        }),
        Ok(Err(e)) => Err(CallError {
            retry: e.is_member_failure(),
            error: AgentError::etcd(what, e),
        }),
        Err(_) => Err(CallError {
            retry: true,
            error: AgentError::etcd(what, format!("no answer within {REQUEST_TIMEOUT:?}")),
        }),
    }
}

fn client_for(endpoint: &str, security: &Security) -> Result<Client, AgentError> {
    Client::new(endpoint, security).map_err(|e| {
        if e.is_refusal() {
            AgentError::EtcdRefused(e.to_string())
        } else {
            AgentError::Unreachable {
                endpoints: endpoint.to_string(),
                detail: e.to_string(),
            }
        }
    })
}

/// A transaction guard: `key`'s version or mod revision compared with the given one.
fn compare(key: &str, result: CompareResult, target: TargetUnion) -> Compare {
    let kind = match target {
        TargetUnion::Version(_) => CompareTarget::Version,
        TargetUnion::ModRevision(_) => CompareTarget::Mod,
    };
    Compare {
        result: result as i32,
        target: kind as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(target),
    }
}

/// A transaction running `op` when every guard holds.
fn txn_when(guards: Vec<Compare>, op: Request) -> TxnRequest {
    TxnRequest {
        compare: guards,
        success: vec![RequestOp { request: Some(op) }],
    }
}

/// A put of `value` at `key`, attached to etcd lease `lease` (0 = none).
fn put(key: &str, value: String, lease: i64) -> Request {
    Request::Put(PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.into_bytes(),
        lease,
    })
}

impl Store {
    /// Opens a client to the first endpoint. The gRPC channel connects lazily: the first
    /// request tells whether anyone answers.
    pub async fn connect(
        endpoints: &[String],
        prefix: &str,
        security: &Security,
    ) -> Result<Store, AgentError> {
        let first = endpoints
            .first()
            .ok_or_else(|| AgentError::Usage("no etcd endpoint given".into()))?;
        let client = client_for(first, security)?;
        Ok(Store {
            endpoints: endpoints.to_vec(),
            current: 0,
            serving: None,
            client,
            security: security.clone(),
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
        match client_for(&self.endpoints[next], &self.security) {
            Ok(c) => {
                self.client = c;
                self.current = next;
                metrics::ETCD_RECONNECTS.inc();
            }
            Err(e) => warn!(
                "cannot switch to etcd endpoint {}: {e}",
                self.endpoints[next]
            ),
        }
    }

    /// Runs `op` on the current member, failing over to the others on member failures.
    async fn call<T, F, Fut>(&mut self, what: &str, mut op: F) -> Result<T, AgentError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, EtcdError>>,
    {
        let mut last = None;
        debug!(2, "etcd {what} at {}", self.endpoint());
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
                    debug!(
                        1,
                        "etcd at {} cannot serve {what}: {error}",
                        self.endpoint()
                    );
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
                let req = RangeRequest {
                    key: key.as_bytes().to_vec(),
                    range_end: Vec::new(),
                };
                async move { c.range(req).await }
            })
            .await?;
        let kv = resp
            .kvs
            .first()
            .ok_or(AgentError::ConfigMissing { key: key.clone() })?;
        NetConfig::parse(&key, &kv.value)
    }

    /// Range-reads every lease under `<prefix>/subnets/`.
    pub async fn list(&mut self) -> Result<Snapshot, AgentError> {
        let prefix = self.subnets_prefix();
        let resp = self
            .call(&format!("GET {prefix}*"), |mut c| {
                let req = RangeRequest {
                    key: prefix.as_bytes().to_vec(),
                    range_end: prefix_range_end(prefix.as_bytes()),
                };
                async move { c.range(req).await }
            })
            .await?;
        let revision = resp.header.map(|h| h.revision).unwrap_or(0);
        let mut leases = BTreeMap::new();
        for kv in &resp.kvs {
            let name = String::from_utf8_lossy(&kv.key);
            match SubnetKey::parse(&name) {
                Some(key) => {
                    leases.insert(key, stored(&name, &kv.value, kv.lease, kv.mod_revision));
                }
                None => warn!("ignoring key {name}: not a flannel subnet lease key"),
            }
        }
        Ok(Snapshot { revision, leases })
    }

    async fn grant(&mut self, key: &str, ttl: i64) -> Result<i64, AgentError> {
        let resp = self
            .call(&format!("lease grant for {key}"), |mut c| async move {
                c.lease_grant(ttl).await
            })
            .await?;
        Ok(resp.id)
    }

    async fn txn(&mut self, what: &str, txn: TxnRequest) -> Result<bool, AgentError> {
        let resp = self
            .call(what, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        Ok(resp.succeeded)
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
        let txn = txn_when(
            vec![compare(&k, CompareResult::Equal, TargetUnion::Version(0))],
            put(&k, attrs.to_json(), id),
        );
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
            compare(
                &k,
                CompareResult::Equal,
                TargetUnion::ModRevision(mod_revision),
            )
        } else {
            compare(&k, CompareResult::Greater, TargetUnion::Version(0))
        };
        let txn = txn_when(vec![guard], put(&k, attrs.to_json(), id));
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
        let txn = txn_when(
            vec![compare(
                &k,
                CompareResult::Equal,
                TargetUnion::ModRevision(mod_revision),
            )],
            Request::DeleteRange(DeleteRangeRequest {
                key: k.as_bytes().to_vec(),
            }),
        );
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
            warn!("could not revoke unused etcd lease {id:x} (it expires on its own): {e}");
        }
    }

    /// Watches `<prefix>/subnets/` from `start_revision`.
    pub async fn watch(&mut self, start_revision: i64) -> Result<WatchStream, AgentError> {
        let prefix = self.subnets_prefix();
        self.call(&format!("WATCH {prefix}*"), |mut c| {
            let prefix = prefix.clone();
            async move { c.watch_prefix(prefix.as_bytes(), start_revision).await }
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
            warn!("ignoring lease {key}: value is not flannel lease JSON: {e}");
            None
        }
    };
    StoredLease {
        attrs,
        etcd_lease,
        mod_revision,
    }
}

impl Store {
    /// Drops the current member's token when etcd cancelled a watch for it.
    pub fn watch_cancelled(&self, reason: &str) {
        self.client.watch_cancelled(reason);
    }
}
