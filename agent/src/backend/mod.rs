//! The backends: how pod packets cross from one node to another. One folder per
//! `Backend.Type` of flannel's network config, each behind the same two traits, found through
//! one registry — the rest of the agent knows no backend by name.
//!
//! A backend has two lives, as in flannel (`pkg/backend`: a `Backend` registers a `Network`):
//! - [`Backend`]: its options, parsed and checked from the config's `Backend` object. Pure and
//!   comparable: the agent parses the config again at every resync to notice a change.
//! - [`DataPlane`]: the backend started on this node (keys loaded, threads or children
//!   running). It writes this node's lease value, says which peer leases it can program, and
//!   reconciles its kernel (or userspace) state to the peers, one blocking pass at a time.
//!
//! Each backend is a folder whose `REGISTRATION` brings everything the agent needs of it: its
//! names, its option parser, the agent flags it adds ([`flag`]) and what it needs of the node;
//! its own errors come back boxed ([`BackendError`]) and the agent names the backend in front.
//!
//! To add a backend: see "Adding a backend" in docs/ARCHITECTURE.md.

pub mod bgp;
pub mod flag;
pub mod hostgw;
pub mod ipip;
pub mod overlay;
pub mod registry;
pub mod udp;
pub mod underlay;
pub mod vxlan;
pub mod wireguard;

use std::any::Any;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::ops::metrics;
pub use crate::subnet::config::{BackendObject, Network};
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
use crate::subnet::validate::Rules;
use flag::{Flag, FlagValues};

/// A backend's own error (its `error.rs`), boxed: the agent wraps it with the backend's name
/// and when it failed (`vxlan reconcile failed: ...`).
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// One `Backend.Type`: everything the agent needs to know of a backend before it runs.
pub struct Registration {
    /// flannel's `Backend.Type` values (the first is the canonical one).
    pub names: &'static [&'static str],
    /// One line for `--list-backends`.
    pub description: &'static str,
    /// What the node needs for it beyond the agent.
    pub needs: &'static [Need],
    /// The agent flags it brings; it gets their values in [`Node::flags`].
    pub flags: &'static [Flag],
    /// Parses and checks the options. Errors name the option (`"Backend.VNI" 0 is outside
    /// ...`); the caller adds the config key.
    pub parse: ParseFn,
}

/// A backend's option parser (see [`Registration::parse`]).
pub type ParseFn = fn(&BackendObject, &Network) -> Result<Box<dyn Backend>, String>;

/// Something a backend needs of the node, beyond the agent itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A kernel driver: a link kind `ip link add ... type <kind>` makes, or `tun` for
    /// `/dev/net/tun`.
    Kernel(&'static str),
    /// A program the backend runs, and the Debian package that has it.
    Program {
        name: &'static str,
        package: &'static str,
    },
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Kernel(kind) => write!(f, "kernel:{kind}"),
            Need::Program { name, package } => write!(f, "program:{name}:{package}"),
        }
    }
}

/// A backend's options: flannel's `Backend` for one type.
pub trait Backend: BackendOptions + fmt::Debug + Send + Sync + 'static {
    /// The canonical `Backend.Type`: what this node's lease carries as `BackendType`, but for
    /// `udp`, whose leases carry none (as flanneld writes them).
    fn type_name(&self) -> &'static str;

    /// One line for the start-up log (`vxlan VNI 1 port 8472`).
    fn describe(&self) -> String;

    /// Bytes the backend adds to every pod packet over an IPv4 underlay: pods get the
    /// underlay MTU less this (`FLANNEL_MTU`).
    fn mtu_overhead(&self) -> u32;

    /// Whether another node's lease is one this backend can program (flannel: a lease of its
    /// own type, with backend data it can read).
    fn check_peer(&self, attrs: &LeaseAttrs) -> Result<(), Refusal>;

    /// Starts the data plane on this node (loads keys, starts what runs beside the agent).
    fn start(&self, node: &Node<'_>) -> Result<Box<dyn DataPlane>, BackendError>;
}

/// What every backend's options are, whatever the backend: written once, for every options
/// type that can be cloned and compared (each backend's is).
pub trait BackendOptions {
    /// For [`BackendOptions::same_options`].
    fn as_any(&self) -> &dyn Any;

