//! flannel's etcd layout: `<prefix>/config` and `<prefix>/subnets/<ip>-<len>` leases.
//! Every unary request is bounded by a timeout, and fails over to the next endpoint when a
//! member cannot serve, so one dead member never stalls the agent. Listings are read in
//! pages of one snapshot ([`super::listing`]), so no number or size of keys under the prefix
//! makes a listing fail.

use std::future::Future;
use std::time::Duration;

use super::client::proto::{
    prefix_range_end, Compare, CompareResult, CompareTarget, DeleteRangeRequest, KeyValue,
    PutRequest, RangeRequest, RangeResponse, Request, RequestOp, TargetUnion, TxnRequest,
};
use super::client::{Client, EtcdError, Security, WatchStream};
use super::error::EtcdStoreError;
use super::listing::{Memory, Walk};
use crate::error::AgentError;
use crate::manager::{shown_key, JunkKey, Snapshot, StoredLease};
use crate::ops::metrics;
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::{LeaseAttrs, Unreadable};
use crate::{debug, log, warn};

/// Bound on one etcd request (a member that accepted the connection but stalls counts as down).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Listings started over when etcd compacted the revision they read mid-way.
const LISTING_RESTARTS: u32 = 3;

/// A lease as etcd stores it: `lease` is the etcd lease the key is attached to (0: none, a
/// flannel reservation).
pub fn stored_lease(
    value: &[u8],
    lease: i64,
    create_revision: i64,
    mod_revision: i64,
) -> StoredLease {
    StoredLease::decode(value, lease == 0, create_revision, mod_revision)
}

/// The lease key that etcd key `name` is: a lease key right under `subnets` (the directory
/// `<prefix>/subnets/`), not in a directory below it, where a key could shadow a real lease.
pub fn lease_key_of(subnets: &str, name: &[u8]) -> Option<SubnetKey> {
    let rest = name.strip_prefix(subnets.as_bytes())?;
    if rest.contains(&b'/') {
        return None;
    }
    SubnetKey::parse(std::str::from_utf8(rest).ok()?)
}

/// Every key under `<prefix>/subnets/` at one store revision (the resume point).
pub type EtcdSnapshot = Snapshot<i64>;

/// Takes one listed key-value into `snap` (`unread`: why it was listed without its value).
fn add(snap: &mut EtcdSnapshot, subnets: &str, kv: KeyValue, unread: Option<Unreadable>) {
    match lease_key_of(subnets, &kv.key) {
        Some(key) => {
            let mut lease = stored_lease(&kv.value, kv.lease, kv.create_revision, kv.mod_revision);
            if let Some(why) = unread {
                lease.attrs = Err(why);
            }
            snap.leases.insert(key, lease);
        }
        None => snap.junk.push(JunkKey::new(&kv.key, kv.mod_revision)),
    }
}

/// Why a listing page came back without keys.
enum PageError {
    /// The response is larger than the client decodes.
    TooLarge,
    /// The pinned revision was compacted away.
    Compacted,
}

/// Why one listing attempt ended without a snapshot.
enum ListError {
    /// Start over at the latest revision.
    Compacted,
    Failed(AgentError),
}

impl From<AgentError> for ListError {
    fn from(e: AgentError) -> ListError {
        ListError::Failed(e)
    }
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
    /// What listings learned: the page size, and the keys holding large values.
    listing: Memory,
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
            error: EtcdStoreError::Refused(format!("etcd request {what}: {e}")).into(),
        }),
        Ok(Err(e)) => Err(CallError {
            retry: e.is_member_failure(),
            error: EtcdStoreError::request(what, e).into(),
        }),
        Err(_) => Err(CallError {
            retry: true,
            error: EtcdStoreError::request(what, format!("no answer within {REQUEST_TIMEOUT:?}"))
                .into(),
        }),
    }
}

