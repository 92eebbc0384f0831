//! Denied flows made visible: the table logs what each isolated chain is about to drop to
//! nfnetlink_log group `netpolicy_nft::LOG_GROUP` (at most 50 packets a second per chain);
//! this task receives those packets in the agent's netns, classifies each into a flow class
//! (direction, target, peer, protocol, destination port), counts it in
//! `ferrocni_agent_policy_denied_total{direction,pod,policy}` (per target pod and direction,
//! never per peer, so the series stay as many as the node's isolated pods) and logs one line
//! per flow class at most once a minute, with the packets counted since the last line.
//!
//! The socket is non-blocking and read through tokio's `AsyncFd` on the agent's own thread:
//! no thread of its own, and the last committed plan is read in place (a `RefCell` borrow
//! that never spans an await) instead of being copied at every commit.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netkit::netfilter::nflog::{LoggedPacket, Receiver};
use netpolicy::{Direction, Plan};
use netpolicy_nft::{parse_log_prefix, LOG_GROUP, LOG_SNAPLEN};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::enforce::SharedPlan;
use crate::ops::metrics::{self, Samples};
use crate::{log, warn};

/// A flow class is logged at most once per period.
pub const LOG_PERIOD: Duration = Duration::from_secs(60);
/// How often classes whose period ended are looked at (their pending count logged, or the
/// class forgotten when it was quiet).
const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// Flow classes followed for logging at most; packets of further classes are still counted.
const MAX_CLASSES: usize = 10_000;

/// What makes two denied packets "the same flow" for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowClass {
    pub direction: Direction,
    /// The isolated address whose chain dropped the packet.
    pub target: IpAddr,
    /// The other end: the source of what comes in, the destination of what goes out.
    pub peer: IpAddr,
    pub protocol: u8,
    pub dst_port: Option<u16>,
}

/// The labels of the denied counter.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TargetKey {
    pub direction: Direction,
    /// `namespace/name`, or the address when the last plan does not know it.
    pub pod: String,
    /// The isolating policies, joined by ",".
    pub policy: String,
}

/// A denied packet, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub class: FlowClass,
    pub target: TargetKey,
    /// The log line without its packet count.
    pub text: String,
}

/// Classifies a logged packet with the last committed plan; `None` for a packet that no
/// policy chain logged (another prefix) or without a readable IP header.
pub fn classify(plan: Option<&Plan>, packet: &LoggedPacket) -> Option<Denial> {
    let (direction, target) = parse_log_prefix(&packet.prefix)?;
    let flow = packet.flow?;
    let peer = match direction {
        Direction::Ingress => flow.src,
        Direction::Egress => flow.dst,
    };
    let pod_of = |addr: IpAddr| {
        let target_pod = plan?.targets.get(&addr).map(|t| &t.pod);
        target_pod
            .or_else(|| plan?.pods.get(&addr))
            .map(|p| p.to_string())
    };
    let policies: Vec<String> = plan
        .and_then(|p| p.targets.get(&target))
        .map(|t| {
            t.direction(direction)
                .policies
                .iter()
                .map(|p| p.to_string())
                .collect()
        })
        .unwrap_or_default();
    let end = |addr: IpAddr, port: Option<u16>| {
        let at = match port {
            Some(port) => SocketAddr::new(addr, port).to_string(),
            None => addr.to_string(),
        };
        match pod_of(addr) {
            Some(pod) => format!("{at} ({pod})"),
            None => at,
        }
    };
    let why = if policies.is_empty() {
        "its chain is from an earlier plan".to_string()
    } else {
        format!("isolated by {}; none allows it", policies.join(", "))
    };
    let text = format!(
        "denied {} {} -> {}, {direction}; {why}",
        flow.protocol_name(),
        end(flow.src, None),
        end(flow.dst, flow.dst_port()),
    );
    Some(Denial {
        class: FlowClass {
            direction,
            target,
            peer,
            protocol: flow.protocol,
            dst_port: flow.dst_port(),
        },
        target: TargetKey {
            direction,
            pod: pod_of(target).unwrap_or_else(|| target.to_string()),
            policy: policies.join(","),
        },
        text,
    })
}

