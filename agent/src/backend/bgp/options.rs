//! The bgp backend's options: the network config's `Backend` object (`"Type": "bgp"`), decoded
//! with Go's leniency (keys match case-insensitively, `null` is no value) but strict about what
//! it holds: an unknown key or an unusable value is refused, naming the option. And the per-node
//! command-line flags (`--bgp-as`, `--bgp-peers`, `--bird-binary`, `--bgp-dir`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::announce::{self, Prefixes};
use super::error::BgpError;
use super::node_as::NODE_AS;
use super::peer_address::peer_ip;
use super::secret::{read_password_file, Secret};
use crate::backend::flag::Flag;

/// Calico's default AS number (a private 16-bit AS).
pub const DEFAULT_AS_NUMBER: u32 = 64512;
/// BIRD's and RFC 4724's usual restart time.
pub const DEFAULT_GRACEFUL_RESTART_TIME: u16 = 120;
/// How often a peer's routes may hold this node's AS (`NumAllowedLocalASNumbers`); a path
/// holding it more often than a rack or two of nodes could add is a loop.
pub const MAX_ALLOWED_LOCAL_AS: u32 = 10;
/// The restart time travels in 12 bits of the graceful restart capability.
pub const MAX_GRACEFUL_RESTART_TIME: u16 = 4095;
/// Linux's TCP MD5 key limit (TCP_MD5SIG_MAXKEYLEN).
pub const MAX_PASSWORD_LEN: usize = 80;
/// BIRD's hold time when none is set, and the bounds of a set one (0: no keepalives at all).
pub const DEFAULT_HOLD_TIME: u16 = 240;
pub const MIN_HOLD_TIME: u16 = 3;
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
    per_node: false,
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
    per_node: false,
};

/// `--bgp-peers`: [`NodeSettings::peers`], read by [`parse_peers_flag`] when the backend
/// starts (a bad value stops a bgp node only).
pub const PEERS: Flag = Flag {
    name: "--bgp-peers",
    value: "IP:AS[:allow-local-as=N][:@FILE][,...]",
    help: &[
        "BGP peers of this node only, on top of the network's Peers (a",
        "rack's top-of-rack router); allow-local-as=N: the peer's",
        "NumAllowedLocalASNumbers; @FILE: the TCP MD5 password's file",
    ],
    default: None,
    // Not checked with the other flags: their errors quote the value, and an entry may hold a
    // password typed where its file belongs. The parser's own errors never quote one.
    check: Flag::any_value,
    per_node: true,
};

/// The bgp backend's agent flags.
pub const FLAGS: &[Flag] = &[BIRD_BINARY, DIR, PEERS, NODE_AS];

/// The field of a `--bgp-peers` entry giving its `NumAllowedLocalASNumbers`.
const ALLOW_LOCAL_AS_FIELD: &str = "allow-local-as=";

/// The keys of the `Backend` object (`Type` is the backend's name).
const OPTIONS: &[&str] = &[
    "Type",
    "ASNumber",
    "NodeToNodeMesh",
    "Peers",
    "GracefulRestart",
    "GracefulRestartTime",
    "KeepaliveTime",
    "HoldTime",
    "BFD",
    "AdvertisePrefixes",
    "ExternalPrefixes",
];
const PEER_FIELDS: &[&str] = &[
    "PeerIP",
    "ASNumber",
    "Password",
    "PasswordFile",
    "KeepaliveTime",
    "HoldTime",
    "BFD",
    "NumAllowedLocalASNumbers",
];

/// A session's BGP timers, in seconds (BIRD's `keepalive time`, `hold time`); unset: BIRD's
/// defaults (hold 240, keepalive a third of the hold time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timers {
    pub keepalive_time: Option<u16>,
    /// 0: no hold timer and no keepalives.
    pub hold_time: Option<u16>,
}

/// A BGP peer outside the node mesh (a top-of-rack router, a route reflector): iBGP when its
/// AS is the cluster's, eBGP otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub ip: Ipv4Addr,
    pub as_number: u32,
    /// TCP MD5 signature key (RFC 2385), from `Password` or read from `PasswordFile`.
    pub password: Option<Secret>,
    pub timers: Timers,
    /// A BFD session beside the BGP one: a dead link drops the session within a second.
    pub bfd: bool,
    /// `NumAllowedLocalASNumbers`: how often a route from this peer may hold this node's AS
    /// in its path (BIRD's `allow local as`; 0: never, BGP's loop detection). Nodes sharing
    /// an AS behind an eBGP router learn each other's subnets only with it.
    pub allow_local_as: u32,
}

