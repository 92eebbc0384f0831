//! Files holding secrets. The agent reads private keys (`--etcd-keyfile`, the WireGuard key
//! file) and writes one (a new WireGuard key, created 0400); a key file that group or others
//! can read or write is reported at start-up, naming the file and its mode.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::warn;

/// The permission bits that give group or others any access.
const SHARED_BITS: u32 = 0o077;

/// What is wrong with the mode of the key file `what` at `path`, if anything: `None` when
/// only its owner can get at it (or it cannot be read at all: reading it says why).
pub fn exposure(what: &str, path: &Path) -> Option<String> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    if mode & SHARED_BITS == 0 {
        return None;
    }
    let access = match (mode & 0o044 != 0, mode & 0o022 != 0) {
        (true, true) => "read and write",
        (true, false) => "read",
        _ => "write",
    };
    Some(format!(
        "{what} {} has mode {mode:04o}: group or others can {access} this private key \
         (chmod 600 it)",
        path.display()
    ))
}

/// Logs [`exposure`] at WARN.
pub fn warn_if_exposed(what: &str, path: &Path) {
    if let Some(line) = exposure(what, path) {
        warn!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn key_files_open_to_group_or_others_are_named_with_their_mode() {
        let dir = std::env::temp_dir().join(format!("agent-secrets-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let key = dir.join("node-key.pem");
        fs::write(&key, "-----BEGIN PRIVATE KEY-----\n").unwrap();
        let with_mode = |mode: u32| {
            fs::set_permissions(&key, fs::Permissions::from_mode(mode)).unwrap();
            exposure("--etcd-keyfile", &key)
        };
        assert_eq!(with_mode(0o600), None);
        assert_eq!(with_mode(0o400), None);
        let text = with_mode(0o644).expect("0644 is reported");
        assert!(
            text.starts_with(&format!("--etcd-keyfile {} has mode 0644", key.display())),
            "{text}"
        );
        assert!(text.contains("can read this private key"), "{text}");
        assert!(with_mode(0o640).unwrap().contains("mode 0640"));
        assert!(with_mode(0o620).unwrap().contains("can write"));
        assert!(with_mode(0o666).unwrap().contains("read and write"));
        // A missing file is for the reader to report.
        assert_eq!(exposure("--etcd-keyfile", &dir.join("missing")), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
