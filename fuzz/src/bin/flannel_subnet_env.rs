//! flanneld's `subnet.env` as the flannel plugin reads it (`SubnetEnv::parse`). Invariant:
//! what it read, written back the way flanneld writes the file, reads back the same.
#![no_main]

use flannel::subnet_env;
use libfuzzer_sys::fuzz_target;
use subnet_env::SubnetEnv;

fn join(nets: &[ipnetwork::IpNetwork]) -> String {
    nets.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The file as flanneld writes it for `env`.
fn render(env: &SubnetEnv) -> String {
    let mut text = String::new();
    if !env.networks.is_empty() {
        text += &format!("FLANNEL_NETWORK={}\n", join(&env.networks));
    }
    if let Some(s) = env.subnet {
        text += &format!("FLANNEL_SUBNET={s}\n");
    }
    if !env.ipv6_networks.is_empty() {
        text += &format!("FLANNEL_IPV6_NETWORK={}\n", join(&env.ipv6_networks));
    }
    if let Some(s) = env.ipv6_subnet {
        text += &format!("FLANNEL_IPV6_SUBNET={s}\n");
    }
    text + &format!("FLANNEL_MTU={}\nFLANNEL_IPMASQ={}\n", env.mtu, env.ipmasq)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(env) = SubnetEnv::parse(text) else {
        return;
    };
    let back = SubnetEnv::parse(&render(&env)).expect("a file written from what was read parses");
    assert_eq!(back, env, "subnet.env changed on a round trip");
});
