//! The data plane on the kernel: the table `inet ferrocni_policy` in the agent's own network
//! namespace, written through netlink by `netpolicy-nft`. The netlink socket is opened once, at
//! start, so a refusal (no nf_tables, no CAP_NET_ADMIN) stops the agent before it claims to
//! enforce anything.

use netkit::netfilter::nf_tables::Socket;
use netpolicy::Plan;
use netpolicy_nft::PolicyTable;

use super::enforce::{Dataplane, Synced};
use crate::error::AgentError;

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
        Ok(KernelPlane {
            socket,
            table: PolicyTable::new(),
        })
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
