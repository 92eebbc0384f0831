//! bandwidth against the reference plugin (`/usr/lib/cni/bandwidth`) as an oracle: the same
//! config gives the same qdiscs, filter target and IFB name; each plugin's CHECK accepts the
//! other's state and our DEL removes the reference's IFB. Also: rollback of a failed ADD,
//! pass-through without limits, `latencyMs`, and configuration errors.

mod bandwidth_support;

use bandwidth_support::*;
use netns_tests::{reference_plugin_dir, require_root, skip_unless, Netns, TempDir};
use serde_json::{json, Value};

const NET: &str = "bwref";

/// One host namespace with one pod attached by the chain's bridge.
struct Attached {
    host: Netns,
    pod: Netns,
    _ipam: TempDir,
    prev: Value,
}

fn attach(chain: &ChainDir, cid: &str) -> Attached {
    let host = Netns::new("bwr-host");
    let pod = Netns::new("bwr-pod");
    let ipam = TempDir::new("bwr-ipam");
    let conf = bridge_conf(NET, "10.231.41.0/24", ipam.path());
    let prev = call(
        &host,
        &chain.plugin("bridge"),
        chain.path(),
        "ADD",
        cid,
        &pod,
        &conf,
    )
    .ok();
    Attached {
        host,
        pod,
        _ipam: ipam,
        prev,
    }
}

/// Everything the two plugins should agree on, with interface names and MACs normalised.
fn tc_state(at: &Attached) -> Value {
    let veth = host_veth(&at.prev);
    let ifbs = links_of_kind(&at.host, "ifb");
    let mut filters = ingress_filters(&at.host, &veth);
    for f in &mut filters {
        let opts = f["options"].as_object_mut().unwrap();
        // Action indexes are global counters; the reference installs a second, unreachable action.
        let acts = opts["actions"].as_array().unwrap();
        let first = json!({
            "kind": acts[0]["kind"], "mirred_action": acts[0]["mirred_action"], "direction": acts[0]["direction"],
            "to_dev": acts[0]["to_dev"], "control_action": acts[0]["control_action"],
        });
        opts.insert("actions".into(), json!([first]));
    }
    let strip = |qs: Vec<Value>| -> Vec<Value> {
        qs.into_iter()
            .map(|mut q| {
                q.as_object_mut().unwrap().remove("dev");
                q
            })
            .collect()
    };
    json!({
        "veth_qdiscs": strip(qdiscs(&at.host, &veth)),
        "ifbs": ifbs.clone(),
        "ifb_qdiscs": ifbs.first().map(|i| strip(qdiscs(&at.host, i))),
        "filters": filters,
    })
}

