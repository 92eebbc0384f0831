//! Entry points for the fuzz targets (`fuzz/` at the repository root), not an API: the
//! decoding of kernel replies exactly as the sockets do it, without a socket. Built with the
//! `fake` feature, which the fuzz crate enables (as the plugins' unit tests do).

use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::tc::TcMessage;
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::Result;
use crate::netlink::{
    AckOnly, AddressReplies, AnyReply, BridgePortReplies, FilterReplies, LinkSummaryReplies,
    NeighbourReplies, QdiscReplies, Replies, Reply, RouteReplies, RuleReplies,
};

/// Which request's reply a datagram is read as (each request decodes only its own types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    Any,
    AckOnly,
    LinkSummary,
    BridgePort,
    Address,
    Route,
    Rule,
    Neighbour,
    Qdisc,
    Filter,
}

impl ReplyKind {
    pub const ALL: [ReplyKind; 10] = [
        ReplyKind::Any,
        ReplyKind::AckOnly,
        ReplyKind::LinkSummary,
        ReplyKind::BridgePort,
        ReplyKind::Address,
        ReplyKind::Route,
        ReplyKind::Rule,
        ReplyKind::Neighbour,
        ReplyKind::Qdisc,
        ReplyKind::Filter,
    ];
}

/// One datagram of the reply to request `seq` (a dump when `dump`), read as the socket reads
/// it.
#[derive(Debug)]
pub struct Absorbed {
    /// The reply is complete (ACK, error or NLMSG_DONE seen).
    pub complete: bool,
    pub messages: Vec<RouteNetlinkMessage>,
    /// Messages of a type the request did not expect.
    pub skipped: usize,
    pub interrupted: bool,
}

/// Reads `datagram` as one datagram of the reply to request `seq` of kind `kind`.
pub fn absorb(kind: ReplyKind, seq: u32, dump: bool, datagram: &[u8]) -> Result<Absorbed> {
    fn run<R: Replies>(seq: u32, dump: bool, datagram: &[u8]) -> Result<Absorbed> {
        let mut reply = Reply::<R>::new(seq, dump);
        let complete = reply.absorb(datagram)?;
        Ok(Absorbed {
            complete,
            messages: reply.messages,
            skipped: reply.skipped,
            interrupted: reply.interrupted,
        })
    }
    match kind {
        ReplyKind::Any => run::<AnyReply>(seq, dump, datagram),
        ReplyKind::AckOnly => run::<AckOnly>(seq, dump, datagram),
        ReplyKind::LinkSummary => run::<LinkSummaryReplies>(seq, dump, datagram),
        ReplyKind::BridgePort => run::<BridgePortReplies>(seq, dump, datagram),
        ReplyKind::Address => run::<AddressReplies>(seq, dump, datagram),
        ReplyKind::Route => run::<RouteReplies>(seq, dump, datagram),
        ReplyKind::Rule => run::<RuleReplies>(seq, dump, datagram),
        ReplyKind::Neighbour => run::<NeighbourReplies>(seq, dump, datagram),
        ReplyKind::Qdisc => run::<QdiscReplies>(seq, dump, datagram),
        ReplyKind::Filter => run::<FilterReplies>(seq, dump, datagram),
    }
}

/// The outcome of a request without reply data, from the datagram carrying its ACK.
pub fn decode_ack(seq: u32, datagram: &[u8]) -> Result<()> {
    crate::netlink::decode_ack(seq, datagram)
}

/// A qdisc of a dump as [`crate::Socket::qdiscs`] reads it.
pub fn qdisc(ifindex: u32, message: TcMessage) -> crate::tc::Qdisc {
    crate::tc::decode_qdisc(ifindex, message)
}

/// A filter of a dump as [`crate::Socket::u32_filters`] reads it.
pub fn u32_filter(message: TcMessage) -> Option<crate::tc::U32Filter> {
    crate::tc::decode_u32_filter(message)
}

/// The RTM_NEWADDR body netkit sends for `address` on link `index`.
pub fn address_message(index: u32, address: ipnetwork::IpNetwork) -> AddressMessage {
    crate::addr::address_message(index, address)
}

/// One message of an nf_tables datagram: type, flags, sequence number, payload.
pub type NfMessage<'a> = (u16, u16, u32, &'a [u8]);

/// The messages of an nf_tables reply datagram, framed as the nf_tables socket frames them.
pub fn nf_messages(datagram: &[u8]) -> crate::netfilter::Result<Vec<NfMessage<'_>>> {
    Ok(crate::netfilter::nf_tables::socket::messages(datagram)?
        .into_iter()
        .map(|m| (m.kind, m.flags, m.seq, m.payload))
        .collect())
}

/// The attributes netkit sends for `rule` (what [`crate::netfilter::nf_tables::Rule::decode`]
/// reads back).
pub fn encode_rule(rule: &crate::netfilter::nf_tables::Rule) -> Vec<u8> {
    let mut w = crate::netfilter::nf_tables::attr::Writer::new();
    rule.encode(&mut w);
    w.buf
}

/// The attributes netkit sends for `chain`.
pub fn encode_chain(chain: &crate::netfilter::nf_tables::Chain) -> Vec<u8> {
    let mut w = crate::netfilter::nf_tables::attr::Writer::new();
    chain.encode(&mut w);
    w.buf
}
