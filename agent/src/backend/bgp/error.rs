//! What the bgp backend can fail on, each message naming the option, file, command or socket.

use std::path::PathBuf;
use std::process::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum BgpError {
    /// An option of the network config's `Backend` object (`option` is `Backend.ASNumber`,
    /// `Backend.Peers[1].PeerIP`...) or of the command line (`--bgp-peers`).
    #[error("\"{option}\" {problem}")]
    BadOption { option: String, problem: String },
    /// A value the agent passed that the backend cannot use (a subnet outside the network).
    #[error("{0}")]
    BadInput(String),
    /// This node's interfaces: the underlay, or the public address missing from them.
    #[error("{0}")]
    Underlay(String),
    #[error("BIRD binary {name:?} not found on PATH (install bird2, or give --bird-binary)")]
    BirdMissing { name: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    /// `bird -p -c` refused the rendered configuration (kept at `path` for inspection).
    #[error("BIRD refused the rendered configuration {path}: {output}")]
    ConfigRefused { path: PathBuf, output: String },
    #[error("BIRD exited while starting ({status}): {output}")]
    StartFailed { status: ExitStatus, output: String },
    #[error("BIRD did not answer on its control socket {socket} within {secs} s of starting")]
    StartTimeout { socket: PathBuf, secs: u64 },
    /// The control socket failed (connect, read, write, or BIRD closed it mid-reply).
    #[error("BIRD control socket {socket}: `{command}`: {detail}")]
    Control {
        socket: PathBuf,
        command: String,
        detail: String,
    },
    /// BIRD answered a command with an error reply (code 8xxx or 9xxx).
    #[error("BIRD refused `{command}`: {code:04} {text}")]
    Refused {
        command: String,
        code: u16,
        text: String,
    },
    /// The kernel's routing table could not be read (to decide on a graceful recovery).
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
}

impl BgpError {
    pub fn option(option: impl Into<String>, problem: impl Into<String>) -> BgpError {
        BgpError::BadOption {
            option: option.into(),
            problem: problem.into(),
        }
    }

    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> BgpError {
        BgpError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_object() {
        let e = BgpError::option("Backend.ASNumber", "0 is outside 1..4294967295");
        assert_eq!(
            e.to_string(),
            "\"Backend.ASNumber\" 0 is outside 1..4294967295"
        );
        let e = BgpError::Refused {
            command: "configure".into(),
            code: 8002,
            text: "bird.conf:3:1 syntax error".into(),
        };
        assert_eq!(
            e.to_string(),
            "BIRD refused `configure`: 8002 bird.conf:3:1 syntax error"
        );
        let e = BgpError::io(
            "writing",
            "/run/ferrocni/bgp/bird.conf",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        assert!(e
            .to_string()
            .starts_with("writing /run/ferrocni/bgp/bird.conf: "));
    }
}
