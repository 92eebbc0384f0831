//! Which pods and namespaces a checked selector matches, and which pods a policy selects and a
//! rule's peer matches, with the API's semantics:
//!
//! - a selector's `matchLabels` and `matchExpressions` all hold (an empty selector matches
//!   everything); `In` needs the label with one of the values, `NotIn` holds when the label is
//!   absent or has none of the values, `Exists` and `DoesNotExist` look at the key alone;
//! - a policy selects pods of its own namespace only;
//! - a peer with a pod selector alone matches pods of the policy's namespace; with a namespace
//!   selector alone, every pod of the matching namespaces; with both, the matching pods of the
//!   matching namespaces;
//! - host-network pods are never selected and never matched by a selector (they have the
//!   node's addresses; only an ipBlock reaches them).

use std::collections::BTreeMap;

use crate::model::{Labels, Namespace, Pod};

/// A selector the apiserver would admit (see `validate`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) exprs: Vec<Expr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expr {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    pub fn matches(&self, labels: &Labels) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
            && self.exprs.iter().all(|e| e.matches(labels))
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.exprs.is_empty()
    }
}

impl Expr {
    fn matches(&self, labels: &Labels) -> bool {
        match self {
            Expr::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Expr::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Expr::Exists(k) => labels.contains_key(k),
            Expr::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// Which namespaces a pod peer looks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The policy's own namespace.
    Own,
    Matching(Selector),
}

/// The cluster's namespaces' labels, for namespace selectors. A namespace the agent has no
/// object for (yet) has no labels: only an empty namespace selector matches it.
pub(crate) struct NamespaceIndex<'a> {
    labels: BTreeMap<&'a str, &'a Labels>,
    empty: Labels,
}

impl<'a> NamespaceIndex<'a> {
    pub(crate) fn new(namespaces: &'a [Namespace]) -> Self {
        NamespaceIndex {
            labels: namespaces
                .iter()
                .map(|ns| (ns.name.as_str(), &ns.labels))
                .collect(),
            empty: Labels::new(),
        }
    }

