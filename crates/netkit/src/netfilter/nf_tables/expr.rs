//! nf_tables expressions: the small register machine a rule is made of. Each variant encodes
//! its attributes in the order nft (libnftnl) sends them, so our messages are byte-for-byte
//! what `nft` would send for the same rule; decoding accepts any order and keeps unknown
//! expressions opaque.

use super::attr::{Attr, Attrs, Writer};

/// Registers: the verdict register and the first two 128-bit data registers nft uses.
pub const REG_VERDICT: u32 = 0;
pub const REG_1: u32 = 1;
pub const REG_2: u32 = 2;
/// The first 32-bit data register (the same bytes as [`REG_1`]): concatenations load each
/// field into consecutive 32-bit registers from here.
pub const REG32_00: u32 = 8;

/// Where a payload load starts (`enum nft_payload_bases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadBase {
    Link = 0,
    Network = 1,
    Transport = 2,
}

/// Comparison operators (`enum nft_cmp_ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq = 0,
    Neq = 1,
    Lt = 2,
    Lte = 3,
    Gt = 4,
    Gte = 5,
}

impl CmpOp {
    fn from_u32(v: u32) -> Option<CmpOp> {
        Some(match v {
            0 => CmpOp::Eq,
            1 => CmpOp::Neq,
            2 => CmpOp::Lt,
            3 => CmpOp::Lte,
            4 => CmpOp::Gt,
            5 => CmpOp::Gte,
            _ => return None,
        })
    }
}

/// Meta keys we use (`enum nft_meta_keys`).
pub mod meta_key {
    pub const MARK: u32 = 3;
    pub const IIF: u32 = 4;
    pub const OIF: u32 = 5;
    pub const IIFNAME: u32 = 6;
    pub const OIFNAME: u32 = 7;
    pub const NFPROTO: u32 = 15;
    pub const L4PROTO: u32 = 16;
}

/// Conntrack keys we use (`enum nft_ct_keys`).
pub mod ct_key {
    pub const STATE: u32 = 0;
    pub const STATUS: u32 = 2;
}

/// Conntrack states (`ct state` bits).
pub mod ct_state {
    pub const INVALID: u32 = 1;
    pub const ESTABLISHED: u32 = 2;
    pub const RELATED: u32 = 4;
    pub const NEW: u32 = 8;
}

/// A rule verdict (`NFTA_DATA_VERDICT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    Accept,
    Return,
    Jump(String),
    Goto(String),
    /// Any other code (continue, break, queue...).
    Other(i32),
}

impl Verdict {
    const DROP: i32 = 0;
    const ACCEPT: i32 = 1;
    const JUMP: i32 = -3;
    const GOTO: i32 = -4;
    const RETURN: i32 = -5;

    pub(crate) fn code(&self) -> i32 {
        match self {
            Verdict::Drop => Self::DROP,
            Verdict::Accept => Self::ACCEPT,
            Verdict::Return => Self::RETURN,
            Verdict::Jump(_) => Self::JUMP,
            Verdict::Goto(_) => Self::GOTO,
            Verdict::Other(c) => *c,
        }
    }

    /// The chain a jump or goto leads to.
    pub fn target(&self) -> Option<&str> {
        match self {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(c),
            _ => None,
        }
    }
}

/// NAT types (`enum nft_nat_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatType {
    Snat = 0,
    Dnat = 1,
}

/// `NF_NAT_RANGE_PROTO_SPECIFIED`: the rule gives a port.
pub const NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;
/// `NF_NAT_RANGE_PROTO_RANDOM_FULLY`: `masquerade fully-random` (iptables `--random-fully`).
pub const NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;

/// `fib` flags and results.
pub const FIB_F_SADDR: u32 = 1;
pub const FIB_F_DADDR: u32 = 2;
pub const FIB_RESULT_ADDRTYPE: u32 = 3;

