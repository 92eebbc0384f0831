//! Bad input never crashes a plugin. Every plugin binary gets valid configs mutated at random
//! (values of the wrong type or out of range, keys removed or added, wrong versions, truncated
//! or corrupted bytes) and a bad environment now and then, for every verb. Each run must end
//! on its own, with no panic, and with either success or a spec error on stdout (a JSON object
//! with an integer `code` and a string `msg`).
//!
//! The runs are reproducible: the seed is printed, and `FERROCNI_FUZZ_SEED` /
//! `FERROCNI_FUZZ_CASES` (cases per plugin, default 60) replay or widen them. The "host" is a
//! throw-away namespace, and every path a plugin could write to points into a temp dir.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use netns_tests::rng::{env_u64, Rng};
use netns_tests::{our_bin_dir, our_binary, require_root, Netns, TempDir};
use serde_json::{json, Map, Value};

/// Longer than any legitimate wait in a plugin (DAD at 5 s, port-up at 2.5 s).
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_CASES: u64 = 60;
/// Error codes the spec defines (CNI 1.1.0, "Error"): 1–7, 11, 50, 51.
const SPEC_CODES: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 11, 50, 51];
const DEFAULT_SEED: u64 = 0x5eed_cafe_f00d_0001;

/// A value of some unexpected shape. Strings never start with `/`, so a mutated path stays
/// inside the run's working directory (a temp dir).
fn odd_value(rng: &mut Rng) -> Value {
    match rng.below(16) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(0),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(1e308),
        7 => json!(-0.5),
        8 => json!(""),
        9 => json!("x".repeat(5000)),
        10 => json!("\u{1f4a5}\u{0}\u{202e}"),
        11 => json!([]),
        12 => json!({}),
        13 => json!([1, "a", null, {"k": []}]),
        14 => {
            // Deeper than any parser should follow.
            let mut v = json!(1);
            for _ in 0..200 {
                v = json!([v]);
            }
            v
        }
        _ => {
            let alphabet = b"abz09.-_:;=,[]{}%\\ \t\"'";
            let len = rng.below(40);
            let s: String = (0..len).map(|_| *rng.pick(alphabet) as char).collect();
            json!(s)
        }
    }
}

/// Every path (as keys/indexes) to a node of `v`.
fn paths(v: &Value, prefix: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                prefix.push(json!(k));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(json!(i));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(v: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |node, key| match key {
        Value::String(k) => node.get_mut(k.as_str()),
        Value::Number(i) => node.get_mut(i.as_u64()? as usize),
        _ => None,
    })
}

/// One structural mutation of `conf`.
fn mutate(conf: &mut Value, rng: &mut Rng) {
    let mut all = Vec::new();
    paths(conf, &mut Vec::new(), &mut all);
    let path = rng.pick(&all).clone();
    match rng.below(5) {
        // Replace a value (the root only rarely: that is just "not an object").
        0 | 1 if !path.is_empty() || rng.chance(5) => {
            if let Some(node) = node_mut(conf, &path) {
                *node = odd_value(rng);
            }
        }
        // Remove a key or element.
        2 if !path.is_empty() => {
            let (last, parent) = path.split_last().unwrap();
            match (node_mut(conf, parent), last) {
                (Some(Value::Object(m)), Value::String(k)) => {
                    m.remove(k);
                }
                (Some(Value::Array(a)), Value::Number(i)) => {
                    a.remove(i.as_u64().unwrap() as usize);
                }
                _ => {}
            }
        }
        // Add an unexpected key to an object.
        3 => {
            if let Some(Value::Object(m)) = node_mut(conf, &path) {
                let key = rng
                    .pick(&[
                        "cniVersion",
                        "name",
                        "type",
                        "prevResult",
                        "ipam",
                        "zzz",
                        "",
                    ])
                    .to_string();
                m.insert(key, odd_value(rng));
            }
        }
        // A version of any kind.
        _ => {
            if let Value::Object(m) = conf {
                let v = rng.pick(&[
                    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "9.9.9", "",
                    "1.0", "abc", "1.1.0.0",
                ]);
                m.insert("cniVersion".into(), json!(v));
            }
        }
    }
}

