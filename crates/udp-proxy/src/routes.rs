//! The engine's route table: the node that holds a destination, by longest prefix match over
//! the peers' subnets (flanneld's proxy does the same in userspace: the kernel only has one
//! route for the whole cluster network, through the TUN device).
//!
//! The caller replaces the whole table at run time ([`SharedRoutes::replace`]); the sending
//! thread picks the new one up at its next batch by comparing a generation number, so a
//! lookup never takes a lock.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ipnetwork::Ipv4Network;

/// Next hops by destination subnet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RouteTable {
    /// One map per prefix length, longest first (leases are usually all one length).
    by_prefix: Vec<PrefixRoutes>,
    len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PrefixRoutes {
    prefix: u8,
    mask: u32,
    hops: HashMap<u32, SocketAddrV4>,
}

impl RouteTable {
    /// A table of `routes`; a subnet given with host bits is taken as its network, and a
    /// subnet given twice keeps its last next hop.
    pub fn new(routes: impl IntoIterator<Item = (Ipv4Network, SocketAddrV4)>) -> RouteTable {
        let mut by_prefix: Vec<PrefixRoutes> = Vec::new();
        for (subnet, hop) in routes {
            let prefix = subnet.prefix();
            let mask = mask(prefix);
            let at = match by_prefix.iter().position(|p| p.prefix == prefix) {
                Some(i) => i,
                None => {
                    by_prefix.push(PrefixRoutes {
                        prefix,
                        mask,
                        hops: HashMap::new(),
                    });
                    by_prefix.len() - 1
                }
            };
            by_prefix[at]
                .hops
                .insert(u32::from(subnet.ip()) & mask, hop);
        }
        by_prefix.sort_by_key(|p| std::cmp::Reverse(p.prefix));
        let len = by_prefix.iter().map(|p| p.hops.len()).sum();
        RouteTable { by_prefix, len }
    }

    /// The next hop of the longest prefix holding `dst`.
    #[inline]
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<SocketAddrV4> {
        let dst = u32::from(dst);
        self.by_prefix
            .iter()
            .find_map(|p| p.hops.get(&(dst & p.mask)).copied())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn mask(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    }
}

/// The table the caller replaces and the sending thread reads.
#[derive(Debug, Default)]
pub struct SharedRoutes {
    generation: AtomicU64,
    table: Mutex<Arc<RouteTable>>,
}

impl SharedRoutes {
    pub fn replace(&self, table: RouteTable) {
        let mut current = self.table.lock().unwrap_or_else(|p| p.into_inner());
        *current = Arc::new(table);
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn current(&self) -> Arc<RouteTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A thread's copy of the table, refreshed when the generation moved.
pub struct RouteView {
    shared: Arc<SharedRoutes>,
    generation: u64,
    table: Arc<RouteTable>,
}

impl RouteView {
    pub fn new(shared: Arc<SharedRoutes>) -> RouteView {
        let generation = shared.generation.load(Ordering::Acquire);
        let table = shared.current();
        RouteView {
            shared,
            generation,
            table,
        }
    }

    /// Takes up a replaced table (one atomic load when nothing changed); whether it was.
    #[inline]
    pub fn refresh(&mut self) -> bool {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return false;
        }
        self.generation = generation;
        self.table = self.shared.current();
        true
    }

    #[inline]
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<SocketAddrV4> {
        self.table.lookup(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Network {
        s.parse().unwrap()
    }

    fn hop(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins() {
        let table = RouteTable::new([
            (net("10.244.0.0/16"), hop("172.31.0.1:8285")),
            (net("10.244.5.0/24"), hop("172.31.0.5:8285")),
            (net("10.244.5.128/25"), hop("172.31.0.6:8285")),
            (net("0.0.0.0/0"), hop("172.31.0.9:8285")),
        ]);
        assert_eq!(table.len(), 4);
        let at = |ip: &str| table.lookup(ip.parse().unwrap());
        assert_eq!(at("10.244.5.200"), Some(hop("172.31.0.6:8285")));
        assert_eq!(at("10.244.5.7"), Some(hop("172.31.0.5:8285")));
        assert_eq!(at("10.244.9.1"), Some(hop("172.31.0.1:8285")));
        assert_eq!(at("192.168.1.1"), Some(hop("172.31.0.9:8285")));
        assert_eq!(
            RouteTable::default().lookup("10.0.0.1".parse().unwrap()),
            None
        );
    }

    #[test]
    fn host_bits_are_ignored_and_the_last_duplicate_wins() {
        let table = RouteTable::new([
            (net("10.244.5.9/24"), hop("172.31.0.5:8285")),
            (net("10.244.5.0/24"), hop("172.31.0.7:9000")),
            (net("10.244.6.1/32"), hop("172.31.0.8:8285")),
        ]);
        assert_eq!(table.len(), 2);
        assert_eq!(
            table.lookup("10.244.5.1".parse().unwrap()),
            Some(hop("172.31.0.7:9000"))
        );
        assert_eq!(
            table.lookup("10.244.6.1".parse().unwrap()),
            Some(hop("172.31.0.8:8285"))
        );
        assert_eq!(table.lookup("10.244.6.2".parse().unwrap()), None);
    }

    #[test]
    fn a_view_sees_a_replaced_table_after_refresh() {
        let shared = Arc::new(SharedRoutes::default());
        let mut view = RouteView::new(shared.clone());
        let dst = "10.244.2.3".parse().unwrap();
        assert_eq!(view.lookup(dst), None);
        shared.replace(RouteTable::new([(
            net("10.244.2.0/24"),
            hop("172.31.0.2:8285"),
        )]));
        assert_eq!(view.lookup(dst), None, "not before the refresh");
        assert!(view.refresh());
        assert!(!view.refresh(), "nothing new");
        assert_eq!(view.lookup(dst), Some(hop("172.31.0.2:8285")));
        shared.replace(RouteTable::default());
        view.refresh();
        assert_eq!(view.lookup(dst), None, "a removed route is forgotten");
    }
}
