//! `probe`: the traffic end of the NetworkPolicy end-to-end tests, run inside a pod's network
//! namespace with `ip netns exec`.
//!
//! ```text
//! probe serve <tcp|udp|sctp> <port|first-last>...   echo servers until killed; prints `ready`
//! probe connect <tcp|udp|sctp> <ip> <port> <timeout_ms> [udp_source_port]
//! ```
//!
//! `serve` echoes one line per TCP or SCTP connection (SCTP: a one-to-one stream socket) and
//! every UDP datagram. `connect` sends a line and waits for its echo: exit 0 when answered,
//! 1 when not (refused, unreachable, timed out, wrong echo), with one word on stdout saying
//! which. Exit 2 is a usage error, 3 means the kernel has no SCTP (both commands print
//! `unsupported sctp` then, and the harness skips SCTP probes). A UDP probe may be given its
//! source port: a new one per probe keeps it out of the conntrack entry an earlier, allowed
//! probe left (an entry that would let it through whatever the policy says now).

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What `connect` sends; the echo must carry it back.
const PAYLOAD: &[u8] = b"ferrocni-probe\n";
/// How often `connect` resends a UDP datagram that got no answer yet (one lost to a
/// neighbour resolution must not fail the probe).
const UDP_RESEND: Duration = Duration::from_millis(100);
/// How long a served connection may stay silent before the server drops it.
const SERVE_IDLE: Duration = Duration::from_secs(5);

const EXIT_NOT_ANSWERED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_UNSUPPORTED: u8 = 3;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    fn parse(word: &str) -> Result<Proto, String> {
        match word {
            "tcp" => Ok(Proto::Tcp),
            "udp" => Ok(Proto::Udp),
            "sctp" => Ok(Proto::Sctp),
            other => Err(format!("unknown protocol {other:?} (tcp, udp or sctp)")),
        }
    }
}

/// Why a probe or a server could not run.
enum Failure {
    Usage(String),
    /// The kernel has no SCTP (socket(2) gives EPROTONOSUPPORT).
    NoSctp,
    Io(String),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("connect") => connect(&args[1..]),
        _ => Err(Failure::Usage("expected `serve` or `connect`".into())),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Usage(why)) => {
            eprintln!("probe: {why}");
            eprintln!(
                "usage: probe serve <tcp|udp|sctp> <port|first-last>...\n       \
                 probe connect <tcp|udp|sctp> <ip> <port> <timeout_ms> [udp_source_port]"
            );
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::NoSctp) => {
            println!("unsupported sctp");
            ExitCode::from(EXIT_UNSUPPORTED)
        }
        Err(Failure::Io(why)) => {
            eprintln!("probe: {why}");
            ExitCode::FAILURE
        }
    }
}

/// `first` or `first-last`, inclusive.
fn parse_ports(words: &[String]) -> Result<Vec<u16>, Failure> {
    let mut ports = Vec::new();
    for word in words {
        let bad = |e: std::num::ParseIntError| Failure::Usage(format!("bad port {word:?}: {e}"));
        match word.split_once('-') {
            Some((first, last)) => {
                let (first, last): (u16, u16) =
                    (first.parse().map_err(bad)?, last.parse().map_err(bad)?);
                if first > last {
                    return Err(Failure::Usage(format!("empty port range {word:?}")));
                }
                ports.extend(first..=last);
            }
            None => ports.push(word.parse().map_err(bad)?),
        }
    }
    if ports.is_empty() {
        return Err(Failure::Usage("no port to serve".into()));
    }
    Ok(ports)
}

/// Binds every port first (so `ready` means all of them answer), then serves each on a
/// thread of its own until the process is killed.
fn serve(args: &[String]) -> Result<u8, Failure> {
    let proto = Proto::parse(args.first().map(String::as_str).unwrap_or_default())
        .map_err(Failure::Usage)?;
    let ports = parse_ports(&args[1..])?;
    let mut threads = Vec::new();
    for port in ports {
        let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        let bind_err = |e: std::io::Error| {
            Failure::Io(format!(
                "bind {proto_name} {any}: {e}",
                proto_name = name(proto)
            ))
        };
        let thread: Box<dyn FnOnce() + Send> = match proto {
            Proto::Tcp => {
                let listener = TcpListener::bind(any).map_err(bind_err)?;
                Box::new(move || serve_tcp(listener))
            }
            Proto::Udp => {
                let socket = UdpSocket::bind(any).map_err(bind_err)?;
                Box::new(move || serve_udp(socket))
            }
            Proto::Sctp => {
                let listener = sctp_listen(port)?;
                Box::new(move || serve_sctp(listener))
            }
        };
        threads.push(std::thread::spawn(thread));
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    for t in threads {
        let _ = t.join();
    }
    Ok(0)
}

fn name(proto: Proto) -> &'static str {
    match proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
        Proto::Sctp => "sctp",
    }
}

