//! The NETLINK_NETFILTER transport: atomic batches (BATCH_BEGIN ... BATCH_END) and
//! table/chain-filtered dumps and lookups.
//!
//! A batch is sent in one `send`; the kernel processes it inside that syscall and queues any
//! error (and, for rules sent with NLM_F_ECHO, the created rule with its handle). A GETGEN
//! request with NLM_F_ACK follows as a barrier: once its ACK arrives, every reply to the batch
//! has been read. Nothing here lists a whole table: dumps name their table and chain.

use netlink_sys::{protocols::NETLINK_NETFILTER, SocketAddr};

use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;

use super::attr::Writer;
use super::msg::{
    self, encode_table_id, msg_type, nft_type, Chain, Family, Rule, Table, NFNL_MSG_BATCH_BEGIN,
    NFNL_MSG_BATCH_END, SUBSYS_NFTABLES,
};
use super::release;
use crate::netfilter::exec::{Error, Result};

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_ECHO: u16 = 0x8;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLM_F_ROOT: u16 = 0x100;
const NLM_F_MATCH: u16 = 0x200;
const NLM_F_DUMP: u16 = NLM_F_ROOT | NLM_F_MATCH;
const NLM_F_APPEND: u16 = 0x800;
pub(crate) const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const RECV_BUF_LEN: usize = 64 * 1024;
const DUMP_ATTEMPTS: usize = 10;
/// A datagram size every send buffer holds (the kernel's default is 208 KiB).
const DEFAULT_SNDBUF: usize = 64 * 1024;

/// One message of a batch.
#[derive(Debug, Clone)]
struct Op {
    kind: u16,
    flags: u16,
    family: Family,
    body: Vec<u8>,
    /// What the message does, for error messages ("add rule to inet t c").
    what: String,
    /// Whether committing it may leave objects for the kernel's deferred destroy work
    /// (a deletion, or an update of an existing object): see [`super::release`].
    defers_destroy: bool,
}

