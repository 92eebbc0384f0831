//! Receive offload in userspace: consecutive TCP segments of one flow, received in one batch of
//! datagrams, are merged into one super-packet written to TUN with a virtio-net header, so the
//! node's stack (forwarding, the bridge, the pod's TCP) handles one packet instead of dozens.
//!
//! The rules are the kernel's GRO rules (`tcp_gro_receive`, `inet_gro_receive`): same
//! addresses, ports, TOS, TTL, DF, IP options, ACK number and TCP options; no fragment; flags
//! ACK (+PSH) only; each segment starting where the previous one ended; every segment but the
//! last of the same size; a non-DF packet's IP ID counting up by one. PSH or a shorter segment
//! ends the super-packet. Each merged segment's IP and TCP checksums are verified first (a
//! segment that fails goes through alone, for the kernel to drop and count); the super-packet's
//! TCP checksum is then left partial (`VIRTIO_NET_HDR_F_NEEDS_CSUM`), which the kernel trusts.
//! A flow's packets keep their order: anything else of that flow closes its open super-packet.

use std::io::IoSlice;

use crate::checksum::{verifies, Sum};
use crate::ipv4;
use crate::segment::{self, TCP_ACK, TCP_CHECK, TCP_PSH};
use crate::vnet::{self, VnetHdr};

/// IPv4 header (≤ 60) + TCP header (≤ 60).
const MAX_HEADERS: usize = 120;
/// Segments per super-packet: 64 KiB of full-sized ones, and the iovec count stays small.
const MAX_SEGMENTS: u32 = 64;
/// Super-packets accepting more segments at once (flows interleaved in one batch).
const MAX_OPEN: usize = 16;
const NONE: u32 = u32::MAX;

/// A packet in the caller's receive buffers: buffer index and byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRef {
    pub buf: u32,
    pub start: u32,
    pub len: u32,
}

impl PacketRef {
    fn bytes<'b>(&self, bufs: &'b [Box<[u8]>]) -> &'b [u8] {
        let start = self.start as usize;
        &bufs[self.buf as usize][start..start + self.len as usize]
    }
}

/// Addresses and ports of a TCP flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowKey {
    src: [u8; 4],
    dst: [u8; 4],
    ports: [u8; 4],
}

/// What a TCP segment looks like to the merge rules.
struct TcpSegment {
    key: FlowKey,
    ihl: usize,
    hdr_len: usize,
    payload: usize,
    seq: u32,
    flags: u8,
}

/// One packet to write, or a super-packet: the first segment's headers (kept here, rewritten
/// at emission) and the payloads of its segments.
struct Item {
    first: PacketRef,
    key: FlowKey,
    headers: [u8; MAX_HEADERS],
    /// The virtio-net header of the super-packet (filled at emission).
    vnet: [u8; vnet::LEN],
    ihl: u8,
    hdr_len: u8,
    /// Payload of every segment but (maybe) the last.
    gso_size: u32,
    payload_total: u32,
    next_seq: u32,
    last_id: u16,
    count: u32,
    /// Later segments (payload refs), chained through `Coalescer::more`.
    more_head: u32,
    more_tail: u32,
    psh: bool,
    open: bool,
}

struct MoreSegment {
    payload: PacketRef,
    next: u32,
}

/// The batch being coalesced: items in arrival order (a flow's super-packet sits where its
/// first segment arrived).
#[derive(Default)]
pub struct Coalescer {
    items: Vec<Item>,
    more: Vec<MoreSegment>,
    open: Vec<u32>,
    /// Segments merged into a super-packet (after its first) since the last `take_merged`.
    merged: u64,
}

