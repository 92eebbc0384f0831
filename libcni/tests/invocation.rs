//! List operations against fake shell-script plugins (no root needed).

mod common;

use common::{FakePlugins, TempDir};
use libcni::api::{CniConfig, GcAttachment, RuntimeConf};
use libcni::cache::ResultCache;
use libcni::conf::NetworkConfigList;
use serde_json::{json, Map, Value};

const RESULT_A: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:00:00:02","sandbox":"/run/netns/x"}],"ips":[{"interface":0,"address":"10.0.0.2/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}]}"#;
const RESULT_B: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:00:00:02","sandbox":"/run/netns/x"}],"ips":[{"interface":0,"address":"10.0.0.2/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}],"dns":{"nameservers":["10.0.0.53"]}}"#;

struct Setup {
    plugins: FakePlugins,
    cache: TempDir,
    cni: CniConfig,
}

fn setup(names: &[&str]) -> Setup {
    let plugins = FakePlugins::new(names);
    let cache = TempDir::new("cache");
    let cni = CniConfig::new(
        vec!["/nonexistent-dir".into(), plugins.path()],
        cache.path(),
    );
    Setup {
        plugins,
        cache,
        cni,
    }
}

fn list(version: &str, extra: Value, plugins: Value) -> NetworkConfigList {
    let mut obj = json!({"cniVersion": version, "name": "testnet", "plugins": plugins});
    for (k, v) in extra.as_object().unwrap() {
        obj[k] = v.clone();
    }
    NetworkConfigList::from_bytes(obj.to_string().as_bytes()).unwrap()
}

fn rt(cid: &str) -> RuntimeConf {
    RuntimeConf {
        container_id: cid.into(),
        netns: "/run/netns/x".into(),
        ifname: "eth0".into(),
        args: vec![("K8S_POD_NAME".into(), "web".into())],
        capability_args:
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
                .as_object()
                .unwrap()
                .clone(),
    }
}

fn two_plugin_list(version: &str) -> NetworkConfigList {
    list(
        version,
        json!({}),
        json!([
            {"type": "plug-a", "name": "first", "custom": {"keep": true}},
            {"type": "plug-b", "capabilities": {"portMappings": true}}
        ]),
    )
}

#[test]
fn add_chains_prev_result_and_caches_it() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    s.plugins.reply("plug-b", "ADD", RESULT_B);
    let l = two_plugin_list("1.0.0");

    let result = s.cni.add_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(result["dns"]["nameservers"][0], "10.0.0.53");
    assert_eq!(s.plugins.call_names(), ["plug-a ADD", "plug-b ADD"]);
    assert_eq!(
        s.plugins.calls()[0],
        format!("plug-a ADD cid=c1 if=eth0 netns=/run/netns/x args=K8S_POD_NAME=web")
    );

    let a_in = s.plugins.stdin("plug-a", "ADD");
    assert_eq!(a_in["name"], "testnet");
    assert_eq!(a_in["cniVersion"], "1.0.0");
    assert_eq!(
        a_in["custom"],
        json!({"keep": true}),
        "unknown keys pass through"
    );
    assert!(a_in.get("prevResult").is_none());
    assert!(
        a_in.get("runtimeConfig").is_none(),
        "plug-a has no capabilities"
    );

    let b_in = s.plugins.stdin("plug-b", "ADD");
    let expected_prev: Value = serde_json::from_str(RESULT_A).unwrap();
    assert_eq!(b_in["prevResult"]["ips"], expected_prev["ips"]);
    assert_eq!(
        b_in["prevResult"]["interfaces"],
        expected_prev["interfaces"]
    );
    assert_eq!(b_in["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);

    // Cached in the Go libcni shape.
    let raw = std::fs::read(s.cache.join("results/testnet-c1-eth0")).unwrap();
    let cached: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["netns"], "/run/netns/x");
    assert_eq!(cached["cniArgs"], json!([["K8S_POD_NAME", "web"]]));
    assert_eq!(cached["result"], result);
    let config = libcni::cache::base64_decode(cached["config"].as_str().unwrap()).unwrap();
    assert_eq!(config, l.bytes);
}

