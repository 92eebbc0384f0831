//! nft's match syntax, the part operators write in match-only rule fragments (portmap's
//! `conditionsV4`/`conditionsV6`), turned into expressions exactly as nft 1.0 linearizes
//! them, so a rule we write equals the one `nft` would have written from the same text.
//!
//! Understood, in any sequence, each with an optional `==`/`eq`/`!=`/`ne`:
//!
//! * `ip saddr|daddr`, `ip6 saddr|daddr`: an address, `ADDR/LEN`, `ADDR-ADDR`, or a set
//!   `{ ... }` of those;
//! * `ip protocol`, `ip6 nexthdr`, `meta l4proto`: a protocol name or number, or a set;
//! * `tcp|udp|sctp sport|dport`: a port, `LO-HI`, or a set (with nft's implicit
//!   `meta l4proto` dependency, and adjacent port matches merged into one load as nft does);
//! * `[meta] iifname|oifname`: a name, `"prefix*"`, or a set of names;
//! * `[meta] iif|oif`: an interface (resolved to its index now, as nft does);
//! * `[meta] mark [and|& MASK]`: a number, or a set of numbers;
//! * `ct state`: states (`a,b` tests the bits), or a set;
//! * `fib saddr|daddr type`: an address type, or a set.
//!
//! Anything else is [`SyntaxError::Unsupported`] (the caller may hand the text to nft
//! itself); what nft would certainly refuse is [`SyntaxError::Invalid`].

use std::net::IpAddr;

use super::build::{cmp, payload};
use super::expr::{
    ct_key, meta_key, BitwiseOp, CmpOp, Expr, PayloadBase, FIB_F_DADDR, FIB_F_SADDR,
    FIB_RESULT_ADDRTYPE, REG_1,
};
use super::msg::Family;
use super::set::{interval_elements, key_type, AnonSet, Element, KeyOf, ANON_SET_NAME};

/// Why a text was not turned into expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyntaxError {
    /// Valid nft perhaps, but not something this parser encodes.
    Unsupported(String),
    /// Something nft refuses too (an `ip6` match in an `ip` table, an unknown interface...).
    Invalid(String),
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyntaxError::Unsupported(m) => write!(f, "not understood: {m}"),
            SyntaxError::Invalid(m) => write!(f, "{m}"),
        }
    }
}

fn unsupported<T>(m: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError::Unsupported(m.into()))
}

fn invalid<T>(m: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError::Invalid(m.into()))
}

/// nft's protocol description ids and header field indices (set `typeof` userdata).
const DESC_UDP: u32 = 6;
const DESC_TCP: u32 = 8;
const DESC_SCTP: u32 = 10;
const DESC_IP: u32 = 12;
const DESC_IP6: u32 = 13;
const IP_PROTOCOL: u32 = 9;
const IP_SADDR: u32 = 11;
const IP_DADDR: u32 = 12;
const IP6_NEXTHDR: u32 = 6;
const IP6_SADDR: u32 = 8;
const IP6_DADDR: u32 = 9;
const TH_SPORT: u32 = 1;
const TH_DPORT: u32 = 2;
const IFNAMSIZ: usize = 16;
/// nft merges adjacent equal-op payload matches into one load of at most a register word.
const MERGE_MAX_LEN: u32 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Quoted(String),
    Open,
    Close,
    Comma,
}

fn lex(text: &str) -> Result<Vec<Tok>, SyntaxError> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '{' | '}' | ',' => {
                chars.next();
                out.push(match c {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    _ => Tok::Comma,
                });
            }
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) => s.push(c),
                        None => return invalid("unterminated quoted string"),
                    }
                }
                out.push(Tok::Quoted(s));
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '{' | '}' | ',' | '"') {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                out.push(Tok::Word(s));
            }
        }
    }
    Ok(out)
}

/// A relational operator as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Implicit,
    Eq,
    Neq,
}

impl Op {
    fn cmp(self) -> CmpOp {
        match self {
            Op::Neq => CmpOp::Neq,
            _ => CmpOp::Eq,
        }
    }
}

/// The right-hand side: one value (for `ct state`, possibly a comma list) or a set.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rhs {
    Values(Vec<String>),
    Set(Vec<String>),
}

/// One parsed statement, before linearization.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stmt {
    /// `payload == value`: what nft may merge with an adjacent one.
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
        op: CmpOp,
        value: Vec<u8>,
    },
    Exprs(Vec<Expr>),
    Lookup {
        load: Vec<Expr>,
        set: SetSpec,
        invert: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SetSpec {
    key_type: u32,
    key_len: u32,
    key_of: KeyOf,
    interval: bool,
    size: u32,
    elements: Vec<Element>,
}

/// A parsed, linearized list of matches for an `ip` (or, with `v6`, `ip6`) table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matches {
    stmts: Vec<Stmt>,
}

/// What the layer-4 protocol is known to be so far (nft's protocol context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum L4 {
    Unset,
    Known(u8),
    /// Set by a set of protocols: nft's next dependency decisions are not modelled.
    Opaque,
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    v6: bool,
    l4: L4,
    stmts: Vec<Stmt>,
}

