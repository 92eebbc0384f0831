//! Why the import filter refused a route, said where the agent can read it.
//!
//! BIRD keeps nothing it refuses, so a refusal is classified in the filter itself: every
//! `reject` of the import filters goes through the BIRD function [`FUNCTION`], which prints one
//! line to BIRD's log (`ferrocni-refused <reason> <prefix> <protocol> <next hop> <origin AS>`)
//! and rejects. The agent follows the log (the refusal_log module), counts by peer and reason,
//! and logs each refused route once. Nothing is stored per refused route, in BIRD or in the
//! agent beyond the bounded set that keeps "once".
//!
//! The reasons, in the order the filter tests them:
//! - [`Reason::OwnSubnet`]: this node's own subnet, or inside it (a peer echoing it back);
//! - [`Reason::Advertised`]: an advertised prefix or inside one (every node keeps its own);
//! - [`Reason::ExternalPeer`]: an external prefix from a peer its entry does not name;
//! - [`Reason::WrongNextHop`]: exactly a leased subnet, from another node's address;
//! - [`Reason::WrongOrigin`]: exactly a leased subnet, through a next hop that is no node's,
//!   originated outside that lease's AS;
//! - [`Reason::MoreSpecific`]: inside a leased subnet, not the subnet itself;
//! - [`Reason::Unleased`]: inside the cluster network, where no node leases it (the network
//!   itself, or an aggregate, too);
//! - [`Reason::OutsideNetwork`]: outside the cluster network, and not an external prefix.
//!
//! A peer controls none of the printed words: the prefix, next hop and AS are typed values
//! BIRD formats, and the protocol name is ours.

use std::fmt::{Display, Write as _};

use super::origin::LeaseRoute;

/// The BIRD function every import `reject` calls.
pub const FUNCTION: &str = "refuse";
/// The first word of each refusal line in BIRD's log.
pub const MARKER: &str = "ferrocni-refused";

/// Why a learned route was refused (the `reason` label of the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    OwnSubnet,
    Advertised,
    ExternalPeer,
    WrongNextHop,
    WrongOrigin,
    MoreSpecific,
    Unleased,
    OutsideNetwork,
}

impl Reason {
    pub const ALL: [Reason; 8] = [
        Reason::OwnSubnet,
        Reason::Advertised,
        Reason::ExternalPeer,
        Reason::WrongNextHop,
        Reason::WrongOrigin,
        Reason::MoreSpecific,
        Reason::Unleased,
        Reason::OutsideNetwork,
    ];

    pub fn word(self) -> &'static str {
        match self {
            Reason::OwnSubnet => "own-subnet",
            Reason::Advertised => "advertised",
            Reason::ExternalPeer => "external-peer",
            Reason::WrongNextHop => "wrong-next-hop",
            Reason::WrongOrigin => "wrong-origin",
            Reason::MoreSpecific => "more-specific",
            Reason::Unleased => "unleased",
            Reason::OutsideNetwork => "outside-network",
        }
    }

    pub fn from_word(word: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.word() == word)
    }

    /// What the reason means, for the agent's log line.
    pub fn explanation(self) -> &'static str {
        match self {
            Reason::OwnSubnet => "this node's own subnet (or inside it), sent back",
            Reason::Advertised => {
                "an advertised prefix (or inside one): every node announces its own copy"
            }
            Reason::ExternalPeer => "an external prefix from a peer its entry does not name",
            Reason::WrongNextHop => {
                "a node's subnet from another node's address (each node announces its own)"
            }
            Reason::WrongOrigin => {
                "a node's subnet through a router, originated outside that node's AS"
            }
            Reason::MoreSpecific => "inside a node's subnet, not the subnet as leased",
            Reason::Unleased => "inside the cluster network, but no node leases it",
            Reason::OutsideNetwork => {
                "outside the cluster network, and not an external prefix from this peer"
            }
        }
    }

    /// Whether the refusal is part of normal operation (a reflector or router returning what
    /// the nodes announce): logged as information, not as a warning.
    pub fn expected(self) -> bool {
        matches!(self, Reason::OwnSubnet | Reason::Advertised)
    }

    /// The filter statement that refuses a route for this reason.
    pub fn statement(self) -> String {
        format!("{FUNCTION}(\"{}\")", self.word())
    }
}

