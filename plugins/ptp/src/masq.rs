//! The masquerade (ipMasq) seam: netfilter stays outside netkit's `Kernel`, behind this small
//! trait, so ADD/DEL/CHECK run with the live rules ([`LiveMasquerade`]) or an in-memory fake in
//! unit tests.

use ipnetwork::IpNetwork;
use netkit::netfilter::ipmasq::{self, Backend};
use netkit::netfilter::iptables::Family;
use netkit::netfilter::Error;

/// The masquerade rules of one attachment, named by (network, ifname, container ID) as the
/// reference names them. Cheap to clone: an undo step keeps a copy.
pub trait Masquerade: Clone + Send + Sync + 'static {
    /// Installs masquerading for the container addresses `addrs` with `backend`.
    fn setup(
        &self,
        backend: Backend,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<(), Error>;
    /// Removes the attachment's rules in `families` (nothing to remove is no error).
    fn teardown(
        &self,
        network: &str,
        ifname: &str,
        container_id: &str,
        families: &[Family],
    ) -> Result<(), Error>;
    /// The rules exist for `addrs` with `backend`; with `None`, with whichever backend ADD
    /// picked.
    fn verify(
        &self,
        backend: Option<Backend>,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<(), Error>;
    /// Removes the rules of `network`'s attachments that are not in `valid`.
    fn gc(&self, network: &str, valid: &[(String, String)]) -> Result<(), Error>;
    /// The backend ADD uses when none is configured.
    fn default_backend(&self, network: &str) -> Backend;
}

/// The host's netfilter (nf_tables or the iptables tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveMasquerade;

impl Masquerade for LiveMasquerade {
    fn setup(
        &self,
        backend: Backend,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<(), Error> {
        ipmasq::setup(backend, addrs, network, ifname, container_id)
    }

    fn teardown(
        &self,
        network: &str,
        ifname: &str,
        container_id: &str,
        families: &[Family],
    ) -> Result<(), Error> {
        ipmasq::teardown_families(network, ifname, container_id, families)
    }

    fn verify(
        &self,
        backend: Option<Backend>,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<(), Error> {
        match backend {
            Some(b) => ipmasq::verify(b, addrs, network, ifname, container_id),
            None => ipmasq::verify_default(addrs, network, ifname, container_id),
        }
    }

    fn gc(&self, network: &str, valid: &[(String, String)]) -> Result<(), Error> {
        ipmasq::gc(network, valid)
    }

    fn default_backend(&self, network: &str) -> Backend {
        Backend::default_for(network)
    }
}
