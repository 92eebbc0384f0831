//! What the host's netfilter looks like, found without listing any table: whether the kernel
//! speaks nf_tables, what the `iptables` command is, and whether legacy (x_tables) iptables
//! tables are in use in this netns; and from that, where iptables rules belong.
//!
//! The decision ([`HostView::place`]) is a pure function of a [`HostView`], so the edge
//! cases (an iptables-legacy command with no legacy table yet, legacy tables next to an
//! iptables-nft command, no nf_tables) are tested without such hosts.

use std::path::{Path, PathBuf};

use super::ip_family::Family;
use super::nf_tables::Socket;

/// Whether the kernel answers nf_tables netlink requests (the `nf_tables` module is built in
/// or loadable). Asked once per process: a plugin needs the answer several times per call
/// (backend choice, where iptables rules go, per family), and it is the kernel's, the same in
/// every netns.
pub fn has_nf_tables() -> bool {
    static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| Socket::new().and_then(|mut s| s.probe()).is_ok())
}

/// Where the iptables rules of one table belong on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// In nf_tables (`ip`/`ip6` tables of iptables-nft), written over netlink.
    NfTables,
    /// In the legacy x_tables, written with the legacy iptables tool.
    Legacy,
}

/// The facts the decision depends on, for one address family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostView {
    /// The kernel speaks nf_tables here.
    pub nf_tables: bool,
    /// What the `iptables` command resolves to (symlinks followed), if it is installed.
    pub iptables: Option<PathBuf>,
    /// The text of `/proc/net/ip_tables_names` (`ip6_tables_names` for IPv6): the legacy
    /// tables instantiated in this netns, one per line.
    pub legacy_tables: String,
}

impl HostView {
    /// The view of the current netns for `family`.
    pub fn current(family: Family) -> HostView {
        let names = match family {
            Family::V4 => "/proc/net/ip_tables_names",
            Family::V6 => "/proc/net/ip6_tables_names",
        };
        HostView {
            nf_tables: has_nf_tables(),
            iptables: super::exec::find_tool("iptables")
                .and_then(|p| std::fs::canonicalize(p).ok()),
            legacy_tables: std::fs::read_to_string(names).unwrap_or_default(),
        }
    }

    /// The `iptables` command is iptables-legacy (`xtables-legacy-multi`, `iptables-legacy`).
    pub fn iptables_is_legacy(&self) -> bool {
        self.iptables.as_deref().is_some_and(is_legacy_binary)
    }

    /// The legacy `table` has been instantiated here (iptables-nft never does that, so its
    /// rules, if any, were written by an iptables-legacy).
    pub fn legacy_table_in_use(&self, table: &str) -> bool {
        self.legacy_tables.lines().any(|l| l.trim() == table)
    }

    /// Where iptables rules of `table` go:
    ///
    /// * the `iptables` command is iptables-legacy: legacy, even before any legacy table
    ///   exists — that is where the host's own iptables (and the reference plugins) put them,
    ///   and where its policy will live once the administrator writes one;
    /// * a legacy `table` is in use next to an iptables-nft command (an iptables-legacy in a
    ///   container image, an old kube-proxy): legacy, next to those rules;
    /// * no nf_tables in the kernel: legacy, the only place left;
    /// * otherwise nf_tables, over netlink (a missing `iptables` command does not matter).
    pub fn place(&self, table: &str) -> Place {
        if self.iptables_is_legacy() || self.legacy_table_in_use(table) || !self.nf_tables {
            Place::Legacy
        } else {
            Place::NfTables
        }
    }
}

/// Whether a resolved iptables binary is the legacy one, by its file name (no run):
/// iptables 1.8 installs `xtables-legacy-multi` / `xtables-nft-multi` (or `iptables-legacy`
/// / `iptables-nft`); older releases have `xtables-multi` (1.6), `iptables-multi` or a
/// plain `iptables` binary, all x_tables, while their `xtables-compat-multi` is nf_tables.
fn is_legacy_binary(path: &Path) -> bool {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return false;
    };
    name.contains("legacy")
        || matches!(
            name.as_str(),
            "xtables-multi" | "iptables-multi" | "iptables" | "ip6tables"
        )
}

