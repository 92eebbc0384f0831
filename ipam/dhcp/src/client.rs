//! One DHCP client exchange at a time on a packet socket: DISCOVER/OFFER/REQUEST/ACK,
//! RENEW (unicast to the server), REBIND (broadcast), RELEASE.

use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crate::message::{opt, Message, MessageType, BOOTREPLY, FLAG_BROADCAST};
use crate::rawsock::{PacketSocket, BROADCAST_MAC};

/// What every message of one attachment carries.
#[derive(Debug, Clone)]
pub struct Identity {
    pub mac: [u8; 6],
    /// Option 61: type 0 followed by the client id text, as the reference sends it.
    pub client_id: Vec<u8>,
    pub provide: Vec<(u8, Vec<u8>)>,
    pub request_list: Vec<u8>,
    pub broadcast: bool,
}

/// A bound lease: the server's ACK and how to reach the server again.
#[derive(Debug, Clone)]
pub struct Bound {
    pub ack: Message,
    pub server_id: Ipv4Addr,
    pub server_mac: [u8; 6],
}

impl Bound {
    pub fn address(&self) -> Ipv4Addr {
        self.ack.yiaddr
    }
}

pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        // Not cryptographic: a transaction id only has to differ between clients.
        return std::process::id() ^ (Instant::now().elapsed().subsec_nanos());
    }
    u32::from_ne_bytes(b)
}

fn build(kind: MessageType, xid: u32, id: &Identity) -> Message {
    let mut m = Message::request(kind, xid, id.mac);
    if id.broadcast {
        m.flags = FLAG_BROADCAST;
    }
    m.set(opt::CLIENT_ID, id.client_id.clone());
    for (code, value) in &id.provide {
        m.set(*code, value.clone());
    }
    if !id.request_list.is_empty() {
        m.set(opt::PARAMETER_REQUEST_LIST, id.request_list.clone());
    }
    m
}

/// How long each exchange of one attempt may wait: `timeout` each, none past `end`.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub timeout: Duration,
    pub end: Instant,
}

impl Limit {
    fn deadline(&self) -> Instant {
        (Instant::now() + self.timeout).min(self.end)
    }
}

/// Sends `msg` and waits (within `limit`) for a reply of one of `wanted` kinds to it.
fn transact(
    sock: &PacketSocket,
    msg: &Message,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    dst_mac: [u8; 6],
    wanted: &[MessageType],
    limit: Limit,
) -> io::Result<(Message, [u8; 6])> {
    sock.send(src, dst, dst_mac, &msg.encode())?;
    let deadline = limit.deadline();
    while let Some(r) = sock.recv(deadline)? {
        let Some(reply) = Message::decode(&r.payload) else {
            continue;
        };
        if reply.op != BOOTREPLY || reply.xid != msg.xid || reply.chaddr != msg.chaddr {
            continue;
        }
        if reply.message_type().is_some_and(|t| wanted.contains(&t)) {
            return Ok((reply, r.src_mac));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no DHCP reply within {:?}", limit.timeout),
    ))
}

fn nak_or(reply: Message, mac: [u8; 6], server: Option<Ipv4Addr>) -> io::Result<Bound> {
    if reply.message_type() == Some(MessageType::Nak) {
        return Err(io::Error::other("DHCP server sent a NAK"));
    }
    let server_id = reply
        .ipv4_option(opt::SERVER_ID)
        .or(server)
        .ok_or_else(|| io::Error::other("DHCP ACK has no server identifier"))?;
    Ok(Bound {
        ack: reply,
        server_id,
        server_mac: mac,
    })
}

/// DISCOVER → OFFER → REQUEST → ACK, all broadcast.
pub fn acquire(sock: &PacketSocket, id: &Identity, limit: Limit) -> io::Result<Bound> {
    let xid = random_u32();
    let discover = build(MessageType::Discover, xid, id);
    let any = Ipv4Addr::UNSPECIFIED;
    let bcast = Ipv4Addr::BROADCAST;
    let (offer, _) = transact(
        sock,
        &discover,
        any,
        bcast,
        BROADCAST_MAC,
        &[MessageType::Offer],
        limit,
    )?;
    let server = offer
        .ipv4_option(opt::SERVER_ID)
        .ok_or_else(|| io::Error::other("DHCP OFFER has no server identifier"))?;
    let mut request = build(MessageType::Request, xid, id);
    request.set(opt::REQUESTED_IP, offer.yiaddr.octets().to_vec());
    request.set(opt::SERVER_ID, server.octets().to_vec());
    let (reply, mac) = transact(
        sock,
        &request,
        any,
        bcast,
        BROADCAST_MAC,
        &[MessageType::Ack, MessageType::Nak],
        limit,
    )?;
    nak_or(reply, mac, Some(server))
}

/// RENEWING (unicast to the server that granted the lease) or REBINDING (broadcast):
/// a REQUEST with `ciaddr` set and neither requested address nor server id (RFC 2131 §4.3.2).
pub fn extend(
    sock: &PacketSocket,
    id: &Identity,
    lease: &Bound,
    rebind: bool,
    limit: Limit,
) -> io::Result<Bound> {
    let mut request = build(MessageType::Request, random_u32(), id);
    request.ciaddr = lease.address();
    let (dst, mac) = if rebind {
        (Ipv4Addr::BROADCAST, BROADCAST_MAC)
    } else {
        (lease.server_id, lease.server_mac)
    };
    let (reply, from) = transact(
        sock,
        &request,
        lease.address(),
        dst,
        mac,
        &[MessageType::Ack, MessageType::Nak],
        limit,
    )?;
    nak_or(reply, from, Some(lease.server_id))
}

/// RELEASE, unicast to the server; no reply comes.
pub fn release(sock: &PacketSocket, id: &Identity, lease: &Bound) -> io::Result<()> {
    let mut m = Message::request(MessageType::Release, random_u32(), id.mac);
    m.ciaddr = lease.address();
    m.set(opt::SERVER_ID, lease.server_id.octets().to_vec());
    m.set(opt::CLIENT_ID, id.client_id.clone());
    sock.send(
        lease.address(),
        lease.server_id,
        lease.server_mac,
        &m.encode(),
    )
}
