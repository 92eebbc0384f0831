//! The plugin's configuration:
//!
//! ```json
//! {"type": "ferrocni-policy", "socket": "/run/flannel/policy.sock", "timeout": 15}
//! ```
//!
//! `socket` is the agent's `--policy-socket`; `timeout` (seconds) bounds the wait for the
//! agent's answer (the agent itself gives up on an unknown pod after 10 s).

use std::time::Duration;

use libcni::skel::CmdArgs;
use serde::Deserialize;

use crate::error::PolicyPluginError;

pub const DEFAULT_SOCKET: &str = "/run/flannel/policy.sock";
const DEFAULT_TIMEOUT: i64 = 15;

#[derive(Debug, Default, Deserialize)]
struct Raw {
    socket: Option<String>,
    timeout: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub socket: String,
    pub timeout: Duration,
}

pub fn parse(args: &CmdArgs) -> Result<Config, PolicyPluginError> {
    let raw: Raw = args.decode_config().map_err(PolicyPluginError::Decode)?;
    let timeout = raw.timeout.unwrap_or(DEFAULT_TIMEOUT);
    if !(1..=300).contains(&timeout) {
        return Err(PolicyPluginError::Timeout(timeout));
    }
    Ok(Config {
        socket: raw
            .socket
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SOCKET.to_string()),
        timeout: Duration::from_secs(timeout as u64),
    })
}

/// The pod's namespace and name from CNI_ARGS (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, as the
/// Kubernetes runtimes pass them); `None` outside Kubernetes.
pub fn pod_of(cni_args: &[(String, String)]) -> Option<(String, String)> {
    let get = |k: &str| {
        cni_args
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    Some((get("K8S_POD_NAMESPACE")?, get("K8S_POD_NAME")?))
}
