//! Root tests of `netkit::netfilter::nf_tables` in throw-away netns: what we write over netlink
//! is what `nft -j list` and `iptables-nft -S` show; echoed handles delete exactly the rule;
//! failing batches change nothing; concurrent batches on shared chains neither fail nor
//! duplicate.

use std::process::Command;

use netkit::netfilter::nf_tables::build::{self, Addr};
use netkit::netfilter::nf_tables::{
    xt, Batch, Chain, CmpOp, Family, Hook, Rule, Socket, Table, Verdict, POLICY_ACCEPT,
};
use netkit::testutil::TestNetns;

fn run(ns: &TestNetns, argv: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .args(argv)
        .output()
        .expect("run tool");
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sock(ns: &TestNetns) -> Socket {
    Socket::open_in(&ns.open().unwrap()).unwrap()
}

fn masq_rule(ip: &str, subnet: &str, comment: &str) -> Rule {
    Rule::new(
        Family::Inet,
        "t",
        "masq",
        build::all([
            build::nfproto(false),
            build::host(Addr::Saddr, CmpOp::Eq, ip.parse().unwrap()),
            build::addr(Addr::Daddr, CmpOp::Neq, subnet.parse().unwrap()),
            build::masquerade(),
        ]),
    )
    .with_comment(comment)
}

fn setup_batch() -> Batch {
    let mut b = Batch::new();
    b.add_table(&Table::new(Family::Inet, "t").with_comment("test table"))
        .add_chain(&Chain::new(Family::Inet, "t", "masq"))
        .add_chain(&Chain::base(
            Family::Inet,
            "t",
            "post",
            "nat",
            Hook::Postrouting,
            100,
            Some(POLICY_ACCEPT),
        ));
    b
}

#[test]
fn rules_round_trip_and_nft_agrees() {
    netkit::skip_unless_root!();
    let ns = TestNetns::new("nft");
    let mut s = sock(&ns);
    let mut b = setup_batch();
    b.add_rule(&Rule::new(
        Family::Inet,
        "t",
        "post",
        build::verdict(Verdict::Goto("masq".into())),
    ));
    b.add_rule_echo(&masq_rule("10.9.0.5", "10.9.0.0/24", "pod-a, net: n"));
    b.add_rule_echo(&masq_rule("10.9.0.6", "10.9.0.0/24", "pod-b"));
    let echoed = s.commit(&b).unwrap();
    assert_eq!(echoed.len(), 2);
    let handles: Vec<u64> = echoed.iter().map(|r| r.handle.unwrap()).collect();

    let text = run(&ns, &["nft", "list", "chain", "inet", "t", "masq"]);
    assert!(
        text.contains(
            "ip saddr 10.9.0.5 ip daddr != 10.9.0.0/24 masquerade comment \"pod-a, net: n\""
        ),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(
        &ns,
        &["nft", "-j", "list", "chain", "inet", "t", "masq"],
    ))
    .unwrap();
    let listed: Vec<(u64, String)> = json["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i.get("rule"))
        .map(|r| {
            (
                r["handle"].as_u64().unwrap(),
                r["comment"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (handles[0], "pod-a, net: n".to_string()),
            (handles[1], "pod-b".to_string())
        ]
    );

    // Our dump parses back what we wrote.
    let rules = s.rules(Family::Inet, "t", "masq").unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(
        rules[0].exprs,
        masq_rule("10.9.0.5", "10.9.0.0/24", "x").exprs
    );
    assert_eq!(rules[1].comment().as_deref(), Some("pod-b"));
    assert_eq!(
        s.rules(Family::Inet, "t", "post").unwrap()[0].target_chain(),
        Some("masq")
    );
    assert!(s.rules(Family::Inet, "t", "nope").unwrap().is_empty());
    assert!(s.rules(Family::Ip, "nope", "nope").unwrap().is_empty());
    assert!(s
        .chain(Family::Inet, "t", "post")
        .unwrap()
        .unwrap()
        .base
        .is_some());
    assert!(s.chain(Family::Inet, "t", "nope").unwrap().is_none());
    assert!(s.table_exists(Family::Inet, "t").unwrap());
    assert!(!s.table_exists(Family::Ip6, "t").unwrap());

    // Deleting by handle removes exactly that rule; a stale handle fails the whole batch.
    let mut del = Batch::new();
    del.delete_rule(Family::Inet, "t", "masq", handles[0]);
    s.commit(&del).unwrap();
    let mut stale = Batch::new();
    stale
        .delete_rule(Family::Inet, "t", "masq", handles[1])
        .delete_rule(Family::Inet, "t", "masq", handles[0]);
    let e = s.commit(&stale).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains("delete rule inet t masq"), "{e}");
    let left = s.rules(Family::Inet, "t", "masq").unwrap();
    assert_eq!(left.len(), 1, "a failed batch must change nothing");
    assert_eq!(left[0].handle, Some(handles[1]));

    // Re-adding the shared objects is harmless.
    s.commit(&setup_batch()).unwrap();
}

#[test]
fn iptables_nft_sees_our_rules_as_its_own() {
    netkit::skip_unless_root!();
    let ns = TestNetns::new("xt");
    let mut s = sock(&ns);
    let mut b = Batch::new();
    xt::ensure_builtin(
        &mut b,
        Family::Ip,
        "filter",
        "FORWARD",
        "filter",
        Hook::Forward,
        0,
    );
    xt::ensure_chain(&mut b, Family::Ip, "filter", "CNI-FORWARD");
    b.insert_rule(&xt::rule(
        Family::Ip,
        "filter",
        "FORWARD",
        vec![xt::comment_match("CNI firewall plugin rules")],
        Verdict::Jump("CNI-FORWARD".into()),
    ));
    let ip = "10.9.1.5".parse().unwrap();
    b.add_rule(&xt::rule(
        Family::Ip,
        "filter",
        "CNI-FORWARD",
        build::all([
            xt::host(false, ip),
            vec![xt::ctstate_match(
                xt::CT_STATE_RELATED | xt::CT_STATE_ESTABLISHED,
            )],
        ]),
        Verdict::Accept,
    ));
    s.commit(&b).unwrap();
    let listed = run(&ns, &["iptables-nft", "-S"]);
    assert!(
        listed.contains(
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"
        ),
        "{listed}"
    );
    assert!(
        listed.contains(
            "-A CNI-FORWARD -d 10.9.1.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
        ),
        "{listed}"
    );
    // And iptables finds (and deletes) it by its spec, as it would its own.
    run(
        &ns,
        &[
            "iptables-nft",
            "-C",
            "CNI-FORWARD",
            "-d",
            "10.9.1.5/32",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
    );
    // Conversely we read iptables' rules: the comment and the jump target.
    run(&ns, &["iptables-nft", "-t", "nat", "-N", "CNI-abc"]);
    run(
        &ns,
        &[
            "iptables-nft",
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-s",
            "10.9.1.5",
            "-j",
            "CNI-abc",
            "-m",
            "comment",
            "--comment",
            "name: \"n\" id: \"c\"",
        ],
    );
    let rules = s.rules(Family::Ip, "nat", "POSTROUTING").unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].target_chain(), Some("CNI-abc"));
    assert_eq!(
        xt::rule_comment(&rules[0]).as_deref(),
        Some("name: \"n\" id: \"c\"")
    );
}

#[test]
fn concurrent_batches_on_shared_chains_neither_fail_nor_duplicate() {
    netkit::skip_unless_root!();
    let ns = TestNetns::new("nftc");
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let path = ns.path();
            std::thread::spawn(move || {
                let netns = netkit::Netns::open(path).unwrap();
                let mut s = Socket::open_in(&netns).unwrap();
                for j in 0..10 {
                    let mut b = setup_batch();
                    b.flush_chain(Family::Inet, "t", "post");
                    b.add_rule(&Rule::new(
                        Family::Inet,
                        "t",
                        "post",
                        build::verdict(Verdict::Goto("masq".into())),
                    ));
                    b.add_rule(&masq_rule(
                        &format!("10.9.{i}.{}", j + 1),
                        "10.9.0.0/16",
                        &format!("pod-{i}-{j}"),
                    ));
                    s.commit(&b).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut s = sock(&ns);
    assert_eq!(s.rules(Family::Inet, "t", "post").unwrap().len(), 1);
    let masq = s.rules(Family::Inet, "t", "masq").unwrap();
    assert_eq!(masq.len(), 160);
    let mut comments: Vec<String> = masq.iter().filter_map(Rule::comment).collect();
    comments.sort();
    comments.dedup();
    assert_eq!(comments.len(), 160);
}