    /// Whether `other` holds the same options (a config change is noticed by comparing).
    fn same_options(&self, other: &dyn Backend) -> bool;

    /// A copy, boxed (network configs are cloned).
    fn clone_box(&self) -> Box<dyn Backend>;
}

impl<T: Backend + Clone + PartialEq> BackendOptions for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same_options(&self, other: &dyn Backend) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn clone_box(&self) -> Box<dyn Backend> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Backend> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// What a backend is told about the node it starts on.
pub struct Node<'a> {
    pub network: Network,
    /// This node's underlay address (the lease's `PublicIP`).
    pub public_ip: Ipv4Addr,
    /// Its IPv6 underlay address, on a dual-stack network.
    pub public_ipv6: Option<Ipv6Addr>,
    /// `--iface`: the underlay interface, when given.
    pub iface: Option<&'a str>,
    /// This node's name, when the agent knows it (the Kubernetes node it runs on).
    pub name: Option<&'a str>,
    /// The values of the backend's own flags (its registration's).
    pub flags: &'a FlagValues,
}

impl Node<'_> {
    /// The value of one of the backend's flags, or its default.
    pub fn flag(&self, flag: &Flag) -> Option<&str> {
        self.flags.get(flag)
    }

    /// `--iface`, owned.
    pub fn iface(&self) -> Option<String> {
        self.iface.map(str::to_string)
    }
}

/// Another node's lease, as the data plane sees it (already checked by the agent).
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    pub key: SubnetKey,
    pub attrs: LeaseAttrs,
}

/// Why a data plane does not take a peer lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A lease of another backend type: not ours to program (a cluster runs one backend).
    OtherBackend,
    /// Our type, but its backend data is unusable (the reason names the field).
    Invalid(String),
}

/// The outcome of one reconcile pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pass {
    /// The MTU pods get on this node (`FLANNEL_MTU`).
    pub mtu: u32,
    /// Peers the pass programmed.
    pub programmed: usize,
    /// Lines worth logging (the data plane decides: when its peers or its state changed).
    pub log: Vec<String>,
    /// This node's lease value as the data plane now wants it (vxlan: with the devices' real
    /// MACs); the agent rewrites the lease when it differs from the stored one.
    pub lease_attrs: Option<LeaseValue>,
}

/// A lease value a pass wants published.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseValue {
    pub attrs: LeaseAttrs,
    /// What it carries, for the log (`VtepMAC 0e:…`).
    pub what: String,
}

/// What a conflist template may use from the backend (the chained `vxlan` plugin's files and
/// settings); neutral values for backends without them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateValues {
    pub vni: u32,
    pub port: u16,
    pub mode: String,
    pub peers_file: String,
    pub ipv6_peers_file: String,
}

/// A backend started on this node.
pub trait DataPlane: Send + 'static {
    /// This node's lease value for `key`: `BackendType` and `BackendData` (with `PublicIPv6`
    /// and `BackendV6Data` on a dual-stack network).
    fn lease_attrs(&self, key: &SubnetKey) -> LeaseAttrs;

    /// One pass: the data plane made to carry pods to exactly `peers` (other nodes' leases,
    /// each accepted by [`Backend::check_peer`]). Blocking: the agent runs it on a
    /// blocking thread, one at a time.
    fn reconcile(&mut self, own: &SubnetKey, peers: &[Peer]) -> Result<Pass, BackendError>;

    /// The rules every peer lease of this pass passed (`subnet::validate`), handed over before
    /// each `reconcile`: a backend that learns routes another way (BGP) holds them to the same
    /// (`Rules::check_prefix`, `Rules::check_underlay`). Others need not look.
    fn rules(&mut self, _rules: &Rules) {}

    /// The template values the backend provides.
    fn template_values(&self) -> TemplateValues {
        TemplateValues::default()
    }

    /// Where the backend's own metrics come from (added to every `/metrics` scrape).
    fn metrics_source(&self) -> Option<metrics::Source> {
        None
    }

    /// Called once when the agent stops (SIGTERM, SIGINT); logs what it removes or leaves.
    /// The default leaves the kernel state as it is, so pods keep talking across a restart.
    fn stop(&mut self) {}
}
