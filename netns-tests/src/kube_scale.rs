//! `make bench`'s Kubernetes section: one real `ferrocni-agent` in Kubernetes mode
//! (`--kube-subnet-mgr`, vxlan) joining a cluster of 1,000, then 5,000 Nodes in a real
//! control plane ([`ControlPlane`]: etcd, kube-apiserver, kube-controller-manager).
//!
//! The peers are Nodes as flanneld leaves them: registered as the kubelet registers a node,
//! with their `spec.podCIDR` set and flanneld's annotations (`kube-subnet-manager`,
//! `backend-type`, `backend-data`, `public-ip`). A loader creates them with parallel POSTs
//! (its rate is reported; loading is not part of the join). The agent's own Node is then
//! registered without a podCIDR, which the controller-manager assigns from the cluster CIDR.
//! Nothing runs a kubelet, so the controllers that would act on that — the node lifecycle
//! controller (nodes not heartbeating become NotReady and tainted) and the TTL controller
//! (it re-annotates every node as the cluster grows) — are off: their storm of Node updates
//! is not what a cluster of live nodes sees.
//!
//! Measured: the join (agent start to every peer programmed, checked in the kernel: the ARP
//! entries on `flannel.1`); churn, one change at a time (a Node deleted, a Node created, a
//! Node's `backend-data` given a new VTEP MAC), each change's latency from the API's answer to
//! the kernel; the agent's RSS and CPU, the apiserver's CPU; and every request the agent made,
//! from the apiserver's audit log (its service account's requests only, Metadata level), the
//! agent resyncing every 10 s.
//! `FERROCNI_BENCH_KUBE_NODES` (e.g. `1000` or `1000,5000,10000`) sets the cluster sizes.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::agent::Agent;
use crate::agent_scale::{
    arp_entries, log_tail, node_netns, peer_addresses, programmed_on, start_until_programmed,
    usage, verdict,
};
use crate::kube::{kube_bin_dir, node_object, ControlPlane, KubeOptions};
use crate::kube_cluster::{manifest, NAMESPACE, PREFIX, SERVICE_ACCOUNT};
use crate::{run_with_stdin, Netns, TempDir};

/// Room for 32,768 /24s, as in the etcd section.
const CLUSTER_CIDR: &str = "10.128.0.0/9";
const CONFIG: &str = r#"{"Network":"10.128.0.0/9","SubnetLen":24,"Backend":{"Type":"vxlan"}}"#;
/// The agent's node address, also the apiserver's (they share the netns).
const NODE_IP: &str = "10.99.0.1";
pub(crate) const AGENT_NODE: &str = "bench-agent";
const SIZES_ENV: &str = "FERROCNI_BENCH_KUBE_NODES";
const DEFAULT_SIZES: [usize; 2] = [1_000, 5_000];
/// Changes of each kind (delete, create, annotate) in the churn.
const CHANGES_PER_KIND: usize = 50;
/// The sustained churn, as in the etcd section.
const CHURN_PER_SECOND: usize = 50;
const CHURN_SECONDS: usize = 10;
/// The smallest cluster the churn fits in (its deletions must not reach the peers whose
/// MACs change).
const MIN_NODES: usize = 1_000;
/// POSTs the loader keeps in flight (HTTP/2 streams on one connection).
const LOADER_PARALLEL: usize = 64;
/// The etcd section's goals, for comparison.
const JOIN_GOAL: Duration = Duration::from_secs(5);
const CHANGE_GOAL: Duration = Duration::from_secs(1);
const JOIN_WITHIN: Duration = Duration::from_secs(120);
const CHANGE_WITHIN: Duration = Duration::from_secs(10);
pub(crate) const METRICS_PORT: u16 = 19_472;
const RESYNC: Duration = Duration::from_secs(10);

