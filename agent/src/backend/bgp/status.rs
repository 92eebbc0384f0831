//! The sessions' state as BIRD reports it (`show protocols all`), and what changed between two
//! readings (for the log).

use std::net::Ipv4Addr;

use super::control::Line;
use super::sessions::{parse_protocol_name, SessionKind};

/// BIRD's words for a BGP session's state, as the metrics list them (`Passive`: waiting for the
/// peer to connect; `Down`: the protocol is stopped, for instance by an error).
pub const STATES: &[&str] = &[
    "Idle",
    "Connect",
    "Active",
    "Passive",
    "OpenSent",
    "OpenConfirm",
    "Established",
    "Close",
    "Down",
];
pub const ESTABLISHED: &str = "Established";

/// A channel's route counters (`Routes: 1 imported, 2 exported, 1 preferred`, and the
/// `filtered` column of `Import updates:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCounts {
    /// Accepted by the import filter.
    pub imported: u64,
    pub exported: u64,
    /// Imported and chosen as the best route of their network.
    pub preferred: u64,
    /// Announcements the import filter refused since the session came up.
    pub refused_updates: u64,
}

/// One BGP session of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub kind: SessionKind,
    pub peer: Ipv4Addr,
    /// One of [`STATES`] (another word if a BIRD version adds one).
    pub state: String,
    /// When the protocol last changed state, as BIRD prints it.
    pub since: String,
    pub last_error: Option<String>,
    pub routes: RouteCounts,
}

impl Session {
    pub fn established(&self) -> bool {
        self.state == ESTABLISHED
    }

    fn describe(&self) -> String {
        format!("BGP session with {} ({})", self.peer, self.kind.word())
    }
}

/// The sessions in a `show protocols all` reply (other protocols are skipped).
pub fn parse_protocols(reply: &[Line]) -> Vec<Session> {
    let mut out: Vec<Session> = Vec::new();
    let mut current: Option<Session> = None;
    for line in reply {
        match line.code {
            1002 => {
                out.extend(current.take());
                current = summary(&line.text);
            }
            1006 => {
                if let Some(s) = current.as_mut() {
                    detail(s, line.text.trim());
                }
            }
            _ => {}
        }
    }
    out.extend(current);
    out
}

/// `mesh_172_31_250_2 BGP --- up 2026-12-04 09:20:29.227 Established`.
fn summary(text: &str) -> Option<Session> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (kind, peer) = parse_protocol_name(words.first()?)?;
    if words.get(1) != Some(&"BGP") {
        return None;
    }
    // `Since` is a date and a time (timeformat iso long), or a time alone (BIRD's default).
    let date_first = words
        .get(4)
        .is_some_and(|w| w.len() == 10 && w.as_bytes()[4] == b'-');
    let since_words = if date_first { 2 } else { 1 };
    let since = words
        .get(4..4 + since_words)
        .map(|w| w.join(" "))
        .unwrap_or_default();
    let info = words.get(4 + since_words..).unwrap_or_default();
    Some(Session {
        kind,
        peer,
        state: info.first().map_or("Down", |w| w).to_string(),
        since,
        last_error: None,
        routes: RouteCounts::default(),
    })
}

fn detail(s: &mut Session, text: &str) {
    if let Some(v) = text.strip_prefix("BGP state:") {
        s.state = v.trim().to_string();
    } else if let Some(v) = text.strip_prefix("Last error:") {
        s.last_error = Some(v.trim().to_string()).filter(|e| !e.is_empty());
    } else if let Some(v) = text.strip_prefix("Routes:") {
        // Summed over the session's channels (`ipv4`, and `ipv6` on a dual-stack network);
        // saturating, as a damaged reply may hold any number.
        let c = route_counts(v);
        s.routes.imported = s.routes.imported.saturating_add(c.imported);
        s.routes.exported = s.routes.exported.saturating_add(c.exported);
        s.routes.preferred = s.routes.preferred.saturating_add(c.preferred);
    } else if let Some(v) = text.strip_prefix("Import updates:") {
        // received, rejected, filtered, ignored, accepted
        let filtered = v.split_whitespace().nth(2).and_then(|n| n.parse().ok());
        s.routes.refused_updates = s
            .routes
            .refused_updates
            .saturating_add(filtered.unwrap_or(0));
    }
}

