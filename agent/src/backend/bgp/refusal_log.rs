//! The agent's side of the refusals ([`super::refusal`]): BIRD's log followed as it grows
//! ([`LogTail`]), and the refusals in it counted by session and reason and logged once each
//! ([`Refusals`]).
//!
//! A flood of refusals writes about 100 MB of log a second. BIRD's own rotation of its log (a
//! rename at a size) could pass twice between two readings, and the middle file would be gone
//! unread; so the tail opens each new file as soon as it sees it, between two chunks it reads,
//! and reads them in turn. And the agent rotates the log itself, after reading
//! [`ROTATE_AT_BYTES`] of it ([`LogTail::rotate`]): BIRD's rotation, at a larger size, is a
//! backstop for when no agent follows the log.
//!
//! Bounded: the tail reads in fixed chunks and keeps at most one partial line; the counts hold
//! one number per session and reason; "once" remembers at most [`LOG_ONCE_LIMIT`] refused
//! routes, then says so and only counts. A departed session's counts and memory go with it.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;

use super::refusal::{Reason, MARKER};
use super::sessions::{parse_protocol_name, SessionKind};

/// The agent starts a new log file once it has read this much of one (one old file kept).
pub const ROTATE_AT_BYTES: u64 = 4 << 20;
/// How many different refused routes (session, prefix, reason) are logged; beyond that they
/// are counted only.
pub const LOG_ONCE_LIMIT: usize = 1024;
/// The longest line kept whole; BIRD's refusal lines are under 200 bytes.
const MAX_LINE: usize = 4096;
const CHUNK: usize = 64 * 1024;
/// New files opened ahead of the one being read (each is a rotation the reading has not caught
/// up with; at 64 KiB between two looks, more than one is already unlikely).
const MAX_PENDING_FILES: usize = 8;

/// A log file followed from where it ended when the tail was made, across rotations (renamed
/// to `.old`, a new file started: each new file is opened as soon as it is seen, between two
/// chunks read, so a file rotated away again before the tail got to it is still read) and a
/// truncation that leaves it shorter than what was read.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    /// The file being read, its inode and how far it has been read.
    file: Option<(File, u64, u64)>,
    /// Files that took `path` since, oldest first, with their inodes: read in turn.
    next: VecDeque<(File, u64)>,
    partial: Vec<u8>,
}

impl LogTail {
    /// Follows `path` from its current end: what it holds was logged before. A file that does
    /// not exist yet is read from its start once it appears.
    pub fn from_end(path: &Path) -> LogTail {
        let file = File::open(path).ok().and_then(|mut f| {
            let ino = f.metadata().ok()?.ino();
            let end = f.seek(SeekFrom::End(0)).ok()?;
            Some((f, ino, end))
        });
        LogTail {
            path: path.to_path_buf(),
            file,
            next: VecDeque::new(),
            partial: Vec::new(),
        }
    }

    /// Calls `each` with every complete line written since the last call.
    pub fn poll(&mut self, each: &mut dyn FnMut(&str)) {
        loop {
            self.drain(each);
            let restarted = self.notice_new();
            // A file is finished once another has taken its name: the writer moved on.
            if let Some((f, ino)) = self.next.pop_front() {
                self.file = Some((f, ino, 0));
                self.partial.clear();
            } else if !restarted {
                return;
            }
        }
    }

    /// Bytes read from the file followed now.
    pub fn read_bytes(&self) -> u64 {
        self.file.as_ref().map_or(0, |(_, _, pos)| *pos)
    }

    /// Starts a new file without losing a line: renames the one followed to `<path>.old`, has
    /// the writer open `path` again (`reopen`), reads what reached the old file meanwhile (the
    /// tail holds it open, and the writer appends to it until it reopens), then follows the
    /// new file from its start. When `reopen` fails, the writer goes on with the renamed file,
    /// which the tail goes on reading, until it opens `path` again by itself.
    pub fn rotate(&mut self, reopen: &mut dyn FnMut() -> bool, each: &mut dyn FnMut(&str)) {
        self.poll(each);
        if self.file.is_none() {
            return;
        }
        let mut old = self.path.clone().into_os_string();
        old.push(".old");
        if fs::rename(&self.path, &old).is_err() {
            return;
        }
        reopen();
        self.poll(each);
    }

