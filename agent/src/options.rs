//! Command-line options (flannel's flag names where one exists). The flags a backend brings are
//! its registration's ([`crate::backend::flag`]): listed in `--help` among the others, read
//! the same way, and kept apart ([`Options::backend_flags`]) for the backend.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use crate::backend::flag::{env_name, FlagValues};
use crate::backend::registry;
use crate::error::AgentError;

/// `--help` up to the backends' flags.
const USAGE_HEAD: &str = "\
ferrocni-agent: leases this node's pod subnet in etcd (flannel-compatible layout) and keeps
the VXLAN overlay current by running the vxlan reconcile on every membership change.

Every option can also be given as an environment variable, as flanneld reads them: FLANNELD_
and the option's name in upper case with '-' as '_' (FLANNELD_ETCD_ENDPOINTS,
FLANNELD_IP_MASQ=true, ...). The command line wins over the environment.

Options:
  --etcd-endpoints URLS          comma-separated, http:// or https:// (default http://127.0.0.1:2379)
  --etcd-prefix PREFIX           (default /coreos.com/network)
  --etcd-cafile PATH             CA certificate(s) (PEM) the etcd members' certificates must chain
                                 to (default: the system CA bundle)
  --etcd-certfile PATH           client certificate (PEM), for etcd's --client-cert-auth
  --etcd-keyfile PATH            its private key (PEM)
  --etcd-username NAME           etcd user (etcd's auth enable); the token is refreshed as needed
  --etcd-password PASSWORD       its password (better from FLANNELD_ETCD_PASSWORD than argv)
  --public-ip IP                 this node's underlay address (default: first IPv4 of --iface)
  --public-ipv6 IP               this node's IPv6 underlay address, for a dual-stack network
                                 (default: first global IPv6 of --iface)
  --iface NAME                   underlay interface (default: the default route's)
  --subnet-file PATH             (default /run/flannel/subnet.env)
  --ip-masq                      write FLANNEL_IPMASQ=true and keep masquerade rules (default false)
  --cni-conf-template PATH       conflist template to render with the lease
  --cni-conf-dir DIR             where the rendered conflist goes (default /etc/cni/net.d)
  --kube-subnet-mgr              leases are Kubernetes Nodes (podCIDR and annotations) instead
                                 of etcd keys; the node is NODE_NAME (or POD_NAMESPACE/POD_NAME)
  --kube-api-url URL             the API server (default: the kubeconfig's, or in a pod the
                                 service account's KUBERNETES_SERVICE_HOST/PORT)
  --kubeconfig-file PATH         kubeconfig to use (default: the pod's service account)
  --kube-annotation-prefix P     node annotation prefix (default flannel.alpha.coreos.com)
  --net-config-path PATH         network config in kube mode (default /etc/kube-flannel/net-conf.json)
  --set-node-network-unavailable in kube mode, set the node's NetworkUnavailable condition to
                                 False once up (default true; =false leaves it alone)
  --network-policy               in kube mode, enforce NetworkPolicies on this node's pods
                                 (nf_tables table inet ferrocni_policy; default false)
  --policy-socket PATH           where the CNI chain's ferrocni-policy plugin asks at ADD
                                 (default /run/flannel/policy.sock)
";

/// `--help` after the backends' flags.
const USAGE_TAIL: &str = "  --subnet-lease-ttl SECONDS     (default 86400)
  --subnet-lease-renew-margin MINUTES  renew the lease this long before it expires, in minutes
                                 as flanneld (1 to 1439, default 60); `<N>s` gives seconds
  --resync-interval SECONDS      full re-list and reconcile period (default 60)
  --startup-timeout SECONDS      how long to wait for etcd at start-up (default 10)
  --healthz-ip IP                address of the health endpoint (default 0.0.0.0)
  --healthz-port PORT            serve GET /healthz on this port (default 0: off)
  --metrics-port PORT            serve GET /metrics (Prometheus text format) on this port, on
                                 --healthz-ip (default 0: off)
  -v, --v LEVEL                  log verbosity: 0 events and errors (default), 1 also each
                                 watch event and reconcile pass, 2 also each etcd request
  --once                         acquire, write files, reconcile once, exit
  --list-backends                list the backends (name, what each needs, what it is) and exit
  --version                      print the version and exit
  -h, --help

Subcommand:
  install-cni [--help]           copy the plugins and a conflist onto the host (the container
                                 image's init step)
";

/// `--help`: every flag, the backends' among them.
pub fn usage() -> String {
    let mut text = USAGE_HEAD.to_string();
    for flag in registry::flags() {
        text.push_str(&flag.usage());
    }
    text + USAGE_TAIL
}

/// The agent's version line (`--version`, logs): the workspace's version, one place for all.
pub const VERSION_LINE: &str = concat!("ferrocni-agent ferrocni v", env!("CARGO_PKG_VERSION"));

/// flanneld's `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// flanneld's `--etcd-username` and `--etcd-password`.
#[derive(Clone, PartialEq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials {{ username: {:?} }}", self.username)
    }
}

/// flanneld's `--kube-subnet-mgr` and the flags that go with it.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeOptions {
    pub enabled: bool,
    pub api_url: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub annotation_prefix: String,
    pub net_config_path: PathBuf,
    pub set_node_network_unavailable: bool,
    /// `--network-policy`: enforce NetworkPolicies on this node's pods.
    pub network_policy: bool,
    /// `--policy-socket`: the admission socket of the CNI chain.
    pub policy_socket: PathBuf,
}

impl Default for KubeOptions {
    fn default() -> KubeOptions {
        KubeOptions {
            enabled: false,
            api_url: None,
            kubeconfig: None,
            annotation_prefix: "flannel.alpha.coreos.com".into(),
            net_config_path: "/etc/kube-flannel/net-conf.json".into(),
            set_node_network_unavailable: true,
            network_policy: false,
            policy_socket: "/run/flannel/policy.sock".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub kube: KubeOptions,
    pub etcd_endpoints: Vec<String>,
    pub etcd_prefix: String,
    pub etcd_tls: TlsFiles,
    pub etcd_credentials: Option<Credentials>,
    pub public_ip: Option<Ipv4Addr>,
    pub public_ipv6: Option<Ipv6Addr>,
    pub iface: Option<String>,
    pub subnet_file: PathBuf,
    pub ip_masq: bool,
    pub cni_conf_template: Option<PathBuf>,
    pub cni_conf_dir: PathBuf,
    /// The values of the backends' flags given (each backend gets its own when it starts).
    pub backend_flags: FlagValues,
    pub lease_ttl: i64,
    pub renew_margin: i64,
    pub resync_interval: Duration,
    pub startup_timeout: Duration,
    pub healthz_ip: IpAddr,
    pub healthz_port: u16,
    pub metrics_port: u16,
    pub verbosity: u8,
    pub once: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            kube: KubeOptions::default(),
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            etcd_prefix: "/coreos.com/network".into(),
            etcd_tls: TlsFiles::default(),
            etcd_credentials: None,
            public_ip: None,
            public_ipv6: None,
            iface: None,
            subnet_file: "/run/flannel/subnet.env".into(),
            ip_masq: false,
            cni_conf_template: None,
            cni_conf_dir: "/etc/cni/net.d".into(),
            backend_flags: FlagValues::default(),
            lease_ttl: 86_400,
            renew_margin: 3_600,
            resync_interval: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(10),
            healthz_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            healthz_port: 0,
            metrics_port: 0,
            verbosity: 0,
            once: false,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Invocation {
    Run(Box<Options>),
    Help,
    Version,
    ListBackends,
}

/// The agent's own flags that are switches, and those that take a value (the backends' take
/// one).
const SWITCHES: &[&str] = &[
    "--once",
    "--ip-masq",
    "--kube-subnet-mgr",
    "--set-node-network-unavailable",
    "--network-policy",
];
const VALUED: &[&str] = &[
    "--kube-api-url",
    "--kubeconfig-file",
    "--kube-annotation-prefix",
    "--net-config-path",
    "--policy-socket",
    "--etcd-endpoints",
    "--etcd-prefix",
    "--etcd-cafile",
    "--etcd-certfile",
    "--etcd-keyfile",
    "--etcd-username",
    "--etcd-password",
    "--public-ip",
    "--public-ipv6",
    "--iface",
    "--subnet-file",
    "--cni-conf-template",
    "--cni-conf-dir",
    "--subnet-lease-ttl",
    "--subnet-lease-renew-margin",
    "--resync-interval",
    "--startup-timeout",
    "--healthz-ip",
    "--healthz-port",
    "--metrics-port",
    "--v",
];

/// Whether a flag is a switch (`--once`) or takes a value; `None` for an unknown flag.
fn kind(flag: &str) -> Option<bool> {
    if SWITCHES.contains(&flag) {
        Some(true)
    } else if VALUED.contains(&flag) || registry::flag(flag).is_some() {
        Some(false)
    } else {
        None
    }
}

/// Parses the real command line and environment.
pub fn from_process() -> Result<Invocation, AgentError> {
    parse_with_env(std::env::args().skip(1), |name| std::env::var(name).ok())
}

/// `Ok(None)` means help was asked for (command line only, no environment).
#[cfg(test)]
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, AgentError> {
    match parse_with_env(args, |_| None)? {
        Invocation::Run(o) => Ok(Some(*o)),
        _ => Ok(None),
    }
}

/// Parses `args`, then fills every flag they leave unset from `env` (`FLANNELD_<FLAG>`; empty
/// values count as unset), as flanneld does.
pub fn parse_with_env(
    args: impl IntoIterator<Item = String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Invocation, AgentError> {
    let mut given: Vec<(String, Option<String>)> = Vec::new();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        // Accept both `--flag value` and `--flag=value`, and `-v` as klog's `--v`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let flag = if flag == "-v" {
            "--v".to_string()
        } else {
            flag
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Invocation::Help),
            "--version" => return Ok(Invocation::Version),
            "--list-backends" => return Ok(Invocation::ListBackends),
            _ => {}
        }
        match kind(&flag) {
            Some(true) => given.push((flag, inline)),
            Some(false) => {
                let v = inline
                    .or_else(|| it.next())
                    .ok_or_else(|| AgentError::Usage(format!("{flag} needs a value")))?;
                given.push((flag, Some(v)));
            }
            None => {
                return Err(AgentError::Usage(format!(
                    "unknown option {flag:?} (see --help)"
                )))
            }
        }
    }
    let mut from_env = Vec::new();
    // Every flag may come from the environment but `--once`, which no daemon wants.
    let backend_flags = registry::flags().map(|f| f.name);
    for flag in SWITCHES
        .iter()
        .chain(VALUED)
        .copied()
        .chain(backend_flags)
        .filter(|f| *f != "--once")
    {
        if given.iter().any(|(f, _)| f == flag) {
            continue;
        }
        let name = env_name(flag);
        if let Some(v) = env(&name).filter(|v| !v.is_empty()) {
            from_env.push((flag.to_string(), Some(v), name));
        }
    }
    let mut o = Options::default();
    let mut username = None;
    let mut password = None;
    for (flag, value) in given {
        apply(&mut o, &mut username, &mut password, &flag, value, &flag)?;
    }
    for (flag, value, name) in from_env {
        apply(&mut o, &mut username, &mut password, &flag, value, &name)?;
    }
    o.etcd_credentials = match (username, password) {
        (Some(username), password) => Some(Credentials {
            username,
            password: password.unwrap_or_default(),
        }),
        (None, Some(_)) => {
            return Err(AgentError::Usage(
                "--etcd-password is given without --etcd-username".into(),
            ))
        }
        (None, None) => None,
    };
    if o.kube.network_policy && !o.kube.enabled {
        return Err(AgentError::Usage(
            "--network-policy needs --kube-subnet-mgr (policies are read from the Kubernetes API)"
                .into(),
        ));
    }
    Ok(Invocation::Run(Box::new(o)))
}

/// Sets one flag; `source` names where it came from (the flag, or its environment variable).
fn apply(
    o: &mut Options,
    username: &mut Option<String>,
    password: &mut Option<String>,
    flag: &str,
    value: Option<String>,
    source: &str,
) -> Result<(), AgentError> {
    let need = || {
        value
            .clone()
            .ok_or_else(|| AgentError::Usage(format!("{source} needs a value")))
    };
    let secs = |v: String| -> Result<i64, AgentError> {
        v.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
            AgentError::Usage(format!(
                "{source} {v:?} is not a positive number of seconds"
            ))
        })
    };
    // Go's strconv.ParseBool, as flanneld reads FLANNELD_IP_MASQ=true.
    let switch = || -> Result<bool, AgentError> {
        match value.as_deref() {
            None => Ok(true),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(v) => Err(AgentError::Usage(format!(
                "{source} {v:?} is not a boolean (true or false)"
            ))),
        }
    };
    let port = |v: String| -> Result<u16, AgentError> {
        v.parse::<u16>()
            .map_err(|_| AgentError::Usage(format!("{source} {v:?} is not a port number")))
    };
    let path = |v: String| Some(PathBuf::from(v));
    match flag {
        "--once" => o.once = switch()?,
        "--ip-masq" => o.ip_masq = switch()?,
        "--kube-subnet-mgr" => o.kube.enabled = switch()?,
        "--set-node-network-unavailable" => o.kube.set_node_network_unavailable = switch()?,
        "--network-policy" => o.kube.network_policy = switch()?,
        "--policy-socket" => o.kube.policy_socket = need()?.into(),
        "--kube-api-url" => o.kube.api_url = Some(need()?),
        "--kubeconfig-file" => o.kube.kubeconfig = path(need()?),
        "--kube-annotation-prefix" => o.kube.annotation_prefix = need()?,
        "--net-config-path" => o.kube.net_config_path = need()?.into(),
        "--etcd-endpoints" => {
            o.etcd_endpoints = need()?
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if o.etcd_endpoints.is_empty() {
                return Err(AgentError::Usage(format!("{source} is empty")));
            }
        }
        "--etcd-prefix" => {
            let p = need()?;
            if !p.starts_with('/') {
                return Err(AgentError::Usage(format!(
                    "{source} {p:?} must start with '/'"
                )));
            }
            o.etcd_prefix = p.trim_end_matches('/').to_string();
        }
        "--etcd-cafile" => o.etcd_tls.ca = path(need()?),
        "--etcd-certfile" => o.etcd_tls.cert = path(need()?),
        "--etcd-keyfile" => o.etcd_tls.key = path(need()?),
        "--etcd-username" => *username = Some(need()?),
        "--etcd-password" => *password = Some(need()?),
        "--public-ip" => {
            let v = need()?;
            o.public_ip = Some(
                v.parse()
                    .map_err(|e| AgentError::Usage(format!("{source} {v:?}: {e}")))?,
            );
        }
        "--public-ipv6" => {
            let v = need()?;
            o.public_ipv6 = Some(
                v.parse()
                    .map_err(|e| AgentError::Usage(format!("{source} {v:?}: {e}")))?,
            );
        }
        "--iface" => o.iface = Some(need()?),
        "--subnet-file" => o.subnet_file = need()?.into(),
        "--cni-conf-template" => o.cni_conf_template = path(need()?),
        "--cni-conf-dir" => o.cni_conf_dir = need()?.into(),
        "--subnet-lease-ttl" => o.lease_ttl = secs(need()?)?,
        "--subnet-lease-renew-margin" => o.renew_margin = renew_margin(&need()?, source)?,
        "--resync-interval" => o.resync_interval = Duration::from_secs(secs(need()?)? as u64),
        "--startup-timeout" => o.startup_timeout = Duration::from_secs(secs(need()?)? as u64),
        "--healthz-ip" => {
            let v = need()?;
            o.healthz_ip = v
                .parse()
                .map_err(|e| AgentError::Usage(format!("{source} {v:?}: {e}")))?;
        }
        "--healthz-port" => o.healthz_port = port(need()?)?,
        "--metrics-port" => o.metrics_port = port(need()?)?,
        "--v" => {
            let v = need()?;
            o.verbosity = v.parse::<u8>().map_err(|_| {
                AgentError::Usage(format!("{source} {v:?} is not a verbosity level (0-9)"))
            })?;
        }
        other => {
            let Some(backend_flag) = registry::flag(other) else {
                return Err(AgentError::Usage(format!(
                    "unknown option {other:?} (see --help)"
                )));
            };
            let v = need()?;
            (backend_flag.check)(&v)
                .map_err(|why| AgentError::Usage(format!("{source} {v:?} {why}")))?;
            o.backend_flags.set(backend_flag, v);
        }
    }
    Ok(())
}

/// `--subnet-lease-renew-margin`, in seconds: minutes as flanneld counts them (1 to 1439, so
/// an environment file written for flanneld means the same here), or `<N>s` for seconds.
fn renew_margin(v: &str, source: &str) -> Result<i64, AgentError> {
    let (digits, unit, range) = match v.strip_suffix('s') {
        Some(d) => (d, 1, 1..=86_339),
        None => (v, 60, 1..=1_439),
    };
    digits
        .parse::<i64>()
        .ok()
        .filter(|n| range.contains(n))
        .map(|n| n * unit)
        .ok_or_else(|| {
            AgentError::Usage(format!(
                "{source} {v:?} is not a renewal margin (minutes from 1 to 1439, or <N>s)"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<Options>, AgentError> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn renew_margin_is_in_minutes_as_flanneld() {
        let margin =
            |v: &str| p(&["--subnet-lease-renew-margin", v]).map(|o| o.unwrap().renew_margin);
        assert_eq!(margin("60").unwrap(), 3_600);
        assert_eq!(margin("1439").unwrap(), 86_340);
        assert_eq!(margin("90s").unwrap(), 90);
        for bad in ["0", "1440", "-5", "x", "s", "0s"] {
            assert!(margin(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn defaults_and_flags() {
        assert_eq!(p(&[]).unwrap().unwrap(), Options::default());
        let o = p(&[
            "--etcd-endpoints",
            "http://10.0.0.1:2379, http://10.0.0.2:2379",
            "--etcd-prefix=/x/net/",
            "--public-ip",
            "192.168.1.5",
            "--public-ipv6=fd00::5",
            "--once",
            "--subnet-lease-ttl=30",
            "--vxlan-lock-file=/run/x.lock",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            o.etcd_endpoints,
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(o.etcd_prefix, "/x/net");
        assert_eq!(o.public_ip, Some(Ipv4Addr::new(192, 168, 1, 5)));
        assert_eq!(o.public_ipv6, Some("fd00::5".parse().unwrap()));
        assert!(o.once);
        assert_eq!(o.lease_ttl, 30);
        assert_eq!(
            o.backend_flags
                .get(&crate::backend::overlay::VXLAN_LOCK_FILE),
            Some("/run/x.lock")
        );
        assert!(p(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn bad_flags() {
        for args in [
            &["--bogus"][..],
            &["--public-ip"],
            &["--public-ip", "x"],
            &["--public-ipv6", "10.0.0.1"],
            &["--subnet-lease-ttl", "0"],
            &["--etcd-prefix", "rel"],
            &["--etcd-endpoints", ","],
            &["--healthz-port", "70000"],
            &["-v", "loud"],
            &["--ip-masq=maybe"],
            &["--etcd-password", "x"],
        ] {
            assert!(matches!(p(args), Err(AgentError::Usage(_))), "{args:?}");
        }
    }

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn run(args: &[&str], vars: &[(&str, &str)]) -> Result<Options, AgentError> {
        match parse_with_env(args.iter().map(|s| s.to_string()), env_of(vars))? {
            Invocation::Run(o) => Ok(*o),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn environment_fills_unset_flags_as_flanneld() {
        assert_eq!(env_name("--etcd-endpoints"), "FLANNELD_ETCD_ENDPOINTS");
        assert_eq!(env_name("--subnet-lease-ttl"), "FLANNELD_SUBNET_LEASE_TTL");
        let o = run(
            &["--etcd-prefix=/cli"],
            &[
                (
                    "FLANNELD_ETCD_ENDPOINTS",
                    "https://10.0.0.1:2379,https://10.0.0.2:2379",
                ),
                ("FLANNELD_ETCD_PREFIX", "/env"),
                ("FLANNELD_ETCD_CAFILE", "/etc/etcd/ca.pem"),
                ("FLANNELD_ETCD_CERTFILE", "/etc/etcd/node.pem"),
                ("FLANNELD_ETCD_KEYFILE", "/etc/etcd/node-key.pem"),
                ("FLANNELD_ETCD_USERNAME", "flannel"),
                ("FLANNELD_ETCD_PASSWORD", "s3cret"),
                ("FLANNELD_IP_MASQ", "true"),
                ("FLANNELD_PUBLIC_IP", ""),
                ("FLANNELD_HEALTHZ_PORT", "8471"),
                ("FLANNELD_V", "2"),
                ("FLANNELD_ONCE", "true"),
            ],
        )
        .unwrap();
        assert_eq!(o.etcd_endpoints.len(), 2);
        // The command line wins.
        assert_eq!(o.etcd_prefix, "/cli");
        assert_eq!(o.etcd_tls.ca, Some(PathBuf::from("/etc/etcd/ca.pem")));
        assert_eq!(
            o.etcd_tls.key,
            Some(PathBuf::from("/etc/etcd/node-key.pem"))
        );
        let creds = o.etcd_credentials.unwrap();
        assert_eq!(
            (creds.username.as_str(), creds.password.as_str()),
            ("flannel", "s3cret")
        );
        assert!(o.ip_masq);
        // Empty means unset.
        assert_eq!(o.public_ip, None);
        assert_eq!(o.healthz_port, 8471);
        assert_eq!(o.verbosity, 2);
        // `--once` is never taken from the environment.
        assert!(!o.once);
        // A bad value names the variable it came from.
        let e = run(&[], &[("FLANNELD_SUBNET_LEASE_TTL", "soon")]).unwrap_err();
        assert!(e.to_string().contains("FLANNELD_SUBNET_LEASE_TTL"), "{e}");
        assert!(!run(&[], &[("FLANNELD_IP_MASQ", "false")]).unwrap().ip_masq);
        assert!(
            !run(&["--ip-masq=false"], &[("FLANNELD_IP_MASQ", "true")])
                .unwrap()
                .ip_masq
        );
    }

    #[test]
    fn bgp_flags() {
        use crate::backend::bgp::options::{BIRD_BINARY, DIR, PEERS};
        let o = run(&[], &[]).unwrap();
        let flags = &o.backend_flags;
        assert_eq!(
            (flags.get(&BIRD_BINARY), flags.get(&DIR), flags.get(&PEERS)),
            (Some("bird"), Some("/run/ferrocni/bgp"), None),
            "the defaults"
        );
        let o = run(
            &[
                "--bird-binary=/opt/bird/sbin/bird",
                "--bgp-peers",
                "192.0.2.1:64512,198.51.100.1:65000",
            ],
            &[
                ("FLANNELD_BGP_DIR", "/run/node7/bgp"),
                ("FLANNELD_BGP_PEERS", "x"),
            ],
        )
        .unwrap();
        let flags = &o.backend_flags;
        assert_eq!(flags.get(&BIRD_BINARY), Some("/opt/bird/sbin/bird"));
        assert_eq!(flags.get(&DIR), Some("/run/node7/bgp"));
        // The backend parses the value (and names the flag in its errors).
        assert_eq!(
            flags.get(&PEERS),
            Some("192.0.2.1:64512,198.51.100.1:65000")
        );
    }

    #[test]
    fn version_help_and_verbosity() {
        let inv = |args: &[&str]| parse_with_env(args.iter().map(|s| s.to_string()), |_| None);
        assert_eq!(inv(&["--version"]).unwrap(), Invocation::Version);
        assert_eq!(inv(&["-h"]).unwrap(), Invocation::Help);
        assert_eq!(inv(&["--list-backends"]).unwrap(), Invocation::ListBackends);
        assert!(VERSION_LINE.ends_with(&format!("v{}", env!("CARGO_PKG_VERSION"))));
        assert_eq!(run(&["-v", "1"], &[]).unwrap().verbosity, 1);
        assert_eq!(run(&["-v=3"], &[]).unwrap().verbosity, 3);
        assert_eq!(run(&["--v=2"], &[]).unwrap().verbosity, 2);
        let o = run(&["--healthz-ip=127.0.0.1", "--metrics-port", "9100"], &[]).unwrap();
        assert_eq!(o.healthz_ip, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(o.metrics_port, 9100);
    }

    #[test]
    fn udp_datapath_flag() {
        use crate::backend::udp::DATAPATH;
        let datapath = |o: Options| o.backend_flags.get(&DATAPATH).map(str::to_string);
        assert_eq!(datapath(run(&[], &[]).unwrap()).as_deref(), Some("fast"));
        let o = run(&["--udp-datapath=per-packet"], &[]).unwrap();
        assert_eq!(datapath(o).as_deref(), Some("per-packet"));
        let o = run(&[], &[("FLANNELD_UDP_DATAPATH", "per-packet")]).unwrap();
        assert_eq!(datapath(o).as_deref(), Some("per-packet"));
        let o = run(
            &["--udp-datapath", "fast"],
            &[("FLANNELD_UDP_DATAPATH", "per-packet")],
        )
        .unwrap();
        assert_eq!(datapath(o).as_deref(), Some("fast"));
        let e = run(&[], &[("FLANNELD_UDP_DATAPATH", "turbo")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "usage: FLANNELD_UDP_DATAPATH \"turbo\" is not a udp data path (fast or per-packet)"
        );
    }

    /// Every flag is listed once in `--help`, the backends' with the others, lined up; and
    /// the packaged settings file names only real flags.
    #[test]
    fn help_lists_every_flag_once() {
        let text = usage();
        let flags = SWITCHES
            .iter()
            .chain(VALUED)
            .copied()
            .chain(registry::flags().map(|f| f.name));
        for flag in flags {
            let shown = text
                .lines()
                .filter(|l| l.starts_with("  -"))
                .filter(|l| {
                    l.split_whitespace()
                        .take_while(|w| w.starts_with('-'))
                        .any(|w| w.trim_end_matches(',') == flag)
                })
                .count();
            assert_eq!(shown, 1, "{flag} in:\n{text}");
        }
        assert!(text.contains(
            "\n  --udp-datapath MODE            the udp backend's packet engine: fast (batched system calls\n"
        ));
        let packaged = include_str!("../../packaging/ferrocni-agent.default");
        for var in packaged
            .lines()
            .filter_map(|l| l.trim_start_matches('#').split_once('='))
            .map(|(name, _)| name)
            .filter(|name| name.starts_with("FLANNELD_"))
        {
            let known = SWITCHES
                .iter()
                .chain(VALUED)
                .copied()
                .chain(registry::flags().map(|f| f.name))
                .any(|f| env_name(f) == var);
            assert!(
                known,
                "packaging/ferrocni-agent.default sets {var}, no flag's variable"
            );
        }
    }
}
