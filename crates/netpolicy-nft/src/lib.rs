//! The NetworkPolicy data plane: a compiled `netpolicy::Plan` written into one nf_tables table,
//! `inet ferrocni_policy`, over netlink (no `nft` process), in full or as the diff between the
//! plan last committed and the next.
//!
//! # The table
//!
//! ```text
//! table inet ferrocni_policy {
//!     set prod.web.i0.pod4.<hash> { type ipv4_addr; elements = { ... } }        # Addresses
//!     set prod.web.i1.blk4.<hash> { type ipv4_addr; flags interval; ... }       # Intervals
//!     set prod.web.e1.np4.<hash>  { type ipv4_addr . inet_proto . inet_service } # AddrPorts
//!     map ingress4 { type ipv4_addr : verdict; elements = { 10.1.2.3 : jump ingress-10.1.2.3 } }
//!     map ingress6, egress4, egress6 { ... }
//!     chain ingress-10.1.2.3 {
//!         ip saddr @prod.web.i0.pod4.<hash> tcp dport 80-90 return comment "prod/web rule 0"
//!         limit rate 50/second burst 20 packets log prefix "i 10.1.2.3" group 7361 snaplen 128
//!         counter drop comment "prod/deny prod/web"
//!     }
//!     chain forward {
//!         type filter hook forward priority 0; policy accept;
//!         ct state established,related accept
//!         ip saddr vmap @egress4
//!         ip6 saddr vmap @egress6
//!         ip daddr vmap @ingress4
//!         ip6 daddr vmap @ingress6
//!     }
//! }
//! ```
//!
//! * **The plan's sets as they are**, under the plan's names: an update of pods is set
//!   elements only (no rule rewritten), which the kernel applies in place.
//! * **One chain per isolated (address, direction)**, reached through a verdict map keyed by
//!   the address: a packet costs one hash lookup per direction whatever the number of pods,
//!   and a pod's rules are rewritten (flush and refill) without touching anyone else's. Each
//!   clause of the plan is one rule per port range that `return`s when it matches: ingress
//!   matches the peer's SOURCE address, egress its DESTINATION; a named-ports set matches
//!   `ip daddr . meta l4proto . th dport`; a port range is `meta l4proto P th dport A-B`, a
//!   single port a compare, a whole protocol the protocol alone. What no clause allows
//!   reaches the final `counter drop`, whose comment names the isolating policies, after a
//!   rule that logs it to nfnetlink_log group [`LOG_GROUP`] at most 50 packets a second
//!   (burst 20) per chain, prefixed `i <address>` or `e <address>` ([`parse_log_prefix`]
//!   reads it back): a listener (the agent) sees the denied flows, and with none bound to
//!   the group the rule costs the rate limit's bookkeeping only.
//! * **The base chain, `forward`**: replies and related packets of allowed connections pass
//!   first (conntrack), then the sender's egress chain, then the receiver's ingress chain: a
//!   jumped chain that returns continues with the next rule, so a new connection must pass
//!   both. Only the forward hook: traffic from the node to its pods (kubelet probes) is
//!   OUTPUT and from a pod to its node INPUT, which the API always allows. Pod-to-pod traffic
//!   on one node, bridged on `cni0`, reaches the `inet` forward hook through br_netfilter
//!   (`net.bridge.bridge-nf-call-iptables`/`-ip6tables`, on by default once the module is
//!   loaded); routed traffic (between nodes, or ptp-style pods) reaches it anyway.
//!
//! # Transactions
//!
//! The first [`PolicyTable::sync`] (and the one after a failed commit) writes everything in
//! one transaction that begins `add table; delete table; add table`: the old table (an agent's
//! previous run) is replaced atomically, never leaving a moment without rules. Later syncs
//! send `Plan::diff` in one transaction, in an order each step's references allow: new sets
//! with their elements; element changes (interval sets flushed and refilled, since their
//! elements are linearized boundaries); targets added (chain, rules, then map element),
//! changed (chain flushed and refilled; map element added or removed when a direction's
//! isolation appears or goes), removed (map element out, then the chain flushed and deleted);
//! sets no longer used deleted last. Large transactions (tens of thousands of elements and
//! rules, several MB) go in one datagram: the netlink socket's send buffer is grown to fit.
//!
//! Modules: `error`; `layout` (names, sets and keys); `denied_log` (the log rule before
//! each drop, its group and prefix); `rules` (the chains' rules, using layout and
//! denied_log); `sync` (the transactions, using them).

mod denied_log;
mod error;
mod layout;
mod rules;
mod sync;

pub use denied_log::{
    log_prefix, parse_log_prefix, LOG_BURST, LOG_GROUP, LOG_RATE_PER_SECOND, LOG_SNAPLEN,
};
pub use error::Error;
pub use layout::{FORWARD_CHAIN, TABLE};
pub use sync::{PolicyTable, SyncStats};
