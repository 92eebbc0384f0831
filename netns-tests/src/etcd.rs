//! The etcd the agent tests run their agents on: one cluster type for every test, its members
//! processes inside a namespace made by the test (the underlay switch, or a lone node), every
//! file in a temporary directory. What differs between tests is an [`EtcdOptions`] value: how
//! many members, whether they also listen on the switch's underlay address, TLS with client
//! certificates, user authentication, more etcd flags. Members can be killed and started again
//! (on their data) to test member loss. Dropping an [`Etcd`] kills every member.
//!
//! ```no_run
//! use netns_tests::cluster::Underlay;
//! use netns_tests::etcd::{Etcd, EtcdOptions, PREFIX};
//! let underlay = Underlay::new("doc");
//! let etcd = Etcd::start(&underlay.ns, EtcdOptions::on_switch().members(3));
//! etcd.put(&format!("{PREFIX}/config"), r#"{"Network":"10.244.0.0/16"}"#);
//! ```

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{wait_until, Underlay};
use crate::{run_with_stdin, Netns, TempDir};

/// flannel's key prefix: `<PREFIX>/config` holds the network config, `<PREFIX>/subnets/` the
/// leases.
pub const PREFIX: &str = "/coreos.com/network";

/// The etcd key of the lease of `subnet` (`10.244.3.0/24`), as flannel names it.
pub fn lease_key(subnet: &str) -> String {
    format!("{PREFIX}/subnets/{}", subnet.replace('/', "-"))
}

/// How long a fresh cluster (or one whose members were restarted) may take to be healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(20);
/// How long [`Etcd::ctl_ok`] retries: right after a member loss the survivors may still be
/// electing a leader.
const CTL_RETRY_FOR: Duration = Duration::from_secs(20);

/// TLS on the client port: the members' certificate, the CA they trust for client
/// certificates (`--client-cert-auth`), and the client certificate etcdctl presents.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// User authentication, enabled once the cluster is up: `root` (etcdctl's user from then on)
/// and `user`, whose role may read and write everything under [`PREFIX`].
#[derive(Clone, Debug)]
pub struct EtcdAuth {
    pub root_password: String,
    pub user: String,
    pub password: String,
}

/// What kind of etcd cluster to start; [`EtcdOptions::default`] is one member on loopback.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    pub members: usize,
    /// An address the members also listen on and advertise (the switch's underlay address,
    /// so the nodes reach them over the simulated underlay); loopback only when `None`.
    pub advertise: Option<String>,
    pub tls: Option<EtcdTls>,
    pub auth: Option<EtcdAuth>,
    /// More etcd flags, for every member.
    pub extra: Vec<String>,
    /// Member 0's client port; member `i` listens on `client_port + 100 * i` and peers one
    /// above. Two clusters in one netns (the agents' and a Kubernetes control plane's) need
    /// different ones.
    pub client_port: u16,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            members: 1,
            advertise: None,
            tls: None,
            auth: None,
            extra: Vec::new(),
            client_port: 2379,
        }
    }
}

impl EtcdOptions {
    /// One member in the switch netns, reachable from every node at the switch's address.
    pub fn on_switch() -> Self {
        EtcdOptions {
            advertise: Some(Underlay::switch_ip()),
            ..EtcdOptions::default()
        }
    }

    pub fn members(mut self, count: usize) -> Self {
        self.members = count;
        self
    }

    pub fn tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    pub fn auth(mut self, auth: EtcdAuth) -> Self {
        self.auth = Some(auth);
        self
    }

    pub fn args(mut self, extra: &[&str]) -> Self {
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self
    }

