//! The netfilter seam of the main plugins: masquerade (ipMasq) and the MAC spoof check behind
//! one trait, so a plugin's ADD/DEL/CHECK/GC runs with the host's rules ([`LiveNetfilter`])
//! or, in unit tests, with the in-memory `testing::FakeNetfilter` (feature `fake`).
//!
//! netfilter is not part of netkit's [`netkit::Kernel`]: it goes through nftables netlink and
//! the iptables tools, with its own error type ([`netkit::netfilter::Error`]).

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netkit::netfilter::ipmasq::{self, Backend};
use netkit::netfilter::iptables::Family;
use netkit::netfilter::spoofcheck::SpoofChecker;
use netkit::netfilter::Result;

/// What the main plugins ask of netfilter. The masquerade rules of an attachment are named by
/// (network, ifname, container ID), as the reference names them. Cheap to clone (an undo step
/// keeps its own copy) and shareable across threads (a DEL tears down alongside other steps).
pub trait Netfilter: Clone + Send + Sync + 'static {
    /// The masquerade backend ADD uses when the config names none.
    fn default_masquerade_backend(&self, network: &str) -> Backend;

    /// Masquerades the traffic of the container addresses `addrs` leaving the host, with
    /// `backend`.
    fn setup_masquerade(
        &self,
        backend: Backend,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<()>;

    /// Removes the attachment's masquerade rules in `families`, whatever their backend
    /// (nothing to remove is no error). `sources` are the attachment's container addresses
    /// when known (empty: unknown): the iptables chain is named by (network, container ID)
    /// only, and another attachment of the same network and container keeps its jumps to it.
    fn teardown_masquerade(
        &self,
        network: &str,
        ifname: &str,
        container_id: &str,
        families: &[Family],
        sources: &[IpAddr],
    ) -> Result<()>;

    /// The attachment's masquerade rules exist for `addrs` with `backend`; with `None`, with
    /// whichever backend ADD picked by default.
    fn verify_masquerade(
        &self,
        backend: Option<Backend>,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<()>;

    /// Removes the masquerade rules of `network`'s attachments that are not in `valid`
    /// (container ID, ifname).
    fn gc_masquerade(&self, network: &str, valid: &[(String, String)]) -> Result<()>;

    /// Installs the spoof check `check`.
    fn install_spoof_check(&self, check: &SpoofChecker) -> Result<()>;

    /// Removes the spoof check `check` (nothing to remove is no error).
    fn remove_spoof_check(&self, check: &SpoofChecker) -> Result<()>;

    /// Whether the rules of the spoof check `check` are installed.
    fn spoof_check_installed(&self, check: &SpoofChecker) -> Result<bool>;
}

/// What a DEL's masquerade teardown covers: the attachment's addresses, from prevResult and
/// `link_addresses` (what the container link still had), and their families (to skip needless
/// iptables runs); no address and both families when nothing tells. The addresses keep
/// another interface's jumps to the iptables chain of the same network and container.
pub fn teardown_scope(
    args: &libcni::skel::CmdArgs,
    link_addresses: &[IpAddr],
) -> (Vec<Family>, Vec<IpAddr>) {
    let mut sources: Vec<IpAddr> = match args.prev_result() {
        Ok(Some(prev)) => prev.ips.iter().map(|i| i.address.ip()).collect(),
        _ => Vec::new(),
    };
    for a in link_addresses {
        if !sources.contains(a) {
            sources.push(*a);
        }
    }
    (families_of(&sources), sources)
}

/// The families of `addresses`, in the order first seen; both when there are none.
pub fn families_of<'a>(addresses: impl IntoIterator<Item = &'a IpAddr>) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for ip in addresses {
        let f = Family::of(ip);
        if !families.contains(&f) {
            families.push(f);
        }
    }
    if families.is_empty() {
        families = vec![Family::V4, Family::V6];
    }
    families
}

/// The host's netfilter (nf_tables or the iptables tools), through `netkit::netfilter`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveNetfilter;

impl Netfilter for LiveNetfilter {
    fn default_masquerade_backend(&self, network: &str) -> Backend {
        Backend::default_for(network)
    }

    fn setup_masquerade(
        &self,
        backend: Backend,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<()> {
        ipmasq::setup(backend, addrs, network, ifname, container_id)
    }

    fn teardown_masquerade(
        &self,
        network: &str,
        ifname: &str,
        container_id: &str,
        families: &[Family],
        sources: &[IpAddr],
    ) -> Result<()> {
        ipmasq::teardown_families(network, ifname, container_id, families, sources)
    }

    fn verify_masquerade(
        &self,
        backend: Option<Backend>,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<()> {
        match backend {
            Some(b) => ipmasq::verify(b, addrs, network, ifname, container_id),
            None => ipmasq::verify_default(addrs, network, ifname, container_id),
        }
    }

    fn gc_masquerade(&self, network: &str, valid: &[(String, String)]) -> Result<()> {
        ipmasq::gc(network, valid)
    }

    fn install_spoof_check(&self, check: &SpoofChecker) -> Result<()> {
        check.setup()
    }

    fn remove_spoof_check(&self, check: &SpoofChecker) -> Result<()> {
        check.teardown()
    }

    fn spoof_check_installed(&self, check: &SpoofChecker) -> Result<bool> {
        check.is_installed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masquerade_families_are_those_seen_or_both() {
        let ips: Vec<IpAddr> = ["fd00::5", "10.1.0.5", "10.1.0.6"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(families_of(&ips), [Family::V6, Family::V4]);
        assert_eq!(families_of(&ips[1..]), [Family::V4]);
        assert_eq!(families_of(&[]), [Family::V4, Family::V6]);
    }

    #[test]
    fn teardown_scope_joins_prev_result_and_link_addresses() {
        let args = crate::testing::cmd_args(
            serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge",
                "prevResult": {"cniVersion": "1.0.0",
                    "ips": [{"address": "10.1.0.5/24"}]}}),
            "",
        );
        let link: Vec<IpAddr> = vec!["10.1.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        let (families, sources) = teardown_scope(&args, &link);
        assert_eq!(families, [Family::V4, Family::V6]);
        assert_eq!(sources, link);
        let bare = crate::testing::cmd_args(serde_json::json!({"cniVersion": "1.0.0"}), "");
        assert_eq!(
            teardown_scope(&bare, &[]),
            (vec![Family::V4, Family::V6], vec![])
        );
    }
}
