//! What the engine counts, and which data path it runs.
//!
//! Each thread counts in plain integers and adds them to its own cache line of atomics once
//! per batch, so counting costs no shared write per packet.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The data path asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataPathMode {
    /// Batches and offloads, each where the kernel has it (probed at start).
    #[default]
    Fast,
    /// flanneld's proxy's way: one read and one sendto per packet towards the peers, one recv
    /// and one write per packet back, no offload.
    PerPacket,
}

/// The data path that runs: the mode and what the kernel granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPath {
    pub mode: DataPathMode,
    /// The TUN device speaks virtio-net headers (`IFF_VNET_HDR`): super-packets can be read
    /// from it and written to it.
    pub vnet_hdr: bool,
    /// TCP super-packets read from TUN (`TUN_F_TSO4`) and cut here.
    pub tun_tso: bool,
    /// UDP super-packets read from TUN (`TUN_F_USO4`, Linux 6.2) and cut here.
    pub tun_uso: bool,
    /// Many datagrams per system call (`sendmmsg`, `recvmmsg`).
    pub mmsg: bool,
    /// Equal-sized datagrams to one peer sent as one (`UDP_SEGMENT`).
    pub udp_gso: bool,
    /// Datagrams received as one coalesced buffer (`UDP_GRO`).
    pub udp_gro: bool,
}

impl DataPath {
    pub fn per_packet() -> DataPath {
        DataPath {
            mode: DataPathMode::PerPacket,
            vnet_hdr: false,
            tun_tso: false,
            tun_uso: false,
            mmsg: false,
            udp_gso: false,
            udp_gro: false,
        }
    }
}

impl fmt::Display for DataPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mode == DataPathMode::PerPacket {
            return f.write_str(
                "per-packet: one read and sendto per packet to peers, one recv and write per packet back",
            );
        }
        let yes_no = |on: bool| if on { "on" } else { "off" };
        write!(
            f,
            "fast: TUN virtio-net header {}, TSO {}, USO {}, TCP coalescing to TUN {}; \
             sendmmsg/recvmmsg {}, UDP GSO {}, UDP GRO {}",
            yes_no(self.vnet_hdr),
            yes_no(self.tun_tso),
            yes_no(self.tun_uso),
            yes_no(self.vnet_hdr),
            yes_no(self.mmsg),
            yes_no(self.udp_gso),
            yes_no(self.udp_gro)
        )
    }
}

/// Packets and bytes one way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
}

/// Packets dropped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// From TUN, to a destination no route covers (answered with ICMP unless rate-limited or
    /// not due).
    pub no_route: u64,
    /// The TTL ran out (sending or receiving).
    pub ttl_expired: u64,
    /// Not IPv4 (IPv6 on the device, anything else).
    pub not_ipv4: u64,
    /// Not a well-formed IPv4 packet, or a super-packet not as its virtio-net header says.
    pub malformed: u64,
    /// A datagram longer than the MTU, cut at the MTU as flanneld reads it, whose IPv4 packet
    /// is then incomplete (flanneld writes the cut packet; the kernel drops it).
    pub oversize: u64,
    /// From a peer, to a destination outside this node's subnet (flanneld would hand it to
    /// the kernel to forward anywhere: an open relay).
    pub not_for_this_node: u64,
    /// A super-packet of a kind the engine does not segment (TCP/IPv6, UFO).
    pub unsupported_offload: u64,
    /// The UDP send failed (counted per inner packet).
    pub send_failed: u64,
    /// The TUN write failed (counted per inner packet).
    pub tun_write_failed: u64,
}

/// System calls moving packets, to see the batching at work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Syscalls {
    pub tun_reads: u64,
    pub udp_sends: u64,
    pub udp_recvs: u64,
    pub tun_writes: u64,
}

/// A snapshot of the engine's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub datapath: DataPath,
    /// Pod packets sent to peers (TUN → UDP), one per datagram.
    pub sent: Traffic,
    /// Pod packets received from peers and written to TUN (UDP → TUN).
    pub received: Traffic,
    pub drops: Drops,
    /// ICMP network unreachable answers written to TUN, and those the rate limit held back.
    pub icmp_unreachable: u64,
    pub icmp_rate_limited: u64,
    /// Super-packets read from TUN and cut into datagrams.
    pub super_packets_split: u64,
    /// Segments received that went to TUN inside a super-packet (after its first).
    pub segments_coalesced: u64,
    pub syscalls: Syscalls,
}

