//! Rules as iptables-nft writes them, so `iptables-nft -S` shows rules we write over netlink
//! exactly as if iptables had written them, and we can read the rules iptables-nft wrote
//! (the reference plugins' iptables backend on an nf_tables host).
//!
//! iptables-nft turns the rule header (`-i`, `-o`, `-s`, `-d`) into native expressions and
//! runs every `-m` match through nft_compat with the xtables match's binary info; each rule
//! gets a counter and an `NFTA_RULE_COMPAT` attribute.

use std::net::IpAddr;

use super::build::{self, Addr};
use super::expr::{meta_key, CmpOp, Expr, Verdict, REG_1};
use super::msg::{Compat, Family, Rule};

/// `sizeof(struct xt_comment_info)`.
const XT_COMMENT_LEN: usize = 256;
/// `sizeof(struct xt_conntrack_mtinfo3)` rounded up by XT_ALIGN.
const XT_CONNTRACK_MTINFO3_LEN: usize = 168;
/// Offset of `match_flags` in `xt_conntrack_mtinfo3` (after 8 addresses/masks, expires,
/// l4proto and four ports).
const CONNTRACK_MATCH_FLAGS_OFFSET: usize = 146;
const XT_CONNTRACK_STATE: u16 = 1;
/// `XT_CONNTRACK_STATE_BIT(IP_CT_ESTABLISHED) | ..._BIT(IP_CT_RELATED)`.
pub const CT_STATE_ESTABLISHED: u16 = 1 << 1;
pub const CT_STATE_RELATED: u16 = 1 << 2;

/// The four iptables tables that matter here, as iptables-nft names them.
pub const FILTER: &str = "filter";
pub const NAT: &str = "nat";

/// `-m comment --comment TEXT` (longer texts are cut, as iptables does at 255 bytes).
pub fn comment_match(text: &str) -> Expr {
    let mut info = vec![0u8; XT_COMMENT_LEN];
    let bytes = text.as_bytes();
    let n = bytes.len().min(XT_COMMENT_LEN - 1);
    info[..n].copy_from_slice(&bytes[..n]);
    Expr::Match {
        name: "comment".into(),
        rev: 0,
        info,
    }
}

/// `-m conntrack --ctstate STATES` (revision 3, as iptables 1.8 sends it).
pub fn ctstate_match(states: u16) -> Expr {
    let mut info = vec![0u8; XT_CONNTRACK_MTINFO3_LEN];
    let at = CONNTRACK_MATCH_FLAGS_OFFSET;
    info[at..at + 2].copy_from_slice(&XT_CONNTRACK_STATE.to_ne_bytes());
    // invert_flags stay 0; state_mask follows them.
    info[at + 4..at + 6].copy_from_slice(&states.to_ne_bytes());
    Expr::Match {
        name: "conntrack".into(),
        rev: 3,
        info,
    }
}

/// `-i NAME` / `-o NAME` (with `!` when `negate`): iptables-nft compares the name and its NUL.
pub fn iface(input: bool, negate: bool, name: &str) -> Vec<Expr> {
    let mut data = name.as_bytes().to_vec();
    data.push(0);
    vec![
        Expr::Meta {
            key: if input {
                meta_key::IIFNAME
            } else {
                meta_key::OIFNAME
            },
            dreg: REG_1,
        },
        Expr::Cmp {
            sreg: REG_1,
            op: if negate { CmpOp::Neq } else { CmpOp::Eq },
            data,
        },
    ]
}

/// `-s IP` / `-d IP` for a single address (iptables prints it as IP/32 or IP/128).
pub fn host(source: bool, ip: IpAddr) -> Vec<Expr> {
    let field = if source { Addr::Saddr } else { Addr::Daddr };
    build::host(field, CmpOp::Eq, ip)
}

/// A rule of an iptables-nft table: `matches`, then the counter iptables-nft always adds,
/// then `-j VERDICT`; no `-p`, so the compat protocol is 0.
pub fn rule(
    family: Family,
    table: &str,
    chain: &str,
    matches: Vec<Expr>,
    verdict: Verdict,
) -> Rule {
    let mut exprs = matches;
    exprs.push(Expr::Counter {
        bytes: 0,
        packets: 0,
    });
    exprs.push(Expr::Verdict(verdict));
    Rule {
        compat: Some(Compat { proto: 0, flags: 0 }),
        ..Rule::new(family, table, chain, exprs)
    }
}

/// The text of a rule's `-m comment` match, if it has one.
pub fn rule_comment(rule: &Rule) -> Option<String> {
    rule.exprs.iter().find_map(|e| match e {
        Expr::Match { name, info, .. } if name == "comment" => {
            let text = info.split(|b| *b == 0).next().unwrap_or(info);
            Some(String::from_utf8_lossy(text).into_owned())
        }
        _ => None,
    })
}

/// Whether two rules are the same iptables rule (counters and handles aside): how `-C`
/// decides that a rule exists.
pub fn same_rule(a: &Rule, b: &Rule) -> bool {
    let strip = |r: &Rule| -> Vec<Expr> {
        r.exprs
            .iter()
            .map(|e| match e {
                Expr::Counter { .. } => Expr::Counter {
                    bytes: 0,
                    packets: 0,
                },
                other => other.clone(),
            })
            .collect()
    };
    strip(a) == strip(b)
}

use super::attr::Writer;
use super::msg::{msg_type, Hook, POLICY_ACCEPT};
use super::socket::Batch;

const NLM_F_CREATE: u16 = 0x400;

/// Creates an iptables table and one of its builtin base chains the way iptables-nft creates
/// them (`NEWTABLE` with only the name, then `type filter|nat hook H priority P; policy
/// accept`). An existing table is left as it is, but an existing chain gets its policy set
/// to accept: send this only for a chain that is missing.
pub fn ensure_builtin(
    batch: &mut Batch,
    family: Family,
    table: &str,
    chain: &str,
    kind: &str,
    hook: Hook,
    priority: i32,
) {
    let mut w = Writer::new();
    w.string(1, table);
    batch.push(
        msg_type::NEWTABLE,
        NLM_F_CREATE,
        family,
        w,
        format!("add table {} {table}", family.name()),
    );
    let mut w = Writer::new();
    w.string(1, table).string(3, chain);
    w.nested(4, |h| {
        h.be32(1, hook as u32).be32(2, priority as u32);
    });
    w.be32(5, POLICY_ACCEPT).string(7, kind);
    batch.push(
        msg_type::NEWCHAIN,
        NLM_F_CREATE,
        family,
        w,
        format!("add chain {} {table} {chain}", family.name()),
    );
}

/// Ensures a user-defined chain (`iptables -N`, but an existing chain is fine).
pub fn ensure_chain(batch: &mut Batch, family: Family, table: &str, chain: &str) {
    let mut w = Writer::new();
    w.string(1, table).string(3, chain);
    batch.push(
        msg_type::NEWCHAIN,
        NLM_F_CREATE,
        family,
        w,
        format!("add chain {} {table} {chain}", family.name()),
    );
}

/// `NF_IP_PRI_FILTER` / `NF_IP_PRI_NAT_DST` / `NF_IP_PRI_NAT_SRC`.
pub const PRIO_FILTER: i32 = 0;
