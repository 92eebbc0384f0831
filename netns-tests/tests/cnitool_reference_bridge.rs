//! Our cnitool driving the reference Go plugins (bridge + host-local), with the "host" being
//! a namespace of its own: the runtime side of libcni is checked against real plugins.

use netns_tests::{
    reference_plugin_dir, require_root, skip_unless, Cnitool, ConfDir, Netns, TempDir,
};
use serde_json::{json, Value};

#[test]
fn bridge_and_host_local_through_cnitool() {
    require_root!();
    let plugins = skip_unless!(
        reference_plugin_dir(&["bridge", "host-local"]),
        "reference plugins not installed"
    );
    let host = Netns::new("br-host");
    let pod = Netns::new("br-pod");
    let ipam_dir = TempDir::new("br-ipam");
    let cache = TempDir::new("br-cache");
    let conf = ConfDir::new();
    let conflist = json!({
        "cniVersion": "1.0.0",
        "name": "brtest",
        "plugins": [{
            "type": "bridge",
            "bridge": "cni-test0",
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "subnet": "10.231.7.0/24",
                "dataDir": ipam_dir.path(),
                "routes": [{"dst": "0.0.0.0/0"}]
            }
        }]
    });
    let conf_path = conf.write_json("10-br.conflist", &conflist);
    let tool = Cnitool::new(&conf, vec![plugins], cache.path()).in_netns(&host);

    let out = tool.run_ok(&["add", "brtest", pod.path_str()]);
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    let ip = result["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.231.7."), "{ip}");

    // The pod got its address; the bridge (with the gateway) is in the host namespace only.
    let v4 = |addrs: Vec<String>| -> Vec<String> {
        addrs.into_iter().filter(|a| !a.contains(':')).collect()
    };
    assert_eq!(v4(pod.addresses("eth0")), vec![ip.clone()]);
    assert!(pod.link_is_up("eth0"));
    assert_eq!(v4(host.addresses("cni-test0")), ["10.231.7.1/24"]);
    host.exec_ok(&["ip", "link", "set", "lo", "up"]);
    pod.exec_ok(&["ping", "-c", "1", "-W", "2", "10.231.7.1"]);

    // The cache entry has the Go libcni shape.
    let cache_file = tool.cache_file("brtest", pod.path_str(), "eth0");
    let cached: Value = serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["containerId"], Cnitool::container_id(pod.path_str()));
    assert_eq!(cached["ifName"], "eth0");
    assert_eq!(cached["networkName"], "brtest");
    assert_eq!(cached["netns"], pod.path_str());
    let config = libcni::cache::base64_decode(cached["config"].as_str().unwrap()).unwrap();
    assert_eq!(config, std::fs::read(&conf_path).unwrap());
    assert_eq!(cached["result"]["ips"], result["ips"]);

    tool.run_ok(&["check", "brtest", pod.path_str()]);

    tool.run_ok(&["del", "brtest", pod.path_str()]);
    assert!(pod.link("eth0").is_none(), "eth0 removed by DEL");
    assert!(!cache_file.exists());
    // host-local released the address: only its bookkeeping files remain.
    let leases: Vec<String> = std::fs::read_dir(ipam_dir.join("brtest"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        leases
            .iter()
            .all(|f| f.starts_with("last_reserved_ip") || f == "lock"),
        "{leases:?}"
    );
    tool.run_ok(&["del", "brtest", pod.path_str()]);
}
