//! A policy as the apiserver admits it, with its defaults applied: what it would refuse is an
//! error naming the field; `policyTypes` defaults to `Ingress`, plus `Egress` when the policy
//! has egress rules; a port's protocol defaults to TCP.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::error::PolicyError;
use crate::interval::{self, Span};
use crate::model::{LabelSelector, Peer, Policy, PolicyKey, PolicyPort, PortSpec, Protocol, Rule};
use crate::plan::Family;
use crate::selector::{Expr, Scope, Selector};

/// A policy the apiserver would admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) key: PolicyKey,
    pub(crate) pod_selector: Selector,
    /// `None`: the policy does not apply to this direction (its type is not listed).
    pub(crate) ingress: Option<Vec<CheckedRule>>,
    pub(crate) egress: Option<Vec<CheckedRule>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckedRule {
    /// Empty: every port of every protocol.
    pub(crate) ports: Vec<Port>,
    /// Empty: every peer.
    pub(crate) peers: Vec<CheckedPeer>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Port {
    /// Ports `first..=last` (a single port has `first == last`; no port given: 0..=65535).
    Range(Protocol, u16, u16),
    /// A container port's name, resolved on the pod at the destination's end.
    Named(Protocol, String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckedPeer {
    Pods {
        pods: Selector,
        scope: Scope,
    },
    /// The block with its exceptions carved out (`spans` may be empty when they cover it).
    Block {
        family: Family,
        spans: Vec<Span>,
    },
}

/// Whether the apiserver would admit `policy`; if not, why (the first field refused).
pub fn validate(policy: &Policy) -> Result<(), PolicyError> {
    check(policy).map(|_| ())
}

/// Checks `policy` as the apiserver's validation does and applies its defaults.
pub(crate) fn check(policy: &Policy) -> Result<Checked, PolicyError> {
    let key = policy.key();
    let pod_selector = selector(&key, "spec.podSelector", &policy.pod_selector)?;
    let (ingress_type, egress_type) = policy_types(&key, policy)?;
    let ingress = if ingress_type {
        Some(rules(&key, "spec.ingress", "from", &policy.ingress)?)
    } else {
        None
    };
    let egress = if egress_type {
        Some(rules(&key, "spec.egress", "to", &policy.egress)?)
    } else {
        None
    };
    Ok(Checked {
        key,
        pod_selector,
        ingress,
        egress,
    })
}

fn policy_types(key: &PolicyKey, policy: &Policy) -> Result<(bool, bool), PolicyError> {
    let types = match &policy.policy_types {
        Some(t) if !t.is_empty() => t,
        // The API's default: Ingress always, Egress when there are egress rules.
        _ => return Ok((true, !policy.egress.is_empty())),
    };
    if types.len() > 2 {
        return Err(PolicyError::TooManyPolicyTypes {
            policy: key.clone(),
            field: "spec.policyTypes".into(),
        });
    }
    let (mut ingress, mut egress) = (false, false);
    for (i, t) in types.iter().enumerate() {
        match t.as_str() {
            "Ingress" => ingress = true,
            "Egress" => egress = true,
            _ => {
                return Err(PolicyError::UnknownPolicyType {
                    policy: key.clone(),
                    field: format!("spec.policyTypes[{i}]"),
                    value: t.clone(),
                })
            }
        }
    }
    Ok((ingress, egress))
}

fn rules(
    key: &PolicyKey,
    path: &str,
    peers_field: &str,
    rules: &[Rule],
) -> Result<Vec<CheckedRule>, PolicyError> {
    rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let ports = rule
                .ports
                .iter()
                .enumerate()
                .map(|(j, p)| port(key, &format!("{path}[{i}].ports[{j}]"), p))
                .collect::<Result<_, _>>()?;
            let peers = rule
                .peers
                .iter()
                .enumerate()
                .map(|(j, p)| peer(key, &format!("{path}[{i}].{peers_field}[{j}]"), p))
                .collect::<Result<_, _>>()?;
            Ok(CheckedRule { ports, peers })
        })
        .collect()
}

fn port(key: &PolicyKey, path: &str, p: &PolicyPort) -> Result<Port, PolicyError> {
    let protocol = match &p.protocol {
        None => Protocol::Tcp,
        Some(text) => Protocol::parse(text).ok_or_else(|| PolicyError::UnknownProtocol {
            policy: key.clone(),
            field: format!("{path}.protocol"),
            value: text.clone(),
        })?,
    };
    let number = |value: i32, field: &str| {
        u16::try_from(value)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| PolicyError::PortOutOfRange {
                policy: key.clone(),
                field: format!("{path}.{field}"),
                value,
            })
    };
    match (&p.port, p.end_port) {
        (None, None) => Ok(Port::Range(protocol, 0, u16::MAX)),
        (Some(PortSpec::Number(n)), end) => {
            let first = number(*n, "port")?;
            let last = match end {
                None => first,
                Some(e) => {
                    let last = number(e, "endPort")?;
                    if last < first {
                        return Err(PolicyError::EndPortBelowPort {
                            policy: key.clone(),
                            field: format!("{path}.endPort"),
                            port: *n,
                            end_port: e,
                        });
                    }
                    last
                }
            };
            Ok(Port::Range(protocol, first, last))
        }
        (Some(PortSpec::Name(_)), Some(_)) | (None, Some(_)) => {
            Err(PolicyError::EndPortWithoutNumericPort {
                policy: key.clone(),
                field: format!("{path}.endPort"),
            })
        }
        (Some(PortSpec::Name(name)), None) => {
            if !is_port_name(name) {
                return Err(PolicyError::BadPortName {
                    policy: key.clone(),
                    field: format!("{path}.port"),
                    value: name.clone(),
                });
            }
            Ok(Port::Named(protocol, name.clone()))
        }
    }
}