/// The messages of one atomic transaction, in order.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether committing this batch may leave objects for the kernel's deferred destroy
    /// work, which the next close of an nf_tables socket in the netns waits for.
    pub fn defers_destroy(&self) -> bool {
        self.ops.iter().any(|op| op.defers_destroy)
    }

    pub(crate) fn push(&mut self, kind: u16, flags: u16, family: Family, w: Writer, what: String) {
        // Deletions always go through the destroy work. NEWCHAIN on an existing chain is
        // recorded as an update, which does too (NEWTABLE with unchanged flags is a no-op).
        let defers_destroy = matches!(
            kind,
            msg_type::DELTABLE
                | msg_type::DELCHAIN
                | msg_type::DELRULE
                | msg_type::DELSET
                | msg_type::DELSETELEM
                | msg_type::NEWCHAIN
        );
        self.ops.push(Op {
            kind,
            flags,
            family,
            body: w.buf,
            what,
            defers_destroy,
        });
    }

    /// `add table`: creates it, or leaves an existing one as it is.
    pub fn add_table(&mut self, t: &Table) -> &mut Self {
        let mut w = Writer::new();
        t.encode(&mut w);
        let what = format!("add table {} {}", t.family.name(), t.name);
        self.push(msg_type::NEWTABLE, 0, t.family, w, what);
        self
    }

    /// `add chain`: creates it, or leaves an existing one (same hook) as it is (which the
    /// kernel records as an update of it: see [`Batch::defers_destroy`]).
    pub fn add_chain(&mut self, c: &Chain) -> &mut Self {
        let mut w = Writer::new();
        c.encode(&mut w);
        let what = format!("add chain {} {} {}", c.family.name(), c.table, c.name);
        self.push(msg_type::NEWCHAIN, NLM_F_CREATE, c.family, w, what);
        self
    }

    /// [`Batch::add_chain`] for a chain just looked up and found missing: a creation, which
    /// leaves nothing for the destroy work. Should a concurrent call create it first, the
    /// message updates it instead, as `add chain` would; only the exit then waits longer.
    pub fn create_chain(&mut self, c: &Chain) -> &mut Self {
        self.add_chain(c);
        if let Some(op) = self.ops.last_mut() {
            op.defers_destroy = false;
        }
        self
    }

    fn rule(&mut self, r: &Rule, flags: u16, verb: &str) -> &mut Self {
        let mut w = Writer::new();
        r.encode(&mut w);
        let what = format!("{verb} rule in {} {} {}", r.family.name(), r.table, r.chain);
        self.push(msg_type::NEWRULE, NLM_F_CREATE | flags, r.family, w, what);
        self
    }

    /// `add rule`: appends (after `r.position` when set).
    pub fn add_rule(&mut self, r: &Rule) -> &mut Self {
        self.rule(r, NLM_F_APPEND, "add")
    }

    /// Like [`Batch::add_rule`], and [`Socket::commit`] returns the rule with its handle.
    pub fn add_rule_echo(&mut self, r: &Rule) -> &mut Self {
        self.rule(r, NLM_F_APPEND | NLM_F_ECHO, "add")
    }

    /// `insert rule`: prepends (before `r.position` when set).
    pub fn insert_rule(&mut self, r: &Rule) -> &mut Self {
        self.rule(r, 0, "insert")
    }

    /// `delete rule ... handle H`.
    pub fn delete_rule(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        handle: u64,
    ) -> &mut Self {
        let mut w = Writer::new();
        Rule::encode_id(table, chain, Some(handle), &mut w);
        let what = format!(
            "delete rule {} {table} {chain} handle {handle}",
            family.name()
        );
        self.push(msg_type::DELRULE, 0, family, w, what);
        self
    }

    /// `flush chain`: deletes every rule of the chain.
    pub fn flush_chain(&mut self, family: Family, table: &str, chain: &str) -> &mut Self {
        let mut w = Writer::new();
        Rule::encode_id(table, chain, None, &mut w);
        let what = format!("flush chain {} {table} {chain}", family.name());
        self.push(msg_type::DELRULE, 0, family, w, what);
        self
    }

    /// `delete chain` (it must be empty and unreferenced).
    pub fn delete_chain(&mut self, family: Family, table: &str, chain: &str) -> &mut Self {
        let mut w = Writer::new();
        Chain::encode_id(table, chain, &mut w);
        let what = format!("delete chain {} {table} {chain}", family.name());
        self.push(msg_type::DELCHAIN, 0, family, w, what);
        self
    }

    /// `delete table`, with everything in it (it must exist: add it first in the same batch
    /// to delete whatever is there).
    pub fn delete_table(&mut self, family: Family, name: &str) -> &mut Self {
        let mut w = Writer::new();
        encode_table_id(name, &mut w);
        let what = format!("delete table {} {name}", family.name());
        self.push(msg_type::DELTABLE, 0, family, w, what);
        self
    }

    /// The size of the datagram [`Batch::encode`] makes, in bytes.
    pub fn encoded_len(&self) -> usize {
        let framing = NLMSG_HDRLEN + NFGENMSG_LEN;
        2 * framing
            + self
                .ops
                .iter()
                .map(|op| (framing + op.body.len() + 3) & !3)
                .sum::<usize>()
    }

    /// The datagram: BATCH_BEGIN (sequence `first_seq`), the messages, BATCH_END.
    pub fn encode(&self, first_seq: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let subsys = SUBSYS_NFTABLES.to_be_bytes();
        put_message(&mut out, NFNL_MSG_BATCH_BEGIN, 0, first_seq, 0, subsys, &[]);
        for (i, op) in self.ops.iter().enumerate() {
            let seq = first_seq.wrapping_add(1 + i as u32);
            put_message(
                &mut out,
                nft_type(op.kind),
                op.flags,
                seq,
                op.family as u8,
                [0, 0],
                &op.body,
            );
        }
        let end = first_seq.wrapping_add(1 + self.ops.len() as u32);
        put_message(&mut out, NFNL_MSG_BATCH_END, 0, end, 0, subsys, &[]);
        out
    }
}

