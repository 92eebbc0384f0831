//! The index: which lease file belongs to whom, cached in `.ferrocni-index` so ADD and DEL
//! need not read every lease file as the reference does.
//!
//! The cache is a journal: a snapshot of `+` records (`+\t<name>\t<owner>`), then the records
//! appended by later calls (`+` learned or reserved, `-` released), each call ending with a
//! `=` marker holding the store's fingerprint after that call and a checksum of everything
//! before it. A call reads the journal (a few MB at 60,000 leases), checks the last marker
//! and searches it with memmem; it never parses the whole journal except to compact it,
//! which happens once the journal has doubled since its last snapshot.
//!
//! The fingerprint is the directory's device, inode, mtime, ctime, size and link count plus
//! a hash of the `last_reserved_ip.*` contents. Any create or unlink in the directory changes
//! its mtime; and since mtimes can be coarse (two changes within one clock tick look alike),
//! the reference's ADD is also caught by the `last_reserved_ip.<set>` it always rewrites. A
//! mismatch, a torn append or a bad checksum means "rebuild from the files".
//!
//! The lease files stay the truth: reservations are made with link(2) whatever the index
//! says, and every address the index attributes to a container is re-read before it is acted
//! upon, so a stale entry can cost at most a rebuild, never a double booking.

use std::collections::HashMap;

use super::lease::Owner;

const MAGIC: &str = "ferrocni-index 2";
/// Journals smaller than this are never compacted. Every call reads, checksums and searches
/// the whole journal, so a small store should not carry much of it; at about 170 bytes per
/// call, 16 KiB still spreads one compaction (a create and a rename) over some 90 calls.
pub const MIN_COMPACT_BYTES: usize = 16 * 1024;

/// Identity and modification state of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// Hash of the `last_reserved_ip.<set>` files' contents.
    pub hints: u64,
    pub dev: u64,
    pub ino: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub size: i64,
    pub nlink: u64,
}

impl Fingerprint {
    pub fn of(st: &libc::stat, hints: u64) -> Fingerprint {
        Fingerprint {
            hints,
            dev: st.st_dev,
            ino: st.st_ino,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            size: st.st_size,
            #[allow(clippy::unnecessary_cast)] // nlink_t width differs between targets
            nlink: st.st_nlink as u64,
        }
    }

    fn render(&self) -> String {
        format!(
            "{:016x}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.hints,
            self.dev,
            self.ino,
            self.mtime.0,
            self.mtime.1,
            self.ctime.0,
            self.ctime.1,
            self.size,
            self.nlink
        )
    }
}

/// Every lease file of the store, keyed by file name (the address text).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    pub leases: HashMap<String, Owner>,
}

/// A fast 64-bit checksum (not cryptographic: it only detects torn or corrupted writes).
pub fn checksum(data: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
    let mut lanes = [0xCBF2_9CE4_8422_2325 ^ data.len() as u64, 1, 2, 3];
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            *lane = mix(*lane, u64::from_le_bytes(w));
        }
    }
    let mut h = lanes.iter().fold(0u64, |acc, &l| mix(acc, l));
    for &b in blocks.remainder() {
        h = mix(h, u64::from(b));
    }
    h ^ (h >> 32)
}

/// Appends the record for `name` now held by `owner` (None = released).
pub fn push_record(out: &mut Vec<u8>, name: &str, owner: Option<&Owner>) {
    let mut line = String::with_capacity(96);
    match owner {
        None => {
            line.push_str("-\t");
            line.push_str(name);
        }
        Some(owner) => {
            line.push_str("+\t");
            line.push_str(name);
            match owner {
                Owner::Attachment { cid, ifname } => {
                    line.push_str("\tA\t");
                    line.push_str(cid);
                    line.push('\t');
                    line.push_str(ifname);
                }
                Owner::Legacy { cid } => {
                    line.push_str("\tL\t");
                    line.push_str(cid);
                }
                Owner::Foreign => line.push_str("\tF"),
                Owner::NotAFile => line.push_str("\tN"),
                Owner::Junk => line.push_str("\tJ"),
            }
        }
    }
    line.push('\n');
    out.extend_from_slice(line.as_bytes());
}

