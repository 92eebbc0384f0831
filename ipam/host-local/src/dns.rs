//! resolv.conf → DNS settings for the result (`nameserver`, `domain`, `search`, `options`).

use std::io::Read;

use crate::error::IpamError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsSettings {
    pub nameservers: Vec<String>,
    pub domain: String,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

/// resolv.conf files are tiny; anything bigger is not one.
const MAX_RESOLV_CONF: u64 = 1 << 20;

pub fn read_resolv_conf(path: &str) -> Result<DnsSettings, IpamError> {
    let file = std::fs::File::open(path).map_err(|source| IpamError::Io {
        op: "open resolvConf",
        path: path.into(),
        source,
    })?;
    let mut text = String::new();
    file.take(MAX_RESOLV_CONF)
        .read_to_string(&mut text)
        .map_err(|source| IpamError::Io {
            op: "read resolvConf",
            path: path.into(),
            source,
        })?;
    Ok(parse_resolv_conf(&text))
}

pub fn parse_resolv_conf(text: &str) -> DnsSettings {
    let mut dns = DnsSettings::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 2 {
            continue;
        }
        let rest = fields[1..].iter().map(|s| s.to_string());
        match fields[0] {
            "nameserver" => dns.nameservers.push(fields[1].to_string()),
            "domain" => dns.domain = fields[1].to_string(),
            "search" => dns.search.extend(rest),
            "options" => dns.options.extend(rest),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_the_reference() {
        let dns = parse_resolv_conf(
            "# comment\n; other\nnameserver 10.0.0.1\nnameserver  10.0.0.2 ignored\ndomain a.example\nsearch x.example y.example\noptions ndots:2 edns0\nbogus\n",
        );
        assert_eq!(dns.nameservers, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(dns.domain, "a.example");
        assert_eq!(dns.search, ["x.example", "y.example"]);
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
    }
}