/// Appends one netlink message: header, nfgenmsg (family, version 0, res_id), attributes.
fn put_message(
    out: &mut Vec<u8>,
    kind: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: [u8; 2],
    body: &[u8],
) {
    let len = (NLMSG_HDRLEN + NFGENMSG_LEN + body.len()) as u32;
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[family, 0, res_id[0], res_id[1]]);
    out.extend_from_slice(body);
}

/// One received netlink message.
pub(crate) struct Incoming<'a> {
    pub(crate) kind: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u32,
    pub(crate) payload: &'a [u8],
}

/// Splits a datagram into messages; malformed framing is a protocol error.
pub(crate) fn messages(datagram: &[u8]) -> Result<Vec<Incoming<'_>>> {
    let mut out = Vec::new();
    let mut rest = datagram;
    while rest.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(protocol(format!(
                "netlink message length {len} out of bounds"
            )));
        }
        out.push(Incoming {
            kind: u16::from_ne_bytes([rest[4], rest[5]]),
            flags: u16::from_ne_bytes([rest[6], rest[7]]),
            seq: u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]),
            payload: &rest[NLMSG_HDRLEN..len],
        });
        rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
    }
    Ok(out)
}

fn protocol(detail: String) -> Error {
    Error::Parse {
        context: "nf_tables netlink".into(),
        tool: "the kernel".into(),
        detail,
    }
}

/// The errno of an NLMSG_ERROR (0 = ACK) and its extended-ack text.
fn error_of(m: &Incoming) -> Result<(i32, Option<String>)> {
    let code = m
        .payload
        .get(..4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| protocol("short NLMSG_ERROR".into()))?;
    let ext = crate::netlink::error_ext_ack(m.flags, &m.payload[4..]);
    Ok((code.saturating_abs(), ext))
}

/// The family and attributes of an nf_tables message payload.
fn nf_body<'a>(m: &Incoming<'a>) -> Option<(Family, &'a [u8])> {
    let family = Family::from_u8(*m.payload.first()?)?;
    Some((family, m.payload.get(NFGENMSG_LEN..)?))
}

/// A NETLINK_NETFILTER socket bound to the netns that was current when it was created.
///
/// Dropping it closes it, unless a commit of this plugin process left deferred destroy work:
/// then it is closed at exit by a child process, so that neither the plugin nor its runtime
/// waits for that work ([`super::release`]).
pub struct Socket {
    sock: ManuallyDrop<netlink_sys::Socket>,
    seq: u32,
    buf: Vec<u8>,
    /// The send buffer size last set (0: the default, taken to hold small batches).
    sndbuf: usize,
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: `sock` is taken once, here, and never used again.
        release::release(unsafe { ManuallyDrop::take(&mut self.sock) });
    }
}

impl Socket {
    /// Opens a socket in the calling thread's current netns.
    pub fn new() -> Result<Socket> {
        let io = |source| Error::Io {
            context: "failed to open an nf_tables netlink socket".into(),
            source,
        };
        let mut sock = netlink_sys::Socket::new(NETLINK_NETFILTER).map_err(io)?;
        sock.set_ext_ack(true).map_err(io)?;
        sock.set_cap_ack(true).map_err(io)?;
        sock.bind_auto().map_err(io)?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(io)?;
        Ok(Socket {
            sock: ManuallyDrop::new(sock),
            seq: std::process::id().wrapping_mul(1 << 12),
            buf: Vec::with_capacity(RECV_BUF_LEN),
            sndbuf: DEFAULT_SNDBUF,
        })
    }

