//! A private containerd (1.6, Debian `containerd` + `runc`) with its CRI plugin driving a CNI
//! plugin directory, as kubelet's node runs it, for the end-to-end test and the benchmark.
//!
//! * Configuration, root, state, temp dir, socket, runc's state, the CNI `bin_dir` (symlinks to
//!   the plugins under test) and `conf_dir` all live in one [`TempDir`].
//! * containerd runs in a [`PrivateHost`]: its "host" netns (bridge, veths, rules) is a throw-away
//!   one, and what it writes outside its configured dirs (shim sockets under /run/containerd,
//!   libcni's cache and host-local's leases under /var/lib/cni) lands in that host's private
//!   tmpfs.
//! * Pods go under a cgroup parent of the node's own, removed on drop.
//! * The sandbox ("pause") image is built here from busybox-static and imported with `ctr`, so
//!   containerd never pulls. Its process is busybox `httpd` on port 80 whose CGI
//!   `/cgi-bin/hostname` answers the pod's hostname: a pod tells who answered a connection.
//!
//! Dropping a [`CriNode`] kills containerd, its shims and every pod process, then the private
//! host (which takes the pods' netns, mounts and the node's netns away), then the cgroups.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cri::{
    CriClient, CriError, LinuxPodSandboxConfig, PodSandboxConfig, PodSandboxMetadata,
};
use crate::private_host::{self, PrivateHost};
use crate::{success_stdout, TempDir, ENGINE_PLUGINS};

/// The sandbox image's name, as `sandbox_image` names it.
pub const SANDBOX_IMAGE: &str = "localhost/ferrocni-pause:latest";

/// The port the sandbox's httpd listens on inside every pod.
pub const POD_HTTP_PORT: u16 = 80;

const TOOLS: &[&str] = &[
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "busybox",
    "unshare",
    "nsenter",
    "ip",
    "iptables",
    "tar",
];

/// Why a containerd node cannot run here, or `None` when every tool it needs is installed.
pub fn missing_tools() -> Option<String> {
    let missing = private_host::missing_tools(TOOLS)?;
    Some(format!(
        "missing {missing:?} (apt-get install -y containerd runc busybox-static iptables util-linux)"
    ))
}

/// What the pod network's tuning plugin sets in every pod (a per-netns sysctl).
pub const POD_SOMAXCONN: &str = "1024";

/// The pod network of a kubelet-style node, as users run it: bridge `cni0` (gateway, masquerade,
/// hairpin) with host-local on `subnet`, portmap and bandwidth driven by the runtime's
/// capabilities, firewall (iptables) and tuning (`net.core.somaxconn` = [`POD_SOMAXCONN`]).
pub fn pod_network_conflist(name: &str, subnet: &str) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": "iptables"},
            {"type": "tuning", "sysctl": {"net.core.somaxconn": POD_SOMAXCONN}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
}

/// One pod sandbox as the test sees it.
#[derive(Clone, Debug)]
pub struct Pod {
    pub id: String,
    pub name: String,
    /// The sandbox process (its netns is the pod's).
    pub pid: i32,
    /// The pod's IP as containerd reports it (from the CNI result).
    pub ip: String,
}

pub struct CriNode {
    work: TempDir,
    host: PrivateHost,
    containerd: Option<Child>,
    cri: Option<CriClient>,
    cgroup_parent: String,
    pods_made: u32,
}

