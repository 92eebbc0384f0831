//! firewall configuration.

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::FirewallError;

pub const DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
pub const DEFAULT_ZONE: &str = "trusted";
/// Where the per-attachment records live unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/run/cni/firewall";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Iptables,
    Firewalld,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Iptables => "iptables",
            BackendKind::Firewalld => "firewalld",
        }
    }

    pub fn from_name(name: &str) -> Option<BackendKind> {
        [BackendKind::Iptables, BackendKind::Firewalld]
            .into_iter()
            .find(|b| b.as_str() == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressPolicy {
    /// No restriction (default).
    Open,
    /// Only traffic from the same bridge may reach the container.
    SameBridge,
    /// Like same-bridge, and containers on the bridge cannot reach each other either.
    Isolated,
}

#[derive(Debug, Default, Deserialize)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "FirewallNetConf")]
struct RawConf {
    #[serde(default)]
    backend: Option<String>,
    #[serde(default, rename = "iptablesAdminChainName")]
    admin_chain: Option<String>,
    #[serde(default, rename = "firewalldZone")]
    zone: Option<String>,
    #[serde(default, rename = "ingressPolicy")]
    ingress_policy: Option<String>,
    #[serde(default, rename = "dataDir")]
    data_dir: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConf {
    /// `None`: firewalld when it runs, else iptables.
    pub backend: Option<BackendKind>,
    pub admin_chain: String,
    pub zone: String,
    pub ingress_policy: IngressPolicy,
    /// Where the per-attachment records live (ours; the reference keeps none).
    pub data_dir: PathBuf,
}

/// iptables chain names: at most 28 characters, no whitespace or quoting.
fn valid_chain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 28
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\'')
}

/// firewalld zone names: letters, digits, `_`, `-`, `/` (max 17 in firewalld; be lenient).
fn valid_zone(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/'))
}

pub fn parse(
    config: &serde_json::Map<String, serde_json::Value>,
) -> Result<FirewallConf, FirewallError> {
    let raw: RawConf = libcni::gojson::from_map(config).map_err(FirewallError::Load)?;
    let backend = match raw.backend.as_deref() {
        None | Some("") => None,
        Some(name) if BackendKind::from_name(name).is_some() => BackendKind::from_name(name),
        Some(other) => return Err(FirewallError::UnknownBackend(other.to_string())),
    };
    let admin_chain = raw
        .admin_chain
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_ADMIN_CHAIN.to_string());
    if !valid_chain_name(&admin_chain) {
        return Err(FirewallError::AdminChain(admin_chain));
    }
    let zone = raw
        .zone
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_ZONE.to_string());
    if !valid_zone(&zone) {
        return Err(FirewallError::Zone(zone));
    }
    let ingress_policy = match raw.ingress_policy.as_deref() {
        None | Some("") | Some("open") => IngressPolicy::Open,
        Some("same-bridge") => IngressPolicy::SameBridge,
        Some("isolated") => IngressPolicy::Isolated,
        Some(other) => return Err(FirewallError::IngressPolicy(other.to_string())),
    };
    let data_dir = PathBuf::from(
        raw.data_dir
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| DEFAULT_DATA_DIR.to_string()),
    );
    Ok(FirewallConf {
        backend,
        admin_chain,
        zone,
        ingress_policy,
        data_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: serde_json::Value) -> Result<FirewallConf, FirewallError> {
        parse(v.as_object().unwrap())
    }

    #[test]
    fn podman_config_defaults() {
        let c = conf(json!({"type":"firewall","backend":""})).unwrap();
        assert_eq!(c.backend, None);
        assert_eq!(c.admin_chain, "CNI-ADMIN");
        assert_eq!(c.zone, "trusted");
        assert_eq!(c.ingress_policy, IngressPolicy::Open);
        let c = conf(json!({"backend":"iptables","ingressPolicy":"same-bridge","iptablesAdminChainName":"MY-ADMIN"})).unwrap();
        assert_eq!(c.backend, Some(BackendKind::Iptables));
        assert_eq!(c.ingress_policy, IngressPolicy::SameBridge);
        assert_eq!(c.admin_chain, "MY-ADMIN");
        assert_eq!(
            conf(json!({"ingressPolicy":"isolated"}))
                .unwrap()
                .ingress_policy,
            IngressPolicy::Isolated
        );
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            json!({"backend":"ufw"}),
            json!({"ingressPolicy":"closed"}),
            json!({"iptablesAdminChainName":"has space"}),
            json!({"iptablesAdminChainName":"-j"}),
            json!({"iptablesAdminChainName":"x".repeat(29)}),
            json!({"firewalldZone":"--permanent"}),
        ] {
            assert!(conf(bad.clone()).is_err(), "accepted {bad}");
        }
    }
}
