//! What the host's netfilter looks like, found without listing any table: whether the kernel
//! speaks nf_tables, and whether legacy (x_tables) iptables tables are in use in this netns.

use super::iptables::Family;
use super::nf_tables::Socket;

/// Whether the kernel answers nf_tables netlink requests in the current netns (the
/// `nf_tables` module is built in or loadable).
pub fn has_nf_tables() -> bool {
    Socket::new().and_then(|mut s| s.probe()).is_ok()
}

/// Whether the legacy (x_tables) `table` exists in this netns: `/proc/net/ip_tables_names`
/// (or `ip6_tables_names`) lists the legacy tables instantiated here. iptables-nft never
/// creates them, so a listed table means iptables-legacy rules may be there.
pub fn legacy_table_in_use(family: Family, table: &str) -> bool {
    let path = match family {
        Family::V4 => "/proc/net/ip_tables_names",
        Family::V6 => "/proc/net/ip6_tables_names",
    };
    std::fs::read_to_string(path)
        .map(|t| t.lines().any(|l| l.trim() == table))
        .unwrap_or(false)
}

/// The nf_tables family iptables-nft uses for `family`.
pub fn nft_family(family: Family) -> super::nf_tables::Family {
    match family {
        Family::V4 => super::nf_tables::Family::Ip,
        Family::V6 => super::nf_tables::Family::Ip6,
    }
}

/// Whether the host's `iptables` command is iptables-legacy (a symlink resolution, no run).
pub fn iptables_is_legacy() -> bool {
    super::exec::find_tool("iptables")
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().contains("legacy"))
        })
        .unwrap_or(false)
}

/// Whether iptables rules of `table` belong in nf_tables (iptables-nft) here: the kernel has
/// nf_tables, the `iptables` command is not the legacy one, and no legacy `table` is in use.
pub fn iptables_uses_nf_tables(family: Family, table: &str) -> bool {
    !iptables_is_legacy() && !legacy_table_in_use(family, table) && has_nf_tables()
}
