//! The udp backend on this node: the packet engine (started, watched, restarted), flannel0's
//! kernel state and the engine's route table, brought to the peer leases at every pass.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ipnetwork::Ipv4Network;
use udp_proxy::{DataPathMode, Engine, EngineConfig, RouteTable};

use super::{lease_attrs, metrics, peer_routes, Udp, UdpError, DATAPATH, DEVICE, OVERHEAD};
use crate::backend::underlay::Underlay;
use crate::backend::{BackendError, DataPlane, Node, Pass, Peer};
use crate::ops::metrics::Source;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
use crate::{log, warn};

/// flannel0's transmit queue, in packets. TUN's default (500, which flanneld keeps) overflows
/// on the per-packet path: the kernel forwards a pod's TCP burst into the queue faster than
/// one read per packet drains it, and every overflow is a loss TCP answers by slowing down
/// (a retransmission storm at full speed). 2000 MTU-sized packets are about 3 MB, some 25 ms
/// of what that path moves; the fast path reads super-packets and never fills either.
pub const TX_QUEUE_LEN: u32 = 2000;

/// What the engine was started with that a pass may find changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settings {
    mtu: u32,
    bind_ip: Ipv4Addr,
    lease: Ipv4Network,
}

/// The running engine, shared with the metrics source.
#[derive(Default)]
pub(super) struct Running {
    pub engine: Option<Engine>,
    /// Engines started again after the first (thread stopped, device gone, settings changed).
    pub restarts: AtomicU64,
}

pub struct UdpPlane {
    port: u16,
    datapath: DataPathMode,
    network: Ipv4Network,
    iface: Option<String>,
    public_ip: Ipv4Addr,
    running: Arc<Mutex<Running>>,
    /// What the running engine was started with.
    settings: Option<Settings>,
    /// The routes the running engine was given.
    routes: Vec<(Ipv4Network, SocketAddrV4)>,
    /// The last pass's state as logged, so unchanged passes stay out of the log.
    last_report: Option<String>,
}

impl UdpPlane {
    pub fn new(opts: &Udp, node: &Node<'_>) -> UdpPlane {
        UdpPlane {
            port: opts.port,
            datapath: node
                .flag(&DATAPATH)
                .and_then(super::datapath)
                .unwrap_or(DataPathMode::Fast),
            network: node.network.v4,
            iface: node.iface(),
            public_ip: node.public_ip,
            running: Arc::default(),
            settings: None,
            routes: Vec::new(),
            last_report: None,
        }
    }

    fn running(&self) -> MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn engine_config(&self, s: Settings) -> EngineConfig {
        let mut config = EngineConfig::new(s.bind_ip, 0, s.lease, self.network);
        config.mtu = s.mtu;
        config.tun_name = DEVICE.into();
        config.port = self.port;
        config.datapath = self.datapath;
        config.log = Some(Arc::new(|line: &str| log!("udp packet engine: {line}")));
        config
    }

    /// Why the running engine must be started again, if it must.
    fn restart_reason(
        &self,
        engine: &Engine,
        wanted: Settings,
        device_present: bool,
    ) -> Option<String> {
        if let Some(failure) = engine.failure() {
            return Some(format!("it stopped: {failure}"));
        }
        if !device_present {
            return Some(format!("{DEVICE} is gone"));
        }
        let had = self.settings?;
        if had.lease != wanted.lease {
            return Some(format!("the lease is now {}", wanted.lease));
        }
        if had.mtu != wanted.mtu {
            return Some(format!("the MTU is now {}", wanted.mtu));
        }
        if had.bind_ip != wanted.bind_ip {
            return Some(format!("the underlay address is now {}", wanted.bind_ip));
        }
        None
    }

    /// The engine running with `wanted`: started when missing, started again when it cannot
    /// go on as it is.
    fn ensure_engine(
        &mut self,
        sock: &mut netkit::Socket,
        wanted: Settings,
    ) -> Result<(), UdpError> {
        let device_present = sock
            .find_link(DEVICE)
            .map_err(|e| UdpError::Kernel(e.to_string()))?
            .is_some();
        let running = self.running.clone();
        let mut running = running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(engine) = &running.engine {
            let Some(why) = self.restart_reason(engine, wanted, device_present) else {
                return Ok(());
            };
            warn!("restarting the udp packet engine on {DEVICE}: {why}");
            if let Some(old) = running.engine.take() {
                old.stop();
            }
            running.restarts.fetch_add(1, Ordering::Relaxed);
        }
        self.settings = None;
        self.routes.clear();
        let engine = Engine::start(self.engine_config(wanted))
            .map_err(|e| UdpError::Engine(e.to_string()))?;
        running.engine = Some(engine);
        self.settings = Some(wanted);
        Ok(())
    }
}

