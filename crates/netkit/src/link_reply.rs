//! Link messages as netkit reads them: the header and a chosen few attributes, each decoded
//! directly, and the kind's `IFLA_INFO_DATA` kept as bytes until an accessor asks for it.
//!
//! netlink-packet-route's own link parser decodes every attribute it knows, and its
//! `IFLA_INFO_DATA` decoder covers every link kind: together a large part of each binary that
//! looks a link up (docs/benchmarks.md, "Binary sizes and RSS"), for attributes nothing here
//! reads. A kind's data is
//! decoded only by its accessor (`Link::info_data::<InfoBridge>()`), so a binary links the
//! decoder of the kinds it asks about and no other.

use netlink_packet_core::{
    parse_i32, parse_string, parse_u32, parse_u8, DecodeError, DefaultNla, Emitable, ErrorContext,
    Nla, NlaBuffer, NlasIterator, Parseable, NLA_TYPE_MASK,
};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkHeader, LinkInfo, LinkMessage};
use netlink_packet_route::AddressFamily;

/// `IFLA_INFO_*` (include/uapi/linux/if_link.h).
const IFLA_INFO_KIND: u16 = 1;
pub(crate) const IFLA_INFO_DATA: u16 = 2;

/// Which attributes of a link message are decoded; the others are skipped unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkView {
    /// What a link lookup reports: name, MTU, address, controller, peer,
    /// state, queue length, promiscuity, alias and `IFLA_LINKINFO`, plus the per-family
    /// configuration (`IFLA_AF_SPEC`) kept as bytes, for [`ipv6_accept_ra`]. Skipped: the
    /// property and XDP nests and the rest, which decoded were most of a lookup's user time.
    Summary,
    /// A bridge port's flags (`IFLA_PROTINFO`) and VLANs (`IFLA_AF_SPEC`), from an
    /// AF_BRIDGE dump.
    BridgePort,
}

/// Decodes one RTM_NEWLINK payload, keeping the attributes `view` names.
pub(crate) fn decode_link(payload: &[u8], view: LinkView) -> Result<LinkMessage, DecodeError> {
    let header = LinkHeader::parse(payload).context("invalid link message")?;
    let Some(attributes) = payload.get(header.buffer_len()..) else {
        return Err(DecodeError::from(
            "invalid link message: shorter than its header",
        ));
    };
    let mut message = LinkMessage::default();
    for nla in NlasIterator::new(attributes) {
        let nla = nla.context("invalid link message")?;
        let attribute = match view {
            LinkView::Summary => summary_attribute(&nla),
            LinkView::BridgePort if header.interface_family == AddressFamily::Bridge => {
                bridge_port_attribute(&nla)
            }
            LinkView::BridgePort => Ok(None),
        };
        let attribute =
            attribute.with_context(|| format!("invalid link message: attribute {}", nla.kind()))?;
        message.attributes.extend(attribute);
    }
    message.header = header;
    Ok(message)
}

fn summary_attribute(nla: &NlaBuffer<&[u8]>) -> Result<Option<LinkAttribute>, DecodeError> {
    let value = nla.value();
    Ok(Some(match nla.kind() {
        libc::IFLA_IFNAME => LinkAttribute::IfName(parse_string(value)?),
        libc::IFLA_MTU => LinkAttribute::Mtu(parse_u32(value)?),
        libc::IFLA_ADDRESS => LinkAttribute::Address(value.to_vec()),
        libc::IFLA_MASTER => LinkAttribute::Controller(parse_u32(value)?),
        libc::IFLA_LINK => LinkAttribute::Link(parse_u32(value)?),
        libc::IFLA_LINK_NETNSID => LinkAttribute::LinkNetNsId(parse_i32(value)?),
        libc::IFLA_OPERSTATE => LinkAttribute::OperState(parse_u8(value)?.into()),
        libc::IFLA_TXQLEN => LinkAttribute::TxQueueLen(parse_u32(value)?),
        libc::IFLA_PROMISCUITY => LinkAttribute::Promiscuity(parse_u32(value)?),
        libc::IFLA_IFALIAS => LinkAttribute::IfAlias(parse_string(value)?),
        libc::IFLA_LINKINFO => LinkAttribute::LinkInfo(link_info(value)?),
        libc::IFLA_AF_SPEC => LinkAttribute::Other(DefaultNla::parse(nla)?),
        _ => return Ok(None),
    }))
}

