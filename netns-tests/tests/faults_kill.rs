//! Kills at random points. One plugin process of the chain (any of them, host-local
//! included), picked at random, is SIGKILLed at a random moment of its ADD, DEL or CHECK — or
//! the runtime itself (cnitool) is killed mid-ADD. Then the runtime does what it must: DEL
//! (which must succeed) and GC with the surviving pods as the valid attachments. After each
//! round nothing of the dead pod may remain (lease, veth, ifb, rule, set element, firewall
//! record, tuning backup, cache entry), no address may be handed out twice, and at the end the
//! survivors are intact: they ping each other over both families and CHECK passes.
//!
//! Reproducible: the seed is printed; `FERROCNI_FAULT_SEED` replays a run and
//! `FERROCNI_FAULT_ROUNDS` (default 120) widens it. Plugins are killed through
//! `fault-shim` (netns-tests/src/bin/fault-shim.rs), which stands in for every plugin binary.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns_tests::chain::{ChainNode, ChainOptions, Inventory, CHAIN_PLUGINS, NETWORK};
use netns_tests::rng::{env_u64, Rng};
use netns_tests::{our_bin_dir, our_binary, require_root, Cnitool, Netns, TempDir};
use serde_json::json;

const DEFAULT_SEED: u64 = 0xfa17_5eed_0000_0001;
const DEFAULT_ROUNDS: u64 = 120;
/// Kill delays, log-uniform: from "right after exec" to longer than any of our plugins runs.
const DELAY_US: (u64, u64) = (20, 40_000);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// A plugin killed during ADD.
    Add(&'static str),
    /// A plugin killed during DEL (the runtime retries DEL).
    Del(&'static str),
    /// A plugin killed during CHECK (nothing may change; CHECK passes afterwards).
    Check(&'static str),
    /// The runtime killed mid-ADD (its plugins may run on, orphaned).
    Client,
}

struct Harness {
    node: ChainNode,
    _shims: TempDir,
    work: TempDir,
    tag: String,
}

impl Harness {
    fn new() -> Harness {
        let shims = TempDir::new("fault-shims");
        let shim = Path::new(env!("CARGO_BIN_EXE_fault-shim"));
        for p in CHAIN_PLUGINS {
            our_binary(p);
            std::os::unix::fs::symlink(shim, shims.join(p)).expect("shim symlink");
        }
        let work = TempDir::new("fault-work");
        let mut node = ChainNode::new(
            "fault",
            ChainOptions {
                subnet_v4: "10.231.50.0/24".into(),
                subnet_v6: Some("fd31:50::/64".into()),
                tuning: json!({"type": "tuning", "mtu": 1400,
                               "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}}),
                bridge: "cni-fault0".into(),
            },
            Some(vec![shims.path().to_path_buf()]),
        );
        let tag = format!("fault-{}", std::process::id());
        node.env = vec![
            (
                "FERROCNI_FAULT_REAL_DIR".into(),
                our_bin_dir().display().to_string(),
            ),
            (
                "FERROCNI_FAULT_PLAN".into(),
                work.join("plan").display().to_string(),
            ),
            (
                "FERROCNI_FAULT_LOG".into(),
                work.join("log").display().to_string(),
            ),
            ("FERROCNI_FAULT_TAG".into(), tag.clone()),
        ];
        Harness {
            node,
            _shims: shims,
            work,
            tag,
        }
    }

    fn plan(&self, plugin: &str, command: &str, delay_us: u64) {
        std::fs::write(
            self.work.join("plan"),
            format!("{plugin} {command} {delay_us}"),
        )
        .expect("write plan");
    }

    /// Drops a plan no plugin took (the named plugin never ran that verb).
    fn unplan(&self) {
        let _ = std::fs::remove_file(self.work.join("plan"));
    }

    /// Outcomes logged by the shims since the last call: (hits, misses).
    fn outcomes(&self) -> (u64, u64) {
        let log = self.work.join("log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let hits = text.lines().filter(|l| l.starts_with("hit ")).count() as u64;
        let misses = text.lines().filter(|l| l.starts_with("miss ")).count() as u64;
        (hits, misses)
    }

    /// Starts cnitool's ADD for `cid` in `netns` as the runtime would and kills it (SIGKILL)
    /// after `delay` µs, then waits for its orphans; whether it was still running then.
    fn kill_the_runtime(&self, cid: &str, netns: &str, port: u16, delay: u64) -> bool {
        let node = &self.node;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", node.host.name()])
            .arg(our_binary("cnitool"))
            .args(["add", NETWORK, netns])
            .env("NETCONFPATH", node.conf.path())
            .env("CNI_PATH", &node.cni_path[0])
            .env("CNI_CACHE_DIR", node.cache.path())
            .env(
                "CAP_ARGS",
                netns_tests::chain::containerd_cap_args(port).to_string(),
            )
            .env("CNI_ARGS", netns_tests::chain::containerd_cni_args(cid))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in &node.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn cnitool");
        std::thread::sleep(Duration::from_micros(delay));
        let hit = matches!(child.try_wait(), Ok(None));
        // `ip netns exec` execs cnitool, so this is the runtime itself.
        let _ = child.kill();
        let _ = child.wait();
        self.wait_for_orphans();
        hit
    }

    /// Waits until no process of this test's chain runs any more (orphans of a killed
    /// runtime finish on their own).
    fn wait_for_orphans(&self) {
        let marker = format!("FERROCNI_FAULT_TAG={}", self.tag);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let running = std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .any(|e| {
                    std::fs::read(e.path().join("environ"))
                        .map(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
                        .unwrap_or(false)
                });
            if !running {
                return;
            }
            assert!(Instant::now() < deadline, "orphaned plugins still running");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// No pod holds more than one address per family, and the faulted pod's interface holds no
/// address of a survivor.
fn assert_unique_addresses(node: &ChainNode, pod: &Netns, survivors: &[IpAddr], what: &str) {
    let inv = node.inventory();
    let owners: BTreeSet<&String> = inv.leases.values().collect();
    for owner in owners {
        let mine = inv.addresses_of(owner);
        assert!(mine.len() <= 2, "{what}: {owner} holds {mine:?}");
    }
    for addr in pod.addresses("eth0") {
        let ip = addr.split('/').next().unwrap_or("");
        assert!(
            !survivors.iter().any(|s| s.to_string() == ip),
            "{what}: the pod got a survivor's address {ip}"
        );
    }
}

/// What a runtime does after a fault: DEL (must succeed), then GC with the survivors as
/// valid; nothing of the pod is left and everything else is as in `baseline`.
fn del_and_gc_leave_nothing(
    h: &Harness,
    tool: &Cnitool,
    pod: &Netns,
    survivor_ids: &[String],
    baseline: &Inventory,
    what: &str,
) {
    let cid = Cnitool::container_id(pod.path_str());
    let ips: Vec<IpAddr> = h.node.inventory().addresses_of(&cid);
    let out = tool.run(&["del", NETWORK, pod.path_str()]);
    assert!(
        out.status.success(),
        "{what}: DEL failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    h.node
        .gc(survivor_ids)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let inv = h.node.inventory();
    let traces = inv.traces_of(&cid, &ips);
    assert!(traces.is_empty(), "{what}: left behind: {traces:#?}");
    assert_eq!(inv.links, baseline.links, "{what}: host links");
    assert_eq!(inv.leases, baseline.leases, "{what}: leases");
    assert_eq!(
        inv.state_files, baseline.state_files,
        "{what}: records/backups"
    );
    assert_eq!(inv.cache_files, baseline.cache_files, "{what}: cache");
    assert!(
        pod.exec_ok(&["ip", "-o", "link", "show"]).lines().count() == 1,
        "{what}: the pod still has interfaces besides lo"
    );
}

#[test]
fn kills_at_random_points_leak_nothing() {
    require_root!();
    let seed = env_u64("FERROCNI_FAULT_SEED").unwrap_or(DEFAULT_SEED);
    let rounds = env_u64("FERROCNI_FAULT_ROUNDS").unwrap_or(DEFAULT_ROUNDS);
    eprintln!("faults_kill: seed {seed:#x}, {rounds} rounds (FERROCNI_FAULT_SEED / FERROCNI_FAULT_ROUNDS)");
    let mut rng = Rng::new(seed);
    let h = Harness::new();

    // Two pods that live through every round.
    let survivors: Vec<Netns> = (0..2).map(|i| Netns::new(&format!("fault-s{i}"))).collect();
    let survivor_ids: Vec<String> = survivors
        .iter()
        .map(|p| Cnitool::container_id(p.path_str()))
        .collect();
    for (i, pod) in survivors.iter().enumerate() {
        h.node.cnitool(&survivor_ids[i], 18000 + i as u16).run_ok(&[
            "add",
            NETWORK,
            pod.path_str(),
        ]);
    }
    let baseline = h.node.inventory();
    let survivor_addrs: Vec<IpAddr> = baseline.leases.keys().copied().collect();
    let (mut injected, mut hits) = (0u64, 0u64);

    for round in 0..rounds {
        let plugin = *rng.pick(CHAIN_PLUGINS);
        let fault = match rng.below(10) {
            0..=4 => Fault::Add(plugin),
            5..=6 => Fault::Del(plugin),
            7 => Fault::Check(plugin),
            _ => Fault::Client,
        };
        let delay = rng.log_uniform(DELAY_US.0, DELAY_US.1);
        let what = format!("round {round} (seed {seed:#x}): {fault:?} after {delay} µs");
        let pod = Netns::new("fault-pod");
        let cid = Cnitool::container_id(pod.path_str());
        let port = 19000 + (round % 1000) as u16;
        let tool = h.node.cnitool(&cid, port);
        injected += 1;
        match fault {
            Fault::Add(p) => {
                h.plan(p, "ADD", delay);
                let _ = tool.run(&["add", NETWORK, pod.path_str()]);
            }
            Fault::Client => {
                if h.kill_the_runtime(&cid, pod.path_str(), port, delay) {
                    hits += 1;
                }
            }
            Fault::Del(p) => {
                tool.run_ok(&["add", NETWORK, pod.path_str()]);
                h.plan(p, "DEL", delay);
                let _ = tool.run(&["del", NETWORK, pod.path_str()]);
            }
            Fault::Check(p) => {
                tool.run_ok(&["add", NETWORK, pod.path_str()]);
                h.plan(p, "CHECK", delay);
                let _ = tool.run(&["check", NETWORK, pod.path_str()]);
                h.unplan();
                let out = tool.run(&["check", NETWORK, pod.path_str()]);
                assert!(
                    out.status.success(),
                    "{what}: CHECK fails after a killed CHECK: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        h.unplan();
        let (hit, _) = h.outcomes();
        hits += hit;
        assert_unique_addresses(&h.node, &pod, &survivor_addrs, &what);

        del_and_gc_leave_nothing(&h, &tool, &pod, &survivor_ids, &baseline, &what);
    }

    // The survivors are intact.
    let addrs: Vec<Vec<IpAddr>> = survivor_ids
        .iter()
        .map(|cid| h.node.inventory().addresses_of(cid))
        .collect();
    for (i, pod) in survivors.iter().enumerate() {
        h.node.cnitool(&survivor_ids[i], 18000 + i as u16).run_ok(&[
            "check",
            NETWORK,
            pod.path_str(),
        ]);
        for ip in &addrs[1 - i] {
            let out = pod.exec(&["ping", "-c", "1", "-W", "2", &ip.to_string()]);
            assert!(out.status.success(), "survivor {i} cannot reach {ip}");
        }
    }
    for (i, pod) in survivors.iter().enumerate() {
        h.node.cnitool(&survivor_ids[i], 18000 + i as u16).run_ok(&[
            "del",
            NETWORK,
            pod.path_str(),
        ]);
    }
    let end = h.node.inventory();
    assert!(end.leases.is_empty() && end.links.is_empty() && end.state_files.is_empty());
    eprintln!(
        "faults_kill: {injected} faults injected, {hits} hit a live process, 0 leaks (seed {seed:#x})"
    );
}
