//! Real Kubernetes nodes for the end-to-end test of the shipped manifest: each node is a set
//! of namespaces of its own (net, mount, IPC, UTS, cgroup) holding containerd 1.6, kubelet
//! 1.20 and kube-proxy (iptables mode), as an operator's node runs them.
//!
//! * The netns is an [`Underlay`] node's (`eth0` on the shared bridge, a default route to the
//!   switch, where the apiserver listens).
//! * The mount namespace has private `/run`, `/var/lib`, `/var/log`, `/etc/cni/net.d` and
//!   `/opt` (so `/opt/cni/bin` and `/etc/cni/net.d` start EMPTY: the DaemonSet's init
//!   container fills them), a sysfs of the node's netns, the cgroup v1 hierarchies mounted
//!   again inside the cgroup namespace, and stand-in files over the `/proc/sys` entries kubelet
//!   would write (holding the values it wants, so it writes none).
//! * Every process of the node (containerd, its shims and pods, kubelet, kube-proxy) lives in
//!   one cgroup of the node's, the root of its cgroup namespace, removed on drop.
//! * containerd's CRI reads CNI from the node's `/opt/cni/bin` and `/etc/cni/net.d`; images
//!   are imported with `ctr` (nothing is pulled): the node image ([`NODE_IMAGE`], built here
//!   from the workspace's binaries) and the busybox sandbox image, which pods also run.
//!
//! Dropping a [`KubeletNode`] kills every process of the node, then the namespaces, then the
//! cgroups; its files live in a [`TempDir`].

mod node_image;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

pub use node_image::{build_node_image, NODE_IMAGE};

use crate::cluster::{Node, Underlay};
use crate::containerd::{containerd_config, import_image, start_containerd, tail, SANDBOX_IMAGE};
use crate::kube::{kube_bin_dir, rss_kib};
use crate::private_host::{self, HostSpec, PrivateHost};
use crate::TempDir;

/// The `/proc/sys` entries kubelet 1.20 sets at start (unless `--protect-kernel-defaults`) and
/// the values it wants: stand-ins holding them are mounted over the real (global) ones.
const KUBELET_SYSCTLS: [(&str, &str); 6] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

/// Where the node's own CNI directories are, inside its mount namespace.
const CNI_BIN_DIR: &str = "/opt/cni/bin";
const CNI_CONF_DIR: &str = "/etc/cni/net.d";

/// What a node is told about the cluster.
pub struct NodeConfig<'a> {
    /// kubelet's and kube-proxy's kubeconfig (the apiserver at the underlay switch).
    pub kubeconfig: &'a Path,
    /// The cluster's pod network (kube-proxy's `--cluster-cidr`).
    pub cluster_cidr: &'a str,
    /// OCI archives and the image each holds, imported into the node's containerd.
    pub images: &'a [(PathBuf, String)],
}

pub struct KubeletNode {
    /// The Node's name, `node<index>`.
    pub name: String,
    /// Its underlay address (`--node-ip`).
    pub ip: String,
    kubelet: Option<Child>,
    proxy: Option<Child>,
    containerd: Option<Child>,
    host: PrivateHost,
    cgroup_parent: String,
    /// The underlay node whose netns this is (deleted after the processes are gone).
    _node: Node,
    work: TempDir,
}

impl KubeletNode {
    /// Node `index` on `underlay`: namespaces, containerd with the images, then kubelet and
    /// kube-proxy (which register the Node and program its Services). Does not wait for Ready.
    pub fn start(underlay: &Underlay, index: u8, config: &NodeConfig) -> KubeletNode {
        let bin = kube_bin_dir().expect("the Kubernetes binaries (make kube-bins)");
        let node = underlay.add_node(index);
        node.route_default_via_switch();
        let name = format!("node{index}");
        let work = TempDir::new(&format!("kubelet-{name}"));
        let cgroup_parent = private_host::unique_cgroup_parent("ferrocni-knode");
        let cgroup_procs = make_cgroup(&cgroup_parent);
        let spec = HostSpec {
            netns: Some(node.ns.path().to_path_buf()),
            node_namespaces: true,
            cgroup_procs,
            setup: node_setup(&name, &work),
        };
        let host = PrivateHost::start_with(work.path(), spec);
        let mut me = KubeletNode {
            name,
            ip: node.ip.clone(),
            kubelet: None,
            proxy: None,
            containerd: None,
            host,
            cgroup_parent,
            _node: node,
            work,
        };
        me.start_containerd(config.images);
        let kubelet = kubelet_args(&me, config.kubeconfig);
        me.kubelet = Some(me.spawn(&bin.join("kubelet"), &kubelet, "kubelet"));
        let proxy = proxy_args(&me, config.kubeconfig, config.cluster_cidr);
        me.proxy = Some(me.spawn(&bin.join("kube-proxy"), &proxy, "kube-proxy"));
        me
    }