impl Coalescer {
    /// Adds the next packet of the batch (`pkt`: its bytes, exactly its total length, TTL
    /// already handled).
    pub fn push(&mut self, at: PacketRef, pkt: &[u8]) {
        let Some(seg) = tcp_segment(pkt) else {
            self.push_single(at, None);
            return;
        };
        let mergeable = seg.payload > 0
            && seg.flags & !TCP_PSH == TCP_ACK
            && ipv4::header_checksum_ok(pkt)
            && tcp_checksum_ok(pkt, seg.ihl);
        let open_at = self
            .open
            .iter()
            .position(|&i| self.items[i as usize].key == seg.key);
        if let Some(pos) = open_at {
            let index = self.open[pos] as usize;
            if mergeable && can_merge(&self.items[index], pkt, &seg) {
                self.append(index, at, &seg);
                if !self.items[index].open {
                    self.open.remove(pos);
                }
                return;
            }
            self.items[index].open = false;
            self.open.remove(pos);
        }
        if mergeable {
            self.start_item(at, pkt, &seg);
        } else {
            self.push_single(at, Some(seg.key));
        }
    }

    fn push_single(&mut self, at: PacketRef, key: Option<FlowKey>) {
        self.items.push(Item {
            first: at,
            key: key.unwrap_or(FlowKey {
                src: [0; 4],
                dst: [0; 4],
                ports: [0; 4],
            }),
            headers: [0; MAX_HEADERS],
            vnet: [0; vnet::LEN],
            ihl: 0,
            hdr_len: 0,
            gso_size: 0,
            payload_total: 0,
            next_seq: 0,
            last_id: 0,
            count: 1,
            more_head: NONE,
            more_tail: NONE,
            psh: false,
            open: false,
        });
    }

    fn start_item(&mut self, at: PacketRef, pkt: &[u8], seg: &TcpSegment) {
        let mut headers = [0u8; MAX_HEADERS];
        headers[..seg.hdr_len].copy_from_slice(&pkt[..seg.hdr_len]);
        let psh = seg.flags & TCP_PSH != 0;
        let index = self.items.len() as u32;
        self.items.push(Item {
            first: at,
            key: seg.key,
            headers,
            vnet: [0; vnet::LEN],
            ihl: seg.ihl as u8,
            hdr_len: seg.hdr_len as u8,
            gso_size: seg.payload as u32,
            payload_total: seg.payload as u32,
            next_seq: seg.seq.wrapping_add(seg.payload as u32),
            last_id: ipv4::id(pkt),
            count: 1,
            more_head: NONE,
            more_tail: NONE,
            psh,
            open: !psh,
        });
        if !psh {
            if self.open.len() == MAX_OPEN {
                let oldest = self.open.remove(0);
                self.items[oldest as usize].open = false;
            }
            self.open.push(index);
        }
    }