/// Whether the legacy (x_tables) `table` exists in this netns.
pub fn legacy_table_in_use(family: Family, table: &str) -> bool {
    HostView::current(family).legacy_table_in_use(table)
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
    HostView::current(Family::V4).iptables_is_legacy()
}

/// Whether iptables rules of `table` belong in nf_tables (iptables-nft) here, see
/// [`HostView::place`].
pub fn iptables_uses_nf_tables(family: Family, table: &str) -> bool {
    HostView::current(family).place(table) == Place::NfTables
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(nf_tables: bool, iptables: Option<&str>, legacy_tables: &str) -> HostView {
        HostView {
            nf_tables,
            iptables: iptables.map(PathBuf::from),
            legacy_tables: legacy_tables.to_string(),
        }
    }

    const NFT: Option<&str> = Some("/usr/sbin/xtables-nft-multi");
    const LEGACY: Option<&str> = Some("/usr/sbin/xtables-legacy-multi");

    #[test]
    fn iptables_nft_host_uses_netlink() {
        let v = view(true, NFT, "");
        assert!(!v.iptables_is_legacy());
        assert_eq!(v.place("nat"), Place::NfTables);
        assert_eq!(v.place("filter"), Place::NfTables);
        // No iptables installed at all: nothing needs the tool.
        assert_eq!(view(true, None, "").place("filter"), Place::NfTables);
    }

    #[test]
    fn legacy_command_without_legacy_tables_stays_legacy() {
        let v = view(true, LEGACY, "");
        assert!(v.iptables_is_legacy());
        assert!(!v.legacy_table_in_use("nat"));
        assert_eq!(v.place("nat"), Place::Legacy);
        assert_eq!(v.place("filter"), Place::Legacy);
        // The RHEL 7 style binary name.
        assert_eq!(
            view(true, Some("/sbin/iptables-legacy"), "").place("nat"),
            Place::Legacy
        );
    }

    #[test]
    fn legacy_tables_in_use_next_to_iptables_nft() {
        let v = view(true, NFT, "mangle\nnat\n");
        assert!(v.legacy_table_in_use("nat"));
        assert_eq!(v.place("nat"), Place::Legacy);
        // Only the tables that exist in legacy: filter is still iptables-nft's.
        assert_eq!(v.place("filter"), Place::NfTables);
        // Names are whole lines, not substrings.
        assert_eq!(view(true, NFT, "natx\n").place("nat"), Place::NfTables);
        assert_eq!(view(true, NFT, " filter \n").place("filter"), Place::Legacy);
    }

    #[test]
    fn no_nf_tables_means_legacy() {
        assert_eq!(view(false, NFT, "").place("nat"), Place::Legacy);
        assert_eq!(view(false, None, "").place("filter"), Place::Legacy);
    }

    #[test]
    fn legacy_binary_names() {
        assert!(is_legacy_binary(Path::new(
            "/usr/sbin/xtables-legacy-multi"
        )));
        assert!(is_legacy_binary(Path::new("/usr/sbin/iptables-legacy")));
        assert!(!is_legacy_binary(Path::new("/usr/sbin/xtables-nft-multi")));
        assert!(!is_legacy_binary(Path::new("/usr/sbin/iptables-nft")));
        assert!(is_legacy_binary(Path::new("/sbin/xtables-multi")));
        assert!(is_legacy_binary(Path::new("/sbin/iptables")));
        assert!(!is_legacy_binary(Path::new(
            "/usr/sbin/xtables-compat-multi"
        )));
        assert!(!is_legacy_binary(Path::new("/")));
    }
}
