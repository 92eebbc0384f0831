//! bandwidth GC (spec 1.1.0): the IFB lives in the host namespace, so it outlives a pod whose DEL
//! never came. GC removes our IFBs of the network whose container is not in
//! `cni.dev/valid-attachments` — and nothing else: not valid attachments, not another network's,
//! not IFBs without our alias.

mod bandwidth_support;

use bandwidth_support::*;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::{json, Value};

const NET: &str = "bwgc";
const OTHER_NET: &str = "bwgc-other";
const FOREIGN_IFB: &str = "bwpfeedfeedfeed";

fn shaped_conf(net: &str, prev: &Value) -> Value {
    json!({
        "cniVersion": "1.1.0", "name": net, "type": "bandwidth",
        "egressRate": 8_000_000, "egressBurst": 80_000, "prevResult": prev,
    })
}

fn gc_conf(valid: &[&str]) -> Value {
    let list: Vec<Value> = valid
        .iter()
        .map(|cid| json!({"containerID": cid, "ifname": "eth0"}))
        .collect();
    json!({
        "cniVersion": "1.1.0", "name": NET, "type": "bandwidth",
        "cni.dev/valid-attachments": list,
    })
}

/// The `ifalias` of every IFB in `host`, by name.
fn ifb_aliases(host: &Netns) -> Vec<(String, Option<String>)> {
    let links = host.exec_json(&["ip", "-j", "-d", "link", "show", "type", "ifb"]);
    let mut out: Vec<(String, Option<String>)> = links
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["ifname"].as_str().unwrap().to_string(),
                l["ifalias"].as_str().map(str::to_string),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn gc_removes_exactly_the_stale_ifbs_of_the_network() {
    require_root!();
    let Some(chain) = chain_dir() else { return };
    let host = Netns::new("bwgc-host");
    let ipam = TempDir::new("bwgc-ipam");
    let bridge = chain.plugin("bridge");
    let bw = chain.plugin("bandwidth");
    let bridge_conf = bridge_conf(NET, "10.231.57.0/24", ipam.path());

    // keep: valid; vanished: its netns is gone; stale: not valid; other: another network.
    let cids = ["bwgc-keep", "bwgc-vanished", "bwgc-stale", "bwgc-other"];
    let mut pods: Vec<Option<Netns>> = Vec::new();
    let mut ifbs = Vec::new();
    let mut results = Vec::new();
    for cid in cids {
        let pod = Netns::new("bwgc-pod");
        let prev = call(&host, &bridge, chain.path(), "ADD", cid, &pod, &bridge_conf).ok();
        let net = if cid == "bwgc-other" { OTHER_NET } else { NET };
        let result = call(
            &host,
            &bw,
            chain.path(),
            "ADD",
            cid,
            &pod,
            &shaped_conf(net, &prev),
        )
        .ok();
        let ifb = result["interfaces"].as_array().unwrap().last().unwrap()["name"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(ifb.starts_with("bwp"), "{result}");
        ifbs.push(ifb);
        results.push(result);
        pods.push(Some(pod));
    }
    host.exec_ok(&["ip", "link", "add", FOREIGN_IFB, "type", "ifb"]);

    // Each of our IFBs names its attachment in its alias.
    let aliases = ifb_aliases(&host);
    for (cid, ifb) in cids.iter().zip(&ifbs) {
        let net = if *cid == "bwgc-other" { OTHER_NET } else { NET };
        let want = format!("ferrocni-bandwidth network={net} container={cid} ifname=eth0");
        assert!(
            aliases.contains(&(ifb.clone(), Some(want.clone()))),
            "{ifb} should carry {want:?}: {aliases:?}"
        );
    }

    // The runtime lost a pod: its netns (and veth) are gone, its IFB is not.
    pods[1] = None;
    assert_eq!(links_of_kind(&host, "ifb").len(), 5);

    let names = |v: &[usize]| -> Vec<String> {
        let mut n: Vec<String> = v.iter().map(|i| ifbs[*i].clone()).collect();
        n.push(FOREIGN_IFB.to_string());
        n.sort();
        n
    };
    let current = || {
        let mut l = links_of_kind(&host, "ifb");
        l.sort();
        l
    };
    let pod0 = pods[0].as_ref().unwrap();
    let gc = |valid: &[&str]| {
        call(
            &host,
            &bw,
            chain.path(),
            "GC",
            "ignored",
            pod0,
            &gc_conf(valid),
        )
    };
    for _ in 0..2 {
        gc(&["bwgc-keep"]).ok();
        assert_eq!(current(), names(&[0, 3]), "GC with keep valid");
    }
    // The kept pod is still shaped as configured.
    let check = shaped_conf(NET, &results[0]);
    call(&host, &bw, chain.path(), "CHECK", "bwgc-keep", pod0, &check).ok();

    // Nothing valid: our IFB of this network goes, the other network's and the foreign one stay.
    gc(&[]).ok();
    assert_eq!(current(), names(&[3]));

    // GC below 1.1.0 is refused, as the spec gates it.
    let mut old = gc_conf(&[]);
    old["cniVersion"] = json!("1.0.0");
    call(&host, &bw, chain.path(), "GC", "ignored", pod0, &old).err();

    // DEL still works after GC took the IFB, and for the other network.
    for (i, cid) in cids.iter().enumerate() {
        let Some(pod) = &pods[i] else { continue };
        let net = if *cid == "bwgc-other" { OTHER_NET } else { NET };
        let del = json!({"cniVersion": "1.1.0", "name": net, "type": "bandwidth"});
        call(&host, &bw, chain.path(), "DEL", cid, pod, &del).ok();
        call(&host, &bridge, chain.path(), "DEL", cid, pod, &bridge_conf).ok();
    }
    assert_eq!(links_of_kind(&host, "ifb"), vec![FOREIGN_IFB.to_string()]);
}

/// One network attached twice to a container (eth0, net1): the IFB's name (the reference's)
/// holds no interface, so the second attachment's egress ADD fails, as with the reference.
/// The runtime's DEL after that failure leaves the first attachment's IFB, and GC keeps it
/// while that attachment is valid, whatever the container's other interfaces.
#[test]
fn the_ifb_belongs_to_its_interface() {
    require_root!();
    let Some(chain) = chain_dir() else { return };
    let host = Netns::new("bwif-host");
    let pod = Netns::new("bwif-pod");
    let ipam = TempDir::new("bwif-ipam");
    let (bridge, bw) = (chain.plugin("bridge"), chain.plugin("bandwidth"));
    let bridge_conf = bridge_conf(NET, "10.231.58.0/24", ipam.path());
    let run = |plugin: &std::path::Path, verb: &str, ifname: &str, conf: &Value| {
        call_on(
            &host,
            plugin,
            chain.path(),
            verb,
            ("bwif", ifname),
            &pod,
            conf,
        )
    };
    let prev0 = run(&bridge, "ADD", "eth0", &bridge_conf).ok();
    let shaped0 = run(&bw, "ADD", "eth0", &shaped_conf(NET, &prev0)).ok();
    let prev1 = run(&bridge, "ADD", "net1", &bridge_conf).ok();
    run(&bw, "ADD", "net1", &shaped_conf(NET, &prev1)).err();
    run(&bw, "DEL", "net1", &shaped_conf(NET, &prev1)).ok();
    assert_eq!(
        links_of_kind(&host, "ifb").len(),
        1,
        "net1's DEL took eth0's IFB"
    );
    run(&bw, "CHECK", "eth0", &shaped_conf(NET, &shaped0)).ok();
    let gc = |ifname: &str| {
        let conf = json!({
            "cniVersion": "1.1.0", "name": NET, "type": "bandwidth",
            "cni.dev/valid-attachments": [{"containerID": "bwif", "ifname": ifname}],
        });
        run(&bw, "GC", "eth0", &conf).ok();
        links_of_kind(&host, "ifb").len()
    };
    assert_eq!(gc("eth0"), 1);
    assert_eq!(
        gc("net1"),
        0,
        "GC kept the IFB of an attachment no longer valid"
    );
    run(&bw, "DEL", "eth0", &shaped_conf(NET, &shaped0)).ok();
    for (ifname, prev) in [("net1", &prev1), ("eth0", &prev0)] {
        let mut conf = bridge_conf.clone();
        conf["prevResult"] = prev.clone();
        run(&bridge, "DEL", ifname, &conf).ok();
    }
}
