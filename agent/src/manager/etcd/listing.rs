//! How a listing of `<prefix>/subnets/` is read, request by request. Leases are small (about
//! 200 bytes), but anyone who can write under the prefix can put any number of keys there,
//! with values up to etcd's request limit. So:
//!
//! - Pages of one snapshot: every request reads the revision of the first and starts right
//!   after the last key read.
//! - Pages sized from the pages themselves ([`PageSize`]): they aim at [`TARGET_BYTES`], and a
//!   page too large to decode is asked again with fewer keys; at one key, the key is listed
//!   without its value.
//! - Keys whose values were too heavy to be leases ([`HEAVY_BYTES`]) are remembered from one
//!   listing to the next (a bounded number): pages stop before them, and they are read
//!   again keys only, their value read again only when their revision changed. etcd builds a
//!   whole response before the client can refuse it, so without this every listing of every
//!   node would have etcd build (and drop) pages of up to [`MAX_KEYS`] times its request limit.
//!
//! [`Walk`] is the listing as a state machine (no I/O): the store asks it for the next
//! request, hands it each response, and gets back the key-values to take.

use std::collections::BTreeMap;

use super::client::proto::{KeyValue, RangeRequest, RangeResponse};
use super::client::MAX_RESPONSE_BYTES;
use crate::subnet::lease::{Unreadable, MAX_VALUE_BYTES};

/// Keys in a page when values are lease-sized (500 leases are about 125 KB): the Kubernetes
/// API's default page size, which faces the same objects of up to 1.5 MiB.
pub const MAX_KEYS: i64 = 500;
/// What a page should weigh (keys and values): far below the client's decode limit.
pub const TARGET_BYTES: usize = 2 * 1024 * 1024;
/// How much a page too large to decode shrinks.
const SHRINK: i64 = 8;
/// A value larger than this is not a lease: its key is remembered as heavy.
pub const HEAVY_BYTES: usize = MAX_VALUE_BYTES;
/// Bounds on what is remembered (a key longer than this is not remembered).
const MAX_REMEMBERED: usize = 2048;
const MAX_REMEMBERED_KEY: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize {
    keys: i64,
}

impl Default for PageSize {
    fn default() -> PageSize {
        PageSize { keys: MAX_KEYS }
    }
}

impl PageSize {
    /// The `limit` of the next page.
    pub fn keys(&self) -> i64 {
        self.keys
    }

    /// A page of `keys` keys weighing `bytes` was read: heavy pages make the next ones
    /// proportionally smaller, full light ones let them grow back.
    pub fn fitted(&mut self, keys: usize, bytes: usize) {
        let keys = keys as i64;
        if bytes > TARGET_BYTES && keys > 0 {
            let fit = (keys as u128 * TARGET_BYTES as u128 / bytes as u128) as i64;
            self.keys = fit.clamp(1, self.keys);
        } else if keys >= self.keys && bytes < TARGET_BYTES / 4 {
            self.keys = (self.keys * 2).min(MAX_KEYS);
        }
    }

    /// A page was too large to decode: ask for fewer keys. `false` when a page is one key
    /// already (that key-value alone is too large).
    pub fn shrink(&mut self) -> bool {
        if self.keys <= 1 {
            return false;
        }
        self.keys = (self.keys / SHRINK).max(1);
        true
    }
}

/// A key remembered as heavy: the revision of the value seen, and why it was not a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Heavy {
    mod_revision: i64,
    why: Unreadable,
}

/// What listings remember from one to the next.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub size: PageSize,
    heavy: BTreeMap<Vec<u8>, Heavy>,
}

impl Memory {
    /// How many keys are remembered as heavy.
    pub fn heavy_keys(&self) -> usize {
        self.heavy.len()
    }
}

/// What one request of a listing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Key-values, up to the next heavy key.
    Page,
    /// The key-value at the start alone (a heavy key whose value changed).
    Alone,
    /// Keys only, from a heavy key on: unchanged heavy keys are taken without their values.
    KnownHeavy,
    /// The key at the start without its value: with it, it is larger than a response may be.
    KeyAlone,
}

/// One request of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub kind: Kind,
    pub req: RangeRequest,
}

/// A listed key-value, and why its value was not read when it was not.
pub type Listed = (KeyValue, Option<Unreadable>);

/// One listing of the range `[from, end)`, request by request.
pub struct Walk<'m> {
    memory: &'m mut Memory,
    /// Heavy keys seen by this listing (the memory of the next).
    learned: BTreeMap<Vec<u8>, Heavy>,
    from: Vec<u8>,
    end: Vec<u8>,
    /// The revision every page reads (that of the first response).
    revision: i64,
    /// The next read is of one key alone (`Alone` or `KeyAlone`), the first in
    /// `[from, the range end given)`.
    alone: Option<(Kind, Vec<u8>)>,
    /// A page was larger than leases make one.
    heavy_pages: bool,
}