impl CriNode {
    /// Builds the node's directories, config and image, and starts containerd with `bin_dir`
    /// holding a symlink to `plugin_source/<name>` for every plugin of [`ENGINE_PLUGINS`]. The conf dir
    /// starts empty.
    pub fn start(plugin_source: &Path) -> CriNode {
        let work = TempDir::new("cri");
        for dir in [
            "bin", "conf", "root", "state", "tmp", "runc", "logs", "image",
        ] {
            fs::create_dir_all(work.join(dir)).expect("create the node's directories");
        }
        let source = fs::canonicalize(plugin_source)
            .unwrap_or_else(|e| panic!("plugin dir {}: {e}", plugin_source.display()));
        for name in ENGINE_PLUGINS {
            let target = source.join(name);
            assert!(target.is_file(), "plugin {} missing", target.display());
            std::os::unix::fs::symlink(&target, work.join("bin").join(name))
                .expect("symlink a plugin into bin_dir");
        }
        fs::write(
            work.join("config.toml"),
            containerd_config(work.path(), &work.join("bin"), &work.join("conf")),
        )
        .expect("write config.toml");
        let image = build_sandbox_image(&work.join("image"));
        let host = PrivateHost::start(work.path());
        let mut node = CriNode {
            work,
            host,
            containerd: None,
            cri: None,
            cgroup_parent: private_host::unique_cgroup_parent("ferrocni-cri"),
            pods_made: 0,
        };
        node.start_containerd();
        node.import_image(&image);
        node
    }

    /// The private host containerd sees as the node (its netns, /run, /var/lib).
    pub fn host(&self) -> &PrivateHost {
        &self.host
    }

    pub fn conf_dir(&self) -> PathBuf {
        self.work.join("conf")
    }

    pub fn socket(&self) -> PathBuf {
        self.work.join("containerd.sock")
    }

    /// The directory containerd's CRI keeps the pods' netns files in.
    pub fn netns_dir(&self) -> PathBuf {
        self.work.join("state/io.containerd.grpc.v1.cri/netns")
    }

    /// The CRI client (connected to the running containerd).
    pub fn cri(&mut self) -> &mut CriClient {
        self.cri.as_mut().expect("containerd is not running")
    }

    /// Writes `file` into the conf dir in place (containerd 1.6 reloads on the write; it
    /// ignores a file that only appears, e.g. by `mv`).
    pub fn write_conflist(&self, file: &str, conflist: &Value) {
        let path = self.conf_dir().join(file);
        fs::write(
            &path,
            serde_json::to_vec_pretty(conflist).expect("serialize"),
        )
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    fn log_path(&self) -> PathBuf {
        self.work.join("logs/containerd.log")
    }

    /// The last lines of containerd's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path(), lines)
    }

    /// Starts containerd in the private host and waits until its CRI answers.
    pub fn start_containerd(&mut self) {
        assert!(self.containerd.is_none(), "containerd is already running");
        let (child, cri) = start_containerd(
            &self.host,
            &self.work.join("config.toml"),
            &self.socket(),
            &self.log_path(),
        );
        self.containerd = Some(child);
        self.cri = Some(cri);
    }

    /// Kills containerd (SIGKILL, as a crash); its shims and pods keep running.
    pub fn kill_containerd(&mut self) {
        self.cri = None;
        if let Some(mut child) = self.containerd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn import_image(&mut self, archive: &Path) {
        let log = self.log_path();
        import_image(
            &self.host,
            &self.socket(),
            self.cri.as_mut().expect("containerd is not running"),
            archive,
            SANDBOX_IMAGE,
            &log,
        );
    }

    /// Polls the CRI's NetworkReady condition until it is `want`; returns whether it got there.
    pub fn wait_network_ready(&mut self, want: bool, timeout: Duration) -> bool {
        crate::cluster::wait_until(timeout, || {
            self.cri()
                .network_ready()
                .ok()
                .flatten()
                .is_some_and(|c| c.status == want)
        })
    }

    /// The networks containerd's CNI has loaded, by name (`cni-loopback` first), from the
    /// verbose Status (`cniconfig`).
    pub fn loaded_networks(&mut self) -> Vec<String> {
        let info = self.cri().status(true).map(|s| s.info).unwrap_or_default();
        let config: Value = info
            .get("cniconfig")
            .and_then(|c| serde_json::from_str(c).ok())
            .unwrap_or_default();
        config["Networks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n["Config"]["Name"].as_str().map(str::to_string))
            .collect()
    }

    /// A pod config as kubelet builds it: metadata, hostname, log directory and a cgroup parent
    /// under the node's own (no port mappings or annotations; add them as needed).
    pub fn pod_config(&mut self, name: &str) -> PodSandboxConfig {
        self.pods_made += 1;
        let uid = format!("{:08x}-{}-{}", std::process::id(), self.pods_made, name);
        let log_directory = self.work.join(format!("logs/pods/default_{name}_{uid}"));
        let _ = fs::create_dir_all(&log_directory);
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.clone(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: log_directory.display().to_string(),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/pod{uid}", self.cgroup_parent),
            }),
            ..Default::default()
        }
    }

