//! Deleting links without keeping the runtime waiting while the kernel frees them.
//!
//! # The kernel mechanism
//!
//! An RTM_DELLINK runs `rtnl_dellink` under the RTNL lock: `unregister_netdevice_many`
//! closes the device (a veth takes its peer along, an ifb its qdiscs), unlists it (from then
//! on no lookup by name or index and no dump finds it, and its name is free), runs the
//! NETDEV_UNREGISTER notifiers (addresses, routes, neighbours, the bridge port, netfilter
//! hooks), sends RTM_DELLINK to the netns's RTNLGRP_LINK listeners and removes its sysfs
//! entries. Unlocking RTNL then runs `netdev_run_todo` in the requester's own context, after
//! the lock is released: `rcu_barrier()` waits until every RCU callback queued so far has
//! run (at least a grace period, in whole scheduler ticks; docs/benchmarks.md, "Where a DEL
//! used to go", has the figures), then the last
//! references are awaited and the device is freed. The ACK is sent only after that, so a
//! plugin that deletes a link and waits for the ACK spends nearly all of its DEL asleep in
//! `rcu_barrier`, and the runtime waits for it.
//!
//! # What we do
//!
//! In a plugin process run by a runtime (`CNI_COMMAND` is set), the request is sent by a
//! forked child on a socket of its own, while the plugin listens on a socket subscribed to
//! RTNLGRP_LINK in the same netns. The link's RTM_DELLINK (family AF_UNSPEC) is sent after
//! the link and, for a veth, its peer were unlisted and after the link's notifiers ran (the
//! peer's run right after it in the same RTNL section, which any later RTNL request waits
//! for): the plugin carries on from there. The child waits out `netdev_run_todo`, holding
//! nothing but its socket (RTNL is released before the barrier; every other descriptor is
//! closed, so the runtime sees EOF when the plugin exits), and exits; nothing of it can
//! outlive a reboot.
//! A refused request (an error ACK, which comes at once) reaches the plugin through a pipe,
//! with the kernel's text. When the notifications overflow the listener's buffer, the
//! plugin asks whether the link is still listed. When anything of this cannot be set up
//! (no fork, no socket), or too many children are out already, the deletion waits as before.
//! Other processes (the node agent, tests) always wait.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use netlink_packet_core::NLM_F_ACK;
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::protocols::NETLINK_ROUTE;

use crate::error::Result;
use crate::netlink::{self, Socket, RTNLGRP_LINK};
use crate::netns::Netns;

/// Which link a deletion names.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    Index(u32),
    Name(&'a str),
}

/// Whether this process hands its link deletions' waits to children: a plugin run by a
/// runtime, which waits for the plugin.
fn detaches() -> bool {
    std::env::var_os("CNI_COMMAND").is_some()
}

/// Deletes the link `msg` names (an RTM_DELLINK for `target`). Kernel errors come back as
/// from [`Socket::request_ack`] (ENODEV when there was no such link).
pub(crate) fn delete(sock: &mut Socket, msg: LinkMessage, target: Target<'_>) -> Result<()> {
    delete_with(sock, msg, target, detaches())
}

fn delete_with(
    sock: &mut Socket,
    msg: LinkMessage,
    target: Target<'_>,
    detach: bool,
) -> Result<()> {
    let request = netlink::encode(RouteNetlinkMessage::DelLink(msg), NLM_F_ACK);
    if detach {
        if let Some(pending) = Pending::start(sock, &request) {
            return pending.wait(sock, request, target);
        }
    }
    sock.request_ack_encoded(request)
}

/// Children sent off and possibly still waiting; past [`MAX_CHILDREN`] deletions wait.
static CHILDREN: AtomicUsize = AtomicUsize::new(0);
/// More than a plugin's DEL deletes; a GC removing hundreds of links waits past this.
const MAX_CHILDREN: usize = 32;
/// The sequence number of the child's request (its socket carries nothing else).
const SEQ: u32 = 1;
const RTM_DELLINK: u16 = 17;
const IFLA_IFNAME: u16 = 3;
/// An ACK or error reply, extended ACK text included, fits in this.
const ACK_BUF_LEN: usize = 8192;