impl Peer {
    /// A peer without password, timers of its own or BFD.
    pub fn new(ip: Ipv4Addr, as_number: u32) -> Peer {
        Peer {
            ip,
            as_number,
            password: None,
            timers: Timers::default(),
            bfd: false,
            allow_local_as: 0,
        }
    }
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
    /// The node-to-node sessions' timers (`Backend.KeepaliveTime`, `Backend.HoldTime`).
    pub mesh_timers: Timers,
    /// BFD on the node-to-node sessions (`Backend.BFD`).
    pub mesh_bfd: bool,
    /// `Backend.AdvertisePrefixes` and `Backend.ExternalPrefixes` ([`announce`]).
    pub prefixes: Prefixes,
}

impl Default for BgpOptions {
    fn default() -> BgpOptions {
        BgpOptions {
            as_number: DEFAULT_AS_NUMBER,
            node_to_node_mesh: true,
            peers: Vec::new(),
            graceful_restart: true,
            graceful_restart_time: DEFAULT_GRACEFUL_RESTART_TIME,
            mesh_timers: Timers::default(),
            mesh_bfd: false,
            prefixes: Prefixes::default(),
        }
    }
}

impl BgpOptions {
    /// Decodes the `Backend` object (the same for a dual-stack network: its IPv6 subnets
    /// travel in the same sessions, see the family module).
    pub fn parse(backend: &Map<String, Value>) -> Result<BgpOptions, BgpError> {
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
        opts.mesh_timers = timers(backend, "Backend")?;
        opts.mesh_bfd = field::<bool>(backend, "Backend", "BFD")?.unwrap_or(false);
        if let Some(list) = libcni::gojson::get(backend, "Peers") {
            opts.peers = peers(list, opts.as_number)?;
        }
        opts.prefixes = announce::Prefixes::parse(backend)?;
        Ok(opts)
    }
}

/// The value of `--bgp-peers`: `IP:AS[:allow-local-as=N][:@FILE][,...]`, this node's own
/// peers (a rack's router), `allow-local-as=N` the peer's `NumAllowedLocalASNumbers`, `@FILE`
/// naming a file that holds the peer's TCP MD5 password (never the password itself: a command
/// line is visible to every user in `ps`; the path may hold `:`, so it comes last). Empty
/// means none.
pub fn parse_peers_flag(value: &str) -> Result<Vec<Peer>, BgpError> {
    let flag = "--bgp-peers";
    let mut out: Vec<Peer> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (ip, rest) = item.split_once(':').ok_or_else(|| {
            BgpError::option(
                flag,
                format!("entry {item:?} is not IP:AS[:allow-local-as=N][:@FILE] (192.0.2.1:64512)"),
            )
        })?;
        let (asn, mut file) = match rest.split_once(':') {
            Some((asn, file)) => (asn, Some(file.trim())),
            None => (rest, None),
        };
        let mut allow_local_as = 0;
        if let Some(n) = file.and_then(|f| f.strip_prefix(ALLOW_LOCAL_AS_FIELD)) {
            let (n, after) = match n.split_once(':') {
                Some((n, after)) => (n, Some(after.trim())),
                None => (n, None),
            };
            let option = format!("{flag} entry {}", ip.trim());
            let n = n.trim().parse::<u32>().map_err(|_| {
                BgpError::option(&option, format!("allow-local-as={n:?} is not a number"))
            })?;
            allow_local_as = allowed_local_as(&option, n)?;
            file = after;
        }
        let ip = peer_ip(flag, ip.trim())?;
        let asn = asn.trim().parse::<u32>().map_err(|_| {
            BgpError::option(flag, format!("entry {ip}: {asn:?} is not an AS number"))
        })?;
        let as_number = as_number(flag, asn)?;
        if out.iter().any(|p| p.ip == ip) {
            return Err(BgpError::option(flag, format!("lists {ip} twice")));
        }
        let mut peer = Peer {
            allow_local_as,
            ..Peer::new(ip, as_number)
        };
        if let Some(file) = file {
            // Only a file: the entry is not quoted here, it may be a password.
            let path = file.strip_prefix('@').filter(|p| !p.is_empty()).ok_or_else(|| {
                let expected = if allow_local_as > 0 {
                    "the fourth field must be @FILE, the password's file"
                } else {
                    "the third field must be @FILE, the password's file, or allow-local-as=N"
                };
                BgpError::option(
                    flag,
                    format!("entry {ip}: {expected} (a password is never given on the command line)"),
                )
            })?;
            let at = format!("{flag} entry {ip}");
            peer.password = password_from_file(&at, Path::new(path))?;
        }
        out.push(peer);
    }
    Ok(out)
}

