//! The netfilter side of bridge (masquerade, MAC spoof check) behind its own small seam, so
//! the ADD/DEL/CHECK logic runs on an in-memory model in unit tests. netfilter is not part of
//! netkit's `Kernel`: it goes through the iptables/nft tools and nftables netlink, with its own
//! error type, and only bridge needs all of it here.

use ipnetwork::IpNetwork;
use netkit::netfilter::ipmasq::{self, Backend};
use netkit::netfilter::iptables::Family;
use netkit::netfilter::spoofcheck::SpoofChecker;
use netkit::netfilter::Result;

/// What bridge asks of netfilter. Cheap to clone: an undo step keeps its own copy.
pub trait Netfilter: Clone + 'static {
    /// Masquerades traffic from `addrs` leaving the network (`ipmasq::setup`).
    fn masquerade(
        &self,
        backend: Backend,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<()>;
    /// Removes the attachment's masquerade rules in `families`, whatever the backend.
    fn unmasquerade(
        &self,
        network: &str,
        ifname: &str,
        container_id: &str,
        families: &[Family],
    ) -> Result<()>;
    /// CHECK of the masquerade rules (`None`: the backend ADD picked by default).
    fn verify_masquerade(
        &self,
        backend: Option<Backend>,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<()>;
    /// Installs the spoof check.
    fn spoof_check(&self, sc: &SpoofChecker) -> Result<()>;
    /// Removes the spoof check (nothing to remove is fine).
    fn remove_spoof_check(&self, sc: &SpoofChecker) -> Result<()>;
    /// Whether the spoof check's rules are installed.
    fn spoof_check_installed(&self, sc: &SpoofChecker) -> Result<bool>;
}

/// The host's netfilter, through netkit.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveNetfilter;

impl Netfilter for LiveNetfilter {
    fn masquerade(
        &self,
        backend: Backend,
        addrs: &[IpNetwork],
        network: &str,
        ifname: &str,
        container_id: &str,
    ) -> Result<()> {
        ipmasq::setup(backend, addrs, network, ifname, container_id)
    }
    fn unmasquerade(
        &self,
        network: &str,
        ifname: &str,
        container_id: &str,
        families: &[Family],
    ) -> Result<()> {
        ipmasq::teardown_families(network, ifname, container_id, families)
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
    fn spoof_check(&self, sc: &SpoofChecker) -> Result<()> {
        sc.setup()
    }
    fn remove_spoof_check(&self, sc: &SpoofChecker) -> Result<()> {
        sc.teardown()
    }
    fn spoof_check_installed(&self, sc: &SpoofChecker) -> Result<bool> {
        sc.is_installed()
    }
}

/// An in-memory netfilter for unit tests: rules as lines, every call recorded in the fake
/// kernel's log (and failing like a kernel operation when one is injected there).
#[cfg(test)]
pub mod fake {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex, MutexGuard};

    use netkit::fake::FakeKernel;
    use netkit::netfilter::Error;

    use super::*;

    #[derive(Clone)]
    pub struct FakeNetfilter {
        kernel: FakeKernel,
        rules: Arc<Mutex<BTreeSet<String>>>,
    }

    impl FakeNetfilter {
        pub fn new(kernel: &FakeKernel) -> FakeNetfilter {
            FakeNetfilter {
                kernel: kernel.clone(),
                rules: Arc::default(),
            }
        }

        /// The rules installed, as `masquerade <network> <container> <ifname> <addr>` and
        /// `spoofcheck <comment> <port> <mac>` lines.
        pub fn rules(&self) -> Vec<String> {
            self.lock().iter().cloned().collect()
        }

        fn lock(&self) -> MutexGuard<'_, BTreeSet<String>> {
            self.rules.lock().unwrap_or_else(|p| p.into_inner())
        }

        fn record(&self, op: String) -> Result<()> {
            self.kernel.record(op.clone()).map_err(|e| Error::Invalid {
                context: op,
                detail: e.to_string(),
            })
        }
    }

    fn masq_prefix(network: &str, container_id: &str, ifname: &str) -> String {
        format!("masquerade {network} {container_id} {ifname} ")
    }

    impl Netfilter for FakeNetfilter {
        fn masquerade(
            &self,
            backend: Backend,
            addrs: &[IpNetwork],
            network: &str,
            ifname: &str,
            container_id: &str,
        ) -> Result<()> {
            let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            self.record(format!(
                "{} masquerade {} {network} {container_id} {ifname}",
                backend.tool(),
                list.join(",")
            ))?;
            let prefix = masq_prefix(network, container_id, ifname);
            let mut rules = self.lock();
            for a in list {
                rules.insert(format!("{prefix}{a}"));
            }
            Ok(())
        }

        fn unmasquerade(
            &self,
            network: &str,
            ifname: &str,
            container_id: &str,
            families: &[Family],
        ) -> Result<()> {
            let fams: Vec<String> = families.iter().map(|f| format!("{f:?}")).collect();
            self.record(format!(
                "unmasquerade {network} {container_id} {ifname} {}",
                fams.join(",")
            ))?;
            let prefix = masq_prefix(network, container_id, ifname);
            self.lock().retain(|r| {
                let Some(addr) = r.strip_prefix(&prefix) else {
                    return true;
                };
                let v6 = addr.contains(':');
                !families.iter().any(|f| (*f == Family::V6) == v6)
            });
            Ok(())
        }

        fn verify_masquerade(
            &self,
            _backend: Option<Backend>,
            addrs: &[IpNetwork],
            network: &str,
            ifname: &str,
            container_id: &str,
        ) -> Result<()> {
            self.record(format!(
                "verify masquerade {network} {container_id} {ifname}"
            ))?;
            let prefix = masq_prefix(network, container_id, ifname);
            let rules = self.lock();
            match addrs
                .iter()
                .find(|a| !rules.contains(&format!("{prefix}{a}")))
            {
                Some(a) => Err(Error::Invalid {
                    context: format!("masquerade of {a}"),
                    detail: "rule missing".into(),
                }),
                None => Ok(()),
            }
        }

        fn spoof_check(&self, sc: &SpoofChecker) -> Result<()> {
            self.record(format!("nft add spoof check {}", sc.comment()))?;
            self.lock().insert(format!("spoofcheck {}", sc.comment()));
            Ok(())
        }

        fn remove_spoof_check(&self, sc: &SpoofChecker) -> Result<()> {
            self.record(format!("nft delete spoof check {}", sc.comment()))?;
            self.lock().remove(&format!("spoofcheck {}", sc.comment()));
            Ok(())
        }

        fn spoof_check_installed(&self, sc: &SpoofChecker) -> Result<bool> {
            self.record(format!("nft list spoof check {}", sc.comment()))?;
            Ok(self
                .lock()
                .contains(&format!("spoofcheck {}", sc.comment())))
        }
    }
}
