//! The plugin's errors and their CNI codes.

use libcni::error::CniError;

use crate::config::ConfigError;
use crate::shaping::ShapeError;

#[derive(Debug, thiserror::Error)]
pub enum BandwidthError {
    /// Bad limits or latency (code 999, as upstream).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Limits the kernel cannot represent (code 999).
    #[error("invalid {direction} limit: {source}")]
    Shape {
        direction: &'static str,
        source: ShapeError,
    },
    /// Called outside a chain, or the chain is not veth-based (code 999, as upstream).
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The CNI version is older than chaining (code 1).
    #[error("incompatible CNI versions")]
    Version { config: String },
    /// A kernel operation failed; the netkit error says what and on which object (code 999).
    #[error("{0}")]
    Kernel(#[from] netkit::Error),
    /// CHECK found state that differs from the configuration (code 999).
    #[error("bandwidth check failed: {}", .0.join("; "))]
    Mismatch(Vec<String>),
    /// GC could not remove some stale IFBs (code 999).
    #[error("bandwidth GC failed: {}", .0.join("; "))]
    Gc(Vec<String>),
}

/// Why the host end of the container's veth cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// ADD without prevResult (upstream's ADD wording).
    #[error("must be called as chained plugin")]
    NotChained,
    /// CHECK without prevResult (upstream's CHECK wording).
    #[error("must be called as a chained plugin")]
    NotChainedCheck,
    #[error("no interfaces provided in prevResult")]
    NoInterfaces,
    #[error("container interface {0} has no veth peer: bandwidth supports veth-based chains only")]
    NoVethPeer(String),
    #[error("veth peer with index {0} is not in host ns")]
    PeerNotInHost(u32),
    /// The index names an unrelated link here (the peer lives in a third netns).
    #[error("veth peer with index {index} is not in host ns (link {host_link} there is not the peer of {ifname})")]
    NotThePeer {
        index: u32,
        host_link: String,
        ifname: String,
    },
    #[error(
        "no veth peer of container interface found in host ns: {0} is not in prevResult.interfaces"
    )]
    NotListed(String),
}

impl From<BandwidthError> for CniError {
    fn from(e: BandwidthError) -> CniError {
        let msg = e.to_string();
        match e {
            // Plain errors upstream, which its skeleton reports with code 999.
            BandwidthError::Config(_) | BandwidthError::Shape { .. } | BandwidthError::Chain(_) => {
                CniError::internal(msg)
            }
            BandwidthError::Version { config } => {
                CniError::incompatible_version(msg).with_details(format!(
                    "config is {config:?}, plugin supports {}",
                    libcni::error::go_quoted_list(crate::SUPPORTED_VERSIONS)
                ))
            }
            BandwidthError::Kernel(_) | BandwidthError::Mismatch(_) | BandwidthError::Gc(_) => {
                CniError::internal(msg)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: BandwidthError) -> CniError {
        CniError::from(e)
    }

    #[test]
    fn codes_and_texts() {
        let e = cni(BandwidthError::Config(ConfigError::RateWithoutBurst {
            direction: "ingress",
        }));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "if rate is set, burst must also be set")
        );
        let e = cni(BandwidthError::Shape {
            direction: "egress",
            source: ShapeError::RateTooLow { rate_bits: 1 },
        });
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                999,
                "invalid egress limit: rate 1 bit/s is below 8 bit/s (one byte per second)"
            )
        );
        let e = cni(BandwidthError::Chain(ChainError::NotChained));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "must be called as chained plugin")
        );
        let e = cni(BandwidthError::Chain(ChainError::NotThePeer {
            index: 7,
            host_link: "veth1".into(),
            ifname: "eth0".into(),
        }));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                999,
                "veth peer with index 7 is not in host ns (link veth1 there is not the peer of eth0)"
            )
        );
        let e = cni(BandwidthError::Version {
            config: "0.2.0".into(),
        });
        assert_eq!((e.code, e.msg.as_str()), (1, "incompatible CNI versions"));
        assert!(
            e.details
                .starts_with("config is \"0.2.0\", plugin supports ["),
            "{}",
            e.details
        );
        let e = cni(BandwidthError::Kernel(netkit::Error::invalid(
            "failed to find link \"eth0\"",
            "gone",
        )));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "failed to find link \"eth0\": gone")
        );
        let e = cni(BandwidthError::Mismatch(vec!["a".into(), "b".into()]));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "bandwidth check failed: a; b")
        );
        let e = cni(BandwidthError::Gc(vec!["x".into()]));
        assert_eq!((e.code, e.msg.as_str()), (999, "bandwidth GC failed: x"));
    }
}
