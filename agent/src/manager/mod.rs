//! Where the leases live, behind one seam (flannel's `pkg/subnet` `Manager`): what the agent
//! needs of its store is [`SubnetManager`]: the network config, acquiring and renewing this
//! node's lease (and publishing a new value in it), listing every lease, and watching them
//! from where a listing left off. The agent, its membership and its reconcile pass work on the
//! types here alone; each store is one module beside them:
//!
//! - [`etcd`]: flannel's etcd layout (`<prefix>/config`, `<prefix>/subnets/<key>`), etcd v3
//!   over gRPC; a resume point is a revision.
//!
//! - [`kube`]: flanneld's `--kube-subnet-mgr`, Node objects' `podCIDR` and annotations, list
//!   and watch; a resume point is a `resourceVersion`, "410 Gone" a [`WatchEvent::Relist`].
//!
//! When the agent stops, its lease stays in the store for the next agent (as flanneld's does):
//! nothing is revoked.

pub mod etcd;
pub mod kube;
pub mod startup;

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;
use std::time::Instant;

use crate::backend::LeaseValue;
use crate::error::AgentError;
use crate::ops::log::{clip, escape_controls};
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::{LeaseAttrs, Unreadable};
use crate::subnet::validate::Class;

/// How many characters of a junk record's name a log line shows.
const NAME_SHOWN_CHARS: usize = 120;

/// One lease as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLease {
    /// The value, or why it is not a lease the agent can read (never programmed, but its
    /// subnet stays taken).
    pub attrs: Result<LeaseAttrs, Unreadable>,
    /// A lease that never expires: an operator's reservation (etcd: a key without a TTL).
    pub reservation: bool,
    /// When it was created, in the store's order: of two leases claiming a subnet, the one
    /// created first keeps it (etcd: the key's create revision).
    pub created: i64,
    /// Changes whenever the value is written (etcd: the mod revision): what was judged of a
    /// value holds until it changes.
    pub version: i64,
}

impl StoredLease {
    /// A stored value, decoded (values larger than any lease are not parsed).
    pub fn decode(value: &[u8], reservation: bool, created: i64, version: i64) -> StoredLease {
        StoredLease {
            attrs: LeaseAttrs::decode(value),
            reservation,
            created,
            version,
        }
    }

    /// A lease holding `json`, as unit tests of the backends build their peers.
    #[cfg(test)]
    pub fn from_json(json: &str) -> StoredLease {
        StoredLease::decode(json.as_bytes(), false, 1, 1)
    }
}

/// A record among the leases that is not a lease (etcd: a key under `<prefix>/subnets/` that
/// is no lease key; Kubernetes: a managed node whose podCIDRs name no lease of its own):
/// remembered by a fingerprint of its name and version (to log it once), and shown clipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JunkKey {
    pub shown: String,
    /// Why it is no lease, when the store says more than "not a lease key".
    pub why: Option<String>,
    /// How `/metrics` counts the refusal.
    pub class: Class,
    pub fingerprint: u64,
}

impl JunkKey {
    pub fn new(name: &[u8], version: i64) -> JunkKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        version.hash(&mut h);
        JunkKey {
            shown: shown_key(name),
            why: None,
            class: Class::NotALeaseKey,
            fingerprint: h.finish(),
        }
    }

    /// A record named `name` that is no lease because of `why`, counted as `class`. Known by
    /// its name and reason, not its version: a record that is updated and still wrong for the
    /// same reason is reported once (a Node is updated for many things besides its podCIDRs).
    pub fn with_reason(name: &str, class: Class, why: String) -> JunkKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        why.hash(&mut h);
        JunkKey {
            shown: shown_key(name.as_bytes()),
            why: Some(why),
            class,
            fingerprint: h.finish(),
        }
    }
}

/// A record's name as a log line shows it: text, clipped and with control characters escaped
/// (anyone can write keys of a megabyte, or with a newline and a forged log line after it).
pub fn shown_key(name: &[u8]) -> String {
    // At most 4 bytes a character: decoding more than this is never shown.
    let head = &name[..name.len().min(4 * NAME_SHOWN_CHARS + 4)];
    escape_controls(&clip(&String::from_utf8_lossy(head), NAME_SHOWN_CHARS))
}