/// Runs the section with the agent binary `agent`, once per cluster size.
pub fn run(agent: &Path) {
    let sizes = sizes();
    let shown: Vec<String> = sizes.iter().map(usize::to_string).collect();
    println!(
        "\n## ferrocni-agent at scale in Kubernetes mode: {} Nodes in a real kube-apiserver {} ({SIZES_ENV})",
        shown.join(" then "),
        crate::kube::VERSION
    );
    let curl = Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok();
    if !agent.is_file() || !curl {
        println!("  skipped: needs {} (make build) and curl", agent.display());
        return;
    }
    if kube_bin_dir().is_none() {
        println!("  skipped: no Kubernetes binaries (make kube-bins)");
        return;
    }
    for nodes in sizes {
        println!("  --- {nodes} Nodes ---");
        // The control plane's harness panics when a component does not come up; its Drop
        // stops what it started, and the bench goes on with its other sections.
        if catch_unwind(AssertUnwindSafe(|| run_size(agent, nodes))).is_err() {
            println!("  {nodes} Nodes: the run failed (see above)");
        }
    }
}

/// The cluster sizes: `FERROCNI_BENCH_KUBE_NODES`, else 1,000 then 5,000.
fn sizes() -> Vec<usize> {
    let Ok(list) = std::env::var(SIZES_ENV) else {
        return DEFAULT_SIZES.to_vec();
    };
    let sizes: Vec<usize> = list
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n >= MIN_NODES)
        .collect();
    if sizes.is_empty() {
        println!(
            "  {SIZES_ENV}={list:?} is no list of sizes of at least {MIN_NODES}; using the default"
        );
        return DEFAULT_SIZES.to_vec();
    }
    sizes
}

fn run_size(binary: &Path, nodes: usize) {
    let Some(lab) = Lab::start(nodes) else { return };
    if !lab.load() {
        return;
    }
    let Some(joined) = lab.join(binary) else {
        return;
    };
    lab.churn(&joined);
    lab.report_requests(joined.audit_lines_at_join);
}

/// Peer `i`'s Node name.
fn peer_name(i: usize) -> String {
    format!("peer-{i}")
}

/// Peer `i`'s podCIDR.
fn peer_cidr(i: usize) -> String {
    let ((a, b), _, _) = peer_addresses(i);
    format!("10.{a}.{b}.0/24")
}

/// Peer `i`'s VTEP address on flannel.1 (what its ARP entry is for).
fn peer_vtep(i: usize) -> String {
    let ((a, b), _, _) = peer_addresses(i);
    format!("10.{a}.{b}.0")
}

/// A second VTEP MAC for peer `i` (its flanneld recreated the device).
fn peer_new_mac(i: usize) -> String {
    peer_addresses(i).2.replacen("0e:00", "0e:01", 1)
}

/// Peer `i`'s Node: as the kubelet registers it, with its podCIDR and flanneld's annotations
/// for VTEP MAC `mac`.
fn peer_node(i: usize, mac: &str) -> Value {
    let (_, underlay, _) = peer_addresses(i);
    let mut node = node_object(&peer_name(i), &underlay);
    let cidr = peer_cidr(i);
    node["spec"] = json!({"podCIDR": cidr, "podCIDRs": [cidr]});
    let annotations = &mut node["metadata"]["annotations"];
    for (name, value) in flannel_annotations(&underlay, mac) {
        annotations[name.as_str()] = Value::String(value);
    }
    node
}

/// flanneld's annotations of a vxlan node at `underlay` whose VTEP has `mac`.
fn flannel_annotations(underlay: &str, mac: &str) -> [(String, String); 4] {
    [
        (format!("{PREFIX}/kube-subnet-manager"), "true".into()),
        (format!("{PREFIX}/backend-type"), "vxlan".into()),
        (
            format!("{PREFIX}/backend-data"),
            format!(r#"{{"VNI":1,"VtepMAC":"{mac}"}}"#),
        ),
        (format!("{PREFIX}/public-ip"), underlay.into()),
    ]
}

/// The audit policy: Metadata for the agent's service account, nothing for anyone else; one
/// line per request (RequestReceived), so a watch still open is counted too.
fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\n\
         omitStages: [\"ResponseStarted\", \"ResponseComplete\", \"Panic\"]\n\
         rules:\n\
         - level: Metadata\n  users: [\"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}\"]\n\
         - level: None\n"
    )
}

