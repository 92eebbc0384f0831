//! Blocking rtnetlink socket: one request at a time, sequence-checked, ACK-terminated,
//! dumps read to completion and retried when the kernel flags them as interrupted.
//!
//! Every higher-level module (link, addr, route, and later tc/neigh/bridge_port) sends its
//! messages through [`Socket::request`], so a new module only has to build messages.

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, SocketAddr};

use crate::error::{Error, Result};
use crate::netns::Netns;

/// Flags a caller may pass to [`Socket::request`] (re-exported for convenience).
pub use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};

/// Initial receive buffer; grown on demand when the kernel sends a bigger datagram.
const RECV_BUF_LEN: usize = 64 * 1024;
/// How many times a dump flagged NLM_F_DUMP_INTR is restarted before giving up.
const DUMP_ATTEMPTS: usize = 10;

const NLMSGERR_ATTR_MSG: u16 = 1;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;

/// A NETLINK_ROUTE socket bound to the netns that was current when it was created.
pub struct Socket {
    sock: netlink_sys::Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Socket {
    /// Opens a socket in the calling thread's current netns.
    pub fn new() -> Result<Socket> {
        let ctx = "failed to open netlink socket";
        let mut sock = netlink_sys::Socket::new(NETLINK_ROUTE).map_err(|e| Error::io(ctx, e))?;
        // Strict checking makes the kernel honour dump filters and reject malformed requests.
        sock.set_netlink_get_strict_chk(true)
            .map_err(|e| Error::io(ctx, e))?;
        // Ask for human-readable kernel error text, and for errors not to echo our request back.
        sock.set_ext_ack(true).map_err(|e| Error::io(ctx, e))?;
        sock.set_cap_ack(true).map_err(|e| Error::io(ctx, e))?;
        sock.bind_auto().map_err(|e| Error::io(ctx, e))?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(|e| Error::io(ctx, e))?;
        Ok(Socket {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF_LEN),
        })
    }

    /// Opens a socket living in `ns`: enters it on this thread, creates the socket, and
    /// restores the original netns. The socket keeps acting in `ns` afterwards.
    pub fn open_in(ns: &Netns) -> Result<Socket> {
        let guard = ns.enter()?;
        let sock = Socket::new();
        guard.restore()?;
        sock.map_err(|e| e.context(format_args!("in netns {}", ns.path().display())))
    }

