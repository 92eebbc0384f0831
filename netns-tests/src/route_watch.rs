//! When routes reach each of many namespaces: a NETLINK_ROUTE socket per namespace, subscribed
//! to IPv4 route changes (opened inside it on a short-lived thread, so no thread stays in a
//! foreign namespace), all read by one thread that timestamps each announcement as it arrives.
//! Polling route tables would cost the machine being measured and blur the times; the kernel's
//! own announcements cost nothing until they come.

use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::Netns;

/// linux/rtnetlink.h
const RTMGRP_IPV4_ROUTE: u32 = 0x40;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTA_DST: u16 = 1;
const RTA_TABLE: u16 = 15;
const RT_TABLE_MAIN: u32 = 254;
/// Enough for every node's whole table arriving at once.
const RCVBUF: libc::c_int = 4 << 20;

/// One route announcement of a namespace's main table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteEvent {
    /// The namespace's index in [`RouteWatch::start`]'s list.
    pub node: usize,
    pub dst: Ipv4Addr,
    pub len: u8,
    /// The route's protocol (12: BIRD).
    pub protocol: u8,
    /// Added (or replaced), or deleted.
    pub added: bool,
    pub at: SystemTime,
}

/// Announcement times by (namespace, destination, length, added).
type Seen = HashMap<(usize, Ipv4Addr, u8, bool), Vec<SystemTime>>;

