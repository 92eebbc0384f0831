//! Traffic control: TBF and ingress qdiscs, a u32 match-all filter redirecting to another
//! link (the IFB pattern), IFB links, and reading all of it back for CHECK.
//!
//! netlink-packet-route has no typed TBF support, so its `TCA_OPTIONS` are encoded and
//! decoded here by hand (`struct tc_tbf_qopt`, `TCA_TBF_RATE64`), in native byte order.

use netlink_packet_core::{DefaultNla, Emitable, Nla, NlaBuffer, NlasIterator, NLM_F_DUMP};
use netlink_packet_route::link::LinkFlags;
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionGeneric, TcActionMirror, TcActionMirrorOption,
    TcActionOption, TcActionType, TcAttribute, TcFilterU32, TcFilterU32Option, TcHandle, TcMessage,
    TcMirror, TcMirrorActionType, TcOption, TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;
use rtnetlink::LinkIfb;

use crate::error::{Error, Result};
use crate::link::{validate_ifname, Link};
use crate::netlink::{FilterReplies, QdiscReplies, Socket, NLM_F_CREATE, NLM_F_EXCL};

/// `ETH_P_ALL`: a filter protocol matching every frame (host byte order here; the wire
/// carries it in network order inside `tcm_info`).
pub const ETH_P_ALL: u16 = 0x0003;
/// Where psched clock parameters are published.
pub const PSCHED_PATH: &str = "/proc/net/psched";
/// psched "time units" per second: buffers and latencies are in microseconds before the
/// conversion to ticks.
pub const TIME_UNITS_PER_SEC: f64 = 1_000_000.0;

/// `ffff:` — the handle of the ingress qdisc (and the parent of its filters).
pub const INGRESS_HANDLE: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0,
};

const TCA_OPTIONS: u16 = 2;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// `sizeof(struct tc_tbf_qopt)`: two 12-byte `tc_ratespec` + limit, buffer, mtu.
const TBF_QOPT_LEN: usize = 36;

/// Microseconds per psched tick, computed from `/proc/net/psched` the way iproute2 does.
pub fn psched_tick_in_usec() -> Result<f64> {
    let text = std::fs::read_to_string(PSCHED_PATH)
        .map_err(|e| Error::io(format!("failed to read {PSCHED_PATH}"), e))?;
    parse_psched(&text).ok_or_else(|| {
        Error::protocol(
            format!("failed to parse {PSCHED_PATH}"),
            format!("{:?}", text.trim()),
        )
    })
}

/// Parses the `t2us us2t clock_res hz` hex words of `/proc/net/psched`.
pub fn parse_psched(text: &str) -> Option<f64> {
    let mut words = text
        .split_whitespace()
        .map(|w| u32::from_str_radix(w, 16).ok());
    let mut t2us = f64::from(words.next()??);
    let us2t = f64::from(words.next()??);
    let clock_res = words.next()??;
    if us2t == 0.0 {
        return None;
    }
    // Kernels with a nanosecond clock advertise t2us=1000 for old tc binaries; it means 1.
    if clock_res == 1_000_000_000 {
        t2us = us2t;
    }
    let tick = t2us / us2t * (f64::from(clock_res) / TIME_UNITS_PER_SEC);
    (tick.is_finite() && tick > 0.0).then_some(tick)
}

/// Token bucket parameters as carried by `TCA_TBF_PARMS` (+ `TCA_TBF_RATE64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Bytes per second.
    pub rate: u64,
    /// Queue limit in bytes.
    pub limit: u32,
    /// Bucket size as transmission time, in psched ticks.
    pub buffer: u32,
}

