//! WireGuard devices over the kernel's generic-netlink family `wireguard`
//! (`include/uapi/linux/wireguard.h`): read a device with its peers (`WG_CMD_GET_DEVICE`, a
//! dump) and change it (`WG_CMD_SET_DEVICE`). The messages are built and parsed here, on a
//! plain `NETLINK_GENERIC` socket; the family id is resolved once per socket through
//! `nlctrl`. Large peer sets are sent in several `SET_DEVICE` messages (the kernel applies
//! each one as it comes), as `wg setconf` does.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ipnetwork::IpNetwork;
use netlink_sys::{protocols::NETLINK_GENERIC, SocketAddr as NlAddr};

use crate::error::{Error, Result};
use crate::netns::Netns;

/// A WireGuard key (private, public or preshared): 32 raw bytes.
pub type Key = [u8; 32];

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_MULTI: u16 = 0x2;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

const WG_GENL_NAME: &str = "wireguard";
const WG_GENL_VERSION: u8 = 1;
const WG_CMD_GET_DEVICE: u8 = 0;
const WG_CMD_SET_DEVICE: u8 = 1;

const WGDEVICE_A_IFINDEX: u16 = 1;
const WGDEVICE_A_IFNAME: u16 = 2;
const WGDEVICE_A_PRIVATE_KEY: u16 = 3;
const WGDEVICE_A_PUBLIC_KEY: u16 = 4;
const WGDEVICE_A_FLAGS: u16 = 5;
const WGDEVICE_A_LISTEN_PORT: u16 = 6;
const WGDEVICE_A_FWMARK: u16 = 7;
const WGDEVICE_A_PEERS: u16 = 8;
const WGDEVICE_F_REPLACE_PEERS: u32 = 1;

const WGPEER_A_PUBLIC_KEY: u16 = 1;
const WGPEER_A_PRESHARED_KEY: u16 = 2;
const WGPEER_A_FLAGS: u16 = 3;
const WGPEER_A_ENDPOINT: u16 = 4;
const WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL: u16 = 5;
const WGPEER_A_ALLOWEDIPS: u16 = 9;
const WGPEER_F_REMOVE_ME: u32 = 1;
const WGPEER_F_REPLACE_ALLOWEDIPS: u32 = 2;

const WGALLOWEDIP_A_FAMILY: u16 = 1;
const WGALLOWEDIP_A_IPADDR: u16 = 2;
const WGALLOWEDIP_A_CIDR_MASK: u16 = 3;

/// Upper bound on one SET_DEVICE message: well under the socket's default send buffer, so
/// a big update goes in chunks the kernel takes without fuss.
const MAX_MESSAGE: usize = 32 * 1024;
const RECV_BUF_LEN: usize = 256 * 1024;
const DUMP_ATTEMPTS: usize = 10;

/// One peer as the kernel has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub public_key: Key,
    /// All zero when the peer has none.
    pub preshared_key: Key,
    pub endpoint: Option<SocketAddr>,
    /// Seconds; 0 = off.
    pub persistent_keepalive: u16,
    pub allowed_ips: Vec<IpNetwork>,
}

/// A device as the kernel has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    pub ifindex: u32,
    pub name: String,
    /// `None` when the device has no private key yet.
    pub private_key: Option<Key>,
    pub public_key: Option<Key>,
    pub listen_port: u16,
    pub fwmark: u32,
    pub peers: Vec<Peer>,
}

/// A change to one peer (`wg set DEV peer KEY ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUpdate {
    pub public_key: Key,
    /// Remove the peer; every other field is ignored.
    pub remove: bool,
    /// `Some(zeroes)` clears the preshared key; `None` leaves it.
    pub preshared_key: Option<Key>,
    pub endpoint: Option<SocketAddr>,
    pub persistent_keepalive: Option<u16>,
    /// With `replace_allowed_ips`, the peer's whole list; otherwise added to it.
    pub allowed_ips: Vec<IpNetwork>,
    pub replace_allowed_ips: bool,
}

