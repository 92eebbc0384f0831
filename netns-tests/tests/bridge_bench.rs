//! Rough ADD/DEL timing of our bridge + host-local against the reference (20 pods each).
//! Ignored by default: `cargo test -p netns-tests --test bridge_bench -- --ignored --nocapture`
//! (with FERROCNI_BIN_DIR pointing at release binaries for meaningful numbers).

mod bridge_support;

use std::time::{Duration, Instant};

use bridge_support::*;
use netns_tests::{require_root, skip_unless, Netns, TempDir};
use serde_json::json;

const PODS: usize = 20;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench(imp: &Impl, masq: bool) -> (Duration, Duration) {
    let host = Netns::new("brb-host");
    let ipam = TempDir::new("brb-ipam");
    let c = conf(
        "1.0.0",
        "benchnet",
        Some(&ipam),
        json!([[{"subnet": "10.90.0.0/24"}]]),
        json!({"isGateway": true, "ipMasq": masq}),
    );
    let pods: Vec<Netns> = (0..PODS).map(|_| Netns::new("brb-pod")).collect();
    let atts: Vec<Attachment> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| Attachment::new(imp, &host, &format!("bench{i}"), p))
        .collect();
    let mut adds = Vec::new();
    for a in &atts {
        let t = Instant::now();
        let out = a.call("ADD", &c);
        adds.push(t.elapsed());
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    let mut dels = Vec::new();
    for a in &atts {
        let t = Instant::now();
        let out = a.call("DEL", &c);
        dels.push(t.elapsed());
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    (median(adds), median(dels))
}

#[test]
#[ignore]
fn add_del_medians() {
    require_root!();
    let reference = skip_unless!(reference(), "reference plugins not installed");
    let ours = ours();
    for masq in [false, true] {
        let (oa, od) = bench(&ours, masq);
        let (ra, rd) = bench(&reference, masq);
        println!("bridge+host-local ipMasq={masq}: ADD median ours {oa:?} / reference {ra:?}; DEL median ours {od:?} / reference {rd:?}");
    }
}