impl Tbf {
    /// `TCA_OPTIONS` payload: `TCA_TBF_PARMS`, plus `TCA_TBF_RATE64` when the rate does not
    /// fit the 32-bit field (rate >= 2^32 bytes/s, about 34.4 Gbit/s).
    pub fn encode(&self) -> Vec<TcOption> {
        let needs_rate64 = self.rate > u64::from(u32::MAX);
        let rate32 = if needs_rate64 {
            u32::MAX
        } else {
            self.rate as u32
        };
        let mut qopt = [0u8; TBF_QOPT_LEN];
        // rate: tc_ratespec {cell_log, linklayer, overhead, cell_align, mpu} left zero, then rate.
        qopt[8..12].copy_from_slice(&rate32.to_ne_bytes());
        // peakrate (12..24) stays zero: no peak rate.
        qopt[24..28].copy_from_slice(&self.limit.to_ne_bytes());
        qopt[28..32].copy_from_slice(&self.buffer.to_ne_bytes());
        // mtu (32..36) zero: only meaningful with a peak rate.
        let mut out = vec![TcOption::Other(DefaultNla::new(
            TCA_TBF_PARMS,
            qopt.to_vec(),
        ))];
        if needs_rate64 {
            out.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                self.rate.to_ne_bytes().to_vec(),
            )));
        }
        out
    }

    /// Decodes the `TCA_OPTIONS` of a dumped TBF qdisc.
    pub fn decode(options: &[TcOption]) -> Option<Tbf> {
        let mut parms: Option<Vec<u8>> = None;
        let mut rate64: Option<u64> = None;
        let mut take = |kind: u16, value: &[u8]| match kind {
            TCA_TBF_PARMS => parms = Some(value.to_vec()),
            TCA_TBF_RATE64 => {
                rate64 = value
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
            }
            _ => {}
        };
        for opt in options {
            let TcOption::Other(nla) = opt else { continue };
            let mut value = vec![0u8; nla.value_len()];
            nla.emit_value(&mut value);
            if nla.kind() == TCA_OPTIONS {
                // netlink-packet-route hands an unknown kind's options over as one blob.
                for inner in NlasIterator::new(value.as_slice()).flatten() {
                    take(inner.kind(), inner.value());
                }
            } else {
                take(nla.kind(), &value);
            }
        }
        let p = parms?;
        if p.len() < TBF_QOPT_LEN {
            return None;
        }
        let word = |at: usize| u32::from_ne_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
        Some(Tbf {
            rate: rate64.unwrap_or(u64::from(word(8))),
            limit: word(24),
            buffer: word(28),
        })
    }
}

/// One qdisc read back from the kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Qdisc {
    pub ifindex: u32,
    pub handle: TcHandle,
    pub parent: TcHandle,
    pub kind: String,
    /// Decoded parameters when `kind == "tbf"`.
    pub tbf: Option<Tbf>,
}

impl Qdisc {
    pub fn is_root(&self) -> bool {
        self.parent == TcHandle::ROOT
    }

    pub fn is_ingress(&self) -> bool {
        self.kind == "ingress" && self.parent == TcHandle::INGRESS
    }
}

/// One action attached to a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterAction {
    Mirred {
        mode: TcMirrorActionType,
        ifindex: u32,
        verdict: TcActionType,
    },
    /// Any other action kind, by name.
    Other(String),
}

/// A u32 filter node read back from the kernel (hash-table entries are skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct U32Filter {
    pub parent: TcHandle,
    pub priority: u16,
    /// Host byte order (e.g. [`ETH_P_ALL`]).
    pub protocol: u16,
    pub handle: u32,
    pub classid: Option<TcHandle>,
    pub selector: TcU32Selector,
    pub actions: Vec<FilterAction>,
}

impl U32Filter {
    /// A terminal selector whose keys all have a zero mask: matches every packet.
    pub fn matches_all(&self) -> bool {
        self.selector.flags.contains(TcU32SelectorFlags::Terminal)
            && self.selector.keys.iter().all(|k| k.mask == 0)
    }
}

/// `tcm_info` of a filter: priority in the upper half, protocol (network order) in the lower.
fn filter_info(priority: u16, protocol: u16) -> u32 {
    (u32::from(priority) << 16) | u32::from(protocol.to_be())
}

fn split_filter_info(info: u32) -> (u16, u16) {
    ((info >> 16) as u16, u16::from_be((info & 0xffff) as u16))
}

fn tc_message(ifindex: u32, parent: TcHandle, handle: TcHandle) -> Result<TcMessage> {
    let index = i32::try_from(ifindex)
        .map_err(|_| Error::invalid("", format!("ifindex {ifindex} out of range")))?;
    let mut m = TcMessage::with_index(index);
    m.header.parent = parent;
    m.header.handle = handle;
    Ok(m)
}

fn show_handle(h: TcHandle) -> String {
    format!("{:x}:{:x}", h.major, h.minor)
}

impl Socket {
    /// `tc qdisc add dev <ifindex> parent <parent> handle <handle> tbf ...` (EEXIST if a
    /// qdisc with that handle/parent is already there).
    pub fn add_tbf(
        &mut self,
        ifindex: u32,
        parent: TcHandle,
        handle: TcHandle,
        tbf: &Tbf,
    ) -> Result<()> {
        let ctx = |s: &mut Socket| {
            format!(
                "failed to add tbf qdisc {} on {}",
                show_handle(handle),
                s.describe_link(ifindex)
            )
        };
        let mut m = match tc_message(ifindex, parent, handle) {
            Ok(m) => m,
            Err(e) => return Err(e.context(ctx(self))),
        };
        m.attributes.push(TcAttribute::Kind("tbf".into()));
        m.attributes.push(TcAttribute::Options(tbf.encode()));
        match self.request_ack(
            RouteNetlinkMessage::NewQueueDiscipline(m),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(()) => Ok(()),
            Err(e) => Err(e.context(ctx(self))),
        }
    }

