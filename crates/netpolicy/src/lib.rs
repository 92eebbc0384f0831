//! The NetworkPolicy compiler: Kubernetes `networking.k8s.io/v1` NetworkPolicy semantics over
//! small input types, compiled into the plan an nf_tables data plane holds (named address
//! sets and per-pod allow-clauses), with a diff between two plans and an explanation of any
//! packet's verdict. Pure logic: no netlink, no Kubernetes client, no async. The design and
//! the semantics chosen are in docs/network-policy.md.
//!
//! Modules, each using only those before it:
//! - [`model`]: the input (namespaces, pods, policies), in the API's shape;
//! - [`error`]: what a policy can be refused for;
//! - [`selector`]: label selectors, which pods a policy selects and a peer matches;
//! - [`plan`]: the compiled plan's types;
//! - `interval`: ipBlocks as intervals, except carved out;
//! - [`validate`]: a policy checked as the apiserver does, defaults applied;
//! - [`names`]: the sets' names;
//! - [`compile`]: inputs to plan;
//! - [`diff`]: what changes between two plans;
//! - [`explain`]: the verdict on a packet, and why;
//! - [`sample`]: a synthetic cluster of the benches' shape.

pub mod compile;
pub mod diff;
pub mod error;
pub mod explain;
mod interval;
pub mod model;
pub mod names;
pub mod plan;
pub mod sample;
pub mod selector;
pub mod validate;

pub use compile::{compile, compile_for, Compiled};
pub use diff::{Changes, ElementChanges, TargetChange};
pub use error::PolicyError;
pub use explain::{explain, Side, Verdict};
pub use model::{
    Cluster, IpBlock, LabelSelector, Labels, NamedPort, Namespace, Peer, Pod, PodKey, Policy,
    PolicyKey, PolicyPort, PortSpec, Protocol, Requirement, Rule,
};
pub use plan::{
    AddrSet, Clause, ClausePeer, ClausePorts, Direction, Element, Family, Isolation, Plan,
    PortRange, SetKind, Target,
};
