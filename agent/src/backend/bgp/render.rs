//! The BIRD 2 configuration of one node, a pure function of what the node knows.
//!
//! - This node's subnet is a `blackhole` route in a static protocol (as Calico announces its
//!   blocks), exported to every peer with this node's address as next hop. With pods running,
//!   the `cni0` connected route (from the direct protocol) is the preferred one for the same
//!   prefix; the export filter takes whichever is best, so the announcement never changes.
//! - Imported: only other nodes' subnets, each exactly as leased and from its own node
//!   ([`origin`]: the next hop is the lease's `PublicIP`, or, through a router that rewrote
//!   it, the AS path starts in the lease's AS), never this node's own. Anything else (a
//!   default route, a prefix no node leases, a slice of someone's subnet, an aggregate, a
//!   subnet through a next hop or from an AS not its node's) is refused, with one line in
//!   BIRD's log that says why ([`refusal`]), and not kept, so a router sending a full table
//!   costs no memory. The rules change
//!   with the leases; a reconfiguration with another import filter makes BIRD evaluate the
//!   routes already learned again (a route refresh from each peer), with no session restart.
//! - Kernel: BGP routes only (`proto bird`, BIRD's metric 32), each via the announcing node's
//!   address. Next hops resolve recursively (`multihop`, `gateway recursive`) through the
//!   connected networks (direct protocol) and the kernel's own routes (`learn`, everything
//!   outside the cluster network): nodes on one segment get `via <node>` directly, nodes
//!   behind routers get the route towards that node.
//! - Graceful restart in every BGP session and in the kernel protocol: a `graceful restart`
//!   shutdown leaves the kernel routes and peers keep this node's routes for the restart time;
//!   `bird -R` then holds the kernel table as it is until the sessions are back or
//!   [`RECOVERY_WAIT_SECS`] pass.
//! - The kernel protocol is `persist`: a BIRD that exits in any way (a SIGTERM from outside,
//!   `birdc down`) leaves its routes in the kernel, and pods keep talking until the agent has
//!   started BIRD again (in recovery). The agent removes them itself when it gives the backend
//!   up (`Bgp::shutdown`).
//! - BFD (`protocol bfd`, `bfd on` in the sessions that ask for it): a peer that stops
//!   answering is dropped within [`BFD_INTERVAL_MS`] × [`BFD_MULTIPLIER`] instead of the hold
//!   time. The sessions are multihop, so BFD is too (RFC 5883, UDP 4784): the other side must
//!   run multihop BFD towards this node.
//! - Mesh sessions: one side connects, the other (the lower address) is passive, as Calico
//!   does; both connecting at once races with a restarting peer's graceful restart.
//! - Timers for convergence in about a second: see the constants below.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;

use ipnetwork::Ipv4Network;

use super::announce::{NodePrefixes, NodePrefixes6};
use super::family::{self, Ipv6Routes};
use super::options::Timers;
use super::origin::{self, LeaseRoute};
use super::refusal;
use super::sessions::{protocol_name, SessionKind, Sessions};

/// After `bird -R`, how long BIRD waits for its peers before syncing the kernel table (BIRD's
/// default, 240 s, would hold back every route change for four minutes when a peer is gone).
pub const RECOVERY_WAIT_SECS: u32 = 10;
/// Seconds from a session's start to its first connection attempt, and between attempts while
/// the peer refuses (BIRD's minimum; its default is 5): a new node is reached within a second.
pub const CONNECT_DELAY_SECS: u32 = 1;
/// Seconds an unanswered connection attempt waits before the next (BIRD's default is 120).
pub const CONNECT_RETRY_SECS: u32 = 5;
/// Wait after a session error before restarting it, doubling up to the second value (BIRD's
/// default is 60, 300).
pub const ERROR_WAIT_SECS: (u32, u32) = (1, 10);
/// The device protocol's interface scan period. Linux reports interface changes at once, so
/// the scan itself is only a safety net; it is here for its timer: BIRD 2.0's main loop sleeps
/// up to 3 s when no timer is due sooner, and work queued meanwhile (the first UPDATE to a
/// peer whose session just came up, a restarting peer's End-of-RIB) waits for the next wake-up.
/// A 1 s timer bounds that wait, for little CPU (measured with and without it:
/// docs/benchmarks.md, "bgp: the bgp backend at scale").
pub const DEVICE_SCAN_SECS: u32 = 1;
/// BFD's transmit and receive interval, and how many missed packets bring a session down: a
/// dead peer is noticed in 300 ms.
pub const BFD_INTERVAL_MS: u32 = 100;
pub const BFD_MULTIPLIER: u32 = 3;
/// BIRD's own log: rotated by BIRD at this size, one old file kept. A backstop for when no
/// agent follows the log: the agent rotates it itself, at a quarter of this
/// ([`super::refusal_log`]), so that no refusal line is lost.
pub const LOG_LIMIT_BYTES: u64 = 16 << 20;