fn serve_tcp(listener: TcpListener) {
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(SERVE_IDLE));
            let mut line = Vec::new();
            let mut reader = BufReader::new(&stream);
            if reader.read_until(b'\n', &mut line).is_ok() && !line.is_empty() {
                let _ = (&stream).write_all(&line);
            }
        });
    }
}

fn serve_udp(socket: UdpSocket) {
    let mut buf = [0u8; 1500];
    loop {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                let _ = socket.send_to(&buf[..n], from);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn serve_sctp(listener: OwnedFd) {
    loop {
        // SAFETY: accept(2) on a listening socket we own; no peer address wanted.
        let fd = unsafe {
            libc::accept(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if fd < 0 {
            if std::io::Error::last_os_error().kind() == ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        // SAFETY: accept(2) just returned this descriptor; nothing else owns it.
        let conn = unsafe { OwnedFd::from_raw_fd(fd) };
        std::thread::spawn(move || {
            let mut stream = std::fs::File::from(conn);
            let mut buf = [0u8; 256];
            if let Ok(n) = stream.read(&mut buf) {
                if n > 0 {
                    let _ = stream.write_all(&buf[..n]);
                }
            }
        });
    }
}

/// An SCTP one-to-one (`SOCK_STREAM`) socket; [`Failure::NoSctp`] when the kernel has none.
fn sctp_socket() -> Result<OwnedFd, Failure> {
    // SAFETY: socket(2) with constant arguments; the descriptor is wrapped at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EPROTONOSUPPORT) | Some(libc::ESOCKTNOSUPPORT) => Err(Failure::NoSctp),
            _ => Err(Failure::Io(format!("sctp socket: {e}"))),
        };
    }
    // SAFETY: socket(2) just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

const SOCKADDR_IN_LEN: libc::socklen_t =
    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;

fn sctp_listen(port: u16) -> Result<OwnedFd, Failure> {
    let sock = sctp_socket()?;
    let addr = sockaddr(Ipv4Addr::UNSPECIFIED, port);
    let one: libc::c_int = 1;
    // SAFETY: setsockopt(2), bind(2) and listen(2) on a socket we own, with pointers to locals
    // that outlive the calls and their true sizes.
    let failed = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_in).cast(),
            SOCKADDR_IN_LEN,
        ) != 0
            || libc::listen(sock.as_raw_fd(), 64) != 0
    };
    if failed {
        return Err(Failure::Io(format!(
            "sctp bind/listen on port {port}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(sock)
}

fn connect(args: &[String]) -> Result<u8, Failure> {
    let (proto, ip, port, timeout_ms, source_port) = match args {
        [proto, ip, port, timeout_ms] => (proto, ip, port, timeout_ms, None),
        [proto, ip, port, timeout_ms, source] => (proto, ip, port, timeout_ms, Some(source)),
        _ => {
            return Err(Failure::Usage(
                "connect takes <proto> <ip> <port> <timeout_ms> [udp_source_port]".into(),
            ))
        }
    };
    let source_port: u16 = match source_port {
        Some(p) => p
            .parse()
            .map_err(|e| Failure::Usage(format!("bad source port {p:?}: {e}")))?,
        None => 0,
    };
    let proto = Proto::parse(proto).map_err(Failure::Usage)?;
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|e| Failure::Usage(format!("bad address {ip:?}: {e}")))?;
    let port: u16 = port
        .parse()
        .map_err(|e| Failure::Usage(format!("bad port {port:?}: {e}")))?;
    let timeout_ms: u64 = timeout_ms
        .parse()
        .map_err(|e| Failure::Usage(format!("bad timeout {timeout_ms:?}: {e}")))?;
    let timeout = Duration::from_millis(timeout_ms.max(1));
    let deadline = Instant::now() + timeout;
    let answer = match proto {
        Proto::Tcp => tcp_exchange(SocketAddrV4::new(ip, port), timeout, deadline),
        Proto::Udp => udp_exchange(SocketAddrV4::new(ip, port), source_port, deadline),
        Proto::Sctp => sctp_exchange(ip, port, deadline)?,
    };
    match answer {
        Ok(()) => {
            println!("answered");
            Ok(0)
        }
        Err(why) => {
            println!("{why}");
            Ok(EXIT_NOT_ANSWERED)
        }
    }
}

/// One word for why a probe got no answer.
fn why_not(e: &std::io::Error) -> &'static str {
    match e.kind() {
        ErrorKind::ConnectionRefused => "refused",
        ErrorKind::TimedOut | ErrorKind::WouldBlock => "timeout",
        _ if e.raw_os_error() == Some(libc::EHOSTUNREACH) => "unreachable",
        _ if e.raw_os_error() == Some(libc::ENETUNREACH) => "unreachable",
        _ if e.raw_os_error() == Some(libc::EPERM) => "rejected",
        _ => "error",
    }
}

fn remaining(deadline: Instant) -> Result<Duration, &'static str> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err("timeout")
    } else {
        Ok(left)
    }
}

fn tcp_exchange(
    to: SocketAddrV4,
    timeout: Duration,
    deadline: Instant,
) -> Result<(), &'static str> {
    let stream =
        TcpStream::connect_timeout(&SocketAddr::V4(to), timeout).map_err(|e| why_not(&e))?;
    stream
        .set_read_timeout(Some(remaining(deadline)?))
        .map_err(|e| why_not(&e))?;
    (&stream).write_all(PAYLOAD).map_err(|e| why_not(&e))?;
    let mut echo = Vec::new();
    BufReader::new(&stream)
        .read_until(b'\n', &mut echo)
        .map_err(|e| why_not(&e))?;
    if echo == PAYLOAD {
        Ok(())
    } else {
        Err("bad-echo")
    }
}

