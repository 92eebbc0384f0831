//! Why the engine could not start (or the device could not be set up). Failures while running
//! are counted in the stats and, when a thread cannot go on, reported by `Engine::failure`.

use std::io;
use std::net::SocketAddrV4;

#[derive(Debug, thiserror::Error)]
pub enum UdpProxyError {
    /// The TUN device name is not a valid interface name.
    #[error("invalid TUN device name {name:?}: {source}")]
    TunName {
        name: String,
        #[source]
        source: netkit::Error,
    },
    /// The MTU leaves no room for an IPv4 header or passes a UDP datagram's limit.
    #[error("invalid MTU {mtu} for {tun}: it must be between 68 and 65507")]
    Mtu { tun: String, mtu: u32 },
    /// `/dev/net/tun` cannot be opened (no tun driver, no permission).
    #[error("failed to open /dev/net/tun for {tun}: {source}")]
    OpenTun {
        tun: String,
        #[source]
        source: io::Error,
    },
    /// TUNSETIFF refused: a non-TUN device of that name, a multi-queue device, a device
    /// another process holds.
    #[error("failed to attach to TUN device {tun}: {source}")]
    AttachTun {
        tun: String,
        #[source]
        source: io::Error,
    },
    /// A TUN ioctl after the attach failed (`what` names it).
    #[error("failed to {what} on TUN device {tun}: {source}")]
    TunIoctl {
        tun: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The UDP socket cannot be made or bound.
    #[error("failed to {what} the UDP socket on {addr}: {source}")]
    Socket {
        addr: SocketAddrV4,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The stop signal or a thread cannot be made.
    #[error("failed to start the packet engine for {tun}: {what}: {source}")]
    Start {
        tun: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// Setting up the device's address, MTU or route failed.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_operation_and_the_object() {
        let e = UdpProxyError::AttachTun {
            tun: "flannel0".into(),
            source: io::Error::from_raw_os_error(libc::EBUSY),
        };
        assert_eq!(
            e.to_string(),
            "failed to attach to TUN device flannel0: Device or resource busy (os error 16)"
        );
        let e = UdpProxyError::Socket {
            addr: "172.31.0.1:8285".parse().unwrap(),
            what: "bind",
            source: io::Error::from_raw_os_error(libc::EADDRINUSE),
        };
        assert_eq!(
            e.to_string(),
            "failed to bind the UDP socket on 172.31.0.1:8285: Address already in use (os error 98)"
        );
        let e = UdpProxyError::Mtu {
            tun: "flannel0".into(),
            mtu: 20,
        };
        assert_eq!(
            e.to_string(),
            "invalid MTU 20 for flannel0: it must be between 68 and 65507"
        );
    }
}