/// Everything the configuration depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BirdConfig<'a> {
    /// This node's `PublicIP`: router ID, session source address and next hop.
    pub router_id: Ipv4Addr,
    /// This node's AS (`--bgp-as`, else the network's `ASNumber`): every session's local AS.
    pub as_number: u32,
    pub own_subnet: Ipv4Network,
    /// The cluster `Network` (a node subnet's length is this node's, flannel's `SubnetLen`).
    pub network: Ipv4Network,
    pub sessions: &'a Sessions,
    /// The other nodes' leases: the only routes imported.
    pub leases: &'a [LeaseRoute],
    pub graceful_restart: bool,
    pub graceful_restart_time: u16,
    /// The node-to-node sessions' timers and BFD (a peer's are its own).
    pub mesh_timers: Timers,
    pub mesh_bfd: bool,
    /// `AdvertisePrefixes` and `ExternalPrefixes` as they concern this node: the IPv4
    /// entries, and the IPv6 ones (rendered with the IPv6 half only).
    pub prefixes: &'a NodePrefixes,
    pub prefixes6: &'a NodePrefixes6,
    /// BIRD's log file (the old one goes to the same name + `.old`).
    pub log_file: &'a Path,
    /// The IPv6 half on a dual-stack network ([`family`]).
    pub v6: Option<&'a Ipv6Routes>,
}

/// The configuration text. Paths must hold no `"` or line break (checked by the caller).
pub fn render(c: &BirdConfig) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_config(&mut out, c);
    out
}