fn meta(key: u32) -> Expr {
    Expr::Meta { key, dreg: REG_1 }
}

/// A value of an address, port or number field.
enum Value {
    Single(Vec<u8>),
    /// Network bytes and prefix length in bits.
    Prefix(Vec<u8>, u32),
    Range(Vec<u8>, Vec<u8>),
}

impl Value {
    /// As an inclusive range of big-endian bytes (for interval sets).
    fn bounds(&self) -> (Vec<u8>, Vec<u8>) {
        match self {
            Value::Single(v) => (v.clone(), v.clone()),
            Value::Range(a, b) => (a.clone(), b.clone()),
            Value::Prefix(net, bits) => {
                let mut hi = net.clone();
                for (i, b) in hi.iter_mut().enumerate() {
                    let first_bit = i as u32 * 8;
                    if first_bit + 8 <= *bits {
                        continue;
                    }
                    let keep = bits.saturating_sub(first_bit);
                    *b |= if keep == 0 { 0xff } else { 0xff >> keep };
                }
                (net.clone(), hi)
            }
        }
    }
}

fn mask_bytes(len: usize, bits: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let first = i as u32 * 8;
            if first + 8 <= bits {
                0xff
            } else if first >= bits {
                0
            } else {
                0xffu8 << (8 - (bits - first))
            }
        })
        .collect()
}

fn parse_ip(s: &str, v6: bool) -> Result<Vec<u8>, SyntaxError> {
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) if !v6 => Ok(a.octets().to_vec()),
        Ok(IpAddr::V6(a)) if v6 => Ok(a.octets().to_vec()),
        Ok(_) => invalid(format!("address {s} is of the other family")),
        // A host name, which nft would resolve: not ours to do.
        Err(_) => unsupported(format!("address {s:?}")),
    }
}

fn address(s: &str, v6: bool) -> Result<Value, SyntaxError> {
    let full = if v6 { 128 } else { 32 };
    if let Some((a, len)) = s.split_once('/') {
        let bits: u32 = match len.parse() {
            Ok(b) if b <= full => b,
            _ => return invalid(format!("bad prefix length in {s}")),
        };
        let mut net = parse_ip(a, v6)?;
        let mask = mask_bytes(net.len(), bits);
        for (b, m) in net.iter_mut().zip(&mask) {
            *b &= m;
        }
        return Ok(if bits == full {
            Value::Single(net)
        } else {
            Value::Prefix(net, bits)
        });
    }
    if let Some((a, b)) = s.split_once('-') {
        return range(parse_ip(a, v6)?, parse_ip(b, v6)?, s);
    }
    Ok(Value::Single(parse_ip(s, v6)?))
}

fn range(lo: Vec<u8>, hi: Vec<u8>, text: &str) -> Result<Value, SyntaxError> {
    if lo > hi {
        return invalid(format!("range {text} has negative size"));
    }
    if lo == hi {
        return unsupported(format!("single-value range {text}"));
    }
    Ok(Value::Range(lo, hi))
}

fn port(s: &str) -> Result<Value, SyntaxError> {
    let one = |p: &str| -> Result<Vec<u8>, SyntaxError> {
        match p.parse::<u16>() {
            Ok(v) => Ok(v.to_be_bytes().to_vec()),
            // Service names (`http`) come from nft's services database.
            Err(_) => unsupported(format!("port {p:?}")),
        }
    };
    match s.split_once('-') {
        Some((a, b)) => range(one(a)?, one(b)?, s),
        None => Ok(Value::Single(one(s)?)),
    }
}

fn protocol(s: &str) -> Result<u8, SyntaxError> {
    Ok(match s {
        "icmp" => 1,
        "igmp" => 2,
        "tcp" => 6,
        "udp" => 17,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        "icmpv6" => 58,
        "sctp" => 132,
        _ => match s.parse::<u8>() {
            Ok(v) => v,
            Err(_) => return unsupported(format!("protocol {s:?}")),
        },
    })
}

fn number_u32(s: &str) -> Result<u32, SyntaxError> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse::<u32>(),
    };
    parsed.or_else(|_| unsupported(format!("number {s:?}")))
}

fn ct_state(s: &str) -> Result<u32, SyntaxError> {
    Ok(match s {
        "invalid" => 1,
        "established" => 2,
        "related" => 4,
        "new" => 8,
        "untracked" => 64,
        _ => return unsupported(format!("ct state {s:?}")),
    })
}

fn addr_type(s: &str) -> Result<u32, SyntaxError> {
    Ok(match s {
        "unspec" => 0,
        "unicast" => 1,
        "local" => 2,
        "broadcast" => 3,
        "anycast" => 4,
        "multicast" => 5,
        "blackhole" => 6,
        "unreachable" => 7,
        "prohibit" => 8,
        _ => return unsupported(format!("address type {s:?}")),
    })
}

