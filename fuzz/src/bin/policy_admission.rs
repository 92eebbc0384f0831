//! Both ends of the NetworkPolicy admission: the agent reading a request line from its
//! admission socket (`policy::admit::parse`), and the ferrocni-policy plugin reading its config,
//! the pod named in CNI_ARGS and the addresses of prevResult, then writing its request.
//! The input is read two ways: its first line as the agent's socket reads one (at most 4 KiB,
//! UTF-8), and the whole as a plugin-config input (`<config>\0<CNI_ARGS>`, every verb).
//! Invariants: no panic; refusals are well-formed CNI errors; a timeout within 1–300 s and a
//! socket path never empty; a request the agent accepts, written again, reads back the same;
//! the plugin's request for a pod reads back as that pod and its addresses whenever the agent
//! takes such a pod at all.
#![no_main]

use std::net::IpAddr;
use std::time::Duration;

use ferrocni_agent::policy::admit::{parse, Request};
use ferrocni_fuzz::{load_per_verb, split_config};
use ferrocni_policy::{ask, config};
use libfuzzer_sys::fuzz_target;

/// What the agent reads of a connection at most.
const MAX_REQUEST: usize = 4096;

/// The first line as the agent's reader gives it: cut at 4 KiB, up to and with its newline;
/// `None` for bytes that are not UTF-8 (the read fails).
fn first_line(data: &[u8]) -> Option<&str> {
    let data = &data[..data.len().min(MAX_REQUEST)];
    let end = data
        .iter()
        .position(|&b| b == b'\n')
        .map_or(data.len(), |at| at + 1);
    std::str::from_utf8(&data[..end]).ok()
}

/// Whether the agent takes a request for `namespace/name` with `ips` (its checks, restated).
fn acceptable(namespace: &str, name: &str, ips: &[IpAddr]) -> bool {
    !namespace.is_empty()
        && !name.is_empty()
        && !namespace.contains('/')
        && (1..=16).contains(&ips.len())
}

fn check_round_trip(r: &Request) {
    let text = serde_json::to_string(r).expect("a request serializes");
    assert_eq!(parse(&text).as_ref(), Ok(r), "{text}");
}

fuzz_target!(|data: &[u8]| {
    if let Some(line) = first_line(data) {
        match parse(line) {
            Ok(r) => {
                assert!(acceptable(&r.namespace, &r.name, &r.ips), "{r:?}");
                check_round_trip(&r);
            }
            Err(e) => assert!(!e.is_empty()),
        }
    }

    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::parse, |args, conf| {
        assert!(!conf.socket.is_empty());
        assert!(
            (Duration::from_secs(1)..=Duration::from_secs(300)).contains(&conf.timeout),
            "{conf:?}"
        );
        let Ok(pairs) = args.cni_args() else { return };
        let Some((namespace, name)) = config::pod_of(&pairs) else {
            return;
        };
        assert!(!namespace.is_empty() && !name.is_empty());
        let ips: Vec<IpAddr> = match args.prev_result() {
            Ok(Some(prev)) => prev.ips.iter().map(|c| c.address.ip()).collect(),
            _ => vec!["10.244.1.5".parse().expect("ip")],
        };
        let line = ask::request(&namespace, &name, &ips);
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line:?}"
        );
        match parse(&line) {
            Ok(r) => {
                assert_eq!(
                    (r.namespace.as_str(), r.name.as_str()),
                    (&*namespace, &*name)
                );
                assert_eq!(r.ips, ips);
                check_round_trip(&r);
            }
            Err(e) => assert!(
                !acceptable(&namespace, &name, &ips),
                "the agent refuses the plugin's request {line:?}: {e}"
            ),
        }
    });
});
