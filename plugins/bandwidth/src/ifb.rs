//! The IFB device name, identical to the reference's so both plugins find each other's
//! devices: `bwp` + the first 12 hex digits of sha512(network name + container id).

use sha2::{Digest, Sha512};

const PREFIX: &str = "bwp";
const MAX_IFNAME_LEN: usize = 15;

pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::new()
        .chain_update(network.as_bytes())
        .chain_update(container_id.as_bytes())
        .finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{}", &hex[..MAX_IFNAME_LEN - PREFIX.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_name() {
        // Observed from /usr/lib/cni/bandwidth with network "bwnet" and container "cid1".
        assert_eq!(ifb_name("bwnet", "cid1"), "bwp9aa1ffe1e8dd");
        assert_eq!(ifb_name("bwnet", "cid1").len(), 15);
        assert_ne!(ifb_name("bwnet", "cid2"), ifb_name("bwnet", "cid1"));
    }
}
