//! `/proc/sys/net` reads and writes. `/proc/sys/net` follows the CALLING THREAD's netns,
//! so the plain functions act on the current netns and the `*_in` variants switch first.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::netns::Netns;

const ROOT: &str = "/proc/sys";

/// Maps a key to its `/proc/sys` path. Keys may be dotted (`net.ipv4.ip_forward`) or
/// slashed (`net/ipv4/conf/eth0.100/forwarding`: use slashes when a component contains
/// a dot, like a VLAN interface name). Only keys under `net` are accepted.
pub fn sysctl_path(key: &str) -> Result<PathBuf> {
    let ctx = || format!("invalid sysctl key {key:?}");
    let key = key.trim_start_matches('/');
    let key = key.strip_prefix("proc/sys/").unwrap_or(key);
    let parts: Vec<&str> = if key.contains('/') {
        key.split('/').collect()
    } else {
        key.split('.').collect()
    };
    if parts.first() != Some(&"net") || parts.len() < 2 {
        return Err(Error::invalid(ctx(), "only keys under net are allowed"));
    }
    let mut path = PathBuf::from(ROOT);
    for p in parts {
        if p.is_empty() || p == "." || p == ".." || p.contains('\0') {
            return Err(Error::invalid(ctx(), "empty, . or .. path component"));
        }
        path.push(p);
    }
    Ok(path)
}

/// Reads a sysctl in the current thread's netns (trailing newline removed).
pub fn read(key: &str) -> Result<String> {
    let path = sysctl_path(key)?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("failed to read sysctl {key}"), e))?;
    Ok(text.trim_end_matches('\n').to_string())
}

/// Writes a sysctl in the current thread's netns.
pub fn write(key: &str, value: &str) -> Result<()> {
    let path = sysctl_path(key)?;
    std::fs::write(&path, value)
        .map_err(|e| Error::io(format!("failed to set sysctl {key}={value}"), e))
}

/// Writes only when the current value differs (avoids needless writes, e.g. ip_forward).
/// Returns whether a write happened.
pub fn write_if_different(key: &str, value: &str) -> Result<bool> {
    if read(key)?.trim() == value.trim() {
        return Ok(false);
    }
    write(key, value)?;
    Ok(true)
}

/// [`read`] inside `ns`.
pub fn read_in(ns: &Netns, key: &str) -> Result<String> {
    ns.run(|| read(key))?
}

/// [`write`] inside `ns`.
pub fn write_in(ns: &Netns, key: &str, value: &str) -> Result<()> {
    ns.run(|| write(key, value))?
}

/// [`write_if_different`] inside `ns`.
pub fn write_if_different_in(ns: &Netns, key: &str, value: &str) -> Result<bool> {
    ns.run(|| write_if_different(key, value))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_and_slashed_keys() {
        assert_eq!(
            sysctl_path("net.ipv4.ip_forward").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.100/forwarding").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/forwarding")
        );
        assert_eq!(
            sysctl_path("/proc/sys/net/ipv6/conf/all/forwarding").unwrap(),
            PathBuf::from("/proc/sys/net/ipv6/conf/all/forwarding")
        );
    }

    #[test]
    fn escapes_are_rejected() {
        for bad in [
            "kernel.hostname",
            "net/../kernel/hostname",
            "net..ipv4",
            "net",
            "",
            "net/ipv4//x",
            "vm.swappiness",
            "net/ipv4/./x",
        ] {
            assert!(sysctl_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_current_netns() {
        let v = read("net.ipv4.ip_forward").unwrap();
        assert!(v == "0" || v == "1");
    }
}
