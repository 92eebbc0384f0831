//! Links: lookup, listing, state changes, bridge and veth creation, deletion.

use std::os::fd::AsRawFd;

use netlink_packet_core::{DecodeError, NlaBuffer, Parseable};
use netlink_packet_route::link::{
    InfoBridge, InfoData, InfoKind, InfoVeth, LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo,
    LinkMessage, State,
};
use netlink_packet_route::RouteNetlinkMessage;
use rtnetlink::{LinkBridge, LinkMessageBuilder, LinkUnspec, LinkVeth};

use crate::error::{Error, Result};
use crate::link_delete::{self, Target};
use crate::netlink::{
    LinkSummaryReplies, Socket, NLM_F_CREATE, NLM_F_ECHO, NLM_F_EXCL, RTNLGRP_LINK,
};
use crate::netns::Netns;

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// A snapshot of one link, with the attributes plugins compare most often decoded.
#[derive(Debug, Clone)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND` ("bridge", "veth", "vxlan", "ifb"...); `None` for lo and physical NICs.
    pub kind: Option<String>,
    pub flags: LinkFlags,
    pub mtu: u32,
    /// Hardware address; empty when the link has none.
    pub mac: Vec<u8>,
    /// Controller (bridge) ifindex (`IFLA_MASTER`).
    pub master: Option<u32>,
    /// `IFLA_LINK`: for a veth, the peer's ifindex (in the peer's netns).
    pub link: Option<u32>,
    /// Set when `link` refers to another netns.
    pub link_netnsid: Option<i32>,
    pub operstate: State,
    pub txqueuelen: u32,
    pub promiscuity: u32,
    /// `IFLA_IFALIAS` (`ip link set dev X alias ...`), when set.
    pub alias: Option<String>,
    /// The message's header and the attributes decoded above (a lookup's replies carry only
    /// those: `LinkSummaryReplies`), for their details, e.g. the kind's `IFLA_INFO_DATA`.
    pub message: LinkMessage,
}

/// Asks the kernel to leave the traffic counters out of its link replies: nothing here reads
/// them, and filling them in (a veth sums per-CPU counters of both ends) and decoding them
/// is work on every lookup.
fn skip_stats(msg: &mut LinkMessage) {
    for a in &mut msg.attributes {
        if let LinkAttribute::ExtMask(masks) = a {
            masks.push(LinkExtentMask::SkipStats);
            return;
        }
    }
    msg.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
}

