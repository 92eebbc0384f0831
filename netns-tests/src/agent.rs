//! One `ferrocni-agent` process inside a node's netns, the one agent type of every test and
//! bench: every file it keeps (subnet.env, state, the vxlan lock, its WireGuard key, the bgp
//! backend's BIRD directory, its log) lives in a directory of its own, so nothing reaches the
//! host. The flags every agent gets are the ones that place those files and reach etcd; what a
//! test wants more (`--resync-interval`, `--subnet-lease-ttl`, metrics...) goes in
//! [`Agent::extra`]. Run long ([`Agent::start`], stopped on drop) or `--once` ([`Agent::once`]).

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{wait_until, Node, CONVERGE};
use crate::etcd::Etcd;
use crate::{our_binary, Netns};

/// How long `--once` may run before the test gives up on it.
const ONCE_WITHIN: Duration = Duration::from_secs(30);
/// How long [`Agent::stop`] waits after SIGTERM before SIGKILL.
const STOP_WITHIN: Duration = Duration::from_secs(5);

/// One agent, not running until [`Agent::start`].
pub struct Agent {
    /// The netns it runs in.
    pub ns: String,
    /// Its files.
    pub dir: PathBuf,
    pub ip: String,
    pub ip6: String,
    /// Whether the network is dual-stack (the agent then gets `--public-ipv6`).
    pub dual: bool,
    /// `--etcd-endpoints`.
    pub endpoints: String,
    /// More arguments, after the ones every agent gets (a later flag wins over an earlier one).
    pub extra: Vec<String>,
    /// More environment (flanneld's `FLANNELD_*` variables).
    pub env: Vec<(String, String)>,
    /// The agent binary; the workspace's build when `None`.
    pub binary: Option<PathBuf>,
    child: Option<Child>,
}

impl Agent {
    /// An agent for `node`, on `etcd`, its files in `<root>/node<index>`.
    pub fn new(node: &Node, etcd: &Etcd, root: &Path) -> Agent {
        let mut agent = Agent::in_netns(
            &node.ns,
            &node.ip,
            &root.join(format!("node{}", node.index)),
            &etcd.endpoints(),
        );
        agent.ip6 = node.ip6.clone();
        agent
    }

    /// An agent in `ns` whose node address is `ip`, its files in `dir`, on `endpoints`.
    pub fn in_netns(ns: &Netns, ip: &str, dir: &Path, endpoints: &str) -> Agent {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Agent {
            ns: ns.name().to_string(),
            dir: dir.to_path_buf(),
            ip: ip.to_string(),
            ip6: String::new(),
            dual: false,
            endpoints: endpoints.to_string(),
            extra: Vec::new(),
            env: Vec::new(),
            binary: None,
            child: None,
        }
    }

    /// Appends `args` to [`Agent::extra`].
    pub fn args(mut self, args: &[&str]) -> Agent {
        self.extra.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// The WireGuard private key file (flanneld's `WIREGUARD_KEY_FILE`).
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("wgkey")
    }

    /// The bgp backend's directory (`--bgp-dir`): BIRD's configuration, socket, pid file.
    pub fn bgp_dir(&self) -> PathBuf {
        self.dir.join("bgp")
    }

