//! host-local's config (`plugin::load`: ranges, the legacy single range, `runtimeConfig`
//! ranges and IPs, routes, requested IPs from CNI_ARGS `IP`, `args` and `runtimeConfig`), for
//! every verb its version allows, and the address iteration ADD runs over the ranges.
//! Invariants: a canonical range holds its own bounds; the round-robin walk from any start
//! yields only addresses of the set and never a gateway; refusals are well-formed CNI errors.
#![no_main]

use std::net::IpAddr;

use ferrocni_fuzz::{load_per_verb, split_config};
use host_local::plugin::load;
use host_local::range::RangeSet;
use libfuzzer_sys::fuzz_target;

/// How many addresses of each walk are checked (a /8 has millions).
const WALK: usize = 64;

fn walk(set: &RangeSet, from: Option<IpAddr>) {
    for (ip, range) in set.iter_from(from).take(WALK) {
        assert!(range.contains(&ip), "{ip} yielded for {range}");
        assert!(set.contains(&ip), "{ip} yielded outside the set {set}");
        assert_ne!(ip, range.gateway, "the gateway {ip} yielded");
    }
}

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, load, |_, conf| {
        for set in &conf.ranges {
            for range in &set.0 {
                assert!(range.contains(&range.range_start), "{range}");
                assert!(range.contains(&range.range_end), "{range}");
                let _ = (range.capacity(), range.subnet_string());
            }
            let _ = set.capacity();
            walk(set, None);
            for ip in &conf.requested_ips {
                walk(set, Some(*ip));
            }
            if let Some(last) = set.0.last() {
                walk(set, Some(last.range_end));
            }
        }
    });
});
