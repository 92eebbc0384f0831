//! DHCPv4 messages (RFC 2131/2132): encoding the client's messages and decoding the
//! server's replies. Option 52 (overload) is honoured when decoding.

use std::net::Ipv4Addr;

pub const BOOTREQUEST: u8 = 1;
pub const BOOTREPLY: u8 = 2;
const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
const FIXED_LEN: usize = 236;
/// The BOOTP broadcast flag: ask the server to broadcast its replies.
pub const FLAG_BROADCAST: u16 = 0x8000;

pub mod opt {
    pub const PAD: u8 = 0;
    pub const SUBNET_MASK: u8 = 1;
    pub const ROUTER: u8 = 3;
    pub const HOST_NAME: u8 = 12;
    pub const STATIC_ROUTES: u8 = 33;
    pub const REQUESTED_IP: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const OVERLOAD: u8 = 52;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const PARAMETER_REQUEST_LIST: u8 = 55;
    pub const RENEWAL_TIME: u8 = 58;
    pub const REBINDING_TIME: u8 = 59;
    pub const CLASS_ID: u8 = 60;
    pub const CLIENT_ID: u8 = 61;
    pub const USER_CLASS: u8 = 77;
    pub const CLASSLESS_ROUTES: u8 = 121;
    pub const END: u8 = 255;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    Discover = 1,
    Offer = 2,
    Request = 3,
    Decline = 4,
    Ack = 5,
    Nak = 6,
    Release = 7,
}

impl MessageType {
    fn from_u8(v: u8) -> Option<MessageType> {
        Some(match v {
            1 => MessageType::Discover,
            2 => MessageType::Offer,
            3 => MessageType::Request,
            4 => MessageType::Decline,
            5 => MessageType::Ack,
            6 => MessageType::Nak,
            7 => MessageType::Release,
            _ => return None,
        })
    }
}

/// A DHCP message; options in the order they are sent (or were received).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub op: u8,
    pub xid: u32,
    pub secs: u16,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub siaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub chaddr: [u8; 6],
    pub options: Vec<(u8, Vec<u8>)>,
}

impl Message {
    /// A client request of `kind` from hardware address `mac`.
    pub fn request(kind: MessageType, xid: u32, mac: [u8; 6]) -> Message {
        Message {
            op: BOOTREQUEST,
            xid,
            secs: 0,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            chaddr: mac,
            options: vec![(opt::MESSAGE_TYPE, vec![kind as u8])],
        }
    }

    /// Sets option `code`, replacing an earlier value (as the Go library's `Update`).
    pub fn set(&mut self, code: u8, value: Vec<u8>) {
        match self.options.iter_mut().find(|(c, _)| *c == code) {
            Some(slot) => slot.1 = value,
            None => self.options.push((code, value)),
        }
    }

