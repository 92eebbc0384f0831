//! bandwidth end to end through cnitool: bridge + host-local + bandwidth (capability
//! `bandwidth`, limits from CAP_ARGS), with the "host" being a namespace. iperf3 measures a
//! shaped pod in both directions and an unshaped pair on the same bridge; the tc state, CHECK
//! (also after tampering) and DEL are verified.

mod bandwidth_support;

use bandwidth_support::*;
use netns_tests::{require_root, skip_unless, Cnitool, ConfDir, Netns, TempDir};
use serde_json::{json, Value};

const NET: &str = "bwshape";
/// Deliberately different so a swapped direction is caught.
const INGRESS_MBIT: u64 = 10;
const EGRESS_MBIT: u64 = 20;
const INGRESS_BURST_BITS: u64 = 80_000;
const EGRESS_BURST_BITS: u64 = 160_000;

fn iperf3_available() -> Option<()> {
    let ok = std::process::Command::new("iperf3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("iperf3 missing (apt-get install -y iperf3)");
    }
    ok.then_some(())
}

/// The results: the shaped pod's is prevResult plus the IFB, unshaped pods get no IFB; the
/// kernel state read back by iproute2: a tbf each way, the ingress qdisc and its one redirect
/// filter to the IFB, nothing on the unshaped pod's veth. Returns the shaped pod's host veth.
fn results_and_tc_state_as_shaped(host: &Netns, a: &Value, b: &Value) -> String {
    let ifbs = links_of_kind(host, "ifb");
    assert_eq!(ifbs.len(), 1, "{ifbs:?}");
    let ifb = &ifbs[0];
    assert!(ifb.starts_with("bwp") && ifb.len() == 15, "{ifb}");
    let last = a["interfaces"].as_array().unwrap().last().unwrap();
    assert_eq!(last["name"], ifb.as_str(), "{a}");
    assert!(b["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| !i["name"].as_str().unwrap().starts_with("bwp")));

    // Kernel state, read back by iproute2.
    let veth_a = host_veth(a);
    let veth_b = host_veth(b);
    let ingress = root_tbf(host, &veth_a).expect("tbf on the shaped pod's host veth");
    assert_tbf(
        "ingress tbf",
        &ingress,
        INGRESS_MBIT * 1_000_000,
        INGRESS_BURST_BITS,
        25,
    );
    let egress = root_tbf(host, ifb).expect("tbf on the ifb");
    assert_tbf(
        "egress tbf",
        &egress,
        EGRESS_MBIT * 1_000_000,
        EGRESS_BURST_BITS,
        25,
    );
    assert!(qdiscs(host, &veth_a)
        .iter()
        .any(|q| q["kind"] == "ingress" && q["handle"] == "ffff:"));
    let filters = ingress_filters(host, &veth_a);
    assert_eq!(filters.len(), 1, "{filters:?}");
    let f = &filters[0];
    assert_eq!(
        (
            f["protocol"].as_str(),
            f["pref"].as_u64(),
            f["kind"].as_str()
        ),
        (Some("all"), Some(1), Some("u32"))
    );
    assert_eq!(f["options"]["flowid"], "1:1");
    let actions = f["options"]["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "exactly one mirred action: {actions:?}");
    assert_eq!(actions[0]["kind"], "mirred");
    assert_eq!(actions[0]["mirred_action"], "redirect");
    assert_eq!(actions[0]["direction"], "egress");
    assert_eq!(actions[0]["to_dev"], ifb.as_str());
    assert_eq!(actions[0]["control_action"]["type"], "stolen");
    assert!(root_tbf(host, &veth_b).is_none(), "unshaped pod has no tbf");

    veth_a
}

/// Throughput. Egress: the shaped pod sends; ingress: it receives (-R); each within 10 % of
/// its limit, and an unshaped pair on the same bridge far faster.
fn rates_as_shaped(shaped: &Netns, peer: &Netns, other: &Netns, b: &Value, c: &Value) {
    let server_b = IperfServer::start(peer, 5201);
    let ip_b = pod_ip(b);
    let egress_mbit = iperf_wire_mbit(shaped, &server_b, &ip_b, 2, false);
    let ingress_mbit = iperf_wire_mbit(shaped, &server_b, &ip_b, 2, true);
    drop(server_b);
    let server_c = IperfServer::start(other, 5202);
    let unshaped_mbit = iperf_wire_mbit(peer, &server_c, &pod_ip(c), 2, false);
    drop(server_c);
    assert_within(
        "egress (from the shaped pod)",
        egress_mbit,
        EGRESS_MBIT as f64,
        10.0,
    );
    assert_within(
        "ingress (to the shaped pod)",
        ingress_mbit,
        INGRESS_MBIT as f64,
        10.0,
    );
    assert!(
        unshaped_mbit > 5.0 * EGRESS_MBIT as f64,
        "unshaped pair only reached {unshaped_mbit:.1} Mbit/s"
    );
    eprintln!("unshaped pair: {unshaped_mbit:.0} Mbit/s");
}

#[test]
fn shapes_both_directions_and_cleans_up() {
    require_root!();
    skip_unless!(iperf3_available(), "iperf3 not installed");
    let chain = skip_unless!(chain_dir(), "no bridge/host-local plugin available");

    let host = Netns::new("bw-host");
    let shaped = Netns::new("bw-a");
    let peer = Netns::new("bw-b");
    let other = Netns::new("bw-c");
    let ipam = TempDir::new("bw-ipam");
    let cache = TempDir::new("bw-cache");
    let conf = ConfDir::new();
    conf.write_json(
        "10-bw.conflist",
        &json!({
            "cniVersion": "1.0.0",
            "name": NET,
            "plugins": [
                bridge_conf(NET, "10.231.40.0/24", ipam.path()),
                {"type": "bandwidth", "capabilities": {"bandwidth": true}}
            ]
        }),
    );
    let tool = Cnitool::new(&conf, vec![chain.path().to_path_buf()], cache.path()).in_netns(&host);
    let limits = json!({"bandwidth": {
        "ingressRate": INGRESS_MBIT * 1_000_000, "ingressBurst": INGRESS_BURST_BITS,
        "egressRate": EGRESS_MBIT * 1_000_000, "egressBurst": EGRESS_BURST_BITS
    }});

    let a: Value =
        serde_json::from_str(&tool.clone().env("CAP_ARGS", &limits.to_string()).run_ok(&[
            "add",
            NET,
            shaped.path_str(),
        ]))
        .unwrap();
    let b: Value = serde_json::from_str(&tool.run_ok(&["add", NET, peer.path_str()])).unwrap();
    let c: Value = serde_json::from_str(&tool.run_ok(&["add", NET, other.path_str()])).unwrap();

    let veth_a = results_and_tc_state_as_shaped(&host, &a, &b);
    tool.clone()
        .env("CAP_ARGS", &limits.to_string())
        .run_ok(&["check", NET, shaped.path_str()]);

    rates_as_shaped(&shaped, &peer, &other, &b, &c);

    // CHECK notices a removed redirect filter and says which object differs.
    host.exec_ok(&["tc", "filter", "del", "dev", &veth_a, "ingress"]);
    let out =
        tool.clone()
            .env("CAP_ARGS", &limits.to_string())
            .run(&["check", NET, shaped.path_str()]);
    assert!(
        !out.status.success(),
        "CHECK passed without the redirect filter"
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("redirect filter on") && text.contains(&veth_a),
        "{text}"
    );

    // DEL removes the IFB; a repeated DEL succeeds.
    tool.clone()
        .env("CAP_ARGS", &limits.to_string())
        .run_ok(&["del", NET, shaped.path_str()]);
    assert!(links_of_kind(&host, "ifb").is_empty(), "ifb left behind");
    tool.clone()
        .env("CAP_ARGS", &limits.to_string())
        .run_ok(&["del", NET, shaped.path_str()]);
    tool.run_ok(&["del", NET, peer.path_str()]);
    tool.run_ok(&["del", NET, other.path_str()]);
}