/// The netns (the underlay a veth pair in it) with the control plane and, later, the agent.
pub(crate) struct Lab {
    // Dropped in this order: the control plane's processes, the netns, the files.
    pub(crate) control: ControlPlane,
    pub(crate) ns: Netns,
    pub(crate) dir: TempDir,
    audit_log: PathBuf,
    /// The manifest's service account's kubeconfig (the agent's credentials).
    kubeconfig: PathBuf,
    nodes: usize,
}

/// The agent as it runs in the lab, and what was measured at its join.
struct Joined {
    agent: Agent,
    pid: u32,
    /// This node's podCIDR (no churned peer may take it).
    own_cidr: String,
    audit_lines_at_join: usize,
}

/// Which peers leave and join next: leaving ones from the first loaded, joining ones after
/// the loaded ones, never on this node's podCIDR.
struct Cursor {
    next_gone: usize,
    next_new: usize,
    own_cidr: String,
}

impl Cursor {
    fn leaving(&mut self) -> usize {
        self.next_gone += 1;
        self.next_gone - 1
    }

    fn joining(&mut self) -> usize {
        while peer_cidr(self.next_new) == self.own_cidr {
            self.next_new += 1;
        }
        self.next_new += 1;
        self.next_new - 1
    }
}

/// CPU time of the agent and the apiserver from a start, and the agent's memory at the end.
pub(crate) struct Cost {
    pub(crate) started: Instant,
    agent_cpu: f64,
    apiserver_cpu: f64,
}

impl Cost {
    /// From now, for the agent `agent_pid`.
    pub(crate) fn start(agent_pid: u32, control: &ControlPlane) -> Cost {
        Cost {
            started: Instant::now(),
            agent_cpu: usage(agent_pid).2,
            apiserver_cpu: usage(control.apiserver_pid().unwrap_or(0)).2,
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn report(&self, indent: &str, agent_pid: u32, control: &ControlPlane) {
        let seconds = self.elapsed().as_secs_f64();
        let (rss, peak, cpu) = usage(agent_pid);
        let agent = cpu - self.agent_cpu;
        let apiserver = usage(control.apiserver_pid().unwrap_or(0)).2 - self.apiserver_cpu;
        println!(
            "{indent}  agent: RSS {:.1} MiB (peak {:.1} MiB), CPU {agent:.2} s ({:.0} % of one core); kube-apiserver CPU {apiserver:.2} s ({:.0} %)",
            rss as f64 / 1024.0,
            peak as f64 / 1024.0,
            agent / seconds * 100.0,
            apiserver / seconds * 100.0
        );
    }
}

/// One request of a batch ([`Lab::send_all`]); a PATCH's body is a JSON merge patch.
pub(crate) struct Request {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) body: Option<PathBuf>,
}

/// One API request's answer: its status and when the first byte of the answer came, after
/// the request was started.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) answered_after: Duration,
}

impl Lab {
    fn start(nodes: usize) -> Option<Lab> {
        Lab::start_with(nodes, "kube-scale", 24)
    }