/// An interface name as nft compares it: the name NUL-padded to IFNAMSIZ, or for
/// `prefix*` just the prefix.
fn ifname_value(s: &str, allow_wildcard: bool) -> Result<Vec<u8>, SyntaxError> {
    let (name, wildcard) = match s.strip_suffix('*') {
        Some(prefix) => (prefix, true),
        None => (s, false),
    };
    if name.is_empty()
        || name.len() >= IFNAMSIZ
        || name.contains(['*', '\\'])
        || (wildcard && !allow_wildcard)
    {
        return unsupported(format!("interface name {s:?}"));
    }
    let mut v = name.as_bytes().to_vec();
    if !wildcard {
        v.resize(IFNAMSIZ, 0);
    }
    Ok(v)
}

fn ifindex(s: &str) -> Result<u32, SyntaxError> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let Ok(name) = std::ffi::CString::new(s) else {
        return invalid(format!("interface {s:?} does not exist"));
    };
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return invalid(format!("interface {s:?} does not exist"));
    }
    Ok(index)
}

impl Parser {
    fn peek_word(&self) -> Option<&str> {
        match self.toks.get(self.pos) {
            Some(Tok::Word(w)) => Some(w),
            _ => None,
        }
    }

    fn word(&mut self, what: &str) -> Result<String, SyntaxError> {
        match self.toks.get(self.pos) {
            Some(Tok::Word(w)) => {
                self.pos += 1;
                Ok(w.clone())
            }
            _ => unsupported(format!("expected {what}")),
        }
    }

    fn op(&mut self) -> Result<Op, SyntaxError> {
        let op = match self.peek_word() {
            Some("==" | "eq") => Op::Eq,
            Some("!=" | "ne") => Op::Neq,
            Some("<" | ">" | "<=" | ">=" | "lt" | "gt" | "le" | "ge") => {
                return unsupported("ordering operators")
            }
            _ => return Ok(Op::Implicit),
        };
        self.pos += 1;
        Ok(op)
    }

