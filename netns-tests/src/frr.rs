//! FRR (zebra + bgpd, and bfdd when asked) as the third-party router of the BGP tests, run inside a test's network
//! namespace with every file of its own in a temporary directory: configuration, pid files, vty
//! sockets (`vtysh --vty_socket`), zebra's API socket and logs. The daemons run as the `frr`
//! user (as Debian's package runs them; the directory is handed to it). What FRR writes at
//! fixed places (`/var/tmp/frr/<daemon>.<pid>`, `/run/frr`) lands on tmpfs mounts private to
//! each daemon's mount namespace (the one `ip netns exec` makes), which vanish with it.
//! Dropping an [`Frr`] stops its daemons (zebra takes its routes out of the kernel).
//!
//! ```no_run
//! # use netns_tests::{frr::Frr, Netns};
//! let router = Netns::new("rtr");
//! let frr = Frr::start(&router, "router bgp 64513\n bgp router-id 192.0.2.254\n").unwrap();
//! let summary = frr.vtysh_json("show bgp summary json");
//! ```

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::private_host::die_with_parent;
use crate::{wait_or_kill, Netns, TempDir};

const DAEMONS: &str = "/usr/lib/frr";
const VTYSH: &str = "vtysh";

/// Mounts over FRR's fixed scratch paths, then runs the daemon (`$0` and its arguments).
const PRIVATE_MOUNTS: &str =
    "set -e; mount -t tmpfs ferrocni-frr /var/tmp; mount -t tmpfs ferrocni-frr /run; exec \"$0\" \"$@\"";

/// zebra, bgpd and (with [`Frr::start_with_bfd`]) bfdd of one router.
pub struct Frr {
    dir: TempDir,
    zebra: Option<Child>,
    bfdd: Option<Child>,
    bgpd: Option<Child>,
}

impl Frr {
    /// Whether FRR is installed (the `frr` package: daemons, vtysh and the `frr` user).
    pub fn available() -> bool {
        let tools = Path::new(DAEMONS).join("zebra").is_file()
            && Path::new(DAEMONS).join("bgpd").is_file()
            && crate::private_host::tool_exists(VTYSH);
        tools && frr_ids().is_some()
    }

    /// Starts zebra, then bgpd with `bgpd_conf` (FRR's syntax), inside `ns`, and waits until
    /// bgpd answers on its vty. The `datacenter` profile: 3 s keepalives, no advertisement
    /// delay. `None` (with a line saying why) when FRR is not installed.
    pub fn start(ns: &Netns, bgpd_conf: &str) -> Option<Frr> {
        Frr::start_daemons(ns, bgpd_conf, None)
    }

    /// [`Frr::start`] with bfdd too (started before bgpd, configured with `bfdd_conf`), for
    /// `neighbor ... bfd` in bgpd's configuration. `None` when FRR or its bfdd is missing.
    pub fn start_with_bfd(ns: &Netns, bgpd_conf: &str, bfdd_conf: &str) -> Option<Frr> {
        if !Path::new(DAEMONS).join("bfdd").is_file() {
            eprintln!("FRR's bfdd missing (apt-get install frr)");
            return None;
        }
        Frr::start_daemons(ns, bgpd_conf, Some(bfdd_conf))
    }

