//! Blocking rtnetlink socket: one request at a time, sequence-checked, ACK-terminated,
//! dumps read to completion and retried when the kernel flags them as interrupted.
//!
//! Every higher-level module (link, addr, route, and later tc/neigh/bridge_port) sends its
//! messages through [`Socket::request`], so a new module only has to build messages.

use std::marker::PhantomData;

use netlink_packet_core::{
    DecodeError, ErrorContext, NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, Parseable, ParseableParametrized, NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::neighbour::NeighbourMessage;
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::rule::RuleMessage;
use netlink_packet_route::tc::TcMessage;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, SocketAddr};

use crate::error::{Error, Result};
use crate::link_reply::{decode_link, LinkView};
use crate::netns::Netns;

/// Flags a caller may pass to [`Socket::request`] (re-exported for convenience).
pub use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_ECHO, NLM_F_EXCL, NLM_F_REPLACE};

/// RTNLGRP_LINK (linux/rtnetlink.h): the group of link announcements.
pub(crate) const RTNLGRP_LINK: u32 = 1;

/// Initial receive buffer; grown on demand when the kernel sends a bigger datagram.
const RECV_BUF_LEN: usize = 64 * 1024;
/// How many times a dump flagged NLM_F_DUMP_INTR is restarted before giving up.
const DUMP_ATTEMPTS: usize = 10;

const NLMSGERR_ATTR_MSG: u16 = 1;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;

/// Which reply messages a request expects, and how they are decoded. A request names its
/// replies' kind, so a binary links only the decoders of the requests it makes:
/// [`AnyReply`] (`RouteNetlinkMessage`'s own parser) covers every rtnetlink family, tc
/// filters and actions, rules and stats included, and is large (docs/benchmarks.md).
pub trait Replies {
    /// `Ok(None)` for a message type the request does not expect (the caller skips it).
    fn decode(
        message_type: u16,
        payload: &[u8],
    ) -> std::result::Result<Option<RouteNetlinkMessage>, DecodeError>;
}

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const RTM_NEWNEIGH: u16 = 28;
const RTM_NEWRULE: u16 = 32;
const RTM_NEWQDISC: u16 = 36;
const RTM_NEWTFILTER: u16 = 44;

/// Every rtnetlink message type.
pub struct AnyReply;
/// Only the ACK (or an error): any data is unexpected.
pub struct AckOnly;
/// RTM_NEWLINK messages with only the attributes a link lookup reports (the summary view of
/// `link_reply`).
pub struct LinkSummaryReplies;
/// RTM_NEWLINK messages of an AF_BRIDGE dump with only a port's flags and VLANs.
pub struct BridgePortReplies;
/// RTM_NEWADDR messages.
pub struct AddressReplies;
/// RTM_NEWROUTE messages.
pub struct RouteReplies;
/// RTM_NEWRULE messages.
pub struct RuleReplies;
/// RTM_NEWNEIGH messages.
pub struct NeighbourReplies;
/// RTM_NEWQDISC messages.
pub struct QdiscReplies;
/// RTM_NEWTFILTER messages.
pub struct FilterReplies;

impl Replies for AnyReply {
    fn decode(
        ty: u16,
        payload: &[u8],
    ) -> std::result::Result<Option<RouteNetlinkMessage>, DecodeError> {
        RouteNetlinkMessage::parse_with_param(payload, ty).map(Some)
    }
}

impl Replies for AckOnly {
    fn decode(_: u16, _: &[u8]) -> std::result::Result<Option<RouteNetlinkMessage>, DecodeError> {
        Ok(None)
    }
}

/// Implements [`Replies`] for one message type, with the error context
/// `RouteNetlinkMessage`'s parser gives the same failure.
macro_rules! replies_of {
    ($replies:ty, $type:expr, $message:ty, $variant:ident, $what:literal) => {
        impl Replies for $replies {
            fn decode(
                ty: u16,
                payload: &[u8],
            ) -> std::result::Result<Option<RouteNetlinkMessage>, DecodeError> {
                if ty != $type {
                    return Ok(None);
                }
                let message = <$message>::parse(payload).context($what)?;
                Ok(Some(RouteNetlinkMessage::$variant(message)))
            }
        }
    };
}

