//! The network config at `<prefix>/config`, as the agent reads it from etcd (flannel's schema,
//! every backend's options). Invariants: the allocation range lies in the network and on the
//! subnet length; the subnets it hands out are allocatable; reading is deterministic.
#![no_main]

use ferrocni_agent::backend::registry::backend_of;
use ferrocni_agent::subnet::config::NetConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(net) = NetConfig::parse("/coreos.com/network/config", data) else {
        return;
    };
    assert!(net.network.contains(net.subnet_min) && net.network.contains(net.subnet_max));
    assert!(u32::from(net.subnet_min) <= u32::from(net.subnet_max));
    assert!(net.subnet_len >= net.network.prefix() && net.subnet_len <= 32);
    for subnet in net.candidate_subnets().take(3) {
        assert!(
            net.is_allocatable(subnet),
            "{subnet} handed out but not allocatable"
        );
    }
    if let Some(v6) = &net.ipv6 {
        assert!(v6.network.contains(v6.subnet_min) && v6.network.contains(v6.subnet_max));
    }
    let again = NetConfig::parse("/coreos.com/network/config", data).expect("parses again");
    assert!(again == net, "the same config read twice differs");
    if let Ok((_, backend)) = backend_of("/coreos.com/network/config", &net) {
        let _ = backend.describe();
        let _ = backend.mtu_overhead();
    }
});
