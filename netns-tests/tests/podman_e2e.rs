//! A real container engine on our plugins: podman 4 with its CNI backend.
//!
//! Podman runs containers in the "host" netns it is started in, so every podman command here
//! runs inside a throw-away network + mount namespace (a holder process made with
//! `unshare --net --mount --propagation private`, entered with `nsenter`), where `/run` and
//! `/var/lib` are fresh tmpfs mounts (netns files, CNI cache, host-local leases, runc state).
//! Podman's configuration, storage and image live in a temporary directory prepared by
//! `netns-tests/podman/setup.sh`. Nothing is left behind on the real host, even on failure.
//!
//! The plugin directory handed to podman holds OUR binary for every plugin the workspace
//! builds, the reference Go plugin otherwise (the test prints which).

use std::path::PathBuf;
use std::process::{Command, Output};

use netns_tests::private_host::{self, PrivateHost};
use netns_tests::{
    our_binary, reference_plugin_dir, require_root, skip_unless, success_stdout, workspace_root,
    Cnitool, ConfDir, Netns, TempDir, ENGINE_PLUGINS,
};
use serde_json::{json, Value};

const IMAGE: &str = "localhost/ferrocni-busybox:latest";
/// The page busybox httpd serves from /www (written by setup.sh).
const PAGE: &str = "ferrocni-podman-ok";

fn missing_tools() -> Option<String> {
    let missing = private_host::missing_tools(&[
        "podman", "runc", "conmon", "busybox", "unshare", "nsenter", "iptables", "ip",
    ])?;
    Some(format!(
        "missing {missing:?} (apt-get install -y podman runc busybox-static iptables nftables)"
    ))
}

/// Whether the workspace has a package building plugin `name`.
fn workspace_builds(name: &str) -> bool {
    let root = workspace_root();
    root.join("plugins").join(name).join("Cargo.toml").is_file()
        || root.join("ipam").join(name).join("Cargo.toml").is_file()
}

/// A directory of symlinks: ours where the workspace builds the plugin, else the reference.
fn plugin_dir() -> Option<TempDir> {
    let dir = TempDir::new("podman-plugins");
    let reference = reference_plugin_dir(&[]).unwrap_or_else(|| PathBuf::from("/usr/lib/cni"));
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for name in ENGINE_PLUGINS {
        let target = if workspace_builds(name) {
            ours.push(*name);
            our_binary(name)
        } else {
            theirs.push(*name);
            reference.join(name)
        };
        if !target.is_file() {
            eprintln!("plugin {name} not available at {}", target.display());
            return None;
        }
        std::os::unix::fs::symlink(&target, dir.join(name)).expect("symlink plugin");
    }
    eprintln!("podman plugins: ours {ours:?}, reference {theirs:?}");
    Some(dir)
}

/// Podman in its own namespaces, with private configuration and storage.
struct Podman {
    host: PrivateHost,
    work: TempDir,
    _plugins: TempDir,
    /// Containers started by this test (their cgroups name them), for cleanup.
    containers: std::cell::RefCell<Vec<String>>,
    /// A cgroup parent of this test's own (`/ferrocni-podman-<pid>-<n>`): podman's cgroupfs
    /// manager would otherwise leave `libpod_parent/conmon` behind on the host.
    cgroup_parent: String,
}

