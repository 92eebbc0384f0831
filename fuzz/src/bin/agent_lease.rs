//! A lease in etcd as another node (or anyone with write access) wrote it: the key, a NUL, the
//! value. The key as the watch and listings read it, the value as a lease, then the checks
//! every backend's peers go through (the shared rules, each backend's `check_peer`).
//! Invariants: a value read writes back and reads back the same (floats in the backend data to
//! the last bit, as `same_json` allows); a key read prints back as itself.
#![no_main]

use std::sync::OnceLock;

use ferrocni_agent::backend::registry::{backend_of, REGISTRY};
use ferrocni_agent::backend::Backend;
use ferrocni_agent::manager::etcd::store::lease_key_of;
use ferrocni_agent::subnet::config::NetConfig;
use ferrocni_agent::subnet::key::SubnetKey;
use ferrocni_agent::subnet::lease::LeaseAttrs;
use ferrocni_fuzz::same_json;
use libfuzzer_sys::fuzz_target;

const SUBNETS: &str = "/coreos.com/network/subnets/";

/// A network config for every backend the agent runs (its registry), dual-stack where the
/// backend takes it, so a new backend is fuzzed without touching this target.
fn networks() -> &'static [(NetConfig, Box<dyn Backend>)] {
    static NETS: OnceLock<Vec<(NetConfig, Box<dyn Backend>)>> = OnceLock::new();
    NETS.get_or_init(|| {
        let parse = |json: String| {
            let key = "/coreos.com/network/config";
            let net = NetConfig::parse(key, json.as_bytes())?;
            backend_of(key, &net).map(|(_, backend)| (net, backend))
        };
        REGISTRY
            .iter()
            .map(|r| {
                let backend = format!(r#"{{"Type":"{}"}}"#, r.names[0]);
                parse(format!(
                    r#"{{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{backend}}}"#
                ))
                .or_else(|_| parse(format!(r#"{{"Network":"10.244.0.0/16","Backend":{backend}}}"#)))
                .expect("every backend takes its defaults")
            })
            .collect()
    })
}

/// `a == b`, the backend data compared by [`same_json`].
fn same_lease(a: &LeaseAttrs, b: &LeaseAttrs) -> bool {
    let same_data = |x: &Option<serde_json::Value>, y: &Option<serde_json::Value>| match (x, y) {
        (Some(x), Some(y)) => same_json(x, y),
        _ => x == y,
    };
    a.public_ip == b.public_ip
        && a.public_ipv6 == b.public_ipv6
        && a.backend_type == b.backend_type
        && same_data(&a.backend_data, &b.backend_data)
        && same_data(&a.backend_v6_data, &b.backend_v6_data)
}

fuzz_target!(|data: &[u8]| {
    let (name, value) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"/coreos.com/network/subnets/10.244.3.0-24"[..], data),
    };
    let full: Vec<u8> = [SUBNETS.as_bytes(), name].concat();
    let key = lease_key_of(SUBNETS, name).or_else(|| lease_key_of(SUBNETS, &full));
    if let Some(k) = key {
        assert_eq!(SubnetKey::parse(&k.to_string()), Some(k), "{k}");
    }
    let Ok(attrs) = LeaseAttrs::decode(value) else {
        return;
    };
    let back = LeaseAttrs::decode(attrs.to_json().as_bytes()).expect("a written lease reads back");
    assert!(
        same_lease(&back, &attrs),
        "lease changed on a round trip: {back:?} != {attrs:?}"
    );
    let own = SubnetKey::parse("10.244.9.0-24&fd00:10:244:9::-64").expect("own key");
    let key = key.unwrap_or(own);
    for (net, backend) in networks() {
        let own = if net.ipv6.is_some() {
            own
        } else {
            SubnetKey { v6: None, ..own }
        };
        let rules = net.rules(
            own,
            "192.168.0.9".parse().expect("ip"),
            Some("fd00:9::9".parse().expect("ip6")),
        );
        let _ = rules.check_lease(&key, &attrs);
        let _ = backend.check_peer(&attrs);
    }
});