    fn start_daemons(ns: &Netns, bgpd_conf: &str, bfdd_conf: Option<&str>) -> Option<Frr> {
        if !Frr::available() {
            eprintln!("FRR missing (apt-get install frr): zebra, bgpd, vtysh and the frr user");
            return None;
        }
        let dir = TempDir::new("frr");
        let tmp = std::env::temp_dir();
        assert!(
            !tmp.starts_with("/var/tmp") && !tmp.starts_with("/run"),
            "FRR's private /var/tmp and /run mounts would hide the test directory {}",
            dir.path().display()
        );
        let (uid, gid) = frr_ids().unwrap_or((0, 0));
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown the FRR dir");
        std::fs::write(dir.join("zebra.conf"), "hostname ferrocni-test-router\n")
            .expect("zebra.conf");
        std::fs::write(dir.join("bgpd.conf"), bgpd_conf).expect("bgpd.conf");
        let mut frr = Frr {
            dir,
            zebra: None,
            bfdd: None,
            bgpd: None,
        };
        frr.zebra = Some(frr.spawn(ns, "zebra", &[]));
        frr.wait_for("zebra", |f| f.dir.join("zserv.api").exists());
        if let Some(conf) = bfdd_conf {
            std::fs::write(frr.dir.join("bfdd.conf"), conf).expect("bfdd.conf");
            let ctl = frr.dir.join("bfdd.sock");
            let ctl = ctl.to_str().expect("bfdd socket path").to_string();
            frr.bfdd = Some(frr.spawn(ns, "bfdd", &["--bfdctl", &ctl]));
            frr.wait_for("bfdd", |f| f.vtysh(&["show bfd peers"]).status.success());
        }
        frr.bgpd = Some(frr.spawn(ns, "bgpd", &["-F", "datacenter"]));
        frr.wait_for("bgpd", |f| f.vtysh(&["show bgp summary"]).status.success());
        Some(frr)
    }