    /// The netns and the control plane, each node's podCIDR a /`node_mask` of the cluster CIDR;
    /// `nodes` is how many peers [`Lab::load`] would create.
    pub(crate) fn start_with(nodes: usize, tag: &str, node_mask: u8) -> Option<Lab> {
        let dir = TempDir::new(tag);
        let ns = node_netns("fcb-kube")?;
        let policy = dir.join("audit-policy.yaml");
        let audit_log = dir.join("audit.log");
        if let Err(e) = fs::write(&policy, audit_policy()) {
            println!("  skipped: {}: {e}", policy.display());
            return None;
        }
        let options = KubeOptions {
            cluster_cidr: CLUSTER_CIDR.into(),
            node_mask,
            apiserver_extra: vec![
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", audit_log.display()),
            ],
            // Appended to the harness's `--controllers=*` (a list flag).
            controller_manager_extra: vec!["--controllers=-nodelifecycle,-ttl".into()],
            ..KubeOptions::default()
        };
        let started = Instant::now();
        let control = ControlPlane::start(&ns, options);
        control.kubectl_apply(&manifest());
        let token = control.service_account_token(NAMESPACE, SERVICE_ACCOUNT);
        let kubeconfig = control.kubeconfig_for_token(&token);
        println!(
            "  control plane up in {:.1} s (cluster CIDR {CLUSTER_CIDR}, /{node_mask} nodes)",
            started.elapsed().as_secs_f64()
        );
        Some(Lab {
            control,
            ns,
            dir,
            audit_log,
            kubeconfig,
            nodes,
        })
    }

    /// The loader: every peer's Node, POSTed by curl over HTTP/2, many at a time, as admin.
    fn load(&self) -> bool {
        let mut requests = Vec::with_capacity(self.nodes);
        for i in 1..=self.nodes {
            match self.create_request(i) {
                Some(r) => requests.push(r),
                None => return false,
            }
        }
        let started = Instant::now();
        if let Err(why) = self.send_all("loader", &requests) {
            println!("  loader: {why}");
            return false;
        }
        let elapsed = started.elapsed();
        println!(
            "  loader: {} Nodes created in {:.1} s ({:.0} Nodes/s; {LOADER_PARALLEL} POSTs in flight, HTTP/2, as admin)",
            self.nodes,
            elapsed.as_secs_f64(),
            self.nodes as f64 / elapsed.as_secs_f64()
        );
        true
    }

    /// The POST that creates peer `i`'s Node, its body written to a file.
    fn create_request(&self, i: usize) -> Option<Request> {
        let bodies = self.dir.join("nodes");
        let body = bodies.join(format!("{}.json", peer_name(i)));
        let node = peer_node(i, &peer_addresses(i).2);
        if let Err(e) =
            fs::create_dir_all(&bodies).and_then(|()| fs::write(&body, node.to_string()))
        {
            println!("  {}: {e}", body.display());
            return None;
        }
        Some(Request {
            method: "POST",
            path: "/api/v1/nodes".into(),
            body: Some(body),
        })
    }

    /// Sends `requests` with one curl, [`LOADER_PARALLEL`] at a time; an error unless every
    /// one succeeded.
    pub(crate) fn send_all(&self, name: &str, requests: &[Request]) -> Result<(), String> {
        let config = self.dir.join(format!("{name}.curlrc"));
        let mut curlrc = String::new();
        for (n, r) in requests.iter().enumerate() {
            if n > 0 {
                curlrc.push_str("next\n");
            }
            curlrc.push_str(&self.curl_common());
            let _ = writeln!(
                curlrc,
                "request = \"{}\"\nurl = \"{}{}\"",
                r.method,
                self.control.server(),
                r.path
            );
            if let Some(body) = &r.body {
                let content_type = if r.method == "PATCH" {
                    "application/merge-patch+json"
                } else {
                    "application/json"
                };
                let _ = writeln!(
                    curlrc,
                    "data-binary = \"@{}\"\nheader = \"Content-Type: {content_type}\"",
                    body.display()
                );
            }
        }
        fs::write(&config, curlrc).map_err(|e| format!("{}: {e}", config.display()))?;
        let out = self
            .ns
            .command(&[
                "curl",
                "--silent",
                "--show-error",
                "--parallel",
                "--parallel-max",
                &LOADER_PARALLEL.to_string(),
                "--config",
                &config.display().to_string(),
            ])
            .output()
            .map_err(|e| format!("cannot run curl: {e}"))?;
        let answers = String::from_utf8_lossy(&out.stdout);
        let done = answers.lines().filter(|l| l.starts_with('2')).count();
        if done == requests.len() {
            return Ok(());
        }
        let other = answers.lines().find(|l| !l.starts_with('2')).unwrap_or("");
        let errors = String::from_utf8_lossy(&out.stderr);
        let error = errors.lines().find(|l| l.contains("curl:")).unwrap_or("");
        Err(format!(
            "{done} of {} requests succeeded (status and time of another: {other}) {error}",
            requests.len()
        ))
    }
    /// The curl options every request has: its TLS trust, the admin token, its output (the
    /// status code and the time to the answer's first byte, one line).
    fn curl_common(&self) -> String {
        format!(
            "silent\nshow-error\ncacert = \"{}\"\nheader = \"Authorization: Bearer {}\"\n\
             output = \"/dev/null\"\nwrite-out = \"%{{http_code}} %{{time_starttransfer}}\\n\"\n",
            self.control.ca_file().display(),
            self.control.admin_token()
        )
    }

