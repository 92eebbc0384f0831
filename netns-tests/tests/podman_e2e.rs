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
    podman.podman_ok(&[
        "exec",
        "client",
        "ping",
        "-c",
        "1",
        "-W",
        "3",
        "10.231.61.1",
    ]);

    // The published port answers on the host's 127.0.0.1, from another container through the
    // gateway address, and from the container itself (hairpin).
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
    podman.podman_ok(&[
        "exec",
        "client",
        "ping",
        "-c",
        "1",
        "-W",
        "3",
        "10.231.61.1",
    ]);
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
