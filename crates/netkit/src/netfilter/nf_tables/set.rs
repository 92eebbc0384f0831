//! Anonymous sets, as nft creates them for `{ a, b, ... }` in a rule: a constant set named
//! `__set%d` (the kernel picks the number) that lives as long as the rule bound to it, found
//! by the rule's lookup through the set id within the same batch.
//!
//! Sets of prefixes or ranges are interval sets; their elements are the linearized interval
//! boundaries nft sends: overlapping and adjacent intervals merged, a leading `0` end marker
//! unless the first interval starts at 0, each interval's start followed by the end marker
//! `end + 1` (none when the interval reaches the top of the key space: the start is then
//! flagged open in its userdata).

use super::attr::Writer;
use super::msg::{msg_type, Family};
use super::socket::{Batch, NLM_F_CREATE};

/// The name nft gives anonymous sets; the kernel replaces `%d`.
pub const ANON_SET_NAME: &str = "__set%d";

const NFT_SET_ANONYMOUS: u32 = 0x1;
const NFT_SET_CONSTANT: u32 = 0x2;
pub(crate) const NFT_SET_INTERVAL: u32 = 0x4;
pub(crate) const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;

pub(crate) const NFTA_SET_TABLE: u16 = 1;
pub(crate) const NFTA_SET_NAME: u16 = 2;
pub(crate) const NFTA_SET_FLAGS: u16 = 3;
pub(crate) const NFTA_SET_KEY_TYPE: u16 = 4;
pub(crate) const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_DESC: u16 = 9;
const NFTA_SET_DESC_SIZE: u16 = 1;
pub(crate) const NFTA_SET_ID: u16 = 10;
pub(crate) const NFTA_SET_USERDATA: u16 = 13;
pub(crate) const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub(crate) const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub(crate) const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub(crate) const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
pub(crate) const NFTA_SET_ELEM_KEY: u16 = 1;
pub(crate) const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
pub(crate) const NFTA_DATA_VALUE: u16 = 1;

/// libnftnl's set userdata types.
pub(crate) const UDATA_SET_KEYBYTEORDER: u8 = 0;
const UDATA_SET_MERGE_ELEMENTS: u8 = 2;
const UDATA_SET_KEY_TYPEOF: u8 = 3;
const UDATA_TYPEOF_EXPR: u8 = 0;
const UDATA_TYPEOF_DATA: u8 = 1;
/// libnftnl's set element userdata: `NFTNL_UDATA_SET_ELEM_FLAGS`, `..._F_INTERVAL_OPEN`.
const UDATA_SET_ELEM_FLAGS: u8 = 1;
const SET_ELEM_F_INTERVAL_OPEN: u32 = 1;

/// nft's datatypes of set keys (`enum datatypes`).
pub mod key_type {
    pub const IPADDR: u32 = 7;
    pub const IP6ADDR: u32 = 8;
    pub const INET_PROTOCOL: u32 = 12;
    pub const INET_SERVICE: u32 = 13;
    pub const MARK: u32 = 19;
    pub const CT_STATE: u32 = 26;
    pub const FIB_ADDR: u32 = 38;
    pub const IFNAME: u32 = 41;
}

/// How nft records the key of a set (its `typeof`) in the set's userdata, so `nft list`
/// prints elements as the expression they match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOf {
    /// A header field: nft's protocol description id and template index.
    Payload {
        desc: u32,
        field: u32,
    },
    Meta {
        key: u32,
    },
    Ct {
        key: u32,
    },
    Fib {
        result: u32,
        flags: u32,
    },
}

impl KeyOf {
    /// nft's `enum expr_types` value and the expression's own userdata values.
    fn parts(self) -> (u32, Vec<u32>) {
        match self {
            KeyOf::Payload { desc, field } => (7, vec![desc, field]),
            KeyOf::Meta { key } => (9, vec![key]),
            // Direction: none (-1).
            KeyOf::Ct { key } => (12, vec![key, u32::MAX]),
            KeyOf::Fib { result, flags } => (26, vec![result, flags]),
        }
    }

