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
