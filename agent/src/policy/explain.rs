//! `ferrocni-agent policy explain FROM TO [PROTOCOL/]PORT`: what the policies say about one
//! flow, and which policy says it. It reads the cluster from the API once (the same listings
//! the agent's informers start from), compiles the plan for every pod and prints the verdict
//! of the sender's egress and of the receiver's ingress, as the nodes enforce them.
//! FROM and TO are `namespace/pod` or an address; a pod with two addresses is taken in the
//! family of the other end's (IPv4 when both are pods).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use netpolicy::{compile, explain, Protocol};

use super::informer;
use super::objects;
use super::store::{Kind, Object, Store, Update};
use crate::manager::kube::connect;
use crate::options::KubeOptions;

pub const USAGE: &str =
    "usage: ferrocni-agent policy explain [--kubeconfig-file PATH] [--kube-api-url URL]
                                    FROM TO [PROTOCOL/]PORT
  FROM, TO   a pod as namespace/name, or an address
  PORT       TCP unless PROTOCOL (TCP, UDP, SCTP) is given: 5432, UDP/53
Prints whether the policies allow the flow, side by side: the sender's egress and the
receiver's ingress, each with the policy that allows it or the policies that isolate the pod.
";

#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub kube: KubeOptions,
    pub from: String,
    pub to: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// Parses `explain`'s arguments; `Ok(None)` for `--help`.
pub fn parse(args: &[String]) -> Result<Option<Query>, String> {
    let mut kube = KubeOptions::default();
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "--kubeconfig-file" => kube.kubeconfig = Some(value()?.into()),
            "--kube-api-url" => kube.api_url = Some(value()?),
            f if f.starts_with('-') && f.len() > 1 => return Err(format!("unknown option {f:?}")),
            _ => positional.push(a.clone()),
        }
    }
    let [from, to, port] = <[String; 3]>::try_from(positional).map_err(|p| {
        format!(
            "expected FROM TO [PROTOCOL/]PORT, got {} argument(s)",
            p.len()
        )
    })?;
    let (protocol, port) = match port.split_once('/') {
        Some((p, n)) => (
            Protocol::parse(&p.to_ascii_uppercase())
                .ok_or_else(|| format!("unknown protocol {p:?} (TCP, UDP or SCTP)"))?,
            n,
        ),
        None => (Protocol::Tcp, port.as_str()),
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("port {port:?} is not a number in 1-65535"))?;
    Ok(Some(Query {
        kube,
        from,
        to,
        protocol,
        port,
    }))
}

/// Lists the cluster, compiles and explains; the text to print.
pub async fn run(q: &Query) -> Result<String, String> {
    let (client, server) = connect::client(&q.kube).await.map_err(|e| e.to_string())?;
    let mut store = Store::default();
    let listed = [
        (
            Kind::Namespaces,
            informer::list(&Api::<Namespace>::all(client.clone()), |o| {
                Object::Namespace(objects::namespace(o))
            })
            .await,
        ),
        (
            Kind::Pods,
            informer::list(&Api::<Pod>::all(client.clone()), |o| {
                Object::Pod(objects::pod(o))
            })
            .await,
        ),
        (
            Kind::Policies,
            informer::list(&Api::<NetworkPolicy>::all(client), |o| {
                Object::Policy(Some(objects::policy(o)))
            })
            .await,
        ),
    ];
    for (kind, result) in listed {
        let (objects, _) =
            result.map_err(|e| format!("LIST {} on {server}: {e}", kind.as_str()))?;
        store.apply(Update::Listed(kind, objects));
    }
    explain_in(&store, q)
}

