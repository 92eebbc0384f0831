//! One line per event on stderr: UTC timestamp, level, `ferrocni-agent:` and the message,
//! so `grep ' ERROR '` or `grep ' WARN '` finds what went wrong (journald or a test harness
//! collects it). `-v N` adds the DEBUG lines of level N and below.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static VERBOSITY: AtomicU8 = AtomicU8::new(0);

/// Sets the `-v` level.
pub fn set_verbosity(level: u8) {
    VERBOSITY.store(level, Ordering::Relaxed);
}

/// Whether DEBUG lines of `level` are printed.
pub fn enabled(level: u8) -> bool {
    VERBOSITY.load(Ordering::Relaxed) >= level
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
    Debug,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
            Level::Debug => "DEBUG",
        }
    }
}

/// An event worth an operator's eye (always printed).
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {
        $crate::ops::log::emit($crate::ops::log::Level::Info, &format!($($arg)*))
    };
}

/// Something failed and is being retried or worked around (always printed).
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => {
        $crate::ops::log::emit($crate::ops::log::Level::Warn, &format!($($arg)*))
    };
}

/// Detail printed from `-v LEVEL` on.
#[macro_export]
macro_rules! debug {
    ($level:expr, $($arg:tt)*) => {
        if $crate::ops::log::enabled($level) {
            $crate::ops::log::emit($crate::ops::log::Level::Debug, &format!($($arg)*))
        }
    };
}

/// `text` cut to `max` characters (with `…` when cut): names and values from etcd are
/// anyone's to write, and a log line must stay a line.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// `text` with control characters (newlines among them) escaped, so text from etcd cannot
/// end a log line and forge the next.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

pub fn emit(level: Level, msg: &str) {
    if matches!(level, Level::Warn | Level::Error) {
        crate::ops::metrics::record_error(msg);
    }
    #[cfg(test)]
    CAPTURED.with(|c| c.borrow_mut().push((level, msg.to_string())));
    eprintln!("{}", line(SystemTime::now(), level, msg));
}

#[cfg(test)]
thread_local! {
    /// The lines this test thread emitted, for tests of what is logged.
    static CAPTURED: std::cell::RefCell<Vec<(Level, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The messages of `level` this test thread emitted since the last call (and forgets them).
#[cfg(test)]
pub fn take_lines(level: Level) -> Vec<String> {
    CAPTURED.with(|c| {
        c.borrow_mut()
            .drain(..)
            .filter(|(l, _)| *l == level)
            .map(|(_, m)| m)
            .collect()
    })
}

fn line(t: SystemTime, level: Level, msg: &str) -> String {
    format!("{} {} ferrocni-agent: {msg}", timestamp(t), level.word())
}

/// RFC 3339 UTC with milliseconds.
pub fn timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's method).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn clips_long_text_on_a_character_boundary() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("0123456789", 10), "0123456789");
        assert_eq!(clip("0123456789ab", 10), "0123456789…");
        assert_eq!(clip("ééééé", 2), "éé…");
    }

    #[test]
    fn control_characters_cannot_start_a_forged_line() {
        assert_eq!(
            escape_controls("k\n2026-01-01T00:00:00.000Z ERROR x\0"),
            "k\\n2026-01-01T00:00:00.000Z ERROR x\\u{0}"
        );
        assert_eq!(escape_controls("plain é"), "plain é");
    }

    #[test]
    fn formats_utc() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_913_253_042);
        assert_eq!(timestamp(t), "2026-11-29T00:47:33.042Z");
        assert_eq!(
            line(t, Level::Warn, "watch lost"),
            "2026-11-29T00:47:33.042Z WARN ferrocni-agent: watch lost"
        );
    }
}
