//! The bgp backend's options: the network config's `Backend` object (`"Type": "bgp"`), decoded
//! with Go's leniency (keys match case-insensitively, `null` is no value) but strict about what
//! it holds: an unknown key or an unusable value is refused, naming the option. And the per-node
//! command-line flags (`--bgp-peers`, `--bird-binary`, `--bgp-dir`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::error::BgpError;
use crate::backend::flag::Flag;

/// Calico's default AS number (a private 16-bit AS).
pub const DEFAULT_AS_NUMBER: u32 = 64512;
/// BIRD's and RFC 4724's usual restart time.
pub const DEFAULT_GRACEFUL_RESTART_TIME: u16 = 120;
/// The restart time travels in 12 bits of the graceful restart capability.
pub const MAX_GRACEFUL_RESTART_TIME: u16 = 4095;
/// Linux's TCP MD5 key limit (TCP_MD5SIG_MAXKEYLEN).
pub const MAX_PASSWORD_LEN: usize = 80;
pub const DEFAULT_BIRD_BINARY: &str = "bird";
pub const DEFAULT_DIR: &str = "/run/ferrocni/bgp";

/// `--bird-binary`: [`NodeSettings::bird_binary`].
pub const BIRD_BINARY: Flag = Flag {
    name: "--bird-binary",
    value: "PATH",
    help: &[
        "the bgp backend's BIRD 2 (default: bird on PATH or in /usr/sbin;",
        "birdc is not needed)",
    ],
    default: Some(DEFAULT_BIRD_BINARY),
    check: Flag::any_value,
};

/// `--bgp-dir`: [`NodeSettings::dir`].
pub const DIR: Flag = Flag {
    name: "--bgp-dir",
    value: "DIR",
    help: &[
        "the bgp backend's BIRD configuration, control socket bird.ctl,",
        "pid file and log (default /run/ferrocni/bgp)",
    ],
    default: Some(DEFAULT_DIR),
    check: Flag::any_value,
};

/// `--bgp-peers`: [`NodeSettings::peers`], read by [`parse_peers_flag`] when the backend
/// starts (a bad value stops a bgp node only).
pub const PEERS: Flag = Flag {
    name: "--bgp-peers",
    value: "IP:AS[,IP:AS...]",
    help: &[
        "BGP peers of this node only, on top of the network's Peers (a",
        "rack's top-of-rack router)",
    ],
    default: None,
    check: Flag::any_value,
};

/// The bgp backend's agent flags.
pub const FLAGS: &[Flag] = &[BIRD_BINARY, DIR, PEERS];

/// The keys of the `Backend` object (`Type` is the backend's name).
const OPTIONS: &[&str] = &[
    "Type",
    "ASNumber",
    "NodeToNodeMesh",
    "Peers",
    "GracefulRestart",
    "GracefulRestartTime",
];
const PEER_FIELDS: &[&str] = &["PeerIP", "ASNumber", "Password"];

/// A BGP peer outside the node mesh (a top-of-rack router, a route reflector): iBGP when its
/// AS is the cluster's, eBGP otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub ip: Ipv4Addr,
    pub as_number: u32,
    /// TCP MD5 signature key (RFC 2385).
    pub password: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpOptions {
    /// This cluster's AS: every node's `local as`, and the mesh sessions' remote AS.
    pub as_number: u32,
    /// An iBGP session to every other node of the network, built from the leases.
    pub node_to_node_mesh: bool,
    /// Peers of every node.
    pub peers: Vec<Peer>,
    /// Whether this node asks its peers to keep its routes while its BIRD restarts.
    pub graceful_restart: bool,
    /// How long peers keep them, in seconds.
    pub graceful_restart_time: u16,
}

impl Default for BgpOptions {
    fn default() -> BgpOptions {
        BgpOptions {
            as_number: DEFAULT_AS_NUMBER,
            node_to_node_mesh: true,
            peers: Vec::new(),
            graceful_restart: true,
            graceful_restart_time: DEFAULT_GRACEFUL_RESTART_TIME,
        }
    }
}

