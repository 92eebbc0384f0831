//! The files a pass leaves for the CNI plugins: flannel's `subnet.env`, and the node's conflist
//! rendered from the operator's template (`--cni-conf-template`). Both are written atomically
//! and only when their text changes.

use std::net::Ipv6Addr;

use crate::backend;
use crate::error::AgentError;
use crate::log;
use crate::node::subnet_env::SubnetEnv;
use crate::node::template::{self, Ipv6Values, TemplateValues};
use crate::ops::files::write_atomic;
use crate::options::Options;
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;

/// What the node's files say: the lease, the pods' MTU and the backend's template values.
pub struct NodeState<'a> {
    pub net: &'a NetConfig,
    pub own: &'a SubnetKey,
    pub attrs: &'a LeaseAttrs,
    pub public_ipv6: Option<Ipv6Addr>,
    pub mtu: u32,
    pub backend: backend::TemplateValues,
}

/// Writes subnet.env and, with a template, the conflist.
pub fn write(opts: &Options, state: &NodeState<'_>) -> Result<(), AgentError> {
    let ipv6 = match (&state.net.ipv6, state.own.v6) {
        (Some(v6), Some(sn6)) => Some((v6.network, sn6)),
        _ => None,
    };
    let env = SubnetEnv {
        network: state.net.network,
        subnet: state.own.v4,
        ipv6,
        mtu: state.mtu,
        ipmasq: opts.ip_masq,
    };
    if write_atomic(&opts.subnet_file, env.render().as_bytes())? {
        log!("wrote {}", opts.subnet_file.display());
    }
    let Some(tpl_path) = &opts.cni_conf_template else {
        return Ok(());
    };
    let text = std::fs::read_to_string(tpl_path)
        .map_err(|e| AgentError::io("reading template", tpl_path, e))?;
    let values = TemplateValues {
        subnet: state.own.v4,
        network: state.net.network,
        mtu: state.mtu,
        public_ip: state.attrs.public_ip,
        subnet_file: opts.subnet_file.display().to_string(),
        backend: state.backend.clone(),
        ipv6: match (ipv6, state.public_ipv6) {
            (Some((network, subnet)), Some(public_ip)) => Some(Ipv6Values {
                subnet,
                network,
                public_ip,
            }),
            _ => None,
        },
    };
    let rendered = template::render(&text, &values).map_err(|msg| AgentError::Template {
        path: tpl_path.clone(),
        msg,
    })?;
    let name = tpl_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let out = opts.cni_conf_dir.join(template::output_name(&name));
    if write_atomic(&out, rendered.as_bytes())? {
        log!("wrote {}", out.display());
    }
    Ok(())
}