/// `source_port` 0: one the kernel picks.
fn udp_exchange(to: SocketAddrV4, source_port: u16, deadline: Instant) -> Result<(), &'static str> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, source_port)).map_err(|e| why_not(&e))?;
    socket.connect(to).map_err(|e| why_not(&e))?;
    let mut buf = [0u8; 64];
    loop {
        let wait = remaining(deadline)?.min(UDP_RESEND);
        socket.send(PAYLOAD).map_err(|e| why_not(&e))?;
        socket
            .set_read_timeout(Some(wait))
            .map_err(|e| why_not(&e))?;
        match socket.recv(&mut buf) {
            Ok(n) if &buf[..n] == PAYLOAD => return Ok(()),
            Ok(_) => return Err("bad-echo"),
            // An ICMP port unreachable: nobody serves the port.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err("refused"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(why_not(&e)),
        }
    }
}

/// Connects without blocking, waits for the handshake with poll(2), then exchanges the line;
/// the outer error is an SCTP-less kernel, the inner one an unanswered probe.
fn sctp_exchange(
    ip: Ipv4Addr,
    port: u16,
    deadline: Instant,
) -> Result<Result<(), &'static str>, Failure> {
    let sock = sctp_socket()?;
    let fd = sock.as_raw_fd();
    let addr = sockaddr(ip, port);
    // SAFETY: fcntl(2) and connect(2) on a socket we own; `addr` outlives the call.
    let started = unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        );
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            SOCKADDR_IN_LEN,
        )
    };
    if started != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Ok(Err(why_not(&e)));
        }
    }
    Ok(sctp_finish(sock, deadline))
}

fn sctp_finish(sock: OwnedFd, deadline: Instant) -> Result<(), &'static str> {
    wait_for(&sock, libc::POLLOUT, deadline)?;
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt(2) into a local of the size given.
    unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if err != 0 {
        return Err(why_not(&std::io::Error::from_raw_os_error(err)));
    }
    let mut stream = std::fs::File::from(sock);
    stream.write_all(PAYLOAD).map_err(|e| why_not(&e))?;
    let mut echo = Vec::new();
    let mut buf = [0u8; 64];
    while !echo.ends_with(b"\n") {
        wait_for(&stream, libc::POLLIN, deadline)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => echo.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(why_not(&e)),
        }
    }
    if echo == PAYLOAD {
        Ok(())
    } else {
        Err("bad-echo")
    }
}

/// poll(2) for `events` on `fd` until `deadline`.
fn wait_for(
    fd: &impl AsRawFd,
    events: libc::c_short,
    deadline: Instant,
) -> Result<(), &'static str> {
    loop {
        let left = remaining(deadline)?;
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: poll(2) on one pollfd on the stack.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(());
        }
        if n < 0 && std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
            return Err("error");
        }
    }
}
