//! Our messages against the bytes nft and iptables-nft send for the same commands. The
//! `testdata/*.hex` files hold the tools' batches, captured in a scratch netns with
//! `strace -e trace=sendmsg -e write=3 nft -f FILE` (and the same for iptables 1.8.9).

use super::build::{self, Addr};
use super::capture::{assert_same_messages, messages, unhex};
use super::expr::{CmpOp, Verdict};
use super::msg::{Chain, Family, Hook, Rule, Table, POLICY_ACCEPT};
use super::socket::Batch;
use super::xt;

fn assert_same(ours: &Batch, golden: &str) {
    assert_same_messages(ours, golden);
}

fn net(s: &str) -> ipnetwork::IpNetwork {
    s.parse().unwrap()
}

#[test]
fn masquerade_table_matches_nft() {
    let (f, t) = (Family::Inet, "cni_plugins_masquerade");
    let mut b = Batch::new();
    b.add_table(
        &Table::new(f, t)
            .with_comment("Masquerading for plugins from github.com/containernetworking/plugins"),
    )
    .add_chain(&Chain::new(f, t, "masq_checks").with_comment(
        "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet",
    ))
    .add_chain(&Chain::base(
        f,
        t,
        "postrouting",
        "nat",
        Hook::Postrouting,
        100,
        Some(POLICY_ACCEPT),
    ));
    let multicast = |v6: bool, n: &str| {
        build::all([
            build::nfproto(v6),
            build::addr(Addr::Daddr, CmpOp::Eq, net(n)),
            build::verdict(Verdict::Return),
        ])
    };
    b.add_rule(&Rule::new(
        f,
        t,
        "postrouting",
        multicast(false, "224.0.0.0/4"),
    ));
    b.add_rule(&Rule::new(f, t, "postrouting", multicast(true, "ff00::/8")));
    b.add_rule(&Rule::new(
        f,
        t,
        "postrouting",
        build::verdict(Verdict::Goto("masq_checks".into())),
    ));
    let masq = |v6: bool, ip: &str, subnet: &str, c: &str| {
        Rule::new(
            f,
            t,
            "masq_checks",
            build::all([
                build::nfproto(v6),
                build::host(Addr::Saddr, CmpOp::Eq, ip.parse().unwrap()),
                build::addr(Addr::Daddr, CmpOp::Neq, net(subnet)),
                build::masquerade(),
            ]),
        )
        .with_comment(c)
    };
    b.add_rule(&masq(false, "10.1.0.5", "10.1.0.0/24", "abc, net: x"));
    b.add_rule(&masq(true, "fd00::5", "fd00::/64", "abc6"));
    assert_same(&b, include_str!("testdata/nft_masquerade.hex"));
}

