//! host-local IPAM plugin binary: wires the library's verbs to the CNI skeleton.

use host_local::config::{self, IpamConfig};
use host_local::{allocator, dns};
use libcni::result::{Dns, IpConfig, Route};
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::{CniError, CniResult};

struct HostLocal;

/// Loads the configuration, taking the requested IP from CNI_ARGS (`IP=`; other keys are an
/// error unless `IgnoreUnknown` is set, as the reference).
fn load(args: &CmdArgs) -> Result<IpamConfig, CniError> {
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

fn main() {
    skel::run(&HostLocal, "CNI host-local plugin (ferrocni)");
}