/// The address the engine's socket binds: the public address when the underlay holds it,
/// else the underlay's own first address (flanneld binds the interface's address, which is
/// not the public one behind NAT).
fn bind_address(underlay: &Underlay, public_ip: Ipv4Addr) -> Result<Ipv4Addr, String> {
    if underlay.has_public_ip {
        return Ok(public_ip);
    }
    underlay.addresses.first().copied().ok_or_else(|| {
        format!(
            "the underlay interface {} has no IPv4 address for the udp backend's socket",
            underlay.name
        )
    })
}

/// flannel0's address, MTU, state and route as flanneld sets them, and its transmit queue.
fn configure_device(sock: &mut netkit::Socket, config: &EngineConfig) -> Result<(), String> {
    udp_proxy::device::configure(sock, config).map_err(|e| e.to_string())?;
    let link = sock.link_by_name(DEVICE).map_err(|e| e.to_string())?;
    // Only ever raised: an operator may want a longer one.
    if link.txqueuelen < TX_QUEUE_LEN {
        sock.set_link_txqueuelen(link.index, TX_QUEUE_LEN)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl DataPlane for UdpPlane {
    fn lease_attrs(&self, _key: &SubnetKey) -> LeaseAttrs {
        lease_attrs(self.public_ip)
    }

    fn reconcile(&mut self, own: &SubnetKey, peers: &[Peer]) -> Result<Pass, BackendError> {
        let underlay =
            Underlay::find(self.iface.as_deref(), self.public_ip).map_err(UdpError::Kernel)?;
        let wanted = Settings {
            mtu: underlay.mtu_less(OVERHEAD).map_err(UdpError::Kernel)?,
            bind_ip: bind_address(&underlay, self.public_ip).map_err(UdpError::Kernel)?,
            lease: own.v4,
        };
        let mut sock = netkit::Socket::new().map_err(|e| UdpError::Kernel(e.to_string()))?;
        self.ensure_engine(&mut sock, wanted)?;
        configure_device(&mut sock, &self.engine_config(wanted)).map_err(UdpError::Kernel)?;
        let routes = peer_routes(own, peers, self.port);
        let (mut added, mut removed) = (0, 0);
        if routes != self.routes {
            added = routes.iter().filter(|r| !self.routes.contains(r)).count();
            removed = self.routes.iter().filter(|r| !routes.contains(r)).count();
            if let Some(engine) = &self.running().engine {
                engine.set_routes(routes.clone());
            }
            self.routes = routes;
        }
        let state = format!(
            "{} peer route(s), {DEVICE} MTU {} on {}:{}",
            self.routes.len(),
            wanted.mtu,
            wanted.bind_ip,
            self.port
        );
        let mut log = Vec::new();
        if added + removed > 0 || self.last_report.as_deref() != Some(&state) {
            log.push(format!(
                "udp reconciled: {state} ({added} route(s) added, {removed} removed)"
            ));
            self.last_report = Some(state);
        }
        Ok(Pass {
            mtu: wanted.mtu,
            programmed: self.routes.len(),
            log,
            lease_attrs: None,
        })
    }

    fn metrics_source(&self) -> Option<Source> {
        let running = self.running.clone();
        Some(Arc::new(move |samples| {
            let running = running.lock().unwrap_or_else(|p| p.into_inner());
            let engine = running.engine.as_ref();
            metrics::write(
                samples,
                &metrics::Reading {
                    stats: engine.map(Engine::stats),
                    failed: engine.is_some_and(|e| e.failure().is_some()),
                    routes: engine.map_or(0, |e| RouteTable::len(&e.routes())),
                    restarts: running.restarts.load(Ordering::Relaxed),
                },
            );
        }))
    }

    /// The engine's threads stop and its socket closes; flannel0 stays (it is persistent) with
    /// its address, MTU and the route to the cluster network, so pod traffic to other nodes is
    /// dropped at the device, not sent anywhere else, until an agent runs the engine again.
    fn stop(&mut self) {
        if let Some(engine) = self.running().engine.take() {
            engine.stop();
            log!(
                "udp packet engine stopped; {DEVICE} stays with its address and the route to {} (pod traffic to other nodes waits for the next agent)",
                self.network
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn underlay(has_public_ip: bool, addresses: &[&str]) -> Underlay {
        Underlay {
            index: 2,
            name: "eth0".into(),
            mtu: 1500,
            networks: Vec::new(),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            has_public_ip,
        }
    }

    #[test]
    fn the_socket_binds_the_public_address_or_the_interface_s_own() {
        let public: Ipv4Addr = "203.0.113.7".parse().unwrap();
        assert_eq!(
            bind_address(&underlay(true, &["10.0.0.5", "203.0.113.7"]), public),
            Ok(public)
        );
        // Behind NAT: the interface's own (first) address, as flanneld binds it.
        assert_eq!(
            bind_address(&underlay(false, &["10.0.0.5", "10.0.1.5"]), public),
            Ok("10.0.0.5".parse().unwrap())
        );
        assert_eq!(
            bind_address(&underlay(false, &[]), public),
            Err(
                "the underlay interface eth0 has no IPv4 address for the udp backend's socket"
                    .into()
            )
        );
    }
}