impl PeerUpdate {
    /// Removal of the peer with `public_key`.
    pub fn remove(public_key: Key) -> PeerUpdate {
        PeerUpdate {
            public_key,
            remove: true,
            preshared_key: None,
            endpoint: None,
            persistent_keepalive: None,
            allowed_ips: Vec::new(),
            replace_allowed_ips: false,
        }
    }
}

/// A change to a device (`wg set DEV ...`); unset fields are left as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceUpdate {
    pub private_key: Option<Key>,
    pub listen_port: Option<u16>,
    /// Drop every peer not named in `peers` (`wg setconf`).
    pub replace_peers: bool,
    pub peers: Vec<PeerUpdate>,
}

/// A peer as it should be (see [`WgSocket::sync_device`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    pub public_key: Key,
    pub endpoint: Option<SocketAddr>,
    pub allowed_ips: Vec<IpNetwork>,
    pub preshared_key: Option<Key>,
    /// Seconds; 0 = off.
    pub persistent_keepalive: u16,
}

/// What one [`WgSocket::sync_device`] pass changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Whether the private key or listen port had to be set.
    pub device_changed: bool,
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
}

impl SyncReport {
    pub fn is_noop(&self) -> bool {
        !self.device_changed && self.added + self.changed + self.removed == 0
    }
}

impl std::fmt::Display for SyncReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} peer(s) added, {} changed, {} removed{}",
            self.added,
            self.changed,
            self.removed,
            if self.device_changed {
                ", key/port set"
            } else {
                ""
            }
        )
    }
}

/// A Curve25519 private key as X25519 uses it (and the kernel stores it).
pub fn clamped(mut key: Key) -> Key {
    key[0] &= 248;
    key[31] = (key[31] & 127) | 64;
    key
}

fn same_allowed_ips(a: &[IpNetwork], b: &[IpNetwork]) -> bool {
    // The common case (one subnet per family, same order) without allocating.
    let key = |n: &IpNetwork| (n.network(), n.prefix());
    if a.len() == b.len() && a.iter().zip(b).all(|(x, y)| key(x) == key(y)) {
        return true;
    }
    let norm = |v: &[IpNetwork]| {
        let mut v: Vec<(IpAddr, u8)> = v.iter().map(|n| (n.network(), n.prefix())).collect();
        v.sort();
        v.dedup();
        v
    };
    norm(a) == norm(b)
}

/// A `NETLINK_GENERIC` socket that knows the wireguard family's id.
pub struct WgSocket {
    sock: netlink_sys::Socket,
    seq: u32,
    family: u16,
    buf: Vec<u8>,
}

impl WgSocket {
    /// Opens a socket in the calling thread's netns and resolves the wireguard family. Fails
    /// with ENOENT when the kernel has no wireguard module.
    pub fn new() -> Result<WgSocket> {
        let ctx = "failed to open generic netlink socket";
        let mut sock = netlink_sys::Socket::new(NETLINK_GENERIC).map_err(|e| Error::io(ctx, e))?;
        sock.bind_auto().map_err(|e| Error::io(ctx, e))?;
        sock.connect(&NlAddr::new(0, 0))
            .map_err(|e| Error::io(ctx, e))?;
        let mut s = WgSocket {
            sock,
            seq: 0,
            family: 0,
            buf: Vec::with_capacity(RECV_BUF_LEN),
        };
        s.family = s.resolve_family(WG_GENL_NAME)?;
        Ok(s)
    }

    /// Opens a socket living in `ns` (see [`crate::Socket::open_in`]).
    pub fn open_in(ns: &Netns) -> Result<WgSocket> {
        let guard = ns.enter()?;
        let sock = WgSocket::new();
        guard.restore()?;
        sock.map_err(|e| e.context(format_args!("in netns {}", ns.path().display())))
    }

