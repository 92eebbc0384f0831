//! Shared pieces of the bandwidth end-to-end tests: the plugin directory for the chain, direct
//! plugin invocation inside the "host" namespace, tc inspection and iperf3 runs.
#![allow(dead_code)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{our_binary, reference_plugin_dir, Netns, TempDir};
use serde_json::{json, Value};

/// A CNI_PATH directory holding `bridge`, `host-local` and `bandwidth` for the chain: our
/// bandwidth always; our bridge and host-local when they answer VERSION, otherwise the
/// reference ones (`FERROCNI_BW_CHAIN=reference` forces the reference ones).
pub struct ChainDir {
    dir: TempDir,
    /// Which plugins came from the reference installation.
    pub reference_used: Vec<&'static str>,
}

impl ChainDir {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn plugin(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// `None` (with a printed line) when neither ours nor the reference provide a plugin.
pub fn chain_dir() -> Option<ChainDir> {
    let dir = TempDir::new("bw-chain");
    let force_reference = std::env::var("FERROCNI_BW_CHAIN").is_ok_and(|v| v == "reference");
    let mut reference_used = Vec::new();
    symlink(our_binary("bandwidth"), dir.join("bandwidth")).unwrap();
    for name in ["bridge", "host-local"] {
        let ours = if force_reference {
            None
        } else {
            working_binary_of_ours(name)
        };
        let target = match ours {
            Some(p) => p,
            None => {
                let reference = reference_plugin_dir(&[name])?;
                reference_used.push(name);
                reference.join(name)
            }
        };
        symlink(target, dir.join(name)).unwrap();
    }
    if reference_used.is_empty() {
        eprintln!("bandwidth e2e: chain = our bridge + host-local + bandwidth");
    } else {
        eprintln!("bandwidth e2e: using the reference {reference_used:?} (ours not available)");
    }
    Some(ChainDir {
        dir,
        reference_used,
    })
}

/// Our binary `name` if it builds and answers VERSION with a JSON version list.
fn working_binary_of_ours(name: &str) -> Option<PathBuf> {
    let path = std::panic::catch_unwind(|| our_binary(name)).ok()?;
    let out = Command::new(&path)
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get("supportedVersions")?.as_array()?;
    Some(path)
}

/// Outcome of one plugin call: exit status and parsed stdout (Null when empty).
pub struct Call {
    pub ok: bool,
    pub stdout: Value,
    pub stderr: String,
}

impl Call {
    pub fn ok(self) -> Value {
        assert!(self.ok, "plugin failed: {} {}", self.stdout, self.stderr);
        self.stdout
    }

    pub fn err(self) -> Value {
        assert!(!self.ok, "plugin unexpectedly succeeded: {}", self.stdout);
        self.stdout
    }
}

/// Runs `plugin` with CNI_COMMAND `verb` inside `host` for container `cid` in `pod`.
pub fn call(
    host: &Netns,
    plugin: &Path,
    cni_path: &Path,
    verb: &str,
    cid: &str,
    pod: &Netns,
    stdin: &Value,
) -> Call {
    call_on(host, plugin, cni_path, verb, (cid, "eth0"), pod, stdin)
}

/// [`call`] for the attachment (`cid`, `ifname`).
pub fn call_on(
    host: &Netns,
    plugin: &Path,
    cni_path: &Path,
    verb: &str,
    (cid, ifname): (&str, &str),
    pod: &Netns,
    stdin: &Value,
) -> Call {
    let imp = Impl {
        label: "bandwidth",
        bin: plugin.to_path_buf(),
        cni_path: cni_path.display().to_string(),
    };
    let out = Attachment::new(&imp, host, cid, pod)
        .ifname(ifname)
        .call(verb, stdin);
    let stdout = if out.stdout.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON from {verb}: {e}"))
    };
    Call {
        ok: out.status.success(),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The bridge + host-local config every test uses (one bridge in the host namespace).
pub fn bridge_conf(net: &str, subnet: &str, ipam_dir: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": net,
        "type": "bridge",
        "bridge": "bwbr0",
        "isGateway": true,
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir}
    })
}

/// The bandwidth plugin's stdin: `limits` merged into a chained config with `prev`.
pub fn bandwidth_conf(net: &str, limits: &Value, prev: &Value) -> Value {
    let mut c =
        json!({"cniVersion": "1.0.0", "name": net, "type": "bandwidth", "prevResult": prev});
    for (k, v) in limits.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// The host-side veth named in a result (interface without a sandbox, not the bridge).
pub fn host_veth(result: &Value) -> String {
    result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i.get("sandbox").is_none() && i["name"].as_str().unwrap().starts_with("veth"))
        .and_then(|i| i["name"].as_str())
        .unwrap_or_else(|| panic!("no host veth in {result}"))
        .to_string()
}

