//! ADD: program the shaping, rolling back whatever was created when a later step fails.
//!
//! Order matters for traffic: the IFB and its TBF exist before the redirect filter sends
//! anything to them, so egress is never briefly unshaped or black-holed.

use libcni::result::{CniResult, Interface};
use libcni::skel::CmdArgs;
use netkit::packet_route::tc::TcHandle;
use netkit::tc::{Tbf, INGRESS_HANDLE};
use netkit::{Link, Socket};

use crate::error::BandwidthError;
use crate::ifb;

/// `1:` — the handle of both TBF root qdiscs, as the reference uses.
pub const TBF_HANDLE: TcHandle = TcHandle { major: 1, minor: 0 };
/// `1:1` — the u32 filter's flowid, as the reference sets it.
pub const FILTER_CLASSID: TcHandle = TcHandle { major: 1, minor: 1 };
/// The u32 filter's priority, as the reference uses.
pub const FILTER_PRIORITY: u16 = 1;
/// The IFB's txqueuelen: the reference creates it with 0 (its TBF has its own limit).
pub const IFB_TXQUEUELEN: u32 = 0;

/// What the plan asks for.
pub struct Plan {
    pub ingress: Option<Tbf>,
    pub egress: Option<Tbf>,
    pub ifb_name: String,
    /// Names the attachment on the IFB, for GC.
    pub ifb_alias: String,
}

impl Plan {
    /// The plan for the attachment `args`.
    pub fn new(ingress: Option<Tbf>, egress: Option<Tbf>, args: &CmdArgs) -> Plan {
        Plan {
            ingress,
            egress,
            ifb_name: ifb::ifb_name(&args.network_name, &args.container_id),
            ifb_alias: ifb::ifb_alias(&args.network_name, &args.container_id, &args.ifname),
        }
    }
}

/// Objects created so far, undone in reverse order on failure.
#[derive(Default)]
struct Created {
    host_tbf: Option<u32>,
    ifb: Option<String>,
    ingress_qdisc: Option<u32>,
}

impl Created {
    fn roll_back(self, sock: &mut Socket) {
        // Deleting the ingress qdisc also deletes its filter.
        if let Some(idx) = self.ingress_qdisc {
            if let Err(e) = sock.delete_qdisc(idx, TcHandle::INGRESS, INGRESS_HANDLE) {
                eprintln!("bandwidth: rollback: {e}");
            }
        }
        // Deleting the IFB also deletes its TBF.
        if let Some(name) = self.ifb {
            if let Err(e) = sock.delete_link_by_name(&name) {
                eprintln!("bandwidth: rollback: {e}");
            }
        }
        if let Some(idx) = self.host_tbf {
            if let Err(e) = sock.delete_qdisc(idx, TcHandle::ROOT, TBF_HANDLE) {
                eprintln!("bandwidth: rollback: {e}");
            }
        }
    }
}

/// Applies `plan` to `host_veth` and returns prevResult plus the IFB (when egress is shaped).
pub fn apply(
    sock: &mut Socket,
    host_veth: &Link,
    plan: &Plan,
    mut result: CniResult,
) -> Result<CniResult, BandwidthError> {
    let mut created = Created::default();
    match apply_steps(sock, host_veth, plan, &mut created) {
        Ok(Some(ifb)) => {
            result.interfaces.push(Interface {
                name: ifb.name.clone(),
                mac: ifb.mac_string(),
                ..Interface::default()
            });
            Ok(result)
        }
        Ok(None) => Ok(result),
        Err(e) => {
            created.roll_back(sock);
            Err(e)
        }
    }
}

fn apply_steps(
    sock: &mut Socket,
    veth: &Link,
    plan: &Plan,
    created: &mut Created,
) -> Result<Option<Link>, BandwidthError> {
    if let Some(tbf) = &plan.ingress {
        sock.add_tbf(veth.index, TcHandle::ROOT, TBF_HANDLE, tbf)?;
        created.host_tbf = Some(veth.index);
    }
    let Some(tbf) = &plan.egress else {
        return Ok(None);
    };
    let ifb = sock.create_ifb(&plan.ifb_name, veth.mtu, IFB_TXQUEUELEN)?;
    created.ifb = Some(ifb.name.clone());
    sock.set_link_alias(ifb.index, &plan.ifb_alias)?;
    sock.add_tbf(ifb.index, TcHandle::ROOT, TBF_HANDLE, tbf)?;
    sock.add_ingress_qdisc(veth.index)?;
    created.ingress_qdisc = Some(veth.index);
    sock.add_u32_redirect(
        veth.index,
        INGRESS_HANDLE,
        FILTER_PRIORITY,
        FILTER_CLASSID,
        ifb.index,
    )?;
    Ok(Some(ifb))
}
