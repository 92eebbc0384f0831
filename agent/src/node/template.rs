//! Renders the operator's conflist template with this node's lease filled in.
//!
//! Placeholders are `{{name}}`; an unknown name is an error rather than silently left in the file.
//! `{{mtu}}`, `{{vni}}` and `{{port}}` are bare numbers (write `"mtu": {{mtu}}`); the others are
//! text to be placed inside JSON strings. The rendered text must be a JSON object.

use ipnetwork::{Ipv4Network, Ipv6Network};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::backend;

#[derive(Debug, Clone)]
pub struct TemplateValues {
    pub subnet: Ipv4Network,
    pub network: Ipv4Network,
    pub mtu: u32,
    pub public_ip: Ipv4Addr,
    pub subnet_file: String,
    /// `{{vni}}`, `{{port}}`, `{{mode}}` and the peers files: the backend's.
    pub backend: backend::TemplateValues,
    /// The IPv6 half of a dual-stack lease.
    pub ipv6: Option<Ipv6Values>,
}

#[derive(Debug, Clone)]
pub struct Ipv6Values {
    pub subnet: Ipv6Network,
    pub network: Ipv6Network,
    pub public_ip: Ipv6Addr,
}

impl TemplateValues {
    /// The IPv6 placeholders; `None` when `name` is not one.
    fn lookup_v6(&self, name: &str) -> Option<Result<String, String>> {
        let get = |v6: &Ipv6Values| -> String {
            match name {
                "ipv6Subnet" => v6.subnet.to_string(),
                "ipv6Network" => v6.network.to_string(),
                "ipv6Gateway" => {
                    Ipv6Addr::from(u128::from(v6.subnet.network()).wrapping_add(1)).to_string()
                }
                "publicIPv6" => v6.public_ip.to_string(),
                _ => json_escape(&self.backend.ipv6_peers_file),
            }
        };
        if !IPV6_PLACEHOLDERS.contains(&name) {
            return None;
        }
        Some(self.ipv6.as_ref().map(get).ok_or_else(|| {
            format!(
                "placeholder {{{{{name}}}}} needs a dual-stack network (EnableIPv6 and IPv6Network in the network config)"
            )
        }))
    }

    fn lookup(&self, name: &str) -> Option<String> {
        Some(match name {
            "subnet" => self.subnet.to_string(),
            "network" => self.network.to_string(),
            "gateway" => {
                Ipv4Addr::from(u32::from(self.subnet.network()).wrapping_add(1)).to_string()
            }
            "mtu" => self.mtu.to_string(),
            "publicIP" => self.public_ip.to_string(),
            "vni" => self.backend.vni.to_string(),
            "port" => self.backend.port.to_string(),
            "subnetFile" => json_escape(&self.subnet_file),
            "peersFile" => json_escape(&self.backend.peers_file),
            "mode" => self.backend.mode.clone(),
            _ => return None,
        })
    }
}

/// Names understood inside `{{...}}`.
pub const PLACEHOLDERS: &[&str] = &[
    "subnet",
    "network",
    "gateway",
    "mtu",
    "publicIP",
    "vni",
    "port",
    "subnetFile",
    "peersFile",
    "mode",
];

/// The dual-stack ones (an error on an IPv4-only network).
pub const IPV6_PLACEHOLDERS: &[&str] = &[
    "ipv6Subnet",
    "ipv6Network",
    "ipv6Gateway",
    "publicIPv6",
    "ipv6PeersFile",
];