/// IANA_SVC_NAME, as the API validates a named port.
fn is_port_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=15).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(|c| c.is_ascii_lowercase())
        && b.first() != Some(&b'-')
        && b.last() != Some(&b'-')
        && !name.contains("--")
}

fn peer(key: &PolicyKey, path: &str, p: &Peer) -> Result<CheckedPeer, PolicyError> {
    match (&p.pod_selector, &p.namespace_selector, &p.ip_block) {
        (None, None, None) => Err(PolicyError::EmptyPeer {
            policy: key.clone(),
            field: path.into(),
        }),
        (None, None, Some(block)) => {
            let cidr_field = format!("{path}.ipBlock.cidr");
            let cidr = parse_cidr(key, &cidr_field, &block.cidr)?;
            let outer = Span::of(cidr);
            let mut holes = Vec::with_capacity(block.except.len());
            for (i, text) in block.except.iter().enumerate() {
                let field = format!("{path}.ipBlock.except[{i}]");
                let except = parse_cidr(key, &field, text)?;
                let hole = Span::of(except);
                // A strict subset, as the apiserver wants it: inside and smaller.
                let inside = hole.family == outer.family
                    && hole.first >= outer.first
                    && hole.last <= outer.last
                    && except.prefix() > cidr.prefix();
                if !inside {
                    return Err(PolicyError::ExceptOutsideCidr {
                        policy: key.clone(),
                        field,
                        except: text.clone(),
                        cidr: block.cidr.clone(),
                    });
                }
                holes.push(hole);
            }
            Ok(CheckedPeer::Block {
                family: outer.family,
                spans: interval::carve(outer, &holes),
            })
        }
        (_, _, Some(_)) => Err(PolicyError::IpBlockWithSelector {
            policy: key.clone(),
            field: path.into(),
        }),
        (pods, namespaces, None) => {
            let pods = match pods {
                Some(s) => selector(key, &format!("{path}.podSelector"), s)?,
                // With a namespace selector alone: every pod of those namespaces.
                None => Selector::default(),
            };
            let scope = match namespaces {
                Some(s) => Scope::Matching(selector(key, &format!("{path}.namespaceSelector"), s)?),
                None => Scope::Own,
            };
            Ok(CheckedPeer::Pods { pods, scope })
        }
    }
}

/// A CIDR as Go's `net.ParseCIDR` reads it: host bits may be set (the block is the network
/// they belong to); an address without a prefix length is refused.
fn parse_cidr(key: &PolicyKey, field: &str, text: &str) -> Result<IpNetwork, PolicyError> {
    let bad = |reason: String| PolicyError::BadCidr {
        policy: key.clone(),
        field: field.into(),
        value: text.into(),
        reason,
    };
    let (addr, len) = text
        .split_once('/')
        .ok_or_else(|| bad("no prefix length".into()))?;
    let addr: IpAddr = addr.parse().map_err(|e| bad(format!("{e}")))?;
    // Go refuses signs and leading zeros are allowed; digits only.
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad(format!("prefix length {len:?} is not a number")));
    }
    let len: u8 = len
        .parse()
        .map_err(|_| bad(format!("prefix length {len:?} is out of range")))?;
    let net = IpNetwork::new(addr, len).map_err(|e| bad(format!("{e}")))?;
    IpNetwork::new(net.network(), len).map_err(|e| bad(format!("{e}")))
}

