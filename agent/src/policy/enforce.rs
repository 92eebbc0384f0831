//! The enforcement loop: the informers' updates go into the store; once every kind has been
//! listed, each batch of updates (all that arrived while the last one was being applied) is
//! compiled for this node's pods and handed to the data plane, which commits the difference
//! in one transaction. A failed commit is retried; the next success rewrites the whole table.
//! A policy the compiler refuses (or cannot read) is logged once per version and enforced as
//! nothing, as the apiserver would never have stored it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_channel::mpsc::UnboundedReceiver;
use futures_channel::oneshot;
use futures_util::StreamExt;
use netpolicy::{compile_for, Plan};
use tokio::time::{sleep_until, Instant};

use super::store::{Store, Update};
use crate::ops::metrics::{self, Samples};
use crate::{debug, log, warn};

/// What a commit sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Synced {
    /// The whole table was written (first commit, or after a failure).
    pub full: bool,
    pub messages: usize,
    pub elements_added: usize,
    pub elements_removed: usize,
    pub chains_written: usize,
}

/// Where plans go: the kernel's table, or a fake in tests.
pub trait Dataplane {
    fn sync(&mut self, plan: &Plan) -> Result<Synced, String>;
}

/// The last plan committed, shared with the tasks that read it on the loop's thread (the
/// denied-flow reporter): a borrow never spans an await, so it never meets the loop's.
pub type SharedPlan = Rc<RefCell<Option<Plan>>>;

/// How long to wait before retrying a failed commit.
const RETRY: Duration = Duration::from_secs(1);
/// A batch of API changes ends when none comes for this long...
const QUIET: Duration = Duration::from_millis(5);
/// ... or after this long since the batch began, whatever keeps coming.
const GATHER_AT_MOST: Duration = Duration::from_millis(100);

/// The figures `/metrics` shows, kept by the loop.
#[derive(Debug, Default)]
pub struct Figures {
    pub syncs: AtomicU64,
    pub full_syncs: AtomicU64,
    pub failures: AtomicU64,
    pub last_sync_micros: AtomicU64,
    pub policies: AtomicU64,
    pub refused: AtomicU64,
    pub pods: AtomicU64,
    pub targets: AtomicU64,
    pub sets: AtomicU64,
    pub elements: AtomicU64,
    /// The CNI chain's ADD-time requests, answered: covered by a commit, or refused.
    pub admitted: AtomicU64,
    pub admissions_refused: AtomicU64,
}

impl Figures {
    fn render(&self, out: &mut Samples) {
        let get = |a: &AtomicU64| vec![(String::new(), a.load(Ordering::Relaxed).to_string())];
        out.family(
            "ferrocni_agent_policy_syncs_total",
            "counter",
            "NetworkPolicy commits to the kernel's table, by kind (full rewrite or changes only).",
            &[
                (
                    metrics::label("kind", "full"),
                    self.full_syncs.load(Ordering::Relaxed).to_string(),
                ),
                (
                    metrics::label("kind", "changes"),
                    (self.syncs.load(Ordering::Relaxed) - self.full_syncs.load(Ordering::Relaxed))
                        .to_string(),
                ),
            ],
        );
        out.family(
            "ferrocni_agent_policy_sync_failures_total",
            "counter",
            "NetworkPolicy commits the kernel refused (each is retried).",
            &get(&self.failures),
        );
        out.family(
            "ferrocni_agent_policy_last_sync_duration_seconds",
            "gauge",
            "Time from the last batch of API changes to its commit (compile and commit).",
            &[(
                String::new(),
                format!(
                    "{:.6}",
                    self.last_sync_micros.load(Ordering::Relaxed) as f64 / 1e6
                ),
            )],
        );
        out.family(
            "ferrocni_agent_policies",
            "gauge",
            "NetworkPolicies known, by state: enforced, or refused (invalid, left out).",
            &[
                (
                    metrics::label("state", "enforced"),
                    self.policies.load(Ordering::Relaxed).to_string(),
                ),
                (
                    metrics::label("state", "refused"),
                    self.refused.load(Ordering::Relaxed).to_string(),
                ),
            ],
        );
        out.family(
            "ferrocni_agent_policy_admissions_total",
            "counter",
            "Pods the CNI chain asked about at ADD, by result: admitted (a commit covers their addresses) or refused (unknown pod, or no commit in time; the runtime retries the ADD).",
            &[
                (
                    metrics::label("result", "admitted"),
                    self.admitted.load(Ordering::Relaxed).to_string(),
                ),
                (
                    metrics::label("result", "refused"),
                    self.admissions_refused.load(Ordering::Relaxed).to_string(),
                ),
            ],
        );
        out.family(
            "ferrocni_agent_policy_pods",
            "gauge",
            "Pods with an address known to policy, in the whole cluster.",
            &get(&self.pods),
        );
        out.family(
            "ferrocni_agent_policy_targets",
            "gauge",
            "Addresses of this node's pods that some policy isolates.",
            &get(&self.targets),
        );
        out.family(
            "ferrocni_agent_policy_sets",
            "gauge",
            "Address sets in the table, and their elements.",
            &[
                (
                    metrics::label("what", "sets"),
                    self.sets.load(Ordering::Relaxed).to_string(),
                ),
                (
                    metrics::label("what", "elements"),
                    self.elements.load(Ordering::Relaxed).to_string(),
                ),
            ],
        );
    }
}

