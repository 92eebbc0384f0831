//! Netfilter programming through the `iptables`/`ip6tables`/`nft` tools.
//!
//! The tools are executed with fixed argument vectors (never through a shell) and `-w` for the
//! xtables lock. nftables changes are sent as JSON (`nft -j -f -`), so no value we interpolate
//! (names, comments) can change the meaning of a command.
//!
//! Layers: [`exec`] runs a tool; [`iptables`] and [`nftables`] are generic helpers (chains,
//! unique rules, listing, deletion); [`naming`] derives the reference plugins' object names;
//! [`ipmasq`] and [`spoofcheck`] are the bridge/ptp features built on them, reusable by the
//! portmap and firewall plugins.

pub mod exec;
pub mod host;
pub mod ipmasq;
pub mod iptables;
pub mod naming;
pub mod nf_tables;
pub mod nftables;
/// Batched changes via iptables-restore (added for portmap/firewall).
pub mod restore;
pub mod spoofcheck;
pub mod xt_cleanup;

pub use exec::{Error, Result};
