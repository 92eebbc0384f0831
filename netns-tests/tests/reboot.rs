//! Unclean reboots: pods die with the node and no DEL ever comes for them. The reboot is faked
//! in a mount namespace of the test's (a new boot_id and a later btime, bind-mounted over
//! `/proc`; `netns_tests::reboot`), the crash by deleting the pods' netns without DEL, and the
//! kernel's side of the reboot by a new host netns. What the earlier boot left on disk must
//! not hold an address, break a pod of the new boot, or stop a container ID of the earlier
//! boot from being attached again; the reference plugins, beside ours, are shown not to
//! recover.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use netns_tests::chain::{mentions, ChainNode, ChainOptions, NETWORK};
use netns_tests::plugin::{Attachment, Impl};
use netns_tests::reboot::{disk_temp_root, FakeBoot};
use netns_tests::{
    our_bin_dir, our_binary, reference_plugin_dir, require_root, set_temp_root, skip_unless,
    Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};

/// The tests' state lives where files outlive a boot (a tmpfs file is of this boot whatever
/// it records); `None` when this machine has no such place.
fn on_disk() -> Option<PathBuf> {
    let root = disk_temp_root()?;
    set_temp_root(Some(root.clone()));
    Some(root)
}

/// A netns under a name of the test's choosing, so that a container can come back under the
/// same path, hence the same container ID (cnitool derives it from the path). Deleted on drop.
struct NamedNetns {
    name: String,
}

