//! One transaction of 20,000 set elements and 5,000 rules (several MB in one datagram), and
//! the plan of 1,000 pods and 200 policies written whole and changed by one pod (timed; run
//! with `--ignored --nocapture`). Root only; `--test-threads=1`.

mod common;

use std::time::Instant;

use common::*;
use netkit::netfilter::nf_tables::build::{self, Addr};
use netkit::netfilter::nf_tables::named_set::{NamedSet, SetKey};
use netkit::netfilter::nf_tables::{Batch, Chain, Family, Rule, Table, Verdict};
use netpolicy::sample;
use netpolicy_nft::PolicyTable;

#[test]
fn twenty_thousand_elements_and_five_thousand_rules_in_one_transaction() {
    require_root!();
    let ns = Ns::new("big");
    let mut sock = ns.socket();
    let set = NamedSet {
        family: Family::Inet,
        table: "big".into(),
        name: "addrs".into(),
        key: SetKey::IPV4_ADDR,
        interval: false,
        verdict_map: false,
        id: 1,
    };
    let keys: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| (0x0a00_0000 + i).to_be_bytes().to_vec())
        .collect();
    let mut batch = Batch::new();
    batch
        .add_table(&Table::new(Family::Inet, "big"))
        .add_set(&set)
        .add_elements(&set, &keys)
        .add_chain(&Chain::new(Family::Inet, "big", "c"));
    for i in 0..5_000u16 {
        batch.add_rule(
            &Rule::new(
                Family::Inet,
                "big",
                "c",
                build::all([
                    build::addr_in_set(Addr::Saddr, false, "addrs"),
                    build::l4proto(6),
                    build::th_dport(i + 1, i + 1),
                    build::verdict(Verdict::Accept),
                ]),
            )
            .with_comment("a rule"),
        );
    }
    let bytes = batch.encoded_len();
    assert!(bytes > 1_000_000, "{bytes} bytes");
    let start = Instant::now();
    sock.commit(&batch).unwrap();
    println!(
        "{} messages, {bytes} bytes committed in {:.0} ms",
        batch.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    let set_listing = ns.exec(&["nft", "list", "set", "inet", "big", "addrs"]);
    assert_eq!(set_listing.matches("10.0.").count(), 20_000);
    assert_eq!(sock.rules(Family::Inet, "big", "c").unwrap().len(), 5_000);

    // Flush, delete elements, delete the set once no rule uses it.
    let mut batch = Batch::new();
    batch
        .delete_elements(&set, &keys[..10])
        .flush_chain(Family::Inet, "big", "c")
        .flush_set(&set)
        .delete_set(Family::Inet, "big", "addrs");
    sock.commit(&batch).unwrap();
    let listing = ns.exec(&["nft", "list", "table", "inet", "big"]);
    assert!(!listing.contains("addrs"), "{listing}");
}

/// Timing: `cargo test -p netpolicy-nft --release --test big_batch -- --ignored --nocapture`.
#[test]
#[ignore]
fn scale_thousand_pods_two_hundred_policies() {
    require_root!();
    let ns = Ns::new("scale");
    let mut sock = ns.socket();
    let cluster = sample::cluster(1000, 200);
    let plan = compile(&cluster);
    let rules_before = plan
        .targets
        .values()
        .map(|t| t.ingress.clauses.len() + t.egress.clauses.len())
        .sum::<usize>();
    let mut table = PolicyTable::new();
    let start = Instant::now();
    let stats = table.sync(&mut sock, &plan).unwrap();
    let full = start.elapsed();
    println!(
        "full sync: {:.0} ms, {} sets, {} targets, {rules_before} clauses: {stats:?}",
        full.as_secs_f64() * 1e3,
        plan.sets.len(),
        plan.targets.len()
    );

    // One client pod more.
    let more = sample::with_one_client_more(&cluster);
    let after = compile(&more);
    let start = Instant::now();
    let stats = table.sync(&mut sock, &after).unwrap();
    println!(
        "one pod more: {:.1} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert!(!stats.full);

    // The same plan again: the cost of the diff alone (nothing is sent).
    let start = Instant::now();
    let stats = table.sync(&mut sock, &after).unwrap();
    println!(
        "no change: {:.1} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(stats.messages, 0);

    // A pod's labels change: set elements only.
    let mut relabeled = more.clone();
    relabeled.pods[5]
        .labels
        .insert("role".into(), "client".into());
    let start = Instant::now();
    let stats = table.sync(&mut sock, &compile(&relabeled)).unwrap();
    println!(
        "one pod relabeled (compile included): {:.1} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );

    // A restart: the whole table written again over the existing one.
    let start = Instant::now();
    let stats = PolicyTable::new().sync(&mut sock, &after).unwrap();
    println!(
        "full rewrite over the table: {:.0} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );
}
