//! NetworkPolicy enforcement (`--network-policy`, with `--kube-subnet-mgr`): the agent watches
//! Namespaces, Pods and `networking.k8s.io/v1` NetworkPolicies, compiles them with the
//! `netpolicy` crate for the pods of its own node, and keeps the result in an nf_tables table
//! of its own (`netpolicy-nft`), one transaction per batch of API changes. Each node enforces
//! the ingress rules of the pods it runs and the egress rules of the pods it runs, so a flow
//! between nodes is checked on both, whatever the backend carries it.
//!
//! The parts, each using only those before it:
//! - `objects`: the API's objects as the compiler's input;
//! - `store`: the cluster as last listed and watched, and the updates that change it;
//! - `informer`: one kind's list and watch;
//! - `enforce`: the loop from updates and admissions to commits, and its metrics;
//! - `admit`: the socket the CNI chain asks at a pod's ADD;
//! - `kernel`: the data plane, the kernel's table;
//! - `denied`: the packets the table drops, logged and counted (it reads enforce's plan);
//! - `explain`: `ferrocni-agent policy explain`, the verdict on one flow.

pub mod admit;
pub mod denied;
pub mod enforce;
pub mod explain;
pub mod informer;
pub mod kernel;
pub mod objects;
pub mod store;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::Client;
use std::path::Path;

use crate::error::AgentError;

use enforce::{Dataplane, Enforcer};
use store::{Kind, Object};

/// Starts the informers, the admission socket at `socket` and the enforcement loop on the
/// current `LocalSet`; they run until the agent exits. The table stays in the kernel when the
/// agent stops, so pods stay isolated while it restarts; the next start rewrites it in one
/// transaction.
pub fn start<D: Dataplane + 'static>(
    client: Client,
    node: &str,
    plane: D,
    socket: &Path,
) -> Result<(), AgentError> {
    let listener = admit::listen(socket)?;
    let (admit_tx, admit_rx) = futures_channel::mpsc::unbounded();
    tokio::task::spawn_local(admit::serve(listener, admit_tx));
    let (tx, rx) = futures_channel::mpsc::unbounded();
    tokio::task::spawn_local(informer::run(
        Api::<Namespace>::all(client.clone()),
        Kind::Namespaces,
        |o| Object::Namespace(objects::namespace(o)),
        tx.clone(),
    ));
    tokio::task::spawn_local(informer::run(
        Api::<Pod>::all(client.clone()),
        Kind::Pods,
        |o| Object::Pod(objects::pod(o)),
        tx.clone(),
    ));
    tokio::task::spawn_local(informer::run(
        Api::<NetworkPolicy>::all(client),
        Kind::Policies,
        |o| Object::Policy(Some(objects::policy(o))),
        tx,
    ));
    let enforcer = Enforcer::new(node, plane);
    let denied_metrics = denied::start(enforcer.plan.clone());
    enforcer.publish_metrics(denied_metrics);
    tokio::task::spawn_local(enforce::run(enforcer, rx, admit_rx));
    Ok(())
}