fn client_for(endpoint: &str, security: &Security) -> Result<Client, AgentError> {
    Client::new(endpoint, security).map_err(|e| {
        if e.is_refusal() {
            EtcdStoreError::Refused(e.to_string()).into()
        } else {
            EtcdStoreError::Unreachable {
                endpoints: endpoint.to_string(),
                detail: e.to_string(),
            }
            .into()
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
            listing: Memory::default(),
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
        Err(last.unwrap_or_else(|| EtcdStoreError::request(what, "no endpoint configured").into()))
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
                    ..RangeRequest::default()
                };
                async move { c.range(req).await }
            })
            .await?;
        let kv = resp
            .kvs
            .first()
            .ok_or_else(|| EtcdStoreError::ConfigMissing { key: key.clone() })?;
        NetConfig::parse(&key, &kv.value)
    }

    /// Lists every key under `<prefix>/subnets/`: the leases, and the other keys apart.
    pub async fn list(&mut self) -> Result<EtcdSnapshot, AgentError> {
        let mut restarts = 0;
        loop {
            match self.list_pages().await {
                Ok(snap) => return Ok(snap),
                Err(ListError::Failed(e)) => return Err(e),
                Err(ListError::Compacted) if restarts < LISTING_RESTARTS => {
                    restarts += 1;
                    debug!(
                        1,
                        "the listing's revision was compacted meanwhile; listing again"
                    );
                }
                Err(ListError::Compacted) => {
                    return Err(EtcdStoreError::request(
                        format!("GET {}*", self.subnets_prefix()),
                        format!("the revision read was compacted {restarts} times in a row"),
                    )
                    .into())
                }
            }
        }
    }

    /// One listing, request by request as [`Walk`] plans them (pages of one snapshot, sized
    /// from the pages, around the keys known to hold large values); each page's values are
    /// decoded (or dropped) before the next.
    async fn list_pages(&mut self) -> Result<EtcdSnapshot, ListError> {
        let subnets = self.subnets_prefix();
        let range_end = prefix_range_end(subnets.as_bytes());
        let mut memory = std::mem::take(&mut self.listing);
        let mut walk = Walk::new(&mut memory, subnets.as_bytes(), &range_end);
        let mut snap = EtcdSnapshot::default();
        let mut requests = 0;
        let outcome = loop {
            let Some(step) = walk.next_step() else {
                break Ok(());
            };
            requests += 1;
            match self.range_page(&subnets, step.req.clone()).await {
                Ok(Ok(resp)) => {
                    for (kv, unread) in walk.took(&step, resp) {
                        add(&mut snap, &subnets, kv, unread);
                    }
                }
                Ok(Err(PageError::TooLarge)) => {
                    debug!(
                        1,
                        "a page of {} keys from {} was too large to decode; asking for less",
                        step.req.limit,
                        shown_key(&step.req.key)
                    );
                    if walk.too_large(&step).is_err() {
                        break Err(ListError::Failed(
                            EtcdStoreError::request(
                                format!("GET {subnets}*"),
                                "a key under the prefix is larger than a response may be",
                            )
                            .into(),
                        ));
                    }
                }
                Ok(Err(PageError::Compacted)) => break Err(ListError::Compacted),
                Err(e) => break Err(ListError::Failed(e)),
            }
        };
        snap.resume = walk.revision();
        let heavy = walk.read_heavy_pages();
        if outcome.is_ok() {
            walk.finish();
        }
        // What was learned about page sizes stays, even from an unfinished listing.
        self.listing = memory;
        outcome?;
        debug!(
            1,
            "listed {subnets}* at revision {}: {} lease key(s), {} other key(s), {requests} request(s)",
            snap.resume,
            snap.leases.len(),
            snap.junk.len()
        );
        if heavy {
            release_free_memory();
        }
        Ok(snap)
    }

    /// One listing page; a response too large to decode and a compacted revision come back
    /// as what they mean to the listing.
    async fn range_page(
        &mut self,
        subnets: &str,
        req: RangeRequest,
    ) -> Result<Result<RangeResponse, PageError>, AgentError> {
        self.call(&format!("GET {subnets}* (page)"), |mut c| {
            let req = req.clone();
            async move {
                match c.range(req).await {
                    Ok(resp) => Ok(Ok(resp)),
                    Err(e) if e.is_too_large() => Ok(Err(PageError::TooLarge)),
                    Err(e) if e.is_compacted() => Ok(Err(PageError::Compacted)),
                    Err(e) => Err(e),
                }
            }
        })
        .await
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

/// Hands the allocator's free memory back to the kernel, after a listing (or the watch
/// before it) decoded large values: glibc keeps freed large blocks in its heap (it raises its
/// mmap threshold after freeing one), so a flood would otherwise stay in the agent's RSS.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns the allocator's own free pages; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Store {
    /// The client of the current member (a watch keeps one, to drop its token when etcd
    /// cancels the watch for it).
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}
