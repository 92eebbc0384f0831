//! Deterministic VTEP MACs: derived from the VTEP address so every node computes the same
//! value for every peer without a store, and a node's device gets the same MAC after a
//! restart or a recreate (the flannel#533/#1795 class of stale-ARP bugs cannot happen).

use std::net::Ipv4Addr;

use sha2::{Digest, Sha256};

/// Domain separation, so the MAC cannot collide with other hash-derived MACs of the suite.
const DOMAIN: &[u8] = b"ferrocni-vxlan-vtep:";

/// The VTEP MAC of `vtep` (a node subnet's network address): 6 bytes of SHA-256, with the
/// locally-administered bit set and the multicast bit clear.
pub fn vtep_mac(vtep: Ipv4Addr) -> [u8; 6] {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(vtep.octets());
    let digest = h.finalize();
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&digest[..6]);
    mac[0] = (mac[0] & 0xfc) | 0x02;
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_unicast_local_and_distinct() {
        let a = vtep_mac(Ipv4Addr::new(10, 244, 1, 0));
        assert_eq!(a, vtep_mac(Ipv4Addr::new(10, 244, 1, 0)));
        assert_eq!(a[0] & 0x01, 0, "unicast");
        assert_eq!(a[0] & 0x02, 0x02, "locally administered");
        assert_ne!(a, vtep_mac(Ipv4Addr::new(10, 244, 2, 0)));
    }
}
