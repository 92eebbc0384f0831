//! The nftables backend with the reference's objects: table `ip cni_hostport` (and `ip6`),
//! chains `hostports`, `hostip_hostports`, `hostports_all`, base chains `prerouting`/`output`
//! (nat, dstnat; `fib daddr type local jump hostports_all`) and `masquerading` (nat, srcnat).
//! Every per-container rule carries the container ID as its comment; DEL and CHECK find them
//! by that comment.
//!
//! Rules are added in nft's text syntax (one atomic `nft -f -` transaction) because the
//! `conditionsV4/V6` option is nft text; every interpolated value is either parsed (addresses,
//! ports, protocols), validated by the skeleton (container ID) or screened for statement
//! separators (conditions, see config.rs).

use ipnetwork::IpNetwork;
use libcni::CniError;
use netkit::netfilter::{exec, nftables as nft};

use crate::config::PortMapConf;

pub const TABLE: &str = "cni_hostport";
const HOSTPORTS: &str = "hostports";
const HOSTIP_HOSTPORTS: &str = "hostip_hostports";
const HOSTPORTS_ALL: &str = "hostports_all";
const MASQUERADING: &str = "masquerading";
/// Chains holding per-container rules.
const CONTAINER_CHAINS: &[&str] = &[HOSTIP_HOSTPORTS, HOSTPORTS, MASQUERADING];

fn nf(e: exec::Error) -> CniError {
    CniError::internal(e.to_string())
}

fn family(v6: bool) -> &'static str {
    if v6 {
        "ip6"
    } else {
        "ip"
    }
}

fn ip_port(ip: std::net::IpAddr, port: u16) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => format!("{v4}:{port}"),
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

/// The `nft -f` script of an ADD for one family.
pub fn add_script(conf: &PortMapConf, container_id: &str, container: IpNetwork) -> String {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    let t = format!("{fam} {TABLE}");
    let cond = conf.conditions(v6).join(" ");
    let cond = if cond.is_empty() {
        String::new()
    } else {
        format!("{cond} ")
    };
    let mut s = String::new();
    let mut line = |l: String| {
        s.push_str(&l);
        s.push('\n');
    };
    line(format!(
        "add table {t} {{ comment \"CNI portmap plugin\" ; }}"
    ));
    line(format!("add chain {t} {HOSTPORTS}"));
    line(format!("add chain {t} {HOSTIP_HOSTPORTS}"));
    line(format!("add chain {t} {HOSTPORTS_ALL}"));
    line(format!("flush chain {t} {HOSTPORTS_ALL}"));
    line(format!(
        "add rule {t} {HOSTPORTS_ALL} jump {HOSTIP_HOSTPORTS}"
    ));
    line(format!("add rule {t} {HOSTPORTS_ALL} jump {HOSTPORTS}"));
    for (chain, hook) in [("prerouting", "prerouting"), ("output", "output")] {
        line(format!(
            "add chain {t} {chain} {{ type nat hook {hook} priority -100 ; }}"
        ));
        line(format!("flush chain {t} {chain}"));
        line(format!(
            "add rule {t} {chain} {cond}fib daddr type local jump {HOSTPORTS_ALL}"
        ));
    }
    line(format!(
        "add chain {t} {MASQUERADING} {{ type nat hook postrouting priority 100 ; }}"
    ));
    let comment = format!("comment \"{container_id}\"");
    for m in &conf.mappings {
        let Some(host_ip) = m.host_ip_for(v6) else {
            continue;
        };
        let (chain, daddr) = match host_ip {
            Some(ip) => (HOSTIP_HOSTPORTS, format!("{fam} daddr {ip} ")),
            None => (HOSTPORTS, String::new()),
        };
        line(format!(
            "add rule {t} {chain} {daddr}meta l4proto {} th dport {} dnat to {} {comment}",
            m.protocol.as_str(),
            m.host_port,
            ip_port(container.ip(), m.container_port)
        ));
    }
    if conf.snat {
        let cip = container.ip();
        if conf.masq_all {
            line(format!(
                "add rule {t} {MASQUERADING} {fam} daddr {cip} ct status dnat masquerade {comment}"
            ));
        } else {
            // The whole subnet, as the iptables backend does: a neighbour container reaching
            // the host port must see replies come back through the host. `ct status dnat`
            // limits it to port-forwarded connections (the iptables backend's mark), so plain
            // pod-to-pod traffic seen here through br_netfilter keeps its source address.
            let subnet =
                IpNetwork::new(container.network(), container.prefix()).unwrap_or(container);
            line(format!("add rule {t} {MASQUERADING} {fam} saddr {subnet} {fam} daddr {cip} ct status dnat masquerade {comment}"));
            if !v6 {
                line(format!("add rule {t} {MASQUERADING} ip saddr 127.0.0.1 ip daddr {cip} masquerade {comment}"));
            }
        }
    }
    s
}

/// How many per-container rules an ADD creates for one family (for CHECK).
pub fn expected_rules(conf: &PortMapConf, container: IpNetwork) -> usize {
    let v6 = container.is_ipv6();
    let dnat = conf
        .mappings
        .iter()
        .filter(|m| m.host_ip_for(v6).is_some())
        .count();
    let masq = match (conf.snat, conf.masq_all, v6) {
        (false, _, _) => 0,
        (true, true, _) | (true, false, true) => 1,
        (true, false, false) => 2,
    };
    dnat + masq
}

fn apply_script(script: &str, what: &str) -> Result<(), CniError> {
    exec::run_ok("nft", &["-f", "-"], Some(script.as_bytes()), what)
        .map(|_| ())
        .map_err(nf)
}

