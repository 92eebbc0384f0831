//! The plugin's errors and their CNI codes.

use std::path::PathBuf;

use libcni::CniError;

use crate::subnet_env::EnvError;

#[derive(Debug, thiserror::Error)]
pub enum FlannelError {
    /// The network configuration is not JSON of the expected shape.
    #[error("failed to load netconf: {0}")]
    Decode(#[source] libcni::gojson::Error),
    /// subnet.env is missing or incomplete: the node is not ready yet (code 11).
    #[error(
        "flannel: loadFlannelSubnetEnv failed: {0} (has flanneld or ferrocni-agent started on this node?)"
    )]
    SubnetEnv(EnvError),
    /// STATUS: the node is not ready (code 50).
    #[error(transparent)]
    NotReady(Box<FlannelError>),
    #[error("'delegate' dictionary, if present, must have (string) 'type' field")]
    DelegateType,
    #[error("'delegate' dictionary must not have 'name' field, it'll be set by flannel")]
    DelegateName,
    #[error("'delegate' dictionary must not have 'ipam' field, it'll be set by flannel")]
    DelegateIpam,
    #[error("failed to assemble Delegate IPAM: failed to parse ipam.routes: {0}")]
    IpamRoutes(#[source] libcni::gojson::Error),
    #[error("flannel: encoding ipam.routes: {0}")]
    EncodeRoutes(#[source] serde_json::Error),
    #[error("flannel: the delegate printed no result")]
    NoResult,
    /// CHECK of a container whose ADD saved nothing (code 3).
    #[error("flannel: no delegate config saved for container {container_id} in {}", .data_dir.display())]
    NothingSaved {
        container_id: String,
        data_dir: PathBuf,
    },
    /// Code 5.
    #[error("flannel: failed to save the delegate config {}: {source}", .path.display())]
    Save {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Code 5.
    #[error("flannel: failed to read the saved delegate config {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Code 5.
    #[error("flannel: failed to remove the saved delegate config {}: {source}", .path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Code 5.
    #[error("flannel: failed to list {}: {source}", .dir.display())]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The delegate's own error, or libcni's (invoke, skeleton helpers), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<FlannelError> for CniError {
    fn from(e: FlannelError) -> CniError {
        let msg = e.to_string();
        match e {
            FlannelError::Delegated(e) => e,
            FlannelError::SubnetEnv(_) => CniError::try_again(msg),
            FlannelError::NotReady(_) => CniError::not_available(msg),
            FlannelError::NothingSaved { .. } => CniError::unknown_container(msg),
            FlannelError::Save { .. }
            | FlannelError::Read { .. }
            | FlannelError::Remove { .. }
            | FlannelError::List { .. } => CniError::io(msg),
            // Plain Go errors upstream (code 999).
            FlannelError::Decode(_)
            | FlannelError::DelegateType
            | FlannelError::DelegateName
            | FlannelError::DelegateIpam
            | FlannelError::IpamRoutes(_)
            | FlannelError::EncodeRoutes(_)
            | FlannelError::NoResult => CniError::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: FlannelError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        let env = || EnvError("failed to read /run/flannel/subnet.env: gone".into());
        assert_eq!(
            cni(FlannelError::SubnetEnv(env())),
            (11, "flannel: loadFlannelSubnetEnv failed: failed to read /run/flannel/subnet.env: gone (has flanneld or ferrocni-agent started on this node?)".into())
        );
        assert_eq!(
            cni(FlannelError::NotReady(Box::new(FlannelError::SubnetEnv(
                env()
            ))))
            .0,
            50
        );
        assert_eq!(
            cni(FlannelError::NothingSaved {
                container_id: "c1".into(),
                data_dir: "/var/lib/cni/flannel".into()
            }),
            (
                3,
                "flannel: no delegate config saved for container c1 in /var/lib/cni/flannel".into()
            )
        );
        let io = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let (code, msg) = cni(FlannelError::Save {
            path: "/d/c1".into(),
            source: io(),
        });
        assert_eq!(code, 5);
        assert!(
            msg.starts_with("flannel: failed to save the delegate config /d/c1: "),
            "{msg}"
        );
        assert_eq!(
            cni(FlannelError::Read {
                path: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(FlannelError::Remove {
                path: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(FlannelError::List {
                dir: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(FlannelError::DelegateName),
            (
                999,
                "'delegate' dictionary must not have 'name' field, it'll be set by flannel".into()
            )
        );
        assert_eq!(cni(FlannelError::NoResult).0, 999);
        assert_eq!(
            cni(FlannelError::Delegated(CniError::invalid_config(
                "bad bridge"
            ))),
            (7, "bad bridge".into())
        );
    }
}
