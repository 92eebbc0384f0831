//! A real Kubernetes 1.20 control plane for the agent's Kubernetes-mode tests: etcd,
//! kube-apiserver and kube-controller-manager (which assigns each Node its `spec.podCIDR`),
//! inside a namespace made by the test (the underlay switch, so nodes reach the apiserver at
//! [`Underlay::switch_ip`](crate::cluster::Underlay::switch_ip)`:6443`). Every file is in a
//! temporary directory (kubectl's cache and the controller-manager's plugin directory
//! included) and every process is killed on drop. The binaries are the ones
//! `make kube-bins` (`netns-tests/kube/build-kubernetes`) builds into a cache outside the
//! checkout; tests skip when [`kube_bin_dir`] finds none.
//!
//! ```no_run
//! use netns_tests::cluster::Underlay;
//! use netns_tests::kube::{kube_bin_dir, ControlPlane, KubeOptions};
//! if kube_bin_dir().is_some() {
//!     let underlay = Underlay::new("kube");
//!     let kube = ControlPlane::start(&underlay.ns, KubeOptions::default());
//!     kube.register_node("node1", "172.31.250.1");
//!     assert_eq!(kube.wait_pod_cidr("node1"), "10.244.0.0/24");
//! }
//! ```

mod pki;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::cluster::wait_until;
use crate::etcd::{Etcd, EtcdOptions};
use crate::{run_with_stdin, success_stdout, Netns, TempDir};
use pki::{write_kubeconfig, Pki};

/// The Kubernetes release the harness runs (Debian 12's source package).
pub const VERSION: &str = "1.20.2";
/// Every binary `build-kubernetes` makes; [`kube_bin_dir`] wants them all.
const BINARIES: [&str; 6] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
];
const APISERVER_PORT: u16 = 6443;
/// The control plane's own etcd, on loopback: not the agents' 2379, so a flannel-mode etcd can
/// share the netns.
const ETCD_PORT: u16 = 12379;
const SERVICE_CIDR: &str = "10.96.0.0/16";
/// Its first address, the `kubernetes` Service's (in the serving certificate).
const SERVICE_IP: &str = "10.96.0.1";
/// The IPv6 service range of a dual-stack control plane (1.20 allows at most 20 host bits).
const SERVICE_CIDR6: &str = "fd00:96::/112";
/// The issuer and audience of service-account tokens.
const ISSUER: &str = "https://kubernetes.default.svc";
/// How long the apiserver may take to answer /readyz, and the controllers to run.
// Generous: only a failure waits it out, and a VM without KVM needs minutes where a host
// needs seconds.
const READY_WITHIN: Duration = Duration::from_secs(300);
/// How long a controller may take to act (a podCIDR, a token Secret).
const CONTROLLER_WITHIN: Duration = Duration::from_secs(120);

/// Where `build-kubernetes` caches: `FERROCNI_KUBE_CACHE`, else `$HOME/.cache/ferrocni`.
pub fn kube_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FERROCNI_KUBE_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/ferrocni")
}

/// The cached Kubernetes binaries' directory if every one is there; otherwise prints how to
/// build them and returns `None` (the test skips).
pub fn kube_bin_dir() -> Option<PathBuf> {
    let dir = kube_cache_dir().join(format!("kubernetes-{VERSION}/bin"));
    let missing: Vec<&str> = BINARIES
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if missing.is_empty() {
        return Some(dir);
    }
    eprintln!(
        "Kubernetes {VERSION} binaries missing in {} ({}): run `make kube-bins`",
        dir.display(),
        missing.join(", ")
    );
    None
}

/// The cluster's pod network, as the controller-manager carves it into node podCIDRs, and what
/// tests add to the components' flags.
#[derive(Clone, Debug)]
pub struct KubeOptions {
    /// `--cluster-cidr` (IPv4).
    pub cluster_cidr: String,
    /// Each node's IPv4 podCIDR length.
    pub node_mask: u8,
    /// An IPv6 cluster CIDR too: dual-stack (the IPv6DualStack feature gate, a second service
    /// range), every node gets one podCIDR of each family.
    pub cluster_cidr6: Option<String>,
    /// Each node's IPv6 podCIDR length.
    pub node_mask6: u8,
    /// More kube-apiserver flags (a later flag wins), e.g. `--watch-cache=false` or
    /// `--default-watch-cache-size=0` so that watches fall behind and get 410 Gone sooner.
    pub apiserver_extra: Vec<String>,
    /// More kube-controller-manager flags.
    pub controller_manager_extra: Vec<String>,
    /// More etcd flags (`--auto-compaction-mode=revision`, `--auto-compaction-retention=1`).
    pub etcd_extra: Vec<String>,
}

