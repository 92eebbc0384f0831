//! dhcp against a real DHCP server: dnsmasq in a server netns on one end of a veth, the pod
//! on the other, our daemon started by the test (and killed at the end). ADD gets a lease,
//! the daemon renews it at T1 (seen in dnsmasq's log), survives a dnsmasq restart, CHECK
//! and STATUS talk to it, and DEL releases the lease (dnsmasq's lease file empties). After a
//! (faked) reboot of the node, a lease of the earlier boot is neither renewed nor handed out.

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::reboot::FakeBoot;
use netns_tests::{
    our_bin_dir, our_binary, require_root, skip_unless, Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) on drop.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server netns and a pod netns joined by a veth: `srv0` (10.91.0.1/24, up) on the server's
/// side, `eth0` (down, unaddressed) in the pod.
fn server_and_pod(server: &str, pod: &str) -> (Netns, Netns) {
    let (server, pod) = (Netns::new(server), Netns::new(pod));
    server.exec_ok(&[
        "ip",
        "link",
        "add",
        "srv0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        pod.name(),
    ]);
    server.exec_ok(&["ip", "addr", "add", "10.91.0.1/24", "dev", "srv0"]);
    server.exec_ok(&["ip", "link", "set", "srv0", "up"]);
    (server, pod)
}

