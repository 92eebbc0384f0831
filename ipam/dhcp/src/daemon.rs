//! `dhcp daemon`: keeps one lease per (container, network, interface) alive and answers the
//! plugin on a unix socket. Flags as the reference's (Go flag syntax: `-flag value`,
//! `-flag=value`, `--flag`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::client::Identity;
use crate::config;
use crate::duration;
use crate::error::DhcpError;
use crate::lease::{Lease, Place, Timing};
use crate::protocol::{Reply, Request, MAX_MESSAGE};

#[derive(Debug, Clone)]
pub struct Flags {
    pub pidfile: String,
    pub host_prefix: String,
    pub socket_path: String,
    pub timing: Timing,
}

const USAGE: &str = "usage: dhcp daemon [-pidfile PATH] [-hostprefix PREFIX] [-socketpath PATH] \
[-broadcast] [-timeout DURATION] [-resendmax DURATION] [-resendtimeout DURATION]";

pub fn parse_flags(argv: &[String]) -> Result<Flags, String> {
    let mut f = Flags {
        pidfile: String::new(),
        host_prefix: String::new(),
        socket_path: String::new(),
        timing: Timing {
            timeout: Duration::from_secs(10),
            resend_max: Duration::from_secs(62),
            resend_timeout: None,
            broadcast: false,
        },
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(format!("unexpected argument {arg:?}\n{USAGE}"));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        if name == "broadcast" {
            f.timing.broadcast = match inline.as_deref() {
                None | Some("true") | Some("1") | Some("t") | Some("T") | Some("TRUE")
                | Some("True") => true,
                Some("false") | Some("0") | Some("f") | Some("F") | Some("FALSE")
                | Some("False") => false,
                Some(v) => return Err(format!("invalid boolean value {v:?} for -broadcast")),
            };
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("flag needs an argument: -{name}\n{USAGE}"))?,
        };
        let dur =
            |v: &str| duration::parse(v).map_err(|e| format!("invalid value for -{name}: {e}"));
        match name {
            "pidfile" => f.pidfile = value,
            "hostprefix" => f.host_prefix = value,
            "socketpath" => f.socket_path = value,
            "timeout" => f.timing.timeout = dur(&value)?,
            "resendmax" => f.timing.resend_max = dur(&value)?,
            "resendtimeout" => f.timing.resend_timeout = Some(dur(&value)?),
            "h" | "help" => return Err(USAGE.to_string()),
            other => return Err(format!("flag provided but not defined: -{other}\n{USAGE}")),
        }
    }
    if f.socket_path.is_empty() {
        f.socket_path = config::DEFAULT_SOCKET_PATH.to_string();
    }
    Ok(f)
}

/// The lease of one attachment, if held; its lock serialises calls for that attachment.
type Slot = Arc<Mutex<Option<Arc<Lease>>>>;

struct Daemon {
    flags: Flags,
    /// One slot per attachment (its full `containerID/network/ifname`: the client id is that
    /// cut to 254 bytes, which two long ones may share); the slot's lock serialises calls for
    /// one attachment.
    leases: Mutex<HashMap<String, Slot>>,
}