#[test]
fn same_tc_state_as_the_reference_and_mutual_check() {
    require_root!();
    let reference = skip_unless!(
        reference_plugin_dir(&["bandwidth"]),
        "reference bandwidth missing"
    );
    let chain = skip_unless!(chain_dir(), "no bridge/host-local plugin available");
    let reference_bw = reference.join("bandwidth");
    let ours = chain.plugin("bandwidth");

    let cases = [
        json!({"ingressRate": 10_000_000, "ingressBurst": 80_000, "egressRate": 20_000_000, "egressBurst": 160_000}),
        // Egress above 2^32 bytes/s: TCA_TBF_RATE64.
        json!({"ingressRate": 1_000_000_000, "ingressBurst": 8_000_000, "egressRate": 50_000_000_000u64, "egressBurst": 160_000}),
        // Odd values: integer division and truncation.
        json!({"ingressRate": 8_007, "ingressBurst": 4_095}),
        json!({"egressRate": 123_456_789, "egressBurst": 999_999}),
        // A 5 s bucket: more than 2^32 ns of buffer.
        json!({"ingressRate": 80_007, "ingressBurst": 400_000}),
        // containerd 1.6: Go field names and MaxUint32 bursts (the ingress buffer wraps in
        // the reference's 32-bit conversion; we install the same qdisc).
        json!({"capabilities": {"bandwidth": true}, "runtimeConfig": {"bandwidth": {
            "IngressRate": 10_000_000, "IngressBurst": 4_294_967_295u64,
            "EgressRate": 20_000_000, "EgressBurst": 4_294_967_295u64}}}),
    ];
    for (n, limits) in cases.iter().enumerate() {
        let cid = format!("bwref-cid-{n}");
        let theirs = attach(&chain, &cid);
        let mine = attach(&chain, &cid);
        let conf_theirs = bandwidth_conf(NET, limits, &theirs.prev);
        let conf_mine = bandwidth_conf(NET, limits, &mine.prev);

        let r_theirs = call(
            &theirs.host,
            &reference_bw,
            chain.path(),
            "ADD",
            &cid,
            &theirs.pod,
            &conf_theirs,
        )
        .ok();
        let r_mine = call(
            &mine.host,
            &ours,
            chain.path(),
            "ADD",
            &cid,
            &mine.pod,
            &conf_mine,
        )
        .ok();

        let state_theirs = tc_state(&theirs);
        let state_mine = tc_state(&mine);
        assert_eq!(state_mine, state_theirs, "case {limits}");

        // Results: prevResult plus the same IFB name (MACs are random).
        let names = |r: &Value| -> Vec<String> {
            r["interfaces"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_string())
                .collect()
        };
        let veth_names = |r: &Value| {
            names(r)
                .into_iter()
                .filter(|n| !n.starts_with("veth"))
                .collect::<Vec<_>>()
        };
        assert_eq!(veth_names(&r_mine), veth_names(&r_theirs), "case {limits}");
        assert_eq!(r_mine["ips"], mine.prev["ips"]);

        // Each plugin's CHECK accepts the other's state.
        call(
            &theirs.host,
            &ours,
            chain.path(),
            "CHECK",
            &cid,
            &theirs.pod,
            &with_prev(&conf_theirs, &r_theirs),
        )
        .ok();
        call(
            &mine.host,
            &reference_bw,
            chain.path(),
            "CHECK",
            &cid,
            &mine.pod,
            &with_prev(&conf_mine, &r_mine),
        )
        .ok();
        call(
            &mine.host,
            &ours,
            chain.path(),
            "CHECK",
            &cid,
            &mine.pod,
            &with_prev(&conf_mine, &r_mine),
        )
        .ok();

        // Our DEL removes the reference's IFB too; DEL twice is fine.
        for _ in 0..2 {
            call(
                &theirs.host,
                &ours,
                chain.path(),
                "DEL",
                &cid,
                &theirs.pod,
                &conf_theirs,
            )
            .ok();
            call(
                &mine.host,
                &ours,
                chain.path(),
                "DEL",
                &cid,
                &mine.pod,
                &conf_mine,
            )
            .ok();
        }
        assert!(links_of_kind(&theirs.host, "ifb").is_empty());
        assert!(links_of_kind(&mine.host, "ifb").is_empty());
    }
}

/// `"dns": {}` and no `dns` are the same result (cni >= 1.2 omits the empty object).
fn without_empty_dns(result: &Value) -> Value {
    let mut r = result.clone();
    if r.get("dns")
        .is_some_and(|d| d.as_object().is_some_and(|o| o.is_empty()))
    {
        r.as_object_mut().unwrap().remove("dns");
    }
    r
}

fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}

