//! Harness for the suite's end-to-end tests, run in throw-away network namespaces.
//!
//! Every test that touches the kernel follows the same pattern:
//!
//! ```no_run
//! use netns_tests::{require_root, ConfDir, Netns, Cnitool, TempDir};
//!
//! #[test]
//! fn my_plugin_works() {
//!     require_root!();
//!     let pod = Netns::new("pod");                  // deleted on drop, even on panic
//!     let conf = ConfDir::new();
//!     conf.write_conflist("10-net.conflist", r#"{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"loopback"}]}"#);
//!     let cache = TempDir::new("cache");
//!     let tool = Cnitool::new(&conf, vec![netns_tests::our_bin_dir()], cache.path());
//!     let result = tool.run_ok(&["add", "net", pod.path_str()]);
//!     pod.exec_ok(&["ip", "link", "show", "lo"]);
//! }
//! ```
//!
//! * Root: tests call [`require_root!`] first; without root they print a line and return.
//! * Our binaries: [`our_binary`] / [`our_bin_dir`] locate them in the workspace target
//!   directory (the profile directory of the running test executable, or
//!   `FERROCNI_BIN_DIR`). Cargo does not build other packages' binaries for a package's
//!   integration tests, so the first request for a binary runs `cargo build -p <pkg> --bins`
//!   (once per package and test process; a no-op when up to date), unless `FERROCNI_BIN_DIR`
//!   is set, in which case the binaries there are used as they are.
//! * Reference Go plugins: [`reference_plugin_dir`] (`/usr/lib/cni`, or
//!   `FERROCNI_REFERENCE_PLUGINS`), `None` with a printed line when missing so the test skips.
//! * Isolation: the "host" side of a plugin runs in a [`Netns`] too (run cnitool through
//!   [`Cnitool::in_netns`]); caches, IPAM data dirs and configs live in [`TempDir`]s.

pub mod agent;
pub mod agent_cluster;
pub mod agent_scale;
pub mod bgp;
pub mod bgp_refusals;
pub mod bgp_scale;
pub mod chain;
pub mod cluster;
pub mod containerd;
pub mod cri;
pub mod etcd;
pub mod exec_floor;
pub mod frr;
pub mod kube;
pub mod kube_cluster;
pub mod kube_scale;
pub mod kubelet;
pub mod netfilter;
pub mod oci;
pub mod plugin;
pub mod policy;
pub mod policy_scale;
pub mod private_host;
pub mod reboot;
pub mod rng;
pub mod route_watch;
pub mod udp_bench;
pub mod udp_proxy;

use std::collections::HashMap;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name unique across concurrently running tests and test processes.
fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// True when running as root (needed for namespaces and netlink changes).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Returns from the calling test (after printing why) unless running as root.
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::is_root() {
            eprintln!("skipping {}: needs root", module_path!());
            return;
        }
    };
}

/// Unwraps an `Option`, or prints `why` and returns from the calling test.
#[macro_export]
macro_rules! skip_unless {
    ($opt:expr, $why:expr) => {
        match $opt {
            Some(v) => v,
            None => {
                eprintln!("skipping {}: {}", module_path!(), $why);
                return;
            }
        }
    };
}

/// True when this run must prove every kernel path: `FERROCNI_REQUIRE_DRIVERS=1` (set by the
/// full-kernel VM run), so a test whose driver is missing fails instead of skipping.
pub fn drivers_required() -> bool {
    std::env::var_os("FERROCNI_REQUIRE_DRIVERS").is_some_and(|v| v == "1")
}

/// Returns from the calling test (after printing why) when `$present` is false, the kernel
/// lacking the driver named by `$what`; in a run that requires drivers ([`drivers_required`])
/// a missing driver fails the test instead.
#[macro_export]
macro_rules! require_driver {
    ($present:expr, $what:expr) => {
        if !$present {
            if $crate::drivers_required() {
                panic!(
                    "{}: this kernel has no {}, and FERROCNI_REQUIRE_DRIVERS=1 forbids skipping",
                    module_path!(),
                    $what
                );
            }
            eprintln!("skipping {}: this kernel has no {}", module_path!(), $what);
            return;
        }
    };
}