impl BgpOptions {
    /// Decodes the `Backend` object. `dual_stack` is the network config's `EnableIPv6`: this
    /// backend announces IPv4 subnets only, so a dual-stack network is refused.
    pub fn parse(backend: &Map<String, Value>, dual_stack: bool) -> Result<BgpOptions, BgpError> {
        if dual_stack {
            return Err(BgpError::option(
                "EnableIPv6",
                "is set, but the bgp backend announces IPv4 pod subnets only",
            ));
        }
        refuse_unknown(backend, "Backend", OPTIONS)?;
        let mut opts = BgpOptions::default();
        if let Some(n) = field::<u32>(backend, "Backend", "ASNumber")? {
            opts.as_number = as_number("Backend.ASNumber", n)?;
        }
        if let Some(b) = field::<bool>(backend, "Backend", "NodeToNodeMesh")? {
            opts.node_to_node_mesh = b;
        }
        if let Some(b) = field::<bool>(backend, "Backend", "GracefulRestart")? {
            opts.graceful_restart = b;
        }
        if let Some(secs) = field::<u64>(backend, "Backend", "GracefulRestartTime")? {
            opts.graceful_restart_time = u16::try_from(secs)
                .ok()
                .filter(|s| (1..=MAX_GRACEFUL_RESTART_TIME).contains(s))
                .ok_or_else(|| {
                    BgpError::option(
                        "Backend.GracefulRestartTime",
                        format!(
                            "{secs} is outside 1..{MAX_GRACEFUL_RESTART_TIME} seconds (what BGP can announce)"
                        ),
                    )
                })?;
        }
        if let Some(list) = libcni::gojson::get(backend, "Peers") {
            opts.peers = peers(list, opts.as_number)?;
        }
        Ok(opts)
    }
}

/// The value of `--bgp-peers`: `IP:AS[,IP:AS...]`, this node's own peers (a rack's router).
/// Empty means none.
pub fn parse_peers_flag(value: &str) -> Result<Vec<Peer>, BgpError> {
    let flag = "--bgp-peers";
    let mut out: Vec<Peer> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (ip, asn) = item.split_once(':').ok_or_else(|| {
            BgpError::option(
                flag,
                format!("entry {item:?} is not IP:AS (192.0.2.1:64512)"),
            )
        })?;
        let ip = peer_ip(flag, ip.trim())?;
        let asn = asn.trim().parse::<u32>().map_err(|_| {
            BgpError::option(flag, format!("entry {item:?}: {asn:?} is not an AS number"))
        })?;
        let as_number = as_number(flag, asn)?;
        if out.iter().any(|p| p.ip == ip) {
            return Err(BgpError::option(flag, format!("lists {ip} twice")));
        }
        out.push(Peer {
            ip,
            as_number,
            password: None,
        });
    }
    Ok(out)
}

/// The per-node settings from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// `--bird-binary`: a path, or a name looked up on PATH.
    pub bird_binary: PathBuf,
    /// `--bgp-dir`: BIRD's configuration, control socket (`bird.ctl`), pid file and log.
    pub dir: PathBuf,
    /// `--bgp-peers`: peers of this node only, on top of the network's `Peers` (an entry here
    /// replaces a network-wide one for the same address).
    pub peers: Vec<Peer>,
}

impl Default for NodeSettings {
    fn default() -> NodeSettings {
        NodeSettings {
            bird_binary: DEFAULT_BIRD_BINARY.into(),
            dir: DEFAULT_DIR.into(),
            peers: Vec::new(),
        }
    }
}

/// Refuses a key that folds to none of `known` (Go would ignore it; a typo in a routing
/// option should not go unnoticed).
fn refuse_unknown(obj: &Map<String, Value>, at: &str, known: &[&str]) -> Result<(), BgpError> {
    let Some(key) = obj
        .keys()
        .find(|key| !known.iter().any(|k| libcni::gojson::fold_eq(k, key)))
    else {
        return Ok(());
    };
    let takes: Vec<&str> = known.iter().copied().filter(|k| *k != "Type").collect();
    let what = if at == "Backend" {
        "an option of the bgp backend"
    } else {
        "a field of a bgp peer"
    };
    Err(BgpError::option(
        format!("{at}.{key}"),
        format!("is not {what} (it takes {})", takes.join(", ")),
    ))
}

/// The value Go would decode into field `name` of `obj`, if set.
fn field<T: DeserializeOwned>(
    obj: &Map<String, Value>,
    at: &str,
    name: &str,
) -> Result<Option<T>, BgpError> {
    libcni::gojson::get(obj, name)
        .map(|v| {
            libcni::gojson::from_value::<T>(v).map_err(|e| {
                BgpError::option(format!("{at}.{name}"), format!("cannot be decoded: {e}"))
            })
        })
        .transpose()
}

fn as_number(option: &str, n: u32) -> Result<u32, BgpError> {
    if n == 0 {
        return Err(BgpError::option(option, "0 is outside 1..4294967295"));
    }
    Ok(n)
}

fn peer_ip(option: &str, text: &str) -> Result<Ipv4Addr, BgpError> {
    let ip: Ipv4Addr = text
        .parse()
        .map_err(|_| BgpError::option(option, format!("{text:?} is not an IPv4 address")))?;
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
        return Err(BgpError::option(
            option,
            format!("{ip} cannot be a BGP peer"),
        ));
    }
    Ok(ip)
}