#[test]
fn failed_add_rolls_back_what_it_created() {
    require_root!();
    let chain = skip_unless!(chain_dir(), "no bridge/host-local plugin available");
    let cid = "bwref-rollback";
    let at = attach(&chain, cid);
    let veth = host_veth(&at.prev);
    let limits = json!({"ingressRate": 10_000_000, "ingressBurst": 80_000, "egressRate": 20_000_000, "egressBurst": 160_000});
    let conf = bandwidth_conf(NET, &limits, &at.prev);

    // Learn the IFB name from a successful ADD, undo it, then make the IFB step fail by
    // occupying the name with a plain veth.
    let r = call(
        &at.host,
        &chain.plugin("bandwidth"),
        chain.path(),
        "ADD",
        cid,
        &at.pod,
        &conf,
    )
    .ok();
    let ifb = r["interfaces"].as_array().unwrap().last().unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    call(
        &at.host,
        &chain.plugin("bandwidth"),
        chain.path(),
        "DEL",
        cid,
        &at.pod,
        &conf,
    )
    .ok();
    at.host
        .exec_ok(&["tc", "qdisc", "del", "dev", &veth, "root"]);
    at.host
        .exec_ok(&["tc", "qdisc", "del", "dev", &veth, "ingress"]);
    at.host.exec_ok(&[
        "ip",
        "link",
        "add",
        &ifb,
        "type",
        "veth",
        "peer",
        "name",
        "bwr-squat",
    ]);

    let err = call(
        &at.host,
        &chain.plugin("bandwidth"),
        chain.path(),
        "ADD",
        cid,
        &at.pod,
        &conf,
    )
    .err();
    assert!(err["msg"].as_str().unwrap().contains(&ifb), "{err}");
    // The ingress TBF created before the failure is gone; the squatter is untouched.
    assert!(
        root_tbf(&at.host, &veth).is_none(),
        "ingress tbf left after a failed ADD"
    );
    assert!(!qdiscs(&at.host, &veth)
        .iter()
        .any(|q| q["kind"] == "ingress"));
    assert!(
        at.host.link(&ifb).is_some(),
        "a link we did not create was deleted"
    );
    // DEL leaves a non-IFB link alone and still succeeds.
    call(
        &at.host,
        &chain.plugin("bandwidth"),
        chain.path(),
        "DEL",
        cid,
        &at.pod,
        &conf,
    )
    .ok();
    assert!(at.host.link(&ifb).is_some());
}

/// Validation, before anything is touched: each invalid limit refused with its message, and
/// neither a tbf nor an IFB made.
fn invalid_limits_refused_before_anything_is_touched(
    chain: &ChainDir,
    at: &Attached,
    cid: &str,
    veth: &str,
) {
    let bw = chain.plugin("bandwidth");
    for (limits, msg) in [
        (
            json!({"ingressRate": 1000}),
            "if rate is set, burst must also be set",
        ),
        (
            json!({"egressBurst": 1000}),
            "if burst is set, rate must also be set",
        ),
        (
            json!({"egressRate": 1000, "egressBurst": 40_000_000_000u64}),
            "burst cannot be more than 4GB",
        ),
        (
            json!({"ingressRate": -5, "ingressBurst": 8}),
            "json: cannot unmarshal number -5 into Go struct field PluginConf.ingressRate of type uint64",
        ),
        (
            json!({"ingressRate": 8000, "ingressBurst": 8000, "latencyMs": 0}),
            "invalid latencyMs",
        ),
    ] {
        let err = call(
            &at.host,
            &bw,
            chain.path(),
            "ADD",
            cid,
            &at.pod,
            &bandwidth_conf(NET, &limits, &at.prev),
        )
        .err();
        assert_eq!(err["code"], 999, "{limits}: {err}");
        assert!(
            err["msg"].as_str().unwrap().contains(msg),
            "{limits}: {err}"
        );
    }
    assert!(root_tbf(&at.host, veth).is_none());
    assert!(links_of_kind(&at.host, "ifb").is_empty());
}