    fn resolve_family(&mut self, name: &str) -> Result<u16> {
        let ctx = || format!("failed to resolve generic netlink family {name:?}");
        let mut msg = Message::new(
            GENL_ID_CTRL,
            NLM_F_REQUEST | NLM_F_ACK,
            CTRL_CMD_GETFAMILY,
            1,
        );
        let mut z = name.as_bytes().to_vec();
        z.push(0);
        msg.attr(CTRL_ATTR_FAMILY_NAME, &z);
        let replies = self
            .exchange(msg.finish(), false)
            .map_err(|e| e.into_error().context(ctx()))?;
        for payload in &replies {
            for (ty, val) in Attrs(payload.get(4..).unwrap_or_default()) {
                if ty == CTRL_ATTR_FAMILY_ID {
                    if let Some(b) = val.get(..2) {
                        return Ok(u16::from_ne_bytes([b[0], b[1]]));
                    }
                }
            }
        }
        Err(Error::protocol(ctx(), "no family id in the reply"))
    }

    /// The device `name` with every peer (`wg showconf`).
    pub fn get_device(&mut self, name: &str) -> Result<Device> {
        let ctx = || format!("failed to read wireguard device {name:?}");
        let mut request = {
            let mut msg = Message::new(
                self.family,
                NLM_F_REQUEST | NLM_F_DUMP,
                WG_CMD_GET_DEVICE,
                WG_GENL_VERSION,
            );
            msg.attr(WGDEVICE_A_IFNAME, &nul_terminated(name));
            msg.finish()
        };
        for _ in 0..DUMP_ATTEMPTS {
            match self.exchange(request, true) {
                Ok(parts) => return parse_device(&parts).map_err(|e| e.context(ctx())),
                Err(Exchange::Interrupted(req)) => request = req,
                Err(e) => return Err(e.into_error().context(ctx())),
            }
        }
        Err(Error::kernel(ctx(), libc::EINTR))
    }

    /// Applies `update` to the device `name`, in as many messages as its peers need.
    pub fn set_device(&mut self, name: &str, update: &DeviceUpdate) -> Result<()> {
        let ctx = || format!("failed to configure wireguard device {name:?}");
        let mut first = true;
        let mut peers = update.peers.iter().peekable();
        loop {
            let mut msg = Message::new(
                self.family,
                NLM_F_REQUEST | NLM_F_ACK,
                WG_CMD_SET_DEVICE,
                WG_GENL_VERSION,
            );
            msg.attr(WGDEVICE_A_IFNAME, &nul_terminated(name));
            if first {
                if let Some(k) = &update.private_key {
                    msg.attr(WGDEVICE_A_PRIVATE_KEY, k);
                }
                if let Some(p) = update.listen_port {
                    msg.attr(WGDEVICE_A_LISTEN_PORT, &p.to_ne_bytes());
                }
                if update.replace_peers {
                    msg.attr(WGDEVICE_A_FLAGS, &WGDEVICE_F_REPLACE_PEERS.to_ne_bytes());
                }
            }
            if peers.peek().is_some() {
                let list = msg.begin_nested(WGDEVICE_A_PEERS);
                while let Some(peer) = peers.peek() {
                    let encoded = encode_peer(peer);
                    if msg.len() + encoded.len() > MAX_MESSAGE && msg.len() > 64 + 2 * 4 {
                        break;
                    }
                    msg.raw(&encoded);
                    peers.next();
                }
                msg.end_nested(list);
            }
            self.exchange(msg.finish(), false)
                .map_err(|e| e.into_error().context(ctx()))?;
            first = false;
            if peers.peek().is_none() {
                return Ok(());
            }
        }
    }