/// Pins every directory `plugin` could write to inside `scratch`, whatever a mutation did to
/// the config (its `type` included: the binary, not the config, decides what is written).
/// Keys are matched as the plugins match them (Go's case folding, the last one wins), so
/// every variant of a key is replaced.
fn pin_paths(conf: &mut Value, plugin: &str, scratch: &Path) {
    fn pin(m: &mut serde_json::Map<String, Value>, key: &str, value: Value) {
        m.retain(|k, _| !libcni::gojson::fold_eq(k, key));
        m.insert(key.into(), value);
    }
    let Value::Object(m) = conf else { return };
    let dir = |name: &str| json!(scratch.join(name));
    for (key, value) in m.iter_mut() {
        if let (true, Value::Object(ipam)) = (libcni::gojson::fold_eq(key, "ipam"), value) {
            pin(ipam, "dataDir", dir("ipam"));
        }
    }
    for (key, value) in m.iter_mut() {
        if let (true, Value::Object(ipam)) = (libcni::gojson::fold_eq(key, "ipam"), value) {
            if plugin == "dhcp" {
                pin(ipam, "daemonSocketPath", dir("dhcp.sock"));
            }
        }
    }
    match plugin {
        "tuning" => pin(m, "dataDir", dir("tuning")),
        "flannel" => {
            pin(m, "subnetFile", json!(scratch.join(FLANNEL_SUBNET_ENV)));
            pin(m, "dataDir", dir("flannel"));
            // flannel hands its `ipam` to host-local: without one (or with a null one) the
            // delegate would use host-local's default store.
            let mut ipam = m
                .iter()
                .rev()
                .find(|(k, v)| libcni::gojson::fold_eq(k, "ipam") && v.is_object())
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| json!({}));
            if let Value::Object(i) = &mut ipam {
                pin(i, "dataDir", dir("ipam"));
            }
            pin(m, "ipam", ipam);
        }
        "host-device" => pin(m, "dataDir", dir("host-device")),
        "firewall" => pin(m, "dataDir", dir("firewall")),
        "vxlan" => {
            pin(m, "stateDir", dir("vxlan"));
            m.retain(|k, _| !libcni::gojson::fold_eq(k, "lockFile"));
        }
        _ => {}
    }
}

/// Serialises `conf`, sometimes damaging the bytes themselves. Damage that still parses (a
/// flipped byte inside a key or a path) is pinned again, so it cannot redirect state out of
/// `scratch`; what stays damaged is input no plugin can read as JSON.
fn to_stdin(conf: &Value, plugin: &str, scratch: &Path, rng: &mut Rng) -> Vec<u8> {
    let mut bytes = conf.to_string().into_bytes();
    match rng.below(10) {
        0 if !bytes.is_empty() => bytes.truncate(rng.below(bytes.len())),
        1 if !bytes.is_empty() => {
            let i = rng.below(bytes.len());
            bytes[i] = rng.next_u64() as u8;
        }
        2 => bytes = vec![0xff, 0xfe, 0x00, b'{'],
        _ => return bytes,
    }
    match libcni::gojson::parse(&bytes) {
        Ok(mut still_json) => {
            pin_paths(&mut still_json, plugin, scratch);
            still_json.to_string().into_bytes()
        }
        Err(_) => bytes,
    }
}

/// Where the plugins keep state when a config names no directory: a run must leave them as
/// it found them.
const DEFAULT_STATE_DIRS: &[&str] = &["/var/lib/cni", "/run/cni", "/run/ferrocni"];

/// Every path under the default state directories.
fn default_state() -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            }
            out.push(path);
        }
    }
    let mut out = Vec::new();
    for dir in DEFAULT_STATE_DIRS {
        let dir = Path::new(dir);
        if dir.exists() {
            out.push(dir.to_path_buf());
            walk(dir, &mut out);
        }
    }
    out.sort();
    out
}

/// A valid plugin environment for `verb`.
fn clean_environment(verb: &str, pod: &Netns) -> Vec<(String, String)> {
    vec![
        ("CNI_COMMAND".into(), verb.into()),
        ("CNI_CONTAINERID".into(), "fuzz-ctr-1".into()),
        ("CNI_NETNS".into(), pod.path_str().into()),
        ("CNI_IFNAME".into(), "eth0".into()),
        ("CNI_PATH".into(), our_bin_dir().display().to_string()),
    ]
}

