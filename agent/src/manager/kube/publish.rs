//! What this node writes on its Node object, through the `status` subresource as flanneld
//! does (its ClusterRole needs `nodes/status` `patch` and nothing on `nodes` but reads): the
//! annotations that publish its lease, put back whenever they are seen removed or changed,
//! and the `NetworkUnavailable=False` condition once the data plane is up.

use std::cell::RefCell;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::annotations::{Annotations, NodeFacts};
use super::error::KubeStoreError;
use super::index::NodeIndex;
use crate::subnet::lease::LeaseAttrs;
use crate::{log, warn};

pub struct Publisher {
    pub nodes: Api<Node>,
    pub node_name: String,
    pub server: String,
    pub names: Annotations,
    /// The annotations last published (what a repair restores).
    pub desired: RefCell<BTreeMap<String, String>>,
}

impl Publisher {
    /// Publishes `attrs` on the node `node` (as last seen), patching only what differs.
    pub async fn publish(
        &self,
        attrs: &LeaseAttrs,
        node: &NodeFacts,
    ) -> Result<(), KubeStoreError> {
        let wanted = self.names.published(attrs, node);
        *self.desired.borrow_mut() = wanted.clone();
        let stale = stale_annotations(&wanted, node);
        if stale.is_empty() {
            return Ok(());
        }
        self.patch_annotations(stale).await
    }

    /// Restores the published annotations if this node (as the index last saw it) lacks them.
    pub async fn repair(&self, index: &RefCell<NodeIndex>) {
        let stale = {
            let index = index.borrow();
            let Some(own) = index.own.as_ref() else {
                return;
            };
            stale_annotations(&self.desired.borrow(), own)
        };
        if stale.is_empty() {
            return;
        }
        log!(
            "node {}'s annotations {} were removed or changed; restoring them",
            self.node_name,
            stale.keys().cloned().collect::<Vec<_>>().join(", ")
        );
        if let Err(e) = self.patch_annotations(stale).await {
            warn!("{e}; retrying at the next change or re-list");
        }
    }

    async fn patch_annotations(&self, set: BTreeMap<String, String>) -> Result<(), KubeStoreError> {
        self.patch_status(json!({"metadata": {"annotations": set}}), "annotations")
            .await
    }

    /// Sets the node's `NetworkUnavailable` condition to False, as flanneld does.
    pub async fn network_available(&self) -> Result<(), KubeStoreError> {
        let now = now_rfc3339();
        let body = json!({"status": {"conditions": [{
            "type": "NetworkUnavailable",
            "status": "False",
            "reason": "FlannelIsUp",
            "message": "Flannel is running on this node",
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }]}});
        self.patch_status(body, "condition NetworkUnavailable")
            .await
    }

    /// A strategic-merge patch of this node through its `status` subresource.
    async fn patch_status(
        &self,
        body: serde_json::Value,
        what: &str,
    ) -> Result<(), KubeStoreError> {
        self.nodes
            .patch_status(
                &self.node_name,
                &PatchParams::default(),
                &Patch::Strategic(body),
            )
            .await
            .map_err(|e| {
                KubeStoreError::request(
                    &self.server,
                    format!("PATCH node {} {what}", self.node_name),
                    e,
                )
            })?;
        Ok(())
    }
}

/// The entries of `wanted` that `node` does not hold as they are.
fn stale_annotations(
    wanted: &BTreeMap<String, String>,
    node: &NodeFacts,
) -> BTreeMap<String, String> {
    wanted
        .iter()
        .filter(|(k, v)| node.annotation(k) != Some(v.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The current time as the API writes it (RFC 3339, seconds, UTC).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_missing_or_changed_annotations_are_patched() {
        let wanted: BTreeMap<String, String> = [("a/x", "1"), ("a/y", "2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let node = NodeFacts {
            name: "n".into(),
            created: 0,
            pod_cidrs: vec![],
            annotations: [("a/x", "1"), ("a/y", "3"), ("other", "z")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let stale = stale_annotations(&wanted, &node);
        assert_eq!(stale.len(), 1);
        assert_eq!(stale["a/y"], "2");
        assert_eq!(now_rfc3339().len(), 20);
    }
}