/// A flow class being followed: its latest text, packets since its last line, and when the
/// next line may be written.
#[derive(Debug)]
struct Followed {
    text: String,
    pending: u64,
    next_line: Instant,
}

/// One line per flow class at most once per [`LOG_PERIOD`]: the first packet of a class is
/// logged at once, the packets after it in one line when the period ends.
#[derive(Debug, Default)]
pub struct Sampler {
    classes: BTreeMap<FlowClass, Followed>,
}

fn line(text: &str, packets: u64) -> String {
    let s = if packets == 1 { "" } else { "s" };
    format!("policy: {text} ({packets} packet{s} in the last minute)")
}

impl Sampler {
    /// Takes one denied packet at `now`; the line to log now, if any.
    pub fn record(&mut self, d: &Denial, now: Instant) -> Option<String> {
        if let Some(f) = self.classes.get_mut(&d.class) {
            f.pending += 1;
            if f.text != d.text {
                f.text.clone_from(&d.text);
            }
            if now < f.next_line {
                return None;
            }
            let out = line(&f.text, f.pending);
            f.pending = 0;
            f.next_line = now + LOG_PERIOD;
            return Some(out);
        }
        if self.classes.len() >= MAX_CLASSES {
            return None;
        }
        self.classes.insert(
            d.class,
            Followed {
                text: d.text.clone(),
                pending: 0,
                next_line: now + LOG_PERIOD,
            },
        );
        Some(line(&d.text, 1))
    }

    /// The lines of classes whose period ended with packets pending; classes quiet for a
    /// whole period are forgotten (their next packet is logged at once again).
    pub fn flush(&mut self, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        self.classes.retain(|_, f| {
            if now < f.next_line {
                return true;
            }
            if f.pending == 0 {
                return false;
            }
            out.push(line(&f.text, f.pending));
            f.pending = 0;
            f.next_line = now + LOG_PERIOD;
            true
        });
        out
    }

    pub fn followed(&self) -> usize {
        self.classes.len()
    }
}

/// `ferrocni_agent_policy_denied_total`, read by the metrics scrape on any thread.
#[derive(Debug, Default)]
pub struct DeniedCounts {
    by_target: Mutex<BTreeMap<TargetKey, u64>>,
}

impl DeniedCounts {
    pub fn add(&self, key: &TargetKey) {
        if let Ok(mut m) = self.by_target.lock() {
            match m.get_mut(key) {
                Some(n) => *n += 1,
                None => {
                    m.insert(key.clone(), 1);
                }
            }
        }
    }

    /// Drops the series of targets the plan no longer has, or isolates by other policies,
    /// so the series stay as many as the node's isolated pods and directions.
    pub fn retain_current(&self, plan: &Plan) {
        let current: std::collections::BTreeSet<TargetKey> = plan
            .targets
            .values()
            .flat_map(|t| {
                [Direction::Ingress, Direction::Egress].map(|direction| TargetKey {
                    direction,
                    pod: t.pod.to_string(),
                    policy: t
                        .direction(direction)
                        .policies
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                })
            })
            .collect();
        if let Ok(mut m) = self.by_target.lock() {
            m.retain(|k, _| current.contains(k));
        }
    }

