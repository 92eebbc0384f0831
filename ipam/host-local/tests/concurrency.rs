//! 50 parallel ADD processes get 50 distinct addresses; 50 parallel DELs empty the store.
//! Also mixes in the reference plugin, which takes the same `lock` file.

mod common;
use common::*;
use serde_json::json;
use std::collections::HashSet;

const N: usize = 50;

fn parallel(
    bin_for: impl Fn(usize) -> &'static str,
    command: &str,
    c: &serde_json::Value,
) -> Vec<Outcome> {
    let cids: Vec<String> = (0..N).map(|i| format!("par{i}")).collect();
    let children: Vec<_> = cids
        .iter()
        .enumerate()
        .map(|(i, cid)| Call::new(bin_for(i), command, cid).spawn(c))
        .collect();
    children.into_iter().map(finish).collect()
}

fn check_distinct_then_release(bin_for: impl Fn(usize) -> &'static str + Copy) {
    let d = TempDir::new("conc");
    let c = conf(
        "1.0.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "10.50.0.0/24"}], [{"subnet": "fd50::/120"}]]}),
    );
    let store = d.path().join("net");
    let adds = parallel(bin_for, "ADD", &c);
    let mut seen = HashSet::new();
    for o in &adds {
        assert!(o.ok(), "{}", o.stdout);
        for a in o.addresses() {
            assert!(seen.insert(a.clone()), "address {a} handed out twice");
        }
    }
    assert_eq!(seen.len(), 2 * N);
    let files = leases(&store);
    assert_eq!(files.len(), 2 * N);
    for (_, content) in &files {
        assert!(
            content.starts_with("par") && content.ends_with("\r\neth0"),
            "{content:?}"
        );
    }
    let dels = parallel(bin_for, "DEL", &c);
    assert!(dels.iter().all(Outcome::ok));
    assert!(leases(&store).is_empty(), "{:?}", leases(&store));
    for e in entries(&store) {
        assert!(
            e == "lock"
                || e.starts_with("last_reserved_ip.")
                || e == ".ferrocni-index"
                || e == ".ferrocni-boot",
            "left behind: {e}"
        );
    }
}

#[test]
fn fifty_parallel_adds_and_dels() {
    check_distinct_then_release(|_| ours());
}

#[test]
fn fifty_parallel_mixed_with_reference() {
    if reference().is_none() {
        return;
    }
    check_distinct_then_release(|i| if i % 2 == 0 { ours() } else { REFERENCE });
}