fn selector(key: &PolicyKey, path: &str, s: &LabelSelector) -> Result<Selector, PolicyError> {
    let mut labels = Vec::with_capacity(s.match_labels.len());
    for (k, v) in &s.match_labels {
        let field = format!("{path}.matchLabels");
        label_key(key, &field, k)?;
        label_value(key, &field, v)?;
        labels.push((k.clone(), v.clone()));
    }
    let mut exprs = Vec::with_capacity(s.match_expressions.len());
    for (i, r) in s.match_expressions.iter().enumerate() {
        let field = format!("{path}.matchExpressions[{i}]");
        label_key(key, &format!("{field}.key"), &r.key)?;
        let values_needed = |needs: &'static str| PolicyError::OperatorValues {
            policy: key.clone(),
            field: format!("{field}.values"),
            operator: r.operator.clone(),
            needs,
        };
        let expr = match r.operator.as_str() {
            "In" | "NotIn" => {
                if r.values.is_empty() {
                    return Err(values_needed("needs at least one value"));
                }
                for v in &r.values {
                    label_value(key, &format!("{field}.values"), v)?;
                }
                if r.operator == "In" {
                    Expr::In(r.key.clone(), r.values.clone())
                } else {
                    Expr::NotIn(r.key.clone(), r.values.clone())
                }
            }
            "Exists" | "DoesNotExist" => {
                if !r.values.is_empty() {
                    return Err(values_needed("takes no values"));
                }
                if r.operator == "Exists" {
                    Expr::Exists(r.key.clone())
                } else {
                    Expr::DoesNotExist(r.key.clone())
                }
            }
            other => {
                return Err(PolicyError::UnknownOperator {
                    policy: key.clone(),
                    field: format!("{field}.operator"),
                    value: other.into(),
                })
            }
        };
        exprs.push(expr);
    }
    Ok(Selector { labels, exprs })
}

/// A label name part: 1-63 characters, alphanumerics at both ends, `-`, `_`, `.` inside.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS subdomain, the optional prefix of a label key.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first().is_some_and(u8::is_ascii_alphanumeric)
                && b.last().is_some_and(u8::is_ascii_alphanumeric)
        })
}

fn label_key(key: &PolicyKey, field: &str, k: &str) -> Result<(), PolicyError> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_name_part(name),
        None => is_name_part(k),
    };
    if ok {
        Ok(())
    } else {
        Err(PolicyError::BadLabel {
            policy: key.clone(),
            field: field.into(),
            what: "key",
            value: k.into(),
        })
    }
}