    /// A value token (word or quoted string).
    fn value(&mut self) -> Result<String, SyntaxError> {
        match self.toks.get(self.pos) {
            Some(Tok::Word(w)) | Some(Tok::Quoted(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => unsupported("expected a value"),
        }
    }

    /// `VALUE`, `VALUE,VALUE...` (only where `list` allows it) or `{ VALUE, ... }`.
    fn rhs(&mut self, list: bool) -> Result<Rhs, SyntaxError> {
        if self.toks.get(self.pos) == Some(&Tok::Open) {
            self.pos += 1;
            let mut items = Vec::new();
            loop {
                match self.toks.get(self.pos) {
                    Some(Tok::Close) => {
                        self.pos += 1;
                        break;
                    }
                    Some(Tok::Comma) => self.pos += 1,
                    Some(Tok::Word(_)) | Some(Tok::Quoted(_)) => items.push(self.value()?),
                    _ => return unsupported("unterminated set"),
                }
            }
            if items.is_empty() {
                return unsupported("empty set");
            }
            return Ok(if items.len() == 1 {
                Rhs::Values(items)
            } else {
                Rhs::Set(items)
            });
        }
        let mut items = vec![self.value()?];
        while list && self.toks.get(self.pos) == Some(&Tok::Comma) {
            self.pos += 1;
            items.push(self.value()?);
        }
        Ok(Rhs::Values(items))
    }

    fn single(rhs: Rhs) -> Result<String, SyntaxError> {
        match rhs {
            Rhs::Values(mut v) if v.len() == 1 => Ok(v.remove(0)),
            _ => unsupported("a set here"),
        }
    }

    fn lookup(&mut self, load: Vec<Expr>, op: Op, set: SetSpec) {
        self.stmts.push(Stmt::Lookup {
            load,
            set,
            invert: op == Op::Neq,
        });
    }

    /// A payload field matched against addresses/ports: value, prefix, range or set.
    fn field_match(
        &mut self,
        field: (PayloadBase, u32, u32),
        op: Op,
        rhs: Rhs,
        parse: impl Fn(&str) -> Result<Value, SyntaxError>,
        set_key: (u32, KeyOf),
    ) -> Result<(), SyntaxError> {
        let (base, offset, len) = field;
        let items = match rhs {
            Rhs::Values(v) => {
                let value = parse(&Self::single(Rhs::Values(v))?)?;
                let load = payload(base, offset, len);
                match value {
                    Value::Single(v) => self.stmts.push(Stmt::Payload {
                        base,
                        offset,
                        len,
                        op: op.cmp(),
                        value: v,
                    }),
                    Value::Prefix(net, bits) if bits > 0 && bits % 8 == 0 => {
                        let n = bits / 8;
                        self.stmts.push(Stmt::Exprs(vec![
                            payload(base, offset, n),
                            cmp(op.cmp(), net[..n as usize].to_vec()),
                        ]));
                    }
                    Value::Prefix(net, bits) => self.stmts.push(Stmt::Exprs(vec![
                        load,
                        Expr::Bitwise {
                            sreg: REG_1,
                            dreg: REG_1,
                            op: BitwiseOp::IMPLIED,
                            mask: mask_bytes(net.len(), bits),
                            xor: vec![0; net.len()],
                        },
                        cmp(op.cmp(), net),
                    ])),
                    Value::Range(lo, hi) if op == Op::Neq => self.stmts.push(Stmt::Exprs(vec![
                        load,
                        Expr::Range {
                            sreg: REG_1,
                            op: CmpOp::Neq,
                            from: lo,
                            to: hi,
                        },
                    ])),
                    Value::Range(lo, hi) => self.stmts.push(Stmt::Exprs(vec![
                        load,
                        cmp(CmpOp::Gte, lo),
                        cmp(CmpOp::Lte, hi),
                    ])),
                }
                return Ok(());
            }
            Rhs::Set(items) => items,
        };
        let values = items
            .iter()
            .map(|i| parse(i))
            .collect::<Result<Vec<_>, _>>()?;
        let interval = values.iter().any(|v| !matches!(v, Value::Single(_)));
        let (elements, size) = if interval {
            interval_elements(values.iter().map(Value::bounds).collect())
        } else {
            // Plain elements, in the order written (as nft sends them).
            let keys: Vec<Element> = values.iter().map(|v| Element::key(v.bounds().0)).collect();
            let n = keys.len() as u32;
            (keys, n)
        };
        let (key_type, key_of) = set_key;
        let set = SetSpec {
            key_type,
            key_len: len,
            key_of,
            interval,
            size,
            elements,
        };
        self.lookup(vec![payload(base, offset, len)], op, set);
        Ok(())
    }

    /// A match whose values are plain host-order u32s or bytes (meta, ct, fib): `==`/`!=`
    /// compare, or a (non-interval) set lookup.
    fn plain_match(
        &mut self,
        load: Expr,
        op: Op,
        rhs: Rhs,
        parse: impl Fn(&str) -> Result<Vec<u8>, SyntaxError>,
        set_key: (u32, u32, KeyOf),
    ) -> Result<(), SyntaxError> {
        match rhs {
            Rhs::Values(v) => {
                let value = parse(&Self::single(Rhs::Values(v))?)?;
                self.stmts
                    .push(Stmt::Exprs(vec![load, cmp(op.cmp(), value)]));
            }
            Rhs::Set(items) => {
                let keys = items
                    .iter()
                    .map(|i| parse(i).map(Element::key))
                    .collect::<Result<Vec<_>, _>>()?;
                let (key_type, key_len, key_of) = set_key;
                let set = SetSpec {
                    key_type,
                    key_len,
                    key_of,
                    interval: false,
                    size: keys.len() as u32,
                    elements: keys,
                };
                self.lookup(vec![load], op, set);
            }
        }
        Ok(())
    }

    fn address_match(&mut self, field: &str) -> Result<(), SyntaxError> {
        let v6 = self.v6;
        let (offset, desc, index) = match (v6, field) {
            (false, "saddr") => (12, DESC_IP, IP_SADDR),
            (false, "daddr") => (16, DESC_IP, IP_DADDR),
            (true, "saddr") => (8, DESC_IP6, IP6_SADDR),
            (true, "daddr") => (24, DESC_IP6, IP6_DADDR),
            _ => unreachable!("callers pass saddr or daddr"),
        };
        let (len, kt) = if v6 {
            (16, key_type::IP6ADDR)
        } else {
            (4, key_type::IPADDR)
        };
        let op = self.op()?;
        let rhs = self.rhs(false)?;
        self.field_match(
            (PayloadBase::Network, offset, len),
            op,
            rhs,
            |s| address(s, v6),
            (kt, KeyOf::Payload { desc, field: index }),
        )
    }

    /// `ip protocol`, `ip6 nexthdr` (payload) or `meta l4proto`.
    fn protocol_match(&mut self, field: Option<(u32, u32, u32)>) -> Result<(), SyntaxError> {
        let op = self.op()?;
        let rhs = self.rhs(false)?;
        match (&rhs, op) {
            (Rhs::Values(v), Op::Implicit | Op::Eq) if v.len() == 1 => {
                let p = protocol(&v[0])?;
                match self.l4 {
                    L4::Unset => self.l4 = L4::Known(p),
                    L4::Known(q) if q == p => {}
                    _ => return unsupported("a second, different layer 4 protocol"),
                }
            }
            (Rhs::Set(_), _) if self.l4 == L4::Unset => self.l4 = L4::Opaque,
            _ => {}
        }
        let parse = |s: &str| protocol(s).map(|p| vec![p]);
        match field {
            Some((offset, desc, index)) => match rhs {
                Rhs::Values(v) => {
                    let p = parse(&Self::single(Rhs::Values(v))?)?;
                    self.stmts.push(Stmt::Payload {
                        base: PayloadBase::Network,
                        offset,
                        len: 1,
                        op: op.cmp(),
                        value: p,
                    });
                    Ok(())
                }
                set => self.plain_match(
                    payload(PayloadBase::Network, offset, 1),
                    op,
                    set,
                    parse,
                    (
                        key_type::INET_PROTOCOL,
                        1,
                        KeyOf::Payload { desc, field: index },
                    ),
                ),
            },
            None => self.plain_match(
                meta(meta_key::L4PROTO),
                op,
                rhs,
                parse,
                (
                    key_type::INET_PROTOCOL,
                    1,
                    KeyOf::Meta {
                        key: meta_key::L4PROTO,
                    },
                ),
            ),
        }
    }

    fn port_match(&mut self, proto: &str, field: &str) -> Result<(), SyntaxError> {
        let (number, desc) = match proto {
            "tcp" => (6u8, DESC_TCP),
            "udp" => (17, DESC_UDP),
            _ => (132, DESC_SCTP),
        };
        let (offset, index) = if field == "sport" {
            (0, TH_SPORT)
        } else {
            (2, TH_DPORT)
        };
        match self.l4 {
            L4::Unset => {
                // nft's implicit dependency, once per rule.
                self.stmts.push(Stmt::Exprs(vec![
                    meta(meta_key::L4PROTO),
                    cmp(CmpOp::Eq, vec![number]),
                ]));
                self.l4 = L4::Known(number);
            }
            L4::Known(p) if p == number => {}
            L4::Known(_) => {
                return invalid(format!("conflicting protocols: {proto} after another"))
            }
            L4::Opaque => return unsupported(format!("{proto} {field} after a set of protocols")),
        }
        let op = self.op()?;
        let rhs = self.rhs(false)?;
        self.field_match(
            (PayloadBase::Transport, offset, 2),
            op,
            rhs,
            port,
            (
                key_type::INET_SERVICE,
                KeyOf::Payload { desc, field: index },
            ),
        )
    }

    fn meta_match(&mut self, key: &str) -> Result<(), SyntaxError> {
        match key {
            "iifname" | "oifname" => {
                let k = if key == "iifname" {
                    meta_key::IIFNAME
                } else {
                    meta_key::OIFNAME
                };
                let op = self.op()?;
                let rhs = self.rhs(false)?;
                let wildcard_ok = matches!(rhs, Rhs::Values(_));
                self.plain_match(
                    meta(k),
                    op,
                    rhs,
                    |s| ifname_value(s, wildcard_ok),
                    (key_type::IFNAME, IFNAMSIZ as u32, KeyOf::Meta { key: k }),
                )
            }
            "iif" | "oif" => {
                let k = if key == "iif" {
                    meta_key::IIF
                } else {
                    meta_key::OIF
                };
                let op = self.op()?;
                let name = Self::single(self.rhs(false)?)?;
                let index = ifindex(&name)?;
                self.stmts.push(Stmt::Exprs(vec![
                    meta(k),
                    cmp(op.cmp(), index.to_ne_bytes().to_vec()),
                ]));
                Ok(())
            }
            "mark" => {
                if matches!(self.peek_word(), Some("and" | "&")) {
                    self.pos += 1;
                    let mask = number_u32(&self.word("a mask")?)?;
                    let op = self.op()?;
                    let value = number_u32(&Self::single(self.rhs(false)?)?)?;
                    self.stmts.push(Stmt::Exprs(vec![
                        meta(meta_key::MARK),
                        Expr::Bitwise {
                            sreg: REG_1,
                            dreg: REG_1,
                            // Written by the user: nft states the operation.
                            op: BitwiseOp::STATED_BOOL,
                            mask: mask.to_ne_bytes().to_vec(),
                            xor: vec![0; 4],
                        },
                        cmp(op.cmp(), value.to_ne_bytes().to_vec()),
                    ]));
                    return Ok(());
                }
                let op = self.op()?;
                let rhs = self.rhs(false)?;
                self.plain_match(
                    meta(meta_key::MARK),
                    op,
                    rhs,
                    |s| number_u32(s).map(|v| v.to_ne_bytes().to_vec()),
                    (
                        key_type::MARK,
                        4,
                        KeyOf::Meta {
                            key: meta_key::MARK,
                        },
                    ),
                )
            }
            "l4proto" => self.protocol_match(None),
            other => unsupported(format!("meta {other}")),
        }
    }

    fn ct_state_match(&mut self) -> Result<(), SyntaxError> {
        let load = Expr::Ct {
            key: ct_key::STATE,
            dreg: REG_1,
        };
        let op = self.op()?;
        match self.rhs(true)? {
            Rhs::Values(states) => {
                let mut bits = 0;
                for s in &states {
                    bits |= ct_state(s)?;
                }
                let bits = bits.to_ne_bytes().to_vec();
                // A bare state list tests the bits; `==`/`!=` compare the whole state.
                let exprs = match op {
                    Op::Implicit => vec![
                        load,
                        Expr::Bitwise {
                            sreg: REG_1,
                            dreg: REG_1,
                            op: BitwiseOp::IMPLIED,
                            mask: bits,
                            xor: vec![0; 4],
                        },
                        cmp(CmpOp::Neq, vec![0; 4]),
                    ],
                    _ => vec![load, cmp(op.cmp(), bits)],
                };
                self.stmts.push(Stmt::Exprs(exprs));
                Ok(())
            }
            set => self.plain_match(
                load,
                op,
                set,
                |s| ct_state(s).map(|v| v.to_ne_bytes().to_vec()),
                (key_type::CT_STATE, 4, KeyOf::Ct { key: ct_key::STATE }),
            ),
        }
    }

    fn fib_match(&mut self) -> Result<(), SyntaxError> {
        let flags = match self.word("saddr or daddr")?.as_str() {
            "saddr" => FIB_F_SADDR,
            "daddr" => FIB_F_DADDR,
            other => return unsupported(format!("fib {other}")),
        };
        if self.word("type")? != "type" {
            return unsupported("fib lookups other than `type`");
        }
        let op = self.op()?;
        let rhs = self.rhs(false)?;
        self.plain_match(
            Expr::Fib {
                flags,
                result: FIB_RESULT_ADDRTYPE,
                dreg: REG_1,
            },
            op,
            rhs,
            |s| addr_type(s).map(|v| v.to_ne_bytes().to_vec()),
            (
                key_type::FIB_ADDR,
                4,
                KeyOf::Fib {
                    result: FIB_RESULT_ADDRTYPE,
                    flags,
                },
            ),
        )
    }

    fn statement(&mut self) -> Result<(), SyntaxError> {
        let first = self.word("a match")?;
        match first.as_str() {
            "ip" | "ip6" => {
                if (first == "ip6") != self.v6 {
                    return invalid(format!(
                        "conflicting protocols: {first} match in an {} table",
                        if self.v6 { "ip6" } else { "ip" }
                    ));
                }
                let field = self.word("a header field")?;
                match (self.v6, field.as_str()) {
                    (_, "saddr" | "daddr") => self.address_match(&field),
                    (false, "protocol") => self.protocol_match(Some((9, DESC_IP, IP_PROTOCOL))),
                    (true, "nexthdr") => self.protocol_match(Some((6, DESC_IP6, IP6_NEXTHDR))),
                    (_, other) => unsupported(format!("{first} {other}")),
                }
            }
            "meta" => {
                let key = self.word("a meta key")?;
                self.meta_match(&key)
            }
            "iifname" | "oifname" | "iif" | "oif" | "mark" => self.meta_match(&first),
            "ct" => match self.word("a ct key")?.as_str() {
                "state" => self.ct_state_match(),
                other => unsupported(format!("ct {other}")),
            },
            "tcp" | "udp" | "sctp" => match self.word("sport or dport")?.as_str() {
                field @ ("sport" | "dport") => self.port_match(&first, field),
                other => unsupported(format!("{first} {other}")),
            },
            "fib" => self.fib_match(),
            other => unsupported(format!("{other:?}")),
        }
    }
}

/// nft's payload merge: equal-op compares of adjacent fields of the same header, loaded as
/// one word (e.g. `tcp sport 1 tcp dport 80` is one 4-byte compare). The merged compare
/// takes the place of the field with the lowest offset.
fn merge_payloads(stmts: &mut Vec<Stmt>) {
    let mut candidates: Vec<usize> = stmts
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Stmt::Payload { .. }))
        .map(|(i, _)| i)
        .collect();
    let offset_of = |s: &Stmt| match s {
        Stmt::Payload { offset, .. } => *offset,
        _ => 0,
    };
    candidates.sort_by_key(|i| offset_of(&stmts[*i]));
    let mut removed = vec![false; stmts.len()];
    let mut head = 0;
    for k in 1..candidates.len() {
        let (h, n) = (candidates[head], candidates[k]);
        let next = stmts[n].clone();
        let Stmt::Payload {
            base: nb,
            offset: no,
            len: nl,
            op: nop,
            value: nv,
        } = next
        else {
            continue;
        };
        let Stmt::Payload {
            base,
            offset,
            len,
            op,
            value,
        } = &mut stmts[h]
        else {
            continue;
        };
        if *base == nb && *offset + *len == no && *op == nop && *len + nl <= MERGE_MAX_LEN {
            *len += nl;
            value.extend(nv);
            removed[n] = true;
        } else {
            head = k;
        }
    }
    let mut i = 0;
    stmts.retain(|_| {
        i += 1;
        !removed[i - 1]
    });
}