impl Daemon {
    fn slot(&self, id: &str) -> Slot {
        let mut map = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(id.to_string()).or_default())
    }

    fn handle(&self, req: Request) -> Result<Option<Value>, DhcpError> {
        let conf = config::parse(&req.config, &req.args)?;
        let id = config::client_id(&req.container_id, &conf.network, &req.ifname);
        let attachment = config::attachment_key(&req.container_id, &conf.network, &req.ifname);
        match req.method.as_str() {
            "allocate" => {
                let slot = self.slot(&attachment);
                let mut held = slot.lock().unwrap_or_else(|e| e.into_inner());
                let place = Place {
                    netns: format!("{}{}", self.flags.host_prefix, req.netns),
                    ifname: req.ifname.clone(),
                };
                let lease = match held.take() {
                    Some(l) if l.serves(&place) => {
                        *held = Some(Arc::clone(&l));
                        l
                    }
                    stale => {
                        if let Some(old) = stale {
                            // Of an earlier boot, no longer maintained, or another netns: a
                            // new container under the same ID, which must not get it.
                            eprintln!("dhcp: {id}: not reusing the lease held, acquiring anew");
                            old.stop();
                        }
                        let mut client_id = vec![0u8];
                        client_id.extend(id.as_bytes());
                        let identity = Identity {
                            mac: [0; 6],
                            client_id,
                            provide: conf.provide.clone(),
                            request_list: conf.request_list.clone(),
                            broadcast: false,
                        };
                        let l = Lease::acquire(
                            id.clone(),
                            conf.network.clone(),
                            req.container_id.clone(),
                            place,
                            identity,
                            conf.priority,
                            self.flags.timing,
                        )
                        .map_err(|e| {
                            eprintln!("dhcp: {id}: failed to acquire a DHCP lease: {e}");
                            DhcpError::Acquire(e)
                        })?;
                        *held = Some(Arc::clone(&l));
                        l
                    }
                };
                match lease.result() {
                    Ok(r) => Ok(r.to_value("1.0.0").map(Some)?),
                    Err(e) => {
                        lease.stop();
                        *held = None;
                        Err(DhcpError::Lease(e))
                    }
                }
            }
            "check" => {
                let slot = self.slot(&attachment);
                let held = slot.lock().unwrap_or_else(|e| e.into_inner());
                match held.as_ref() {
                    Some(l) if l.is_of_this_boot() => {
                        Ok(Some(Value::String(l.address().to_string())))
                    }
                    _ => Err(DhcpError::NoLease(id)),
                }
            }
            "release" => {
                let slot = self.slot(&attachment);
                let mut held = slot.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(l) = held.take() {
                    l.stop();
                }
                drop(held);
                self.leases
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&attachment);
                Ok(None)
            }
            "gc" => {
                let valid: Vec<(String, String)> =
                    libcni::gojson::get(&req.config, "cni.dev/valid-attachments")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| {
                                    Some((
                                        libcni::gojson::get_in(v, "containerID")?
                                            .as_str()?
                                            .to_string(),
                                        libcni::gojson::get_in(v, "ifname")?.as_str()?.to_string(),
                                    ))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                let slots: Vec<_> = self
                    .leases
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .cloned()
                    .collect();
                for slot in slots {
                    let mut held = slot.lock().unwrap_or_else(|e| e.into_inner());
                    let stale = held.as_ref().is_some_and(|l| {
                        l.network == conf.network
                            && (!l.is_of_this_boot()
                                || !valid
                                    .iter()
                                    .any(|(c, i)| *c == l.container_id && *i == l.place.ifname))
                    });
                    if stale {
                        if let Some(l) = held.take() {
                            eprintln!("dhcp: {}: released by GC", l.client_id);
                            l.stop();
                        }
                    }
                }
                Ok(None)
            }
            "status" => Ok(None),
            other => Err(DhcpError::UnknownMethod(other.to_string())),
        }
    }
}

fn serve(daemon: &Daemon, mut stream: UnixStream) {
    let mut body = Vec::new();
    let reply = match (&mut stream).take(MAX_MESSAGE).read_to_end(&mut body) {
        Err(e) => Reply {
            result: None,
            error: Some(DhcpError::ReadRequest(e).into()),
        },
        Ok(_) => match serde_json::from_slice::<Request>(&body) {
            Err(e) => Reply {
                result: None,
                error: Some(DhcpError::ParseRequest(e).into()),
            },
            Ok(req) => match daemon.handle(req) {
                Ok(result) => Reply {
                    result,
                    error: None,
                },
                Err(e) => Reply {
                    result: None,
                    error: Some(e.into()),
                },
            },
        },
    };
    let _ = serde_json::to_vec(&reply).map(|b| stream.write_all(&b));
}