/// A fresh journal holding `index` (without its closing marker).
pub fn snapshot(index: &Index) -> Vec<u8> {
    let mut names: Vec<&String> = index.leases.keys().collect();
    names.sort();
    let mut body = Vec::with_capacity(names.len() * 48 + 64);
    for name in names {
        push_record(&mut body, name, index.leases.get(name));
    }
    let mut out = format!("{MAGIC}\t{}\n", body.len()).into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The closing marker for a journal whose content so far is `content`.
pub fn marker(content: &[u8], fp: Option<&Fingerprint>) -> Vec<u8> {
    let fp_text = fp.map_or_else(|| "invalid".to_string(), Fingerprint::render);
    format!("=\t{fp_text}\t{:016x}\n", checksum(content)).into_bytes()
}

/// True when the journal is intact and its last marker carries `expected`.
pub fn is_valid(data: &[u8], expected: &Fingerprint) -> bool {
    if !data.starts_with(MAGIC.as_bytes()) || data.last() != Some(&b'\n') {
        return false;
    }
    let body = &data[..data.len() - 1];
    let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let Ok(last) = std::str::from_utf8(&body[start..]) else {
        return false;
    };
    let Some(rest) = last.strip_prefix("=\t") else {
        return false;
    };
    let Some((fp_text, sum)) = rest.rsplit_once('\t') else {
        return false;
    };
    fp_text == expected.render()
        && u64::from_str_radix(sum, 16).ok() == Some(checksum(&data[..start]))
}

/// Size of the snapshot the journal started from (its header), for the compaction rule.
pub fn snapshot_len(data: &[u8]) -> usize {
    let end = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    std::str::from_utf8(&data[..end])
        .ok()
        .and_then(|h| h.rsplit('\t').next()?.parse().ok())
        .unwrap_or(0)
}

/// Whether a journal of `len` bytes that started from a `base`-byte snapshot is worth
/// compacting.
pub fn needs_compaction(len: usize, base: usize) -> bool {
    len > MIN_COMPACT_BYTES.max(2 * base)
}

/// Replays `+`/`-` records into the map they describe.
pub fn replay(data: &[u8], index: &mut Index) {
    for line in data.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let mut f = line.split('\t');
        match f.next() {
            Some("+") => {
                let Some(name) = f.next() else { continue };
                let owner = match f.next() {
                    Some("A") => match (f.next(), f.next()) {
                        (Some(cid), Some(ifname)) => Owner::Attachment {
                            cid: cid.into(),
                            ifname: ifname.into(),
                        },
                        _ => continue,
                    },
                    Some("L") => match f.next() {
                        Some(cid) => Owner::Legacy { cid: cid.into() },
                        None => continue,
                    },
                    Some("F") => Owner::Foreign,
                    Some("N") => Owner::NotAFile,
                    Some("J") => Owner::Junk,
                    _ => continue,
                };
                index.leases.insert(name.to_string(), owner);
            }
            Some("-") => {
                if let Some(name) = f.next() {
                    index.leases.remove(name);
                }
            }
            _ => {}
        }
    }
}

/// Names of `+` records ending with `suffix` (e.g. `\tA\tcid\teth0\n`), found with memmem.
/// Records may be stale (later released); callers re-read the lease files.
///
/// memchr's SIMD search rather than libc's: musl's (two-way, byte at a time) made an ADD with
/// 60,000 leases markedly slower than with glibc's (docs/benchmarks.md, "Earlier runs and what
/// each change weighed").
pub fn find_names(data: &[u8], suffix: &[u8], out: &mut Vec<String>) {
    let finder = Substring::new(suffix);
    let mut from = 0;
    while from < data.len() {
        let Some(offset) = finder.find(&data[from..]) else {
            break;
        };
        let at = from + offset;
        let line_start = data[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        if let Some(name) = data[line_start..at].strip_prefix(b"+\t") {
            if let Ok(name) = std::str::from_utf8(name) {
                if !name.contains('\t') && !out.iter().any(|n| n == name) {
                    out.push(name.to_string());
                }
            }
        }
        from = at + suffix.len();
    }
}

/// A substring search that never asks the CPU what it supports. memchr's general `memmem`
/// picks AVX2 at run time, and finding out costs about a dozen CPUID instructions, each a
/// trap to the hypervisor on a virtual machine (docs/benchmarks.md has the cost): more than the
/// whole search at a few hundred leases, paid by every ADD and DEL. SSE2 is part of x86-64
/// itself; elsewhere, and for haystacks shorter than the vector search needs, a plain scan.
struct Substring<'a> {
    needle: &'a [u8],
    #[cfg(target_arch = "x86_64")]
    sse2: Option<memchr::arch::x86_64::sse2::packedpair::Finder>,
}