/// ` 1 imported, 2 exported, 1 preferred` (BIRD adds `3 filtered` with `import keep filtered`).
fn route_counts(text: &str) -> RouteCounts {
    let mut c = RouteCounts::default();
    for part in text.split(',') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "imported" => c.imported = n,
            "exported" => c.exported = n,
            "preferred" => c.preferred = n,
            _ => {}
        }
    }
    c
}

/// A change worth a log line: a session came up, or went down (with BIRD's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub up: bool,
    pub line: String,
}

/// What changed from `old` to `new`. A session new to the list is reported only when it is
/// established (added and removed sessions are logged with the membership change).
pub fn changes(old: &[Session], new: &[Session]) -> Vec<Change> {
    let mut out = Vec::new();
    for s in new {
        let before = old.iter().find(|o| o.kind == s.kind && o.peer == s.peer);
        let was_up = before.is_some_and(Session::established);
        let flapped = before.is_some_and(|b| {
            b.established() && s.established() && !same_moment(&b.since, &s.since)
        });
        if s.established() && (!was_up || flapped) {
            out.push(Change {
                up: true,
                line: format!("{} established", s.describe()),
            });
        } else if was_up && !s.established() {
            let why = s
                .last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            out.push(Change {
                up: false,
                line: format!("{} down: {}{why}", s.describe(), s.state),
            });
        }
    }
    out
}

/// How far apart two printings of one `since` may be. BIRD prints it by converting its
/// monotonic clock to wall time on each request, so the same moment prints a millisecond
/// apart now and then; a session that went down and came back has a `since` after the reading
/// that saw it up, and readings are seconds apart.
pub const SINCE_JITTER_MS: i64 = 100;

/// Whether two of BIRD's printings of `since` name the same moment (within
/// [`SINCE_JITTER_MS`]). Text that is not a time compares as text.
pub fn same_moment(a: &str, b: &str) -> bool {
    match (since_millis(a), since_millis(b)) {
        (Some(x), Some(y)) => (x - y).abs() <= SINCE_JITTER_MS,
        _ => a == b,
    }
}