impl Podman {
    fn start() -> Option<Podman> {
        let plugins = plugin_dir()?;
        let work = TempDir::new("podman");
        let setup = workspace_root().join("netns-tests/podman/setup.sh");
        let out = Command::new("bash")
            .arg(&setup)
            .arg(work.path())
            .arg(plugins.path())
            .output()
            .expect("run setup.sh");
        assert!(
            out.status.success(),
            "setup.sh failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        let host = PrivateHost::start(work.path());
        Some(Podman {
            host,
            work,
            _plugins: plugins,
            containers: Default::default(),
            cgroup_parent: private_host::unique_cgroup_parent("ferrocni-podman"),
        })
    }

    /// `argv` inside the private host, with podman's private config (killed after 2 minutes).
    fn command(&self, argv: &[&str]) -> Command {
        let mut timed = vec!["timeout", "120"];
        timed.extend_from_slice(argv);
        let mut cmd = self.host.command(&timed);
        cmd.env("CONTAINERS_CONF", self.work.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.work.join("storage.conf"));
        cmd
    }

    fn exec(&self, argv: &[&str]) -> Output {
        self.command(argv)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"))
    }

    fn exec_ok(&self, argv: &[&str]) -> String {
        success_stdout(&format!("{argv:?}"), self.exec(argv))
            .trim()
            .to_string()
    }

    fn podman_ok(&self, args: &[&str]) -> String {
        let mut argv = vec!["podman"];
        argv.extend_from_slice(args);
        self.exec_ok(&argv)
    }

    /// `podman run -d` that records the container for cleanup.
    fn run_detached(&self, args: &[&str]) -> String {
        let parent = format!("--cgroup-parent={}", self.cgroup_parent);
        let mut argv = vec!["run", "-d", parent.as_str()];
        argv.extend_from_slice(args);
        let id = self.podman_ok(&argv);
        self.containers.borrow_mut().push(id.clone());
        id
    }

    fn ip_of(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        self.podman_ok(&["inspect", "--format", &format, container])
    }

    fn netconf(&self) -> PathBuf {
        self.work.join("netconf")
    }

    fn link_names(&self) -> Vec<String> {
        self.host.link_names()
    }

    fn assert_attachment_gone(&self, network: &str, ip: &str, id: &str, others: usize) {
        self.host.assert_attachment_gone(network, ip, id, others);
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self
            .command(&["podman", "rm", "--all", "--force", "--time", "0"])
            .output();
        // Anything still alive from this test: processes in the holder's mount namespace
        // (conmon) and the containers' processes (cgroups named after their IDs).
        let ids = self.containers.borrow().clone();
        self.host.shutdown(|pid| {
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            ids.iter()
                .any(|id| !id.is_empty() && cgroup.contains(&format!("libpod-{id}")))
        });
        private_host::remove_cgroup_tree(&self.cgroup_parent);
    }
}

fn start_or_skip() -> Option<Podman> {
    if let Some(why) = missing_tools() {
        eprintln!("skipping podman test: {why}");
        return None;
    }
    Podman::start()
}

#[test]
fn podman_network_create_run_ping_publish_and_clean_up() {
    require_root!();
    let podman = skip_unless!(start_or_skip(), "podman environment unavailable");
    let net = "fe2e";
    podman.podman_ok(&["network", "create", "--subnet", "10.231.61.0/24", net]);

    // podman wrote a conflist naming exactly the four plugins it needs.
    let conflist: Value = serde_json::from_slice(
        &std::fs::read(podman.netconf().join(format!("{net}.conflist"))).unwrap(),
    )
    .unwrap();
    let types: Vec<&str> = conflist["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["bridge", "portmap", "firewall", "tuning"]);

    let web = podman.run_detached(&[
        "--name",
        "web",
        "--network",
        net,
        "-p",
        "18080:80",
        "-p",
        "127.0.0.1:18081:80",
        IMAGE,
        "httpd",
        "-f",
        "-p",
        "80",
        "-h",
        "/www",
    ]);
    let client =
        podman.run_detached(&["--name", "client", "--network", net, IMAGE, "sleep", "600"]);
    let web_ip = podman.ip_of("web", net);
    let client_ip = podman.ip_of("client", net);
    assert!(
        web_ip.starts_with("10.231.61.") && client_ip.starts_with("10.231.61."),
        "{web_ip} {client_ip}"
    );
    assert_ne!(web_ip, client_ip);

    // Containers reach each other and the gateway.
    podman.podman_ok(&["exec", "client", "ping", "-c", "1", "-W", "3", &web_ip]);
    podman.podman_ok(&["exec", "web", "ping", "-c", "1", "-W", "3", &client_ip]);
    let client_pings_the_gateway = || {
        podman.podman_ok(&[
            "exec",
            "client",
            "ping",
            "-c",
            "1",
            "-W",
            "3",
            "10.231.61.1",
        ])
    };
    client_pings_the_gateway();

    published_ports_answer_where_bound(&podman);

    // The default network (no --network) works too.
    let parent = format!("--cgroup-parent={}", podman.cgroup_parent);
    let addr = podman.podman_ok(&[
        "run", "--rm", &parent, IMAGE, "ip", "-4", "-o", "addr", "show", "eth0",
    ]);
    assert!(
        addr.contains("10.231.100."),
        "default network address: {addr}"
    );

    // Our rules carry the reference's names: portmap's nftables backend (our default).
    let rules = podman.host.firewall_dump();
    assert!(
        rules.contains("table ip cni_hostport") && rules.contains(&format!("dnat to {web_ip}:80")),
        "{rules}"
    );
    assert!(
        rules.contains(&format!("-A CNI-FORWARD -s {web_ip}/32 -j ACCEPT")),
        "{rules}"
    );

    podman.podman_ok(&["rm", "--force", "--time", "0", &web]);
    podman.assert_attachment_gone(net, &web_ip, &web, 1);
    // The other container is untouched by that DEL.
    client_pings_the_gateway();
    podman.podman_ok(&["rm", "--force", "--time", "0", &client]);
    podman.assert_attachment_gone(net, &client_ip, &client, 0);
    let links = podman.link_names();
    assert!(
        links
            .iter()
            .all(|l| l == "lo" || l.starts_with("cni-podman")),
        "{links:?}"
    );
}

/// The published port answers on the host's 127.0.0.1, from another container through the
/// gateway address, and from the container itself (hairpin); a mapping bound to 127.0.0.1
/// answers there and nowhere else.
fn published_ports_answer_where_bound(podman: &Podman) {
    let host_view = podman.exec_ok(&[
        "busybox",
        "wget",
        "-q",
        "-O",
        "-",
        "http://127.0.0.1:18080/",
    ]);
    assert_eq!(host_view, PAGE);
    let from_client = podman.podman_ok(&[
        "exec",
        "client",
        "timeout",
        "10",
        "wget",
        "-q",
        "-O",
        "-",
        "http://10.231.61.1:18080/",
    ]);
    assert_eq!(from_client, PAGE);
    let hairpin = podman.podman_ok(&[
        "exec",
        "web",
        "timeout",
        "10",
        "wget",
        "-q",
        "-O",
        "-",
        "http://10.231.61.1:18080/",
    ]);
    assert_eq!(hairpin, PAGE);

    // A mapping bound to 127.0.0.1 answers there and nowhere else.
    let local_only = podman.exec_ok(&[
        "busybox",
        "wget",
        "-q",
        "-O",
        "-",
        "http://127.0.0.1:18081/",
    ]);
    assert_eq!(local_only, PAGE);
    let elsewhere = podman.exec(&[
        "podman",
        "exec",
        "client",
        "timeout",
        "5",
        "wget",
        "-q",
        "-O",
        "-",
        "http://10.231.61.1:18081/",
    ]);
    assert!(
        !elsewhere.status.success(),
        "a 127.0.0.1-bound port answered on the gateway address"
    );
}

#[test]
fn podman_runs_a_hand_written_1_0_0_bandwidth_conflist() {
    require_root!();
    let podman = skip_unless!(start_or_skip(), "podman environment unavailable");
    let example = workspace_root().join("conflist-examples/podman-bandwidth-1.0.0.conflist");
    std::fs::copy(&example, podman.netconf().join("podman-shaped.conflist"))
        .expect("copy conflist");
    let net = "podman-shaped";

    let id = podman.run_detached(&["--name", "shaped", "--network", net, IMAGE, "sleep", "600"]);
    let ip = podman.ip_of("shaped", net);
    assert!(ip.starts_with("10.231.10."), "{ip}");
    podman.podman_ok(&[
        "exec",
        "shaped",
        "ping",
        "-c",
        "1",
        "-W",
        "3",
        "10.231.10.1",
    ]);

    // bandwidth shaped both directions: a TBF on the host veth and an IFB with a TBF.
    let links = podman.link_names();
    let veth = links
        .iter()
        .find(|l| l.starts_with("veth"))
        .expect("host veth")
        .clone();
    let ifb = links
        .iter()
        .find(|l| l.starts_with("bwp"))
        .expect("bandwidth IFB")
        .clone();
    assert!(podman
        .exec_ok(&["tc", "qdisc", "show", "dev", &veth])
        .contains("tbf"));
    assert!(podman
        .exec_ok(&["tc", "qdisc", "show", "dev", &ifb])
        .contains("tbf"));

    podman.podman_ok(&["rm", "--force", "--time", "0", &id]);
    podman.assert_attachment_gone(net, &ip, &id, 0);
}

#[test]
fn podman_isolated_dual_stack_networks() {
    require_root!();
    let podman = skip_unless!(start_or_skip(), "podman environment unavailable");
    podman.podman_ok(&[
        "network",
        "create",
        "--ipv6",
        "--subnet",
        "10.231.62.0/24",
        "--subnet",
        "fd00:231:62::/64",
        "-o",
        "isolate=true",
        "isoa",
    ]);
    podman.podman_ok(&[
        "network",
        "create",
        "--subnet",
        "10.231.63.0/24",
        "-o",
        "isolate=true",
        "isob",
    ]);
    let conflist: Value =
        serde_json::from_slice(&std::fs::read(podman.netconf().join("isoa.conflist")).unwrap())
            .unwrap();
    assert_eq!(
        conflist["plugins"][2]["ingressPolicy"], "same-bridge",
        "{conflist}"
    );

    let web = podman.run_detached(&[
        "--name",
        "web6",
        "--network",
        "isoa",
        "-p",
        "18090:80",
        IMAGE,
        "httpd",
        "-f",
        "-p",
        "80",
        "-h",
        "/www",
    ]);
    let near = podman.run_detached(&["--name", "near", "--network", "isoa", IMAGE, "sleep", "600"]);
    let far = podman.run_detached(&["--name", "far", "--network", "isob", IMAGE, "sleep", "600"]);
    let web_ip = podman.ip_of("web6", "isoa");
    let web_ip6 = podman.podman_ok(&[
        "inspect",
        "--format",
        "{{(index .NetworkSettings.Networks \"isoa\").GlobalIPv6Address}}",
        "web6",
    ]);
    assert!(web_ip6.starts_with("fd00:231:62::"), "{web_ip6}");

    // Same bridge: reachable over both families. Other bridge: isolated.
    podman.podman_ok(&["exec", "near", "ping", "-c", "1", "-W", "3", &web_ip]);
    podman.podman_ok(&["exec", "near", "ping", "-c", "1", "-W", "3", &web_ip6]);
    let crossed = podman.exec(&[
        "podman", "exec", "far", "ping", "-c", "1", "-W", "2", &web_ip,
    ]);
    assert!(
        !crossed.status.success(),
        "isob reached isoa despite isolate=true"
    );

    // The published port over IPv4 (127.0.0.1) and IPv6 (the bridge's v6 address).
    assert_eq!(
        podman.exec_ok(&[
            "busybox",
            "wget",
            "-q",
            "-O",
            "-",
            "http://127.0.0.1:18090/"
        ]),
        PAGE
    );
    let v6_url = "http://[fd00:231:62::1]:18090/";
    assert_eq!(
        podman.exec_ok(&["busybox", "wget", "-q", "-O", "-", v6_url]),
        PAGE
    );
    assert_eq!(
        podman.podman_ok(&["exec", "near", "timeout", "10", "wget", "-q", "-O", "-", v6_url]),
        PAGE
    );
    let rules6 = podman.host.firewall_dump();
    assert!(
        rules6.contains(&format!("dnat to [{web_ip6}]:80")),
        "{rules6}"
    );

    podman.podman_ok(&["rm", "--force", "--time", "0", &web]);
    podman.assert_attachment_gone("isoa", &web_ip, &web, 2);
    podman.assert_attachment_gone("isoa", &web_ip6, &web, 2);
    podman.podman_ok(&["rm", "--force", "--time", "0", &near, &far]);
    let links = podman.link_names();
    assert!(
        links
            .iter()
            .all(|l| l == "lo" || l.starts_with("cni-podman")),
        "{links:?}"
    );
}

/// The conflists podman writes, driven by cnitool (podman never calls CHECK): ADD, CHECK, DEL.
#[test]
fn podman_conflists_pass_check_through_cnitool() {
    require_root!();
    for (file, net) in [
        ("podman-bridge.conflist", "podman-example"),
        ("podman-isolated-dualstack.conflist", "podman-isolated"),
    ] {
        let text =
            std::fs::read_to_string(workspace_root().join("conflist-examples").join(file)).unwrap();
        let mut conflist: Value = serde_json::from_str(&text).unwrap();
        // Keep host-local's leases out of the real /var/lib/cni.
        let leases = TempDir::new("podman-leases");
        conflist["plugins"][0]["ipam"]["dataDir"] =
            Value::String(leases.path().display().to_string());
        // A host running firewalld would otherwise get these addresses in its real zone.
        conflist["plugins"][2]["backend"] = Value::String("iptables".into());
        // Firewall records and tuning backups stay out of the real /run/cni too.
        let state = TempDir::new("podman-state");
        conflist["plugins"][2]["dataDir"] = json!(state.join("firewall"));
        conflist["plugins"][3]["dataDir"] = json!(state.join("tuning"));
        let conf = ConfDir::new();
        conf.write_json("10-podman.conflist", &conflist);
        let cache = TempDir::new("podman-cache");
        let plugins = skip_unless!(plugin_dir(), "plugins unavailable");
        let host = Netns::new("pmcheck-host");
        let pod = Netns::new("pmcheck-pod");
        host.exec_ok(&["ip", "link", "set", "lo", "up"]);
        let tool = Cnitool::new(&conf, vec![plugins.path().to_path_buf()], cache.path())
            .in_netns(&host)
            .env(
                "CAP_ARGS",
                r#"{"portMappings":[{"hostPort":18081,"containerPort":80,"protocol":"tcp"}]}"#,
            );
        let result: Value =
            serde_json::from_str(&tool.run_ok(&["add", net, pod.path_str()])).unwrap();
        let ip = result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        tool.run_ok(&["check", net, pod.path_str()]);
        // CHECK notices a missing firewall rule.
        host.exec_ok(&[
            "iptables",
            "-D",
            "CNI-FORWARD",
            "-s",
            &format!("{ip}/32"),
            "-j",
            "ACCEPT",
        ]);
        assert!(
            !tool.run(&["check", net, pod.path_str()]).status.success(),
            "CHECK passed without the firewall rule"
        );
        tool.run_ok(&["del", net, pod.path_str()]);
        let dump = String::from_utf8_lossy(&host.exec(&["iptables-save"]).stdout).into_owned();
        assert!(
            !dump.contains(&ip) && !dump.contains("CNI-DN-"),
            "{file}: leftover rules:\n{dump}"
        );
    }
}

impl Podman {
    /// `podman network create --subnet SUBNET NAME` for each (name, subnet).
    fn create_networks(&self, networks: &[(&str, &str)]) {
        for (net, subnet) in networks {
            self.podman_ok(&["network", "create", "--subnet", subnet, net]);
        }
    }

    /// What answers on the private host's 127.0.0.1:`port` (`None`: nothing).
    fn answer(&self, port: u16) -> Option<String> {
        let url = format!("http://127.0.0.1:{port}/");
        let out = self.exec(&["timeout", "5", "busybox", "wget", "-q", "-O", "-", &url]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A busybox httpd container serving PAGE on port 80, published on `port`, on `network`.
    fn run_web(&self, name: &str, network: &str, port: u16) -> String {
        let publish = format!("{port}:80");
        self.run_detached(&[
            "--name",
            name,
            "--network",
            network,
            "-p",
            &publish,
            IMAGE,
            "httpd",
            "-f",
            "-p",
            "80",
            "-h",
            "/www",
        ])
    }

    /// The container interface holding `ip`.
    fn ifname_of(&self, container: &str, ip: &str) -> String {
        let addrs = self.podman_ok(&["exec", container, "ip", "-o", "-4", "addr", "show"]);
        addrs
            .lines()
            .find(|l| l.contains(&format!(" {ip}/")))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_else(|| panic!("no interface holds {ip}:\n{addrs}"))
            .to_string()
    }

    fn rx_packets(&self, container: &str, ifname: &str) -> u64 {
        let path = format!("/sys/class/net/{ifname}/statistics/rx_packets");
        self.podman_ok(&["exec", container, "cat", &path])
            .parse()
            .expect("rx_packets")
    }

    /// Which of `container`'s networks receives the connections to host port `port`: each
    /// network's received packets over three fetches.
    fn received_per_network(&self, container: &str, networks: &[&str], port: u16) -> Vec<u64> {
        let ifnames: Vec<String> = networks
            .iter()
            .map(|n| self.ifname_of(container, &self.ip_of(container, n)))
            .collect();
        let before: Vec<u64> = ifnames
            .iter()
            .map(|i| self.rx_packets(container, i))
            .collect();
        for _ in 0..3 {
            assert_eq!(self.answer(port).as_deref(), Some(PAGE));
        }
        ifnames
            .iter()
            .zip(before)
            .map(|(i, b)| self.rx_packets(container, i) - b)
            .collect()
    }

    /// Nothing of `container`'s attachment to `network` (address `ip`) is left on the host
    /// while the container runs on: no rule naming the address, no lease, no cache entry.
    fn assert_detached(&self, network: &str, ip: &str, container: &str) {
        let rules = self.host.firewall_dump();
        let word = |l: &str| {
            l.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .any(|w| w == ip)
        };
        let left: Vec<&str> = rules.lines().filter(|l| word(l)).collect();
        assert!(left.is_empty(), "{network}: rules left for {ip}: {left:#?}");
        assert!(
            !self
                .host
                .private_files(&format!("/var/lib/cni/networks/{network}"))
                .contains(&ip.to_string()),
            "{network}: lease of {ip} left"
        );
        let cache = self.host.private_files("/var/lib/cni/results");
        assert!(
            !cache
                .iter()
                .any(|f| f.starts_with(&format!("{network}-{container}"))),
            "{network}: cache entry left: {cache:?}"
        );
    }
}

/// podman's "network connect/disconnect with port forwarding": the container's port mappings
/// go to every network it joins, and leaving one network leaves the others' mappings. While
/// both networks have the port, the network joined first answers (as the reference's
/// iptables chains do); disconnecting it leaves the other answering.
#[test]
fn podman_connect_disconnect_with_port_forwarding() {
    require_root!();
    let podman = skip_unless!(start_or_skip(), "podman environment unavailable");
    podman.create_networks(&[("cdn1", "10.231.64.0/24"), ("cdn2", "10.231.65.0/24")]);
    let port = 18095;
    let id = podman.run_web("cdweb", "cdn1", port);
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));
    let first_ip = podman.ip_of("cdweb", "cdn1");

    podman.podman_ok(&["network", "disconnect", "cdn1", "cdweb"]);
    assert_eq!(
        podman.answer(port),
        None,
        "the port answers without a network"
    );
    podman.assert_detached("cdn1", &first_ip, &id);
    podman.podman_ok(&["network", "connect", "cdn1", "cdweb"]);
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));
    let ip1 = podman.ip_of("cdweb", "cdn1");
    assert_ne!(ip1, first_ip, "a reconnected network got the same address");