    /// RunPodSandbox, then PodSandboxStatus (verbose) for the sandbox's pid and IP, then waits
    /// (up to 10 s) until the sandbox's httpd listens.
    pub fn run_pod(&mut self, config: PodSandboxConfig) -> Result<Pod, CriError> {
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let id = self.cri().run_pod_sandbox(config)?;
        let pod = self.pod(&id, &name)?;
        crate::cluster::wait_until(Duration::from_secs(10), || listens(pod.pid, POD_HTTP_PORT));
        Ok(pod)
    }

    /// The pod `id` as PodSandboxStatus describes it.
    pub fn pod(&mut self, id: &str, name: &str) -> Result<Pod, CriError> {
        let status = self.cri().pod_sandbox_status(id, true)?;
        let info: Value = status
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        Ok(Pod {
            id: id.to_string(),
            name: name.to_string(),
            pid: info["pid"].as_i64().unwrap_or_default() as i32,
            ip: status
                .status
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default(),
        })
    }

    /// StopPodSandbox then RemovePodSandbox, as kubelet ends a pod.
    pub fn stop_and_remove(&mut self, id: &str) -> Result<(), CriError> {
        self.cri().stop_pod_sandbox(id)?;
        self.cri().remove_pod_sandbox(id)
    }

    /// Runs `argv` inside `pod`'s network namespace (the tools are the node's).
    pub fn pod_exec(&self, pod: &Pod, argv: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--target={}", pod.pid))
            .args(["--net", "--", "timeout", "60"])
            .args(argv)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {argv:?} in pod {}: {e}", pod.name))
    }

    /// Like [`CriNode::pod_exec`], panicking unless it succeeds; returns trimmed stdout.
    pub fn pod_exec_ok(&self, pod: &Pod, argv: &[&str]) -> String {
        success_stdout(
            &format!("{argv:?} in pod {}", pod.name),
            self.pod_exec(pod, argv),
        )
        .trim()
        .to_string()
    }
}

impl Drop for CriNode {
    fn drop(&mut self) {
        self.kill_containerd();
        // Shims name the node's socket on their command line; pod processes sit in the node's
        // cgroup parent; the rest shares the private host's mount namespace.
        let work = self.work.path().display().to_string();
        let parent = self.cgroup_parent.clone();
        self.host.shutdown(|pid| {
            private_host::process_in_cgroup(pid, &parent)
                || fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&work))
        });
        private_host::remove_cgroup_tree(&self.cgroup_parent);
    }
}