/// `since` as milliseconds, for comparing two printings: `YYYY-MM-DD HH:MM:SS[.mmm]` from the
/// civil epoch, or `HH:MM:SS[.mmm]` (BIRD's default format) from midnight.
pub fn since_millis(since: &str) -> Option<i64> {
    let (date, time) = match since.split_once(' ') {
        Some((d, t)) => (Some(d), t),
        None => (None, since),
    };
    let days = match date {
        Some(d) => {
            let mut ymd = d.splitn(3, '-').map(|w| w.parse::<i64>().ok());
            let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
            days_from_civil(y, m, d)?
        }
        None => 0,
    };
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.splitn(3, ':').map(|w| w.parse::<i64>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    let digits = frac.get(..frac.len().min(3))?;
    let ms = digits.parse::<i64>().ok()? * 10_i64.pow(3 - digits.len() as u32);
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some((((days * 24 + h) * 60 + m) * 60 + s) * 1000 + ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> Option<i64> {
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::io::Cursor;

    /// `show protocols all` as BIRD 2.0.12 answers it (abridged where nothing is read).
    pub const SHOW_PROTOCOLS_ALL: &str = "\
2002-Name       Proto      Table      State  Since         Info
1002-device1    Device     ---        up     2026-12-04 09:20:28.466  
1006-
1002-direct1    Direct     ---        up     2026-12-04 09:20:28.466  
1006-  Channel ipv4
     State:          UP
     Routes:         2 imported, 0 exported, 1 preferred
 
1002-mesh_172_31_9_1 BGP        ---        up     2026-12-04 09:20:29.227  Established   
1006-  BGP state:          Established
     Neighbor address: 172.31.9.1
     Neighbor AS:      64512
     Session:          internal multihop AS4
   Channel ipv4
     State:          UP
     Input filter:   import_pod_subnets
     Routes:         1 imported, 3 filtered, 2 exported, 1 preferred
     Route change stats:     received   rejected   filtered    ignored   accepted
       Import updates:              4          0          3          0          1
 
1002-mesh_172_31_9_3 BGP        ---        start  2026-12-04 09:20:20.552  Active        Socket: Connection refused
1006-  BGP state:          Active
     Neighbor address: 172.31.9.3
     Last error:       Socket: Connection refused
   Channel ipv4
     State:          DOWN
 
1002-peer_192_0_2_1 BGP        ---        down   09:20:20.565  Error: No listening socket
1006-  BGP state:          Down
     Last error:       Error: No listening socket
 
0000 
";

    pub fn sample() -> Vec<Session> {
        let lines =
            super::super::control::read_reply(&mut Cursor::new(SHOW_PROTOCOLS_ALL)).unwrap();
        parse_protocols(&lines)
    }

    #[test]
    fn parses_sessions() {
        let s = sample();
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(
            s[0],
            Session {
                kind: SessionKind::Mesh,
                peer: "172.31.9.1".parse().unwrap(),
                state: "Established".into(),
                since: "2026-12-04 09:20:29.227".into(),
                last_error: None,
                routes: RouteCounts {
                    imported: 1,
                    exported: 2,
                    preferred: 1,
                    refused_updates: 3,
                },
            }
        );
        assert_eq!(s[1].state, "Active");
        assert_eq!(
            s[1].last_error.as_deref(),
            Some("Socket: Connection refused")
        );
        assert_eq!(s[1].routes, RouteCounts::default());
        assert_eq!(
            (s[2].kind, s[2].state.as_str()),
            (SessionKind::Peer, "Down")
        );
        assert_eq!(s[2].since, "09:20:20.565");
    }

    /// A dual-stack session has an `ipv6` channel too: its counts add to the `ipv4` one's.
    #[test]
    fn channels_add_up() {
        let reply = SHOW_PROTOCOLS_ALL.replace(
            "       Import updates:              4          0          3          0          1\n",
            "       Import updates:              4          0          3          0          1\n   \
             Channel ipv6\n     State:          UP\n     \
             Routes:         1 imported, 1 exported, 1 preferred\n     \
             Route change stats:     received   rejected   filtered    ignored   accepted\n       \
             Import updates:              2          0          1          0          1\n",
        );
        assert_ne!(reply, SHOW_PROTOCOLS_ALL);
        let lines = super::super::control::read_reply(&mut Cursor::new(reply)).unwrap();
        let s = parse_protocols(&lines);
        assert_eq!(
            s[0].routes,
            RouteCounts {
                imported: 2,
                exported: 3,
                preferred: 2,
                refused_updates: 4,
            }
        );
    }

    #[test]
    fn changes_worth_a_line() {
        let old = sample();
        let mut new = old.clone();
        assert!(changes(&old, &new).is_empty());
        new[0].state = "Active".into();
        new[0].last_error = Some("Received: Hold timer expired".into());
        new[1].state = "Established".into();
        let c = changes(&old, &new);
        assert_eq!(
            c,
            vec![
                Change {
                    up: false,
                    line: "BGP session with 172.31.9.1 (mesh) down: Active (Received: Hold timer expired)".into()
                },
                Change {
                    up: true,
                    line: "BGP session with 172.31.9.3 (mesh) established".into()
                },
            ]
        );
        // Down and up again between two readings: the time it last changed state gives it away.
        let mut flapped = old.clone();
        flapped[0].since = "2026-12-04 09:30:00.000".into();
        assert_eq!(changes(&old, &flapped).len(), 1);
        // The same moment printed a millisecond apart is not a flap.
        let mut jittered = old.clone();
        jittered[0].since = "2026-12-04 09:20:29.228".into();
        assert!(changes(&old, &jittered).is_empty());
        // A session first seen established is reported; one first seen connecting is not.
        assert_eq!(changes(&[], &old).len(), 1);
    }

    #[test]
    fn since_compares_across_midnight_and_formats() {
        assert_eq!(since_millis("1970-01-01 00:00:01.5"), Some(1500));
        assert_eq!(since_millis("09:20:20.565"), Some(33_620_565));
        assert!(same_moment(
            "2026-12-06 23:59:59.999",
            "2026-12-07 00:00:00.000"
        ));
        assert!(same_moment(
            "2024-02-29 12:00:00.000",
            "2024-02-29 12:00:00.050"
        ));
        assert!(!same_moment(
            "2026-12-07 00:01:49.593",
            "2026-12-07 00:01:50.593"
        ));
        assert!(!same_moment(
            "2026-12-07 00:01:49.593",
            "2026-12-08 00:01:49.593"
        ));
        for bad in [
            "",
            "up",
            "25:00:00",
            "2026-13-01 00:00:00",
            "1:2",
            "12:00:00.x",
        ] {
            assert_eq!(since_millis(bad), None, "{bad}");
        }
        assert!(same_moment("?", "?") && !same_moment("?", "!"));
    }
}
