//! The reference Go `bridge` delegating to OUR `host-local` (a mixed CNI_PATH): three dual-stack
//! pods get distinct addresses, ping each other on both families, and DEL empties the store.

use std::os::unix::fs::symlink;

use netns_tests::{
    lease_files, our_binary, reference_plugin_dir, require_root, skip_unless, Cnitool, ConfDir,
    Netns, TempDir,
};
use serde_json::{json, Value};

#[test]
fn reference_bridge_with_our_host_local_for_three_dual_stack_pods() {
    require_root!();
    let reference = skip_unless!(
        reference_plugin_dir(&["bridge"]),
        "reference bridge not installed"
    );
    // One plugin dir: the reference bridge next to our host-local.
    let plugins = TempDir::new("hlmix-bin");
    symlink(reference.join("bridge"), plugins.join("bridge")).unwrap();
    symlink(our_binary("host-local"), plugins.join("host-local")).unwrap();

    let host = Netns::new("hlmix-host");
    host.exec_ok(&["ip", "link", "set", "lo", "up"]);
    let pods: Vec<Netns> = (0..3).map(|_| Netns::new("hlmix-pod")).collect();
    let data = TempDir::new("hlmix-data");
    let cache = TempDir::new("hlmix-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-mixed.conflist",
        &json!({
            "cniVersion": "1.0.0",
            "name": "hlmixed",
            "plugins": [{
                "type": "bridge",
                "bridge": "hlmix0",
                "isGateway": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": data.path(),
                    "ranges": [[{"subnet": "10.233.9.0/24"}], [{"subnet": "fd00:233:9::/64"}]]
                }
            }]
        }),
    );
    let tool =
        Cnitool::new(&conf, vec![plugins.path().to_path_buf()], cache.path()).in_netns(&host);

    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for pod in &pods {
        pod.exec_ok(&["ip", "link", "set", "lo", "up"]);
        let out = tool.run_ok(&["add", "hlmixed", pod.path_str()]);
        let result: Value = serde_json::from_str(&out).unwrap();
        for ip in result["ips"].as_array().unwrap() {
            let addr = ip["address"].as_str().unwrap();
            let bare = addr.split('/').next().unwrap().to_string();
            if bare.contains(':') {
                assert!(addr.ends_with("/64"), "{addr}");
                v6.push(bare);
            } else {
                assert!(addr.ends_with("/24"), "{addr}");
                v4.push(bare);
            }
        }
    }
    let store = data.join("hlmixed");
    assert_eq!(
        lease_files(&store).len(),
        6,
        "one v4 and one v6 lease per pod"
    );
    for list in [&v4, &v6] {
        let mut d = list.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 3, "distinct addresses: {list:?}");
    }
    // Every pod reaches every other pod on both families (and the gateways).
    for (i, pod) in pods.iter().enumerate() {
        for j in 0..pods.len() {
            if i != j {
                pod.exec_ok(&["ping", "-c", "1", "-W", "3", &v4[j]]);
                pod.exec_ok(&["ping", "-6", "-c", "1", "-W", "3", &v6[j]]);
            }
        }
        pod.exec_ok(&["ping", "-c", "1", "-W", "3", "10.233.9.1"]);
    }
    for pod in &pods {
        tool.run_ok(&["check", "hlmixed", pod.path_str()]);
        tool.run_ok(&["del", "hlmixed", pod.path_str()]);
    }
    assert!(
        lease_files(&store).is_empty(),
        "store not empty: {:?}",
        lease_files(&store)
    );
}