    /// `tc qdisc add dev <ifindex> handle ffff: ingress`.
    pub fn add_ingress_qdisc(&mut self, ifindex: u32) -> Result<()> {
        let ctx = |s: &mut Socket| {
            format!(
                "failed to add ingress qdisc on {}",
                s.describe_link(ifindex)
            )
        };
        let mut m = match tc_message(ifindex, TcHandle::INGRESS, INGRESS_HANDLE) {
            Ok(m) => m,
            Err(e) => return Err(e.context(ctx(self))),
        };
        m.attributes.push(TcAttribute::Kind("ingress".into()));
        match self.request_ack(
            RouteNetlinkMessage::NewQueueDiscipline(m),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(()) => Ok(()),
            Err(e) => Err(e.context(ctx(self))),
        }
    }

    /// Deletes the qdisc `handle` under `parent` (ENOENT/EINVAL-free when it exists).
    pub fn delete_qdisc(&mut self, ifindex: u32, parent: TcHandle, handle: TcHandle) -> Result<()> {
        let ctx = |s: &mut Socket| {
            format!(
                "failed to delete qdisc {} on {}",
                show_handle(handle),
                s.describe_link(ifindex)
            )
        };
        let m = match tc_message(ifindex, parent, handle) {
            Ok(m) => m,
            Err(e) => return Err(e.context(ctx(self))),
        };
        match self.request_ack(RouteNetlinkMessage::DelQueueDiscipline(m), 0) {
            Ok(()) => Ok(()),
            Err(e) => Err(e.context(ctx(self))),
        }
    }

    /// `tc filter add dev <ifindex> parent <parent> protocol all prio <priority> u32 match u32 0 0
    /// flowid <classid> action mirred egress redirect dev <target>`: one match-all node with a
    /// single redirect action (verdict "stolen").
    pub fn add_u32_redirect(
        &mut self,
        ifindex: u32,
        parent: TcHandle,
        priority: u16,
        classid: TcHandle,
        target: u32,
    ) -> Result<()> {
        let ctx = |s: &mut Socket| {
            format!(
                "failed to add u32 redirect filter on {} to {}",
                s.describe_link(ifindex),
                s.describe_link(target)
            )
        };
        let mut m = match tc_message(ifindex, parent, TcHandle::UNSPEC) {
            Ok(m) => m,
            Err(e) => return Err(e.context(ctx(self))),
        };
        m.header.info = filter_info(priority, ETH_P_ALL);

        let mut selector = TcU32Selector::default();
        selector.flags = TcU32SelectorFlags::Terminal;
        selector.nkeys = 1;
        selector.keys = vec![TcU32Key::default()];

        let mut generic = TcActionGeneric::default();
        generic.action = TcActionType::Stolen;
        let mut mirror = TcMirror::default();
        mirror.generic = generic;
        mirror.eaction = TcMirrorActionType::EgressRedir;
        mirror.ifindex = target;
        let mut action = TcAction::default();
        action.attributes = vec![
            TcActionAttribute::Kind(TcActionMirror::KIND.to_string()),
            TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(
                mirror,
            ))]),
        ];

        m.attributes
            .push(TcAttribute::Kind(TcFilterU32::KIND.into()));
        m.attributes.push(TcAttribute::Options(vec![
            TcOption::U32(TcFilterU32Option::Selector(selector)),
            TcOption::U32(TcFilterU32Option::ClassId(classid)),
            TcOption::U32(TcFilterU32Option::Action(vec![action])),
        ]));
        match self.request_ack(
            RouteNetlinkMessage::NewTrafficFilter(m),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(()) => Ok(()),
            Err(e) => Err(e.context(ctx(self))),
        }
    }

    /// Every qdisc of link `ifindex` (root, children and ingress).
    pub fn qdiscs(&mut self, ifindex: u32) -> Result<Vec<Qdisc>> {
        let ctx = |s: &mut Socket| format!("failed to list qdiscs of {}", s.describe_link(ifindex));
        let m = match tc_message(ifindex, TcHandle::UNSPEC, TcHandle::UNSPEC) {
            Ok(m) => m,
            Err(e) => return Err(e.context(ctx(self))),
        };
        let replies = match self
            .request_as::<QdiscReplies>(RouteNetlinkMessage::GetQueueDiscipline(m), NLM_F_DUMP)
        {
            Ok(r) => r,
            Err(e) => return Err(e.context(ctx(self))),
        };
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewQueueDiscipline(q) => Some(q),
                _ => None,
            })
            // Old kernels ignore the ifindex filter of a dump.
            .filter(|q| q.header.index >= 0 && q.header.index as u32 == ifindex)
            .map(|q| decode_qdisc(ifindex, q))
            .collect())
    }

    /// The u32 filter nodes under `parent` on link `ifindex` (hash tables left out).
    pub fn u32_filters(&mut self, ifindex: u32, parent: TcHandle) -> Result<Vec<U32Filter>> {
        let ctx = |s: &mut Socket| {
            format!(
                "failed to list filters of {} under {}",
                s.describe_link(ifindex),
                show_handle(parent)
            )
        };
        let m = match tc_message(ifindex, parent, TcHandle::UNSPEC) {
            Ok(m) => m,
            Err(e) => return Err(e.context(ctx(self))),
        };
        let replies = match self
            .request_as::<FilterReplies>(RouteNetlinkMessage::GetTrafficFilter(m), NLM_F_DUMP)
        {
            Ok(r) => r,
            Err(e) => return Err(e.context(ctx(self))),
        };
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewTrafficFilter(f) => decode_u32_filter(f),
                _ => None,
            })
            .collect())
    }

    /// Creates an IFB link, administratively up, with the given MTU and txqueuelen
    /// (EEXIST when the name is taken). Returns the new link.
    pub fn create_ifb(&mut self, name: &str, mtu: u32, txqueuelen: u32) -> Result<Link> {
        validate_ifname(name).map_err(|e| e.context(format!("failed to create ifb {name:?}")))?;
        let msg = LinkIfb::new(name)
            .mtu(mtu)
            .txqueuelen(txqueuelen)
            .up()
            .build();
        self.create_link(msg)?;
        let link = self.link_by_name(name)?;
        if !link.flags.contains(LinkFlags::Up) {
            return Err(Error::conflict(
                format!("failed to create ifb {name:?}"),
                "link did not come up",
            ));
        }
        Ok(link)
    }
}

