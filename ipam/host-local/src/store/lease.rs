//! Lease-file content: `<containerID>\r\n<ifname>` (current) or `<containerID>` (legacy).

/// Who holds an address, as read from its lease file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Attachment {
        cid: String,
        ifname: String,
    },
    /// Written by old reference versions: container ID only.
    Legacy {
        cid: String,
    },
    /// Content we cannot attribute (still blocks the address; GC may release it).
    Foreign,
    /// A symlink, directory or other non-file under an address name: blocks the address,
    /// never touched.
    NotAFile,
    /// Empty or NUL-filled: a crash leftover that can never be anyone's lease; reclaimable.
    Junk,
}

fn is_clean_token(s: &str) -> bool {
    !s.is_empty()
        && !s
            .bytes()
            .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
}

impl Owner {
    /// Parses content the way the reference matches it (after trimming whitespace).
    pub fn parse(content: &[u8]) -> Owner {
        if content.contains(&0) {
            return Owner::Junk;
        }
        let Ok(text) = std::str::from_utf8(content) else {
            return Owner::Foreign;
        };
        let text = text.trim();
        if text.is_empty() {
            return Owner::Junk;
        }
        match text.split_once("\r\n") {
            Some((cid, ifname)) if is_clean_token(cid) && is_clean_token(ifname) => {
                Owner::Attachment {
                    cid: cid.to_string(),
                    ifname: ifname.to_string(),
                }
            }
            Some(_) => Owner::Foreign,
            None if is_clean_token(text) => Owner::Legacy {
                cid: text.to_string(),
            },
            None => Owner::Foreign,
        }
    }

    /// The exact content of a lease written for (cid, ifname).
    pub fn content(cid: &str, ifname: &str) -> String {
        format!("{cid}\r\n{ifname}")
    }

    pub fn is_exactly(&self, cid: &str, ifname: &str) -> bool {
        matches!(self, Owner::Attachment { cid: c, ifname: i } if c == cid && i == ifname)
    }

    pub fn is_legacy_of(&self, cid: &str) -> bool {
        matches!(self, Owner::Legacy { cid: c } if c == cid)
    }

    /// Either form of ownership the reference accepts for (cid, ifname).
    pub fn belongs_to(&self, cid: &str, ifname: &str) -> bool {
        self.is_exactly(cid, ifname) || self.is_legacy_of(cid)
    }

    pub fn blocks_address(&self) -> bool {
        !matches!(self, Owner::Junk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_forms() {
        assert_eq!(
            Owner::parse(b"c1\r\neth0"),
            Owner::Attachment {
                cid: "c1".into(),
                ifname: "eth0".into()
            }
        );
        assert_eq!(
            Owner::parse(b"  c1\r\neth0\n"),
            Owner::Attachment {
                cid: "c1".into(),
                ifname: "eth0".into()
            }
        );
        assert_eq!(Owner::parse(b"c1"), Owner::Legacy { cid: "c1".into() });
        assert_eq!(Owner::parse(b""), Owner::Junk);
        assert_eq!(Owner::parse(b" \n"), Owner::Junk);
        assert_eq!(Owner::parse(b"\0\0\0"), Owner::Junk);
        assert_eq!(Owner::parse(b"a b"), Owner::Foreign);
        assert_eq!(Owner::parse(b"c1\r\neth0\r\nx"), Owner::Foreign);
        assert!(Owner::parse(b"c1").belongs_to("c1", "eth9"));
        assert!(!Owner::parse(b"c1\r\neth0").belongs_to("c1", "eth9"));
    }
}
