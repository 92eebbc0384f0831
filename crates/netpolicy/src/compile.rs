//! Inputs to [`Plan`]: each policy checked (`validate`), its rules' sets filled from
//! the pods, and its clauses added to every address it selects.
//!
//! Choices where the API leaves room (see docs/network-policy.md):
//! - a pod's addresses are its `ips`; an address two pods claim (a stale pod) belongs to the
//!   first by namespace/name, the other is no target for it;
//! - a named port of an ingress rule is resolved on the target pod; of an egress rule, on each
//!   destination pod (a `NamedPorts` set); a named port never matches an address that is no
//!   pod's;
//! - an ipBlock matches any address inside it, pods' included.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::ops::Range;
use std::sync::Arc;

use crate::error::PolicyError;
use crate::interval::{self, Span};
use crate::model::{Cluster, Pod, PolicyKey, Protocol};
use crate::names::{self, PeerClass};
use crate::plan::{
    AddrSet, Clause, ClausePeer, ClausePorts, Direction, Element, Family, Isolation, Plan,
    PortRange, SetKind, Target,
};
use crate::selector::{self, NamespaceIndex, Selector};
use crate::validate::{self, Checked, CheckedPeer, CheckedRule, Port};

/// A plan and the policies left out of it (the apiserver would have refused them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compiled {
    pub plan: Plan,
    pub refused: Vec<PolicyError>,
}

/// The plan for every pod of the cluster.
pub fn compile(cluster: &Cluster) -> Compiled {
    compile_for(cluster, |_| true)
}

/// The plan with targets only for the pods `local` accepts (a node's own pods); the sets are
/// the same whatever `local` says, so they can be compared across nodes.
pub fn compile_for(cluster: &Cluster, local: impl Fn(&Pod) -> bool) -> Compiled {
    let mut pods: Vec<&Pod> = cluster.pods.iter().filter(|p| !p.ips.is_empty()).collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut plan = Plan::default();
    for pod in pods.iter().filter(|p| !p.host_network) {
        for ip in &pod.ips {
            plan.pods.entry(*ip).or_insert_with(|| pod.key());
        }
    }
    // A pod's addresses it owns (not claimed by a pod before it), for targets.
    let owned: Vec<Vec<IpAddr>> = pods
        .iter()
        .map(|p| {
            p.ips
                .iter()
                .copied()
                .filter(|ip| {
                    plan.pods
                        .get(ip)
                        .is_some_and(|k| k.namespace == p.namespace && k.name == p.name)
                })
                .collect()
        })
        .collect();
    let mut by_namespace: BTreeMap<&str, Range<usize>> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        by_namespace
            .entry(p.namespace.as_str())
            .and_modify(|r| r.end = i + 1)
            .or_insert(i..i + 1);
    }
    let ctx = Ctx {
        pods: &pods,
        owned: &owned,
        by_namespace,
        nsx: NamespaceIndex::new(&cluster.namespaces),
    };

    let mut policies: Vec<_> = cluster.policies.iter().collect();
    policies.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut refused = Vec::new();
    let mut targets: BTreeMap<IpAddr, Target> = BTreeMap::new();
    for policy in policies {
        let checked = match validate::check(policy) {
            Ok(c) => c,
            Err(e) => {
                refused.push(e);
                continue;
            }
        };
        let part = ctx.policy(&checked, &local);
        if let Some(name) = part.sets.keys().find(|n| plan.sets.contains_key(*n)) {
            refused.push(PolicyError::SetNameCollision {
                policy: checked.key.clone(),
                name: name.to_string(),
            });
            continue;
        }
        plan.sets.extend(part.sets);
        for (ip, pod, direction, policy, clauses) in part.grants {
            let t = targets.entry(ip).or_insert_with(|| Target {
                pod: ctx.pods[pod].key(),
                ingress: Isolation::default(),
                egress: Isolation::default(),
            });
            let iso = match direction {
                Direction::Ingress => &mut t.ingress,
                Direction::Egress => &mut t.egress,
            };
            iso.policies.push(policy);
            iso.clauses.extend(clauses);
        }
    }
    for t in targets.values_mut() {
        for iso in [&mut t.ingress, &mut t.egress] {
            iso.policies.sort();
            iso.policies.dedup();
            iso.clauses.sort();
            iso.clauses.dedup();
        }
    }
    plan.targets = targets;
    Compiled { plan, refused }
}

struct Ctx<'a> {
    /// Pods with addresses, sorted by namespace/name.
    pods: &'a [&'a Pod],
    owned: &'a [Vec<IpAddr>],
    /// Each namespace's pods: one range of `pods`, as they are sorted.
    by_namespace: BTreeMap<&'a str, Range<usize>>,
    nsx: NamespaceIndex<'a>,
}

