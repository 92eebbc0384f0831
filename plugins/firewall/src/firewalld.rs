//! The firewalld backend: each container address becomes a source of a zone ("trusted" by
//! default), in firewalld's runtime configuration.
//!
//! The reference talks D-Bus directly; we drive firewalld through its own client,
//! `firewall-cmd`, with fixed argument vectors (no D-Bus library needed). Whether firewalld
//! runs is decided without spawning anything: its pid file names a live firewalld process.

use std::net::IpAddr;

use netkit::netfilter::exec;

use crate::error::FirewallError;

const PID_FILES: &[&str] = &["/run/firewalld.pid", "/var/run/firewalld.pid"];
const TOOL: &str = "firewall-cmd";

/// Whether a firewalld daemon is running (pid file + matching live process).
pub fn is_running() -> bool {
    PID_FILES.iter().any(|f| {
        let Ok(text) = std::fs::read_to_string(f) else {
            return false;
        };
        let Ok(pid) = text.trim().parse::<u32>() else {
            return false;
        };
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains("firewalld"))
            .unwrap_or(false)
    })
}

fn source(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}/32"),
        IpAddr::V6(v6) => format!("{v6}/128"),
    }
}

/// The argument vector of one firewall-cmd call.
pub fn args(zone: &str, op: &str, ip: IpAddr) -> Vec<String> {
    vec![
        format!("--zone={zone}"),
        format!("--{op}-source={}", source(ip)),
    ]
}

fn run(zone: &str, op: &str, ip: IpAddr) -> Result<exec::Output, FirewallError> {
    let a = args(zone, op, ip);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    exec::run(
        TOOL,
        &refs,
        None,
        &format!("failed to {op} source {ip} in firewalld zone {zone}"),
    )
    .map_err(FirewallError::from)
}

/// ADD: bind each address to the zone (already bound to it is fine).
pub fn add(ips: &[IpAddr], zone: &str) -> Result<(), FirewallError> {
    for ip in ips {
        let out = run(zone, "add", *ip)?;
        if !out.success
            && !out.stderr.contains("ZONE_ALREADY_SET")
            && !out.stderr.contains("ALREADY_ENABLED")
        {
            return Err(FirewallError::FirewalldAdd {
                ip: *ip,
                zone: zone.to_string(),
                stderr: out.stderr,
            });
        }
    }
    Ok(())
}

/// DEL: unbind each address; errors are logged only (as the reference does).
pub fn del(ips: &[IpAddr], zone: &str) {
    for ip in ips {
        match run(zone, "remove", *ip) {
            Ok(o) if o.success => {}
            Ok(o) => eprintln!(
                "firewall: failed to remove source {ip} from firewalld zone {zone}: {}",
                o.stderr
            ),
            Err(e) => eprintln!("firewall: {e}"),
        }
    }
}

/// CHECK: each address is a source of the zone.
pub fn check(ips: &[IpAddr], zone: &str) -> Result<(), FirewallError> {
    for ip in ips {
        let out = run(zone, "query", *ip)?;
        if !out.success {
            return Err(FirewallError::FirewalldNotBound {
                ip: *ip,
                zone: zone.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv() {
        assert_eq!(
            args("trusted", "add", "10.0.0.5".parse().unwrap()),
            ["--zone=trusted", "--add-source=10.0.0.5/32"]
        );
        assert_eq!(
            args("z", "query", "fd00::1".parse().unwrap()),
            ["--zone=z", "--query-source=fd00::1/128"]
        );
    }
}