#[test]
fn del_runs_in_reverse_with_cached_result_and_is_repeatable() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    s.plugins.reply("plug-b", "ADD", RESULT_B);
    let l = two_plugin_list("1.0.0");
    let result = s.cni.add_network_list(&l, &rt("c1")).unwrap();
    s.plugins.clear_calls();

    s.cni.del_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(s.plugins.call_names(), ["plug-b DEL", "plug-a DEL"]);
    assert_eq!(s.plugins.stdin("plug-b", "DEL")["prevResult"], result);
    assert_eq!(s.plugins.stdin("plug-a", "DEL")["prevResult"], result);
    assert!(!s.cache.join("results/testnet-c1-eth0").exists());

    // Second DEL: no cache, no prevResult, still fine.
    s.cni.del_network_list(&l, &rt("c1")).unwrap();
    assert!(s.plugins.stdin("plug-a", "DEL").get("prevResult").is_none());
}

#[test]
fn del_with_old_version_sends_no_prev_result() {
    let s = setup(&["plug-a"]);
    s.plugins.reply(
        "plug-a",
        "ADD",
        r#"{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.0.0.2/24"}]}"#,
    );
    let l = list("0.3.1", json!({}), json!([{"type": "plug-a"}]));
    s.cni.add_network_list(&l, &rt("c1")).unwrap();
    s.cni.del_network_list(&l, &rt("c1")).unwrap();
    assert!(s.plugins.stdin("plug-a", "DEL").get("prevResult").is_none());
    assert!(!s.cache.join("results/testnet-c1-eth0").exists());
}

#[test]
fn corrupt_or_empty_cache_never_blocks_del() {
    for content in [
        "",
        "{\"kind\":\"cniCacheV1\",\"result\":",
        "[]",
        "{\"cniVersion\":\"7.7.7\"}",
    ] {
        let s = setup(&["plug-a"]);
        let l = list("1.0.0", json!({}), json!([{"type": "plug-a"}]));
        let path = s.cache.join("results/testnet-c1-eth0");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        s.cni.del_network_list(&l, &rt("c1")).unwrap();
        assert!(
            s.plugins.stdin("plug-a", "DEL").get("prevResult").is_none(),
            "{content:?}"
        );
        assert!(!path.exists(), "{content:?}");
    }
}

#[test]
fn del_failure_keeps_the_cache_for_a_retry() {
    let s = setup(&["plug-a"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    let l = list("1.0.0", json!({}), json!([{"type": "plug-a"}]));
    s.cni.add_network_list(&l, &rt("c1")).unwrap();
    s.plugins
        .fail("plug-a", "DEL", r#"{"code":11,"msg":"busy"}"#, "");
    let err = s.cni.del_network_list(&l, &rt("c1")).unwrap_err();
    assert_eq!(err.code, 11);
    assert_eq!(err.msg, "plugin type=\"plug-a\" failed (delete): busy");
    assert!(s.cache.join("results/testnet-c1-eth0").exists());
}

#[test]
fn check_uses_cached_result_and_honours_version_and_disable_check() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    s.plugins.reply("plug-b", "ADD", RESULT_B);
    let l = two_plugin_list("1.0.0");
    let result = s.cni.add_network_list(&l, &rt("c1")).unwrap();
    s.plugins.clear_calls();

    s.cni.check_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(s.plugins.call_names(), ["plug-a CHECK", "plug-b CHECK"]);
    assert_eq!(s.plugins.stdin("plug-a", "CHECK")["prevResult"], result);

    // The cached 1.0.0 result is converted to a 0.4.0 list's version.
    let l040 = two_plugin_list("0.4.0");
    s.cni.check_network_list(&l040, &rt("c1")).unwrap();
    let prev = &s.plugins.stdin("plug-a", "CHECK")["prevResult"];
    assert_eq!(prev["cniVersion"], "0.4.0");
    assert_eq!(prev["ips"][0]["version"], "4");

    let err = s
        .cni
        .check_network_list(&two_plugin_list("0.3.1"), &rt("c1"))
        .unwrap_err();
    assert_eq!(
        err.msg,
        "configuration version \"0.3.1\" does not support the CHECK command"
    );

    s.plugins.clear_calls();
    let disabled = list(
        "1.0.0",
        json!({"disableCheck": true}),
        json!([{"type": "plug-a"}]),
    );
    s.cni.check_network_list(&disabled, &rt("c1")).unwrap();
    assert!(s.plugins.calls().is_empty());
}

#[test]
fn plugin_errors_are_parsed_and_wrapped() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    s.plugins.fail(
        "plug-b",
        "ADD",
        r#"{"cniVersion":"1.0.0","code":7,"msg":"bad config","details":"field x"}"#,
        "some log line\n",
    );
    let l = two_plugin_list("1.0.0");
    let err = s.cni.add_network_list(&l, &rt("c1")).unwrap_err();
    assert_eq!(err.code, 7);
    assert_eq!(err.msg, "plugin type=\"plug-b\" failed (add): bad config");
    assert_eq!(err.details, "field x");
    assert!(
        !s.cache.join("results/testnet-c1-eth0").exists(),
        "no cache after a failed ADD"
    );

    // Empty stdout: the stderr text becomes the message.
    s.plugins.fail("plug-b", "ADD", "", "exploded\n");
    let err = s.cni.add_network_list(&l, &rt("c1")).unwrap_err();
    assert!(
        err.msg.contains("netplugin failed: \"exploded\\n\""),
        "{}",
        err.msg
    );

    // Nothing at all.
    std::fs::remove_file(s.plugins.dir.join("plug-b.ADD.stderr")).unwrap();
    let err = s.cni.add_network_list(&l, &rt("c1")).unwrap_err();
    assert!(
        err.msg
            .contains("netplugin failed with no error message: exit status 1"),
        "{}",
        err.msg
    );

    // Garbage on stdout.
    s.plugins.fail("plug-b", "ADD", "not json", "");
    let err = s.cni.add_network_list(&l, &rt("c1")).unwrap_err();
    assert!(
        err.msg.contains("error parsing its diagnostic message"),
        "{}",
        err.msg
    );
}

#[test]
fn add_tolerates_null_and_versionless_output() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins.reply("plug-a", "ADD", "null");
    s.plugins
        .reply("plug-b", "ADD", r#"{"ips":[{"address":"10.0.0.9/24"}]}"#);
    let l = two_plugin_list("1.0.0");
    let result = s.cni.add_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["ips"][0]["address"], "10.0.0.9/24");
    assert_eq!(
        s.plugins.stdin("plug-b", "ADD")["prevResult"]["cniVersion"],
        "1.0.0"
    );
}