/// One expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Payload {
        dreg: u32,
        base: PayloadBase,
        offset: u32,
        len: u32,
    },
    Cmp {
        sreg: u32,
        op: CmpOp,
        data: Vec<u8>,
    },
    Bitwise {
        sreg: u32,
        dreg: u32,
        op: BitwiseOp,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Meta {
        key: u32,
        dreg: u32,
    },
    Ct {
        key: u32,
        dreg: u32,
    },
    Fib {
        flags: u32,
        result: u32,
        dreg: u32,
    },
    /// `from <= reg <= to` (or its negation): nft's `!= a-b`.
    Range {
        sreg: u32,
        op: CmpOp,
        from: Vec<u8>,
        to: Vec<u8>,
    },
    /// Membership of a register in a set (an anonymous one is named `__set%d` and found by
    /// its id within the batch that creates it); `invert` for `!=`.
    Lookup {
        sreg: u32,
        set: String,
        set_id: Option<u32>,
        invert: bool,
    },
    /// The verdict a verdict map holds for the register's key (nft's `vmap @map`): a lookup
    /// whose destination is the verdict register. No verdict when the key is absent.
    Vmap {
        sreg: u32,
        set: String,
        set_id: Option<u32>,
    },
    /// A value loaded into a data register.
    ImmediateData {
        dreg: u32,
        data: Vec<u8>,
    },
    /// A verdict (into the verdict register).
    Verdict(Verdict),
    Nat {
        kind: NatType,
        /// `NFPROTO_IPV4`/`NFPROTO_IPV6`.
        family: u32,
        reg_addr: Option<u32>,
        reg_proto: Option<u32>,
        flags: u32,
    },
    Masq,
    /// `masquerade` with `NF_NAT_RANGE_*` flags (`fully-random`...).
    MasqFlags(u32),
    Counter {
        bytes: u64,
        packets: u64,
    },
    /// `log [prefix P] [group G [snaplen N]]`: with a group, the packet goes to the
    /// nfnetlink_log listeners of that group (NFLOG), at most `snaplen` bytes of it.
    Log {
        prefix: Option<String>,
        group: Option<u16>,
        snaplen: Option<u32>,
    },
    /// `limit rate RATE/UNIT burst BURST packets|bytes`: matches while under the rate (a
    /// token bucket of its own per rule); `invert` for `limit rate over`.
    Limit {
        rate: u64,
        /// The rate's period in seconds (1: per second, 60: per minute...).
        unit_seconds: u64,
        burst: u32,
        bytes: bool,
        invert: bool,
    },
    /// An xtables match run through nft_compat (what iptables-nft writes for `-m X`).
    Match {
        name: String,
        rev: u32,
        info: Vec<u8>,
    },
    /// An xtables target run through nft_compat.
    Target {
        name: String,
        rev: u32,
        info: Vec<u8>,
    },
    /// An expression we do not model, kept as its name and raw attributes.
    Other {
        name: String,
        data: Vec<u8>,
    },
}

const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;
/// `NFT_BITWISE_BOOL`: `(reg & mask) ^ xor`.
pub const NFT_BITWISE_BOOL: u32 = 0;

/// `NFTA_BITWISE_OP` of a bitwise expression, as sent: nft states it only for an `and`
/// written in the rule, never for the masks it derives itself (prefixes, flag tests), and the
/// kernel takes an absent one as `NFT_BITWISE_BOOL` (and dumps it always). Equality is the
/// kernel's: absent equals a stated BOOL, so built and dumped rules compare equal.
#[derive(Debug, Clone, Copy, Eq)]
pub struct BitwiseOp(pub Option<u32>);

impl BitwiseOp {
    /// Not sent (what nft does for masks it derives).
    pub const IMPLIED: BitwiseOp = BitwiseOp(None);
    /// `NFT_BITWISE_BOOL` stated (what nft does for `and`/`&` in the rule text).
    pub const STATED_BOOL: BitwiseOp = BitwiseOp(Some(NFT_BITWISE_BOOL));

    fn effective(self) -> u32 {
        self.0.unwrap_or(NFT_BITWISE_BOOL)
    }
}

