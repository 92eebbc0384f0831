//! A throw-away "host" for container engines (podman, containerd): a holder process made with
//! `unshare --net --mount --propagation private` whose `/run` and `/var/lib` are fresh tmpfs
//! mounts, entered with `nsenter`. An engine started there sees that netns as the host's (its
//! bridges, veths and firewall rules land there) and writes its default state paths (netns
//! files, shim sockets, libcni's cache, host-local's leases) into the private tmpfs, so nothing
//! reaches the real host. Dropping it kills every process left in its mount namespace, then the
//! holder, which takes the namespaces and mounts away with it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::success_stdout;

/// Shell run by the holder: private /run and /var/lib, the spec's setup, loopback up, then
/// wait forever.
fn holder_script(setup: &str) -> String {
    format!(
        "set -e; mount -t tmpfs ferrocni-run /run; mount -t tmpfs ferrocni-varlib /var/lib; \
         mkdir -p /run/netns /var/lib/cni; {setup}\nip link set lo up; touch \"$1\"; exec sleep 86400"
    )
}

/// What a [`PrivateHost`] is beyond a fresh netns and a mount namespace with private /run and
/// /var/lib (the default: a container engine's host).
#[derive(Clone, Debug, Default)]
pub struct HostSpec {
    /// A network namespace to join (its path) instead of a fresh one.
    pub netns: Option<PathBuf>,
    /// Fresh IPC, UTS and cgroup namespaces too, entered by [`PrivateHost::command`] (a
    /// kubelet node's).
    pub node_namespaces: bool,
    /// `cgroup.procs` files (one per hierarchy) the holder, and every command entering the
    /// host, joins first: the root of the cgroup namespace.
    pub cgroup_procs: Vec<PathBuf>,
    /// Shell the holder runs (under `set -e`) after its private mounts.
    pub setup: String,
}

impl HostSpec {
    /// `argv` run after joining the spec's cgroups (as is when there are none).
    fn in_cgroups(&self, argv: Vec<String>) -> Command {
        if self.cgroup_procs.is_empty() {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            return cmd;
        }
        let procs: Vec<String> = self
            .cgroup_procs
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "for f in $1; do echo $$ > \"$f\"; done; shift; exec \"$@\"",
            "sh",
            &procs.join(" "),
        ])
        .args(argv);
        cmd
    }
}

/// Whether `tool` is on PATH or in the usual system directories.
pub fn tool_exists(tool: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| d.to_string())
        .chain(path.split(':').map(str::to_string))
        .any(|d| Path::new(&d).join(tool).is_file())
}

/// The tools of `tools` that are missing, or `None` when all are there.
pub fn missing_tools(tools: &[&str]) -> Option<Vec<String>> {
    let missing: Vec<String> = tools
        .iter()
        .filter(|t| !tool_exists(t))
        .map(|t| t.to_string())
        .collect();
    (!missing.is_empty()).then_some(missing)
}

/// Makes `cmd`'s process die when the thread that spawns it exits (test threads, the bench's
/// main thread): a panicking test never leaves an engine running.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: prctl is async-signal-safe and touches only the child being exec'd.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

pub struct PrivateHost {
    holder: Option<Child>,
    pid: u32,
    spec: HostSpec,
}

/// The namespaces a command enters beyond net and mount when the spec has node namespaces.
const NODE_NAMESPACES: [&str; 3] = ["--ipc", "--uts", "--cgroup"];

impl PrivateHost {
    /// Starts the holder and waits until its private mounts are in place. `ready_dir` is a
    /// directory of the caller's (the holder touches a file there when it is ready).
    pub fn start(ready_dir: &Path) -> PrivateHost {
        PrivateHost::start_with(ready_dir, HostSpec::default())
    }