impl Default for KubeOptions {
    fn default() -> Self {
        KubeOptions {
            cluster_cidr: "10.244.0.0/16".into(),
            node_mask: 24,
            cluster_cidr6: None,
            node_mask6: 64,
            apiserver_extra: Vec::new(),
            controller_manager_extra: Vec::new(),
            etcd_extra: Vec::new(),
        }
    }
}

impl KubeOptions {
    fn dual_stack(&self) -> bool {
        self.cluster_cidr6.is_some()
    }

    fn cluster_cidrs(&self) -> String {
        match &self.cluster_cidr6 {
            Some(v6) => format!("{},{v6}", self.cluster_cidr),
            None => self.cluster_cidr.clone(),
        }
    }

    fn service_cidrs(&self) -> String {
        if self.dual_stack() {
            format!("{SERVICE_CIDR},{SERVICE_CIDR6}")
        } else {
            SERVICE_CIDR.to_string()
        }
    }
}

/// A running control plane; see the module docs.
pub struct ControlPlane {
    ns: String,
    /// The address the apiserver listens on in the netns.
    ip: String,
    bin: PathBuf,
    pki: Pki,
    admin_kubeconfig: PathBuf,
    apiserver_args: Vec<String>,
    apiserver: Option<Child>,
    controller_manager: Option<Child>,
    /// Started by [`ControlPlane::start_scheduler`] (only tests with kubelets need one).
    scheduler: Option<Child>,
    /// Numbers the kubeconfig files [`ControlPlane::kubeconfig_for_token`] writes.
    kubeconfigs: AtomicUsize,
    etcd: Etcd,
    dir: TempDir,
}

impl ControlPlane {
    /// etcd + kube-apiserver + kube-controller-manager inside `ns`, the apiserver on the
    /// netns's first global IPv4 address (loopback if it has none); waits until /readyz answers
    /// and the controllers run (the token controller has given the `default` service account
    /// its Secret). Panics, with the components' logs, if they do not come up.
    pub fn start(ns: &Netns, options: KubeOptions) -> ControlPlane {
        let bin = kube_bin_dir().expect("the Kubernetes binaries (make kube-bins)");
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        let ip = first_ipv4(ns).unwrap_or_else(|| "127.0.0.1".into());
        let dir = TempDir::new("kube");
        let pki = Pki::create(&dir.join("pki"), &ip, SERVICE_IP);
        let etcd = Etcd::start(
            ns,
            EtcdOptions::default().client_port(ETCD_PORT).args(
                &options
                    .etcd_extra
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            ),
        );
        let server = format!("https://{ip}:{APISERVER_PORT}");
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        write_kubeconfig(&admin_kubeconfig, &server, &pki.ca_cert, &pki.admin_token);
        let controller_manager_kubeconfig = dir.join("controller-manager.kubeconfig");
        write_kubeconfig(
            &controller_manager_kubeconfig,
            &server,
            &pki.ca_cert,
            &pki.controller_manager_token,
        );
        let mut plane = ControlPlane {
            ns: ns.name().to_string(),
            apiserver_args: apiserver_args(&ip, &pki, &etcd.live_endpoints(), &options, &dir),
            ip,
            bin,
            admin_kubeconfig,
            apiserver: None,
            controller_manager: None,
            scheduler: None,
            kubeconfigs: AtomicUsize::new(0),
            pki,
            etcd,
            dir,
        };
        plane.start_apiserver();
        let args = controller_manager_args(
            &plane.pki,
            &controller_manager_kubeconfig,
            &options,
            &plane.dir,
        );
        plane.controller_manager = Some(plane.spawn("kube-controller-manager", &args));
        plane.wait_service_account_secret("default", "default");
        plane
    }

    /// [`ControlPlane::start`] with more kube-apiserver flags (see
    /// [`KubeOptions::apiserver_extra`]).
    pub fn start_with(ns: &Netns, mut options: KubeOptions, extra: &[&str]) -> ControlPlane {
        options
            .apiserver_extra
            .extend(extra.iter().map(|s| s.to_string()));
        ControlPlane::start(ns, options)
    }

    /// `https://<ip>:6443`, the apiserver as nodes reach it.
    pub fn server(&self) -> String {
        format!("https://{}:{APISERVER_PORT}", self.ip)
    }

