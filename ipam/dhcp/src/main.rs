//! `dhcp`: the IPAM plugin (it asks the daemon for a lease) and, as `dhcp daemon`, the
//! daemon that acquires and maintains the leases inside the container netns.

mod daemon;
mod duration;

use dhcp::{client, config, error, lease, protocol};

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;

use crate::error::DhcpError;
use crate::protocol::Request;

struct Dhcp;

fn request(method: &str, args: &CmdArgs) -> Request {
    // The daemon may run in another working directory.
    let netns = if args.netns.is_empty() {
        String::new()
    } else {
        std::path::absolute(&args.netns)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| args.netns.clone())
    };
    Request {
        method: method.into(),
        container_id: args.container_id.clone(),
        netns,
        ifname: args.ifname.clone(),
        args: args.args.clone(),
        config: args.config.clone(),
    }
}

fn call(method: &str, args: &CmdArgs) -> Result<Option<serde_json::Value>, DhcpError> {
    let conf = config::parse(&args.config, &args.args)?;
    protocol::call(&conf.socket_path, &request(method, args))
}

/// Best effort when there is nothing to undo without a daemon (DEL, GC).
fn optional(
    method: &str,
    r: Result<Option<serde_json::Value>, DhcpError>,
) -> Result<(), DhcpError> {
    match r {
        Ok(_) => Ok(()),
        Err(e @ DhcpError::NoDaemon { .. }) => {
            eprintln!("dhcp: {method}: {e}; no lease is being maintained");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn add(args: &CmdArgs) -> Result<CniResult, DhcpError> {
    let value = call("allocate", args)?.ok_or(DhcpError::NoResult)?;
    Ok(CniResult::from_value(&value)?)
}

fn check(args: &CmdArgs) -> Result<(), DhcpError> {
    let prev = args.prev_result()?.ok_or(DhcpError::MissingPrevResult)?;
    let held = call("check", args)?;
    let held = held.as_ref().and_then(|v| v.as_str()).unwrap_or_default();
    if prev
        .ips
        .iter()
        .any(|ip| ip.address.ip().to_string() == held)
    {
        Ok(())
    } else {
        Err(DhcpError::NotInPrevResult(held.to_string()))
    }
}

fn status(args: &CmdArgs) -> Result<(), DhcpError> {
    match call("status", args) {
        Ok(_) => Ok(()),
        Err(e @ DhcpError::NoDaemon { .. }) => Err(DhcpError::Unavailable(Box::new(e))),
        Err(e) => Err(e),
    }
}

impl Plugin for Dhcp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(add(args)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(optional("DEL", call("release", args))?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(args)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(optional("GC", call("gc", args))?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(status(args)?)
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("daemon") {
        let code = match daemon::parse_flags(&argv[2..]).and_then(daemon::run) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{e}");
                if e.starts_with("usage") || e.contains("\nusage") {
                    2
                } else {
                    1
                }
            }
        };
        std::process::exit(code);
    }
    skel::run(&Dhcp, "CNI dhcp plugin (ferrocni)");
}
