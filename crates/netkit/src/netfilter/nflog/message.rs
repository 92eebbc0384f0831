//! nfnetlink_log's messages: the configuration a listener sends (NFULNL_MSG_CONFIG), and the
//! packets it receives (NFULNL_MSG_PACKET), read as a prefix and a flow.

use super::flow::Flow;
use crate::netfilter::nf_tables::attr::{Attrs, Writer};

/// `NFNL_SUBSYS_ULOG`: nfnetlink_log's subsystem.
const SUBSYS_ULOG: u16 = 4;
/// `NFULNL_MSG_PACKET`, `NFULNL_MSG_CONFIG`.
pub const MSG_PACKET: u16 = SUBSYS_ULOG << 8;
pub const MSG_CONFIG: u16 = (SUBSYS_ULOG << 8) | 1;

/// `NFULA_CFG_CMD`, `NFULA_CFG_MODE`.
const CFG_CMD: u16 = 1;
const CFG_MODE: u16 = 2;
/// `NFULNL_CFG_CMD_BIND`: this socket receives the group's packets.
const CMD_BIND: u8 = 1;
/// `NFULNL_COPY_PACKET`: the packet's first bytes (up to the copy range) come along.
const COPY_PACKET: u8 = 2;

/// `NFULA_PAYLOAD`, `NFULA_PREFIX`.
const ATTR_PAYLOAD: u16 = 9;
const ATTR_PREFIX: u16 = 10;

const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;

/// The request binding this socket to `group` with packets copied up to `copy_range` bytes,
/// acknowledged: the bind and the copy mode in one NFULNL_MSG_CONFIG, which the kernel
/// applies in that order.
pub fn bind_request(group: u16, copy_range: u32, seq: u32) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes(CFG_CMD, &[CMD_BIND]);
    // struct nfulnl_msg_config_mode, packed: copy_range (be32), copy_mode, a pad byte.
    let mut mode = copy_range.to_be_bytes().to_vec();
    mode.extend([COPY_PACKET, 0]);
    w.bytes(CFG_MODE, &mode);
    let len = NLMSG_HDRLEN + NFGENMSG_LEN + w.buf.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&MSG_CONFIG.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: AF_UNSPEC, version 0, the group as res_id (big-endian).
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&group.to_be_bytes());
    out.extend_from_slice(&w.buf);
    out
}

/// One packet a log rule sent to the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedPacket {
    pub group: u16,
    /// The rule's `log prefix` (empty without one).
    pub prefix: String,
    /// `None` when the copy holds no readable IP header.
    pub flow: Option<Flow>,
}

impl LoggedPacket {
    /// Reads an NFULNL_MSG_PACKET's payload (nfgenmsg and attributes).
    pub fn parse(payload: &[u8]) -> Option<LoggedPacket> {
        let group = u16::from_be_bytes([*payload.get(2)?, *payload.get(3)?]);
        let attrs = Attrs::new(payload.get(NFGENMSG_LEN..)?);
        Some(LoggedPacket {
            group,
            prefix: attrs
                .get(ATTR_PREFIX)
                .map(|a| a.string())
                .unwrap_or_default(),
            flow: attrs.get(ATTR_PAYLOAD).and_then(|a| Flow::parse(a.value)),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::netfilter::nflog::flow::tests::ipv4_packet;
    use crate::netfilter::nflog::flow::Transport;

    /// An NFULNL_MSG_PACKET payload as the kernel sends it (a hardware header and an
    /// interface index before the prefix and the payload).
    pub(crate) fn packet_payload(group: u16, prefix: &str, packet: &[u8]) -> Vec<u8> {
        let mut out = vec![2, 0];
        out.extend(group.to_be_bytes());
        let mut w = Writer::new();
        w.bytes(1, &[0x08, 0x00, 2, 0]).be32(5, 3);
        w.bytes(ATTR_PAYLOAD, packet).string(ATTR_PREFIX, prefix);
        out.extend(w.buf);
        out
    }

    #[test]
    fn the_bind_request_is_what_the_kernel_expects() {
        let m = bind_request(7361, 128, 9);
        assert_eq!(m.len(), 16 + 4 + 8 + 12);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x0401);
        assert_eq!(m[16..20], [0, 0, 0x1c, 0xc1]);
        // NFULA_CFG_CMD (5 bytes, padded), then NFULA_CFG_MODE (10 bytes, padded).
        assert_eq!(m[20..28], [5, 0, 1, 0, 1, 0, 0, 0]);
        assert_eq!(m[28..40], [10, 0, 2, 0, 0, 0, 0, 128, 2, 0, 0, 0]);
    }

    #[test]
    fn a_packet_message_gives_prefix_and_flow() {
        let ip = ipv4_packet([10, 0, 0, 1], [10, 0, 0, 2], 6, &[0x9c, 0x40, 0, 80]);
        let p = LoggedPacket::parse(&packet_payload(7361, "i 10.0.0.2", &ip)).unwrap();
        assert_eq!((p.group, p.prefix.as_str()), (7361, "i 10.0.0.2"));
        let flow = p.flow.unwrap();
        assert_eq!(
            flow.transport,
            Transport::Ports {
                src: 40000,
                dst: 80
            }
        );
        assert_eq!(LoggedPacket::parse(&[2, 0]), None);
        let bare = LoggedPacket::parse(&[2, 0, 0, 1]).unwrap();
        assert_eq!((bare.prefix.as_str(), bare.flow), ("", None));
    }
}