    pub fn get(&self, code: u8) -> Option<&[u8]> {
        self.options
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v.as_slice())
    }

    pub fn message_type(&self) -> Option<MessageType> {
        self.get(opt::MESSAGE_TYPE)
            .and_then(|v| v.first())
            .and_then(|b| MessageType::from_u8(*b))
    }

    pub fn ipv4_option(&self, code: u8) -> Option<Ipv4Addr> {
        let v = self.get(code)?;
        (v.len() >= 4).then(|| Ipv4Addr::new(v[0], v[1], v[2], v[3]))
    }

    pub fn u32_option(&self, code: u8) -> Option<u32> {
        let v = self.get(code)?;
        (v.len() == 4).then(|| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
    }

    /// The wire form; options longer than 255 bytes are split (RFC 3396).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(300);
        out.extend([self.op, 1, 6, 0]);
        out.extend(self.xid.to_be_bytes());
        out.extend(self.secs.to_be_bytes());
        out.extend(self.flags.to_be_bytes());
        for a in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            out.extend(a.octets());
        }
        out.extend(self.chaddr);
        out.extend([0u8; 10 + 64 + 128]);
        out.extend(MAGIC_COOKIE);
        for (code, value) in &self.options {
            let chunks: Vec<&[u8]> = if value.is_empty() {
                vec![&[][..]]
            } else {
                value.chunks(255).collect()
            };
            for chunk in chunks {
                out.push(*code);
                out.push(chunk.len() as u8);
                out.extend(chunk);
            }
        }
        out.push(opt::END);
        // Some servers and relays ignore messages shorter than a BOOTP packet.
        while out.len() < 300 {
            out.push(opt::PAD);
        }
        out
    }

    /// Parses a message; `None` when it is not a well-formed DHCP message.
    pub fn decode(bytes: &[u8]) -> Option<Message> {
        if bytes.len() < FIXED_LEN + 4 || bytes[FIXED_LEN..FIXED_LEN + 4] != MAGIC_COOKIE {
            return None;
        }
        let ip = |at: usize| Ipv4Addr::new(bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]);
        let mut chaddr = [0u8; 6];
        chaddr.copy_from_slice(&bytes[28..34]);
        let mut msg = Message {
            op: bytes[0],
            xid: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            secs: u16::from_be_bytes([bytes[8], bytes[9]]),
            flags: u16::from_be_bytes([bytes[10], bytes[11]]),
            ciaddr: ip(12),
            yiaddr: ip(16),
            siaddr: ip(20),
            giaddr: ip(24),
            chaddr,
            options: Vec::new(),
        };
        parse_options(&bytes[FIXED_LEN + 4..], &mut msg.options)?;
        let overload = msg.get(opt::OVERLOAD).and_then(|v| v.first().copied());
        if let Some(o) = overload {
            if o & 1 != 0 {
                parse_options(&bytes[108..236], &mut msg.options)?;
            }
            if o & 2 != 0 {
                parse_options(&bytes[44..108], &mut msg.options)?;
            }
        }
        Some(msg)
    }
}

/// Appends the options in `data`; repeated codes are concatenated (RFC 3396).
fn parse_options(mut data: &[u8], out: &mut Vec<(u8, Vec<u8>)>) -> Option<()> {
    while let Some((&code, rest)) = data.split_first() {
        match code {
            opt::PAD => data = rest,
            opt::END => break,
            _ => {
                let (&len, rest) = rest.split_first()?;
                let len = usize::from(len);
                if rest.len() < len {
                    return None;
                }
                let value = &rest[..len];
                match out.iter_mut().find(|(c, _)| *c == code) {
                    Some(slot) => slot.1.extend_from_slice(value),
                    None => out.push((code, value.to_vec())),
                }
                data = &rest[len..];
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_long_options() {
        let mut m = Message::request(MessageType::Discover, 0xdeadbeef, [2, 0, 0, 0, 0, 1]);
        m.flags = FLAG_BROADCAST;
        m.set(opt::CLIENT_ID, vec![b'x'; 300]);
        m.set(opt::PARAMETER_REQUEST_LIST, vec![3, 1]);
        m.set(opt::PARAMETER_REQUEST_LIST, vec![3, 1, 121]);
        let wire = m.encode();
        assert_eq!(&wire[236..240], &MAGIC_COOKIE);
        let back = Message::decode(&wire).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.message_type(), Some(MessageType::Discover));
        assert_eq!(
            back.get(opt::PARAMETER_REQUEST_LIST),
            Some(&[3, 1, 121][..])
        );
    }

    #[test]
    fn garbage_is_refused() {
        assert!(Message::decode(&[0u8; 10]).is_none());
        let mut wire = Message::request(MessageType::Ack, 1, [0; 6]).encode();
        wire[241] = 200; // an option length past the end
        wire.truncate(245);
        assert!(Message::decode(&wire).is_none());
    }

    #[test]
    fn overloaded_file_field_is_read() {
        let mut m = Message::request(MessageType::Offer, 7, [0; 6]);
        m.set(opt::OVERLOAD, vec![1]);
        let mut wire = m.encode();
        wire[108..115].copy_from_slice(&[opt::ROUTER, 4, 10, 0, 0, 1, opt::END]);
        let back = Message::decode(&wire).unwrap();
        assert_eq!(
            back.ipv4_option(opt::ROUTER),
            Some(Ipv4Addr::new(10, 0, 0, 1))
        );
    }
}