    podman.podman_ok(&["network", "connect", "cdn2", "cdweb"]);
    let ip2 = podman.ip_of("cdweb", "cdn2");
    let rules = podman.host.firewall_dump();
    for ip in [&ip1, &ip2] {
        assert!(rules.contains(&format!("dnat to {ip}:80")), "{rules}");
    }
    let received = podman.received_per_network("cdweb", &["cdn1", "cdn2"], port);
    assert!(
        received[0] >= 12 && received[1] <= 3,
        "connections went elsewhere than cdn1: {received:?}"
    );

    // The reported bug: leaving cdn1 took cdn2's mapping too.
    podman.podman_ok(&["network", "disconnect", "cdn1", "cdweb"]);
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));
    podman.assert_detached("cdn1", &ip1, &id);
    let received = podman.received_per_network("cdweb", &["cdn2"], port);
    assert!(received[0] >= 12, "{received:?}");

    podman.podman_ok(&["rm", "--force", "--time", "0", &id]);
    podman.assert_attachment_gone("cdn2", &ip2, &id, 0);
}

/// A container on three networks leaves the middle one: the first and last keep their
/// address, routes, port mappings, masquerade and firewall rules; nothing of the middle one
/// is left.
#[test]
fn podman_three_networks_middle_one_disconnected() {
    require_root!();
    let podman = skip_unless!(start_or_skip(), "podman environment unavailable");
    let nets = [
        ("tri1", "10.231.66.0/24", "10.231.66.1"),
        ("tri2", "10.231.67.0/24", "10.231.67.1"),
        ("tri3", "10.231.68.0/24", "10.231.68.1"),
    ];
    podman.create_networks(&nets.map(|(n, subnet, _)| (n, subnet)));
    let port = 18096;
    let id = podman.run_web("tri", "tri1", port);
    podman.podman_ok(&["network", "connect", "tri2", "tri"]);
    podman.podman_ok(&["network", "connect", "tri3", "tri"]);
    let ips: Vec<String> = nets
        .iter()
        .map(|(n, _, _)| podman.ip_of("tri", n))
        .collect();

    podman.podman_ok(&["network", "disconnect", "tri2", "tri"]);
    podman.assert_detached("tri2", &ips[1], &id);
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));
    let rules = podman.host.firewall_dump();
    for ip in [&ips[0], &ips[2]] {
        for want in [
            format!("dnat to {ip}:80"),
            format!("ip saddr {ip} "),
            format!("-A CNI-FORWARD -s {ip}/32 -j ACCEPT"),
        ] {
            assert!(rules.contains(&want), "missing {want:?}:\n{rules}");
        }
    }
    for (net, _, gateway) in [nets[0], nets[2]] {
        podman.podman_ok(&["exec", "tri", "ping", "-c", "1", "-W", "3", gateway]);
        let cache = podman.host.private_files("/var/lib/cni/results");
        assert!(
            cache.iter().any(|f| f.starts_with(&format!("{net}-{id}"))),
            "{net}: {cache:?}"
        );
    }
    podman.podman_ok(&["rm", "--force", "--time", "0", &id]);
    podman.assert_attachment_gone("tri1", &ips[0], &id, 0);
    podman.assert_attachment_gone("tri3", &ips[2], &id, 0);
}