    fn append(&mut self, index: usize, at: PacketRef, seg: &TcpSegment) {
        let more = self.more.len() as u32;
        self.more.push(MoreSegment {
            payload: PacketRef {
                buf: at.buf,
                start: at.start + seg.hdr_len as u32,
                len: seg.payload as u32,
            },
            next: NONE,
        });
        let item = &mut self.items[index];
        if item.more_tail == NONE {
            item.more_head = more;
        } else {
            self.more[item.more_tail as usize].next = more;
        }
        item.more_tail = more;
        item.count += 1;
        item.payload_total += seg.payload as u32;
        item.next_seq = item.next_seq.wrapping_add(seg.payload as u32);
        item.last_id = item.last_id.wrapping_add(1);
        item.psh = seg.flags & TCP_PSH != 0;
        if item.psh || (seg.payload as u32) < item.gso_size || item.count == MAX_SEGMENTS {
            item.open = false;
        }
        self.merged += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Segments merged into super-packets since the last call.
    pub fn take_merged(&mut self) -> u64 {
        std::mem::take(&mut self.merged)
    }

    /// Hands every item, in order, to `write` as the iovecs of one TUN write (virtio-net
    /// header first), then empties the batch. `write` returns whether the write succeeded;
    /// the count of items written and failed is returned.
    pub fn drain(
        &mut self,
        bufs: &[Box<[u8]>],
        mut write: impl FnMut(&[IoSlice<'_>], u32) -> bool,
    ) -> (u64, u64) {
        for item in self.items.iter_mut().filter(|i| i.count > 1) {
            item.finish_super_packet();
        }
        let plain = VnetHdr::default().to_bytes();
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_SEGMENTS as usize + 2);
        let (mut ok, mut failed) = (0u64, 0u64);
        for item in &self.items {
            slices.clear();
            let first = item.first.bytes(bufs);
            if item.count == 1 {
                slices.push(IoSlice::new(&plain));
                slices.push(IoSlice::new(first));
            } else {
                let hdr_len = usize::from(item.hdr_len);
                slices.push(IoSlice::new(&item.vnet));
                slices.push(IoSlice::new(&item.headers[..hdr_len]));
                slices.push(IoSlice::new(&first[hdr_len..]));
                let mut next = item.more_head;
                while next != NONE {
                    let m = &self.more[next as usize];
                    slices.push(IoSlice::new(m.payload.bytes(bufs)));
                    next = m.next;
                }
            }
            if write(&slices, item.count) {
                ok += u64::from(item.count);
            } else {
                failed += u64::from(item.count);
            }
        }
        drop(slices);
        self.items.clear();
        self.more.clear();
        self.open.clear();
        (ok, failed)
    }
}

impl Item {
    /// Rewrites the kept headers for the whole super-packet (total length and header
    /// checksum, the last segment's PSH, the TCP checksum left partial: the pseudo-header's
    /// sum) and fills its virtio-net header.
    fn finish_super_packet(&mut self) {
        let (ihl, hdr_len) = (usize::from(self.ihl), usize::from(self.hdr_len));
        self.vnet =
            VnetHdr::tcp4_super_packet(ihl as u16, hdr_len as u16, self.gso_size as u16).to_bytes();
        let headers = &mut self.headers[..hdr_len];
        ipv4::set_total_len(headers, (hdr_len as u32 + self.payload_total) as u16);
        ipv4::fill_header_checksum(headers);
        if self.psh {
            headers[ihl + 13] |= TCP_PSH;
        }
        let pseudo = Sum::pseudo_header(
            ipv4::src_bytes(headers),
            ipv4::dst_bytes(headers),
            ipv4::PROTO_TCP,
            (hdr_len - ihl) as u16 + self.payload_total as u16,
        );
        headers[ihl + TCP_CHECK..ihl + TCP_CHECK + 2].copy_from_slice(&pseudo.fold().to_be_bytes());
    }
}

/// The segment's merge-relevant fields, if `pkt` is an unfragmented TCP/IPv4 packet whose
/// headers fit.
fn tcp_segment(pkt: &[u8]) -> Option<TcpSegment> {
    if ipv4::protocol(pkt) != ipv4::PROTO_TCP || ipv4::is_fragment(pkt) {
        return None;
    }
    let ihl = ipv4::header_len(pkt);
    let thl = segment::tcp_header_len(pkt, ihl).ok()?;
    let th = &pkt[ihl..];
    Some(TcpSegment {
        key: FlowKey {
            src: ipv4::src_bytes(pkt),
            dst: ipv4::dst_bytes(pkt),
            ports: [th[0], th[1], th[2], th[3]],
        },
        ihl,
        hdr_len: ihl + thl,
        payload: pkt.len() - ihl - thl,
        seq: u32::from_be_bytes([th[4], th[5], th[6], th[7]]),
        flags: th[13],
    })
}

fn tcp_checksum_ok(pkt: &[u8], ihl: usize) -> bool {
    let sum = Sum::pseudo_header(
        ipv4::src_bytes(pkt),
        ipv4::dst_bytes(pkt),
        ipv4::PROTO_TCP,
        (pkt.len() - ihl) as u16,
    )
    .add_bytes(&pkt[ihl..]);
    verifies(sum)
}

/// Whether `pkt` continues `item` (see the module's rules).
fn can_merge(item: &Item, pkt: &[u8], seg: &TcpSegment) -> bool {
    let h = &item.headers;
    let (ihl, hdr_len) = (usize::from(item.ihl), usize::from(item.hdr_len));
    if seg.ihl != ihl || seg.hdr_len != hdr_len {
        return false;
    }
    let within_size = seg.payload as u32 <= item.gso_size
        && hdr_len as u32 + item.payload_total + seg.payload as u32 <= u32::from(u16::MAX);
    let in_sequence = seg.seq == item.next_seq;
    // Version/IHL/TOS; flags, fragment, TTL, protocol; addresses and options.
    let same_ip = pkt[0..2] == h[0..2] && pkt[6..10] == h[6..10] && pkt[12..ihl] == h[12..ihl];
    let id_ok = ipv4::dont_fragment(pkt) || ipv4::id(pkt) == item.last_id.wrapping_add(1);
    // Ports, ACK number, data offset, flags (PSH aside), urgent pointer and options; the
    // window is the first segment's, as the kernel's GRO keeps it.
    let (t, ht) = (&pkt[ihl..hdr_len], &h[ihl..hdr_len]);
    let same_tcp = t[0..4] == ht[0..4]
        && t[8..13] == ht[8..13]
        && (t[13] & !TCP_PSH) == (ht[13] & !TCP_PSH)
        && t[18..] == ht[18..];
    within_size && in_sequence && same_ip && id_ok && same_tcp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::tests::packet;
    use crate::segment::tests::{payload, tcp_packet, A, B};
    use crate::segment::{Piece, TCP_FIN};

    const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3];

    /// What one TUN write carried.
    #[derive(Debug)]
    struct Written {
        vnet: VnetHdr,
        packet: Vec<u8>,
        count: u32,
    }

    /// Runs `packets` through a coalescer (one buffer each) and returns the writes.
    fn coalesce(packets: &[Vec<u8>]) -> (Vec<Written>, u64) {
        let bufs: Vec<Box<[u8]>> = packets.iter().map(|p| p.clone().into()).collect();
        let mut c = Coalescer::default();
        for (i, p) in packets.iter().enumerate() {
            let at = PacketRef {
                buf: i as u32,
                start: 0,
                len: p.len() as u32,
            };
            c.push(at, p);
        }
        let merged = c.take_merged();
        let mut out = Vec::new();
        let (ok, failed) = c.drain(&bufs, |slices, count| {
            let joined: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            out.push(Written {
                vnet: VnetHdr::parse(&joined).unwrap(),
                packet: joined[vnet::LEN..].to_vec(),
                count,
            });
            true
        });
        assert_eq!(failed, 0);
        assert_eq!(ok, packets.len() as u64);
        assert!(c.is_empty());
        (out, merged)
    }

    /// The segments of a TSO packet as the kernel would cut them (our own segmentation, which
    /// the segment tests hold to the kernel's rules).
    fn resegment(w: &Written) -> Vec<Vec<u8>> {
        let mut p = w.packet.clone();
        segment::complete_partial(&mut p, usize::from(w.vnet.csum_start), TCP_CHECK).unwrap();
        let (mut arena, mut pieces) = (Vec::new(), Vec::new());
        segment::tcp(&p, usize::from(w.vnet.gso_size), &mut arena, &mut pieces).unwrap();
        pieces
            .iter()
            .map(|Piece { head, payload }| {
                let mut v = arena[head.clone()].to_vec();
                v.extend_from_slice(&p[payload.clone()]);
                v
            })
            .collect()
    }

    fn flow(seq0: u32, sizes: &[usize], last_flags: u8) -> Vec<Vec<u8>> {
        let mut seq = seq0;
        let mut id = 0x1234u16;
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let flags = if i + 1 == sizes.len() {
                    last_flags
                } else {
                    TCP_ACK
                };
                let mut p = tcp_packet(seq, flags, &[], &TS, &payload(n), false);
                ipv4::set_id(&mut p, id);
                ipv4::fill_header_checksum(&mut p);
                seq = seq.wrapping_add(n as u32);
                id = id.wrapping_add(1);
                p
            })
            .collect()
    }

    #[test]
    fn consecutive_segments_become_one_super_packet_that_resegments_to_them() {
        let segs = flow(1_000, &[1400, 1400, 1400, 700], TCP_ACK | TCP_PSH);
        let (out, merged) = coalesce(&segs);
        assert_eq!(out.len(), 1);
        assert_eq!(merged, 3);
        let w = &out[0];
        assert_eq!(w.count, 4);
        assert_eq!(w.vnet, VnetHdr::tcp4_super_packet(20, 52, 1400));
        assert_eq!(ipv4::validate(&w.packet), Ok(52 + 4900));
        assert!(ipv4::header_checksum_ok(&w.packet));
        assert_eq!(w.packet[33] & TCP_PSH, TCP_PSH, "the last segment's PSH");
        assert_eq!(
            resegment(w),
            segs,
            "the kernel's GSO gives back the segments"
        );
    }

    #[test]
    fn a_single_segment_goes_through_untouched() {
        let segs = flow(7, &[1400], TCP_ACK);
        let (out, merged) = coalesce(&segs);
        assert_eq!(merged, 0);
        assert_eq!(out[0].vnet, VnetHdr::default());
        assert_eq!(out[0].packet, segs[0]);
    }

    #[test]
    fn psh_and_short_segments_end_a_super_packet() {
        let mut segs = flow(0, &[1000, 1000], TCP_ACK | TCP_PSH);
        segs.extend(flow(2000, &[1000, 500, 1000], TCP_ACK));
        let (out, _) = coalesce(&segs);
        let counts: Vec<u32> = out.iter().map(|w| w.count).collect();
        assert_eq!(counts, [2, 2, 1]);
        assert_eq!(resegment(&out[0]), segs[..2]);
        assert_eq!(resegment(&out[1]), segs[2..4]);
        assert_eq!(out[2].packet, segs[4]);
    }

    #[test]
    fn a_gap_in_sequence_or_a_fin_is_not_merged() {
        let mut segs = flow(0, &[1000], TCP_ACK);
        segs.extend(flow(5000, &[1000, 1000], TCP_ACK));
        segs.push(tcp_packet(
            7000,
            TCP_ACK | TCP_FIN,
            &[],
            &TS,
            &payload(10),
            false,
        ));
        let (out, _) = coalesce(&segs);
        let counts: Vec<u32> = out.iter().map(|w| w.count).collect();
        assert_eq!(counts, [1, 2, 1]);
        assert_eq!(out[2].packet, segs[3]);
    }

    #[test]
    fn interleaved_flows_keep_their_own_order() {
        let a = flow(0, &[1000, 1000, 1000], TCP_ACK);
        let mut b = flow(50_000, &[800, 800], TCP_ACK);
        for p in &mut b {
            p[23] = 99; // another destination port
            let ihl = 20;
            p[ihl + 16..ihl + 18].copy_from_slice(&[0, 0]);
            let c = Sum::pseudo_header(A, B, 6, (p.len() - ihl) as u16)
                .add_bytes(&p[ihl..])
                .checksum();
            p[ihl + 16..ihl + 18].copy_from_slice(&c.to_be_bytes());
        }
        let udp = packet(ipv4::PROTO_UDP, A, B, 63, &[], &payload(30));
        let mixed = vec![
            a[0].clone(),
            b[0].clone(),
            udp.clone(),
            a[1].clone(),
            b[1].clone(),
            a[2].clone(),
        ];
        let (out, merged) = coalesce(&mixed);
        assert_eq!(merged, 3);
        let counts: Vec<u32> = out.iter().map(|w| w.count).collect();
        assert_eq!(counts, [3, 2, 1]);
        assert_eq!(resegment(&out[0]), a);
        assert_eq!(resegment(&out[1]), b);
        assert_eq!(out[2].packet, udp);
    }

    #[test]
    fn a_bad_checksum_goes_through_alone_and_closes_its_flow() {
        let mut segs = flow(0, &[1000, 1000, 1000, 1000], TCP_ACK);
        segs[1][100] ^= 0xff; // corrupt payload: the TCP checksum no longer holds
        let (out, _) = coalesce(&segs);
        let counts: Vec<u32> = out.iter().map(|w| w.count).collect();
        assert_eq!(counts, [1, 1, 2]);
        assert_eq!(out[1].packet, segs[1], "passed on as it came");
        let mut bad_ip = flow(0, &[1000, 1000], TCP_ACK);
        bad_ip[1][10] ^= 1;
        let (out, _) = coalesce(&bad_ip);
        assert_eq!(out.len(), 2);
    }

    /// Refills the IP and TCP checksums of a test segment after a change.
    fn refill(p: &mut [u8]) {
        ipv4::fill_header_checksum(p);
        p[36..38].copy_from_slice(&[0, 0]);
        let c = Sum::pseudo_header(
            ipv4::src_bytes(p),
            ipv4::dst_bytes(p),
            6,
            (p.len() - 20) as u16,
        )
        .add_bytes(&p[20..])
        .checksum();
        p[36..38].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn differing_headers_are_not_merged() {
        let base = flow(0, &[1000, 1000], TCP_ACK);
        let writes = |first: &dyn Fn(&mut Vec<u8>), second: &dyn Fn(&mut Vec<u8>)| {
            let mut segs = base.clone();
            first(&mut segs[0]);
            second(&mut segs[1]);
            segs.iter_mut().for_each(|p| refill(p));
            coalesce(&segs).0.len()
        };
        let change = |f: &dyn Fn(&mut Vec<u8>)| writes(&|_| {}, f);
        assert_eq!(change(&|_| {}), 1, "unchanged: merged");
        assert_eq!(change(&|p| p[8] -= 1), 2, "TTL");
        assert_eq!(change(&|p| p[1] = 0x02), 2, "TOS (ECN CE)");
        assert_eq!(change(&|p| p[28] ^= 1), 2, "ACK number");
        assert_eq!(change(&|p| p[51] ^= 1), 2, "TCP timestamp");
        assert_eq!(change(&|p| p[33] |= 0x40), 2, "ECE");
        assert_eq!(change(&|p| p[6] = 0), 2, "DF");
        assert_eq!(change(&|p| p[34] ^= 1), 1, "window: kept from the first");
        assert_eq!(change(&|p| ipv4::set_id(p, 0x9999)), 1, "DF: any ID");
        let no_df = |p: &mut Vec<u8>| p[6] = 0;
        assert_eq!(writes(&no_df, &no_df), 1, "non-DF, IDs counting up");
        let jump = |p: &mut Vec<u8>| {
            p[6] = 0;
            ipv4::set_id(p, 0x9999)
        };
        assert_eq!(writes(&no_df, &jump), 2, "non-DF with a jumping ID");
    }

    #[test]
    fn super_packets_stop_at_64_kib() {
        let segs = flow(0, &[1448; 50], TCP_ACK);
        let (out, _) = coalesce(&segs);
        let counts: Vec<u32> = out.iter().map(|w| w.count).collect();
        assert_eq!(counts, [45, 5]);
        assert!(out.iter().all(|w| ipv4::validate(&w.packet).is_ok()));
        assert!(out[0].packet.len() <= 65535);
    }

    #[test]
    fn pure_acks_and_failed_writes() {
        let acks: Vec<Vec<u8>> = (0..3)
            .map(|_| tcp_packet(1, TCP_ACK, &[], &TS, &[], false))
            .collect();
        let (out, merged) = coalesce(&acks);
        assert_eq!((out.len(), merged), (3, 0));
        let bufs: Vec<Box<[u8]>> = acks.iter().map(|p| p.clone().into()).collect();
        let mut c = Coalescer::default();
        for (i, p) in acks.iter().enumerate() {
            c.push(
                PacketRef {
                    buf: i as u32,
                    start: 0,
                    len: p.len() as u32,
                },
                p,
            );
        }
        assert_eq!(c.drain(&bufs, |_, _| false), (0, 3));
    }
}
