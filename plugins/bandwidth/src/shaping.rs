//! TBF parameters from a configured rate and burst, computed exactly as the reference
//! plugin does (same float operations, same truncations), except that values the reference
//! would silently wrap are refused.

use netkit::tc::{Tbf, TIME_UNITS_PER_SEC};

use crate::config::Limit;

/// Why a limit cannot be turned into a TBF.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShapeError {
    #[error("rate {rate_bits} bit/s is below 8 bit/s (one byte per second)")]
    RateTooLow { rate_bits: u64 },
    #[error("burst {burst_bits} bits is below 8 bits (one byte)")]
    BurstTooLow { burst_bits: u64 },
    #[error("burst {burst_bits} bits is too small for rate {rate_bits} bit/s: the bucket would hold less than one psched tick")]
    BurstTooSmallForRate { rate_bits: u64, burst_bits: u64 },
    #[error(
        "burst {burst_bits} bits at {rate_bits} bit/s needs a {what} that does not fit in 32 bits"
    )]
    Overflow {
        rate_bits: u64,
        burst_bits: u64,
        what: &'static str,
    },
}

/// Converts a value computed in f64 to u32 the way Go's `uint32(f)` does for in-range
/// values (truncation toward zero); out-of-range values are an error instead of garbage.
fn to_u32(v: f64) -> Option<u32> {
    (v.is_finite() && (0.0..=f64::from(u32::MAX)).contains(&v)).then_some(v as u32)
}

/// Microseconds of `latency_ms`, as the reference's `latencyInUsec`.
pub fn latency_in_usec(latency_ms: u32) -> f64 {
    TIME_UNITS_PER_SEC * (f64::from(latency_ms) / 1000.0)
}

