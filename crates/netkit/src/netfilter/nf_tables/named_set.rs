//! Named sets and verdict maps: sets that live in a table on their own (created, filled,
//! emptied and deleted by name), looked up by rules through their name.
//!
//! * Keys are one datatype (`ipv4_addr`) or a concatenation (`ipv4_addr . inet_proto .
//!   inet_service`): nft's concatenated datatype id is the fields' ids shifted in 6 bits at a
//!   time, and each field takes a whole number of 32-bit registers, so a key's bytes are each
//!   field's bytes padded with zeros to 4 bytes ([`concat_key`]).
//! * A verdict map (`type ipv4_addr : verdict`) is a set flagged MAP whose data type is the
//!   verdict: each element carries a verdict (`jump <chain>`), which the rule's `vmap` lookup
//!   loads into the verdict register.
//! * Element lists are split over several NEWSETELEM/DELSETELEM messages: a netlink attribute
//!   holds at most 64 KiB, and the element list is one attribute.

use super::attr::Writer;
use super::expr::Verdict;
use super::msg::{msg_type, Family};
use super::set::{
    interval_elements, key_type, Element, NFTA_DATA_VALUE, NFTA_SET_ELEM_FLAGS, NFTA_SET_ELEM_KEY,
    NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_SET_ID,
    NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_FLAGS, NFTA_SET_ID, NFTA_SET_KEY_LEN, NFTA_SET_KEY_TYPE,
    NFTA_SET_NAME, NFTA_SET_TABLE, NFTA_SET_USERDATA, NFT_SET_ELEM_INTERVAL_END, NFT_SET_INTERVAL,
    UDATA_SET_KEYBYTEORDER,
};
use super::socket::{Batch, NLM_F_CREATE};

// The attributes anonymous sets share come from the set module; these are a named set's own.
const NFT_SET_MAP: u32 = 0x8;
/// `NFT_DATA_VERDICT`: the data type of a verdict map.
const NFT_DATA_VERDICT: u32 = 0xffff_ff00;

const NFTA_SET_DATA_TYPE: u16 = 6;
const NFTA_SET_DATA_LEN: u16 = 7;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;
/// The key byte order in libnftnl's set userdata (2: big endian, as addresses are).
const BYTEORDER_BIG_ENDIAN: u32 = 2;
/// Bits per field in a concatenated datatype id (nft's `TYPE_BITS`).
const CONCAT_TYPE_BITS: u32 = 6;
/// `nft_verdict` in the kernel: what a verdict map's data length is.
const VERDICT_DATA_LEN: u32 = 16;
/// Bytes of element list per message: below the 64 KiB an attribute can hold, with room for
/// the message's other attributes.
const ELEMENT_BYTES_PER_MESSAGE: usize = 48 * 1024;

/// The key datatype of a concatenation of `fields` (nft datatype ids, in order).
pub fn concat_type(fields: &[u32]) -> u32 {
    fields
        .iter()
        .fold(0, |acc, f| (acc << CONCAT_TYPE_BITS) | f)
}

/// The key of a concatenation: each field's bytes zero-padded to a multiple of 4 bytes.
pub fn concat_key(fields: &[&[u8]]) -> Vec<u8> {
    let mut key = Vec::new();
    for f in fields {
        key.extend_from_slice(f);
        key.resize((key.len() + 3) & !3, 0);
    }
    key
}

/// The type of a set's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetKey {
    /// nft's datatype id (a concatenated one for concatenations).
    pub kind: u32,
    /// Bytes, with each concatenated field padded to 4.
    pub len: u32,
}

impl SetKey {
    pub const IPV4_ADDR: SetKey = SetKey {
        kind: key_type::IPADDR,
        len: 4,
    };
    pub const IPV6_ADDR: SetKey = SetKey {
        kind: key_type::IP6ADDR,
        len: 16,
    };

    /// `ipv4_addr . inet_proto . inet_service` (or `ipv6_addr . ...` with `v6`).
    pub fn addr_proto_port(v6: bool) -> SetKey {
        let (addr, len) = if v6 {
            (key_type::IP6ADDR, 16)
        } else {
            (key_type::IPADDR, 4)
        };
        SetKey {
            kind: concat_type(&[addr, key_type::INET_PROTOCOL, key_type::INET_SERVICE]),
            len: len + 4 + 4,
        }
    }
}