/// Whether this kernel can make what the driver-dependent tests need, probed once per process
/// in a scratch netns (the answer is cached). `kind` is a link kind `ip link add ... type <kind>`
/// takes (`dummy`, `vrf`, `ipip`, `vxlan`, `wireguard`, ...; `vlan`, `macvlan`, `ipvlan`, `macvtap` on a
/// veth parent), or one of: `bridge_vlan_filtering` (CONFIG_BRIDGE_VLAN_FILTERING), `tap`
/// (`/dev/net/tun`). Use it with [`require_driver!`]:
/// `require_driver!(kernel_has("vrf"), "vrf driver")`.
pub fn kernel_has(kind: &str) -> bool {
    static KNOWN: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    if let Some(&present) = known.lock().unwrap_or_else(|p| p.into_inner()).get(kind) {
        return present;
    }
    let present = probe_kernel(kind);
    known
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(kind.to_string(), present);
    present
}

fn probe_kernel(kind: &str) -> bool {
    let ns = Netns::new("probe");
    let on_veth = |kind: &str, extra: &[&str]| {
        ns.exec_ok(&[
            "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1",
        ]);
        let mut argv = vec![
            "ip", "link", "add", "link", "p0", "name", "k0", "type", kind,
        ];
        argv.extend(extra);
        ns.exec(&argv).status.success()
    };
    match kind {
        "vlan" => on_veth("vlan", &["id", "5"]),
        "macvlan" | "ipvlan" | "macvtap" => on_veth(kind, &[]),
        "bridge_vlan_filtering" => ns
            .exec(&[
                "ip",
                "link",
                "add",
                "b0",
                "type",
                "bridge",
                "vlan_filtering",
                "1",
            ])
            .status
            .success(),
        "tap" => ns
            .exec(&["ip", "tuntap", "add", "dev", "t0", "mode", "tap"])
            .status
            .success(),
        "vrf" => ns
            .exec(&["ip", "link", "add", "k0", "type", "vrf", "table", "7"])
            .status
            .success(),
        "vxlan" => ns
            .exec(&[
                "ip", "link", "add", "k0", "type", "vxlan", "id", "1", "dstport", "8472",
            ])
            .status
            .success(),
        // Without a local address an ipip link collides with the netns's fallback `tunl0`.
        "ipip" => ns
            .exec(&[
                "ip",
                "link",
                "add",
                "k0",
                "type",
                "ipip",
                "local",
                "192.0.2.1",
            ])
            .status
            .success(),
        other => ns
            .exec(&["ip", "link", "add", "k0", "type", other])
            .status
            .success(),
    }
}

/// The workspace root (parent of this crate).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Where our binaries are: `FERROCNI_BIN_DIR`, else the profile directory the running test
/// executable was built into (`<target>/debug`, honouring `CARGO_TARGET_DIR`), else
/// `<workspace>/target/debug`.
pub fn our_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FERROCNI_BIN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // Test executables live in <target>/<profile>/deps/.
    if let Ok(exe) = std::env::current_exe() {
        if let Some(profile) = exe
            .parent()
            .filter(|d| d.ends_with("deps"))
            .and_then(Path::parent)
        {
            return profile.to_path_buf();
        }
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("debug")
}

/// The package that builds binary `bin` (plugins are named as their binary).
fn package_of(bin: &str) -> &str {
    match bin {
        "cnitool" => "libcni",
        other => other,
    }
}

