//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! A [`Sum`] accumulates big-endian 16-bit words without folding; pieces of one checksummed
//! span (pseudo-header, header, payload) are added one after another, each starting at an even
//! offset of the span, and [`Sum::checksum`] gives the value to store.

/// An unfolded one's complement sum of big-endian 16-bit words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum(u64);

impl Sum {
    /// Adds `data`, which starts at an even offset of the span (an odd last byte is padded
    /// with a zero byte, as the span's end is).
    #[inline]
    pub fn add_bytes(self, data: &[u8]) -> Sum {
        Sum(self.0 + u64::from(fold_native(data)))
    }

    /// Adds one 16-bit word.
    #[inline]
    pub fn add_u16(self, word: u16) -> Sum {
        Sum(self.0 + u64::from(word))
    }

    /// Adds a 32-bit value as its two 16-bit words (an IPv4 address, a sequence number).
    #[inline]
    pub fn add_u32(self, value: u32) -> Sum {
        Sum(self.0 + u64::from(value >> 16) + u64::from(value & 0xffff))
    }

    /// The IPv4 pseudo-header of a TCP or UDP checksum: addresses, protocol, transport length.
    #[inline]
    pub fn pseudo_header(src: [u8; 4], dst: [u8; 4], protocol: u8, length: u16) -> Sum {
        Sum::default()
            .add_u32(u32::from_be_bytes(src))
            .add_u32(u32::from_be_bytes(dst))
            .add_u16(u16::from(protocol))
            .add_u16(length)
    }

    /// The 16-bit one's complement sum (what a CHECKSUM_PARTIAL field holds: the
    /// pseudo-header's sum, not inverted).
    #[inline]
    pub fn fold(self) -> u16 {
        fold64(self.0)
    }

    /// The checksum to store: the inverted sum.
    #[inline]
    pub fn checksum(self) -> u16 {
        !self.fold()
    }
}

/// The checksum of `data` alone (an IPv4 header with its checksum field zeroed, an ICMP message).
pub fn checksum(data: &[u8]) -> u16 {
    Sum::default().add_bytes(data).checksum()
}

/// Whether `data` (holding its own checksum field) sums to all ones, i.e. its checksum is right.
pub fn verifies(sum: Sum) -> bool {
    sum.fold() == 0xffff
}

/// RFC 1624 equation 3: the checksum `check` after one 16-bit word of the span changes from
/// `old` to `new`, `HC' = ~(~HC + ~m + m')`.
#[inline]
pub fn update(check: u16, old: u16, new: u16) -> u16 {
    !fold64(u64::from(!check) + u64::from(!old) + u64::from(new))
}

#[inline]
fn fold64(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The folded sum of `data` as big-endian words. Words are summed in the machine's own byte
/// order and the folded result swapped once: one's complement addition commutes with the byte
/// swap (RFC 1071, 2.(B)). Four u32 lanes into u64 accumulators let the compiler vectorise.
#[inline]
fn fold_native(data: &[u8]) -> u16 {
    let mut acc = [0u64; 4];
    let mut blocks = data.chunks_exact(16);
    for block in &mut blocks {
        for (lane, word) in acc.iter_mut().zip(block.chunks_exact(4)) {
            *lane += u64::from(u32::from_ne_bytes([word[0], word[1], word[2], word[3]]));
        }
    }
    let mut sum = acc[0] + acc[1] + acc[2] + acc[3];
    let mut rest = blocks.remainder().chunks_exact(2);
    for pair in &mut rest {
        sum += u64::from(u16::from_ne_bytes([pair[0], pair[1]]));
    }
    if let [last] = rest.remainder() {
        sum += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    u16::from_be(fold64(sum))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The checksum as RFC 1071 describes it, one big-endian word at a time.
    pub(crate) fn reference(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in data.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn matches_the_word_by_word_sum_for_every_length_and_offset() {
        let data: Vec<u8> = (0..2100u32).map(|i| (i * 7919 % 251) as u8).collect();
        for len in 0..300 {
            for start in [0, 2, 6] {
                let slice = &data[start..start + len];
                assert_eq!(checksum(slice), reference(slice), "len {len} start {start}");
            }
        }
        assert_eq!(checksum(&data), reference(&data));
        let ones = vec![0xffu8; 1500];
        assert_eq!(checksum(&ones), reference(&ones));
    }

    #[test]
    fn pieces_add_up_to_the_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 256) as u8).collect();
        let whole = checksum(&data);
        let pieces = Sum::default()
            .add_bytes(&data[..20])
            .add_bytes(&data[20..540])
            .add_bytes(&data[540..]);
        assert_eq!(pieces.checksum(), whole);
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Sum::default().add_bytes(&data).fold(), 0xddf2);
    }

    #[test]
    fn a_span_with_its_checksum_verifies() {
        let mut header = [
            0x45, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0, 0, 10, 244, 1, 2, 10,
            244, 2, 3,
        ];
        let c = checksum(&header);
        header[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(verifies(Sum::default().add_bytes(&header)));
        header[8] = 0x3f;
        assert!(!verifies(Sum::default().add_bytes(&header)));
    }

    #[test]
    fn incremental_update_matches_a_full_recompute() {
        // Every TTL from 255 down, with a protocol byte after it, as the TTL word changes.
        for ttl in 2u8..=255 {
            for proto in [1u8, 6, 17] {
                let mut header = [
                    0x45, 0x00, 0x05, 0xc0, 0xbe, 0xef, 0x40, 0x00, ttl, proto, 0, 0, 10, 244, 7,
                    9, 10, 244, 200, 1,
                ];
                let before = checksum(&header);
                header[10..12].copy_from_slice(&before.to_be_bytes());
                let old = u16::from_be_bytes([ttl, proto]);
                header[8] = ttl - 1;
                let new = u16::from_be_bytes([ttl - 1, proto]);
                let updated = update(before, old, new);
                header[10..12].copy_from_slice(&updated.to_be_bytes());
                assert!(
                    verifies(Sum::default().add_bytes(&header)),
                    "ttl {ttl} proto {proto}"
                );
                header[10..12].copy_from_slice(&[0, 0]);
                assert_eq!(updated, checksum(&header), "ttl {ttl} proto {proto}");
            }
        }
    }

    #[test]
    fn pseudo_header_words() {
        let s = Sum::pseudo_header([10, 0, 0, 1], [10, 0, 0, 2], 6, 40);
        assert_eq!(s.fold(), 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 6 + 40);
    }
}
