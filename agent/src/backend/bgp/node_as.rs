//! An AS per node: `--bgp-as` gives this node an AS of its own (as Calico's per-node
//! `asNumber`, one AS per rack or per node), published in its lease so the other nodes know it:
//! `"BackendData": {"ASNumber": 64513}`. A bgp lease without it (an agent without the flag, an
//! older agent, another writer) is in the cluster's AS, the Backend's `ASNumber`.
//!
//! The other nodes use the lease's AS twice: as the remote AS of their mesh session with the
//! node (the same AS as theirs: iBGP; another: eBGP), and as the origin the node's subnet must
//! have when it arrives through a router ([`LeaseRoute::origin_as`]).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::{Map, Value};

use super::origin::LeaseRoute;
use crate::backend::flag::Flag;

/// RFC 6793's AS_TRANS: it stands for a 4-byte AS towards 2-byte speakers, never a real AS.
pub const AS_TRANS: u32 = 23456;
/// The largest usable AS: 4294967295 is reserved (RFC 7300).
pub const MAX_AS_NUMBER: u32 = 4_294_967_294;
/// The key of the node's AS in a bgp lease's `BackendData`.
const LEASE_KEY: &str = "ASNumber";

/// `--bgp-as`: the node settings' `as_number`.
pub const NODE_AS: Flag = Flag {
    name: "--bgp-as",
    value: "AS",
    help: &[
        "this node's AS for the bgp backend (default: the network's",
        "Backend.ASNumber); other nodes learn it from the lease",
    ],
    default: None,
    check: check_flag,
    per_node: true,
};

fn check_flag(text: &str) -> Result<(), String> {
    parse_node_as(text).map(|_| ())
}

/// The value of `--bgp-as`. The error is worded after the value (the flag's name comes first).
pub fn parse_node_as(text: &str) -> Result<u32, String> {
    let n = text
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("is not an AS number (1..{MAX_AS_NUMBER})"))?;
    check_as(n)?;
    Ok(n)
}

/// An AS a node can be in: 1..=4294967294, not AS_TRANS. The error follows the number.
fn check_as(n: u32) -> Result<(), String> {
    if n == 0 || n > MAX_AS_NUMBER {
        return Err(format!("is outside 1..{MAX_AS_NUMBER}"));
    }
    if n == AS_TRANS {
        return Err("is AS_TRANS, which stands in for 4-byte AS numbers and is no one's AS".into());
    }
    Ok(())
}

/// This node's lease `BackendData`: its own AS when it has one (`--bgp-as`), else none (the
/// lease then follows the cluster's `ASNumber`, as before the flag existed).
pub fn lease_data(node_as: Option<u32>) -> Option<Value> {
    let n = node_as?;
    let mut m = Map::new();
    m.insert(LEASE_KEY.into(), Value::from(n));
    Some(Value::Object(m))
}

/// The AS another node's lease `BackendData` names; `None` for no data (`null` or absent, or
/// an object without `ASNumber`: the cluster's AS). Decoded as flanneld decodes backend data
/// (any case of the key; other keys are ignored, as Go ignores fields it does not know, so a
/// newer agent may add some). The error says what is wrong with the data.
pub fn lease_as(data: Option<&Value>) -> Result<Option<u32>, String> {
    let Some(data) = data.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let obj = data
        .as_object()
        .ok_or("BackendData is not an object ({\"ASNumber\": N})")?;
    let Some(v) = libcni::gojson::get(obj, LEASE_KEY).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let n = libcni::gojson::from_value::<u32>(v)
        .map_err(|_| format!("BackendData.ASNumber {v} is not an AS number"))?;
    check_as(n).map_err(|why| format!("BackendData.ASNumber {n} {why}"))?;
    Ok(Some(n))
}

