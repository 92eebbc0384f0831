//! TBF parameters from a configured rate and burst, computed exactly as the reference
//! plugin does: the same float operations, the same truncations, and the same 32-bit results
//! where a value does not fit. containerd sends burst 4294967295 (MaxUint32) with every
//! bandwidth annotation; the reference's buffer then no longer fits in 32 bits and Go's
//! conversion wraps it. We install the identical qdisc, so either suite's CHECK accepts the
//! other's pods and `tc` shows the same numbers.

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
}

/// Go's `uint32(f)` for a float64, as the reference binary for this architecture computes it.
/// In range it truncates toward zero. Out of range the Go spec leaves it to the hardware:
/// on x86-64 Go converts to int64 (CVTTSD2SQ; out of int64 range or NaN gives i64::MIN) and
/// keeps the low 32 bits; on arm64 FCVTZU saturates (NaN gives 0).
pub fn go_float_to_u32(v: f64) -> u32 {
    if cfg!(target_arch = "aarch64") {
        // `as` saturates and maps NaN to 0, exactly like FCVTZU.
        v as u32
    } else {
        // [-2^63, 2^63) converts; anything else (NaN included) is CVTTSD2SQ's i64::MIN.
        let limit = -(i64::MIN as f64);
        let wide = if v >= i64::MIN as f64 && v < limit {
            v as i64
        } else {
            i64::MIN
        };
        wide as u32
    }
}

/// Microseconds of `latency_ms`, as the reference's `latencyInUsec`.
pub fn latency_in_usec(latency_ms: u32) -> f64 {
    TIME_UNITS_PER_SEC * (f64::from(latency_ms) / 1000.0)
}

/// TBF rate (bytes/s), buffer (ticks) and limit (bytes) for `limit`, as the reference:
/// - rate = rate_bits / 8, burst = uint32(burst_bits / 8) (integer division);
/// - buffer = uint32(uint32(burst * 1e6 / rate) µs * tick_in_usec) ticks;
/// - limit = uint32(rate * latency_µs / 1e6) + burst, in 32-bit arithmetic.
pub fn tbf_for(limit: Limit, latency_ms: u32, tick_in_usec: f64) -> Result<Tbf, ShapeError> {
    let Limit {
        rate_bits,
        burst_bits,
    } = limit;
    let rate = rate_bits / 8;
    if rate == 0 {
        return Err(ShapeError::RateTooLow { rate_bits });
    }
    if burst_bits / 8 == 0 {
        return Err(ShapeError::BurstTooLow { burst_bits });
    }
    // Validation keeps burst / 8 below u32::MAX; the truncation is Go's `uint32(burstInBytes)`.
    let burst = (burst_bits / 8) as u32;
    let buffer_usec = go_float_to_u32(f64::from(burst) * TIME_UNITS_PER_SEC / rate as f64);
    let buffer = go_float_to_u32(f64::from(buffer_usec) * tick_in_usec);
    if buffer == 0 {
        // The kernel refuses an empty bucket (EINVAL, the reference's error); say why.
        return Err(ShapeError::BurstTooSmallForRate {
            rate_bits,
            burst_bits,
        });
    }
    let queued = go_float_to_u32(rate as f64 * latency_in_usec(latency_ms) / TIME_UNITS_PER_SEC);
    Ok(Tbf {
        rate,
        limit: queued.wrapping_add(burst),
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
        let shape = |rate_bits, burst_bits| {
            tbf_for(
                Limit {
                    rate_bits,
                    burst_bits,
                },
                25,
                TICK,
            )
        };
        assert_eq!(
            shape(7, 800).unwrap_err(),
            ShapeError::RateTooLow { rate_bits: 7 }
        );
        assert_eq!(
            shape(800, 7).unwrap_err(),
            ShapeError::BurstTooLow { burst_bits: 7 }
        );
    }

    #[test]
    fn containerd_max_uint32_burst_like_the_reference() {
        // containerd: 10 Mbit/s ingress, 20 Mbit/s egress, burst 4294967295 bits each.
        // Observed with the reference on x86-64: "tbf rate 10Mbit burst 193273526b" (the
        // buffer wrapped) and "rate 20Mbit burst 512Mb" (it fits).
        let ingress = tbf(10_000_000, 4_294_967_295);
        assert_eq!(ingress.rate, 1_250_000);
        assert_eq!(ingress.limit, 31_250 + 536_870_911);
        let egress = tbf(20_000_000, 4_294_967_295);
        assert_eq!(egress.buffer, 3_355_443_187);
        assert_eq!(egress.limit, 62_500 + 536_870_911);
        if cfg!(target_arch = "x86_64") {
            // 429496728 µs * 15.625 = 6710886375 ticks, minus 2^32.
            assert_eq!(ingress.buffer, 2_415_919_079);
        }
    }

    #[test]
    fn empty_bucket_is_refused() {
        // 1000 B at 1.25 GB/s is 0.8 µs, truncated to 0: the kernel would say EINVAL (and
        // does to the reference).
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
    fn go_conversion_semantics() {
        assert_eq!(go_float_to_u32(0.0), 0);
        assert_eq!(go_float_to_u32(46.875), 46);
        assert_eq!(go_float_to_u32(f64::from(u32::MAX)), u32::MAX);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(go_float_to_u32(f64::from(u32::MAX) + 1.0), 0);
            assert_eq!(go_float_to_u32(6_710_886_375.0), 2_415_919_079);
            assert_eq!(go_float_to_u32(-1.0), u32::MAX);
            assert_eq!(go_float_to_u32(f64::NAN), 0);
            assert_eq!(go_float_to_u32(f64::INFINITY), 0);
            assert_eq!(go_float_to_u32(1e30), 0);
        }
    }
}
