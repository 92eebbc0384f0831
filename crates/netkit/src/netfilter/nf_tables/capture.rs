//! Comparing our batches with the tools' netlink traffic. A capture is the hex of one
//! datagram nft or iptables-nft sent, as printed by
//! `strace -e trace=sendmsg -e write=3 TOOL ...` (the hex dump joined into one line); plugins
//! keep theirs under `testdata/` and compare in unit tests with [`assert_same_messages`].

use super::socket::Batch;

/// One message of a batch: netlink type, flags, and the hex of family+attributes (sequence
/// numbers and the batch header are left out: iptables adds a generation id to it).
pub type Message = (u16, u16, String);

const NLMSG_HDRLEN: usize = 16;
const BATCH_BEGIN: u16 = 0x10;
const BATCH_END: u16 = 0x11;

/// Bytes of a hex string (whitespace around it ignored; a bad digit reads as 0).
pub fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2).unwrap_or("00"), 16).unwrap_or(0))
        .collect()
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The messages of a batch datagram, BATCH_BEGIN and BATCH_END left out.
pub fn messages(datagram: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut rest = datagram;
    while rest.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            break;
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        let flags = u16::from_ne_bytes([rest[6], rest[7]]);
        if kind != BATCH_BEGIN && kind != BATCH_END {
            out.push((kind, flags, hex(&rest[NLMSG_HDRLEN..len])));
        }
        rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
    }
    out
}

/// The messages `batch` sends.
pub fn batch_messages(batch: &Batch) -> Vec<Message> {
    messages(&batch.encode(0))
}

/// Panics, naming the first differing message, unless `batch` sends exactly the messages of
/// the captured datagram `golden` (hex).
pub fn assert_same_messages(batch: &Batch, golden: &str) {
    let ours = batch_messages(batch);
    let theirs = messages(&unhex(golden));
    assert_eq!(ours.len(), theirs.len(), "message count");
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "message {i} differs");
    }
}