fn json_escape(s: &str) -> String {
    let quoted = serde_json::Value::String(s.to_string()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

pub fn render(template: &str, values: &TemplateValues) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or("unterminated \"{{\" placeholder")?;
        let name = after[..end].trim();
        let value = match values.lookup_v6(name) {
            Some(v) => v?,
            None => values.lookup(name).ok_or_else(|| {
                format!(
                    "unknown placeholder {{{{{name}}}}} (known: {}, {})",
                    PLACEHOLDERS.join(", "),
                    IPV6_PLACEHOLDERS.join(", ")
                )
            })?,
        };
        out.push_str(&value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    let parsed: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("rendered text is not valid JSON: {e}"))?;
    if !parsed.is_object() {
        return Err("rendered text is not a JSON object".into());
    }
    Ok(out)
}

/// The file name the rendered template gets in the conf dir: the template's name without a
/// `.template`/`.tmpl` suffix, with `.conflist` appended unless it already names a CNI config.
pub fn output_name(template_file_name: &str) -> String {
    let base = template_file_name
        .strip_suffix(".template")
        .or_else(|| template_file_name.strip_suffix(".tmpl"))
        .unwrap_or(template_file_name);
    if base.ends_with(".conflist") || base.ends_with(".conf") || base.ends_with(".json") {
        base.to_string()
    } else {
        format!("{base}.conflist")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> TemplateValues {
        TemplateValues {
            subnet: "10.244.3.0/24".parse().unwrap(),
            network: "10.244.0.0/16".parse().unwrap(),
            mtu: 1450,
            public_ip: "192.168.50.3".parse().unwrap(),
            subnet_file: "/run/flannel/subnet.env".into(),
            backend: backend::TemplateValues {
                vni: 1,
                port: 8472,
                mode: "vxlan".into(),
                peers_file: "/run/ferrocni/agent/peers.json".into(),
                ipv6_peers_file: "/run/ferrocni/agent/peers-v6.json".into(),
            },
            ipv6: None,
        }
    }

    #[test]
    fn dual_stack_placeholders() {
        let t = r#"{"ranges":[[{"subnet":"{{subnet}}"}],[{"subnet":"{{ipv6Subnet}}","gateway":"{{ipv6Gateway}}"}]],
            "dst":"{{ipv6Network}}","localIP":"{{publicIPv6}}","peersFile":"{{ipv6PeersFile}}"}"#;
        let err = render(t, &values()).unwrap_err();
        assert!(
            err.contains("{{ipv6Subnet}} needs a dual-stack network"),
            "{err}"
        );
        let mut v = values();
        v.ipv6 = Some(Ipv6Values {
            subnet: "fd00:10:244:3::/64".parse().unwrap(),
            network: "fd00:10:244::/56".parse().unwrap(),
            public_ip: "fd00:50::3".parse().unwrap(),
        });
        let out: serde_json::Value = serde_json::from_str(&render(t, &v).unwrap()).unwrap();
        assert_eq!(out["ranges"][1][0]["subnet"], "fd00:10:244:3::/64");
        assert_eq!(out["ranges"][1][0]["gateway"], "fd00:10:244:3::1");
        assert_eq!(out["dst"], "fd00:10:244::/56");
        assert_eq!(out["localIP"], "fd00:50::3");
        assert_eq!(out["peersFile"], "/run/ferrocni/agent/peers-v6.json");
    }

    #[test]
    fn fills_in_the_lease() {
        let t = r#"{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge","mtu":{{mtu}},
            "ipam":{"type":"host-local","ranges":[[{"subnet":"{{ subnet }}","gateway":"{{gateway}}"}]],
            "routes":[{"dst":"{{network}}"}]}}]}"#;
        let out = render(t, &values()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let ipam = &v["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][0][0]["subnet"], "10.244.3.0/24");
        assert_eq!(ipam["ranges"][0][0]["gateway"], "10.244.3.1");
        assert_eq!(ipam["routes"][0]["dst"], "10.244.0.0/16");
        assert_eq!(v["plugins"][0]["mtu"], 1450);
    }

    #[test]
    fn rejects_unknown_unterminated_and_non_json() {
        assert!(render(r#"{"a":"{{nope}}"}"#, &values())
            .unwrap_err()
            .contains("unknown placeholder {{nope}}"));
        assert!(render(r#"{"a":"{{subnet"}"#, &values())
            .unwrap_err()
            .contains("unterminated"));
        assert!(render(r#"{"a":{{subnet}}}"#, &values())
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(render(r#"[1]"#, &values())
            .unwrap_err()
            .contains("not a JSON object"));
    }

    #[test]
    fn escapes_paths() {
        let mut v = values();
        v.subnet_file = "/run/we\"ird".into();
        let out = render(r#"{"subnetFile":"{{subnetFile}}"}"#, &v).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed["subnetFile"], "/run/we\"ird");
    }

    #[test]
    fn output_names() {
        assert_eq!(
            output_name("10-ferrocni.conflist.template"),
            "10-ferrocni.conflist"
        );
        assert_eq!(output_name("10-podnet.tmpl"), "10-podnet.conflist");
        assert_eq!(output_name("podnet.conf"), "podnet.conf");
    }
}
