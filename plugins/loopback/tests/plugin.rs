//! Runs the built `loopback` binary against throw-away netns, and differentially against the
//! reference `/usr/lib/cni/loopback` when it is installed.

use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use netkit::skip_unless_root;
use netkit::testutil::TestNetns;
use serde_json::{json, Value};

const OURS: &str = env!("CARGO_BIN_EXE_loopback");
const REFERENCE: &str = "/usr/lib/cni/loopback";

/// Environment variables for one plugin run.
type EnvVars = Vec<(&'static str, &'static str)>;

struct Run {
    code: i32,
    stdout: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }
}

fn run(bin: &str, env: &[(&str, &str)], stdin: &str) -> Run {
    let mut child = Command::new(bin)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn plugin");
    let written = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    // A plugin refusing its environment exits before reading stdin, closing the pipe.
    if let Err(e) = written {
        assert_eq!(
            e.kind(),
            ErrorKind::BrokenPipe,
            "write the plugin's stdin: {e}"
        );
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

fn conf(version: &str) -> String {
    format!(r#"{{"cniVersion":"{version}","name":"lo-test","type":"loopback"}}"#)
}

fn cni(bin: &str, cmd: &str, netns: &str, stdin: &str) -> Run {
    run(
        bin,
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "ctr-1"),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "lo"),
            ("CNI_PATH", "/usr/lib/cni"),
        ],
        stdin,
    )
}

fn lo_is_up(ns: &TestNetns) -> bool {
    let mut s = ns.socket().unwrap();
    let up = s.link_by_name("lo").unwrap().is_up();
    let flags = ns.ip_json(&["link", "show", "dev", "lo"])[0]["flags"].to_string();
    assert_eq!(
        up,
        flags.contains("\"UP\""),
        "netlink and ip disagree: {flags}"
    );
    up
}

fn reference_present() -> bool {
    if Path::new(REFERENCE).exists() {
        true
    } else {
        eprintln!("skipping: {REFERENCE} not installed");
        false
    }
}

#[test]
fn add_brings_lo_up_and_reports_its_addresses() {
    skip_unless_root!();
    let ns = TestNetns::new("lo-add");
    let path = ns.path().display().to_string();
    assert!(!lo_is_up(&ns));
    let r = cni(OURS, "ADD", &path, &conf("1.0.0"));
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(lo_is_up(&ns));
    assert_eq!(
        r.json(),
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": path}],
            "ips": [
                {"interface": 0, "address": "127.0.0.1/8"},
                {"interface": 0, "address": "::1/128"}
            ]
        })
    );
    // CHECK right after ADD passes.
    let r = cni(OURS, "CHECK", &path, &conf("1.0.0"));
    assert_eq!(r.code, 0, "{}", r.stdout);
}

#[test]
fn add_ignores_ifname() {
    skip_unless_root!();
    let ns = TestNetns::new("lo-ifn");
    let path = ns.path().display().to_string();
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "ctr-1"),
        ("CNI_NETNS", path.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/usr/lib/cni"),
    ];
    let r = run(OURS, &env, &conf("1.0.0"));
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(r.json()["interfaces"][0]["name"], "lo");
    assert!(lo_is_up(&ns));
}

#[test]
fn add_passes_prev_result_through() {
    skip_unless_root!();
    let ns = TestNetns::new("lo-prev");
    let path = ns.path().display().to_string();
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "0a:58:0a:00:00:05", "sandbox": path}],
        "ips": [{"interface": 0, "address": "10.0.0.5/24", "gateway": "10.0.0.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
        "dns": {"nameservers": ["10.0.0.10"]}
    });
    let stdin =
        json!({"cniVersion": "1.0.0", "name": "lo-test", "type": "loopback", "prevResult": prev})
            .to_string();
    let r = cni(OURS, "ADD", &path, &stdin);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(r.json(), prev);
    assert!(lo_is_up(&ns));
}

