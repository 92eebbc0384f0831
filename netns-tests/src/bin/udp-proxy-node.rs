//! `udp-proxy-node`: one node of flannel's `udp` backend without the agent, for the end-to-end
//! tests and the bench. Run inside the node's network namespace (`ip netns exec`), it starts
//! the packet engine, sets the TUN device up as flanneld does, prints `ready <data path>` and
//! then obeys one command per line on stdin:
//!
//! ```text
//! routes 10.244.2.0/24=172.31.250.2:8285 ...   replace the route table (no pair: empty it)
//! stats                                        print the counters as one JSON line
//! stop                                         stop the engine and exit (as end of input does)
//! ```
//!
//! Options: `--tun NAME --mtu N --port N --bind IP --subnet CIDR --network CIDR`
//! `[--per-packet] [--without vnet-hdr,udp-gso,udp-gro,mmsg]` (the fast path's fallbacks).

use std::io::{BufRead, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::sync::Arc;

use ipnetwork::Ipv4Network;
use serde_json::json;
use udp_proxy::{DataPathMode, Engine, EngineConfig, Stats};

fn main() -> ExitCode {
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("udp-proxy-node: {e}");
            eprintln!(
                "usage: udp-proxy-node --tun NAME --mtu N --port N --bind IP --subnet CIDR \
                 --network CIDR [--per-packet] [--without vnet-hdr,udp-gso,udp-gro,mmsg]"
            );
            return ExitCode::from(2);
        }
    };
    let engine = match Engine::start(config.clone()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("udp-proxy-node: {e}");
            return ExitCode::FAILURE;
        }
    };
    let configured = netkit::Socket::new()
        .map_err(udp_proxy::UdpProxyError::from)
        .and_then(|mut sock| udp_proxy::device::configure(&mut sock, &config));
    if let Err(e) = configured {
        eprintln!("udp-proxy-node: {e}");
        return ExitCode::FAILURE;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {}", engine.stats().datapath);
    let _ = out.flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        match words.next() {
            Some("routes") => match parse_routes(words) {
                Ok(routes) => {
                    engine.set_routes(routes);
                    let _ = writeln!(out, "ok");
                }
                Err(e) => {
                    let _ = writeln!(out, "error {e}");
                }
            },
            Some("stats") => {
                let _ = writeln!(out, "{}", stats_json(&engine.stats(), engine.failure()));
            }
            Some("stop") => break,
            _ => {
                let _ = writeln!(out, "error unknown command {line:?}");
            }
        }
        let _ = out.flush();
    }
    engine.stop();
    ExitCode::SUCCESS
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<EngineConfig, String> {
    let net = |s: &str| s.parse::<Ipv4Network>().map_err(|e| e.to_string());
    let mut config = EngineConfig::new(
        Ipv4Addr::UNSPECIFIED,
        1500,
        net("10.244.1.0/24")?,
        net("10.244.0.0/16")?,
    );
    config.log = Some(Arc::new(|line: &str| eprintln!("udp-proxy-node: {line}")));
    while let Some(flag) = args.next() {
        if flag == "--per-packet" {
            config.datapath = DataPathMode::PerPacket;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--tun" => config.tun_name = value,
            "--mtu" => config.mtu = value.parse().map_err(|e| bad(&e))?,
            "--port" => config.port = value.parse().map_err(|e| bad(&e))?,
            "--bind" => config.bind_ip = value.parse().map_err(|e| bad(&e))?,
            "--subnet" => config.local_subnet = value.parse().map_err(|e| bad(&e))?,
            "--network" => config.network = value.parse().map_err(|e| bad(&e))?,
            "--without" => {
                for feature in value.split(',') {
                    match feature {
                        "vnet-hdr" => config.offloads.tun_vnet_hdr = false,
                        "udp-gso" => config.offloads.udp_gso = false,
                        "udp-gro" => config.offloads.udp_gro = false,
                        "mmsg" => config.offloads.mmsg = false,
                        other => return Err(format!("--without: unknown feature {other}")),
                    }
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(config)
}

fn parse_routes<'a>(
    pairs: impl Iterator<Item = &'a str>,
) -> Result<Vec<(Ipv4Network, SocketAddrV4)>, String> {
    pairs
        .map(|pair| {
            let (subnet, hop) = pair
                .split_once('=')
                .ok_or(format!("{pair:?} is not SUBNET=IP:PORT"))?;
            Ok((
                subnet.parse().map_err(|e| format!("{subnet}: {e}"))?,
                hop.parse().map_err(|e| format!("{hop}: {e}"))?,
            ))
        })
        .collect()
}

fn stats_json(s: &Stats, failure: Option<String>) -> serde_json::Value {
    let d = &s.datapath;
    json!({
        "datapath": {
            "text": d.to_string(),
            "per_packet": d.mode == DataPathMode::PerPacket,
            "vnet_hdr": d.vnet_hdr, "tun_tso": d.tun_tso, "tun_uso": d.tun_uso,
            "mmsg": d.mmsg, "udp_gso": d.udp_gso, "udp_gro": d.udp_gro,
        },
        "sent": {"packets": s.sent.packets, "bytes": s.sent.bytes},
        "received": {"packets": s.received.packets, "bytes": s.received.bytes},
        "drops": {
            "no_route": s.drops.no_route,
            "ttl_expired": s.drops.ttl_expired,
            "not_ipv4": s.drops.not_ipv4,
            "malformed": s.drops.malformed,
            "oversize": s.drops.oversize,
            "not_for_this_node": s.drops.not_for_this_node,
            "unsupported_offload": s.drops.unsupported_offload,
            "send_failed": s.drops.send_failed,
            "tun_write_failed": s.drops.tun_write_failed,
        },
        "icmp_unreachable": s.icmp_unreachable,
        "icmp_rate_limited": s.icmp_rate_limited,
        "super_packets_split": s.super_packets_split,
        "segments_coalesced": s.segments_coalesced,
        "syscalls": {
            "tun_reads": s.syscalls.tun_reads,
            "udp_sends": s.syscalls.udp_sends,
            "udp_recvs": s.syscalls.udp_recvs,
            "tun_writes": s.syscalls.tun_writes,
        },
        "failure": failure,
    })
}
