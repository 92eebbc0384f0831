//! The engine: the TUN device, the UDP socket, a sending and a receiving thread, and the
//! handle the caller keeps (routes, stats, stop).

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::thread::JoinHandle;

use ipnetwork::Ipv4Network;

use crate::config::{EngineConfig, LogFn};
use crate::error::UdpProxyError;
use crate::forward::{Inbound, Outbound};
use crate::routes::{RouteTable, RouteView};
use crate::shared::{Ctx, Shared};
use crate::socket::UdpSocket;
use crate::stats::{snapshot, DataPath, DataPathMode, Stats};
use crate::sys::StopSignal;
use crate::tun::Tun;
use crate::{rx, tx};

/// A running engine. Dropping it stops it.
pub struct Engine {
    shared: Arc<Shared>,
    stop: Arc<StopSignal>,
    threads: Vec<JoinHandle<()>>,
    tun_name: String,
}

impl Engine {
    /// Opens (creating it if missing) the TUN device and the UDP socket in the calling
    /// thread's network namespace, probes the kernel's offloads, starts the two threads and
    /// makes the device persistent. The route table starts empty ([`Engine::set_routes`]).
    /// The device's address, MTU, route and link state are the caller's (see
    /// [`crate::device::configure`]). A failed start leaves no device it created.
    pub fn start(config: EngineConfig) -> Result<Engine, UdpProxyError> {
        if !(68..=65507).contains(&config.mtu) {
            return Err(UdpProxyError::Mtu {
                tun: config.tun_name.clone(),
                mtu: config.mtu,
            });
        }
        let log: LogFn = config
            .log
            .clone()
            .unwrap_or_else(|| Arc::new(|line: &str| eprintln!("udp-proxy: {line}")));
        let fast = config.datapath == DataPathMode::Fast;
        let allowed = config.offloads;
        let tun = Tun::open(&config.tun_name, fast && allowed.tun_vnet_hdr)?;
        accept_local_source(&config.tun_name, &log);
        let sock = UdpSocket::bind(SocketAddrV4::new(config.bind_ip, config.port))?;
        let datapath = if fast {
            DataPath {
                mode: DataPathMode::Fast,
                vnet_hdr: tun.vnet_hdr,
                tun_tso: tun.tso,
                tun_uso: tun.uso,
                mmsg: allowed.mmsg && sock.has_mmsg(),
                udp_gso: allowed.udp_gso && sock.has_gso(),
                udp_gro: allowed.udp_gro && sock.enable_gro(),
            }
        } else {
            DataPath::per_packet()
        };
        let stop = Arc::new(StopSignal::new().map_err(|source| UdpProxyError::Start {
            tun: config.tun_name.clone(),
            what: "stop signal",
            source,
        })?);
        let shared = Arc::new(Shared::new(datapath, log.clone()));
        let tun = Arc::new(tun);
        let sock = Arc::new(sock);
        let mut engine = Engine {
            shared: shared.clone(),
            stop: stop.clone(),
            threads: Vec::new(),
            tun_name: config.tun_name.clone(),
        };
        let ctx = || Ctx {
            tun: tun.clone(),
            sock: sock.clone(),
            shared: shared.clone(),
            stop: stop.clone(),
            mtu: config.mtu as usize,
        };
        let sending = ctx();
        let outbound = Outbound::new(
            RouteView::new(shared.routes.clone()),
            config.tun_address(),
            tun.vnet_hdr,
        );
        engine.spawn("udp-proxy-tx", move || {
            if fast {
                tx::run_fast(&sending, outbound)
            } else {
                tx::run_per_packet(&sending, outbound)
            }
        })?;
        let receiving = ctx();
        let inbound = Inbound {
            mtu: config.mtu as usize,
            local_subnet: config.local_subnet,
        };
        engine.spawn("udp-proxy-rx", move || {
            if fast {
                rx::run_fast(&receiving, inbound)
            } else {
                rx::run_per_packet(&receiving, inbound)
            }
        })?;
        tun.persist()?;
        log(&format!(
            "{} on {}:{}: {datapath}",
            config.tun_name, config.bind_ip, config.port
        ));
        Ok(engine)
    }

    fn spawn(
        &mut self,
        name: &'static str,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<(), UdpProxyError> {
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(body)
            .map_err(|source| UdpProxyError::Start {
                tun: self.tun_name.clone(),
                what: name,
                source,
            })?;
        self.threads.push(handle);
        Ok(())
    }

    /// Replaces the route table: `(peer subnet, peer PublicIP:Port)` pairs; the sending
    /// thread takes it up at its next batch, without stopping.
    pub fn set_routes(&self, routes: Vec<(Ipv4Network, SocketAddrV4)>) {
        self.shared.routes.replace(RouteTable::new(routes));
    }

    /// The route table in force.
    pub fn routes(&self) -> Arc<RouteTable> {
        self.shared.routes.current()
    }

    /// Counters, drops by reason and the data path running.
    pub fn stats(&self) -> Stats {
        let datapath = DataPath {
            udp_gso: self.shared.udp_gso(),
            ..self.shared.datapath
        };
        snapshot(datapath, &[&self.shared.tx, &self.shared.rx])
    }

    /// Why a thread stopped on its own (the TUN device was deleted), if one did.
    pub fn failure(&self) -> Option<String> {
        self.shared.failure()
    }

    /// Stops both threads and closes the socket; the TUN device stays (it is persistent:
    /// delete the link to remove it).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.set_stopping();
        self.stop.fire();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Lets the node's kernel accept packets from the TUN device whose source is one of the
/// node's own addresses (`accept_local`): the ICMP answers come from the device's address
/// and would otherwise be dropped as martians before reaching the pod.
fn accept_local_source(tun: &str, log: &LogFn) {
    let key = format!("net/ipv4/conf/{tun}/accept_local");
    if let Err(e) = netkit::sysctl::write_if_different(&key, "1") {
        log(&format!(
            "{e}: ICMP network unreachable answers will not reach the pods"
        ));
    }
}
