//! A DEL naming another network than its ADD did: a runtime or an operator renamed the network
//! in between, so the DEL's config carries the new name (and the runtime's cache, keyed by the
//! name, no prevResult). A container ID and an interface name already name one attachment (a
//! container holds one interface of a name), so every plugin that keeps per-attachment state
//! finds and undoes it: bridge's masquerade and MAC spoof check, portmap's mappings, the
//! firewall's rules and record, tuning's link settings and backup, bandwidth's IFB.
//! (host-local's leases are per network by design, as the reference's: that network's GC
//! frees them.)

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{our_binary, require_root, Netns, TempDir};
use serde_json::{json, Value};

const CID: &str = "renamed-cid";
const POD_NET: &str = "10.233.44";

struct Lab {
    host: Netns,
    pod: Netns,
    leases: TempDir,
    firewall: TempDir,
    tuning: TempDir,
}

impl Lab {
    fn new() -> Lab {
        for p in [
            "bridge",
            "host-local",
            "portmap",
            "firewall",
            "tuning",
            "bandwidth",
        ] {
            our_binary(p);
        }
        let lab = Lab {
            host: Netns::new("rn-host"),
            pod: Netns::new("rn-pod"),
            leases: TempDir::new("rn-leases"),
            firewall: TempDir::new("rn-firewall"),
            tuning: TempDir::new("rn-tuning"),
        };
        lab.host.exec_ok(&["ip", "link", "set", "lo", "up"]);
        lab
    }

    /// The chain's configs under network `name`, in ADD order.
    fn chain(&self, name: &str) -> Vec<Value> {
        let plugin = |ty: &str, fields: Value| {
            let mut c = json!({"cniVersion": "1.0.0", "name": name, "type": ty});
            c.as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            c
        };
        vec![
            plugin(
                "bridge",
                json!({"bridge": "rn-br0", "isGateway": true, "ipMasq": true,
                       "macspoofchk": true,
                       "ipam": {"type": "host-local", "dataDir": self.leases.path(),
                                "ranges": [[{"subnet": format!("{POD_NET}.0/24")}]]}}),
            ),
            plugin(
                "portmap",
                json!({"backend": "nftables", "capabilities": {"portMappings": true},
                       "runtimeConfig": {"portMappings": [
                           {"hostPort": 8480, "containerPort": 80, "protocol": "tcp"}]}}),
            ),
            plugin(
                "firewall",
                json!({"backend": "iptables", "dataDir": self.firewall.path()}),
            ),
            plugin(
                "tuning",
                json!({"mtu": 1400, "dataDir": self.tuning.path()}),
            ),
            plugin(
                "bandwidth",
                json!({"egressRate": 1_000_000, "egressBurst": 100_000}),
            ),
        ]
    }

    fn call(&self, command: &str, config: &Value) -> Value {
        let ty = config["type"].as_str().unwrap();
        Attachment::new(&Impl::ours(ty), &self.host, CID, &self.pod).run_ok(command, config)
    }

    /// ADD of the whole chain, each plugin given the previous one's result.
    fn add(&self, name: &str) -> Value {
        let mut prev = Value::Null;
        for mut config in self.chain(name) {
            if !prev.is_null() {
                config["prevResult"] = prev;
            }
            prev = self.call("ADD", &config);
        }
        prev
    }

    fn nft_ruleset(&self) -> String {
        self.host.exec_ok(&["nft", "list", "ruleset"])
    }

    fn iptables_rules(&self) -> String {
        self.host.exec_ok(&["iptables-save"])
    }

    fn ifbs(&self) -> String {
        self.host
            .exec_ok(&["ip", "-o", "link", "show", "type", "ifb"])
    }

    fn files(dir: &TempDir) -> Vec<String> {
        walk(dir.path())
    }
}

/// Every file under `dir`, recursively (the firewall keeps one directory per network).
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}

#[test]
fn del_naming_a_renamed_network_undoes_every_plugin() {
    require_root!();
    let lab = Lab::new();
    let result = lab.add("rn-before");
    let pod_ip = result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    assert!(pod_ip.starts_with(POD_NET), "{result}");

    // What ADD left, so the checks below see it go.
    let nft = lab.nft_ruleset();
    assert!(nft.contains("dnat") && nft.contains(&pod_ip), "{nft}");
    assert!(nft.contains("macspoofchk"), "{nft}");
    assert!(lab.iptables_rules().contains(&pod_ip));
    assert!(!lab.ifbs().trim().is_empty());
    assert_eq!(Lab::files(&lab.firewall).len(), 1);
    assert_eq!(Lab::files(&lab.tuning).len(), 1);
    assert_eq!(lab.pod.link("eth0").unwrap()["mtu"], 1400);

    // DEL in reverse order under the new name, without prevResult (the runtime's cache knows
    // only the old name), checking each plugin's state as it goes.
    let renamed = lab.chain("rn-after");
    let del = |ty: &str| {
        let config = renamed.iter().find(|c| c["type"] == ty).unwrap();
        lab.call("DEL", config);
    };
    del("bandwidth");
    assert_eq!(lab.ifbs().trim(), "", "bandwidth left its IFB");
    del("tuning");
    assert_eq!(
        lab.pod.link("eth0").unwrap()["mtu"],
        1500,
        "tuning did not restore the MTU"
    );
    assert!(Lab::files(&lab.tuning).is_empty(), "tuning left its backup");
    del("firewall");
    assert!(
        !lab.iptables_rules().contains(&pod_ip),
        "firewall left rules:\n{}",
        lab.iptables_rules()
    );
    assert!(
        Lab::files(&lab.firewall).is_empty(),
        "firewall left its record"
    );
    del("portmap");
    let nft = lab.nft_ruleset();
    assert!(!nft.contains("dnat"), "portmap left its mapping:\n{nft}");
    del("bridge");
    assert!(lab.pod.link("eth0").is_none());
    let nft = lab.nft_ruleset();
    assert!(
        !nft.contains(&pod_ip) && !nft.contains("macspoofchk-"),
        "bridge left its masquerade or spoof check:\n{nft}"
    );
    // A repeated DEL under either name is fine.
    for name in ["rn-after", "rn-before"] {
        for config in lab.chain(name).iter().rev() {
            lab.call("DEL", config);
        }
    }
}
