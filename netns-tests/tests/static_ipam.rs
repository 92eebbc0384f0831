//! static IPAM: the same configs and CNI_ARGS through ours and the reference give the same
//! result (or both fail), and the example conflist addresses a pod on a bridge end to end.

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{
    our_bin_dir, our_binary, reference_plugin_dir, require_root, skip_unless, workspace_root,
    Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};

fn conf(version: &str, ipam: Value) -> Value {
    json!({"cniVersion": version, "name": "static-test", "type": "bridge", "ipam": ipam})
}

/// The cases compared with the reference: (config, CNI_ARGS).
fn cases() -> Vec<(Value, &'static str)> {
    let full = json!({"type": "static",
        "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
                      {"address": "3ffe:ffff:0:01ff::1/64", "gateway": "3ffe:ffff:0::1"}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.5.1"},
                   {"dst": "3ffe:ffff:0:01ff::1/64"}],
        "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"],
                "options": ["ndots:2"]}});
    let mut with_args = conf("1.0.0", json!({"type": "static"}));
    with_args["args"] = json!({"cni": {"ips": ["10.30.0.2/24", "fd30::2/64"]}});
    let mut with_runtime = with_args.clone();
    with_runtime["runtimeConfig"] = json!({"ips": ["10.40.0.2/24"]});
    vec![
        (conf("1.0.0", full.clone()), ""),
        (conf("0.4.0", full.clone()), ""),
        (conf("0.3.1", full.clone()), ""),
        (
            conf(
                "0.2.0",
                json!({"type": "static", "addresses": [{"address": "10.1.0.2/16"}]}),
            ),
            "",
        ),
        (conf("0.2.0", full), ""),
        (
            conf("1.0.0", json!({"type": "static"})),
            "IP=10.20.0.5/24,fd20::5/64;GATEWAY=10.20.0.1,fd20::1",
        ),
        (
            conf(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "10.1.0.2/16"}]}),
            ),
            "IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.20.0.5/24",
        ),
        (conf("1.0.0", json!({"type": "static"})), "FOO=bar"),
        (with_args.clone(), "IP=10.20.0.5/24"),
        (with_runtime, ""),
        (
            conf(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "10.1.0.2"}]}),
            ),
            "",
        ),
        (
            conf(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "10.1.0.2/24", "gateway": "bad"}]}),
            ),
            "",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "static-test", "type": "bridge"}),
            "",
        ),
    ]
}

fn run(binary: &std::path::Path, command: &str, config: &Value, cni_args: &str) -> (bool, Value) {
    let out = Attachment::at(&Impl::alone("static", binary), "static-cid", "/nonexistent")
        .cni_args(cni_args)
        .run(command, config);
    (out.success, out.json)
}

/// The Go libraries print an empty `"dns": {}` in every result version; libcni omits it.
fn without_empty_dns(mut v: Value) -> Value {
    if v.get("dns").is_some_and(|d| d == &json!({})) {
        v.as_object_mut().unwrap().remove("dns");
    }
    v
}

#[test]
fn results_match_the_reference() {
    let reference = skip_unless!(
        reference_plugin_dir(&["static"]),
        "reference static plugin not installed"
    );
    let ours = our_binary("static");
    for (config, cni_args) in cases() {
        let (ok_ours, out_ours) = run(&ours, "ADD", &config, cni_args);
        let (ok_ref, out_ref) = run(&reference.join("static"), "ADD", &config, cni_args);
        assert_eq!(
            ok_ours, ok_ref,
            "{config} CNI_ARGS={cni_args}\nours: {out_ours}\nreference: {out_ref}"
        );
        if ok_ours {
            assert_eq!(
                without_empty_dns(out_ours),
                without_empty_dns(out_ref),
                "{config} CNI_ARGS={cni_args}: results differ"
            );
        } else {
            assert!(out_ours["code"].as_u64().is_some(), "{out_ours}");
        }
        // DEL never holds anything; both succeed for valid configs.
        if ok_ours {
            assert!(run(&ours, "DEL", &config, cni_args).0);
        }
    }
}

#[test]
fn check_needs_the_configured_addresses_in_prev_result() {
    let ours = our_binary("static");
    let mut config = conf(
        "1.0.0",
        json!({"type": "static", "addresses": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1"}]}),
    );
    let (ok, result) = run(&ours, "ADD", &config, "");
    assert!(ok, "{result}");
    config["prevResult"] = result.clone();
    assert!(run(&ours, "CHECK", &config, "").0);
    config["prevResult"]["ips"][0]["gateway"] = json!("10.1.0.9");
    assert!(!run(&ours, "CHECK", &config, "").0);
    config["prevResult"] = json!({"cniVersion": "1.0.0", "ips": []});
    assert!(!run(&ours, "CHECK", &config, "").0);
    config.as_object_mut().unwrap().remove("prevResult");
    let (ok, err) = run(&ours, "CHECK", &config, "");
    assert!(!ok);
    assert_eq!(err["code"], 999, "{err}");
    // GC and STATUS have nothing to do.
    config["cniVersion"] = json!("1.1.0");
    assert!(run(&ours, "GC", &config, "").0);
    assert!(run(&ours, "STATUS", &config, "").0);
}

#[test]
fn example_conflist_addresses_a_pod_on_a_bridge() {
    require_root!();
    for p in ["bridge", "static", "cnitool"] {
        our_binary(p);
    }
    let host = Netns::new("static-host");
    let pod = Netns::new("static-pod");
    let cache = TempDir::new("static-cache");
    let text =
        std::fs::read_to_string(workspace_root().join("conflist-examples/static-bridge.conflist"))
            .unwrap();
    let conf = ConfDir::new();
    conf.write_conflist("10-static.conflist", &text);
    let tool = Cnitool::new(&conf, vec![our_bin_dir()], cache.path()).in_netns(&host);
    let result: Value =
        serde_json::from_str(&tool.run_ok(&["add", "static-net", pod.path_str()])).unwrap();
    let ips: Vec<&str> = result["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap())
        .collect();
    assert_eq!(ips, ["10.77.0.10/24", "fd77::10/64"]);
    assert_eq!(result["dns"]["nameservers"][0], "10.77.0.1");
    let addrs = pod.addresses("eth0");
    assert!(addrs.contains(&"10.77.0.10/24".to_string()), "{addrs:?}");
    assert!(addrs.contains(&"fd77::10/64".to_string()), "{addrs:?}");
    let routes = pod.exec_ok(&["ip", "route", "show", "default"]);
    assert!(routes.contains("via 10.77.0.1"), "{routes}");
    let routes6 = pod.exec_ok(&["ip", "-6", "route", "show", "fd77:1::/64"]);
    assert!(routes6.contains("via fd77::1"), "{routes6}");
    tool.run_ok(&["check", "static-net", pod.path_str()]);
    tool.run_ok(&["del", "static-net", pod.path_str()]);
    tool.run_ok(&["del", "static-net", pod.path_str()]);
    assert!(pod.link("eth0").is_none());
}
