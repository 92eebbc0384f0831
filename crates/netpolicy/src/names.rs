//! The plan's set names: derived from what the set holds (policy, direction, rule, peer class,
//! family), so the same policy gives the same names in every compile and after a restart; short
//! enough for nf_tables (set names are at most 255 bytes); unique through a hash of the whole
//! key (64-bit FNV-1a, computed here so it can never change with a library's version).

use crate::model::PolicyKey;
use crate::plan::{Direction, Family};

/// What a set holds of a rule's peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PeerClass {
    /// The addresses of the pods the rule's selectors match.
    Pods,
    /// The rule's ipBlocks, as intervals.
    Blocks,
    /// (address, protocol, port) of the destination pods' named ports (egress).
    NamedPorts,
}

impl PeerClass {
    fn tag(self) -> &'static str {
        match self {
            PeerClass::Pods => "pod",
            PeerClass::Blocks => "blk",
            PeerClass::NamedPorts => "np",
        }
    }
}

/// How many bytes of the namespace and of the policy name a set name keeps to be readable.
const NAMESPACE_PART: usize = 24;
const POLICY_PART: usize = 40;

/// The set's name, e.g. `prod.allow-web.i0.pod4.3f2a...` (at most 100 bytes).
pub fn set_name(
    policy: &PolicyKey,
    direction: Direction,
    rule: usize,
    class: PeerClass,
    family: Family,
) -> String {
    let dir = match direction {
        Direction::Ingress => 'i',
        Direction::Egress => 'e',
    };
    let fam = match family {
        Family::V4 => '4',
        Family::V6 => '6',
    };
    let mut hash = Fnv::new();
    hash.write(policy.namespace.as_bytes());
    hash.write(&[0]);
    hash.write(policy.name.as_bytes());
    hash.write(&[0, dir as u8, fam as u8]);
    hash.write(class.tag().as_bytes());
    hash.write(&(rule as u64).to_le_bytes());
    format!(
        "{}.{}.{dir}{rule}.{}{fam}.{:016x}",
        readable(&policy.namespace, NAMESPACE_PART),
        readable(&policy.name, POLICY_PART),
        class.tag(),
        hash.finish()
    )
}

/// At most `max` bytes of `text`, with anything outside a Kubernetes name's characters made
/// `_` (the hash keeps names apart whatever this drops).
fn readable(text: &str, max: usize) -> String {
    text.bytes()
        .take(max)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' {
                c as char
            } else {
                '_'
            }
        })
        .collect()
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> PolicyKey {
        PolicyKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn stable_and_readable() {
        let n = set_name(
            &key("prod", "allow-web"),
            Direction::Ingress,
            0,
            PeerClass::Pods,
            Family::V4,
        );
        // The value is fixed: a name must not change between builds or restarts.
        assert_eq!(n, "prod.allow-web.i0.pod4.3acdafa162f96706");
        assert_eq!(
            n,
            set_name(
                &key("prod", "allow-web"),
                Direction::Ingress,
                0,
                PeerClass::Pods,
                Family::V4
            )
        );
    }

    #[test]
    fn fnv1a_known_values() {
        let mut h = Fnv::new();
        assert_eq!(h.finish(), 0xcbf2_9ce4_8422_2325);
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
        let mut h = Fnv::new();
        h.write(b"foobar");
        assert_eq!(h.finish(), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn every_part_of_the_key_counts() {
        let base = key("prod", "allow-web");
        let names = [
            set_name(&base, Direction::Ingress, 0, PeerClass::Pods, Family::V4),
            set_name(&base, Direction::Egress, 0, PeerClass::Pods, Family::V4),
            set_name(&base, Direction::Ingress, 1, PeerClass::Pods, Family::V4),
            set_name(&base, Direction::Ingress, 0, PeerClass::Blocks, Family::V4),
            set_name(&base, Direction::Ingress, 0, PeerClass::Pods, Family::V6),
            set_name(
                &key("prod", "allow-web2"),
                Direction::Ingress,
                0,
                PeerClass::Pods,
                Family::V4,
            ),
            // The separator is hashed: "a"/"bc" is not "ab"/"c".
            set_name(
                &key("pro", "dallow-web"),
                Direction::Ingress,
                0,
                PeerClass::Pods,
                Family::V4,
            ),
        ];
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn long_names_truncated_and_still_apart() {
        let ns = "n".repeat(63);
        let a = "p".repeat(253);
        let mut b = a.clone();
        b.replace_range(252.., "q");
        let na = set_name(
            &key(&ns, &a),
            Direction::Egress,
            12345,
            PeerClass::NamedPorts,
            Family::V6,
        );
        let nb = set_name(
            &key(&ns, &b),
            Direction::Egress,
            12345,
            PeerClass::NamedPorts,
            Family::V6,
        );
        assert!(na.len() <= 100, "{na}");
        assert_ne!(na, nb);
        assert!(na.starts_with(&format!(
            "{}.{}.e12345.np6.",
            "n".repeat(24),
            "p".repeat(40)
        )));
    }
}
