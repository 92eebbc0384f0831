//! The dhcp IPAM configuration (`ipam.daemonSocketPath`, `provide`, `request`, `priority`)
//! and the DHCP options it turns into.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::message::opt;

use crate::error::DhcpError;

pub const DEFAULT_SOCKET_PATH: &str = "/run/cni/dhcp.sock";

#[derive(Deserialize, Default)]
struct NetConf {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ipam: IpamConf,
}

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "IPAMConfig")]
struct IpamConf {
    #[serde(default, rename = "daemonSocketPath")]
    daemon_socket_path: String,
    #[serde(default)]
    provide: Vec<ProvideOption>,
    #[serde(default)]
    request: Vec<RequestOption>,
    #[serde(default)]
    priority: i64,
}

#[derive(Deserialize, Default)]
struct ProvideOption {
    #[serde(default)]
    option: String,
    #[serde(default)]
    value: String,
    #[serde(default, rename = "fromArg")]
    from_arg: String,
}

#[derive(Deserialize, Default)]
struct RequestOption {
    #[serde(default, rename = "skipDefault")]
    skip_default: bool,
    #[serde(default)]
    option: String,
}

/// What the daemon needs to run a client for one attachment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DhcpConf {
    pub network: String,
    pub socket_path: String,
    /// Options sent with every request, in order (a later one replaces an earlier code).
    pub provide: Vec<(u8, Vec<u8>)>,
    /// Option 55, the parameter request list (empty: not sent).
    pub request_list: Vec<u8>,
    /// Metric of the returned routes (0: none).
    pub priority: u32,
}

/// Names of dhcp-options(5) the reference understands; anything else must be a number.
pub fn option_code(name: &str) -> Result<u8, DhcpError> {
    let code = match name {
        "dhcp-client-identifier" => opt::CLIENT_ID,
        "subnet-mask" => opt::SUBNET_MASK,
        "routers" => opt::ROUTER,
        "host-name" => opt::HOST_NAME,
        "user-class" => opt::USER_CLASS,
        "vendor-class-identifier" => opt::CLASS_ID,
        other => other
            .parse::<u8>()
            .map_err(|_| DhcpError::OptionName(other.to_string()))?,
    };
    Ok(code)
}

/// CNI_ARGS as the reference reads them for `fromArg`: `K=V` pairs split on `;`, the value
/// being everything after the first `=`; malformed pairs are skipped.
fn lenient_args(cni_args: &str) -> Vec<(&str, &str)> {
    cni_args
        .split(';')
        .filter_map(|p| p.split_once('='))
        .collect()
}

fn value_option(
    code: u8,
    value: &str,
    option: &str,
    from_arg: Option<&str>,
) -> Result<(u8, Vec<u8>), DhcpError> {
    if value.len() > 255 {
        return Err(DhcpError::ValueTooLong {
            option: option.to_string(),
            from_arg: from_arg.map(str::to_string),
        });
    }
    Ok((code, value.as_bytes().to_vec()))
}

/// Reads the configuration of a request (`config` is the whole stdin object).
pub fn parse(config: &Map<String, Value>, cni_args: &str) -> Result<DhcpConf, DhcpError> {
    let conf: NetConf = libcni::gojson::from_map(config).map_err(DhcpError::Decode)?;
    let args = lenient_args(cni_args);
    let mut provide: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut put = |o: (u8, Vec<u8>)| match provide.iter_mut().find(|(c, _)| *c == o.0) {
        Some(slot) => slot.1 = o.1,
        None => provide.push(o),
    };
    for p in &conf.ipam.provide {
        let code = option_code(&p.option)?;
        if !p.value.is_empty() {
            put(value_option(code, &p.value, &p.option, None)?);
        }
        if let Some((_, v)) = args.iter().rev().find(|(k, _)| *k == p.from_arg) {
            put(value_option(code, v, &p.option, Some(&p.from_arg))?);
        }
    }
    let mut request_list: Vec<u8> = Vec::new();
    let mut skip_default = false;
    for r in &conf.ipam.request {
        skip_default |= r.skip_default;
        if r.option.is_empty() {
            continue;
        }
        let code = option_code(&r.option)?;
        if !request_list.contains(&code) {
            request_list.push(code);
        }
    }
    if !skip_default {
        for code in [opt::ROUTER, opt::SUBNET_MASK] {
            if !request_list.contains(&code) {
                request_list.push(code);
            }
        }
    }
    let priority =
        u32::try_from(conf.ipam.priority).map_err(|_| DhcpError::Priority(conf.ipam.priority))?;
    Ok(DhcpConf {
        network: conf.name,
        socket_path: if conf.ipam.daemon_socket_path.is_empty() {
            DEFAULT_SOCKET_PATH.to_string()
        } else {
            conf.ipam.daemon_socket_path
        },
        provide,
        request_list,
        priority,
    })
}

