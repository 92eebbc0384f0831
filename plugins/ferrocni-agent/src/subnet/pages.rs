//! How many keys one listing page asks etcd for. Leases are small (about 200 bytes), but
//! anyone who can write under `<prefix>/subnets/` can put values up to etcd's request limit
//! there, so the size is learned from the pages themselves: pages aim at [`TARGET_BYTES`], and
//! a page too large to decode is asked again with fewer keys (etcd builds the whole response
//! before the client can refuse it: at most [`MAX_KEYS`] times its request limit). The size
//! learned carries over to the next listing, and grows back over pages of leases.

/// Keys in a page when values are lease-sized (500 leases are about 125 KB): the Kubernetes
/// API's default page size, which faces the same objects of up to 1.5 MiB.
pub const MAX_KEYS: i64 = 500;
/// What a page should weigh (keys and values): far below the client's decode limit.
pub const TARGET_BYTES: usize = 2 * 1024 * 1024;
/// How much a page too large to decode shrinks.
const SHRINK: i64 = 8;

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

#[cfg(test)]
mod tests {
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
}
