//! The CNI verbs of host-local on the skeleton: what the binary runs, and what a plugin that
//! links host-local runs in-process for the same build (`libcni::linked`).

use libcni::linked::{BuildStamp, CallEnv, LinkedPlugin};
use libcni::result::{Dns, IpConfig, Route};
use libcni::skel::{self, CmdArgs, Outcome, Plugin};
use libcni::{CniError, CniResult};

use crate::config::{self, IpamConfig};
use crate::{allocator, dns};

/// The about text printed without CNI_COMMAND.
pub const ABOUT: &str = "CNI host-local plugin (ferrocni)";

/// The hash of the sources this build is made from (build.rs).
pub const STAMP: BuildStamp = include!(concat!(env!("OUT_DIR"), "/stamp.rs"));

/// host-local linked into another plugin: it answers for the host-local binary on CNI_PATH
/// when that binary carries [`STAMP`].
pub const LINKED: LinkedPlugin = LinkedPlugin {
    plugin_type: "host-local",
    stamp: STAMP,
    dispatch: dispatch_linked,
};

fn dispatch_linked(env: &CallEnv<'_>, stdin: &[u8]) -> Outcome {
    skel::dispatch(&HostLocal, env, &mut &stdin[..])
}

/// The plugin's verbs.
pub struct HostLocal;

/// Loads the configuration, taking the requested IP from CNI_ARGS (`IP=`; other keys are an
/// error unless `IgnoreUnknown` is set, as the reference). Public for the fuzz targets.
pub fn load(args: &CmdArgs) -> Result<IpamConfig, CniError> {
    let pairs = args.cni_args()?;
    libcni::args::check_known(&pairs, &["IP"])?;
    let env_ip = libcni::args::get(&pairs, "IP");
    let mut cfg = config::load(&args.config, env_ip).map_err(CniError::from)?;
    // The skeleton already validated the name; use its copy so both agree.
    cfg.name = args.network_name.clone();
    Ok(cfg)
}

impl Plugin for HostLocal {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let cfg = load(args)?;
        let dns = match &cfg.resolv_conf {
            Some(path) => dns::read_resolv_conf(path).map_err(CniError::from)?,
            None => Default::default(),
        };
        let allocations =
            allocator::add(&cfg, &args.container_id, &args.ifname).map_err(CniError::from)?;
        let mut result = CniResult::new();
        result.ips = allocations
            .into_iter()
            .map(|a| IpConfig {
                interface: None,
                address: a.address,
                gateway: Some(a.gateway),
            })
            .collect();
        result.routes = cfg.routes.iter().map(|r| Route::new(r.dst, r.gw)).collect();
        result.dns = Dns {
            nameservers: dns.nameservers,
            domain: dns.domain,
            search: dns.search,
            options: dns.options,
        };
        Ok(result)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let cfg = load(args)?;
        allocator::del(&cfg, &args.container_id, &args.ifname).map_err(CniError::from)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let cfg = load(args)?;
        let prev: Vec<std::net::IpAddr> = args
            .prev_result()?
            .map(|r| r.ips.iter().map(|ip| ip.address.ip()).collect())
            .unwrap_or_default();
        allocator::check(&cfg, &args.container_id, &args.ifname, &prev).map_err(CniError::from)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let cfg = load(args)?;
        let valid = args.valid_attachments()?;
        allocator::gc(&cfg, &valid).map_err(CniError::from)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let cfg = load(args)?;
        allocator::status(&cfg).map_err(CniError::from)
    }
}
