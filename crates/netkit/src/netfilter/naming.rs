//! Object names and comments exactly as the reference plugins derive them, so hosts that ran
//! the reference plugins are cleaned up by ours and vice versa.

use sha2::{Digest, Sha256, Sha512};

/// Longest iptables chain name the reference produces.
pub const MAX_CHAIN_LEN: usize = 28;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `CNI-` + hex(sha512(name + id)), cut to 28 characters (reference `FormatChainName`).
pub fn chain_name(network: &str, container_id: &str) -> String {
    chain_name_with_prefix(network, container_id, "")
}

/// `CNI-<prefix>` + hex(sha512(name + id)), cut to 28 characters (e.g. prefix `DN-` for portmap).
pub fn chain_name_with_prefix(network: &str, container_id: &str, prefix: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let mut chain = format!("CNI-{prefix}{}", hex(&digest));
    chain.truncate(MAX_CHAIN_LEN);
    chain
}

/// `name: "<net>" id: "<cid>"` (reference `FormatComment`, Go `%q` quoting).
pub fn comment(network: &str, container_id: &str) -> String {
    format!("name: {} id: {}", go_quote(network), go_quote(container_id))
}

/// Go's `%q` for the printable strings CNI names are made of: escapes `"` and `\`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// First 16 hex chars of sha256(s) (reference nftables ipmasq `hashForNetwork`).
pub fn short_hash(s: &str) -> String {
    let mut h = hex(&Sha256::digest(s.as_bytes()));
    h.truncate(16);
    h
}

/// `<hash(net)>-<hash(ifname:cid)>`: the prefix of an attachment's nftables masquerade comment.
pub fn instance_hash(network: &str, ifname: &str, container_id: &str) -> String {
    format!(
        "{}-{}",
        short_hash(network),
        short_hash(&format!("{ifname}:{container_id}"))
    )
}

/// Whether an nftables comment written with [`instance_comment`] (or starting with
/// [`instance_hash`]) is of the attachment (`container_id`, `ifname`) on any network. A
/// container holds one interface of a name at a time, so that pair names the attachment, and
/// a DEL finds its rules even when it names another network than the ADD did.
pub fn names_attachment(comment: &str, ifname: &str, container_id: &str) -> bool {
    const HASH_LEN: usize = 16;
    let bytes = comment.as_bytes();
    bytes.len() > 2 * HASH_LEN
        && bytes[..HASH_LEN].iter().all(u8::is_ascii_hexdigit)
        && bytes[HASH_LEN] == b'-'
        && comment[HASH_LEN + 1..].starts_with(&short_hash(&format!("{ifname}:{container_id}")))
}

/// Longest comment nftables stores (knftables `CommentLengthMax`).
pub const NFT_COMMENT_MAX: usize = 128;

/// The nftables masquerade rule comment: hash prefix + human-readable (quote-free) details.
pub fn instance_comment(network: &str, ifname: &str, container_id: &str) -> String {
    let strip = |s: &str| s.replace('"', "");
    let mut c = format!(
        "{}, net: {}, if: {}, id: {}",
        instance_hash(network, ifname, container_id),
        strip(network),
        strip(ifname),
        strip(container_id)
    );
    if c.len() > NFT_COMMENT_MAX {
        let mut cut = NFT_COMMENT_MAX;
        while !c.is_char_boundary(cut) {
            cut -= 1;
        }
        c.truncate(cut);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_found_on_any_network() {
        let c = instance_comment("net-a", "eth0", "cid");
        assert!(names_attachment(&c, "eth0", "cid"));
        assert!(names_attachment(
            &instance_hash("net-b", "eth0", "cid"),
            "eth0",
            "cid"
        ));
        assert!(!names_attachment(&c, "eth1", "cid"));
        assert!(!names_attachment(&c, "eth0", "cid2"));
        assert!(!names_attachment("cid", "eth0", "cid"));
        assert!(!names_attachment("", "eth0", "cid"));
        // Any 17 bytes then the hash: only a hex network hash and its dash count.
        let forged = format!("xxxxxxxxxxxxxxxx-{}", short_hash("eth0:cid"));
        assert!(!names_attachment(&forged, "eth0", "cid"));
        // Multi-byte text where the hash would be: no panic on a char boundary.
        assert!(!names_attachment("ééééééééééééééééééé", "eth0", "cid"));
    }

    #[test]
    fn chain_name_matches_reference_shape() {
        let c = chain_name("mynet", "c1");
        assert_eq!(c.len(), 28);
        assert!(c.starts_with("CNI-"));
        // sha512("mynetc1") starts with these hex digits (checked against sha512sum).
        let full = hex(&Sha512::digest(b"mynetc1"));
        assert_eq!(&c[4..], &full[..24]);
        assert!(chain_name_with_prefix("n", "c", "DN-").starts_with("CNI-DN-"));
    }

    #[test]
    fn comments() {
        assert_eq!(comment("net", "cid"), r#"name: "net" id: "cid""#);
        assert_eq!(short_hash("").len(), 16);
        assert_eq!(short_hash(""), "e3b0c44298fc1c14");
        let c = instance_comment("net", "eth0", "cid");
        assert!(c.starts_with(&instance_hash("net", "eth0", "cid")));
        assert!(c.ends_with(", net: net, if: eth0, id: cid"));
        assert!(instance_comment("n", "eth0", &"x".repeat(300)).len() <= NFT_COMMENT_MAX);
    }
}