#[test]
fn add_rejects_a_non_loopback_address_on_lo() {
    skip_unless_root!();
    let ns = TestNetns::new("lo-bad");
    ns.ip(&["addr", "add", "10.99.0.1/32", "dev", "lo"]);
    let r = cni(
        OURS,
        "ADD",
        &ns.path().display().to_string(),
        &conf("1.0.0"),
    );
    assert_eq!(r.code, 1);
    let j = r.json();
    assert_eq!(j["code"], 999);
    assert_eq!(
        j["msg"],
        "loopback interface found with non-loopback address \"10.99.0.1\""
    );
}

#[test]
fn del_sets_lo_down_and_is_idempotent() {
    skip_unless_root!();
    let ns = TestNetns::new("lo-del");
    let path = ns.path().display().to_string();
    assert_eq!(cni(OURS, "ADD", &path, &conf("1.0.0")).code, 0);
    assert!(lo_is_up(&ns));
    for _ in 0..2 {
        let r = cni(OURS, "DEL", &path, &conf("1.0.0"));
        assert_eq!((r.code, r.stdout.as_str()), (0, ""));
        assert!(!lo_is_up(&ns));
    }
    // CHECK now reports lo down.
    let r = cni(OURS, "CHECK", &path, &conf("1.0.0"));
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["msg"], "loopback interface is down");
}

#[test]
fn del_succeeds_when_netns_is_gone_or_empty() {
    let r = cni(
        OURS,
        "DEL",
        "/run/netns/ferrocni-never-existed",
        &conf("1.0.0"),
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    let env = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "ctr-1"),
        ("CNI_IFNAME", "lo"),
        ("CNI_PATH", "/x"),
    ];
    let r = run(OURS, &env, &conf("1.0.0"));
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
}

#[test]
fn add_to_a_missing_netns_fails_cleanly() {
    let r = cni(
        OURS,
        "ADD",
        "/run/netns/ferrocni-never-existed",
        &conf("1.0.0"),
    );
    assert_eq!(r.code, 1);
    let j = r.json();
    assert_eq!(j["code"], 999);
    assert!(
        j["msg"]
            .as_str()
            .unwrap()
            .contains("/run/netns/ferrocni-never-existed"),
        "{j}"
    );
}

#[test]
fn status_and_gc_succeed() {
    for cmd in ["STATUS", "GC"] {
        let r = run(
            OURS,
            &[("CNI_COMMAND", cmd), ("CNI_PATH", "/usr/lib/cni")],
            &conf("1.1.0"),
        );
        assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{cmd}");
    }
}