/// An attachment, whole: `containerID/network/ifname`.
pub fn attachment_key(container_id: &str, network: &str, ifname: &str) -> String {
    format!("{container_id}/{network}/{ifname}")
}

/// The reference's client identifier: `containerID/network/ifname`, cut to 254 bytes.
pub fn client_id(container_id: &str, network: &str, ifname: &str) -> String {
    let mut id = attachment_key(container_id, network, ifname);
    if id.len() > 254 {
        let mut cut = 254;
        while !id.is_char_boundary(cut) {
            cut -= 1;
        }
        id.truncate(cut);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: Value, args: &str) -> Result<DhcpConf, DhcpError> {
        parse(v.as_object().unwrap(), args)
    }

    #[test]
    fn defaults() {
        let c = conf(json!({"name": "n", "ipam": {"type": "dhcp"}}), "").unwrap();
        assert_eq!(c.socket_path, DEFAULT_SOCKET_PATH);
        assert_eq!(c.request_list, [opt::ROUTER, opt::SUBNET_MASK]);
        assert!(c.provide.is_empty());
    }

    #[test]
    fn provide_and_request() {
        let c = conf(
            json!({"name": "n", "ipam": {"type": "dhcp", "daemonSocketPath": "/tmp/x.sock", "priority": 10,
                "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"},
                            {"option": "60", "value": "ferrocni"}],
                "request": [{"skipDefault": true}, {"option": "121"}, {"option": "routers"}]}}),
            "IgnoreUnknown=1;K8S_POD_NAME=web-0;junk",
        )
        .unwrap();
        assert_eq!(c.socket_path, "/tmp/x.sock");
        assert_eq!(c.priority, 10);
        assert_eq!(
            c.provide,
            [
                (opt::HOST_NAME, b"web-0".to_vec()),
                (opt::CLASS_ID, b"ferrocni".to_vec())
            ]
        );
        assert_eq!(c.request_list, [121, opt::ROUTER]);
    }

    #[test]
    fn errors() {
        assert!(conf(json!({"ipam": {"request": [{"option": "bogus"}]}}), "").is_err());
        assert!(conf(json!({"ipam": {"request": [{"option": "256"}]}}), "").is_err());
        let long = "x".repeat(256);
        assert!(conf(
            json!({"ipam": {"provide": [{"option": "12", "value": long}]}}),
            ""
        )
        .is_err());
        assert!(conf(json!({"ipam": {"priority": -1}}), "").is_err());
    }

    #[test]
    fn client_ids_fit_the_option() {
        assert_eq!(client_id("c", "n", "eth0"), "c/n/eth0");
        assert_eq!(client_id(&"a".repeat(300), "n", "eth0").len(), 254);
        // Two attachments of a long container ID share the cut client id, not the key the
        // daemon keeps their leases by.
        let cid = "a".repeat(200);
        let long_net = "n".repeat(60);
        assert_eq!(
            client_id(&cid, &long_net, "eth0"),
            client_id(&cid, &long_net, "eth1")
        );
        assert_ne!(
            attachment_key(&cid, &long_net, "eth0"),
            attachment_key(&cid, &long_net, "eth1")
        );
    }
}
