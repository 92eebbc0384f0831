//! A container on several networks, through cnitool, on our plugins and on the reference
//! plugins with the same configs (the reference as oracle): each network is bridge (gateway,
//! masquerade) + host-local + portmap + firewall, as podman writes them, and every network
//! gets the same port mappings, as podman hands them out.
//!
//! An attachment is (network, container ID, interface): ADD, DEL and CHECK of one must leave
//! the others as they were. What each step leaves reachable (which network's server answers on
//! the host port, whether the pod reaches an outside host through the masquerade) is recorded
//! for both suites and compared.
//!
//! Every lab is its own set of namespaces: the "host" (bridges, rules), the pod, and an
//! "outside" host behind a veth that has no route back to the pods, so only masqueraded
//! traffic gets an answer.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use netns_tests::netfilter::{first_ip, link_outside};
use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{
    our_bin_dir, our_binary, reference_plugin_dir, require_root, skip_unless, Cnitool, ConfDir,
    Netns, TempDir,
};
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["bridge", "host-local", "portmap", "firewall"];
const OUTSIDE: &str = "192.168.231.2";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suite {
    Ours,
    Reference,
}

fn plugin_dir(suite: Suite) -> Option<PathBuf> {
    match suite {
        Suite::Ours => {
            for p in PLUGINS.iter().chain(&["cnitool"]) {
                our_binary(p);
            }
            Some(our_bin_dir())
        }
        Suite::Reference => reference_plugin_dir(PLUGINS),
    }
}

fn busybox_available() -> bool {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .any(|p| std::path::Path::new(p).is_file())
}

/// `mappings` as the portMappings capability argument: `(hostPort, containerPort)`, tcp.
fn port_mappings(mappings: &[(u16, u16)]) -> String {
    let list: Vec<Value> = mappings
        .iter()
        .map(|(h, c)| json!({"hostPort": h, "containerPort": c, "protocol": "tcp"}))
        .collect();
    json!({ "portMappings": list }).to_string()
}

/// A busybox httpd in the pod serving `page` on `addr:80`; killed on drop.
struct Server {
    child: Child,
    _root: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One suite's world: the host, the pod, the outside host and the networks `mn1`..`mn3`.
struct Lab {
    suite: Suite,
    host: Netns,
    pod: Netns,
    _outside: Netns,
    _conf: ConfDir,
    _cache: TempDir,
    state: TempDir,
    tool: Cnitool,
    dir: PathBuf,
    servers: RefCell<Vec<Server>>,
}

impl Lab {
    fn new(suite: Suite) -> Option<Lab> {
        let dir = plugin_dir(suite)?;
        let host = Netns::new("mn-host");
        let pod = Netns::new("mn-pod");
        let outside = Netns::new("mn-out");
        for ns in [&host, &pod, &outside] {
            ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        }
        let outside_cidr = format!("{OUTSIDE}/24");
        link_outside(
            &host,
            "uplink",
            "192.168.231.1/24",
            &outside,
            &outside_cidr,
            None,
        );
        // Forwarding must be allowed by the firewall plugin's rules, not by the policy.
        host.exec_ok(&["iptables", "-P", "FORWARD", "DROP"]);

        let conf = ConfDir::new();
        let state = TempDir::new("mn-state");
        for i in 1..=3 {
            let net = format!("mn{i}");
            conf.write_json(
                &format!("{i}0-{net}.conflist"),
                &json!({
                    "cniVersion": "1.0.0",
                    "name": net,
                    "plugins": [
                        {"type": "bridge", "bridge": format!("cni-mn{i}"), "isGateway": true,
                         "ipMasq": true, "hairpinMode": true,
                         "ipam": {"type": "host-local", "dataDir": state.join("leases"),
                                  "ranges": [[{"subnet": format!("10.231.8{i}.0/24")}]],
                                  "routes": [{"dst": "0.0.0.0/0"}]}},
                        {"type": "portmap", "capabilities": {"portMappings": true}},
                        {"type": "firewall", "backend": "iptables",
                         "dataDir": state.join("firewall")}
                    ]
                }),
            );
        }
        let cache = TempDir::new("mn-cache");
        let tool = Cnitool::new(&conf, vec![dir.clone()], cache.path()).in_netns(&host);
        Some(Lab {
            suite,
            host,
            pod,
            _outside: outside,
            _conf: conf,
            _cache: cache,
            state,
            tool,
            dir,
            servers: RefCell::new(Vec::new()),
        })
    }

