//! The BIRD process: its files, the configuration check, starting it (in the foreground, as the
//! agent's child), adopting one already running on the control socket, telling whether it is
//! still there, and stopping it.
//!
//! BIRD runs with `-f` in a process group of its own (a terminal's Ctrl-C reaches the agent,
//! which stops BIRD gracefully; BIRD takes SIGINT and SIGTERM as an orderly shutdown that
//! withdraws this node's subnet from every peer, though its kernel routes stay: `persist`). Its log goes to its own file (`log` in the configuration); what it
//! prints before reading the configuration goes to `bird.stderr`, quoted when it fails to start.

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipnetwork::Ipv4Network;
use netkit::ipnetwork::IpNetwork;
use netkit::packet_route::route::RouteProtocol;

use super::control::Control;
use super::error::BgpError;

/// How long a starting BIRD may take to open its control socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a BIRD told to stop may take to exit before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
/// `sun_path` holds 108 bytes with the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// The files of one BIRD, all in the backend's directory (`--bgp-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub dir: PathBuf,
    /// The configuration BIRD runs with.
    pub config: PathBuf,
    /// A rendered configuration being checked (left there when BIRD refuses it).
    pub candidate: PathBuf,
    pub socket: PathBuf,
    pub pid_file: PathBuf,
    pub log: PathBuf,
    pub stderr: PathBuf,
}

impl Paths {
    /// The paths under `dir`, which must be quotable in BIRD's configuration and CLI (no `"`,
    /// no line break) and short enough for a unix socket.
    pub fn new(dir: &Path) -> Result<Paths, BgpError> {
        let text = dir.to_string_lossy();
        if text.contains(['"', '\n', '\r']) || text.is_empty() {
            return Err(BgpError::option(
                "--bgp-dir",
                format!(
                    "{text:?} cannot be written in BIRD's configuration (no quote or line break)"
                ),
            ));
        }
        let p = Paths {
            dir: dir.to_path_buf(),
            config: dir.join("bird.conf"),
            candidate: dir.join("bird.conf.new"),
            socket: dir.join("bird.ctl"),
            pid_file: dir.join("bird.pid"),
            log: dir.join("bird.log"),
            stderr: dir.join("bird.stderr"),
        };
        if p.socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(BgpError::option(
                "--bgp-dir",
                format!(
                    "{text:?} is too long for the control socket path (at most {} bytes)",
                    MAX_SOCKET_PATH - 9
                ),
            ));
        }
        Ok(p)
    }
}

