//! nf_tables over netlink (NETLINK_NETFILTER, subsystem NFTABLES), with no `nft` or
//! `iptables` process involved.
//!
//! * [`attr`]: netlink attributes; [`expr`]: the expressions rules are made of;
//!   [`msg`]: tables, chains, rules and their messages; [`socket`]: atomic batches, dumps
//!   filtered by table and chain, lookups.
//! * [`build`]: rule fragments linearized as nft linearizes them (so `nft list ruleset`
//!   shows our rules, and their comments, as nft would have written them);
//!   [`xt`]: rules as iptables-nft writes them (so `iptables-nft -S` shows them).
//! * [`set`]: anonymous sets as nft creates them; [`named_set`]: named sets and verdict
//!   maps, filled and emptied by name; [`syntax`]: nft match text (portmap's
//!   conditions) turned into the expressions and sets nft would make of it.
//! * [`capture`]: our batches against the tools' captured traffic (for unit tests).
//! * [`release`]: closing sockets without waiting for the kernel's deferred destroy work;
//!   [`shared`]: shared chains written only where they are missing or differ, so that an
//!   ADD commits creations only.
//!
//! Messages are byte-for-byte those nft/iptables-nft send; the unit tests compare them with
//! the tools' traffic (captured with `strace -e trace=sendmsg -e write=3`).

pub mod attr;
pub mod build;
pub mod capture;
pub mod expr;
pub mod msg;
pub mod named_set;
pub mod release;
pub mod set;
pub mod shared;
pub mod socket;
pub mod syntax;
pub mod xt;

pub use expr::{CmpOp, Expr, Verdict};
pub use msg::{Chain, Family, Hook, Rule, Table, POLICY_ACCEPT};
pub use socket::{Batch, Socket};

#[cfg(test)]
mod golden;
