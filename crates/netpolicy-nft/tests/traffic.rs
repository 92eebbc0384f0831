//! Real traffic through a node whose forward hook holds the policy table: pods behind a
//! router (routed path) and on a bridge (bridged path, through br_netfilter). Root only; run
//! with `--test-threads=1`.

mod common;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use netkit::netfilter::nflog::{LoggedPacket, Receiver};
use netpolicy::{Cluster, Protocol};
use netpolicy_nft::{PolicyTable, LOG_GROUP, LOG_SNAPLEN, TABLE};

fn list_table(node: &Ns) -> String {
    node.exec(&["nft", "list", "table", "inet", TABLE])
}

/// What the node's NFLOG listener received within `wait`, until `done` says it has enough.
fn logged(
    receiver: &mut Receiver,
    wait: std::time::Duration,
    done: impl Fn(&[LoggedPacket]) -> bool,
) -> Vec<LoggedPacket> {
    let start = std::time::Instant::now();
    let mut got = Vec::new();
    while !done(&got) && start.elapsed() < wait {
        receiver.wait(std::time::Duration::from_millis(100));
        match receiver.receive(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("NFLOG receive: {e}"),
        }
    }
    got
}

fn ips(p: &(Ns, IpAddr, IpAddr)) -> [IpAddr; 2] {
    [p.1, p.2]
}