    /// The node's namespaces, to run commands in (`ip`, `iptables-save`, its files).
    pub fn host(&self) -> &PrivateHost {
        &self.host
    }

    /// The last `lines` lines of `component`'s log (containerd, kubelet, kube-proxy).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        tail(&self.log_path(component), lines)
    }

    /// Resident memory of every process of the node (containerd, shims, pods, kubelet,
    /// kube-proxy), in KiB.
    pub fn rss_kib(&self) -> u64 {
        fs::read_dir("/proc")
            .map(|procs| {
                procs
                    .filter_map(Result::ok)
                    .filter_map(|p| p.file_name().to_string_lossy().parse::<i32>().ok())
                    .filter(|&pid| private_host::process_in_cgroup(pid, &self.cgroup_parent))
                    .map(|pid| rss_kib(pid as u32))
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Names of the files in the node's `dir` (empty when there is none).
    pub fn files(&self, dir: &str) -> Vec<String> {
        self.host.private_files(dir)
    }

    /// The last `lines` lines of every log kubelet keeps for containers named `container`
    /// (`/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log`), each headed by its
    /// path.
    pub fn container_logs(&self, container: &str, lines: usize) -> String {
        let mut out = String::new();
        for pod in self.files("/var/log/pods") {
            let dir = format!("/var/log/pods/{pod}/{container}");
            let mut logs = self.files(&dir);
            logs.sort();
            for log in logs {
                let path = self.host.private_path(&format!("{dir}/{log}"));
                out.push_str(&format!(
                    "--- {} {dir}/{log} ---\n{}\n",
                    self.name,
                    tail(&path, lines)
                ));
            }
        }
        out
    }

    fn log_path(&self, component: &str) -> PathBuf {
        self.work.join(format!("{component}.log"))
    }

    fn start_containerd(&mut self, images: &[(PathBuf, String)]) {
        let config = self.work.join("containerd.toml");
        fs::write(
            &config,
            containerd_config(
                self.work.path(),
                Path::new(CNI_BIN_DIR),
                Path::new(CNI_CONF_DIR),
            ),
        )
        .expect("write containerd.toml");
        let socket = self.socket();
        let log = self.log_path("containerd");
        let (child, mut cri) = start_containerd(&self.host, &config, &socket, &log);
        self.containerd = Some(child);
        for (archive, image) in images {
            import_image(&self.host, &socket, &mut cri, archive, image, &log);
        }
    }

    fn socket(&self) -> PathBuf {
        self.work.join("containerd.sock")
    }

    /// Starts `binary` with `args` in the node, its output in `<component>.log`.
    fn spawn(&self, binary: &Path, args: &[String], component: &str) -> Child {
        let log = fs::File::create(self.log_path(component))
            .unwrap_or_else(|e| panic!("{component} log: {e}"));
        let mut argv: Vec<&str> = vec![binary.to_str().expect("a UTF-8 path")];
        argv.extend(args.iter().map(String::as_str));
        let mut cmd = self.host.command(&argv);
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log);
        private_host::die_with_parent(&mut cmd)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {component}: {e}"))
    }
}

impl Drop for KubeletNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for component in ["kubelet", "kube-proxy", "containerd"] {
                eprintln!(
                    "--- {} {component} (last lines) ---\n{}",
                    self.name,
                    self.log_tail(component, 15)
                );
            }
        }
        // kubelet first: it would restart what goes.
        for child in [&mut self.kubelet, &mut self.proxy, &mut self.containerd] {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let parent = self.cgroup_parent.clone();
        let work = self.work.path().display().to_string();
        self.host.shutdown(|pid| {
            private_host::process_in_cgroup(pid, &parent)
                || fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&work))
        });
        private_host::remove_cgroup_tree(&self.cgroup_parent);
    }
}

/// Asserts that no node of this process's left anything on the host: no process running
/// from a node's directory, no node cgroup, no mount of a node's, no node directory.
pub fn assert_nothing_left() {
    let ours = format!("-{}-", std::process::id());
    let node_dir = |s: &str| s.contains("ferrocni-kubelet-node") && s.contains(&ours);
    let processes: Vec<String> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|p| fs::read(p.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| node_dir(c))
        .collect();
    assert!(processes.is_empty(), "processes left: {processes:#?}");
    let cgroups: Vec<PathBuf> = cgroup_mounts()
        .into_iter()
        .flat_map(|(mount, _, _)| fs::read_dir(mount).into_iter().flatten())
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy()
                    .starts_with(&format!("ferrocni-knode{ours}"))
            })
        })
        .collect();
    assert!(cgroups.is_empty(), "cgroups left: {cgroups:?}");
    let mounts: Vec<String> = fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| node_dir(l) || l.contains("ferrocni-cgroup") || l.contains("ferrocni-opt"))
        .map(str::to_string)
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:#?}");
    let dirs: Vec<PathBuf> = fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| node_dir(&p.display().to_string()))
        .collect();
    assert!(dirs.is_empty(), "directories left: {dirs:?}");
}