    /// [`PrivateHost::start`] as `spec` says (a node's namespaces, a netns of the caller's).
    pub fn start_with(ready_dir: &Path, spec: HostSpec) -> PrivateHost {
        let ready = ready_dir.join("holder-ready");
        let _ = std::fs::remove_file(&ready);
        let mut argv: Vec<String> = Vec::new();
        match &spec.netns {
            Some(netns) => argv.extend([
                "nsenter".into(),
                format!("--net={}", netns.display()),
                "--".into(),
                "unshare".into(),
            ]),
            None => argv.extend(["unshare".into(), "--net".into()]),
        }
        argv.push("--mount".into());
        if spec.node_namespaces {
            argv.extend(NODE_NAMESPACES.iter().map(|n| n.to_string()));
        }
        argv.extend(
            ["--propagation", "private", "--", "sh", "-c"]
                .iter()
                .map(|a| a.to_string()),
        );
        argv.extend([
            holder_script(&spec.setup),
            "holder".into(),
            ready.display().to_string(),
        ]);
        let mut cmd = spec.in_cgroups(argv);
        let holder = die_with_parent(&mut cmd).spawn().expect("spawn unshare");
        let mut host = PrivateHost {
            pid: holder.id(),
            holder: Some(holder),
            spec,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            let exited = host
                .holder
                .as_mut()
                .and_then(|h| h.try_wait().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "namespace holder did not get ready (exit: {exited:?})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        host
    }

    /// The holder's pid (its `/proc/<pid>/ns/*` are the private namespaces).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `argv` inside the holder's network and mount namespaces.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut full = vec![
            "nsenter".to_string(),
            format!("--target={}", self.pid),
            "--net".into(),
            "--mount".into(),
        ];
        if self.spec.node_namespaces {
            full.extend(NODE_NAMESPACES.iter().map(|n| n.to_string()));
        }
        full.push("--".into());
        full.extend(argv.iter().map(|a| a.to_string()));
        self.spec.in_cgroups(full)
    }

    /// Runs `argv` inside the private host (killed after two minutes).
    pub fn exec(&self, argv: &[&str]) -> Output {
        let mut timed = vec!["timeout", "120"];
        timed.extend_from_slice(argv);
        self.command(&timed)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"))
    }

    /// Runs `argv` inside the private host, panics unless it succeeds, returns trimmed stdout.
    pub fn exec_ok(&self, argv: &[&str]) -> String {
        success_stdout(&format!("{argv:?}"), self.exec(argv))
            .trim()
            .to_string()
    }

    /// A path inside the holder's private mount namespace, seen from here.
    pub fn private_path(&self, p: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{p}", self.pid))
    }

    /// Names of the files in a private directory (empty when it does not exist).
    pub fn private_files(&self, dir: &str) -> Vec<String> {
        std::fs::read_dir(self.private_path(dir))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Names of the links in the private host's netns.
    pub fn link_names(&self) -> Vec<String> {
        let out = self.exec_ok(&["ip", "-j", "link", "show"]);
        let links: Value = serde_json::from_str(&out).expect("ip -j link");
        links
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect()
    }

    /// Everything netfilter holds in the private netns (iptables, ip6tables and nft views).
    pub fn firewall_dump(&self) -> String {
        let mut text = self.exec_ok(&["iptables-save"]);
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(
            &self.exec(&["ip6tables-save"]).stdout,
        ));
        if tool_exists("nft") {
            text.push_str(&String::from_utf8_lossy(
                &self.exec(&["nft", "list", "ruleset"]).stdout,
            ));
        }
        text
    }