    /// Opens the file at `path` when it is not one the tail knows (a rotation), or starts the
    /// current one again when it was truncated below what was read (then true).
    fn notice_new(&mut self) -> bool {
        let Ok(meta) = fs::metadata(&self.path) else {
            return false;
        };
        let ino = meta.ino();
        if let Some((f, current, pos)) = self.file.as_mut() {
            if *current == ino {
                if meta.len() < *pos && f.seek(SeekFrom::Start(0)).is_ok() {
                    *pos = 0;
                    self.partial.clear();
                    return true;
                }
                return false;
            }
        }
        if self.next.iter().any(|(_, i)| *i == ino) || self.next.len() >= MAX_PENDING_FILES {
            return false;
        }
        let opened = File::open(&self.path)
            .ok()
            .and_then(|f| Some((f.metadata().ok()?.ino(), f)));
        if let Some((ino, f)) = opened {
            if !self.next.iter().any(|(_, i)| *i == ino) {
                self.next.push_back((f, ino));
            }
        }
        false
    }

    /// Reads the current file to its end, looking for a new file between chunks.
    fn drain(&mut self, each: &mut dyn FnMut(&str)) {
        let mut chunk = vec![0u8; CHUNK];
        loop {
            let Some((file, _, pos)) = self.file.as_mut() else {
                return;
            };
            let n = match file.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            *pos += n as u64;
            let mut rest = &chunk[..n];
            while let Some(end) = rest.iter().position(|b| *b == b'\n') {
                self.partial.extend_from_slice(&rest[..end]);
                if self.partial.len() <= MAX_LINE {
                    each(&String::from_utf8_lossy(&self.partial));
                }
                self.partial.clear();
                rest = &rest[end + 1..];
            }
            if self.partial.len() <= MAX_LINE {
                self.partial.extend_from_slice(rest);
            }
            self.notice_new();
        }
    }
}

/// One refusal, as BIRD logged it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Refused {
    pub reason: Reason,
    pub prefix: IpNetwork,
    pub kind: SessionKind,
    /// The session's address.
    pub peer: Ipv4Addr,
    pub next_hop: IpAddr,
    /// The AS the path starts in (0: an empty path, a route from this node's AS).
    pub origin_as: u32,
}

impl Refused {
    /// The refusal on one line of BIRD's log (`<date> <time> <INFO> ferrocni-refused ...`);
    /// `None` for any other line.
    pub fn parse_line(line: &str) -> Option<Refused> {
        let (_, rest) = line.split_once(" <INFO> ")?;
        let mut words = rest.split_ascii_whitespace();
        if words.next()? != MARKER {
            return None;
        }
        let reason = Reason::from_word(words.next()?)?;
        let prefix: IpNetwork = words.next()?.parse().ok()?;
        let (kind, peer) = parse_protocol_name(words.next()?)?;
        let next_hop: IpAddr = words.next()?.parse().ok()?;
        let origin_as: u32 = words.next()?.parse().ok()?;
        if words.next().is_some() {
            return None;
        }
        Some(Refused {
            reason,
            prefix,
            kind,
            peer,
            next_hop,
            origin_as,
        })
    }

    /// The agent's log line for it.
    pub fn log_line(&self) -> String {
        format!(
            "bgp: refused {} from {} {} (next hop {}, origin AS {}): {} [{}]",
            self.prefix,
            self.kind.word(),
            self.peer,
            self.next_hop,
            self.origin_as,
            self.reason.explanation(),
            self.reason.word()
        )
    }
}

/// A line for the agent's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub line: String,
    pub warning: bool,
}

/// The refusals seen since the agent started: counts by session and reason, and which routes
/// were logged.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: BTreeMap<(SessionKind, Ipv4Addr, Reason), u64>,
    logged: HashSet<(SessionKind, Ipv4Addr, IpNetwork, Reason)>,
    limit_said: bool,
}

impl Refusals {
    /// Counts one refusal; the line to log when this route was not refused before.
    pub fn record(&mut self, r: &Refused) -> Option<Note> {
        *self.counts.entry((r.kind, r.peer, r.reason)).or_default() += 1;
        let key = (r.kind, r.peer, r.prefix, r.reason);
        if self.logged.contains(&key) {
            return None;
        }
        if self.logged.len() >= LOG_ONCE_LIMIT {
            if self.limit_said {
                return None;
            }
            self.limit_said = true;
            return Some(Note {
                line: format!("bgp: more than {LOG_ONCE_LIMIT} different routes refused; the others are counted by reason (ferrocni_agent_bgp_peer_refusals_total), not logged"),
                warning: true,
            });
        }
        self.logged.insert(key);
        Some(Note {
            line: r.log_line(),
            warning: !r.reason.expected(),
        })
    }