    /// Opens a socket living in `ns` (entered on this thread only while creating it).
    pub fn open_in(ns: &crate::Netns) -> Result<Socket> {
        let enter_err = |e: crate::Error| Error::Invalid {
            context: format!("failed to enter netns {}", ns.path().display()),
            detail: e.to_string(),
        };
        let guard = ns.enter().map_err(enter_err)?;
        let sock = Socket::new();
        guard.restore().map_err(enter_err)?;
        sock
    }

    fn next_seq(&mut self, n: u32) -> u32 {
        let first = self.seq.wrapping_add(1);
        self.seq = self.seq.wrapping_add(n);
        first
    }

    /// Grows the send buffer to hold a datagram of `len` bytes. The kernel takes a whole
    /// batch in one datagram (a batch cannot span several sends), and refuses one larger than
    /// the socket's send buffer (EMSGSIZE); SO_SNDBUFFORCE (CAP_NET_ADMIN, which changing
    /// nf_tables needs anyway) goes past `net.core.wmem_max`, as nft does for big rulesets.
    fn fit_send_buffer(&mut self, len: usize) -> Result<()> {
        // What the kernel keeps of the buffer for its own accounting, with a margin.
        const OVERHEAD: usize = 4096;
        if len + OVERHEAD <= self.sndbuf {
            return Ok(());
        }
        let want = i32::try_from(len + OVERHEAD).map_err(|_| Error::Invalid {
            context: "failed to size the nf_tables socket's send buffer".into(),
            detail: format!("a batch of {len} bytes is too large"),
        })?;
        // SAFETY: setsockopt reads `want` (an int) through the pointer and length given.
        let rc = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUFFORCE,
                (&want as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(Error::Io {
                context: format!(
                    "failed to grow the nf_tables socket's send buffer to {want} bytes"
                ),
                source: std::io::Error::last_os_error(),
            });
        }
        self.sndbuf = want as usize;
        Ok(())
    }

    fn send(&mut self, bytes: &[u8], what: &str) -> Result<()> {
        self.sock
            .send(bytes, 0)
            .map(|_| ())
            .map_err(|source| Error::Io {
                context: format!("failed to send nf_tables request ({what})"),
                source,
            })?;
        Ok(())
    }

