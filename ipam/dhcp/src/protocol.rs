//! The plugin ↔ daemon protocol (ours; the reference speaks Go net/rpc): one connection per
//! call on the unix socket, one JSON request written and the write side shut, one JSON
//! reply read to the end.
//!
//! Request: `{"method": "allocate"|"check"|"release"|"gc"|"status", "containerID", "netns",
//! "ifname", "args" (CNI_ARGS), "config" (the plugin's whole stdin object)}`.
//! Reply: `{"result": <CNI 1.0.0 result>}` for allocate, `{}` for the others, or
//! `{"error": {"code", "msg"}}`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use libcni::CniError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::DhcpError;

/// Largest request or reply accepted.
pub const MAX_MESSAGE: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub method: String,
    #[serde(rename = "containerID", default)]
    pub container_id: String,
    #[serde(default)]
    pub netns: String,
    #[serde(default)]
    pub ifname: String,
    #[serde(default)]
    pub args: String,
    #[serde(default)]
    pub config: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CniError>,
}

/// Go's text for a syscall error: the C library's, lower-cased, without Rust's "(os error N)".
fn go_errno_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.rfind(" (os error ") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

pub fn call(socket: &str, request: &Request) -> Result<Option<Value>, DhcpError> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        // Worded as the reference's Go dialer reports it.
        let (socket, reason) = (socket.to_string(), go_errno_text(&e));
        match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                DhcpError::NoDaemon { socket, reason }
            }
            _ => DhcpError::Dial { socket, reason },
        }
    })?;
    let method = go_method(&request.method);
    let io = |source: std::io::Error| DhcpError::Call {
        method: method.clone(),
        source,
    };
    let body = serde_json::to_vec(request).map_err(|e| io(std::io::Error::other(e)))?;
    stream.write_all(&body).map_err(io)?;
    stream.shutdown(std::net::Shutdown::Write).map_err(io)?;
    let mut reply = Vec::new();
    stream
        .take(MAX_MESSAGE)
        .read_to_end(&mut reply)
        .map_err(io)?;
    let reply: Reply = serde_json::from_slice(&reply).map_err(|e| {
        io(std::io::Error::other(format!(
            "bad reply from the daemon: {e}"
        )))
    })?;
    match reply.error {
        // As the reference's plugin reports what its daemon answered.
        Some(error) => Err(DhcpError::Daemon { method, error }),
        None => Ok(reply.result),
    }
}

/// The reference's name of a daemon method (`allocate` is `Allocate`).
fn go_method(method: &str) -> String {
    let mut chars = method.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