    /// Asserts that no trace of an attachment with address `ip` and container `id` remains
    /// (links, host-local lease of `network`, libcni cache entry, firewall rules, portmap
    /// chains), and that `others` host veths (other attachments) are still there.
    pub fn assert_attachment_gone(&self, network: &str, ip: &str, id: &str, others: usize) {
        let links = self.link_names();
        let veths = links.iter().filter(|l| l.starts_with("veth")).count();
        let ifbs = links.iter().filter(|l| l.starts_with("bwp")).count();
        assert!(veths == others && ifbs == 0, "leftover links: {links:?}");
        let leases: Vec<String> = self
            .private_files(&format!("/var/lib/cni/networks/{network}"))
            .into_iter()
            .filter(|f| f == ip)
            .collect();
        assert!(leases.is_empty(), "leftover leases: {leases:?}");
        let cache = self.private_files("/var/lib/cni/results");
        assert!(
            !cache.iter().any(|f| f.contains(id)),
            "leftover cache entries: {cache:?}"
        );
        let rules = self.firewall_dump();
        // An address as a word of a rule: `10.0.0.2/32`, `dnat to 10.0.0.2:80`, `[fd00::2]:80`.
        let v4 = ip.contains('.');
        let ip_word = |line: &str| {
            line.split(|c: char| {
                if v4 {
                    !(c.is_ascii_digit() || c == '.')
                } else {
                    !(c.is_ascii_hexdigit() || c == ':')
                }
            })
            .any(|w| w == ip)
        };
        let leftovers: Vec<&str> = rules
            .lines()
            .filter(|l| ip_word(l) || l.contains(id))
            .collect();
        assert!(
            leftovers.is_empty(),
            "leftover rules for {ip}/{id}: {leftovers:#?}"
        );
        assert!(
            !rules.contains("CNI-DN-"),
            "leftover portmap chain:\n{rules}"
        );
    }

    /// Kills every process in the holder's mount namespace but the holder, and those `also`
    /// selects (by pid), then the holder. Idempotent.
    pub fn shutdown(&mut self, also: impl Fn(i32) -> bool) {
        let Some(mut holder) = self.holder.take() else {
            return;
        };
        let holder_mnt = std::fs::read_link(format!("/proc/{}/ns/mnt", self.pid)).ok();
        kill_processes_where(|pid| {
            pid as u32 != self.pid
                && (also(pid)
                    || (holder_mnt.is_some()
                        && std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok() == holder_mnt))
        });
        let _ = holder.kill();
        let _ = holder.wait();
    }
}

impl Drop for PrivateHost {
    fn drop(&mut self) {
        self.shutdown(|_| false);
    }
}

/// SIGKILLs every process (but this one) for which `selected(pid)` holds.
pub fn kill_processes_where(selected: impl Fn(i32) -> bool) {
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.filter_map(Result::ok) {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid != me && selected(pid) {
            // SAFETY: plain kill(2) on a process the caller's test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// True when a line of `/proc/<pid>/cgroup` names a cgroup at or under `parent`.
pub fn process_in_cgroup(pid: i32, parent: &str) -> bool {
    let parent = parent.trim_end_matches('/');
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| path == parent || path.starts_with(&format!("{parent}/")))
}

/// Removes a cgroup directory tree (children first) in every mounted hierarchy.
pub fn remove_cgroup_tree(relative: &str) {
    let relative = relative.trim_start_matches('/');
    if relative.is_empty() || relative.contains("..") {
        return;
    }
    fn remove(dir: &Path) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.filter_map(Result::ok) {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    remove(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let root = Path::new("/sys/fs/cgroup");
    let mut hierarchies = vec![root.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(root) {
        hierarchies.extend(entries.filter_map(Result::ok).map(|e| e.path()));
    }
    // Killed processes leave their cgroups a moment later: retry briefly.
    for _ in 0..20 {
        let left: Vec<PathBuf> = hierarchies
            .iter()
            .map(|h| h.join(relative))
            .filter(|d| d.is_dir())
            .collect();
        if left.is_empty() {
            return;
        }
        left.iter().for_each(|d| remove(d));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A cgroup path of this process's own, `/<prefix>-<pid>-<n>`, unique across tests.
pub fn unique_cgroup_parent(prefix: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("/{prefix}-{}-{n}", std::process::id())
}