    /// Payload keys are in network byte order; meta, ct and fib values in host order.
    fn big_endian(self) -> bool {
        matches!(self, KeyOf::Payload { .. })
    }
}

fn udata_u32(out: &mut Vec<u8>, kind: u8, v: u32) {
    out.extend_from_slice(&[kind, 4]);
    out.extend_from_slice(&v.to_ne_bytes());
}

fn udata_nested(out: &mut Vec<u8>, kind: u8, inner: &[u8]) {
    out.extend_from_slice(&[kind, inner.len() as u8]);
    out.extend_from_slice(inner);
}

/// One element: its key, whether it is an interval's end marker, and whether (as an
/// interval start) its interval is open-ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub key: Vec<u8>,
    pub interval_end: bool,
    pub open: bool,
}

impl Element {
    pub fn key(key: Vec<u8>) -> Element {
        Element {
            key,
            interval_end: false,
            open: false,
        }
    }
}

/// An anonymous constant set and its elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnonSet {
    pub family: Family,
    pub table: String,
    /// Unique within the batch; the rule's lookup names it.
    pub id: u32,
    pub key_type: u32,
    pub key_len: u32,
    pub key_of: KeyOf,
    pub interval: bool,
    /// What nft announces as the set's size (`NFTA_SET_DESC_SIZE`).
    pub size: u32,
    pub elements: Vec<Element>,
}

impl AnonSet {
    fn flags(&self) -> u32 {
        let mut f = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT;
        if self.interval {
            f |= NFT_SET_INTERVAL;
        }
        f
    }

    fn userdata(&self) -> Vec<u8> {
        let mut u = Vec::new();
        udata_u32(
            &mut u,
            UDATA_SET_KEYBYTEORDER,
            if self.key_of.big_endian() { 2 } else { 1 },
        );
        if self.interval {
            udata_u32(&mut u, UDATA_SET_MERGE_ELEMENTS, 1);
        }
        let (expr, values) = self.key_of.parts();
        let mut data = Vec::new();
        for (i, v) in values.into_iter().enumerate() {
            udata_u32(&mut data, i as u8, v);
        }
        let mut typeof_ = Vec::new();
        udata_u32(&mut typeof_, UDATA_TYPEOF_EXPR, expr);
        udata_nested(&mut typeof_, UDATA_TYPEOF_DATA, &data);
        udata_nested(&mut u, UDATA_SET_KEY_TYPEOF, &typeof_);
        u
    }
}

impl Batch {
    /// Creates the anonymous set and its elements (NEWSET, NEWSETELEM), as nft does before
    /// the rule that looks it up.
    pub fn add_anon_set(&mut self, s: &AnonSet) -> &mut Self {
        let mut w = Writer::new();
        w.string(NFTA_SET_TABLE, &s.table)
            .string(NFTA_SET_NAME, ANON_SET_NAME)
            .be32(NFTA_SET_FLAGS, s.flags())
            .be32(NFTA_SET_KEY_TYPE, s.key_type)
            .be32(NFTA_SET_KEY_LEN, s.key_len)
            .be32(NFTA_SET_ID, s.id)
            .nested(NFTA_SET_DESC, |d| {
                d.be32(NFTA_SET_DESC_SIZE, s.size);
            })
            .bytes(NFTA_SET_USERDATA, &s.userdata());
        let what = format!("add set {} {} (anonymous)", s.family.name(), s.table);
        self.push(msg_type::NEWSET, NLM_F_CREATE, s.family, w, what);
        if s.elements.is_empty() {
            return self;
        }
        let mut w = Writer::new();
        w.string(NFTA_SET_ELEM_LIST_TABLE, &s.table)
            .string(NFTA_SET_ELEM_LIST_SET, ANON_SET_NAME)
            .be32(NFTA_SET_ELEM_LIST_SET_ID, s.id)
            .nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
                for (i, e) in s.elements.iter().enumerate() {
                    list.nested(i as u16 + 1, |el| {
                        if e.interval_end {
                            el.be32(NFTA_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
                        }
                        el.nested(NFTA_SET_ELEM_KEY, |k| {
                            k.bytes(NFTA_DATA_VALUE, &e.key);
                        });
                        if e.open {
                            let mut u = Vec::new();
                            udata_u32(&mut u, UDATA_SET_ELEM_FLAGS, SET_ELEM_F_INTERVAL_OPEN);
                            el.bytes(NFTA_SET_ELEM_USERDATA, &u);
                        }
                    });
                }
            });
        let what = format!(
            "add elements to an anonymous set of {} {}",
            s.family.name(),
            s.table
        );
        self.push(msg_type::NEWSETELEM, NLM_F_CREATE, s.family, w, what);
        self
    }
}

