//! `flannel`: the CNI meta-plugin of kube-flannel deployments, compatible with
//! flannel-io/cni-plugin. It reads flannel's subnet.env (written by flanneld or
//! ferrocni-agent), builds a bridge + host-local delegate config from it, saves that config
//! per container and delegates ADD/CHECK/DEL/GC/STATUS to it.

use flannel::{config, delegate, error, scratch, subnet_env};

use libcni::invoke;
use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;
use serde_json::{Map, Value};

use crate::config::NetConf;
use crate::error::FlannelError;
use crate::subnet_env::SubnetEnv;

const ABOUT: &str = "CNI flannel meta-plugin (ferrocni): delegates to bridge/host-local built from flannel's subnet.env";

struct FlannelPlugin;

/// subnet.env is written by the node's daemon; until it is, the node is not ready: "try
/// again later" (11) for ADD, "not available" (50) for STATUS.
fn load_env(conf: &NetConf) -> Result<SubnetEnv, FlannelError> {
    SubnetEnv::load(&conf.subnet_file).map_err(FlannelError::SubnetEnv)
}

/// The delegate config for this node's current subnet.env.
fn current_delegate(conf: &NetConf) -> Result<Map<String, Value>, FlannelError> {
    let env = load_env(conf)?;
    delegate::build(conf, &env)
}

fn call(delegate: &Map<String, Value>, command: &str) -> Result<Option<Value>, FlannelError> {
    Ok(invoke::delegate(
        delegate::plugin_type(delegate),
        command,
        &delegate::to_bytes(delegate),
    )?)
}

fn add(args: &CmdArgs) -> Result<CniResult, FlannelError> {
    let conf = NetConf::load(args)?;
    let delegate = current_delegate(&conf)?;
    let bytes = delegate::to_bytes(&delegate);
    // Saved before the delegate runs: a half-done ADD is undone by a DEL that needs it.
    scratch::save(&conf.data_dir, &args.container_id, &args.ifname, &bytes)?;
    let result = invoke::delegate(delegate::plugin_type(&delegate), "ADD", &bytes)?
        .ok_or(FlannelError::NoResult)?;
    Ok(CniResult::from_value(&result)?)
}

/// Deletes with the config saved at ADD, so subnet.env is not needed. Nothing saved:
/// nothing to do. The saved config is removed once the delegate succeeded (flannel
/// removes it even when the delegate fails, which leaves a retried DEL nothing to work with).
fn del(args: &CmdArgs) -> Result<(), FlannelError> {
    let conf = NetConf::load(args)?;
    let Some((found, bytes)) =
        scratch::load(&conf.data_dir, &conf.name, &args.container_id, &args.ifname)?
    else {
        return Ok(());
    };
    let file = found.path();
    let Some(saved) = scratch::parse(&bytes) else {
        // As flannel: the interface stays on the bridge until the node reboots.
        eprintln!(
            "flannel: failed to parse the saved netconf {}; nothing deleted",
            file.display()
        );
        return Ok(());
    };
    // The attachment's own file is undone whatever network this DEL names (a container holds
    // one interface of a name), as flannel's plugin does; flannel's container file serves
    // another interface only when it is of this network (`scratch::load`).
    invoke::delegate(delegate::plugin_type(&saved), "DEL", &bytes)?;
    match &found {
        scratch::Found::Own(file) => scratch::remove_at(file),
        scratch::Found::Container(_) => Ok(()),
    }
}

/// flannel's plugin checks nothing; this one hands the saved config and the runtime's
/// prevResult to the delegate's CHECK.
fn check(args: &CmdArgs) -> Result<(), FlannelError> {
    let conf = NetConf::load(args)?;
    let saved = scratch::load(&conf.data_dir, &conf.name, &args.container_id, &args.ifname)?
        .and_then(|(_, b)| scratch::parse(&b))
        .ok_or_else(|| FlannelError::NothingSaved {
            container_id: args.container_id.clone(),
            data_dir: conf.data_dir.clone(),
        })?;
    let mut check = saved;
    if let Some(prev) = libcni::gojson::get(&args.config, "prevResult") {
        check.insert("prevResult".into(), prev.clone());
    }
    call(&check, "CHECK").map(|_| ())
}

/// Runs the delegate's GC (it releases addresses of attachments no longer valid) and
/// drops this network's saved configs of containers with no valid attachment.
fn gc(args: &CmdArgs) -> Result<(), FlannelError> {
    let conf = NetConf::load(args)?;
    let valid = args.valid_attachments()?;
    let saved = scratch::list(&conf.data_dir, &conf.name)?;
    // The current delegate, else (subnet.env gone) the last one saved.
    let delegate = match current_delegate(&conf) {
        Ok(d) => Some(d),
        Err(_) => saved.last().map(|s| s.config.clone()),
    };
    if let Some(mut d) = delegate {
        d.insert("cniVersion".into(), Value::String(args.cni_version.clone()));
        if let Some(list) = libcni::gojson::get(&args.config, "cni.dev/valid-attachments") {
            d.insert("cni.dev/valid-attachments".into(), list.clone());
        }
        call(&d, "GC")?;
    }
    // flannel's container file (any interface) goes with the container's last valid
    // attachment; a file of one interface with that attachment.
    for s in saved.iter().filter(|s| !s.is_valid(&valid)) {
        scratch::remove_at(&s.path)?;
    }
    Ok(())
}

/// Not ready (50) until subnet.env is complete; then whatever the delegate says.
fn status(args: &CmdArgs) -> Result<(), FlannelError> {
    let conf = NetConf::load(args)?;
    let env = load_env(&conf).map_err(|e| FlannelError::NotReady(Box::new(e)))?;
    let mut d = delegate::build(&conf, &env)?;
    d.insert("cniVersion".into(), Value::String(args.cni_version.clone()));
    call(&d, "STATUS").map(|_| ())
}

impl Plugin for FlannelPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(add(args)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(del(args)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(args)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(gc(args)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(status(args)?)
    }
}

fn main() {
    skel::run(&FlannelPlugin, ABOUT)
}
