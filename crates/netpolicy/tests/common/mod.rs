//! Builders shared by the integration tests.
#![allow(dead_code)]

use std::net::IpAddr;

use netpolicy::{
    IpBlock, LabelSelector, Labels, NamedPort, Namespace, Peer, Pod, Policy, PolicyPort, PortSpec,
    Protocol, Requirement, Rule,
};

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn ns(name: &str, l: &[(&str, &str)]) -> Namespace {
    Namespace {
        name: name.into(),
        labels: labels(l),
    }
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

pub fn pod(namespace: &str, name: &str, l: &[(&str, &str)], ips: &[&str]) -> Pod {
    Pod {
        namespace: namespace.into(),
        name: name.into(),
        labels: labels(l),
        ips: ips.iter().map(|s| ip(s)).collect(),
        host_network: false,
        ports: vec![],
    }
}

pub fn with_port(mut p: Pod, name: &str, protocol: Protocol, port: u16) -> Pod {
    p.ports.push(NamedPort {
        name: name.into(),
        protocol,
        port,
    });
    p
}

pub fn sel(l: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(l),
        match_expressions: vec![],
    }
}

pub fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
    LabelSelector {
        match_labels: Labels::new(),
        match_expressions: vec![Requirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|s| s.to_string()).collect(),
        }],
    }
}

pub fn policy(namespace: &str, name: &str, pod_selector: LabelSelector) -> Policy {
    Policy {
        namespace: namespace.into(),
        name: name.into(),
        pod_selector,
        policy_types: None,
        ingress: vec![],
        egress: vec![],
    }
}

pub fn types(mut p: Policy, t: &[&str]) -> Policy {
    p.policy_types = Some(t.iter().map(|s| s.to_string()).collect());
    p
}

pub fn rule(ports: Vec<PolicyPort>, peers: Vec<Peer>) -> Rule {
    Rule { ports, peers }
}

pub fn pods_peer(s: LabelSelector) -> Peer {
    Peer {
        pod_selector: Some(s),
        ..Peer::default()
    }
}

pub fn ns_peer(s: LabelSelector) -> Peer {
    Peer {
        namespace_selector: Some(s),
        ..Peer::default()
    }
}

pub fn both_peer(pods: LabelSelector, namespaces: LabelSelector) -> Peer {
    Peer {
        pod_selector: Some(pods),
        namespace_selector: Some(namespaces),
        ip_block: None,
    }
}

pub fn block(cidr: &str, except: &[&str]) -> Peer {
    Peer {
        ip_block: Some(IpBlock {
            cidr: cidr.into(),
            except: except.iter().map(|s| s.to_string()).collect(),
        }),
        ..Peer::default()
    }
}

pub fn tcp(port: i32) -> PolicyPort {
    PolicyPort {
        protocol: None,
        port: Some(PortSpec::Number(port)),
        end_port: None,
    }
}

pub fn port(protocol: &str, port: i32, end_port: Option<i32>) -> PolicyPort {
    PolicyPort {
        protocol: Some(protocol.into()),
        port: Some(PortSpec::Number(port)),
        end_port,
    }
}

pub fn named(protocol: Option<&str>, name: &str) -> PolicyPort {
    PolicyPort {
        protocol: protocol.map(Into::into),
        port: Some(PortSpec::Name(name.into())),
        end_port: None,
    }
}

/// A tiny deterministic generator (64-bit LCG, high bits out), so the tests need no crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
