//! `ferrocni-policy`: a chained plugin for nodes whose ferrocni-agent enforces NetworkPolicies
//! (`--network-policy`). At ADD it tells the agent which addresses the pod got (from
//! prevResult) and returns prevResult once the agent's table covers them, so a pod some
//! policy isolates never sends or receives a packet before its rules are in place. Outside
//! Kubernetes (no `K8S_POD_NAMESPACE`/`K8S_POD_NAME` in CNI_ARGS), and on a node whose agent
//! does not enforce policy (no socket), it passes prevResult on; an agent that is down (its
//! socket refuses) or that cannot cover the pod fails the ADD with "try again later".
//! DEL and CHECK have nothing to do: the agent forgets a pod when the API deletes it.
//! STATUS says whether the agent's socket answers.

use ferrocni_policy::{ask, config, error::PolicyPluginError};

use std::net::IpAddr;

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;

struct PolicyPlugin;

fn add(args: &CmdArgs) -> Result<CniResult, PolicyPluginError> {
    let conf = config::parse(args)?;
    let prev = args.prev_result()?.ok_or(PolicyPluginError::NotChained)?;
    let Some((namespace, name)) = config::pod_of(&args.cni_args()?) else {
        return Ok(prev);
    };
    let ips: Vec<IpAddr> = prev.ips.iter().map(|c| c.address.ip()).collect();
    if ips.is_empty() {
        return Ok(prev);
    }
    ask::admit(&conf.socket, &namespace, &name, &ips, conf.timeout)?;
    // Covered, or no policy on this node: the chain goes on either way.
    Ok(prev)
}

impl Plugin for PolicyPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add(args).map_err(Into::into)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        config::parse(args)?;
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        config::parse(args)?;
        Ok(())
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::parse(args)?;
        ask::reachable(&conf.socket).map_err(|e| CniError::not_available(e.to_string()))
    }
}

fn main() {
    skel::run(&PolicyPlugin, "CNI ferrocni-policy plugin (ferrocni)");
}
