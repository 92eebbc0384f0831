//! A message on the agent's etcd watch, as the gRPC stream delivers it (protobuf), applied to
//! the membership, then the peers a backend would get. Invariants: no event of our own key
//! makes us a peer; every peer passed the shared rules.
#![no_main]

use ferrocni_agent::backend::registry::backend_of;
use ferrocni_agent::manager::etcd::client::proto::WatchResponse;
use ferrocni_agent::manager::etcd::watch::decode;
use ferrocni_agent::manager::WatchEvent;
use ferrocni_agent::membership::Membership;
use ferrocni_agent::subnet::config::NetConfig;
use ferrocni_agent::subnet::key::SubnetKey;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(resp) = WatchResponse::decode(data) else {
        return;
    };
    let own = SubnetKey::parse("10.244.9.0-24").expect("own key");
    let mut members = Membership::new(own, "etcd");
    let WatchEvent::Changes { changes, .. } = decode("/coreos.com/network/subnets/", &resp) else {
        return;
    };
    if members.apply_all(changes).is_err() {
        // Our own lease deleted: a revocation, which the agent handles by acquiring again.
        return;
    }
    let net = NetConfig::parse(
        "/coreos.com/network/config",
        br#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#,
    )
    .expect("config");
    let rules = net.rules(own, "192.168.0.9".parse().expect("ip"), None);
    let (_, backend) = backend_of("/coreos.com/network/config", &net).expect("backend");
    let (peers, _) = members.peers(&rules, backend.as_ref());
    for p in &peers {
        assert_ne!(p.key, own, "our own lease as a peer");
        assert!(rules.check_lease(&p.key, &p.attrs).is_ok(), "{}", p.key);
    }
});