/// Path of our binary `bin`, built first if needed (see the crate docs). Panics with cargo's
/// output if the build fails.
pub fn our_binary(bin: &str) -> PathBuf {
    let dir = our_bin_dir();
    if std::env::var_os("FERROCNI_BIN_DIR").is_none_or(|d| d.is_empty()) {
        ensure_built(package_of(bin));
    }
    let path = dir.join(bin);
    assert!(
        path.is_file(),
        "binary {} not found (set FERROCNI_BIN_DIR or build package {})",
        path.display(),
        package_of(bin)
    );
    path
}

/// Runs `cargo build -p <package> --bins` once per package in this test process, into the
/// target directory the tests were built in. Cargo's own lock serializes concurrent builds.
pub fn ensure_built(package: &str) {
    static BUILT: OnceLock<Mutex<HashMap<String, Result<(), String>>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    let outcome = built
        .entry(package.to_string())
        .or_insert_with(|| cargo_build(package));
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

fn cargo_build(package: &str) -> Result<(), String> {
    let profile_dir = our_bin_dir();
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet", "-p", package, "--bins"]);
    if let Some(target) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run cargo to build {package}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo build -p {package} --bins failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Directory of the reference Go plugins (`FERROCNI_REFERENCE_PLUGINS` or `/usr/lib/cni`)
/// if it holds every plugin in `needed`; otherwise prints why and returns `None`.
pub fn reference_plugin_dir(needed: &[&str]) -> Option<PathBuf> {
    let dir = std::env::var_os("FERROCNI_REFERENCE_PLUGINS")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/cni"));
    for name in needed {
        if !dir.join(name).is_file() {
            eprintln!(
                "reference plugin {} missing (apt-get install containernetworking-plugins)",
                dir.join(name).display()
            );
            return None;
        }
    }
    Some(dir)
}

/// A temporary directory, removed recursively on drop.
pub struct TempDir {
    path: PathBuf,
}

/// Where [`TempDir`]s are made when not in `std::env::temp_dir()` (see [`set_temp_root`]).
static TEMP_ROOT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Makes new [`TempDir`]s under `root` (`None`: `std::env::temp_dir()` again); returns the
/// previous setting.
pub fn set_temp_root(root: Option<PathBuf>) -> Option<PathBuf> {
    let mut current = TEMP_ROOT.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::replace(&mut *current, root)
}

fn temp_root() -> PathBuf {
    let current = TEMP_ROOT.lock().unwrap_or_else(|p| p.into_inner());
    current.clone().unwrap_or_else(std::env::temp_dir)
}

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let path = temp_root().join(unique_name(&format!("ferrocni-{prefix}")));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A network namespace created with `ip netns add`, deleted on drop.
pub struct Netns {
    name: String,
    path: PathBuf,
}

impl Netns {
    /// Creates `<prefix>-<pid>-<counter>`, with its `lo` left as the kernel made it (down).
    pub fn new(prefix: &str) -> Netns {
        let name = unique_name(prefix);
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .unwrap_or_else(|e| panic!("cannot run ip netns add: {e}"));
        assert!(
            out.status.success(),
            "ip netns add {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from("/run/netns").join(&name);
        Netns { name, path }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`, what CNI_NETNS gets.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn path_str(&self) -> &str {
        self.path.to_str().unwrap_or_default()
    }

    /// A command that runs `argv` inside the namespace (`ip netns exec`), to add env etc.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).args(argv);
        cmd
    }

    /// Runs `argv` inside the namespace.
    pub fn exec(&self, argv: &[&str]) -> Output {
        self.command(argv)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {argv:?} in netns {}: {e}", self.name))
    }

    /// Waits (up to 10 s) until a TCP socket listens on `port` inside the namespace, so a
    /// server just spawned there is reachable; whether it came up.
    pub fn wait_tcp_listen(&self, port: u16) -> bool {
        // /proc/net/tcp{,6} of the namespace: local address `IP:PORT` in hex, state 0A = LISTEN.
        let wanted = format!(":{port:04X}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let out = self.exec(&["cat", "/proc/net/tcp", "/proc/net/tcp6"]);
            let listening = String::from_utf8_lossy(&out.stdout).lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(&wanted) && f[3] == "0A"
            });
            if listening {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Runs `argv` inside the namespace, panics (with its stderr) unless it succeeds, and
    /// returns its stdout.
    pub fn exec_ok(&self, argv: &[&str]) -> String {
        success_stdout(&format!("{argv:?} in netns {}", self.name), self.exec(argv))
    }

    /// Runs `argv` (an `ip -j ...` command) inside the namespace and parses its JSON output.
    pub fn exec_json(&self, argv: &[&str]) -> serde_json::Value {
        let out = self.exec_ok(argv);
        if out.trim().is_empty() {
            return serde_json::Value::Array(Vec::new());
        }
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{argv:?} printed invalid JSON ({e}): {out}"))
    }

    /// `ip -j link show <ifname>` inside the namespace; `None` if the link does not exist.
    pub fn link(&self, ifname: &str) -> Option<serde_json::Value> {
        let out = self.exec(&["ip", "-j", "link", "show", "dev", ifname]);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v.get(0).cloned())
    }

    /// True if `ifname` exists and has IFF_UP set.
    pub fn link_is_up(&self, ifname: &str) -> bool {
        self.link(ifname)
            .and_then(|l| l.get("flags").cloned())
            .and_then(|f| f.as_array().cloned())
            .is_some_and(|flags| flags.iter().any(|f| f == "UP"))
    }

    /// Addresses (`"10.0.0.2/24"`) configured on `ifname` inside the namespace.
    pub fn addresses(&self, ifname: &str) -> Vec<String> {
        let out = self.exec(&["ip", "-j", "addr", "show", "dev", ifname]);
        if !out.status.success() {
            return Vec::new();
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v.get(0)
            .and_then(|l| l.get("addr_info"))
            .and_then(|a| a.as_array())
            .map(|infos| {
                infos
                    .iter()
                    .filter_map(|i| {
                        Some(format!(
                            "{}/{}",
                            i.get("local")?.as_str()?,
                            i.get("prefixlen")?.as_u64()?
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A private CNI configuration directory (what `NETCONFPATH` points to).
pub struct ConfDir {
    dir: TempDir,
}

impl Default for ConfDir {
    fn default() -> Self {
        Self::new()
    }
}

impl ConfDir {
    pub fn new() -> ConfDir {
        ConfDir {
            dir: TempDir::new("netconf"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `file` (e.g. `10-net.conflist`) with `content` (any JSON text); returns its path.
    pub fn write_conflist(&self, file: &str, content: &str) -> PathBuf {
        let path = self.dir.join(file);
        if let Some(parent) = path.parent() {
            let _ = fs::create_dir_all(parent);
        }
        fs::write(&path, content)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }

    /// Writes a `serde_json::Value` as `file`.
    pub fn write_json(&self, file: &str, value: &serde_json::Value) -> PathBuf {
        self.write_conflist(file, &value.to_string())
    }
}

/// How to run our `cnitool`: its configuration dir, plugin path, cache dir, extra env and,
/// optionally, the namespace it runs in (the "host" side of the plugins).
#[derive(Clone)]
pub struct Cnitool {
    pub netconf: PathBuf,
    pub cni_path: Vec<PathBuf>,
    pub cache_dir: PathBuf,
    pub host_netns: Option<String>,
    pub env: Vec<(String, String)>,
    /// A command the whole invocation runs under (e.g. `nsenter -t PID -m --` to see a
    /// private mount namespace).
    pub prefix: Vec<String>,
}

impl Cnitool {
    pub fn new(conf: &ConfDir, cni_path: Vec<PathBuf>, cache_dir: &Path) -> Cnitool {
        Cnitool {
            netconf: conf.path().to_path_buf(),
            cni_path,
            cache_dir: cache_dir.to_path_buf(),
            host_netns: None,
            env: Vec::new(),
            prefix: Vec::new(),
        }
    }

    /// Runs every invocation under `argv` (see [`Cnitool::prefix`]).
    pub fn under(mut self, argv: &[String]) -> Cnitool {
        self.prefix = argv.to_vec();
        self
    }

    /// Runs cnitool inside `ns` (`ip netns exec`), so host-side objects land there.
    pub fn in_netns(mut self, ns: &Netns) -> Cnitool {
        self.host_netns = Some(ns.name().to_string());
        self
    }

    /// Adds an environment variable (`CNI_ARGS`, `CAP_ARGS`, `CNI_IFNAME`, ...).
    pub fn env(mut self, key: &str, value: &str) -> Cnitool {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs `cnitool <args>`.
    pub fn run(&self, args: &[&str]) -> Output {
        run_cnitool(self, args)
    }

    /// Runs `cnitool <args>`, panics with its stderr unless it succeeds, returns stdout.
    pub fn run_ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "cnitool {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The container ID cnitool derives for a namespace path.
    pub fn container_id(netns_path: &str) -> String {
        libcni::api::cnitool_container_id(netns_path)
    }

    /// The cache file cnitool writes for `network` / `netns_path` / `ifname`.
    pub fn cache_file(&self, network: &str, netns_path: &str, ifname: &str) -> PathBuf {
        self.cache_dir.join("results").join(format!(
            "{network}-{}-{ifname}",
            Self::container_id(netns_path)
        ))
    }
}

/// Every plugin a container engine's network (podman's, the containerd node's) may name.
pub const ENGINE_PLUGINS: &[&str] = &[
    "bridge",
    "host-local",
    "portmap",
    "firewall",
    "tuning",
    "bandwidth",
    "loopback",
];

/// Panics with `what`, the exit status and the output unless `out` is a success; returns
/// stdout.
pub fn success_stdout(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits up to `within` for `child` to exit, then kills it (SIGKILL) and reaps it; whether it
/// exited by itself.
pub fn wait_or_kill(child: &mut std::process::Child, within: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Runs `cmd` (a plugin, typically) with `stdin` written to it, stdout and stderr captured.
pub fn run_with_stdin(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()));
    if let Some(mut input) = child.stdin.take() {
        // A plugin may exit before reading its config (a bad environment is refused first);
        // that closes the pipe, and its exit status is what the caller asserts on.
        if let Err(e) = input.write_all(stdin) {
            assert_eq!(
                e.kind(),
                ErrorKind::BrokenPipe,
                "write the plugin's stdin: {e}"
            );
        }
    }
    child.wait_with_output().expect("wait for the plugin")
}

/// The leases of a host-local store directory: the files named by an address (not `lock`,
/// `last_reserved_ip.*` or our dot-files).
pub fn lease_files(store: &Path) -> Vec<String> {
    fs::read_dir(store)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs our `cnitool` (built on demand) as described by `tool`.
pub fn run_cnitool(tool: &Cnitool, args: &[&str]) -> Output {
    let binary = our_binary("cnitool");
    let mut argv: Vec<std::ffi::OsString> = tool.prefix.iter().map(Into::into).collect();
    if let Some(ns) = &tool.host_netns {
        argv.extend(["ip", "netns", "exec", ns.as_str()].map(Into::into));
    }
    argv.push(binary.into_os_string());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    let cni_path = tool
        .cni_path
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    cmd.args(args)
        .env("NETCONFPATH", &tool.netconf)
        .env("CNI_PATH", cni_path)
        .env("CNI_CACHE_DIR", &tool.cache_dir)
        .env_remove("CNI_ARGS")
        .env_remove("CAP_ARGS")
        .env_remove("CNI_IFNAME");
    for (k, v) in &tool.env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run cnitool {args:?}: {e}"))
}
