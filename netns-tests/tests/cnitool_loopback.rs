//! Our cnitool driving our loopback plugin in a fresh namespace.

use netns_tests::{our_bin_dir, our_binary, require_root, Cnitool, ConfDir, Netns, TempDir};

#[test]
fn loopback_add_check_del_is_idempotent() {
    require_root!();
    our_binary("loopback");
    let pod = Netns::new("lo-pod");
    let conf = ConfDir::new();
    conf.write_conflist(
        "10-lo.conflist",
        r#"{"cniVersion":"1.1.0","name":"lo-test","plugins":[{"type":"loopback"}]}"#,
    );
    let cache = TempDir::new("lo-cache");
    let tool = Cnitool::new(&conf, vec![our_bin_dir()], cache.path());
    assert!(!pod.link_is_up("lo"), "a new namespace starts with lo down");

    let out = tool.run_ok(&["add", "lo-test", pod.path_str()]);
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["cniVersion"], "1.1.0");
    assert_eq!(result["interfaces"][0]["name"], "lo");
    assert!(pod.link_is_up("lo"), "lo must be up after ADD");
    assert!(pod.addresses("lo").contains(&"127.0.0.1/8".to_string()));
    let cache_file = tool.cache_file("lo-test", pod.path_str(), "eth0");
    assert!(cache_file.is_file(), "{} missing", cache_file.display());

    tool.run_ok(&["check", "lo-test", pod.path_str()]);

    tool.run_ok(&["del", "lo-test", pod.path_str()]);
    assert!(!pod.link_is_up("lo"), "lo must be down after DEL");
    assert!(!cache_file.exists(), "DEL removes the cache entry");
    tool.run_ok(&["del", "lo-test", pod.path_str()]);

    // ADD again after DEL works the same.
    tool.run_ok(&["add", "lo-test", pod.path_str()]);
    assert!(pod.link_is_up("lo"));
    tool.run_ok(&["del", "lo-test", pod.path_str()]);
    assert!(!pod.link_is_up("lo"));
}
