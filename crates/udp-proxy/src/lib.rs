//! The data path of flannel's `udp` backend: pod packets between the TUN device `flannel0`
//! and UDP datagrams to the other nodes, on the wire exactly as flanneld's proxy sends them,
//! and fast enough that the userspace hop stops being the bottleneck.
//!
//! # Wire format (flanneld's)
//!
//! One UDP datagram per inner IPv4 packet, the packet as the payload and nothing else, from
//! the backend's `Port` (default 8285) on the node's address to the same `Port` on the
//! `PublicIP` of the node whose subnet holds the destination (longest prefix over the table
//! the caller sets with [`Engine::set_routes`], replaced at run time without a restart). The
//! TTL is decremented when sending and again when receiving (the checksum patched as RFC 1624
//! says); a packet whose TTL runs out is dropped. Pod to pod, with the two nodes' kernels
//! forwarding, a TTL of 64 arrives as 60 and crosses the wire as 62. No datagram carries more
//! than the device's MTU; a received datagram longer than the MTU is cut there as flanneld
//! reads it, and its packet, now incomplete, is dropped (counted as `oversize`; flanneld writes
//! it to TUN, where the kernel drops it). Non-IPv4 packets are ignored. Two departures, both
//! stricter: a datagram whose destination is outside this node's lease is dropped (flanneld
//! hands it to the kernel to forward, which makes the node an open relay), and a TTL of 0 is
//! dropped rather than wrapped to 255.
//!
//! # Threads
//!
//! [`Engine::start`] runs two threads of its own (no async runtime): `udp-proxy-tx` reads TUN
//! and sends, `udp-proxy-rx` receives and writes TUN. Both use non-blocking descriptors and
//! `poll` only when idle, beside an eventfd that [`Engine::stop`] fires. Counters are kept per
//! thread and published once per batch. The route table is swapped under a mutex and picked up
//! by the sending thread through a generation number, so lookups take no lock.
//!
//! # The fast path ([`DataPathMode::Fast`])
//!
//! Sending: the TUN device is opened with `IFF_VNET_HDR` and `TUNSETOFFLOAD` (checksum, TSO4,
//! USO4), so the kernel hands over TCP (and UDP) super-packets of up to 64 KiB instead of MTU
//! packets. Each is cut here into complete packets of one segment each (IPv4 ID, length and
//! header checksum per segment; TCP sequence numbers; CWR on the first segment only, FIN and
//! PSH on the last only; TCP or UDP checksum computed in full, since the receiving node may be
//! flanneld's): the wire format does not change. Segment headers are built in an arena and the
//! payload is never copied in userspace: `sendmmsg` gathers each datagram from its header and
//! its slice of the super-packet. Runs of equal-sized datagrams to one peer (a super-packet's
//! segments, a stream of ACKs) go as one message with `UDP_SEGMENT`, which the kernel (or the
//! NIC) cuts into the same datagrams. Reads continue while TUN has packets, up to 16 reads or
//! 60 KiB queued, then one `sendmmsg` sends them all.
//!
//! Receiving: `recvmmsg` with `UDP_GRO` takes up to 8 buffers of up to 64 KiB, each holding
//! many datagrams of one peer. The inner TCP segments of one flow that continue each other are
//! merged by the kernel's own GRO rules ([`coalesce`]) into one super-packet written to TUN with
//! a virtio-net header (GSO TCPv4, checksum partial): the node's forwarding, bridge and the
//! pod's TCP then handle one packet instead of up to 45. Each merged segment's checksums are
//! verified first, so nothing corrupt is vouched for.
//!
//! Fallbacks, each probed once at start and logged: no virtio-net header on TUN (plain
//! packets, no coalescing), no USO or TSO (smaller packets from TUN), no `UDP_SEGMENT` (one
//! datagram per message), no `UDP_GRO` (one datagram per buffer), no `sendmmsg`/`recvmmsg`
//! (one message per call). A `UDP_SEGMENT` send the kernel refuses at run time goes again one
//! datagram per message: when the peer's route is the reason (its MTU below the segments', so
//! the kernel fragments each datagram, as it does flanneld's) for that peer until the routes
//! change, when the kernel or the device is (EIO, EOPNOTSUPP) for good. Each feature can also
//! be turned off in [`EngineConfig::offloads`]. [`Stats::datapath`] says what runs.
//!
//! # The per-packet path ([`DataPathMode::PerPacket`])
//!
//! flanneld's proxy's way, kept as a selectable fallback and as the bench's baseline: a plain
//! TUN device (offloads turned off, even on a device a fast engine left), one `read` and one
//! `sendto` per packet out, one `recv` (at most the MTU) and one `write` per packet in. The
//! checks, TTL handling, drops and ICMP answers are the same code as the fast path's.
//!
//! # ICMP for destinations without a route
//!
//! A packet from TUN whose destination no route covers is answered with ICMP destination
//! unreachable (network), for ICMP packets too but never for an ICMP error, a later fragment,
//! or a non-unicast source or destination, quoting as much of the packet as fits in 576 bytes,
//! at most 1000 answers a second (bursts of 50). The answer comes from the TUN device's address
//! and is written into the device. flanneld does the same (for non-ICMP packets only), but the
//! node's kernel drops its answer as a martian, its source being a local address. The engine
//! sets `net.ipv4.conf.<tun>.accept_local=1` on the device, which lets the kernel take such a
//! source on that device (strict `rp_filter` included) and forward the answer to the pod: `ping`
//! prints "Destination Net Unreachable" at once, a TCP connect fails at once with
//! `ENETUNREACH`.
//!
//! # Performance
//!
//! `make bench` (section `udp`) runs one TCP stream pod to pod across two nodes through the
//! fast path, the per-packet path and the kernel's vxlan; its figures (throughput,
//! retransmissions, CPU per GB, packets per system call) are in docs/benchmarks.md, "udp: the
//! udp backend's data path". What remains above vxlan is the userspace hop: four copies of each
//! byte and two checksum passes.
//!
//! # The device
//!
//! The TUN device is created when missing and made persistent (see [`tun`] for why), its
//! offloads set on every start. Its address, MTU, state and the cluster route are set by
//! [`device::configure`], which a reconcile can call again at any time.

mod checksum;
pub mod coalesce;
mod config;
pub mod device;
mod engine;
mod error;
mod forward;
pub mod fuzzing;
mod icmp;
mod ipv4;
mod routes;
mod rx;
pub mod segment;
mod shared;
mod socket;
mod stats;
mod sys;
pub mod tun;
mod tx;
mod vnet;

pub use config::{EngineConfig, LogFn, Offloads, DEFAULT_PORT, ENCAP_OVERHEAD};
pub use engine::Engine;
pub use error::UdpProxyError;
pub use routes::RouteTable;
pub use stats::{DataPath, DataPathMode, Drops, Stats, Syscalls, Traffic};