/// ADD for one family; a leftover of an earlier ADD of the same container is removed first.
pub fn forward_ports(
    conf: &PortMapConf,
    container_id: &str,
    container: IpNetwork,
) -> Result<(), CniError> {
    remove_family(container.is_ipv6(), container_id)?;
    apply_script(
        &add_script(conf, container_id, container),
        "failed to add nftables port mappings",
    )
}

/// The handles of this container's rules, per chain, in one family.
fn container_rules(v6: bool, container_id: &str) -> Result<Vec<(&'static str, u64)>, CniError> {
    let fam = family(v6);
    let mut out = Vec::new();
    for chain in CONTAINER_CHAINS {
        let Some(rules) = nft::list_chain(fam, TABLE, chain).map_err(nf)? else {
            continue;
        };
        out.extend(
            rules
                .into_iter()
                .filter(|r| r.comment.as_deref() == Some(container_id))
                .map(|r| (*chain, r.handle)),
        );
    }
    Ok(out)
}

fn remove_family(v6: bool, container_id: &str) -> Result<(), CniError> {
    let fam = family(v6);
    let rules = container_rules(v6, container_id)?;
    let cmds = rules
        .into_iter()
        .map(|(chain, handle)| nft::delete_rule(fam, TABLE, chain, handle))
        .collect();
    nft::apply(
        cmds,
        &format!("failed to delete the nftables port mappings of {container_id}"),
    )
    .map_err(nf)
}

/// DEL: both families. A host without nft, or without our tables, has nothing to remove.
pub fn unforward_ports(container_id: &str) -> Result<(), CniError> {
    if exec::find_tool("nft").is_none() {
        return Ok(());
    }
    for v6 in present_families()? {
        remove_family(v6, container_id)?;
    }
    Ok(())
}

/// The families (false = ip, true = ip6) that have a `cni_hostport` table (one `nft` call).
fn present_families() -> Result<Vec<bool>, CniError> {
    let out = exec::run_ok(
        "nft",
        &["-j", "list", "tables"],
        None,
        "failed to list nftables tables",
    )
    .map_err(nf)?;
    let doc: serde_json::Value = serde_json::from_str(&out).map_err(|e| {
        CniError::internal(format!(
            "cannot parse the output of nft -j list tables: {e}"
        ))
    })?;
    let mut fams = Vec::new();
    for item in doc
        .get("nftables")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
    {
        let Some(t) = item.get("table") else { continue };
        if t.get("name").and_then(|v| v.as_str()) != Some(TABLE) {
            continue;
        }
        match t.get("family").and_then(|v| v.as_str()) {
            Some("ip") => fams.push(false),
            Some("ip6") => fams.push(true),
            _ => {}
        }
    }
    Ok(fams)
}

/// CHECK for one family: the base chains exist and the container's rules are all there.
pub fn check_ports(
    conf: &PortMapConf,
    container_id: &str,
    container: IpNetwork,
) -> Result<(), CniError> {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    for chain in ["prerouting", "output", HOSTPORTS_ALL] {
        if nft::list_chain(fam, TABLE, chain)
            .map_err(nf)?
            .is_none_or(|r| r.is_empty())
        {
            return Err(CniError::internal(format!(
                "nftables chain {fam} {TABLE} {chain} is missing or empty"
            )));
        }
    }
    let have = container_rules(v6, container_id)?.len();
    let want = expected_rules(conf, container);
    if have != want {
        return Err(CniError::internal(format!(
            "found {have} nftables port mapping rules for {container_id} in {fam} {TABLE}, expected {want}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{PortMapping, Protocol};

    fn conf() -> PortMapConf {
        PortMapConf {
            mappings: vec![
                PortMapping {
                    host_port: 8080,
                    container_port: 80,
                    protocol: Protocol::Tcp,
                    host_ip: None,
                },
                PortMapping {
                    host_port: 53,
                    container_port: 53,
                    protocol: Protocol::Udp,
                    host_ip: Some("192.168.1.1".parse().unwrap()),
                },
            ],
            snat: true,
            masq_all: false,
            mark_masq_bit: 13,
            external_set_mark_chain: None,
            conditions_v4: vec!["iifname".into(), "!=".into(), "eth9".into()],
            conditions_v6: vec![],
            backend: None,
        }
    }

    #[test]
    fn v4_script() {
        let s = add_script(&conf(), "cid", "10.88.0.5/16".parse().unwrap());
        assert!(s.contains("add rule ip cni_hostport prerouting iifname != eth9 fib daddr type local jump hostports_all\n"));
        assert!(s.contains("add rule ip cni_hostport hostports meta l4proto tcp th dport 8080 dnat to 10.88.0.5:80 comment \"cid\"\n"));
        assert!(s.contains(
            "add rule ip cni_hostport hostip_hostports ip daddr 192.168.1.1 meta l4proto udp th dport 53 dnat to 10.88.0.5:53 comment \"cid\"\n"
        ));
        assert!(s.contains(
            "ip saddr 10.88.0.0/16 ip daddr 10.88.0.5 ct status dnat masquerade comment \"cid\""
        ));
        assert!(s.contains("ip saddr 127.0.0.1 ip daddr 10.88.0.5 masquerade"));
        assert_eq!(expected_rules(&conf(), "10.88.0.5/16".parse().unwrap()), 4);
    }

    #[test]
    fn v6_script() {
        let s = add_script(&conf(), "cid", "fd00::5/64".parse().unwrap());
        assert!(s.contains(
            "add rule ip6 cni_hostport output fib daddr type local jump hostports_all\n"
        ));
        assert!(s.contains("dnat to [fd00::5]:80"));
        assert!(!s.contains("192.168.1.1"));
        assert!(!s.contains("127.0.0.1"));
        assert_eq!(expected_rules(&conf(), "fd00::5/64".parse().unwrap()), 2);
    }
}