impl Link {
    /// Decodes a kernel RTM_NEWLINK message.
    pub fn from_message(message: LinkMessage) -> Link {
        let mut link = Link {
            index: message.header.index,
            name: String::new(),
            kind: None,
            flags: message.header.flags,
            mtu: 0,
            mac: Vec::new(),
            master: None,
            link: None,
            link_netnsid: None,
            operstate: State::Unknown,
            txqueuelen: 0,
            promiscuity: 0,
            alias: None,
            message: LinkMessage::default(),
        };
        for attr in &message.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Mtu(m) => link.mtu = *m,
                LinkAttribute::Address(a) => link.mac = a.clone(),
                LinkAttribute::Controller(m) if *m != 0 => link.master = Some(*m),
                LinkAttribute::Link(l) if *l != 0 => link.link = Some(*l),
                LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(*id),
                LinkAttribute::OperState(s) => link.operstate = *s,
                LinkAttribute::TxQueueLen(q) => link.txqueuelen = *q,
                LinkAttribute::Promiscuity(p) => link.promiscuity = *p,
                LinkAttribute::IfAlias(a) if !a.is_empty() => link.alias = Some(a.clone()),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        if let LinkInfo::Kind(k) = info {
                            link.kind = Some(k.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        link.message = message;
        link
    }

    /// IFF_UP (administratively up).
    pub fn is_up(&self) -> bool {
        self.flags.contains(LinkFlags::Up)
    }

    /// IFF_PROMISC as requested on the link itself.
    pub fn is_promisc(&self) -> bool {
        self.flags.contains(LinkFlags::Promisc)
    }

    pub fn is_kind(&self, kind: &str) -> bool {
        self.kind.as_deref() == Some(kind)
    }

    /// MAC as lowercase `aa:bb:cc:dd:ee:ff` (empty string if none).
    pub fn mac_string(&self) -> String {
        format_mac(&self.mac)
    }

    /// Bridge sub-attributes (`IFLA_INFO_DATA` of a bridge), empty for other kinds.
    pub fn bridge_info(&self) -> Vec<InfoBridge> {
        self.info_data()
    }

    /// The kind's `IFLA_INFO_DATA` sub-attributes as `T` (`InfoBridge`, `InfoVxlan`...),
    /// decoded on this call: lookups keep the data as bytes (see `link_reply`). Empty when
    /// the link has none.
    pub fn info_data<T>(&self) -> Vec<T>
    where
        T: for<'a> Parseable<NlaBuffer<&'a [u8]>>,
    {
        crate::link_reply::info_data(&self.message, |nla| T::parse(nla))
    }

    /// [`Link::info_data`] for sub-attributes whose decoding depends on the kind
    /// (`InfoIpTunnel`).
    pub fn info_data_with<T>(
        &self,
        parse: impl Fn(&NlaBuffer<&[u8]>) -> std::result::Result<T, DecodeError>,
    ) -> Vec<T> {
        crate::link_reply::info_data(&self.message, parse)
    }

    /// `net.ipv6.conf.<link>.accept_ra` as the kernel reported it with the link; `None`
    /// when the reply carried no IPv6 configuration (see `link_reply::ipv6_accept_ra`).
    pub fn ipv6_accept_ra(&self) -> Option<i32> {
        crate::link_reply::ipv6_accept_ra(&self.message)
    }

    /// The link the kernel would report for `message` (e.g. a creation request built here):
    /// the message encoded and decoded as a lookup's reply is, for tests.
    #[cfg(any(test, feature = "fake"))]
    pub fn as_reported(message: &LinkMessage) -> Link {
        use netlink_packet_core::Emitable;
        let mut bytes = vec![0u8; message.buffer_len()];
        message.emit(&mut bytes);
        match crate::link_reply::decode_link(&bytes, crate::link_reply::LinkView::Summary) {
            Ok(decoded) => Link::from_message(decoded),
            Err(e) => panic!("a link message built here does not decode: {e}"),
        }
    }
}

/// Formats a hardware address as lowercase colon-separated hex.
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses a 6-byte MAC written `aa:bb:cc:dd:ee:ff` or `aa-bb-cc-dd-ee-ff` (any case).
pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let bad = || {
        Error::invalid(
            format!("invalid MAC address {s:?}"),
            "expected 6 hex octets like 02:42:ac:11:00:02",
        )
    };
    let sep = if s.contains('-') { '-' } else { ':' };
    let mut out = [0u8; 6];
    let mut parts = s.split(sep);
    for slot in out.iter_mut() {
        let p = parts.next().ok_or_else(bad)?;
        if p.len() != 2 {
            return Err(bad());
        }
        *slot = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(out)
}

/// Checks the kernel's interface name rules up front (1..=15 bytes, no `/`, `:` or whitespace,
/// not `.`/`..`) so bad names get a clear error instead of EINVAL.
pub fn validate_ifname(name: &str) -> Result<()> {
    let ctx = || format!("invalid interface name {name:?}");
    if name.is_empty() {
        return Err(Error::invalid(ctx(), "name is empty"));
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(Error::invalid(
            ctx(),
            "interface name should be less than 16 characters",
        ));
    }
    if name == "." || name == ".." {
        return Err(Error::invalid(ctx(), "name cannot be . or .."));
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c == '\0')
    {
        return Err(Error::invalid(
            ctx(),
            "name contains /, :, NUL or whitespace",
        ));
    }
    Ok(())
}

/// Options for [`Socket::ensure_bridge`].
#[derive(Debug, Clone, Default)]
pub struct BridgeOptions {
    pub mtu: Option<u32>,
    /// Sent as IFLA_BR_VLAN_FILTERING at creation when set.
    pub vlan_filtering: Option<bool>,
    pub txqueuelen: Option<u32>,
    pub mac: Option<[u8; 6]>,
}

/// One veth pair: `name` in the socket's netns, `peer_name` in `peer_netns`
/// (created there directly, no move) or next to it when `None`.
#[derive(Debug, Clone, Default)]
pub struct VethSpec<'a> {
    pub name: &'a str,
    pub peer_name: &'a str,
    pub peer_netns: Option<&'a Netns>,
    /// Applied to both ends.
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    pub peer_mac: Option<[u8; 6]>,
    /// Enslave `name` to this bridge ifindex at creation.
    pub master: Option<u32>,
    /// Bring `name` up at creation.
    pub up: bool,
    /// Bring `peer_name` up at creation.
    pub peer_up: bool,
}

impl Socket {
    /// The link called `name`. A missing link is [`Error::Kernel`] with ENODEV (`is_not_found()`).
    pub fn link_by_name(&mut self, name: &str) -> Result<Link> {
        let ctx = || format!("failed to find link {name:?}");
        validate_ifname(name).map_err(|e| e.context(ctx()))?;
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.one_link(msg).map_err(|e| e.context(ctx()))
    }

