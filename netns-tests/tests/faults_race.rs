//! Races. Many pods ADDed, CHECKed and DELed at once by concurrent runtimes, and one pod hit by
//! ADD, DEL and CHECK from several runtimes at the same time (which the spec forbids runtimes
//! to do, and which must still not corrupt anything). Afterwards: no address is used twice,
//! every address a pod holds is leased to it, every rule belongs to a live pod, and a final
//! DEL of everything leaves nothing.
//!
//! `FERROCNI_RACE_PODS` (default 16) and `FERROCNI_RACE_ROUNDS` (default 3) widen it; the seed
//! of the same-pod storm is printed and `FERROCNI_RACE_SEED` replays it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::thread;

use netns_tests::chain::{ChainNode, ChainOptions, NETWORK};
use netns_tests::rng::{env_u64, Rng};
use netns_tests::{require_root, Cnitool, Netns};
use serde_json::json;

fn node(tag: &str, subnet: u8) -> ChainNode {
    ChainNode::new(
        tag,
        ChainOptions {
            subnet_v4: format!("10.231.{subnet}.0/24"),
            subnet_v6: Some(format!("fd31:{subnet}::/64")),
            tuning: json!({"type": "tuning", "mtu": 1400}),
            bridge: format!("cni-race{subnet}"),
        },
        None,
    )
}

/// The global addresses on each pod's eth0, by container ID.
fn pod_addresses(pods: &[&(Netns, String)]) -> BTreeMap<String, Vec<IpAddr>> {
    pods.iter()
        .map(|(ns, cid)| {
            let ips = ns
                .addresses("eth0")
                .iter()
                .filter_map(|a| a.split('/').next()?.parse::<IpAddr>().ok())
                .filter(|ip| !matches!(ip, IpAddr::V6(v6) if v6.segments()[0] == 0xfe80))
                .collect();
            (cid.clone(), ips)
        })
        .collect()
}

/// No address on two pods; each address a pod holds is leased to that pod; every rule naming
/// a pod subnet address names one a pod holds.
fn assert_consistent(node: &ChainNode, pods: &[&(Netns, String)], subnet: u8, what: &str) {
    let held = pod_addresses(pods);
    let inv = node.inventory();
    let mut owner_of: BTreeMap<IpAddr, &String> = BTreeMap::new();
    for (cid, ips) in &held {
        assert!(ips.len() <= 2, "{what}: {cid} holds {ips:?}");
        for ip in ips {
            if let Some(other) = owner_of.insert(*ip, cid) {
                panic!("{what}: {ip} is on {other} and on {cid}");
            }
            assert_eq!(
                inv.leases.get(ip),
                Some(cid),
                "{what}: {ip} is on {cid}'s interface but leased to {:?}",
                inv.leases.get(ip)
            );
        }
    }
    let prefix4 = format!("10.231.{subnet}.");
    for rule in &inv.rules {
        for token in rule.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
            if token.starts_with(&prefix4) && !token.ends_with(".0") && !token.ends_with(".1") {
                let ip: IpAddr = match token.parse() {
                    Ok(ip) => ip,
                    Err(_) => continue,
                };
                assert!(
                    owner_of.contains_key(&ip),
                    "{what}: rule of an address no pod holds: {rule}"
                );
            }
        }
    }
}

fn run(tool: &Cnitool, verb: &str, pod: &Netns) -> bool {
    tool.run(&[verb, NETWORK, pod.path_str()]).status.success()
}