/// Link lookups and listings: see [`LinkView::Summary`].
impl Replies for LinkSummaryReplies {
    fn decode(
        ty: u16,
        payload: &[u8],
    ) -> std::result::Result<Option<RouteNetlinkMessage>, DecodeError> {
        link_reply(ty, payload, LinkView::Summary)
    }
}

/// AF_BRIDGE port dumps: see [`LinkView::BridgePort`].
impl Replies for BridgePortReplies {
    fn decode(
        ty: u16,
        payload: &[u8],
    ) -> std::result::Result<Option<RouteNetlinkMessage>, DecodeError> {
        link_reply(ty, payload, LinkView::BridgePort)
    }
}

fn link_reply(
    ty: u16,
    payload: &[u8],
    view: LinkView,
) -> std::result::Result<Option<RouteNetlinkMessage>, DecodeError> {
    if ty != RTM_NEWLINK {
        return Ok(None);
    }
    decode_link(payload, view).map(|m| Some(RouteNetlinkMessage::NewLink(m)))
}

replies_of!(
    AddressReplies,
    RTM_NEWADDR,
    AddressMessage,
    NewAddress,
    "invalid address message"
);
replies_of!(
    RouteReplies,
    RTM_NEWROUTE,
    RouteMessage,
    NewRoute,
    "invalid route message"
);
replies_of!(
    RuleReplies,
    RTM_NEWRULE,
    RuleMessage,
    NewRule,
    "invalid rule message"
);
replies_of!(
    NeighbourReplies,
    RTM_NEWNEIGH,
    NeighbourMessage,
    NewNeighbour,
    "invalid neighbour message"
);
replies_of!(
    QdiscReplies,
    RTM_NEWQDISC,
    TcMessage,
    NewQueueDiscipline,
    "invalid tc message"
);
replies_of!(
    FilterReplies,
    RTM_NEWTFILTER,
    TcMessage,
    NewTrafficFilter,
    "invalid tc message"
);

/// One decoded reply payload: `None` when the request did not expect its type.
struct Decoded<R>(Option<RouteNetlinkMessage>, PhantomData<R>);

impl<R: Replies> NetlinkDeserializable for Decoded<R> {
    type Error = DecodeError;

    fn deserialize(
        header: &NetlinkHeader,
        payload: &[u8],
    ) -> std::result::Result<Self, DecodeError> {
        R::decode(header.message_type, payload).map(|m| Decoded(m, PhantomData))
    }
}

