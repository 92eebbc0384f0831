//! The agent's own `subnet.env` from an earlier run, read at start for the subnet to ask for
//! again (`previous_subnet`). Invariant: the subnet read, written as
//! the agent writes the file, reads back the same.
#![no_main]

use ferrocni_agent::node::subnet_env::{previous_subnet, SubnetEnv};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(key) = previous_subnet(text) else {
        return;
    };
    let env = SubnetEnv {
        network: key.v4,
        subnet: key.v4,
        ipv6: key.v6.map(|v6| (v6, v6)),
        mtu: 1450,
        ipmasq: false,
    };
    assert_eq!(
        previous_subnet(&env.render()),
        Some(key),
        "subnet.env changed on a round trip"
    );
});
