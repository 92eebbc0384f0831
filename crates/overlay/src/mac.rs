//! Deterministic VTEP MACs: derived from the VTEP address so every node computes the same
//! value for every peer without a store, and a node's device gets the same MAC after a
//! restart or a recreate (so peers never keep a stale ARP or FDB entry for a changed MAC).

use std::net::IpAddr;

use sha2::{Digest, Sha256};

/// Domain separation, so the MAC cannot collide with other hash-derived MACs of the suite.
const DOMAIN: &[u8] = b"ferrocni-vxlan-vtep:";

/// The VTEP MAC of `vtep` (a node subnet's network address): 6 bytes of SHA-256 over the
/// address's octets (4 or 16), with the locally-administered bit set and the multicast bit
/// clear.
pub fn vtep_mac(vtep: IpAddr) -> [u8; 6] {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    match vtep {
        IpAddr::V4(v4) => h.update(v4.octets()),
        IpAddr::V6(v6) => h.update(v6.octets()),
    }
    let digest = h.finalize();
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&digest[..6]);
    mac[0] = (mac[0] & 0xfc) | 0x02;
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn stable_unicast_local_and_distinct() {
        let a = vtep_mac(ip("10.244.1.0"));
        assert_eq!(a, vtep_mac(ip("10.244.1.0")));
        assert_eq!(a[0] & 0x01, 0, "unicast");
        assert_eq!(a[0] & 0x02, 0x02, "locally administered");
        assert_ne!(a, vtep_mac(ip("10.244.2.0")));
        let v6 = vtep_mac(ip("fd00:10:244:1::"));
        assert_eq!(v6[0] & 0x03, 0x02);
        assert_ne!(v6, vtep_mac(ip("fd00:10:244:2::")));
        assert_ne!(v6, a);
    }

    /// sha256("ferrocni-vxlan-vtep:" ++ [10, 244, 1, 0]), first 6 bytes, bits fixed.
    const KNOWN_10_244_1_0: &str = "62:0c:38:e5:79:a5";

    /// Published in leases and derived by every node: the IPv4 derivation must never change.
    #[test]
    fn ipv4_derivation_is_stable_across_releases() {
        assert_eq!(
            netkit::link::format_mac(&vtep_mac(ip("10.244.1.0"))),
            KNOWN_10_244_1_0
        );
    }
}
