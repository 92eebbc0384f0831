//! `dhcp`: the IPAM plugin (it asks the daemon for a lease) and, as `dhcp daemon`, the
//! daemon that acquires and maintains the leases inside the container netns.

mod client;
mod config;
mod daemon;
mod duration;
mod lease;
mod message;
mod protocol;
mod rawsock;

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;

use crate::protocol::{CallError, Request};

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

fn call(method: &str, args: &CmdArgs) -> Result<Option<serde_json::Value>, CallError> {
    let conf = config::parse(&args.config, &args.args).map_err(CallError::Failed)?;
    protocol::call(&conf.socket_path, &request(method, args))
}

fn required(
    r: Result<Option<serde_json::Value>, CallError>,
) -> Result<Option<serde_json::Value>, CniError> {
    r.map_err(|e| match e {
        // A plain error upstream (code 999).
        CallError::NoDaemon(msg) => CniError::internal(msg),
        CallError::Failed(e) => e,
    })
}

/// Best effort when there is nothing to undo without a daemon (DEL, GC).
fn optional(method: &str, r: Result<Option<serde_json::Value>, CallError>) -> Result<(), CniError> {
    match r {
        Ok(_) => Ok(()),
        Err(CallError::NoDaemon(msg)) => {
            eprintln!("dhcp: {method}: {msg}; no lease is being maintained");
            Ok(())
        }
        Err(CallError::Failed(e)) => Err(e),
    }
}

impl Plugin for Dhcp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let value = required(call("allocate", args))?
            .ok_or_else(|| CniError::internal("the DHCP daemon returned no result"))?;
        CniResult::from_value(&value)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        optional("DEL", call("release", args))
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let prev = args
            .prev_result()?
            .ok_or_else(|| CniError::internal("Required prevResult missing"))?;
        let held = required(call("check", args))?;
        let held = held.as_ref().and_then(|v| v.as_str()).unwrap_or_default();
        if prev
            .ips
            .iter()
            .any(|ip| ip.address.ip().to_string() == held)
        {
            Ok(())
        } else {
            Err(CniError::internal(format!(
                "dhcp: the lease holds {held}, which is not in prevResult"
            )))
        }
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        optional("GC", call("gc", args))
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        match call("status", args) {
            Ok(_) => Ok(()),
            Err(CallError::NoDaemon(msg)) => Err(CniError::not_available(msg)),
            Err(CallError::Failed(e)) => Err(e),
        }
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