#[test]
fn add_validates_before_exec_and_finds_plugins() {
    let s = setup(&["plug-a"]);
    let l = list("1.0.0", json!({}), json!([{"type": "plug-a"}]));
    for (cid, ifname, code) in [
        ("", "eth0", 3),
        ("bad/id", "eth0", 4),
        ("c1", "", 4),
        ("c1", "a-very-long-ifname", 4),
    ] {
        let mut r = rt(cid);
        r.ifname = ifname.into();
        assert_eq!(
            s.cni.add_network_list(&l, &r).unwrap_err().code,
            code,
            "{cid:?} {ifname:?}"
        );
    }
    assert!(s.plugins.calls().is_empty());

    let missing = list("1.0.0", json!({}), json!([{"type": "no-such-plugin"}]));
    let err = s.cni.add_network_list(&missing, &rt("c1")).unwrap_err();
    assert!(
        err.msg
            .contains("failed to find plugin \"no-such-plugin\" in path [/nonexistent-dir "),
        "{}",
        err.msg
    );
    let sneaky = list("1.0.0", json!({}), json!([{"type": "../plug-a"}]));
    assert!(s.cni.add_network_list(&sneaky, &rt("c1")).is_err());
    assert!(s.plugins.calls().is_empty());
}

#[test]
fn gc_deletes_stale_attachments_then_sends_gc() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    s.plugins.reply("plug-b", "ADD", RESULT_B);
    let l = two_plugin_list("1.1.0");
    for cid in ["keep", "stale"] {
        s.cni.add_network_list(&l, &rt(cid)).unwrap();
    }
    // An attachment of another network is never touched.
    let other = ResultCache::new(s.cache.path());
    other
        .write(&libcni::cache::CacheEntry {
            container_id: "x".into(),
            network: "othernet".into(),
            ifname: "eth0".into(),
            result: Some(json!({"cniVersion": "1.0.0"})),
            ..Default::default()
        })
        .unwrap();
    s.plugins.clear_calls();

    let valid = [GcAttachment {
        container_id: "keep".into(),
        ifname: "eth0".into(),
    }];
    s.cni.gc_network_list(&l, Some(&valid)).unwrap();
    assert_eq!(
        s.plugins.call_names(),
        ["plug-b DEL", "plug-a DEL", "plug-a GC", "plug-b GC"]
    );
    assert!(s.plugins.calls()[0].contains("cid=stale"));
    let gc_in = s.plugins.stdin("plug-a", "GC");
    let expected = json!([{"containerID": "keep", "ifname": "eth0"}]);
    assert_eq!(gc_in["cni.dev/valid-attachments"], expected);
    assert_eq!(gc_in["cni.dev/attachments"], expected);
    assert_eq!(gc_in["name"], "testnet");
    assert!(gc_in.get("prevResult").is_none());
    assert!(s.cache.join("results/testnet-keep-eth0").exists());
    assert!(!s.cache.join("results/testnet-stale-eth0").exists());
    assert!(s.cache.join("results/othernet-x-eth0").exists());

    // No valid list: every attachment goes, and no attachment key is sent.
    s.plugins.clear_calls();
    s.cni.gc_network_list(&l, None).unwrap();
    assert!(!s.cache.join("results/testnet-keep-eth0").exists());
    assert!(s
        .plugins
        .stdin("plug-b", "GC")
        .get("cni.dev/valid-attachments")
        .is_none());

    // disableGC: nothing runs.
    s.plugins.clear_calls();
    let disabled = list(
        "1.1.0",
        json!({"disableGC": "true"}),
        json!([{"type": "plug-a"}]),
    );
    s.cni.gc_network_list(&disabled, None).unwrap();
    assert!(s.plugins.calls().is_empty());
}