    fn cnitool(&self, ifname: &str, mappings: &[(u16, u16)]) -> Cnitool {
        self.tool
            .clone()
            .env("CNI_IFNAME", ifname)
            .env("CAP_ARGS", &port_mappings(mappings))
    }

    /// ADD of `net` as `ifname`; returns the pod's address on it.
    fn add(&self, net: &str, ifname: &str, mappings: &[(u16, u16)]) -> String {
        first_ip(
            &self
                .cnitool(ifname, mappings)
                .run_ok(&["add", net, self.pod.path_str()]),
        )
    }

    /// ADD, then a server on the new address answering with the network's name.
    fn add_serving(&self, net: &str, ifname: &str, mappings: &[(u16, u16)]) -> String {
        let ip = self.add(net, ifname, mappings);
        self.serve(&format!("{ip}:80"), net);
        ip
    }

    fn del(&self, net: &str, ifname: &str, mappings: &[(u16, u16)]) {
        self.cnitool(ifname, mappings)
            .run_ok(&["del", net, self.pod.path_str()]);
    }

    fn check(&self, net: &str, ifname: &str, mappings: &[(u16, u16)]) -> bool {
        self.cnitool(ifname, mappings)
            .run(&["check", net, self.pod.path_str()])
            .status
            .success()
    }