/// Every lease at one point of the store's history.
#[derive(Debug, Clone, Default)]
pub struct Snapshot<R> {
    /// Where a watch picks up after this listing.
    pub resume: R,
    pub leases: BTreeMap<SubnetKey, StoredLease>,
    /// Records that are not leases (their values are not kept).
    pub junk: Vec<JunkKey>,
}

/// One change to the leases, as a watch delivers it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A lease written (created, renewed or changed).
    Put { key: SubnetKey, lease: StoredLease },
    /// A lease gone; `name` is the store's name for it (messages).
    Delete { key: SubnetKey, name: String },
    /// A record written among the leases that is not a lease.
    NotALease(JunkKey),
}

/// What a watch delivers.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<R> {
    /// Changes, in the store's order. `resume` is where a new watch picks up after them
    /// (`None`: where it did before); `partial` says more of the same change follows (an
    /// etcd revision in several fragments): the agent acts once it has all.
    Changes {
        changes: Vec<Change>,
        resume: Option<R>,
        partial: bool,
    },
    /// The store cannot go on from where this watch began (etcd compacted that revision, the
    /// Kubernetes API answers 410 Gone): list again, then watch from the listing.
    Relist,
}

/// This node's lease as held.
#[derive(Debug, Clone)]
pub struct OwnLease {
    pub key: SubnetKey,
    pub attrs: LeaseAttrs,
    /// When to renew; `None` when it never expires (a reservation).
    pub renew_at: Option<Instant>,
}

/// What acquiring this node's lease starts from.
pub struct LeaseRequest<'a> {
    pub net: &'a NetConfig,
    /// This node's underlay address (the lease's `PublicIP`; a lease with it is this node's).
    pub public_ip: Ipv4Addr,
    /// The value to store for a key (the backend's: vxlan's VTEP MACs depend on its subnets).
    pub attrs_for: &'a dyn Fn(&SubnetKey) -> Result<LeaseAttrs, AgentError>,
    /// The subnet this node had before (subnet.env), preferred while it is free.
    pub previous: Option<SubnetKey>,
}

/// What the agent needs of the store holding the leases. One agent, one thread: the methods
/// need no `Send` futures.
#[allow(async_fn_in_trait)]
pub trait SubnetManager {
    /// Where a watch resumes (etcd: a revision; Kubernetes: a `resourceVersion`), made and
    /// read by the manager alone; shown in debug lines.
    type Resume: Clone + fmt::Display;
    type Watch: LeaseWatch<Resume = Self::Resume>;

    /// What the store is (`etcd`), for messages.
    fn store_name(&self) -> &'static str;

    /// The server it talks to now, for log lines.
    fn server(&self) -> &str;

    /// Where the network config is kept, for messages.
    fn config_name(&self) -> String;

    /// The store's name for the lease `key`, for messages.
    fn lease_name(&self, key: &SubnetKey) -> String;

    /// Reads the network config (again: the agent notices a change at every resync).
    async fn network_config(&mut self) -> Result<NetConfig, AgentError>;

    /// Acquires this node's lease (reusing the one it had where it can).
    async fn acquire(&mut self, request: &LeaseRequest<'_>) -> Result<OwnLease, AgentError>;

    /// Renews this node's lease before it expires; `AgentError::LeaseRevoked` when it is gone.
    async fn renew(&mut self, own: &mut OwnLease) -> Result<(), AgentError>;

    /// Writes the value the data plane wants into this node's lease, when it differs; a
    /// failure is logged and left for the next pass to retry.
    async fn publish(&mut self, own: &mut OwnLease, value: LeaseValue);

    /// Every lease (and every record among them that is not one).
    async fn list(&mut self) -> Result<Snapshot<Self::Resume>, AgentError>;

    /// Watches the leases from `resume` on (a listing's, or the last changes').
    async fn watch(&mut self, resume: &Self::Resume) -> Result<Self::Watch, AgentError>;

    /// The watch failed (not closed by the server): the manager may move to another server.
    async fn watch_lost(&mut self);
}

/// A watch on the leases; dropping it ends the watch.
#[allow(async_fn_in_trait)]
pub trait LeaseWatch {
    type Resume;

    /// The next event; `Ok(None)` when the server closed the watch.
    async fn next(&mut self) -> Result<Option<WatchEvent<Self::Resume>>, AgentError>;
}

#[cfg(test)]
pub mod fake;