#[test]
fn gc_collects_every_error_and_skips_plugin_gc_before_1_1_0() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins
        .fail("plug-a", "GC", r#"{"code":999,"msg":"a broke"}"#, "");
    s.plugins
        .fail("plug-b", "GC", r#"{"code":999,"msg":"b broke"}"#, "");
    let l = two_plugin_list("1.1.0");
    let err = s.cni.gc_network_list(&l, Some(&[])).unwrap_err();
    assert!(
        err.msg.contains("failed to GC plugin plug-a: a broke"),
        "{}",
        err.msg
    );
    assert!(
        err.msg.contains("failed to GC plugin plug-b: b broke"),
        "{}",
        err.msg
    );

    s.plugins.clear_calls();
    s.cni
        .gc_network_list(&two_plugin_list("1.0.0"), Some(&[]))
        .unwrap();
    assert!(s.plugins.calls().is_empty());
}

#[test]
fn status_is_gated_by_version_and_returns_first_error() {
    let s = setup(&["plug-a", "plug-b"]);
    s.cni
        .get_status_network_list(&two_plugin_list("1.0.0"))
        .unwrap();
    assert!(s.plugins.calls().is_empty());

    s.cni
        .get_status_network_list(&two_plugin_list("1.1.0"))
        .unwrap();
    assert_eq!(s.plugins.call_names(), ["plug-a STATUS", "plug-b STATUS"]);
    assert_eq!(s.plugins.stdin("plug-a", "STATUS")["cniVersion"], "1.1.0");

    s.plugins.clear_calls();
    s.plugins.fail(
        "plug-a",
        "STATUS",
        r#"{"code":50,"msg":"no addresses left"}"#,
        "",
    );
    let err = s
        .cni
        .get_status_network_list(&two_plugin_list("1.1.0"))
        .unwrap_err();
    assert_eq!((err.code, err.msg.as_str()), (50, "no addresses left"));
    assert_eq!(s.plugins.call_names(), ["plug-a STATUS"]);
}

#[test]
fn version_info_and_list_validation() {
    let s = setup(&["plug-a", "plug-b"]);
    s.plugins.reply(
        "plug-a",
        "VERSION",
        r#"{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}"#,
    );
    s.plugins.fail(
        "plug-b",
        "VERSION",
        r#"{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}"#,
        "",
    );
    let info = s.cni.get_version_info("plug-a").unwrap();
    assert_eq!(info.supported_versions, ["0.4.0", "1.0.0", "1.1.0"]);
    assert!(s.plugins.calls()[0].contains("netns=dummy"));
    assert_eq!(
        s.cni.get_version_info("plug-b").unwrap().supported_versions,
        ["0.1.0"]
    );

    let l = list(
        "1.0.0",
        json!({}),
        json!([{"type": "plug-a", "capabilities": {"ips": true, "mac": false}}]),
    );
    assert_eq!(s.cni.validate_network_list(&l).unwrap(), ["ips"]);
    let err = s
        .cni
        .validate_network_list(&two_plugin_list("1.0.0"))
        .unwrap_err();
    assert!(
        err.msg
            .contains("plug-b does not support config version \"1.0.0\""),
        "{}",
        err.msg
    );
}

#[test]
fn cached_config_and_attachments() {
    let s = setup(&["plug-a"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    let l = list("1.0.0", json!({}), json!([{"type": "plug-a"}]));
    s.cni.add_network_list(&l, &rt("c1")).unwrap();
    let bare = RuntimeConf {
        container_id: "c1".into(),
        ifname: "eth0".into(),
        ..Default::default()
    };
    let (bytes, cached_rt) = s
        .cni
        .network_list_cached_config(&l, &bare)
        .unwrap()
        .unwrap();
    assert_eq!(bytes, l.bytes);
    assert_eq!(cached_rt.args, rt("c1").args);
    assert_eq!(cached_rt.capability_args, rt("c1").capability_args);
    let atts = s.cni.cached_attachments(Some("c1")).unwrap();
    assert_eq!(atts.len(), 1);
    assert_eq!(atts[0].netns, "/run/netns/x");
    assert!(s
        .cni
        .network_list_cached_result(&l, &rt("nope"))
        .unwrap()
        .is_none());
    let _: Map<String, Value> = Map::new();
}

#[test]
fn text_file_busy_is_retried() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = TempDir::new("etxtbsy");
    let path = dir.join("busy-plugin");
    // Keep the binary open for writing, as an installer replacing it would: exec fails with
    // ETXTBSY until the writer closes it.
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(&path)
        .unwrap();
    writer
        .write_all(b"#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\"}'\n")
        .unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1200));
        drop(writer);
    });
    let start = std::time::Instant::now();
    let out = libcni::invoke::exec_plugin(&path, b"{}", &[]).unwrap();
    closer.join().unwrap();
    assert!(start.elapsed() >= std::time::Duration::from_secs(1));
    assert_eq!(
        String::from_utf8(out).unwrap().trim(),
        r#"{"cniVersion":"1.0.0"}"#
    );
}