fn dnsmasq_path() -> Option<PathBuf> {
    ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// dnsmasq on `srv0`: leases of 2 minutes (its minimum) with T1 = 2 s and T2 = 6 s. Without
/// its ICMP conflict check, which delays every first OFFER by 3 s.
fn dnsmasq(bin: &Path, server: &Netns, dir: &TempDir) -> Guard {
    dnsmasq_on(bin, server, dir, "srv0", "10.91.0.10,10.91.0.50")
}

/// [`dnsmasq`] on `interface` with the address range `range` (`first,last`).
fn dnsmasq_on(bin: &Path, server: &Netns, dir: &TempDir, interface: &str, range: &str) -> Guard {
    let child = server
        .command(&[bin.to_str().unwrap()])
        .args([
            "--no-daemon",
            "--conf-file=/dev/null",
            "--port=0",
            &format!("--interface={interface}"),
            "--bind-interfaces",
            &format!("--dhcp-range={range},255.255.255.0,2m"),
            "--dhcp-option=option:T1,2",
            "--dhcp-option=option:T2,6",
            "--log-dhcp",
            "--no-ping",
        ])
        .arg(format!("--dhcp-leasefile={}", dir.join("leases").display()))
        .arg(format!("--log-facility={}", dir.join("log").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dnsmasq");
    std::thread::sleep(Duration::from_millis(300));
    Guard(child)
}

/// Our DHCP daemon with short retransmissions, its socket in `dir`; killed on drop.
fn daemon(dhcp: &Path, dir: &TempDir) -> (Guard, PathBuf) {
    daemon_with(
        dhcp,
        dir,
        &["-timeout", "1s", "-resendmax", "2s", "-resendtimeout=20s"],
    )
}

/// Our DHCP daemon with the timing flags `timing`.
fn daemon_with(dhcp: &Path, dir: &TempDir, timing: &[&str]) -> (Guard, PathBuf) {
    daemon_from(Command::new(dhcp), dir, timing)
}

/// The DHCP daemon `dhcp` runs (the binary, or a command that executes it), with the timing
/// flags `timing`.
fn daemon_from(mut dhcp: Command, dir: &TempDir, timing: &[&str]) -> (Guard, PathBuf) {
    let socket = dir.join("dhcp.sock");
    let daemon_log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let guard = Guard(
        dhcp.args(["daemon", "-socketpath"])
            .arg(&socket)
            .args(timing)
            .arg(format!("-pidfile={}", dir.join("daemon.pid").display()))
            .stdout(Stdio::null())
            .stderr(daemon_log)
            .spawn()
            .expect("start the dhcp daemon"),
    );
    wait_for("the daemon socket", Duration::from_secs(5), || {
        socket.exists()
    });
    (guard, socket)
}

fn wait_for(what: &str, limit: Duration, f: impl FnMut() -> bool) {
    wait_for_or(what, limit, f, String::new);
}

/// [`wait_for`], the failure message ending with what `detail` says at the timeout.
fn wait_for_or(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> bool,
    detail: impl Fn() -> String,
) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {what}{}",
            detail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until dnsmasq's lease file in `dir` no longer holds `ip` (DEL's DHCPRELEASE was
/// processed); on timeout the failure carries our daemon's and dnsmasq's logs.
fn wait_for_release(dir: &TempDir, ip: &str) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    wait_for_or(
        &format!("the release of {ip}"),
        Duration::from_secs(5),
        || !read("leases").contains(ip),
        || {
            format!(
                "\n--- daemon.log\n{}\n--- dnsmasq log\n{}",
                read("daemon.log"),
                read("log")
            )
        },
    );
}

fn count(path: &Path, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .matches(needle)
        .count()
}

#[test]
fn lease_renewal_restart_and_release_against_dnsmasq() {
    require_root!();
    let dnsmasq_bin = skip_unless!(
        dnsmasq_path(),
        "dnsmasq not installed (apt-get install dnsmasq)"
    );
    let dhcp = our_binary("dhcp");
    let dir = TempDir::new("dhcp-test");
    let (server, pod) = server_and_pod("dhcp-srv", "dhcp-pod");
    let mut server_proc = Some(dnsmasq(&dnsmasq_bin, &server, &dir));

    let (_daemon, socket) = daemon(&dhcp, &dir);

    let conf = json!({"cniVersion": "1.1.0", "name": "dhcp-net", "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": socket,
                 "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"}],
                 "request": [{"option": "121"}]}});
    let plugin = Attachment::at(&Impl::alone("dhcp", &dhcp), "dhcp-cid", pod.path_str())
        .cni_args("IgnoreUnknown=1;K8S_POD_NAME=web-0");
    let started = Instant::now();
    let result = plugin.run_ok("ADD", &conf);
    // No lost first DISCOVER: the daemon waits for the link to pass packets before sending.
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "ADD took {:?}: the first DISCOVER was lost ({}; dnsmasq: {})",
        started.elapsed(),
        std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default(),
        std::fs::read_to_string(dir.join("log")).unwrap_or_default()
    );
    let address = result["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(
        address.starts_with("10.91.0.") && address.ends_with("/24"),
        "{result}"
    );
    assert_eq!(result["ips"][0]["gateway"], "10.91.0.1", "{result}");
    assert_eq!(
        result["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.91.0.1"}])
    );
    let ip = address.split('/').next().unwrap().to_string();
    let leases = std::fs::read_to_string(dir.join("leases")).unwrap();
    // The lease names our hostname and the reference's client id ("\0" + cid/net/ifname).
    assert!(
        leases.contains(&ip) && leases.contains(" web-0 "),
        "{leases}"
    );
    assert!(leases.contains("00:64:68:63:70:2d:63:69:64:2f"), "{leases}");

    // A repeated ADD returns the lease the daemon holds; CHECK and STATUS agree.
    assert_eq!(plugin.run_ok("ADD", &conf)["ips"][0]["address"], address);
    let mut check = conf.clone();
    check["prevResult"] = result.clone();
    plugin.run_ok("CHECK", &check);
    plugin.run_ok("STATUS", &conf);

    // Renewal at T1 (2 s): dnsmasq logs a new ACK for the same address.
    let log = dir.join("log");
    let acks = count(&log, &format!("DHCPACK(srv0) {ip}"));
    wait_for("a renewal", Duration::from_secs(8), || {
        count(&log, &format!("DHCPACK(srv0) {ip}")) > acks
    });

    // dnsmasq restarts (its lease file kept): renewals fail meanwhile, then succeed again.
    server_proc.take();
    std::thread::sleep(Duration::from_secs(3));
    let _ = std::fs::remove_file(&log);
    server_proc = Some(dnsmasq(&dnsmasq_bin, &server, &dir));
    wait_for(
        "a renewal after the restart",
        Duration::from_secs(15),
        || count(&log, &format!("DHCPACK(srv0) {ip}")) > 0,
    );

    // DEL releases: dnsmasq drops the lease. A second DEL is fine.
    plugin.run_ok("DEL", &conf);
    wait_for_release(&dir, &ip);
    assert!(count(&log, &format!("DHCPRELEASE(srv0) {ip}")) > 0);
    plugin.run_ok("DEL", &conf);
    let out = plugin.run("CHECK", &check);
    assert!(!out.success, "CHECK after DEL: {}", out.stdout);
    drop(server_proc);
}

