//! The node's WireGuard key pair, kept where flanneld keeps it (`/run/flannel/wgkey`, or
//! `$WIREGUARD_KEY_FILE`) so a restarted agent, or a flanneld taking the node back, keeps the
//! public key its peers know. The file holds the private key in base64, as `wg genkey`
//! prints it (and flanneld writes it: no newline), mode 0400.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use super::error::WireguardError;

/// flanneld's default key file.
pub const DEFAULT_KEY_FILE: &str = "/run/flannel/wgkey";
/// The variable naming another key file (flanneld's).
pub const KEY_FILE_ENV: &str = "WIREGUARD_KEY_FILE";

pub type Key = [u8; 32];

/// The node's key pair.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPair {
    pub private: Key,
    pub public: Key,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the private key, not even in a debug log.
        write!(f, "KeyPair {{ public: {} }}", encode(&self.public))
    }
}

/// The key file in use: `$WIREGUARD_KEY_FILE` when set, else flanneld's default.
pub fn key_file_path() -> PathBuf {
    std::env::var_os(KEY_FILE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KEY_FILE))
}

/// A key as `wg` prints it: standard base64 with padding (44 characters).
pub fn encode(key: &Key) -> String {
    STANDARD.encode(key)
}

/// Parses a base64 key (a private key file, a PSK, a lease's `PublicKey`).
pub fn decode(text: &str) -> Result<Key, String> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    <Key>::try_from(bytes.as_slice())
        .map_err(|_| format!("a key is 32 bytes, this one has {}", bytes.len()))
}

/// The Curve25519 public key of `private` (the clamping is X25519's).
pub fn public_key(private: &Key) -> Key {
    x25519_dalek::x25519(*private, x25519_dalek::X25519_BASEPOINT_BYTES)
}

/// A fresh private key from the kernel's random source, clamped as `wg genkey` clamps it.
pub fn generate_private() -> Result<Key, std::io::Error> {
    let mut key = [0u8; 32];
    let mut filled = 0;
    while filled < key.len() {
        // SAFETY: getrandom(2) writes at most the given length into our buffer.
        let n =
            unsafe { libc::getrandom(key[filled..].as_mut_ptr().cast(), key.len() - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += n as usize;
    }
    key[0] &= 248;
    key[31] = (key[31] & 127) | 64;
    Ok(key)
}

/// Reads the key file at `path`, or creates it with a new key when it does not exist.
/// Returns the pair and whether the file was created.
pub fn load_or_create(path: &Path) -> Result<(KeyPair, bool), WireguardError> {
    match fs::read_to_string(path) {
        Ok(text) => {
            crate::ops::secrets::warn_if_exposed("WireGuard key file", path);
            let private = decode(&text).map_err(|msg| WireguardError::KeyFile {
                path: path.to_path_buf(),
                msg: format!("does not hold a WireGuard private key ({msg})"),
            })?;
            Ok((
                KeyPair {
                    private,
                    public: public_key(&private),
                },
                false,
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let private = generate_private()
                .map_err(|e| WireguardError::io("generating a key for", path, e))?;
            write_key(path, &private)?;
            Ok((
                KeyPair {
                    private,
                    public: public_key(&private),
                },
                true,
            ))
        }
        Err(e) => Err(WireguardError::io("reading", path, e)),
    }
}

/// Writes the key file (0400, directory 0755 as flanneld makes it), atomically: a crash
/// leaves either no file or the whole key.
fn write_key(path: &Path, private: &Key) -> Result<(), WireguardError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| WireguardError::io("creating directory", dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&tmp)?;
        f.write_all(encode(private).as_bytes())?;
        f.sync_all()?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o400))?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(WireguardError::io("writing", path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7748 section 6.1: Alice's private and public keys.
    #[test]
    fn public_key_is_x25519_of_the_base_point() {
        let private: Key = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let public: Key = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        assert_eq!(public_key(&private), public);
    }

    fn hex(s: &str) -> Key {
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        k
    }

    #[test]
    fn keys_print_and_parse_as_wg_does() {
        let k: Key = [0xab; 32];
        let text = encode(&k);
        assert_eq!(text.len(), 44);
        assert!(text.ends_with('='));
        assert_eq!(decode(&text).unwrap(), k);
        assert_eq!(
            decode(&format!("{text}\n")).unwrap(),
            k,
            "a trailing newline is fine"
        );
        assert!(decode("not a key").is_err());
        assert!(decode(&STANDARD.encode([1u8; 16]))
            .unwrap_err()
            .contains("32 bytes"));
    }

    #[test]
    fn generated_keys_are_clamped_and_differ() {
        let a = generate_private().unwrap();
        let b = generate_private().unwrap();
        assert_ne!(a, b);
        assert_eq!(a[0] & 7, 0);
        assert_eq!(a[31] & 0xc0, 0x40);
    }

    #[test]
    fn key_file_is_created_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("agent-wgkey-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("flannel/wgkey");
        let (first, created) = load_or_create(&path).unwrap();
        assert!(created);
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o400);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            encode(&first.private),
            "base64, no newline, like flanneld"
        );
        let (again, created) = load_or_create(&path).unwrap();
        assert!(!created);
        // The temporary file it was written through is gone, and the file is the owner's.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
        assert_eq!(
            crate::ops::secrets::exposure("WireGuard key file", &path),
            None
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(crate::ops::secrets::exposure("WireGuard key file", &path)
            .unwrap()
            .contains("mode 0644"));
        assert_eq!(again, first);
        assert!(!format!("{first:?}").contains(&encode(&first.private)));

        // A file written by `wg genkey > file` (newline) is read too; garbage is an error.
        let other = dir.join("genkey");
        fs::write(&other, format!("{}\n", encode(&[0x40; 32]))).unwrap();
        assert_eq!(load_or_create(&other).unwrap().0.private, [0x40; 32]);
        fs::write(&other, "garbage").unwrap();
        let err = load_or_create(&other).unwrap_err().to_string();
        assert!(
            err.contains("genkey") && err.contains("private key"),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