/// The AS of each mesh neighbour whose AS is not `node_as` (an eBGP session), from the
/// leases (a neighbour's address is its leases' `PublicIP`). A neighbour holding several leases
/// that disagree (a stale one of another AS) takes the AS of its first lease in subnet order:
/// the choice only has to be the same on every pass.
pub fn mesh_remote_as(
    mesh: &[Ipv4Addr],
    leases: &[LeaseRoute],
    node_as: u32,
) -> BTreeMap<Ipv4Addr, u32> {
    let mut sorted: Vec<&LeaseRoute> = leases.iter().collect();
    sorted.sort_unstable_by_key(|l| (l.next_hop, l.subnet));
    let mut out = BTreeMap::new();
    for ip in mesh {
        let Some(l) = sorted.iter().find(|l| l.next_hop == *ip) else {
            continue;
        };
        if l.origin_as != node_as {
            out.insert(*ip, l.origin_as);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values() {
        assert_eq!(parse_node_as("64513"), Ok(64513));
        assert_eq!(parse_node_as("4294967294"), Ok(4_294_967_294));
        assert_eq!(parse_node_as("1"), Ok(1));
        for (value, why) in [
            ("0", "is outside 1..4294967294"),
            ("4294967295", "is outside 1..4294967294"),
            ("4294967296", "is not an AS number (1..4294967294)"),
            ("-1", "is not an AS number"),
            ("AS64513", "is not an AS number"),
            ("", "is not an AS number"),
            (
                "23456",
                "is AS_TRANS, which stands in for 4-byte AS numbers",
            ),
        ] {
            let e = parse_node_as(value).unwrap_err();
            assert!(e.starts_with(why), "{value}: {e}");
        }
    }

    /// The agent's option parser reads `--bgp-as` and `FLANNELD_BGP_AS`, and refuses a bad
    /// value naming where it came from.
    #[test]
    fn read_by_the_agent() {
        use crate::options::{parse_with_env, Invocation};
        let read = |args: &[&str], var: Option<&str>| {
            let var = var.map(str::to_string);
            let env = move |name: &str| (name == "FLANNELD_BGP_AS").then(|| var.clone()).flatten();
            parse_with_env(args.iter().map(|s| s.to_string()), env).map(|i| match i {
                Invocation::Run(o) => o.backend_flags.get(&NODE_AS).map(str::to_string),
                _ => None,
            })
        };
        assert_eq!(read(&[], None).unwrap(), None);
        assert_eq!(
            read(&["--bgp-as=65001"], None).unwrap().as_deref(),
            Some("65001")
        );
        assert_eq!(read(&[], Some("65002")).unwrap().as_deref(), Some("65002"));
        assert_eq!(
            read(&["--bgp-as", "65001"], Some("65002"))
                .unwrap()
                .as_deref(),
            Some("65001")
        );
        assert_eq!(
            read(&["--bgp-as=23456"], None).unwrap_err().to_string(),
            "usage: --bgp-as \"23456\" is AS_TRANS, which stands in for 4-byte AS numbers and is no one's AS"
        );
        assert_eq!(
            read(&[], Some("0")).unwrap_err().to_string(),
            "usage: FLANNELD_BGP_AS \"0\" is outside 1..4294967294"
        );
    }

    #[test]
    fn lease_data_round_trips() {
        assert_eq!(lease_data(None), None);
        let data = lease_data(Some(64513)).unwrap();
        assert_eq!(data.to_string(), r#"{"ASNumber":64513}"#);
        assert_eq!(lease_as(Some(&data)), Ok(Some(64513)));
    }

    #[test]
    fn lease_as_as_go_decodes_it() {
        let as_of = |json: &str| {
            let v: Value = serde_json::from_str(json).unwrap();
            lease_as(Some(&v))
        };
        assert_eq!(lease_as(None), Ok(None));
        assert_eq!(as_of("null"), Ok(None));
        assert_eq!(as_of("{}"), Ok(None));
        assert_eq!(as_of(r#"{"ASNumber":null}"#), Ok(None));
        assert_eq!(as_of(r#"{"asnumber":65001}"#), Ok(Some(65001)));
        assert_eq!(as_of(r#"{"ASNumber":65001,"Future":1}"#), Ok(Some(65001)));
        for (json, why) in [
            ("[1]", "BackendData is not an object"),
            ("7", "BackendData is not an object"),
            (
                r#"{"ASNumber":"65001"}"#,
                "BackendData.ASNumber \"65001\" is not an AS number",
            ),
            (
                r#"{"ASNumber":-1}"#,
                "BackendData.ASNumber -1 is not an AS number",
            ),
            (
                r#"{"ASNumber":1.5}"#,
                "BackendData.ASNumber 1.5 is not an AS number",
            ),
            (r#"{"ASNumber":0}"#, "BackendData.ASNumber 0 is outside"),
            (
                r#"{"ASNumber":23456}"#,
                "BackendData.ASNumber 23456 is AS_TRANS",
            ),
        ] {
            let e = as_of(json).unwrap_err();
            assert!(e.starts_with(why), "{json}: {e}");
        }
    }

    #[test]
    fn mesh_neighbours_in_other_ases() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let lease = |subnet: &str, next_hop: &str, origin_as: u32| LeaseRoute {
            subnet: subnet.parse().unwrap(),
            next_hop: ip(next_hop),
            origin_as,
        };
        let leases = [
            lease("10.244.3.0/24", "172.31.250.3", 65003),
            lease("10.244.1.0/24", "172.31.250.1", 64512),
            // Node 3's stale lease in another AS: its first lease (by subnet) decides.
            lease("10.244.2.0/24", "172.31.250.3", 65009),
        ];
        let mesh = [ip("172.31.250.1"), ip("172.31.250.3"), ip("172.31.250.4")];
        let remote = mesh_remote_as(&mesh, &leases, 64512);
        // Node 1 shares our AS (iBGP, not listed); node 4 has no lease (not listed).
        assert_eq!(
            remote.into_iter().collect::<Vec<_>>(),
            vec![(ip("172.31.250.3"), 65009)]
        );
        let remote = mesh_remote_as(&mesh, &leases, 65009);
        assert_eq!(
            remote.into_iter().collect::<Vec<_>>(),
            vec![(ip("172.31.250.1"), 64512)]
        );
    }
}
