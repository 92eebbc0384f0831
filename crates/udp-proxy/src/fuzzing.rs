//! The entry point of the `udp_datagram` fuzz target: what the receiving side does with a
//! message from the network (anyone who can reach the port sends one), without the socket or
//! the device — the same checks and coalescing as the fast receive path, through the same
//! functions.

use crate::coalesce::{Coalescer, PacketRef};
use crate::forward::Inbound;
use crate::ipv4;
use crate::rx::accept_message;
use crate::stats::Local;
use crate::vnet::{self, VnetHdr};

/// `data`: a flags byte (bit 0: the message was truncated), the UDP GRO segment size (two bytes,
/// little-endian, 0 for none), then the message as `recvmmsg` filled it. Its datagrams are
/// checked for a node holding `10.244.2.0/24` with an MTU of 1472, those accepted coalesced,
/// and each TUN write checked: a virtio-net header, then one IPv4 packet; every accepted
/// packet is written exactly once.
pub fn receive(data: &[u8]) {
    let [flags, size_lo, size_hi, message @ ..] = data else {
        return;
    };
    let gro_size = usize::from(u16::from_le_bytes([*size_lo, *size_hi]));
    let inbound = Inbound {
        mtu: 1472,
        local_subnet: "10.244.2.0/24".parse().expect("a subnet literal"),
    };
    let mut bufs: Vec<Box<[u8]>> = vec![message.into()];
    let mut local = Local::default();
    let mut coalescer = Coalescer::default();
    let mut accepted = 0u64;
    accept_message(
        &mut bufs[0],
        Some(gro_size),
        flags & 1 != 0,
        &inbound,
        &mut local,
        |start, pkt, _| {
            assert!(
                ipv4::validate(pkt).is_ok(),
                "an accepted packet is valid IPv4"
            );
            accepted += 1;
            let at = PacketRef {
                buf: 0,
                start: start as u32,
                len: pkt.len() as u32,
            };
            coalescer.push(at, pkt);
        },
    );
    let (written, failed) = coalescer.drain(&bufs, |slices, _count| {
        let hdr = slices.first().expect("a write has a virtio-net header");
        assert_eq!(hdr.len(), vnet::LEN);
        assert!(
            VnetHdr::parse(hdr).is_some(),
            "the virtio-net header reads back"
        );
        let packet: Vec<u8> = slices[1..].iter().flat_map(|s| s.iter().copied()).collect();
        assert!(packet.len() >= ipv4::MIN_HEADER && packet[0] >> 4 == 4);
        true
    });
    assert_eq!(
        (written, failed),
        (accepted, 0),
        "every accepted packet written once"
    );
}