/// The plugin environment for `verb`, occasionally broken.
fn environment(verb: &str, pod: &Netns, rng: &mut Rng) -> Vec<(String, String)> {
    let mut env = clean_environment(verb, pod);
    if rng.chance(25) {
        let i = rng.below(env.len());
        match rng.below(4) {
            0 => {
                env.remove(i);
            }
            1 => env[i].1 = String::new(),
            2 => {
                env[i].1 = rng
                    .pick(&["a/b", "..", "x".repeat(300).as_str()])
                    .to_string()
            }
            _ => env[i].1 = "/run/netns/ferrocni-fuzz-never-existed".into(),
        }
    }
    if rng.chance(20) {
        let args = rng.pick(&[
            "IP=not-an-ip",
            "IP=10.199.0.9,garbage",
            "MAC=zz:zz",
            "IgnoreUnknown=1;K8S_POD_NAME=a;=;;",
            "IgnoreUnknown=maybe",
            "=",
        ]);
        env.push(("CNI_ARGS".into(), args.to_string()));
    }
    env
}

/// Runs the plugin with a deadline, draining its output on threads so it can never block on
/// a full pipe.
fn run_bounded(
    host: &Netns,
    plugin: &Path,
    env: &[(String, String)],
    stdin: &[u8],
    cwd: &Path,
) -> Result<(Option<i32>, String, String), String> {
    let mut cmd: Command = host.command(&[plugin.to_str().unwrap()]);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let drain = |mut r: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    if let Some(mut input) = child.stdin.take() {
        // The plugin may refuse its environment before reading stdin.
        let _ = input.write_all(stdin);
    }
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {RUN_TIMEOUT:?}"));
        }
        thread::sleep(Duration::from_millis(2));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok((status.code(), stdout, stderr))
}

/// What a run may end with; `None` when it is acceptable.
fn violation(code: Option<i32>, stdout: &str, stderr: &str) -> Option<String> {
    let Some(code) = code else {
        return Some("killed by a signal (a panic aborts)".into());
    };
    if stderr.contains("panicked at") || code == 101 {
        return Some(format!("panicked (exit {code})"));
    }
    if code == 0 {
        return None;
    }
    let err: Value = match serde_json::from_str(stdout) {
        Ok(v) => v,
        Err(e) => return Some(format!("exit {code} without an error JSON on stdout ({e})")),
    };
    let Some(err_code) = err.get("code").and_then(Value::as_u64) else {
        return Some(format!("exit {code}: error JSON lacks an integer code"));
    };
    if !err.get("msg").is_some_and(Value::is_string) {
        return Some(format!("exit {code}: error JSON lacks a msg"));
    }
    // The spec's codes, or the plugin-specific range (the reference uses 999 for internal).
    if !(SPEC_CODES.contains(&err_code) || err_code >= 100) {
        return Some(format!(
            "error code {err_code} is neither a spec code nor >= 100"
        ));
    }
    None
}

/// A real attachment for chained plugins to work on: the bridge's ADD result for `pod`.
fn attach(host: &Netns, pod: &Netns, scratch: &Path) -> Value {
    let conf = bridge_conf(scratch);
    let env = clean_environment("ADD", pod);
    let bridge = our_binary("bridge");
    let (code, out, err) =
        run_bounded(host, &bridge, &env, conf.to_string().as_bytes(), scratch).unwrap();
    assert_eq!(code, Some(0), "bridge ADD for the fuzz pod: {out} {err}");
    serde_json::from_str(&out).unwrap()
}

fn bridge_conf(scratch: &Path) -> Value {
    json!({
        "cniVersion": "1.1.0", "name": "fuzznet", "type": "bridge", "bridge": "fzbr0",
        "isGateway": true, "ipMasq": true, "hairpinMode": true, "mtu": 1400,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.199.0.0/24"}]],
                 "routes": [{"dst": "0.0.0.0/0"}], "dataDir": scratch.join("ipam")},
    })
}