pub struct Enforcer<D: Dataplane> {
    pub store: Store,
    node: String,
    plane: D,
    /// The last plan committed (what `explain` and the denied-flow reporter read on this
    /// node).
    pub plan: SharedPlan,
    /// Refusals already logged, by policy key, with their text.
    reported: BTreeMap<String, String>,
    figures: Arc<Figures>,
}

impl<D: Dataplane> Enforcer<D> {
    pub fn new(node: &str, plane: D) -> Enforcer<D> {
        Enforcer {
            store: Store::default(),
            node: node.to_string(),
            plane,
            plan: SharedPlan::default(),
            reported: BTreeMap::new(),
            figures: Arc::new(Figures::default()),
        }
    }

    /// Makes the figures, and `more` (another part's families), part of every `/metrics`
    /// scrape.
    pub fn publish_metrics(&self, more: Option<metrics::Source>) {
        let figures = self.figures.clone();
        metrics::set_policy_source(Some(Arc::new(move |out: &mut Samples| {
            figures.render(out);
            if let Some(more) = &more {
                more(out);
            }
        })));
    }

    /// Compiles the store for this node's pods and commits the plan.
    pub fn enforce(&mut self) -> Result<Synced, String> {
        let started = Instant::now();
        let local = self.store.pods_on(&self.node);
        let compiled = compile_for(&self.store.cluster(), |p| local.contains(&p.key()));
        self.report_refusals(&compiled.refused);
        let synced = self.plane.sync(&compiled.plan);
        let f = &self.figures;
        match &synced {
            Ok(s) => {
                f.syncs.fetch_add(1, Ordering::Relaxed);
                if s.full {
                    f.full_syncs.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                f.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        let took = started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        f.last_sync_micros.store(took, Ordering::Relaxed);
        let refused = compiled.refused.len() + self.store.unreadable().len();
        f.policies.store(
            self.store
                .policy_count()
                .saturating_sub(compiled.refused.len()) as u64,
            Ordering::Relaxed,
        );
        f.refused.store(refused as u64, Ordering::Relaxed);
        f.pods
            .store(self.store.pod_count() as u64, Ordering::Relaxed);
        f.targets
            .store(compiled.plan.targets.len() as u64, Ordering::Relaxed);
        f.sets
            .store(compiled.plan.sets.len() as u64, Ordering::Relaxed);
        let elements: usize = compiled.plan.sets.values().map(|s| s.elements.len()).sum();
        f.elements.store(elements as u64, Ordering::Relaxed);
        if synced.is_ok() {
            *self.plan.borrow_mut() = Some(compiled.plan);
        }
        synced
    }

    /// Logs each refused or unreadable policy once per distinct reason, and forgets the ones
    /// that are fixed or gone (so a policy refused again is logged again).
    fn report_refusals(&mut self, refused: &[netpolicy::PolicyError]) {
        let mut now: BTreeMap<String, String> = refused
            .iter()
            .map(|e| (e.policy().to_string(), e.to_string()))
            .collect();
        for (key, why) in self.store.unreadable() {
            now.insert(key.clone(), format!("policy {key}: {why}"));
        }
        for (key, text) in &now {
            if self.reported.get(key) != Some(text) {
                warn!("{text}; the policy is left out (it allows nothing and isolates no pod)");
            }
        }
        let fixed: BTreeSet<&String> = self
            .reported
            .keys()
            .filter(|k| !now.contains_key(*k))
            .collect();
        for key in fixed {
            log!("policy {key} is no longer refused");
        }
        self.reported = now;
    }
}

/// A pod's addresses as the CNI chain gives them at ADD, and where to answer once a commit
/// covers them (or why not).
pub struct Admission {
    /// `namespace/name`.
    pub key: String,
    pub ips: Vec<IpAddr>,
    pub reply: oneshot::Sender<Result<(), String>>,
    pub deadline: Instant,
}

impl Admission {
    fn answer(self, figures: &Figures, result: Result<(), String>) {
        let count = match result {
            Ok(()) => &figures.admitted,
            Err(_) => &figures.admissions_refused,
        };
        count.fetch_add(1, Ordering::Relaxed);
        // The asker may have given up; nothing to do then.
        let _ = self.reply.send(result);
    }
}

/// Applies the informers' updates and the CNI chain's admissions, and enforces, until every
/// informer is gone.
pub async fn run<D: Dataplane>(
    mut enforcer: Enforcer<D>,
    mut updates: UnboundedReceiver<Update>,
    mut admissions: UnboundedReceiver<Admission>,
) {
    let mut dirty = false;
    let mut admissions_open = true;
    // Admissions whose pod the store does not know yet.
    let mut unknown: Vec<Admission> = Vec::new();
    // Admissions in the store, answered by the next commit.
    let mut uncommitted: Vec<Admission> = Vec::new();
    loop {
        let retry = dirty.then(|| Instant::now() + RETRY);
        let deadline = unknown
            .iter()
            .chain(&uncommitted)
            .map(|a| a.deadline)
            .chain(retry)
            .min();
        tokio::select! {
            u = updates.next() => match u {
                Some(u) => dirty |= enforcer.store.apply(u),
                None => return,
            },
            a = admissions.next(), if admissions_open => match a {
                Some(a) => unknown.push(a),
                None => admissions_open = false,
            },
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {}
        }
        // Everything that arrived meanwhile goes into the same commit. The informers run on
        // this thread, so events the last compile held up are still unread in their sockets:
        // wait for the stream to fall quiet (briefly, and not for ever under churn) so that a
        // burst is one commit rather than one per event.
        while let Ok(u) = updates.try_recv() {
            dirty |= enforcer.store.apply(u);
        }
        if dirty {
            let cap = Instant::now() + GATHER_AT_MOST;
            while Instant::now() < cap {
                match tokio::time::timeout(QUIET, updates.next()).await {
                    Ok(Some(u)) => dirty |= enforcer.store.apply(u),
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
        }
        while let Ok(a) = admissions.try_recv() {
            unknown.push(a);
        }
        for a in std::mem::take(&mut unknown) {
            match enforcer.store.admit(&a.key, a.ips.clone()) {
                Some(changed) => {
                    dirty |= changed;
                    uncommitted.push(a);
                }
                None => unknown.push(a),
            }
        }
        if enforcer.store.complete() {
            if dirty {
                commit(&mut enforcer, &mut dirty, &mut uncommitted);
            } else {
                for a in uncommitted.drain(..) {
                    a.answer(&enforcer.figures, Ok(()));
                }
            }
        }
        let now = Instant::now();
        let (late, waiting): (Vec<Admission>, Vec<Admission>) =
            unknown.drain(..).partition(|a| a.deadline <= now);
        unknown = waiting;
        for a in late {
            let why = format!(
                "pod {} is not known to the agent (not in the API, or its watch lags)",
                a.key
            );
            a.answer(&enforcer.figures, Err(why));
        }
        let (late, waiting): (Vec<Admission>, Vec<Admission>) =
            uncommitted.drain(..).partition(|a| a.deadline <= now);
        uncommitted = waiting;
        for a in late {
            let why = if enforcer.store.complete() {
                "the policy table could not be committed (see the agent's log)"
            } else {
                "the agent has not listed the cluster yet"
            };
            let why = format!("pod {}: {why}", a.key);
            a.answer(&enforcer.figures, Err(why));
        }
    }
}

/// Enforces the store; on success every admission waiting for a commit is answered.
fn commit<D: Dataplane>(
    enforcer: &mut Enforcer<D>,
    dirty: &mut bool,
    uncommitted: &mut Vec<Admission>,
) {
    match enforcer.enforce() {
        Ok(s) => {
            *dirty = false;
            for a in uncommitted.drain(..) {
                a.answer(&enforcer.figures, Ok(()));
            }
            let what = if s.full {
                "wrote the table"
            } else {
                "committed"
            };
            debug!(
                1,
                "policy: {what}: {} message(s), +{}/-{} element(s), {} chain(s)",
                s.messages,
                s.elements_added,
                s.elements_removed,
                s.chains_written
            );
            if s.full {
                log!(
                    "policy: enforcing {} policies on {} address(es) of this node",
                    enforcer.figures.policies.load(Ordering::Relaxed),
                    enforcer.figures.targets.load(Ordering::Relaxed)
                );
            }
        }
        Err(e) => {
            warn!("policy: {e}; retrying");
            metrics::record_error(&e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::objects::PodRecord;
    use crate::policy::store::{Kind, Object};
    use netpolicy::{LabelSelector, Pod, Policy};

    #[derive(Default)]
    struct FakePlane {
        plans: Vec<Plan>,
        fail: bool,
    }

    impl Dataplane for &mut FakePlane {
        fn sync(&mut self, plan: &Plan) -> Result<Synced, String> {
            if self.fail {
                return Err("commit refused".into());
            }
            let full = self.plans.is_empty();
            self.plans.push(plan.clone());
            Ok(Synced {
                full,
                ..Synced::default()
            })
        }
    }

    fn pod(name: &str, node: &str, ip: &str) -> (String, Object) {
        (
            format!("prod/{name}"),
            Object::Pod(Some(PodRecord {
                pod: Pod {
                    namespace: "prod".into(),
                    name: name.into(),
                    ips: vec![ip.parse().unwrap()],
                    ..Pod::default()
                },
                node: node.into(),
            })),
        )
    }

    fn deny_all() -> (String, Object) {
        (
            "prod/deny".into(),
            Object::Policy(Some(Ok(Policy {
                namespace: "prod".into(),
                name: "deny".into(),
                pod_selector: LabelSelector::default(),
                ..Policy::default()
            }))),
        )
    }

    #[test]
    fn only_this_nodes_pods_are_targets() {
        let mut plane = FakePlane::default();
        let mut e = Enforcer::new("n1", &mut plane);
        e.store.apply(Update::Listed(Kind::Namespaces, vec![]));
        e.store.apply(Update::Listed(
            Kind::Pods,
            vec![pod("a", "n1", "10.0.1.2"), pod("b", "n2", "10.0.2.2")],
        ));
        e.store
            .apply(Update::Listed(Kind::Policies, vec![deny_all()]));
        let s = e.enforce().expect("synced");
        assert!(s.full);
        let plan = e.plan.borrow();
        let plan = plan.as_ref().expect("plan");
        let targets: Vec<String> = plan.targets.keys().map(|a| a.to_string()).collect();
        assert_eq!(targets, ["10.0.1.2"]);
    }

    #[test]
    fn a_refused_policy_isolates_nothing() {
        let mut plane = FakePlane::default();
        let mut e = Enforcer::new("n1", &mut plane);
        e.store.apply(Update::Listed(Kind::Namespaces, vec![]));
        e.store
            .apply(Update::Listed(Kind::Pods, vec![pod("a", "n1", "10.0.1.2")]));
        e.store.apply(Update::Listed(
            Kind::Policies,
            vec![(
                "prod/bad".into(),
                Object::Policy(Some(Ok(Policy {
                    namespace: "prod".into(),
                    name: "bad".into(),
                    policy_types: Some(vec!["Sideways".into()]),
                    ..Policy::default()
                }))),
            )],
        ));
        e.enforce().expect("synced");
        assert!(e.plan.borrow().as_ref().expect("plan").targets.is_empty());
        assert_eq!(e.figures.refused.load(Ordering::Relaxed), 1);
        assert_eq!(e.reported.len(), 1);
    }

    /// A data plane shared with the test, for the loop's own task.
    #[derive(Clone, Default)]
    struct SharedPlane(std::rc::Rc<std::cell::RefCell<Vec<Plan>>>);

    impl Dataplane for SharedPlane {
        fn sync(&mut self, plan: &Plan) -> Result<Synced, String> {
            self.0.borrow_mut().push(plan.clone());
            Ok(Synced::default())
        }
    }

    fn pending(name: &str, node: &str) -> (String, Object) {
        (
            format!("prod/{name}"),
            Object::Pod(Some(PodRecord {
                pod: Pod {
                    namespace: "prod".into(),
                    name: name.into(),
                    ..Pod::default()
                },
                node: node.into(),
            })),
        )
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn admissions_are_answered_by_the_commit_that_covers_them() {
        use futures_channel::mpsc::unbounded;
        let plane = SharedPlane::default();
        let (updates, updates_rx) = unbounded();
        let (admissions, admissions_rx) = unbounded();
        let local = tokio::task::LocalSet::new();
        let plans = plane.0.clone();
        let enforcer = Enforcer::new("n1", plane);
        let figures = enforcer.figures.clone();
        local
            .run_until(async move {
                tokio::task::spawn_local(run(enforcer, updates_rx, admissions_rx));
                let admit = |name: &str| {
                    let (reply, answer) = oneshot::channel();
                    admissions
                        .unbounded_send(Admission {
                            key: format!("prod/{name}"),
                            ips: vec!["10.0.1.7".parse().unwrap()],
                            reply,
                            deadline: Instant::now() + Duration::from_secs(10),
                        })
                        .unwrap();
                    answer
                };
                // Asked before the cluster is listed: answered once it is, and committed.
                let early = admit("db");
                for (kind, objects) in [
                    (Kind::Namespaces, vec![]),
                    (Kind::Pods, vec![pending("db", "n1")]),
                    (Kind::Policies, vec![deny_all()]),
                ] {
                    updates
                        .unbounded_send(Update::Listed(kind, objects))
                        .unwrap();
                }
                assert_eq!(early.await.unwrap(), Ok(()));
                let last = plans.borrow().last().cloned().expect("a commit");
                assert!(last.targets.contains_key(&"10.0.1.7".parse().unwrap()));
                // A pod the API never shows: refused at the deadline.
                let unknown = admit("ghost");
                let answer = unknown.await.unwrap();
                assert!(answer.unwrap_err().contains("prod/ghost is not known"));
                let counted = |c: &AtomicU64| c.load(Ordering::Relaxed);
                assert_eq!(
                    (
                        counted(&figures.admitted),
                        counted(&figures.admissions_refused)
                    ),
                    (1, 1)
                );
            })
            .await;
    }

    #[test]
    fn a_failed_commit_keeps_the_last_plan() {
        let mut plane = FakePlane {
            fail: true,
            ..FakePlane::default()
        };
        let mut e = Enforcer::new("n1", &mut plane);
        e.store
            .apply(Update::Listed(Kind::Policies, vec![deny_all()]));
        assert!(e.enforce().is_err());
        assert!(e.plan.borrow().is_none());
        assert_eq!(e.figures.failures.load(Ordering::Relaxed), 1);
    }
}