    pub fn render(&self, out: &mut Samples) {
        let samples: Vec<(String, String)> = match self.by_target.lock() {
            Ok(m) => m
                .iter()
                .map(|(k, n)| {
                    let labels = [
                        ("direction", k.direction.to_string()),
                        ("pod", k.pod.clone()),
                        ("policy", k.policy.clone()),
                    ]
                    .iter()
                    .map(|(name, value)| {
                        let one = metrics::label(name, value);
                        one[1..one.len() - 1].to_string()
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                    (format!("{{{labels}}}"), n.to_string())
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        out.family(
            "ferrocni_agent_policy_denied_total",
            "counter",
            "Packets the NetworkPolicy table dropped and logged (at most 50 a second per address \
             and direction), by direction, isolated pod and isolating policies.",
            &samples,
        );
    }
}

/// Listens to the table's log group in the agent's netns and reports denied flows on the
/// current `LocalSet` until the agent exits. Returns the metrics to publish; `None` when the
/// group cannot be bound (the table still drops, unreported).
pub fn start(plan: SharedPlan) -> Option<metrics::Source> {
    let receiver = match Receiver::open(LOG_GROUP, LOG_SNAPLEN) {
        Ok(r) => r,
        Err(e) => {
            warn!("policy: denied flows are not reported: {e}");
            return None;
        }
    };
    // SAFETY: the receiver owns its socket and closes it only when dropped (with the
    // AsyncFd); its `as_raw_fd` always returns that socket's fd.
    let registered =
        unsafe { AsyncFd::register_with_interest(receiver, tokio::io::Interest::READABLE) };
    let fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            warn!("policy: denied flows are not reported: cannot poll the NFLOG socket: {e}");
            return None;
        }
    };
    let counts = Arc::new(DeniedCounts::default());
    tokio::task::spawn_local(run(fd, plan, counts.clone()));
    Some(Arc::new(move |out: &mut Samples| counts.render(out)))
}

async fn run(mut fd: AsyncFd<Receiver>, plan: SharedPlan, counts: Arc<DeniedCounts>) {
    let mut sampler = Sampler::default();
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    let mut packets: Vec<LoggedPacket> = Vec::new();
    let mut lost_reported = 0;
    loop {
        tokio::select! {
            ready = fd.readable_mut() => {
                let mut guard = match ready {
                    Ok(guard) => guard,
                    Err(e) => {
                        warn!("policy: waiting for denied flows (NFLOG group {LOG_GROUP}) \
                               failed: {e}; they are no longer reported");
                        return;
                    }
                };
                // What is queued now; `try_io` clears the readiness at WouldBlock.
                loop {
                    match guard.try_io(|inner| inner.get_mut().receive(&mut packets)) {
                        Ok(Ok(_)) => continue,
                        Ok(Err(e)) => {
                            warn!("policy: reading denied flows (NFLOG group {LOG_GROUP}) \
                                   failed: {e}; they are no longer reported");
                            return;
                        }
                        Err(_would_block) => break,
                    }
                }
                let now = Instant::now();
                let plan = plan.borrow();
                for p in packets.drain(..) {
                    let Some(d) = classify(plan.as_ref(), &p) else { continue };
                    counts.add(&d.target);
                    if let Some(text) = sampler.record(&d, now) {
                        log!("{text}");
                    }
                }
            }
            _ = flush.tick() => {
                for text in sampler.flush(Instant::now()) {
                    log!("{text}");
                }
                if let Some(plan) = plan.borrow().as_ref() {
                    counts.retain_current(plan);
                }
                let lost = fd.get_ref().lost();
                if lost > lost_reported {
                    warn!("policy: {} batch(es) of denied-flow logs lost (the agent read them \
                           too slowly)", lost - lost_reported);
                    lost_reported = lost;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use netkit::netfilter::nflog::{Flow, Transport};
    use netpolicy::{Isolation, PodKey, PolicyKey, Target};

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pod(ns: &str, name: &str) -> PodKey {
        PodKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    /// prod/db at 10.244.1.3, isolated for ingress by prod/deny; dev/tool at 10.244.2.4.
    fn plan() -> Plan {
        let mut plan = Plan::default();
        plan.targets.insert(
            ip("10.244.1.3"),
            Target {
                pod: pod("prod", "db"),
                ingress: Isolation {
                    policies: vec![Arc::new(PolicyKey {
                        namespace: "prod".into(),
                        name: "deny".into(),
                    })],
                    clauses: vec![],
                },
                egress: Isolation::default(),
            },
        );
        plan.pods.insert(ip("10.244.1.3"), pod("prod", "db"));
        plan.pods.insert(ip("10.244.2.4"), pod("dev", "tool"));
        plan
    }

    fn tcp(prefix: &str, src: &str, dst: &str, port: u16) -> LoggedPacket {
        LoggedPacket {
            group: LOG_GROUP,
            prefix: prefix.into(),
            flow: Some(Flow {
                src: ip(src),
                dst: ip(dst),
                protocol: 6,
                transport: Transport::Ports {
                    src: 40000,
                    dst: port,
                },
            }),
        }
    }

    #[test]
    fn a_denied_packet_names_both_pods_and_the_isolating_policy() {
        let plan = plan();
        let p = tcp("i 10.244.1.3", "10.244.2.4", "10.244.1.3", 5432);
        let d = classify(Some(&plan), &p).unwrap();
        assert_eq!(
            d.text,
            "denied TCP 10.244.2.4 (dev/tool) -> 10.244.1.3:5432 (prod/db), ingress; \
             isolated by prod/deny; none allows it"
        );
        assert_eq!(
            d.class,
            FlowClass {
                direction: Direction::Ingress,
                target: ip("10.244.1.3"),
                peer: ip("10.244.2.4"),
                protocol: 6,
                dst_port: Some(5432),
            }
        );
        assert_eq!(
            (d.target.pod.as_str(), d.target.policy.as_str()),
            ("prod/db", "prod/deny")
        );
        // Another source port: the same class.
        let mut again = p.clone();
        if let Some(f) = again.flow.as_mut() {
            f.transport = Transport::Ports {
                src: 40001,
                dst: 5432,
            };
        }
        assert_eq!(classify(Some(&plan), &again).unwrap().class, d.class);
    }

    #[test]
    fn unknown_peers_ipv6_icmp_and_foreign_prefixes() {
        let plan = plan();
        // Egress of a target the plan no longer has, to an address outside the cluster.
        let p = LoggedPacket {
            group: LOG_GROUP,
            prefix: "e fd00::5".into(),
            flow: Some(Flow {
                src: ip("fd00::5"),
                dst: ip("2001:db8::1"),
                protocol: 58,
                transport: Transport::Icmp { kind: 128, code: 0 },
            }),
        };
        let d = classify(Some(&plan), &p).unwrap();
        assert_eq!(
            d.text,
            "denied ICMPv6 fd00::5 -> 2001:db8::1, egress; its chain is from an earlier plan"
        );
        assert_eq!(
            (d.target.pod.as_str(), d.target.policy.as_str()),
            ("fd00::5", "")
        );
        assert_eq!((d.class.peer, d.class.dst_port), (ip("2001:db8::1"), None));
        let v6 = tcp("i fd00::3", "fd00::4", "fd00::3", 80);
        assert!(classify(None, &v6)
            .unwrap()
            .text
            .contains("-> [fd00::3]:80,"));
        assert_eq!(
            classify(Some(&plan), &tcp("x", "10.0.0.1", "10.0.0.2", 1)),
            None
        );
        let mut no_flow = tcp("i 10.244.1.3", "10.0.0.1", "10.244.1.3", 1);
        no_flow.flow = None;
        assert_eq!(classify(Some(&plan), &no_flow), None);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn one_line_per_class_and_minute() {
        let plan = plan();
        let d = classify(
            Some(&plan),
            &tcp("i 10.244.1.3", "10.244.2.4", "10.244.1.3", 5432),
        )
        .unwrap();
        let other = classify(
            Some(&plan),
            &tcp("i 10.244.1.3", "10.244.2.4", "10.244.1.3", 22),
        )
        .unwrap();
        let mut s = Sampler::default();
        let first = s.record(&d, Instant::now()).unwrap();
        assert!(
            first.ends_with("none allows it (1 packet in the last minute)"),
            "{first}"
        );
        assert!(
            first.starts_with("policy: denied TCP 10.244.2.4 (dev/tool)"),
            "{first}"
        );
        // Another class is logged at once; the same class waits for its minute.
        assert!(s.record(&other, Instant::now()).is_some());
        for _ in 0..2 {
            tokio::time::advance(Duration::from_secs(10)).await;
            assert_eq!(s.record(&d, Instant::now()), None);
        }
        assert!(s.flush(Instant::now()).is_empty());
        tokio::time::advance(Duration::from_secs(40)).await;
        // The minute is over: the packets since the first line, once.
        let lines = s.flush(Instant::now());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].ends_with("(2 packets in the last minute)"),
            "{lines:?}"
        );
        assert_eq!(s.record(&d, Instant::now()), None);
        // A packet after its class's minute ended is logged with the ones before it.
        tokio::time::advance(LOG_PERIOD).await;
        let line = s.record(&d, Instant::now()).unwrap();
        assert!(line.ends_with("(2 packets in the last minute)"), "{line}");
        // Quiet for a whole period: forgotten, the next packet is logged at once.
        tokio::time::advance(LOG_PERIOD).await;
        assert!(s.flush(Instant::now()).is_empty());
        assert_eq!(s.followed(), 0);
        assert!(s.record(&d, Instant::now()).is_some());
    }

    #[test]
    fn counted_per_target_and_direction_not_per_peer() {
        let plan = plan();
        let counts = DeniedCounts::default();
        for peer in ["10.244.2.4", "10.244.2.5", "10.0.0.9"] {
            let d = classify(Some(&plan), &tcp("i 10.244.1.3", peer, "10.244.1.3", 5432));
            counts.add(&d.unwrap().target);
        }
        let gone = classify(None, &tcp("e 10.244.1.9", "10.244.1.9", "10.0.0.1", 80)).unwrap();
        counts.add(&gone.target);
        let mut out = Samples::default();
        counts.render(&mut out);
        let text = out.into_text();
        assert!(
            text.contains(
                "ferrocni_agent_policy_denied_total{direction=\"ingress\",pod=\"prod/db\",\
                 policy=\"prod/deny\"} 3"
            ),
            "{text}"
        );
        assert!(text.contains("pod=\"10.244.1.9\""), "{text}");
        // A target the plan no longer has loses its series.
        counts.retain_current(&plan);
        let mut out = Samples::default();
        counts.render(&mut out);
        let text = out.into_text();
        assert!(!text.contains("10.244.1.9"), "{text}");
        assert!(text.contains("pod=\"prod/db\""), "{text}");
    }

    /// The task on the kernel: in a scratch netns, a log rule like the table's (on the output
    /// hook, so a datagram to 127.0.0.1 hits it) feeds the counter through the real socket.
    #[test]
    fn the_task_counts_what_the_kernel_logs() {
        if !netkit::testutil::is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let tn = netkit::testutil::TestNetns::new("denied");
        let ns = tn.with_udp_log_rule("denied_test", 5432, "i 127.0.0.1", LOG_GROUP, LOG_SNAPLEN);
        let text = std::thread::spawn(move || {
            let _guard = ns.enter().unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async {
                let mut p = plan();
                let db = p.targets.remove(&ip("10.244.1.3")).unwrap();
                p.targets.insert(ip("127.0.0.1"), db);
                let shared = SharedPlan::default();
                *shared.borrow_mut() = Some(p);
                let metrics = start(shared).expect("NFLOG bound");
                let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                for _ in 0..3 {
                    s.send_to(b"ping", "127.0.0.1:5432").unwrap();
                }
                let mut text = String::new();
                for _ in 0..50 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let mut out = Samples::default();
                    metrics(&mut out);
                    text = out.into_text();
                    if text.contains("} 3") {
                        break;
                    }
                }
                text
            })
        })
        .join()
        .unwrap();
        assert!(
            text.contains(
                "ferrocni_agent_policy_denied_total{direction=\"ingress\",pod=\"prod/db\",\
                 policy=\"prod/deny\"} 3"
            ),
            "{text}"
        );
    }
}