/// Routed path: ingress by pod selector with a port and a UDP port range, replies, IPv6,
/// then incremental syncs: a label change (elements only), a port added (one chain
/// rewritten), a pod gone (its chain and map element removed).
#[test]
fn routed_ingress_policy_and_incremental_changes() {
    require_root!();
    let n = Node::routed(3);
    let (a, b, c) = (&n.pods[0], &n.pods[1], &n.pods[2]);
    let _servers: Vec<Servers> = n
        .pods
        .iter()
        .map(|p| Servers::start(&p.0, &[80, 81], &[53, 54, 60]))
        .collect();
    let mut cluster = Cluster {
        namespaces: vec![namespace("prod")],
        pods: vec![
            pod("prod", "a", "client", &ips(a)),
            pod("prod", "b", "web", &ips(b)),
            pod("prod", "c", "other", &ips(c)),
        ],
        policies: vec![policy(
            "prod",
            "web",
            "web",
            vec![rule(
                vec![from_app("client")],
                vec![port("TCP", 80, None), port("UDP", 53, Some(54))],
            )],
            vec![],
        )],
    };
    let mut sock = n.node.socket();
    let mut receiver = Receiver::open_in(&n.node.netns(), LOG_GROUP, LOG_SNAPLEN).unwrap();
    let mut table = PolicyTable::new();
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert!(stats.full);
    assert_eq!(stats.chains_written, 2, "{stats:?}");
    let listing = list_table(&n.node);
    assert_listing_has(
        &listing,
        &[
            "ip saddr vmap @egress4",
            "ip6 daddr vmap @ingress6",
            "ct state established,related accept",
            "10.77.2.2 : jump ingress-10.77.2.2",
            "chain ingress-fd77:2::2",
            "tcp dport 80 return",
            "udp dport 53-54 return",
            "counter packets 0 bytes 0 drop comment \"prod/web\"",
            "limit rate 50/second burst 20 packets log prefix \"i 10.77.2.2\" group 7361 snaplen 128",
            "log prefix \"i fd77:2::2\" group 7361",
        ],
    );

    for fam in [1, 2] {
        let to = |p: &(Ns, IpAddr, IpAddr)| if fam == 1 { p.1 } else { p.2 };
        assert!(tcp_ok(&a.0, to(b), 80), "client -> web:80 (family {fam})");
        assert!(!tcp_ok(&a.0, to(b), 81), "client -> web:81 (family {fam})");
        assert!(
            udp_ok(&a.0, to(b), 53),
            "client -> web:53/udp (family {fam})"
        );
        assert!(
            udp_ok(&a.0, to(b), 54),
            "client -> web:54/udp (family {fam})"
        );
        assert!(
            !udp_ok(&a.0, to(b), 60),
            "client -> web:60/udp (family {fam})"
        );
        assert!(!tcp_ok(&c.0, to(b), 80), "other -> web:80 (family {fam})");
        // Not isolated: anything goes, and web's replies and own connections pass.
        assert!(tcp_ok(&c.0, to(a), 81), "other -> client (family {fam})");
        assert!(tcp_ok(&b.0, to(c), 81), "web -> other (family {fam})");
    }
    let listing = list_table(&n.node);
    assert!(
        !listing.contains("counter packets 0 bytes 0 drop"),
        "the drop counted nothing:\n{listing}"
    );
    // The denied connections were logged, with the chain's prefix and the flow.
    let denied_to = |p: &LoggedPacket, target: IpAddr, from: IpAddr, port: u16| {
        p.prefix == format!("i {target}")
            && p.flow
                .is_some_and(|f| f.src == from && f.dst_port() == Some(port))
    };
    let got = logged(&mut receiver, std::time::Duration::from_secs(5), |got| {
        got.iter().any(|p| denied_to(p, b.1, a.1, 81))
            && got.iter().any(|p| denied_to(p, b.2, c.2, 80))
    });
    assert!(
        got.iter().any(|p| denied_to(p, b.1, a.1, 81)),
        "client -> web:81 not logged: {got:?}"
    );
    assert!(
        got.iter().any(|p| denied_to(p, b.2, c.2, 80)),
        "other -> web:80 (IPv6) not logged: {got:?}"
    );
    assert!(got.iter().all(|p| p.group == LOG_GROUP));
    assert!(
        !got.iter().any(|p| denied_to(p, b.1, a.1, 80)),
        "an allowed flow was logged: {got:?}"
    );
    eprintln!("{} denied packets logged", got.len());

    // c becomes a client: its address joins the set, no rule changes.
    cluster.pods[2].labels = labels(&[("app", "client")]);
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert!(!stats.full);
    assert_eq!(stats.chains_written, 0, "{stats:?}");
    assert_eq!((stats.elements_added, stats.elements_removed), (2, 0));
    assert!(tcp_ok(&c.0, b.1, 80));
    assert!(tcp_ok(&c.0, b.2, 80));

    // Port 81 allowed too: web's two chains rewritten.
    cluster.policies[0].ingress[0]
        .ports
        .push(port("TCP", 81, None));
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert!(!stats.full);
    assert_eq!(stats.chains_written, 2, "{stats:?}");
    assert!(tcp_ok(&a.0, b.1, 81));
    assert!(tcp_ok(&a.0, b.2, 81));

    // Nothing changed: nothing sent.
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert_eq!(stats.messages, 0);

    // web goes away: its chains and map elements with it.
    cluster.pods.remove(1);
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert!(!stats.full);
    assert_eq!(stats.elements_removed, 2, "{stats:?}");
    let listing = list_table(&n.node);
    assert!(!listing.contains("10.77.2.2"), "{listing}");
    assert!(!listing.contains("fd77:2::2"), "{listing}");
    assert!(tcp_ok(&a.0, b.1, 81), "no policy left for that address");

    // The policy goes: its sets with it.
    cluster.policies.clear();
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert!(!stats.full && stats.messages > 0, "{stats:?}");
    let listing = list_table(&n.node);
    assert!(!listing.contains("prod.web"), "{listing}");
    assert!(listing.contains("map ingress4"), "{listing}");

    PolicyTable::remove(&mut sock).unwrap();
    PolicyTable::remove(&mut sock).unwrap();
    assert!(!sock
        .table_exists(netkit::netfilter::nf_tables::Family::Inet, TABLE)
        .unwrap());
}

