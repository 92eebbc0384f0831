//! The data plane on the kernel: the table `inet ferrocni_policy` in the agent's own network
//! namespace, written through netlink by `netpolicy-nft`. The netlink socket is opened once, at
//! start, so a refusal (no nf_tables, no CAP_NET_ADMIN) stops the agent before it claims to
//! enforce anything.

use netkit::netfilter::nf_tables::Socket;
use netpolicy::Plan;
use netpolicy_nft::PolicyTable;

use super::enforce::{Dataplane, Synced};
use crate::error::AgentError;
use crate::{log, warn};

pub struct KernelPlane {
    socket: Socket,
    table: PolicyTable,
}

impl KernelPlane {
    pub fn open() -> Result<KernelPlane, AgentError> {
        let socket = Socket::new().map_err(|e| {
            AgentError::Usage(format!(
                "--network-policy: cannot open an nf_tables netlink socket: {e}"
            ))
        })?;
        bridged_traffic_reaches_the_table();
        Ok(KernelPlane {
            socket,
            table: PolicyTable::new(),
        })
    }
}

/// Pods on one bridge (`cni0`) talk through it without routing: their packets reach the inet
/// forward hook, where the table is, only with br_netfilter's `bridge-nf-call-iptables` (and
/// `-ip6tables`) on. Kubernetes nodes have them on already (kubeadm insists); a node without
/// them would enforce policy between nodes but not between pods of one node, so the agent
/// turns them on, and says so.
fn bridged_traffic_reaches_the_table() {
    for family in ["iptables", "ip6tables"] {
        let path = format!("/proc/sys/net/bridge/bridge-nf-call-{family}");
        match std::fs::read_to_string(&path) {
            Ok(v) if v.trim() == "1" => {}
            Ok(_) => match std::fs::write(&path, "1") {
                Ok(()) => {
                    log!("policy: turned {path} on (pods on one bridge go through the table)")
                }
                Err(e) => warn!(
                    "policy: {path} is off and cannot be turned on ({e}): traffic between pods \
                     on one bridge is not filtered"
                ),
            },
            Err(_) => warn!(
                "policy: {path} is missing (br_netfilter not loaded): traffic between pods on \
                 one bridge is not filtered; load br_netfilter"
            ),
        }
    }
}

impl Dataplane for KernelPlane {
    fn sync(&mut self, plan: &Plan) -> Result<Synced, String> {
        let s = self
            .table
            .sync(&mut self.socket, plan)
            .map_err(|e| format!("table inet {}: {e}", netpolicy_nft::TABLE))?;
        Ok(Synced {
            full: s.full,
            messages: s.messages,
            elements_added: s.elements_added,
            elements_removed: s.elements_removed,
            chains_written: s.chains_written,
        })
    }
}