#[test]
fn pass_through_latency_and_config_errors() {
    require_root!();
    let chain = skip_unless!(chain_dir(), "no bridge/host-local plugin available");
    let bw = chain.plugin("bandwidth");
    let cid = "bwref-misc";
    let at = attach(&chain, cid);
    let veth = host_veth(&at.prev);

    // No limits: prevResult unchanged, nothing programmed; CHECK succeeds (the reference crashes).
    let conf = bandwidth_conf(NET, &json!({}), &at.prev);
    let out = call(&at.host, &bw, chain.path(), "ADD", cid, &at.pod, &conf).ok();
    assert_eq!(without_empty_dns(&out), without_empty_dns(&at.prev));
    assert!(root_tbf(&at.host, &veth).is_none());
    call(&at.host, &bw, chain.path(), "CHECK", cid, &at.pod, &conf).ok();
    // Zero limits from runtimeConfig count as none.
    let zero = bandwidth_conf(
        NET,
        &json!({"runtimeConfig": {"bandwidth": {"ingressRate": 0, "ingressBurst": 0}}}),
        &at.prev,
    );
    let out = call(&at.host, &bw, chain.path(), "ADD", cid, &at.pod, &zero).ok();
    assert_eq!(without_empty_dns(&out), without_empty_dns(&at.prev));

    // Not chained.
    let mut lone = bandwidth_conf(
        NET,
        &json!({"ingressRate": 1000, "ingressBurst": 1000}),
        &at.prev,
    );
    lone.as_object_mut().unwrap().remove("prevResult");
    let err = call(&at.host, &bw, chain.path(), "ADD", cid, &at.pod, &lone).err();
    assert_eq!(
        (err["code"].as_u64(), err["msg"].as_str()),
        (Some(999), Some("must be called as chained plugin"))
    );

    let err = call(&at.host, &bw, chain.path(), "CHECK", cid, &at.pod, &lone).err();
    assert_eq!(err["msg"], "must be called as a chained plugin");

    // The host veth must be listed in prevResult.
    let mut hidden = at.prev.clone();
    hidden["interfaces"]
        .as_array_mut()
        .unwrap()
        .retain(|i| i["name"] != veth.as_str());
    let conf_hidden = bandwidth_conf(
        NET,
        &json!({"ingressRate": 8000, "ingressBurst": 8000}),
        &hidden,
    );
    let err = call(
        &at.host,
        &bw,
        chain.path(),
        "ADD",
        cid,
        &at.pod,
        &conf_hidden,
    )
    .err();
    assert!(
        err["msg"]
            .as_str()
            .unwrap()
            .contains("no veth peer of container interface found in host ns"),
        "{err}"
    );

    invalid_limits_refused_before_anything_is_touched(&chain, &at, cid, &veth);

    // latencyMs trades queue for latency: only the limit (shown by tc as latency) changes.
    let limits = json!({"ingressRate": 10_000_000, "ingressBurst": 80_000, "latencyMs": 100});
    let conf = bandwidth_conf(NET, &limits, &at.prev);
    call(&at.host, &bw, chain.path(), "ADD", cid, &at.pod, &conf).ok();
    assert_tbf(
        "ingress tbf with latencyMs 100",
        &root_tbf(&at.host, &veth).unwrap(),
        10_000_000,
        80_000,
        100,
    );
    call(&at.host, &bw, chain.path(), "CHECK", cid, &at.pod, &conf).ok();
    // CHECK with a different latency reports the TBF limit.
    let other = bandwidth_conf(
        NET,
        &json!({"ingressRate": 10_000_000, "ingressBurst": 80_000}),
        &at.prev,
    );
    let err = call(&at.host, &bw, chain.path(), "CHECK", cid, &at.pod, &other).err();
    assert!(
        err["msg"]
            .as_str()
            .unwrap()
            .contains("tbf limit is 135000 bytes, expected 41250"),
        "{err}"
    );
    // CHECK with egress configured but never set up names the missing IFB and ingress qdisc.
    let more = bandwidth_conf(
        NET,
        &json!({"ingressRate": 10_000_000, "ingressBurst": 80_000, "latencyMs": 100, "egressRate": 8000, "egressBurst": 8000}),
        &at.prev,
    );
    let err = call(&at.host, &bw, chain.path(), "CHECK", cid, &at.pod, &more).err();
    let msg = err["msg"].as_str().unwrap();
    assert!(
        msg.contains("ifb bwp") && msg.contains("is missing") && msg.contains("no ingress qdisc"),
        "{msg}"
    );
    call(&at.host, &bw, chain.path(), "DEL", cid, &at.pod, &conf).ok();
}