/// Starts containerd with `config` in `host` (its output appended to `log`) and waits until
/// its CRI answers on `socket`; the process (dying with this thread) and the CRI client.
pub(crate) fn start_containerd(
    host: &PrivateHost,
    config: &Path,
    socket: &Path,
    log: &Path,
) -> (Child, CriClient) {
    let log_file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open containerd.log");
    let mut cmd = host.command(&["containerd", "--config", &config.display().to_string()]);
    cmd.stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("dup log"))
        .stderr(log_file);
    // nsenter (and the cgroup-joining shell) exec containerd in place: this child is
    // containerd itself.
    let mut child = private_host::die_with_parent(&mut cmd)
        .spawn()
        .expect("spawn containerd");
    let mut cri =
        CriClient::new(socket, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match cri.version() {
            Ok(v) if v.runtime_name == "containerd" => return (child, cri),
            Ok(v) => panic!("unexpected runtime behind the socket: {v:?}"),
            Err(e) => {
                let exited = child.try_wait().ok().flatten();
                if exited.is_some() || Instant::now() > deadline {
                    panic!(
                        "containerd did not come up ({e}; exit: {exited:?}):\n{}",
                        tail(log, 30)
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// `ctr images import`s `archive` into the CRI's namespace and waits until the CRI sees
/// `image` (or its first RunPodSandbox or container would try to pull it).
pub(crate) fn import_image(
    host: &PrivateHost,
    socket: &Path,
    cri: &mut CriClient,
    archive: &Path,
    image: &str,
    log: &Path,
) {
    host.exec_ok(&[
        "ctr",
        "--address",
        &socket.display().to_string(),
        "--namespace",
        "k8s.io",
        "images",
        "import",
        "--snapshotter",
        "native",
        &archive.display().to_string(),
    ]);
    // The CRI plugin learns about the image from containerd's events.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(cri.image_status(image), Ok(Some(_))) {
        assert!(
            Instant::now() < deadline,
            "the CRI does not see {image} after ctr import:\n{}",
            tail(log, 20)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `lines` lines of the file at `path`.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether a TCP socket listens on `port` in the netns of process `pid`.
fn listens(pid: i32, port: u16) -> bool {
    const TCP_LISTEN: &str = "0A";
    let port = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|table| {
        fs::read_to_string(format!("/proc/{pid}/net/{table}"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                fields.len() > 3 && fields[1].ends_with(&port) && fields[3] == TCP_LISTEN
            })
    })
}

/// containerd's configuration (version 2, containerd 1.6): everything under `work` but the
/// CRI's CNI `bin_dir` and `conf_dir`.
pub(crate) fn containerd_config(work: &Path, bin_dir: &Path, conf_dir: &Path) -> String {
    let w = work.display();
    let (bin_dir, conf_dir) = (bin_dir.display(), conf_dir.display());
    format!(
        r#"version = 2
root = "{w}/root"
state = "{w}/state"
temp = "{w}/tmp"
# Only what the CRI needs: no /opt/containerd, no tracing, one snapshotter that works anywhere.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.overlayfs",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{w}/containerd.sock"

[ttrpc]
  address = "{w}/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  # Without CAP_SYS_RESOURCE (VMs, nested containers) sandboxes cannot get a lower OOM score.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{w}/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin_dir}"
    conf_dir = "{conf_dir}"
    max_conf_num = 1
"#
    )
}

/// Builds the sandbox image in `dir`: a root filesystem of busybox-static and its applets, an
/// httpd page and CGI, packed as an OCI image layout archive named [`SANDBOX_IMAGE`]. Returns
/// the archive's path.
pub fn build_sandbox_image(dir: &Path) -> PathBuf {
    let rootfs = dir.join("rootfs");
    for sub in ["bin", "etc", "www/cgi-bin", "tmp", "proc", "sys", "dev"] {
        fs::create_dir_all(rootfs.join(sub)).expect("create the image's rootfs");
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .expect("busybox (apt-get install busybox-static)");
    fs::copy(busybox, rootfs.join("bin/busybox")).expect("copy busybox");
    let mut applets = String::new();
    Command::new(busybox)
        .arg("--list")
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdout.take().map(|mut o| o.read_to_string(&mut applets));
            c.wait()
        })
        .expect("busybox --list");
    for applet in applets.lines().filter(|a| !a.is_empty() && *a != "busybox") {
        let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
    }
    fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    fs::write(rootfs.join("etc/group"), "root:x:0:\n").expect("group");
    fs::write(rootfs.join("www/index.html"), "ferrocni-cri-ok\n").expect("index.html");
    let cgi = rootfs.join("www/cgi-bin/hostname");
    fs::write(
        &cgi,
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nexec hostname\n",
    )
    .expect("cgi");
    fs::set_permissions(&cgi, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod the cgi");

    let archive = crate::oci::write_image(
        dir,
        &rootfs,
        SANDBOX_IMAGE,
        json!({
            "Env": ["PATH=/bin"],
            "Cmd": ["/bin/httpd", "-f", "-p", POD_HTTP_PORT.to_string(), "-h", "/www"],
            "WorkingDir": "/",
        }),
    );
    let _ = fs::remove_dir_all(&rootfs);
    archive
}
