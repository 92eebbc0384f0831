//! flannel's `host-gw` backend: no encapsulation at all. Each peer's pod subnet is routed via
//! the peer's own address on the underlay (`<subnet> via <PublicIP> dev <underlay>`), so every
//! node must be on one L2 segment with the others. Pods get the underlay's full MTU.
//!
//! The routes are the `overlay` crate's reconcile in its `host-gw` mode (the seam in
//! [`overlay`](crate::backend::overlay)), which also removes a VXLAN device a previous
//! `vxlan` backend left. flannel's host-gw has no options. Lease:
//! `{"PublicIP":…,"PublicIPv6":…,"BackendType":"host-gw"}`; on a dual-stack network IPv6 pod
//! subnets are routed via the peers' `PublicIPv6`.

mod error;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Deserialize;

use crate::backend::overlay::{self, IpFamily, OverlayParams, Overlays};
use crate::backend::underlay::Underlay;
use crate::backend::{
    Backend, BackendError, BackendObject, DataPlane, Network, Node, Pass, Peer, Refusal,
    Registration, TemplateValues,
};
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
pub use error::HostGwError;

pub const REGISTRATION: Registration = Registration {
    names: &["host-gw"],
    description: "routes via each peer's address, no encapsulation (nodes on one L2 segment)",
    needs: &[],
    flags: overlay::FLAGS,
    parse,
};

/// The `BackendType` of host-gw leases.
const TYPE: &str = "host-gw";

/// The `host-gw` backend (flannel gives it no options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGw;

// flanneld decodes the Backend object into an empty struct: any other key is ignored.
#[derive(Deserialize)]
struct RawHostGw {}

fn parse(map: &BackendObject, _net: &Network) -> Result<Box<dyn Backend>, String> {
    let _: RawHostGw = libcni::gojson::from_map(map).map_err(|e| format!("\"Backend\": {e}"))?;
    Ok(Box::new(HostGw))
}

impl Backend for HostGw {
    fn type_name(&self) -> &'static str {
        TYPE
    }

    fn describe(&self) -> String {
        "host-gw (routes via each peer's address, no encapsulation)".into()
    }

    fn mtu_overhead(&self) -> u32 {
        0
    }

    fn check_peer(&self, attrs: &LeaseAttrs) -> Result<(), Refusal> {
        if attrs.backend_type == TYPE {
            Ok(())
        } else {
            Err(Refusal::OtherBackend)
        }
    }

    fn start(&self, node: &Node<'_>) -> Result<Box<dyn DataPlane>, BackendError> {
        // VNI 1: the device a `vxlan` backend would have left is flannel.1, removed here.
        let params = OverlayParams {
            mode: "host-gw",
            vni: 1,
            port: crate::backend::vxlan::DEFAULT_PORT,
            device_mtu: None,
        };
        Ok(Box::new(HostGwPlane {
            public_ip: node.public_ip,
            public_ipv6: node.public_ipv6,
            iface: node.iface(),
            overlays: Overlays::new(node, params.clone(), params),
        }))
    }
}

/// The host-gw backend on this node.
struct HostGwPlane {
    public_ip: Ipv4Addr,
    public_ipv6: Option<Ipv6Addr>,
    iface: Option<String>,
    overlays: Overlays,
}

impl DataPlane for HostGwPlane {
    fn lease_attrs(&self, key: &SubnetKey) -> LeaseAttrs {
        LeaseAttrs {
            public_ip: self.public_ip,
            public_ipv6: key.v6.and(self.public_ipv6),
            backend_type: TYPE.into(),
            backend_data: None,
            backend_v6_data: None,
        }
    }

    fn reconcile(&mut self, own: &SubnetKey, peers: &[Peer]) -> Result<Pass, BackendError> {
        // As flanneld: the routes lead to the peers' PublicIP, which only works when it is the
        // address on the underlay (no NAT between nodes).
        let underlay =
            Underlay::find(self.iface.as_deref(), self.public_ip).map_err(HostGwError::Underlay)?;
        if !underlay.has_public_ip {
            return Err(HostGwError::BehindNat {
                public_ip: self.public_ip,
                iface: underlay.name,
            }
            .into());
        }
        let mut log = Vec::new();
        self.overlays
            .sync(
                own,
                peers,
                |family, p| match family {
                    IpFamily::V4 => Some((IpAddr::V4(p.attrs.public_ip), None)),
                    IpFamily::V6 => Some((IpAddr::V6(p.attrs.public_ipv6?), None)),
                },
                &mut log,
            )
            .map_err(HostGwError::from)?;
        Ok(Pass {
            mtu: underlay.mtu,
            programmed: self.overlays.programmed(),
            log,
            lease_attrs: None,
        })
    }

    fn template_values(&self) -> TemplateValues {
        TemplateValues {
            mode: "host-gw".into(),
            peers_file: self.overlays.peers_file(IpFamily::V4),
            ipv6_peers_file: self.overlays.peers_file(IpFamily::V6),
            ..TemplateValues::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::registry::parse_config;

    #[test]
    fn config_and_lease() {
        let (_, backend) = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw","Whatever":1}}"#,
        )
        .unwrap();
        assert_eq!(backend.type_name(), "host-gw");
        assert_eq!(backend.mtu_overhead(), 0);
        let plane = HostGwPlane {
            public_ip: "192.168.1.5".parse().unwrap(),
            public_ipv6: None,
            iface: None,
            overlays: Overlays::empty(),
        };
        let key = SubnetKey::parse("10.244.5.0-24").unwrap();
        assert_eq!(
            plane.lease_attrs(&key).to_json(),
            r#"{"PublicIP":"192.168.1.5","PublicIPv6":null,"BackendType":"host-gw"}"#
        );
        let vxlan =
            LeaseAttrs::parse(br#"{"PublicIP":"192.168.1.6","BackendType":"vxlan"}"#).unwrap();
        assert_eq!(backend.check_peer(&vxlan), Err(Refusal::OtherBackend));
    }
}
