//! `ferrocni-agent` against a secured etcd, all inside a netns made here: TLS with
//! `--client-cert-auth` (certificates made by the test with the `openssl` CLI) and a user with
//! `auth enable`. Good settings lease a subnet; a wrong CA, a missing or foreign client
//! certificate, a wrong password or no user are refused at once, each with a message naming it.
//! The daemon's surface rides along: FLANNELD_* variables, `/healthz`, `/metrics`, token refresh.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use netns_tests::cluster::{http_get, sample, wait_until};
use netns_tests::{our_binary, require_root, Netns, TempDir};

const PREFIX: &str = "/coreos.com/network";
const CONFIG: &str = r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{"Type":"vxlan"}}"#;
/// This node's underlay address, on a veth inside the test netns.
const NODE_IP: &str = "10.99.0.1";

fn have_tools() -> bool {
    let found = [
        ("etcd", "--version"),
        ("etcdctl", "version"),
        ("openssl", "version"),
    ]
    .iter()
    .all(|(bin, arg)| {
        Command::new(bin)
            .arg(arg)
            .env("ETCDCTL_API", "3")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !found {
        eprintln!("skipping: etcd, etcdctl or openssl missing (apt-get install etcd-server etcd-client openssl)");
    }
    found
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and certificates it signed, as PEM files in `dir`.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// A self-signed CA `name` (`<name>.pem`, `<name>.key`).
    fn ca(dir: &Path, name: &str) -> Pki {
        let (cert, key) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ]);
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    /// A leaf certificate `name` signed by CA `ca`, for server and client use, valid for
    /// 127.0.0.1.
    fn leaf(&self, ca: &str, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        );
        let csr = self.path(&format!("{name}.csr"));
        let ext = self.path(&format!("{name}.ext"));
        fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            csr.to_str().unwrap(),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            csr.to_str().unwrap(),
            "-days",
            "2",
            "-CA",
            self.path(&format!("{ca}.pem")).to_str().unwrap(),
            "-CAkey",
            self.path(&format!("{ca}.key")).to_str().unwrap(),
            "-CAcreateserial",
            "-extfile",
            ext.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ]);
        (cert, key)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
}

/// One etcd member inside `ns`, killed on drop.
struct Etcd {
    child: Child,
    url: String,
    /// etcdctl's connection flags.
    ctl_flags: Vec<String>,
    log: PathBuf,
}