    /// The link with ifindex `index` (ENODEV when missing).
    pub fn link_by_index(&mut self, index: u32) -> Result<Link> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.one_link(msg)
            .map_err(|e| e.context(format!("failed to find link with index {index}")))
    }

    /// Like [`Socket::link_by_name`] but `Ok(None)` when it does not exist.
    pub fn find_link(&mut self, name: &str) -> Result<Option<Link>> {
        match self.link_by_name(name) {
            Ok(l) => Ok(Some(l)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn one_link(&mut self, mut msg: LinkMessage) -> Result<Link> {
        skip_stats(&mut msg);
        let replies =
            self.request_as::<LinkSummaryReplies>(RouteNetlinkMessage::GetLink(msg), 0)?;
        replies
            .into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(Link::from_message(l)),
                _ => None,
            })
            .ok_or_else(|| Error::protocol("", "no RTM_NEWLINK in reply"))
    }

    /// Every link in the socket's netns.
    pub fn links(&mut self) -> Result<Vec<Link>> {
        self.dump_links(LinkMessage::default())
            .map_err(|e| e.context("failed to list links"))
    }

    /// Links enslaved to the controller `master` (kernel-side filter).
    pub fn links_with_master(&mut self, master: u32) -> Result<Vec<Link>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::Controller(master));
        let links = self
            .dump_links(msg)
            .map_err(|e| e.context(format!("failed to list ports of link {master}")))?;
        // Old kernels ignore the filter: apply it again here.
        Ok(links
            .into_iter()
            .filter(|l| l.master == Some(master))
            .collect())
    }

    /// Links of one kind, e.g. `"ifb"` (kernel-side filter, so the reply does not grow with
    /// the node's other links).
    pub fn links_of_kind(&mut self, kind: &str) -> Result<Vec<Link>> {
        let mut msg = LinkMessage::default();
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::from(kind),
            )]));
        let links = self
            .dump_links(msg)
            .map_err(|e| e.context(format!("failed to list {kind} links")))?;
        // Old kernels ignore the filter: apply it again here.
        Ok(links.into_iter().filter(|l| l.is_kind(kind)).collect())
    }

    fn dump_links(&mut self, mut msg: LinkMessage) -> Result<Vec<Link>> {
        skip_stats(&mut msg);
        self.dump_map_as::<LinkSummaryReplies, _>(RouteNetlinkMessage::GetLink(msg), 0, |m| match m
        {
            RouteNetlinkMessage::NewLink(l) => Some(Link::from_message(l)),
            _ => None,
        })
    }

    /// Name of `index` for error messages (best effort, only called on failure paths).
    pub(crate) fn describe_link(&mut self, index: u32) -> String {
        match self.link_by_index(index) {
            Ok(l) => l.name,
            Err(_) => format!("link with index {index}"),
        }
    }

    /// Sends an RTM_SETLINK built by `f` from an index-only builder, with `what` as context.
    pub fn set_link(
        &mut self,
        index: u32,
        what: &str,
        f: impl FnOnce(LinkMessageBuilder<LinkUnspec>) -> LinkMessageBuilder<LinkUnspec>,
    ) -> Result<()> {
        let msg = f(LinkUnspec::new_with_index(index)).build();
        match self.request_ack(RouteNetlinkMessage::SetLink(msg), 0) {
            Ok(()) => Ok(()),
            Err(e) => {
                let name = self.describe_link(index);
                Err(e.context(format!("failed to {what} {name}")))
            }
        }
    }

    /// `ip link set dev X up`
    pub fn set_link_up(&mut self, index: u32) -> Result<()> {
        self.set_link(index, "set up", |b| b.up())
    }

    /// `ip link set dev X down`
    pub fn set_link_down(&mut self, index: u32) -> Result<()> {
        self.set_link(index, "set down", |b| b.down())
    }

    /// `ip link set dev X mtu N`
    pub fn set_link_mtu(&mut self, index: u32, mtu: u32) -> Result<()> {
        self.set_link(index, &format!("set MTU {mtu} on"), |b| b.mtu(mtu))
    }

    /// `ip link set dev X alias TEXT`: the kernel ignores an alias given at creation, so it is
    /// set afterwards.
    pub fn set_link_alias(&mut self, index: u32, alias: &str) -> Result<()> {
        self.set_link(index, &format!("set alias {alias:?} on"), |b| {
            b.append_extra_attribute(LinkAttribute::IfAlias(alias.to_string()))
        })
    }

    /// `ip link set dev X address MAC`
    pub fn set_link_mac(&mut self, index: u32, mac: &[u8; 6]) -> Result<()> {
        self.set_link(index, &format!("set MAC {} on", format_mac(mac)), |b| {
            b.address(mac.to_vec())
        })
    }

    /// `ip link set dev X master M`
    pub fn set_link_master(&mut self, index: u32, master: u32) -> Result<()> {
        self.set_link(index, &format!("attach to controller {master}"), |b| {
            b.controller(master)
        })
    }

    /// `ip link set dev X nomaster`
    pub fn set_link_nomaster(&mut self, index: u32) -> Result<()> {
        self.set_link(index, "detach from its controller", |b| b.nocontroller())
    }

    /// `ip link set dev X promisc on|off`
    pub fn set_link_promisc(&mut self, index: u32, on: bool) -> Result<()> {
        let what = if on {
            "set promiscuous mode on"
        } else {
            "set promiscuous mode off"
        };
        self.set_link(index, what, |b| b.promiscuous(on))
    }

    /// `ip link set dev X txqueuelen N`
    pub fn set_link_txqueuelen(&mut self, index: u32, qlen: u32) -> Result<()> {
        self.set_link(index, &format!("set txqueuelen {qlen} on"), |b| {
            b.txqueuelen(qlen)
        })
    }

    /// `ip link set dev X name NEW`
    pub fn set_link_name(&mut self, index: u32, name: &str) -> Result<()> {
        validate_ifname(name)?;
        self.set_link(index, &format!("rename to {name:?}"), |b| b.name(name))
    }

    /// Moves the link into `ns` (it goes down and loses its addresses there).
    pub fn set_link_netns(&mut self, index: u32, ns: &Netns) -> Result<()> {
        let what = format!("move to netns {:?}", ns.path().display().to_string());
        self.set_link(index, &what, |b| b.setns_by_fd(ns.as_raw_fd()))
    }

    /// Sends a ready-made RTM_NEWLINK with CREATE|EXCL (for link kinds built elsewhere:
    /// vxlan, ifb... via the rtnetlink builders).
    pub fn create_link(&mut self, msg: LinkMessage) -> Result<()> {
        let name = msg
            .attributes
            .iter()
            .find_map(|a| {
                if let LinkAttribute::IfName(n) = a {
                    Some(n.clone())
                } else {
                    None
                }
            })
            .unwrap_or_default();
        self.request_ack(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| e.context(format!("failed to create link {name:?}")))
    }

    /// Deletes the link (ENODEV if it is already gone). In a plugin process this returns
    /// once the kernel has unlisted the link, not once it has freed it (`link_delete`).
    pub fn delete_link(&mut self, index: u32) -> Result<()> {
        let msg = LinkUnspec::new_with_index(index).build();
        match link_delete::delete(self, msg, Target::Index(index)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let name = self.describe_link(index);
                Err(e.context(format!("failed to delete link {name}")))
            }
        }
    }

    /// Deletes the link called `name`; `Ok(false)` when there was nothing to delete. Returns
    /// as [`Socket::delete_link`] does.
    pub fn delete_link_by_name(&mut self, name: &str) -> Result<bool> {
        validate_ifname(name).map_err(|e| e.context(format!("failed to delete link {name:?}")))?;
        let msg = LinkUnspec::new_with_name(name).build();
        match link_delete::delete(self, msg, Target::Name(name)) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e.context(format!("failed to delete link {name:?}"))),
        }
    }

    /// Returns the bridge `name`, creating it (down) when missing. An existing link of another
    /// kind is an error `"x" already exists but is not a bridge`. An existing bridge is
    /// returned as is: options only apply at creation.
    pub fn ensure_bridge(&mut self, name: &str, opts: &BridgeOptions) -> Result<Link> {
        let ctx = || format!("failed to create bridge {name:?}");
        if let Some(link) = self.find_link(name).map_err(|e| e.context(ctx()))? {
            return check_is_bridge(link).map_err(|e| e.context(ctx()));
        }
        let mut b = LinkMessageBuilder::<LinkBridge>::new(name);
        if let Some(mtu) = opts.mtu {
            b = b.mtu(mtu);
        }
        if let Some(q) = opts.txqueuelen {
            b = b.txqueuelen(q);
        }
        if let Some(mac) = opts.mac {
            b = b.address(mac.to_vec());
        }
        if let Some(v) = opts.vlan_filtering {
            b = b.vlan_filtering(v);
        }
        match self.request_ack(
            RouteNetlinkMessage::NewLink(b.build()),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            // EEXIST: created concurrently by another ADD; fine if it is a bridge.
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e.context(ctx())),
        }
        let link = self.link_by_name(name).map_err(|e| e.context(ctx()))?;
        check_is_bridge(link).map_err(|e| e.context(ctx()))
    }

    /// Creates a veth pair in one RTM_NEWLINK; the peer is born inside `spec.peer_netns`,
    /// so a peer name that exists only in this netns does not clash. EEXIST when either
    /// name is taken in its netns.
    pub fn create_veth(&mut self, spec: &VethSpec<'_>) -> Result<()> {
        let request = veth_request(spec)?;
        self.request_ack(request, NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| e.context(veth_context(spec)))
    }

    /// [`Socket::create_veth`], returning both ends as the kernel described them while it
    /// created them, so that no lookup has to ask again (each lookup takes the RTNL lock,
    /// which every concurrent ADD on the node queues for): this end from the request's echo,
    /// and the peer from the announcement its netns made, read on `peer_watch`, a socket in
    /// the peer's netns that listens to link announcements for the request's duration.
    ///
    /// `None` when the kernel did not describe both (it honours NLM_F_ECHO on RTM_NEWLINK
    /// since Linux 6.3), or when the two do not name each other: ask with a lookup then. The
    /// peer is announced before this end is registered, so its announcement has no
    /// `IFLA_LINK`, and this end is announced before it joins `spec.master`: the links
    /// returned carry both as a lookup shows them.
    pub fn create_veth_described(
        &mut self,
        spec: &VethSpec<'_>,
        peer_watch: &mut Socket,
    ) -> Result<Option<(Link, Link)>> {
        let request = veth_request(spec)?;
        let watching = peer_watch.join_group(RTNLGRP_LINK).is_ok();
        let replies =
            self.request_as::<LinkSummaryReplies>(request, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO);
        // The peer's announcement was queued before the kernel acknowledged the request.
        let announced = if watching {
            let _ = peer_watch.leave_group(RTNLGRP_LINK);
            peer_watch
                .pending_as::<LinkSummaryReplies>()
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let replies = replies.map_err(|e| e.context(veth_context(spec)))?;
        let new_link = |m: RouteNetlinkMessage, name: &str| match m {
            RouteNetlinkMessage::NewLink(l) => {
                Some(Link::from_message(l)).filter(|l| l.name == name)
            }
            _ => None,
        };
        let here = replies.into_iter().find_map(|m| new_link(m, spec.name));
        // The last announcement of that name: anything earlier was another link's.
        let peer = announced
            .into_iter()
            .rev()
            .find_map(|m| new_link(m, spec.peer_name));
        Ok(match (here, peer) {
            (Some(mut here), Some(mut peer)) if here.link == Some(peer.index) => {
                peer.link = Some(here.index);
                // The kernel enslaves the new end after announcing it, within the request
                // that succeeded.
                here.master = spec.master.or(here.master);
                Some((here, peer))
            }
            _ => None,
        })
    }

    /// The peer ifindex of veth `index` (in the peer's netns).
    pub fn veth_peer_index(&mut self, index: u32) -> Result<u32> {
        let link = self.link_by_index(index)?;
        if !link.is_kind("veth") {
            return Err(Error::invalid(
                format!("failed to find the peer of {}", link.name),
                "link is not a veth",
            ));
        }
        link.link.ok_or_else(|| {
            Error::protocol(
                format!("failed to find the peer of {}", link.name),
                "veth has no IFLA_LINK",
            )
        })
    }
}