fn write_config(o: &mut String, c: &BirdConfig) -> std::fmt::Result {
    let net = c.network;
    let pods = format!(
        "{}/{}{{{},{}}}",
        net.network(),
        net.prefix(),
        net.prefix(),
        c.own_subnet.prefix()
    );
    let log = c.log_file.display();
    writeln!(
        o,
        "# BIRD 2 configuration of ferrocni-agent's bgp backend: node {}, subnet {}.",
        c.router_id, c.own_subnet
    )?;
    writeln!(
        o,
        "# Rendered again at every membership change; edits here are overwritten."
    )?;
    writeln!(o, "log \"{log}\" {LOG_LIMIT_BYTES} \"{log}.old\" all;")?;
    writeln!(o, "router id {};", c.router_id)?;
    writeln!(o, "timeformat protocol iso long ms;")?;
    writeln!(o, "debug protocols {{ states }};")?;
    writeln!(o, "graceful restart wait {RECOVERY_WAIT_SECS};")?;
    writeln!(o)?;
    writeln!(o, "define OWN_SUBNET = {};", c.own_subnet)?;
    writeln!(o)?;
    refusal::write_function(o)?;
    writeln!(
        o,
        "# Other nodes' subnets, exactly as leased, from their own node; never ours."
    )?;
    writeln!(o, "filter import_pod_subnets {{")?;
    refusal::write_own_subnet(o, &c.own_subnet)?;
    c.prefixes.write_import_rules(o)?;
    origin::write_rules(o, c.leases)?;
    refusal::write_classification(o, c.network, c.leases)?;
    writeln!(o, "}}")?;
    writeln!(o, "filter export_own_subnet {{")?;
    writeln!(o, "  if net = OWN_SUBNET then accept;")?;
    writeln!(o, "  reject;")?;
    writeln!(o, "}}")?;
    c.prefixes.write_peer_export(o)?;
    writeln!(o, "filter kernel_pod_routes {{")?;
    writeln!(
        o,
        "  if source = RTS_BGP && net != OWN_SUBNET && net ~ [ {pods} ] then accept;"
    )?;
    c.prefixes.write_kernel_rules(o)?;
    writeln!(o, "  reject;")?;
    writeln!(o, "}}")?;
    writeln!(
        o,
        "# The kernel's own routes, to resolve next hops; never one for pods."
    )?;
    writeln!(o, "filter kernel_next_hops {{")?;
    writeln!(
        o,
        "  if net ~ [ {}/{}+ ] then reject;",
        net.network(),
        net.prefix()
    )?;
    c.prefixes.write_kernel_import_rules(o)?;
    writeln!(o, "  accept;")?;
    writeln!(o, "}}")?;
    if let Some(v6) = c.v6 {
        family::write_filters(o, v6, c.prefixes6)?;
    }
    writeln!(o)?;
    writeln!(o, "protocol device {{ scan time {DEVICE_SCAN_SECS}; }}")?;
    let direct6 = if c.v6.is_some() { " ipv6;" } else { "" };
    writeln!(o, "protocol direct {{ ipv4;{direct6} interface \"*\"; }}")?;
    family::write_kernel_and_own_subnet(o, c.own_subnet)?;
    c.prefixes.write_static(o)?;
    if let Some(v6) = c.v6 {
        family::write_protocols(o, v6, c.prefixes6)?;
    }
    let mesh_bfd = c.mesh_bfd && !c.sessions.mesh.is_empty();
    if mesh_bfd || c.sessions.peers.iter().any(|p| p.bfd) {
        let opts = format!("interval {BFD_INTERVAL_MS} ms; multiplier {BFD_MULTIPLIER};");
        writeln!(o, "protocol bfd {{")?;
        writeln!(o, "  interface \"*\" {{ {opts} }};")?;
        writeln!(o, "  multihop {{ {opts} }};")?;
        writeln!(o, "}}")?;
    }
    writeln!(o)?;
    writeln!(o, "template bgp pods {{")?;
    writeln!(o, "  local {} as {};", c.router_id, c.as_number)?;
    writeln!(o, "  multihop;")?;
    writeln!(o, "  connect delay time {CONNECT_DELAY_SECS};")?;
    writeln!(o, "  connect retry time {CONNECT_RETRY_SECS};")?;
    writeln!(
        o,
        "  error wait time {}, {};",
        ERROR_WAIT_SECS.0, ERROR_WAIT_SECS.1
    )?;
    if c.graceful_restart {
        writeln!(o, "  graceful restart on;")?;
        writeln!(o, "  graceful restart time {};", c.graceful_restart_time)?;
    } else {
        // Peers' restarts are still helped; ours asks nobody to wait.
        writeln!(o, "  graceful restart aware;")?;
    }
    writeln!(o, "  ipv4 {{")?;
    writeln!(o, "    import filter import_pod_subnets;")?;
    writeln!(o, "    export filter export_own_subnet;")?;
    writeln!(o, "    gateway recursive;")?;
    writeln!(o, "  }};")?;
    if let Some(v6) = c.v6 {
        family::write_channel(o, v6)?;
    }
    writeln!(o, "}}")?;
    for ip in &c.sessions.mesh {
        writeln!(o)?;
        writeln!(
            o,
            "protocol bgp {} from pods {{",
            protocol_name(SessionKind::Mesh, *ip)
        )?;
        let remote_as = c.sessions.mesh_remote_as(*ip, c.as_number);
        writeln!(o, "  neighbor {ip} as {remote_as};")?;
        write_failure_detection(o, &c.mesh_timers, c.mesh_bfd)?;
        if *ip > c.router_id {
            writeln!(
                o,
                "  passive on;  # the node with the higher address connects"
            )?;
        }
        writeln!(o, "}}")?;
    }
    for p in &c.sessions.peers {
        writeln!(o)?;
        writeln!(
            o,
            "protocol bgp {} from pods {{",
            protocol_name(SessionKind::Peer, p.ip)
        )?;
        writeln!(o, "  neighbor {} as {};", p.ip, p.as_number)?;
        if let Some(password) = &p.password {
            writeln!(o, "  password \"{}\";", password.expose())?;
        }
        if p.allow_local_as > 0 {
            writeln!(o, "  allow local as {};", p.allow_local_as)?;
        }
        write_failure_detection(o, &p.timers, p.bfd)?;
        // Routers and reflectors get the advertised prefixes too; the mesh does not.
        writeln!(o, "  ipv4 {{ export filter export_to_peers; }};")?;
        if c.v6.is_some() {
            writeln!(o, "  ipv6 {{ export filter export_to_peers6; }};")?;
        }
        writeln!(o, "}}")?;
    }
    Ok(())
}