fn label_value(key: &PolicyKey, field: &str, v: &str) -> Result<(), PolicyError> {
    if v.is_empty() || is_name_part(v) {
        Ok(())
    } else {
        Err(PolicyError::BadLabel {
            policy: key.clone(),
            field: field.into(),
            what: "value",
            value: v.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{IpBlock, Requirement};

    fn policy() -> Policy {
        Policy {
            namespace: "prod".into(),
            name: "db".into(),
            ..Policy::default()
        }
    }

    fn with_ingress(ports: Vec<PolicyPort>, peers: Vec<Peer>) -> Policy {
        Policy {
            ingress: vec![Rule { ports, peers }],
            ..policy()
        }
    }

    fn block(cidr: &str, except: &[&str]) -> Peer {
        Peer {
            ip_block: Some(IpBlock {
                cidr: cidr.into(),
                except: except.iter().map(|s| s.to_string()).collect(),
            }),
            ..Peer::default()
        }
    }

    fn err(p: &Policy) -> String {
        match check(p) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn policy_types_default() {
        // No egress rules: Ingress only (even with no ingress rules: default deny ingress).
        let c = check(&policy()).expect("valid");
        assert_eq!(c.ingress, Some(vec![]));
        assert_eq!(c.egress, None);
        // Egress rules: both.
        let p = Policy {
            egress: vec![Rule::default()],
            ..policy()
        };
        let c = check(&p).expect("valid");
        assert!(c.ingress.is_some() && c.egress.is_some());
        // An empty list is the default too.
        let p = Policy {
            policy_types: Some(vec![]),
            ..policy()
        };
        assert_eq!(check(&p).expect("valid").egress, None);
        // Explicit Egress alone: ingress rules ignored, no ingress isolation.
        let p = Policy {
            policy_types: Some(vec!["Egress".into()]),
            ingress: vec![Rule::default()],
            ..policy()
        };
        let c = check(&p).expect("valid");
        assert_eq!(c.ingress, None);
        assert_eq!(c.egress, Some(vec![]));
    }

    #[test]
    fn policy_types_refused() {
        let p = Policy {
            policy_types: Some(vec!["ingress".into()]),
            ..policy()
        };
        assert_eq!(
            err(&p),
            "policy prod/db: spec.policyTypes[0]: unknown policy type \"ingress\" (Ingress or Egress)"
        );
        let p = Policy {
            policy_types: Some(vec!["Ingress".into(), "Egress".into(), "Ingress".into()]),
            ..policy()
        };
        assert_eq!(
            err(&p),
            "policy prod/db: spec.policyTypes: more than two policy types"
        );
    }

    #[test]
    fn ports() {
        let port = |protocol: Option<&str>, port: Option<PortSpec>, end: Option<i32>| PolicyPort {
            protocol: protocol.map(Into::into),
            port,
            end_port: end,
        };
        let one = |p: PolicyPort| {
            check(&with_ingress(vec![p], vec![]))
                .map(|c| c.ingress.expect("ingress")[0].ports[0].clone())
        };
        assert_eq!(
            one(port(None, Some(PortSpec::Number(80)), None)),
            Ok(Port::Range(Protocol::Tcp, 80, 80))
        );
        assert_eq!(
            one(port(Some("SCTP"), Some(PortSpec::Number(3000)), Some(3100))),
            Ok(Port::Range(Protocol::Sctp, 3000, 3100))
        );
        assert_eq!(
            one(port(Some("UDP"), None, None)),
            Ok(Port::Range(Protocol::Udp, 0, 65535))
        );
        assert_eq!(
            one(port(None, Some(PortSpec::Name("http".into())), None)),
            Ok(Port::Named(Protocol::Tcp, "http".into()))
        );
        let e = |p: PolicyPort| err(&with_ingress(vec![p], vec![]));
        assert_eq!(
            e(port(None, Some(PortSpec::Number(80)), Some(79))),
            "policy prod/db: spec.ingress[0].ports[0].endPort: endPort 79 is below port 80"
        );
        assert_eq!(
            e(port(None, Some(PortSpec::Name("http".into())), Some(90))),
            "policy prod/db: spec.ingress[0].ports[0].endPort: endPort needs a numeric port"
        );
        assert_eq!(
            e(port(None, None, Some(90))),
            "policy prod/db: spec.ingress[0].ports[0].endPort: endPort needs a numeric port"
        );
        assert_eq!(
            e(port(None, Some(PortSpec::Number(0)), None)),
            "policy prod/db: spec.ingress[0].ports[0].port: 0 is not a port (1-65535)"
        );
        assert_eq!(
            e(port(None, Some(PortSpec::Number(80)), Some(70000))),
            "policy prod/db: spec.ingress[0].ports[0].endPort: 70000 is not a port (1-65535)"
        );
        assert_eq!(
            e(port(Some("tcp"), None, None)),
            "policy prod/db: spec.ingress[0].ports[0].protocol: unsupported protocol \"tcp\" (TCP, UDP or SCTP)"
        );
        for bad in ["", "HTTP", "80", "-http", "ht--tp", "a-very-long-port-name"] {
            assert!(
                e(port(None, Some(PortSpec::Name(bad.into())), None))
                    .contains("is not a valid port name"),
                "{bad}"
            );
        }
    }

    #[test]
    fn peers() {
        let c = check(&with_ingress(
            vec![],
            vec![block("10.0.0.7/16", &["10.0.1.0/24"])],
        ))
        .expect("valid");
        let CheckedPeer::Block { spans, .. } = &c.ingress.expect("ingress")[0].peers[0] else {
            panic!("a block")
        };
        // Host bits are dropped, as Go's ParseCIDR does.
        assert_eq!(spans[0].first_addr().to_string(), "10.0.0.0");
        assert_eq!(spans.len(), 2);

        let e = |peer: Peer| err(&with_ingress(vec![], vec![peer]));
        assert_eq!(
            e(block("10.0.0.0/33", &[])),
            "policy prod/db: spec.ingress[0].from[0].ipBlock.cidr: \"10.0.0.0/33\" is not a valid CIDR: invalid prefix"
        );
        assert!(e(block("10.0.0.0", &[])).contains("no prefix length"));
        assert!(e(block("10.0.0.x/8", &[])).contains("is not a valid CIDR"));
        assert_eq!(
            e(block("10.0.0.0/16", &["10.1.0.0/24"])),
            "policy prod/db: spec.ingress[0].from[0].ipBlock.except[0]: 10.1.0.0/24 is not a strict subset of the block's cidr 10.0.0.0/16"
        );
        // Equal is not a strict subset; another family is not inside.
        assert!(e(block("10.0.0.0/16", &["10.0.0.0/16"])).contains("strict subset"));
        assert!(e(block("10.0.0.0/16", &["fd00::/64"])).contains("strict subset"));
        assert_eq!(
            e(Peer::default()),
            "policy prod/db: spec.ingress[0].from[0]: a peer needs a podSelector, a namespaceSelector or an ipBlock"
        );
        let mut mixed = block("10.0.0.0/8", &[]);
        mixed.pod_selector = Some(LabelSelector::default());
        assert_eq!(
            e(mixed),
            "policy prod/db: spec.ingress[0].from[0]: an ipBlock peer may not also have a selector"
        );
        // Namespace selector alone: every pod of the namespaces; pod selector alone: own namespace.
        let c = check(&with_ingress(
            vec![],
            vec![
                Peer {
                    namespace_selector: Some(LabelSelector::default()),
                    ..Peer::default()
                },
                Peer {
                    pod_selector: Some(LabelSelector::default()),
                    ..Peer::default()
                },
            ],
        ))
        .expect("valid");
        let peers = &c.ingress.expect("ingress")[0].peers;
        assert_eq!(
            peers[0],
            CheckedPeer::Pods {
                pods: Selector::default(),
                scope: Scope::Matching(Selector::default())
            }
        );
        assert_eq!(
            peers[1],
            CheckedPeer::Pods {
                pods: Selector::default(),
                scope: Scope::Own
            }
        );
    }

    #[test]
    fn selectors() {
        let sel = |r: Requirement| {
            let p = Policy {
                pod_selector: LabelSelector {
                    match_expressions: vec![r],
                    ..LabelSelector::default()
                },
                ..policy()
            };
            check(&p).map(|_| ()).map_err(|e| e.to_string())
        };
        let req = |k: &str, op: &str, v: &[&str]| Requirement {
            key: k.into(),
            operator: op.into(),
            values: v.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(sel(req("app", "In", &["a"])), Ok(()));
        assert_eq!(sel(req("example.com/app", "Exists", &[])), Ok(()));
        assert_eq!(
            sel(req("app", "Matches", &["a"])),
            Err("policy prod/db: spec.podSelector.matchExpressions[0].operator: unknown operator \"Matches\" (In, NotIn, Exists or DoesNotExist)".into())
        );
        assert_eq!(
            sel(req("app", "NotIn", &[])),
            Err("policy prod/db: spec.podSelector.matchExpressions[0].values: operator NotIn needs at least one value".into())
        );
        assert_eq!(
            sel(req("app", "DoesNotExist", &["x"])),
            Err("policy prod/db: spec.podSelector.matchExpressions[0].values: operator DoesNotExist takes no values".into())
        );
        assert!(sel(req("-app", "Exists", &[]))
            .unwrap_err()
            .contains("not a valid label key"));
        assert!(sel(req("app", "In", &["a b"]))
            .unwrap_err()
            .contains("not a valid label value"));
        let p = Policy {
            pod_selector: LabelSelector {
                match_labels: [("app".to_string(), "x/y".to_string())].into(),
                ..LabelSelector::default()
            },
            ..policy()
        };
        assert_eq!(
            err(&p),
            "policy prod/db: spec.podSelector.matchLabels: \"x/y\" is not a valid label value"
        );
    }

    #[test]
    fn egress_fields_named_as_egress() {
        let p = Policy {
            egress: vec![Rule {
                ports: vec![],
                peers: vec![Peer::default()],
            }],
            ..policy()
        };
        assert!(err(&p).starts_with("policy prod/db: spec.egress[0].to[0]: "));
    }
}