impl PartialEq for BitwiseOp {
    fn eq(&self, other: &BitwiseOp) -> bool {
        self.effective() == other.effective()
    }
}
/// `NFT_LOOKUP_F_INV`: the lookup matches when the key is NOT in the set.
const NFT_LOOKUP_F_INV: u32 = 1;
/// `NFT_LIMIT_F_INV`: `limit rate over`.
const NFT_LIMIT_F_INV: u32 = 1;
/// `enum nft_log_attributes` we use (level and flags belong to syslog logging, which the
/// expression models as opaque).
const NFTA_LOG_GROUP: u16 = 1;
const NFTA_LOG_PREFIX: u16 = 2;
const NFTA_LOG_SNAPLEN: u16 = 3;
const NFTA_LOG_QTHRESHOLD: u16 = 4;
const NFTA_LOG_LEVEL: u16 = 5;
const NFTA_LOG_FLAGS: u16 = 6;

fn value(w: &mut Writer, kind: u16, data: &[u8]) {
    w.nested(kind, |d| {
        d.bytes(NFTA_DATA_VALUE, data);
    });
}

impl Expr {
    /// The nft name of the expression.
    pub fn name(&self) -> &str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Meta { .. } => "meta",
            Expr::Ct { .. } => "ct",
            Expr::Fib { .. } => "fib",
            Expr::Range { .. } => "range",
            Expr::Lookup { .. } | Expr::Vmap { .. } => "lookup",
            Expr::ImmediateData { .. } | Expr::Verdict(_) => "immediate",
            Expr::Nat { .. } => "nat",
            Expr::Masq | Expr::MasqFlags(_) => "masq",
            Expr::Counter { .. } => "counter",
            Expr::Log { .. } => "log",
            Expr::Limit { .. } => "limit",
            Expr::Match { .. } => "match",
            Expr::Target { .. } => "target",
            Expr::Other { name, .. } => name,
        }
    }

    /// Writes one `NFTA_LIST_ELEM` content: name, then the data attributes in nft's order.
    pub fn encode(&self, w: &mut Writer) {
        w.string(NFTA_EXPR_NAME, self.name());
        if let Expr::Other { data, .. } = self {
            w.nested(NFTA_EXPR_DATA, |d| d.buf.extend_from_slice(data));
            return;
        }
        w.nested(NFTA_EXPR_DATA, |d| match self {
            Expr::Payload {
                dreg,
                base,
                offset,
                len,
            } => {
                d.be32(1, *dreg)
                    .be32(2, *base as u32)
                    .be32(3, *offset)
                    .be32(4, *len);
            }
            Expr::Cmp { sreg, op, data } => {
                d.be32(1, *sreg).be32(2, *op as u32);
                value(d, 3, data);
            }
            Expr::Bitwise {
                sreg,
                dreg,
                op,
                mask,
                xor,
            } => {
                d.be32(1, *sreg).be32(2, *dreg);
                if let Some(op) = op.0 {
                    d.be32(6, op);
                }
                d.be32(3, mask.len() as u32);
                value(d, 4, mask);
                value(d, 5, xor);
            }
            Expr::Meta { key, dreg } | Expr::Ct { key, dreg } => {
                d.be32(2, *key).be32(1, *dreg);
            }
            Expr::Fib {
                flags,
                result,
                dreg,
            } => {
                d.be32(3, *flags).be32(2, *result).be32(1, *dreg);
            }
            Expr::Range { sreg, op, from, to } => {
                d.be32(1, *sreg).be32(2, *op as u32);
                value(d, 3, from);
                value(d, 4, to);
            }
            Expr::Lookup {
                sreg,
                set,
                set_id,
                invert,
            } => {
                d.be32(2, *sreg).string(1, set);
                if let Some(id) = set_id {
                    d.be32(4, *id);
                }
                if *invert {
                    d.be32(5, NFT_LOOKUP_F_INV);
                }
            }
            Expr::Vmap { sreg, set, set_id } => {
                d.be32(2, *sreg).string(1, set);
                if let Some(id) = set_id {
                    d.be32(4, *id);
                }
                d.be32(3, REG_VERDICT);
            }
            Expr::ImmediateData { dreg, data } => {
                d.be32(1, *dreg);
                value(d, 2, data);
            }
            Expr::Verdict(v) => {
                d.be32(1, REG_VERDICT);
                d.nested(2, |data| {
                    data.nested(NFTA_DATA_VERDICT, |vd| {
                        vd.be32(NFTA_VERDICT_CODE, v.code() as u32);
                        if let Some(chain) = v.target() {
                            vd.string(NFTA_VERDICT_CHAIN, chain);
                        }
                    });
                });
            }
            Expr::Nat {
                kind,
                family,
                reg_addr,
                reg_proto,
                flags,
            } => {
                d.be32(1, *kind as u32).be32(2, *family);
                if let Some(r) = reg_addr {
                    d.be32(3, *r);
                }
                if let Some(r) = reg_proto {
                    d.be32(5, *r);
                }
                if *flags != 0 {
                    d.be32(7, *flags);
                }
            }
            Expr::Masq => {}
            Expr::MasqFlags(flags) => {
                d.be32(1, *flags);
            }
            Expr::Counter { bytes, packets } => {
                d.be64(1, *bytes).be64(2, *packets);
            }
            Expr::Log {
                prefix,
                group,
                snaplen,
            } => {
                if let Some(p) = prefix {
                    d.string(NFTA_LOG_PREFIX, p);
                }
                if let Some(g) = group {
                    d.bytes(NFTA_LOG_GROUP, &g.to_be_bytes());
                }
                if let Some(n) = snaplen {
                    d.be32(NFTA_LOG_SNAPLEN, *n);
                }
            }
            Expr::Limit {
                rate,
                unit_seconds,
                burst,
                bytes,
                invert,
            } => {
                d.be64(1, *rate)
                    .be64(2, *unit_seconds)
                    .be32(3, *burst)
                    .be32(4, u32::from(*bytes))
                    .be32(5, if *invert { NFT_LIMIT_F_INV } else { 0 });
            }
            Expr::Match { name, rev, info } | Expr::Target { name, rev, info } => {
                d.string(1, name).be32(2, *rev).bytes(3, info);
            }
            Expr::Other { .. } => {}
        });
    }

    /// Decodes one `NFTA_LIST_ELEM` content. `None` only when the name is missing.
    pub fn decode(elem: &[u8]) -> Option<Expr> {
        let attrs = Attrs::new(elem);
        let name = attrs.get(NFTA_EXPR_NAME)?.string();
        let data = attrs.get(NFTA_EXPR_DATA).map(|a| a.value).unwrap_or(&[]);
        Some(decode_data(&name, data).unwrap_or_else(|| Expr::Other {
            name,
            data: data.to_vec(),
        }))
    }
}

