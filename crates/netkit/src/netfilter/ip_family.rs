//! The address family of iptables rules: the tools are per family (`iptables`, `ip6tables`),
//! and so is what the host uses for them (its legacy tables, its nf_tables family).

/// Address family: picks `iptables` or `ip6tables`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: &std::net::IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }
}
