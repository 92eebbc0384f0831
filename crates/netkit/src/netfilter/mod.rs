//! Netfilter programming: nf_tables over netlink ([`nf_tables`]), and the `iptables` tools
//! for iptables-legacy hosts and configurations that ask for the iptables backend.
//!
//! Nothing here lists a whole table: per-pod objects are found by chain name or rule comment
//! in our own tables, or in the few iptables chains that jump to them. The tools run with
//! fixed argument vectors (never a shell) and `-w` for the xtables lock, and only for
//! exact-rule operations (`-C`, `-D` with the full spec, `iptables-restore --noflush` of our
//! chains, or the listing of one chain).
//!
//! Layers: [`nf_tables`] is the netlink layer, and [`nflog`] receives what its log rules
//! send; [`exec`] runs a tool; [`iptables`] and [`restore`] are iptables helpers; [`host`]
//! tells what the host uses (both per address family, [`iptables::Family`], defined below them
//! in `ip_family`); [`xt_cleanup`] removes iptables-nft chains over netlink and [`xt_rules`]
//! keeps shared iptables-nft rules unique; [`naming`] derives the reference plugins' object
//! names; [`ipmasq`] and [`spoofcheck`] are the bridge/ptp features, reusable by other plugins.

pub mod exec;
pub mod host;
mod ip_family;
pub mod ipmasq;
pub mod iptables;
pub mod naming;
pub mod nf_tables;
pub mod nflog;
/// Batched changes via iptables-restore (added for portmap/firewall).
pub mod restore;
pub mod spoofcheck;
pub mod xt_cleanup;
pub mod xt_rules;

pub use exec::{Error, Result};
