//! The watch on `<prefix>/subnets/`: etcd's responses decoded into the seam's changes. The
//! watch asks for fragmented responses (a revision with many large values comes in several);
//! a response that is not a revision's last fragment is `partial`. A cancelled watch (its
//! revision compacted, or its token expired) asks for a re-list.

use super::client::proto::{EventType, WatchResponse};
use super::client::{Client, WatchStream};
use super::error::EtcdStoreError;
use super::store::{lease_key_of, stored_lease};
use crate::error::AgentError;
use crate::manager::{shown_key, Change, JunkKey, LeaseWatch, WatchEvent};
use crate::ops::metrics;
use crate::{debug, warn};

/// A watch of the lease keys, on one member.
pub struct EtcdWatch {
    pub(super) stream: WatchStream,
    /// `<prefix>/subnets/`: lease keys are directly under it.
    pub(super) subnets: String,
    /// The member's client: its token is dropped when etcd cancels the watch for it.
    pub(super) client: Client,
}

impl LeaseWatch for EtcdWatch {
    type Resume = i64;

    async fn next(&mut self) -> Result<Option<WatchEvent<i64>>, AgentError> {
        let resp = self
            .stream
            .message()
            .await
            .map_err(|e| AgentError::from(EtcdStoreError::Watch(e)))?;
        let Some(resp) = resp else { return Ok(None) };
        if resp.canceled || resp.compact_revision > 0 {
            self.client.watch_cancelled(&resp.cancel_reason);
            warn!(
                "watch cancelled (compact revision {}, reason {:?}); re-listing",
                resp.compact_revision, resp.cancel_reason
            );
            return Ok(Some(WatchEvent::Relist));
        }
        Ok(Some(decode(&self.subnets, &resp)))
    }
}

/// One response's events as changes to the leases under `subnets` (`<prefix>/subnets/`).
/// Only event revisions advance the resume point: a response header may be ahead of events
/// still to come on this stream.
pub fn decode(subnets: &str, resp: &WatchResponse) -> WatchEvent<i64> {
    let mut changes = Vec::with_capacity(resp.events.len());
    let mut resume: Option<i64> = None;
    for ev in &resp.events {
        let Some(kv) = &ev.kv else { continue };
        metrics::WATCH_EVENTS.inc();
        let delete = ev.r#type == EventType::Delete as i32;
        debug!(
            1,
            "watch: {} {} at revision {}",
            if delete { "DELETE" } else { "PUT" },
            shown_key(&kv.key),
            kv.mod_revision
        );
        resume = Some(resume.map_or(kv.mod_revision, |r| r.max(kv.mod_revision)));
        let change = match (lease_key_of(subnets, &kv.key), delete) {
            (Some(key), false) => Change::Put {
                key,
                lease: stored_lease(&kv.value, kv.lease, kv.create_revision, kv.mod_revision),
            },
            (Some(key), true) => Change::Delete {
                key,
                name: String::from_utf8_lossy(&kv.key).into_owned(),
            },
            (None, false) => Change::NotALease(JunkKey::new(&kv.key, kv.mod_revision)),
            // A key that was never a lease key, gone.
            (None, true) => continue,
        };
        changes.push(change);
    }
    WatchEvent::Changes {
        changes,
        resume,
        partial: resp.fragment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::etcd::client::proto;
    use crate::subnet::key::SubnetKey;

    const SUBNETS: &str = "/coreos.com/network/subnets/";

    fn event(kind: EventType, key: &str, value: &str, revision: i64) -> proto::Event {
        proto::Event {
            r#type: kind as i32,
            kv: Some(proto::KeyValue {
                key: key.as_bytes().to_vec(),
                create_revision: 4,
                mod_revision: revision,
                value: value.as_bytes().to_vec(),
                lease: 3,
            }),
        }
    }

    #[test]
    fn events_become_changes_with_their_revisions() {
        let lease = r#"{"PublicIP":"192.168.0.1","BackendType":"vxlan"}"#;
        let resp = WatchResponse {
            events: vec![
                event(EventType::Put, &format!("{SUBNETS}10.244.1.0-24"), lease, 6),
                event(EventType::Delete, &format!("{SUBNETS}10.244.2.0-24"), "", 7),
                event(
                    EventType::Put,
                    &format!("{SUBNETS}x/10.244.1.0-24"),
                    lease,
                    8,
                ),
                event(EventType::Delete, &format!("{SUBNETS}junk"), "", 9),
            ],
            fragment: true,
            ..WatchResponse::default()
        };
        let WatchEvent::Changes {
            changes,
            resume,
            partial,
        } = decode(SUBNETS, &resp)
        else {
            panic!("not changes")
        };
        assert_eq!((resume, partial), (Some(9), true));
        assert_eq!(changes.len(), 3, "{changes:?}");
        let key = |k: &str| SubnetKey::parse(k).unwrap();
        match &changes[0] {
            Change::Put { key: k, lease } => {
                assert_eq!(*k, key("10.244.1.0-24"));
                assert_eq!(
                    (lease.created, lease.version, lease.reservation),
                    (4, 6, false)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            changes[1],
            Change::Delete {
                key: key("10.244.2.0-24"),
                name: format!("{SUBNETS}10.244.2.0-24")
            }
        );
        assert!(
            matches!(&changes[2], Change::NotALease(j) if j.shown.ends_with("x/10.244.1.0-24"))
        );
    }
}