    /// The CA of the apiserver's serving certificate (what clients must trust).
    pub fn ca_file(&self) -> PathBuf {
        self.pki.ca_cert.clone()
    }

    /// A kubeconfig of a `system:masters` token: the harness's own, never the agent's.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.admin_kubeconfig.clone()
    }

    /// The token of the harness's `system:masters` user, for clients other than kubectl.
    pub fn admin_token(&self) -> &str {
        &self.pki.admin_token
    }

    /// The kube-apiserver's pid while it runs (to read its CPU time).
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.as_ref().map(Child::id)
    }

    /// The etcd the apiserver stores into (to compact it, or to stop it).
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// The cached kubectl 1.20, as admin, inside the netns.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(&self.admin_kubeconfig, args)
    }

    /// The cached kubectl with `kubeconfig` (one of [`ControlPlane::kubeconfig_for_token`]'s),
    /// inside the netns.
    pub fn kubectl_with(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        self.kubectl_command(kubeconfig, args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run kubectl {args:?}: {e}"))
    }

    /// [`ControlPlane::kubectl`] that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        success_stdout(&format!("kubectl {args:?}"), self.kubectl(args))
    }

    /// `kubectl apply -f -` of `yaml`, as admin, which must succeed; its stdout.
    pub fn kubectl_apply(&self, yaml: &str) -> String {
        let mut cmd = self.kubectl_command(&self.admin_kubeconfig, &["apply", "-f", "-"]);
        success_stdout("kubectl apply", run_with_stdin(&mut cmd, yaml.as_bytes()))
    }

    /// kubectl as admin with `input` on its stdin (`apply --validate=false -f -`...); its
    /// output, whatever the exit status.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut cmd = self.kubectl_command(&self.admin_kubeconfig, args);
        run_with_stdin(&mut cmd, input.as_bytes())
    }

    /// Creates Node `name` as kubelet 1.20 registers its node: the well-known labels, the
    /// InternalIP and Hostname addresses, capacity, node info and Ready conditions, and no
    /// podCIDR (the controller-manager assigns it).
    pub fn register_node(&self, name: &str, internal_ip: &str) {
        let node = node_object(name, internal_ip);
        let mut cmd = self.kubectl_command(&self.admin_kubeconfig, &["create", "-f", "-"]);
        success_stdout(
            &format!("registering node {name}"),
            run_with_stdin(&mut cmd, node.to_string().as_bytes()),
        );
    }

    /// Deletes Node `name` (and waits until it is gone).
    pub fn delete_node(&self, name: &str) {
        self.kubectl_ok(&["delete", "node", name, "--wait=true"]);
    }

    /// Node `name` as the apiserver has it, `None` if there is none.
    pub fn node_json(&self, name: &str) -> Option<serde_json::Value> {
        let out = self.kubectl(&["get", "node", name, "-o", "json"]);
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound") {
            return None;
        }
        let json = success_stdout(&format!("kubectl get node {name}"), out);
        Some(
            serde_json::from_str(&json)
                .unwrap_or_else(|e| panic!("kubectl get node {name}: {e}: {json}")),
        )
    }

    /// Node `name`'s `spec.podCIDR`, once the controller-manager has assigned it.
    pub fn wait_pod_cidr(&self, name: &str) -> String {
        self.wait_pod_cidrs(name).swap_remove(0)
    }

    /// Node `name`'s `spec.podCIDRs` (IPv4 first, then IPv6 when dual-stack), once assigned.
    pub fn wait_pod_cidrs(&self, name: &str) -> Vec<String> {
        let mut cidrs = Vec::new();
        let assigned = wait_until(CONTROLLER_WITHIN, || {
            cidrs = self
                .node_json(name)
                .and_then(|n| n["spec"]["podCIDRs"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|c| c.as_str().map(String::from))
                .collect();
            !cidrs.is_empty()
        });
        assert!(
            assigned,
            "node {name} got no podCIDR within {CONTROLLER_WITHIN:?}:\n{}",
            self.log_tail("kube-controller-manager", 20)
        );
        cidrs
    }

    /// Starts kube-scheduler (as admin, no leader election, no serving port): pods get nodes.
    pub fn start_scheduler(&mut self) {
        if self.scheduler.is_some() {
            return;
        }
        let args = vec![
            format!("--kubeconfig={}", self.admin_kubeconfig.display()),
            "--leader-elect=false".into(),
            "--port=0".into(),
            "--secure-port=0".into(),
            "--profiling=false".into(),
        ];
        self.scheduler = Some(self.spawn("kube-scheduler", &args));
    }

    /// Kills the apiserver (SIGKILL, as a crash) and starts it again on the same etcd,
    /// certificates and flags; returns once /readyz answers.
    pub fn restart_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.start_apiserver();
    }

    /// Writes a kubeconfig for `token` (server [`ControlPlane::server`], CA
    /// [`ControlPlane::ca_file`]) in the control plane's directory; its path.
    pub fn kubeconfig_for_token(&self, token: &str) -> PathBuf {
        let n = self.kubeconfigs.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("token-{n}.kubeconfig"));
        write_kubeconfig(&path, &self.server(), &self.pki.ca_cert, token);
        path
    }

    /// The token of service account `namespace/name`, from the Secret 1.20's token controller
    /// makes for it (waited for, as is the account).
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let secret = self.wait_service_account_secret(namespace, name);
        let encoded = self.kubectl_ok(&[
            "-n",
            namespace,
            "get",
            "secret",
            &secret,
            "-o",
            "jsonpath={.data.token}",
        ]);
        let token =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded.trim())
                .unwrap_or_else(|e| panic!("secret {namespace}/{secret}: token not base64: {e}"));
        String::from_utf8(token).expect("a service-account token is text")
    }

    /// Resident memory of the apiserver, the controller-manager and the scheduler together, in
    /// KiB.
    pub fn rss_kib(&self) -> u64 {
        [&self.apiserver, &self.controller_manager, &self.scheduler]
            .iter()
            .filter_map(|c| c.as_ref())
            .map(|c| rss_kib(c.id()))
            .sum()
    }

    /// The name of the token Secret of service account `namespace/name`, once there.
    fn wait_service_account_secret(&self, namespace: &str, name: &str) -> String {
        let mut secret = String::new();
        let found = wait_until(READY_WITHIN, || {
            let out = self.kubectl(&[
                "-n",
                namespace,
                "get",
                "serviceaccount",
                name,
                "-o",
                "jsonpath={.secrets[0].name}",
            ]);
            secret = String::from_utf8_lossy(&out.stdout).trim().to_string();
            out.status.success() && !secret.is_empty()
        });
        assert!(
            found,
            "service account {namespace}/{name} got no token Secret within {READY_WITHIN:?}:\n{}",
            self.log_tail("kube-controller-manager", 20)
        );
        secret
    }

    fn start_apiserver(&mut self) {
        let args = self.apiserver_args.clone();
        self.apiserver = Some(self.spawn("kube-apiserver", &args));
        let ready = wait_until(READY_WITHIN, || {
            self.kubectl(&["get", "--raw=/readyz"]).status.success()
        });
        assert!(
            ready,
            "kube-apiserver not ready within {READY_WITHIN:?}:\n{}",
            self.log_tail("kube-apiserver", 30)
        );
    }

    /// Starts `binary` inside the netns, its output appended to `<binary>.log`.
    fn spawn(&self, binary: &str, args: &[String]) -> Child {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{binary}.log")))
            .unwrap_or_else(|e| panic!("{binary} log: {e}"));
        let stdout = log.try_clone().expect("clone the log file");
        Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(self.bin.join(binary))
            .args(args)
            .env("HOME", self.dir.path())
            .env("TMPDIR", self.dir.path())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"))
    }

    /// kubectl with `kubeconfig`; its discovery cache and any home files in the directory.
    fn kubectl_command(&self, kubeconfig: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns])
            .arg(self.bin.join("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--cache-dir={}",
                self.dir.join("kubectl-cache").display()
            ))
            .args(args)
            .env("HOME", self.dir.path())
            .env_remove("KUBECONFIG");
        cmd
    }

    /// The last `lines` lines of `component`'s log, newest last.
    fn log_tail(&self, component: &str, lines: usize) -> String {
        let log = fs::read_to_string(self.dir.join(format!("{component}.log"))).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        format!(
            "--- {component} (last lines) ---\n{}",
            all[all.len().saturating_sub(lines)..].join("\n")
        )
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for component in [
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
            ] {
                eprintln!("{}", self.log_tail(component, 15));
            }
        }
        // The apiserver last: the others would only log its going.
        for child in [
            &mut self.scheduler,
            &mut self.controller_manager,
            &mut self.apiserver,
        ] {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// kube-apiserver's flags: secure port only (1.20 has no other), the static tokens, Node and
/// RBAC authorization, service-account tokens, the control plane's etcd.
fn apiserver_args(
    ip: &str,
    pki: &Pki,
    etcd: &str,
    options: &KubeOptions,
    dir: &TempDir,
) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let mut args = vec![
        format!("--etcd-servers={etcd}"),
        format!("--bind-address={ip}"),
        format!("--advertise-address={ip}"),
        format!("--secure-port={APISERVER_PORT}"),
        format!("--cert-dir={}", path(&dir.join("apiserver"))),
        format!("--tls-cert-file={}", path(&pki.serving_cert)),
        format!("--tls-private-key-file={}", path(&pki.serving_key)),
        format!("--token-auth-file={}", path(&pki.token_file)),
        "--authorization-mode=Node,RBAC".into(),
        "--enable-admission-plugins=NodeRestriction".into(),
        format!(
            "--service-account-key-file={}",
            path(&pki.service_account_pub)
        ),
        format!(
            "--service-account-signing-key-file={}",
            path(&pki.service_account_key)
        ),
        format!("--service-account-issuer={ISSUER}"),
        format!("--api-audiences={ISSUER}"),
        format!("--service-cluster-ip-range={}", options.service_cidrs()),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
    ];
    if options.dual_stack() {
        args.push("--feature-gates=IPv6DualStack=true".into());
    }
    args.extend(options.apiserver_extra.iter().cloned());
    args
}

