//! `make bench`'s NetworkPolicy section: one real `ferrocni-agent` with `--network-policy`
//! (Kubernetes mode, vxlan) enforcing 200 NetworkPolicies over 1,000 Pods of a real control
//! plane (the Kubernetes section's lab: etcd, kube-apiserver, kube-controller-manager).
//!
//! The cluster: 20 namespaces (label `team`), four more Nodes beside the agent's (each
//! podCIDR assigned by the controller-manager), the pods bound to them by `spec.nodeName`, a
//! third on the agent's node, each with labels `app` and `tier`, named container ports and a
//! toleration of every taint; their status then patched to `Running` with an address from their
//! node's podCIDR, as the kubelet would (nothing runs a kubelet). The policies are a default
//! deny per namespace and allow policies with pod, namespace and ipBlock peers, named and
//! numbered ports, and egress rules, as the compiler's own bench builds them. The loader is the
//! Kubernetes section's: parallel requests over HTTP/2, as admin.
//!
//! Measured, each change from the API's answer to the kernel (the agent's table `inet
//! ferrocni_policy` read in its netns: one verdict map, one chain or one set, never the
//! whole table): the join (agent start to the first full commit, every isolated address of
//! this node in the ingress verdict map); policy changes one at a time (a podSelector, a
//! port); pod changes one at a time (created with its status, deleted, relabelled, on this
//! node and on another); a sustained churn of pods (commits per second, elements per
//! commit from the agent's `--v=1` log) and a burst of relabels; the agent's RSS and CPU.
//! `FERROCNI_BENCH_POLICY_PODS` and `FERROCNI_BENCH_POLICY_POLICIES` set the sizes.

mod cluster;
mod kernel;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::Ipv4Addr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::agent::Agent;
use crate::agent_scale::{http_get, log_tail, sample, usage, verdict};
use crate::kube::kube_bin_dir;
use crate::kube_scale::{ms, percentile, request_counts, Cost, Lab, Request, METRICS_PORT};
use cluster::{
    label_selector, namespace_name, namespace_object, node_name, parse_cidr, pod_name, pod_object,
    pod_path, policy_marker, policy_object, policy_path, policy_spec, status_patch, Model,
    PolicyModel, APPS, FIRST_PORT, NAMESPACES, PEERS, TIERS,
};
use kernel::{members, set_names, Landed, Listed};

const PODS_ENV: &str = "FERROCNI_BENCH_POLICY_PODS";
const POLICIES_ENV: &str = "FERROCNI_BENCH_POLICY_POLICIES";
const DEFAULT_PODS: usize = 1_000;
const DEFAULT_POLICIES: usize = 200;
/// Room for a third of a few thousand pods on the agent's node.
const NODE_MASK: u8 = 21;
const CONFIG: &str = r#"{"Network":"10.128.0.0/9","SubnetLen":21,"Backend":{"Type":"vxlan"}}"#;
const POLICY_CHANGES: usize = 20;
/// Rounds of the six pod changes (create, delete, relabel; here and on another node).
const POD_ROUNDS: usize = 10;
const CHURN_PER_SECOND: usize = 20;
const CHURN_SECONDS: usize = 10;
/// Pods relabelled at once in the burst.
const BURST: usize = 100;
const CHANGE_GOAL: Duration = Duration::from_secs(1);
const JOIN_WITHIN: Duration = Duration::from_secs(120);
const CHANGE_WITHIN: Duration = Duration::from_secs(10);
/// How long the controller-manager may take to give a new namespace its `default` account
/// (a pod cannot be created before).
const ACCOUNTS_WITHIN: Duration = Duration::from_secs(60);

/// Runs the section with the agent binary `agent`.
pub fn run(agent: &Path) {
    let pods = size(PODS_ENV, DEFAULT_PODS);
    let policies = size(POLICIES_ENV, DEFAULT_POLICIES);
    println!(
        "\n## ferrocni-agent enforcing NetworkPolicy: {pods} Pods ({PODS_ENV}), {policies} policies ({POLICIES_ENV}) in a real kube-apiserver {}",
        crate::kube::VERSION
    );
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    if !agent.is_file() || !have("curl") || !have("nft") {
        println!(
            "  skipped: needs {} (make build), curl and nft",
            agent.display()
        );
        return;
    }
    if kube_bin_dir().is_none() {
        println!("  skipped: no Kubernetes binaries (make kube-bins)");
        return;
    }
    // The control plane's harness panics when a component does not come up; its Drop stops
    // what it started, and the bench goes on with its other sections.
    if catch_unwind(AssertUnwindSafe(|| run_sized(agent, pods, policies))).is_err() {
        println!("  the run failed (see above)");
    }
}