    /// Receives one datagram into `self.buf`, growing it to fit.
    fn recv(&mut self) -> Result<()> {
        let io = |source| Error::Io {
            context: "failed to receive an nf_tables reply".into(),
            source,
        };
        loop {
            self.buf.clear();
            let want = match self
                .sock
                .recv(&mut self.buf, libc::MSG_PEEK | libc::MSG_TRUNC)
            {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            };
            self.buf.clear();
            self.buf.reserve(want.max(RECV_BUF_LEN));
            match self.sock.recv(&mut self.buf, 0) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Applies `batch` atomically: all of it or nothing. Returns, in batch order, the rules
    /// added with [`Batch::add_rule_echo`] as the kernel created them (with their handles).
    pub fn commit(&mut self, batch: &Batch) -> Result<Vec<Rule>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        if batch.defers_destroy() {
            // Noted before sending: should the commit succeed, no later close of this
            // plugin may wait for its destroy work.
            release::note_deferred_destroy();
        }
        let first = self.next_seq(batch.len() as u32 + 2);
        let bytes = batch.encode(first);
        self.fit_send_buffer(bytes.len())?;
        self.send(&bytes, "batch")?;
        let barrier = self.next_seq(1);
        let mut req = Vec::new();
        put_message(
            &mut req,
            nft_type(msg_type::GETGEN),
            NLM_F_ACK,
            barrier,
            0,
            [0, 0],
            &[],
        );
        self.send(&req, "generation barrier")?;

        let mut echoed: Vec<(u32, Rule)> = Vec::new();
        let mut failure: Option<(u32, i32, Option<String>)> = None;
        loop {
            self.recv()?;
            let mut done = false;
            for m in messages(&self.buf)? {
                if m.seq == barrier {
                    if m.kind == NLMSG_ERROR {
                        done = true;
                    }
                    continue;
                }
                // Sequence numbers wrap: the op's index is the wrapped distance from `first`.
                let index = m.seq.wrapping_sub(first).wrapping_sub(1);
                if index as usize >= batch.len() {
                    continue;
                }
                if m.kind == NLMSG_ERROR {
                    let (errno, ext) = error_of(&m)?;
                    if errno != 0 && failure.as_ref().is_none_or(|f| index < f.0) {
                        failure = Some((index, errno, ext));
                    }
                } else if m.kind == nft_type(msg_type::NEWRULE) {
                    if let Some(rule) = nf_body(&m).and_then(|(f, a)| Rule::decode(f, a)) {
                        echoed.push((index, rule));
                    }
                }
            }
            if done {
                break;
            }
        }
        if let Some((index, errno, ext_ack)) = failure {
            let what = &batch.ops[index as usize].what;
            return Err(Error::Kernel {
                context: format!("nf_tables transaction refused at `{what}`"),
                errno,
                ext_ack,
            });
        }
        echoed.sort_by_key(|(index, _)| *index);
        Ok(echoed.into_iter().map(|(_, r)| r).collect())
    }

    /// Sends one GET request and feeds each data message to `sink`; `Ok(false)` when the
    /// kernel answered ENOENT (no such table/chain).
    fn get(
        &mut self,
        kind: u16,
        family: u8,
        flags: u16,
        body: &[u8],
        sink: &mut dyn FnMut(&Incoming),
    ) -> Result<GetOutcome> {
        let seq = self.next_seq(1);
        let mut req = Vec::new();
        put_message(&mut req, nft_type(kind), flags, seq, family, [0, 0], body);
        self.send(&req, "get")?;
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut interrupted = false;
        loop {
            self.recv()?;
            for m in messages(&self.buf)? {
                if m.seq != seq {
                    continue;
                }
                if m.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match m.kind {
                    NLMSG_DONE => {
                        return Ok(if interrupted {
                            GetOutcome::Interrupted
                        } else {
                            GetOutcome::Done
                        })
                    }
                    NLMSG_ERROR => {
                        let (errno, ext_ack) = error_of(&m)?;
                        if errno == 0 && !dump {
                            return Ok(GetOutcome::Done);
                        }
                        if errno == libc::ENOENT {
                            return Ok(GetOutcome::NotFound);
                        }
                        if errno != 0 {
                            return Err(Error::Kernel {
                                context: String::new(),
                                errno,
                                ext_ack,
                            });
                        }
                    }
                    _ => sink(&m),
                }
            }
        }
    }

    /// A dump, restarted when the kernel flags it inconsistent.
    fn dump<T>(
        &mut self,
        kind: u16,
        family: u8,
        body: &[u8],
        mut convert: impl FnMut(Family, &[u8]) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        for _ in 0..DUMP_ATTEMPTS {
            let mut out = Vec::new();
            let outcome = self.get(kind, family, NLM_F_DUMP, body, &mut |m| {
                if let Some(v) = nf_body(m).and_then(|(f, a)| convert(f, a)) {
                    out.push(v);
                }
            })?;
            match outcome {
                GetOutcome::Done => return Ok(Some(out)),
                GetOutcome::NotFound => return Ok(None),
                GetOutcome::Interrupted => continue,
            }
        }
        Err(Error::Kernel {
            context: "nf_tables dump kept being interrupted by concurrent changes".into(),
            errno: libc::EINTR,
            ext_ack: None,
        })
    }

    /// The rules of one chain, in order (none when the table or chain does not exist: the
    /// kernel answers such a dump with nothing; use [`Socket::chain`] to tell them apart).
    pub fn rules(&mut self, family: Family, table: &str, chain: &str) -> Result<Vec<Rule>> {
        let mut w = Writer::new();
        Rule::encode_id(table, chain, None, &mut w);
        self.dump(msg_type::GETRULE, family as u8, &w.buf, Rule::decode)
            .map(Option::unwrap_or_default)
            .map_err(|e| {
                e.context(format!(
                    "failed to list nf_tables chain {} {table} {chain}",
                    family.name()
                ))
            })
    }

    /// One chain, or `None` when it (or its table) does not exist.
    pub fn chain(&mut self, family: Family, table: &str, name: &str) -> Result<Option<Chain>> {
        let mut w = Writer::new();
        Chain::encode_id(table, name, &mut w);
        let mut found = None;
        let outcome = self
            .get(
                msg_type::GETCHAIN,
                family as u8,
                NLM_F_ACK,
                &w.buf,
                &mut |m| {
                    if let Some((f, a)) = nf_body(m) {
                        found = Chain::decode(f, a);
                    }
                },
            )
            .map_err(|e| {
                e.context(format!(
                    "failed to look up nf_tables chain {} {table} {name}",
                    family.name()
                ))
            })?;
        Ok(match outcome {
            GetOutcome::NotFound => None,
            _ => found,
        })
    }

    /// Asks the kernel for the ruleset generation: fails when nf_tables is unavailable.
    pub fn probe(&mut self) -> Result<()> {
        self.get(msg_type::GETGEN, 0, NLM_F_ACK, &[], &mut |_| {})
            .map(|_| ())
            .map_err(|e| e.context("nf_tables is not available"))
    }

    /// Whether a table exists.
    pub fn table_exists(&mut self, family: Family, name: &str) -> Result<bool> {
        let mut w = Writer::new();
        encode_table_id(name, &mut w);
        let outcome = self
            .get(
                msg_type::GETTABLE,
                family as u8,
                NLM_F_ACK,
                &w.buf,
                &mut |_| {},
            )
            .map_err(|e| {
                e.context(format!(
                    "failed to look up nf_tables table {} {name}",
                    family.name()
                ))
            })?;
        Ok(!matches!(outcome, GetOutcome::NotFound))
    }

    /// The chains of one table. The kernel filters chain dumps by family only, so this is
    /// meant for small families of our own (the `bridge` family of the spoof check), never
    /// for `ip`/`ip6` where foreign tables may hold thousands of chains.
    pub fn chains_of_family_table(&mut self, family: Family, table: &str) -> Result<Vec<Chain>> {
        let mut w = Writer::new();
        encode_table_id(table, &mut w);
        let chains = self
            .dump(msg_type::GETCHAIN, family as u8, &w.buf, Chain::decode)
            .map_err(|e| {
                e.context(format!(
                    "failed to list the chains of nf_tables table {} {table}",
                    family.name()
                ))
            })?
            .unwrap_or_default();
        Ok(chains.into_iter().filter(|c| c.table == table).collect())
    }
}

enum GetOutcome {
    Done,
    NotFound,
    Interrupted,
}

/// Re-exported for callers naming message constants in tests.
pub use msg::COMMENT_MAX;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_framing_matches_nft() {
        // `nft -f` of "add table inet t1": BATCH_BEGIN, NEWTABLE, BATCH_END (strace -e write).
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, "t1"));
        assert_eq!(
            hex(&b.encode(0)),
            "140000001000010000000000000000000000000a\
             24000000000a01000100000000000000010000000700010074310000080002000000000\
             0140000001100010002000000000000000000000a"
        );
    }

    #[test]
    fn reply_framing_is_checked() {
        assert!(messages(&[0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert_eq!(messages(&[1, 2, 3]).unwrap().len(), 0);
    }

    /// The same overflow fuzzing found in rtnetlink replies (netlink_reply): an NLMSG_ERROR
    /// code of i32::MIN has no positive errno.
    #[test]
    fn the_most_negative_error_code_saturates() {
        let mut payload = i32::MIN.to_ne_bytes().to_vec();
        payload.extend([0u8; 16]);
        let m = Incoming {
            kind: 2,
            flags: 0,
            seq: 1,
            payload: &payload,
        };
        assert_eq!(error_of(&m).unwrap(), (i32::MAX, None));
    }

    pub(crate) fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