fn veth_context(spec: &VethSpec<'_>) -> String {
    format!(
        "failed to create veth pair {:?}/{:?}",
        spec.name, spec.peer_name
    )
}

/// The RTM_NEWLINK that creates the pair `spec` describes.
fn veth_request(spec: &VethSpec<'_>) -> Result<RouteNetlinkMessage> {
    validate_ifname(spec.name).map_err(|e| e.context(veth_context(spec)))?;
    validate_ifname(spec.peer_name).map_err(|e| e.context(veth_context(spec)))?;

    let mut peer = one_queue(LinkUnspec::new_with_name(spec.peer_name));
    if let Some(ns) = spec.peer_netns {
        peer = peer.setns_by_fd(ns.as_raw_fd());
    }
    if let Some(mtu) = spec.mtu {
        peer = peer.mtu(mtu);
    }
    if let Some(mac) = spec.peer_mac {
        peer = peer.address(mac.to_vec());
    }
    if spec.peer_up {
        peer = peer.up();
    }

    let mut host = one_queue(
        LinkVeth::new(spec.name, spec.peer_name)
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer.build()))),
    );
    if let Some(mtu) = spec.mtu {
        host = host.mtu(mtu);
    }
    if let Some(mac) = spec.mac {
        host = host.address(mac.to_vec());
    }
    if let Some(master) = spec.master {
        host = host.controller(master);
    }
    if spec.up {
        host = host.up();
    }
    Ok(RouteNetlinkMessage::NewLink(host.build()))
}

