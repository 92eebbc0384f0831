//! What the engine is started with: the device, the port, the addresses, the data path and
//! its offloads, and where its log lines go.

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnetwork::Ipv4Network;

use crate::stats::DataPathMode;

/// Where the engine's log lines go (the agent passes its logger). Called rarely: at start,
/// on a fallback, and at most every few seconds for errors while running.
pub type LogFn = Arc<dyn Fn(&str) + Send + Sync>;

/// flanneld's default `Port` of the udp backend.
pub const DEFAULT_PORT: u16 = 8285;
/// The outer IPv4 and UDP headers: the TUN device's MTU is the underlay's minus this.
pub const ENCAP_OVERHEAD: u32 = 28;

/// What the engine needs to run.
#[derive(Clone)]
pub struct EngineConfig {
    /// The TUN device (`flannel0`), created when missing.
    pub tun_name: String,
    /// The TUN device's MTU (the underlay's minus [`ENCAP_OVERHEAD`]): no datagram carries a
    /// longer packet, and a longer datagram received is cut there, as flanneld reads it.
    pub mtu: u32,
    /// The backend's `Port`: datagrams go from it, to it.
    pub port: u16,
    /// The node's address the socket binds to (flanneld binds the interface's address).
    pub bind_ip: Ipv4Addr,
    /// This node's lease. Its network address is the TUN device's address and the source of
    /// ICMP answers; datagrams for anywhere else are dropped.
    pub local_subnet: Ipv4Network,
    /// The cluster network, reached through the TUN device by one route.
    pub network: Ipv4Network,
    pub datapath: DataPathMode,
    /// What the fast path may use where the kernel has it (all by default); turning one off
    /// works around a kernel or driver that gets it wrong, and lets the tests run each
    /// fallback.
    pub offloads: Offloads,
    /// `None`: lines go to stderr, prefixed `udp-proxy:`.
    pub log: Option<LogFn>,
}

impl fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineConfig")
            .field("tun_name", &self.tun_name)
            .field("mtu", &self.mtu)
            .field("port", &self.port)
            .field("bind_ip", &self.bind_ip)
            .field("local_subnet", &self.local_subnet)
            .field("network", &self.network)
            .field("datapath", &self.datapath)
            .field("offloads", &self.offloads)
            .finish_non_exhaustive()
    }
}

/// The fast path's features, each used only where allowed here and granted by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// Virtio-net headers on TUN: super-packets read (TSO, USO) and written (coalesced TCP).
    pub tun_vnet_hdr: bool,
    /// `UDP_SEGMENT` sends.
    pub udp_gso: bool,
    /// `UDP_GRO` receives.
    pub udp_gro: bool,
    /// `sendmmsg` and `recvmmsg`.
    pub mmsg: bool,
}

impl Default for Offloads {
    fn default() -> Offloads {
        Offloads {
            tun_vnet_hdr: true,
            udp_gso: true,
            udp_gro: true,
            mmsg: true,
        }
    }
}

impl EngineConfig {
    /// flanneld's settings for a node whose underlay address is `bind_ip` on a link of
    /// `underlay_mtu`: flannel0, port 8285, MTU the underlay's minus the encapsulation, the
    /// fast path with every offload the kernel has.
    pub fn new(
        bind_ip: Ipv4Addr,
        underlay_mtu: u32,
        local_subnet: Ipv4Network,
        network: Ipv4Network,
    ) -> EngineConfig {
        EngineConfig {
            tun_name: "flannel0".into(),
            mtu: underlay_mtu.saturating_sub(ENCAP_OVERHEAD),
            port: DEFAULT_PORT,
            bind_ip,
            local_subnet,
            network,
            datapath: DataPathMode::Fast,
            offloads: Offloads::default(),
            log: None,
        }
    }

    /// The TUN device's own address: the lease's network address (`10.244.5.0` for
    /// `10.244.5.0/24`), as flanneld configures it (as a /32).
    pub fn tun_address(&self) -> Ipv4Addr {
        self.local_subnet.network()
    }
}