/// The host's cgroup hierarchies: (mount point, filesystem type, mount options).
fn cgroup_mounts() -> Vec<(String, String, String)> {
    fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && (f[2] == "cgroup" || f[2] == "cgroup2"))
                .then(|| (f[1].to_string(), f[2].to_string(), f[3].to_string()))
        })
        .collect()
}

/// Creates cgroup `relative` in every hierarchy (cpuset's with its parent's CPUs and memory
/// nodes, or no process could join it); the `cgroup.procs` files to join it by.
fn make_cgroup(relative: &str) -> Vec<PathBuf> {
    cgroup_mounts()
        .into_iter()
        .map(|(mount, _, options)| {
            let dir = Path::new(&mount).join(relative.trim_start_matches('/'));
            fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            if options.split(',').any(|o| o == "cpuset") {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let value =
                        fs::read_to_string(Path::new(&mount).join(file)).unwrap_or_default();
                    let _ = fs::write(dir.join(file), value.trim());
                }
            }
            dir.join("cgroup.procs")
        })
        .collect()
}

/// The holder's setup: hostname, the private directories, sysfs and the cgroup hierarchies
/// of the node's namespaces, the sysctl stand-ins (files in `work`).
fn node_setup(name: &str, work: &TempDir) -> String {
    let mut script = vec![
        format!("hostname {name}"),
        "mount -t tmpfs ferrocni-log /var/log".into(),
        format!("mount -t tmpfs ferrocni-cni {CNI_CONF_DIR}"),
        "mount -t tmpfs ferrocni-opt /opt".into(),
        format!("mkdir -p {CNI_BIN_DIR}"),
        "mount -t sysfs sysfs /sys".into(),
        "mount -t tmpfs ferrocni-cgroup /sys/fs/cgroup".into(),
    ];
    for (mount, fstype, options) in cgroup_mounts() {
        script.push(format!(
            "mkdir -p {mount}; mount -t {fstype} -o {options} {fstype} {mount}"
        ));
    }
    let stand_ins = work.join("sysctl");
    fs::create_dir_all(&stand_ins).expect("create the sysctl stand-ins' directory");
    for (key, value) in KUBELET_SYSCTLS {
        let file = stand_ins.join(key.replace('/', "."));
        fs::write(&file, format!("{value}\n")).expect("write a sysctl stand-in");
        script.push(format!("mount --bind {} /proc/sys/{key}", file.display()));
    }
    script.join("\n")
}

/// kubelet 1.20 on the node's containerd: cgroupfs, the node's own address and name, every
/// directory it writes in the node's private ones.
fn kubelet_args(node: &KubeletNode, kubeconfig: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--container-runtime=remote".into(),
        format!(
            "--container-runtime-endpoint=unix://{}",
            node.socket().display()
        ),
        "--cgroup-driver=cgroupfs".into(),
        "--fail-swap-on=false".into(),
        format!("--node-ip={}", node.ip),
        format!("--hostname-override={}", node.name),
        "--root-dir=/var/lib/kubelet".into(),
        "--cert-dir=/var/lib/kubelet/pki".into(),
        "--volume-plugin-dir=/var/lib/kubelet/volume-plugins".into(),
        "--read-only-port=0".into(),
        "--cluster-domain=cluster.local".into(),
        "--node-status-update-frequency=4s".into(),
        "--sync-frequency=10s".into(),
        "--image-gc-high-threshold=100".into(),
        "--eviction-hard=".into(),
    ]
}

/// kube-proxy in iptables mode, touching no global conntrack sysctl.
fn proxy_args(node: &KubeletNode, kubeconfig: &Path, cluster_cidr: &str) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={}", node.name),
        format!("--bind-address={}", node.ip),
        "--proxy-mode=iptables".into(),
        format!("--cluster-cidr={cluster_cidr}"),
        "--conntrack-max-per-core=0".into(),
        "--conntrack-min=0".into(),
        "--conntrack-tcp-timeout-established=0".into(),
        "--conntrack-tcp-timeout-close-wait=0".into(),
        "--metrics-bind-address=127.0.0.1:10249".into(),
        "--oom-score-adj=0".into(),
    ]
}

/// The sandbox image's name, which pods run too (busybox with every applet).
pub const BUSYBOX_IMAGE: &str = SANDBOX_IMAGE;