/// The peers of this node: the network's `Peers` and its `--bgp-peers`. A flag entry for an
/// address the network lists replaces that entry's AS and keeps its timers and BFD (the flag
/// has no syntax for them), and its password and `NumAllowedLocalASNumbers` when the flag
/// gives none; two different
/// passwords for one peer are refused (which one the router expects is not for us to guess).
pub fn merge_peers(network: &[Peer], node: &[Peer]) -> Result<Vec<Peer>, BgpError> {
    let mut out: Vec<Peer> = network.to_vec();
    for p in node {
        let Some(known) = out.iter_mut().find(|q| q.ip == p.ip) else {
            out.push(p.clone());
            continue;
        };
        let password = match (&known.password, &p.password) {
            (Some(a), Some(b)) if a != b => {
                return Err(BgpError::option(
                    "--bgp-peers",
                    format!(
                        "gives peer {} another password than the network's Backend.Peers: give it in one place only",
                        p.ip
                    ),
                ))
            }
            (a, b) => b.clone().or_else(|| a.clone()),
        };
        known.as_number = p.as_number;
        known.password = password;
        if p.allow_local_as > 0 {
            known.allow_local_as = p.allow_local_as;
        }
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
    /// is merged with a network-wide one for the same address: [`merge_peers`]).
    pub peers: Vec<Peer>,
    /// `--bgp-as`: this node's AS, instead of the network's `Backend.ASNumber`.
    pub as_number: Option<u32>,
}

impl Default for NodeSettings {
    fn default() -> NodeSettings {
        NodeSettings {
            bird_binary: DEFAULT_BIRD_BINARY.into(),
            dir: DEFAULT_DIR.into(),
            peers: Vec::new(),
            as_number: None,
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

/// `Backend.Peers`: a list of `{"PeerIP", "ASNumber", "Password" or "PasswordFile",
/// "KeepaliveTime", "HoldTime", "BFD"}`; `ASNumber` defaults to the cluster's (iBGP).
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
        let mut peer = Peer::new(ip, as_number);
        peer.password = password(obj, &at)?;
        peer.timers = timers(obj, &at)?;
        peer.bfd = field::<bool>(obj, &at, "BFD")?.unwrap_or(false);
        if let Some(n) = field::<u32>(obj, &at, "NumAllowedLocalASNumbers")? {
            peer.allow_local_as = allowed_local_as(&format!("{at}.NumAllowedLocalASNumbers"), n)?;
        }
        out.push(peer);
    }
    Ok(out)
}

/// `NumAllowedLocalASNumbers`: 0 (BGP's loop detection) to [`MAX_ALLOWED_LOCAL_AS`].
fn allowed_local_as(option: &str, n: u32) -> Result<u32, BgpError> {
    if n > MAX_ALLOWED_LOCAL_AS {
        return Err(BgpError::option(
            option,
            format!("{n} is outside 0..{MAX_ALLOWED_LOCAL_AS}"),
        ));
    }
    Ok(n)
}

/// A peer's `Password` or `PasswordFile` (not both); an empty one is none.
fn password(obj: &Map<String, Value>, at: &str) -> Result<Option<Secret>, BgpError> {
    let inline = field::<String>(obj, at, "Password")?.filter(|p| !p.is_empty());
    let file = field::<String>(obj, at, "PasswordFile")?.filter(|p| !p.is_empty());
    match (inline, file) {
        (Some(_), Some(_)) => Err(BgpError::option(
            format!("{at}.PasswordFile"),
            "is given beside Password: give one of them",
        )),
        (Some(p), None) => {
            check_password(&format!("{at}.Password"), &p)?;
            Ok(Some(Secret::new(p)))
        }
        (None, Some(path)) => password_from_file(&format!("{at}.PasswordFile"), Path::new(&path)),
        (None, None) => Ok(None),
    }
}

/// The password in `path`, held to the same rules as one given inline; an empty file is none.
fn password_from_file(option: &str, path: &Path) -> Result<Option<Secret>, BgpError> {
    let secret = read_password_file(option, path)?;
    if secret.expose().is_empty() {
        return Ok(None);
    }
    check_password(option, secret.expose())?;
    Ok(Some(secret))
}

/// `KeepaliveTime` and `HoldTime` of `obj` (the Backend object or a peer): a hold time of 0
/// (no keepalives) or at least 3 s, as BGP allows; a keepalive shorter than the hold time.
fn timers(obj: &Map<String, Value>, at: &str) -> Result<Timers, BgpError> {
    let seconds = |name: &str| -> Result<Option<(String, u16)>, BgpError> {
        let option = format!("{at}.{name}");
        let Some(n) = field::<u64>(obj, at, name)? else {
            return Ok(None);
        };
        let s = u16::try_from(n)
            .map_err(|_| BgpError::option(&option, format!("{n} is above 65535 seconds")))?;
        Ok(Some((option, s)))
    };
    let hold_time = seconds("HoldTime")?;
    if let Some((option, h)) = &hold_time {
        if (1..MIN_HOLD_TIME).contains(h) {
            return Err(BgpError::option(
                option,
                format!("{h} is outside 0 or {MIN_HOLD_TIME}..65535 seconds"),
            ));
        }
    }
    let hold_time = hold_time.map(|(_, h)| h);
    let keepalive_time = seconds("KeepaliveTime")?;
    if let Some((option, k)) = &keepalive_time {
        let hold = hold_time.unwrap_or(DEFAULT_HOLD_TIME);
        if *k == 0 {
            return Err(BgpError::option(option, "0 is outside 1..65535 seconds"));
        }
        if hold == 0 {
            return Err(BgpError::option(
                option,
                "is set, but a HoldTime of 0 sends no keepalives",
            ));
        }
        if *k >= hold {
            return Err(BgpError::option(
                option,
                format!("{k} s is not shorter than the hold time ({hold} s)"),
            ));
        }
    }
    Ok(Timers {
        keepalive_time: keepalive_time.map(|(_, k)| k),
        hold_time,
    })
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
        BgpOptions::parse(v.as_object().unwrap())
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
                "GracefulRestartTime":30,"KeepaliveTime":1,"HoldTime":3,"BFD":true,"Peers":[
                  {"PeerIP":"192.0.2.1","ASNumber":65000,"Password":"s3cret","BFD":true,
                   "KeepaliveTime":2,"HoldTime":9,"NumAllowedLocalASNumbers":1},
                  {"PeerIP":"192.0.2.2","HoldTime":0},
                  {"PeerIP":"192.0.2.3","Password":""}]}"#,
        )
        .unwrap();
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let first = Peer {
            password: Some(Secret::new("s3cret")),
            timers: Timers {
                keepalive_time: Some(2),
                hold_time: Some(9),
            },
            bfd: true,
            allow_local_as: 1,
            ..Peer::new(ip("192.0.2.1"), 65000)
        };
        // No ASNumber: iBGP, the cluster's AS.
        let second = Peer {
            timers: Timers {
                keepalive_time: None,
                hold_time: Some(0),
            },
            ..Peer::new(ip("192.0.2.2"), 65001)
        };
        assert_eq!(
            o,
            BgpOptions {
                as_number: 65001,
                node_to_node_mesh: false,
                peers: vec![first, second, Peer::new(ip("192.0.2.3"), 65001)],
                graceful_restart: false,
                graceful_restart_time: 30,
                mesh_timers: Timers {
                    keepalive_time: Some(1),
                    hold_time: Some(3),
                },
                mesh_bfd: true,
                prefixes: Prefixes::default(),
            }
        );
    }

    /// The options' `Debug` (what a `{:?}` in a log line would print) holds no password.
    #[test]
    fn debug_holds_no_password() {
        let o =
            parse(r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":"topsecret-md5"}]}"#)
                .unwrap();
        let text = format!("{o:?} {o:#?} {:?}", o.peers[0]);
        assert!(!text.contains("topsecret"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn password_files() {
        let dir = std::env::temp_dir().join(format!("bgp-options-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "from-a-file\n").unwrap();
        let quoted = dir.join("quoted");
        std::fs::write(&quoted, "a\"b\n").unwrap();
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let long = dir.join("long");
        std::fs::write(&long, "k".repeat(81)).unwrap();
        let peer = |file: &std::path::Path| {
            format!(
                r#"{{"Type":"bgp","Peers":[{{"PeerIP":"192.0.2.1","PasswordFile":"{}"}}]}}"#,
                file.display()
            )
        };
        let o = parse(&peer(&good)).unwrap();
        assert_eq!(
            o.peers[0].password.as_ref().map(Secret::expose),
            Some("from-a-file")
        );
        assert_eq!(parse(&peer(&empty)).unwrap().peers[0].password, None);
        for (file, needle) in [
            (
                &quoted,
                "\"Backend.Peers[0].PasswordFile\" may not hold a double quote",
            ),
            (&long, "\"Backend.Peers[0].PasswordFile\" is 81 bytes long"),
            (
                &dir.join("missing"),
                "\"Backend.Peers[0].PasswordFile\" password file ",
            ),
        ] {
            let e = err(&peer(file));
            assert!(e.contains(needle), "{e}");
        }
        let both = format!(
            r#"{{"Type":"bgp","Peers":[{{"PeerIP":"192.0.2.1","Password":"x","PasswordFile":"{}"}}]}}"#,
            good.display()
        );
        assert!(err(&both).contains(
            "\"Backend.Peers[0].PasswordFile\" is given beside Password: give one of them"
        ));

        // The flag's @FILE form.
        let flag = format!("192.0.2.1:64512:@{}, 192.0.2.2:65000", good.display());
        let peers = parse_peers_flag(&flag).unwrap();
        assert_eq!(
            peers[0].password.as_ref().map(Secret::expose),
            Some("from-a-file")
        );
        assert_eq!(peers[1], Peer::new("192.0.2.2".parse().unwrap(), 65000));
        for (value, needle) in [
            (
                "192.0.2.1:1:inline".to_string(),
                "\"--bgp-peers\" entry 192.0.2.1: the third field must be @FILE, the password's file, or allow-local-as=N (a password",
            ),
            ("192.0.2.1:1:@".to_string(), "the third field must be @FILE"),
            (
                format!("192.0.2.1:1:@{}", quoted.display()),
                "\"--bgp-peers entry 192.0.2.1\" may not hold a double quote",
            ),
            (
                format!("192.0.2.1:1:@{}", dir.join("missing").display()),
                "\"--bgp-peers entry 192.0.2.1\" password file ",
            ),
        ] {
            let e = parse_peers_flag(&value).unwrap_err().to_string();
            assert!(e.contains(needle), "{value}: {e}");
            assert!(!e.contains("inline"), "the error quotes the password: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn node_peers_merge_with_the_network_ones() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let with_pw = |p: Peer, pw: &str| Peer {
            password: Some(Secret::new(pw)),
            ..p
        };
        let network = vec![
            Peer {
                bfd: true,
                timers: Timers {
                    keepalive_time: Some(1),
                    hold_time: Some(3),
                },
                ..with_pw(Peer::new(ip("192.0.2.1"), 65000), "net")
            },
            Peer::new(ip("192.0.2.2"), 65000),
        ];
        // No password on the flag: the network's stays (with its timers and BFD); the AS is
        // the flag's.
        let merged = merge_peers(&network, &[Peer::new(ip("192.0.2.1"), 65009)]).unwrap();
        assert_eq!(merged[0].as_number, 65009);
        assert_eq!(merged[0].password, Some(Secret::new("net")));
        assert!(merged[0].bfd && merged[0].timers.hold_time == Some(3));
        assert_eq!(merged[1], network[1]);
        // The same password twice is no conflict; a password on the flag alone is taken; a
        // new address is added.
        let node = vec![
            with_pw(Peer::new(ip("192.0.2.1"), 65000), "net"),
            with_pw(Peer::new(ip("192.0.2.2"), 65000), "node"),
            Peer::new(ip("198.51.100.1"), 65100),
        ];
        let merged = merge_peers(&network, &node).unwrap();
        assert_eq!(merged[0].password, Some(Secret::new("net")));
        assert_eq!(merged[1].password, Some(Secret::new("node")));
        assert_eq!(merged[2], node[2]);
        // Two different passwords: refused, naming the peer, quoting neither.
        let other = with_pw(Peer::new(ip("192.0.2.1"), 65000), "other");
        let e = merge_peers(&network, &[other]).unwrap_err().to_string();
        assert_eq!(
            e,
            "\"--bgp-peers\" gives peer 192.0.2.1 another password than the network's Backend.Peers: give it in one place only"
        );
    }

    #[test]
    fn decoded_as_go_decodes_it() {
        // Keys fold, null is no value, the exact key wins over a folded one.
        let o = parse(
            r#"{"type":"bgp","asnumber":65010,"ASNumber":65011,"nodetonodemesh":null,
                "peers":[{"peerip":"192.0.2.9","asNumber":65020,"numallowedlocalasnumbers":2}]}"#,
        )
        .unwrap();
        assert_eq!(o.as_number, 65011);
        assert!(o.node_to_node_mesh);
        assert_eq!(o.peers[0].ip, "192.0.2.9".parse::<Ipv4Addr>().unwrap());
        assert_eq!(o.peers[0].as_number, 65020);
        assert_eq!(o.peers[0].allow_local_as, 2);
        assert_eq!(
            parse(r#"{"Type":"bgp","Peers":null}"#).unwrap().peers,
            vec![]
        );
    }

    #[test]
    fn bad_options_are_named() {
        for (json, needle) in [
            (r#"{"Type":"bgp","AsNum":1}"#, "\"Backend.AsNum\" is not an option of the bgp backend (it takes ASNumber, NodeToNodeMesh, Peers, GracefulRestart, GracefulRestartTime, KeepaliveTime, HoldTime, BFD, AdvertisePrefixes, ExternalPrefixes)"),
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
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Port":179}]}"#, "\"Backend.Peers[0].Port\" is not a field of a bgp peer (it takes PeerIP, ASNumber, Password, PasswordFile, KeepaliveTime, HoldTime, BFD, NumAllowedLocalASNumbers)"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":"a\"b"}]}"#, "\"Backend.Peers[0].Password\" may not hold a double quote"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":"a\nb"}]}"#, "\"Backend.Peers[0].Password\" may not hold"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","Password":7}]}"#, "\"Backend.Peers[0].Password\" cannot be decoded"),
            (r#"{"Type":"bgp","HoldTime":2}"#, "\"Backend.HoldTime\" 2 is outside 0 or 3..65535 seconds"),
            (r#"{"Type":"bgp","HoldTime":65536}"#, "\"Backend.HoldTime\" 65536 is above 65535 seconds"),
            (r#"{"Type":"bgp","HoldTime":-1}"#, "\"Backend.HoldTime\" cannot be decoded"),
            (r#"{"Type":"bgp","KeepaliveTime":0}"#, "\"Backend.KeepaliveTime\" 0 is outside 1..65535 seconds"),
            (r#"{"Type":"bgp","KeepaliveTime":3,"HoldTime":3}"#, "\"Backend.KeepaliveTime\" 3 s is not shorter than the hold time (3 s)"),
            (r#"{"Type":"bgp","KeepaliveTime":240}"#, "\"Backend.KeepaliveTime\" 240 s is not shorter than the hold time (240 s)"),
            (r#"{"Type":"bgp","KeepaliveTime":1,"HoldTime":0}"#, "\"Backend.KeepaliveTime\" is set, but a HoldTime of 0 sends no keepalives"),
            (r#"{"Type":"bgp","BFD":"on"}"#, "\"Backend.BFD\" cannot be decoded"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","HoldTime":1}]}"#, "\"Backend.Peers[0].HoldTime\" 1 is outside 0 or 3..65535"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","KeepaliveTime":10,"HoldTime":9}]}"#, "\"Backend.Peers[0].KeepaliveTime\" 10 s is not shorter than the hold time (9 s)"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","BFD":1}]}"#, "\"Backend.Peers[0].BFD\" cannot be decoded"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","PasswordFile":5}]}"#, "\"Backend.Peers[0].PasswordFile\" cannot be decoded"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","NumAllowedLocalASNumbers":11}]}"#, "\"Backend.Peers[0].NumAllowedLocalASNumbers\" 11 is outside 0..10"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","NumAllowedLocalASNumbers":-1}]}"#, "\"Backend.Peers[0].NumAllowedLocalASNumbers\" cannot be decoded"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","NumAllowedLocalASNumbers":"1"}]}"#, "\"Backend.Peers[0].NumAllowedLocalASNumbers\" cannot be decoded"),
            (r#"{"Type":"bgp","Peers":[{"PeerIP":"192.0.2.1","AllowedLocalAS":1}]}"#, "\"Backend.Peers[0].AllowedLocalAS\" is not a field of a bgp peer (it takes PeerIP, ASNumber, Password, PasswordFile, KeepaliveTime, HoldTime, BFD, NumAllowedLocalASNumbers)"),
        ] {
            let e = err(json);
            assert!(e.contains(needle), "{json}: {e}");
        }
        let long = format!(
            r#"{{"Type":"bgp","Peers":[{{"PeerIP":"192.0.2.1","Password":"{}"}}]}}"#,
            "k".repeat(81)
        );
        assert!(err(&long).contains("81 bytes long; TCP MD5 keys are at most 80"));
    }

    /// `allow-local-as=N` before the optional `@FILE` (whose path may hold `:`), merged with
    /// the network's `NumAllowedLocalASNumbers` as the password is.
    #[test]
    fn peers_flag_allow_local_as() {
        let dir = std::env::temp_dir().join(format!("bgp-options-allow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tor:md5");
        std::fs::write(&file, "k").unwrap();
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let peers = parse_peers_flag(&format!(
            "192.0.2.1:65100:allow-local-as=1, 192.0.2.2:65100:allow-local-as=2:@{}",
            file.display()
        ))
        .unwrap();
        assert_eq!(
            peers[0],
            Peer {
                allow_local_as: 1,
                ..Peer::new(ip("192.0.2.1"), 65100)
            }
        );
        assert_eq!(peers[1].allow_local_as, 2);
        assert_eq!(peers[1].password, Some(Secret::new("k")));
        std::fs::remove_dir_all(&dir).unwrap();

        let network = vec![Peer {
            allow_local_as: 3,
            ..Peer::new(ip("192.0.2.1"), 65100)
        }];
        let merged = merge_peers(&network, &[Peer::new(ip("192.0.2.1"), 65101)]).unwrap();
        assert_eq!(merged[0].allow_local_as, 3);
        let merged = merge_peers(&network, &peers[..1]).unwrap();
        assert_eq!(merged[0].allow_local_as, 1);
    }

    #[test]
    fn peers_flag() {
        assert_eq!(parse_peers_flag("").unwrap(), vec![]);
        assert_eq!(
            parse_peers_flag("192.0.2.1:64512, 198.51.100.7:65000,").unwrap(),
            vec![
                Peer::new("192.0.2.1".parse().unwrap(), 64512),
                Peer::new("198.51.100.7".parse().unwrap(), 65000),
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
            (
                "192.0.2.1:1:allow-local-as=x",
                "\"--bgp-peers entry 192.0.2.1\" allow-local-as=\"x\" is not a number",
            ),
            (
                "192.0.2.1:1:allow-local-as=11",
                "\"--bgp-peers entry 192.0.2.1\" 11 is outside 0..10",
            ),
            (
                "192.0.2.1:1:allow-local-as=1:pw",
                "\"--bgp-peers\" entry 192.0.2.1: the fourth field must be @FILE",
            ),
        ] {
            let e = parse_peers_flag(value).unwrap_err().to_string();
            assert!(e.contains(needle), "{value}: {e}");
        }
    }
}
