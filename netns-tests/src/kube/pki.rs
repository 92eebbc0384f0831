//! The control plane's credentials, made with openssl in its directory: a CA, the apiserver's
//! serving certificate signed by it (for the address the apiserver listens on, loopback and the
//! `kubernetes` Service's IP and names), the service-account key pair, a static token file with
//! one token per identity the harness uses, and kubeconfig files for tokens.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::success_stdout;

/// What the apiserver and the controller-manager are started with.
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    /// Signs service-account tokens (apiserver, controller-manager).
    pub service_account_key: PathBuf,
    /// Verifies them (apiserver).
    pub service_account_pub: PathBuf,
    /// `--token-auth-file`.
    pub token_file: PathBuf,
    /// A `system:masters` member: what the harness itself acts as.
    pub admin_token: String,
    /// `system:kube-controller-manager`, the identity the bootstrap RBAC policy gives the
    /// controller-manager's rights to.
    pub controller_manager_token: String,
}

impl Pki {
    /// Makes every file in `dir`; the serving certificate is valid for `ip` and `service_ip`
    /// (the first address of the service range, which pods reach the apiserver at).
    pub fn create(dir: &Path, ip: &str, service_ip: &str) -> Pki {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let file = |name: &str| dir.join(name).display().to_string();
        // P-256 keys: made in milliseconds, where RSA takes a noticeable part of a second.
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let (ca_cert, ca_key) = (file("ca.crt"), file("ca.key"));
        openssl(
            &[
                &["req", "-x509"],
                &ec[..],
                &["-keyout", &ca_key, "-out", &ca_cert],
            ]
            .concat(),
            &["-days", "3650", "-subj", "/CN=ferrocni-test-kubernetes-ca"],
        );

        let (serving_cert, serving_key, csr) = (
            file("apiserver.crt"),
            file("apiserver.key"),
            file("apiserver.csr"),
        );
        openssl(
            &[
                &["req", "-new"],
                &ec[..],
                &["-keyout", &serving_key, "-out", &csr],
            ]
            .concat(),
            &["-subj", "/CN=kube-apiserver"],
        );
        let names = [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
        ];
        let san: Vec<String> = [ip, "127.0.0.1", service_ip]
            .iter()
            .map(|a| format!("IP:{a}"))
            .chain(names.iter().map(|n| format!("DNS:{n}")))
            .collect();
        let extensions = file("apiserver.ext");
        write(
            Path::new(&extensions),
            &format!(
                "subjectAltName={}\nextendedKeyUsage=serverAuth\n\
                 keyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=CA:FALSE\n",
                san.join(",")
            ),
        );
        openssl(
            &[
                "x509", "-req", "-in", &csr, "-CA", &ca_cert, "-CAkey", &ca_key,
            ],
            &[
                "-set_serial",
                "2",
                "-days",
                "3650",
                "-extfile",
                &extensions,
                "-out",
                &serving_cert,
            ],
        );

        let (sa_key, sa_pub) = (file("service-account.key"), file("service-account.pub"));
        openssl(
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ],
            &["-out", &sa_key],
        );
        openssl(&["pkey", "-in", &sa_key, "-pubout"], &["-out", &sa_pub]);

        let admin_token = random_token();
        let controller_manager_token = random_token();
        let token_file = dir.join("tokens.csv");
        write(
            &token_file,
            &format!(
                "{admin_token},admin,admin,\"system:masters\"\n\
                 {controller_manager_token},system:kube-controller-manager,kube-controller-manager\n"
            ),
        );
        Pki {
            ca_cert: ca_cert.into(),
            ca_key: ca_key.into(),
            serving_cert: serving_cert.into(),
            serving_key: serving_key.into(),
            service_account_key: sa_key.into(),
            service_account_pub: sa_pub.into(),
            token_file,
            admin_token,
            controller_manager_token,
        }
    }
}

/// Writes a kubeconfig (JSON, which kubeconfig readers take as YAML) for `token` at `server`,
/// trusting `ca`.
pub fn write_kubeconfig(path: &Path, server: &str, ca: &Path, token: &str) {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": server, "certificate-authority": ca.display().to_string()}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    });
    write(path, &config.to_string());
}

/// 128 random bits in hex.
fn random_token() -> String {
    openssl(&["rand", "-hex"], &["16"]).trim().to_string()
}

/// Runs `openssl <args> <more>`; panics with its output unless it succeeds; returns stdout.
fn openssl(args: &[&str], more: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .args(more)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
    success_stdout(&format!("openssl {args:?} {more:?}"), out)
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