impl NamedNetns {
    fn new(name: &str) -> NamedNetns {
        let out = Command::new("ip")
            .args(["netns", "add", name])
            .output()
            .unwrap();
        assert!(out.status.success(), "ip netns add {name}: {out:?}");
        NamedNetns {
            name: name.to_string(),
        }
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
}

impl Drop for NamedNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn stderr(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---------------------------------------------------------------------------------------
// Twenty crashes of a node whose /28 is full.

/// One suite's node: bridge + host-local on a /28 (13 addresses), through our cnitool.
struct Node {
    name: &'static str,
    cni_path: PathBuf,
    subnet: &'static str,
    leases: TempDir,
    cache: TempDir,
    conf: ConfDir,
    host: Netns,
    pods: Vec<Netns>,
}

impl Node {
    fn new(name: &'static str, cni_path: PathBuf, subnet: &'static str) -> Node {
        let node = Node {
            name,
            cni_path,
            subnet,
            leases: TempDir::new(&format!("rb-{name}-leases")),
            cache: TempDir::new(&format!("rb-{name}-cache")),
            conf: ConfDir::new(),
            host: Netns::new(&format!("rb-{name}-host")),
            pods: Vec::new(),
        };
        node.conf.write_json(
            "10-rb.conflist",
            &json!({"cniVersion": "1.0.0", "name": "rbnet", "plugins": [{
                "type": "bridge", "bridge": "cni-rb0",
                "ipam": {"type": "host-local", "dataDir": node.leases.path(),
                         "ranges": [[{"subnet": subnet}]]}}]}),
        );
        node
    }

    /// ADDs a new pod; its address, or the error when none was given.
    fn add_pod(&mut self, boot: &FakeBoot) -> Result<String, String> {
        let pod = Netns::new(&format!("rb-{}-pod", self.name));
        let out = Cnitool::new(&self.conf, vec![self.cni_path.clone()], self.cache.path())
            .in_netns(&self.host)
            .under(&boot.prefix())
            .run(&["add", "rbnet", pod.path_str()]);
        if !out.status.success() {
            return Err(stderr(&out));
        }
        let result: Value = serde_json::from_slice(&out.stdout).expect("a result");
        self.pods.push(pod);
        Ok(result["ips"][0]["address"]
            .as_str()
            .expect("an address")
            .to_string())
    }

    /// ADDs pods until the range is full: the addresses given, and the refusal that ended it.
    fn fill(&mut self, boot: &FakeBoot) -> (BTreeSet<String>, String) {
        let mut given = BTreeSet::new();
        loop {
            match self.add_pod(boot) {
                Ok(ip) => assert!(given.insert(ip.clone()), "{ip} handed out twice"),
                Err(e) => return (given, e),
            }
            assert!(given.len() <= 13, "more addresses than a /28 holds");
        }
    }

    /// The node goes down without a DEL: its pods' netns and its host netns are gone.
    fn crash(&mut self) {
        self.pods.clear();
        self.host = Netns::new(&format!("rb-{}-host", self.name));
    }

    fn lease_count(&self) -> usize {
        netns_tests::lease_files(&self.leases.join("rbnet")).len()
    }
}

#[test]
fn a_full_range_is_free_again_after_every_crash_and_reboot() {
    require_root!();
    skip_unless!(
        on_disk(),
        "no filesystem that outlives a boot for the state"
    );
    let reference = skip_unless!(
        reference_plugin_dir(&["bridge", "host-local"]),
        "reference plugins not installed"
    );
    let cycles: usize = std::env::var("FERROCNI_REBOOT_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    our_binary("bridge");
    our_binary("host-local");
    let mut boot = FakeBoot::new();
    let mut ours = Node::new("ours", our_bin_dir(), "10.233.1.0/28");
    let mut theirs = Node::new("ref", reference, "10.233.2.0/28");
    let full = |subnet: &str| -> BTreeSet<String> {
        let base = subnet.rsplit_once(".0/").unwrap().0;
        (2..=14).map(|i| format!("{base}.{i}/28")).collect()
    };

    for node in [&mut ours, &mut theirs] {
        let (given, refusal) = node.fill(&boot);
        assert_eq!(given, full(node.subnet), "{}", node.name);
        assert!(refusal.contains("no IP addresses available in range set"));
    }
    for cycle in 1..=cycles {
        ours.crash();
        theirs.crash();
        boot.reboot();
        let (given, refusal) = ours.fill(&boot);
        assert_eq!(
            given,
            full(ours.subnet),
            "boot {cycle}: not every address came back ({refusal})"
        );
        assert!(refusal.contains("no IP addresses available in range set"));
        assert_eq!(ours.lease_count(), 13);
        // The reference keeps every lease of the dead pods: not one address comes back.
        let refused = theirs
            .add_pod(&boot)
            .expect_err("the reference recovered an address");
        assert!(
            refused.contains("failed to allocate for range 0: no IP addresses available"),
            "{refused}"
        );
        assert_eq!(theirs.lease_count(), 13);
        if cycle == 1 || cycle == cycles {
            eprintln!(
                "after reboot {cycle}: ours gave 13 addresses again; the reference: {refused}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// host-local alone: ours and the reference on one store, and the opt-out.

/// Runs a host-local binary as a main plugin runs it, inside the faked boot.
fn ipam(boot: &FakeBoot, binary: &Path, verb: &str, cid: &str, conf: &Value) -> Output {
    let imp = Impl {
        label: "host-local",
        bin: binary.to_path_buf(),
        cni_path: binary.parent().unwrap().display().to_string(),
    };
    Attachment::at(&imp, cid, "/run/netns/none")
        .under(&boot.prefix())
        .call(verb, conf)
}

fn ipam_add(boot: &FakeBoot, binary: &Path, cid: &str, conf: &Value) -> Result<String, String> {
    let out = ipam(boot, binary, "ADD", cid, conf);
    if !out.status.success() {
        return Err(stderr(&out));
    }
    let result: Value = serde_json::from_slice(&out.stdout).expect("a result");
    Ok(result["ips"][0]["address"].as_str().unwrap().to_string())
}

/// The store's leases: address → content.
fn leases(store: &Path) -> std::collections::BTreeMap<String, String> {
    netns_tests::lease_files(store)
        .into_iter()
        .map(|ip| {
            let content = std::fs::read_to_string(store.join(&ip)).unwrap_or_default();
            (ip, content)
        })
        .collect()
}

fn ipam_conf(dir: &TempDir, subnet: &str, extra: Value) -> Value {
    let mut ipam =
        json!({"type": "host-local", "dataDir": dir.path(), "ranges": [[{"subnet": subnet}]]});
    for (k, v) in extra.as_object().unwrap() {
        ipam[k] = v.clone();
    }
    json!({"cniVersion": "1.0.0", "name": "mixed", "ipam": ipam})
}

#[test]
fn ours_after_the_reference_in_one_boot_loses_no_live_lease() {
    require_root!();
    skip_unless!(
        on_disk(),
        "no filesystem that outlives a boot for the state"
    );
    let reference = skip_unless!(
        reference_plugin_dir(&["host-local"]),
        "reference plugins not installed"
    )
    .join("host-local");
    let ours = our_binary("host-local");
    let mut boot = FakeBoot::new();
    let dir = TempDir::new("rb-mixed");
    let conf = ipam_conf(&dir, "10.233.3.0/28", json!({}));
    let store = dir.join("mixed");

    // This boot: the reference first, then ours (whose first call looks for earlier boots).
    for i in 0..5 {
        ipam_add(&boot, &reference, &format!("ref-{i}"), &conf).unwrap();
    }
    let theirs = leases(&store);
    for i in 0..5 {
        ipam_add(&boot, &ours, &format!("ours-{i}"), &conf).unwrap();
    }
    let now = leases(&store);
    assert_eq!(now.len(), 10);
    assert!(
        theirs.iter().all(|(ip, c)| now.get(ip) == Some(c)),
        "a live lease of the reference was lost: {theirs:?} -> {now:?}"
    );

    // The node crashes and reboots; the reference runs first again (3 pods), then ours.
    boot.reboot();
    for i in 5..8 {
        ipam_add(&boot, &reference, &format!("ref-{i}"), &conf).unwrap();
    }
    let live: std::collections::BTreeMap<String, String> = leases(&store)
        .into_iter()
        .filter(|(_, c)| {
            ["ref-5", "ref-6", "ref-7"]
                .iter()
                .any(|id| c.starts_with(id))
        })
        .collect();
    assert_eq!(live.len(), 3);
    let mut given = BTreeSet::new();
    let refusal = loop {
        match ipam_add(&boot, &ours, &format!("new-{}", given.len()), &conf) {
            Ok(ip) => assert!(given.insert(ip)),
            Err(e) => break e,
        }
    };
    assert!(refusal.contains("no IP addresses available"), "{refusal}");
    assert_eq!(given.len(), 10, "every lease of the earlier boot was freed");
    let after = leases(&store);
    assert!(
        live.iter().all(|(ip, c)| after.get(ip) == Some(c)),
        "the reference's leases of this boot were kept: {live:?} -> {after:?}"
    );
    assert!(live.keys().all(|ip| !given.contains(&format!("{ip}/28"))));
    // The reference's DEL still finds its leases, ours ours.
    for id in ["ref-5", "ref-6", "ref-7"] {
        assert!(ipam(&boot, &reference, "DEL", id, &conf).status.success());
    }
    for i in 0..10 {
        assert!(ipam(&boot, &ours, "DEL", &format!("new-{i}"), &conf)
            .status
            .success());
    }
    assert!(leases(&store).is_empty(), "{:?}", leases(&store));
}

#[test]
fn a_network_may_keep_its_leases_across_reboots() {
    require_root!();
    skip_unless!(
        on_disk(),
        "no filesystem that outlives a boot for the state"
    );
    let ours = our_binary("host-local");
    let mut boot = FakeBoot::new();
    let dir = TempDir::new("rb-keep");
    // Go's key matching: any case, as for every other field.
    let keep = ipam_conf(
        &dir,
        "10.233.4.0/29",
        json!({"KeepLeasesAcrossReboots": true}),
    );
    let store = dir.join("mixed");
    for i in 0..5 {
        ipam_add(&boot, &ours, &format!("keep-{i}"), &keep).unwrap();
    }
    let before = leases(&store);
    boot.reboot();
    let refusal = ipam_add(&boot, &ours, "after", &keep).unwrap_err();
    assert!(refusal.contains("no IP addresses available"), "{refusal}");
    // A container of the earlier boot still holds its address, as with the reference.
    let dup = ipam_add(&boot, &ours, "keep-0", &keep).unwrap_err();
    assert!(dup.contains("duplicate allocation is not allowed"), "{dup}");
    assert_eq!(leases(&store), before);
    // The same store without the field: the first call frees them.
    let free = ipam_conf(&dir, "10.233.4.0/29", json!({}));
    ipam_add(&boot, &ours, "after", &free).unwrap();
    assert_eq!(leases(&store).len(), 1);
    assert!(ipam(&boot, &ours, "DEL", "after", &free).status.success());
}

// ---------------------------------------------------------------------------------------
// The whole chain of a Kubernetes node.

fn chain_node(tag: &str, subnet: u8, boot: &FakeBoot) -> ChainNode {
    let mut node = ChainNode::new(
        tag,
        ChainOptions {
            subnet_v4: format!("10.233.{subnet}.0/24"),
            subnet_v6: None,
            tuning: json!({"type": "tuning", "mtu": 1400}),
            bridge: format!("cni-rb{subnet}"),
        },
        None,
    );
    node.prefix = boot.prefix();
    node
}

fn chain(node: &ChainNode, verb: &str, netns: &str, cni_args: Option<&str>) -> Output {
    let cid = Cnitool::container_id(netns);
    let mut tool = node.cnitool(&cid, 23000);
    if let Some(args) = cni_args {
        tool = tool.env("CNI_ARGS", args);
    }
    tool.run(&[verb, NETWORK, netns])
}

fn chain_ok(node: &ChainNode, verb: &str, netns: &str) -> Value {
    let out = chain(node, verb, netns, None);
    assert!(out.status.success(), "{verb}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn address(result: &Value) -> IpAddr {
    let cidr = result["ips"][0]["address"].as_str().expect("an address");
    cidr.split('/').next().unwrap().parse().unwrap()
}

/// The kernel's side of a reboot: a host netns with nothing in it.
fn reboot_host(node: &mut ChainNode) {
    node.host = Netns::new("rb-chain-host");
    node.host.exec_ok(&["ip", "link", "set", "lo", "up"]);
}

#[test]
fn gc_after_the_reboot_leaves_nothing() {
    require_root!();
    skip_unless!(
        on_disk(),
        "no filesystem that outlives a boot for the state"
    );
    let mut boot = FakeBoot::new();
    let mut node = chain_node("rb-gc", 10, &boot);
    let pods: Vec<NamedNetns> = (0..3)
        .map(|i| NamedNetns::new(&format!("rb-gc-{}-{i}", std::process::id())))
        .collect();
    for pod in &pods {
        chain_ok(&node, "add", &pod.path());
    }
    let before = node.inventory();
    assert_eq!(before.leases.len(), 3);
    assert!(!before.state_files.is_empty() && before.cache_files.len() == 3);
    drop(pods);
    reboot_host(&mut node);
    boot.reboot();
    // GC as a runtime that knows no container: libcni DELs every cached attachment (of the
    // earlier boot: no prevResult, no netns), then every plugin runs its GC.
    let out = node
        .cnitool("none", 0)
        .run(&["gc", NETWORK, "/run/netns/none"]);
    assert!(out.status.success(), "gc: {}", stderr(&out));
    let after = node.inventory();
    assert!(after.leases.is_empty(), "leases: {:?}", after.leases);
    assert!(
        after.state_files.is_empty(),
        "records: {:?}",
        after.state_files
    );
    assert!(
        after.cache_files.is_empty(),
        "cache: {:?}",
        after.cache_files
    );
    assert!(after.links.is_empty(), "links: {:?}", after.links);
}

#[test]
fn the_earlier_boot_disturbs_neither_new_pods_nor_returning_container_ids() {
    require_root!();
    skip_unless!(
        on_disk(),
        "no filesystem that outlives a boot for the state"
    );
    let mut boot = FakeBoot::new();
    let mut node = chain_node("rb-same", 11, &boot);
    let names: Vec<String> = (0..3)
        .map(|i| format!("rb-same-{}-{i}", std::process::id()))
        .collect();
    // The earlier boot: the bridge gives its veths an MTU of 1450 (tuning then sets 1400).
    node.edit_conflist(|c| c["plugins"][0]["mtu"] = json!(1450));
    let (p, p2) = (NamedNetns::new(&names[0]), NamedNetns::new(&names[1]));
    let x = address(&chain_ok(&node, "add", &p.path()));
    chain_ok(&node, "add", &p2.path());
    let p2_backup = node
        .state
        .join("tuning")
        .join(format!("{}_eth0.json", Cnitool::container_id(&p2.path())));
    let saved: Value = serde_json::from_slice(&std::fs::read(&p2_backup).unwrap()).unwrap();
    assert_eq!(saved["mtu"], 1450);

    // Crash, reboot; the new boot's bridge keeps the default MTU (1500).
    drop((p, p2));
    reboot_host(&mut node);
    boot.reboot();
    node.edit_conflist(|c| {
        c["plugins"][0].as_object_mut().unwrap().remove("mtu");
    });

    // A new pod gets the address the dead pod held (asked for, to be sure of it).
    let q = NamedNetns::new(&names[2]);
    let q_args = format!(
        "{};IP={x}",
        netns_tests::chain::containerd_cni_args(&Cnitool::container_id(&q.path()))
    );
    let out = chain(&node, "add", &q.path(), Some(&q_args));
    assert!(out.status.success(), "add q: {}", stderr(&out));
    let q_result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(address(&q_result), x);
    let rules_of = |ip: IpAddr| -> Vec<String> {
        node.inventory()
            .rules
            .into_iter()
            .filter(|r| mentions(r, ip))
            .collect()
    };
    let q_rules = rules_of(x);
    assert!(!q_rules.is_empty(), "q has no firewall or masquerade rules");

    // The runtime DELs the dead pod: through libcni (whose cached result of the earlier boot
    // names x), then plugin by plugin without netns or prevResult (RemovePodSandbox). Neither
    // touches q: the earlier boot's cached result and firewall record are not taken at their
    // word.
    let p_path = format!("/run/netns/{}", names[0]);
    chain_ok(&node, "del", &p_path);
    node.del_without_netns(&Cnitool::container_id(&p_path), 23000)
        .unwrap();
    assert_eq!(rules_of(x), q_rules, "the dead pod's DEL removed q's rules");
    let p_cid = Cnitool::container_id(&p_path);
    let inv = node.inventory();
    assert!(
        !inv.state_files
            .iter()
            .chain(&inv.cache_files)
            .any(|f| f.contains(&p_cid)),
        "{:?} {:?}",
        inv.state_files,
        inv.cache_files
    );
    let ping = node
        .host
        .exec(&["ping", "-c", "1", "-W", "2", &x.to_string()]);
    assert!(ping.status.success(), "q unreachable: {}", stderr(&ping));

    // A container of the earlier boot comes back under its ID: it starts clean (no duplicate
    // lease, tuning records this boot's original MTU), and CHECK and DEL work.
    let p2 = NamedNetns::new(&names[1]);
    chain_ok(&node, "add", &p2.path());
    let saved: Value = serde_json::from_slice(&std::fs::read(&p2_backup).unwrap()).unwrap();
    assert_eq!(
        saved["mtu"], 1500,
        "the earlier boot's backup was kept: {saved}"
    );
    chain_ok(&node, "check", &p2.path());
    chain_ok(&node, "del", &p2.path());
    chain_ok(&node, "del", &q.path());
    drop((p2, q));
    node.settle_links(0);
    let inv = node.inventory();
    assert!(inv.leases.is_empty(), "{:?}", inv.leases);
    assert!(inv.state_files.is_empty(), "{:?}", inv.state_files);
    assert!(inv.cache_files.is_empty(), "{:?}", inv.cache_files);
    assert!(rules_of(x).is_empty(), "{:?}", rules_of(x));
}