#[test]
fn portmap_and_spoofcheck_tables_match_nft() {
    let (ip, t) = (Family::Ip, "cni_hostport");
    let mut b = Batch::new();
    b.add_table(&Table::new(ip, t).with_comment("CNI portmap plugin"))
        .add_chain(&Chain::new(ip, t, "hostports"))
        .add_chain(&Chain::new(ip, t, "hostports_all"))
        .add_chain(&Chain::base(
            ip,
            t,
            "prerouting",
            "nat",
            Hook::Prerouting,
            -100,
            None,
        ))
        .add_chain(&Chain::base(
            ip,
            t,
            "masquerading",
            "nat",
            Hook::Postrouting,
            100,
            None,
        ));
    let jump = |c: &str| build::verdict(Verdict::Jump(c.into()));
    b.add_rule(&Rule::new(ip, t, "hostports_all", jump("hostports")));
    b.add_rule(&Rule::new(
        ip,
        t,
        "prerouting",
        build::all([build::fib_daddr_local(), jump("hostports_all")]),
    ));
    b.add_rule(&Rule::new(
        ip,
        t,
        "prerouting",
        build::all([
            build::ifname(true, CmpOp::Neq, "eth9"),
            build::fib_daddr_local(),
            jump("hostports_all"),
        ]),
    ));
    let cip = "10.88.0.5".parse().unwrap();
    b.add_rule(
        &Rule::new(
            ip,
            t,
            "hostports",
            build::all([build::l4proto_dport(6, 8080), build::dnat(cip, 80)]),
        )
        .with_comment("cid"),
    );
    b.add_rule(
        &Rule::new(
            ip,
            t,
            "hostports",
            build::all([
                build::host(Addr::Daddr, CmpOp::Eq, "192.168.1.1".parse().unwrap()),
                build::l4proto_dport(17, 53),
                build::dnat(cip, 53),
            ]),
        )
        .with_comment("cid"),
    );
    b.add_rule(
        &Rule::new(
            ip,
            t,
            "masquerading",
            build::all([
                build::addr(Addr::Saddr, CmpOp::Eq, net("10.88.0.0/16")),
                build::host(Addr::Daddr, CmpOp::Eq, cip),
                build::ct_status_dnat(),
                build::masquerade(),
            ]),
        )
        .with_comment("cid"),
    );
    b.add_rule(
        &Rule::new(
            ip,
            t,
            "masquerading",
            build::all([
                build::host(Addr::Saddr, CmpOp::Eq, "127.0.0.1".parse().unwrap()),
                build::host(Addr::Daddr, CmpOp::Eq, cip),
                build::masquerade(),
            ]),
        )
        .with_comment("cid"),
    );
    let ip6 = Family::Ip6;
    b.add_table(&Table::new(ip6, t))
        .add_chain(&Chain::new(ip6, t, "hostports"));
    b.add_rule(
        &Rule::new(
            ip6,
            t,
            "hostports",
            build::all([
                build::l4proto_dport(6, 8080),
                build::dnat("fd00::5".parse().unwrap(), 80),
            ]),
        )
        .with_comment("cid"),
    );
    let (br, nat) = (Family::Bridge, "nat");
    b.add_table(&Table::new(br, nat))
        .add_chain(&Chain::base(
            br,
            nat,
            "PREROUTING",
            "filter",
            Hook::Prerouting,
            -300,
            Some(POLICY_ACCEPT),
        ))
        .add_chain(&Chain::new(br, nat, "cni-br-iface-x"))
        .add_chain(&Chain::new(br, nat, "cni-br-iface-x-mac"));
    let c = "macspoofchk-x";
    b.add_rule(
        &Rule::new(
            br,
            nat,
            "PREROUTING",
            build::all([
                build::ifname(true, CmpOp::Eq, "veth1"),
                jump("cni-br-iface-x"),
            ]),
        )
        .with_comment(c),
    );
    b.add_rule(&Rule::new(br, nat, "cni-br-iface-x", jump("cni-br-iface-x-mac")).with_comment(c));
    b.add_rule(
        &Rule::new(
            br,
            nat,
            "cni-br-iface-x-mac",
            build::all([
                build::ether_saddr([2, 0, 0, 0, 0, 1]),
                build::verdict(Verdict::Return),
            ]),
        )
        .with_comment(c),
    );
    b.add_rule(
        &Rule::new(br, nat, "cni-br-iface-x-mac", build::verdict(Verdict::Drop)).with_comment(c),
    );
    assert_same(&b, include_str!("testdata/nft_portmap_spoofcheck.hex"));
}

#[test]
fn deletions_match_nft() {
    let mut b = Batch::new();
    b.delete_rule(Family::Inet, "t1", "c1", 2)
        .flush_chain(Family::Inet, "t1", "c1")
        .delete_chain(Family::Inet, "t1", "c1");
    assert_same(&b, include_str!("testdata/nft_delete.hex"));
}

