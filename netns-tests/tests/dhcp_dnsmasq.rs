//! dhcp against a real DHCP server: dnsmasq in a server netns on one end of a veth, the pod
//! on the other, our daemon started by the test (and killed at the end). ADD gets a lease,
//! the daemon renews it at T1 (seen in dnsmasq's log), survives a dnsmasq restart, CHECK
//! and STATUS talk to it, and DEL releases the lease (dnsmasq's lease file empties).

use netns_tests::{our_binary, require_root, skip_unless, Netns, PluginCall, TempDir};
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

fn dnsmasq_path() -> Option<PathBuf> {
    ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// dnsmasq on `srv0`: leases of 2 minutes (its minimum) with T1 = 2 s and T2 = 6 s.
fn dnsmasq(bin: &Path, server: &Netns, dir: &TempDir) -> Guard {
    let child = server
        .command(&[bin.to_str().unwrap()])
        .args([
            "--no-daemon",
            "--conf-file=/dev/null",
            "--port=0",
            "--interface=srv0",
            "--bind-interfaces",
            "--dhcp-range=10.91.0.10,10.91.0.50,255.255.255.0,2m",
            "--dhcp-option=option:T1,2",
            "--dhcp-option=option:T2,6",
            "--log-dhcp",
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

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
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
    let server = Netns::new("dhcp-srv");
    let pod = Netns::new("dhcp-pod");
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
    let mut server_proc = Some(dnsmasq(&dnsmasq_bin, &server, &dir));

    let socket = dir.join("dhcp.sock");
    let daemon_log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let _daemon = Guard(
        Command::new(&dhcp)
            .args(["daemon", "-socketpath"])
            .arg(&socket)
            .args(["-timeout", "1s", "-resendmax", "2s", "-resendtimeout=20s"])
            .arg(format!("-pidfile={}", dir.join("daemon.pid").display()))
            .stdout(Stdio::null())
            .stderr(daemon_log)
            .spawn()
            .expect("start the dhcp daemon"),
    );
    wait_for("the daemon socket", Duration::from_secs(5), || {
        socket.exists()
    });

    let conf = json!({"cniVersion": "1.1.0", "name": "dhcp-net", "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": socket,
                 "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"}],
                 "request": [{"option": "121"}]}});
    let call = |cmd: &str| {
        PluginCall::new(&dhcp, cmd, "dhcp-cid", pod.path_str(), "eth0")
            .env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web-0")
    };
    let result = call("ADD").run_ok(&conf);
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
    assert_eq!(call("ADD").run_ok(&conf)["ips"][0]["address"], address);
    let mut check = conf.clone();
    check["prevResult"] = result.clone();
    call("CHECK").run_ok(&check);
    call("STATUS").run_ok(&conf);

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
    call("DEL").run_ok(&conf);
    wait_for("the release", Duration::from_secs(5), || {
        !std::fs::read_to_string(dir.join("leases"))
            .unwrap_or_default()
            .contains(&ip)
    });
    assert!(count(&log, &format!("DHCPRELEASE(srv0) {ip}")) > 0);
    call("DEL").run_ok(&conf);
    let out = call("CHECK").run(&check);
    assert!(!out.success, "CHECK after DEL: {}", out.stdout);
    drop(server_proc);
}

#[test]
fn plugin_without_a_daemon() {
    let dhcp = our_binary("dhcp");
    let dir = TempDir::new("dhcp-nodaemon");
    let conf = json!({"cniVersion": "1.1.0", "name": "dhcp-net",
        "ipam": {"type": "dhcp", "daemonSocketPath": dir.join("none.sock")}});
    let call = |cmd: &str| PluginCall::new(&dhcp, cmd, "cid", "/run/netns/x", "eth0");
    let out = call("ADD").run(&conf);
    assert_eq!(out.json["code"], 11, "{}", out.stdout);
    // Nothing can be held without a daemon: DEL and GC succeed, STATUS says not available.
    call("DEL").run_ok(&conf);
    call("GC").run_ok(&conf);
    assert_eq!(call("STATUS").run(&conf).json["code"], 50);
    let bad: Value = json!({"cniVersion": "1.1.0", "name": "dhcp-net",
        "ipam": {"type": "dhcp", "request": [{"option": "no-such-option"}]}});
    assert_eq!(call("ADD").run(&bad).json["code"], 7);
}
