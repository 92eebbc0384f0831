//! The question to the agent's admission socket: one JSON line out, one back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde::Deserialize;

use crate::error::PolicyPluginError;

#[derive(Debug, Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

/// The request line for pod `namespace/name` with `ips`.
pub fn request(namespace: &str, name: &str, ips: &[IpAddr]) -> String {
    let mut line =
        serde_json::json!({"namespace": namespace, "name": name, "ips": ips}).to_string();
    line.push('\n');
    line
}

/// Asks the agent at `socket` to cover the pod; returns once it has (`true`), or at once
/// when there is no socket at all (`false`): the node's agent does not enforce policy (a
/// socket that is there but refuses, an agent that died, is an error).
pub fn admit(
    socket: &str,
    namespace: &str,
    name: &str,
    ips: &[IpAddr],
    timeout: Duration,
) -> Result<bool, PolicyPluginError> {
    let unreachable = |detail: String| PolicyPluginError::Unreachable {
        socket: socket.to_string(),
        detail,
    };
    let mut stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(unreachable(e.to_string())),
    };
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| unreachable(e.to_string()))?;
    stream
        .write_all(request(namespace, name, ips).as_bytes())
        .map_err(|e| unreachable(format!("sending: {e}")))?;
    let mut line = String::new();
    // One line, at most 4 KiB.
    BufReader::new((&stream).take(4096))
        .read_line(&mut line)
        .map_err(|e| unreachable(format!("no answer: {e}")))?;
    if line.is_empty() {
        return Err(unreachable(
            "the agent closed the connection without answering".into(),
        ));
    }
    let pod = format!("{namespace}/{name}");
    let answer: Answer =
        serde_json::from_str(line.trim()).map_err(|e| PolicyPluginError::Refused {
            pod: pod.clone(),
            detail: format!("unreadable answer {line:?}: {e}"),
        })?;
    if answer.ok {
        Ok(true)
    } else {
        Err(PolicyPluginError::Refused {
            pod,
            detail: answer.error.unwrap_or_else(|| "no reason given".into()),
        })
    }
}

/// Whether the agent's socket accepts connections (STATUS).
pub fn reachable(socket: &str) -> Result<(), PolicyPluginError> {
    UnixStream::connect(socket)
        .map(drop)
        .map_err(|e| PolicyPluginError::Unreachable {
            socket: socket.to_string(),
            detail: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn answering(answer: &'static str) -> (tempdir::Dir, String) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("policy.sock").display().to_string();
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line).unwrap();
            assert_eq!(
                line,
                "{\"namespace\":\"prod\",\"name\":\"db\",\"ips\":[\"10.0.0.5\"]}\n"
            );
            (&stream).write_all(answer.as_bytes()).unwrap();
        });
        (dir, path)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "ferrocni-policy-test-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const IP: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 5))];

    #[test]
    fn an_ok_answer_admits() {
        let (_dir, path) = answering("{\"ok\":true}\n");
        assert!(admit(&path, "prod", "db", &IP, Duration::from_secs(5)).unwrap());
    }

    #[test]
    fn a_refusal_says_why() {
        let (_dir, path) = answering("{\"ok\":false,\"error\":\"pod prod/db is not known\"}\n");
        let e = admit(&path, "prod", "db", &IP, Duration::from_secs(5)).unwrap_err();
        assert!(e
            .to_string()
            .contains("did not cover pod prod/db: pod prod/db is not known"));
        let cni: libcni::CniError = e.into();
        assert_eq!(cni.code, 11);
    }

    #[test]
    fn no_socket_is_no_enforcement_a_dead_one_an_error() {
        assert!(!admit(
            "/nonexistent/policy.sock",
            "a",
            "b",
            &IP,
            Duration::from_secs(1)
        )
        .unwrap());
        assert!(reachable("/nonexistent/policy.sock").is_err());
        // A socket file nobody listens on (an agent that died).
        let dir = tempdir::Dir::new();
        let path = dir.0.join("dead.sock").display().to_string();
        drop(UnixListener::bind(&path).unwrap());
        let e = admit(&path, "a", "b", &IP, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, PolicyPluginError::Unreachable { .. }), "{e}");
    }
}