impl Etcd {
    fn start(ns: &Netns, dir: &Path, extra: &[String], url: &str, ctl_flags: Vec<String>) -> Etcd {
        let log = dir.join("etcd.log");
        let out = fs::File::create(&log).unwrap();
        let child = ns
            .command(&["etcd"])
            .args([
                "--name",
                "m0",
                "--data-dir",
                dir.join("etcd-data").to_str().unwrap(),
                "--listen-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-cluster",
                "m0=http://127.0.0.1:2380",
                "--listen-client-urls",
                url,
                "--advertise-client-urls",
                url,
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start etcd");
        let etcd = Etcd {
            child,
            url: url.to_string(),
            ctl_flags,
            log,
        };
        let ok = wait_until(Duration::from_secs(20), || {
            etcd.ctl(ns, &[], &["endpoint", "health"]).status.success()
        });
        assert!(ok, "etcd did not come up:\n{}", etcd.log());
        etcd
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn ctl(&self, ns: &Netns, user: &[&str], args: &[&str]) -> Output {
        ns.command(&["etcdctl", "--command-timeout=5s"])
            .arg(format!("--endpoints={}", self.url))
            .args(&self.ctl_flags)
            .args(user)
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
            .expect("run etcdctl")
    }

    fn ctl_ok(&self, ns: &Netns, user: &[&str], args: &[&str]) -> String {
        let out = self.ctl(ns, user, args);
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            eprintln!(
                "--- etcd (last lines, newest first) ---\n{}",
                tail.join("\n")
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node netns: `lo` up and a veth pair carrying this node's underlay address.
fn node_netns() -> Netns {
    let ns = Netns::new("agsec");
    for cmd in [
        vec!["ip", "link", "set", "lo", "up"],
        vec![
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ],
        vec!["ip", "addr", "add", &format!("{NODE_IP}/24"), "dev", "eth0"],
        vec!["ip", "link", "set", "eth0", "up"],
        vec!["ip", "link", "set", "eth1", "up"],
    ] {
        ns.exec_ok(&cmd);
    }
    ns
}

/// The agent's command line (files under `dir`), plus `extra`.
fn agent(ns: &Netns, dir: &Path, endpoint: &str, extra: &[&str]) -> Command {
    let mut cmd = ns.command(&[our_binary("ferrocni-agent").to_str().unwrap()]);
    cmd.arg(format!("--etcd-endpoints={endpoint}"))
        .arg(format!("--public-ip={NODE_IP}"))
        .arg("--iface=eth0")
        .arg(format!(
            "--subnet-file={}",
            dir.join("subnet.env").display()
        ))
        .arg(format!("--state-dir={}", dir.join("state").display()))
        .arg(format!(
            "--vxlan-lock-file={}",
            dir.join("vxlan.lock").display()
        ))
        .arg("--startup-timeout=10")
        .args(extra)
        .stdin(Stdio::null());
    cmd
}

/// Runs `--once`, bounded; returns the output and how long it took.
fn once(mut cmd: Command) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = cmd
        .arg("--once")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ferrocni-agent --once");
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("ferrocni-agent --once did not finish within 30s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (child.wait_with_output().unwrap(), started.elapsed())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a refusal: non-zero exit well before --startup-timeout, with every `needle` in it.
fn assert_refused(what: &str, run: (Output, Duration), needles: &[&str]) {
    let (out, took) = run;
    let text = stderr(&out);
    assert!(!out.status.success(), "{what}: accepted\n{text}");
    assert!(
        took < Duration::from_secs(5),
        "{what}: took {took:?} (retried instead of refusing at once)\n{text}"
    );
    for n in needles {
        assert!(text.contains(n), "{what}: no {n:?} in:\n{text}");
    }
    assert!(
        text.contains(" ERROR ferrocni-agent: fatal: "),
        "{what}:\n{text}"
    );
}

#[test]
fn agent_etcd_tls_with_client_certificates() {
    require_root!();
    if !have_tools() {
        return;
    }
    let dir = TempDir::new("agent-tls");
    let ns = node_netns();
    let pki = Pki::ca(dir.path(), "ca");
    Pki::ca(dir.path(), "other-ca");
    let (server_cert, server_key) = pki.leaf("ca", "etcd");
    let (client_cert, client_key) = pki.leaf("ca", "node");
    let (foreign_cert, foreign_key) = pki.leaf("other-ca", "intruder");
    let ca = pki.path("ca.pem");
    let other_ca = pki.path("other-ca.pem");
    let s = |p: &Path| p.display().to_string();
    let url = "https://127.0.0.1:2379";
    let etcd = Etcd::start(
        &ns,
        dir.path(),
        &[
            "--client-cert-auth".into(),
            format!("--trusted-ca-file={}", s(&ca)),
            format!("--cert-file={}", s(&server_cert)),
            format!("--key-file={}", s(&server_key)),
        ],
        url,
        vec![
            format!("--cacert={}", s(&ca)),
            format!("--cert={}", s(&client_cert)),
            format!("--key={}", s(&client_key)),
        ],
    );
    etcd.ctl_ok(&ns, &[], &["put", &format!("{PREFIX}/config"), CONFIG]);
    let good = [
        format!("--etcd-cafile={}", s(&ca)),
        format!("--etcd-certfile={}", s(&client_cert)),
        format!("--etcd-keyfile={}", s(&client_key)),
    ];
    let good: Vec<&str> = good.iter().map(String::as_str).collect();

    // The right CA and client certificate: a lease, and the node files.
    let (out, _) = once(agent(&ns, dir.path(), url, &good));
    assert!(out.status.success(), "{}", stderr(&out));
    let keys = etcd.ctl_ok(
        &ns,
        &[],
        &[
            "get",
            &format!("{PREFIX}/subnets/"),
            "--prefix",
            "--keys-only",
        ],
    );
    assert!(
        keys.contains(&format!("{PREFIX}/subnets/10.244.")),
        "{keys}"
    );
    assert!(fs::read_to_string(dir.join("subnet.env"))
        .unwrap()
        .contains("FLANNEL_SUBNET=10.244."));

    // The same settings from flanneld's environment variables.
    let mut cmd = agent(&ns, dir.path(), url, &[]);
    cmd.env("FLANNELD_ETCD_CAFILE", s(&ca))
        .env("FLANNELD_ETCD_CERTFILE", s(&client_cert))
        .env("FLANNELD_ETCD_KEYFILE", s(&client_key));
    let (out, _) = once(cmd);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reusing lease 10.244."),
        "{}",
        stderr(&out)
    );

    // A CA that did not sign the member's certificate.
    let mut wrong_ca = good.clone();
    let other = format!("--etcd-cafile={}", s(&other_ca));
    wrong_ca[0] = &other;
    assert_refused(
        "wrong CA",
        once(agent(&ns, dir.path(), url, &wrong_ca)),
        &["not trusted by --etcd-cafile", &s(&other_ca)],
    );

    // No client certificate for a --client-cert-auth member.
    assert_refused(
        "no client certificate",
        once(agent(&ns, dir.path(), url, &good[..1])),
        &["requires a client certificate", "--etcd-certfile"],
    );

    // A client certificate from another CA.
    let foreign = [
        good[0].to_string(),
        format!("--etcd-certfile={}", s(&foreign_cert)),
        format!("--etcd-keyfile={}", s(&foreign_key)),
    ];
    let foreign: Vec<&str> = foreign.iter().map(String::as_str).collect();
    assert_refused(
        "foreign client certificate",
        once(agent(&ns, dir.path(), url, &foreign)),
        &["refused the client certificate", &s(&foreign_cert)],
    );

    // Unusable files are named before any connection.
    assert_refused(
        "missing CA file",
        once(agent(
            &ns,
            dir.path(),
            url,
            &["--etcd-cafile=/nonexistent/ca.pem"],
        )),
        &["--etcd-cafile /nonexistent/ca.pem"],
    );
    assert_refused(
        "key without certificate",
        once(agent(&ns, dir.path(), url, &[good[0], good[2]])),
        &["--etcd-keyfile", "without --etcd-certfile"],
    );
}

#[test]
fn agent_etcd_user_auth_and_token_refresh() {
    require_root!();
    if !have_tools() {
        return;
    }
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("skipping: curl missing");
        return;
    }
    let dir = TempDir::new("agent-auth");
    let ns = node_netns();
    let url = "http://127.0.0.1:2379";
    // Tokens idle for 2 s expire: the agent, resyncing every 3 s, must refresh its token.
    let etcd = Etcd::start(
        &ns,
        dir.path(),
        &["--auth-token=simple".into(), "--auth-token-ttl=2".into()],
        url,
        vec![],
    );
    let root = ["--user=root:rootpw"];
    for args in [
        vec!["user", "add", "root:rootpw"],
        vec!["user", "add", "flannel:flannelpw"],
        vec!["role", "add", "flannel"],
        vec![
            "role",
            "grant-permission",
            "flannel",
            "--prefix=true",
            "readwrite",
            &format!("{PREFIX}/"),
        ],
        vec!["user", "grant-role", "flannel", "flannel"],
        vec!["user", "grant-role", "root", "root"],
        vec!["put", &format!("{PREFIX}/config"), CONFIG],
        vec!["auth", "enable"],
    ] {
        etcd.ctl_ok(&ns, &[], &args);
    }

    // No user, a wrong password, an unknown user: refused at once, naming the fix.
    assert_refused(
        "no user",
        once(agent(&ns, dir.path(), url, &[])),
        &["authentication enabled", "--etcd-username"],
    );
    assert_refused(
        "wrong password",
        once(agent(
            &ns,
            dir.path(),
            url,
            &["--etcd-username=flannel", "--etcd-password=nope"],
        )),
        &["wrong --etcd-username \"flannel\" or --etcd-password"],
    );
    assert!(!stderr(
        &once(agent(
            &ns,
            dir.path(),
            url,
            &["--etcd-username=flannel", "--etcd-password=nope"]
        ))
        .0
    )
    .contains("nope"));

    // The user from flanneld's variables, in the long-running daemon with health and metrics.
    let log_path = dir.join("agent.log");
    let mut cmd = agent(
        &ns,
        dir.path(),
        url,
        &[
            "--resync-interval=3",
            "--healthz-port=18471",
            "--metrics-port=19471",
            "-v",
            "1",
        ],
    );
    cmd.env("FLANNELD_ETCD_USERNAME", "flannel")
        .env("FLANNELD_ETCD_PASSWORD", "flannelpw")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log_path).unwrap());
    let mut child = cmd.spawn().expect("start ferrocni-agent");
    struct Kill<'a>(&'a mut Child, &'a Path);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!(
                    "--- agent log ---\n{}",
                    fs::read_to_string(self.1).unwrap_or_default()
                );
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let guard = Kill(&mut child, &log_path);
    let env_file = dir.join("subnet.env");
    assert!(
        wait_until(Duration::from_secs(15), || env_file.exists()),
        "no subnet.env"
    );
    assert_eq!(
        http_get(&ns, 18471, "/healthz").as_deref(),
        Some("ferrocni-agent is running\n")
    );
    assert!(
        http_get(&ns, 18471, "/metrics").is_none(),
        "metrics served on the health port"
    );

    // A peer's lease put by root after our token has expired twice over: the agent's resync
    // (token refreshed) and watch still see it.
    std::thread::sleep(Duration::from_secs(7));
    let peer = r#"{"PublicIP":"10.99.0.2","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}}"#;
    etcd.ctl_ok(
        &ns,
        &root,
        &["put", &format!("{PREFIX}/subnets/10.244.9.0-24"), peer],
    );
    let programmed = wait_until(Duration::from_secs(10), || {
        http_get(&ns, 19471, "/metrics")
            .and_then(|m| sample(&m, "ferrocni_agent_leases{state=\"programmed\"}"))
            == Some(1.0)
    });
    let page = http_get(&ns, 19471, "/metrics").unwrap_or_default();
    assert!(programmed, "peer not programmed:\n{page}");
    let auths = sample(&page, "ferrocni_agent_etcd_authentications_total").unwrap_or(0.0);
    assert!(auths >= 2.0, "the token was never refreshed:\n{page}");
    assert!(
        sample(&page, "ferrocni_agent_reconciles_total").unwrap_or(0.0) >= 1.0,
        "{page}"
    );
    assert!(
        page.contains("# TYPE ferrocni_agent_lease_renewals_total counter"),
        "{page}"
    );
    let fdb = ns.exec_ok(&["bridge", "fdb", "show", "dev", "flannel.1"]);
    assert!(fdb.contains("0e:00:00:00:00:02 dst 10.99.0.2"), "{fdb}");

    // SIGTERM: the agent exits and keeps its lease, as flanneld.
    let pid = guard.0.id() as i32;
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(wait_until(Duration::from_secs(5), || guard
        .0
        .try_wait()
        .ok()
        .flatten()
        .is_some()));
    drop(guard);
    let log = fs::read_to_string(&log_path).unwrap_or_default();
    assert!(log.contains("the lease stays"), "{log}");
    assert!(
        log.contains(" DEBUG ferrocni-agent: "),
        "-v 1 printed no DEBUG line:\n{log}"
    );
    let keys = etcd.ctl_ok(
        &ns,
        &root,
        &[
            "get",
            &format!("{PREFIX}/subnets/"),
            "--prefix",
            "--keys-only",
        ],
    );
    assert_eq!(
        keys.lines().filter(|l| l.starts_with(PREFIX)).count(),
        2,
        "{keys}"
    );
}