    pub(crate) fn labels(&self, name: &str) -> &Labels {
        self.labels.get(name).copied().unwrap_or(&self.empty)
    }
}

/// Whether a policy of `namespace` with this pod selector selects `pod` as a target.
pub(crate) fn selects(namespace: &str, selector: &Selector, pod: &Pod) -> bool {
    !pod.host_network && pod.namespace == namespace && selector.matches(&pod.labels)
}

/// Whether a pod peer's `scope`, in a policy of `policy_namespace`, takes in `namespace`.
pub(crate) fn in_scope(
    scope: &Scope,
    policy_namespace: &str,
    namespace: &str,
    nsx: &NamespaceIndex<'_>,
) -> bool {
    match scope {
        Scope::Own => namespace == policy_namespace,
        Scope::Matching(ns) => ns.matches(nsx.labels(namespace)),
    }
}

/// Whether one of the pod selectors of the peers whose scope takes in `pod`'s namespace
/// matches it.
pub(crate) fn pod_matches(selectors: &[&Selector], pod: &Pod) -> bool {
    !pod.host_network && selectors.iter().any(|s| s.matches(&pod.labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pod(ns: &str, l: &[(&str, &str)]) -> Pod {
        Pod {
            namespace: ns.into(),
            name: "p".into(),
            labels: labels(l),
            ..Pod::default()
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(Selector::default().matches(&labels(&[])));
        assert!(Selector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn operators() {
        let have = labels(&[("tier", "db"), ("env", "prod")]);
        let sel = |e: Expr| Selector {
            labels: vec![],
            exprs: vec![e],
        };
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(sel(Expr::In("tier".into(), v(&["db", "web"]))).matches(&have));
        assert!(!sel(Expr::In("tier".into(), v(&["web"]))).matches(&have));
        assert!(!sel(Expr::In("absent".into(), v(&["db"]))).matches(&have));
        assert!(!sel(Expr::NotIn("tier".into(), v(&["db"]))).matches(&have));
        assert!(sel(Expr::NotIn("tier".into(), v(&["web"]))).matches(&have));
        // NotIn holds when the label is absent.
        assert!(sel(Expr::NotIn("absent".into(), v(&["db"]))).matches(&have));
        assert!(sel(Expr::Exists("env".into())).matches(&have));
        assert!(!sel(Expr::Exists("absent".into())).matches(&have));
        assert!(sel(Expr::DoesNotExist("absent".into())).matches(&have));
        assert!(!sel(Expr::DoesNotExist("env".into())).matches(&have));
    }

    #[test]
    fn labels_and_expressions_all_hold() {
        let sel = Selector {
            labels: vec![("tier".into(), "db".into())],
            exprs: vec![Expr::Exists("env".into())],
        };
        assert!(sel.matches(&labels(&[("tier", "db"), ("env", "x")])));
        assert!(!sel.matches(&labels(&[("tier", "db")])));
        assert!(!sel.matches(&labels(&[("tier", "web"), ("env", "x")])));
    }

    #[test]
    fn policy_selects_own_namespace_only_and_never_host_network() {
        let all = Selector::default();
        assert!(selects("a", &all, &pod("a", &[])));
        assert!(!selects("b", &all, &pod("a", &[])));
        let mut host = pod("a", &[]);
        host.host_network = true;
        assert!(!selects("a", &all, &host));
    }

    /// A pod peer (`pods` in `scope`) of a policy of `namespace`, on `pod`.
    fn peer_matches(
        namespace: &str,
        pods: &Selector,
        scope: &Scope,
        nsx: &NamespaceIndex<'_>,
        pod: &Pod,
    ) -> bool {
        in_scope(scope, namespace, &pod.namespace, nsx) && pod_matches(&[pods], pod)
    }

    #[test]
    fn peer_scopes() {
        let namespaces = vec![
            Namespace {
                name: "a".into(),
                labels: labels(&[("team", "x")]),
            },
            Namespace {
                name: "b".into(),
                labels: labels(&[("team", "y")]),
            },
        ];
        let nsx = NamespaceIndex::new(&namespaces);
        let web = Selector {
            labels: vec![("app".into(), "web".into())],
            exprs: vec![],
        };
        let team_y = Scope::Matching(Selector {
            labels: vec![("team".into(), "y".into())],
            exprs: vec![],
        });
        let a_web = pod("a", &[("app", "web")]);
        let b_web = pod("b", &[("app", "web")]);
        let b_db = pod("b", &[("app", "db")]);
        let c_web = pod("c", &[("app", "web")]);
        // Pod selector alone: the policy's namespace.
        assert!(peer_matches("a", &web, &Scope::Own, &nsx, &a_web));
        assert!(!peer_matches("a", &web, &Scope::Own, &nsx, &b_web));
        // Namespace selector alone (an empty pod selector): every pod there.
        let any = Selector::default();
        assert!(peer_matches("a", &any, &team_y, &nsx, &b_db));
        assert!(!peer_matches("a", &any, &team_y, &nsx, &a_web));
        // Both: matching pods in matching namespaces.
        assert!(peer_matches("a", &web, &team_y, &nsx, &b_web));
        assert!(!peer_matches("a", &web, &team_y, &nsx, &b_db));
        // A namespace without an object has no labels: only an empty selector matches it.
        assert!(!peer_matches("a", &web, &team_y, &nsx, &c_web));
        let all_ns = Scope::Matching(Selector::default());
        assert!(peer_matches("a", &web, &all_ns, &nsx, &c_web));
        // Host-network pods are matched by no selector.
        let mut host = b_web.clone();
        host.host_network = true;
        assert!(!peer_matches("a", &any, &all_ns, &nsx, &host));
    }
}