/// A named set (or, with `verdict_map`, a verdict map) of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedSet {
    pub family: Family,
    pub table: String,
    pub name: String,
    pub key: SetKey,
    /// `flags interval`: elements are ranges (see [`interval_elements`]).
    pub interval: bool,
    /// `: verdict`: each element maps its key to a verdict.
    pub verdict_map: bool,
    /// Unique within the batch: lets the same batch's rules and elements name a set the
    /// kernel has not created yet (the name alone works too, once the set is in the batch).
    pub id: u32,
}

/// One element of a verdict map: the key and the verdict it maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapElement {
    pub key: Vec<u8>,
    pub verdict: Verdict,
}

impl NamedSet {
    fn flags(&self) -> u32 {
        let mut f = 0;
        if self.interval {
            f |= NFT_SET_INTERVAL;
        }
        if self.verdict_map {
            f |= NFT_SET_MAP;
        }
        f
    }

    fn list_header(&self, w: &mut Writer) {
        w.string(NFTA_SET_ELEM_LIST_TABLE, &self.table)
            .string(NFTA_SET_ELEM_LIST_SET, &self.name)
            .be32(NFTA_SET_ELEM_LIST_SET_ID, self.id);
    }
}

/// One element as the kernel takes it: key, interval-end flag, verdict.
fn encode_element(w: &mut Writer, index: u16, key: &[u8], end: bool, verdict: Option<&Verdict>) {
    w.nested(index, |el| {
        if end {
            el.be32(NFTA_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
        }
        el.nested(NFTA_SET_ELEM_KEY, |k| {
            k.bytes(NFTA_DATA_VALUE, key);
        });
        if let Some(v) = verdict {
            el.nested(NFTA_SET_ELEM_DATA, |d| {
                d.nested(NFTA_DATA_VERDICT, |vd| {
                    vd.be32(NFTA_VERDICT_CODE, v.code() as u32);
                    if let Some(chain) = v.target() {
                        vd.string(NFTA_VERDICT_CHAIN, chain);
                    }
                });
            });
        }
    });
}

/// An element to encode: key, interval end, verdict.
type Encodable<'a> = (&'a [u8], bool, Option<&'a Verdict>);

impl Batch {
    /// `add set` / `add map`: creates the (empty) set.
    pub fn add_set(&mut self, s: &NamedSet) -> &mut Self {
        let mut w = Writer::new();
        w.string(NFTA_SET_TABLE, &s.table)
            .string(NFTA_SET_NAME, &s.name)
            .be32(NFTA_SET_FLAGS, s.flags())
            .be32(NFTA_SET_KEY_TYPE, s.key.kind)
            .be32(NFTA_SET_KEY_LEN, s.key.len);
        if s.verdict_map {
            w.be32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT)
                .be32(NFTA_SET_DATA_LEN, VERDICT_DATA_LEN);
        }
        w.be32(NFTA_SET_ID, s.id);
        let mut udata = vec![UDATA_SET_KEYBYTEORDER, 4];
        udata.extend_from_slice(&BYTEORDER_BIG_ENDIAN.to_ne_bytes());
        w.bytes(NFTA_SET_USERDATA, &udata);
        let what = format!("add set {} {} {}", s.family.name(), s.table, s.name);
        self.push(msg_type::NEWSET, NLM_F_CREATE, s.family, w, what);
        self
    }

    /// Sends `elements` in as many messages of `kind` as their size needs.
    fn element_messages(&mut self, s: &NamedSet, kind: u16, flags: u16, elements: &[Encodable]) {
        let verb = if kind == msg_type::NEWSETELEM {
            "add elements to"
        } else {
            "delete elements from"
        };
        let mut rest = elements;
        while !rest.is_empty() {
            let mut list = Writer::new();
            let mut taken = 0;
            for (i, (key, end, verdict)) in rest.iter().enumerate() {
                if list.buf.len() >= ELEMENT_BYTES_PER_MESSAGE {
                    break;
                }
                encode_element(&mut list, i as u16 + 1, key, *end, *verdict);
                taken += 1;
            }
            let mut w = Writer::new();
            s.list_header(&mut w);
            w.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |l| {
                l.buf.extend_from_slice(&list.buf)
            });
            let what = format!(
                "{verb} set {} {} {} ({taken} elements)",
                s.family.name(),
                s.table,
                s.name
            );
            self.push(kind, flags, s.family, w, what);
            rest = &rest[taken..];
        }
    }

    /// `add element`: keys into a set without intervals.
    pub fn add_elements(&mut self, s: &NamedSet, keys: &[Vec<u8>]) -> &mut Self {
        let list: Vec<Encodable> = keys.iter().map(|k| (k.as_slice(), false, None)).collect();
        self.element_messages(s, msg_type::NEWSETELEM, NLM_F_CREATE, &list);
        self
    }

    /// `add element` to an interval set: the inclusive big-endian ranges `[first, last]`,
    /// linearized as nft does (merged, with their end markers).
    pub fn add_intervals(&mut self, s: &NamedSet, ranges: Vec<(Vec<u8>, Vec<u8>)>) -> &mut Self {
        let (elements, _) = interval_elements(ranges);
        let list: Vec<Encodable> = elements
            .iter()
            .map(|e: &Element| (e.key.as_slice(), e.interval_end, None))
            .collect();
        self.element_messages(s, msg_type::NEWSETELEM, NLM_F_CREATE, &list);
        self
    }

    /// `add element` to a verdict map.
    pub fn add_map_elements(&mut self, s: &NamedSet, elements: &[MapElement]) -> &mut Self {
        let list: Vec<Encodable> = elements
            .iter()
            .map(|e| (e.key.as_slice(), false, Some(&e.verdict)))
            .collect();
        self.element_messages(s, msg_type::NEWSETELEM, NLM_F_CREATE, &list);
        self
    }

    /// `delete element`: keys out of a set or map without intervals (a map's element is
    /// named by its key alone).
    pub fn delete_elements(&mut self, s: &NamedSet, keys: &[Vec<u8>]) -> &mut Self {
        let list: Vec<Encodable> = keys.iter().map(|k| (k.as_slice(), false, None)).collect();
        self.element_messages(s, msg_type::DELSETELEM, 0, &list);
        self
    }

    /// `flush set`: every element out (a DELSETELEM naming no element).
    pub fn flush_set(&mut self, s: &NamedSet) -> &mut Self {
        let mut w = Writer::new();
        s.list_header(&mut w);
        let what = format!("flush set {} {} {}", s.family.name(), s.table, s.name);
        self.push(msg_type::DELSETELEM, 0, s.family, w, what);
        self
    }

    /// `delete set` (no rule may refer to it any more).
    pub fn delete_set(&mut self, family: Family, table: &str, name: &str) -> &mut Self {
        let mut w = Writer::new();
        w.string(NFTA_SET_TABLE, table).string(NFTA_SET_NAME, name);
        let what = format!("delete set {} {table} {name}", family.name());
        self.push(msg_type::DELSET, 0, family, w, what);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenations_as_nft_types_them() {
        // `type ipv4_addr . inet_proto . inet_service`, as `nft --debug=netlink` shows it.
        assert_eq!(SetKey::addr_proto_port(false).kind, 0x730d);
        assert_eq!(SetKey::addr_proto_port(false).len, 12);
        assert_eq!(SetKey::addr_proto_port(true).len, 24);
        assert_eq!(
            concat_key(&[&[10, 0, 0, 1], &[6], &[0, 80]]),
            [10, 0, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]
        );
    }

    #[test]
    fn large_element_lists_are_split() {
        let s = NamedSet {
            family: Family::Inet,
            table: "t".into(),
            name: "s".into(),
            key: SetKey::IPV4_ADDR,
            interval: false,
            verdict_map: false,
            id: 1,
        };
        let keys: Vec<Vec<u8>> = (0..20_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let mut b = Batch::new();
        b.add_set(&s).add_elements(&s, &keys);
        assert!(b.len() > 2, "{} messages", b.len());
        let bytes = b.encode(0);
        assert!(bytes.len() > 20_000 * 16);
        assert_eq!(b.encoded_len(), bytes.len());
    }
}