/// podman's "network reload": an operator's firewall reload wipes our tables (the port
/// mappings, the masquerade) and the firewall plugin's rules; `podman network reload` puts
/// everything of the container back, with the same address. Flushing iptables'
/// CNI-HOSTPORT-DNAT, as podman's own test does, does not touch our mappings (nftables).
#[test]
fn podman_network_reload_restores_what_a_flush_removed() {
    require_root!();
    let podman = skip_unless!(start_or_skip(), "podman environment unavailable");
    podman.create_networks(&[("rl1", "10.231.69.0/24"), ("rl2", "10.231.70.0/24")]);
    let port = 18097;
    let id = podman.run_web("rlweb", "rl1", port);
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));
    let ip = podman.ip_of("rlweb", "rl1");
    let ours = |ip: &str| {
        [
            format!("dnat to {ip}:80"),
            format!("ip saddr {ip} "),
            format!("-A CNI-FORWARD -s {ip}/32 -j ACCEPT"),
        ]
    };
    let present = |ip: &str| {
        let rules = podman.host.firewall_dump();
        ours(ip)
            .iter()
            .filter(|w| rules.contains(w.as_str()))
            .count()
    };
    assert_eq!(present(&ip), 3);

    let _ = podman.exec(&["iptables", "-t", "nat", "-F", "CNI-HOSTPORT-DNAT"]);
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));

    let flush = || {
        for table in [["ip", "cni_hostport"], ["inet", "cni_plugins_masquerade"]] {
            podman.exec_ok(&["nft", "delete", "table", table[0], table[1]]);
        }
        podman.exec_ok(&["iptables", "-F", "CNI-FORWARD"]);
    };
    flush();
    assert_eq!(podman.answer(port), None);
    assert_eq!(present(&ip), 0);
    assert_eq!(podman.podman_ok(&["network", "reload", &id]), id);
    assert_eq!(podman.ip_of("rlweb", "rl1"), ip);
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));
    assert_eq!(present(&ip), 3);

    // With a second network, `reload --all` after another flush restores both.
    podman.podman_ok(&["network", "connect", "rl2", "rlweb"]);
    let ip2 = podman.ip_of("rlweb", "rl2");
    flush();
    assert_eq!(podman.podman_ok(&["network", "reload", "--all"]), id);
    assert_eq!(
        (podman.ip_of("rlweb", "rl1"), podman.ip_of("rlweb", "rl2")),
        (ip.clone(), ip2.clone())
    );
    assert_eq!(podman.answer(port).as_deref(), Some(PAGE));
    assert_eq!((present(&ip), present(&ip2)), (3, 3));

    podman.podman_ok(&["rm", "--force", "--time", "0", &id]);
    podman.assert_attachment_gone("rl1", &ip, &id, 0);
    podman.assert_attachment_gone("rl2", &ip2, &id, 0);
}