/// The subnet.env the flannel meta-plugin reads (inside the scratch dir).
const FLANNEL_SUBNET_ENV: &str = "flannel-subnet.env";

/// A valid config per plugin, the starting point of every mutation.
fn base_configs(scratch: &Path, prev: &Value) -> Vec<(&'static str, Value)> {
    // flanneld's file for the bridge's subnet, so the delegate joins the same bridge.
    std::fs::write(
        scratch.join(FLANNEL_SUBNET_ENV),
        "FLANNEL_NETWORK=10.199.0.0/16\nFLANNEL_SUBNET=10.199.0.1/24\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\n",
    )
    .unwrap();
    let chained = |kind: &str, extra: Value| {
        let mut c =
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": kind, "prevResult": prev});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    vec![
        (
            "loopback",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "loopback"}),
        ),
        ("bridge", bridge_conf(scratch)),
        (
            "host-local",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "bridge",
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.1.0/24", "rangeStart": "10.199.1.10"}],
                                       [{"subnet": "fd99::/64"}]]}}),
        ),
        (
            "bandwidth",
            chained(
                "bandwidth",
                json!({"ingressRate": 8_000_000, "ingressBurst": 80_000,
                                         "egressRate": 4_000_000, "egressBurst": 40_000}),
            ),
        ),
        (
            "portmap",
            chained(
                "portmap",
                json!({"capabilities": {"portMappings": true}, "snat": true,
                "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]}}),
            ),
        ),
        (
            "firewall",
            chained(
                "firewall",
                json!({"backend": "iptables", "ingressPolicy": "same-bridge"}),
            ),
        ),
        (
            "tuning",
            chained(
                "tuning",
                json!({"mtu": 1300, "promisc": true, "txQLen": 500,
                "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}}),
            ),
        ),
        (
            "flannel",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "flannel",
                   "subnetFile": scratch.join(FLANNEL_SUBNET_ENV), "dataDir": scratch.join("flannel"),
                   "ipam": {"dataDir": scratch.join("ipam")},
                   "delegate": {"bridge": "fzbr0", "hairpinMode": true, "isDefaultGateway": true}}),
        ),
        (
            "ptp",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "ptp", "ipMasq": true, "mtu": 1400,
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.12.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]},
                   "dns": {"nameservers": ["10.199.12.53"]}}),
        ),
        (
            "macvlan",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "macvlan", "master": "fzbr0",
                   "mode": "bridge", "mtu": 1400, "mac": "02:99:00:00:00:01", "bcqueuelen": 100,
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.3.0/24"}]]}}),
        ),
        (
            "ipvlan",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "ipvlan", "master": "fzbr0",
                   "mode": "l3s", "flag": "private", "mtu": 1400,
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.4.0/24"}]]}}),
        ),
        (
            "vlan",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "vlan", "master": "fzbr0",
                   "vlanId": 42, "mtu": 1400,
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.5.0/24"}]]}}),
        ),
        (
            "dummy",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "dummy",
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.6.0/24"}]]}}),
        ),
        (
            "tap",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "tap", "multiQueue": true,
                   "mtu": 1400, "mac": "02:99:00:00:00:02", "owner": 64000, "group": 64001,
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.7.0/24"}]]}}),
        ),
        (
            "host-device",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "host-device", "device": "fzhd0",
                   "dataDir": scratch.join("host-device"),
                   "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                            "ranges": [[{"subnet": "10.199.8.0/24"}]]}}),
        ),
        (
            "static",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "bridge",
                   "ipam": {"type": "static",
                            "addresses": [{"address": "10.199.2.5/24", "gateway": "10.199.2.1"},
                                          {"address": "fd99:2::5/64"}],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dns": {"nameservers": ["10.199.2.53"]}}}),
        ),
        (
            "dhcp",
            json!({"cniVersion": "1.1.0", "name": "fuzznet", "type": "bridge",
                   "ipam": {"type": "dhcp", "daemonSocketPath": scratch.join("dhcp.sock"),
                            "request": [{"skipDefault": false, "option": "subnet-mask"}]}}),
        ),
        ("sbr", chained("sbr", json!({"table": 150}))),
        (
            "ferrocni-policy",
            chained(
                "ferrocni-policy",
                json!({"socket": scratch.join("policy.sock"), "timeout": 2}),
            ),
        ),
        (
            "vrf",
            chained("vrf", json!({"vrfname": "fzvrf0", "table": 1001})),
        ),
        (
            "vxlan",
            chained(
                "vxlan",
                json!({"network": "10.199.0.0/16", "subnet": "10.199.0.0/24",
                "mode": "vxlan", "vni": 42, "device": "fzvx0", "underlayInterface": "fzbr0",
                "localIP": "10.199.0.1",
                "peers": [{"subnet": "10.199.5.0/24", "ip": "10.199.0.77"}]}),
            ),
        ),
    ]
}