    /// `birdc -s <bgp dir>/bird.ctl <args>` against this agent's BIRD: its output (empty when
    /// birdc cannot run).
    pub fn birdc(&self, args: &[&str]) -> String {
        Command::new("birdc")
            .arg("-s")
            .arg(self.bgp_dir().join("bird.ctl"))
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Serves `/metrics` on the node's loopback at `port` (`--healthz-ip`, `--metrics-port`).
    pub fn serve_metrics(&mut self, port: u16) {
        self.extra.extend([
            "--healthz-ip=127.0.0.1".to_string(),
            format!("--metrics-port={port}"),
        ]);
    }

    /// The NetworkPolicy admission socket (`--policy-socket`).
    pub fn policy_socket(&self) -> PathBuf {
        self.dir.join("policy.sock")
    }

    pub fn subnet_file(&self) -> PathBuf {
        self.dir.join("subnet.env")
    }

    /// The whole command line, in the agent's netns (`ip netns exec` execs the agent, so the
    /// child is the agent).
    pub fn command(&self) -> Command {
        let binary = self
            .binary
            .clone()
            .unwrap_or_else(|| our_binary("ferrocni-agent"));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns])
            .arg(binary)
            .arg(format!("--etcd-endpoints={}", self.endpoints))
            .arg(format!("--public-ip={}", self.ip))
            .arg("--iface=eth0")
            .arg(format!("--subnet-file={}", self.subnet_file().display()))
            .arg(format!("--state-dir={}", self.dir.join("state").display()))
            // Its own lock file rather than the host's /run/ferrocni default.
            .arg(format!(
                "--vxlan-lock-file={}",
                self.dir.join("vxlan.lock").display()
            ))
            .arg(format!("--bgp-dir={}", self.bgp_dir().display()))
            // Its own NetworkPolicy admission socket rather than the host's /run/flannel one.
            .arg(format!(
                "--policy-socket={}",
                self.policy_socket().display()
            ))
            // flanneld's variable: each node its own key file.
            .env("WIREGUARD_KEY_FILE", self.key_file())
            .stdin(Stdio::null());
        if self.dual {
            cmd.arg(format!("--public-ipv6={}", self.ip6));
        }
        cmd.args(&self.extra);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the long-running agent, its stderr appended to its log.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the agent in {} is running", self.ns);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .unwrap_or_else(|e| panic!("agent log: {e}"));
        let child = self
            .command()
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start ferrocni-agent");
        self.child = Some(child);
    }

    /// Runs `--once` (plus `extra`) to completion, bounded; its output.
    pub fn once(&self, extra: &[&str]) -> Output {
        self.once_timed(extra).0
    }

    /// [`Agent::once`], and how long the agent ran.
    pub fn once_timed(&self, extra: &[&str]) -> (Output, Duration) {
        let mut cmd = self.command();
        cmd.arg("--once")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().expect("run ferrocni-agent --once");
        while child.try_wait().ok().flatten().is_none() {
            if started.elapsed() > ONCE_WITHIN {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ferrocni-agent --once did not finish within {ONCE_WITHIN:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child
            .wait_with_output()
            .expect("ferrocni-agent --once output");
        (out, started.elapsed())
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the started agent has exited on its own.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// The agent's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s; whether it exited by itself
    /// (true when it was not running).
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_WITHIN;
        let mut exited = false;
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        exited
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    pub fn subnet_env(&self) -> Option<String> {
        fs::read_to_string(self.subnet_file()).ok()
    }

    /// The value of `key` in subnet.env.
    pub fn env_value(&self, key: &str) -> Option<String> {
        let env = self.subnet_env()?;
        env.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(String::from)
    }

    /// The leased subnet (`10.244.3.0/24`), from subnet.env's FLANNEL_SUBNET.
    pub fn subnet(&self) -> Option<String> {
        let first = self.env_value("FLANNEL_SUBNET")?;
        let (ip, len) = first.split_once('/')?;
        let ip: Ipv4Addr = ip.parse().ok()?;
        Some(format!("{}/{len}", Ipv4Addr::from(u32::from(ip) - 1)))
    }

    /// Waits for subnet.env and returns the leased subnet.
    pub fn wait_for_subnet(&self) -> String {
        let mut subnet = None;
        let ok = wait_until(CONVERGE, || {
            subnet = self.subnet();
            subnet.is_some()
        });
        assert!(
            ok,
            "agent in {} wrote no subnet.env:\n{}",
            self.ns,
            self.log()
        );
        subnet.unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ({}) ---\n{}", self.ns, self.log());
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The bgp backend's BIRD runs on after its agent (so a restarted agent adopts it).
        if let Some(pid) = bird_pid(&self.bgp_dir()) {
            // SAFETY: kill(2) on the BIRD this agent started; no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The pid of the BIRD running from `bgp_dir` (its pid file), if it is alive.
pub fn bird_pid(bgp_dir: &Path) -> Option<i32> {
    let pid: i32 = fs::read_to_string(bgp_dir.join("bird.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim_end() == "bird").then_some(pid)
}
