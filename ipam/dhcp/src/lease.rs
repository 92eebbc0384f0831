//! A lease kept alive by its own thread: renewed at T1, rebound at T2, the interface taken
//! down at expiry, released when stopped. Every exchange opens its packet socket inside the
//! container netns (entered by path on this dedicated thread, then left again), so the
//! daemon never holds a netns open between exchanges and a deleted pod ends its lease.
//! A lease belongs to the boot of the node it was acquired in: one of an earlier boot is
//! neither renewed nor handed to a new container (`libcni::boot`).

use std::io;
use std::net::Ipv4Addr;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipnetwork::Ipv4Network;
use libcni::result::{CniResult, IpConfig, Route};
use netkit::packet_route::link::State;
use netkit::{Netns, Socket};

use crate::client::{self, Bound, Identity};
use crate::message::opt;
use crate::rawsock::PacketSocket;

const DEFAULT_LEASE: Duration = Duration::from_secs(3600);
const RESEND_FIRST: Duration = Duration::from_secs(4);
const RESEND_FAST: Duration = Duration::from_secs(2);
const RESEND_FAST_TRIES: u32 = 4;
/// How long one acquisition retries at most when `-resendtimeout` is not given (the
/// reference's default: the fast retries plus the backoff to the default `-resendmax`).
pub const DEFAULT_RESEND_TIMEOUT: Duration = Duration::from_secs(208);

/// The reference's error when retries are exhausted (its plugin prints it as
/// `error calling DHCP.Allocate: no more tries`).
pub const NO_MORE_TRIES: &str = "no more tries";

/// The daemon-wide client timings (its flags).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long one exchange waits for the server.
    pub timeout: Duration,
    /// The longest pause between retries.
    pub resend_max: Duration,
    /// When retries of one acquisition stop (`-resendtimeout`). Not given: when the backoff
    /// has reached `resend_max` (as the reference did before it had the flag), and at the
    /// latest after [`DEFAULT_RESEND_TIMEOUT`].
    pub resend_timeout: Option<Duration>,
    pub broadcast: bool,
}

/// Where the lease lives.
#[derive(Debug, Clone)]
pub struct Place {
    pub netns: String,
    pub ifname: String,
}

#[derive(Debug, Clone, Copy)]
struct Times {
    renew: Instant,
    rebind: Instant,
    expire: Instant,
}

fn times_of(ack: &crate::message::Message) -> Times {
    let secs = |code| {
        ack.u32_option(code)
            .map(|s| Duration::from_secs(u64::from(s)))
    };
    let lease = secs(opt::LEASE_TIME).unwrap_or(DEFAULT_LEASE);
    let rebind = secs(opt::REBINDING_TIME).unwrap_or(lease * 85 / 100);
    let renew = secs(opt::RENEWAL_TIME).unwrap_or(lease / 2);
    let now = Instant::now();
    Times {
        renew: now + renew,
        rebind: now + rebind,
        expire: now + lease,
    }
}

/// The pause after failed attempt `attempt` (from 0) before jitter: 2 s for the first few,
/// then 4 s doubling up to `resend_max`.
fn base_pause(attempt: u32, timing: &Timing) -> Duration {
    if attempt < RESEND_FAST_TRIES {
        return RESEND_FAST;
    }
    let doublings = (attempt - RESEND_FAST_TRIES).min(8);
    (RESEND_FIRST * 2u32.pow(doublings)).min(timing.resend_max.max(Duration::from_secs(1)))
}

fn pause_after(attempt: u32, timing: &Timing) -> Duration {
    let jitter = Duration::from_millis(u64::from(client::random_u32() % 2000));
    base_pause(attempt, timing).saturating_sub(Duration::from_secs(1)) + jitter
}

/// When the retries of one exchange stop: at `at` in any case, and with `at_resend_max`
/// already once the backoff pause has reached `-resendmax`.
#[derive(Debug, Clone, Copy)]
struct GiveUp {
    at: Instant,
    at_resend_max: bool,
}

impl GiveUp {
    /// An acquisition's: `-resendtimeout` when given, else the backoff's end.
    fn acquisition(timing: &Timing) -> GiveUp {
        GiveUp {
            at: Instant::now() + timing.resend_timeout.unwrap_or(DEFAULT_RESEND_TIMEOUT),
            at_resend_max: timing.resend_timeout.is_none(),
        }
    }