impl<'a> Substring<'a> {
    fn new(needle: &'a [u8]) -> Substring<'a> {
        Substring {
            needle,
            #[cfg(target_arch = "x86_64")]
            sse2: memchr::arch::x86_64::sse2::packedpair::Finder::new(needle),
        }
    }

    /// Where `needle` first occurs in `haystack`; an empty needle matches nowhere.
    fn find(&self, haystack: &[u8]) -> Option<usize> {
        if self.needle.is_empty() {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(f) = &self.sse2 {
            if haystack.len() >= f.min_haystack_len() {
                return f.find(haystack, self.needle);
            }
        }
        haystack
            .windows(self.needle.len())
            .position(|w| w == self.needle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_search_agrees_with_a_plain_scan_at_every_length_and_offset() {
        let needle = b"\tA\tc1\teth0\n";
        for len in 0..200usize {
            for at in [
                None,
                Some(0),
                Some(len / 2),
                Some(len.saturating_sub(needle.len())),
            ] {
                let mut hay: Vec<u8> = (0..len).map(|i| b"+\t10.0.0.1A\n"[i % 12]).collect();
                if let Some(at) = at.filter(|&a| a + needle.len() <= len) {
                    hay[at..at + needle.len()].copy_from_slice(needle);
                }
                let plain = hay.windows(needle.len()).position(|w| w == needle);
                assert_eq!(
                    Substring::new(needle).find(&hay),
                    plain,
                    "len {len} at {at:?}"
                );
            }
        }
        assert_eq!(Substring::new(b"").find(b"abc"), None);
        assert_eq!(Substring::new(b"x").find(b"abxc"), Some(2));
    }

    fn fp(m: i64) -> Fingerprint {
        Fingerprint {
            hints: 7,
            dev: 1,
            ino: 2,
            mtime: (m, 5),
            ctime: (m, 6),
            size: 4096,
            nlink: 2,
        }
    }

    fn sample() -> Index {
        let mut idx = Index::default();
        idx.leases.insert(
            "10.0.0.2".into(),
            Owner::Attachment {
                cid: "c1".into(),
                ifname: "eth0".into(),
            },
        );
        idx.leases
            .insert("fd00::2".into(), Owner::Legacy { cid: "c2".into() });
        idx.leases.insert("10.0.0.3".into(), Owner::Junk);
        idx.leases.insert("10.0.0.4".into(), Owner::Foreign);
        idx.leases.insert("10.0.0.5".into(), Owner::NotAFile);
        idx
    }

    #[test]
    fn snapshot_marker_replay_round_trip() {
        let idx = sample();
        let mut j = snapshot(&idx);
        j.extend(marker(&j.clone(), Some(&fp(10))));
        assert!(is_valid(&j, &fp(10)));
        assert!(!is_valid(&j, &fp(11)), "stale fingerprint");
        let mut back = Index::default();
        replay(&j, &mut back);
        assert_eq!(back, idx);
        // an appended call: release .2, reserve .6
        let mut tail = Vec::new();
        push_record(&mut tail, "10.0.0.2", None);
        push_record(
            &mut tail,
            "10.0.0.6",
            Some(&Owner::Attachment {
                cid: "c3".into(),
                ifname: "eth0".into(),
            }),
        );
        j.extend(&tail);
        assert!(!is_valid(&j, &fp(10)), "no closing marker yet");
        j.extend(marker(&j.clone(), Some(&fp(12))));
        assert!(is_valid(&j, &fp(12)));
        let mut back = Index::default();
        replay(&j, &mut back);
        assert!(!back.leases.contains_key("10.0.0.2") && back.leases.contains_key("10.0.0.6"));
        let mut names = Vec::new();
        find_names(&j, b"\tA\tc1\teth0\n", &mut names);
        assert_eq!(names, ["10.0.0.2"], "stale records are still candidates");
        names.clear();
        find_names(&j, b"\tL\tc2\n", &mut names);
        assert_eq!(names, ["fd00::2"]);
        assert!(snapshot_len(&j) > 0);
    }

    #[test]
    fn rejects_torn_and_corrupt_journals() {
        let mut j = snapshot(&sample());
        j.extend(marker(&j.clone(), Some(&fp(10))));
        assert!(!is_valid(&j[..j.len() - 3], &fp(10)), "torn marker");
        let mut bad = j.clone();
        bad[30] ^= 1;
        assert!(!is_valid(&bad, &fp(10)), "checksum");
        let mut invalidated = snapshot(&sample());
        invalidated.extend(marker(&invalidated.clone(), None));
        assert!(!is_valid(&invalidated, &fp(10)));
        assert!(!is_valid(b"", &fp(10)));
        assert_ne!(checksum(b"abc"), checksum(b"abd"));
        assert_ne!(checksum(&[0u8; 64]), checksum(&[0u8; 65]));
    }

    #[test]
    fn compaction_rule() {
        assert!(!needs_compaction(1000, 10));
        assert!(needs_compaction(200_000, 90_000));
        assert!(!needs_compaction(150_000, 90_000));
    }
}