/// The announcements of a set of namespaces since [`RouteWatch::start`].
pub struct RouteWatch {
    events: Arc<Mutex<Seen>>,
    /// Announcements the kernel dropped (a socket's buffer overflowed): times may be missing.
    overflows: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl RouteWatch {
    /// Starts listening in each of `namespaces` (index = position).
    pub fn start(namespaces: &[&Netns]) -> io::Result<RouteWatch> {
        let fds = namespaces
            .iter()
            .map(|ns| open_in(ns))
            .collect::<io::Result<Vec<OwnedFd>>>()?;
        let events = Arc::new(Mutex::new(Seen::new()));
        let overflows = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (e, o, s) = (events.clone(), overflows.clone(), stop.clone());
        let reader = std::thread::Builder::new()
            .name("route-watch".into())
            .spawn(move || read_all(&fds, &e, &o, &s))?;
        Ok(RouteWatch {
            events,
            overflows,
            stop,
            reader: Some(reader),
        })
    }

    /// How many announcements the kernel dropped so far.
    pub fn overflows(&self) -> u64 {
        self.overflows.load(Ordering::Relaxed)
    }

    /// When `node` first saw `dst/len` added (`added`) or deleted, at or after `since`.
    pub fn seen(
        &self,
        node: usize,
        dst: Ipv4Addr,
        len: u8,
        added: bool,
        since: SystemTime,
    ) -> Option<SystemTime> {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events
            .get(&(node, dst, len, added))?
            .iter()
            .copied()
            .find(|at| *at >= since)
    }

    /// Waits until `check` holds for the announcements so far, or `timeout` passes.
    pub fn wait(&self, timeout: Duration, mut check: impl FnMut(&RouteWatch) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if check(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Forgets the announcements so far (they grow with every route of every node).
    pub fn clear(&self) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

impl Drop for RouteWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// A route listener opened inside `ns`.
fn open_in(ns: &Netns) -> io::Result<OwnedFd> {
    let file = std::fs::File::open(ns.path())?;
    std::thread::spawn(move || -> io::Result<OwnedFd> {
        // SAFETY: setns(2) on a namespace fd we own, on this short-lived thread only; socket(2),
        // setsockopt(2) and bind(2) on the descriptor created here, with sizes of the values
        // passed.
        unsafe {
            if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::NETLINK_ROUTE,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let owned = OwnedFd::from_raw_fd(fd);
            // As root the limit can be passed; otherwise the system's maximum applies.
            for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
                if libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&RCVBUF as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                ) == 0
                {
                    break;
                }
            }
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            addr.nl_groups = RTMGRP_IPV4_ROUTE;
            if libc::bind(
                fd,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(owned)
        }
    })
    .join()
    .map_err(|_| io::Error::other("route listener thread panicked"))?
}

fn read_all(fds: &[OwnedFd], events: &Mutex<Seen>, overflows: &AtomicU64, stop: &AtomicBool) {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut buf = vec![0u8; 1 << 16];
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: poll(2) over our own array of pollfd, its length passed.
        let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 100) };
        if n <= 0 {
            continue;
        }
        for (node, p) in polls.iter_mut().enumerate() {
            if p.revents == 0 {
                continue;
            }
            p.revents = 0;
            loop {
                // SAFETY: recv(2) into our own buffer, its length passed.
                let got = unsafe { libc::recv(p.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                if got < 0 {
                    if io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                        overflows.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    break;
                }
                let at = SystemTime::now();
                let parsed = parse(&buf[..got as usize], node, at);
                let mut seen = events.lock().unwrap_or_else(|p| p.into_inner());
                for e in parsed {
                    seen.entry((e.node, e.dst, e.len, e.added))
                        .or_default()
                        .push(e.at);
                }
            }
        }
    }
}

/// The IPv4 main-table route announcements in one datagram.
fn parse(mut data: &[u8], node: usize, at: SystemTime) -> Vec<RouteEvent> {
    let mut out = Vec::new();
    while data.len() >= 16 {
        let len = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        if len < 16 || len > data.len() {
            break;
        }
        let body = &data[16..len];
        if (kind == RTM_NEWROUTE || kind == RTM_DELROUTE) && body.len() >= 12 {
            out.extend(route(body, node, kind == RTM_NEWROUTE, at));
        }
        data = &data[(len + 3) & !3..];
        if data.len() < 16 {
            break;
        }
    }
    out
}

/// `struct rtmsg` and its attributes.
fn route(body: &[u8], node: usize, added: bool, at: SystemTime) -> Option<RouteEvent> {
    let (family, dst_len, table, protocol) = (body[0], body[1], body[4], body[5]);
    if i32::from(family) != libc::AF_INET {
        return None;
    }
    let mut table = u32::from(table);
    let mut dst = Ipv4Addr::UNSPECIFIED;
    let mut attrs = &body[12..];
    while attrs.len() >= 4 {
        let alen = usize::from(u16::from_ne_bytes([attrs[0], attrs[1]]));
        let atype = u16::from_ne_bytes([attrs[2], attrs[3]]);
        if alen < 4 || alen > attrs.len() {
            break;
        }
        let value = &attrs[4..alen];
        match (atype, value.len()) {
            (RTA_DST, 4) => dst = Ipv4Addr::new(value[0], value[1], value[2], value[3]),
            (RTA_TABLE, 4) => {
                table = u32::from_ne_bytes([value[0], value[1], value[2], value[3]]);
            }
            _ => {}
        }
        attrs = attrs.get((alen + 3) & !3..).unwrap_or_default();
    }
    (table == RT_TABLE_MAIN).then_some(RouteEvent {
        node,
        dst,
        len: dst_len,
        protocol,
        added,
        at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_route_announcements() {
        // RTM_NEWROUTE for 10.244.7.0/24, main table, proto bird; then a link message.
        let mut msg = Vec::new();
        let rtmsg = [2u8, 24, 0, 0, 254, 12, 0, 1, 0, 0, 0, 0];
        let dst = [8u8, 0, 1, 0, 10, 244, 7, 0];
        let table = [8u8, 0, 15, 0, 254, 0, 0, 0];
        let len = 16 + rtmsg.len() + dst.len() + table.len();
        msg.extend((len as u32).to_ne_bytes());
        msg.extend(RTM_NEWROUTE.to_ne_bytes());
        msg.extend([0u8; 10]);
        msg.extend(rtmsg);
        msg.extend(dst);
        msg.extend(table);
        msg.extend(20u32.to_ne_bytes());
        msg.extend(16u16.to_ne_bytes());
        msg.extend([0u8; 14]);
        let at = SystemTime::UNIX_EPOCH;
        assert_eq!(
            parse(&msg, 3, at),
            vec![RouteEvent {
                node: 3,
                dst: Ipv4Addr::new(10, 244, 7, 0),
                len: 24,
                protocol: 12,
                added: true,
                at,
            }]
        );
        assert!(parse(&msg[..20], 0, at).is_empty());
    }
}