/// kube-controller-manager's flags: node podCIDR allocation, a credential per controller, the
/// CA for the csrsigning controller, no serving port, and every directory it could write to
/// (flex volumes, certificates) in `dir`.
fn controller_manager_args(
    pki: &Pki,
    kubeconfig: &Path,
    options: &KubeOptions,
    dir: &TempDir,
) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let mut args = vec![
        format!("--kubeconfig={}", path(kubeconfig)),
        "--controllers=*".into(),
        "--leader-elect=false".into(),
        "--use-service-account-credentials=true".into(),
        format!(
            "--service-account-private-key-file={}",
            path(&pki.service_account_key)
        ),
        format!("--root-ca-file={}", path(&pki.ca_cert)),
        format!("--cluster-signing-cert-file={}", path(&pki.ca_cert)),
        format!("--cluster-signing-key-file={}", path(&pki.ca_key)),
        "--allocate-node-cidrs=true".into(),
        format!("--cluster-cidr={}", options.cluster_cidrs()),
        format!("--service-cluster-ip-range={}", options.service_cidrs()),
        format!("--flex-volume-plugin-dir={}", path(&dir.join("flexvolume"))),
        format!("--cert-dir={}", path(&dir.join("controller-manager"))),
        // Neither the insecure nor the secure port: two control planes may share a netns.
        "--port=0".into(),
        "--secure-port=0".into(),
        "--profiling=false".into(),
    ];
    if options.dual_stack() {
        args.extend([
            "--feature-gates=IPv6DualStack=true".into(),
            format!("--node-cidr-mask-size-ipv4={}", options.node_mask),
            format!("--node-cidr-mask-size-ipv6={}", options.node_mask6),
        ]);
    } else {
        // 1.20 refuses the per-family flags on a single-stack cluster.
        args.push(format!("--node-cidr-mask-size={}", options.node_mask));
    }
    args.extend(options.controller_manager_extra.iter().cloned());
    args
}

/// A Node as kubelet 1.20 creates it at registration.
pub(crate) fn node_object(name: &str, internal_ip: &str) -> serde_json::Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let now = ferrocni_agent::ops::log::timestamp(SystemTime::now());
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        serde_json::json!({"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let resources = serde_json::json!({"cpu": "2", "memory": "4Gi", "pods": "110",
        "ephemeral-storage": "20Gi"});
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": arch,
            },
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "capacity": resources,
            "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kubeletVersion": format!("v{VERSION}"),
                "kubeProxyVersion": format!("v{VERSION}"),
                "operatingSystem": "linux",
                "architecture": arch,
                "containerRuntimeVersion": "containerd://1.6.20",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    })
}

/// The first global IPv4 address in `ns`.
fn first_ipv4(ns: &Netns) -> Option<String> {
    let addrs = ns.exec_json(&["ip", "-j", "-4", "addr", "show", "scope", "global"]);
    addrs
        .as_array()?
        .iter()
        .filter_map(|link| link["addr_info"].as_array())
        .flatten()
        .find_map(|a| a["local"].as_str().map(String::from))
}

/// VmRSS of process `pid`, in KiB (0 when it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
