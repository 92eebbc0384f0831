//! Netlink attributes (TLVs) as nf_tables uses them: 4-byte header (length, type), payload
//! padded to 4 bytes, integers in network byte order, nested attributes flagged NLA_F_NESTED.

/// Set on the type of an attribute whose payload is itself a list of attributes.
pub const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLA_HDRLEN: usize = 4;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends attributes to a message buffer.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    /// An attribute with a raw payload (padded to 4 bytes).
    pub fn bytes(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        let len = NLA_HDRLEN + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    /// A NUL-terminated string.
    pub fn string(&mut self, kind: u16, value: &str) -> &mut Self {
        let mut v = Vec::with_capacity(value.len() + 1);
        v.extend_from_slice(value.as_bytes());
        v.push(0);
        self.bytes(kind, &v)
    }

    pub fn be32(&mut self, kind: u16, value: u32) -> &mut Self {
        self.bytes(kind, &value.to_be_bytes())
    }

    pub fn be64(&mut self, kind: u16, value: u64) -> &mut Self {
        self.bytes(kind, &value.to_be_bytes())
    }

    /// A nested attribute whose content `fill` writes.
    pub fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut Writer)) -> &mut Self {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        let mut inner = Writer {
            buf: std::mem::take(&mut self.buf),
        };
        fill(&mut inner);
        self.buf = inner.buf;
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        // Content copied as it came (an expression netkit does not model) may end unaligned;
        // the next attribute starts on a 4-byte boundary all the same.
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }
}

/// One parsed attribute: its type (flags removed) and payload (padding removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The payload as a NUL-terminated string (lossy on bad UTF-8).
    pub fn string(&self) -> String {
        let v = self.value.split(|b| *b == 0).next().unwrap_or(self.value);
        String::from_utf8_lossy(v).into_owned()
    }

    pub fn be32(&self) -> Option<u32> {
        Some(u32::from_be_bytes(self.value.get(..4)?.try_into().ok()?))
    }

    pub fn be64(&self) -> Option<u64> {
        Some(u64::from_be_bytes(self.value.get(..8)?.try_into().ok()?))
    }

    /// The attributes nested in the payload.
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.value)
    }
}

/// Iterates over the attributes of a buffer; stops (without panicking) at malformed data.
#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Attrs<'a> {
    pub fn new(buf: &'a [u8]) -> Attrs<'a> {
        Attrs { rest: buf }
    }

    /// The first attribute of type `kind`.
    pub fn get(&self, kind: u16) -> Option<Attr<'a>> {
        self.clone().find(|a: &Attr| a.kind == kind)
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Attr<'a>;

    fn next(&mut self) -> Option<Attr<'a>> {
        if self.rest.len() < NLA_HDRLEN {
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let kind = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let value = &self.rest[NLA_HDRLEN..len];
        self.rest = self.rest.get(align4(len)..).unwrap_or(&[]);
        Some(Attr { kind, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_padded_and_nested_attributes() {
        let mut w = Writer::new();
        w.string(1, "t1").nested(4, |n| {
            n.be32(1, 2);
        });
        assert_eq!(
            w.buf,
            [7, 0, 1, 0, b't', b'1', 0, 0, 12, 0, 4, 0x80, 8, 0, 1, 0, 0, 0, 0, 2]
        );
        let attrs: Vec<Attr> = Attrs::new(&w.buf).collect();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0].string(), "t1");
        assert_eq!(attrs[1].kind, 4);
        assert_eq!(attrs[1].nested().get(1).and_then(|a| a.be32()), Some(2));
    }

    /// Found by fuzzing (nftables_reply): an unknown expression whose data, copied back as
    /// read, ended unaligned, and the rule's next attribute was written unaligned after it,
    /// so the rule read back lost that attribute.
    #[test]
    fn nested_content_ending_unaligned_keeps_the_next_attribute_aligned() {
        let mut w = Writer::new();
        w.nested(2, |n| n.buf.extend_from_slice(&[6, 0, 1, 0, b'x', 0]))
            .be32(5, 7);
        assert_eq!(w.buf.len(), 20);
        let attrs: Vec<Attr> = Attrs::new(&w.buf).collect();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0].value, [6, 0, 1, 0, b'x', 0]);
        assert_eq!((attrs[1].kind, attrs[1].be32()), (5, Some(7)));
    }

    #[test]
    fn malformed_input_ends_iteration() {
        assert_eq!(Attrs::new(&[0xff, 0xff, 1, 0]).count(), 0);
        assert_eq!(Attrs::new(&[2, 0, 1, 0]).count(), 0);
        assert_eq!(Attrs::new(&[1, 2]).count(), 0);
        let a = Attr {
            kind: 1,
            value: &[1],
        };
        assert_eq!(a.be32(), None);
    }
}
