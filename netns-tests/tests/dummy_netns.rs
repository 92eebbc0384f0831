//! dummy end to end. Where the kernel has the dummy driver: ADD, CHECK, DEL through ours (and
//! against the reference when `/usr/lib/cni/dummy` exists: Debian's v1.1.1 has none). Where it
//! has not (this development machine), those tests say so and skip; what is proven without the
//! driver: our binary's request is byte for byte iproute2's for the same link, a refused ADD is
//! a spec error that takes no lease, and DEL works whatever is left. (The ADD flow above the
//! kernel runs in the plugin's unit tests with a stand-in link.)

mod main_support;

use main_support::*;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::{json, Value};

fn dm_conf(version: &str, ipam: &TempDir) -> Value {
    conf(
        version,
        "dummy",
        Some(ipam),
        json!([[{"subnet": "10.97.0.0/24"}]]),
        json!({}),
    )
}

#[test]
fn add_check_del_where_the_driver_exists() {
    require_root!();
    netns_tests::require_driver!(kernel_has("dummy"), "dummy driver");
    let mut imps = vec![Impl::ours("dummy")];
    imps.extend(Impl::reference("dummy"));
    let mut seen = Vec::new();
    for imp in &imps {
        let host = Netns::new("dm-host");
        let pod = Netns::new("dm-pod");
        let ipam = TempDir::new("dm-ipam");
        let c = dm_conf("1.0.0", &ipam);
        let a = Attachment::new(imp, &host, "dmpod", &pod);
        let r = a.add(&c);
        let d = link_details(&pod, "eth0");
        let state = json!({"kind": d["linkinfo"]["info_kind"], "up": pod.link_is_up("eth0"),
            "addrs": global_addrs(&pod, "eth0"), "routes": routes(&pod)});
        Attachment::new(&imps[0], &host, "dmpod", &pod).check_ok(&c, &r);
        a.del(&c, Some(&r));
        assert!(pod.link("eth0").is_none() && leases(&ipam).is_empty());
        seen.push((normalize(r), state));
    }
    if let [ours, reference] = seen.as_slice() {
        assert_eq!(ours, reference, "ours and the reference differ");
    }
}

#[test]
fn request_matches_iproute2() {
    require_root!();
    if !have_strace() {
        eprintln!("skipping dummy request comparison: strace is not installed");
        return;
    }
    let host = Netns::new("dm-msg-h");
    let pod = Netns::new("dm-msg-p");
    let ipam = TempDir::new("dm-msg-ipam");
    let ours = Impl::ours("dummy");
    let c = dm_conf("1.0.0", &ipam);
    let out = assert_request_matches_iproute2(
        &host,
        &pod,
        &ours,
        "msgpod",
        &c,
        &["name", "eth0", "netns", pod.name(), "type", "dummy"],
    );
    if kernel_has("dummy") {
        pod.exec(&["ip", "link", "del", "eth0"]);
        Attachment::new(&ours, &host, "msgpod", &pod).del(&c, Some(&out));
    } else {
        assert_eq!(out["code"], 999, "{out}");
        assert!(
            out["msg"]
                .as_str()
                .unwrap()
                .starts_with("failed to create dummy"),
            "{out}"
        );
        assert!(leases(&ipam).is_empty());
        assert_eq!(
            pod.exec_ok(&["ip", "-o", "link"]).lines().count(),
            1,
            "only lo"
        );
    }
}

#[test]
fn del_without_the_link_or_the_netns_releases_the_lease() {
    require_root!();
    let host = Netns::new("dm-del-h");
    let ipam = TempDir::new("dm-del-ipam");
    let c = dm_conf("1.1.0", &ipam);
    let ours = Impl::ours("dummy");
    let pod = Netns::new("dm-del-p");
    Attachment::new(&ours.host_local(), &host, "delpod", &pod).add(&c);
    let a = Attachment::new(&ours, &host, "delpod", &pod);
    a.del(&c, None);
    assert!(leases(&ipam).is_empty());
    drop(pod);
    a.del(&c, None);
    a.ok("STATUS", &c, None);
    a.ok("GC", &c, None);
    let mut no_ipam = c.clone();
    no_ipam.as_object_mut().unwrap().remove("ipam");
    assert_eq!(
        a.fails("ADD", &no_ipam)["msg"],
        "dummy interface requires an IPAM configuration"
    );
}

#[test]
fn example_runs_where_the_driver_exists() {
    require_root!();
    netns_tests::require_driver!(kernel_has("dummy"), "dummy driver");
    let r = run_example("dummy-service-address.conflist", |_| {});
    assert_eq!(r["interfaces"][0]["name"], "eth0");
}