/// The reference (v1.1.1, and main too) labels its 1.0-shaped result with the request version
/// without converting it, and prints `"dns": {}`. Normalise those quirks before comparing.
fn reference_equivalent(ours: &Value, reference: &Value, version: &str) {
    let mut reference = reference.clone();
    if reference["dns"] == json!({}) {
        reference.as_object_mut().unwrap().remove("dns");
    }
    match version {
        "1.0.0" | "1.1.0" => assert_eq!(ours, &reference),
        "0.3.0" | "0.3.1" | "0.4.0" => {
            // Spec-correct 0.4.0 carries ips[].version; the reference omits it.
            let mut ours = ours.clone();
            for ip in ours["ips"].as_array_mut().unwrap() {
                ip.as_object_mut().unwrap().remove("version");
            }
            assert_eq!(ours, reference);
        }
        _ => {
            // 0.1.0/0.2.0: ours is the ip4/ip6 shape; the reference prints the 1.0 shape.
            let ips: Vec<&Value> = reference["ips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| &i["address"])
                .collect();
            assert_eq!(ours["cniVersion"], reference["cniVersion"]);
            assert_eq!(&ours["ip4"]["ip"], ips[0]);
            assert_eq!(&ours["ip6"]["ip"], ips[1]);
        }
    }
}

#[test]
fn add_matches_reference() {
    skip_unless_root!();
    if !reference_present() {
        return;
    }
    for version in ["1.0.0", "0.4.0", "0.3.1", "0.2.0"] {
        let ours_ns = TestNetns::new("lo-dif-o");
        let ref_ns = TestNetns::new("lo-dif-r");
        let ours = cni(
            OURS,
            "ADD",
            &ours_ns.path().display().to_string(),
            &conf(version),
        );
        let reference = cni(
            REFERENCE,
            "ADD",
            &ref_ns.path().display().to_string(),
            &conf(version),
        );
        assert_eq!(
            (ours.code, reference.code),
            (0, 0),
            "{version}: {} / {}",
            ours.stdout,
            reference.stdout
        );
        // Sandboxes differ only by netns name.
        let ours_json: Value =
            serde_json::from_str(&ours.stdout.replace(ours_ns.name(), "NS")).unwrap();
        let ref_json: Value =
            serde_json::from_str(&reference.stdout.replace(ref_ns.name(), "NS")).unwrap();
        reference_equivalent(&ours_json, &ref_json, version);
        assert_eq!(lo_is_up(&ours_ns), lo_is_up(&ref_ns));

        for _ in 0..2 {
            let o = cni(
                OURS,
                "DEL",
                &ours_ns.path().display().to_string(),
                &conf(version),
            );
            let r = cni(
                REFERENCE,
                "DEL",
                &ref_ns.path().display().to_string(),
                &conf(version),
            );
            assert_eq!(
                (o.code, o.stdout.as_str()),
                (r.code, r.stdout.as_str()),
                "{version} DEL"
            );
            assert_eq!(lo_is_up(&ours_ns), lo_is_up(&ref_ns));
        }
    }
}

#[test]
fn errors_match_reference() {
    if !reference_present() {
        return;
    }
    let full = |cmd: &'static str| {
        vec![
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "ctr-1"),
            ("CNI_NETNS", "/run/netns/ferrocni-never-existed"),
            ("CNI_IFNAME", "lo"),
            ("CNI_PATH", "/usr/lib/cni"),
        ]
    };
    let cases: Vec<(&str, EnvVars, String)> = vec![
        (
            "missing env",
            vec![("CNI_COMMAND", "ADD"), ("CNI_PATH", "/x")],
            conf("1.0.0"),
        ),
        (
            "missing ifname",
            full("ADD")
                .into_iter()
                .filter(|(k, _)| *k != "CNI_IFNAME")
                .collect(),
            conf("1.0.0"),
        ),
        ("bad json", full("ADD"), "{bad".to_string()),
        ("unknown version", full("ADD"), conf("9.9.9")),
        ("unknown command", full("FROB"), conf("1.0.0")),
        (
            "missing name",
            full("ADD"),
            r#"{"cniVersion":"1.0.0","type":"loopback"}"#.to_string(),
        ),
        ("check at 0.3.1", full("CHECK"), conf("0.3.1")),
        ("del of a missing netns", full("DEL"), conf("1.0.0")),
    ];
    for (what, env, stdin) in cases {
        let o = run(OURS, &env, &stdin);
        let r = run(REFERENCE, &env, &stdin);
        assert_eq!(
            o.code, r.code,
            "{what}: exit code; ours {:?} reference {:?}",
            o.stdout, r.stdout
        );
        if r.stdout.trim().is_empty() {
            assert!(o.stdout.trim().is_empty(), "{what}: {:?}", o.stdout);
            continue;
        }
        let (oj, rj) = (o.json(), r.json());
        assert_eq!(oj["code"], rj["code"], "{what}: {oj} vs {rj}");
        if what == "missing env" || what == "missing ifname" || what == "unknown version" {
            assert_eq!(oj["msg"], rj["msg"], "{what}");
        }
    }

    // VERSION: both answer; we support every version the reference does (and 1.1.0).
    let o = run(OURS, &[("CNI_COMMAND", "VERSION")], "");
    let r = run(REFERENCE, &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!((o.code, r.code), (0, 0));
    let supported = |v: &Value| -> Vec<String> {
        v["supportedVersions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let ours = supported(&o.json());
    for v in supported(&r.json()) {
        assert!(ours.contains(&v), "missing {v}");
    }
    assert!(ours.contains(&"1.1.0".to_string()));
}
