//! The reference plugin's objects in the filter table, the same whichever way they are
//! written (the iptables tools, or netlink as iptables-nft would).

/// The plugin's own chain, jumped to from FORWARD.
pub const PRIV_CHAIN: &str = "CNI-FORWARD";
/// The comment of FORWARD's jump to [`PRIV_CHAIN`].
pub const FORWARD_JUMP_COMMENT: &str = "CNI firewall plugin rules";
/// The comment of [`PRIV_CHAIN`]'s jump to the admin chain.
pub const ADMIN_JUMP_COMMENT: &str = "CNI firewall plugin admin overrides";