fn u32_of(attrs: &Attrs, kind: u16) -> Option<u32> {
    attrs.get(kind)?.be32()
}

fn data_value(a: Option<Attr>) -> Option<Vec<u8>> {
    Some(a?.nested().get(NFTA_DATA_VALUE)?.value.to_vec())
}

fn decode_data(name: &str, data: &[u8]) -> Option<Expr> {
    let a = Attrs::new(data);
    Some(match name {
        "payload" => Expr::Payload {
            dreg: u32_of(&a, 1)?,
            base: match u32_of(&a, 2)? {
                0 => PayloadBase::Link,
                1 => PayloadBase::Network,
                2 => PayloadBase::Transport,
                _ => return None,
            },
            offset: u32_of(&a, 3)?,
            len: u32_of(&a, 4)?,
        },
        "cmp" => Expr::Cmp {
            sreg: u32_of(&a, 1)?,
            op: CmpOp::from_u32(u32_of(&a, 2)?)?,
            data: data_value(a.get(3))?,
        },
        "range" => Expr::Range {
            sreg: u32_of(&a, 1)?,
            op: CmpOp::from_u32(u32_of(&a, 2)?)?,
            from: data_value(a.get(3))?,
            to: data_value(a.get(4))?,
        },
        "lookup" if a.get(3).is_some() => Expr::Vmap {
            sreg: u32_of(&a, 2)?,
            set: a.get(1)?.string(),
            set_id: u32_of(&a, 4),
        },
        "lookup" => Expr::Lookup {
            sreg: u32_of(&a, 2)?,
            set: a.get(1)?.string(),
            set_id: u32_of(&a, 4),
            invert: u32_of(&a, 5).unwrap_or(0) & NFT_LOOKUP_F_INV != 0,
        },
        "bitwise" => Expr::Bitwise {
            sreg: u32_of(&a, 1)?,
            dreg: u32_of(&a, 2)?,
            op: BitwiseOp(u32_of(&a, 6)),
            mask: data_value(a.get(4))?,
            xor: data_value(a.get(5))?,
        },
        "meta" => Expr::Meta {
            key: u32_of(&a, 2)?,
            dreg: u32_of(&a, 1)?,
        },
        "ct" => Expr::Ct {
            key: u32_of(&a, 2)?,
            dreg: u32_of(&a, 1)?,
        },
        "fib" => Expr::Fib {
            flags: u32_of(&a, 3)?,
            result: u32_of(&a, 2)?,
            dreg: u32_of(&a, 1)?,
        },
        "immediate" => {
            let dreg = u32_of(&a, 1)?;
            let d = a.get(2)?.nested();
            if let Some(v) = d.get(NFTA_DATA_VERDICT) {
                let v = v.nested();
                let code = v.get(NFTA_VERDICT_CODE)?.be32()? as i32;
                let chain = v.get(NFTA_VERDICT_CHAIN).map(|c| c.string());
                Expr::Verdict(match (code, chain) {
                    (Verdict::DROP, _) => Verdict::Drop,
                    (Verdict::ACCEPT, _) => Verdict::Accept,
                    (Verdict::RETURN, _) => Verdict::Return,
                    (Verdict::JUMP, Some(c)) => Verdict::Jump(c),
                    (Verdict::GOTO, Some(c)) => Verdict::Goto(c),
                    (c, _) => Verdict::Other(c),
                })
            } else {
                Expr::ImmediateData {
                    dreg,
                    data: d.get(NFTA_DATA_VALUE)?.value.to_vec(),
                }
            }
        }
        "nat" => Expr::Nat {
            kind: match u32_of(&a, 1)? {
                0 => NatType::Snat,
                1 => NatType::Dnat,
                _ => return None,
            },
            family: u32_of(&a, 2)?,
            reg_addr: u32_of(&a, 3),
            reg_proto: u32_of(&a, 5),
            flags: u32_of(&a, 7).unwrap_or(0),
        },
        "masq" if data.is_empty() => Expr::Masq,
        // Flags only (no port-range registers).
        "masq" if a.get(2).is_none() && a.get(3).is_none() => Expr::MasqFlags(u32_of(&a, 1)?),
        "counter" => Expr::Counter {
            bytes: a.get(1)?.be64()?,
            packets: a.get(2)?.be64()?,
        },
        // Syslog logging (a level, flags) and queue thresholds are not modeled.
        "log"
            if [NFTA_LOG_QTHRESHOLD, NFTA_LOG_LEVEL, NFTA_LOG_FLAGS]
                .iter()
                .all(|k| a.get(*k).is_none()) =>
        {
            Expr::Log {
                prefix: a.get(NFTA_LOG_PREFIX).map(|p| p.string()),
                group: match a.get(NFTA_LOG_GROUP) {
                    Some(g) => Some(u16::from_be_bytes(g.value.get(..2)?.try_into().ok()?)),
                    None => None,
                },
                snaplen: u32_of(&a, NFTA_LOG_SNAPLEN),
            }
        }
        "limit" => Expr::Limit {
            rate: a.get(1)?.be64()?,
            unit_seconds: a.get(2)?.be64()?,
            burst: u32_of(&a, 3).unwrap_or(0),
            bytes: u32_of(&a, 4).unwrap_or(0) == 1,
            invert: u32_of(&a, 5).unwrap_or(0) & NFT_LIMIT_F_INV != 0,
        },
        "match" | "target" => {
            let name_ = a.get(1)?.string();
            let rev = u32_of(&a, 2)?;
            let info = a.get(3)?.value.to_vec();
            if name == "match" {
                Expr::Match {
                    name: name_,
                    rev,
                    info,
                }
            } else {
                Expr::Target {
                    name: name_,
                    rev,
                    info,
                }
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: Expr) {
        let mut w = Writer::new();
        e.encode(&mut w);
        assert_eq!(Expr::decode(&w.buf), Some(e));
    }

    #[test]
    fn every_variant_round_trips() {
        for e in [
            Expr::Payload {
                dreg: REG_1,
                base: PayloadBase::Network,
                offset: 12,
                len: 4,
            },
            Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Neq,
                data: vec![10, 1, 0],
            },
            Expr::Bitwise {
                sreg: REG_1,
                dreg: REG_1,
                op: BitwiseOp::STATED_BOOL,
                mask: vec![0xf0, 0, 0, 0],
                xor: vec![0; 4],
            },
            Expr::Meta {
                key: meta_key::L4PROTO,
                dreg: REG_1,
            },
            Expr::Ct {
                key: ct_key::STATUS,
                dreg: REG_1,
            },
            Expr::Fib {
                flags: FIB_F_DADDR,
                result: FIB_RESULT_ADDRTYPE,
                dreg: REG_1,
            },
            Expr::ImmediateData {
                dreg: REG_2,
                data: vec![0, 80],
            },
            Expr::Verdict(Verdict::Jump("x".into())),
            Expr::Verdict(Verdict::Goto("masq_checks".into())),
            Expr::Verdict(Verdict::Return),
            Expr::Verdict(Verdict::Drop),
            Expr::Verdict(Verdict::Accept),
            Expr::Nat {
                kind: NatType::Dnat,
                family: 2,
                reg_addr: Some(REG_1),
                reg_proto: Some(REG_2),
                flags: NAT_RANGE_PROTO_SPECIFIED,
            },
            Expr::Masq,
            Expr::MasqFlags(NAT_RANGE_PROTO_RANDOM_FULLY),
            Expr::Meta {
                key: meta_key::MARK,
                dreg: REG_1,
            },
            Expr::Counter {
                bytes: 1,
                packets: 2,
            },
            Expr::Match {
                name: "comment".into(),
                rev: 0,
                info: vec![b'a'; 256],
            },
            Expr::Range {
                sreg: REG_1,
                op: CmpOp::Neq,
                from: vec![0, 1],
                to: vec![0, 9],
            },
            Expr::Lookup {
                sreg: REG_1,
                set: "__set%d".into(),
                set_id: Some(3),
                invert: true,
            },
            Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Gte,
                data: vec![1],
            },
            Expr::Vmap {
                sreg: REG_1,
                set: "ingress4".into(),
                set_id: Some(2),
            },
            Expr::Log {
                prefix: Some("i 10.1.2.3".into()),
                group: Some(7361),
                snaplen: Some(128),
            },
            Expr::Log {
                prefix: None,
                group: Some(0),
                snaplen: None,
            },
            Expr::Limit {
                rate: 50,
                unit_seconds: 1,
                burst: 20,
                bytes: false,
                invert: false,
            },
            Expr::Limit {
                rate: 1024,
                unit_seconds: 60,
                burst: 0,
                bytes: true,
                invert: true,
            },
            Expr::Other {
                name: "quota".into(),
                data: vec![8, 0, 1, 0, 0, 0, 0, 1],
            },
        ] {
            round_trip(e);
        }
    }

    #[test]
    fn syslog_logging_stays_opaque() {
        let mut w = Writer::new();
        w.string(NFTA_EXPR_NAME, "log");
        w.nested(NFTA_EXPR_DATA, |d| {
            d.string(NFTA_LOG_PREFIX, "x").be32(NFTA_LOG_LEVEL, 4);
        });
        assert!(matches!(Expr::decode(&w.buf), Some(Expr::Other { .. })));
    }

    #[test]
    fn bitwise_op_absent_equals_stated_bool() {
        let b = |op| Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            op,
            mask: vec![1],
            xor: vec![0],
        };
        assert_eq!(b(BitwiseOp::IMPLIED), b(BitwiseOp::STATED_BOOL));
        assert_ne!(b(BitwiseOp::IMPLIED), b(BitwiseOp(Some(1))));
    }

    #[test]
    fn garbage_decodes_to_none_or_opaque() {
        assert_eq!(Expr::decode(&[]), None);
        let mut w = Writer::new();
        w.string(NFTA_EXPR_NAME, "payload");
        w.nested(NFTA_EXPR_DATA, |d| {
            d.be32(1, 1);
        });
        assert!(matches!(Expr::decode(&w.buf), Some(Expr::Other { .. })));
    }
}