/// The first address of the result, without the prefix length.
pub fn pod_ip(result: &Value) -> String {
    let cidr = result["ips"][0]["address"].as_str().unwrap();
    cidr.split('/').next().unwrap().to_string()
}

/// `tc -j qdisc show dev <dev>` in `ns` (iproute2 reading the kernel state over netlink).
pub fn qdiscs(ns: &Netns, dev: &str) -> Vec<Value> {
    match ns.exec_json(&["tc", "-j", "qdisc", "show", "dev", dev]) {
        Value::Array(a) => a,
        other => panic!("unexpected tc output {other}"),
    }
}

/// The options of the root tbf qdisc on `dev`, if any.
pub fn root_tbf(ns: &Netns, dev: &str) -> Option<Value> {
    qdiscs(ns, dev)
        .into_iter()
        .find(|q| q["kind"] == "tbf" && q["root"] == true)
        .map(|q| {
            assert_eq!(q["handle"], "1:", "{q}");
            q["options"].clone()
        })
}

/// Names of links of `kind` in `ns`.
pub fn links_of_kind(ns: &Netns, kind: &str) -> Vec<String> {
    match ns.exec_json(&["ip", "-j", "link", "show", "type", kind]) {
        Value::Array(a) => a
            .iter()
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// An iperf3 server in a namespace, killed on drop.
pub struct IperfServer {
    child: Child,
    pub port: u16,
}

impl IperfServer {
    pub fn start(ns: &Netns, port: u16) -> IperfServer {
        let child = ns
            .command(&["iperf3", "-s", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 server");
        IperfServer { child, port }
    }
}

impl Drop for IperfServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// TCP goodput measured by iperf3 (receiver side) converted to the on-wire rate TBF shapes:
/// each 1448-byte segment costs 1514 bytes on the veth (Ethernet 14 + IP 20 + TCP 32 with
/// timestamps). `reverse` makes the server send (traffic towards the client's namespace).
pub fn iperf_wire_mbit(
    client: &Netns,
    server: &IperfServer,
    server_ip: &str,
    seconds: u32,
    reverse: bool,
) -> f64 {
    let t = seconds.to_string();
    let port = server.port.to_string();
    let limit = (seconds + 8).to_string();
    let mut argv = vec![
        "timeout", &limit, "iperf3", "-c", server_ip, "-p", &port, "-t", &t, "-O", "1", "-J",
    ];
    if reverse {
        argv.push("-R");
    }
    let mut last = String::new();
    for _ in 0..5 {
        let out = client.exec(&argv);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(bps) = v["end"]["sum_received"]["bits_per_second"].as_f64() {
            return bps * 1514.0 / 1448.0 / 1e6;
        }
        // The server may not be listening yet.
        last = format!(
            "{} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("iperf3 to {server_ip} failed: {last}");
}

/// Asserts `measured` is within ±`pct`% of `want` (both Mbit/s).
pub fn assert_within(what: &str, measured: f64, want: f64, pct: f64) {
    let lo = want * (1.0 - pct / 100.0);
    let hi = want * (1.0 + pct / 100.0);
    assert!(
        (lo..=hi).contains(&measured),
        "{what}: measured {measured:.2} Mbit/s, configured {want} Mbit/s (allowed {lo:.2}..{hi:.2})"
    );
    eprintln!("{what}: {measured:.2} Mbit/s for {want} Mbit/s configured");
}

/// The u32 filter nodes (with actions) under the ingress qdisc of `dev`.
pub fn ingress_filters(ns: &Netns, dev: &str) -> Vec<Value> {
    match ns.exec_json(&["tc", "-j", "filter", "show", "dev", dev, "ingress"]) {
        Value::Array(a) => a
            .into_iter()
            .filter(|f| f["options"].get("actions").is_some())
            .collect(),
        _ => Vec::new(),
    }
}

/// Asserts the tbf options as iproute2 derives them: rate in bytes/s, burst in bytes (from
/// the buffer), latency in µs (from the limit).
pub fn assert_tbf(what: &str, options: &Value, rate_bits: u64, burst_bits: u64, latency_ms: u64) {
    assert_eq!(options["rate"], rate_bits / 8, "{what}: {options}");
    assert_eq!(options["burst"], burst_bits / 8, "{what}: {options}");
    assert_eq!(options["lat"], latency_ms * 1000, "{what}: {options}");
}
