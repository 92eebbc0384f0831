//! Kills during vxlan's reconcile pass. Each round changes the peer list at random (peers
//! join, leave, move to another address), starts a pass and SIGKILLs it at a random moment;
//! the next pass must converge: the node's overlay (device, neighbours, FDB entries, routes)
//! is then exactly what a fresh node that only ever saw the final list holds.
//!
//! Reproducible: `FERROCNI_FAULT_SEED` and `FERROCNI_FAULT_ROUNDS` (default 60).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use netns_tests::rng::{env_u64, Rng};
use netns_tests::{our_binary, require_root, Netns, TempDir};
use serde_json::{json, Value};

const DEFAULT_SEED: u64 = 0x7a1a_0000_0001;
const PEERS: u32 = 200;

/// A node whose eth0 (192.168.88.10/16) is one end of a veth pair.
fn node(tag: &str) -> Netns {
    let ns = Netns::new(tag);
    for args in [
        vec!["link", "set", "lo", "up"],
        vec![
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
        ],
        vec!["link", "set", "eth0p", "up"],
        vec!["link", "set", "eth0", "up"],
        vec!["addr", "add", "192.168.88.10/16", "dev", "eth0"],
    ] {
        let mut argv = vec!["ip"];
        argv.extend(args);
        ns.exec_ok(&argv);
    }
    ns
}

fn config(dir: &TempDir, peers_file: &Path) -> Value {
    json!({
        "cniVersion": "1.1.0", "name": "podnet", "type": "vxlan",
        "network": "10.200.0.0/16", "subnet": "10.200.0.0/24",
        "peersFile": peers_file, "lockFile": dir.join("vxlan.lock"),
        "underlayInterface": "eth0", "localIP": "192.168.88.10"
    })
}

/// The peer list: peer k has subnet 10.200.k.0/24 at an address that `moved` may change.
fn peers(present: &BTreeSet<u32>, moved: &BTreeSet<u32>) -> Value {
    Value::Array(
        present
            .iter()
            .map(|k| {
                let host = if moved.contains(k) { 1000 + k } else { *k };
                json!({"subnet": format!("10.200.{k}.0/24"),
                       "ip": format!("192.168.{}.{}", 89 + host / 250, 1 + host % 250)})
            })
            .collect(),
    )
}

/// The overlay as iproute2 shows it, sorted, without volatile fields.
fn overlay(ns: &Netns) -> Value {
    let sorted = |argv: &[&str], keys: &[&str]| -> Vec<String> {
        let v = ns.exec_json(argv);
        let mut out: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                keys.iter()
                    .map(|k| e[*k].to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        out.sort();
        out
    };
    let link = ns.exec_json(&["ip", "-d", "-j", "link", "show", "dev", "flannel.1"]);
    json!({
        "device": [link[0]["address"].clone(), link[0]["mtu"].clone(),
                   link[0]["linkinfo"]["info_data"].clone()],
        "neigh": sorted(&["ip", "-j", "neigh", "show", "dev", "flannel.1", "nud", "permanent"],
                        &["dst", "lladdr"]),
        "fdb": sorted(&["bridge", "-j", "fdb", "show", "dev", "flannel.1"], &["mac", "dst"]),
        "routes": sorted(&["ip", "-j", "route", "show", "proto", "90"],
                         &["dst", "gateway", "dev", "metric", "flags"]),
    })
}

fn sync(ns: &Netns, conf: &Path) -> std::process::Output {
    let bin = our_binary("vxlan");
    ns.exec(&[bin.to_str().unwrap(), "sync", conf.to_str().unwrap()])
}

#[test]
fn killed_passes_converge() {
    require_root!();
    let seed = env_u64("FERROCNI_FAULT_SEED").unwrap_or(DEFAULT_SEED);
    let rounds = env_u64("FERROCNI_FAULT_ROUNDS").unwrap_or(60);
    eprintln!("faults_vxlan: seed {seed:#x}, {rounds} rounds");
    let mut rng = Rng::new(seed);
    let dir = TempDir::new("vxfault");
    let peers_file = dir.join("peers.json");
    let conf = dir.join("vxlan.json");
    std::fs::write(&conf, config(&dir, &peers_file).to_string()).unwrap();
    let ns = node("vxfault");
    let mut present: BTreeSet<u32> = (1..=PEERS).collect();
    let mut moved: BTreeSet<u32> = BTreeSet::new();
    std::fs::write(&peers_file, peers(&present, &moved).to_string()).unwrap();
    assert!(sync(&ns, &conf).status.success());
    let bin = our_binary("vxlan");
    let mut hits = 0;

    for round in 0..rounds {
        for _ in 0..rng.below(20) + 1 {
            let k = rng.below(PEERS as usize) as u32 + 1;
            match rng.below(3) {
                0 => {
                    present.remove(&k);
                }
                1 => {
                    present.insert(k);
                }
                _ => {
                    if !moved.remove(&k) {
                        moved.insert(k);
                    }
                }
            }
        }
        std::fs::write(&peers_file, peers(&present, &moved).to_string()).unwrap();
        let mut child = ns
            .command(&[bin.to_str().unwrap(), "sync", conf.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn vxlan sync");
        std::thread::sleep(Duration::from_micros(rng.log_uniform(100, 60_000)));
        if matches!(child.try_wait(), Ok(None)) {
            hits += 1;
        }
        // `ip netns exec` execs the plugin: this kills the pass itself.
        let _ = child.kill();
        let _ = child.wait();
        if rng.chance(30) {
            // Sometimes the device itself goes too (a node reboot of the overlay).
            let _ = ns.exec(&["ip", "link", "del", "flannel.1"]);
        }
        let out = sync(&ns, &conf);
        assert!(
            out.status.success(),
            "round {round} (seed {seed:#x}): the pass after a kill failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A node that only ever saw the final list.
    let fresh = node("vxfresh");
    assert!(sync(&fresh, &conf).status.success());
    let (got, want) = (overlay(&ns), overlay(&fresh));
    let entries = want["neigh"].as_array().map_or(0, Vec::len);
    assert_eq!(
        entries,
        present.len(),
        "the fresh node must hold one neighbour per peer"
    );
    assert_eq!(want["fdb"].as_array().map_or(0, Vec::len), entries);
    assert_eq!(want["routes"].as_array().map_or(0, Vec::len), entries);
    assert_eq!(
        got, want,
        "after {rounds} killed passes (seed {seed:#x}) the overlay differs from a fresh node's"
    );
    eprintln!("faults_vxlan: {rounds} passes killed, {hits} while running, converged");
}