/// A key-value larger than a whole response the client decodes, keys included: a key of
/// over 16 MiB, which etcd never accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyTooLarge;

/// Why a key was listed without its value: it is larger than a whole response.
pub fn beyond_response_limit() -> Unreadable {
    Unreadable::NotListed(format!(
        "larger than the {MAX_RESPONSE_BYTES} bytes of an etcd response the agent reads (not read)"
    ))
}

/// The smallest key after `key`.
fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

impl<'m> Walk<'m> {
    pub fn new(memory: &'m mut Memory, from: &[u8], end: &[u8]) -> Walk<'m> {
        Walk {
            memory,
            learned: BTreeMap::new(),
            from: from.to_vec(),
            end: end.to_vec(),
            revision: 0,
            alone: None,
            heavy_pages: false,
        }
    }

    /// The revision the listing reads (0 until the first response).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Whether a page was heavier than leases make one (its memory is worth handing back).
    pub fn read_heavy_pages(&self) -> bool {
        self.heavy_pages
    }

    /// The next request, or `None` when the whole range is read.
    pub fn next_step(&self) -> Option<Step> {
        if self.from >= self.end {
            return None;
        }
        let request = |range_end: Vec<u8>, limit: i64, keys_only: bool| RangeRequest {
            key: self.from.clone(),
            range_end,
            limit,
            revision: self.revision,
            keys_only,
        };
        if let Some((kind, range_end)) = &self.alone {
            return Some(Step {
                kind: *kind,
                req: request(range_end.clone(), 1, *kind == Kind::KeyAlone),
            });
        }
        let limit = self.memory.size.keys();
        match self.memory.heavy.range(self.from.clone()..).next() {
            Some((heavy, _)) if *heavy == self.from => Some(Step {
                kind: Kind::KnownHeavy,
                req: request(self.end.clone(), limit, true),
            }),
            next_heavy => Some(Step {
                kind: Kind::Page,
                req: request(
                    next_heavy.map_or_else(|| self.end.clone(), |(k, _)| k.clone()),
                    limit,
                    false,
                ),
            }),
        }
    }

    /// Takes the response to `step` in; returns what it lists.
    pub fn took(&mut self, step: &Step, resp: RangeResponse) -> Vec<Listed> {
        if self.revision == 0 {
            self.revision = resp.header.as_ref().map_or(0, |h| h.revision);
        }
        self.alone = None;
        let RangeResponse { kvs, more, .. } = resp;
        let mut listed = Vec::with_capacity(kvs.len());
        let last = kvs.last().map(|kv| kv.key.clone());
        match step.kind {
            Kind::Page | Kind::Alone => {
                let bytes: usize = kvs.iter().map(|kv| kv.key.len() + kv.value.len()).sum();
                self.heavy_pages |= bytes > TARGET_BYTES;
                if step.kind == Kind::Page {
                    self.memory.size.fitted(kvs.len(), bytes);
                }
                for kv in kvs {
                    if kv.value.len() > HEAVY_BYTES {
                        let why = Unreadable::TooLarge {
                            bytes: kv.value.len(),
                        };
                        self.remember(&kv, why);
                    }
                    listed.push((kv, None));
                }
            }
            Kind::KeyAlone => {
                for kv in kvs {
                    self.remember(&kv, beyond_response_limit());
                    listed.push((kv, Some(beyond_response_limit())));
                }
            }
            Kind::KnownHeavy => {
                for kv in kvs {
                    match self.memory.heavy.get(&kv.key) {
                        Some(h) if h.mod_revision == kv.mod_revision => {
                            let why = h.why.clone();
                            self.remember(&kv, why.clone());
                            listed.push((kv, Some(why)));
                        }
                        // Rewritten: its value is read again, alone.
                        Some(_) => {
                            self.alone = Some((Kind::Alone, after(&kv.key)));
                            self.from = kv.key;
                            return listed;
                        }
                        // Not heavy: read from here on as a page.
                        None => {
                            self.from = kv.key;
                            return listed;
                        }
                    }
                }
            }
        }
        self.from = match (more, last) {
            (true, Some(last)) => after(&last),
            // The range asked for is read: the next one starts where it ended.
            _ => step.req.range_end.clone(),
        };
        listed
    }

    /// The response to `step` was too large to decode: ask for less.
    pub fn too_large(&mut self, step: &Step) -> Result<(), KeyTooLarge> {
        self.heavy_pages = true;
        match step.kind {
            Kind::Page | Kind::KnownHeavy if self.memory.size.shrink() => {}
            Kind::Page | Kind::Alone => {
                self.alone = Some((Kind::KeyAlone, step.req.range_end.clone()))
            }
            Kind::KnownHeavy | Kind::KeyAlone => return Err(KeyTooLarge),
        }
        Ok(())
    }

    /// The listing is complete: its heavy keys are what the next one remembers.
    pub fn finish(self) {
        self.memory.heavy = self.learned;
    }

    fn remember(&mut self, kv: &KeyValue, why: Unreadable) {
        if kv.key.len() <= MAX_REMEMBERED_KEY && self.learned.len() < MAX_REMEMBERED {
            self.learned.insert(
                kv.key.clone(),
                Heavy {
                    mod_revision: kv.mod_revision,
                    why,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::client::proto::ResponseHeader;
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn lease_sized_pages_stay_at_the_maximum() {
        let mut p = PageSize::default();
        p.fitted(500, 125_000);
        assert_eq!(p.keys(), MAX_KEYS);
        p.fitted(12, 3000);
        assert_eq!(p.keys(), MAX_KEYS, "a short last page changes nothing");
    }

    #[test]
    fn heavy_pages_shrink_to_the_target_and_light_ones_grow_back() {
        let mut p = PageSize::default();
        // 500 keys of 16 KiB: 8 MiB, four times the target.
        p.fitted(500, 8 * MIB);
        assert_eq!(p.keys(), 125);
        // Values of 1.4 MiB: one per page.
        p.fitted(125, 125 * 1_400_000);
        assert_eq!(p.keys(), 1);
        // Then small ones again: doubling back up to the maximum.
        let mut steps = 0;
        while p.keys() < MAX_KEYS {
            p.fitted(p.keys() as usize, 100 * p.keys() as usize);
            steps += 1;
        }
        assert_eq!(p.keys(), MAX_KEYS);
        assert_eq!(steps, 9);
    }

    #[test]
    fn pages_too_large_to_decode_shrink_down_to_one_key() {
        let mut p = PageSize::default();
        let mut sizes = vec![p.keys()];
        while p.shrink() {
            sizes.push(p.keys());
        }
        assert_eq!(sizes, [500, 62, 7, 1]);
        assert!(!p.shrink(), "one key is as small as a page gets");
        assert_eq!(p.keys(), 1);
    }

    /// An etcd keyspace answering range requests as etcd does (limit, keys only, `more`), at
    /// one revision, refusing responses over `limit` bytes as the client would.
    struct Etcd {
        kvs: BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
        limit: usize,
        /// In the current listing: responses sent and refused, and value bytes sent.
        answered: usize,
        refused: usize,
        value_bytes: usize,
    }

    impl Etcd {
        fn new(limit: usize) -> Etcd {
            Etcd {
                kvs: BTreeMap::new(),
                limit,
                answered: 0,
                refused: 0,
                value_bytes: 0,
            }
        }

        fn put(&mut self, key: &str, value: Vec<u8>, revision: i64) {
            self.kvs.insert(key.as_bytes().to_vec(), (value, revision));
        }

        fn range(&mut self, req: &RangeRequest) -> Option<RangeResponse> {
            // Every page after the first reads the first one's revision.
            assert_eq!(req.revision, if self.answered == 0 { 0 } else { 99 });
            assert!(req.limit > 0, "a page is always limited");
            let mut kvs: Vec<KeyValue> = self
                .kvs
                .range(req.key.clone()..req.range_end.clone())
                .take(req.limit as usize + 1)
                .map(|(k, (v, rev))| KeyValue {
                    key: k.clone(),
                    create_revision: 1,
                    mod_revision: *rev,
                    value: if req.keys_only { Vec::new() } else { v.clone() },
                    lease: 0,
                })
                .collect();
            let more = kvs.len() > req.limit as usize;
            kvs.truncate(req.limit as usize);
            let size: usize = kvs
                .iter()
                .map(|kv| kv.key.len() + kv.value.len() + 16)
                .sum();
            if size > self.limit {
                self.refused += 1;
                return None;
            }
            self.answered += 1;
            self.value_bytes += kvs.iter().map(|kv| kv.value.len()).sum::<usize>();
            Some(RangeResponse {
                header: Some(ResponseHeader { revision: 99 }),
                more,
                kvs,
            })
        }

        /// One listing of everything under `p/`, as the store reads it.
        fn list(&mut self, memory: &mut Memory) -> Vec<Listed> {
            self.answered = 0;
            self.refused = 0;
            self.value_bytes = 0;
            let mut walk = Walk::new(memory, b"p/", b"p0");
            let mut all = Vec::new();
            let mut requests = 0;
            while let Some(step) = walk.next_step() {
                requests += 1;
                assert!(requests < 10_000, "the listing does not end");
                match self.range(&step.req) {
                    Some(resp) => all.extend(walk.took(&step, resp)),
                    None => walk.too_large(&step).unwrap(),
                }
            }
            walk.finish();
            all
        }
    }

    fn keys(listed: &[Listed]) -> Vec<String> {
        listed
            .iter()
            .map(|(kv, _)| String::from_utf8_lossy(&kv.key).into_owned())
            .collect()
    }

    const BIG: usize = 100 * 1024;

    /// A lease, 1,200 small keys and 30 values of 100 KiB in two runs (20 then 10), against a
    /// 1 MiB response limit (as 10,000 keys and 1.4 MiB values against 16 MiB, scaled down).
    fn flooded() -> Etcd {
        let mut etcd = Etcd::new(MIB);
        for i in 0..1200 {
            etcd.put(&format!("p/junk-{i:05}"), b"x".to_vec(), 2);
        }
        for i in 0..30 {
            let at = if i < 20 { "a" } else { "m" };
            etcd.put(&format!("p/{at}-big-{i:02}"), vec![b'y'; BIG], 3);
        }
        etcd.put("p/10.244.1.0-24", b"{}".to_vec(), 4);
        etcd
    }

    #[test]
    fn a_flood_is_listed_whole_and_once() {
        let mut etcd = flooded();
        let mut memory = Memory::default();
        let listed = etcd.list(&mut memory);
        let want: Vec<String> = etcd
            .kvs
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        assert_eq!(keys(&listed), want);
        assert!(etcd.refused > 0, "the first page was too large");
        assert!(listed.iter().all(|(_, why)| why.is_none()));
        assert_eq!(memory.heavy_keys(), 30);
    }

    #[test]
    fn the_next_listings_neither_overflow_nor_read_heavy_values_again() {
        let mut etcd = flooded();
        let mut memory = Memory::default();
        etcd.list(&mut memory);
        let listed = etcd.list(&mut memory);
        assert_eq!(listed.len(), etcd.kvs.len());
        assert_eq!(etcd.refused, 0, "no page too large");
        assert!(etcd.value_bytes < BIG, "{} value bytes", etcd.value_bytes);
        let unread: Vec<&Listed> = listed.iter().filter(|(_, why)| why.is_some()).collect();
        assert_eq!(unread.len(), 30);
        assert_eq!(unread[0].1, Some(Unreadable::TooLarge { bytes: BIG }));
        // A heavy value rewritten is read again (alone); one deleted is simply gone; a new
        // small key among the heavy ones is read.
        etcd.put("p/a-big-03", b"{}".to_vec(), 7);
        etcd.kvs.remove(b"p/a-big-04".as_slice());
        etcd.put("p/a-big-05x", b"new".to_vec(), 7);
        let listed = etcd.list(&mut memory);
        assert_eq!(keys(&listed).len(), etcd.kvs.len());
        let rewritten = listed
            .iter()
            .find(|(kv, _)| kv.key == b"p/a-big-03")
            .unwrap();
        assert_eq!(
            (rewritten.0.value.as_slice(), &rewritten.1),
            (&b"{}"[..], &None)
        );
        let new = listed
            .iter()
            .find(|(kv, _)| kv.key == b"p/a-big-05x")
            .unwrap();
        assert_eq!(new.0.value, b"new");
        assert_eq!(etcd.refused, 0);
        assert_eq!(memory.heavy_keys(), 28);
    }

    #[test]
    fn a_value_larger_than_any_response_is_listed_without_it() {
        let mut etcd = Etcd::new(MIB);
        etcd.put("p/a", b"small".to_vec(), 2);
        etcd.put("p/b", vec![b'z'; 2 * MIB], 2);
        etcd.put("p/c", b"small".to_vec(), 2);
        let mut memory = Memory::default();
        for _ in 0..2 {
            let listed = etcd.list(&mut memory);
            assert_eq!(keys(&listed), ["p/a", "p/b", "p/c"]);
            assert!(listed[1].0.value.is_empty());
            assert!(listed[1].1.is_some(), "{:?}", listed[1].1);
        }
        assert_eq!(etcd.refused, 0, "known the second time");
        assert_eq!(
            memory.heavy.values().next().map(|h| &h.why),
            Some(&beyond_response_limit())
        );
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut memory = Memory::default();
        let mut walk = Walk::new(&mut memory, b"p/", b"p0");
        let kv = |key: String| KeyValue {
            key: key.into_bytes(),
            ..KeyValue::default()
        };
        let why = Unreadable::TooLarge { bytes: BIG };
        walk.remember(
            &kv(format!("p/{}", "k".repeat(MAX_REMEMBERED_KEY))),
            why.clone(),
        );
        for i in 0..MAX_REMEMBERED + 10 {
            walk.remember(&kv(format!("p/{i:05}")), why.clone());
        }
        walk.finish();
        assert_eq!(memory.heavy_keys(), MAX_REMEMBERED);
        assert!(memory.heavy.keys().all(|k| k.len() <= MAX_REMEMBERED_KEY));
    }
}