#[test]
fn single_plugin_calls_run_a_one_plugin_list_and_cache_the_plugin_config() {
    let s = setup(&["plug-a"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    let raw = json!({"cniVersion": "1.0.0", "name": "single", "type": "plug-a", "custom": 1});
    let plugin = libcni::conf::PluginConf::from_map(raw.as_object().unwrap().clone()).unwrap();

    let result = s.cni.add_network(&plugin, &rt("c1")).unwrap();
    assert_eq!(result["ips"][0]["address"], "10.0.0.2/24");
    let a_in = s.plugins.stdin("plug-a", "ADD");
    assert_eq!(
        (&a_in["name"], &a_in["custom"]),
        (&json!("single"), &json!(1))
    );
    // The cache entry holds the plugin's own configuration, as the Go libcni's AddNetwork.
    let cached: Value =
        serde_json::from_slice(&std::fs::read(s.cache.join("results/single-c1-eth0")).unwrap())
            .unwrap();
    let config = libcni::cache::base64_decode(cached["config"].as_str().unwrap()).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&config).unwrap(), raw);

    s.cni.check_network(&plugin, &rt("c1")).unwrap();
    assert_eq!(s.plugins.stdin("plug-a", "CHECK")["prevResult"], result);
    s.cni.del_network(&plugin, &rt("c1")).unwrap();
    assert_eq!(s.plugins.stdin("plug-a", "DEL")["prevResult"], result);
    assert!(!s.cache.join("results/single-c1-eth0").exists());
    s.cni.del_network(&plugin, &rt("c1")).unwrap();
}

#[test]
fn configs_larger_than_a_pipe_reach_the_plugin_whole() {
    let s = setup(&["plug-a"]);
    s.plugins.reply("plug-a", "ADD", RESULT_A);
    // Over any pipe's capacity: written from a helper thread while the plugin runs.
    let big = "x".repeat(300 * 1024);
    let l = list("1.0.0", json!({}), json!([{"type": "plug-a", "blob": big}]));
    s.cni.add_network_list(&l, &rt("c1")).unwrap();
    assert_eq!(
        s.plugins.stdin("plug-a", "ADD")["blob"]
            .as_str()
            .unwrap()
            .len(),
        big.len()
    );
}