    /// A renewal's or rebinding's: a point of the lease's life.
    fn at(at: Instant) -> GiveUp {
        GiveUp {
            at,
            at_resend_max: false,
        }
    }

    /// Whether no attempt may follow failed attempt `attempt` (from 0).
    fn after(&self, attempt: u32, timing: &Timing) -> bool {
        self.at_resend_max
            && attempt > RESEND_FAST_TRIES
            && base_pause(attempt - 1, timing) >= timing.resend_max
    }
}

/// Runs `f` on a packet socket opened on the interface inside the netns.
fn with_socket<T>(
    place: &Place,
    f: impl FnOnce(&PacketSocket, [u8; 6]) -> io::Result<T>,
) -> io::Result<T> {
    let ns = Netns::open(&place.netns).map_err(|e| io::Error::other(e.to_string()))?;
    let mut nl = Socket::open_in(&ns).map_err(|e| io::Error::other(e.to_string()))?;
    let link = nl
        .link_by_name(&place.ifname)
        .map_err(|e| io::Error::other(format!("error looking up {:?}: {e}", place.ifname)))?;
    if !link.is_up() {
        nl.set_link_up(link.index)
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    wait_until_running(&mut nl, &place.ifname);
    let mut mac = [0u8; 6];
    if link.mac.len() == 6 {
        mac.copy_from_slice(&link.mac);
    }
    let sock = ns
        .run(|| PacketSocket::open(link.index))
        .map_err(|e| io::Error::other(e.to_string()))??;
    f(&sock, mac)
}

/// How long a link that was just set up may take to start passing packets.
const RUNNING_WAIT: Duration = Duration::from_secs(2);

/// Waits (briefly) until the interface really passes packets. Until the kernel's link watch
/// has seen the carrier (up to a second after the link is set up), its qdisc drops what is
/// sent: the first DISCOVER would be lost and ADD would wait for the first retransmission.
/// Gives up quietly: a link that never reports it still gets its DISCOVERs.
fn wait_until_running(nl: &mut Socket, ifname: &str) {
    let deadline = Instant::now() + RUNNING_WAIT;
    while Instant::now() < deadline {
        match nl.link_by_name(ifname) {
            Ok(l) if matches!(l.operstate, State::Up | State::Unknown) => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return,
        }
    }
}

/// Whether the pod and its interface still exist.
fn still_there(place: &Place) -> bool {
    let Ok(ns) = Netns::open(&place.netns) else {
        return false;
    };
    Socket::open_in(&ns)
        .and_then(|mut s| s.find_link(&place.ifname))
        .is_ok_and(|l| l.is_some())
}

/// Retries `attempt` with the reference's backoff until it succeeds, `give_up` says so, or
/// `stop` does. Each attempt gets its limit (the exchange timeout, and none past
/// `give_up.at`), so the whole never runs past `give_up.at`. Exhausted retries are
/// [`NO_MORE_TRIES`] (the last failure is logged).
fn retry(
    timing: &Timing,
    give_up: GiveUp,
    stop: &mpsc::Receiver<()>,
    mut attempt: impl FnMut(client::Limit) -> io::Result<Bound>,
) -> io::Result<Bound> {
    let mut n = 0;
    loop {
        if Instant::now() >= give_up.at {
            return Err(io::Error::new(io::ErrorKind::TimedOut, NO_MORE_TRIES));
        }
        let limit = client::Limit {
            timeout: timing.timeout,
            end: give_up.at,
        };
        match attempt(limit) {
            Ok(b) => return Ok(b),
            Err(e) => {
                let wait = pause_after(n, timing);
                if give_up.after(n, timing) || Instant::now() + wait >= give_up.at {
                    eprintln!("dhcp: {e}; {NO_MORE_TRIES}");
                    return Err(io::Error::new(io::ErrorKind::TimedOut, NO_MORE_TRIES));
                }
                n += 1;
                eprintln!("dhcp: {e}; retrying in {:.1}s", wait.as_secs_f64());
                match stop.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return Err(io::Error::other(Stopped)),
                }
            }
        }
    }
}

/// What [`retry`] fails with when the lease was stopped during a pause. The stop message is
/// consumed there, and the sender may not be gone yet, so the channel alone cannot tell the
/// caller afterwards: the error itself must.
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped")
    }
}

impl std::error::Error for Stopped {}

fn is_stop(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Stopped>())
}