    /// Makes the device's key, port and peers match: one dump of the device, then only the
    /// differences are sent (new and changed peers in full, stale ones removed), so a pass
    /// over an unchanged peer set is a single read.
    pub fn sync_device(
        &mut self,
        name: &str,
        private_key: &Key,
        listen_port: u16,
        peers: &[PeerConfig],
    ) -> Result<SyncReport> {
        let current = self.get_device(name)?;
        let mut report = SyncReport::default();
        let mut update = DeviceUpdate::default();
        // The kernel stores the key clamped (as X25519 uses it): compare it that way.
        if current.private_key.map(clamped) != Some(clamped(*private_key)) {
            update.private_key = Some(*private_key);
            report.device_changed = true;
        }
        if current.listen_port != listen_port {
            update.listen_port = Some(listen_port);
            report.device_changed = true;
        }
        let have: std::collections::HashMap<&Key, &Peer> =
            current.peers.iter().map(|p| (&p.public_key, p)).collect();
        let mut wanted = std::collections::HashSet::with_capacity(peers.len());
        for want in peers {
            if !wanted.insert(&want.public_key) {
                continue;
            }
            let psk = want.preshared_key.unwrap_or([0; 32]);
            let up_to_date = have.get(&want.public_key).is_some_and(|p| {
                p.preshared_key == psk
                    && p.persistent_keepalive == want.persistent_keepalive
                    && (want.endpoint.is_none() || p.endpoint == want.endpoint)
                    && same_allowed_ips(&p.allowed_ips, &want.allowed_ips)
            });
            if up_to_date {
                continue;
            }
            if have.contains_key(&want.public_key) {
                report.changed += 1;
            } else {
                report.added += 1;
            }
            update.peers.push(PeerUpdate {
                public_key: want.public_key,
                remove: false,
                preshared_key: Some(psk),
                endpoint: want.endpoint,
                persistent_keepalive: Some(want.persistent_keepalive),
                allowed_ips: want.allowed_ips.clone(),
                replace_allowed_ips: true,
            });
        }
        for p in &current.peers {
            if !wanted.contains(&p.public_key) {
                report.removed += 1;
                update.peers.push(PeerUpdate::remove(p.public_key));
            }
        }
        if !report.is_noop() {
            self.set_device(name, &update)?;
        }
        Ok(report)
    }