/// A session's timers (BIRD's defaults when unset) and BFD.
fn write_failure_detection(o: &mut String, t: &Timers, bfd: bool) -> std::fmt::Result {
    if let Some(h) = t.hold_time {
        writeln!(o, "  hold time {h};")?;
    }
    if let Some(k) = t.keepalive_time {
        writeln!(o, "  keepalive time {k};")?;
    }
    if bfd {
        writeln!(o, "  bfd on;")?;
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::options::Peer;
    use super::super::secret::Secret;
    use super::*;

    pub fn sample_sessions() -> Sessions {
        Sessions {
            mesh: vec![
                "172.31.250.1".parse().unwrap(),
                "172.31.250.3".parse().unwrap(),
            ],
            mesh_as: Default::default(),
            peers: vec![Peer {
                password: Some(Secret::new("s3cret")),
                ..Peer::new("192.0.2.1".parse().unwrap(), 65000)
            }],
        }
    }

    /// The mesh's leases: nodes 1 and 3 (node 3 with a second, stale lease).
    pub fn sample_leases() -> Vec<LeaseRoute> {
        [
            ("10.244.1.0/24", "172.31.250.1"),
            ("10.244.3.0/24", "172.31.250.3"),
            ("10.244.9.0/24", "172.31.250.3"),
        ]
        .iter()
        .map(|(subnet, ip)| LeaseRoute {
            subnet: subnet.parse().unwrap(),
            next_hop: ip.parse().unwrap(),
            origin_as: 64512,
        })
        .collect()
    }

    pub fn sample(sessions: &Sessions) -> BirdConfig<'_> {
        BirdConfig {
            // A test's configuration lives as long as the test: leaking it is harmless.
            leases: Box::leak(sample_leases().into_boxed_slice()),
            router_id: "172.31.250.2".parse().unwrap(),
            as_number: 64512,
            own_subnet: "10.244.2.0/24".parse().unwrap(),
            network: "10.244.0.0/16".parse().unwrap(),
            sessions,
            graceful_restart: true,
            graceful_restart_time: 120,
            mesh_timers: Timers::default(),
            mesh_bfd: false,
            prefixes: Box::leak(Box::default()),
            prefixes6: Box::leak(Box::default()),
            log_file: Path::new("/run/ferrocni/bgp/bird.log"),
            v6: None,
        }
    }

    #[test]
    fn renders_the_node() {
        let sessions = sample_sessions();
        let text = render(&sample(&sessions));
        for line in [
            "log \"/run/ferrocni/bgp/bird.log\" 16777216 \"/run/ferrocni/bgp/bird.log.old\" all;",
            "router id 172.31.250.2;",
            "graceful restart wait 10;",
            "define OWN_SUBNET = 10.244.2.0/24;",
            "function refuse(string reason) {\n  print \"ferrocni-refused \", reason, \" \", net, \" \", proto, \" \", bgp_next_hop, \" \", bgp_path.last;\n  reject;\n}\n",
            "filter import_pod_subnets {\n  if net ~ [ 10.244.2.0/24+ ] then refuse(\"own-subnet\");\n",
            "    172.31.250.1: if net ~ [ 10.244.1.0/24 ] then accept;",
            "    172.31.250.3: if net ~ [ 10.244.3.0/24, 10.244.9.0/24 ] then accept;",
            "      if net ~ [ 10.244.1.0/24, 10.244.3.0/24, 10.244.9.0/24 ] && bgp_path.last = 64512 then accept;\n  }\n  # Refused: say why.\n",
            "  if net ~ [ 10.244.0.0/16+ ] then refuse(\"unleased\");\n  refuse(\"outside-network\");\n}",
            "  if source = RTS_BGP && net != OWN_SUBNET && net ~ [ 10.244.0.0/16{16,24} ] then accept;",
            "  if net ~ [ 10.244.0.0/16+ ] then reject;",
            "  route 10.244.2.0/24 blackhole;",
            "  persist;",
            "  local 172.31.250.2 as 64512;",
            "  graceful restart on;",
            "  graceful restart time 120;",
            "protocol bgp peer_192_0_2_1 from pods {\n  neighbor 192.0.2.1 as 65000;\n  password \"s3cret\";\n  ipv4 { export filter export_to_peers; };\n}",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        // The lower neighbour is connected to; the higher one connects to us.
        assert!(
            text.contains(
                "protocol bgp mesh_172_31_250_1 from pods {\n  neighbor 172.31.250.1 as 64512;\n}"
            ),
            "{text}"
        );
        assert!(text.contains("protocol bgp mesh_172_31_250_3 from pods {\n  neighbor 172.31.250.3 as 64512;\n  passive on;"), "{text}");
    }

    #[test]
    fn graceful_restart_off_and_other_lengths() {
        let sessions = Sessions::default();
        let mut c = sample(&sessions);
        c.graceful_restart = false;
        c.network = "10.96.0.0/12".parse().unwrap();
        c.own_subnet = "10.96.1.64/26".parse().unwrap();
        let text = render(&c);
        assert!(text.contains("  graceful restart aware;"), "{text}");
        assert!(!text.contains("graceful restart time"), "{text}");
        assert!(text.contains("[ 10.96.0.0/12{12,26} ]"), "{text}");
        assert!(!text.contains("protocol bgp"), "{text}");
    }

    /// Timers and BFD: the Backend's on the mesh sessions, each peer's on its own; no BFD
    /// protocol when no session asks for it.
    #[test]
    fn timers_and_bfd() {
        let mut sessions = sample_sessions();
        let text = render(&sample(&sessions));
        assert!(
            !text.contains("bfd") && !text.contains("hold time"),
            "{text}"
        );
        sessions.peers[0].bfd = true;
        sessions.peers[0].timers = Timers {
            keepalive_time: Some(2),
            hold_time: Some(6),
        };
        let text = render(&sample(&sessions));
        assert!(text.contains("protocol bfd {\n  interface \"*\" { interval 100 ms; multiplier 3; };\n  multihop { interval 100 ms; multiplier 3; };\n}"), "{text}");
        assert!(
            text.contains(
                "  password \"s3cret\";\n  hold time 6;\n  keepalive time 2;\n  bfd on;\n  ipv4 { export filter export_to_peers; };\n}"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "protocol bgp mesh_172_31_250_1 from pods {\n  neighbor 172.31.250.1 as 64512;\n}"
            ),
            "{text}"
        );
        sessions.peers[0] = Peer::new("192.0.2.1".parse().unwrap(), 65000);
        let mut c = sample(&sessions);
        c.mesh_bfd = true;
        c.mesh_timers = Timers {
            keepalive_time: None,
            hold_time: Some(0),
        };
        let text = render(&c);
        assert!(text.contains("protocol bfd {"), "{text}");
        assert!(text.contains("protocol bgp mesh_172_31_250_1 from pods {\n  neighbor 172.31.250.1 as 64512;\n  hold time 0;\n  bfd on;\n}"), "{text}");
        assert!(
            text.contains(
                "protocol bgp peer_192_0_2_1 from pods {\n  neighbor 192.0.2.1 as 65000;\n  ipv4 { export filter export_to_peers; };\n}"
            ),
            "{text}"
        );
        // BFD for a mesh that has no session yet: nothing to run.
        let empty = Sessions::default();
        let mut c = sample(&empty);
        c.mesh_bfd = true;
        assert!(!render(&c).contains("bfd"));
    }

    /// A mesh neighbour in another AS is an eBGP session (its AS, ours as local); a peer's
    /// `NumAllowedLocalASNumbers` is BIRD's `allow local as`.
    #[test]
    fn per_node_as_and_allowed_local_as() {
        let mut sessions = sample_sessions();
        sessions
            .mesh_as
            .insert("172.31.250.3".parse().unwrap(), 65003);
        sessions.peers[0].allow_local_as = 1;
        let mut c = sample(&sessions);
        c.as_number = 65002;
        let text = render(&c);
        for line in [
            "  local 172.31.250.2 as 65002;",
            "protocol bgp mesh_172_31_250_1 from pods {\n  neighbor 172.31.250.1 as 65002;\n}",
            "protocol bgp mesh_172_31_250_3 from pods {\n  neighbor 172.31.250.3 as 65003;\n  passive on;",
            "  neighbor 192.0.2.1 as 65000;\n  password \"s3cret\";\n  allow local as 1;\n  ipv4 { export filter export_to_peers; };\n}",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        assert!(!render(&sample(&sample_sessions())).contains("allow local as"));
    }

    /// Advertised prefixes of the network: 10.96.0.0/12 on every node, 192.168.200.0/24 on
    /// node 1 only; external: a default route from the router 192.0.2.1.
    pub fn sample_prefixes() -> NodePrefixes {
        let v = libcni::gojson::parse(
            br#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},{"Prefix":"192.168.200.0/24","Nodes":["172.31.250.1"]}],
                 "ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.1"]}]}"#,
        )
        .unwrap();
        super::super::announce::Prefixes::parse(v.as_object().unwrap())
            .unwrap()
            .for_node("172.31.250.2".parse().unwrap(), None)
    }

    /// The IPv6 entries of a dual-stack network: fd00:96::/108 on every node, fd00:200::/120
    /// on node 1 only; external: an IPv6 default route from the router 192.0.2.1.
    pub fn sample_prefixes6() -> NodePrefixes6 {
        let v = libcni::gojson::parse(
            br#"{"AdvertisePrefixes":[{"Prefix":"fd00:96::/108"},{"Prefix":"fd00:200::/120","Nodes":["172.31.250.1"]}],
                 "ExternalPrefixes":[{"Prefix":"::/0","Peers":["192.0.2.1"]}]}"#,
        )
        .unwrap();
        super::super::announce::Prefixes::parse(v.as_object().unwrap())
            .unwrap()
            .for_node6("172.31.250.2".parse().unwrap(), None)
    }

    /// The IPv6 half of the configuration of the dual-stack tests.
    pub fn sample_v6() -> Ipv6Routes {
        Ipv6Routes {
            own_subnet: "fd00:10:244:2::/64".parse().unwrap(),
            network: "fd00:10:244::/56".parse().unwrap(),
            next_hop: "fd00:31:250::2".parse().unwrap(),
            leases: ["1", "3"]
                .iter()
                .map(|i| LeaseRoute {
                    subnet: format!("fd00:10:244:{i}::/64").parse().unwrap(),
                    next_hop: format!("fd00:31:250::{i}").parse().unwrap(),
                    origin_as: 64512,
                })
                .collect(),
        }
    }

    /// Announced to the configured peers only, never to the kernel; refused from everyone;
    /// the external prefix from its router only, to the kernel.
    #[test]
    fn advertised_and_external_prefixes() {
        let sessions = sample_sessions();
        let prefixes = sample_prefixes();
        let mut c = sample(&sessions);
        c.prefixes = &prefixes;
        let text = render(&c);
        for needle in [
            "filter import_pod_subnets {\n  if net ~ [ 10.244.2.0/24+ ] then refuse(\"own-subnet\");\n  # Advertised by the nodes themselves: never another's copy, nor a part of one.\n  if net ~ [ 10.96.0.0/12+, 192.168.200.0/24+ ] then refuse(\"advertised\");\n  # External prefixes: exactly, from the peers named only.\n  if net = 0.0.0.0/0 then { if from ~ [ 192.0.2.1 ] then accept; refuse(\"external-peer\"); }\n  # From a node's address",
            "filter export_to_peers {\n  if net = OWN_SUBNET then accept;\n  if proto = \"announced\" && net ~ [ 10.96.0.0/12 ] then accept;\n  reject;\n}",
            "  if source = RTS_BGP && net != OWN_SUBNET && net ~ [ 10.244.0.0/16{16,24} ] then accept;\n  if source = RTS_BGP && net ~ [ 0.0.0.0/0 ] then accept;\n  reject;\n}",
            "protocol static announced {\n  ipv4;\n  route 10.96.0.0/12 blackhole;\n}",
            "  if net ~ [ 10.244.0.0/16+ ] then reject;\n  preference = 150;  # the node's own routes win over external prefixes\n  accept;\n",
            "  password \"s3cret\";\n  ipv4 { export filter export_to_peers; };\n}",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        // Node 1's load-balancer range is not this node's; the mesh keeps the template's
        // export (the node's subnet alone).
        assert!(!text.contains("route 192.168.200.0/24"), "{text}");
        assert!(
            text.contains(
                "protocol bgp mesh_172_31_250_1 from pods {\n  neighbor 172.31.250.1 as 64512;\n}"
            ),
            "{text}"
        );
        assert!(
            text.contains("    export filter export_own_subnet;"),
            "{text}"
        );
    }

    /// On a dual-stack network: the IPv6 filters, a direct `ipv6` channel, the IPv6 kernel
    /// protocol and static blackhole, and an `ipv6` channel in every session (the template's).
    #[test]
    fn dual_stack_adds_the_ipv6_half() {
        let sessions = sample_sessions();
        let v6 = sample_v6();
        let mut c = sample(&sessions);
        c.v6 = Some(&v6);
        let text = render(&c);
        for line in [
            "protocol direct { ipv4; ipv6; interface \"*\"; }",
            "define OWN_SUBNET6 = fd00:10:244:2::/64;",
            "    fd00:31:250::1 : if net ~ [ fd00:10:244:1::/64 ] then accept;",
            "protocol kernel kernel6 {",
            "  route fd00:10:244:2::/64 blackhole;",
            "    gateway recursive;\n  };\n  ipv6 {\n    import filter import_pod_subnets6;\n    export filter export_own_subnet6;\n    next hop address fd00:31:250::2;\n    gateway recursive;\n  };\n}",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        let v4_only = render(&sample(&sessions));
        assert!(!v4_only.contains("ipv6"), "{v4_only}");
    }

    /// The IPv6 entries in the IPv6 half, as the IPv4 ones in the IPv4 half: announced to
    /// the configured peers (their `ipv6` channel's export) from a static protocol of their
    /// own, refused from everyone, the external prefix from its router only, to the kernel.
    #[test]
    fn dual_stack_advertised_and_external_prefixes() {
        let sessions = sample_sessions();
        let v6 = sample_v6();
        let prefixes = sample_prefixes();
        let prefixes6 = sample_prefixes6();
        let mut c = sample(&sessions);
        c.v6 = Some(&v6);
        c.prefixes = &prefixes;
        c.prefixes6 = &prefixes6;
        let text = render(&c);
        for needle in [
            "filter import_pod_subnets6 {\n  if net ~ [ fd00:10:244:2::/64+ ] then refuse(\"own-subnet\");\n  # Advertised by the nodes themselves: never another's copy, nor a part of one.\n  if net ~ [ fd00:96::/108+, fd00:200::/120+ ] then refuse(\"advertised\");\n  # External prefixes: exactly, from the peers named only.\n  if net = ::/0 then { if from ~ [ 192.0.2.1 ] then accept; refuse(\"external-peer\"); }\n  # From a node's address",
            "filter export_to_peers6 {\n  if net = OWN_SUBNET6 then accept;\n  if proto = \"announced6\" && net ~ [ fd00:96::/108 ] then accept;\n  reject;\n}",
            "  if source = RTS_BGP && net != OWN_SUBNET6 && net ~ [ fd00:10:244::/56{56,64} ] then accept;\n  if source = RTS_BGP && net ~ [ ::/0 ] then accept;\n  reject;\n}",
            "  if net ~ [ fd00:10:244::/56+ ] then reject;\n  preference = 150;  # the node's own routes win over external prefixes\n  accept;\n",
            "protocol static announced6 {\n  ipv6;\n  route fd00:96::/108 blackhole;\n}",
            "protocol static announced {\n  ipv4;\n  route 10.96.0.0/12 blackhole;\n}",
            "  password \"s3cret\";\n  ipv4 { export filter export_to_peers; };\n  ipv6 { export filter export_to_peers6; };\n}",
            "if net ~ [ 10.96.0.0/12+, 192.168.200.0/24+ ] then refuse(\"advertised\");",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        // Node 1's range is not this node's; the mesh keeps the template's exports.
        assert!(!text.contains("route fd00:200::/120"), "{text}");
        assert!(
            text.contains(
                "protocol bgp mesh_172_31_250_1 from pods {\n  neighbor 172.31.250.1 as 64512;\n}"
            ),
            "{text}"
        );
        // The IPv6 entries need the IPv6 half: without it, none is rendered.
        c.v6 = None;
        let text = render(&c);
        assert!(!text.contains("fd00:") && !text.contains("::/0"), "{text}");
    }

    #[test]
    fn same_input_same_text() {
        let sessions = sample_sessions();
        assert_eq!(
            render(&sample(&sessions)),
            render(&sample(&sessions.clone()))
        );
    }
}