/// A maintained lease.
pub struct Lease {
    pub client_id: String,
    pub network: String,
    pub container_id: String,
    pub place: Place,
    identity: Identity,
    bound: Arc<Mutex<Bound>>,
    stop: Mutex<Option<mpsc::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    priority: u32,
    /// The boot_id of the boot the lease was acquired in (`None`: unknown).
    boot: Option<String>,
}

impl Lease {
    /// Acquires a lease (retrying as the reference does) and starts maintaining it.
    pub fn acquire(
        client_id: String,
        network: String,
        container_id: String,
        place: Place,
        mut identity: Identity,
        priority: u32,
        timing: Timing,
    ) -> io::Result<Arc<Lease>> {
        identity.broadcast = timing.broadcast;
        let (stop_tx, stop_rx) = mpsc::channel();
        let bound = retry(&timing, GiveUp::acquisition(&timing), &stop_rx, |limit| {
            with_socket(&place, |sock, mac| {
                identity.mac = mac;
                client::acquire(sock, &identity, limit)
            })
        })?;
        eprintln!("dhcp: {client_id}: lease acquired: {}", bound.address());
        let lease = Arc::new(Lease {
            client_id,
            network,
            container_id,
            place,
            identity,
            bound: Arc::new(Mutex::new(bound)),
            stop: Mutex::new(Some(stop_tx)),
            thread: Mutex::new(None),
            priority,
            boot: libcni::boot::Boot::read().map(|b| b.id().to_string()),
        });
        let worker = Arc::clone(&lease);
        let handle = std::thread::Builder::new()
            .name("dhcp-lease".into())
            .spawn(move || worker.maintain(stop_rx, timing))?;
        *lease.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(lease)
    }

    fn current(&self) -> Bound {
        self.bound.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn maintain(&self, stop: mpsc::Receiver<()>, timing: Timing) {
        let mut times = times_of(&self.current().ack);
        loop {
            let wait = times.renew.saturating_duration_since(Instant::now());
            match stop.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return self.release(),
            }
            if !self.is_of_this_boot() {
                eprintln!(
                    "dhcp: {}: lease of an earlier boot of the node, not renewed",
                    self.client_id
                );
                return;
            }
            if !still_there(&self.place) {
                eprintln!(
                    "dhcp: {}: interface gone, lease no longer maintained",
                    self.client_id
                );
                return;
            }
            let lease = self.current();
            let renewed = retry(&timing, GiveUp::at(times.rebind), &stop, |limit| {
                with_socket(&self.place, |s, _| {
                    client::extend(s, &self.identity, &lease, false, limit)
                })
            })
            .or_else(|e| {
                if is_stop(&e) {
                    return Err(e);
                }
                eprintln!("dhcp: {}: renewal failed, rebinding", self.client_id);
                retry(&timing, GiveUp::at(times.expire), &stop, |limit| {
                    with_socket(&self.place, |s, _| {
                        client::extend(s, &self.identity, &lease, true, limit)
                    })
                })
            });
            match renewed {
                Ok(b) => {
                    eprintln!("dhcp: {}: lease renewed: {}", self.client_id, b.address());
                    times = times_of(&b.ack);
                    *self.bound.lock().unwrap_or_else(|e| e.into_inner()) = b;
                }
                // A DEL during the retries: the lease is still ours to give back.
                Err(e) if is_stop(&e) || stop_requested(&stop) => return self.release(),
                Err(e) => {
                    eprintln!(
                        "dhcp: {}: lease expired ({e}), bringing the interface down",
                        self.client_id
                    );
                    self.link_down();
                    return;
                }
            }
        }
    }

    fn link_down(&self) {
        let down = Netns::open(&self.place.netns).and_then(|ns| {
            let mut s = Socket::open_in(&ns)?;
            let link = s.link_by_name(&self.place.ifname)?;
            s.set_link_down(link.index)
        });
        if let Err(e) = down {
            eprintln!("dhcp: {}: {e}", self.client_id);
        }
    }

    fn release(&self) {
        let lease = self.current();
        match with_socket(&self.place, |s, _| {
            client::release(s, &self.identity, &lease)
        }) {
            Ok(()) => eprintln!("dhcp: {}: lease released", self.client_id),
            // A pod deleted before its DEL cannot send anything; the server's lease expires.
            Err(e) => eprintln!("dhcp: {}: not released: {e}", self.client_id),
        }
    }

    /// Stops maintenance and releases the lease (waits for the thread).
    pub fn stop(&self) {
        if let Some(tx) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }

