//! How the agent reaches the API and learns which node it runs on, as flanneld does:
//! `--kubeconfig-file` (its server replaced by `--kube-api-url` when both are given),
//! `--kube-api-url` alone, or else the pod's service account (`KUBERNETES_SERVICE_HOST`/`_PORT`,
//! the token and CA under `/var/run/secrets/kubernetes.io/serviceaccount`). The node is
//! `NODE_NAME`, or the node the pod `POD_NAMESPACE/POD_NAME` is scheduled on.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::error::KubeStoreError;
use crate::options::KubeOptions;

/// A client for the API, and the server's address for messages.
pub async fn client(opts: &KubeOptions) -> Result<(Client, String), KubeStoreError> {
    let api_url = match opts.api_url.as_deref().filter(|u| !u.is_empty()) {
        Some(u) => Some(
            u.parse::<http::Uri>()
                .map_err(|e| KubeStoreError::Config(format!("--kube-api-url {u:?}: {e}")))?,
        ),
        None => None,
    };
    let config = match (&opts.kubeconfig, api_url) {
        (Some(path), url) => {
            let file = Kubeconfig::read_from(path).map_err(|e| {
                KubeStoreError::Config(format!("kubeconfig {}: {e}", path.display()))
            })?;
            let mut config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| {
                    KubeStoreError::Config(format!("kubeconfig {}: {e}", path.display()))
                })?;
            if let Some(url) = url {
                config.cluster_url = url;
            }
            config
        }
        (None, Some(url)) => Config::new(url),
        (None, None) => Config::incluster().map_err(|e| {
            KubeStoreError::Config(format!(
                "no --kubeconfig-file or --kube-api-url, and not in a pod with a service \
                 account ({e})"
            ))
        })?,
    };
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config)
        .map_err(|e| KubeStoreError::Config(format!("client for {server}: {e}")))?;
    Ok((client, server.trim_end_matches('/').to_string()))
}

/// Where the node's name comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeNameSource {
    Given(String),
    Pod { namespace: String, name: String },
}

/// `NODE_NAME`, else `POD_NAMESPACE`/`POD_NAME` (read through `env`).
pub fn node_name_source(
    env: impl Fn(&str) -> Option<String>,
) -> Result<NodeNameSource, KubeStoreError> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(name) = set("NODE_NAME") {
        return Ok(NodeNameSource::Given(name));
    }
    match (set("POD_NAMESPACE"), set("POD_NAME")) {
        (Some(namespace), Some(name)) => Ok(NodeNameSource::Pod { namespace, name }),
        _ => Err(KubeStoreError::NodeName(
            "set NODE_NAME, or POD_NAME and POD_NAMESPACE (the DaemonSet's downward API)".into(),
        )),
    }
}

/// The node's name: given, or the pod's `spec.nodeName`.
pub async fn node_name(
    client: &Client,
    server: &str,
    source: NodeNameSource,
) -> Result<String, KubeStoreError> {
    let (namespace, name) = match source {
        NodeNameSource::Given(n) => return Ok(n),
        NodeNameSource::Pod { namespace, name } => (namespace, name),
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let what = format!("GET pod {namespace}/{name}");
    let pod = pods
        .get(&name)
        .await
        .map_err(|e| KubeStoreError::request(server, &what, e))?;
    pod.spec
        .and_then(|s| s.node_name)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            KubeStoreError::NodeName(format!("pod {namespace}/{name} has no spec.nodeName"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_name_comes_from_node_name_or_the_pod() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            node_name_source(env(&[("NODE_NAME", "n1"), ("POD_NAME", "p")])).unwrap(),
            NodeNameSource::Given("n1".into())
        );
        assert_eq!(
            node_name_source(env(&[
                ("NODE_NAME", ""),
                ("POD_NAME", "p"),
                ("POD_NAMESPACE", "kube-flannel")
            ]))
            .unwrap(),
            NodeNameSource::Pod {
                namespace: "kube-flannel".into(),
                name: "p".into()
            }
        );
        assert!(node_name_source(env(&[("POD_NAME", "p")])).is_err());
    }
}
