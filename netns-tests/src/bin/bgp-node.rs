//! The agent's bgp backend (`agent/src/backend/bgp`) run on its own, one
//! process per simulated node, driven by commands on stdin as the agent's reconcile thread
//! calls it; for the end-to-end tests (`tests/bgp_bird.rs`, harness `src/bgp.rs`), before the
//! agent's lease loop: the backend's module tested apart from etcd and leases.
//!
//! `bgp-node --public-ip IP --network CIDR --bgp-dir DIR --options JSON
//!  [--bird-binary PATH] [--bgp-peers IP:AS,...]`, then one command a line:
//! - `apply SUBNET [IP[=SUBNET],...]` → `ok <started|recovering|adopted|reconfigured|unchanged>`
//!   or `err <message>`: the mesh, each member with its lease's subnet (a member without one
//!   has no lease: nothing is learned from it);
//! - `refresh` (read the sessions now) → `ok`;
//! - `metrics` → the metric families, then `end`;
//! - `stop` (graceful) / `shutdown` (withdraw everything) → `ok <what stays>`, and exit.
//!
//! At end of input it exits leaving BIRD running, as the agent does when dropped.

use std::io::{BufRead, Write};
use std::net::Ipv4Addr;
use std::process::ExitCode;

use ferrocni_agent::backend::bgp::{
    self, Action, Bgp, BgpOptions, LeaseRoute, NodeInfo, NodeSettings,
};
use ferrocni_agent::backend::Backend;
use ferrocni_agent::log;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bgp-node: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let need = |name: &str| flag(name).ok_or_else(|| format!("{name} is required"));
    let options =
        libcni::gojson::parse(need("--options")?.as_bytes()).map_err(|e| e.to_string())?;
    let options = options
        .as_object()
        .ok_or("--options must be a JSON object")?;
    let opts = BgpOptions::parse(options).map_err(|e| e.to_string())?;
    let node = NodeInfo {
        public_ip: need("--public-ip")?
            .parse()
            .map_err(|e| format!("--public-ip: {e}"))?,
        network: need("--network")?
            .parse()
            .map_err(|e| format!("--network: {e}"))?,
        // The bgp-node tests run IPv4-only networks.
        network6: None,
        name: flag("--node-name"),
    };
    let mut settings = NodeSettings {
        dir: need("--bgp-dir")?.into(),
        ..NodeSettings::default()
    };
    if let Some(b) = flag("--bird-binary") {
        settings.bird_binary = b.into();
    }
    if let Some(p) = flag("--bgp-peers") {
        settings.peers = bgp::parse_peers_flag(&p).map_err(|e| e.to_string())?;
    }
    let as_number = opts.as_number;
    log!("{}", opts.describe());
    let mut bgp = Bgp::new(opts, settings, node).map_err(|e| e.to_string())?;
    log!(
        "BIRD {}, control socket {}",
        bgp.bird_binary().display(),
        bgp.control_socket().display()
    );
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["apply", subnet, rest @ ..] => apply(&bgp, subnet, rest.first().copied(), as_number),
            ["refresh"] => {
                bgp.refresh();
                "ok".to_string()
            }
            ["metrics"] => {
                let families = bgp.metric_families();
                format!("{}end", bgp::metrics::text(&families))
            }
            ["stop"] => {
                let what = bgp.stop();
                log!("{what}");
                reply(&format!("ok {what}"));
                return Ok(());
            }
            ["shutdown"] => {
                let answer = match bgp.shutdown() {
                    Ok(what) => format!("ok {what}"),
                    Err(e) => format!("err {e}"),
                };
                reply(&answer);
                return Ok(());
            }
            _ => format!("err unknown command {line:?}"),
        };
        reply(&answer);
    }
    Ok(())
}

fn apply(bgp: &Bgp, subnet: &str, members: Option<&str>, as_number: u32) -> String {
    let Ok(subnet) = subnet.parse() else {
        return format!("err bad subnet {subnet:?}");
    };
    let mut peers: Vec<Ipv4Addr> = Vec::new();
    let mut leases: Vec<LeaseRoute> = Vec::new();
    for entry in members
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
    {
        let (ip, lease) = match entry.split_once('=') {
            Some((ip, lease)) => (ip, Some(lease)),
            None => (entry, None),
        };
        let Ok(ip) = ip.parse::<Ipv4Addr>() else {
            return format!("err bad peer address in {entry:?}");
        };
        peers.push(ip);
        if let Some(lease) = lease {
            let Ok(lease) = lease.parse() else {
                return format!("err bad lease subnet in {entry:?}");
            };
            leases.push(LeaseRoute {
                subnet: lease,
                next_hop: ip,
                origin_as: as_number,
            });
        }
    }
    match bgp.apply(subnet, &peers, &leases) {
        Ok(report) => {
            if let Some(line) = report.log_line() {
                log!("{line}");
            }
            let word = match report.action {
                Action::Started { recovering: false } => "started",
                Action::Started { recovering: true } => "recovering",
                Action::Adopted { .. } => "adopted",
                Action::Reconfigured => "reconfigured",
                Action::Unchanged => "unchanged",
            };
            format!("ok {word}")
        }
        Err(e) => format!("err {e}"),
    }
}

fn reply(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}
