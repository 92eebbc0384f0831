//! The result cache: Go libcni compatible `cniCacheV1` files, legacy files, tolerance.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::TempDir;
use libcni::cache::{
    base64_decode, decode_record, CacheEntry, CacheError, CachedRecord, ResultCache,
};
use serde_json::{json, Value};

const GO_FIXTURE: &str = include_str!("fixtures/go-libcni-cache-v1.json");
const LEGACY_FIXTURE: &str = include_str!("fixtures/legacy-bare-result.json");

fn sample_entry() -> CacheEntry {
    CacheEntry {
        container_id: "c1".into(),
        network: "mynet".into(),
        ifname: "eth0".into(),
        netns: "/run/netns/pod".into(),
        config: br#"{"cniVersion":"1.0.0","name":"mynet","plugins":[{"type":"bridge"}]}"#.to_vec(),
        cni_args: vec![("K8S_POD_NAME".into(), "web".into())],
        capability_args: json!({"mac": "c2:11:22:33:44:55"})
            .as_object()
            .unwrap()
            .clone(),
        result: Some(json!({"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]})),
    }
}

#[test]
fn write_read_round_trip_with_go_shape_and_modes() {
    let dir = TempDir::new("cache");
    let cache = ResultCache::new(dir.join("cni"));
    let entry = sample_entry();
    let path = cache.write(&entry).unwrap();
    assert_eq!(path, dir.join("cni/results/mynet-c1-eth0"));

    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.join("cni/results")), 0o700);

    // Same key order and shape as Go's cachedInfo.
    let raw = std::fs::read_to_string(&path).unwrap();
    let v: Value = serde_json::from_str(&raw).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "kind",
            "containerId",
            "config",
            "ifName",
            "networkName",
            "netns",
            "cniArgs",
            "capabilityArgs",
            "result"
        ]
    );
    assert_eq!(v["kind"], "cniCacheV1");
    assert_eq!(v["cniArgs"], json!([["K8S_POD_NAME", "web"]]));
    assert_eq!(
        base64_decode(v["config"].as_str().unwrap()).unwrap(),
        entry.config
    );

    match cache.read("mynet", "c1", "eth0").unwrap().unwrap() {
        CachedRecord::V1(read) => assert_eq!(*read, entry),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        cache.read_result("mynet", "c1", "eth0").unwrap(),
        entry.result
    );

    // Overwrite is atomic and leaves no temporary file behind.
    cache.write(&entry).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.join("cni/results"))
        .unwrap()
        .collect();
    assert_eq!(names.len(), 1);

    cache.remove("mynet", "c1", "eth0").unwrap();
    assert!(cache.read("mynet", "c1", "eth0").unwrap().is_none());
    cache.remove("mynet", "c1", "eth0").unwrap();
}

#[test]
fn empty_fields_are_omitted_like_go() {
    let dir = TempDir::new("cache-min");
    let cache = ResultCache::new(dir.path());
    let entry = CacheEntry {
        container_id: "c".into(),
        network: "n".into(),
        ifname: "eth0".into(),
        result: Some(json!({"cniVersion":"1.0.0"})),
        ..Default::default()
    };
    let path = cache.write(&entry).unwrap();
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(
        v,
        json!({"kind":"cniCacheV1","containerId":"c","config":"","ifName":"eth0","networkName":"n","result":{"cniVersion":"1.0.0"}})
    );
}

#[test]
fn reads_a_file_written_by_go_libcni() {
    let dir = TempDir::new("cache-go");
    dir.write(
        "results/mynet-cnitool-77383ca0a0715733ca6f-eth0",
        GO_FIXTURE,
    );
    let cache = ResultCache::new(dir.path());
    let record = cache
        .read("mynet", "cnitool-77383ca0a0715733ca6f", "eth0")
        .unwrap()
        .unwrap();
    let CachedRecord::V1(entry) = record else {
        panic!("expected cniCacheV1")
    };
    assert_eq!(entry.netns, "/var/run/netns/testing");
    assert_eq!(
        entry.cni_args,
        [
            ("K8S_POD_NAMESPACE".to_string(), "default".to_string()),
            ("K8S_POD_NAME".to_string(), "web".to_string())
        ]
    );
    assert_eq!(entry.capability_args["portMappings"][0]["hostPort"], 8080);
    let config: Value = serde_json::from_slice(&entry.config).unwrap();
    assert_eq!(config["plugins"][0]["ipam"]["subnet"], "10.22.0.0/16");
    assert_eq!(
        entry.result.as_ref().unwrap()["ips"][0]["address"],
        "10.22.0.2/16"
    );

    // Re-encoding gives byte-identical output to what Go wrote.
    assert_eq!(
        String::from_utf8(libcni::cache::encode_entry(&entry)).unwrap(),
        GO_FIXTURE.trim_end()
    );

    let all = cache.list_attachments(Some("mynet"), None).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].container_id, "cnitool-77383ca0a0715733ca6f");
}

