//! `portmap`: a chained CNI plugin forwarding host ports to the container (DNAT), with
//! hairpin and localhost masquerading, on iptables or nftables.

// `PortmapError` lives in the library: clippy measures an enum of another crate whole (128 bytes
// with its tag), where it measured its largest variant while the enum was local.
#![allow(clippy::result_large_err)]

mod attachment;
mod iptables_backend;
mod localnet;
mod nftables_backend;

use portmap::{config, error};

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;
use netkit::netfilter::host;
use netkit::netfilter::iptables::{Family, Iptables};

use crate::attachment::Attachment;
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

/// The attachment this call is about: every rule is keyed by it.
fn attachment(args: &CmdArgs) -> Attachment<'_> {
    Attachment {
        network: &args.network_name,
        container_id: &args.container_id,
        ifname: &args.ifname,
    }
}

fn forward(
    backend: Backend,
    conf: &PortMapConf,
    args: &CmdArgs,
    addresses: &[IpAddr],
    container: IpNetwork,
) -> Result<(), PortmapError> {
    match backend {
        Backend::Iptables => {
            iptables_backend::forward_ports(conf, &args.network_name, &args.container_id, container)
        }
        Backend::Nftables => {
            nftables_backend::forward_ports(conf, &attachment(args), addresses, container)
        }
    }
}

/// Removes the attachment's mappings; `addresses` are its container addresses when known.
fn unforward(
    backend: Backend,
    args: &CmdArgs,
    addresses: Option<&[IpAddr]>,
) -> Result<(), PortmapError> {
    match backend {
        // The reference's chain is named from (network, container ID): see iptables_backend.
        Backend::Iptables => {
            iptables_backend::unforward_ports(&args.network_name, &args.container_id)
        }
        Backend::Nftables => nftables_backend::unforward_ports(&attachment(args), addresses),
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
    let addresses: Vec<IpAddr> = containers.iter().map(IpNetwork::ip).collect();
    for container in &containers {
        let step = (|| {
            if conf.snat {
                localnet::enable_route_localnet(container.ip())?;
            }
            forward(backend, &conf, args, &addresses, *container)
        })();
        if let Err(e) = step {
            // Leave nothing half-installed behind.
            if let Err(undo) = unforward(backend, args, Some(&addresses)) {
                eprintln!("portmap: rollback failed: {undo}");
            }
            return Err(e);
        }
    }
    let families: Vec<bool> = containers.iter().map(IpNetwork::is_ipv6).collect();
    localnet::flush_udp_conntrack(&conf.mappings, &families);
    Ok(result)
}

/// Removes this attachment's rules. Unlike the reference this does not depend on the
/// runtime re-sending portMappings: the objects are found by the attachment (nftables) or
/// by (network, container ID) (the reference's iptables chain).
fn del(args: &CmdArgs) -> Result<(), PortmapError> {
    let conf = parse_for_add_or_del(args)?;
    // prevResult's addresses tell which container-ID-only nftables rules are this
    // attachment's; an unparsable prevResult must not stop a DEL.
    let addresses: Option<Vec<IpAddr>> = args.prev_result().ok().flatten().map(|r| {
        let (v4, v6) = config::container_addresses(&r, &args.ifname);
        v4.into_iter().chain(v6).map(|n| n.ip()).collect()
    });
    let addresses = addresses.as_deref();
    let backend = match conf.backend {
        Some(b) => b,
        None if conf.backend_from_conditions().is_none() => {
            // Nothing says which backend ADD used: clean whatever exists (cheap when
            // nothing does: a few netlink lookups, no process).
            let ipt = iptables_backend::unforward_ports(&args.network_name, &args.container_id);
            let nft = nftables_backend::unforward_ports(&attachment(args), addresses);
            return match (ipt, nft) {
                (Err(e), Err(_)) => Err(e),
                (Ok(()), Err(e)) if host::has_nf_tables() => Err(e),
                (Err(e), Ok(())) if Iptables::new(Family::V4).is_usable() => Err(e),
                _ => Ok(()),
            };
        }
        None => choose_backend(&conf, &args.network_name)?,
    };
    unforward(backend, args, addresses)
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
                nftables_backend::check_ports(&conf, &attachment(args), container)?
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

/// Removes the port mappings of this network's attachments that are no longer valid: the
/// iptables chains of containers with no valid attachment (the reference's chain names no
/// interface), and the nftables rules of each attachment not valid (their comment names it).
/// Both are tried; failures are reported together.
fn gc(args: &CmdArgs) -> Result<(), PortmapError> {
    let valid = args.valid_attachments()?;
    let valid_containers: Vec<String> = valid.iter().map(|(cid, _)| cid.clone()).collect();
    let ipt = iptables_backend::gc(&args.network_name, &valid_containers);
    let nft = nftables_backend::gc(&args.network_name, &valid);
    match (ipt, nft) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(PortmapError::Gc(mut a)), Err(b)) => {
            a.push(b.to_string());
            Err(PortmapError::Gc(a))
        }
        (Err(a), Err(b)) => Err(PortmapError::Gc(vec![a.to_string(), b.to_string()])),
    }
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