pub(crate) fn decode_qdisc(ifindex: u32, q: TcMessage) -> Qdisc {
    let mut kind = String::new();
    let mut options: &[TcOption] = &[];
    for attr in &q.attributes {
        match attr {
            TcAttribute::Kind(k) => kind = k.clone(),
            TcAttribute::Options(o) => options = o,
            _ => {}
        }
    }
    let tbf = if kind == "tbf" {
        Tbf::decode(options)
    } else {
        None
    };
    Qdisc {
        ifindex,
        handle: q.header.handle,
        parent: q.header.parent,
        kind,
        tbf,
    }
}

pub(crate) fn decode_u32_filter(f: TcMessage) -> Option<U32Filter> {
    let mut is_u32 = false;
    let mut selector = None;
    let mut classid = None;
    let mut actions = Vec::new();
    for attr in &f.attributes {
        match attr {
            TcAttribute::Kind(k) => is_u32 = k == TcFilterU32::KIND,
            TcAttribute::Options(opts) => {
                for opt in opts {
                    match opt {
                        TcOption::U32(TcFilterU32Option::Selector(s)) => selector = Some(s.clone()),
                        TcOption::U32(TcFilterU32Option::ClassId(c)) => classid = Some(*c),
                        TcOption::U32(TcFilterU32Option::Action(acts)) => {
                            actions = acts.iter().map(decode_action).collect()
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // Hash-table entries (`fh 800:`) carry no selector.
    let selector = selector.filter(|_| is_u32)?;
    let (priority, protocol) = split_filter_info(f.header.info);
    Some(U32Filter {
        parent: f.header.parent,
        priority,
        protocol,
        handle: u32::from(f.header.handle),
        classid,
        selector,
        actions,
    })
}

fn decode_action(a: &TcAction) -> FilterAction {
    let mut kind = String::new();
    let mut mirred = None;
    for attr in &a.attributes {
        match attr {
            TcActionAttribute::Kind(k) => kind = k.clone(),
            TcActionAttribute::Options(opts) => {
                for o in opts {
                    if let TcActionOption::Mirror(TcActionMirrorOption::Parms(p)) = o {
                        mirred = Some(FilterAction::Mirred {
                            mode: p.eaction,
                            ifindex: p.ifindex,
                            verdict: p.generic.action,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    match mirred {
        Some(m) if kind == TcActionMirror::KIND => m,
        _ => FilterAction::Other(kind),
    }
}

/// Parses a raw `TCA_OPTIONS` blob of a TBF (used by tests and tools that dump by hand).
pub fn decode_tbf_options_blob(blob: &[u8]) -> Option<Tbf> {
    let nla = NlaBuffer::new_checked(blob).ok()?;
    let default = DefaultNla::new(nla.kind(), nla.value().to_vec());
    Tbf::decode(&[TcOption::Other(default)])
}

/// Emits an option list the way it goes on the wire (for tests).
pub fn encode_options_blob(options: &[TcOption]) -> Vec<u8> {
    let mut out = vec![0u8; options.buffer_len()];
    options.emit(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psched_of_a_modern_kernel() {
        assert_eq!(
            parse_psched("000003e8 00000040 000f4240 3b9aca00\n"),
            Some(15.625)
        );
        // Nanosecond clock resolution: the compatibility rule makes one tick one microsecond * factor.
        assert_eq!(
            parse_psched("000003e8 00000040 3b9aca00 3b9aca00"),
            Some(1000.0)
        );
        assert_eq!(parse_psched("garbage"), None);
        assert_eq!(parse_psched("000003e8 00000000 000f4240"), None);
        assert_eq!(parse_psched("000003e8"), None);
    }

    #[test]
    fn tbf_round_trips_through_options() {
        let tbf = Tbf {
            rate: 1_250_000,
            limit: 41_250,
            buffer: 125_000,
        };
        let opts = tbf.encode();
        assert_eq!(opts.len(), 1);
        assert_eq!(Tbf::decode(&opts), Some(tbf));
        // As the kernel's dump arrives: one TCA_OPTIONS blob with nested attributes.
        let nested = encode_options_blob(&opts);
        let blob = DefaultNla::new(TCA_OPTIONS, nested);
        assert_eq!(Tbf::decode(&[TcOption::Other(blob)]), Some(tbf));
    }

    #[test]
    fn tbf_qopt_layout_is_native_endian_36_bytes() {
        let tbf = Tbf {
            rate: 0x0102_0304,
            limit: 0x0a0b_0c0d,
            buffer: 0x1112_1314,
        };
        let TcOption::Other(nla) = &tbf.encode()[0] else {
            panic!()
        };
        let mut v = vec![0u8; nla.value_len()];
        nla.emit_value(&mut v);
        assert_eq!(nla.kind(), TCA_TBF_PARMS);
        assert_eq!(v.len(), 36);
        assert_eq!(&v[8..12], &0x0102_0304u32.to_ne_bytes());
        assert_eq!(&v[24..28], &0x0a0b_0c0du32.to_ne_bytes());
        assert_eq!(&v[28..32], &0x1112_1314u32.to_ne_bytes());
        assert!(v[..8]
            .iter()
            .chain(&v[12..24])
            .chain(&v[32..])
            .all(|b| *b == 0));
    }

    #[test]
    fn rate64_only_at_and_above_two_to_the_32_bytes() {
        let below = Tbf {
            rate: u64::from(u32::MAX),
            limit: 1,
            buffer: 1,
        };
        assert_eq!(below.encode().len(), 1);
        let at = Tbf {
            rate: 1 << 32,
            limit: 1,
            buffer: 1,
        };
        let opts = at.encode();
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[1].kind(), TCA_TBF_RATE64);
        assert_eq!(Tbf::decode(&opts), Some(at));
        let fifty_gbit = Tbf {
            rate: 6_250_000_000,
            limit: 156_262_500,
            buffer: 31,
        };
        assert_eq!(Tbf::decode(&fifty_gbit.encode()), Some(fifty_gbit));
    }

    #[test]
    fn filter_info_packs_priority_and_network_order_protocol() {
        let info = filter_info(1, ETH_P_ALL);
        assert_eq!(info >> 16, 1);
        assert_eq!((info & 0xffff) as u16, ETH_P_ALL.to_be());
        assert_eq!(split_filter_info(info), (1, ETH_P_ALL));
    }

    #[test]
    fn garbage_tbf_options_are_rejected() {
        assert_eq!(Tbf::decode(&[]), None);
        assert_eq!(
            Tbf::decode(&[TcOption::Other(DefaultNla::new(
                TCA_TBF_PARMS,
                vec![1, 2, 3]
            ))]),
            None
        );
        assert_eq!(decode_tbf_options_blob(&[0xff]), None);
    }
}