#[test]
fn firewall_rules_match_iptables_nft() {
    let (ip, filter) = (Family::Ip, xt::FILTER);
    let ip5 = "10.0.0.5".parse().unwrap();

    let mut b = Batch::new();
    b.push(
        super::msg::msg_type::NEWTABLE,
        0x400,
        ip,
        {
            let mut w = super::attr::Writer::new();
            w.string(1, filter);
            w
        },
        String::new(),
    );
    // iptables -N uses NLM_F_EXCL; we create without it (an existing chain is fine), so
    // only the attributes are compared here.
    xt::ensure_chain(&mut b, ip, filter, "CNI-FORWARD");
    let ours = messages(&b.encode(0));
    let theirs = messages(&unhex(include_str!("testdata/ipt_new_chain.hex")));
    assert_eq!(ours[0], theirs[0]);
    assert_eq!(ours[1].2, theirs[1].2);

    let mut b = Batch::new();
    xt::ensure_builtin(&mut b, ip, filter, "FORWARD", "filter", Hook::Forward, 0);
    b.insert_rule(&xt::rule(
        ip,
        filter,
        "FORWARD",
        vec![xt::comment_match("CNI firewall plugin rules")],
        Verdict::Jump("CNI-FORWARD".into()),
    ));
    // The table existed already when iptables ran: it sent the chain and the rule.
    let ours = messages(&b.encode(0));
    assert_eq!(
        ours[1..],
        messages(&unhex(include_str!("testdata/ipt_forward_jump.hex")))[..]
    );

    let mut b = Batch::new();
    b.add_rule(&xt::rule(
        ip,
        filter,
        "CNI-FORWARD",
        build::all([
            xt::host(false, ip5),
            vec![xt::ctstate_match(
                xt::CT_STATE_RELATED | xt::CT_STATE_ESTABLISHED,
            )],
        ]),
        Verdict::Accept,
    ));
    assert_same(&b, include_str!("testdata/ipt_ctstate.hex"));

    let mut b = Batch::new();
    b.add_rule(&xt::rule(
        ip,
        filter,
        "CNI-FORWARD",
        xt::host(true, ip5),
        Verdict::Accept,
    ));
    assert_same(&b, include_str!("testdata/ipt_saddr.hex"));

    let mut b = Batch::new();
    xt::ensure_builtin(
        &mut b,
        Family::Ip6,
        filter,
        "FORWARD",
        "filter",
        Hook::Forward,
        0,
    );
    b.add_rule(&xt::rule(
        Family::Ip6,
        filter,
        "FORWARD",
        xt::host(true, "fd00::5".parse().unwrap()),
        Verdict::Accept,
    ));
    assert_same(&b, include_str!("testdata/ipt6_saddr.hex"));

    let mut b = Batch::new();
    b.add_rule(&xt::rule(
        ip,
        filter,
        "FORWARD",
        build::all([
            xt::iface(true, false, "br0"),
            xt::iface(false, true, "br0"),
            vec![xt::comment_match(
                "CNI firewall plugin rules (ingressPolicy: same-bridge)",
            )],
        ]),
        Verdict::Drop,
    ));
    assert_same(&b, include_str!("testdata/ipt_iface.hex"));
}

#[test]
fn flannel_masquerade_matches_nft() {
    // What ferrocni-agent sends to replace flannel's `ip flannel-ipv4` masquerade table and
    // to drop the IPv6 one (testdata/nft_flannel_masq.hex, `nft -f` of the same commands).
    let (ip, t) = (Family::Ip, "flannel-ipv4");
    let table = Table::new(ip, t).with_comment("ferrocni-agent: flannel --ip-masq");
    let cluster = net("10.244.0.0/16");
    let mut b = Batch::new();
    b.add_table(&table).delete_table(ip, t).add_table(&table);
    b.add_chain(
        &Chain::base(ip, t, "postrtg", "nat", Hook::Postrouting, 100, None)
            .with_comment("pod traffic leaving the cluster network is masqueraded"),
    );
    b.add_rule(
        &Rule::new(
            ip,
            t,
            "postrtg",
            build::all([build::mark_has(0x4000), build::verdict(Verdict::Return)]),
        )
        .with_comment("masq: kube-proxy marked, it masquerades"),
    );
    b.add_rule(
        &Rule::new(
            ip,
            t,
            "postrtg",
            build::all([
                build::addr(Addr::Saddr, CmpOp::Eq, net("10.244.1.0/24")),
                build::addr(Addr::Daddr, CmpOp::Eq, cluster),
                build::verdict(Verdict::Return),
            ]),
        )
        .with_comment("masq: pod to cluster, no NAT"),
    );
    b.add_rule(
        &Rule::new(
            ip,
            t,
            "postrtg",
            build::all([
                build::addr(Addr::Saddr, CmpOp::Eq, cluster),
                build::addr(Addr::Daddr, CmpOp::Neq, net("224.0.0.0/4")),
                build::masquerade_fully_random(),
            ]),
        )
        .with_comment("masq: cluster to outside"),
    );
    let ip6 = Family::Ip6;
    b.add_table(&Table::new(ip6, "flannel-ipv6"))
        .delete_table(ip6, "flannel-ipv6");
    assert_same(&b, include_str!("testdata/nft_flannel_masq.hex"));
}

#[test]
fn limit_and_log_to_a_group_match_nft() {
    let (f, t) = (Family::Inet, "t1");
    let mut b = Batch::new();
    b.add_table(&Table::new(f, t))
        .add_chain(&Chain::new(f, t, "c1"));
    b.add_rule(&Rule::new(
        f,
        t,
        "c1",
        build::all([
            build::limit_packets_per_second(50, 20),
            build::log_to_group("i 10.1.2.3", 7361, 128),
        ]),
    ));
    // `nft -f` of: add table inet t1; add chain inet t1 c1; add rule inet t1 c1 limit rate
    // 50/second burst 20 packets log prefix "i 10.1.2.3" group 7361 snaplen 128
    assert_same(&b, include_str!("testdata/nft_log_limit.hex"));
}
