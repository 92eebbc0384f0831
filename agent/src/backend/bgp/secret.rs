//! [`Secret`]: a peer's TCP MD5 key. It reaches BIRD's configuration file (mode 0600) and
//! nothing else: its `Debug` prints `"<redacted>"` and it has no `Display`, so a log line or a
//! `{:?}` of the options can never show it. [`read_password_file`] loads one from a file.

use std::fmt;
use std::path::Path;

use super::error::BgpError;

/// A password. Compared by value (a changed password is a changed configuration).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The password itself, for the one place that writes it (BIRD's configuration).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

/// Files larger than this are refused unread (a key is at most 80 bytes).
const MAX_FILE_LEN: u64 = 4096;

/// The content of a password file, without one trailing line break (`\n` or `\r\n`, as an
/// editor or `echo` leaves it). `option` names where the path came from, for the errors.
pub fn read_password_file(option: &str, path: &Path) -> Result<Secret, BgpError> {
    let refuse = |problem: String| BgpError::option(option, problem);
    let meta = std::fs::metadata(path)
        .map_err(|e| refuse(format!("password file {}: {e}", path.display())))?;
    if !meta.is_file() || meta.len() > MAX_FILE_LEN {
        return Err(refuse(format!(
            "password file {} is not a regular file of at most {MAX_FILE_LEN} bytes",
            path.display()
        )));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| refuse(format!("password file {}: {e}", path.display())))?;
    let mut text = String::from_utf8(bytes).map_err(|_| {
        refuse(format!(
            "password file {} is not UTF-8 text",
            path.display()
        ))
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(Secret(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let s = Secret::new("hunter2-md5");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(format!("{s:#?}"), "\"<redacted>\"");
        assert_eq!(s.expose(), "hunter2-md5");
    }

    #[test]
    fn file_loses_one_trailing_line_break() {
        let dir = std::env::temp_dir().join(format!("bgp-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (content, want) in [
            ("k1\n", "k1"),
            ("k2", "k2"),
            ("k3\r\n", "k3"),
            ("k4\n\n", "k4\n"),
            (" k5 \n", " k5 "),
        ] {
            let f = dir.join("pw");
            std::fs::write(&f, content).unwrap();
            assert_eq!(read_password_file("o", &f).unwrap().expose(), want);
        }
        let e = read_password_file("Backend.Peers[0].PasswordFile", &dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("\"Backend.Peers[0].PasswordFile\" password file ")
                && e.contains("missing"),
            "{e}"
        );
        let e = read_password_file("o", &dir).unwrap_err().to_string();
        assert!(e.contains("is not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