/// A deletion sent by a child: the listener, and the pipe the child reports the ACK on.
struct Pending {
    listener: netlink_sys::Socket,
    answer: std::fs::File,
}

impl Pending {
    /// Forks the child that sends `request`; `None` when anything of it cannot be set up (the
    /// caller then deletes and waits).
    fn start(sock: &Socket, request: &[u8]) -> Option<Pending> {
        if CHILDREN.load(Ordering::Relaxed) >= MAX_CHILDREN {
            return None;
        }
        let ns = Netns::of_socket(sock.as_raw_fd(), "the link's netns").ok()?;
        let (listener, requester) = {
            let guard = ns.enter().ok()?;
            let sockets = open_sockets();
            // Coming back cannot be skipped: the guard aborts the process if it fails.
            drop(guard);
            sockets?
        };
        let mut request = request.to_vec();
        request[8..12].copy_from_slice(&SEQ.to_ne_bytes());
        let (answer, report) = pipe()?;
        let mut keep = [requester.as_raw_fd(), report.as_raw_fd()];
        keep.sort_unstable();
        // Allocated before the fork: the child must not allocate.
        let mut ack = vec![0u8; ACK_BUF_LEN];
        // SAFETY: the child only makes async-signal-safe calls (close_range, send, recv,
        // write, _exit) on memory allocated before the fork.
        match unsafe { libc::fork() } {
            0 => unsafe {
                child(
                    &keep,
                    requester.as_raw_fd(),
                    report.as_raw_fd(),
                    &request,
                    &mut ack,
                )
            },
            -1 => None,
            _ => {
                CHILDREN.fetch_add(1, Ordering::Relaxed);
                // Our copies of the child's ends close here; the child keeps its own.
                drop((requester, report));
                Some(Pending {
                    listener,
                    answer: std::fs::File::from(answer),
                })
            }
        }
    }

    /// Waits until the link is unlisted (its RTM_DELLINK arrived, or it is not listed any
    /// more) or the child reports the kernel's answer.
    fn wait(mut self, sock: &mut Socket, request: Vec<u8>, target: Target<'_>) -> Result<()> {
        let mut buf = Vec::with_capacity(64 * 1024);
        let mut listening = true;
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.answer.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if listening {
                        self.listener.as_raw_fd()
                    } else {
                        -1
                    },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: polls two descriptors we own, for as long as `fds` lives.
            if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // Cannot wait for either: the child's answer is the only sure thing.
                return self.answer_of_child(sock, request);
            }
            if fds[0].revents != 0 {
                return self.answer_of_child(sock, request);
            }
            if fds[1].revents != 0 {
                match self.drain_notifications(&mut buf, target) {
                    Drained::Unlisted => return Ok(()),
                    Drained::Pending => {}
                    Drained::Lost => {
                        if !is_listed(sock, target) {
                            return Ok(());
                        }
                    }
                    Drained::Broken => listening = false,
                }
            }
        }
    }

    /// Reads every queued notification; whether one was the link's RTM_DELLINK.
    fn drain_notifications(&mut self, buf: &mut Vec<u8>, target: Target<'_>) -> Drained {
        loop {
            buf.clear();
            match self.listener.recv(buf, libc::MSG_DONTWAIT) {
                Ok(_) if announces_deletion(buf, target) => return Drained::Unlisted,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Drained::Pending,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => return Drained::Lost,
                Err(_) => return Drained::Broken,
            }
        }
    }

    /// The ACK the child read (it writes it and exits); without one (the child died first)
    /// the request is sent here and waited for.
    fn answer_of_child(&mut self, sock: &mut Socket, request: Vec<u8>) -> Result<()> {
        let mut ack = Vec::with_capacity(ACK_BUF_LEN);
        let read = self.answer.read_to_end(&mut ack);
        // The child has answered (or died): it is not out waiting any more.
        CHILDREN.fetch_sub(1, Ordering::Relaxed);
        match read {
            Ok(n) if n > 0 => netlink::decode_ack(SEQ, &ack),
            _ => sock.request_ack_encoded(request),
        }
    }
}