    fn spawn(&self, ns: &Netns, daemon: &str, extra: &[&str]) -> Child {
        let dir = self.dir.path();
        let binary = Path::new(DAEMONS).join(daemon);
        let mut cmd = ns.command(&["sh", "-c", PRIVATE_MOUNTS]);
        cmd.arg(&binary)
            .arg("-f")
            .arg(dir.join(format!("{daemon}.conf")))
            .arg("-i")
            .arg(dir.join(format!("{daemon}.pid")))
            .arg("-z")
            .arg(dir.join("zserv.api"))
            .arg("--vty_socket")
            .arg(dir)
            // No vty over TCP.
            .args(["-P", "0"])
            .arg("--log")
            .arg(format!(
                "file:{}",
                dir.join(format!("{daemon}.log")).display()
            ))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()))
    }

    fn wait_for(&mut self, daemon: &str, ready: impl Fn(&Frr) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !ready(self) {
            let child = match daemon {
                "zebra" => &mut self.zebra,
                "bfdd" => &mut self.bfdd,
                _ => &mut self.bgpd,
            };
            if let Some(c) = child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = c.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    panic!("{daemon} exited ({status}): {err}\n{}", self.log(daemon));
                }
            }
            assert!(
                Instant::now() < deadline,
                "{daemon} did not come up:\n{}",
                self.log(daemon)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemons' pids (zebra, bfdd if started, bgpd).
    pub fn pids(&self) -> Vec<u32> {
        [&self.zebra, &self.bfdd, &self.bgpd]
            .into_iter()
            .flatten()
            .map(Child::id)
            .collect()
    }

    /// The directory holding the vty sockets (`vtysh --vty_socket <it>`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `vtysh -c <cmd> -c <cmd>...` against this router.
    pub fn vtysh(&self, commands: &[&str]) -> Output {
        let mut cmd = Command::new(VTYSH);
        cmd.arg("--vty_socket").arg(self.dir.path());
        for c in commands {
            cmd.args(["-c", c]);
        }
        cmd.output()
            .unwrap_or_else(|e| panic!("cannot run vtysh: {e}"))
    }

    /// A `... json` show command, parsed (`Null` when vtysh fails or prints no JSON).
    pub fn vtysh_json(&self, command: &str) -> Value {
        let out = self.vtysh(&[command]);
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    /// Applies configuration lines (`configure terminal`, the lines, `end`); panics with
    /// vtysh's output if one is refused.
    pub fn configure(&self, lines: &[&str]) {
        let mut commands = vec!["configure terminal"];
        commands.extend_from_slice(lines);
        commands.push("end");
        let out = self.vtysh(&commands);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !text.contains('%'),
            "vtysh refused {lines:?}: {text}"
        );
    }

    /// Prefixes of the best BGP routes in bgpd's table, with their next hop
    /// (`{"10.244.1.0/24": "172.31.250.1"}`).
    pub fn bgp_routes(&self) -> Vec<(String, String)> {
        self.best_routes("show ip bgp json")
    }

    /// [`Frr::bgp_routes`] of the IPv6 unicast table.
    pub fn bgp_routes6(&self) -> Vec<(String, String)> {
        self.best_routes("show bgp ipv6 unicast json")
    }

    /// `(prefix, next hop)` of each best (or multipath) route in `command`'s JSON table.
    fn best_routes(&self, command: &str) -> Vec<(String, String)> {
        let v = self.vtysh_json(command);
        let mut out = Vec::new();
        if let Some(routes) = v.get("routes").and_then(Value::as_object) {
            for (prefix, paths) in routes {
                let best = paths
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p.get("bestpath").is_some() || p.get("multipath").is_some());
                let nh = best
                    .and_then(|p| p.get("nexthops"))
                    .and_then(|n| n.get(0))
                    .and_then(|n| n.get("ip"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                out.push((prefix.clone(), nh.to_string()));
            }
        }
        out.sort();
        out
    }

    /// The next hops of the paths bgpd uses for `prefix` (its best path and those it runs
    /// beside it with `maximum-paths`), sorted.
    pub fn used_next_hops(&self, prefix: &str) -> Vec<String> {
        self.used_next_hops_in("ipv4", prefix)
    }

    /// [`Frr::used_next_hops`] of an IPv6 prefix (their global next hops).
    pub fn used_next_hops6(&self, prefix: &str) -> Vec<String> {
        self.used_next_hops_in("ipv6", prefix)
    }

    fn used_next_hops_in(&self, family: &str, prefix: &str) -> Vec<String> {
        let v = self.vtysh_json(&format!("show bgp {family} unicast {prefix} json"));
        let mut out: Vec<String> = v
            .get("paths")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("bestpath").is_some() || p.get("multipath").is_some())
            .filter_map(|p| p.pointer("/nexthops/0/ip")?.as_str().map(str::to_string))
            .collect();
        out.sort();
        out
    }

    /// The prefixes bgpd announces to `neighbour` (bgpd sends a new peer its routes a moment
    /// after the session comes up: wait for them).
    pub fn advertised(&self, neighbour: &str) -> Vec<String> {
        let v = self.vtysh_json(&format!(
            "show bgp ipv4 unicast neighbors {neighbour} advertised-routes json"
        ));
        let mut out: Vec<String> = v
            .get("advertisedRoutes")
            .and_then(Value::as_object)
            .map(|routes| routes.keys().cloned().collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// BFD peers and their status (`up`, `down`, ...), by peer address.
    pub fn bfd_peers(&self) -> Vec<(String, String)> {
        let v = self.vtysh_json("show bfd peers json");
        let mut out: Vec<(String, String)> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
                (s("peer").to_string(), s("status").to_string())
            })
            .collect();
        out.sort();
        out
    }

    /// BGP neighbours and their state (`Established`, `Active`, ...).
    pub fn neighbours(&self) -> Vec<(String, String)> {
        let v = self.vtysh_json("show bgp neighbors json");
        let mut out: Vec<(String, String)> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(ip, n)| {
                let state = n
                    .get("bgpState")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                (ip.clone(), state.to_string())
            })
            .collect();
        out.sort();
        out
    }

    /// A daemon's log, for failure messages.
    pub fn log(&self, daemon: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{daemon}.log"))).unwrap_or_default()
    }

    fn stop(child: &mut Option<Child>) {
        let Some(mut c) = child.take() else { return };
        if let Ok(pid) = i32::try_from(c.id()) {
            // SAFETY: kill(2) on our own child's pid; it has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        wait_or_kill(&mut c, Duration::from_secs(5));
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        Frr::stop(&mut self.bgpd);
        Frr::stop(&mut self.bfdd);
        Frr::stop(&mut self.zebra);
    }
}

/// The `frr` user's uid and gid.
fn frr_ids() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&"frr") && f.len() > 3)
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}