/// A systemd-activated socket (LISTEN_FDS=1 for this pid), else a fresh one at `path`.
fn listener(path: &str) -> Result<UnixListener, String> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    match std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
    {
        Some(1) if ours => {
            // SAFETY: systemd passed fd 3 to this process as the listening socket.
            return Ok(unsafe { UnixListener::from_raw_fd(3) });
        }
        Some(n) if ours && n > 1 => {
            return Err(format!(
                "Too many ({n}) FDs passed through socket activation"
            ));
        }
        _ => {}
    }
    let p = Path::new(path);
    if let Some(dir) = p.parent() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("Error getting listener: {e}"))?;
    }
    // A socket nobody answers on is left over from a daemon that died: take its place.
    if p.exists() && UnixStream::connect(p).is_err() {
        let _ = std::fs::remove_file(p);
    }
    UnixListener::bind(p).map_err(|e| format!("Error getting listener: listen unix {path}: {e}"))
}

/// Blocks SIGTERM/SIGINT in every thread; returns the set for `sigwait`.
fn block_signals() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

pub fn run(flags: Flags) -> Result<(), String> {
    let signals = block_signals();
    if !flags.pidfile.is_empty() {
        if !Path::new(&flags.pidfile).is_absolute() {
            return Err(format!(
                "Error writing pidfile {:?}: path not absolute",
                flags.pidfile
            ));
        }
        std::fs::write(&flags.pidfile, std::process::id().to_string())
            .map_err(|e| format!("Error writing pidfile {:?}: {e}", flags.pidfile))?;
    }
    let socket = format!("{}{}", flags.host_prefix, flags.socket_path);
    let listener = listener(&socket)?;
    let pidfile = flags.pidfile.clone();
    let cleanup_socket = socket.clone();
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: signals is a valid, initialised set; sig receives the signal number.
        unsafe { libc::sigwait(&signals, &mut sig) };
        let _ = std::fs::remove_file(&cleanup_socket);
        if !pidfile.is_empty() {
            let _ = std::fs::remove_file(&pidfile);
        }
        std::process::exit(0);
    });
    eprintln!("dhcp: daemon listening on {socket}");
    let daemon = Arc::new(Daemon {
        flags,
        leases: Mutex::new(HashMap::new()),
    });
    for stream in listener.incoming() {
        match stream {
            Ok(s) => {
                let d = Arc::clone(&daemon);
                std::thread::spawn(move || serve(&d, s));
            }
            Err(e) => eprintln!("dhcp: accept: {e}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_style_flags() {
        let f = parse_flags(&args(&[
            "-socketpath",
            "/tmp/d.sock",
            "--timeout=2s",
            "-broadcast",
            "-resendmax",
            "3s",
            "-resendtimeout=20s",
            "-hostprefix",
            "/host",
            "-pidfile=/run/d.pid",
        ]))
        .unwrap();
        assert_eq!(f.socket_path, "/tmp/d.sock");
        assert_eq!(f.host_prefix, "/host");
        assert_eq!(f.pidfile, "/run/d.pid");
        assert!(f.timing.broadcast);
        assert_eq!(f.timing.timeout, Duration::from_secs(2));
        assert_eq!(f.timing.resend_max, Duration::from_secs(3));
        assert_eq!(f.timing.resend_timeout, Some(Duration::from_secs(20)));
        let d = parse_flags(&[]).unwrap();
        assert_eq!(d.socket_path, "/run/cni/dhcp.sock");
        assert_eq!(d.timing.timeout, Duration::from_secs(10));
        assert_eq!(d.timing.resend_timeout, None);
        assert!(!d.timing.broadcast);
        assert!(parse_flags(&args(&["-bogus"])).is_err());
        assert!(parse_flags(&args(&["-timeout"])).is_err());
        assert!(parse_flags(&args(&["-timeout", "ten"])).is_err());
        assert!(
            !parse_flags(&args(&["-broadcast=false"]))
                .unwrap()
                .timing
                .broadcast
        );
    }
}