/// The BIRD binary: `name` as given when it holds a `/`, else looked up on PATH and in the
/// sbin directories (where Debian puts it; not always on a service's PATH).
pub fn find_binary(name: &Path) -> Result<PathBuf, BgpError> {
    let missing = || BgpError::BirdMissing {
        name: name.display().to_string(),
    };
    if name.components().count() > 1 || name.is_absolute() {
        return name
            .is_file()
            .then(|| name.to_path_buf())
            .ok_or_else(missing);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(missing)
}

/// `bird -p -c <file>`: BIRD parses the configuration and says whether it would load it.
pub fn check_config(binary: &Path, file: &Path) -> Result<(), BgpError> {
    let out = Command::new(binary)
        .arg("-p")
        .arg("-c")
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BgpError::Spawn {
            binary: binary.to_path_buf(),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if output.is_empty() {
        output = format!("{} (no message)", out.status);
    }
    Err(BgpError::ConfigRefused {
        path: file.to_path_buf(),
        output,
    })
}

/// Whether the main table holds `proto bird` routes inside `network`: a BIRD ran here and
/// left them (a graceful stop, a crash), so the next one starts in graceful recovery (`-R`)
/// instead of flushing them before its sessions are back.
pub fn kernel_has_bird_routes(network: Ipv4Network) -> Result<bool, BgpError> {
    let mut sock = netkit::Socket::new()?;
    let routes = sock.routes(netkit::Family::V4, Some(netkit::route::TABLE_MAIN))?;
    Ok(routes
        .iter()
        .any(|r| is_bird_route(r, IpNetwork::V4(network))))
}

/// Removes the `proto bird` routes inside `network` from the main table (what a BIRD stopped
/// for a graceful restart left there, when the backend is given up); how many. `network` is
/// the IPv4 `Network` or, on a dual-stack network, the `IPv6Network`.
pub fn flush_kernel_routes(network: IpNetwork) -> Result<usize, BgpError> {
    let mut sock = netkit::Socket::new()?;
    let family = match network {
        IpNetwork::V4(_) => netkit::Family::V4,
        IpNetwork::V6(_) => netkit::Family::V6,
    };
    let routes = sock.routes(family, Some(netkit::route::TABLE_MAIN))?;
    let mut removed = 0;
    for r in routes.iter().filter(|r| is_bird_route(r, network)) {
        match sock.delete_route(r) {
            Ok(()) => removed += 1,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

fn is_bird_route(r: &netkit::Route, network: IpNetwork) -> bool {
    r.protocol == Some(RouteProtocol::Bird) && network.contains(r.dst.network())
}

/// A running BIRD.
#[derive(Debug)]
pub enum Process {
    /// Started by this agent.
    Child(Child),
    /// Found running (started by an agent before this one), with its pid when the pid file
    /// names a live BIRD.
    Adopted { pid: Option<u32> },
}

impl Process {
    /// Starts BIRD (`-R`: graceful recovery) and waits until it answers on its socket.
    pub fn start(binary: &Path, paths: &Paths, recover: bool) -> Result<Process, BgpError> {
        let stderr =
            File::create(&paths.stderr).map_err(|e| BgpError::io("creating", &paths.stderr, e))?;
        let stdout = stderr
            .try_clone()
            .map_err(|e| BgpError::io("duplicating", &paths.stderr, e))?;
        let mut cmd = Command::new(binary);
        cmd.arg("-f")
            .arg("-c")
            .arg(&paths.config)
            .arg("-s")
            .arg(&paths.socket)
            .arg("-P")
            .arg(&paths.pid_file);
        if recover {
            cmd.arg("-R");
        }
        cmd.stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        let mut child = cmd.spawn().map_err(|source| BgpError::Spawn {
            binary: binary.to_path_buf(),
            source,
        })?;
        let control = Control::new(&paths.socket);
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(BgpError::StartFailed {
                    status,
                    output: tail(&paths.stderr),
                });
            }
            if control.answers() {
                return Ok(Process::Child(child));
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BgpError::StartTimeout {
                    socket: paths.socket.clone(),
                    secs: START_TIMEOUT.as_secs(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// The BIRD answering on the control socket, if one does.
    pub fn adopt(paths: &Paths, binary: &Path) -> Option<Process> {
        if !Control::new(&paths.socket).answers() {
            return None;
        }
        let pid = fs::read_to_string(&paths.pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .filter(|pid| is_bird(*pid, binary));
        Some(Process::Adopted { pid })
    }

    pub fn pid(&self) -> Option<u32> {
        match self {
            Process::Child(c) => Some(c.id()),
            Process::Adopted { pid } => *pid,
        }
    }

    /// `None` while BIRD runs; how it ended once it has.
    pub fn ended(&mut self, paths: &Paths, binary: &Path) -> Option<String> {
        match self {
            Process::Child(c) => match c.try_wait() {
                Ok(Some(status)) => {
                    let output = tail(&paths.stderr);
                    Some(if output.is_empty() {
                        format!("exited ({status})")
                    } else {
                        format!("exited ({status}): {output}")
                    })
                }
                _ => None,
            },
            Process::Adopted { pid: Some(pid) } => {
                (!is_bird(*pid, binary)).then(|| format!("process {pid} is gone"))
            }
            Process::Adopted { pid: None } => (!Control::new(&paths.socket).answers())
                .then(|| "no longer answers on its control socket".to_string()),
        }
    }

    /// Waits until BIRD has exited (after a stop command); kills it if it takes longer than
    /// [`STOP_TIMEOUT`] (SIGKILL: it leaves the kernel routes as they are, and peers see the
    /// connection drop, which they take as a restart). Whether it exited by itself.
    pub fn wait_exit(&mut self, paths: &Paths, binary: &Path) -> bool {
        let started = Instant::now();
        while started.elapsed() < STOP_TIMEOUT {
            if self.ended(paths, binary).is_some() {
                return true;
            }
            std::thread::sleep(POLL);
        }
        self.kill();
        false
    }

    /// SIGKILL, never SIGTERM (which withdraws this node's subnet from every peer).
    pub fn kill(&mut self) {
        match self {
            Process::Child(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Process::Adopted { pid: Some(pid) } => {
                if let Ok(pid) = i32::try_from(*pid) {
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            Process::Adopted { pid: None } => {}
        }
    }
}

/// Whether `pid` is a live BIRD: its command name is the binary's (pid reuse), and it is not a
/// zombie (reaped here if it is: the agent may be its reaper, as PID 1 of a container).
fn is_bird(pid: u32, binary: &Path) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state ...`: comm may hold spaces and parentheses; the state follows the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if state == Some("Z") {
        if let Ok(p) = i32::try_from(pid) {
            // SAFETY: waitpid on a pid with WNOHANG; a pid that is not our child gives ECHILD.
            unsafe { libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG) };
        }
        return false;
    }
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let name = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The kernel keeps 15 bytes of the name.
    let expected: String = name.chars().take(15).collect();
    comm.trim_end() == expected || comm.trim_end() == "bird"
}

/// The end of BIRD's stderr (its start-up complaints), on one line.
fn tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let text = text.trim();
    let start = text.len().saturating_sub(600);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    text[start..]
        .split('\n')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::super::render::{render, tests as samples};
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bgp-bird-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn paths_are_checked() {
        let p = Paths::new(Path::new("/run/ferrocni/bgp")).unwrap();
        assert_eq!(p.socket, Path::new("/run/ferrocni/bgp/bird.ctl"));
        assert_eq!(p.config, Path::new("/run/ferrocni/bgp/bird.conf"));
        let e = Paths::new(Path::new("/run/a\"b")).unwrap_err().to_string();
        assert!(e.starts_with("\"--bgp-dir\" "), "{e}");
        let long = format!("/run/{}", "d".repeat(120));
        let e = Paths::new(Path::new(&long)).unwrap_err().to_string();
        assert!(e.contains("too long for the control socket"), "{e}");
    }

    #[test]
    fn missing_binary_is_named() {
        let e = find_binary(Path::new("no-such-bird-binary")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "BIRD binary \"no-such-bird-binary\" not found on PATH (install bird2, or give --bird-binary)"
        );
        assert!(find_binary(Path::new("/nonexistent/bird")).is_err());
    }

    #[test]
    fn tail_is_one_short_line() {
        let dir = scratch("tail");
        let f = dir.join("stderr");
        fs::write(
            &f,
            format!(
                "{}\nbird: I found another BIRD running.\n",
                "x".repeat(1000)
            ),
        )
        .unwrap();
        let t = tail(&f);
        assert!(t.len() <= 610, "{}", t.len());
        assert!(t.ends_with("| bird: I found another BIRD running."), "{t}");
        assert_eq!(tail(&dir.join("missing")), "");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Rendered configurations go through BIRD's own parser (`bird -p -c`), when BIRD is
    /// installed (`bird2`); and a broken one is refused with BIRD's message.
    #[test]
    fn bird_accepts_rendered_configs() {
        let Ok(binary) = find_binary(Path::new("bird")) else {
            eprintln!("skipping: bird not installed (bird2)");
            return;
        };
        let dir = scratch("check");
        let log = dir.join("bird.log");
        let full = samples::sample_sessions();
        let empty = Default::default();
        let mut variants = vec![samples::sample(&full), samples::sample(&empty)];
        let mut no_gr = samples::sample(&full);
        no_gr.graceful_restart = false;
        no_gr.network = "10.96.0.0/12".parse().unwrap();
        no_gr.own_subnet = "10.96.7.192/26".parse().unwrap();
        no_gr.as_number = 4_200_000_000;
        variants.push(no_gr);
        let mut fast = samples::sample_sessions();
        fast.peers[0].bfd = true;
        fast.peers[0].timers.hold_time = Some(3);
        fast.peers[0].timers.keepalive_time = Some(1);
        let mut detect = samples::sample(&fast);
        detect.mesh_bfd = true;
        detect.mesh_timers.hold_time = Some(0);
        variants.push(detect);
        // No other node's lease yet: the import filter refuses everything.
        let mut alone = samples::sample(&empty);
        alone.leases = &[];
        variants.push(alone);
        // Advertised and external prefixes.
        let mut prefixes = samples::sample(&full);
        prefixes.prefixes = Box::leak(Box::new(samples::sample_prefixes()));
        variants.push(prefixes);
        // A dual-stack network, with IPv6 advertised and external prefixes.
        let mut dual = samples::sample(&full);
        dual.v6 = Some(Box::leak(Box::new(samples::sample_v6())));
        dual.prefixes = Box::leak(Box::new(samples::sample_prefixes()));
        dual.prefixes6 = Box::leak(Box::new(samples::sample_prefixes6()));
        variants.push(dual);
        for (i, mut c) in variants.into_iter().enumerate() {
            c.log_file = &log;
            let file = dir.join(format!("bird-{i}.conf"));
            fs::write(&file, render(&c)).unwrap();
            if let Err(e) = check_config(&binary, &file) {
                panic!("variant {i}: {e}\n{}", render(&c));
            }
        }
        let broken = dir.join("broken.conf");
        fs::write(&broken, "router id 10.0.0.1;\nprotocol bgp dead { }\n").unwrap();
        let e = check_config(&binary, &broken).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "BIRD refused the rendered configuration {}: ",
                broken.display()
            )),
            "{e}"
        );
        assert!(e.contains("broken.conf:2"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