    pub fn client_port(mut self, port: u16) -> Self {
        self.client_port = port;
        self
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// A running etcd cluster; every member is killed on drop (its data goes with the directory).
pub struct Etcd {
    ns: String,
    options: EtcdOptions,
    members: Vec<Option<Child>>,
    /// etcd's arguments of each member, for restarts.
    args: Vec<Vec<String>>,
    client_ports: Vec<u16>,
    /// etcdctl's connection flags (TLS, user).
    ctl_flags: Vec<String>,
    dir: TempDir,
}

impl Etcd {
    /// Starts the cluster `options` describes inside `ns` and waits until it is healthy (and
    /// authentication is on, when asked); panics with its log if it does not come up.
    pub fn start(ns: &Netns, options: EtcdOptions) -> Etcd {
        Etcd::try_start(ns, options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Etcd::start`], saying why instead of panicking (the bench reports and goes on).
    pub fn try_start(ns: &Netns, options: EtcdOptions) -> Result<Etcd, String> {
        let dir = TempDir::new("etcd");
        // Ports only need to be unique inside the cluster's own netns.
        let client_ports: Vec<u16> = (0..options.members)
            .map(|i| options.client_port + 100 * i as u16)
            .collect();
        let mut etcd = Etcd {
            ns: ns.name().to_string(),
            args: Vec::new(),
            members: (0..options.members).map(|_| None).collect(),
            client_ports,
            ctl_flags: Vec::new(),
            options,
            dir,
        };
        etcd.args = (0..etcd.members.len())
            .map(|i| etcd.member_args(i))
            .collect();
        if let Some(tls) = &etcd.options.tls {
            etcd.ctl_flags = vec![
                format!("--cacert={}", tls.ca.display()),
                format!("--cert={}", tls.client_cert.display()),
                format!("--key={}", tls.client_key.display()),
            ];
        }
        for i in 0..etcd.members.len() {
            etcd.try_start_member(i)?;
        }
        if !etcd.healthy_within(HEALTHY_WITHIN) {
            return Err(format!(
                "etcd did not become healthy:\n{}",
                etcd.log_tail(15)
            ));
        }
        if let Some(auth) = etcd.options.auth.clone() {
            etcd.enable_auth(&auth)?;
        }
        Ok(etcd)
    }

    /// etcd's flags for member `i`: its name, data, peer and client URLs, the cluster.
    fn member_args(&self, i: usize) -> Vec<String> {
        let peer_url = |i: usize| format!("http://127.0.0.1:{}", self.client_ports[i] + 1);
        let initial: Vec<String> = (0..self.members.len())
            .map(|i| format!("m{i}={}", peer_url(i)))
            .collect();
        let scheme = self.options.scheme();
        let port = self.client_ports[i];
        let loopback = format!("{scheme}://127.0.0.1:{port}");
        let (listen, advertise) = match &self.options.advertise {
            Some(ip) => {
                let client = format!("{scheme}://{ip}:{port}");
                (format!("{client},{loopback}"), client)
            }
            None => (loopback.clone(), loopback),
        };
        let token = format!(
            "agent-test-{}",
            self.dir
                .path()
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
        );
        let mut args: Vec<String> = [
            "--name",
            &format!("m{i}"),
            "--data-dir",
            &self.dir.join(format!("m{i}")).display().to_string(),
            "--listen-peer-urls",
            &peer_url(i),
            "--initial-advertise-peer-urls",
            &peer_url(i),
            "--listen-client-urls",
            &listen,
            "--advertise-client-urls",
            &advertise,
            "--initial-cluster",
            &initial.join(","),
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            &token,
            "--heartbeat-interval",
            "100",
            "--election-timeout",
            "1000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(tls) = &self.options.tls {
            args.extend([
                "--client-cert-auth".to_string(),
                format!("--trusted-ca-file={}", tls.ca.display()),
                format!("--cert-file={}", tls.server_cert.display()),
                format!("--key-file={}", tls.server_key.display()),
            ]);
        }
        args.extend(self.options.extra.iter().cloned());
        args
    }

    /// The users, the role and `auth enable`; etcdctl is `root` from then on.
    fn enable_auth(&mut self, auth: &EtcdAuth) -> Result<(), String> {
        let user = auth.user.as_str();
        let grant = [
            "role",
            "grant-permission",
            user,
            "--prefix=true",
            "readwrite",
            &format!("{PREFIX}/"),
        ];
        for args in [
            &["user", "add", &format!("root:{}", auth.root_password)][..],
            &["user", "add", &format!("{user}:{}", auth.password)],
            &["role", "add", user],
            &grant,
            &["user", "grant-role", user, user],
            &["user", "grant-role", "root", "root"],
            &["auth", "enable"],
        ] {
            let out = self.ctl(args);
            if !out.status.success() {
                return Err(format!(
                    "etcdctl {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        self.ctl_flags
            .push(format!("--user=root:{}", auth.root_password));
        Ok(())
    }

    /// Starts (or restarts, on its existing data dir) member `i`.
    pub fn start_member(&mut self, i: usize) {
        self.try_start_member(i).unwrap_or_else(|e| panic!("{e}"));
    }

    fn try_start_member(&mut self, i: usize) -> Result<(), String> {
        assert!(self.members[i].is_none(), "etcd member {i} is running");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("m{i}.log")))
            .map_err(|e| format!("etcd log: {e}"))?;
        let stdout = log.try_clone().map_err(|e| format!("etcd log: {e}"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "etcd"])
            .args(&self.args[i])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        self.members[i] = Some(child);
        Ok(())
    }

    /// Kills member `i` (SIGKILL: a member lost, not shut down).
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn healthy_within(&self, timeout: Duration) -> bool {
        wait_until(timeout, || {
            self.ctl(&["endpoint", "health"]).status.success()
        })
    }

    /// Waits until the live members answer as a healthy cluster.
    pub fn wait_healthy(&self) {
        assert!(
            self.healthy_within(HEALTHY_WITHIN),
            "etcd cluster did not become healthy"
        );
    }

    /// The netns the members run in.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// Client URLs of every member (dead ones included), as agents are configured.
    pub fn endpoints(&self) -> String {
        let host = self.options.advertise.as_deref().unwrap_or("127.0.0.1");
        let scheme = self.options.scheme();
        self.client_ports
            .iter()
            .map(|p| format!("{scheme}://{host}:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The loopback client URLs of the members running, as etcdctl reaches them.
    pub fn live_endpoints(&self) -> String {
        let scheme = self.options.scheme();
        self.client_ports
            .iter()
            .zip(&self.members)
            .filter(|(_, m)| m.is_some())
            .map(|(p, _)| format!("{scheme}://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// etcdctl in the members' netns, on the live members, with `timeout` per command.
    fn ctl_command(&self, timeout: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, "etcdctl"])
            .arg(format!("--command-timeout={timeout}"))
            .arg(format!("--endpoints={}", self.live_endpoints()))
            .args(&self.ctl_flags)
            .args(args)
            .env("ETCDCTL_API", "3");
        cmd
    }

    /// Runs `etcdctl <args>` once.
    pub fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_command("5s", args).output().expect("run etcdctl")
    }

    /// Runs `etcdctl <args>` until it succeeds (for a while: see [`CTL_RETRY_FOR`]), panics
    /// with its stderr if it never does; returns its stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let mut out = self.ctl(args);
        let deadline = Instant::now() + CTL_RETRY_FOR;
        while !out.status.success() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(300));
            out = self.ctl(args);
        }
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `etcdctl <args>` with `input` on its stdin (a value, a transaction), allowing it
    /// 30 s (large values, thousands of keys).
    pub fn ctl_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        run_with_stdin(&mut self.ctl_command("30s", args), input)
    }

    /// [`Etcd::ctl_with_input`] that must succeed.
    pub fn ctl_with_input_ok(&self, args: &[&str], input: &[u8]) {
        let out = self.ctl_with_input(args, input);
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// One transaction of puts and deletes (etcdctl txn's stdin format: a value with spaces or
    /// quotes is a Go-quoted string); whether it went through (what failed is printed).
    pub fn txn(&self, puts: &[(String, String)], deletes: &[String]) -> bool {
        let mut text = String::from("\n");
        for (k, v) in puts {
            text.push_str(&format!(
                "put {k} {}\n",
                serde_json::to_string(v).unwrap_or_default()
            ));
        }
        for k in deletes {
            text.push_str(&format!("del {k}\n"));
        }
        text.push_str("\n\n");
        let out = self.ctl_with_input(&["txn"], text.as_bytes());
        if !out.status.success() {
            println!(
                "  etcdctl txn: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        out.status.success()
    }

    pub fn put(&self, key: &str, value: &str) {
        self.ctl_ok(&["put", key, value]);
    }

    /// Puts `key` attached to a fresh etcd lease of `ttl` seconds, as flanneld does.
    pub fn put_with_ttl(&self, key: &str, value: &str, ttl: u32) {
        let granted = self.ctl_ok(&["lease", "grant", &ttl.to_string()]);
        // "lease 694d7b3d7a8c1a04 granted with TTL(60s)"
        let id = granted
            .split_whitespace()
            .nth(1)
            .expect("lease id")
            .to_string();
        self.ctl_ok(&["put", &format!("--lease={id}"), key, value]);
    }

    pub fn get(&self, key: &str) -> Option<String> {
        let out = self.ctl_ok(&["get", key, "--print-value-only"]);
        let v = out.trim_end();
        (!v.is_empty()).then(|| v.to_string())
    }

    /// Every key under `<PREFIX>/subnets/`.
    pub fn lease_keys(&self) -> Vec<String> {
        let out = self.ctl_ok(&[
            "get",
            &format!("{PREFIX}/subnets/"),
            "--prefix",
            "--keys-only",
        ]);
        out.lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// The last `lines` lines of every member's log, newest first.
    fn log_tail(&self, lines: usize) -> String {
        (0..self.members.len())
            .map(|i| {
                let log =
                    fs::read_to_string(self.dir.join(format!("m{i}.log"))).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(lines).collect();
                format!(
                    "--- etcd m{i} (last lines, newest first) ---\n{}",
                    tail.join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail(15));
        }
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
    }
}