/// `Backend.Peers`: a list of `{"PeerIP", "ASNumber", "Password"}`; `ASNumber` defaults to the
/// cluster's (iBGP).
fn peers(list: &Value, cluster_as: u32) -> Result<Vec<Peer>, BgpError> {
    let items = list.as_array().ok_or_else(|| {
        BgpError::option(
            "Backend.Peers",
            "must be a list of {\"PeerIP\", \"ASNumber\", \"Password\"} objects",
        )
    })?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("Backend.Peers[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| BgpError::option(&at, "must be an object"))?;
        refuse_unknown(obj, &at, PEER_FIELDS)?;
        let ip_option = format!("{at}.PeerIP");
        let text = field::<String>(obj, &at, "PeerIP")?
            .ok_or_else(|| BgpError::option(&ip_option, "is missing"))?;
        let ip = peer_ip(&ip_option, &text)?;
        if !seen.insert(ip) {
            return Err(BgpError::option(
                &ip_option,
                format!("{ip} is listed twice"),
            ));
        }
        let as_number = match field::<u32>(obj, &at, "ASNumber")? {
            Some(n) => self::as_number(&format!("{at}.ASNumber"), n)?,
            None => cluster_as,
        };
        let password = field::<String>(obj, &at, "Password")?.filter(|p| !p.is_empty());
        if let Some(p) = &password {
            check_password(&format!("{at}.Password"), p)?;
        }
        out.push(Peer {
            ip,
            as_number,
            password,
        });
    }
    Ok(out)
}