    /// Sends one request and returns the generic-netlink payloads (genlmsghdr included) of
    /// its replies, up to the ACK (or NLMSG_DONE for a dump).
    fn exchange(&mut self, mut request: Vec<u8>, dump: bool) -> Result<Vec<Vec<u8>>, Exchange> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        request[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.sock
            .send(&request, 0)
            .map_err(|e| Error::io("failed to send generic netlink request", e))?;
        let mut out = Vec::new();
        let mut interrupted = false;
        loop {
            self.buf.clear();
            self.buf.reserve(RECV_BUF_LEN);
            match self.sock.recv(&mut self.buf, 0) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::io("failed to receive generic netlink reply", e).into())
                }
            }
            let mut at = 0;
            while at + 16 <= self.buf.len() {
                let h = &self.buf[at..];
                let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let ty = u16::from_ne_bytes([h[4], h[5]]);
                let flags = u16::from_ne_bytes([h[6], h[7]]);
                let mseq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
                if len < 16 || at + len > self.buf.len() {
                    return Err(Error::protocol("", "truncated netlink message").into());
                }
                let payload = &self.buf[at + 16..at + len];
                at += align4(len);
                if mseq != seq {
                    continue;
                }
                if flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match ty {
                    NLMSG_ERROR => {
                        let errno = payload
                            .get(..4)
                            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                            .unwrap_or(-libc::EPROTO);
                        if errno != 0 {
                            return Err(Error::kernel("", -errno).into());
                        }
                        return Ok(out);
                    }
                    NLMSG_DONE => {
                        if interrupted {
                            return Err(Exchange::Interrupted(request));
                        }
                        return Ok(out);
                    }
                    _ => {
                        out.push(payload.to_vec());
                        if !dump && flags & NLM_F_MULTI == 0 && !request_wants_ack(&request) {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }
}

fn request_wants_ack(request: &[u8]) -> bool {
    u16::from_ne_bytes([request[6], request[7]]) & NLM_F_ACK != 0
}

/// A failed exchange: an error, or (for a dump) the kernel's "interrupted" flag, carrying
/// the request to send again.
enum Exchange {
    Failed(Error),
    Interrupted(Vec<u8>),
}

impl From<Error> for Exchange {
    fn from(e: Error) -> Self {
        Exchange::Failed(e)
    }
}

impl Exchange {
    fn into_error(self) -> Error {
        match self {
            Exchange::Failed(e) => e,
            Exchange::Interrupted(_) => Error::kernel(
                "dump kept being interrupted by concurrent changes",
                libc::EINTR,
            ),
        }
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn nul_terminated(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// A netlink message under construction: header, genlmsghdr, attributes.
struct Message {
    buf: Vec<u8>,
}

impl Message {
    fn new(ty: u16, flags: u16, cmd: u8, version: u8) -> Message {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&[cmd, version, 0, 0]);
        Message { buf }
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn attr(&mut self, ty: u16, value: &[u8]) {
        put_attr(&mut self.buf, ty, value);
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn begin_nested(&mut self, ty: u16) -> usize {
        begin_nested(&mut self.buf, ty)
    }

    fn end_nested(&mut self, at: usize) {
        end_nested(&mut self.buf, at);
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

fn put_attr(buf: &mut Vec<u8>, ty: u16, value: &[u8]) {
    let len = 4 + value.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(value);
    buf.resize(align4(buf.len()), 0);
}

fn begin_nested(buf: &mut Vec<u8>, ty: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&0u16.to_ne_bytes());
    buf.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
    at
}

fn end_nested(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u16;
    buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
}

/// One peer entry (`WGDEVICE_A_PEERS` element), nested attribute included.
fn encode_peer(p: &PeerUpdate) -> Vec<u8> {
    let mut b = Vec::with_capacity(128);
    let outer = begin_nested(&mut b, 0);
    put_attr(&mut b, WGPEER_A_PUBLIC_KEY, &p.public_key);
    if p.remove {
        put_attr(&mut b, WGPEER_A_FLAGS, &WGPEER_F_REMOVE_ME.to_ne_bytes());
        end_nested(&mut b, outer);
        return b;
    }
    if p.replace_allowed_ips {
        put_attr(
            &mut b,
            WGPEER_A_FLAGS,
            &WGPEER_F_REPLACE_ALLOWEDIPS.to_ne_bytes(),
        );
    }
    if let Some(k) = &p.preshared_key {
        put_attr(&mut b, WGPEER_A_PRESHARED_KEY, k);
    }
    if let Some(ep) = p.endpoint {
        put_attr(&mut b, WGPEER_A_ENDPOINT, &encode_sockaddr(ep));
    }
    if let Some(k) = p.persistent_keepalive {
        put_attr(
            &mut b,
            WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL,
            &k.to_ne_bytes(),
        );
    }
    if !p.allowed_ips.is_empty() || p.replace_allowed_ips {
        let list = begin_nested(&mut b, WGPEER_A_ALLOWEDIPS);
        for net in &p.allowed_ips {
            let one = begin_nested(&mut b, 0);
            match net.network() {
                IpAddr::V4(v4) => {
                    put_attr(
                        &mut b,
                        WGALLOWEDIP_A_FAMILY,
                        &(libc::AF_INET as u16).to_ne_bytes(),
                    );
                    put_attr(&mut b, WGALLOWEDIP_A_IPADDR, &v4.octets());
                }
                IpAddr::V6(v6) => {
                    put_attr(
                        &mut b,
                        WGALLOWEDIP_A_FAMILY,
                        &(libc::AF_INET6 as u16).to_ne_bytes(),
                    );
                    put_attr(&mut b, WGALLOWEDIP_A_IPADDR, &v6.octets());
                }
            }
            put_attr(&mut b, WGALLOWEDIP_A_CIDR_MASK, &[net.prefix()]);
            end_nested(&mut b, one);
        }
        end_nested(&mut b, list);
    }
    end_nested(&mut b, outer);
    b
}

/// `struct sockaddr_in` / `sockaddr_in6` as the kernel lays them out (port and address in
/// network order, family in host order).
fn encode_sockaddr(ep: SocketAddr) -> Vec<u8> {
    match ep {
        SocketAddr::V4(a) => {
            let mut b = Vec::with_capacity(16);
            b.extend_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b.extend_from_slice(&a.port().to_be_bytes());
            b.extend_from_slice(&a.ip().octets());
            b.extend_from_slice(&[0u8; 8]);
            b
        }
        SocketAddr::V6(a) => {
            let mut b = Vec::with_capacity(28);
            b.extend_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b.extend_from_slice(&a.port().to_be_bytes());
            b.extend_from_slice(&a.flowinfo().to_be_bytes());
            b.extend_from_slice(&a.ip().octets());
            b.extend_from_slice(&a.scope_id().to_ne_bytes());
            b
        }
    }
}

fn decode_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(u16::from_ne_bytes([*b.first()?, *b.get(1)?]));
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match family {
        libc::AF_INET => {
            let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 => {
            let flow = u32::from_be_bytes(b.get(4..8)?.try_into().ok()?);
            let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(b.get(24..28)?.try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                flow,
                scope,
            )))
        }
        _ => None,
    }
}

/// Iterates over the attributes of `buf`: `(type without flags, value)`.
struct Attrs<'a>(&'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.0;
        if b.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            self.0 = &[];
            return None;
        }
        let value = &b[4..len];
        self.0 = b.get(align4(len)..).unwrap_or_default();
        Some((ty, value))
    }
}

fn key_of(v: &[u8]) -> Option<Key> {
    v.try_into().ok()
}

/// Merges the parts of a GET_DEVICE dump: the kernel splits a big peer list over several
/// messages, a peer's allowed IPs continuing in the next one under the same public key.
fn parse_device(parts: &[Vec<u8>]) -> Result<Device> {
    let mut dev = Device::default();
    for part in parts {
        let attrs = part
            .get(4..)
            .ok_or_else(|| Error::protocol("", "short generic netlink message"))?;
        for (ty, val) in Attrs(attrs) {
            match ty {
                WGDEVICE_A_IFINDEX => {
                    if let Ok(b) = val.try_into() {
                        dev.ifindex = u32::from_ne_bytes(b);
                    }
                }
                WGDEVICE_A_IFNAME => {
                    dev.name = String::from_utf8_lossy(val)
                        .trim_end_matches('\0')
                        .to_string();
                }
                WGDEVICE_A_PRIVATE_KEY => dev.private_key = key_of(val).filter(|k| *k != [0; 32]),
                WGDEVICE_A_PUBLIC_KEY => dev.public_key = key_of(val).filter(|k| *k != [0; 32]),
                WGDEVICE_A_LISTEN_PORT => {
                    if let Ok(b) = val.try_into() {
                        dev.listen_port = u16::from_ne_bytes(b);
                    }
                }
                WGDEVICE_A_FWMARK => {
                    if let Ok(b) = val.try_into() {
                        dev.fwmark = u32::from_ne_bytes(b);
                    }
                }
                WGDEVICE_A_PEERS => {
                    for (_, peer) in Attrs(val) {
                        let p = parse_peer(peer)?;
                        match dev.peers.last_mut() {
                            Some(last) if last.public_key == p.public_key => {
                                last.allowed_ips.extend(p.allowed_ips)
                            }
                            _ => dev.peers.push(p),
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(dev)
}

fn parse_peer(b: &[u8]) -> Result<Peer> {
    let mut peer = Peer {
        public_key: [0; 32],
        preshared_key: [0; 32],
        endpoint: None,
        persistent_keepalive: 0,
        allowed_ips: Vec::new(),
    };
    let mut has_key = false;
    for (ty, val) in Attrs(b) {
        match ty {
            WGPEER_A_PUBLIC_KEY => {
                if let Some(k) = key_of(val) {
                    peer.public_key = k;
                    has_key = true;
                }
            }
            WGPEER_A_PRESHARED_KEY => peer.preshared_key = key_of(val).unwrap_or([0; 32]),
            WGPEER_A_ENDPOINT => peer.endpoint = decode_sockaddr(val),
            WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL => {
                if let Ok(b) = val.try_into() {
                    peer.persistent_keepalive = u16::from_ne_bytes(b);
                }
            }
            WGPEER_A_ALLOWEDIPS => {
                for (_, aip) in Attrs(val) {
                    let mut addr = None;
                    let mut mask = None;
                    for (t, v) in Attrs(aip) {
                        match t {
                            WGALLOWEDIP_A_IPADDR => {
                                addr = match v.len() {
                                    4 => <[u8; 4]>::try_from(v).ok().map(IpAddr::from),
                                    16 => <[u8; 16]>::try_from(v).ok().map(IpAddr::from),
                                    _ => None,
                                }
                            }
                            WGALLOWEDIP_A_CIDR_MASK => mask = v.first().copied(),
                            _ => {}
                        }
                    }
                    if let (Some(a), Some(m)) = (addr, mask) {
                        if let Ok(n) = IpNetwork::new(a, m) {
                            peer.allowed_ips.push(n);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if !has_key {
        return Err(Error::protocol("", "a peer without a public key"));
    }
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_round_trips_through_the_wire_format() {
        let up = PeerUpdate {
            public_key: [7; 32],
            remove: false,
            preshared_key: Some([9; 32]),
            endpoint: Some("192.168.1.2:51820".parse().unwrap()),
            persistent_keepalive: Some(25),
            allowed_ips: vec![
                "10.244.3.0/24".parse().unwrap(),
                "fd00:10:244:3::/64".parse().unwrap(),
            ],
            replace_allowed_ips: true,
        };
        let encoded = encode_peer(&up);
        assert_eq!(encoded.len() % 4, 0);
        let (_, inner) = Attrs(&encoded).next().unwrap();
        let peer = parse_peer(inner).unwrap();
        assert_eq!(peer.public_key, [7; 32]);
        assert_eq!(peer.preshared_key, [9; 32]);
        assert_eq!(peer.endpoint, up.endpoint);
        assert_eq!(peer.persistent_keepalive, 25);
        assert_eq!(peer.allowed_ips, up.allowed_ips);
    }

    #[test]
    fn ipv6_endpoints_keep_their_layout() {
        let ep: SocketAddr = "[fd00::1]:51821".parse().unwrap();
        let b = encode_sockaddr(ep);
        assert_eq!(b.len(), 28);
        assert_eq!(&b[2..4], &51821u16.to_be_bytes());
        assert_eq!(decode_sockaddr(&b), Some(ep));
        assert_eq!(decode_sockaddr(&[1, 2]), None);
    }

    #[test]
    fn split_dump_parts_merge_by_peer() {
        let part = |ips: &[&str]| {
            let mut b = vec![WG_CMD_GET_DEVICE, 1, 0, 0];
            put_attr(&mut b, WGDEVICE_A_LISTEN_PORT, &51820u16.to_ne_bytes());
            let list = begin_nested(&mut b, WGDEVICE_A_PEERS);
            b.extend(encode_peer(&PeerUpdate {
                public_key: [1; 32],
                remove: false,
                preshared_key: None,
                endpoint: None,
                persistent_keepalive: None,
                allowed_ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
                replace_allowed_ips: false,
            }));
            end_nested(&mut b, list);
            b
        };
        let dev = parse_device(&[part(&["10.0.1.0/24"]), part(&["10.0.2.0/24"])]).unwrap();
        assert_eq!(dev.listen_port, 51820);
        assert_eq!(dev.peers.len(), 1);
        assert_eq!(dev.peers[0].allowed_ips.len(), 2);
    }

    #[test]
    fn keys_compare_clamped() {
        let raw = [0xff; 32];
        let c = clamped(raw);
        assert_eq!((c[0], c[31]), (0xf8, 0x7f));
        assert_eq!(clamped(c), c);
        assert!(same_allowed_ips(
            &[
                "10.0.2.0/24".parse().unwrap(),
                "10.0.1.0/24".parse().unwrap()
            ],
            &[
                "10.0.1.0/24".parse().unwrap(),
                "10.0.2.0/24".parse().unwrap()
            ],
        ));
        assert!(!same_allowed_ips(&["10.0.1.0/24".parse().unwrap()], &[]));
    }

    #[test]
    fn garbage_attributes_end_the_walk() {
        assert_eq!(Attrs(&[200, 0, 1, 0, 0]).count(), 0);
        assert_eq!(Attrs(&[2, 0, 1, 0]).count(), 0);
        assert!(parse_peer(&[]).is_err());
    }
}