#[test]
fn many_pods_at_once() {
    require_root!();
    const SUBNET: u8 = 60;
    let pods_n = env_u64("FERROCNI_RACE_PODS").unwrap_or(16) as usize;
    let rounds = env_u64("FERROCNI_RACE_ROUNDS").unwrap_or(3);
    let node = Arc::new(node("race", SUBNET));
    let pods: Arc<Vec<(Netns, String)>> = Arc::new(
        (0..pods_n)
            .map(|_| {
                let ns = Netns::new("race-pod");
                let cid = Cnitool::container_id(ns.path_str());
                (ns, cid)
            })
            .collect(),
    );
    // Every pod has its own runtime thread: ADD, CHECK, DEL, ..., ending with ADD.
    let workers: Vec<_> = (0..pods_n)
        .map(|i| {
            let (node, pods) = (Arc::clone(&node), Arc::clone(&pods));
            thread::spawn(move || {
                let (ns, cid) = &pods[i];
                let tool = node.cnitool(cid, 20000 + i as u16);
                for round in 0..rounds {
                    assert!(run(&tool, "add", ns), "pod {i} round {round}: ADD failed");
                    assert!(
                        run(&tool, "check", ns),
                        "pod {i} round {round}: CHECK failed"
                    );
                    if round + 1 < rounds {
                        assert!(run(&tool, "del", ns), "pod {i} round {round}: DEL failed");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a runtime thread failed");
    }
    let all: Vec<&(Netns, String)> = pods.iter().collect();
    assert_consistent(&node, &all, SUBNET, "all pods up");
    let inv = node.inventory();
    assert_eq!(inv.leases.len(), 2 * pods_n, "one lease per family and pod");
    assert_eq!(
        inv.links.iter().filter(|l| l.starts_with("veth")).count(),
        pods_n
    );
    // Pods reach each other.
    let held = pod_addresses(&all);
    for (i, (ns, _)) in pods.iter().enumerate().take(3) {
        let (_, peer) = &pods[(i + 1) % pods_n];
        for ip in &held[peer] {
            let out = ns.exec(&["ping", "-c", "1", "-W", "2", &ip.to_string()]);
            assert!(out.status.success(), "pod {i} cannot reach {ip}");
        }
    }
    // Everyone leaves at once.
    let workers: Vec<_> = (0..pods_n)
        .map(|i| {
            let (node, pods) = (Arc::clone(&node), Arc::clone(&pods));
            thread::spawn(move || {
                let (ns, cid) = &pods[i];
                assert!(run(&node.cnitool(cid, 20000 + i as u16), "del", ns));
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a DEL thread failed");
    }
    let end = node.inventory();
    assert!(end.leases.is_empty(), "{:?}", end.leases);
    assert!(end.links.is_empty(), "{:?}", end.links);
    assert!(end.state_files.is_empty(), "{:?}", end.state_files);
    assert!(end.cache_files.is_empty(), "{:?}", end.cache_files);
    for (_, cid) in pods.iter() {
        assert!(
            end.traces_of(cid, &[]).is_empty(),
            "{:?}",
            end.traces_of(cid, &[])
        );
    }
}

#[test]
fn one_pod_from_concurrent_runtimes() {
    require_root!();
    const SUBNET: u8 = 61;
    let seed = env_u64("FERROCNI_RACE_SEED").unwrap_or(0x7ace_0001);
    eprintln!("faults_race: storm seed {seed:#x} (FERROCNI_RACE_SEED)");
    let node = Arc::new(node("storm", SUBNET));
    let storm = Arc::new({
        let ns = Netns::new("storm-pod");
        let cid = Cnitool::container_id(ns.path_str());
        (ns, cid)
    });
    let bystanders: Vec<(Netns, String)> = (0..2)
        .map(|_| {
            let ns = Netns::new("storm-by");
            let cid = Cnitool::container_id(ns.path_str());
            (ns, cid)
        })
        .collect();
    for (i, (ns, cid)) in bystanders.iter().enumerate() {
        assert!(run(&node.cnitool(cid, 21000 + i as u16), "add", ns));
    }
    for burst in 0..6u64 {
        let clients: Vec<_> = (0..4u64)
            .map(|c| {
                let (node, storm) = (Arc::clone(&node), Arc::clone(&storm));
                thread::spawn(move || {
                    let mut rng = Rng::new(seed ^ (burst << 8) ^ c);
                    let tool = node.cnitool(&storm.1, 21100);
                    for _ in 0..4 {
                        let verb = *rng.pick(&["add", "add", "del", "check"]);
                        let _ = run(&tool, verb, &storm.0);
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().expect("a storm client panicked");
        }
        let all: Vec<&(Netns, String)> =
            bystanders.iter().chain(std::iter::once(&*storm)).collect();
        assert_consistent(&node, &all, SUBNET, &format!("after storm burst {burst}"));
        // The bystanders are untouched.
        for (i, (ns, cid)) in bystanders.iter().enumerate() {
            assert!(
                run(&node.cnitool(cid, 21000 + i as u16), "check", ns),
                "burst {burst}: bystander {i} broken"
            );
        }
    }
    // A final DEL of the stormed pod must succeed and leave nothing of it.
    assert!(run(&node.cnitool(&storm.1, 21100), "del", &storm.0));
    let ips: Vec<IpAddr> = Vec::new();
    let traces = node.inventory().traces_of(&storm.1, &ips);
    assert!(traces.is_empty(), "left behind: {traces:#?}");
    for (i, (ns, cid)) in bystanders.iter().enumerate() {
        assert!(run(&node.cnitool(cid, 21000 + i as u16), "del", ns));
    }
    let end = node.inventory();
    assert!(end.leases.is_empty() && end.links.is_empty() && end.state_files.is_empty());
}
