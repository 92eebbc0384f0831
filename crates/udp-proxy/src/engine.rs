//! The engine: the TUN device, the UDP socket, a sending and a receiving thread, and the
//! handle the caller keeps (routes, stats, stop).

use std::fmt;
use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipnetwork::Ipv4Network;

use crate::config::{EngineConfig, LogFn};
use crate::error::UdpProxyError;
use crate::forward::{Inbound, Outbound};
use crate::routes::{RouteTable, RouteView, SharedRoutes};
use crate::socket::UdpSocket;
use crate::stats::{snapshot, Cells, DataPath, DataPathMode, Stats};
use crate::sys::StopSignal;
use crate::tun::Tun;
use crate::{rx, tx};

/// What the threads share with the handle.
pub(crate) struct Shared {
    pub routes: Arc<SharedRoutes>,
    pub tx: Cells,
    pub rx: Cells,
    pub datapath: DataPath,
    udp_gso: AtomicBool,
    stopping: AtomicBool,
    failure: Mutex<Option<String>>,
    log: LogFn,
    last_error_log: Mutex<Option<Instant>>,
}

/// Errors while running are logged at most this often (they are counted every time).
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Shared {
    #[inline]
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn udp_gso(&self) -> bool {
        self.udp_gso.load(Ordering::Relaxed)
    }

    /// The kernel keeps refusing `UDP_SEGMENT` sends (a device or kernel without segmentation
    /// support): datagrams go one per message from now on.
    pub fn disable_udp_gso(&self, e: &io::Error) {
        if self.udp_gso.swap(false, Ordering::Relaxed) {
            (self.log)(&format!(
                "UDP segmentation refused ({e}): sending one datagram per message from now on"
            ));
        }
    }

    /// Logs an error of the packet loops, at most every [`ERROR_LOG_INTERVAL`].
    pub fn note_error(&self, what: fmt::Arguments<'_>, e: &io::Error) {
        let now = Instant::now();
        let mut last = self
            .last_error_log
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| now.duration_since(t) < ERROR_LOG_INTERVAL) {
            return;
        }
        *last = Some(now);
        (self.log)(&format!(
            "{what} failed: {e} (further errors counted, logged every 10 s)"
        ));
    }

    fn fail(&self, message: String) {
        (self.log)(&message);
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert(message);
    }
}

/// What a packet loop works with.
pub(crate) struct Ctx {
    pub tun: Arc<Tun>,
    pub sock: Arc<UdpSocket>,
    pub shared: Arc<Shared>,
    pub stop: Arc<StopSignal>,
    pub mtu: usize,
}

impl Ctx {
    /// Whether a TUN read error leaves the loop running: false (recorded as the engine's
    /// failure) when the device is gone.
    pub fn read_error_is_transient(&self, e: &io::Error) -> bool {
        if device_gone(e) {
            self.shared.fail(format!(
                "reading from TUN device {} failed: {e}: the device is gone, the engine stops sending",
                self.tun.name()
            ));
            return false;
        }
        self.shared.note_error(
            format_args!("reading from TUN device {}", self.tun.name()),
            e,
        );
        // Whatever it was, do not spin on it.
        std::thread::sleep(Duration::from_millis(1));
        true
    }

    /// Logs a failed TUN write (recording the engine's failure when the device is gone: every
    /// later write fails too, and only a restart on a new device helps).
    pub fn tun_write_failed(&self, e: &io::Error) {
        if device_gone(e) {
            self.shared.fail(format!(
                "writing to TUN device {} failed: {e}: the device is gone",
                self.tun.name()
            ));
        } else {
            self.shared
                .note_error(format_args!("writing to TUN device {}", self.tun.name()), e);
        }
    }
}

/// A TUN descriptor whose device was deleted answers EBADFD.
fn device_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EBADFD) | Some(libc::EBADF))
}

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
        let shared = Arc::new(Shared {
            routes: Arc::new(SharedRoutes::default()),
            tx: Cells::default(),
            rx: Cells::default(),
            datapath,
            udp_gso: AtomicBool::new(datapath.udp_gso),
            stopping: AtomicBool::new(false),
            failure: Mutex::new(None),
            log: log.clone(),
            last_error_log: Mutex::new(None),
        });
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
        self.shared
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops both threads and closes the socket; the TUN device stays (it is persistent:
    /// delete the link to remove it).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
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
