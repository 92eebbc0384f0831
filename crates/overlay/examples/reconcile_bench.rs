//! Times reconcile passes with 10 … 5,000 VXLAN peers inside a throw-away netns with a veth underlay (root only):
//! `cargo run --release -p overlay --example reconcile_bench [sizes...]`.
//!
//! The process unshares its own network namespace, so nothing on the host is touched; the
//! namespace disappears when the process exits.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use netkit::addr::AddressOptions;
use overlay::{reconcile, OverlayConfig, PeerSet, Report};
use serde_json::{json, Value};

fn peers(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let i = i + 1;
            let subnet = Ipv4Addr::new(10, (i >> 8) as u8 + 1, (i & 0xff) as u8, 0);
            let ip = Ipv4Addr::new(172, 17, (i >> 8) as u8, (i & 0xff) as u8);
            json!({"subnet": format!("{subnet}/24"), "ip": ip.to_string()})
        })
        .collect()
}

fn config(n: usize, lock: &str) -> OverlayConfig {
    let v = json!({
        "network": "10.0.0.0/8", "subnet": "10.0.0.0/24", "mode": "vxlan",
        "underlayInterface": "under0", "lockFile": lock, "peers": peers(n),
    });
    let Value::Object(m) = v else { unreachable!() };
    OverlayConfig::from_map(&m).expect("bench config")
}

fn timed(cfg: &OverlayConfig) -> (Duration, Report) {
    let start = Instant::now();
    let set = PeerSet::load(cfg).expect("peers");
    let report = reconcile(cfg, &set);
    let took = start.elapsed();
    assert!(report.is_ok(), "{report}");
    assert!(
        report.problems.is_empty(),
        "{:?}",
        &report.problems[..report.problems.len().min(5)]
    );
    (took, report)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("reconcile_bench needs root (it unshares a network namespace)");
        return;
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare netns");
    let mut sock = netkit::Socket::new().expect("socket");
    // The kernel may lack the dummy driver: a veth pair serves as the underlay.
    let veth = netkit::VethSpec {
        name: "under0",
        peer_name: "under1",
        mtu: Some(1500),
        ..Default::default()
    };
    sock.create_veth(&veth).expect("veth underlay");
    let under = sock.link_by_name("under0").expect("under0");
    let peer = sock.link_by_name("under1").expect("under1");
    sock.set_link_up(peer.index).expect("under1 up");
    sock.set_link_up(under.index).expect("under0 up");
    sock.add_address(
        under.index,
        "172.16.0.1/12".parse().unwrap(),
        &AddressOptions::default(),
    )
    .expect("underlay address");
    let lock = format!("/tmp/vxlan-bench-{}.lock", std::process::id());

    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10, 100, 1000, 5000]
    } else {
        sizes
    };
    println!(
        "{:>6} | {:>12} | {:>12} | {:>12} | {:>12}",
        "peers", "first pass", "no-change", "per peer", "remove all"
    );
    for n in sizes {
        // Start from an empty overlay each time.
        timed(&config(0, &lock));
        let cfg = config(n, &lock);
        let (first, r1) = timed(&cfg);
        assert_eq!(r1.changes.total(), 3 * n, "{r1}");
        let (again, r2) = timed(&cfg);
        assert!(r2.is_noop(), "{r2}");
        assert_eq!(r2.unchanged, 3 * n);
        let (remove, r3) = timed(&config(0, &lock));
        assert_eq!(r3.changes.total(), 3 * n, "{r3}");
        if std::env::var_os("VXLAN_BENCH_PHASES").is_some() {
            eprintln!(
                "  first pass: {:?}\n  no-change:  {:?}",
                r1.timings, r2.timings
            );
        }
        println!(
            "{n:>6} | {:>12} | {:>12} | {:>12} | {:>12}",
            ms(first),
            ms(again),
            format!("{:.1} us", first.as_secs_f64() * 1e6 / n as f64),
            ms(remove)
        );
    }
    let _ = std::fs::remove_file(&lock);
}