    /// Whether the lease was acquired in the running boot of the node (asked anew each time;
    /// an unknown boot does not count against it).
    pub fn is_of_this_boot(&self) -> bool {
        match (&self.boot, libcni::boot::Boot::read()) {
            (Some(then), Some(now)) => then == now.id(),
            _ => true,
        }
    }

    /// Whether the lease may answer an ADD for `place`: acquired in this boot, still kept
    /// alive, and for the same container netns and interface (a container re-created under
    /// the same ID gets a lease of its own).
    pub fn serves(&self, place: &Place) -> bool {
        let maintained = self
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|t| !t.is_finished());
        maintained
            && self.place.netns == place.netns
            && self.place.ifname == place.ifname
            && self.is_of_this_boot()
    }

    /// The address the lease holds.
    pub fn address(&self) -> Ipv4Addr {
        self.current().address()
    }

    /// The CNI result of the lease: the address with the subnet mask, the first router as
    /// gateway, routes from option 121 (else option 33 plus a default route).
    pub fn result(&self) -> Result<CniResult, String> {
        result_of(&self.current().ack, self.priority)
    }
}

fn stop_requested(stop: &mpsc::Receiver<()>) -> bool {
    !matches!(stop.try_recv(), Err(mpsc::TryRecvError::Empty))
}

fn ipv4s(v: &[u8]) -> Vec<Ipv4Addr> {
    v.chunks_exact(4)
        .map(|c| Ipv4Addr::new(c[0], c[1], c[2], c[3]))
        .collect()
}

/// Option 121 (RFC 3442): width, significant destination octets, router.
fn classless_routes(v: &[u8]) -> Vec<(Ipv4Network, Ipv4Addr)> {
    let mut out = Vec::new();
    let mut rest = v;
    while let Some((&width, tail)) = rest.split_first() {
        if width > 32 {
            break;
        }
        let octets = usize::from(width).div_ceil(8);
        if tail.len() < octets + 4 {
            break;
        }
        let mut dst = [0u8; 4];
        dst[..octets].copy_from_slice(&tail[..octets]);
        let router = Ipv4Addr::new(
            tail[octets],
            tail[octets + 1],
            tail[octets + 2],
            tail[octets + 3],
        );
        if let Ok(net) = Ipv4Network::new(Ipv4Addr::from(dst), width) {
            out.push((net, router));
        }
        rest = &tail[octets + 4..];
    }
    out
}

/// The classful network of a destination (option 33 carries no mask).
fn classful(dst: Ipv4Addr) -> Ipv4Network {
    let prefix = match dst.octets()[0] {
        0..=127 => 8,
        128..=191 => 16,
        _ => 24,
    };
    Ipv4Network::new(dst, prefix).unwrap_or_else(|_| Ipv4Network::from(dst))
}