/// The verdict on `q`'s flow in `store`'s cluster.
pub fn explain_in(store: &Store, q: &Query) -> Result<String, String> {
    let from = endpoint(store, &q.from)?;
    let to = endpoint(store, &q.to)?;
    let (from_ip, to_ip) = pick_family(&from, &to)
        .ok_or_else(|| format!("{} and {} have no address of one family", q.from, q.to))?;
    let compiled = compile(&store.cluster());
    let mut out = explain(&compiled.plan, from_ip, to_ip, q.protocol, q.port).to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    for e in &compiled.refused {
        out.push_str(&format!(
            "note: {e} (left out: it allows nothing and isolates no pod)\n"
        ));
    }
    for (key, why) in store.unreadable() {
        out.push_str(&format!("note: policy {key}: {why} (left out)\n"));
    }
    Ok(out)
}

/// A pod's addresses, or the address given.
fn endpoint(store: &Store, given: &str) -> Result<Vec<IpAddr>, String> {
    if let Ok(ip) = given.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    if !given.contains('/') {
        return Err(format!("{given:?} is neither namespace/pod nor an address"));
    }
    let pod = store
        .pod(given)
        .ok_or_else(|| format!("no pod {given} with an address"))?;
    Ok(pod.ips.clone())
}

/// The first pair of one family, IPv4 first.
fn pick_family(from: &[IpAddr], to: &[IpAddr]) -> Option<(IpAddr, IpAddr)> {
    let mut pairs: Vec<(IpAddr, IpAddr)> = from
        .iter()
        .flat_map(|a| to.iter().map(move |b| (*a, *b)))
        .filter(|(a, b)| a.is_ipv4() == b.is_ipv4())
        .collect();
    pairs.sort_by_key(|(a, _)| !a.is_ipv4());
    pairs.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::objects::PodRecord;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let q = parse(&args(&[
            "--kubeconfig-file=/k",
            "prod/web",
            "10.0.0.5",
            "udp/53",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(q.protocol, Protocol::Udp);
        assert_eq!(q.port, 53);
        assert_eq!(
            q.kube.kubeconfig.as_deref(),
            Some(std::path::Path::new("/k"))
        );
        let q = parse(&args(&["a/b", "c/d", "5432"])).unwrap().unwrap();
        assert_eq!((q.protocol, q.port), (Protocol::Tcp, 5432));
        assert!(parse(&args(&["a/b", "c/d"])).is_err());
        assert!(parse(&args(&["a/b", "c/d", "ICMP/1"])).is_err());
        assert!(parse(&args(&["a/b", "c/d", "0"])).is_err());
        assert!(parse(&args(&["--bogus", "a/b", "c/d", "1"])).is_err());
        assert_eq!(parse(&args(&["--help"])), Ok(None));
    }

    #[test]
    fn explains_a_denied_flow() {
        let mut store = Store::default();
        let pod = |ns: &str, name: &str, ip: &str| {
            (
                format!("{ns}/{name}"),
                Object::Pod(Some(PodRecord {
                    pod: netpolicy::Pod {
                        namespace: ns.into(),
                        name: name.into(),
                        ips: vec![ip.parse().unwrap()],
                        ..Default::default()
                    },
                    node: "n".into(),
                })),
            )
        };
        store.apply(Update::Listed(Kind::Namespaces, vec![]));
        store.apply(Update::Listed(
            Kind::Pods,
            vec![
                pod("prod", "db", "10.0.0.2"),
                pod("dev", "tool", "10.0.1.1"),
            ],
        ));
        store.apply(Update::Listed(
            Kind::Policies,
            vec![(
                "prod/deny".into(),
                Object::Policy(Some(Ok(netpolicy::Policy {
                    namespace: "prod".into(),
                    name: "deny".into(),
                    ..Default::default()
                }))),
            )],
        ));
        let q = parse(&args(&["dev/tool", "prod/db", "5432"]))
            .unwrap()
            .unwrap();
        let text = explain_in(&store, &q).unwrap();
        assert!(
            text.starts_with("10.0.1.1 -> 10.0.0.2:5432 TCP: denied"),
            "{text}"
        );
        assert!(text.contains("prod/deny"), "{text}");
        assert!(explain_in(
            &store,
            &parse(&args(&["dev/none", "prod/db", "1"]))
                .unwrap()
                .unwrap()
        )
        .is_err());
    }
}