/// BIRD's configuration strings have no escapes (a `"` ends one, a line break is an error),
/// and the kernel takes at most 80 bytes of MD5 key.
fn check_password(option: &str, p: &str) -> Result<(), BgpError> {
    if p.len() > MAX_PASSWORD_LEN {
        return Err(BgpError::option(
            option,
            format!(
                "is {} bytes long; TCP MD5 keys are at most {MAX_PASSWORD_LEN}",
                p.len()
            ),
        ));
    }
    if p.chars().any(|c| c == '"' || c.is_control()) {
        return Err(BgpError::option(
            option,
            "may not hold a double quote or a control character (BIRD cannot quote them)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<BgpOptions, BgpError> {
        let v = libcni::gojson::parse(json.as_bytes()).unwrap();
        BgpOptions::parse(v.as_object().unwrap(), false)
    }

    fn err(json: &str) -> String {
        parse(json).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        assert_eq!(parse(r#"{"Type":"bgp"}"#).unwrap(), BgpOptions::default());
        let d = BgpOptions::default();
        assert_eq!(d.as_number, 64512);
        assert!(d.node_to_node_mesh && d.graceful_restart);
        assert_eq!(d.graceful_restart_time, 120);
        assert!(d.peers.is_empty());
    }

    #[test]
    fn every_option() {
        let o = parse(
            r#"{"Type":"bgp","ASNumber":65001,"NodeToNodeMesh":false,"GracefulRestart":false,
                "GracefulRestartTime":30,"Peers":[
                  {"PeerIP":"192.0.2.1","ASNumber":65000,"Password":"s3cret"},
                  {"PeerIP":"192.0.2.2"},
                  {"PeerIP":"192.0.2.3","Password":""}]}"#,
        )
        .unwrap();
        assert_eq!(
            o,
            BgpOptions {
                as_number: 65001,
                node_to_node_mesh: false,
                peers: vec![
                    Peer {
                        ip: "192.0.2.1".parse().unwrap(),
                        as_number: 65000,
                        password: Some("s3cret".into()),
                    },
                    // No ASNumber: iBGP, the cluster's AS.
                    Peer {
                        ip: "192.0.2.2".parse().unwrap(),
                        as_number: 65001,
                        password: None,
                    },
                    Peer {
                        ip: "192.0.2.3".parse().unwrap(),
                        as_number: 65001,
                        password: None,
                    },
                ],
                graceful_restart: false,
                graceful_restart_time: 30,
            }
        );
    }

    #[test]
    fn decoded_as_go_decodes_it() {
        // Keys fold, null is no value, the exact key wins over a folded one.
        let o = parse(
            r#"{"type":"bgp","asnumber":65010,"ASNumber":65011,"nodetonodemesh":null,
                "peers":[{"peerip":"192.0.2.9","asNumber":65020}]}"#,
        )
        .unwrap();
        assert_eq!(o.as_number, 65011);
        assert!(o.node_to_node_mesh);
        assert_eq!(o.peers[0].ip, "192.0.2.9".parse::<Ipv4Addr>().unwrap());
        assert_eq!(o.peers[0].as_number, 65020);
        assert_eq!(
            parse(r#"{"Type":"bgp","Peers":null}"#).unwrap().peers,
            vec![]
        );
    }

    #[test]
    fn bad_options_are_named() {
        for (json, needle) in [
            (r#"{"Type":"bgp","AsNum":1}"#, "\"Backend.AsNum\" is not an option of the bgp backend (it takes ASNumber, NodeToNodeMesh, Peers, GracefulRestart, GracefulRestartTime)"),
            (r#"{"Type":"bgp","ASNumber":0}"#, "\"Backend.ASNumber\" 0 is outside"),
            (r#"{"Type":"bgp","ASNumber":-5}"#, "\"Backend.ASNumber\" cannot be decoded"),
            (r#"{"Type":"bgp","ASNumber":4294967296}"#, "\"Backend.ASNumber\" cannot be decoded"),
            (r#"{"Type":"bgp","ASNumber":"64512"}"#, "\"Backend.ASNumber\" cannot be decoded"),
            (r#"{"Type":"bgp","NodeToNodeMesh":"yes"}"#, "\"Backend.NodeToNodeMesh\" cannot be decoded"),
            (r#"{"Type":"bgp","GracefulRestartTime":0}"#, "\"Backend.GracefulRestartTime\" 0 is outside 1..4095"),
            (r#"{"Type":"bgp","GracefulRestartTime":4096}"#, "\"Backend.GracefulRestartTime\" 4096 is outside"),
            (r#"{"Type":"bgp","GracefulRestartTime":1.5}"#, "\"Backend.GracefulRestartTime\" cannot be decoded"),
            (r#"{"Type":"bgp","Peers":{}}"#, "\"Backend.Peers\" must be a list"),
            (r#"{"Type":"bgp","Peers":["192.0.2.1"]}"#, "\"Backend.Peers[0]\" must be an object"),
            (r#"{"Type":"bgp","Peers":[{"ASNumber":1}]}"#, "\"Backend.Peers[0].PeerIP\" is missing"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1"},{"PeerIP":"x"}]}"#, "\"Backend.Peers[1].PeerIP\" \"x\" is not an IPv4 address"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"2001:db8::1"}]}"#, "\"Backend.Peers[0].PeerIP\" \"2001:db8::1\" is not an IPv4 address"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"0.0.0.0"}]}"#, "0.0.0.0 cannot be a BGP peer"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1"},{"PeerIP":"192.0.2.1"}]}"#, "\"Backend.Peers[1].PeerIP\" 192.0.2.1 is listed twice"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","ASNumber":0}]}"#, "\"Backend.Peers[0].ASNumber\" 0 is outside"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Port":179}]}"#, "\"Backend.Peers[0].Port\" is not a field of a bgp peer (it takes PeerIP, ASNumber, Password)"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":"a\"b"}]}"#, "\"Backend.Peers[0].Password\" may not hold a double quote"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":"a\nb"}]}"#, "\"Backend.Peers[0].Password\" may not hold"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":7}]}"#, "\"Backend.Peers[0].Password\" cannot be decoded"),
        ] {
            let e = err(json);
            assert!(e.contains(needle), "{json}: {e}");
        }
        let long = format!(
            r#"{{"Type":"bgp","Peers":[{{"PeerIP":"192.0.2.1","Password":"{}"}}]}}"#,
            "k".repeat(81)
        );
        assert!(err(&long).contains("81 bytes long; TCP MD5 keys are at most 80"));
        let v = libcni::gojson::parse(br#"{"Type":"bgp"}"#).unwrap();
        let e = BgpOptions::parse(v.as_object().unwrap(), true).unwrap_err();
        assert!(e.to_string().contains("\"EnableIPv6\""), "{e}");
    }

    #[test]
    fn peers_flag() {
        assert_eq!(parse_peers_flag("").unwrap(), vec![]);
        assert_eq!(
            parse_peers_flag("192.0.2.1:64512, 198.51.100.7:65000,").unwrap(),
            vec![
                Peer {
                    ip: "192.0.2.1".parse().unwrap(),
                    as_number: 64512,
                    password: None,
                },
                Peer {
                    ip: "198.51.100.7".parse().unwrap(),
                    as_number: 65000,
                    password: None,
                },
            ]
        );
        for (value, needle) in [
            (
                "192.0.2.1",
                "\"--bgp-peers\" entry \"192.0.2.1\" is not IP:AS",
            ),
            ("192.0.2.1:x", "\"x\" is not an AS number"),
            ("192.0.2.1:0", "0 is outside"),
            ("host:1", "\"host\" is not an IPv4 address"),
            ("192.0.2.1:1,192.0.2.1:2", "lists 192.0.2.1 twice"),
        ] {
            let e = parse_peers_flag(value).unwrap_err().to_string();
            assert!(e.contains(needle), "{value}: {e}");
        }
    }
}