/// A size from the environment, else `default`.
fn size(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            println!("  {name}={v:?} is no number; using {default}");
            default
        }),
        Err(_) => default,
    }
}

fn run_sized(binary: &Path, pods: usize, policies: usize) {
    let Some(lab) = Lab::start_with(0, "policy-scale", NODE_MASK) else {
        return;
    };
    // The harness gives the agent its own --policy-socket; --v=1 logs each commit's size.
    let extra = ["--network-policy", "--v=1"];
    let Some((agent, own_cidr)) = lab.agent(binary, CONFIG, &extra) else {
        println!("  could not write the agent's configuration");
        return;
    };
    let Some(mut bench) = Bench::load(lab, agent, &own_cidr, pods, policies) else {
        return;
    };
    if !bench.join() {
        return;
    }
    bench.policy_changes();
    bench.pod_changes();
    bench.churn();
    bench.burst();
}

struct Bench {
    // Dropped first: the agent, then the lab (control plane, netns, files).
    agent: Agent,
    lab: Lab,
    model: Model,
    pid: u32,
    /// By namespace: a set of pod peers (`<namespace>.allow-k.i0.pod4.<hash>`) holding the
    /// namespace's frontend pods.
    frontend_sets: BTreeMap<usize, String>,
}

impl Bench {
    /// Creates the namespaces, the peers' Nodes, the pods (then their status) and the
    /// policies, reporting the loader's rates.
    fn load(lab: Lab, agent: Agent, own_cidr: &str, pods: usize, policies: usize) -> Option<Bench> {
        let mut cidrs = vec![parse_cidr(own_cidr)?];
        for p in 1..=PEERS {
            let name = node_name(p);
            lab.control
                .register_node(&name, &format!("10.99.0.{}", 10 + p));
            cidrs.push(parse_cidr(&lab.control.wait_pod_cidr(&name))?);
        }
        let mut model = Model::new(cidrs, policies);
        for i in 0..pods {
            let node = if i % 3 == 0 { 0 } else { 1 + (i / 3) % PEERS };
            if model.add_pod(node, None).is_none() {
                println!("  {PODS_ENV}={pods}: more pods than node {node}'s podCIDR holds");
                return None;
            }
        }
        let bench = Bench {
            agent,
            lab,
            model,
            pid: 0,
            frontend_sets: BTreeMap::new(),
        };
        let namespaces: Vec<(String, Value)> = (0..NAMESPACES)
            .map(|n| ("/api/v1/namespaces".to_string(), namespace_object(n)))
            .collect();
        bench.send("namespaces", "POST", &namespaces)?;
        if !bench.wait_default_accounts() {
            return None;
        }
        let started = Instant::now();
        let creates: Vec<(String, Value)> = bench
            .model
            .live()
            .map(|(i, p)| {
                (
                    format!("/api/v1/namespaces/{}/pods", namespace_name(p.namespace)),
                    pod_object(i, p),
                )
            })
            .collect();
        bench.send("pods", "POST", &creates)?;
        let statuses: Vec<(String, Value)> = bench
            .model
            .live()
            .map(|(i, p)| (format!("{}/status", pod_path(i, p)), status_patch(p.ip)))
            .collect();
        bench.send("statuses", "PATCH", &statuses)?;
        let pods_took = started.elapsed();
        let started = Instant::now();
        let objects: Vec<(String, Value)> = bench
            .model
            .policies
            .iter()
            .enumerate()
            .map(|(k, p)| {
                (
                    format!(
                        "/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies",
                        namespace_name(p.namespace)
                    ),
                    policy_object(k, p),
                )
            })
            .collect();
        bench.send("policies", "POST", &objects)?;
        let local = bench.model.live().filter(|(_, p)| p.node == 0).count();
        println!(
            "  loader: {pods} Pods in {NAMESPACES} namespaces on {} Nodes ({local} on the agent's) created and their status patched in {:.1} s ({:.0} Pods/s); {policies} NetworkPolicies in {:.1} s",
            PEERS + 1,
            pods_took.as_secs_f64(),
            pods as f64 / pods_took.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        bench.report_end_port();
        Some(bench)
    }

    /// Sends `method` requests (path, body) in parallel; `None`, saying why, unless all
    /// succeeded.
    fn send(&self, name: &str, method: &'static str, requests: &[(String, Value)]) -> Option<()> {
        let bodies = self.lab.dir.join(format!("bodies-{name}"));
        if let Err(e) = fs::create_dir_all(&bodies) {
            println!("  {}: {e}", bodies.display());
            return None;
        }
        let mut batch = Vec::with_capacity(requests.len());
        for (n, (path, body)) in requests.iter().enumerate() {
            let file = bodies.join(format!("{n}.json"));
            if let Err(e) = fs::write(&file, body.to_string()) {
                println!("  {}: {e}", file.display());
                return None;
            }
            batch.push(Request {
                method,
                path: path.clone(),
                body: Some(file),
            });
        }
        self.send_requests(name, batch)
    }

    fn send_requests(&self, name: &str, batch: Vec<Request>) -> Option<()> {
        match self.lab.send_all(name, &batch) {
            Ok(()) => Some(()),
            Err(why) => {
                println!("  {name}: {why}");
                None
            }
        }
    }

    /// Waits until the controller-manager gave every namespace its `default` service account.
    fn wait_default_accounts(&self) -> bool {
        let started = Instant::now();
        while started.elapsed() < ACCOUNTS_WITHIN {
            let out = self.lab.control.kubectl(&[
                "get",
                "serviceaccounts",
                "--all-namespaces",
                "--field-selector=metadata.name=default",
                "-o",
                "name",
            ]);
            let text = String::from_utf8_lossy(&out.stdout);
            // Every namespace has one: ours and the control plane's own.
            if text.lines().count() >= NAMESPACES + 4 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        println!("  the namespaces got no default service account within {ACCOUNTS_WITHIN:?}");
        false
    }

    /// Whether this apiserver kept `endPort` (1.20 drops it: the ranged port is one port).
    fn report_end_port(&self) {
        let Some(p) = self.model.policies.iter().find(|p| p.app.is_some()) else {
            return;
        };
        let out = self.lab.control.kubectl(&[
            "-n",
            &namespace_name(p.namespace),
            "get",
            "networkpolicy",
            &p.name,
            "-o",
            "jsonpath={.spec.ingress[0].ports[1]}",
        ]);
        let kept = String::from_utf8_lossy(&out.stdout).contains("endPort");
        if !kept {
            println!(
                "  note: kube-apiserver {} dropped the policies' endPort (a later field): their port ranges are single ports",
                crate::kube::VERSION
            );
        }
    }

    fn metric(&self, name: &str) -> f64 {
        http_get(
            &self.lab.ns,
            &format!("http://127.0.0.1:{METRICS_PORT}/metrics"),
        )
        .and_then(|page| sample(&page, name))
        .unwrap_or(0.0)
    }

    /// How long the agent's last commit took, from its batch of changes (compile and commit).
    fn last_commit(&self) -> Duration {
        let seconds = self.metric("ferrocni_agent_policy_last_sync_duration_seconds");
        Duration::try_from_secs_f64(seconds).unwrap_or_default()
    }

    fn commits(&self) -> f64 {
        self.metric("ferrocni_agent_policy_syncs_total")
    }

    /// Starts the agent; the time to its first full commit with every isolated address of
    /// this node in the ingress verdict map. Whether it joined.
    fn join(&mut self) -> bool {
        let expected: BTreeSet<String> = self
            .model
            .isolated_here()
            .iter()
            .map(Ipv4Addr::to_string)
            .collect();
        let audit_before = self.lab.audit_lines().len();
        let started = Instant::now();
        self.agent.start();
        let Some(pid) = self.agent.pid() else {
            println!("  the agent did not start");
            return false;
        };
        self.pid = pid;
        let mut committed = None;
        let mut joined = None;
        while started.elapsed() < JOIN_WITHIN && !self.agent.exited() {
            if committed.is_none()
                && self.metric("ferrocni_agent_policy_syncs_total{kind=\"full\"}") >= 1.0
            {
                committed = Some(started.elapsed());
            }
            if committed.is_some() && members(&self.lab.ns, "ingress4").as_ref() == Some(&expected)
            {
                joined = Some(started.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let (Some(committed), Some(joined)) = (committed, joined) else {
            println!(
                "  join: no full commit with {} isolated addresses within {JOIN_WITHIN:?}; the agent's last lines:\n  {}",
                expected.len(),
                log_tail(&self.agent)
            );
            return false;
        };
        let (rss, _, cpu) = usage(pid);
        println!(
            "  join: agent start to the first full commit {} (metrics), to its {} isolated addresses in the kernel's ingress map {}",
            ms(committed),
            expected.len(),
            ms(joined)
        );
        println!(
            "  table: {} sets, {} set elements, {} isolated addresses of this node; {} policies enforced, {} refused; {} pods known; that commit took {:.0} ms (compile and commit)",
            self.metric("ferrocni_agent_policy_sets{what=\"sets\"}"),
            self.metric("ferrocni_agent_policy_sets{what=\"elements\"}"),
            self.metric("ferrocni_agent_policy_targets"),
            self.metric("ferrocni_agent_policies{state=\"enforced\"}"),
            self.metric("ferrocni_agent_policies{state=\"refused\"}"),
            self.metric("ferrocni_agent_policy_pods"),
            self.metric("ferrocni_agent_policy_last_sync_duration_seconds") * 1e3,
        );
        println!(
            "  agent after join: RSS {:.1} MiB, CPU {cpu:.2} s",
            rss as f64 / 1024.0
        );
        let audit = self.lab.audit_lines();
        println!(
            "  the agent's apiserver requests (audit log), start to join: {}",
            request_counts(&audit[audit_before.min(audit.len())..])
        );
        self.learn_sets();
        true
    }

    /// Finds, for each namespace, a set of pod peers that holds its frontend pods (the first
    /// ingress rule of one of its allow policies that selects a pod of this node).
    fn learn_sets(&mut self) {
        let names = set_names(&self.lab.ns);
        self.frontend_sets.clear();
        for p in self.model.policies.iter().filter(|p| p.app.is_some()) {
            let prefix = format!("{}i0.pod4.", policy_marker(p));
            if let Some(set) = names.iter().find(|n| n.starts_with(&prefix)) {
                self.frontend_sets
                    .entry(p.namespace)
                    .or_insert_with(|| set.clone());
            }
        }
    }

    /// Sends one request and waits until `landed` shows in the kernel: the time from the
    /// API's answer (the change is stored).
    fn timed(
        &self,
        method: &str,
        path: &str,
        body: &Value,
        landed: Vec<Landed>,
    ) -> Option<Duration> {
        let content_type = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let mut seen = self.commits();
        let sent = Instant::now();
        let answer = self.lab.request(method, path, content_type, &body)?;
        if !(200..300).contains(&answer.status) {
            println!("  {method} {path} answered {}", answer.status);
            return None;
        }
        let latency = self.wait_landed(sent + answer.answered_after, &mut seen, landed);
        if latency.is_none() {
            println!(
                "  {method} {path}: not in the kernel within {CHANGE_WITHIN:?}; the agent's last lines:\n  {}",
                log_tail(&self.agent)
            );
        }
        latency
    }

    /// Waits until every change of `pending` shows in the kernel: the time from `since`.
    /// The kernel is read only after a commit (the agent's commit counter moved from `seen`),
    /// so that the bench's reads weigh little on the agent (two cores, the control plane on
    /// them too); the change counts as landed when the counter was read, unless another
    /// commit came while the kernel was read (then at the end of the read).
    fn wait_landed(
        &self,
        since: Instant,
        seen: &mut f64,
        mut pending: Vec<Landed>,
    ) -> Option<Duration> {
        while since.elapsed() < CHANGE_WITHIN {
            let commits = self.commits();
            if commits != *seen {
                let observed = Instant::now();
                *seen = commits;
                let mut listed = Listed::new();
                pending.retain(|l| !l.holds_in(&self.lab.ns, &mut listed));
                if pending.is_empty() {
                    let at = if self.commits() == commits {
                        observed
                    } else {
                        Instant::now()
                    };
                    return Some(at.saturating_duration_since(since));
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// Allow policies changed one at a time, alternately their podSelector (to another app of
    /// the namespace) and their numbered port: each change's latency.
    fn policy_changes(&mut self) {
        let cost = Cost::start(self.pid, &self.lab.control);
        let commits = self.commits();
        let mut latencies: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        let mut work = Vec::new();
        let allow: Vec<usize> = (0..self.model.policies.len())
            .filter(|&k| self.model.policies[k].app.is_some())
            .collect();
        let mut next = 0;
        for c in 0..POLICY_CHANGES {
            let mut made = None;
            // A policy whose change shows on a pod of this node.
            for _ in 0..allow.len() {
                let k = allow[next % allow.len().max(1)];
                next += 7;
                made = if c % 2 == 0 {
                    self.change_selector(k).map(|l| ("podSelector", l))
                } else {
                    self.change_port(k, c).map(|l| ("port", l))
                };
                if made.is_some() {
                    break;
                }
            }
            match made {
                Some((kind, Some(l))) => {
                    latencies.entry(kind).or_default().push(l);
                    work.push(self.last_commit());
                }
                Some((_, None)) => return,
                None => {
                    println!("  policy changes: no allow policy selects a pod of this node");
                    return;
                }
            }
        }
        self.report_changes("policy changes", commits, &latencies, &work);
        cost.report("  ", self.pid, &self.lab.control);
        // Sets come and go with the policies' targets.
        self.learn_sets();
    }

    /// Prints one line on a series of changes (`what`): how many and in how many commits
    /// since `commits`, the API answer to kernel latency overall and per kind (median/p99)
    /// against the goal, and the agent's own compile and commit time of each.
    fn report_changes<K: std::fmt::Display>(
        &self,
        what: &str,
        commits: f64,
        latencies: &BTreeMap<K, Vec<Duration>>,
        work: &[Duration],
    ) {
        let all: Vec<Duration> = latencies.values().flatten().copied().collect();
        let mut line = format!(
            "  {what}, one at a time: {} changes, {} commits; API answer to kernel: median {} p99 {}",
            all.len(),
            self.commits() - commits,
            ms(percentile(&all, 50)),
            ms(percentile(&all, 99))
        );
        for (kind, l) in latencies {
            line.push_str(&format!(
                "; {kind} {}/{}",
                ms(percentile(l, 50)),
                ms(percentile(l, 99))
            ));
        }
        println!(
            "{line} (goal < {} ms: {}); the agent's compile and commit of each: median {} p99 {}",
            CHANGE_GOAL.as_millis(),
            verdict(percentile(&all, 100) < CHANGE_GOAL),
            ms(percentile(work, 50)),
            ms(percentile(work, 99))
        );
    }

    /// Moves policy `k`'s podSelector to another app of its namespace; `None` when that shows
    /// on no pod of this node, else the change's latency (`None` if it failed).
    fn change_selector(&mut self, k: usize) -> Option<Option<Duration>> {
        let p = self.model.policies[k].clone();
        let app = p.app?;
        // Pods of a namespace have apps of one residue modulo 10 (20 namespaces, 50 apps).
        let new_app = (app + 10) % APPS;
        let moved = PolicyModel {
            app: Some(new_app),
            ..p.clone()
        };
        let marker = policy_marker(&p);
        let gained = self.model.find(0, |q| {
            q.node == 0 && Model::selects(&moved, q) && !Model::selects(&p, q)
        })?;
        let lost = self.model.find(0, |q| {
            q.node == 0 && Model::selects(&p, q) && !Model::selects(&moved, q)
        });
        let ip_of = |i: usize| self.model.pods[i].as_ref().map(|q| q.ip);
        let mut landed = vec![Landed::ChainNames {
            ip: ip_of(gained)?,
            marker: marker.clone(),
            present: true,
        }];
        if let Some(ip) = lost.and_then(ip_of) {
            landed.push(Landed::ChainNames {
                ip,
                marker,
                present: false,
            });
        }
        let patch =
            json!({"spec": {"podSelector": label_selector("app", &format!("app{new_app}"))}});
        let latency = self.timed("PATCH", &policy_path(&p), &patch, landed);
        self.model.policies[k] = moved;
        Some(latency)
    }

    /// Gives policy `k`'s numbered ingress port a new number; `None` when it selects no pod of
    /// this node, else the change's latency (`None` if it failed).
    fn change_port(&mut self, k: usize, c: usize) -> Option<Option<Duration>> {
        let p = self.model.policies[k].clone();
        p.app?;
        let target = self
            .model
            .find(0, |q| q.node == 0 && Model::selects(&p, q))?;
        let ip = self.model.pods[target].as_ref()?.ip;
        let changed = PolicyModel {
            port: FIRST_PORT + 1 + c as u16,
            ..p
        };
        let patch = json!({"spec": policy_spec(k, &changed)});
        let landed = vec![Landed::ChainPort {
            ip,
            port: changed.port,
        }];
        let latency = self.timed("PATCH", &policy_path(&changed), &patch, landed);
        self.model.policies[k] = changed;
        Some(latency)
    }

    /// Pod changes one at a time: created (with its status), deleted, relabelled; on this
    /// node and on a peer.
    fn pod_changes(&mut self) {
        let cost = Cost::start(self.pid, &self.lab.control);
        let commits = self.commits();
        let mut latencies: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        let mut work = Vec::new();
        for round in 0..POD_ROUNDS {
            for (here, kind) in [
                (true, "create"),
                (false, "create"),
                (true, "delete"),
                (false, "delete"),
                (true, "relabel"),
                (false, "relabel"),
            ] {
                let from = round * 97 + usize::from(here) * 13;
                let latency = match kind {
                    "create" => self.create_pod(here),
                    "delete" => self.delete_pod(here, from),
                    _ => self.relabel_pod(here, from),
                };
                let name = format!("{kind} {}", if here { "here" } else { "peer" });
                match latency {
                    Some(Some(l)) => {
                        latencies.entry(name).or_default().push(l);
                        work.push(self.last_commit());
                    }
                    Some(None) => return,
                    None => println!("  pod changes: no pod for a {name}"),
                }
            }
        }
        self.report_changes("pod changes", commits, &latencies, &work);
        cost.report("  ", self.pid, &self.lab.control);
    }

    /// A new pod for a create: on this node (isolated by its namespace's default deny), or a
    /// frontend pod on a peer in a namespace whose frontend set is known; its index and what
    /// the kernel shows once it is enforced.
    fn new_pod(&mut self, here: bool) -> Option<(usize, Landed)> {
        let node = if here {
            0
        } else {
            1 + self.model.pods.len() % PEERS
        };
        let i = self.model.add_pod(node, (!here).then_some(0))?;
        let p = self.model.pods[i].clone()?;
        let landed = if here {
            if !self.model.isolated_here().contains(&p.ip) {
                self.model.pods[i] = None;
                return None;
            }
            Landed::InSet {
                set: "ingress4".into(),
                ip: p.ip,
                present: true,
            }
        } else {
            let Some(set) = self.frontend_sets.get(&p.namespace) else {
                self.model.pods[i] = None;
                return None;
            };
            Landed::InSet {
                set: set.clone(),
                ip: p.ip,
                present: true,
            }
        };
        Some((i, landed))
    }

    /// A pod created, then its status patched (the timed change: its address is known from
    /// then on).
    fn create_pod(&mut self, here: bool) -> Option<Option<Duration>> {
        let (i, landed) = self.new_pod(here)?;
        let p = self.model.pods[i].clone()?;
        let created = self.lab.request(
            "POST",
            &format!("/api/v1/namespaces/{}/pods", namespace_name(p.namespace)),
            "application/json",
            &pod_object(i, &p).to_string(),
        );
        if created.is_none_or(|a| !(200..300).contains(&a.status)) {
            println!("  pod changes: creating {} failed", pod_name(i));
            return Some(None);
        }
        Some(self.timed(
            "PATCH",
            &format!("{}/status", pod_path(i, &p)),
            &status_patch(p.ip),
            vec![landed],
        ))
    }

    /// What the kernel shows once pod `i` is gone: out of the ingress map (this node) or out
    /// of its namespace's frontend set (a peer's frontend pod); `None` for other pods.
    fn gone(&self, i: usize) -> Option<Landed> {
        let p = self.model.pods[i].as_ref()?;
        let set = if p.node == 0 {
            self.model
                .isolated_here()
                .contains(&p.ip)
                .then(|| "ingress4".to_string())?
        } else if p.tier == 0 {
            self.frontend_sets.get(&p.namespace)?.clone()
        } else {
            return None;
        };
        Some(Landed::InSet {
            set,
            ip: p.ip,
            present: false,
        })
    }

    /// A pod deleted (at once: no kubelet would confirm a graceful deletion).
    fn delete_pod(&mut self, here: bool, from: usize) -> Option<Option<Duration>> {
        let i = (0..self.model.pods.len())
            .map(|k| (from + k) % self.model.pods.len())
            .find(|&i| {
                self.model.pods[i]
                    .as_ref()
                    .is_some_and(|p| (p.node == 0) == here)
                    && self.gone(i).is_some()
            })?;
        let landed = self.gone(i)?;
        let p = self.model.pods[i].take()?;
        Some(self.timed(
            "DELETE",
            &format!("{}?gracePeriodSeconds=0", pod_path(i, &p)),
            &Value::Null,
            vec![landed],
        ))
    }

    /// A pod relabelled: here, its `app` to one an allow policy of its namespace selects (its
    /// chain then names that policy); on a peer, its `tier` to frontend (it joins its
    /// namespace's frontend set).
    fn relabel_pod(&mut self, here: bool, from: usize) -> Option<Option<Duration>> {
        let policies = self.model.policies.clone();
        let (i, landed, label, value) = if here {
            let (i, policy) = (0..self.model.pods.len())
                .map(|k| (from + k) % self.model.pods.len())
                .find_map(|i| {
                    let p = self.model.pods[i].as_ref().filter(|p| p.node == 0)?;
                    let policy = policies.iter().find(|k| {
                        k.namespace == p.namespace && k.app.is_some_and(|a| a != p.app)
                    })?;
                    Some((i, policy))
                })?;
            let app = policy.app?;
            let p = self.model.pods[i].as_mut()?;
            p.app = app;
            let landed = Landed::ChainNames {
                ip: p.ip,
                marker: policy_marker(policy),
                present: true,
            };
            (i, landed, "app", format!("app{app}"))
        } else {
            let i = self.model.find(from, |p| {
                p.node != 0 && p.tier != 0 && self.frontend_sets.contains_key(&p.namespace)
            })?;
            let p = self.model.pods[i].as_mut()?;
            p.tier = 0;
            let landed = Landed::InSet {
                set: self.frontend_sets.get(&p.namespace)?.clone(),
                ip: p.ip,
                present: true,
            };
            (i, landed, "tier", TIERS[0].to_string())
        };
        let p = self.model.pods[i].clone()?;
        let patch = json!({"metadata": {"labels": {label: value}}});
        Some(self.timed("PATCH", &pod_path(i, &p), &patch, vec![landed]))
    }

    /// Each second, pods created (with their status) and deleted, here and on peers, by
    /// parallel requests: the time from the second's last answer to all its changes in the
    /// kernel, the commits per second and their size (from the agent's log).
    fn churn(&mut self) {
        let cost = Cost::start(self.pid, &self.lab.control);
        let commits = self.commits();
        let log_before = self.agent.log().len();
        let quarter = CHURN_PER_SECOND / 4;
        let mut latencies = Vec::new();
        let (mut created_total, mut deleted_total) = (0, 0);
        for second in 0..CHURN_SECONDS {
            let tick = cost.started + Duration::from_secs(second as u64);
            if let Some(wait) = tick.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let mut landed = Vec::new();
            let mut created = Vec::new();
            for here in [true, false] {
                for _ in 0..quarter {
                    if let Some((i, l)) = self.new_pod(here) {
                        created.push(i);
                        landed.push(l);
                    }
                }
            }
            let mut deleted = Vec::new();
            for here in [true, false] {
                let mut from = second * 131 + usize::from(here) * 17;
                for _ in 0..quarter {
                    let Some(i) = (0..self.model.pods.len())
                        .map(|k| (from + k) % self.model.pods.len())
                        .find(|&i| {
                            self.model.pods[i]
                                .as_ref()
                                .is_some_and(|p| (p.node == 0) == here)
                                && !created.contains(&i)
                                && self.gone(i).is_some()
                        })
                    else {
                        break;
                    };
                    from = i + 1;
                    landed.extend(self.gone(i));
                    deleted.push((i, self.model.pods[i].take()));
                }
            }
            created_total += created.len();
            deleted_total += deleted.len();
            let mut seen = self.commits();
            let mut first: Vec<(String, Value)> = Vec::new();
            let mut statuses: Vec<(String, Value)> = Vec::new();
            for &i in &created {
                let Some(p) = self.model.pods[i].as_ref() else {
                    continue;
                };
                first.push((
                    format!("/api/v1/namespaces/{}/pods", namespace_name(p.namespace)),
                    pod_object(i, p),
                ));
                statuses.push((format!("{}/status", pod_path(i, p)), status_patch(p.ip)));
            }
            let mut batch = Vec::new();
            if self.send("churn-create", "POST", &first).is_none() {
                return;
            }
            for (i, p) in &deleted {
                if let Some(p) = p {
                    batch.push(Request {
                        method: "DELETE",
                        path: format!("{}?gracePeriodSeconds=0", pod_path(*i, p)),
                        body: None,
                    });
                }
            }
            if self.send_requests("churn-delete", batch).is_none()
                || self.send("churn-status", "PATCH", &statuses).is_none()
            {
                return;
            }
            let answered = Instant::now();
            let Some(latency) = self.wait_landed(answered, &mut seen, landed) else {
                println!(
                    "  churn: second {second}'s changes not in the kernel within {CHANGE_WITHIN:?}; the agent's last lines:\n  {}",
                    log_tail(&self.agent)
                );
                return;
            };
            latencies.push(latency);
        }
        let seconds = cost.elapsed().as_secs_f64();
        let made = self.commits() - commits;
        let changes = created_total + deleted_total;
        let log = self.agent.log();
        let commits_logged: Vec<(usize, usize)> = log
            .get(log_before..)
            .unwrap_or_default()
            .lines()
            .filter_map(commit_size)
            .collect();
        let sizes: Vec<usize> = commits_logged.iter().map(|c| c.0).collect();
        let elements: usize = sizes.iter().sum();
        let idle = commits_logged.iter().filter(|c| **c == (0, 0)).count();
        println!(
            "  churn at {CHURN_PER_SECOND} pod changes/s ({quarter} created with their status and {quarter} deleted each second, on this node and on peers; each second's changes in the kernel before the next): {changes} changes in {seconds:.1} s, {made} commits ({:.1}/s; {idle} of them changed no element and no chain), {:.1} set elements per commit (max {}); last answer to all of a second's changes in the kernel: median {} p99 {}, the last second {} (goal < {} ms: {})",
            made / seconds,
            elements as f64 / sizes.len().max(1) as f64,
            sizes.iter().max().copied().unwrap_or(0),
            ms(percentile(&latencies, 50)),
            ms(percentile(&latencies, 99)),
            ms(latencies.last().copied().unwrap_or_default()),
            CHANGE_GOAL.as_millis(),
            verdict(percentile(&latencies, 100) < CHANGE_GOAL)
        );
        cost.report("  ", self.pid, &self.lab.control);
    }
}

impl Bench {
    /// A burst: [`BURST`] pods of peers relabelled into their namespace's frontend set by
    /// parallel requests: how many commits the agent made of them, the time from the last
    /// answer to all of them in the kernel.
    fn burst(&mut self) {
        let cost = Cost::start(self.pid, &self.lab.control);
        let mut landed = Vec::new();
        let mut patches = Vec::new();
        let mut from = 0;
        while patches.len() < BURST {
            let Some(i) = self.model.find(from, |p| {
                p.node != 0 && p.tier != 0 && self.frontend_sets.contains_key(&p.namespace)
            }) else {
                break;
            };
            from = i + 1;
            let Some(p) = self.model.pods[i].as_mut() else {
                break;
            };
            p.tier = 0;
            let Some(set) = self.frontend_sets.get(&p.namespace) else {
                break;
            };
            landed.push(Landed::InSet {
                set: set.clone(),
                ip: p.ip,
                present: true,
            });
            patches.push((
                pod_path(i, p),
                json!({"metadata": {"labels": {"tier": TIERS[0]}}}),
            ));
        }
        let mut seen = self.commits();
        let before = seen;
        if self.send("burst", "PATCH", &patches).is_none() {
            return;
        }
        let answered = Instant::now();
        let Some(latency) = self.wait_landed(answered, &mut seen, landed) else {
            println!(
                "  burst: not in the kernel within {CHANGE_WITHIN:?}; the agent's last lines:\n  {}",
                log_tail(&self.agent)
            );
            return;
        };
        println!(
            "  burst: {} pods relabelled at once (parallel requests): {} commits; last answer to all in the kernel {}",
            patches.len(),
            self.commits() - before,
            ms(latency)
        );
        cost.report("  ", self.pid, &self.lab.control);
    }
}

/// The set elements added and removed by one commit, and the chains it wrote, from the
/// agent's `--v=1` line `policy: committed: N message(s), +A/-R element(s), C chain(s)`.
fn commit_size(line: &str) -> Option<(usize, usize)> {
    let rest = line.split_once("policy: committed: ")?.1;
    let (counts, chains) = rest.split_once(", +")?.1.split_once(" element(s), ")?;
    let (added, removed) = counts.split_once("/-")?;
    let chains = chains.split_once(' ')?.0.parse().ok()?;
    Some((
        added.parse::<usize>().ok()? + removed.parse::<usize>().ok()?,
        chains,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_line_gives_its_elements() {
        let line = "I1206 12:00:00 policy: committed: 3 message(s), +12/-5 element(s), 2 chain(s)";
        assert_eq!(commit_size(line), Some((17, 2)));
        assert_eq!(commit_size("policy: wrote the table: 9 message(s)"), None);
    }
}