    /// Forgets the sessions `keep` does not keep (gone from the configuration).
    pub fn retain_sessions(&mut self, keep: impl Fn(SessionKind, Ipv4Addr) -> bool) {
        self.counts.retain(|(kind, ip, _), _| keep(*kind, *ip));
        let before = self.logged.len();
        self.logged.retain(|(kind, ip, _, _)| keep(*kind, *ip));
        if self.logged.len() < before {
            self.limit_said = false;
        }
    }

    /// The counts, by session and reason.
    pub fn counts(&self) -> impl Iterator<Item = (SessionKind, Ipv4Addr, Reason, u64)> + '_ {
        self.counts
            .iter()
            .map(|((kind, ip, reason), n)| (*kind, *ip, *reason, *n))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn line(reason: &str, prefix: &str, proto: &str) -> String {
        format!("2026-12-07 03:45:22.313 <INFO> ferrocni-refused {reason} {prefix} {proto} 172.31.9.1 64999\n")
    }

    fn append(path: &Path, text: &str) {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn lines(tail: &mut LogTail) -> Vec<String> {
        let mut v = Vec::new();
        tail.poll(&mut |l| v.push(l.to_string()));
        v
    }

    #[test]
    fn parses_the_lines_bird_prints() {
        let r = Refused::parse_line(
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused more-specific 10.244.1.128/25 peer_172_31_9_1 172.31.9.1 64999",
        )
        .unwrap();
        assert_eq!(r.reason, Reason::MoreSpecific);
        assert_eq!(r.prefix, "10.244.1.128/25".parse::<IpNetwork>().unwrap());
        assert_eq!(
            (r.kind, r.peer),
            (SessionKind::Peer, "172.31.9.1".parse().unwrap())
        );
        assert_eq!(r.next_hop, "172.31.9.1".parse::<IpAddr>().unwrap());
        assert_eq!(r.origin_as, 64999);
        assert_eq!(
            r.log_line(),
            "bgp: refused 10.244.1.128/25 from peer 172.31.9.1 (next hop 172.31.9.1, origin AS 64999): inside a node's subnet, not the subnet as leased [more-specific]"
        );
        let v6 = Refused::parse_line(
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused unleased fd00:10:244:ff::/64 mesh_172_31_250_2 fd00:31:250::2 0",
        )
        .unwrap();
        assert_eq!(v6.kind, SessionKind::Mesh);
        assert_eq!(v6.origin_as, 0);
        // BIRD's other lines, and damaged ones, are not refusals.
        for line in [
            "2026-12-07 03:45:22.313 <INFO> Started",
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused",
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused bogus 10.0.0.0/8 peer_1_2_3_4 1.2.3.4 1",
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused unleased 10.0.0.0/8 kernel1 1.2.3.4 1",
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused unleased 10.0.0.0/8 peer_1_2_3_4 1.2.3.4 1 x",
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused unleased 10.0.0.0/8 peer_1_2_3_4 1.2.3.4",
            "2026-12-07 03:45:22.313 <WARN> ferrocni-refused unleased 10.0.0.0/8 peer_1_2_3_4 1.2.3.4 1",
            "",
        ] {
            assert_eq!(Refused::parse_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn follows_the_log_across_rotation() {
        let dir = std::env::temp_dir().join(format!("ferrocni-tail-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("bird.log");
        // Not there yet: read from its start once it appears.
        let mut tail = LogTail::from_end(&log);
        assert!(lines(&mut tail).is_empty());
        append(&log, "one\ntw");
        assert_eq!(lines(&mut tail), ["one"]);
        append(&log, "o\n");
        assert_eq!(lines(&mut tail), ["two"]);
        // BIRD rotates: the rest of the old file, then the new one.
        append(&log, "three\n");
        fs::rename(&log, dir.join("bird.log.old")).unwrap();
        append(&log, "four\n");
        assert_eq!(lines(&mut tail), ["three", "four"]);
        // A rotation while the old file is being read: the new file is opened between two
        // chunks and read after the old one; then another rotation.
        append(&log, "four-a\n");
        let mut seen = Vec::new();
        let mut rotate_twice = |l: &str| {
            seen.push(l.to_string());
            if l == "four-a" {
                fs::rename(&log, dir.join("bird.log.old")).unwrap();
                append(&log, "four-b\n");
            }
        };
        tail.poll(&mut rotate_twice);
        fs::rename(&log, dir.join("bird.log.old")).unwrap();
        append(&log, "four-c\n");
        tail.poll(&mut |l| seen.push(l.to_string()));
        assert_eq!(seen, ["four-a", "four-b", "four-c"]);
        // Truncated in place (by an operator: BIRD renames) and shorter than what was read:
        // from its start again.
        fs::write(&log, "5\n").unwrap();
        assert_eq!(lines(&mut tail), ["5"]);
        // The tail's own rotation: what the writer appends before it reopens is read from
        // the renamed file, then the new file from its start.
        let mut writer = fs::OpenOptions::new().append(true).open(&log).unwrap();
        writer.write_all(b"6a\n").unwrap();
        let mut seen = Vec::new();
        tail.rotate(
            &mut || {
                writer.write_all(b"6b\n").unwrap();
                writer = fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap();
                writer.write_all(b"6c\n").unwrap();
                true
            },
            &mut |l| seen.push(l.to_string()),
        );
        assert_eq!(seen, ["6a", "6b", "6c"]);
        assert_eq!(
            fs::read_to_string(dir.join("bird.log.old")).unwrap(),
            "5\n6a\n6b\n"
        );
        assert_eq!(tail.read_bytes(), 3);
        // A tail made on an existing log skips what it holds.
        let mut late = LogTail::from_end(&log);
        append(&log, "six\n");
        assert_eq!(lines(&mut late), ["six"]);
        // A line too long to be BIRD's is dropped whole, the next one kept.
        append(&log, &format!("{}\nseven\n", "x".repeat(3 * CHUNK)));
        assert_eq!(lines(&mut late), ["seven"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn counts_every_refusal_and_logs_each_route_once() {
        let mut r = Refusals::default();
        let a =
            Refused::parse_line(&line("unleased", "10.244.250.0/24", "peer_172_31_9_1")).unwrap();
        let b =
            Refused::parse_line(&line("advertised", "10.96.0.0/12", "peer_172_31_9_1")).unwrap();
        let c =
            Refused::parse_line(&line("unleased", "10.244.250.0/24", "mesh_172_31_9_3")).unwrap();
        let first = r.record(&a).unwrap();
        assert!(first.warning && first.line.contains("10.244.250.0/24 from peer 172.31.9.1"));
        assert_eq!(r.record(&a), None);
        assert_eq!(r.record(&b).map(|n| n.warning), Some(false));
        assert!(r.record(&c).is_some());
        let counts: Vec<_> = r.counts().collect();
        assert_eq!(
            counts,
            [
                (
                    SessionKind::Mesh,
                    "172.31.9.3".parse().unwrap(),
                    Reason::Unleased,
                    1
                ),
                (
                    SessionKind::Peer,
                    "172.31.9.1".parse().unwrap(),
                    Reason::Advertised,
                    1
                ),
                (
                    SessionKind::Peer,
                    "172.31.9.1".parse().unwrap(),
                    Reason::Unleased,
                    2
                ),
            ]
        );
        r.retain_sessions(|kind, _| kind == SessionKind::Peer);
        assert_eq!(r.counts().count(), 2);
    }

    #[test]
    fn logs_a_bounded_number_of_routes() {
        let mut r = Refusals::default();
        let mut notes = 0;
        for i in 0..(LOG_ONCE_LIMIT as u32 + 100) {
            let prefix = std::net::Ipv4Addr::from(0x0a00_0000 + (i << 8));
            let l = line(
                "outside-network",
                &format!("{prefix}/24"),
                "peer_172_31_9_1",
            );
            if r.record(&Refused::parse_line(&l).unwrap()).is_some() {
                notes += 1;
            }
        }
        // One line per route up to the limit, then one saying so.
        assert_eq!(notes, LOG_ONCE_LIMIT + 1);
        assert_eq!(r.logged.len(), LOG_ONCE_LIMIT);
        assert_eq!(
            r.counts().map(|c| c.3).sum::<u64>(),
            LOG_ONCE_LIMIT as u64 + 100
        );
    }
}