/// One TX and one RX queue, asked for explicitly for each end of a veth. Without them the
/// kernel (6.7 and later) allocates a queue per possible CPU and then, the device registered,
/// cuts the active count back to one, and each cut waits for an expedited RCU grace period
/// while holding the RTNL lock: two per veth, serialising every concurrent ADD on the node.
/// The pair ends up with the same single active queue either way (as before 6.7), only without
/// the room to raise it later with `ethtool -L`.
fn one_queue<T>(b: LinkMessageBuilder<T>) -> LinkMessageBuilder<T> {
    b.append_extra_attribute(LinkAttribute::NumTxQueues(1))
        .append_extra_attribute(LinkAttribute::NumRxQueues(1))
}

fn check_is_bridge(link: Link) -> Result<Link> {
    if link.is_kind("bridge") {
        Ok(link)
    } else {
        let detail = format!("{:?} already exists but is not a bridge", link.name);
        Err(Error::conflict("", detail))
    }
}

/// Kind string of a link kind, as reported in [`Link::kind`].
pub fn kind_name(kind: &InfoKind) -> String {
    kind.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip() {
        let mac = parse_mac("0A:58:0a:F4:00:01").unwrap();
        assert_eq!(mac, [0x0a, 0x58, 0x0a, 0xf4, 0, 1]);
        assert_eq!(format_mac(&mac), "0a:58:0a:f4:00:01");
        assert_eq!(parse_mac("0a-58-0a-f4-00-01").unwrap(), mac);
        for bad in [
            "",
            "0a:58",
            "0a:58:0a:f4:00:01:02",
            "zz:58:0a:f4:00:01",
            "a:58:0a:f4:00:01",
            "0a:58:0a:f4:00:1g",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ifname_rules() {
        assert!(validate_ifname("eth0").is_ok());
        assert!(validate_ifname("a23456789012345").is_ok());
        for bad in ["", ".", "..", "a234567890123456", "a/b", "a:b", "a b"] {
            assert!(validate_ifname(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn decodes_link_message() {
        let mut msg = LinkUnspec::new_with_index(7)
            .name("veth0")
            .mtu(1450)
            .address(vec![2, 0, 0, 0, 0, 1])
            .up()
            .controller(3)
            .build();
        msg.attributes.push(LinkAttribute::Link(9));
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Veth,
            )]));
        let link = Link::from_message(msg);
        assert_eq!(
            (link.index, link.name.as_str(), link.mtu),
            (7, "veth0", 1450)
        );
        assert_eq!(link.mac_string(), "02:00:00:00:00:01");
        assert_eq!((link.master, link.link), (Some(3), Some(9)));
        assert!(link.is_up() && link.is_kind("veth") && !link.is_promisc());
    }
}
