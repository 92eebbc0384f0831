//! The backend's metric families for `/metrics`, from the latest status reading: whether BIRD
//! answers, its restarts and reconfigurations, sessions by state and by peer, routes learned
//! and announcements refused (in all, and by reason).

use std::fmt::Write as _;

use super::refusal_log::Refusals;
use super::status::{Session, STATES};

/// One metric family in Prometheus' text format: each sample is (labels with their braces, or
/// empty; value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub kind: &'static str,
    pub help: &'static str,
    pub samples: Vec<(String, String)>,
}

/// Counters kept by the backend itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Whether BIRD answered the latest status reading.
    pub bird_up: bool,
    /// BIRD started again after it died.
    pub bird_restarts: u64,
    /// Configurations BIRD loaded after its start (membership or option changes).
    pub reconfigurations: u64,
}

/// The families for `sessions` (the latest reading; empty when BIRD did not answer) and the
/// refusals counted from BIRD's log.
pub fn families(counters: &Counters, sessions: &[Session], refusals: &Refusals) -> Vec<Family> {
    let plain = |v: u64| vec![(String::new(), v.to_string())];
    let per_peer = |value: &dyn Fn(&Session) -> u64| {
        sessions
            .iter()
            .map(|s| {
                let labels = format!("{{peer=\"{}\",kind=\"{}\"}}", s.peer, s.kind.word());
                (labels, value(s).to_string())
            })
            .collect::<Vec<_>>()
    };
    let mut by_state: Vec<(String, String)> = STATES
        .iter()
        .map(|state| {
            let n = sessions.iter().filter(|s| s.state == *state).count();
            (
                format!("{{state=\"{}\"}}", state.to_lowercase()),
                n.to_string(),
            )
        })
        .collect();
    for s in sessions
        .iter()
        .filter(|s| !STATES.contains(&s.state.as_str()))
    {
        by_state.push((
            format!("{{state=\"{}\"}}", label_value(&s.state.to_lowercase())),
            "1".into(),
        ));
    }
    vec![
        Family {
            name: "ferrocni_agent_bgp_bird_up",
            kind: "gauge",
            help: "Whether BIRD answers on its control socket.",
            samples: plain(u64::from(counters.bird_up)),
        },
        Family {
            name: "ferrocni_agent_bgp_bird_restarts_total",
            kind: "counter",
            help: "BIRD started again after it died.",
            samples: plain(counters.bird_restarts),
        },
        Family {
            name: "ferrocni_agent_bgp_reconfigurations_total",
            kind: "counter",
            help: "Configurations loaded into a running BIRD (membership or option changes).",
            samples: plain(counters.reconfigurations),
        },
        Family {
            name: "ferrocni_agent_bgp_sessions",
            kind: "gauge",
            help: "BGP sessions by state.",
            samples: by_state,
        },
        Family {
            name: "ferrocni_agent_bgp_session_established",
            kind: "gauge",
            help: "Whether the BGP session with a peer is established, by peer (kind: mesh for another node, peer for a configured router).",
            samples: per_peer(&|s| u64::from(s.established())),
        },
        Family {
            name: "ferrocni_agent_bgp_routes_learned",
            kind: "gauge",
            help: "Pod subnets and external prefixes routed through a BGP peer (their best route is a BGP one).",
            samples: plain(
                sessions
                    .iter()
                    .fold(0, |n, s| s.routes.preferred.saturating_add(n)),
            ),
        },
        Family {
            name: "ferrocni_agent_bgp_peer_routes_imported",
            kind: "gauge",
            help: "Routes accepted from a peer.",
            samples: per_peer(&|s| s.routes.imported),
        },
        Family {
            name: "ferrocni_agent_bgp_peer_updates_refused_total",
            kind: "counter",
            help: "Announcements from a peer that the import filter refused (not exactly another node's leased subnet, from that node), since the session came up.",
            samples: per_peer(&|s| s.routes.refused_updates),
        },
        Family {
            name: "ferrocni_agent_bgp_peer_refusals_total",
            kind: "counter",
            help: "Announcements from a peer that the import filter refused, by reason (own-subnet, advertised, external-peer, wrong-next-hop, wrong-origin, more-specific, unleased, outside-network), since the agent started.",
            samples: refusals
                .counts()
                .map(|(kind, peer, reason, n)| {
                    (
                        format!(
                            "{{peer=\"{peer}\",kind=\"{}\",reason=\"{}\"}}",
                            kind.word(),
                            reason.word()
                        ),
                        n.to_string(),
                    )
                })
                .collect(),
        },
    ]
}

/// The families in the text exposition format.
pub fn text(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, value) in &f.samples {
            let _ = writeln!(out, "{}{labels} {value}", f.name);
        }
    }
    out
}

/// A label value as the text format wants it.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_from_a_reading() {
        let sessions = super::super::status::tests::sample();
        let counters = Counters {
            bird_up: true,
            bird_restarts: 2,
            reconfigurations: 5,
        };
        let mut refusals = Refusals::default();
        let refused = super::super::refusal_log::Refused::parse_line(
            "2026-12-07 03:45:22.313 <INFO> ferrocni-refused wrong-origin 10.244.1.0/24 peer_192_0_2_1 192.0.2.1 65000",
        )
        .unwrap();
        refusals.record(&refused);
        refusals.record(&refused);
        let t = text(&families(&counters, &sessions, &refusals));
        for line in [
            "# TYPE ferrocni_agent_bgp_bird_up gauge",
            "ferrocni_agent_bgp_bird_up 1",
            "ferrocni_agent_bgp_bird_restarts_total 2",
            "ferrocni_agent_bgp_reconfigurations_total 5",
            "ferrocni_agent_bgp_sessions{state=\"established\"} 1",
            "ferrocni_agent_bgp_sessions{state=\"active\"} 1",
            "ferrocni_agent_bgp_sessions{state=\"down\"} 1",
            "ferrocni_agent_bgp_sessions{state=\"idle\"} 0",
            "ferrocni_agent_bgp_session_established{peer=\"172.31.9.1\",kind=\"mesh\"} 1",
            "ferrocni_agent_bgp_session_established{peer=\"192.0.2.1\",kind=\"peer\"} 0",
            "ferrocni_agent_bgp_routes_learned 1",
            "ferrocni_agent_bgp_peer_routes_imported{peer=\"172.31.9.1\",kind=\"mesh\"} 1",
            "ferrocni_agent_bgp_peer_updates_refused_total{peer=\"172.31.9.1\",kind=\"mesh\"} 3",
            "# TYPE ferrocni_agent_bgp_peer_refusals_total counter",
            "ferrocni_agent_bgp_peer_refusals_total{peer=\"192.0.2.1\",kind=\"peer\",reason=\"wrong-origin\"} 2",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in:\n{t}");
        }
        // BIRD down: no sessions, every state at zero.
        let t = text(&families(&Counters::default(), &[], &Refusals::default()));
        assert!(t.contains("ferrocni_agent_bgp_bird_up 0\n"));
        assert!(t.contains("ferrocni_agent_bgp_sessions{state=\"established\"} 0\n"));
        assert!(!t.contains("peer=\""));
    }

    #[test]
    fn unknown_state_words_still_counted() {
        let mut sessions = super::super::status::tests::sample();
        sessions[0].state = "New\"State".into();
        let t = text(&families(
            &Counters::default(),
            &sessions,
            &Refusals::default(),
        ));
        assert!(
            t.contains("ferrocni_agent_bgp_sessions{state=\"new\\\"state\"} 1\n"),
            "{t}"
        );
    }
}