enum Drained {
    /// The link's RTM_DELLINK came.
    Unlisted,
    /// Not yet.
    Pending,
    /// The listener's buffer overflowed: notifications were dropped.
    Lost,
    /// The listener failed for good.
    Broken,
}

/// The listener (subscribed to RTNLGRP_LINK) and the child's request socket, opened in the
/// calling thread's netns.
fn open_sockets() -> Option<(netlink_sys::Socket, Socket)> {
    let mut listener = netlink_sys::Socket::new(NETLINK_ROUTE).ok()?;
    listener.bind_auto().ok()?;
    listener.add_membership(RTNLGRP_LINK).ok()?;
    let requester = Socket::new().ok()?;
    Some((listener, requester))
}

fn pipe() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two new descriptors on success, which become ours.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: both descriptors were just created and nobody else owns them.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The child: sends the request, waits for its ACK (through `netdev_run_todo`), writes the
/// ACK datagram to `report` and exits.
///
/// # Safety
/// Only in a freshly forked child; `keep` (sorted) holds `requester` and `report`.
unsafe fn child(
    keep: &[RawFd],
    requester: RawFd,
    report: RawFd,
    request: &[u8],
    ack: &mut [u8],
) -> ! {
    crate::detach::close_all_but(keep);
    if libc::send(requester, request.as_ptr().cast(), request.len(), 0) < 0 {
        libc::_exit(1);
    }
    loop {
        let n = libc::recv(requester, ack.as_mut_ptr().cast(), ack.len(), 0);
        if n > 0 {
            // The plugin may be gone by now (SIGPIPE is ignored in plugins): nothing to do.
            libc::write(report, ack.as_ptr().cast(), n as usize);
            libc::_exit(0);
        }
        if n < 0 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        libc::_exit(1);
    }
}

/// Whether `datagram` holds the RTM_DELLINK (AF_UNSPEC: a bridge's AF_BRIDGE one only
/// says a port left) of the link `target` names.
fn announces_deletion(datagram: &[u8], target: Target<'_>) -> bool {
    let mut rest = datagram;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < 16 || len > rest.len() {
            return false;
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if kind == RTM_DELLINK && names_target(&rest[16..len], target) {
            return true;
        }
        rest = &rest[((len + 3) & !3).min(rest.len())..];
    }
    false
}

/// Whether an ifinfomsg and its attributes describe the link `target` names.
fn names_target(payload: &[u8], target: Target<'_>) -> bool {
    if payload.len() < 16 || payload[0] != libc::AF_UNSPEC as u8 {
        return false;
    }
    match target {
        Target::Index(index) => {
            i32::from_ne_bytes([payload[4], payload[5], payload[6], payload[7]]) as u32 == index
        }
        Target::Name(name) => {
            let mut attrs = &payload[16..];
            while attrs.len() >= 4 {
                let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
                if len < 4 || len > attrs.len() {
                    return false;
                }
                let kind = u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3fff;
                if kind == IFLA_IFNAME {
                    let value = &attrs[4..len];
                    let value = value.strip_suffix(&[0]).unwrap_or(value);
                    return value == name.as_bytes();
                }
                attrs = &attrs[((len + 3) & !3).min(attrs.len())..];
            }
            false
        }
    }
}

/// Whether a lookup still finds the link (a failed lookup other than "no such link" counts
/// as found: keep waiting for the child).
fn is_listed(sock: &mut Socket, target: Target<'_>) -> bool {
    let found = match target {
        Target::Index(index) => sock.link_by_index(index).map(|_| ()),
        Target::Name(name) => sock.link_by_name(name).map(|_| ()),
    };
    !matches!(found, Err(e) if e.is_not_found())
}

#[cfg(test)]
mod tests;
