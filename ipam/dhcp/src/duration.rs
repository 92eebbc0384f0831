//! Go's `time.ParseDuration` for the daemon's flags (`10s`, `1m30s`, `500ms`, `2h`).

use std::time::Duration;

pub fn parse(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() || rest.starts_with('-') {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        assert_eq!(parse("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        for bad in ["", "10", "s", "-1s", "1x", "1..2s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
