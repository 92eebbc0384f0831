//! Container sysctls: key resolution (`IFNAME` substitution, `/proc/sys/net` only), the
//! optional allowlist, applying with rollback, and CHECK comparison.
//!
//! All functions that touch `/proc/sys` act on the calling thread's netns: callers run them
//! inside the container netns.

use std::path::PathBuf;

use crate::config::Sysctls;
use crate::error::TuningError;

/// One regular expression per line; a configured key must match at least one of them.
/// When the file does not exist every `net.*` key is allowed.
pub const ALLOWLIST_PATH: &str = "/etc/cni/tuning/allowlist.conf";

/// The placeholder replaced by CNI_IFNAME inside keys.
const IFNAME_PLACEHOLDER: &str = "IFNAME";

/// Maps a configured key to its `/proc/sys` path for `ifname`.
///
/// Dotted keys are split on dots BEFORE the placeholder is replaced, so an interface name
/// with a dot (`eth0.100`) stays one path component. Slashed keys are split on slashes.
pub fn resolve(key: &str, ifname: &str) -> Result<PathBuf, TuningError> {
    let parts: Vec<String> = if key.contains('/') {
        key.trim_start_matches('/')
            .split('/')
            .map(|p| p.replace(IFNAME_PLACEHOLDER, ifname))
            .collect()
    } else {
        key.split('.')
            .map(|p| p.replace(IFNAME_PLACEHOLDER, ifname))
            .collect()
    };
    netkit::sysctl::sysctl_path(&parts.join("/")).map_err(|_| {
        // The reference names the key as it rewrote it: dots to slashes, then IFNAME.
        let rewritten = key
            .replace('.', "/")
            .replacen(IFNAME_PLACEHOLDER, ifname, 1);
        TuningError::SysctlKey { rewritten }
    })
}

/// Parses allowlist text: one pattern per line, blank lines and `#` comments skipped.
pub fn parse_allowlist(text: &str) -> Result<Vec<regex_lite::Regex>, TuningError> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            regex_lite::Regex::new(l).map_err(|source| TuningError::AllowlistPattern {
                pattern: l.to_string(),
                path: ALLOWLIST_PATH,
                source,
            })
        })
        .collect()
}

/// Rejects keys that match no allowlist pattern (matching is unanchored, as in the reference:
/// anchor patterns with `^...$` to be strict).
pub fn check_allowed(
    sysctls: &Sysctls,
    allowlist: &[regex_lite::Regex],
) -> Result<(), TuningError> {
    for (key, _) in &sysctls.0 {
        if !allowlist.iter().any(|re| re.is_match(key)) {
            return Err(TuningError::NotAllowed {
                key: key.clone(),
                patterns: allowlist.iter().map(|re| re.as_str().to_string()).collect(),
            });
        }
    }
    Ok(())
}

/// Loads [`ALLOWLIST_PATH`] if present and validates the keys against it.
pub fn enforce_allowlist(sysctls: &Sysctls) -> Result<(), TuningError> {
    if sysctls.0.is_empty() {
        return Ok(());
    }
    let text = match std::fs::read_to_string(ALLOWLIST_PATH) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(TuningError::ReadAllowlist {
                path: ALLOWLIST_PATH,
                source,
            })
        }
    };
    check_allowed(sysctls, &parse_allowlist(&text)?)
}

/// A written sysctl and the value it had before, for rollback.
pub struct Previous {
    path: PathBuf,
    value: String,
}

/// Writes every sysctl (current netns). On failure the ones already written are restored.
pub fn apply(sysctls: &Sysctls, ifname: &str) -> Result<Vec<Previous>, TuningError> {
    let mut done = Vec::new();
    for (key, value) in &sysctls.0 {
        match apply_one(key, value, ifname) {
            Ok(prev) => done.push(prev),
            Err(e) => {
                restore(&done);
                return Err(e);
            }
        }
    }
    Ok(done)
}

fn apply_one(key: &str, value: &str, ifname: &str) -> Result<Previous, TuningError> {
    let path = resolve(key, ifname)?;
    let old = std::fs::read_to_string(&path).map_err(|source| TuningError::ReadSysctl {
        key: key.to_string(),
        path: path.clone(),
        source,
    })?;
    std::fs::write(&path, value).map_err(|source| TuningError::WriteSysctl {
        key: key.to_string(),
        value: value.to_string(),
        path: path.clone(),
        source,
    })?;
    Ok(Previous {
        path,
        value: old.trim_end_matches('\n').to_string(),
    })
}

/// Best-effort restore of earlier values (rollback of a failed ADD).
pub fn restore(previous: &[Previous]) {
    for p in previous.iter().rev() {
        if let Err(e) = std::fs::write(&p.path, &p.value) {
            eprintln!(
                "tuning: failed to restore {} to {:?}: {e}",
                p.path.display(),
                p.value
            );
        }
    }
}

/// CHECK: every configured sysctl has the configured value (whitespace-insensitive, since the
/// kernel prints multi-value sysctls with tabs).
pub fn verify(sysctls: &Sysctls, ifname: &str) -> Result<(), TuningError> {
    for (key, want) in &sysctls.0 {
        let path = resolve(key, ifname)?;
        let have = std::fs::read_to_string(&path).map_err(|source| TuningError::ReadSysctl {
            key: key.clone(),
            path: path.clone(),
            source,
        })?;
        if !same_value(&have, want) {
            return Err(TuningError::SysctlMismatch {
                key: key.clone(),
                path,
                have: have.trim().to_string(),
                want: want.clone(),
            });
        }
    }
    Ok(())
}

fn same_value(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_dotted_slashed_and_ifname() {
        assert_eq!(
            resolve("net.ipv4.ip_forward", "eth0").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            resolve("net.ipv4.conf.IFNAME.arp_filter", "eth0.100").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/arp_filter")
        );
        assert_eq!(
            resolve("net/ipv6/conf/IFNAME/accept_ra", "net1").unwrap(),
            PathBuf::from("/proc/sys/net/ipv6/conf/net1/accept_ra")
        );
    }

    #[test]
    fn rejects_keys_outside_net() {
        for bad in [
            "kernel.panic",
            "net",
            "net..x",
            "net/../kernel/panic",
            "net.ipv4.conf.IFNAME.x",
            "vm.x",
        ] {
            let ifname = if bad.contains("IFNAME") { ".." } else { "eth0" };
            assert!(resolve(bad, ifname).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn allowlist_matching() {
        let list = parse_allowlist(
            "# comment\n^net\\.ipv4\\.conf\\.IFNAME\\.[a-z_]*$\n\n^net\\.ipv4\\.ip_forward$\n",
        )
        .unwrap();
        assert_eq!(list.len(), 2);
        let ok = Sysctls(vec![("net.ipv4.conf.IFNAME.arp_filter".into(), "1".into())]);
        assert!(check_allowed(&ok, &list).is_ok());
        let bad = Sysctls(vec![("net.core.somaxconn".into(), "1".into())]);
        let e = check_allowed(&bad, &list).unwrap_err();
        assert!(
            e.to_string().contains("net.core.somaxconn is not allowed"),
            "{e}"
        );
        assert!(parse_allowlist("(").is_err());
    }

    #[test]
    fn value_comparison_ignores_whitespace() {
        assert!(same_value("4096\t87380\t6291456\n", "4096 87380 6291456"));
        assert!(!same_value("1\n", "0"));
    }
}
