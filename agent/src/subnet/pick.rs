//! How a free subnet is chosen, for both families: flannel picks at random among the first 100
//! free ones, which spreads nodes starting together over the free list (the etcd transaction
//! settles any remaining race).

/// One of the first 100 of `free` chosen by `seed`.
pub fn pick_seeded<T: Copy>(free: impl Iterator<Item = T>, seed: u64) -> Option<T> {
    let free: Vec<T> = free.take(100).collect();
    (!free.is_empty()).then(|| free[(seed % free.len() as u64) as usize])
}
