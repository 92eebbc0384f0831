//! The health (`--healthz-port`, `GET /healthz`, as flanneld's) and metrics (`--metrics-port`,
//! `GET /metrics`) endpoints: a minimal HTTP/1.1 server, one request per connection, enough for
//! kubelet probes and Prometheus scrapes without pulling a web framework into the agent.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::error::AgentError;
use crate::ops::metrics;
use crate::{debug, log};

/// Bound on reading one request and writing its answer (a stalled client must not pile up).
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_REQUEST: usize = 8192;

/// Which paths a listener answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routes {
    pub healthz: bool,
    pub metrics: bool,
}

/// Where the endpoints listen: `--healthz-ip`, `--healthz-port` and `--metrics-port` (0: off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    pub ip: IpAddr,
    pub healthz_port: u16,
    pub metrics_port: u16,
}

/// Binds the configured listeners (a port in use fails the start, naming the address) and
/// serves them in the background for the life of the process.
pub async fn start(opts: &Listen) -> Result<(), AgentError> {
    let mut listeners: Vec<(u16, Routes)> = Vec::new();
    if opts.healthz_port != 0 {
        listeners.push((
            opts.healthz_port,
            Routes {
                healthz: true,
                metrics: opts.metrics_port == opts.healthz_port,
            },
        ));
    }
    if opts.metrics_port != 0 && opts.metrics_port != opts.healthz_port {
        // The metrics listener answers /healthz too: one port is enough for both probes.
        listeners.push((
            opts.metrics_port,
            Routes {
                healthz: true,
                metrics: true,
            },
        ));
    }
    for (port, routes) in listeners {
        let addr = SocketAddr::new(opts.ip, port);
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            AgentError::io("listening on", format!("{addr} (--healthz-ip/port)"), e)
        })?;
        let what = match (routes.healthz, routes.metrics) {
            (_, true) => "/healthz and /metrics",
            _ => "/healthz",
        };
        log!("serving {what} on http://{addr}");
        tokio::spawn(accept_loop(listener, routes));
    }
    Ok(())
}

async fn accept_loop(listener: TcpListener, routes: Routes) {
    loop {
        match listener.accept().await {
            Ok((conn, peer)) => {
                tokio::spawn(async move {
                    if let Err(e) = tokio::time::timeout(IO_TIMEOUT, handle(conn, routes)).await {
                        debug!(1, "http client {peer}: {e}");
                    }
                });
            }
            // Out of descriptors and the like: pause rather than spin.
            Err(e) => {
                debug!(1, "http accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(mut conn: TcpStream, routes: Routes) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_REQUEST {
            break;
        }
    }
    let (status, content_type, body) = respond(&buf, routes);
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    if !buf.starts_with(b"HEAD ") {
        conn.write_all(body.as_bytes()).await?;
    }
    conn.shutdown().await
}

/// The answer to one raw request: status line, content type and body. Public for the fuzz
/// target of the request parser.
pub fn respond(request: &[u8], routes: Routes) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let line = request
        .split(|b| *b == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_string())
        .unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return ("400 Bad Request", TEXT, "bad request\n".into());
    }
    let path = target.split('?').next().unwrap_or("");
    let known = (path == "/healthz" && routes.healthz) || (path == "/metrics" && routes.metrics);
    if !known {
        return ("404 Not Found", TEXT, "not found\n".into());
    }
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", TEXT, "only GET\n".into());
    }
    if path == "/healthz" {
        return ("200 OK", TEXT, "ferrocni-agent is running\n".into());
    }
    (
        "200 OK",
        "text/plain; version=0.0.4; charset=utf-8",
        metrics::render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Routes = Routes {
        healthz: true,
        metrics: true,
    };
    const HEALTH: Routes = Routes {
        healthz: true,
        metrics: false,
    };

    #[test]
    fn routes() {
        let (s, _, body) = respond(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", HEALTH);
        assert_eq!(s, "200 OK");
        assert_eq!(body, "ferrocni-agent is running\n");
        assert_eq!(
            respond(b"GET /metrics HTTP/1.1\r\n\r\n", HEALTH).0,
            "404 Not Found"
        );
        let (s, ct, body) = respond(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", BOTH);
        assert_eq!(s, "200 OK");
        assert!(ct.contains("version=0.0.4"));
        assert!(body.contains("ferrocni_agent_lease_renewals_total"));
        assert_eq!(
            respond(b"POST /healthz HTTP/1.1\r\n\r\n", BOTH).0,
            "405 Method Not Allowed"
        );
        assert_eq!(respond(b"\x00\x01garbage", BOTH).0, "400 Bad Request");
        assert_eq!(respond(b"", BOTH).0, "400 Bad Request");
    }
}
