//! Namespaces, pods and NetworkPolicies as the agent will read them from the API (the
//! compiler's own input types, in the API's JSON): checked, compiled, diffed against the
//! empty plan and explained for pairs of pod addresses. The apiserver validates policies,
//! but the compiler must not trust that. Invariants: no panic; a compile of the same input is
//! the same plan; a plan diffed against itself is no change.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netpolicy::{compile, explain, Cluster, Plan, Protocol};

/// Bounds the work an input can ask for (pods × rules).
const MAX_OBJECTS: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Ok(mut cluster) = serde_json::from_slice::<Cluster>(data) else {
        return;
    };
    cluster.namespaces.truncate(MAX_OBJECTS);
    cluster.pods.truncate(MAX_OBJECTS);
    cluster.policies.truncate(MAX_OBJECTS);
    let compiled = compile(&cluster);
    assert_eq!(compile(&cluster).plan, compiled.plan, "compiles differ");
    let plan = &compiled.plan;
    let _ = Plan::diff(&Plan::default(), plan);
    assert!(
        Plan::diff(plan, plan).is_empty(),
        "a plan differs from itself"
    );
    let addrs: Vec<_> = plan.pods.keys().take(4).copied().collect();
    for from in &addrs {
        for to in &addrs {
            for (protocol, port) in [
                (Protocol::Tcp, 80),
                (Protocol::Udp, 53),
                (Protocol::Sctp, 1),
            ] {
                let _ = explain(plan, *from, *to, protocol, port).to_string();
            }
        }
    }
});