impl Matches {
    /// Parses match text for an `ip` table (`v6`: an `ip6` table).
    pub fn parse(text: &str, v6: bool) -> Result<Matches, SyntaxError> {
        let mut p = Parser {
            toks: lex(text)?,
            pos: 0,
            v6,
            l4: L4::Unset,
            stmts: Vec::new(),
        };
        while p.pos < p.toks.len() {
            p.statement()?;
        }
        merge_payloads(&mut p.stmts);
        Ok(Matches { stmts: p.stmts })
    }

    pub fn is_empty(&self) -> bool {
        self.stmts.is_empty()
    }

    /// The expressions for a rule of `family` `table`, with the anonymous sets they look up
    /// (to add to the same batch before the rule), numbered from `next_id` on.
    pub fn instantiate(
        &self,
        family: Family,
        table: &str,
        next_id: &mut u32,
    ) -> (Vec<AnonSet>, Vec<Expr>) {
        let mut sets = Vec::new();
        let mut exprs = Vec::new();
        for s in &self.stmts {
            match s {
                Stmt::Payload {
                    base,
                    offset,
                    len,
                    op,
                    value,
                } => {
                    exprs.push(payload(*base, *offset, *len));
                    exprs.push(cmp(*op, value.clone()));
                }
                Stmt::Exprs(e) => exprs.extend(e.iter().cloned()),
                Stmt::Lookup { load, set, invert } => {
                    let id = *next_id;
                    *next_id += 1;
                    sets.push(AnonSet {
                        family,
                        table: table.to_string(),
                        id,
                        key_type: set.key_type,
                        key_len: set.key_len,
                        key_of: set.key_of,
                        interval: set.interval,
                        size: set.size,
                        elements: set.elements.clone(),
                    });
                    exprs.extend(load.iter().cloned());
                    exprs.push(Expr::Lookup {
                        sreg: REG_1,
                        set: ANON_SET_NAME.to_string(),
                        set_id: Some(id),
                        invert: *invert,
                    });
                }
            }
        }
        (sets, exprs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::nf_tables::capture::assert_same_messages;
    use crate::netfilter::nf_tables::{Batch, Rule, Verdict};

    fn exprs(text: &str, v6: bool) -> (Vec<AnonSet>, Vec<Expr>) {
        let m = Matches::parse(text, v6).unwrap_or_else(|e| panic!("{text}: {e}"));
        m.instantiate(Family::Ip, "t", &mut 1)
    }

    fn unsupported_text(text: &str) -> bool {
        matches!(
            Matches::parse(text, false),
            Err(SyntaxError::Unsupported(_))
        )
    }

    fn invalid_text(text: &str) -> bool {
        matches!(Matches::parse(text, false), Err(SyntaxError::Invalid(_)))
    }

    #[test]
    fn lexes_sets_and_quotes_without_spaces() {
        assert_eq!(
            lex(r#"tcp dport {80,443} iifname "eth 0""#).unwrap(),
            [
                Tok::Word("tcp".into()),
                Tok::Word("dport".into()),
                Tok::Open,
                Tok::Word("80".into()),
                Tok::Comma,
                Tok::Word("443".into()),
                Tok::Close,
                Tok::Word("iifname".into()),
                Tok::Quoted("eth 0".into()),
            ]
        );
        assert!(invalid_text(r#"iifname "eth0"#));
    }

    #[test]
    fn single_element_sets_are_plain_values() {
        assert_eq!(
            exprs("ip saddr != { 10.1.0.0/16 }", false),
            exprs("ip saddr != 10.1.0.0/16", false)
        );
        let (sets, e) = exprs("ct state { established }", false);
        assert!(sets.is_empty());
        assert_eq!(e, exprs("ct state established", false).1);
        assert!(matches!(e[1], Expr::Bitwise { .. }));
    }

    #[test]
    fn adjacent_ports_merge_like_nft() {
        let (_, e) = exprs("tcp dport 80 ip saddr 10.0.0.1 tcp sport 1", false);
        // Dependency, the address, then one 4-byte compare of sport.dport at sport's place.
        assert_eq!(e.len(), 6);
        assert_eq!(
            e[4],
            payload(PayloadBase::Transport, 0, 4),
            "merged load: {e:?}"
        );
        assert_eq!(e[5], cmp(CmpOp::Eq, vec![0, 1, 0, 80]));
        // Different operators do not merge; both `!=` do.
        assert_eq!(exprs("tcp sport 1 tcp dport != 80", false).1.len(), 6);
        assert_eq!(exprs("tcp sport != 1 tcp dport != 80", false).1.len(), 4);
        // Addresses are too wide to merge.
        assert_eq!(
            exprs("ip saddr 10.0.0.1 ip daddr 10.0.0.2", false).1.len(),
            4
        );
    }

    #[test]
    fn protocol_context_decides_the_dependency() {
        let (_, e) = exprs("ip protocol tcp tcp dport 80", false);
        assert_eq!(e.len(), 4, "no meta l4proto after ip protocol tcp: {e:?}");
        let (_, e) = exprs("meta l4proto tcp tcp dport 80", false);
        assert_eq!(e.len(), 4);
        let (_, e) = exprs("ip protocol != udp tcp dport 80", false);
        assert_eq!(e.len(), 6);
        assert!(invalid_text("tcp dport 80 udp dport 53"));
        assert!(unsupported_text("ip protocol { tcp, udp } tcp dport 80"));
    }

    #[test]
    fn interface_names() {
        let (_, e) = exprs(r#"iifname "eth*""#, false);
        assert_eq!(e[1], cmp(CmpOp::Eq, b"eth".to_vec()));
        let (_, e) = exprs("oifname != cni-podman0", false);
        let mut want = b"cni-podman0".to_vec();
        want.resize(16, 0);
        assert_eq!(e[1], cmp(CmpOp::Neq, want));
        let (sets, _) = exprs(r#"iifname { "eth0", veth1 }"#, false);
        assert_eq!(sets[0].key_len, 16);
        assert_eq!(sets[0].elements.len(), 2);
        assert!(unsupported_text(r#"iifname { "eth*", veth1 }"#));
        assert!(unsupported_text(r#"iifname "*""#));
        assert!(unsupported_text("iifname averyveryverylongname"));
        let (_, e) = exprs("iif lo", false);
        assert_eq!(e[1], cmp(CmpOp::Eq, 1u32.to_ne_bytes().to_vec()));
        assert!(invalid_text("oif no-such-if0"));
    }

    #[test]
    fn states_marks_and_types() {
        let (_, e) = exprs("ct state == established,related", false);
        assert_eq!(e[1], cmp(CmpOp::Eq, 6u32.to_ne_bytes().to_vec()));
        let (_, e) = exprs("ct state != invalid", false);
        assert_eq!(e[1], cmp(CmpOp::Neq, 1u32.to_ne_bytes().to_vec()));
        let (sets, _) = exprs("ct state { new, established }", false);
        assert_eq!(sets[0].elements[0].key, 8u32.to_ne_bytes());
        let (_, e) = exprs("mark 0x10", false);
        assert_eq!(e[1], cmp(CmpOp::Eq, 16u32.to_ne_bytes().to_vec()));
        let (_, e) = exprs("meta mark & 0xff == 1", false);
        assert!(matches!(
            &e[1],
            Expr::Bitwise {
                op: BitwiseOp(Some(_)),
                ..
            }
        ));
        let (_, e) = exprs("fib saddr type != local", false);
        assert_eq!(e[1], cmp(CmpOp::Neq, 2u32.to_ne_bytes().to_vec()));
    }

    #[test]
    fn ranges_and_prefixes() {
        let (_, e) = exprs("udp dport 1000-2000", false);
        assert_eq!(e[3], cmp(CmpOp::Gte, 1000u16.to_be_bytes().to_vec()));
        assert_eq!(e[4], cmp(CmpOp::Lte, 2000u16.to_be_bytes().to_vec()));
        let (_, e) = exprs("ip daddr != 10.0.0.1-10.0.0.7", false);
        assert!(matches!(e[1], Expr::Range { op: CmpOp::Neq, .. }));
        // Host bits are dropped, /32 is a plain address, /0 a zero mask.
        assert_eq!(
            exprs("ip saddr 10.0.0.5/24", false),
            exprs("ip saddr 10.0.0.0/24", false)
        );
        assert_eq!(
            exprs("ip saddr 10.0.0.1/32", false),
            exprs("ip saddr 10.0.0.1", false)
        );
        assert!(matches!(
            exprs("ip saddr 0.0.0.0/0", false).1[1],
            Expr::Bitwise { .. }
        ));
        let (sets, _) = exprs("ip6 saddr { fd00::/64, fd01::1 }", true);
        assert!(sets[0].interval);
        assert!(invalid_text("ip saddr 10.0.0.9-10.0.0.1"));
    }

    #[test]
    fn what_goes_to_nft_and_what_it_refuses() {
        for text in [
            "tcp dport http",
            "ip saddr localhost",
            "th dport 80",
            "ip ttl 3",
            "tcp dport < 1024",
            "meta mark 1-5",
            "ct status dnat",
            "fib daddr . iif type local",
            "ip saddr { }",
            "saddr!=1.2.3.4",
        ] {
            assert!(unsupported_text(text), "{text}");
        }
        for text in [
            "ip6 saddr fd00::1",
            "ip saddr fd00::1",
            "meta l4proto udp tcp dport 1",
        ] {
            assert!(invalid_text(text), "{text}");
        }
        assert!(matches!(
            Matches::parse("ip saddr 10.0.0.1", true),
            Err(SyntaxError::Invalid(_))
        ));
        assert!(Matches::parse("", false).unwrap().is_empty());
    }

    /// Against nft 1.0.6's batches for `add rule ip t c ip saddr { ... } accept` (set ids
    /// are nft's): merged, adjacent and open-ended intervals, and one starting at 0.
    #[test]
    fn interval_sets_match_nft() {
        for (text, id, golden) in [
            (
                "ip saddr { 10.0.0.0/8, 11.0.0.0/8, 10.1.0.0/16, 12.0.0.1-12.0.0.5, 255.255.255.0/24 }",
                0x0f,
                include_str!("testdata/nft_set_intervals.hex"),
            ),
            (
                "ip saddr { 0.0.0.0/8, 10.0.0.1 }",
                0x13,
                include_str!("testdata/nft_set_from_zero.hex"),
            ),
        ] {
            let m = Matches::parse(text, false).unwrap();
            let (sets, mut e) = m.instantiate(Family::Ip, "t", &mut { id });
            e.push(Expr::Verdict(Verdict::Accept));
            let mut b = Batch::new();
            for s in &sets {
                b.add_anon_set(s);
            }
            b.add_rule(&Rule::new(Family::Ip, "t", "c", e));
            assert_same_messages(&b, golden);
        }
    }
}