    /// Sends one request and returns the inner messages of the reply.
    ///
    /// `flags` are added to NLM_F_REQUEST. For non-dump requests NLM_F_ACK is always added
    /// so the reply is terminated by an ACK (success) or an error. With NLM_F_DUMP the
    /// reply is read until NLMSG_DONE, and restarted if the kernel marks it interrupted.
    /// Kernel errors come back as [`Error::Kernel`] with an empty context; callers add it.
    pub fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let is_dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        if !is_dump {
            let mut msgs = Vec::new();
            self.exchange(msg, flags | NLM_F_ACK, &mut |m| msgs.push(m))?;
            return Ok(msgs);
        }
        self.dump_map(msg, flags, Some)
    }

    /// A dump (`flags` gain NLM_F_DUMP) whose messages `convert` turns into values as they
    /// arrive, keeping those it returns `Some` for. A large dump (thousands of routes or
    /// neighbours) thus never holds every parsed message at once. Restarted if the kernel
    /// marks it interrupted.
    pub fn dump_map<T>(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        mut convert: impl FnMut(RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>> {
        for _ in 0..DUMP_ATTEMPTS {
            let mut out = Vec::new();
            let interrupted = self.exchange(msg.clone(), flags | NLM_F_DUMP, &mut |m| {
                out.extend(convert(m));
            })?;
            if !interrupted {
                return Ok(out);
            }
        }
        Err(Error::kernel(
            "dump kept being interrupted by concurrent changes",
            libc::EINTR,
        ))
    }

    /// Like [`Socket::request`] for requests that must not return data (set/add/delete).
    pub fn request_ack(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<()> {
        let replies = self.request(msg, flags)?;
        if replies.is_empty() {
            Ok(())
        } else {
            Err(Error::protocol(
                "",
                format!("{} unexpected messages before the ACK", replies.len()),
            ))
        }
    }

    /// One send + receive round: every reply message goes to `sink`, datagram by datagram.
    /// Returns whether the dump was interrupted.
    fn exchange(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        sink: &mut dyn FnMut(RouteNetlinkMessage),
    ) -> Result<bool> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        self.sock
            .send(&out, 0)
            .map_err(|e| Error::io("failed to send netlink request", e))?;

        let mut reply = Reply::new(seq, flags & NLM_F_DUMP == NLM_F_DUMP);
        loop {
            self.recv_datagram()?;
            let complete = reply.absorb(&self.buf)?;
            reply.messages.drain(..).for_each(&mut *sink);
            if complete {
                return Ok(reply.interrupted);
            }
        }
    }

    /// Receives one whole datagram into `self.buf`, growing it if the datagram is larger.
    fn recv_datagram(&mut self) -> Result<()> {
        loop {
            self.buf.clear();
            let want = match self
                .sock
                .recv(&mut self.buf, libc::MSG_PEEK | libc::MSG_TRUNC)
            {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("failed to receive netlink reply", e)),
            };
            self.buf.clear();
            self.buf.reserve(want.max(RECV_BUF_LEN));
            match self.sock.recv(&mut self.buf, 0) {
                Ok(n) if n <= self.buf.len() => return Ok(()),
                Ok(n) => {
                    return Err(Error::protocol(
                        "",
                        format!("netlink datagram truncated ({n} bytes)"),
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("failed to receive netlink reply", e)),
            }
        }
    }
}

/// The reply to one request, assembled datagram by datagram.
struct Reply {
    seq: u32,
    /// Dumps end with NLMSG_DONE; other requests with an ACK or an error.
    expect_done: bool,
    messages: Vec<RouteNetlinkMessage>,
    /// The kernel flagged the dump NLM_F_DUMP_INTR: its content may be inconsistent.
    interrupted: bool,
}

impl Reply {
    fn new(seq: u32, expect_done: bool) -> Reply {
        Reply {
            seq,
            expect_done,
            messages: Vec::new(),
            interrupted: false,
        }
    }

    /// Takes in one datagram; `Ok(true)` once the reply is complete.
    fn absorb(&mut self, datagram: &[u8]) -> Result<bool> {
        let mut offset = 0;
        while offset < datagram.len() {
            let rest = &datagram[offset..];
            let len = NetlinkBuffer::new_checked(rest)
                .map_err(|e| Error::protocol("", format!("bad netlink header: {e}")))?
                .length() as usize;
            if len == 0 || len > rest.len() {
                return Err(Error::protocol(
                    "",
                    format!("netlink message length {len} out of bounds"),
                ));
            }
            let frame = &rest[..len];
            offset += (len + 3) & !3;

            let parsed =
                NetlinkMessage::<RouteNetlinkMessage>::deserialize(frame).map_err(|e| {
                    Error::protocol("", format!("failed to parse netlink message: {e}"))
                })?;
            // Replies to an earlier, abandoned request are skipped, not mistaken for ours.
            if parsed.header.sequence_number != self.seq {
                continue;
            }
            if parsed.header.flags & NLM_F_DUMP_INTR != 0 {
                self.interrupted = true;
            }
            match parsed.payload {
                NetlinkPayload::InnerMessage(inner) => self.messages.push(inner),
                NetlinkPayload::Done(done) => {
                    if done.code < 0 {
                        return Err(Error::Kernel {
                            context: String::new(),
                            errno: -done.code,
                            ext_ack: ext_ack_message(&done.extended_ack),
                        });
                    }
                    return Ok(true);
                }
                NetlinkPayload::Error(err) => {
                    let code = err.raw_code();
                    if code == 0 {
                        if self.expect_done {
                            continue;
                        }
                        return Ok(true);
                    }
                    return Err(Error::Kernel {
                        context: String::new(),
                        errno: code.abs(),
                        ext_ack: error_ext_ack(parsed.header.flags, &err.header),
                    });
                }
                NetlinkPayload::Overrun(_) => return Err(Error::protocol("", "netlink overrun")),
                _ => {}
            }
        }
        Ok(false)
    }
}

/// Extracts NLMSGERR_ATTR_MSG from an NLMSG_ERROR payload (after the errno field).
pub(crate) fn error_ext_ack(outer_flags: u16, payload: &[u8]) -> Option<String> {
    if outer_flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // The payload starts with the original request: just its header when capped.
    let echoed = if outer_flags & NLM_F_CAPPED != 0 {
        16
    } else {
        let len = u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?) as usize;
        (len + 3) & !3
    };
    ext_ack_message(payload.get(echoed..)?)
}

/// Walks netlink TLVs looking for the NUL-terminated NLMSGERR_ATTR_MSG string.
pub(crate) fn ext_ack_message(mut tlvs: &[u8]) -> Option<String> {
    while tlvs.len() >= 4 {
        let len = u16::from_ne_bytes([tlvs[0], tlvs[1]]) as usize;
        let kind = u16::from_ne_bytes([tlvs[2], tlvs[3]]) & 0x3fff;
        if len < 4 || len > tlvs.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &tlvs[4..len];
            let text = text.split(|b| *b == 0).next().unwrap_or(text);
            let msg = String::from_utf8_lossy(text).trim().to_string();
            return if msg.is_empty() { None } else { Some(msg) };
        }
        tlvs = tlvs.get((len + 3) & !3..).unwrap_or(&[]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = (4 + value.len()) as u16;
        let mut v = len.to_ne_bytes().to_vec();
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v
    }

    use netlink_packet_core::{DoneMessage, ErrorMessage, NLM_F_MULTIPART};
    use netlink_packet_route::link::LinkMessage;
    use std::num::NonZeroI32;

    fn frame(seq: u32, flags: u16, payload: NetlinkPayload<RouteNetlinkMessage>) -> Vec<u8> {
        let mut h = NetlinkHeader::default();
        h.sequence_number = seq;
        h.flags = flags;
        let mut m = NetlinkMessage::new(h, payload);
        m.finalize();
        let mut v = vec![0u8; m.buffer_len()];
        m.serialize(&mut v);
        v
    }

    fn link(index: u32) -> NetlinkPayload<RouteNetlinkMessage> {
        let mut l = LinkMessage::default();
        l.header.index = index;
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l))
    }

    fn error(code: i32) -> NetlinkPayload<RouteNetlinkMessage> {
        let mut e = ErrorMessage::default();
        e.code = NonZeroI32::new(code);
        e.header = vec![0u8; 16];
        NetlinkPayload::Error(e)
    }

    fn done(code: i32) -> NetlinkPayload<RouteNetlinkMessage> {
        let mut d = DoneMessage::default();
        d.code = code;
        NetlinkPayload::Done(d)
    }

    #[test]
    fn ack_completes_a_request_and_keeps_data_before_it() {
        let mut r = Reply::new(7, false);
        let dgram = [frame(7, 0, link(3)), frame(7, 0, error(0))].concat();
        assert!(r.absorb(&dgram).unwrap());
        assert_eq!(r.messages.len(), 1);
    }

    #[test]
    fn stale_sequence_numbers_are_ignored() {
        let mut r = Reply::new(7, false);
        // A leftover error and data from request 6 must not end or pollute request 7.
        let dgram = [frame(6, 0, error(-libc::EEXIST)), frame(6, 0, link(1))].concat();
        assert!(!r.absorb(&dgram).unwrap());
        assert!(r.messages.is_empty());
        assert!(r.absorb(&frame(7, 0, error(0))).unwrap());
    }

    #[test]
    fn dumps_span_datagrams_until_done() {
        let mut r = Reply::new(2, true);
        let first = [
            frame(2, NLM_F_MULTIPART, link(1)),
            frame(2, NLM_F_MULTIPART, link(2)),
        ]
        .concat();
        assert!(!r.absorb(&first).unwrap());
        assert!(!r
            .absorb(&frame(2, NLM_F_MULTIPART | NLM_F_DUMP_INTR, link(3)))
            .unwrap());
        assert!(r.absorb(&frame(2, NLM_F_MULTIPART, done(0))).unwrap());
        assert_eq!(r.messages.len(), 3);
        assert!(r.interrupted);
    }

    #[test]
    fn kernel_errors_carry_positive_errno() {
        let mut r = Reply::new(1, false);
        let e = r.absorb(&frame(1, 0, error(-libc::EEXIST))).unwrap_err();
        assert!(e.is_exists());
        let mut r = Reply::new(1, true);
        let e = r
            .absorb(&frame(1, NLM_F_MULTIPART, done(-libc::ENOBUFS)))
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOBUFS));
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_panic() {
        let mut r = Reply::new(1, false);
        assert!(matches!(r.absorb(&[1, 2, 3]), Err(Error::Protocol { .. })));
        let mut bad_len = frame(1, 0, error(0));
        bad_len[0] = 0xff;
        assert!(matches!(r.absorb(&bad_len), Err(Error::Protocol { .. })));
        let mut zero_len = frame(1, 0, error(0));
        zero_len[..4].copy_from_slice(&0u32.to_ne_bytes());
        assert!(r.absorb(&zero_len).is_err());
    }

    #[test]
    fn ext_ack_found_after_capped_header() {
        let mut payload = vec![0u8; 16];
        payload.extend(tlv(2, &[1, 2, 3, 4]));
        payload.extend(tlv(NLMSGERR_ATTR_MSG, b"Invalid MTU\0"));
        assert_eq!(
            error_ext_ack(NLM_F_CAPPED | NLM_F_ACK_TLVS, &payload).as_deref(),
            Some("Invalid MTU")
        );
        assert_eq!(error_ext_ack(NLM_F_CAPPED, &payload), None);
    }

    #[test]
    fn ext_ack_tolerates_garbage() {
        assert_eq!(ext_ack_message(&[0xff, 0xff, 1, 0]), None);
        assert_eq!(ext_ack_message(&[1]), None);
        assert_eq!(
            error_ext_ack(NLM_F_ACK_TLVS, &[0xff, 0xff, 0xff, 0x7f]),
            None
        );
    }
}
