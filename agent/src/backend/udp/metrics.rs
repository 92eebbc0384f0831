//! The udp backend's metric families for `/metrics`, read from the running packet engine:
//! pod packets and bytes each way, drops by reason, ICMP answers, batching, the data path
//! that runs. The engine's counters start at zero with each engine (`engine_restarts_total`
//! counts the restarts).

use udp_proxy::{DataPathMode, Stats};

use crate::ops::metrics::{label, Samples};

/// What one scrape reads.
pub struct Reading {
    /// The running engine's counters; `None` before the first pass started one.
    pub stats: Option<Stats>,
    /// Whether its thread stopped on its own (restarted by the next pass).
    pub failed: bool,
    /// Peers in its route table.
    pub routes: usize,
    pub restarts: u64,
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// Labelled samples `{name="value"} n`.
fn labelled(name: &str, values: &[(&str, u64)]) -> Vec<(String, String)> {
    values
        .iter()
        .map(|(v, n)| (label(name, v), n.to_string()))
        .collect()
}

pub fn write(samples: &mut Samples, r: &Reading) {
    let plain = |v: u64| vec![(String::new(), v.to_string())];
    let up = r.stats.is_some() && !r.failed;
    samples.family(
        "ferrocni_agent_udp_engine_up",
        "gauge",
        "Whether the udp backend's packet engine runs (0 before the first pass, or when its thread stopped until the next pass restarts it).",
        &plain(u64::from(up)),
    );
    samples.family(
        "ferrocni_agent_udp_engine_restarts_total",
        "counter",
        "Packet engines started again: its thread had stopped (flannel0 deleted), flannel0 was gone, or the lease, the MTU or the underlay address changed.",
        &plain(r.restarts),
    );
    samples.family(
        "ferrocni_agent_udp_routes",
        "gauge",
        "Peer subnets in the packet engine's route table.",
        &plain(r.routes as u64),
    );
    let Some(s) = &r.stats else { return };
    let d = &s.datapath;
    let mode = match d.mode {
        DataPathMode::Fast => "fast",
        DataPathMode::PerPacket => "per-packet",
    };
    let info = format!(
        "{{mode=\"{mode}\",tun_vnet_hdr=\"{}\",tun_tso=\"{}\",tun_uso=\"{}\",mmsg=\"{}\",udp_gso=\"{}\",udp_gro=\"{}\"}}",
        on_off(d.vnet_hdr),
        on_off(d.tun_tso),
        on_off(d.tun_uso),
        on_off(d.mmsg),
        on_off(d.udp_gso),
        on_off(d.udp_gro)
    );
    samples.family(
        "ferrocni_agent_udp_datapath_info",
        "gauge",
        "The data path the packet engine runs (--udp-datapath) and what the kernel granted it.",
        &[(info, "1".into())],
    );
    samples.family(
        "ferrocni_agent_udp_packets_total",
        "counter",
        "Pod packets the packet engine sent to peers (one per datagram) and received from them (written to flannel0), since it started.",
        &labelled(
            "direction",
            &[("sent", s.sent.packets), ("received", s.received.packets)],
        ),
    );
    samples.family(
        "ferrocni_agent_udp_bytes_total",
        "counter",
        "Bytes of those pod packets, since the packet engine started.",
        &labelled(
            "direction",
            &[("sent", s.sent.bytes), ("received", s.received.bytes)],
        ),
    );
    let x = &s.drops;
    samples.family(
        "ferrocni_agent_udp_drops_total",
        "counter",
        "Packets the packet engine dropped, by reason, since it started.",
        &labelled(
            "reason",
            &[
                ("no_route", x.no_route),
                ("ttl_expired", x.ttl_expired),
                ("not_ipv4", x.not_ipv4),
                ("malformed", x.malformed),
                ("oversize", x.oversize),
                ("not_for_this_node", x.not_for_this_node),
                ("unsupported_offload", x.unsupported_offload),
                ("send_failed", x.send_failed),
                ("tun_write_failed", x.tun_write_failed),
            ],
        ),
    );
    samples.family(
        "ferrocni_agent_udp_icmp_unreachable_total",
        "counter",
        "ICMP network unreachable answers to pods sending to a subnet no node holds: sent, and held back by the rate limit.",
        &labelled(
            "outcome",
            &[
                ("sent", s.icmp_unreachable),
                ("rate_limited", s.icmp_rate_limited),
            ],
        ),
    );
    samples.family(
        "ferrocni_agent_udp_super_packets_split_total",
        "counter",
        "TCP or UDP super-packets read from flannel0 and cut into datagrams (fast path).",
        &plain(s.super_packets_split),
    );
    samples.family(
        "ferrocni_agent_udp_segments_coalesced_total",
        "counter",
        "Received TCP segments written to flannel0 inside a super-packet after its first (fast path).",
        &plain(s.segments_coalesced),
    );
    let c = &s.syscalls;
    samples.family(
        "ferrocni_agent_udp_syscalls_total",
        "counter",
        "System calls moving packets (packets per call = packets / calls), since the packet engine started.",
        &labelled(
            "call",
            &[
                ("tun_read", c.tun_reads),
                ("udp_send", c.udp_sends),
                ("udp_recv", c.udp_recvs),
                ("tun_write", c.tun_writes),
            ],
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use udp_proxy::{DataPath, Drops, Syscalls, Traffic};

    fn text(r: &Reading) -> String {
        let mut s = Samples::default();
        write(&mut s, r);
        s.into_text()
    }

    #[test]
    fn families_from_the_engine_s_counters() {
        let stats = Stats {
            datapath: DataPath::per_packet(),
            sent: Traffic {
                packets: 10,
                bytes: 14_000,
            },
            received: Traffic {
                packets: 7,
                bytes: 900,
            },
            drops: Drops {
                no_route: 2,
                ..Drops::default()
            },
            icmp_unreachable: 2,
            icmp_rate_limited: 0,
            super_packets_split: 0,
            segments_coalesced: 0,
            syscalls: Syscalls {
                tun_reads: 10,
                udp_sends: 10,
                udp_recvs: 7,
                tun_writes: 7,
            },
        };
        let t = text(&Reading {
            stats: Some(stats),
            failed: false,
            routes: 2,
            restarts: 1,
        });
        for line in [
            "# TYPE ferrocni_agent_udp_packets_total counter",
            "ferrocni_agent_udp_engine_up 1",
            "ferrocni_agent_udp_engine_restarts_total 1",
            "ferrocni_agent_udp_routes 2",
            "ferrocni_agent_udp_datapath_info{mode=\"per-packet\",tun_vnet_hdr=\"off\",tun_tso=\"off\",tun_uso=\"off\",mmsg=\"off\",udp_gso=\"off\",udp_gro=\"off\"} 1",
            "ferrocni_agent_udp_packets_total{direction=\"sent\"} 10",
            "ferrocni_agent_udp_bytes_total{direction=\"received\"} 900",
            "ferrocni_agent_udp_drops_total{reason=\"no_route\"} 2",
            "ferrocni_agent_udp_drops_total{reason=\"oversize\"} 0",
            "ferrocni_agent_udp_icmp_unreachable_total{outcome=\"sent\"} 2",
            "ferrocni_agent_udp_syscalls_total{call=\"tun_write\"} 7",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in:\n{t}");
        }
        // Before the first pass: only whether it runs, the restarts and the routes.
        let t = text(&Reading {
            stats: None,
            failed: false,
            routes: 0,
            restarts: 0,
        });
        assert!(t.contains("ferrocni_agent_udp_engine_up 0\n"), "{t}");
        assert!(!t.contains("ferrocni_agent_udp_packets_total"), "{t}");
    }
}
