//! Policy routing rules (`ip rule`): add, delete, list. Only the selectors the plugins use
//! are decoded (source, destination, table, priority); messages are built as iproute2 builds
//! them (the table in the header when it fits in a byte, `FRA_TABLE` otherwise).

use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::RouteNetlinkMessage;

use crate::addr::Family;
use crate::error::{Error, Result};
use crate::netlink::{RuleReplies, Socket, NLM_F_CREATE, NLM_F_EXCL};

/// RT_TABLE_UNSPEC: the header's table byte when the real id is in `FRA_TABLE`.
const TABLE_UNSPEC: u8 = 0;

/// One rule: "from `src` to `dst` lookup `table`" at `priority`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// V4 or V6 (rules are per family).
    pub family: Family,
    pub src: Option<IpNetwork>,
    pub dst: Option<IpNetwork>,
    pub table: u32,
    /// `None` lets the kernel pick (just below the lowest existing non-zero priority).
    pub priority: Option<u32>,
}

impl Rule {
    /// "from `src` lookup `table`" (the family is the source's).
    pub fn from_source(src: IpNetwork, table: u32) -> Rule {
        Rule {
            family: Family::of(src.ip()),
            src: Some(src),
            dst: None,
            table,
            priority: None,
        }
    }

    /// The RTM_NEWRULE / RTM_DELRULE body.
    pub fn to_message(&self) -> Result<RuleMessage> {
        if self.family == Family::Any {
            return Err(Error::invalid(
                format!("invalid rule {self}"),
                "a rule needs an IPv4 or IPv6 family",
            ));
        }
        for net in [self.src, self.dst].into_iter().flatten() {
            if Family::of(net.ip()) != self.family {
                return Err(Error::invalid(
                    format!("invalid rule {self}"),
                    "selector family differs from the rule's",
                ));
            }
        }
        let mut msg = RuleMessage::default();
        msg.header.family = self.family.to_af();
        msg.header.action = RuleAction::ToTable;
        match u8::try_from(self.table) {
            Ok(t) if t != TABLE_UNSPEC => msg.header.table = t,
            _ => {
                msg.header.table = TABLE_UNSPEC;
                msg.attributes.push(RuleAttribute::Table(self.table));
            }
        }
        if let Some(src) = self.src {
            msg.header.src_len = src.prefix();
            msg.attributes.push(RuleAttribute::Source(src.network()));
        }
        if let Some(dst) = self.dst {
            msg.header.dst_len = dst.prefix();
            msg.attributes
                .push(RuleAttribute::Destination(dst.network()));
        }
        if let Some(p) = self.priority {
            msg.attributes.push(RuleAttribute::Priority(p));
        }
        Ok(msg)
    }

    /// Decodes a kernel RTM_NEWRULE message; `None` for families other than IPv4/IPv6.
    pub fn from_message(msg: &RuleMessage) -> Option<Rule> {
        let h = &msg.header;
        let family = match u8::from(h.family) as i32 {
            libc::AF_INET => Family::V4,
            libc::AF_INET6 => Family::V6,
            _ => return None,
        };
        let mut rule = Rule {
            family,
            src: None,
            dst: None,
            table: u32::from(h.table),
            priority: None,
        };
        let net = |ip: &IpAddr, len: u8| IpNetwork::new(*ip, len).ok();
        for attr in &msg.attributes {
            match attr {
                RuleAttribute::Source(ip) => rule.src = net(ip, h.src_len),
                RuleAttribute::Destination(ip) => rule.dst = net(ip, h.dst_len),
                RuleAttribute::Table(t) => rule.table = *t,
                RuleAttribute::Priority(p) => rule.priority = Some(*p),
                _ => {}
            }
        }
        Some(rule)
    }
}

impl fmt::Display for Rule {
    /// `ip rule`-like text for error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.priority {
            write!(f, "{p}: ")?;
        }
        match self.src {
            Some(s) => write!(f, "from {s}")?,
            None => write!(f, "from all")?,
        }
        if let Some(d) = self.dst {
            write!(f, " to {d}")?;
        }
        write!(f, " lookup {}", self.table)
    }
}