/// A NETLINK_ROUTE socket bound to the netns that was current when it was created.
pub struct Socket {
    sock: netlink_sys::Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl std::os::fd::AsRawFd for Socket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.sock)
    }
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
    /// Replies of every rtnetlink type are decoded; [`Socket::request_as`] decodes only the
    /// ones a request expects.
    pub fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.request_as::<AnyReply>(msg, flags)
    }

    /// [`Socket::request`] returning only the reply messages `R` expects (others are skipped).
    pub fn request_as<R: Replies>(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        if flags & NLM_F_DUMP == NLM_F_DUMP {
            return self.dump_map_as::<R, _>(msg, flags, Some);
        }
        let mut msgs = Vec::new();
        let request = encode(msg, flags | NLM_F_ACK);
        self.exchange::<R>(request, &mut |m| msgs.push(m))?;
        Ok(msgs)
    }

    /// A dump (`flags` gain NLM_F_DUMP) whose messages `convert` turns into values as they
    /// arrive, keeping those it returns `Some` for. A large dump (thousands of routes or
    /// neighbours) thus never holds every parsed message at once. Restarted if the kernel
    /// marks it interrupted.
    pub fn dump_map<T>(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        convert: impl FnMut(RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>> {
        self.dump_map_as::<AnyReply, T>(msg, flags, convert)
    }

    /// [`Socket::dump_map`] over only the reply messages `R` expects.
    pub fn dump_map_as<R: Replies, T>(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        mut convert: impl FnMut(RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>> {
        let mut request = encode(msg, flags | NLM_F_DUMP);
        for _ in 0..DUMP_ATTEMPTS {
            let mut out = Vec::new();
            let outcome = self.exchange::<R>(request, &mut |m| {
                out.extend(convert(m));
            })?;
            if !outcome.interrupted {
                return Ok(out);
            }
            request = outcome.request;
        }
        Err(Error::kernel(
            "dump kept being interrupted by concurrent changes",
            libc::EINTR,
        ))
    }

    /// Like [`Socket::request`] for requests that must not return data (set/add/delete).
    /// No reply message is decoded, so this links no decoder.
    pub fn request_ack(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<()> {
        let ack = if flags & NLM_F_DUMP == NLM_F_DUMP {
            0
        } else {
            NLM_F_ACK
        };
        let outcome = self.exchange::<AckOnly>(encode(msg, flags | ack), &mut |_| {})?;
        unexpected_before_ack(outcome.skipped)
    }

    /// [`Socket::request_ack`] of a request [`encode`]d already (its sequence number is set
    /// here).
    pub(crate) fn request_ack_encoded(&mut self, request: Vec<u8>) -> Result<()> {
        let outcome = self.exchange::<AckOnly>(request, &mut |_| {})?;
        unexpected_before_ack(outcome.skipped)
    }

    /// One send + receive round of an encoded request: every reply message `R` expects goes
    /// to `sink`, datagram by datagram.
    fn exchange<R: Replies>(
        &mut self,
        mut request: Vec<u8>,
        sink: &mut dyn FnMut(RouteNetlinkMessage),
    ) -> Result<Outcome> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        // The sequence number field of the netlink header (bytes 8..12).
        request[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.sock
            .send(&request, 0)
            .map_err(|e| Error::io("failed to send netlink request", e))?;
        let flags = u16::from_ne_bytes([request[6], request[7]]);

        let mut reply = Reply::<R>::new(seq, flags & NLM_F_DUMP == NLM_F_DUMP);
        loop {
            self.recv_datagram()?;
            let complete = reply.absorb(&self.buf)?;
            reply.messages.drain(..).for_each(&mut *sink);
            if complete {
                return Ok(Outcome {
                    interrupted: reply.interrupted,
                    skipped: reply.skipped,
                    request,
                });
            }
        }
    }

    /// Receives one whole datagram into `self.buf`, growing it if the datagram is larger.
    fn recv_datagram(&mut self) -> Result<()> {
        self.recv_datagram_with(0).map(|_| ())
    }

    /// [`Socket::recv_datagram`] with `flags` added to both receives: with MSG_DONTWAIT,
    /// `Ok(false)` when nothing is waiting.
    fn recv_datagram_with(&mut self, flags: libc::c_int) -> Result<bool> {
        loop {
            self.buf.clear();
            let want = match self
                .sock
                .recv(&mut self.buf, flags | libc::MSG_PEEK | libc::MSG_TRUNC)
            {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(Error::io("failed to receive netlink reply", e)),
            };
            self.buf.clear();
            self.buf.reserve(want.max(RECV_BUF_LEN));
            match self.sock.recv(&mut self.buf, flags) {
                Ok(n) if n <= self.buf.len() => return Ok(true),
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

    /// Joins the multicast group `group` of the socket's netns: the kernel then queues the
    /// group's announcements on the socket as they happen (sequence number 0, so a request's
    /// reply never takes one for its own).
    pub(crate) fn join_group(&self, group: u32) -> Result<()> {
        self.sock
            .add_membership(group)
            .map_err(|e| Error::io(format!("failed to join netlink group {group}"), e))
    }

    /// Leaves a group [`Socket::join_group`] joined; what it queued stays on the socket.
    pub(crate) fn leave_group(&self, group: u32) -> Result<()> {
        self.sock
            .drop_membership(group)
            .map_err(|e| Error::io(format!("failed to leave netlink group {group}"), e))
    }

    /// Every message waiting on the socket, of any sequence number, decoded as `R` expects
    /// (others are skipped), oldest first; read without waiting.
    pub(crate) fn pending_as<R: Replies>(&mut self) -> Result<Vec<RouteNetlinkMessage>> {
        let mut out = Vec::new();
        while self.recv_datagram_with(libc::MSG_DONTWAIT)? {
            for frame in frames(&self.buf) {
                let parsed = NetlinkMessage::<Decoded<R>>::deserialize(frame?).map_err(|e| {
                    Error::protocol("", format!("failed to parse netlink message: {e}"))
                })?;
                if let NetlinkPayload::InnerMessage(Decoded(Some(inner), _)) = parsed.payload {
                    out.push(inner);
                }
            }
        }
        Ok(out)
    }
}

/// The netlink messages of one datagram, each checked to lie within it.
fn frames(datagram: &[u8]) -> impl Iterator<Item = Result<&[u8]>> {
    let mut offset = 0;
    std::iter::from_fn(move || {
        let rest = datagram.get(offset..).filter(|r| !r.is_empty())?;
        let len = match NetlinkBuffer::new_checked(rest) {
            Ok(b) => b.length() as usize,
            Err(e) => {
                offset = datagram.len();
                return Some(Err(Error::protocol("", format!("bad netlink header: {e}"))));
            }
        };
        if len == 0 || len > rest.len() {
            offset = datagram.len();
            return Some(Err(Error::protocol(
                "",
                format!("netlink message length {len} out of bounds"),
            )));
        }
        offset += (len + 3) & !3;
        Some(Ok(&rest[..len]))
    })
}

/// A request as sent: flags set, sequence number filled in by [`Socket::exchange`].
pub(crate) fn encode(msg: RouteNetlinkMessage, flags: u16) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | flags;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
    packet.finalize();
    let mut out = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut out);
    out
}

/// The outcome of a request without reply data (sent with sequence number `seq`), from the
/// datagram that carried its ACK or error.
pub(crate) fn decode_ack(seq: u32, datagram: &[u8]) -> Result<()> {
    let mut reply = Reply::<AckOnly>::new(seq, false);
    if !reply.absorb(datagram)? {
        return Err(Error::protocol("", "netlink reply without an ACK"));
    }
    unexpected_before_ack(reply.skipped)
}

fn unexpected_before_ack(count: usize) -> Result<()> {
    if count == 0 {
        Ok(())
    } else {
        Err(Error::protocol(
            "",
            format!("{count} unexpected messages before the ACK"),
        ))
    }
}

/// How one exchange ended; the request is handed back for a dump's restart.
struct Outcome {
    /// The kernel flagged the dump NLM_F_DUMP_INTR: its content may be inconsistent.
    interrupted: bool,
    /// Reply messages of a type the request did not expect.
    skipped: usize,
    request: Vec<u8>,
}

/// The reply to one request, assembled datagram by datagram.
pub(crate) struct Reply<R> {
    seq: u32,
    /// Dumps end with NLMSG_DONE; other requests with an ACK or an error.
    expect_done: bool,
    pub(crate) messages: Vec<RouteNetlinkMessage>,
    /// The kernel flagged the dump NLM_F_DUMP_INTR: its content may be inconsistent.
    pub(crate) interrupted: bool,
    pub(crate) skipped: usize,
    replies: PhantomData<R>,
}

impl<R: Replies> Reply<R> {
    pub(crate) fn new(seq: u32, expect_done: bool) -> Reply<R> {
        Reply {
            seq,
            expect_done,
            messages: Vec::new(),
            interrupted: false,
            skipped: 0,
            replies: PhantomData,
        }
    }

    /// Takes in one datagram; `Ok(true)` once the reply is complete.
    pub(crate) fn absorb(&mut self, datagram: &[u8]) -> Result<bool> {
        for frame in frames(datagram) {
            let frame = frame?;
            let parsed = NetlinkMessage::<Decoded<R>>::deserialize(frame).map_err(|e| {
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
                NetlinkPayload::InnerMessage(Decoded(Some(inner), _)) => self.messages.push(inner),
                NetlinkPayload::InnerMessage(Decoded(None, _)) => self.skipped += 1,
                NetlinkPayload::Done(done) => {
                    if done.code < 0 {
                        return Err(Error::Kernel {
                            context: String::new(),
                            // Saturating: a code of i32::MIN has no positive errno.
                            errno: done.code.saturating_neg(),
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
                        errno: code.saturating_abs(),
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
    use netlink_packet_route::link::LinkMessage;

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
    fn link_replies_decode_rtm_newlink_only() {
        use netlink_packet_core::Emitable;
        let mut message = LinkMessage::default();
        message.header.index = 7;
        let mut bytes = vec![0u8; message.buffer_len()];
        message.emit(&mut bytes);
        for decode in [LinkSummaryReplies::decode, BridgePortReplies::decode] {
            assert!(matches!(
                decode(RTM_NEWLINK, &bytes),
                Ok(Some(RouteNetlinkMessage::NewLink(m))) if m.header.index == 7
            ));
            assert!(matches!(decode(RTM_NEWADDR, &bytes), Ok(None)));
            assert!(decode(RTM_NEWLINK, &bytes[..10]).is_err());
        }
    }

    /// Found by fuzzing (netlink_reply): an error code of i32::MIN, in an NLMSG_DONE or an
    /// NLMSG_ERROR, overflowed when turned into an errno.
    #[test]
    fn the_most_negative_error_code_is_an_error_not_an_overflow() {
        for payload in [done(i32::MIN), error(i32::MIN)] {
            let mut r = Reply::<AnyReply>::new(9, true);
            let e = r.absorb(&frame(9, 0, payload)).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Kernel {
                        errno: i32::MAX,
                        ..
                    }
                ),
                "{e:?}"
            );
        }
    }

    #[test]
    fn ack_completes_a_request_and_keeps_data_before_it() {
        let mut r = Reply::<AnyReply>::new(7, false);
        let dgram = [frame(7, 0, link(3)), frame(7, 0, error(0))].concat();
        assert!(r.absorb(&dgram).unwrap());
        assert_eq!(r.messages.len(), 1);
    }

    #[test]
    fn typed_replies_keep_what_the_request_expects_and_count_the_rest() {
        let mut r = Reply::<AddressReplies>::new(3, true);
        let dgram = [
            frame(3, NLM_F_MULTIPART, link(1)),
            frame(3, NLM_F_MULTIPART, done(0)),
        ]
        .concat();
        assert!(r.absorb(&dgram).unwrap());
        assert!(r.messages.is_empty());
        assert_eq!(r.skipped, 1);

        let mut r = Reply::<LinkSummaryReplies>::new(3, false);
        let dgram = [frame(3, 0, link(4)), frame(3, 0, error(0))].concat();
        assert!(r.absorb(&dgram).unwrap());
        assert!(
            matches!(&r.messages[..], [RouteNetlinkMessage::NewLink(l)] if l.header.index == 4)
        );

        let mut r = Reply::<AckOnly>::new(3, false);
        assert!(r.absorb(&dgram).unwrap());
        assert_eq!((r.messages.len(), r.skipped), (0, 1));
    }

    #[test]
    fn stale_sequence_numbers_are_ignored() {
        let mut r = Reply::<AnyReply>::new(7, false);
        // A leftover error and data from request 6 must not end or pollute request 7.
        let dgram = [frame(6, 0, error(-libc::EEXIST)), frame(6, 0, link(1))].concat();
        assert!(!r.absorb(&dgram).unwrap());
        assert!(r.messages.is_empty());
        assert!(r.absorb(&frame(7, 0, error(0))).unwrap());
    }

    #[test]
    fn dumps_span_datagrams_until_done() {
        let mut r = Reply::<AnyReply>::new(2, true);
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
    fn a_datagram_is_split_into_its_messages_and_a_message_past_its_end_is_refused() {
        let two = [frame(0, 0, link(1)), frame(0, 0, link(2))].concat();
        let lens: Vec<usize> = frames(&two).map(|f| f.unwrap().len()).collect();
        assert_eq!(
            lens,
            [frame(0, 0, link(1)).len(), frame(0, 0, link(2)).len()]
        );
        assert_eq!(frames(&[]).count(), 0);
        // The second message claims more bytes than the datagram holds: an error, then the end.
        let mut cut = two.clone();
        cut.truncate(two.len() - 8);
        let got: Vec<_> = frames(&cut).collect();
        assert_eq!(got.len(), 2);
        assert!(got[0].is_ok());
        assert!(got[1].is_err());
        // Fewer bytes than a header.
        assert!(frames(&two[..10]).next().unwrap().is_err());
    }

    #[test]
    fn kernel_errors_carry_positive_errno() {
        let mut r = Reply::<AnyReply>::new(1, false);
        let e = r.absorb(&frame(1, 0, error(-libc::EEXIST))).unwrap_err();
        assert!(e.is_exists());
        let mut r = Reply::<AnyReply>::new(1, true);
        let e = r
            .absorb(&frame(1, NLM_F_MULTIPART, done(-libc::ENOBUFS)))
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOBUFS));
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_panic() {
        let mut r = Reply::<AnyReply>::new(1, false);
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