/// TBF rate (bytes/s), buffer (ticks) and limit (bytes) for `limit`:
/// - rate = rate_bits / 8, burst = burst_bits / 8 (integer division);
/// - buffer = ticks(trunc(burst * 1e6 / rate) µs), ticks = trunc(µs * tick_in_usec);
/// - limit = trunc(rate * latency_µs / 1e6) + burst.
pub fn tbf_for(limit: Limit, latency_ms: u32, tick_in_usec: f64) -> Result<Tbf, ShapeError> {
    let Limit {
        rate_bits,
        burst_bits,
    } = limit;
    let rate = rate_bits / 8;
    let burst = burst_bits / 8;
    if rate == 0 {
        return Err(ShapeError::RateTooLow { rate_bits });
    }
    if burst == 0 {
        return Err(ShapeError::BurstTooLow { burst_bits });
    }
    let overflow = |what| ShapeError::Overflow {
        rate_bits,
        burst_bits,
        what,
    };
    let burst32 = u32::try_from(burst).map_err(|_| overflow("burst"))?;

    let buffer_usec = to_u32(f64::from(burst32) * TIME_UNITS_PER_SEC / rate as f64)
        .ok_or_else(|| overflow("buffer"))?;
    let buffer = to_u32(f64::from(buffer_usec) * tick_in_usec).ok_or_else(|| overflow("buffer"))?;
    if buffer == 0 {
        // The kernel rejects an empty bucket with EINVAL; say why up front.
        return Err(ShapeError::BurstTooSmallForRate {
            rate_bits,
            burst_bits,
        });
    }

    let latency = latency_in_usec(latency_ms);
    let queued = to_u32(rate as f64 * latency / TIME_UNITS_PER_SEC)
        .ok_or_else(|| overflow("queue limit"))?;
    let limit = queued
        .checked_add(burst32)
        .ok_or_else(|| overflow("queue limit"))?;
    Ok(Tbf {
        rate,
        limit,
        buffer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/net/psched` of every current kernel: 1000/64 * 1.
    const TICK: f64 = 15.625;

    fn tbf(rate_bits: u64, burst_bits: u64) -> Tbf {
        tbf_for(
            Limit {
                rate_bits,
                burst_bits,
            },
            25,
            TICK,
        )
        .unwrap()
    }

    #[test]
    fn ten_mbit_like_the_reference() {
        // 10 Mbit/s, 80 kbit burst: rate 1.25 MB/s, burst 10000 B, 8000 µs => 125000 ticks,
        // limit 1.25e6 * 0.025 + 10000 = 41250 B (observed with the reference: "rate 10Mbit burst 10000b lat 25ms").
        assert_eq!(
            tbf(10_000_000, 80_000),
            Tbf {
                rate: 1_250_000,
                limit: 41_250,
                buffer: 125_000
            }
        );
    }

    #[test]
    fn integer_division_and_truncation() {
        // 8 kbit/s = 1000 B/s; burst 4095 bits = 511 B => 511000 µs => 7984375 ticks.
        assert_eq!(
            tbf(8_007, 4_095),
            Tbf {
                rate: 1000,
                limit: 25 + 511,
                buffer: 7_984_375
            }
        );
        // 3 µs * 15.625 = 46.875 => 46 ticks (truncated, as Go does).
        let t = tbf(50_000_000_000, 160_000);
        assert_eq!(t.buffer, 46);
        assert_eq!(t.rate, 6_250_000_000);
        assert_eq!(t.limit, 156_250_000 + 20_000);
    }

    #[test]
    fn rates_above_u32_bytes_keep_64_bits() {
        let t = tbf(8 * (1u64 << 32) + 8, 8_000_000);
        assert_eq!(t.rate, (1u64 << 32) + 1);
    }

    #[test]
    fn latency_changes_only_the_limit() {
        let l = Limit {
            rate_bits: 10_000_000,
            burst_bits: 80_000,
        };
        let a = tbf_for(l, 25, TICK).unwrap();
        let b = tbf_for(l, 100, TICK).unwrap();
        assert_eq!((a.rate, a.buffer), (b.rate, b.buffer));
        assert_eq!(b.limit, 125_000 + 10_000);
        assert_eq!(latency_in_usec(25), 25_000.0);
    }

    #[test]
    fn degenerate_values_are_refused() {
        assert_eq!(
            tbf_for(
                Limit {
                    rate_bits: 7,
                    burst_bits: 800
                },
                25,
                TICK
            )
            .unwrap_err(),
            ShapeError::RateTooLow { rate_bits: 7 }
        );
        assert_eq!(
            tbf_for(
                Limit {
                    rate_bits: 800,
                    burst_bits: 7
                },
                25,
                TICK
            )
            .unwrap_err(),
            ShapeError::BurstTooLow { burst_bits: 7 }
        );
        // 4 GB at 1 B/s: 4.29e15 µs does not fit; the reference would send a wrapped value.
        let e = tbf_for(
            Limit {
                rate_bits: 8,
                burst_bits: 8 * u64::from(u32::MAX - 1),
            },
            25,
            TICK,
        )
        .unwrap_err();
        assert!(
            matches!(e, ShapeError::Overflow { what: "buffer", .. }),
            "{e}"
        );
        // Huge rate with a long latency: rate * latency overflows the 32-bit limit.
        let e = tbf_for(
            Limit {
                rate_bits: 8_000_000_000_000,
                burst_bits: 8_000_000,
            },
            60_000,
            TICK,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::Overflow {
                    what: "queue limit",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn empty_bucket_is_refused() {
        // 1000 B at 1.25 GB/s is 0.8 µs, truncated to 0 µs: the kernel would say EINVAL.
        let e = tbf_for(
            Limit {
                rate_bits: 10_000_000_000,
                burst_bits: 8_000,
            },
            25,
            TICK,
        )
        .unwrap_err();
        assert!(matches!(e, ShapeError::BurstTooSmallForRate { .. }), "{e}");
    }

    #[test]
    fn to_u32_bounds() {
        assert_eq!(to_u32(0.0), Some(0));
        assert_eq!(to_u32(46.875), Some(46));
        assert_eq!(to_u32(f64::from(u32::MAX)), Some(u32::MAX));
        assert_eq!(to_u32(f64::from(u32::MAX) + 1.0), None);
        assert_eq!(to_u32(-1.0), None);
        assert_eq!(to_u32(f64::NAN), None);
        assert_eq!(to_u32(f64::INFINITY), None);
    }
}
