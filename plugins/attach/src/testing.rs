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

/// An IPAM plugin for in-process tests, written into `dir`: it answers ADD with `result` and
/// appends `<verb> <container> <ifname>` to `<dir>/calls`. Returns the directory for CNI_PATH.
pub fn fake_ipam(dir: &std::path::Path, result: &Value) -> String {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho \"$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME\" >> {log}\n\
         if [ \"$CNI_COMMAND\" = ADD ]; then echo '{result}'; fi\n",
        log = dir.join("calls").display(),
    );
    let path = dir.join("fake-ipam");
    std::fs::write(&path, script).expect("write the fake IPAM plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the fake IPAM plugin executable");
    dir.display().to_string()
}

/// The calls the fake IPAM plugin in `dir` received.
pub fn ipam_calls(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The arguments of an ADD of container "ctr1", interface "net1", in `netns`, with the fake
/// IPAM plugin of `ipam_dir` on CNI_PATH.
pub fn cmd_args_in(netns: &std::path::Path, ipam_dir: &str, config: Value) -> CmdArgs {
    CmdArgs {
        container_id: "ctr1".into(),
        netns: netns.display().to_string(),
        ifname: "net1".into(),
        path: vec![ipam_dir.to_string()],
        network_name: "n".into(),
        ..cmd_args(config, "")
    }
}
