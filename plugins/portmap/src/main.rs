//! `portmap`: a chained CNI plugin forwarding host ports to the container (DNAT), with
//! hairpin and localhost masquerading, on iptables or nftables.

mod config;
mod error;
mod iptables_backend;
mod localnet;
mod nftables_backend;

use ipnetwork::IpNetwork;
use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;
use netkit::netfilter::host;
use netkit::netfilter::iptables::{Family, Iptables};

use crate::config::{Backend, PortMapConf};
use crate::error::PortmapError;

struct PortMap;

/// The configured backend, else the one implied by backend-specific options, else nftables
/// when the kernel has nf_tables and the network has no iptables port mappings, else iptables.
fn choose_backend(conf: &PortMapConf, network: &str) -> Result<Backend, PortmapError> {
    if let Some(b) = conf.backend {
        return Ok(b);
    }
    if conf.external_set_mark_chain.is_some() {
        return Ok(Backend::Iptables);
    }
    if let Some(b) = conf.backend_from_conditions() {
        return Ok(b);
    }
    // nftables over netlink, unless this network already forwards ports with iptables
    // (ours or the reference's, e.g. before an upgrade): its pods stay on iptables.
    if host::has_nf_tables() && !iptables_backend::has_state(network) {
        return Ok(Backend::Nftables);
    }
    // Without nf_tables the rules go to the legacy tables (iptables-legacy).
    if Iptables::for_table(Family::V4, "nat").is_usable() {
        return Ok(Backend::Iptables);
    }
    if host::has_nf_tables() {
        return Ok(Backend::Nftables);
    }
    Err(PortmapError::NoBackend)
}

/// prevResult's container addresses; `missing` is the error when there is no prevResult
/// (the reference words it differently for ADD and CHECK).
fn addresses(
    args: &CmdArgs,
    missing: PortmapError,
) -> Result<(CniResult, Vec<IpNetwork>), PortmapError> {
    let result = args.prev_result()?.ok_or(missing)?;
    let (v4, v6) = config::container_addresses(&result, &args.ifname);
    Ok((result, v4.into_iter().chain(v6).collect()))
}

fn forward(
    backend: Backend,
    conf: &PortMapConf,
    args: &CmdArgs,
    container: IpNetwork,
) -> Result<(), PortmapError> {
    match backend {
        Backend::Iptables => {
            iptables_backend::forward_ports(conf, &args.network_name, &args.container_id, container)
        }
        Backend::Nftables => nftables_backend::forward_ports(conf, &args.container_id, container),
    }
}

fn unforward(backend: Backend, args: &CmdArgs) -> Result<(), PortmapError> {
    match backend {
        Backend::Iptables => {
            iptables_backend::unforward_ports(&args.network_name, &args.container_id)
        }
        Backend::Nftables => nftables_backend::unforward_ports(&args.container_id),
    }
}

/// ADD and DEL report a bad config as the reference does: "failed to parse config: ...".
fn parse_for_add_or_del(args: &CmdArgs) -> Result<PortMapConf, PortmapError> {
    config::parse(&args.config).map_err(|e| PortmapError::ParseConfig(Box::new(e)))
}

fn add(args: &CmdArgs) -> Result<CniResult, PortmapError> {
    let conf = parse_for_add_or_del(args)?;
    let (result, containers) = addresses(args, PortmapError::NotChained)?;
    if conf.mappings.is_empty() || containers.is_empty() {
        return Ok(result);
    }
    let backend = choose_backend(&conf, &args.network_name)?;
    conf.check_backend_options(Some(backend))?;
    for container in &containers {
        let step = (|| {
            if conf.snat {
                localnet::enable_route_localnet(container.ip())?;
            }
            forward(backend, &conf, args, *container)
        })();
        if let Err(e) = step {
            // Leave nothing half-installed behind.
            if let Err(undo) = unforward(backend, args) {
                eprintln!("portmap: rollback failed: {undo}");
            }
            return Err(e);
        }
    }
    let families: Vec<bool> = containers.iter().map(IpNetwork::is_ipv6).collect();
    localnet::flush_udp_conntrack(&conf.mappings, &families);
    Ok(result)
}

/// Removes this container's rules. Unlike the reference this does not depend on the
/// runtime re-sending portMappings: the objects are found by (network, container ID).
fn del(args: &CmdArgs) -> Result<(), PortmapError> {
    let conf = parse_for_add_or_del(args)?;
    let backend = match conf.backend {
        Some(b) => b,
        None if conf.backend_from_conditions().is_none() => {
            // Nothing says which backend ADD used: clean whatever exists (cheap when
            // nothing does: a few netlink lookups, no process).
            let ipt = iptables_backend::unforward_ports(&args.network_name, &args.container_id);
            let nft = nftables_backend::unforward_ports(&args.container_id);
            return match (ipt, nft) {
                (Err(e), Err(_)) => Err(e),
                (Ok(()), Err(e)) if host::has_nf_tables() => Err(e),
                (Err(e), Ok(())) if Iptables::new(Family::V4).is_usable() => Err(e),
                _ => Ok(()),
            };
        }
        None => choose_backend(&conf, &args.network_name)?,
    };
    unforward(backend, args)
}

fn check(args: &CmdArgs) -> Result<(), PortmapError> {
    let conf = config::parse(&args.config)?;
    let (_, containers) = addresses(args, PortmapError::PrevResultMissing)?;
    if conf.mappings.is_empty() {
        return Ok(());
    }
    let backend = choose_backend(&conf, &args.network_name)?;
    for container in containers {
        match backend {
            Backend::Iptables => iptables_backend::check_ports(
                &conf,
                &args.network_name,
                &args.container_id,
                container,
            )?,
            Backend::Nftables => {
                nftables_backend::check_ports(&conf, &args.container_id, container)?
            }
        }
    }
    Ok(())
}

/// Ready when the tool of the configured backend (either, when unset) is installed, and
/// `nft` when the conditions need it.
fn status(args: &CmdArgs) -> Result<(), PortmapError> {
    let conf = config::parse(&args.config)?;
    let have = |t: &str| netkit::netfilter::exec::find_tool(t).is_some();
    let iptables = || Iptables::for_table(Family::V4, "nat").is_installed();
    let ready = match conf.backend.or_else(|| conf.backend_from_conditions()) {
        Some(Backend::Iptables) => iptables(),
        Some(Backend::Nftables) => host::has_nf_tables(),
        None => host::has_nf_tables() || iptables(),
    };
    if !ready {
        return Err(PortmapError::BackendUnavailable);
    }
    if nftables_backend::needs_nft_tool(&conf) && !have("nft") {
        return Err(PortmapError::NftToolMissing);
    }
    Ok(())
}

/// Removes the iptables port mappings of containers of this network that are no longer
/// valid attachments. (nftables rules carry only the container ID, not the network, so
/// they cannot be attributed to a network and are left to DEL.)
fn gc(args: &CmdArgs) -> Result<(), PortmapError> {
    let valid: Vec<String> = args
        .valid_attachments()?
        .into_iter()
        .map(|(cid, _)| cid)
        .collect();
    iptables_backend::gc(&args.network_name, &valid)
}

impl Plugin for PortMap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add(args).map_err(Into::into)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del(args).map_err(Into::into)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check(args).map_err(Into::into)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        status(args).map_err(Into::into)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        gc(args).map_err(Into::into)
    }
}

fn main() {
    skel::run(&PortMap, "CNI portmap plugin (ferrocni)");
}
