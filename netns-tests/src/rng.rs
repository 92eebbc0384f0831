//! Reproducible randomness for the fuzz and fault tests: a printed seed replays a run.

/// xorshift64*: tiny, deterministic, good enough to pick mutations and faults.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value; zero is remapped, xorshift cannot leave it).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Log-uniform in `[lo, hi)`: as many draws per decade of short delays as of long ones.
    pub fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (lo, hi) = ((lo.max(1)) as f64, (hi.max(lo + 1)) as f64);
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (lo * (hi / lo).powf(unit)) as u64
    }
}

/// A number from the environment (decimal or `0x` hex).
pub fn env_u64(key: &str) -> Option<u64> {
    let v = std::env::var(key).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}