/// `v + 1` for a big-endian number; `None` when it overflows.
fn successor(v: &[u8]) -> Option<Vec<u8>> {
    let mut out = v.to_vec();
    for b in out.iter_mut().rev() {
        if *b == 0xff {
            *b = 0;
        } else {
            *b += 1;
            return Some(out);
        }
    }
    None
}

/// The elements of an interval set holding the inclusive big-endian ranges `[lo, hi]` (all
/// of one length), and the size nft announces for it.
pub fn interval_elements(mut ranges: Vec<(Vec<u8>, Vec<u8>)>) -> (Vec<Element>, u32) {
    ranges.sort();
    let mut merged: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (lo, hi) in ranges {
        if let Some(last) = merged.last_mut() {
            // Overlapping or adjacent: one interval.
            let touches = successor(&last.1).is_none_or(|next| lo <= next);
            if touches {
                if hi > last.1 {
                    last.1 = hi;
                }
                continue;
            }
        }
        merged.push((lo, hi));
    }
    let mut elements = Vec::new();
    let mut size = 0;
    if let Some((first, _)) = merged.first() {
        if first.iter().any(|b| *b != 0) {
            elements.push(Element {
                key: vec![0; first.len()],
                interval_end: true,
                open: false,
            });
            size += 1;
        }
    }
    for (lo, hi) in merged {
        size += 2;
        match successor(&hi) {
            Some(end) => {
                elements.push(Element::key(lo));
                elements.push(Element {
                    key: end,
                    interval_end: true,
                    open: false,
                });
            }
            None => elements.push(Element {
                key: lo,
                interval_end: false,
                open: true,
            }),
        }
    }
    (elements, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Vec<u8> {
        s.parse::<std::net::Ipv4Addr>().unwrap().octets().to_vec()
    }

    #[test]
    fn intervals_as_nft_linearizes_them() {
        // { 10.0.0.0/8, 11.0.0.0/8, 10.1.0.0/16, 12.0.0.1-12.0.0.5, 255.255.255.0/24 }
        let (e, size) = interval_elements(vec![
            (v4("10.0.0.0"), v4("10.255.255.255")),
            (v4("11.0.0.0"), v4("11.255.255.255")),
            (v4("10.1.0.0"), v4("10.1.255.255")),
            (v4("12.0.0.1"), v4("12.0.0.5")),
            (v4("255.255.255.0"), v4("255.255.255.255")),
        ]);
        assert_eq!(size, 7);
        let keys: Vec<(Vec<u8>, bool, bool)> = e
            .into_iter()
            .map(|e| (e.key, e.interval_end, e.open))
            .collect();
        assert_eq!(
            keys,
            [
                (v4("0.0.0.0"), true, false),
                (v4("10.0.0.0"), false, false),
                (v4("12.0.0.0"), true, false),
                (v4("12.0.0.1"), false, false),
                (v4("12.0.0.6"), true, false),
                (v4("255.255.255.0"), false, true),
            ]
        );
        // Starting at 0: no leading end marker.
        let (e, size) = interval_elements(vec![(v4("0.0.0.0"), v4("0.255.255.255"))]);
        assert_eq!((e.len(), size), (2, 2));
        assert_eq!(successor(&[0xff, 0xff]), None);
        assert_eq!(successor(&[0x00, 0xff]), Some(vec![1, 0]));
    }
}
