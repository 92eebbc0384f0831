//! Test helpers for the plugins' unit tests.

use libcni::skel::{CmdArgs, Command};
use serde_json::Value;

/// The arguments of an ADD for `config` (container "c", netns unset, ifname eth0, network
/// "net") with `cni_args` as CNI_ARGS.
pub fn cmd_args(config: Value, cni_args: &str) -> CmdArgs {
    CmdArgs {
        command: Command::Add,
        container_id: "c".into(),
        netns: String::new(),
        ifname: "eth0".into(),
        args: cni_args.into(),
        path: Vec::new(),
        stdin: config.to_string().into_bytes(),
        config: config.as_object().cloned().unwrap_or_default(),
        cni_version: "1.0.0".into(),
        network_name: "net".into(),
    }
}
