//! What the engine's two packet loops share with its handle ([`Shared`]: routes, counters,
//! the stop flag, the failure and the log) and what each loop works with ([`Ctx`]).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::LogFn;
use crate::routes::SharedRoutes;
use crate::socket::UdpSocket;
use crate::stats::{Cells, DataPath};
use crate::sys::StopSignal;
use crate::tun::Tun;

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
    /// The state of a starting engine: no routes, no counts, not stopping, no failure.
    pub fn new(datapath: DataPath, log: LogFn) -> Shared {
        Shared {
            routes: Arc::new(SharedRoutes::default()),
            tx: Cells::default(),
            rx: Cells::default(),
            datapath,
            udp_gso: AtomicBool::new(datapath.udp_gso),
            stopping: AtomicBool::new(false),
            failure: Mutex::new(None),
            log,
            last_error_log: Mutex::new(None),
        }
    }

    /// Tells the loops to end (they see it at their next batch or wake-up).
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// The first failure a loop recorded, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

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
