//! `bandwidth`: chained CNI plugin that shapes a veth-attached container with TBF qdiscs,
//! programmed over netlink (no `tc` binary). Ingress (to the container) is a TBF on the host
//! veth; egress (from the container) is redirected to an IFB device carrying its own TBF.

mod check;
mod error;
mod host;
mod ifb;
mod setup;
mod shaping;

use bandwidth::config;

use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Command, Plugin};
use libcni::version;
use netkit::tc::{psched_tick_in_usec, Tbf};
use netkit::Socket;

use config::{Config, Limit};
use error::{BandwidthError, ChainError};
use setup::Plan;

/// Chaining exists from 0.3.0 on, as the reference advertises.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

struct Bandwidth;

fn require_chaining_version(args: &CmdArgs) -> Result<(), BandwidthError> {
    if version::compare(&args.cni_version, "0.3.0").is_lt() {
        return Err(BandwidthError::Version {
            config: args.cni_version.clone(),
        });
    }
    Ok(())
}

fn tbf(
    limit: Option<Limit>,
    latency_ms: u32,
    tick: f64,
    direction: &'static str,
) -> Result<Option<Tbf>, BandwidthError> {
    limit
        .map(|l| {
            shaping::tbf_for(l, latency_ms, tick)
                .map_err(|source| BandwidthError::Shape { direction, source })
        })
        .transpose()
}

/// The TBFs to program; at least one is set.
struct Shaping {
    ingress: Option<Tbf>,
    egress: Option<Tbf>,
}

/// Parses the config and prevResult; `None` when there is nothing to shape.
fn prepare(args: &CmdArgs) -> Result<(CniResult, Option<Shaping>), CniError> {
    require_chaining_version(args)?;
    let cfg = Config::from_map(&args.config).map_err(BandwidthError::from)?;
    let prev = args.prev_result()?.ok_or_else(|| {
        // The reference words the two verbs differently.
        BandwidthError::Chain(if args.command == Command::Check {
            ChainError::NotChainedCheck
        } else {
            ChainError::NotChained
        })
    })?;
    if cfg.limits.is_empty() {
        return Ok((prev, None));
    }
    let tick = psched_tick_in_usec().map_err(BandwidthError::from)?;
    let ingress = tbf(cfg.limits.ingress, cfg.latency_ms, tick, "ingress")?;
    let egress = tbf(cfg.limits.egress, cfg.latency_ms, tick, "egress")?;
    Ok((prev, Some(Shaping { ingress, egress })))
}

/// Whether DEL's config asks for egress shaping, the one that makes an IFB.
fn egress_configured(args: &CmdArgs) -> bool {
    Config::from_map(&args.config).is_ok_and(|cfg| cfg.limits.egress.is_some())
}

impl Plugin for Bandwidth {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let (prev, shaping) = prepare(args)?;
        let Some(Shaping { ingress, egress }) = shaping else {
            return Ok(prev);
        };
        let plan = Plan::new(ingress, egress, args);
        let mut sock = Socket::new().map_err(BandwidthError::from)?;
        let veth = host::host_veth(&prev, &args.netns, &args.ifname, &mut sock)?;
        Ok(setup::apply(&mut sock, &veth, &plan, prev)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        require_chaining_version(args)?;
        // Only the IFB needs removing: the host veth's qdiscs go away with the veth.
        let name = ifb::ifb_name(&args.network_name, &args.container_id);
        let mut sock = Socket::new().map_err(BandwidthError::from)?;
        match sock.find_link(&name).map_err(BandwidthError::from)? {
            Some(link)
                if link.is_kind("ifb")
                    && !ifb::belongs_to(
                        link.alias.as_deref(),
                        &args.network_name,
                        &args.container_id,
                        &args.ifname,
                    ) =>
            {
                eprintln!(
                    "bandwidth: leaving {name}: it shapes another interface of this container"
                );
            }
            Some(link) if link.is_kind("ifb") => {
                sock.delete_link_by_name(&name)
                    .map_err(BandwidthError::from)?;
            }
            Some(link) => eprintln!(
                "bandwidth: leaving {name}: it is a {} link, not an ifb this plugin created",
                link.kind.as_deref().unwrap_or("plain")
            ),
            // Not under this network's name: an ADD under another network name made it, if
            // the config shapes egress at all (else no IFB was made and nothing is listed).
            None if egress_configured(args) => {
                for link in sock.links_of_kind("ifb").map_err(BandwidthError::from)? {
                    if ifb::made_for(
                        &link.name,
                        link.alias.as_deref(),
                        &args.container_id,
                        &args.ifname,
                    ) {
                        sock.delete_link_by_name(&link.name)
                            .map_err(BandwidthError::from)?;
                    }
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Removes our IFBs (found by their alias) of this network whose attachment is not in
    /// `cni.dev/valid-attachments`: the IFB outlives its pod when DEL never comes, because it
    /// lives in the host namespace.
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let valid = args.valid_attachments()?;
        let mut sock = Socket::new().map_err(BandwidthError::from)?;
        let links = sock.links().map_err(BandwidthError::from)?;
        let ifbs: Vec<ifb::IfbLink> = links
            .iter()
            .filter(|l| l.is_kind("ifb"))
            .map(|l| ifb::IfbLink {
                name: &l.name,
                alias: l.alias.as_deref(),
            })
            .collect();
        let mut failures = Vec::new();
        for name in ifb::gc_victims(&ifbs, &args.network_name, &valid) {
            if let Err(e) = sock.delete_link_by_name(name) {
                if !e.is_not_found() {
                    failures.push(e.to_string());
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(BandwidthError::Gc(failures).into())
        }
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let (prev, shaping) = prepare(args)?;
        let Some(Shaping { ingress, egress }) = shaping else {
            return Ok(());
        };
        let plan = Plan::new(ingress, egress, args);
        let mut sock = Socket::new().map_err(BandwidthError::from)?;
        let veth = host::host_veth(&prev, &args.netns, &args.ifname, &mut sock)?;
        Ok(check::check(&mut sock, &veth, &plan)?)
    }
}

fn main() {
    libcni::skel::run_versions(
        &Bandwidth,
        "CNI bandwidth plugin (ferrocni): TBF shaping over netlink",
        SUPPORTED_VERSIONS,
    )
}
