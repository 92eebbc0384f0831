//! `vxlan`: a chained CNI plugin that reconciles the node's overlay on ADD and CHECK and
//! passes prevResult through; `vxlan sync <config>` runs the same reconcile outside CNI.

use libcni::skel::{CmdArgs, Plugin};
use libcni::{CniError, CniResult};
use overlay::{reconcile, Error, OverlayConfig, PeerSet, Report};

const ABOUT: &str =
    "CNI vxlan plugin (ferrocni): VXLAN / host-gw overlay reconciled from a peer list\n\
usage outside CNI: vxlan sync [-v] <config.json|conflist>";

struct VxlanPlugin;

/// Parses the config, loads the peers and runs one pass; problems go to stderr.
fn run_pass(config: &serde_json::Map<String, serde_json::Value>) -> Result<Report, Error> {
    let cfg = OverlayConfig::from_map(config)?;
    let peers = PeerSet::load(&cfg)?;
    let mut report = reconcile(&cfg, &peers);
    for p in &report.problems {
        eprintln!("vxlan: {p}");
    }
    match report.error.take() {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let prev = args.prev_result()?.ok_or(Error::NotChained)?;
    run_pass(&args.config)?;
    Ok(prev)
}

fn check(args: &CmdArgs) -> Result<(), Error> {
    if args.prev_result()?.is_none() {
        return Err(Error::CheckNeedsPrevResult);
    }
    run_pass(&args.config).map(|_| ())
}

/// Ready when the config parses, the peers file is readable and the underlay exists.
fn status(args: &CmdArgs) -> Result<(), Error> {
    let cfg = OverlayConfig::from_map(&args.config)?;
    let unavailable = |e| Error::Unavailable(Box::new(e));
    PeerSet::load(&cfg).map_err(unavailable)?;
    let mut sock = netkit::Socket::new()?;
    let routes = overlay::reconcile::main_routes(&mut sock, &cfg)?;
    overlay::reconcile::resolve_underlay(&mut sock, &cfg, &routes).map_err(unavailable)?;
    Ok(())
}

impl Plugin for VxlanPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(add(args)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(args)?)
    }

    /// The overlay belongs to the node, not to the pod: nothing to undo.
    fn del(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(status(args)?)
    }
}

/// `vxlan sync [-v] <file>`: one reconcile in the current netns; exit 0 on success.
/// `-v` also prints the time spent in each phase on stderr.
fn sync(path: &str, verbose: bool) -> i32 {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("vxlan sync: failed to read {path}: {e}");
            return 2;
        }
    };
    let cfg = match OverlayConfig::from_json_text(&text) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vxlan sync: {e}");
            return 2;
        }
    };
    let peers = match PeerSet::load(&cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vxlan sync: {e}");
            return 1;
        }
    };
    let report = reconcile(&cfg, &peers);
    for p in &report.problems {
        eprintln!("vxlan sync: {p}");
    }
    if verbose {
        for (phase, took) in &report.timings {
            eprintln!("vxlan sync: {phase}: {:.3} ms", took.as_secs_f64() * 1000.0);
        }
    }
    println!("{report}");
    if report.is_ok() {
        0
    } else {
        1
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let in_cni = std::env::var_os("CNI_COMMAND").is_some_and(|c| !c.is_empty());
    if !in_cni && args.get(1).map(String::as_str) == Some("sync") {
        let verbose = args.iter().skip(2).any(|a| a == "-v");
        let files: Vec<&String> = args.iter().skip(2).filter(|a| *a != "-v").collect();
        match files.as_slice() {
            [path] => std::process::exit(sync(path, verbose)),
            _ => {
                eprintln!("usage: vxlan sync [-v] <config.json|conflist>");
                std::process::exit(2);
            }
        }
    }
    libcni::skel::run(&VxlanPlugin, ABOUT)
}