/// What one policy adds: its sets, and per selected address and direction its clauses.
struct Part {
    sets: BTreeMap<Arc<str>, AddrSet>,
    grants: Vec<Grant>,
}

type Grant = (IpAddr, usize, Direction, Arc<PolicyKey>, Vec<Clause>);

/// A rule's sets, per family.
#[derive(Default)]
struct RuleSets {
    pods: BTreeMap<Family, Arc<str>>,
    blocks: BTreeMap<Family, Arc<str>>,
    named: BTreeMap<Family, Arc<str>>,
}

const FAMILIES: [Family; 2] = [Family::V4, Family::V6];

impl Ctx<'_> {
    fn policy(&self, p: &Checked, local: &impl Fn(&Pod) -> bool) -> Part {
        let key = Arc::new(p.key.clone());
        let own = self
            .by_namespace
            .get(p.key.namespace.as_str())
            .cloned()
            .unwrap_or_default();
        let targets: Vec<usize> = own
            .filter(|&i| {
                let pod = self.pods[i];
                !self.owned[i].is_empty()
                    && selector::selects(&p.key.namespace, &p.pod_selector, pod)
                    && local(pod)
            })
            .collect();
        let mut part = Part {
            sets: BTreeMap::new(),
            grants: Vec::new(),
        };
        for (direction, rules) in [
            (Direction::Ingress, &p.ingress),
            (Direction::Egress, &p.egress),
        ] {
            let Some(rules) = rules else { continue };
            let sets: Vec<RuleSets> = rules
                .iter()
                .enumerate()
                .map(|(i, r)| self.rule_sets(&key, direction, i, r, &mut part.sets))
                .collect();
            for &t in &targets {
                for &ip in &self.owned[t] {
                    let family = Family::of(ip);
                    let mut clauses = Vec::new();
                    for (i, (rule, sets)) in rules.iter().zip(&sets).enumerate() {
                        self.clauses(&key, direction, i, rule, sets, t, family, &mut clauses);
                    }
                    part.grants.push((ip, t, direction, key.clone(), clauses));
                }
            }
        }
        part
    }

    /// Creates the sets of one rule (whatever pods there are, so that pods coming and going
    /// change elements only) and fills them.
    fn rule_sets(
        &self,
        key: &Arc<PolicyKey>,
        direction: Direction,
        rule_index: usize,
        rule: &CheckedRule,
        sets: &mut BTreeMap<Arc<str>, AddrSet>,
    ) -> RuleSets {
        let mut out = RuleSets::default();
        let mut new_set = |class: PeerClass, kind: SetKind, family: Family| -> Arc<str> {
            let name: Arc<str> = names::set_name(key, direction, rule_index, class, family).into();
            sets.insert(
                name.clone(),
                AddrSet {
                    family,
                    kind,
                    policy: key.clone(),
                    direction,
                    rule: rule_index,
                    elements: BTreeSet::new(),
                },
            );
            name
        };
        let pod_peers: Vec<_> = rule
            .peers
            .iter()
            .filter_map(|p| match p {
                CheckedPeer::Pods { pods, scope } => Some((pods, scope)),
                CheckedPeer::Block { .. } => None,
            })
            .collect();
        let mut block_families = BTreeSet::new();
        let mut spans = Vec::new();
        for p in &rule.peers {
            if let CheckedPeer::Block { family, spans: s } = p {
                block_families.insert(*family);
                spans.extend_from_slice(s);
            }
        }
        let spans = interval::union(spans);

        // Pods the selectors match (indexes into self.pods).
        // The pod peers' scopes are judged once per namespace, their selectors per pod.
        let mut matched: Vec<usize> = Vec::new();
        for (namespace, range) in self.by_namespace.iter().filter(|_| !pod_peers.is_empty()) {
            let peers: Vec<&Selector> = pod_peers
                .iter()
                .filter(|(_, scope)| {
                    selector::in_scope(scope, &key.namespace, namespace, &self.nsx)
                })
                .map(|(pods, _)| *pods)
                .collect();
            if peers.is_empty() {
                continue;
            }
            matched.extend(
                range
                    .clone()
                    .filter(|&i| selector::pod_matches(&peers, self.pods[i])),
            );
        }
        // An egress rule whose ports are all named needs the NamedPorts sets alone.
        let plain = direction == Direction::Ingress
            || rule.ports.is_empty()
            || rule.ports.iter().any(|p| matches!(p, Port::Range(..)));
        if plain && !pod_peers.is_empty() {
            for family in FAMILIES {
                let name = new_set(PeerClass::Pods, SetKind::Addresses, family);
                out.pods.insert(family, name);
            }
        }
        for family in block_families.into_iter().filter(|_| plain) {
            let name = new_set(PeerClass::Blocks, SetKind::Intervals, family);
            out.blocks.insert(family, name);
        }
        let named: Vec<(Protocol, &str)> = rule
            .ports
            .iter()
            .filter_map(|p| match p {
                Port::Named(proto, name) => Some((*proto, name.as_str())),
                Port::Range(..) => None,
            })
            .collect();
        let named_ports = direction == Direction::Egress && !named.is_empty();
        if named_ports {
            for family in FAMILIES {
                let name = new_set(PeerClass::NamedPorts, SetKind::AddrPorts, family);
                out.named.insert(family, name);
            }
        }

        let mut elements = |name: Option<&Arc<str>>, e: Element| {
            if let Some(set) = name.and_then(|n| sets.get_mut(n)) {
                set.elements.insert(e);
            }
        };
        for &i in &matched {
            for ip in &self.pods[i].ips {
                elements(out.pods.get(&Family::of(*ip)), Element::Addr(*ip));
            }
        }
        for s in &spans {
            elements(
                out.blocks.get(&s.family),
                Element::Interval(s.first_addr(), s.last_addr()),
            );
        }
        if named_ports {
            // The destinations: every pod when the rule has no `to`; else the pods matched
            // and the pods inside its blocks. Host-network pods are no destination pods.
            let matched: BTreeSet<usize> = matched.into_iter().collect();
            for (i, pod) in self.pods.iter().enumerate() {
                if pod.host_network {
                    continue;
                }
                for ip in &pod.ips {
                    let peer =
                        rule.peers.is_empty() || matched.contains(&i) || in_spans(&spans, *ip);
                    if !peer {
                        continue;
                    }
                    for (proto, name) in &named {
                        for np in pod
                            .ports
                            .iter()
                            .filter(|np| np.name == *name && np.protocol == *proto)
                        {
                            elements(
                                out.named.get(&Family::of(*ip)),
                                Element::AddrPort(*ip, *proto, np.port),
                            );
                        }
                    }
                }
            }
        }
        out
    }

    /// The clauses rule `i` gives the address of `family` of target pod `t`.
    #[allow(clippy::too_many_arguments)]
    fn clauses(
        &self,
        key: &Arc<PolicyKey>,
        direction: Direction,
        i: usize,
        rule: &CheckedRule,
        sets: &RuleSets,
        t: usize,
        family: Family,
        out: &mut Vec<Clause>,
    ) {
        let ports = if rule.ports.is_empty() {
            Some(ClausePorts::Any)
        } else {
            let mut ranges: Vec<PortRange> = Vec::new();
            for p in &rule.ports {
                match p {
                    Port::Range(protocol, first, last) => ranges.push(PortRange {
                        protocol: *protocol,
                        first: *first,
                        last: *last,
                    }),
                    // Ingress: the target's own port of that name.
                    Port::Named(protocol, name) if direction == Direction::Ingress => {
                        for np in &self.pods[t].ports {
                            if np.name == *name && np.protocol == *protocol {
                                ranges.push(PortRange {
                                    protocol: *protocol,
                                    first: np.port,
                                    last: np.port,
                                });
                            }
                        }
                    }
                    // Egress: per destination, in the NamedPorts set.
                    Port::Named(..) => {}
                }
            }
            // No port left: this part of the rule allows nothing for this target.
            (!ranges.is_empty()).then(|| ClausePorts::Ranges(merge(ranges)))
        };
        let mut push = |peer: ClausePeer, ports: ClausePorts| {
            out.push(Clause {
                policy: key.clone(),
                rule: i,
                peer,
                ports,
            })
        };
        if let Some(ports) = ports {
            if rule.peers.is_empty() {
                push(ClausePeer::Any, ports);
            } else {
                if let Some(name) = sets.pods.get(&family) {
                    push(ClausePeer::InSet(name.clone()), ports.clone());
                }
                if let Some(name) = sets.blocks.get(&family) {
                    push(ClausePeer::InSet(name.clone()), ports);
                }
            }
        }
        if let Some(name) = sets.named.get(&family) {
            push(ClausePeer::InAddrPortSet(name.clone()), ClausePorts::Any);
        }
    }
}

fn in_spans(spans: &[Span], ip: IpAddr) -> bool {
    let (family, v) = interval::value(ip);
    spans
        .iter()
        .any(|s| s.family == family && s.first <= v && v <= s.last)
}

/// Sorted ranges, those of one protocol that overlap or touch merged.
fn merge(mut ranges: Vec<PortRange>) -> Vec<PortRange> {
    ranges.sort();
    let mut out: Vec<PortRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        if let Some(last) = out.last_mut() {
            if last.protocol == r.protocol && u32::from(r.first) <= u32::from(last.last) + 1 {
                last.last = last.last.max(r.last);
                continue;
            }
        }
        out.push(r);
    }
    out
}