    /// A busybox httpd in the pod on `addr` (`IP:80` or `80`) answering `page`.
    fn serve(&self, addr: &str, page: &str) {
        let root = TempDir::new("mn-www");
        std::fs::write(root.join("index.html"), page).unwrap();
        let child = self
            .pod
            .command(&[
                "busybox",
                "httpd",
                "-f",
                "-p",
                addr,
                "-h",
                root.path().to_str().unwrap(),
            ])
            .spawn()
            .expect("start busybox httpd");
        self.servers
            .borrow_mut()
            .push(Server { child, _root: root });
        let local = match addr.split_once(':') {
            Some((ip, _)) => ip.to_string(),
            None => "127.0.0.1".to_string(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while fetch(&self.pod, &format!("http://{local}:80/")).as_deref() != Some(page) {
            assert!(Instant::now() < deadline, "httpd on {addr} did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What answers on the host's 127.0.0.1:`port` (`-` for nothing).
    fn answer(&self, port: u16) -> String {
        fetch(&self.host, &format!("http://127.0.0.1:{port}/")).unwrap_or_else(|| "-".into())
    }

    /// Whether the pod reaches the outside host (masquerade and forwarding rules in place).
    fn reaches_outside(&self) -> bool {
        self.pod
            .exec(&["ping", "-c", "1", "-W", "1", OUTSIDE])
            .status
            .success()
    }

    /// What an operator's firewall reload does to our objects: the nat table flushed,
    /// the firewall plugin's chain flushed, and the plugins' nftables tables deleted.
    fn flush_firewall(&self) {
        self.host.exec_ok(&["iptables", "-t", "nat", "-F"]);
        self.host.exec_ok(&["iptables", "-F", "CNI-FORWARD"]);
        for table in [["ip", "cni_hostport"], ["inet", "cni_plugins_masquerade"]] {
            let _ = self
                .host
                .exec(&["nft", "delete", "table", table[0], table[1]]);
        }
    }

    /// `podman network reload`: every network of the container DELeted, then ADDed again
    /// (as podman's `reloadContainerNetwork`).
    fn reload(&self, attachments: &[(&str, &str)], mappings: &[(u16, u16)]) {
        for (net, ifname) in attachments {
            self.del(net, ifname, mappings);
        }
        for (net, ifname) in attachments {
            self.add(net, ifname, mappings);
        }
    }

    /// The cached result of an attachment (what the runtime sends as prevResult).
    fn cached_result(&self, net: &str, ifname: &str) -> Value {
        let file = self.tool.cache_file(net, self.pod.path_str(), ifname);
        let cached: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        cached["result"].clone()
    }

    /// One chained plugin's ADD for an attachment, as the runtime runs it (prevResult from
    /// the cache).
    fn plugin_add(&self, plugin: &Value, net: &str, ifname: &str, mappings: &[(u16, u16)]) {
        let mut config = plugin.clone();
        config["cniVersion"] = json!("1.0.0");
        config["name"] = json!(net);
        config["prevResult"] = self.cached_result(net, ifname);
        let caps: Value = serde_json::from_str(&port_mappings(mappings)).unwrap();
        config["runtimeConfig"] = caps;
        let plugin_type = config["type"].as_str().unwrap().to_string();
        let plugin = Impl::alone("direct", &self.dir.join(&plugin_type));
        Attachment::new(
            &plugin,
            &self.host,
            &Cnitool::container_id(self.pod.path_str()),
            &self.pod,
        )
        .ifname(ifname)
        .run_ok("ADD", &config);
    }

    /// Leases and cache entries of `net` (to see that a DEL released exactly its own).
    fn leases(&self, net: &str) -> usize {
        netns_tests::lease_files(&self.state.join("leases").join(net)).len()
    }

    fn cached(&self, net: &str, ifname: &str) -> bool {
        self.tool
            .cache_file(net, self.pod.path_str(), ifname)
            .is_file()
    }
}

impl Drop for Lab {
    /// The servers go before their namespace.
    fn drop(&mut self) {
        self.servers.borrow_mut().clear();
    }
}

fn fetch(ns: &Netns, url: &str) -> Option<String> {
    let out = ns.exec(&["timeout", "5", "busybox", "wget", "-q", "-O", "-", url]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn labs() -> Option<(Lab, Lab)> {
    if !busybox_available() {
        eprintln!("busybox not installed");
        return None;
    }
    Some((Lab::new(Suite::Ours)?, Lab::new(Suite::Reference)?))
}

const WEB: &[(u16, u16)] = &[(18091, 80)];

/// What podman's "network connect/disconnect with port forwarding" does: the same host port
/// on two networks of one container. Both mappings exist; the network added first answers
/// while both are there; removing either leaves the other answering.
fn connect_disconnect(lab: &Lab) -> Vec<String> {
    let mut seen = Vec::new();
    let mut note = |step: &str, lab: &Lab| {
        seen.push(format!(
            "{step}: port {} outside {}",
            lab.answer(18091),
            lab.reaches_outside()
        ))
    };
    lab.add_serving("mn1", "eth0", WEB);
    note("mn1", lab);
    lab.add_serving("mn2", "eth1", WEB);
    note("mn1+mn2", lab);
    lab.del("mn1", "eth0", WEB);
    note("mn2 (mn1 disconnected)", lab);
    lab.add_serving("mn1", "eth0", WEB);
    note("mn2+mn1 (mn1 reconnected)", lab);
    lab.del("mn2", "eth1", WEB);
    note("mn1 (mn2 disconnected)", lab);
    lab.del("mn1", "eth0", WEB);
    note("none", lab);
    seen
}

#[test]
fn same_host_port_on_two_networks_as_the_reference() {
    require_root!();
    let (ours, theirs) = skip_unless!(labs(), "plugins or busybox unavailable");
    let mine = connect_disconnect(&ours);
    let reference = connect_disconnect(&theirs);
    assert_eq!(mine, reference, "ours vs the reference");
    // What the reference does, spelled out. Each network gives the pod a default route of
    // its own: without mn1, the pod still gets out through mn2.
    assert_eq!(
        mine,
        [
            "mn1: port mn1 outside true",
            "mn1+mn2: port mn1 outside true",
            "mn2 (mn1 disconnected): port mn2 outside true",
            "mn2+mn1 (mn1 reconnected): port mn2 outside true",
            "mn1 (mn2 disconnected): port mn1 outside true",
            "none: port - outside false",
        ]
    );
    // Nothing of the container is left in either suite.
    for lab in [&ours, &theirs] {
        let dump = lab.host.exec_ok(&["iptables-save"])
            + &String::from_utf8_lossy(&lab.host.exec(&["nft", "list", "ruleset"]).stdout);
        assert!(
            !dump.contains("10.231.81.")
                && !dump.contains("10.231.82.")
                && !dump.contains("CNI-DN-"),
            "{:?}: leftovers\n{dump}",
            lab.suite
        );
    }
}

/// Three networks, each with a host port of its own; the middle one is removed: the other
/// two keep their ports, their masquerade, their lease and their cache entry.
fn middle_removed(lab: &Lab) -> Vec<String> {
    let nets = [
        ("mn1", "eth0", 18101),
        ("mn2", "eth1", 18102),
        ("mn3", "eth2", 18103),
    ];
    for (net, ifname, port) in nets {
        lab.add_serving(net, ifname, &[(port, 80)]);
    }
    let mut seen = Vec::new();
    let mut note = |step: &str| {
        let ports: Vec<String> = nets.iter().map(|(_, _, p)| lab.answer(*p)).collect();
        let state: Vec<String> = nets
            .iter()
            .map(|(n, i, _)| format!("{n}: lease {} cache {}", lab.leases(n), lab.cached(n, i)))
            .collect();
        seen.push(format!(
            "{step}: ports {ports:?} outside {} {state:?}",
            lab.reaches_outside()
        ));
    };
    note("three");
    lab.del("mn2", "eth1", &[(18102, 80)]);
    note("middle removed");
    seen
}

#[test]
fn three_networks_middle_one_removed_as_the_reference() {
    require_root!();
    let (ours, theirs) = skip_unless!(labs(), "plugins or busybox unavailable");
    let mine = middle_removed(&ours);
    assert_eq!(mine, middle_removed(&theirs), "ours vs the reference");
    assert_eq!(
        mine[1],
        r#"middle removed: ports ["mn1", "-", "mn3"] outside true ["mn1: lease 1 cache true", "mn2: lease 0 cache false", "mn3: lease 1 cache true"]"#
    );
    // The remaining attachments are whole: CHECK passes (ours; podman never calls CHECK).
    assert!(ours.check("mn1", "eth0", &[(18101, 80)]));
    assert!(ours.check("mn3", "eth2", &[(18103, 80)]));
    // And the pod's gateways on both answer.
    for gw in ["10.231.81.1", "10.231.83.1"] {
        ours.pod.exec_ok(&["ping", "-c", "1", "-W", "2", gw]);
    }
    for lab in [&ours, &theirs] {
        lab.del("mn3", "eth2", &[(18103, 80)]);
        lab.del("mn1", "eth0", &[(18101, 80)]);
    }
}

/// podman's "network reload": the operator's firewall reload wipes the rules, the runtime
/// DELs and ADDs every network of the container again, and the port, the masquerade and the
/// forwarding rules are back.
fn reload_after_flush(lab: &Lab) -> Vec<String> {
    let attachments = [("mn1", "eth0"), ("mn2", "eth1")];
    for (net, ifname) in attachments {
        lab.add(net, ifname, WEB);
    }
    lab.serve("80", "web");
    let mut seen = Vec::new();
    let mut note = |step: &str| {
        seen.push(format!(
            "{step}: port {} outside {}",
            lab.answer(18091),
            lab.reaches_outside()
        ))
    };
    note("up");
    lab.flush_firewall();
    note("flushed");
    lab.reload(&attachments, WEB);
    note("reloaded");
    for (net, ifname) in attachments {
        lab.del(net, ifname, WEB);
    }
    note("removed");
    seen
}

#[test]
fn reload_after_a_firewall_flush_as_the_reference() {
    require_root!();
    let (ours, theirs) = skip_unless!(labs(), "plugins or busybox unavailable");
    let mine = reload_after_flush(&ours);
    assert_eq!(mine, reload_after_flush(&theirs), "ours vs the reference");
    assert_eq!(
        mine,
        [
            "up: port web outside true",
            "flushed: port - outside false",
            "reloaded: port web outside true",
            "removed: port - outside false",
        ]
    );
}

/// Our mappings live in nftables: flushing iptables' CNI-HOSTPORT-DNAT (podman's own reload
/// test does) leaves them working, where the reference's die. What wipes ours (our tables
/// deleted) is undone by the chained plugins' ADD of the same attachment alone, without a DEL:
/// portmap puts the mapping back, firewall the forwarding rules.
#[test]
fn our_rules_survive_an_iptables_flush_and_come_back_with_an_add() {
    require_root!();
    let (ours, theirs) = skip_unless!(labs(), "plugins or busybox unavailable");
    for lab in [&ours, &theirs] {
        lab.add("mn1", "eth0", WEB);
        lab.add("mn2", "eth1", WEB);
        lab.serve("80", "web");
        assert_eq!(lab.answer(18091), "web", "{:?}", lab.suite);
        // Ours has no such chain: the flush fails, as it does in podman's test.
        let _ = lab
            .host
            .exec(&["iptables", "-t", "nat", "-F", "CNI-HOSTPORT-DNAT"]);
    }
    assert_eq!(
        ours.answer(18091),
        "web",
        "an iptables flush stopped our mapping"
    );
    assert_eq!(
        theirs.answer(18091),
        "-",
        "the reference's mapping survived its flush"
    );

    // Our tables deleted: the mappings and the masquerade are gone...
    ours.host
        .exec_ok(&["nft", "delete", "table", "ip", "cni_hostport"]);
    ours.host.exec_ok(&["iptables", "-F", "CNI-FORWARD"]);
    assert_eq!(ours.answer(18091), "-");
    assert!(!ours.reaches_outside());
    // ...portmap's ADD of the second attachment alone brings its mapping back, and the
    // first attachment's too, each with its own.
    let portmap = json!({"type": "portmap", "capabilities": {"portMappings": true}});
    ours.plugin_add(&portmap, "mn2", "eth1", WEB);
    assert_eq!(ours.answer(18091), "web");
    ours.plugin_add(&portmap, "mn1", "eth0", WEB);
    let table = ours
        .host
        .exec_ok(&["nft", "list", "table", "ip", "cni_hostport"]);
    let dnats = table.lines().filter(|l| l.contains("dnat to")).count();
    assert_eq!(dnats, 2, "{table}");
    // firewall's ADD puts the forwarding rules back.
    let firewall = json!({"type": "firewall", "backend": "iptables",
                          "dataDir": ours.state.join("firewall")});
    ours.plugin_add(&firewall, "mn1", "eth0", WEB);
    ours.plugin_add(&firewall, "mn2", "eth1", WEB);
    assert!(ours.reaches_outside());
    // Every rule of both attachments goes with their DELs.
    for lab in [&ours, &theirs] {
        lab.del("mn2", "eth1", WEB);
        lab.del("mn1", "eth0", WEB);
    }
    let left = ours.host.exec_ok(&["nft", "list", "ruleset"]);
    assert!(
        !left.contains("dnat to") && !left.contains("10.231.8"),
        "{left}"
    );
}

/// kube-flannel's plugin keeps one delegate config per container: a pod with two interfaces on
/// the flannel network (Multus) lost the second's with the first's DEL, and that DEL found
/// nothing. Ours keeps one per attachment (eth0's under flannel's own name): each DEL undoes
/// its own interface only.
#[test]
fn flannel_keeps_a_delegate_per_attachment() {
    require_root!();
    for p in ["flannel", "bridge", "host-local", "cnitool"] {
        our_binary(p);
    }
    let host = Netns::new("mnf-host");
    let pod = Netns::new("mnf-pod");
    let files = TempDir::new("mnf-files");
    std::fs::write(
        files.join("subnet.env"),
        "FLANNEL_NETWORK=10.231.88.0/21\nFLANNEL_SUBNET=10.231.89.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    )
    .unwrap();
    let conf = ConfDir::new();
    conf.write_json(
        "10-flannel.conflist",
        &json!({"cniVersion": "1.0.0", "name": "cbr0", "plugins": [
            {"type": "flannel", "subnetFile": files.join("subnet.env"),
             "dataDir": files.join("data"),
             "delegate": {"isDefaultGateway": false},
             "ipam": {"dataDir": files.join("ipam")}}]}),
    );
    let cache = TempDir::new("mnf-cache");
    let tool = Cnitool::new(&conf, vec![our_bin_dir()], cache.path()).in_netns(&host);
    let on = |ifname: &str| tool.clone().env("CNI_IFNAME", ifname);
    for ifname in ["eth0", "net1"] {
        on(ifname).run_ok(&["add", "cbr0", pod.path_str()]);
    }
    let cid = Cnitool::container_id(pod.path_str());
    let data = files.join("data");
    assert!(data.join(&cid).is_file() && data.join(format!("{cid}:net1")).is_file());
    let leases = || netns_tests::lease_files(&files.join("ipam").join("cbr0")).len();
    assert_eq!(leases(), 2);

    on("net1").run_ok(&["del", "cbr0", pod.path_str()]);
    assert!(pod.link("net1").is_none() && pod.link("eth0").is_some());
    assert_eq!(leases(), 1);
    on("net1").run_ok(&["del", "cbr0", pod.path_str()]);
    assert!(pod.link("eth0").is_some(), "a repeated DEL took eth0");
    on("eth0").run_ok(&["del", "cbr0", pod.path_str()]);
    assert!(pod.link("eth0").is_none());
    assert_eq!(leases(), 0);
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
}

/// One network attached twice to a container (two interfaces), masqueraded with iptables: the
/// reference names the masquerade chain by network and container ID, so both attachments
/// jump to one chain. Each DEL takes its own jump (from its address); the chain goes with the
/// last. (The reference's DEL of either empties the chain, then fails to delete it, busy: the
/// DEL fails and the other's traffic leaves unmasqueraded.)
#[test]
fn iptables_masquerade_of_one_network_twice() {
    require_root!();
    let lab = skip_unless!(Lab::new(Suite::Ours), "plugins unavailable");
    let conf = ConfDir::new();
    conf.write_json(
        "10-twice.conflist",
        &json!({"cniVersion": "1.0.0", "name": "twice", "plugins": [
            {"type": "bridge", "bridge": "cni-tw0", "isGateway": true, "ipMasq": true,
             "ipMasqBackend": "iptables",
             "ipam": {"type": "host-local", "dataDir": lab.state.join("leases"),
                      "ranges": [[{"subnet": "10.231.87.0/24"}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "firewall", "backend": "iptables", "dataDir": lab.state.join("firewall")}]}),
    );
    let cache = TempDir::new("mn-twice-cache");
    let tool = Cnitool::new(&conf, vec![lab.dir.clone()], cache.path()).in_netns(&lab.host);
    let on = |ifname: &str| tool.clone().env("CNI_IFNAME", ifname);
    for ifname in ["eth0", "net1"] {
        on(ifname).run_ok(&["add", "twice", lab.pod.path_str()]);
    }
    let jumps = || {
        lab.host
            .exec_ok(&["iptables-save", "-t", "nat"])
            .lines()
            .filter(|l| l.starts_with("-A POSTROUTING -s 10.231.87."))
            .count()
    };
    assert_eq!(jumps(), 2);
    // Take net1 away: the pod's traffic then leaves through eth0, whose masquerade must hold.
    on("net1").run_ok(&["del", "twice", lab.pod.path_str()]);
    assert_eq!(jumps(), 1);
    assert!(lab.reaches_outside(), "eth0 lost its masquerade");
    on("eth0").run_ok(&["del", "twice", lab.pod.path_str()]);
    let nat = lab.host.exec_ok(&["iptables-save", "-t", "nat"]);
    assert!(
        !nat.contains("10.231.87.") && !nat.contains(":CNI-"),
        "leftovers:\n{nat}"
    );
}
