//! `ferrocni-agent` against a secured etcd, all inside a netns made here: TLS with
//! `--client-cert-auth` (certificates made by the test with the `openssl` CLI) and a user with
//! `auth enable`. Good settings lease a subnet; a wrong CA, a missing or foreign client
//! certificate, a wrong password or no user are refused at once, each with a message naming it.
//! The daemon's surface rides along: FLANNELD_* variables, `/healthz`, `/metrics`, token refresh.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use netns_tests::agent::Agent;
use netns_tests::agent_cluster::require_tools;
use netns_tests::cluster::{http_get, sample, wait_until, CONVERGE};
use netns_tests::etcd::{Etcd, EtcdAuth, EtcdOptions, EtcdTls, PREFIX};
use netns_tests::{require_root, Netns, TempDir};

const CONFIG: &str = r#"{"Network":"10.244.0.0/16","SubnetMin":"10.244.1.0","SubnetMax":"10.244.20.0","Backend":{"Type":"vxlan"}}"#;
/// This node's underlay address, on a veth inside the test netns.
const NODE_IP: &str = "10.99.0.1";

fn have_tools() -> bool {
    require_tools(&["etcd", "etcdctl", "openssl"])
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

/// This node's agent on `etcd` (files under `dir`), giving etcd 10 s at start; plus `extra`.
fn node_agent(ns: &Netns, dir: &Path, etcd: &Etcd, extra: &[&str]) -> Agent {
    Agent::in_netns(ns, NODE_IP, dir, &etcd.endpoints())
        .args(&["--startup-timeout=10"])
        .args(extra)
}

/// Runs `--once`; returns the output and how long it took.
fn once(agent: &Agent) -> (Output, Duration) {
    agent.once_timed(&[])
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

/// Every lease key in `etcd`.
fn lease_keys(etcd: &Etcd) -> String {
    etcd.ctl_ok(&[
        "get",
        &format!("{PREFIX}/subnets/"),
        "--prefix",
        "--keys-only",
    ])
}

/// A CA, and the certificates the TLS test uses: the member's and a node's, signed by it, and
/// an intruder's signed by another CA.
struct Certificates {
    ca: PathBuf,
    other_ca: PathBuf,
    node: (PathBuf, PathBuf),
    foreign: (PathBuf, PathBuf),
    etcd: EtcdTls,
}

impl Certificates {
    fn make(dir: &Path) -> Certificates {
        let pki = Pki::ca(dir, "ca");
        Pki::ca(dir, "other-ca");
        let (server_cert, server_key) = pki.leaf("ca", "etcd");
        let node = pki.leaf("ca", "node");
        let foreign = pki.leaf("other-ca", "intruder");
        let ca = pki.path("ca.pem");
        Certificates {
            etcd: EtcdTls {
                ca: ca.clone(),
                server_cert,
                server_key,
                client_cert: node.0.clone(),
                client_key: node.1.clone(),
            },
            ca,
            other_ca: pki.path("other-ca.pem"),
            node,
            foreign,
        }
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn agent_etcd_tls_with_client_certificates() {
    require_root!();
    if !have_tools() {
        return;
    }
    let dir = TempDir::new("agent-tls");
    let ns = node_netns();
    let certs = Certificates::make(dir.path());
    let etcd = Etcd::start(&ns, EtcdOptions::default().tls(certs.etcd.clone()));
    etcd.put(&format!("{PREFIX}/config"), CONFIG);
    let good = [
        format!("--etcd-cafile={}", s(&certs.ca)),
        format!("--etcd-certfile={}", s(&certs.node.0)),
        format!("--etcd-keyfile={}", s(&certs.node.1)),
    ];
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    let agent = |extra: &[&str]| node_agent(&ns, dir.path(), &etcd, extra);

    // The right CA and client certificate: a lease, and the node files.
    let (out, _) = once(&agent(&good));
    assert!(out.status.success(), "{}", stderr(&out));
    let keys = lease_keys(&etcd);
    assert!(
        keys.contains(&format!("{PREFIX}/subnets/10.244.")),
        "{keys}"
    );
    assert!(fs::read_to_string(dir.join("subnet.env"))
        .unwrap()
        .contains("FLANNEL_SUBNET=10.244."));

    // The same settings from flanneld's environment variables.
    let mut from_env = agent(&[]);
    from_env.env = vec![
        ("FLANNELD_ETCD_CAFILE".into(), s(&certs.ca)),
        ("FLANNELD_ETCD_CERTFILE".into(), s(&certs.node.0)),
        ("FLANNELD_ETCD_KEYFILE".into(), s(&certs.node.1)),
    ];
    let (out, _) = once(&from_env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reusing lease 10.244."),
        "{}",
        stderr(&out)
    );
    refusals_of_bad_tls_settings(&certs, &good, &agent);
}

/// A wrong CA, no or a foreign client certificate, unusable files: each refused at once.
fn refusals_of_bad_tls_settings(
    certs: &Certificates,
    good: &[&str],
    agent: &dyn Fn(&[&str]) -> Agent,
) {
    // A CA that did not sign the member's certificate.
    let mut wrong_ca = good.to_vec();
    let other = format!("--etcd-cafile={}", s(&certs.other_ca));
    wrong_ca[0] = &other;
    assert_refused(
        "wrong CA",
        once(&agent(&wrong_ca)),
        &["not trusted by --etcd-cafile", &s(&certs.other_ca)],
    );

    // No client certificate for a --client-cert-auth member.
    assert_refused(
        "no client certificate",
        once(&agent(&good[..1])),
        &["requires a client certificate", "--etcd-certfile"],
    );

    // A client certificate from another CA.
    let foreign = [
        good[0].to_string(),
        format!("--etcd-certfile={}", s(&certs.foreign.0)),
        format!("--etcd-keyfile={}", s(&certs.foreign.1)),
    ];
    let foreign: Vec<&str> = foreign.iter().map(String::as_str).collect();
    assert_refused(
        "foreign client certificate",
        once(&agent(&foreign)),
        &["refused the client certificate", &s(&certs.foreign.0)],
    );

    // Unusable files are named before any connection.
    assert_refused(
        "missing CA file",
        once(&agent(&["--etcd-cafile=/nonexistent/ca.pem"])),
        &["--etcd-cafile /nonexistent/ca.pem"],
    );
    assert_refused(
        "key without certificate",
        once(&agent(&[good[0], good[2]])),
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
    // Tokens idle for 2 s expire: the agent, resyncing every 3 s, must refresh its token.
    let auth = EtcdAuth {
        root_password: "rootpw".into(),
        user: "flannel".into(),
        password: "flannelpw".into(),
    };
    let etcd = Etcd::start(
        &ns,
        EtcdOptions::default()
            .auth(auth)
            .args(&["--auth-token=simple", "--auth-token-ttl=2"]),
    );
    etcd.put(&format!("{PREFIX}/config"), CONFIG);
    refusals_of_bad_users(&ns, dir.path(), &etcd);

    // The user from flanneld's variables, in the long-running daemon with health and metrics.
    let mut agent = node_agent(
        &ns,
        dir.path(),
        &etcd,
        &[
            "--resync-interval=3",
            "--healthz-port=18471",
            "--metrics-port=19471",
            "-v",
            "1",
        ],
    );
    agent.env = vec![
        ("FLANNELD_ETCD_USERNAME".into(), "flannel".into()),
        ("FLANNELD_ETCD_PASSWORD".into(), "flannelpw".into()),
    ];
    agent.start();
    assert!(
        wait_until(CONVERGE, || agent.subnet_file().exists()),
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
    peer_seen_after_the_token_expired(&ns, &etcd);

    // SIGTERM: the agent exits and keeps its lease, as flanneld.
    assert!(agent.stop(), "the agent did not exit on SIGTERM");
    let log = agent.log();
    assert!(log.contains("the lease stays"), "{log}");
    assert!(
        log.contains(" DEBUG ferrocni-agent: "),
        "-v 1 printed no DEBUG line:\n{log}"
    );
    let keys = lease_keys(&etcd);
    assert_eq!(
        keys.lines().filter(|l| l.starts_with(PREFIX)).count(),
        2,
        "{keys}"
    );
}

/// No user, a wrong password, an unknown user: refused at once, naming the fix.
fn refusals_of_bad_users(ns: &Netns, dir: &Path, etcd: &Etcd) {
    assert_refused(
        "no user",
        once(&node_agent(ns, dir, etcd, &[])),
        &["authentication enabled", "--etcd-username"],
    );
    let wrong = ["--etcd-username=flannel", "--etcd-password=nope"];
    assert_refused(
        "wrong password",
        once(&node_agent(ns, dir, etcd, &wrong)),
        &["wrong --etcd-username \"flannel\" or --etcd-password"],
    );
    assert!(!stderr(&once(&node_agent(ns, dir, etcd, &wrong)).0).contains("nope"));
}

/// A peer's lease put by root after our token has expired twice over: the agent's resync
/// (token refreshed) and watch still see it, and its metrics say so.
fn peer_seen_after_the_token_expired(ns: &Netns, etcd: &Etcd) {
    std::thread::sleep(Duration::from_secs(7));
    let peer = r#"{"PublicIP":"10.99.0.2","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}}"#;
    etcd.put(&format!("{PREFIX}/subnets/10.244.9.0-24"), peer);
    let programmed = wait_until(CONVERGE, || {
        http_get(ns, 19471, "/metrics")
            .and_then(|m| sample(&m, "ferrocni_agent_leases{state=\"programmed\"}"))
            == Some(1.0)
    });
    let page = http_get(ns, 19471, "/metrics").unwrap_or_default();
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
}
