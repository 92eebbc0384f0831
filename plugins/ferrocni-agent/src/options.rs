//! Command-line options (flannel's flag names where one exists).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::AgentError;

pub const USAGE: &str = "\
ferrocni-agent: leases this node's pod subnet in etcd (flannel-compatible layout) and keeps
the VXLAN overlay current by running the vxlan reconcile on every membership change.

Options:
  --etcd-endpoints URLS          comma-separated (default http://127.0.0.1:2379)
  --etcd-prefix PREFIX           (default /coreos.com/network)
  --public-ip IP                 this node's underlay address (default: first IPv4 of --iface)
  --public-ipv6 IP               this node's IPv6 underlay address, for a dual-stack network
                                 (default: first global IPv6 of --iface)
  --iface NAME                   underlay interface
  --subnet-file PATH             (default /run/flannel/subnet.env)
  --ip-masq                      write FLANNEL_IPMASQ=true (default false)
  --cni-conf-template PATH       conflist template to render with the lease
  --cni-conf-dir DIR             where the rendered conflist goes (default /etc/cni/net.d)
  --state-dir DIR                overlay config and peers file (default /run/ferrocni/agent)
  --vxlan-bin PATH               run `PATH sync <config>` for each pass instead of the built-in
                                 vxlan reconcile (the same code, separately installed)
  --vxlan-lock-file PATH         the lock serialising passes with the CNI plugin's; set it to the
                                 conflist's vxlan `lockFile` when that is set (default: the
                                 plugin's default, /run/ferrocni/vxlan-<device>.lock)
  --subnet-lease-ttl SECONDS     (default 86400)
  --subnet-lease-renew-margin SECONDS  (default 3600)
  --resync-interval SECONDS      full re-list and reconcile period (default 60)
  --startup-timeout SECONDS      how long to wait for etcd at start-up (default 10)
  --once                         acquire, write files, reconcile once, exit
  -h, --help
";

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub etcd_endpoints: Vec<String>,
    pub etcd_prefix: String,
    pub public_ip: Option<Ipv4Addr>,
    pub public_ipv6: Option<Ipv6Addr>,
    pub iface: Option<String>,
    pub subnet_file: PathBuf,
    pub ip_masq: bool,
    pub cni_conf_template: Option<PathBuf>,
    pub cni_conf_dir: PathBuf,
    pub state_dir: PathBuf,
    pub vxlan_bin: Option<PathBuf>,
    pub vxlan_lock_file: Option<PathBuf>,
    pub lease_ttl: i64,
    pub renew_margin: i64,
    pub resync_interval: Duration,
    pub startup_timeout: Duration,
    pub once: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            etcd_prefix: "/coreos.com/network".into(),
            public_ip: None,
            public_ipv6: None,
            iface: None,
            subnet_file: "/run/flannel/subnet.env".into(),
            ip_masq: false,
            cni_conf_template: None,
            cni_conf_dir: "/etc/cni/net.d".into(),
            state_dir: "/run/ferrocni/agent".into(),
            vxlan_bin: None,
            vxlan_lock_file: None,
            lease_ttl: 86_400,
            renew_margin: 3_600,
            resync_interval: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(10),
            once: false,
        }
    }
}

/// `Ok(None)` means help was asked for.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, AgentError> {
    let mut o = Options::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, AgentError> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| AgentError::Usage(format!("{name} needs a value")))
        };
        let secs = |name: &str, v: String| -> Result<i64, AgentError> {
            v.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                AgentError::Usage(format!("{name} {v:?} is not a positive number of seconds"))
            })
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--once" => o.once = true,
            "--ip-masq" => o.ip_masq = true,
            "--etcd-endpoints" => {
                o.etcd_endpoints = value(&flag)?
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if o.etcd_endpoints.is_empty() {
                    return Err(AgentError::Usage("--etcd-endpoints is empty".into()));
                }
            }
            "--etcd-prefix" => {
                let p = value(&flag)?;
                if !p.starts_with('/') {
                    return Err(AgentError::Usage(format!(
                        "--etcd-prefix {p:?} must start with '/'"
                    )));
                }
                o.etcd_prefix = p.trim_end_matches('/').to_string();
            }
            "--public-ip" => {
                let v = value(&flag)?;
                o.public_ip = Some(
                    v.parse()
                        .map_err(|e| AgentError::Usage(format!("--public-ip {v:?}: {e}")))?,
                );
            }
            "--public-ipv6" => {
                let v = value(&flag)?;
                o.public_ipv6 = Some(
                    v.parse()
                        .map_err(|e| AgentError::Usage(format!("--public-ipv6 {v:?}: {e}")))?,
                );
            }
            "--iface" => o.iface = Some(value(&flag)?),
            "--subnet-file" => o.subnet_file = value(&flag)?.into(),
            "--cni-conf-template" => o.cni_conf_template = Some(value(&flag)?.into()),
            "--cni-conf-dir" => o.cni_conf_dir = value(&flag)?.into(),
            "--state-dir" => o.state_dir = value(&flag)?.into(),
            "--vxlan-bin" => o.vxlan_bin = Some(value(&flag)?.into()),
            "--vxlan-lock-file" => o.vxlan_lock_file = Some(value(&flag)?.into()),
            "--subnet-lease-ttl" => o.lease_ttl = secs(&flag, value(&flag)?)?,
            "--subnet-lease-renew-margin" => o.renew_margin = secs(&flag, value(&flag)?)?,
            "--resync-interval" => {
                o.resync_interval = Duration::from_secs(secs(&flag, value(&flag)?)? as u64)
            }
            "--startup-timeout" => {
                o.startup_timeout = Duration::from_secs(secs(&flag, value(&flag)?)? as u64)
            }
            other => {
                return Err(AgentError::Usage(format!(
                    "unknown option {other:?} (see --help)"
                )))
            }
        }
    }
    Ok(Some(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<Options>, AgentError> {
        parse(args.iter().map(|s| s.to_string()))
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
        assert_eq!(o.vxlan_lock_file, Some(PathBuf::from("/run/x.lock")));
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
        ] {
            assert!(matches!(p(args), Err(AgentError::Usage(_))), "{args:?}");
        }
    }
}
