//! The watch on Nodes as the seam's changes: every event goes through the shared index (which
//! says what it changes among the leases, and drops kubelet status updates), resumes from the
//! event's resourceVersion, and turns "410 Gone" into a re-list. This node's own annotations
//! are put back when an event shows them removed or changed.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::core::WatchEvent as KubeEvent;

use super::annotations::NodeFacts;
use super::error::KubeStoreError;
use super::index::NodeIndex;
use super::publish::Publisher;
use crate::error::AgentError;
use crate::log;
use crate::manager::{LeaseWatch, WatchEvent};

pub type NodeEvents = Pin<Box<dyn Stream<Item = Result<KubeEvent<Node>, kube::Error>>>>;

pub struct KubeWatch {
    pub events: NodeEvents,
    pub index: Rc<RefCell<NodeIndex>>,
    pub publisher: Rc<Publisher>,
    /// The server closes the watch after this; no event or close for longer means the
    /// connection is dead.
    pub silence_limit: Duration,
}

impl LeaseWatch for KubeWatch {
    type Resume = String;

    async fn next(&mut self) -> Result<Option<WatchEvent<String>>, AgentError> {
        let item = match tokio::time::timeout(self.silence_limit, self.events.next()).await {
            Err(_) => {
                self.index.borrow_mut().synced = false;
                return Err(KubeStoreError::Request {
                    server: self.publisher.server.clone(),
                    what: "watch nodes".into(),
                    detail: format!("nothing received for {:?}", self.silence_limit),
                }
                .into());
            }
            Ok(None) => return Ok(None),
            Ok(Some(item)) => item,
        };
        let event = match item {
            Ok(event) => event,
            Err(e) => {
                self.index.borrow_mut().synced = false;
                return Err(
                    KubeStoreError::request(&self.publisher.server, "watch nodes", e).into(),
                );
            }
        };
        let (changes, resume, own_seen) = {
            let mut index = self.index.borrow_mut();
            let (changes, resume, own_seen) = match event {
                KubeEvent::Added(node) | KubeEvent::Modified(node) => {
                    let facts = NodeFacts::from_node(&node);
                    let own = facts.name == self.publisher.node_name;
                    (
                        index.node_changed(facts),
                        node.metadata.resource_version,
                        own,
                    )
                }
                KubeEvent::Deleted(node) => {
                    let name = node.metadata.name.unwrap_or_default();
                    (
                        index.node_deleted(&name),
                        node.metadata.resource_version,
                        false,
                    )
                }
                KubeEvent::Bookmark(b) => (Vec::new(), Some(b.metadata.resource_version), false),
                KubeEvent::Error(status) if status.code == 410 => {
                    log!(
                        "watch on nodes expired at resourceVersion {} (410 Gone); re-listing",
                        index.resume
                    );
                    index.synced = false;
                    return Ok(Some(WatchEvent::Relist));
                }
                KubeEvent::Error(status) => {
                    index.synced = false;
                    return Err(KubeStoreError::Request {
                        server: self.publisher.server.clone(),
                        what: "watch nodes".into(),
                        detail: format!("{} ({})", status.message, status.code),
                    }
                    .into());
                }
            };
            if let Some(rv) = &resume {
                index.resume = rv.clone();
            }
            (changes, resume, own_seen)
        };
        if own_seen {
            self.publisher.repair(&self.index).await;
        }
        Ok(Some(WatchEvent::Changes {
            changes,
            resume,
            partial: false,
        }))
    }
}