/// The BIRD function that prints the refusal line and rejects; written once, before the
/// filters.
pub fn write_function(o: &mut String) -> std::fmt::Result {
    writeln!(
        o,
        "# Every refused route: one line in this log, which the agent counts by reason."
    )?;
    writeln!(o, "function {FUNCTION}(string reason) {{")?;
    writeln!(
        o,
        "  print \"{MARKER} \", reason, \" \", net, \" \", proto, \" \", bgp_next_hop, \" \", bgp_path.last;"
    )?;
    writeln!(o, "  reject;")?;
    writeln!(o, "}}")
}

/// The start of an import filter: this node's own subnet, and anything inside it, refused.
pub fn write_own_subnet(o: &mut String, own: &dyn Display) -> std::fmt::Result {
    writeln!(
        o,
        "  if net ~ [ {own}+ ] then {};",
        Reason::OwnSubnet.statement()
    )
}

/// The end of an import filter, reached by every route no rule accepted: the reason it is
/// refused. `network` is the cluster network in the family, `leases` the other nodes'.
pub fn write_classification<Net, Addr>(
    o: &mut String,
    network: Net,
    leases: &[LeaseRoute<Net, Addr>],
) -> std::fmt::Result
where
    Net: Display + Ord + Copy,
    Addr: Display + Ord + Copy,
{
    writeln!(o, "  # Refused: say why.")?;
    let subnets = sorted(leases.iter().map(|l| l.subnet));
    let next_hops = sorted(leases.iter().map(|l| l.next_hop));
    if !subnets.is_empty() {
        writeln!(
            o,
            "  if net ~ [ {} ] then {{ if bgp_next_hop ~ [ {} ] then {}; {}; }}",
            subnets.join(", "),
            next_hops.join(", "),
            Reason::WrongNextHop.statement(),
            Reason::WrongOrigin.statement()
        )?;
        let inside: Vec<String> = subnets.iter().map(|s| format!("{s}+")).collect();
        writeln!(
            o,
            "  if net ~ [ {} ] then {};",
            inside.join(", "),
            Reason::MoreSpecific.statement()
        )?;
    }
    writeln!(
        o,
        "  if net ~ [ {network}+ ] then {};",
        Reason::Unleased.statement()
    )?;
    writeln!(o, "  {};", Reason::OutsideNetwork.statement())
}

/// The values' texts in their order, without repeats.
fn sorted<T: Display + Ord>(values: impl Iterator<Item = T>) -> Vec<String> {
    let mut v: Vec<T> = values.collect();
    v.sort_unstable();
    v.dedup();
    v.iter().map(ToString::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(subnet: &str, ip: &str) -> LeaseRoute {
        LeaseRoute {
            subnet: subnet.parse().unwrap(),
            next_hop: ip.parse().unwrap(),
            origin_as: 64512,
        }
    }

    #[test]
    fn words_round_trip() {
        for r in Reason::ALL {
            assert_eq!(Reason::from_word(r.word()), Some(r));
            assert!(!r.word().contains(char::is_whitespace));
        }
        assert_eq!(Reason::from_word("other"), None);
    }

    #[test]
    fn classification_from_the_leases() {
        let mut o = String::new();
        let leases = [
            lease("10.244.3.0/24", "172.31.250.3"),
            lease("10.244.1.0/24", "172.31.250.1"),
        ];
        write_classification(&mut o, "10.244.0.0/16".parse().unwrap(), &leases).unwrap();
        assert_eq!(
            o,
            "  # Refused: say why.\n\
             \x20 if net ~ [ 10.244.1.0/24, 10.244.3.0/24 ] then { if bgp_next_hop ~ [ 172.31.250.1, 172.31.250.3 ] then refuse(\"wrong-next-hop\"); refuse(\"wrong-origin\"); }\n\
             \x20 if net ~ [ 10.244.1.0/24+, 10.244.3.0/24+ ] then refuse(\"more-specific\");\n\
             \x20 if net ~ [ 10.244.0.0/16+ ] then refuse(\"unleased\");\n\
             \x20 refuse(\"outside-network\");\n"
        );
        // No lease: the two lease tests are left out.
        let mut o = String::new();
        write_classification::<ipnetwork::Ipv4Network, std::net::Ipv4Addr>(
            &mut o,
            "10.244.0.0/16".parse().unwrap(),
            &[],
        )
        .unwrap();
        assert!(!o.contains("wrong-next-hop") && !o.contains("more-specific"));
        assert!(o.contains("refuse(\"unleased\")") && o.contains("refuse(\"outside-network\")"));
    }
}