/// Bridged path: egress by named port (an address . protocol . port set), ingress from an
/// ipBlock with an except, IPv4 and IPv6.
#[test]
fn bridged_named_ports_and_ip_blocks() {
    require_root!();
    let n = Node::bridged(3);
    let (a, b, c) = (&n.pods[0], &n.pods[1], &n.pods[2]);
    let _servers: Vec<Servers> = n
        .pods
        .iter()
        .map(|p| Servers::start(&p.0, &[8080, 9090], &[5353]))
        .collect();
    let mut web_b = pod("prod", "b", "web", &ips(b));
    web_b.ports = vec![named_port("http", Protocol::Tcp, 8080)];
    let mut web_c = pod("prod", "c", "web", &ips(c));
    web_c.ports = vec![
        named_port("http", Protocol::Tcp, 9090),
        named_port("dns", Protocol::Udp, 5353),
    ];
    let mut cluster = Cluster {
        namespaces: vec![namespace("prod")],
        pods: vec![pod("prod", "a", "client", &ips(a)), web_b, web_c],
        policies: vec![
            egress_policy(
                "prod",
                "client-out",
                "client",
                vec![rule(
                    vec![from_app("web")],
                    vec![named("TCP", "http"), named("UDP", "dns")],
                )],
            ),
            policy(
                "prod",
                "web-in",
                "web",
                vec![rule(
                    vec![
                        block("10.78.0.0/24", &["10.78.0.3/32"]),
                        block("fd78::/64", &["fd78::3/128"]),
                    ],
                    vec![],
                )],
                vec![],
            ),
        ],
    };
    let mut sock = n.node.socket();
    let mut table = PolicyTable::new();
    table.sync(&mut sock, &compile(&cluster)).unwrap();
    let listing = list_table(&n.node);
    assert_listing_has(
        &listing,
        &[
            "type ipv4_addr . inet_proto . inet_service",
            "type ipv6_addr . inet_proto . inet_service",
            "flags interval",
            "10.78.0.3 . tcp . 8080",
            "ip daddr . meta l4proto . th dport @",
        ],
    );
    for fam in [1, 2] {
        let to = |p: &(Ns, IpAddr, IpAddr)| if fam == 1 { p.1 } else { p.2 };
        assert!(tcp_ok(&a.0, to(b), 8080), "client -> b:http (family {fam})");
        assert!(
            !tcp_ok(&a.0, to(b), 9090),
            "client -> b:9090 (family {fam})"
        );
        assert!(tcp_ok(&a.0, to(c), 9090), "client -> c:http (family {fam})");
        assert!(
            !tcp_ok(&a.0, to(c), 8080),
            "client -> c:8080 (family {fam})"
        );
        assert!(udp_ok(&a.0, to(c), 5353), "client -> c:dns (family {fam})");
        // web-in: the block minus b.
        assert!(
            !tcp_ok(&b.0, to(c), 9090),
            "b (excepted) -> c (family {fam})"
        );
        assert!(tcp_ok(&c.0, to(b), 9090), "c -> b (family {fam})");
    }

    // c's http port moves: elements only.
    cluster.pods[2].ports[0].port = 8080;
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert!(!stats.full && stats.chains_written == 0, "{stats:?}");
    assert!(tcp_ok(&a.0, c.1, 8080));
    assert!(!tcp_ok(&a.0, c.1, 9090));

    // The except goes: the interval set is rewritten, b reaches c.
    cluster.policies[1].ingress[0].peers[0] = block("10.78.0.0/24", &[]);
    let stats = table.sync(&mut sock, &compile(&cluster)).unwrap();
    assert!(!stats.full && stats.chains_written == 0, "{stats:?}");
    assert!(tcp_ok(&b.0, c.1, 9090));
    assert!(!tcp_ok(&b.0, c.2, 9090), "the IPv6 except stays");
    PolicyTable::remove(&mut sock).unwrap();
}

/// A new PolicyTable (an agent restart) rewrites the whole table over the existing one in one
/// transaction: a prober hammering a denied port never gets through, an allowed one always does.
#[test]
fn full_rewrite_over_an_existing_table_opens_no_window() {
    require_root!();
    let n = Node::routed(2);
    let (a, b) = (&n.pods[0], &n.pods[1]);
    let _servers = Servers::start(&b.0, &[80, 81], &[]);
    let cluster = Cluster {
        namespaces: vec![namespace("prod")],
        pods: vec![
            pod("prod", "a", "client", &ips(a)),
            pod("prod", "b", "web", &ips(b)),
        ],
        policies: vec![policy(
            "prod",
            "web",
            "web",
            vec![rule(vec![from_app("client")], vec![port("TCP", 80, None)])],
            vec![],
        )],
    };
    let plan = compile(&cluster);
    let mut sock = n.node.socket();
    PolicyTable::new().sync(&mut sock, &plan).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let (leaks, probes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let to = b.1;
    let prober = {
        let (stop, leaks, probes) = (stop.clone(), leaks.clone(), probes.clone());
        a.0.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // A short timeout: a dropped SYN is a failure quickly, a window would answer.
                let addr = std::net::SocketAddr::new(to, 81);
                if std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(20))
                    .is_ok()
                {
                    leaks.fetch_add(1, Ordering::Relaxed);
                }
                probes.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    for _ in 0..30 {
        let stats = PolicyTable::new().sync(&mut sock, &plan).unwrap();
        assert!(stats.full);
    }
    stop.store(true, Ordering::Relaxed);
    prober.join().unwrap();
    assert!(probes.load(Ordering::Relaxed) > 0);
    assert_eq!(
        leaks.load(Ordering::Relaxed),
        0,
        "denied connections got through"
    );
    assert!(tcp_ok(&a.0, b.1, 80));
    assert!(!tcp_ok(&a.0, b.1, 81));
}
