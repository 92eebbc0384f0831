//! The wireguard backend on this node: its key, and each pass made over netlink (the
//! devices through rtnetlink, their peers through WireGuard's generic netlink family, no `wg`
//! tool). A pass reads what the kernel has and changes only what differs from the leases.

use std::net::{Ipv4Addr, Ipv6Addr};

use netkit::link_kinds::NewLinkBase;
use netkit::packet_route::route::RouteScope;
use netkit::Route;

use super::key::{self, KeyPair};
use super::{lease_attrs, plan, DevicePlan, Mode, WireguardError, WireguardOptions, OVERHEAD};
use crate::backend::underlay::{ensure_addresses, Underlay};
use crate::backend::{BackendError, DataPlane, Network, Node, Pass, Peer};
use crate::log;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;

/// The wireguard backend started on this node.
pub struct WireguardPlane {
    opts: WireguardOptions,
    keys: KeyPair,
    network: Network,
    iface: Option<String>,
    public_ip: Ipv4Addr,
    public_ipv6: Option<Ipv6Addr>,
    /// The last pass's report, so unchanged passes stay out of the log.
    last_report: Option<String>,
}

impl WireguardPlane {
    /// Loads (or creates) the node's key: it must exist before the lease that publishes it.
    pub fn start(
        opts: WireguardOptions,
        node: &Node<'_>,
    ) -> Result<Box<dyn DataPlane>, BackendError> {
        let path = key::key_file_path();
        let (keys, created) = key::load_or_create(&path)?;
        log!(
            "wireguard public key {} ({} {})",
            key::encode(&keys.public),
            if created { "new, saved in" } else { "from" },
            path.display()
        );
        if opts.mode == Mode::Separate && node.public_ipv6.is_some() {
            log!(
                "wireguard IPv6 device listens on port {}",
                opts.listen_port_v6
            );
        }
        Ok(Box::new(WireguardPlane {
            opts,
            keys,
            network: node.network,
            iface: node.iface(),
            public_ip: node.public_ip,
            public_ipv6: node.public_ipv6,
            last_report: None,
        }))
    }
}

impl DataPlane for WireguardPlane {
    fn lease_attrs(&self, _key: &SubnetKey) -> LeaseAttrs {
        lease_attrs(&self.opts, &self.keys, self.public_ip, self.public_ipv6)
    }

    fn reconcile(&mut self, own: &SubnetKey, peers: &[Peer]) -> Result<Pass, BackendError> {
        let plans = plan(&self.network, &self.opts, own, self.public_ipv6, peers);
        let programmed = plans.iter().map(|d| d.peers.len()).sum();
        let underlay = Underlay::find(self.iface.as_deref(), self.public_ip)
            .map_err(WireguardError::Kernel)?;
        let (mtu, report) = apply_wireguard(&plans, &self.keys.private, &underlay)
            .map_err(WireguardError::Kernel)?;
        let mut log = Vec::new();
        if self.last_report.as_deref() != Some(&report) {
            log.push(report.clone());
            self.last_report = Some(report);
        }
        Ok(Pass {
            mtu,
            programmed,
            log,
            lease_attrs: None,
        })
    }
}

/// The wireguard devices of `plans`, created or corrected, then their peers synced.
fn apply_wireguard(
    plans: &[DevicePlan],
    private: &key::Key,
    underlay: &Underlay,
) -> Result<(u32, String), String> {
    let mtu = underlay.mtu_less(OVERHEAD)?;
    let mut sock = netkit::Socket::new().map_err(|e| e.to_string())?;
    let mut wg = netkit::wireguard::WgSocket::new().map_err(|e| {
        if e.errno() == Some(libc::ENOENT) {
            "this kernel has no wireguard module (CONFIG_WIREGUARD)".to_string()
        } else {
            e.to_string()
        }
    })?;
    let mut reports = Vec::new();
    for plan in plans {
        let link = match sock.find_link(plan.name).map_err(|e| e.to_string())? {
            Some(l) if !l.is_kind("wireguard") => {
                return Err(format!(
                    "{} exists but is not a wireguard device; remove it",
                    plan.name
                ))
            }
            Some(l) => l,
            None => {
                let base = NewLinkBase {
                    name: plan.name,
                    mtu: Some(mtu),
                    ..Default::default()
                };
                sock.create_link(netkit::link_kinds::wireguard_message(&base))
                    .map_err(|e| e.to_string())?;
                sock.link_by_name(plan.name).map_err(|e| e.to_string())?
            }
        };
        if link.mtu != mtu {
            sock.set_link_mtu(link.index, mtu)
                .map_err(|e| e.to_string())?;
        }
        let report = wg
            .sync_device(plan.name, private, plan.listen_port, &plan.peers)
            .map_err(|e| e.to_string())?;
        ensure_addresses(&mut sock, link.index, &plan.addresses)?;
        if !link.is_up() {
            sock.set_link_up(link.index).map_err(|e| e.to_string())?;
        }
        for net in &plan.routes {
            let mut route = Route::new(*net).dev(link.index);
            route.scope = Some(RouteScope::Link);
            sock.replace_route(&route).map_err(|e| e.to_string())?;
        }
        reports.push(format!(
            "{}: {} peer(s) ({report})",
            plan.name,
            plan.peers.len()
        ));
    }
    Ok((mtu, format!("wireguard reconciled: {}", reports.join("; "))))
}