/// Counter slots.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    SentPackets,
    SentBytes,
    ReceivedPackets,
    ReceivedBytes,
    NoRoute,
    TtlExpired,
    NotIpv4,
    Malformed,
    Oversize,
    NotForThisNode,
    UnsupportedOffload,
    SendFailed,
    TunWriteFailed,
    IcmpUnreachable,
    IcmpRateLimited,
    SuperPacketsSplit,
    SegmentsCoalesced,
    TunReads,
    UdpSends,
    UdpRecvs,
    TunWrites,
}

const SLOTS: usize = Counter::TunWrites as usize + 1;

/// One thread's published counters, on a cache line (or more) of its own.
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct Cells([AtomicU64; SLOTS]);

/// One thread's counts since its last publish.
#[derive(Default)]
pub(crate) struct Local([u64; SLOTS]);

impl Local {
    #[inline]
    pub fn add(&mut self, counter: Counter, n: u64) {
        self.0[counter as usize] += n;
    }

    #[inline]
    pub fn inc(&mut self, counter: Counter) {
        self.add(counter, 1);
    }

    #[inline]
    pub fn get(&self, counter: Counter) -> u64 {
        self.0[counter as usize]
    }

    /// Adds the counts to `cells` and starts over.
    pub fn publish(&mut self, cells: &Cells) {
        for (local, cell) in self.0.iter_mut().zip(cells.0.iter()) {
            if *local != 0 {
                cell.fetch_add(*local, Ordering::Relaxed);
                *local = 0;
            }
        }
    }
}

/// The sum of the threads' counters.
pub(crate) fn snapshot(datapath: DataPath, threads: &[&Cells]) -> Stats {
    let get = |c: Counter| -> u64 {
        threads
            .iter()
            .map(|t| t.0[c as usize].load(Ordering::Relaxed))
            .sum()
    };
    use Counter::*;
    Stats {
        datapath,
        sent: Traffic {
            packets: get(SentPackets),
            bytes: get(SentBytes),
        },
        received: Traffic {
            packets: get(ReceivedPackets),
            bytes: get(ReceivedBytes),
        },
        drops: Drops {
            no_route: get(NoRoute),
            ttl_expired: get(TtlExpired),
            not_ipv4: get(NotIpv4),
            malformed: get(Malformed),
            oversize: get(Oversize),
            not_for_this_node: get(NotForThisNode),
            unsupported_offload: get(UnsupportedOffload),
            send_failed: get(SendFailed),
            tun_write_failed: get(TunWriteFailed),
        },
        icmp_unreachable: get(IcmpUnreachable),
        icmp_rate_limited: get(IcmpRateLimited),
        super_packets_split: get(SuperPacketsSplit),
        segments_coalesced: get(SegmentsCoalesced),
        syscalls: Syscalls {
            tun_reads: get(TunReads),
            udp_sends: get(UdpSends),
            udp_recvs: get(UdpRecvs),
            tun_writes: get(TunWrites),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_counts_add_up_across_threads() {
        let (tx, rx) = (Cells::default(), Cells::default());
        let mut local = Local::default();
        local.inc(Counter::SentPackets);
        local.add(Counter::SentBytes, 1500);
        local.inc(Counter::TunWrites);
        local.publish(&tx);
        local.publish(&tx);
        let mut other = Local::default();
        other.add(Counter::TunWrites, 2);
        other.inc(Counter::NotForThisNode);
        other.publish(&rx);
        let s = snapshot(DataPath::per_packet(), &[&tx, &rx]);
        assert_eq!(
            s.sent,
            Traffic {
                packets: 1,
                bytes: 1500
            }
        );
        assert_eq!(s.syscalls.tun_writes, 3);
        assert_eq!(s.drops.not_for_this_node, 1);
        assert_eq!(s.received, Traffic::default());
        assert_eq!(std::mem::align_of::<Cells>(), 64);
    }

    #[test]
    fn datapath_says_what_runs() {
        assert!(DataPath::per_packet().to_string().starts_with("per-packet"));
        let fast = DataPath {
            mode: DataPathMode::Fast,
            vnet_hdr: true,
            tun_tso: true,
            tun_uso: false,
            mmsg: true,
            udp_gso: true,
            udp_gro: true,
        };
        let text = fast.to_string();
        assert!(text.contains("TSO on, USO off"), "{text}");
        assert!(text.contains("UDP GSO on, UDP GRO on"), "{text}");
    }
}