pub fn result_of(ack: &crate::message::Message, priority: u32) -> Result<CniResult, String> {
    let mask = ack
        .ipv4_option(opt::SUBNET_MASK)
        .ok_or("DHCP option Subnet Mask not found in DHCPACK")?;
    let prefix = u32::from(mask).leading_ones() as u8;
    let address = Ipv4Network::new(ack.yiaddr, prefix).map_err(|e| e.to_string())?;
    let gateway = ack.get(opt::ROUTER).and_then(|v| ipv4s(v).first().copied());
    let mut routes = Vec::new();
    let classless = ack
        .get(opt::CLASSLESS_ROUTES)
        .map(classless_routes)
        .unwrap_or_default();
    if !classless.is_empty() {
        for (dst, router) in classless {
            let mut r = Route::new(dst.into(), Some(router.into()));
            // An unspecified router means "on link".
            if router.is_unspecified() {
                r.scope = Some(253);
            }
            routes.push(r);
        }
    } else {
        if let Some(v) = ack.get(opt::STATIC_ROUTES) {
            for pair in v.chunks_exact(8) {
                let dst = Ipv4Addr::new(pair[0], pair[1], pair[2], pair[3]);
                let router = Ipv4Addr::new(pair[4], pair[5], pair[6], pair[7]);
                routes.push(Route::new(classful(dst).into(), Some(router.into())));
            }
        }
        if let Some(gw) = gateway {
            routes.push(Route::new(
                Ipv4Network::new(Ipv4Addr::UNSPECIFIED, 0)
                    .map_err(|e| e.to_string())?
                    .into(),
                Some(gw.into()),
            ));
        }
    }
    if priority != 0 {
        for r in &mut routes {
            r.priority = Some(priority);
        }
    }
    let mut result = CniResult::new();
    result.ips = vec![IpConfig {
        interface: None,
        address: address.into(),
        gateway: gateway.map(Into::into),
    }];
    result.routes = routes;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, MessageType};

    fn ack(options: &[(u8, &[u8])]) -> Message {
        let mut m = Message::request(MessageType::Ack, 1, [0; 6]);
        m.yiaddr = Ipv4Addr::new(10, 80, 0, 5);
        for (c, v) in options {
            m.set(*c, v.to_vec());
        }
        m
    }

    #[test]
    fn result_with_router_and_static_routes() {
        let a = ack(&[
            (opt::SUBNET_MASK, &[255, 255, 255, 0]),
            (opt::ROUTER, &[10, 80, 0, 1, 10, 80, 0, 2]),
            (opt::STATIC_ROUTES, &[172, 16, 0, 0, 10, 80, 0, 9]),
        ]);
        let r = result_of(&a, 50).unwrap();
        let v = r.to_value("1.0.0").unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cniVersion": "1.0.0",
                "ips": [{"address": "10.80.0.5/24", "gateway": "10.80.0.1"}],
                "routes": [{"dst": "172.16.0.0/16", "gw": "10.80.0.9", "priority": 50},
                           {"dst": "0.0.0.0/0", "gw": "10.80.0.1", "priority": 50}]})
        );
    }

    #[test]
    fn classless_routes_win_over_the_rest() {
        let a = ack(&[
            (opt::SUBNET_MASK, &[255, 255, 0, 0]),
            (opt::ROUTER, &[10, 80, 0, 1]),
            (
                opt::CLASSLESS_ROUTES,
                &[0, 10, 80, 0, 1, 24, 192, 168, 5, 0, 0, 0, 0],
            ),
        ]);
        let v = result_of(&a, 0).unwrap().to_value("1.1.0").unwrap();
        assert_eq!(
            v["routes"],
            serde_json::json!([{"dst": "0.0.0.0/0", "gw": "10.80.0.1"},
                               {"dst": "192.168.5.0/24", "gw": "0.0.0.0", "scope": 253}])
        );
        assert!(result_of(&ack(&[]), 0).is_err());
    }

    fn quick_timing() -> Timing {
        Timing {
            timeout: Duration::from_millis(10),
            resend_max: Duration::from_secs(8),
            resend_timeout: None,
            broadcast: false,
        }
    }

    #[test]
    fn a_stop_during_the_retries_is_told_apart_from_a_failure() {
        let failing = |_: client::Limit| -> io::Result<Bound> { Err(io::Error::other("no reply")) };
        let far = GiveUp::at(Instant::now() + Duration::from_secs(60));
        // The stop message waiting, its sender still alive (the DEL's thread between its send
        // and the sender's drop): the message is consumed, and the error says it was a stop.
        let (tx, rx) = mpsc::channel();
        tx.send(()).unwrap();
        let e = retry(&quick_timing(), far, &rx, failing).unwrap_err();
        assert!(is_stop(&e), "{e}");
        assert!(!stop_requested(&rx), "the channel alone no longer tells");
        drop(tx);
        // The sender gone.
        let (tx, rx) = mpsc::channel::<()>();
        drop(tx);
        assert!(is_stop(
            &retry(&quick_timing(), far, &rx, failing).unwrap_err()
        ));
        // Retries running out are a failure, not a stop.
        let (_tx, rx) = mpsc::channel::<()>();
        let e = retry(&quick_timing(), GiveUp::at(Instant::now()), &rx, failing).unwrap_err();
        assert!(!is_stop(&e), "{e}");
        assert!(!is_stop(&io::Error::other("stopped")));
    }

    #[test]
    fn lease_times_default_to_the_rfc_fractions() {
        let t = times_of(&ack(&[(opt::LEASE_TIME, &200u32.to_be_bytes())]));
        let left = |i: Instant| i.saturating_duration_since(Instant::now()).as_secs();
        assert!((99..=100).contains(&left(t.renew)));
        assert!((169..=170).contains(&left(t.rebind)));
        let t = times_of(&ack(&[(opt::RENEWAL_TIME, &3u32.to_be_bytes())]));
        assert!(left(t.renew) <= 3 && left(t.expire) > 3000);
    }
}