    /// One request to the API as admin (`body` on stdin); `None` when curl failed to run.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> Option<Answer> {
        let mut args = vec![
            "curl".to_string(),
            "--config".into(),
            "-".into(),
            "--request".into(),
            method.into(),
            format!("{}{path}", self.control.server()),
        ];
        if !body.is_empty() {
            args.extend([
                "--header".into(),
                format!("Content-Type: {content_type}"),
                "--data-binary".into(),
                format!("@{}", self.write_body(body)?.display()),
            ]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_with_stdin(&mut self.ns.command(&argv), self.curl_common().as_bytes());
        let line = String::from_utf8_lossy(&out.stdout);
        let mut fields = line.split_whitespace();
        let status = fields.next()?.parse().ok()?;
        let seconds: f64 = fields.next()?.parse().ok()?;
        Some(Answer {
            status,
            answered_after: Duration::from_secs_f64(seconds),
        })
    }

    /// A request body in a file (curl's stdin carries its options).
    fn write_body(&self, body: &str) -> Option<PathBuf> {
        let path = self.dir.join("body.json");
        fs::write(&path, body).ok()?;
        Some(path)
    }

    /// The lines the audit log has now.
    pub(crate) fn audit_lines(&self) -> Vec<Value> {
        fs::read_to_string(&self.audit_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Registers this node (`bench-agent`, its podCIDR assigned by the controller-manager)
    /// and makes its agent, not started: Kubernetes mode with the service account's
    /// credentials, network config `net_conf`, metrics on loopback, and `extra` flags. The
    /// agent and this node's podCIDR.
    pub(crate) fn agent(
        &self,
        binary: &Path,
        net_conf: &str,
        extra: &[&str],
    ) -> Option<(Agent, String)> {
        self.control.register_node(AGENT_NODE, NODE_IP);
        let own_cidr = self.control.wait_pod_cidr(AGENT_NODE);
        let conf = self.dir.join("net-conf.json");
        fs::write(&conf, net_conf).ok()?;
        let mut agent = Agent::in_netns(
            &self.ns,
            NODE_IP,
            &self.dir.join("agent"),
            "http://127.0.0.1:9",
        )
        .args(&[
            "--kube-subnet-mgr",
            &format!("--kubeconfig-file={}", self.kubeconfig.display()),
            &format!("--net-config-path={}", conf.display()),
            &format!("--metrics-port={METRICS_PORT}"),
            // Several resyncs during the churns (the default is 60 s), to show they ask the
            // apiserver nothing.
            &format!("--resync-interval={}", RESYNC.as_secs()),
            "--healthz-ip=127.0.0.1",
        ])
        .args(extra);
        agent.binary = Some(binary.to_path_buf());
        agent.env.push(("NODE_NAME".into(), AGENT_NODE.into()));
        Some((agent, own_cidr))
    }

    /// Registers this node, starts the agent and waits until it has programmed every peer:
    /// the join time, checked in the kernel.
    fn join(&self, binary: &Path) -> Option<Joined> {
        let (mut agent, own_cidr) = self.agent(binary, CONFIG, &[])?;
        let apiserver = self.control.apiserver_pid().unwrap_or(0);
        let (_, _, apiserver_cpu_before) = usage(apiserver);
        let (pid, join) =
            start_until_programmed(&mut agent, &self.ns, METRICS_PORT, self.nodes, JOIN_WITHIN)?;
        let neigh = arp_entries(&self.ns);
        let (rss, _, cpu_join) = usage(pid);
        let (_, _, apiserver_cpu) = usage(apiserver);
        println!(
            "  join: {} peers programmed in {:.2} s (etcd mode's goal ≤ {} s: {}); {neigh} ARP entries on flannel.1",
            self.nodes,
            join.as_secs_f64(),
            JOIN_GOAL.as_secs(),
            verdict(join <= JOIN_GOAL && neigh >= self.nodes)
        );
        println!(
            "  agent after join: RSS {:.1} MiB, CPU {cpu_join:.2} s; kube-apiserver CPU during the join {:.2} s",
            rss as f64 / 1024.0,
            apiserver_cpu - apiserver_cpu_before
        );
        Some(Joined {
            agent,
            pid,
            own_cidr,
            audit_lines_at_join: self.audit_lines().len(),
        })
    }

    /// Churn: first one change at a time, then at the etcd section's rate.
    fn churn(&self, joined: &Joined) {
        let mut cursor = Cursor {
            next_gone: 1,
            next_new: self.nodes + 1,
            own_cidr: joined.own_cidr.clone(),
        };
        if self.churn_one_at_a_time(&mut cursor, joined) {
            self.churn_sustained(&mut cursor, joined);
        }
        let expected = self.nodes as f64;
        let programmed = programmed_on(&self.ns, METRICS_PORT).unwrap_or(0.0);
        if programmed != expected {
            println!("  note: {programmed} peers programmed at the end (expected {expected})");
        }
    }

    /// A peer deleted, a peer created, a peer's VTEP MAC changed, in turn, each once the
    /// previous one is in the kernel: each change's latency from the API's answer to the
    /// kernel. Whether every change landed.
    fn churn_one_at_a_time(&self, cursor: &mut Cursor, joined: &Joined) -> bool {
        let cost = Cost::start(joined.pid, &self.control);
        let mut latencies: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        for k in 0..CHANGES_PER_KIND {
            // The MACs change on the last loaded peers, which no churn deletes.
            let changed = self.nodes - k;
            for (kind, latency) in [
                ("delete", self.delete_peer(cursor.leaving())),
                ("create", self.create_peer(cursor.joining())),
                ("annotate", self.change_mac(changed)),
            ] {
                match latency {
                    Some(l) => latencies.entry(kind).or_default().push(l),
                    None => {
                        self.churn_failed(kind, joined);
                        return false;
                    }
                }
            }
        }
        let all: Vec<Duration> = latencies.values().flatten().copied().collect();
        let mut line = format!(
            "  churn, one change at a time: {} changes in {:.1} s; API answer to kernel: median {} p99 {}",
            all.len(),
            cost.elapsed().as_secs_f64(),
            ms(percentile(&all, 50)),
            ms(percentile(&all, 99)),
        );
        for (kind, l) in &latencies {
            let _ = write!(
                line,
                "; {kind} {}/{}",
                ms(percentile(l, 50)),
                ms(percentile(l, 99))
            );
        }
        println!(
            "{line} (etcd mode's goal ≤ {} ms: {})",
            CHANGE_GOAL.as_millis(),
            verdict(percentile(&all, 100) <= CHANGE_GOAL)
        );
        cost.report("  ", joined.pid, &self.control);
        true
    }

    /// The etcd section's churn: each second 25 Nodes deleted and 25 created (parallel
    /// requests); the time from the last answer to all 50 changes in the kernel.
    fn churn_sustained(&self, cursor: &mut Cursor, joined: &Joined) {
        let cost = Cost::start(joined.pid, &self.control);
        let half = CHURN_PER_SECOND / 2;
        let mut latencies = Vec::new();
        for second in 0..CHURN_SECONDS {
            let tick = cost.started + Duration::from_secs(second as u64);
            if let Some(wait) = tick.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let leaving: Vec<usize> = (0..half).map(|_| cursor.leaving()).collect();
            let joining: Vec<usize> = (0..half).map(|_| cursor.joining()).collect();
            let mut requests: Vec<Request> = leaving
                .iter()
                .map(|&i| Request {
                    method: "DELETE",
                    path: format!("/api/v1/nodes/{}", peer_name(i)),
                    body: None,
                })
                .collect();
            for &i in &joining {
                let Some(r) = self.create_request(i) else {
                    return;
                };
                requests.push(r);
            }
            if let Err(why) = self.send_all("churn", &requests) {
                println!("  churn second {second}: {why}");
                return;
            }
            let answered = Instant::now();
            let landed = || {
                let neighbours = neighbours(&self.ns);
                leaving
                    .iter()
                    .all(|&i| !neighbours.contains_key(&peer_vtep(i)))
                    && joining
                        .iter()
                        .all(|&i| neighbours.get(&peer_vtep(i)) == Some(&peer_addresses(i).2))
            };
            while !landed() {
                if answered.elapsed() > CHANGE_WITHIN {
                    self.churn_failed("second of churn", joined);
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            latencies.push(answered.elapsed());
        }
        println!(
            "  churn at {CHURN_PER_SECOND} Nodes/s ({half} deleted, {half} created each second, {CHURN_SECONDS} s): last answer to all {CHURN_PER_SECOND} in the kernel: median {} p99 {} (etcd mode's goal ≤ {} ms: {})",
            ms(percentile(&latencies, 50)),
            ms(percentile(&latencies, 99)),
            CHANGE_GOAL.as_millis(),
            verdict(percentile(&latencies, 100) <= CHANGE_GOAL)
        );
        cost.report("  ", joined.pid, &self.control);
    }

    fn churn_failed(&self, what: &str, joined: &Joined) {
        println!(
            "  churn: a {what} did not reach the kernel within {CHANGE_WITHIN:?}; the agent's last lines:\n  {}",
            log_tail(&joined.agent)
        );
    }
    fn delete_peer(&self, i: usize) -> Option<Duration> {
        let vtep = peer_vtep(i);
        self.timed(
            "DELETE",
            &format!("/api/v1/nodes/{}", peer_name(i)),
            "",
            "",
            || self.neighbour(&vtep).is_none(),
        )
    }

    fn create_peer(&self, i: usize) -> Option<Duration> {
        let mac = peer_addresses(i).2;
        let body = peer_node(i, &mac).to_string();
        let vtep = peer_vtep(i);
        self.timed("POST", "/api/v1/nodes", "application/json", &body, || {
            self.neighbour(&vtep) == Some(mac.clone())
        })
    }

    /// Peer `i` gets a new VTEP MAC in its `backend-data`, as when its flanneld recreated the
    /// device.
    fn change_mac(&self, i: usize) -> Option<Duration> {
        let mac = peer_new_mac(i);
        let patch = json!({"metadata": {"annotations": {
            format!("{PREFIX}/backend-data"): format!(r#"{{"VNI":1,"VtepMAC":"{mac}"}}"#)}}});
        let vtep = peer_vtep(i);
        self.timed(
            "PATCH",
            &format!("/api/v1/nodes/{}", peer_name(i)),
            "application/merge-patch+json",
            &patch.to_string(),
            || self.neighbour(&vtep) == Some(mac.clone()),
        )
    }

    /// Makes one request and waits until `landed` holds; the time from the API's answer (the
    /// change is stored) to then. `None` when the request failed or the change did not land.
    fn timed(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
        landed: impl Fn() -> bool,
    ) -> Option<Duration> {
        let sent = Instant::now();
        let answer = self.request(method, path, content_type, body)?;
        if !(200..300).contains(&answer.status) {
            println!("  churn: {method} {path} answered {}", answer.status);
            return None;
        }
        let stored = sent + answer.answered_after;
        while sent.elapsed() < CHANGE_WITHIN {
            if landed() {
                return Some(Instant::now().saturating_duration_since(stored));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// The MAC of flannel.1's ARP entry for `ip`, if any: one lookup, not a dump of every
    /// peer's (which would weigh on what it measures).
    fn neighbour(&self, ip: &str) -> Option<String> {
        let out = self
            .ns
            .command(&["ip", "neigh", "get", ip, "dev", "flannel.1"])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let line = String::from_utf8_lossy(&out.stdout);
        let mut words = line.split_whitespace();
        words.find(|w| *w == "lladdr")?;
        words.next().map(str::to_string)
    }

    /// The agent's requests from the audit log, by verb and resource: until it had joined, and
    /// during the churn.
    fn report_requests(&self, at_join: usize) {
        let lines = self.audit_lines();
        let (join, churn) = lines.split_at(at_join.min(lines.len()));
        println!(
            "  the agent's apiserver requests (audit log), start to join: {}",
            request_counts(join)
        );
        println!(
            "  the agent's apiserver requests during the churn: {}",
            request_counts(churn)
        );
        // This node's too.
        let nodes = self.nodes + 1;
        let pages = join.iter().filter(|e| is_paged_node_list(e)).count();
        let expected = nodes.div_ceil(500);
        println!(
            "  paged node lists: {pages} pages for {nodes} Nodes ({expected} expected); no request during the churn: {}",
            verdict(pages == expected && churn.is_empty())
        );
    }
}

/// Audit events counted by verb and resource (`get nodes 1, patch nodes/status 2`), with the
/// request URIs of lists and watches.
pub(crate) fn request_counts(events: &[Value]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        let resource = &e["objectRef"];
        let mut what = format!(
            "{} {}",
            e["verb"].as_str().unwrap_or("?"),
            resource["resource"].as_str().unwrap_or("?")
        );
        if let Some(sub) = resource["subresource"].as_str() {
            let _ = write!(what, "/{sub}");
        }
        *counts.entry(what).or_default() += 1;
    }
    if counts.is_empty() {
        return "none".into();
    }
    let mut out: Vec<String> = counts.iter().map(|(w, n)| format!("{w} {n}")).collect();
    // Each kind of list and watch once (a list's later pages only differ by `continue=`).
    let mut uris: Vec<&str> = events
        .iter()
        .filter(|e| e["verb"] == "watch" || e["verb"] == "list")
        .filter_map(|e| e["requestURI"].as_str())
        .filter(|uri| !uri.contains("continue="))
        .collect();
    uris.dedup();
    if !uris.is_empty() {
        out.push(format!("[{}]", uris.join(", ")));
    }
    out.join(", ")
}

/// flannel.1's ARP entries: VTEP address to MAC.
fn neighbours(ns: &Netns) -> HashMap<String, String> {
    let out = ns
        .command(&["ip", "neigh", "show", "dev", "flannel.1"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let ip = f.next()?;
            let mac = f.skip_while(|w| *w != "lladdr").nth(1)?;
            Some((ip.to_string(), mac.to_string()))
        })
        .collect()
}

/// A page of a list of all nodes (`?limit=`), not a read of one node by field selector.
fn is_paged_node_list(event: &Value) -> bool {
    let uri = event["requestURI"].as_str().unwrap_or("");
    event["verb"] == "list"
        && event["objectRef"]["resource"] == "nodes"
        && uri.contains("limit=")
        && !uri.contains("fieldSelector")
}

/// The `p`th percentile (nearest rank) of `values`.
pub(crate) fn percentile(values: &[Duration], p: usize) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}
