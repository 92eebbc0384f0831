//! How long a compile takes at 1,000 pods and 200 policies, and a diff after one pod comes.
//! `cargo run --release -p netpolicy --example compile_bench [pods] [policies]`

use std::time::{Duration, Instant};

use netpolicy::sample::{self, cluster};
use netpolicy::{compile, Plan};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let policies: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let c = cluster(pods, policies);
    let mut times = Vec::new();
    let mut compiled = compile(&c);
    for _ in 0..15 {
        let start = Instant::now();
        compiled = compile(&c);
        times.push(start.elapsed());
    }
    assert!(compiled.refused.is_empty(), "{:?}", compiled.refused);
    let plan = compiled.plan;
    let elements: usize = plan.sets.values().map(|s| s.elements.len()).sum();
    let clauses: usize = plan
        .targets
        .values()
        .map(|t| t.ingress.clauses.len() + t.egress.clauses.len())
        .sum();
    println!(
        "{pods} pods, {policies} policies: compile {:.1} ms (median of {}, min {:.1} ms)",
        median(times.clone()).as_secs_f64() * 1e3,
        times.len(),
        times.iter().min().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );
    println!(
        "plan: {} sets, {elements} set elements, {} target addresses, {clauses} clauses",
        plan.sets.len(),
        plan.targets.len()
    );

    // One client pod more: a compile and a diff.
    let more = sample::with_one_client_more(&c);
    let after = compile(&more).plan;
    let start = Instant::now();
    let changes = Plan::diff(&plan, &after);
    let diff_time = start.elapsed();
    println!(
        "one pod more: diff {:.2} ms: {} sets with element changes, {} targets changed, {} sets created",
        diff_time.as_secs_f64() * 1e3,
        changes.elements.len(),
        changes.targets.len(),
        changes.sets_created.len()
    );
}