impl Socket {
    /// `ip rule add ...` (EEXIST when an identical rule exists).
    pub fn add_rule(&mut self, rule: &Rule) -> Result<()> {
        let ctx = || format!("failed to add rule {rule}");
        let msg = rule.to_message().map_err(|e| e.context(ctx()))?;
        self.request_ack(RouteNetlinkMessage::NewRule(msg), NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| e.context(ctx()))
    }

    /// `ip rule del ...`: the first rule matching every set selector (ENOENT when none).
    pub fn delete_rule(&mut self, rule: &Rule) -> Result<()> {
        let ctx = || format!("failed to delete rule {rule}");
        let msg = rule.to_message().map_err(|e| e.context(ctx()))?;
        self.request_ack(RouteNetlinkMessage::DelRule(msg), 0)
            .map_err(|e| e.context(ctx()))
    }

    /// Every rule of `family` (`Family::Any`: IPv4 and IPv6).
    pub fn rules(&mut self, family: Family) -> Result<Vec<Rule>> {
        let mut msg = RuleMessage::default();
        msg.header.family = family.to_af();
        self.dump_map_as::<RuleReplies, _>(RouteNetlinkMessage::GetRule(msg), 0, |m| match m {
            RouteNetlinkMessage::NewRule(r) => Rule::from_message(&r),
            _ => None,
        })
        .map_err(|e| e.context("failed to list rules"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{
        NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
    };

    fn wire(msg: RouteNetlinkMessage, flags: u16, seq: u32) -> Vec<u8> {
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        out
    }

    const CREATE: u16 = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;

    /// `strace -e write=3 ip rule add from 10.0.0.2/32 table 100` (iproute2 6.x).
    #[test]
    fn ipv4_source_rule_matches_iproute2_bytes() {
        let iproute2: [u8; 36] = [
            0x24, 0, 0, 0, 0x20, 0, 0x05, 0x06, 0xeb, 0x8b, 0x0e, 0x6b, 0, 0, 0, 0, //
            0x02, 0, 0x20, 0, 0x64, 0, 0, 0x01, 0, 0, 0, 0, 0x08, 0, 0x02, 0, //
            0x0a, 0, 0, 0x02,
        ];
        let rule = Rule::from_source("10.0.0.2/32".parse().unwrap(), 100);
        let msg = RouteNetlinkMessage::NewRule(rule.to_message().unwrap());
        assert_eq!(wire(msg, CREATE, 0x6b0e8beb), iproute2);
    }

    /// `strace -e write=3 ip -6 rule add from fd00::2/128 table 101`.
    #[test]
    fn ipv6_source_rule_matches_iproute2_bytes() {
        let mut iproute2 = vec![
            0x30, 0, 0, 0, 0x20, 0, 0x05, 0x06, 0xeb, 0x8b, 0x0e, 0x6b, 0, 0, 0, 0, //
            0x0a, 0, 0x80, 0, 0x65, 0, 0, 0x01, 0, 0, 0, 0, 0x14, 0, 0x02, 0, 0xfd,
        ];
        iproute2.extend([0u8; 14]);
        iproute2.push(0x02);
        let rule = Rule::from_source("fd00::2/128".parse().unwrap(), 101);
        let msg = RouteNetlinkMessage::NewRule(rule.to_message().unwrap());
        assert_eq!(wire(msg, CREATE, 0x6b0e8beb), iproute2);
    }

    #[test]
    fn large_tables_go_in_fra_table_and_round_trip() {
        let mut rule = Rule::from_source("10.0.0.2/32".parse().unwrap(), 5001);
        rule.priority = Some(1000);
        let msg = rule.to_message().unwrap();
        assert_eq!(msg.header.table, TABLE_UNSPEC);
        assert_eq!(Rule::from_message(&msg).unwrap(), rule);
        let bad = Rule {
            family: Family::V6,
            ..Rule::from_source("10.0.0.2/32".parse().unwrap(), 100)
        };
        assert!(bad.to_message().is_err());
    }
}
