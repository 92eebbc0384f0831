//! NetworkPolicy end to end: a [`KubeCluster`] (vxlan, three nodes, real control plane) whose
//! pods are Kubernetes objects too. There are no kubelets: the harness plays their part. It
//! creates each Pod with `spec.nodeName` set (no scheduler) and tolerations for the taints the
//! node lifecycle controller puts on nodes whose kubelet never reports (so nothing is evicted),
//! then sets its status as a kubelet would (`Running`, `podIP`, `podIPs`) with a merge patch
//! of the `status` subresource, as admin. The pod's network namespace comes from
//! [`Node::add_pod`](crate::cluster::Node::add_pod) and runs `probe serve` echo servers
//! (TCP [`TCP_PORTS`], UDP [`UDP_PORTS`], SCTP [`SCTP_PORT`] when the kernel has SCTP).
//!
//! [`PolicyCluster::check`] polls a list of [`Flow`]s (bounded by [`POLICY_WITHIN`]) until
//! every one is as expected, records how long that took since the last change (the change
//! latency), checks the whole list once more, and panics with a table of every flow (and each
//! node's nf_tables ruleset, the agent's `inet ferrocni_policy` table among them) when it does
//! not hold. Dropping a [`PolicyCluster`] kills its servers, then drops the cluster.
//!
//! ```no_run
//! use netns_tests::policy::{Flow, PolicyCluster};
//! let Some(mut c) = PolicyCluster::start("kpol", std::path::Path::new("probe"))
//! else { return };
//! c.namespace("prod", &[("team", "a")]);
//! let db = c.add_pod("prod", "db", 0, &[("app", "db")], &[]);
//! let web = c.add_pod("prod", "web", 1, &[("app", "web")], &[]);
//! c.check("no policy", &[Flow::tcp(&web, &db, 5432, true)]);
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::cluster::{wait_until, Pod};
use crate::kube_cluster::{node_name, KubeCluster};
use crate::{our_binary, success_stdout};

/// How long a policy change may take to show in the data path.
pub const POLICY_WITHIN: Duration = Duration::from_secs(10);
/// Every pod serves these TCP ports (`pg`, and a range for `endPort`)...
pub const TCP_PORTS: &[&str] = &["5432", "5000-5010"];
/// ... these UDP ports (`dns`, and `pg`'s number over the other protocol)...
pub const UDP_PORTS: &[&str] = &["5353", "5432"];
/// ... and this SCTP port when the kernel has SCTP.
pub const SCTP_PORT: u16 = 5432;
/// A polling round's probe timeout: a denied flow costs this much per round (answers take a
/// few milliseconds).
const POLL_TIMEOUT_MS: u64 = 200;
/// The shortest polling round (the change latency's resolution when every flow answers).
const MIN_ROUND: Duration = Duration::from_millis(50);
/// The confirming round's: longer, so that a slow answer is not taken for a denial.
const CONFIRM_TIMEOUT_MS: u64 = 1000;
/// How long objects of a fresh namespace may wait for its `default` service account (the
/// ServiceAccount admission plugin refuses pods until the token controller made it).
const NAMESPACE_READY_WITHIN: Duration = Duration::from_secs(60);
/// How long a server may take to bind its ports.
const SERVER_READY_WITHIN: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        }
    }
}

/// Something probes run in and aim at: a pod, or a node's own netns.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// What tables and messages call it (`prod/db`, `node1`).
    pub name: String,
    /// The network namespace probes from it run in.
    pub netns: String,
    /// The address probes to it aim at.
    pub ip: String,
}

/// One probe and what it must find.
#[derive(Clone, Debug)]
pub struct Flow {
    pub from: Endpoint,
    pub to: Endpoint,
    pub proto: Proto,
    pub port: u16,
    pub allowed: bool,
}

impl Flow {
    pub fn new(from: &Endpoint, to: &Endpoint, proto: Proto, port: u16, allowed: bool) -> Flow {
        Flow {
            from: from.clone(),
            to: to.clone(),
            proto,
            port,
            allowed,
        }
    }