/// The node reboots under a running daemon (the boot faked in the daemon's mount namespace):
/// the lease of the earlier boot is not renewed at its next T1, CHECK no longer finds it, and
/// an ADD of the attachment acquires a lease anew instead of being handed the old one.
#[test]
fn a_lease_of_an_earlier_boot_is_neither_renewed_nor_handed_out() {
    require_root!();
    let dnsmasq_bin = skip_unless!(
        dnsmasq_path(),
        "dnsmasq not installed (apt-get install dnsmasq)"
    );
    let dhcp = our_binary("dhcp");
    let dir = TempDir::new("dhcp-boot");
    let (server, pod) = server_and_pod("dhcpb-srv", "dhcpb-pod");
    let _server = dnsmasq(&dnsmasq_bin, &server, &dir);
    let mut boot = FakeBoot::new();
    let (_daemon, socket) = daemon_from(
        boot.command(&[dhcp.to_str().unwrap()]),
        &dir,
        &["-timeout", "1s", "-resendmax", "2s", "-resendtimeout=20s"],
    );
    let conf = json!({"cniVersion": "1.1.0", "name": "dhcp-net", "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": socket}});
    let plugin = Attachment::at(&Impl::alone("dhcp", &dhcp), "boot-cid", pod.path_str());
    let result = plugin.run_ok("ADD", &conf);
    let ip = result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let (log, daemon_log) = (dir.join("log"), dir.join("daemon.log"));
    let acks = || count(&log, &format!("DHCPACK(srv0) {ip}"));
    let first = acks();
    wait_for("a renewal", Duration::from_secs(8), || acks() > first);

    boot.reboot();
    // A renewal already under way may end; at the next T1 the daemon lets the lease go.
    std::thread::sleep(Duration::from_secs(1));
    let at_reboot = acks();
    wait_for_or(
        "the daemon to give up the lease of the earlier boot",
        Duration::from_secs(10),
        || {
            count(
                &daemon_log,
                "lease of an earlier boot of the node, not renewed",
            ) > 0
        },
        || std::fs::read_to_string(&daemon_log).unwrap_or_default(),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(acks(), at_reboot, "a lease of an earlier boot was renewed");
    let mut check = conf.clone();
    check["prevResult"] = result.clone();
    assert!(
        !plugin.run("CHECK", &check).success,
        "CHECK trusted the old lease"
    );

    // The attachment again: a new acquisition (DISCOVER), kept alive (renewed) in this boot.
    let discovers = count(&log, "DHCPDISCOVER(srv0)");
    let again = plugin.run_ok("ADD", &conf);
    assert!(
        count(&log, "DHCPDISCOVER(srv0)") > discovers,
        "no new acquisition"
    );
    assert!(count(&daemon_log, "not reusing the lease held") > 0);
    let new_ip = again["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let renewed = count(&log, &format!("DHCPACK(srv0) {new_ip}"));
    wait_for("a renewal in the new boot", Duration::from_secs(8), || {
        count(&log, &format!("DHCPACK(srv0) {new_ip}")) > renewed
    });
    let mut check = conf.clone();
    check["prevResult"] = again;
    plugin.run_ok("CHECK", &check);
    plugin.run_ok("DEL", &conf);
    wait_for_release(&dir, &new_ip);
}

#[test]
fn plugin_without_a_daemon() {
    let dhcp = our_binary("dhcp");
    let dir = TempDir::new("dhcp-nodaemon");
    let conf = json!({"cniVersion": "1.1.0", "name": "dhcp-net",
        "ipam": {"type": "dhcp", "daemonSocketPath": dir.join("none.sock")}});
    let plugin = Attachment::at(&Impl::alone("dhcp", &dhcp), "cid", "/run/netns/x");
    let out = plugin.run("ADD", &conf);
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    // Nothing can be held without a daemon: DEL and GC succeed, STATUS says not available.
    plugin.run_ok("DEL", &conf);
    plugin.run_ok("GC", &conf);
    assert_eq!(plugin.run("STATUS", &conf).json["code"], 50);
    let bad: Value = json!({"cniVersion": "1.1.0", "name": "dhcp-net",
        "ipam": {"type": "dhcp", "request": [{"option": "no-such-option"}]}});
    assert_eq!(plugin.run("ADD", &bad).json["code"], 999);
}

/// podman's macvlan networks: macvlan on the host's uplink with the dhcp IPAM, through
/// cnitool. The lease comes from the DHCP server on the uplink's segment, the pod reaches it,
/// and DEL releases the lease.
#[test]
fn macvlan_with_dhcp_through_cnitool() {
    require_root!();
    let dnsmasq_bin = skip_unless!(
        dnsmasq_path(),
        "dnsmasq not installed (apt-get install dnsmasq)"
    );
    let dhcp = our_binary("dhcp");
    for p in ["macvlan", "cnitool"] {
        our_binary(p);
    }
    let dir = TempDir::new("dhcp-macvlan");
    let host = Netns::new("dhcpm-host");
    let server = Netns::new("dhcp-srv");
    let pod = Netns::new("dhcpm-pod");
    host.exec_ok(&[
        "ip",
        "link",
        "add",
        "uplink0",
        "type",
        "veth",
        "peer",
        "name",
        "srv0",
        "netns",
        server.name(),
    ]);
    host.exec_ok(&["ip", "link", "set", "uplink0", "up"]);
    server.exec_ok(&["ip", "addr", "add", "10.91.0.1/24", "dev", "srv0"]);
    server.exec_ok(&["ip", "link", "set", "srv0", "up"]);
    let _server = dnsmasq(&dnsmasq_bin, &server, &dir);
    let (_daemon, socket) = daemon(&dhcp, &dir);
    let conf = ConfDir::new();
    conf.write_json(
        "10-macvlan.conflist",
        &json!({"cniVersion": "1.0.0", "name": "macvlan-dhcp", "plugins": [
            {"type": "macvlan", "master": "uplink0", "mode": "bridge",
             "ipam": {"type": "dhcp", "daemonSocketPath": socket}}]}),
    );
    let cache = TempDir::new("dhcpm-cache");
    let tool = Cnitool::new(&conf, vec![our_bin_dir()], cache.path()).in_netns(&host);
    let result: Value =
        serde_json::from_str(&tool.run_ok(&["add", "macvlan-dhcp", pod.path_str()])).unwrap();
    let address = result["ips"][0]["address"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(address.starts_with("10.91.0."), "{result}");
    let ip = address.split('/').next().unwrap_or_default().to_string();
    assert!(pod.addresses("eth0").contains(&address));
    pod.exec_ok(&["ping", "-c", "1", "-W", "2", "10.91.0.1"]);
    tool.run_ok(&["del", "macvlan-dhcp", pod.path_str()]);
    wait_for_release(&dir, &ip);
    assert!(pod.link("eth0").is_none());
    tool.run_ok(&["del", "macvlan-dhcp", pod.path_str()]);
}

/// The reference's "lease unavailable" specs: a server with a single address, a pod with two
/// interfaces on its segment. The first ADD gets the address (and keeps renewing it: T1 is
/// 2 s); the second ADD gets no OFFER and must fail within the daemon's timeouts with the
/// reference's error, whatever the server does meanwhile: with the 1.1.1 suite's flags
/// (`-timeout 2s -resendmax 8s`: retries end when the backoff reaches `-resendmax`) and with
/// the latest suite's (`--resendtimeout 10s` added: retries end after 10 s). Both DELs then
/// return at once.
#[test]
fn add_without_a_free_lease_fails_within_the_timeouts() {
    require_root!();
    let dnsmasq_bin = skip_unless!(
        dnsmasq_path(),
        "dnsmasq not installed (apt-get install dnsmasq)"
    );
    let dhcp = our_binary("dhcp");
    let server = Netns::new("dhcpu-srv");
    let pod = Netns::new("dhcpu-pod");
    server.exec_ok(&["ip", "link", "add", "br0", "type", "bridge"]);
    server.exec_ok(&["ip", "addr", "add", "10.93.0.1/24", "dev", "br0"]);
    server.exec_ok(&["ip", "link", "set", "br0", "up"]);
    for (port, ifname) in [("port0", "eth0"), ("port1", "eth1")] {
        server.exec_ok(&[
            "ip",
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            ifname,
            "netns",
            pod.name(),
        ]);
        server.exec_ok(&["ip", "link", "set", port, "master", "br0", "up"]);
    }
    for (timing, limit) in [
        (&["-timeout", "2s", "-resendmax", "8s"][..], 60),
        (
            &[
                "-timeout",
                "2s",
                "-resendmax",
                "8s",
                "--resendtimeout",
                "10s",
            ][..],
            15,
        ),
    ] {
        let dir = TempDir::new("dhcp-unavail");
        let _server = dnsmasq_on(&dnsmasq_bin, &server, &dir, "br0", "10.93.0.10,10.93.0.10");
        let (_daemon, socket) = daemon_with(&dhcp, &dir, timing);
        let conf = json!({"cniVersion": "1.0.0", "name": "mynet", "type": "bridge",
            "ipam": {"type": "dhcp", "daemonSocketPath": socket}});
        let on = |ifname: &str| {
            Attachment::at(&Impl::alone("dhcp", &dhcp), "dummy", pod.path_str()).ifname(ifname)
        };
        let first = on("eth0").run_ok("ADD", &conf);
        assert_eq!(first["ips"][0]["address"], "10.93.0.10/24", "{first}");
        let started = Instant::now();
        let out = on("eth1").run("ADD", &conf);
        let took = started.elapsed();
        assert!(!out.success, "{timing:?}: second ADD got {}", out.stdout);
        assert_eq!(
            out.json["msg"], "error calling DHCP.Allocate: no more tries",
            "{timing:?}: {}",
            out.stdout
        );
        assert!(
            took < Duration::from_secs(limit),
            "{timing:?}: the second ADD took {took:?} ({})",
            std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
        );
        for ifname in ["eth1", "eth0"] {
            let started = Instant::now();
            on(ifname).run_ok("DEL", &conf);
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{timing:?}: DEL {ifname} took {:?}",
                started.elapsed()
            );
        }
        wait_for_release(&dir, "10.93.0.10");
    }
}

/// The reference's "multiple DELs for the same container": ADD, then three DELs at once, then
/// another; with the daemon's default timings (as that spec runs it). Each DEL returns
/// promptly, the lease is released once, and an ADD afterwards gets a lease again.
#[test]
fn concurrent_dels_of_one_attachment_return_promptly() {
    require_root!();
    let dnsmasq_bin = skip_unless!(
        dnsmasq_path(),
        "dnsmasq not installed (apt-get install dnsmasq)"
    );
    let dhcp = our_binary("dhcp");
    let dir = TempDir::new("dhcp-dels");
    let (server, pod) = server_and_pod("dhcpd-srv", "dhcpd-pod");
    pod.exec_ok(&["ip", "link", "set", "eth0", "up"]);
    let _server = dnsmasq(&dnsmasq_bin, &server, &dir);
    let (_daemon, socket) = daemon_with(&dhcp, &dir, &[]);
    let conf = json!({"cniVersion": "1.0.0", "name": "mynet", "type": "ipvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": socket}});
    let plugin = Attachment::at(&Impl::alone("dhcp", &dhcp), "dummy", pod.path_str());
    for round in 0..2 {
        let r = plugin.run_ok("ADD", &conf);
        let ip = r["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .unwrap_or_default()
            .to_string();
        assert!(ip.starts_with("10.91.0."), "{r}");
        let started = Instant::now();
        std::thread::scope(|s| {
            let dels: Vec<_> = (0..3)
                .map(|_| s.spawn(|| plugin.run("DEL", &conf)))
                .collect();
            for d in dels {
                let out = d.join().expect("DEL thread");
                assert!(out.success, "round {round}: {}{}", out.stdout, out.stderr);
            }
        });
        plugin.run_ok("DEL", &conf);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "round {round}: the DELs took {:?}",
            started.elapsed()
        );
        wait_for_release(&dir, &ip);
        assert_eq!(
            count(&dir.join("log"), &format!("DHCPRELEASE(srv0) {ip}")),
            round + 1
        );
    }
}