const VERBS: &[&str] = &[
    "ADD", "ADD", "CHECK", "DEL", "GC", "STATUS", "VERSION", "FROB",
];

#[test]
fn mutated_configs_and_environments_never_crash_a_plugin() {
    require_root!();
    let seed = env_u64("FERROCNI_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let cases = env_u64("FERROCNI_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    eprintln!("bad input: seed {seed:#x}, {cases} cases per plugin (FERROCNI_FUZZ_SEED to replay)");
    // Spread nearby seeds apart; xorshift needs a non-zero state.
    let mut rng = Rng::new(seed);

    let state_before = default_state();
    let host = Netns::new("fuzz-host");
    let pod = Netns::new("fuzz-pod");
    let scratch = TempDir::new("fuzz");
    let prev = attach(&host, &pod, scratch.path());
    // The device host-device's configs name.
    host.exec_ok(&[
        "ip", "link", "add", "fzhd0", "type", "veth", "peer", "name", "fzhd0p",
    ]);

    let mut failures = Vec::new();
    let mut outcomes = Map::new();
    for (plugin, base) in base_configs(scratch.path(), &prev) {
        let binary = our_binary(plugin);
        let (mut ok, mut errors) = (0u64, 0u64);
        for case in 0..cases {
            let mut conf = base.clone();
            for _ in 0..=rng.below(3) {
                mutate(&mut conf, &mut rng);
            }
            pin_paths(&mut conf, plugin, scratch.path());
            let verb = *rng.pick(VERBS);
            let env = environment(verb, &pod, &mut rng);
            let stdin = to_stdin(&conf, plugin, scratch.path(), &mut rng);
            let outcome = run_bounded(&host, &binary, &env, &stdin, scratch.path())
                .map(|(code, out, err)| (code, violation(code, &out, &err), out, err));
            match outcome {
                Ok((Some(0), None, _, _)) => ok += 1,
                Ok((_, None, _, _)) => errors += 1,
                Ok((_, Some(why), out, err)) => failures.push(format!(
                    "{plugin} case {case} {verb}: {why}\n  env {env:?}\n  stdin {}\n  stdout {out}\n  stderr {err}",
                    String::from_utf8_lossy(&stdin)
                )),
                Err(why) => failures.push(format!(
                    "{plugin} case {case} {verb}: {why}\n  env {env:?}\n  stdin {}",
                    String::from_utf8_lossy(&stdin)
                )),
            }
        }
        outcomes.insert(plugin.into(), json!({"succeeded": ok, "refused": errors}));
    }
    eprintln!("bad input outcomes: {}", Value::Object(outcomes));
    assert_eq!(
        default_state(),
        state_before,
        "a run wrote outside its scratch dir (into {DEFAULT_STATE_DIRS:?})"
    );
    assert!(
        failures.is_empty(),
        "{} runs misbehaved (seed {seed:#x}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn violations_are_recognised() {
    assert!(violation(None, "", "").is_some(), "a signal");
    assert!(violation(Some(101), "", "thread 'main' panicked at x").is_some());
    assert!(violation(Some(1), "not json", "").is_some());
    assert!(violation(Some(1), r#"{"msg":"no code"}"#, "").is_some());
    assert!(violation(Some(1), r#"{"code":42,"msg":"reserved"}"#, "").is_some());
    assert!(violation(Some(1), r#"{"code":7,"msg":"bad config"}"#, "").is_none());
    assert!(violation(Some(1), r#"{"code":999,"msg":"internal"}"#, "").is_none());
    assert!(violation(Some(0), "", "").is_none());
}