    pub fn tcp(from: &Endpoint, to: &Endpoint, port: u16, allowed: bool) -> Flow {
        Flow::new(from, to, Proto::Tcp, port, allowed)
    }

    pub fn udp(from: &Endpoint, to: &Endpoint, port: u16, allowed: bool) -> Flow {
        Flow::new(from, to, Proto::Udp, port, allowed)
    }

    fn label(&self) -> String {
        format!(
            "{} -> {} {}/{}",
            self.from.name,
            self.to.name,
            self.port,
            self.proto.name()
        )
    }
}

/// TCP 5432 and UDP 5353, both ways between `a` and `b`: `a_to_b` and `b_to_a` allowed or not.
pub fn both_ways(a: &Endpoint, b: &Endpoint, a_to_b: bool, b_to_a: bool) -> Vec<Flow> {
    vec![
        Flow::tcp(a, b, 5432, a_to_b),
        Flow::udp(a, b, 5353, a_to_b),
        Flow::tcp(b, a, 5432, b_to_a),
        Flow::udp(b, a, 5353, b_to_a),
    ]
}

/// What one probe found.
#[derive(Clone, Debug)]
struct Outcome {
    answered: bool,
    /// The probe's word: `answered`, `timeout`, `refused`...
    word: String,
}

/// A `probe serve` process in a pod, killed on drop.
struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A change to the cluster (a policy, a label, a pod's status) the next check times.
#[derive(Clone, Debug)]
struct Change {
    what: String,
    /// When its write (kubectl, or curl) started: the object is stored at some moment of
    /// `writing` after this.
    started: Instant,
    writing: Duration,
}

/// How long a change took to show in the data path: at most `at_most` from the start of its
/// write, which itself took `writing` (so the agents' part is between `at_most - writing`
/// and `at_most`, give or take one polling round).
#[derive(Clone, Debug)]
pub struct Latency {
    pub step: String,
    pub what: String,
    pub at_most: Duration,
    pub writing: Duration,
}

/// A container port of a Pod object (`spec.containers[0].ports[]`).
#[derive(Clone, Copy, Debug)]
pub struct ContainerPort {
    pub name: &'static str,
    pub port: u16,
    pub proto: Proto,
}

pub struct PolicyCluster {
    /// Servers first: they run in pod namespaces the cluster owns.
    servers: Vec<Server>,
    /// Pods added beyond the cluster's one per node.
    extra_pods: Vec<Pod>,
    /// Which of the cluster's own pods (one per node) a Pod object already uses.
    adopted: Vec<bool>,
    probe: PathBuf,
    /// Whether the kernel has SCTP (SCTP flows are skipped, with a printed line, when not).
    pub sctp: bool,
    /// Whether the agents run with `--network-policy`.
    pub enforcing: bool,
    /// When the last change (policy, label) was written, and what it was; taken by the next
    /// check, which times it.
    changed: Option<Change>,
    /// Each timed check's latency, in order.
    pub latencies: Vec<Latency>,
    pub kube: KubeCluster,
}

impl PolicyCluster {
    /// A vxlan [`KubeCluster`], started, whose agents enforce policies (`--network-policy`)
    /// when this build of the agent has the flag ([`PolicyCluster::enforcing`]); `probe` is
    /// the `probe` binary (`env!("CARGO_BIN_EXE_probe")`). `None` (with a printed line) when
    /// the Kubernetes binaries or the cluster tools are missing.
    pub fn start(tag: &str, probe: &Path) -> Option<PolicyCluster> {
        PolicyCluster::start_on(tag, probe, "vxlan")
    }

    /// [`PolicyCluster::start`] on another of the agent's backends (`host-gw`, `udp`, `bgp`,
    /// `wireguard`, `ipip`).
    pub fn start_on(tag: &str, probe: &Path, backend: &str) -> Option<PolicyCluster> {
        let net_conf = format!(r#"{{"Network":"10.244.0.0/16","Backend":{{"Type":"{backend}"}}}}"#);
        let mut kube = KubeCluster::new(tag, &net_conf)?;
        let enforcing = agent_has_network_policy();
        if enforcing {
            kube.add_agent_args(&["--network-policy"]);
        }
        kube.start_agents();
        let sctp = sctp_supported(probe, kube.pods[0].ns.name());
        if !sctp && crate::drivers_required() {
            panic!(
                "{tag}: this kernel has no SCTP, and FERROCNI_REQUIRE_DRIVERS=1 forbids skipping"
            );
        }
        if !sctp {
            eprintln!("{tag}: this kernel has no SCTP: SCTP probes are skipped");
        }
        Some(PolicyCluster {
            servers: Vec::new(),
            extra_pods: Vec::new(),
            adopted: vec![false; kube.pods.len()],
            probe: probe.to_path_buf(),
            sctp,
            enforcing,
            changed: None,
            latencies: Vec::new(),
            kube,
        })
    }

    /// Creates namespace `name` with `labels` and waits for its `default` service account.
    pub fn namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": label_map(labels)},
        });
        self.kube.control.kubectl_apply(&object.to_string());
        let ready = wait_until(NAMESPACE_READY_WITHIN, || {
            self.kube
                .control
                .kubectl(&["-n", name, "get", "serviceaccount", "default"])
                .status
                .success()
        });
        assert!(ready, "namespace {name} got no default service account");
    }

    /// A pod `namespace/name` on node `node` (0-based) with `labels` and container `ports`:
    /// a netns on the node's `cni0` serving the probe ports, the Pod object, and its status
    /// set as the node's kubelet would.
    pub fn add_pod(
        &mut self,
        namespace: &str,
        name: &str,
        node: usize,
        labels: &[(&str, &str)],
        ports: &[ContainerPort],
    ) -> Endpoint {
        let endpoint = self.add_pod_unreported(namespace, name, node, labels, ports);
        let node_ip = self.kube.nodes[node].ip.clone();
        // The pod counts from its status on: that is the change a check times.
        self.timed_change(&format!("pod {namespace}/{name} running"), |c| {
            c.patch_pod_status(namespace, name, &endpoint.ip, &node_ip)
        });
        endpoint
    }

    /// [`PolicyCluster::add_pod`] up to the Pod object, whose status stays empty: the moment
    /// of a real pod's CNI ADD, before the kubelet reports the address.
    pub fn add_pod_unreported(
        &mut self,
        namespace: &str,
        name: &str,
        node: usize,
        labels: &[(&str, &str)],
        ports: &[ContainerPort],
    ) -> Endpoint {
        let (netns, ip) = if !self.adopted[node] {
            self.adopted[node] = true;
            let pod = &self.kube.pods[node];
            (pod.ns.name().to_string(), pod.ip.clone())
        } else {
            let subnet = self.kube.subnets[node].clone();
            let pod = self.kube.nodes[node].add_pod(&subnet);
            let found = (pod.ns.name().to_string(), pod.ip.clone());
            self.extra_pods.push(pod);
            found
        };
        let endpoint = Endpoint {
            name: format!("{namespace}/{name}"),
            netns,
            ip,
        };
        self.serve(&endpoint);
        let node_name = node_name(self.kube.nodes[node].index);
        let object = pod_object(namespace, name, &node_name, labels, ports);
        let out = self
            .kube
            .control
            .kubectl_stdin(&["create", "-f", "-"], &object.to_string());
        success_stdout(&format!("creating pod {namespace}/{name}"), out);
        endpoint
    }

    /// Whether `flow`'s probe is answered, once (no waiting for a change).
    pub fn answered_now(&self, flow: &Flow) -> bool {
        self.probe_all(std::slice::from_ref(flow), CONFIRM_TIMEOUT_MS)[0].answered
    }

    /// The CNI chain's `ferrocni-policy` step at `pod`'s ADD on node `node` (its prevResult
    /// holds the pod's address), against that node's agent; the plugin's exit status,
    /// stdout and stderr.
    pub fn policy_step_add(&self, node: usize, pod: &Endpoint) -> std::process::Output {
        let (namespace, name) = pod.name.split_once('/').expect("namespace/name");
        let subnet_len = self.kube.subnets[node]
            .split_once('/')
            .map_or("24", |(_, l)| l)
            .to_string();
        let config = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "cbr0",
            "type": "ferrocni-policy",
            "socket": self.kube.agents[node].policy_socket(),
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": format!("/var/run/netns/{}", pod.netns)}],
                "ips": [{"address": format!("{}/{subnet_len}", pod.ip), "interface": 0}],
            },
        });
        crate::run_with_stdin(
            Command::new(our_binary("ferrocni-policy"))
                .env("CNI_COMMAND", "ADD")
                .env("CNI_CONTAINERID", format!("policy-{namespace}-{name}"))
                .env("CNI_NETNS", format!("/var/run/netns/{}", pod.netns))
                .env("CNI_IFNAME", "eth0")
                .env("CNI_PATH", "/nonexistent")
                .env(
                    "CNI_ARGS",
                    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"),
                ),
            config.to_string().as_bytes(),
        )
    }

    /// Node `node`'s own netns (0-based) as a probe source (a kubelet's health probe).
    pub fn node_endpoint(&self, node: usize) -> Endpoint {
        let n = &self.kube.nodes[node];
        Endpoint {
            name: node_name(n.index),
            netns: n.ns.name().to_string(),
            ip: n.ip.clone(),
        }
    }

    /// `kubectl label --overwrite <kind> <name> <labels>` (`key=value`, or `key-` to remove).
    pub fn relabel(&mut self, namespace: Option<&str>, kind: &str, name: &str, labels: &[&str]) {
        let mut args = vec!["label", "--overwrite", kind, name];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        args.extend_from_slice(labels);
        let what = format!("label {kind} {name} {}", labels.join(" "));
        self.timed_change(&what, |c| {
            c.kube.control.kubectl_ok(&args);
        });
    }

    /// Applies a NetworkPolicy (or any object), as admin: [`PolicyCluster::apply_yaml`].
    pub fn apply(&mut self, object: &serde_json::Value) {
        let name = object["metadata"]["name"].as_str().unwrap_or("?");
        self.apply_yaml(&format!("apply {name}"), &object.to_string());
    }

    /// `kubectl apply` of a YAML (or JSON) manifest, as admin, without kubectl's client-side
    /// schema check (1.20's schema predates `endPort`; the apiserver decides what it keeps);
    /// `what` names the change for the next check's latency.
    pub fn apply_yaml(&mut self, what: &str, manifest: &str) {
        self.timed_change(what, |c| {
            let out = c
                .kube
                .control
                .kubectl_stdin(&["apply", "--validate=false", "-f", "-"], manifest);
            success_stdout(what, out);
        });
    }

    /// NetworkPolicy `namespace/name` as the apiserver stored it.
    pub fn stored_policy(&self, namespace: &str, name: &str) -> serde_json::Value {
        let json = self.kube.control.kubectl_ok(&[
            "-n",
            namespace,
            "get",
            "networkpolicy",
            name,
            "-o",
            "json",
        ]);
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("policy {namespace}/{name}: {e}"))
    }

    pub fn delete_policy(&mut self, namespace: &str, name: &str) {
        self.timed_change(&format!("delete {namespace}/{name}"), |c| {
            c.kube
                .control
                .kubectl_ok(&["-n", namespace, "delete", "networkpolicy", name]);
        });
    }

    /// Deletes every NetworkPolicy of every namespace.
    pub fn delete_all_policies(&mut self) {
        self.timed_change("delete every policy", |c| {
            c.kube
                .control
                .kubectl_ok(&["delete", "networkpolicy", "--all", "--all-namespaces"]);
        });
    }

    /// Marks now as the moment of a change the next [`PolicyCluster::check`] times.
    pub fn changed(&mut self, what: &str) {
        self.timed_change(what, |_| ());
    }

    /// Runs `write` (the call that makes a change) and marks it as the change the next
    /// [`PolicyCluster::check`] times, from the start of the write.
    fn timed_change<T>(&mut self, what: &str, write: impl FnOnce(&Self) -> T) -> T {
        let started = Instant::now();
        let out = write(self);
        self.changed = Some(Change {
            what: what.to_string(),
            started,
            writing: started.elapsed(),
        });
        out
    }

    /// Polls `flows` until each is as expected (bounded by [`POLICY_WITHIN`]), records the
    /// latency of the last change under `step` (the first check after a change only), then
    /// checks them all once more; panics with a table of every flow otherwise. SCTP flows are
    /// dropped when the kernel has no SCTP. The latency runs from the start of the change's
    /// write to the start of the first round that found every flow as expected: an upper
    /// bound, since the round's probes may have seen the change long before (zero when there
    /// was no change to time).
    pub fn check(&mut self, step: &str, flows: &[Flow]) -> Duration {
        let flows: Vec<Flow> = flows
            .iter()
            .filter(|f| self.sctp || f.proto != Proto::Sctp)
            .cloned()
            .collect();
        let change = self.changed.take();
        let since = change.as_ref().map_or_else(Instant::now, |c| c.started);
        let what = change
            .as_ref()
            .map_or("no change", |c| c.what.as_str())
            .to_string();
        let deadline = Instant::now() + POLICY_WITHIN;
        let mut rounds = 0;
        let latency = loop {
            rounds += 1;
            let round_started = Instant::now();
            let outcomes = self.probe_all(&flows, POLL_TIMEOUT_MS);
            if holds(&flows, &outcomes) {
                break round_started.saturating_duration_since(since);
            }
            // Rounds of answered probes are quick: no busy loop while waiting for a denial.
            std::thread::sleep(MIN_ROUND.saturating_sub(round_started.elapsed()));
            if Instant::now() > deadline {
                panic!(
                    "{step}: flows not as expected within {POLICY_WITHIN:?} after {:?} \
                     ({rounds} rounds):\n{}{}",
                    what,
                    table(&flows, &outcomes),
                    self.policy_tables()
                );
            }
        };
        let outcomes = self.probe_all(&flows, CONFIRM_TIMEOUT_MS);
        assert!(
            holds(&flows, &outcomes),
            "{step}: flows were as expected, then not on the next round:\n{}{}",
            table(&flows, &outcomes),
            self.policy_tables()
        );
        match change {
            Some(change) => {
                eprintln!(
                    "{step}: {} flows as expected at most {latency:.3?} after {what:?} was \
                     written (the write took {:.3?}; {rounds} rounds)",
                    flows.len(),
                    change.writing,
                );
                self.latencies.push(Latency {
                    step: step.to_string(),
                    what,
                    at_most: latency,
                    writing: change.writing,
                });
            }
            None => eprintln!(
                "{step}: {} flows as expected ({rounds} rounds)",
                flows.len()
            ),
        }
        latency
    }

    /// [`PolicyCluster::check`] of one flow.
    pub fn expect(
        &mut self,
        from: &Endpoint,
        to: &Endpoint,
        proto: Proto,
        port: u16,
        allowed: bool,
    ) -> Duration {
        let flow = Flow::new(from, to, proto, port, allowed);
        self.check(&flow.label(), &[flow])
    }

    /// A background prober: `flow`'s probe (timeout 50 ms) over and over until
    /// [`Prober::finish`].
    pub fn prober(&self, flow: &Flow) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let (attempts, answers) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (probe, flow_copy) = (self.probe.clone(), flow.clone());
        let (stop2, attempts2, answers2) = (stop.clone(), attempts.clone(), answers.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let started = Instant::now();
                let out = probe_command(&probe, &flow_copy, 50).output();
                attempts2.fetch_add(1, Ordering::Relaxed);
                if out.is_ok_and(|o| o.status.success()) {
                    answers2.fetch_add(1, Ordering::Relaxed);
                }
                // About one attempt every 50 ms, however quick the answer.
                std::thread::sleep(Duration::from_millis(50).saturating_sub(started.elapsed()));
            }
        });
        Prober {
            stop,
            attempts,
            answers,
            thread: Some(thread),
        }
    }

    /// Prints each check's change latency (an upper bound, and the write's own time), and
    /// their spread.
    pub fn print_latencies(&self) {
        eprintln!(
            "change latencies: at most this long from the start of the write (kubectl, curl) \
             to a polling round that found every flow as expected; the write's own time beside"
        );
        for l in &self.latencies {
            eprintln!(
                "  <= {:>10.3?}  (write {:>9.3?})  {}: {}",
                l.at_most, l.writing, l.step, l.what
            );
        }
        let mut all: Vec<Duration> = self.latencies.iter().map(|l| l.at_most).collect();
        all.sort();
        if let (Some(min), Some(max)) = (all.first(), all.last()) {
            eprintln!(
                "  min {min:.3?}, median {:.3?}, max {max:.3?}",
                all[all.len() / 2]
            );
        }
    }

    /// Starts the pod's echo servers and waits until each has bound its ports.
    fn serve(&mut self, pod: &Endpoint) {
        let mut wanted: Vec<(&str, Vec<String>)> = vec![
            ("tcp", TCP_PORTS.iter().map(|p| p.to_string()).collect()),
            ("udp", UDP_PORTS.iter().map(|p| p.to_string()).collect()),
        ];
        if self.sctp {
            wanted.push(("sctp", vec![SCTP_PORT.to_string()]));
        }
        for (proto, ports) in wanted {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &pod.netns])
                .arg(&self.probe)
                .args(["serve", proto])
                .args(&ports)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("{}: cannot start probe serve {proto}: {e}", pod.name));
            let stdout = child.stdout.take();
            let server = Server { child };
            let (tx, rx) = std::sync::mpsc::channel();
            // A thread reads the first line, so a server that hangs cannot hang the test.
            std::thread::spawn(move || {
                let mut line = String::new();
                if let Some(out) = stdout {
                    let _ = BufReader::new(out).read_line(&mut line);
                }
                let _ = tx.send(line);
            });
            let line = rx.recv_timeout(SERVER_READY_WITHIN).unwrap_or_default();
            assert_eq!(
                line.trim(),
                "ready",
                "{}: probe serve {proto} {ports:?} did not come up",
                pod.name
            );
            self.servers.push(server);
        }
    }

    /// Runs every flow's probe at once (`timeout_ms` each); their outcomes, in order.
    fn probe_all(&self, flows: &[Flow], timeout_ms: u64) -> Vec<Outcome> {
        let children: Vec<std::io::Result<Child>> = flows
            .iter()
            .map(|f| {
                probe_command(&self.probe, f, timeout_ms)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .collect();
        children
            .into_iter()
            .map(|child| match child.and_then(Child::wait_with_output) {
                Ok(out) => outcome(&out),
                Err(e) => Outcome {
                    answered: false,
                    word: format!("spawn failed: {e}"),
                },
            })
            .collect()
    }

    /// Every node's whole nf_tables ruleset (the agent's `inet ferrocni_policy` table and
    /// whatever else filters or rewrites), for a failure's message.
    fn policy_tables(&self) -> String {
        let mut text = String::new();
        for node in &self.kube.nodes {
            let out = node.ns.exec(&["nft", "list", "ruleset"]);
            text.push_str(&format!(
                "--- node{}: nft list ruleset ---\n{}{}\n",
                node.index,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        text
    }

    /// Sets the status of Pod `namespace/name` as its kubelet would once the sandbox runs.
    fn patch_pod_status(&self, namespace: &str, name: &str, pod_ip: &str, host_ip: &str) {
        let now = ferrocni_agent::ops::log::timestamp(SystemTime::now());
        let ready = |kind: &str| serde_json::json!({"type": kind, "status": "True", "lastTransitionTime": now});
        let status = serde_json::json!({
            "phase": "Running",
            "hostIP": host_ip,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "conditions": [ready("Initialized"), ready("ContainersReady"), ready("Ready"),
                ready("PodScheduled")],
        });
        let pod = self.patch_status(namespace, name, &status);
        assert_eq!(
            pod["podIPs"][0]["ip"], pod_ip,
            "pod {namespace}/{name}: {pod}"
        );
    }

    /// Marks Pod `namespace/name` `Succeeded`, as its kubelet does when its containers have
    /// all exited 0: it keeps its address in its status but no longer counts as a pod (its
    /// address may be another pod's by now), so no policy selects it any more.
    pub fn pod_succeeded(&mut self, namespace: &str, name: &str) {
        let pod = self.timed_change(&format!("pod {namespace}/{name} succeeded"), |c| {
            c.patch_status(namespace, name, &serde_json::json!({"phase": "Succeeded"}))
        });
        assert_eq!(pod["phase"], "Succeeded", "pod {namespace}/{name}: {pod}");
    }

    /// A merge patch of Pod `namespace/name`'s `status` subresource, as admin (kubectl 1.20
    /// cannot patch subresources); the status the apiserver kept.
    fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        status: &serde_json::Value,
    ) -> serde_json::Value {
        let patch = serde_json::json!({ "status": status });
        let control = &self.kube.control;
        let url = format!(
            "{}/api/v1/namespaces/{namespace}/pods/{name}/status",
            control.server()
        );
        let auth = format!("Authorization: Bearer {}", control.admin_token());
        let out = self
            .kube
            .underlay
            .ns
            .command(&["curl", "-sS", "--max-time", "10", "-X", "PATCH"])
            .arg("--cacert")
            .arg(control.ca_file())
            .args(["-H", &auth])
            .args(["-H", "Content-Type: application/merge-patch+json"])
            .args(["--data", &patch.to_string()])
            .args(["-o", "-", "-w", "\n%{http_code}"])
            .arg(&url)
            .output()
            .unwrap_or_else(|e| panic!("cannot run curl to patch pod {namespace}/{name}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, code) = text.trim_end().rsplit_once('\n').unwrap_or(("", &text));
        assert!(
            out.status.success() && code == "200",
            "patching the status of pod {namespace}/{name}: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        // What the apiserver kept is what the agents will read.
        let pod: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("pod {namespace}/{name} after the patch: {e}: {body}"));
        pod["status"].clone()
    }
}

impl Drop for PolicyCluster {
    fn drop(&mut self) {
        // Servers before the namespaces they run in.
        self.servers.clear();
    }
}

/// A prober started by [`PolicyCluster::prober`].
pub struct Prober {
    stop: Arc<AtomicBool>,
    attempts: Arc<AtomicU64>,
    answers: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Prober {
    /// Stops it: (attempts, answered).
    pub fn finish(mut self) -> (u64, u64) {
        self.halt();
        (
            self.attempts.load(Ordering::Relaxed),
            self.answers.load(Ordering::Relaxed),
        )
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.halt();
    }
}

/// UDP probes' source ports, each used once per test process (below the kernel's ephemeral
/// range): a probe that reused an earlier, allowed probe's 5-tuple would ride its conntrack
/// entry (up to 120 s) through a policy that denies it now.
const UDP_SOURCE_PORTS: std::ops::Range<u32> = 20_000..32_000;
static NEXT_UDP_SOURCE: AtomicU32 = AtomicU32::new(0);

fn udp_source_port() -> u32 {
    let n = NEXT_UDP_SOURCE.fetch_add(1, Ordering::Relaxed);
    UDP_SOURCE_PORTS.start + n % UDP_SOURCE_PORTS.len() as u32
}

/// `ip netns exec <from> probe connect <proto> <to> <port> <timeout_ms> [source port]`.
fn probe_command(probe: &Path, flow: &Flow, timeout_ms: u64) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &flow.from.netns])
        .arg(probe)
        .args(["connect", flow.proto.name(), &flow.to.ip])
        .arg(flow.port.to_string())
        .arg(timeout_ms.to_string())
        .stdin(Stdio::null());
    if flow.proto == Proto::Udp {
        cmd.arg(udp_source_port().to_string());
    }
    cmd
}

fn outcome(out: &Output) -> Outcome {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut word = stdout.trim().to_string();
    if word.is_empty() {
        word = format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Outcome {
        answered: out.status.success(),
        word,
    }
}

fn holds(flows: &[Flow], outcomes: &[Outcome]) -> bool {
    flows
        .iter()
        .zip(outcomes)
        .all(|(f, o)| f.allowed == o.answered)
}

/// One line per flow: source, destination, port, expected, found, and `<-- WRONG` where they
/// differ.
fn table(flows: &[Flow], outcomes: &[Outcome]) -> String {
    let mut text = format!(
        "{:<14} {:<14} {:<16} {:<9} {:<9} {}\n",
        "from", "to", "port", "expected", "found", "probe"
    );
    for (f, o) in flows.iter().zip(outcomes) {
        let word = |allowed: bool| if allowed { "allowed" } else { "denied" };
        text.push_str(&format!(
            "{:<14} {:<14} {:<16} {:<9} {:<9} {}{}\n",
            f.from.name,
            f.to.name,
            format!("{} {}/{}", f.to.ip, f.port, f.proto.name()),
            word(f.allowed),
            word(o.answered),
            o.word,
            if f.allowed == o.answered {
                ""
            } else {
                "  <-- WRONG"
            }
        ));
    }
    text
}

fn label_map(labels: &[(&str, &str)]) -> serde_json::Value {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A Pod as a controller would create it, already bound to `node` (no scheduler), tolerating
/// the taints of a node whose kubelet never reports (no eviction).
fn pod_object(
    namespace: &str,
    name: &str,
    node: &str,
    labels: &[(&str, &str)],
    ports: &[ContainerPort],
) -> serde_json::Value {
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .map(|p| {
            serde_json::json!({"name": p.name, "containerPort": p.port,
                "protocol": p.proto.name().to_uppercase()})
        })
        .collect();
    let tolerate =
        |key: &str| serde_json::json!({"key": key, "operator": "Exists", "effect": "NoExecute"});
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": label_map(labels)},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "containers": [{"name": "main", "image": "registry.invalid/probe:1", "ports": ports}],
            "tolerations": [tolerate("node.kubernetes.io/unreachable"),
                tolerate("node.kubernetes.io/not-ready")],
        },
    })
}

/// Whether the kernel has SCTP: `probe serve sctp` in `netns` exits 3 when it has none.
fn sctp_supported(probe: &Path, netns: &str) -> bool {
    let mut child = match Command::new("ip")
        .args(["netns", "exec", netns])
        .arg(probe)
        .args(["serve", "sctp", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => return false,
    };
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let _ = child.kill();
    let _ = child.wait();
    line.trim() == "ready"
}

/// Whether this build of the agent knows `--network-policy` (its `--help` lists it).
pub fn agent_has_network_policy() -> bool {
    let out = Command::new(our_binary("ferrocni-agent"))
        .arg("--help")
        .stdin(Stdio::null())
        .output();
    out.is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).contains("--network-policy")
            || String::from_utf8_lossy(&o.stderr).contains("--network-policy")
    })
}