/// `IFLA_LINKINFO`: the kind decoded, everything else (the kind's data, the port kind and
/// its data) kept as it came.
fn link_info(value: &[u8]) -> Result<Vec<LinkInfo>, DecodeError> {
    NlasIterator::new(value)
        .map(|nla| {
            let nla = nla?;
            Ok(match nla.kind() {
                IFLA_INFO_KIND => {
                    LinkInfo::Kind(InfoKind::from(parse_string(nla.value())?.as_str()))
                }
                _ => LinkInfo::Other(DefaultNla::parse(&nla)?),
            })
        })
        .collect()
}

fn bridge_port_attribute(nla: &NlaBuffer<&[u8]>) -> Result<Option<LinkAttribute>, DecodeError> {
    Ok(Some(match nla.kind() {
        libc::IFLA_PROTINFO => LinkAttribute::ProtoInfoBridge(nested(nla.value())?),
        libc::IFLA_AF_SPEC => LinkAttribute::AfSpecBridge(nested(nla.value())?),
        _ => return Ok(None),
    }))
}

fn nested<T>(value: &[u8]) -> Result<Vec<T>, DecodeError>
where
    T: for<'a> Parseable<NlaBuffer<&'a [u8]>>,
{
    NlasIterator::new(value)
        .map(|nla| T::parse(&nla?))
        .collect()
}

/// The kind's `IFLA_INFO_DATA` of a link message decoded by [`decode_link`], each
/// sub-attribute through `parse`; empty when the message has none. A malformed
/// sub-attribute is left out rather than failing the accessor (the lookup itself succeeded).
pub(crate) fn info_data<T>(
    message: &LinkMessage,
    parse: impl Fn(&NlaBuffer<&[u8]>) -> Result<T, DecodeError>,
) -> Vec<T> {
    let Some(data) = raw_info_data(message) else {
        return Vec::new();
    };
    NlasIterator::new(&data[..])
        .filter_map(|nla| parse(&nla.ok()?).ok())
        .collect()
}

/// `IFLA_INET6_CONF`, in the AF_INET6 nest of `IFLA_AF_SPEC` (include/uapi/linux/if_link.h):
/// the device's IPv6 configuration, an array of s32 indexed by `DEVCONF_*`.
const IFLA_INET6_CONF: u16 = 2;
/// `DEVCONF_ACCEPT_RA` (include/uapi/linux/ipv6.h): its slot in that array.
const DEVCONF_ACCEPT_RA: usize = 3;

/// The link's `net.ipv6.conf.<link>.accept_ra` as the kernel reported it in the link message
/// (the same value the sysctl file shows, without a walk through `/proc/sys`, whose per-netns
/// entries make each lookup slower the more namespaces a node has). `None` when the message
/// carries no IPv6 configuration: the link has no IPv6 device (IPv6 disabled), or the message
/// was not a kernel reply.
pub(crate) fn ipv6_accept_ra(message: &LinkMessage) -> Option<i32> {
    let spec = message.attributes.iter().find_map(|a| match a {
        LinkAttribute::Other(nla) if nla.kind() & NLA_TYPE_MASK == libc::IFLA_AF_SPEC => {
            Some(value_bytes(nla))
        }
        _ => None,
    })?;
    let inet6 = find_nla(&spec, libc::AF_INET6 as u16)?;
    let conf = find_nla(inet6.value(), IFLA_INET6_CONF)?;
    let slot = DEVCONF_ACCEPT_RA * 4;
    let bytes = conf.value().get(slot..slot + 4)?;
    Some(i32::from_ne_bytes(bytes.try_into().ok()?))
}

/// The first well-formed attribute of type `kind` among `attributes` (nest flags ignored).
fn find_nla(attributes: &[u8], kind: u16) -> Option<NlaBuffer<&[u8]>> {
    NlasIterator::new(attributes)
        .filter_map(Result::ok)
        .find(|nla| nla.kind() & NLA_TYPE_MASK == kind)
}

/// The payload of an attribute kept undecoded.
fn value_bytes(nla: &DefaultNla) -> Vec<u8> {
    let mut value = vec![0u8; nla.value_len()];
    nla.emit_value(&mut value);
    value
}

fn raw_info_data(message: &LinkMessage) -> Option<Vec<u8>> {
    message.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            // The kernel sends the nest without NLA_F_NESTED; accept it either way.
            LinkInfo::Other(nla) if nla.kind() & NLA_TYPE_MASK == IFLA_INFO_DATA => {
                Some(value_bytes(nla))
            }
            _ => None,
        }),
        _ => None,
    })
}

#[cfg(test)]
#[path = "link_reply/tests.rs"]
mod tests;
