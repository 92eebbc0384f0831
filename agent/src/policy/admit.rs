//! The admission socket: the CNI chain's `ferrocni-policy` plugin says, at a pod's ADD, which
//! addresses the pod got, and the answer comes once a commit covers them. So a pod that a
//! policy isolates is isolated before its first packet, not when the kubelet's status update
//! reaches the agent. One JSON object per connection, one answer:
//!
//! ```text
//! -> {"namespace":"prod","name":"db","ips":["10.244.1.5"]}
//! <- {"ok":true}            or {"ok":false,"error":"pod prod/db is not known to the agent ..."}
//! ```
//!
//! The socket is root's alone (mode 0600): the plugin runs as the runtime, as root.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use futures_channel::mpsc::UnboundedSender;
use futures_channel::oneshot;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::time::Instant;

use super::enforce::Admission;
use crate::error::AgentError;
use crate::warn;

/// How long an ADD may wait for its pod to be known and committed.
pub const WAIT: Duration = Duration::from_secs(10);
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A request is a few names and a few addresses.
const MAX_REQUEST: u64 = 4096;
/// The most addresses one request may give.
const MAX_ADDRESSES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub namespace: String,
    pub name: String,
    pub ips: Vec<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Binds the socket at `path`, replacing a stale one (a previous agent's).
pub fn listen(path: &Path) -> Result<UnixListener, AgentError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| AgentError::io("creating", dir, e))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(AgentError::io("removing", path, e)),
    }
    let listener = UnixListener::bind(path).map_err(|e| AgentError::io("binding", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| AgentError::io("setting the mode of", path, e))?;
    Ok(listener)
}

/// Removes the socket at `path`, if any (the agent runs without `--network-policy`: the CNI
/// chain then finds no socket and passes pods through).
pub fn remove_stale(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => crate::log!(
            "removed {}: NetworkPolicies are no longer enforced on this node",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!("policy: removing {}: {e}", path.display()),
    }
}

/// Answers admissions for ever.
pub async fn serve(listener: UnixListener, admissions: UnboundedSender<Admission>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::task::spawn_local(handle(stream, admissions.clone()));
            }
            Err(e) => {
                warn!("policy: admission socket: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(stream: UnixStream, admissions: UnboundedSender<Admission>) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
    let answer = match tokio::time::timeout(READ_TIMEOUT, reader.read_line(&mut line)).await {
        Err(_) => Err("no request in time".to_string()),
        Ok(Err(e)) => Err(format!("reading the request: {e}")),
        Ok(Ok(_)) => match parse(&line) {
            Ok(request) => admit(request, &admissions).await,
            Err(e) => Err(e),
        },
    };
    let answer = match answer {
        Ok(()) => Answer {
            ok: true,
            error: None,
        },
        Err(e) => Answer {
            ok: false,
            error: Some(e),
        },
    };
    let mut text = serde_json::to_string(&answer).unwrap_or_else(|_| "{\"ok\":false}".into());
    text.push('\n');
    // The plugin may have timed out and gone; nothing to do then.
    let _ = write.write_all(text.as_bytes()).await;
}

/// A request, checked.
pub fn parse(line: &str) -> Result<Request, String> {
    let r: Request =
        serde_json::from_str(line.trim()).map_err(|e| format!("unreadable request: {e}"))?;
    if r.namespace.is_empty() || r.name.is_empty() || r.namespace.contains('/') {
        return Err(format!(
            "request names no pod (namespace {:?}, name {:?})",
            r.namespace, r.name
        ));
    }
    // A pod has one address per family; several attachments' results may hold a few more.
    if r.ips.is_empty() || r.ips.len() > MAX_ADDRESSES {
        return Err(format!(
            "pod {}/{}: {} address(es) given, 1 to {MAX_ADDRESSES} expected",
            r.namespace,
            r.name,
            r.ips.len()
        ));
    }
    Ok(r)
}

async fn admit(r: Request, admissions: &UnboundedSender<Admission>) -> Result<(), String> {
    let (reply, answer) = oneshot::channel();
    let key = format!("{}/{}", r.namespace, r.name);
    admissions
        .unbounded_send(Admission {
            key: key.clone(),
            ips: r.ips,
            reply,
            deadline: Instant::now() + WAIT,
        })
        .map_err(|_| "the agent's policy loop is not running".to_string())?;
    answer
        .await
        .map_err(|_| format!("pod {key}: the agent's policy loop stopped"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked() {
        let r = parse(r#"{"namespace":"prod","name":"db","ips":["10.0.0.5","fd00::5"]}"#)
            .expect("request");
        assert_eq!(r.ips.len(), 2);
        for bad in [
            r#"{"namespace":"","name":"db","ips":["10.0.0.5"]}"#,
            r#"{"namespace":"a/b","name":"db","ips":["10.0.0.5"]}"#,
            r#"{"namespace":"prod","name":"db","ips":[]}"#,
            r#"{"namespace":"prod","name":"db","ips":["10.0.0.500"]}"#,
            r#"{"namespace":"prod""#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let ok = serde_json::to_string(&Answer {
            ok: true,
            error: None,
        })
        .unwrap();
        assert_eq!(ok, r#"{"ok":true}"#);
    }
}