#[test]
fn legacy_bare_result_is_readable() {
    let dir = TempDir::new("cache-legacy");
    dir.write("results/net-c9-eth0", LEGACY_FIXTURE);
    let cache = ResultCache::new(dir.path());
    let result = cache.read_result("net", "c9", "eth0").unwrap().unwrap();
    assert_eq!(result["cniVersion"], "0.3.1");
    // Legacy files carry no identity: not listed as attachments.
    assert!(cache.list_attachments(None, None).unwrap().is_empty());
    assert!(matches!(
        decode_record(LEGACY_FIXTURE.as_bytes()),
        Ok(CachedRecord::Legacy(_))
    ));
}

#[test]
fn corrupt_empty_and_missing_entries() {
    let dir = TempDir::new("cache-bad");
    let cache = ResultCache::new(dir.path());
    assert!(cache.read_result("net", "c1", "eth0").unwrap().is_none());

    dir.write("results/net-c1-eth0", "");
    assert!(matches!(
        cache.read_result("net", "c1", "eth0"),
        Err(CacheError::Corrupt { .. })
    ));
    dir.write(
        "results/net-c1-eth0",
        r#"{"kind":"cniCacheV1","containerId":"c1","#,
    );
    let err = cache
        .read_result("net", "c1", "eth0")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("corrupt") && err.contains("net-c1-eth0"),
        "{err}"
    );
    dir.write(
        "results/net-c1-eth0",
        r#"{"kind":"cniCacheV1","config":"%%%"}"#,
    );
    assert!(cache.read("net", "c1", "eth0").is_err());
    dir.write(
        "results/net-c1-eth0",
        r#"{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0","networkName":"net"}"#,
    );
    assert!(matches!(
        cache.read_result("net", "c1", "eth0"),
        Err(CacheError::Corrupt { .. })
    ));
}

#[test]
fn keys_cannot_escape_the_results_dir() {
    let cache = ResultCache::new("/nonexistent-cache");
    assert!(matches!(
        cache.file_path("", "c", "eth0"),
        Err(CacheError::MissingKey { .. })
    ));
    assert!(matches!(
        cache.file_path("n", "../../etc", "eth0"),
        Err(CacheError::UnsafeKey(_))
    ));
    assert!(matches!(
        cache.file_path("..", "c", "eth0"),
        Err(CacheError::UnsafeKey(_))
    ));
}

#[test]
fn list_attachments_filters_and_skips_junk() {
    let dir = TempDir::new("cache-list");
    let cache = ResultCache::new(dir.path());
    for (net, cid, ifname) in [
        ("a", "c1", "eth0"),
        ("a", "c2", "eth0"),
        ("b", "c1", "eth1"),
    ] {
        cache
            .write(&CacheEntry {
                container_id: cid.into(),
                network: net.into(),
                ifname: ifname.into(),
                result: Some(json!({"cniVersion": "1.0.0"})),
                ..Default::default()
            })
            .unwrap();
    }
    dir.write("results/a-broken-eth0", "{");
    dir.write("results/a-empty-eth0", "");
    dir.write("results/.a-c3-eth0.tmp-1-1", r#"{"kind":"cniCacheV1"}"#);

    let ids = |v: Vec<CacheEntry>| -> Vec<String> {
        v.into_iter()
            .map(|e| format!("{}/{}/{}", e.network, e.container_id, e.ifname))
            .collect()
    };
    assert_eq!(
        ids(cache.list_attachments(Some("a"), None).unwrap()),
        ["a/c1/eth0", "a/c2/eth0"]
    );
    assert_eq!(
        ids(cache.list_attachments(None, Some("c1")).unwrap()),
        ["a/c1/eth0", "b/c1/eth1"]
    );
    assert_eq!(cache.list_attachments(None, None).unwrap().len(), 3);
    assert!(ResultCache::new(dir.join("missing"))
        .list_attachments(None, None)
        .unwrap()
        .is_empty());
}

#[test]
fn an_entry_of_an_earlier_boot_is_no_prev_result_and_lists_without_its_netns() {
    let Some(boot) = libcni::boot::Boot::current() else {
        return;
    };
    let dir = TempDir::new("cache-boot");
    let cache = ResultCache::new(dir.path());
    let path = cache.write(&sample_entry()).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    assert!(!boot.predates(&file), "written in this boot");
    // The node rebooted since: the entry carries another boot (where files keep user
    // attributes and outlive a boot; elsewhere there is nothing to judge).
    let other = libcni::boot::Boot::known("an-earlier-boot", None);
    if other.stamp(&file).is_err() || !boot.predates(&file) {
        return;
    }
    assert!(cache.read("mynet", "c1", "eth0").unwrap().is_none());
    assert!(cache.read_result("mynet", "c1", "eth0").unwrap().is_none());
    let listed = cache.list_attachments(Some("mynet"), None).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].container_id, "c1");
    assert_eq!(listed[0].netns, "", "the netns died with its boot");
    // A new ADD of the same attachment replaces it with an entry of this boot.
    cache.write(&sample_entry()).unwrap();
    assert!(cache.read_result("mynet", "c1", "eth0").unwrap().is_some());
}
