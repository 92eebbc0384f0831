//! `make bench`: runs ferrocni and the reference Go plugins side by side in the same run and
//! prints ratios (latency medians, peak RSS, binary sizes, scale and concurrency behaviour).
//!
//! Everything happens in throw-away network namespaces; the bench process itself enters a
//! private "host" namespace so bridges, rules and sysctls never touch the real host.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns_tests::containerd::{self, CriNode};
use netns_tests::cri::CriError;
use netns_tests::{lease_files, set_temp_root, Netns, TempDir};

struct Opts {
    ours: PathBuf,
    reference: PathBuf,
    pods: usize,
    concurrent: usize,
    scale_pods: usize,
    cri_pods: usize,
    /// The udp section: seconds per transfer, rounds of the three paths.
    udp_seconds: u32,
    udp_rounds: u32,
    /// The agent binary (dynamic, so not beside the static plugins in `--ours`).
    agent: PathBuf,
    sections: Vec<String>,
    /// `--trimmed`: our binaries come from `make build TRIM=1` (tighter size goals).
    trimmed: bool,
}

/// `--on-disk`: the labs' working directories stay in `TMPDIR` instead of a tmpfs of their
/// own ([`lab_tmpfs`]). Set while parsing the options, before any section runs.
static ON_DISK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn parse_opts() -> Opts {
    let mut o = Opts {
        ours: PathBuf::from("target/release"),
        reference: PathBuf::from("/usr/lib/cni"),
        pods: 50,
        concurrent: 50,
        scale_pods: 1000,
        cri_pods: 20,
        udp_seconds: 10,
        udp_rounds: 3,
        agent: PathBuf::from("target/release/ferrocni-agent"),
        sections: Vec::new(),
        trimmed: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--ours" => o.ours = PathBuf::from(val()),
            "--reference" => o.reference = PathBuf::from(val()),
            "--pods" => {
                o.pods = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--pods needs a number"))
            }
            "--concurrent" => {
                o.concurrent = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--concurrent needs a number"))
            }
            "--scale-pods" => {
                o.scale_pods = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--scale-pods needs a number"))
            }
            "--cri-pods" => {
                o.cri_pods = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--cri-pods needs a number"))
            }
            "--udp-seconds" => {
                o.udp_seconds = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--udp-seconds needs a number"))
            }
            "--udp-rounds" => {
                o.udp_rounds = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--udp-rounds needs a number"))
            }
            "--agent" => o.agent = PathBuf::from(val()),
            "--only" => o.sections = val().split(',').map(str::to_string).collect(),
            "--trimmed" => o.trimmed = true,
            "--on-disk" => ON_DISK.store(true, std::sync::atomic::Ordering::Relaxed),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    o
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("ferrocni-bench: {msg}");
    }
    eprintln!(
        "usage: ferrocni-bench [--ours DIR] [--reference DIR] [--pods N] [--concurrent N] [--scale-pods N]\n\
         \x20                     [--cri-pods N] [--udp-seconds N] [--udp-rounds N] [--trimmed] [--on-disk]\n\
         \x20                     [--only sizes,exec,loopback,bridge,rss,concurrent,bandwidth,ptp,macvlan,ipvlan,hostlocal,scale,vxlan,wireguard,netfilter,latency,cri,agent,kube,policy,bgp,udp]\n\
         \x20                     [--agent PATH (default target/release/ferrocni-agent)]"
    );
    std::process::exit(2)
}

// ---- process helpers -----------------------------------------------------------------------

/// One finished plugin or tool run.
struct Run {
    elapsed: Duration,
    ok: bool,
    max_rss_kb: i64,
    /// The child's own CPU time (user + system), from wait4's rusage.
    cpu: Duration,
}

/// Spawns `bin` with extra env and stdin, waits with wait4 (for timings: its `max_rss_kb`
/// is at least the bench's own RSS, see [`run_for_rss`]).
fn run(bin: &Path, args: &[&str], env: &[(&str, String)], stdin: &[u8]) -> Run {
    spawn_and_wait(Command::new(bin), args, env, stdin)
}

/// Like [`run`], with a `max_rss_kb` that is the plugin's own. Linux records the RSS high-water
/// mark of the memory a process had when it called exec: with std's posix_spawn (vfork) that is
/// the bench's own, so every plugin would seem to need at least the bench's ~2 MiB. A plain
/// fork (forced by a pre_exec hook) gives the child a copy holding only the bench's few
/// private anonymous pages.
fn run_for_rss(bin: &Path, args: &[&str], env: &[(&str, String)], stdin: &[u8]) -> Run {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin);
    // SAFETY: the hook does nothing, so it is async-signal-safe.
    unsafe { cmd.pre_exec(|| Ok(())) };
    spawn_and_wait(cmd, args, env, stdin)
}

fn spawn_and_wait(mut cmd: Command, args: &[&str], env: &[(&str, String)], stdin: &[u8]) -> Run {
    let start = Instant::now();
    let bin = PathBuf::from(cmd.get_program());
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot run {}: {e}", bin.display());
            return Run {
                elapsed: start.elapsed(),
                ok: false,
                max_rss_kb: 0,
                cpu: Duration::ZERO,
            };
        }
    };
    if let Some(mut si) = child.stdin.take() {
        let _ = si.write_all(stdin);
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    use std::io::Read;
    if let Some(mut so) = child.stdout.take() {
        let _ = so.read_to_end(&mut stdout);
    }
    if let Some(mut se) = child.stderr.take() {
        let _ = se.read_to_end(&mut stderr);
    }
    let (status, rss, cpu) = wait4(child.id() as i32);
    let elapsed = start.elapsed();
    let ok = status == Some(0);
    if !ok {
        eprintln!(
            "{} {:?} failed: {}{}",
            bin.display(),
            args,
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    }
    std::mem::forget(child);
    Run {
        elapsed,
        ok,
        max_rss_kb: rss,
        cpu,
    }
}

/// Waits for `pid`: its exit code, peak RSS (KiB) and CPU time.
fn wait4(pid: i32) -> (Option<i32>, i64, Duration) {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r < 0 {
        return (None, 0, Duration::ZERO);
    }
    let code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (code, ru.ru_maxrss, tv(ru.ru_utime) + tv(ru.ru_stime))
}

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn median(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[v.len() / 2]
}

/// Mean of the middle 80% (a tenth dropped at each end): for times that come in whole
/// scheduler ticks, where a median jumps by a tick when one sample moves.
fn trimmed_mean(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let cut = v.len() / 10;
    let kept = &v[cut..v.len() - cut];
    if kept.is_empty() {
        return Duration::ZERO;
    }
    kept.iter().sum::<Duration>() / kept.len() as u32
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ratio(reference: f64, ours: f64) -> String {
    if ours <= 0.0 {
        return "-".into();
    }
    format!("{:.1}x", reference / ours)
}

fn report(metric: &str, ours: String, reference: String, r: String) {
    println!("{metric:<48} {ours:>14} {reference:>14} {r:>8}");
}

fn report_time(metric: &str, ours: Duration, reference: Duration) {
    report(
        metric,
        ms(ours),
        ms(reference),
        ratio(reference.as_secs_f64(), ours.as_secs_f64()),
    );
}

// ---- namespaces ----------------------------------------------------------------------------

/// Moves the bench process (single-threaded) into `ns` so every plugin it runs sees it as host.
fn enter(ns: &Netns) {
    let f = match std::fs::File::open(ns.path()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("open {}: {e}", ns.path_str());
            std::process::exit(1)
        }
    };
    use std::os::fd::AsRawFd;
    // SAFETY: setns on our own main thread with a valid fd.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        eprintln!(
            "setns {}: {}",
            ns.path_str(),
            std::io::Error::last_os_error()
        );
        std::process::exit(1);
    }
    sh(&["ip", "link", "set", "lo", "up"]);
}

// ---- suites ----------------------------------------------------------------------------------

struct Suite<'a> {
    label: &'static str,
    dir: &'a Path,
}

fn plugin_env(
    cmd: &str,
    cid: &str,
    netns: &str,
    ifname: &str,
    cni_path: &Path,
) -> Vec<(&'static str, String)> {
    vec![
        ("CNI_COMMAND", cmd.to_string()),
        ("CNI_CONTAINERID", cid.to_string()),
        ("CNI_NETNS", netns.to_string()),
        ("CNI_IFNAME", ifname.to_string()),
        ("CNI_PATH", cni_path.display().to_string()),
    ]
}

fn sizes(o: &Opts, goals: &mut Goals) {
    println!("\n## Binary size (stripped release vs Debian's reference)");
    let mut tot = (0u64, 0u64);
    for p in [
        "loopback",
        "bridge",
        "host-local",
        "bandwidth",
        "portmap",
        "firewall",
        "tuning",
        "ptp",
        "macvlan",
        "ipvlan",
        "vlan",
        "host-device",
    ] {
        let (a, b) = (
            std::fs::metadata(o.ours.join(p)),
            std::fs::metadata(o.reference.join(p)),
        );
        if let (Ok(a), Ok(b)) = (a, b) {
            tot.0 += a.len();
            tot.1 += b.len();
            goals.sizes.push((p, a.len()));
            report(
                &format!("size {p}"),
                format!("{} KiB", a.len() / 1024),
                format!("{} KiB", b.len() / 1024),
                ratio(b.len() as f64, a.len() as f64),
            );
        }
    }
    report(
        "size total",
        format!("{} KiB", tot.0 / 1024),
        format!("{} KiB", tot.1 / 1024),
        ratio(tot.1 as f64, tot.0 as f64),
    );
}

/// Median wall time of exec + VERSION (spawn to reaped), and beside it the plugin's own CPU
/// time: the rest of the wall figure is the spawning and reaping, and the machine's latency in
/// waking an idle CPU for the child and then for the parent, which on a virtual machine can
/// double from one hour to the next while the plugin's own share stays the same. The floor
/// beside them is a static executable of a few hundred bytes that only writes the same answer
/// (`exec_floor`): the kernel's exec and exit, which no plugin goes under. The three are run in
/// turn, so a slow phase of the machine weighs on each alike.
fn exec_version(o: &Opts, goals: &mut Goals) {
    const RUNS: usize = 200;
    println!("\n## Plugin exec + VERSION ({RUNS} runs each, interleaved, median)");
    let env = vec![("CNI_COMMAND", "VERSION".to_string())];
    let ours = o.ours.join("loopback");
    let reference = o.reference.join("loopback");
    let answer = version_answer(&ours);
    let floor_dir = TempDir::new("exec-floor");
    let floor = answer.as_deref().and_then(|a| {
        netns_tests::exec_floor::write_floor_executable(floor_dir.path(), "loopback", a)
    });
    let bins: Vec<&Path> = [
        Some(ours.as_path()),
        Some(reference.as_path()),
        floor.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut runs: Vec<Vec<Run>> = bins.iter().map(|_| Vec::with_capacity(RUNS)).collect();
    for _ in 0..RUNS {
        for (bin, out) in bins.iter().zip(runs.iter_mut()) {
            out.push(run(bin, &[], &env, b"{}"));
        }
    }
    let wall = |r: &[Run]| median(r.iter().map(|r| r.elapsed).collect());
    let cpu = |r: &[Run]| median(r.iter().map(|r| r.cpu).collect());
    report_time("loopback VERSION", wall(&runs[0]), wall(&runs[1]));
    report_time(
        "loopback VERSION: the child's CPU time, exec included",
        cpu(&runs[0]),
        cpu(&runs[1]),
    );
    match runs.get(2) {
        Some(floor_runs) => {
            for (what, ours, floor) in [
                ("wall", wall(&runs[0]), wall(floor_runs)),
                ("child CPU", cpu(&runs[0]), cpu(floor_runs)),
            ] {
                report(
                    &format!("loopback VERSION vs the exec floor ({what})"),
                    ms(ours),
                    ms(floor),
                    format!("{:.2}", ours.as_secs_f64() / floor.as_secs_f64().max(1e-9)),
                );
            }
            let w = wall(floor_runs);
            goals.exec_floor = Some(w);
        }
        None => println!("exec floor: not measured (no answer from our loopback, or not x86-64)"),
    }
    goals.exec_version = Some(wall(&runs[0]));
}

/// Our loopback's VERSION answer, byte for byte (what the exec floor writes).
fn version_answer(bin: &Path) -> Option<Vec<u8>> {
    let out = Command::new(bin)
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    (out.status.success() && !out.stdout.is_empty()).then_some(out.stdout)
}

fn loopback(o: &Opts) {
    println!("\n## loopback ADD / DEL (100 runs, median)");
    let pod = Netns::new("fcb-lo");
    let conf = br#"{"cniVersion":"1.0.0","name":"bench-lo","type":"loopback"}"#;
    let mut add = BTreeMap::new();
    let mut del = BTreeMap::new();
    for s in suites(o) {
        let bin = s.dir.join("loopback");
        let (mut a, mut d) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            a.push(
                run(
                    &bin,
                    &[],
                    &plugin_env("ADD", "bench", pod.path_str(), "lo", s.dir),
                    conf,
                )
                .elapsed,
            );
            d.push(
                run(
                    &bin,
                    &[],
                    &plugin_env("DEL", "bench", pod.path_str(), "lo", s.dir),
                    conf,
                )
                .elapsed,
            );
        }
        add.insert(s.label, median(a));
        del.insert(s.label, median(d));
    }
    report_time("loopback ADD", add["ours"], add["reference"]);
    report_time("loopback DEL", del["ours"], del["reference"]);
}

/// A conflist in a private conf dir, driven through our cnitool.
struct Net {
    name: String,
    confdir: TempDir,
    cache: TempDir,
    data: TempDir,
}

impl Net {
    fn new(tag: &str, plugins_json: &str) -> Net {
        let confdir = TempDir::new(&format!("{tag}-conf"));
        let cache = TempDir::new(&format!("{tag}-cache"));
        let data = TempDir::new(&format!("{tag}-data"));
        let name = format!("bench-{tag}");
        let plugins = plugins_json.replace("@DATADIR@", &data.path().display().to_string());
        let list = format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":{plugins}}}"#);
        let _ = std::fs::write(confdir.join(format!("{name}.conflist")), list);
        Net {
            name,
            confdir,
            cache,
            data,
        }
    }

    fn cnitool(&self, o: &Opts, suite_dir: &Path, verb: &str, netns: &str) -> Run {
        let env = vec![
            ("NETCONFPATH", self.confdir.path().display().to_string()),
            ("CNI_PATH", suite_dir.display().to_string()),
            ("CNI_CACHE_DIR", self.cache.path().display().to_string()),
        ];
        run(
            &o.ours.join("cnitool"),
            &[verb, &self.name, netns],
            &env,
            b"",
        )
    }

    /// Like [`Net::cnitool`] with `CAP_ARGS` (runtime config such as port mappings).
    fn cnitool_caps(&self, o: &Opts, suite_dir: &Path, verb: &str, netns: &str, caps: &str) -> Run {
        let env = vec![
            ("NETCONFPATH", self.confdir.path().display().to_string()),
            ("CNI_PATH", suite_dir.display().to_string()),
            ("CNI_CACHE_DIR", self.cache.path().display().to_string()),
            ("CAP_ARGS", caps.to_string()),
        ];
        run(
            &o.ours.join("cnitool"),
            &[verb, &self.name, netns],
            &env,
            b"",
        )
    }

    fn leases(&self) -> usize {
        lease_files(&self.data.join(&self.name)).len()
    }
}

const BRIDGE_CHAIN: &str = r#"[{"type":"bridge","bridge":"fcb0","isGateway":true,"ipMasq":false,
    "ipam":{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{"subnet":"10.77.0.0/16"}]]}}]"#;

const BANDWIDTH_CHAIN: &str = r#"[{"type":"bridge","bridge":"fcb1","isGateway":true,
    "ipam":{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{"subnet":"10.78.0.0/16"}]]}},
    {"type":"bandwidth","ingressRate":10000000,"ingressBurst":100000,"egressRate":20000000,"egressBurst":200000}]"#;

const PTP_CHAIN: &str = r#"[{"type":"ptp","ipMasq":false,"mtu":1500,
    "ipam":{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{"subnet":"10.79.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]"#;

const MACVLAN_CHAIN: &str = r#"[{"type":"macvlan","master":"fcbup0","mode":"bridge",
    "ipam":{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{"subnet":"10.80.0.0/16"}]]}}]"#;

const IPVLAN_CHAIN: &str = r#"[{"type":"ipvlan","master":"fcbup0","mode":"l2",
    "ipam":{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{"subnet":"10.81.0.0/16"}]]}}]"#;

/// The parent link of the macvlan and ipvlan runs, in the lab's host netns.
fn uplink() {
    sh(&[
        "ip", "link", "add", "fcbup0", "type", "veth", "peer", "name", "fcbup1",
    ]);
    sh(&["ip", "link", "set", "fcbup0", "up"]);
}

/// Whether this kernel has the ipvlan driver (a scratch netns, its own veth).
fn kernel_has_ipvlan() -> bool {
    let ns = Netns::new("fcb-probe");
    let ip = |args: &[&str]| {
        let mut v = vec!["ip", "-n", ns.name()];
        v.extend_from_slice(args);
        sh(&v)
    };
    ip(&["link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        && ip(&[
            "link", "add", "link", "p0", "name", "i0", "type", "ipvlan", "mode", "l2",
        ])
}

/// Sequential ADD then DEL of `pods` pods per suite; returns medians.
fn chain_sequential(o: &Opts, tag: &str, chain: &str, pods: usize, title: &str) {
    chain_sequential_on(o, tag, chain, pods, title, &|| {});
}

/// [`chain_sequential`] with `setup` run in the lab's host netns first (a master link...).
fn chain_sequential_on(
    o: &Opts,
    tag: &str,
    chain: &str,
    pods: usize,
    title: &str,
    setup: &dyn Fn(),
) {
    println!("\n## {title}: {pods} pods sequential through cnitool (median per pod)");
    let lab = Lab::new(tag, pods);
    setup();
    let pod_ns = &lab.pods;
    let mut add = BTreeMap::new();
    let mut del = BTreeMap::new();
    for s in suites(o) {
        let net = Net::new(&format!("{tag}-{}", s.label), chain);
        let (mut a, mut d) = (Vec::new(), Vec::new());
        let mut failures = 0;
        for p in pod_ns {
            let r = net.cnitool(o, s.dir, "add", p.path_str());
            failures += usize::from(!r.ok);
            a.push(r.elapsed);
        }
        let held = net.leases();
        for p in pod_ns {
            let r = net.cnitool(o, s.dir, "del", p.path_str());
            failures += usize::from(!r.ok);
            d.push(r.elapsed);
        }
        if failures > 0 || held != pods || net.leases() != 0 {
            println!(
                "  {}: {failures} failed calls, {held} leases after ADD, {} after DEL",
                s.label,
                net.leases()
            );
        }
        add.insert(s.label, median(a));
        del.insert(s.label, median(d));
    }
    report_time(&format!("{title} ADD"), add["ours"], add["reference"]);
    report_time(&format!("{title} DEL"), del["ours"], del["reference"]);
}

/// A private "host" netns the bench process sits in, plus `n` pod namespaces; leaving it
/// returns the process to its original netns before the namespaces are deleted.
struct Lab {
    orig: Option<std::fs::File>,
    orig_mounts: Option<OriginalMounts>,
    pods: Vec<Netns>,
    _host: Netns,
}

/// The mount namespace and working directory the bench had before [`lab_mounts`], and the
/// mount point of the lab's tmpfs with the temporary root it replaced.
struct OriginalMounts {
    ns: std::fs::File,
    cwd: std::fs::File,
    tmpfs: Option<(PathBuf, Option<PathBuf>)>,
}

impl Lab {
    fn new(tag: &str, n: usize) -> Lab {
        let host = Netns::new(&format!("fcb-h-{tag}"));
        let pods = (0..n)
            .map(|_| Netns::new(&format!("fcb-p-{tag}")))
            .collect();
        let orig = std::fs::File::open("/proc/thread-self/ns/net").ok();
        enter(&host);
        let orig_mounts = lab_mounts();
        Lab {
            orig,
            orig_mounts,
            pods,
            _host: host,
        }
    }
}

/// Gives the bench (single-threaded) a mount namespace of its own with a sysfs of the netns it
/// has just entered, as `ip netns exec` does: a runtime's plugins run where `/sys` shows the
/// host's devices, and the bridge reads there whether its MAC is pinned (with a sysfs of
/// another netns it cannot tell, and pins again). Then a tmpfs for the lab's directories
/// ([`lab_tmpfs`]). Returns what to go back to, or None (with a notice) when it could not be
/// done.
fn lab_mounts() -> Option<OriginalMounts> {
    let mut orig = OriginalMounts {
        ns: std::fs::File::open("/proc/thread-self/ns/mnt").ok()?,
        cwd: std::fs::File::open(".").ok()?,
        tmpfs: None,
    };
    // SAFETY: plain syscalls on constant, NUL-terminated strings, on our own (only) thread.
    let ok = unsafe {
        libc::unshare(libc::CLONE_NEWNS) == 0
            && libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ) == 0
            && {
                libc::umount2(c"/sys".as_ptr(), libc::MNT_DETACH);
                libc::mount(
                    c"sysfs".as_ptr(),
                    c"/sys".as_ptr(),
                    c"sysfs".as_ptr(),
                    0,
                    std::ptr::null(),
                ) == 0
            }
    };
    if !ok {
        println!(
            "  (no sysfs of the bench's host netns: {}; the bridge pins its MAC on every ADD)",
            std::io::Error::last_os_error()
        );
    } else if !ON_DISK.load(std::sync::atomic::Ordering::Relaxed) {
        orig.tmpfs = lab_tmpfs();
    }
    Some(orig)
}

/// Mounts a tmpfs, visible in the lab's mount namespace only, for the directories the lab's
/// networks make (conf dirs, result caches, host-local stores), and makes it the temporary
/// root. Both suites write the same files there, a lease and a cached result per pod, so slow
/// inode allocation weighs on both alike and only blurs the comparison: an ext4 without a
/// journal skips every inode freed in the last minute or more before it hands one out, and
/// the bench frees them by the thousand (docs/benchmarks.md has the figures).
fn lab_tmpfs() -> Option<(PathBuf, Option<PathBuf>)> {
    let dir = std::env::temp_dir().join(format!("ferrocni-bench-tmpfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let Ok(target) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        let _ = std::fs::remove_dir(&dir);
        return None;
    };
    // SAFETY: constant, NUL-terminated strings and a CString we own, on our only thread.
    let mounted = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=0755".as_ptr().cast(),
        ) == 0
    };
    if !mounted {
        println!(
            "  (no tmpfs for the lab's directories: {}; they stay in {})",
            std::io::Error::last_os_error(),
            std::env::temp_dir().display()
        );
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    let previous = set_temp_root(Some(dir.clone()));
    Some((dir, previous))
}

impl Drop for Lab {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        if let Some(m) = &mut self.orig_mounts {
            // SAFETY: fds of our original mount namespace and directory, on our only thread.
            // Entering a mount namespace moves the working directory to its root: restore it.
            unsafe {
                libc::setns(m.ns.as_raw_fd(), libc::CLONE_NEWNS);
                libc::fchdir(m.cwd.as_raw_fd());
            }
            // The tmpfs went with the lab's mount namespace; its mount point is left.
            if let Some((dir, previous)) = m.tmpfs.take() {
                set_temp_root(previous);
                let _ = std::fs::remove_dir(dir);
            }
        }
        if let Some(f) = &self.orig {
            // SAFETY: fd of our original netns, on our own (only) thread.
            unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        }
    }
}

/// Our plugins and the reference ones, in that order.
fn suites(o: &Opts) -> [Suite<'_>; 2] {
    [
        Suite {
            label: "ours",
            dir: &o.ours,
        },
        Suite {
            label: "reference",
            dir: &o.reference,
        },
    ]
}

/// Peak RSS of the bridge plugin (which also runs host-local) invoked directly.
fn rss(o: &Opts, goals: &mut Goals) {
    println!("\n## Peak RSS of one bridge+host-local ADD (max of 10 pods)");
    let lab = Lab::new("rss", 10);
    let pods = &lab.pods;
    let mut out = BTreeMap::new();
    for s in suites(o) {
        let data = TempDir::new(&format!("rss-{}", s.label));
        let conf = format!(
            r#"{{"cniVersion":"1.0.0","name":"bench-rss-{}","type":"bridge","bridge":"fcr-{}","isGateway":true,
               "ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"10.79.0.0/24"}}]]}}}}"#,
            s.label,
            &s.label[..3],
            data.path().display()
        );
        let mut peak = 0;
        for (i, p) in pods.iter().enumerate() {
            let cid = format!("rss{i}");
            let r = run_for_rss(
                &s.dir.join("bridge"),
                &[],
                &plugin_env("ADD", &cid, p.path_str(), "eth0", s.dir),
                conf.as_bytes(),
            );
            peak = peak.max(r.max_rss_kb);
            run(
                &s.dir.join("bridge"),
                &[],
                &plugin_env("DEL", &cid, p.path_str(), "eth0", s.dir),
                conf.as_bytes(),
            );
        }
        out.insert(s.label, peak);
    }
    report(
        "peak RSS bridge ADD",
        format!("{} KiB", out["ours"]),
        format!("{} KiB", out["reference"]),
        ratio(out["reference"] as f64, out["ours"] as f64),
    );
    goals.bridge_rss_kib = Some((out["ours"], out["reference"]));
}

/// `n` concurrent ADDs then `n` concurrent DELs through cnitool.
fn concurrent(o: &Opts) {
    let n = o.concurrent;
    println!("\n## {n} concurrent ADDs, then {n} concurrent DELs (bridge + host-local)");
    let lab = Lab::new("conc", n);
    let pods = &lab.pods;
    let _reaper = Subreaper::new();
    let mut wall = BTreeMap::new();
    for s in suites(o) {
        let net = Net::new(&format!("conc-{}", s.label), BRIDGE_CHAIN);
        let mut times = Vec::new();
        for verb in ["add", "del"] {
            let cnitool = |i: usize| net.cnitool(o, s.dir, verb, pods[i].path_str()).ok;
            let (wall, ok) = all_at_once(n, cnitool);
            let failed = ok.iter().filter(|ok| !**ok).count();
            times.push(wall);
            reap_orphans();
            let leases = net.leases();
            if failed > 0 || (verb == "add" && leases != n) || (verb == "del" && leases != 0) {
                println!(
                    "  {} {verb}: {failed} failed, {leases} leases held",
                    s.label
                );
            }
        }
        wall.insert(s.label, times);
    }
    report_time(
        &format!("{n} concurrent ADD (wall)"),
        wall["ours"][0],
        wall["reference"][0],
    );
    report_time(
        &format!("{n} concurrent DEL (wall)"),
        wall["ours"][1],
        wall["reference"][1],
    );
}

/// host-local ADD+DEL latency with a store pre-filled with `n` leases in a /16.
fn hostlocal(o: &Opts) {
    println!("\n## host-local with a pre-filled store (20 ADD+DEL, median)");
    for n in [0usize, 1000, 60000] {
        let mut add = BTreeMap::new();
        let mut del = BTreeMap::new();
        for s in suites(o) {
            let data = TempDir::new(&format!("hl-{}-{n}", s.label));
            let store = data.join("bench-hl");
            let _ = std::fs::create_dir_all(&store);
            for i in 0..n {
                let ip = format!("10.80.{}.{}", (i + 2) / 256, (i + 2) % 256);
                let _ = std::fs::write(store.join(ip), format!("filler{i}\r\neth0"));
            }
            let conf = format!(
                r#"{{"cniVersion":"1.0.0","name":"bench-hl","type":"host-local",
                   "ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"10.80.0.0/16"}}]]}}}}"#,
                data.path().display()
            );
            let bin = s.dir.join("host-local");
            let (mut a, mut d) = (Vec::new(), Vec::new());
            for i in 0..20 {
                let cid = format!("hlbench{i}");
                a.push(
                    run(
                        &bin,
                        &[],
                        &plugin_env("ADD", &cid, "/var/run/netns/none", "eth0", s.dir),
                        conf.as_bytes(),
                    )
                    .elapsed,
                );
                d.push(
                    run(
                        &bin,
                        &[],
                        &plugin_env("DEL", &cid, "", "eth0", s.dir),
                        conf.as_bytes(),
                    )
                    .elapsed,
                );
            }
            add.insert(s.label, median(a));
            del.insert(s.label, median(d));
        }
        report_time(
            &format!("host-local ADD, {n} leases"),
            add["ours"],
            add["reference"],
        );
        report_time(
            &format!("host-local DEL, {n} leases"),
            del["ours"],
            del["reference"],
        );
    }
}

/// Latency of the first and last 100 ADDs while filling one bridge with `scale_pods` pods.
fn scale(o: &Opts) {
    let n = o.scale_pods;
    println!("\n## {n} pods on one bridge (median ADD of the first and last 100, then all DELs)");
    let lab = Lab::new("scale", n);
    let pods = &lab.pods;
    let mut res = BTreeMap::new();
    for s in suites(o) {
        let net = Net::new(&format!("scale-{}", s.label), BRIDGE_CHAIN);
        let adds: Vec<Duration> = pods
            .iter()
            .map(|p| net.cnitool(o, s.dir, "add", p.path_str()).elapsed)
            .collect();
        let held = net.leases();
        let dels: Vec<Duration> = pods
            .iter()
            .map(|p| net.cnitool(o, s.dir, "del", p.path_str()).elapsed)
            .collect();
        if held != n || net.leases() != 0 {
            println!(
                "  {}: {held} leases after ADD, {} after DEL",
                s.label,
                net.leases()
            );
        }
        let k = n.min(100);
        res.insert(
            s.label,
            (
                median(adds[..k].to_vec()),
                median(adds[n - k..].to_vec()),
                median(dels),
            ),
        );
    }
    report_time("ADD, first 100 pods", res["ours"].0, res["reference"].0);
    report_time(
        &format!("ADD, last 100 of {n} pods"),
        res["ours"].1,
        res["reference"].1,
    );
    report_time(&format!("DEL, {n} pods"), res["ours"].2, res["reference"].2);
}

/// kube-proxy-like nat rules for the bench host (see [`netns_tests::netfilter`]).
fn load_foreign_nat_rules(rules: usize) -> bool {
    let mut cmd = Command::new("iptables-restore");
    cmd.arg("--noflush");
    netns_tests::netfilter::load_nat_rules(cmd, rules)
}

/// bridge (ipMasq) + host-local + portmap (one hostPort) ADD/DEL with 0, 2,000 and 20,000
/// foreign nat rules on the node; ours (default backend: nftables over netlink) and the
/// reference (iptables) in the same host netns.
fn netfilter_scale(o: &Opts) {
    println!("\n## bridge ipMasq + host-local + portmap with foreign (kube-proxy-like) nat rules");
    let mut table = Vec::new();
    for (rules, pods) in [(0usize, 10usize), (2000, 10), (20000, 5)] {
        let lab = Lab::new(&format!("nf{rules}"), pods);
        if !load_foreign_nat_rules(rules) {
            println!("  could not load {rules} nat rules");
            continue;
        }
        let mut res = BTreeMap::new();
        for (k, s) in suites(o).iter().enumerate() {
            let chain = format!(
                r#"[{{"type":"bridge","bridge":"fcn{k}","isGateway":true,"ipMasq":true,
                    "ipam":{{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{{"subnet":"10.{}.0.0/16"}}]]}}}},
                   {{"type":"portmap","capabilities":{{"portMappings":true}}}}]"#,
                90 + k
            );
            let net = Net::new(&format!("nf{rules}-{}", s.label), &chain);
            let caps = format!(
                r#"{{"portMappings":[{{"hostPort":{},"containerPort":80,"protocol":"tcp"}}]}}"#,
                18080 + k
            );
            let (mut a, mut d) = (Vec::new(), Vec::new());
            let mut failures = 0;
            for p in &lab.pods {
                let r = net.cnitool_caps(o, s.dir, "add", p.path_str(), &caps);
                failures += usize::from(!r.ok);
                a.push(r.elapsed);
            }
            for p in &lab.pods {
                let r = net.cnitool_caps(o, s.dir, "del", p.path_str(), &caps);
                failures += usize::from(!r.ok);
                d.push(r.elapsed);
            }
            if failures > 0 || net.leases() != 0 {
                println!("  {} at {rules} rules: {failures} failed calls", s.label);
            }
            res.insert(s.label, (median(a), median(d)));
        }
        if res.len() == 2 {
            report_time(
                &format!("ADD, {rules} foreign nat rules"),
                res["ours"].0,
                res["reference"].0,
            );
            report_time(
                &format!("DEL, {rules} foreign nat rules"),
                res["ours"].1,
                res["reference"].1,
            );
            table.push((rules, res["ours"]));
        }
    }
    if let (Some(zero), Some(big)) = (table.first(), table.last()) {
        let growth = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64().max(1e-9);
        println!(
            "  ours at {} rules vs 0: ADD {:.2}x, DEL {:.2}x (goal <= 1.5x)",
            big.0,
            growth(zero.1 .0, big.1 .0),
            growth(zero.1 .1, big.1 .1)
        );
    }
}

/// The vxlan plugin's reconcile benchmark (there is no reference vxlan plugin), and the ADD
/// latency the vxlan plugin adds to a bridge + host-local chain with 10 peers.
fn vxlan(o: &Opts) {
    println!("\n## vxlan reconcile pass (no reference plugin exists; absolute figures)");
    let bench = o.ours.join("examples").join("reconcile_bench");
    match Command::new(&bench).status() {
        Ok(s) if s.success() => {}
        other => println!("  {} did not run ({other:?})", bench.display()),
    }

    println!(
        "\n## ADD latency the vxlan plugin adds to bridge + host-local (ours, 20 pods, 10 peers)"
    );
    let lab = Lab::new("vx", 20);
    let pods = &lab.pods;
    // An underlay link with an address and a default route, as a node would have.
    sh(&[
        "ip",
        "link",
        "add",
        "fcb-ul",
        "type",
        "veth",
        "peer",
        "name",
        "fcb-ul-peer",
    ]);
    sh(&["ip", "addr", "add", "192.168.250.1/24", "dev", "fcb-ul"]);
    sh(&["ip", "link", "set", "fcb-ul", "up"]);
    sh(&["ip", "link", "set", "fcb-ul-peer", "up"]);
    sh(&["ip", "route", "add", "default", "via", "192.168.250.254"]);
    let peers: Vec<String> = (1..=10)
        .map(|i| {
            format!(
                r#"{{"subnet":"10.81.{i}.0/24","ip":"192.168.250.{}"}}"#,
                i + 1
            )
        })
        .collect();
    let lock = TempDir::new("vx-lock");
    let vx_chain = format!(
        r#"[{{"type":"bridge","bridge":"fcb2","isGateway":true,
            "ipam":{{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{{"subnet":"10.81.0.0/24"}}]]}}}},
           {{"type":"vxlan","network":"10.81.0.0/16","subnet":"10.81.0.0/24","mode":"vxlan",
             "underlayInterface":"fcb-ul","lockFile":"{}/lock","peers":[{}]}}]"#,
        lock.path().display(),
        peers.join(",")
    );
    let plain_chain = BRIDGE_CHAIN
        .replace("fcb0", "fcb3")
        .replace("10.77.0.0/16", "10.82.0.0/24");
    let mut add = BTreeMap::new();
    for (label, chain) in [
        ("bridge + host-local", plain_chain),
        ("bridge + host-local + vxlan", vx_chain),
    ] {
        let net = Net::new(&format!("vx-{}", add.len()), &chain);
        let mut a = Vec::new();
        for p in pods {
            let r = net.cnitool(o, &o.ours, "add", p.path_str());
            if !r.ok {
                println!("  {label}: ADD failed");
            }
            a.push(r.elapsed);
        }
        for p in pods {
            net.cnitool(o, &o.ours, "del", p.path_str());
        }
        add.insert(label, median(a));
    }
    let base = add["bridge + host-local"];
    let with = add["bridge + host-local + vxlan"];
    report("ADD bridge + host-local", ms(base), "-".into(), "-".into());
    report(
        "ADD bridge + host-local + vxlan",
        ms(with),
        "-".into(),
        "-".into(),
    );
    report(
        "vxlan's share of ADD",
        ms(with.saturating_sub(base)),
        "-".into(),
        "-".into(),
    );
}

// ---- latency goals: plugin time and the kernel's floor ----------------------------------------

/// bridge (ipMasq) + host-local + portmap (one hostPort) + bandwidth: a Kubernetes node's chain.
const FULL_CHAIN: &str = r#"[{"type":"bridge","bridge":"fcl0","isGateway":true,"ipMasq":true,
    "ipam":{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{"subnet":"10.84.0.0/16"}]]}},
    {"type":"portmap","capabilities":{"portMappings":true}},
    {"type":"bandwidth","ingressRate":10000000,"ingressBurst":100000,"egressRate":20000000,"egressBurst":200000}]"#;

/// The plain chain of the latency goals (a bridge of its own).
/// The bridge of [`PLAIN_CHAIN`].
const PLAIN_BRIDGE: &str = "fcl1";
const PLAIN_CHAIN: &str = r#"[{"type":"bridge","bridge":"fcl1","isGateway":true,"ipMasq":false,
    "ipam":{"type":"host-local","dataDir":"@DATADIR@","ranges":[[{"subnet":"10.85.0.0/16"}]]}}]"#;

const FULL_CHAIN_CAPS: &str =
    r#"{"portMappings":[{"hostPort":18180,"containerPort":80,"protocol":"tcp"}]}"#;

/// What the latency goals measured (medians).
#[derive(Default)]
struct Latency {
    /// cnitool's own start-up (`cnitool list` on the same conf dir): no plugin runs.
    startup: Duration,
    /// (ours, reference, the client start-ups inside each figure) per metric, whole figures.
    figures: Vec<(&'static str, Duration, Duration, Duration)>,
    /// The kernel's floor of our DELs: (metric, floor, our DEL figure timed alternately with it),
    /// trimmed means.
    floors: Vec<(&'static str, Duration, Duration)>,
}

impl Latency {
    fn figure(&self, metric: &str) -> Option<(Duration, Duration, Duration)> {
        self.figures
            .iter()
            .find(|(m, _, _, _)| *m == metric)
            .map(|(_, a, b, c)| (*a, *b, *c))
    }
}

/// A plugin's share of a figure: the figure minus the client's own start-up.
fn plugin_time(figure: Duration, startup: Duration) -> Duration {
    figure.saturating_sub(startup)
}

/// Prints one latency metric: whole figures, then plugin time (figure − the client
/// start-ups inside it).
fn report_latency(metric: &str, ours: Duration, reference: Duration, startup: Duration) {
    report_time(&format!("{metric} (figure)"), ours, reference);
    report_time(
        &format!("{metric} (plugin time)"),
        plugin_time(ours, startup),
        plugin_time(reference, startup),
    );
}

/// Median of `cnitool list` in `net`'s conf dir: exec, environment and conf loading, no plugin.
fn client_startup(o: &Opts, net: &Net) -> Duration {
    let env = vec![("NETCONFPATH", net.confdir.path().display().to_string())];
    let times = (0..50)
        .map(|_| run(&o.ours.join("cnitool"), &["list"], &env, b"").elapsed)
        .collect();
    median(times)
}

/// The client start-ups inside a figure of `n` concurrent calls: `n` `cnitool list` started
/// together as the calls are ([`all_at_once`]), median wall over [`CONCURRENT_ROUNDS`]. On a
/// machine with fewer cores than calls they queue behind each other, so this is several
/// times one start-up.
fn concurrent_client_startup(o: &Opts, net: &Net, n: usize) -> Duration {
    let env = vec![("NETCONFPATH", net.confdir.path().display().to_string())];
    let list = |_| run(&o.ours.join("cnitool"), &["list"], &env, b"").ok;
    median(
        (0..CONCURRENT_ROUNDS)
            .map(|_| all_at_once(n, list).0)
            .collect(),
    )
}

/// One RTM_DELLINK of `name` on a NETLINK_ROUTE socket living in `ns` (opened while the
/// bench sits there), acknowledged: the kernel's own cost of deleting a link. Returns the time
/// of the request alone, or `None` when it failed.
fn bare_dellink(ns: Option<&Netns>, name: &str) -> Option<Duration> {
    let back = std::fs::File::open("/proc/thread-self/ns/net").ok()?;
    use std::os::fd::AsRawFd;
    if let Some(ns) = ns {
        let f = std::fs::File::open(ns.path()).ok()?;
        // SAFETY: setns on our own (only) thread with a valid fd; undone below.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return None;
        }
    }
    // SAFETY: plain socket creation; the fd is owned by `sock` below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if ns.is_some() {
        // SAFETY: back to the netns we came from.
        unsafe { libc::setns(back.as_raw_fd(), libc::CLONE_NEWNET) };
    }
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a freshly opened descriptor we own.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // nlmsghdr (16) + ifinfomsg (16) + IFLA_IFNAME (4 + name + NUL, padded to 4).
    let attr_len = 4 + name.len() + 1;
    let len = 32 + attr_len.div_ceil(4) * 4;
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&(libc::RTM_DELLINK).to_ne_bytes());
    msg.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&[0u8; 16]);
    msg.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    msg.extend_from_slice(&(libc::IFLA_IFNAME).to_ne_bytes());
    msg.extend_from_slice(name.as_bytes());
    msg.resize(len, 0);
    let start = Instant::now();
    // SAFETY: sending our own buffer on our own socket (to the kernel: no address needed).
    if unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) } < 0 {
        return None;
    }
    let mut reply = [0u8; 1024];
    // SAFETY: receiving into our own buffer.
    let n = unsafe { libc::recv(sock.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
    let elapsed = start.elapsed();
    // The ACK: NLMSG_ERROR with error 0.
    let ok = n >= 20
        && u16::from_ne_bytes([reply[4], reply[5]]) == libc::NLMSG_ERROR as u16
        && i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]) == 0;
    ok.then_some(elapsed)
}

/// The ifb devices of the lab's host netns.
fn ifb_names() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show", "type", "ifb"])
        .output();
    let Ok(out) = out else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// The kernel's floor of a DEL of `chain`, timed alternately with our DEL: our ADD makes
/// each pod; then, pod after pod as DELs come, either our DEL runs whole (timed, the figure)
/// or the links that DEL would remove are deleted by one bare netlink request each (the
/// pod's veth, and with `with_ifb` its bandwidth ifb; their sum is the floor) and our DEL
/// cleans up the rest (rules, leases), untimed. [`DEL_FLOOR_PASSES`] passes alternate which
/// pods take which, so both sides are measured in the same stretch of time and on every
/// pod. Returns (floor, our DEL figure), each a [`trimmed_mean`]: a link deletion waits for
/// the kernel's deferred work in whole scheduler ticks (4 ms at HZ=250: single deletions
/// take 12, 16, 20, 24 ms...), so a median of either moves by a fifth when one sample does.
fn del_floor(
    o: &Opts,
    tag: &str,
    chain: &str,
    caps: &str,
    pods: &[Netns],
    with_ifb: bool,
) -> (Duration, Duration) {
    let net = Net::new(&format!("floor-{tag}"), chain);
    let (mut floors, mut ours) = (Vec::new(), Vec::new());
    let mut unmeasured = 0;
    // A DEL returns once its links are unlisted; the children that wait out their freeing
    // (and release nf_tables sockets) are ours ([`Subreaper`], held by the section), and are
    // waited for, untimed, after every DEL: otherwise the next timed deletion would queue
    // behind their `rcu_barrier`.
    for pass in 0..DEL_FLOOR_PASSES {
        let mut ifb_of = Vec::new();
        for p in pods {
            let before = ifb_names();
            net.cnitool_caps(o, &o.ours, "add", p.path_str(), caps);
            ifb_of.push(ifb_names().into_iter().find(|n| !before.contains(n)));
        }
        for (i, (p, ifb)) in pods.iter().zip(&ifb_of).enumerate() {
            if i % 2 == pass % 2 {
                let r = net.cnitool_caps(o, &o.ours, "del", p.path_str(), caps);
                reap_orphans();
                if r.ok {
                    ours.push(r.elapsed);
                } else {
                    unmeasured += 1;
                }
                continue;
            }
            let veth = bare_dellink(Some(p), "eth0");
            let ifb = match (with_ifb, ifb) {
                (false, _) => Some(Duration::ZERO),
                (true, Some(name)) => bare_dellink(None, name),
                (true, None) => None,
            };
            match (veth, ifb) {
                (Some(v), Some(i)) => floors.push(v + i),
                _ => unmeasured += 1,
            }
            net.cnitool_caps(o, &o.ours, "del", p.path_str(), caps);
            reap_orphans();
        }
    }
    if unmeasured > 0 {
        println!(
            "  floor {tag}: {unmeasured} of {} DELs or link deletions failed",
            DEL_FLOOR_PASSES * pods.len()
        );
    }
    (trimmed_mean(floors), trimmed_mean(ours))
}

/// While it lives, the bench is the reaper of its orphaned descendants: the children a DEL
/// leaves to wait out the kernel's freeing of its links (and to release nf_tables sockets).
/// [`reap_orphans`] after a DEL then waits for them, untimed, so the next timed step does not
/// run beside another step's deferred kernel work (the reference's DEL does all of it before
/// returning, so its next step always starts on a settled machine). When dropped, it waits
/// for the last ones and stops being the reaper.
struct Subreaper;

impl Subreaper {
    fn new() -> Subreaper {
        // SAFETY: a plain prctl on our own process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        Subreaper
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        reap_orphans();
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) };
    }
}

/// Waits for every child left (the bench's own ones are all reaped by then): the orphans a
/// plugin left, once they exit.
fn reap_orphans() {
    loop {
        let mut status = 0;
        // SAFETY: waits for any child of ours; the status goes to a local.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Passes of [`del_floor`]: each pod is timed this many times, half of them as our DEL.
const DEL_FLOOR_PASSES: usize = 8;

/// Sequential ADDs then DELs of `pods` through cnitool with `caps`, per suite (medians).
fn add_del_medians(
    o: &Opts,
    tag: &str,
    chain: &str,
    caps: &str,
    pods: &[Netns],
) -> BTreeMap<&'static str, (Duration, Duration)> {
    let mut out = BTreeMap::new();
    for s in suites(o) {
        let net = Net::new(&format!("{tag}-{}", s.label), chain);
        let (mut a, mut d) = (Vec::new(), Vec::new());
        let mut failures = 0;
        for p in pods {
            let r = net.cnitool_caps(o, s.dir, "add", p.path_str(), caps);
            failures += usize::from(!r.ok);
            a.push(r.elapsed);
        }
        for p in pods {
            let r = net.cnitool_caps(o, s.dir, "del", p.path_str(), caps);
            failures += usize::from(!r.ok);
            d.push(r.elapsed);
        }
        reap_orphans();
        if failures > 0 || net.leases() != 0 {
            println!(
                "  {} {tag}: {failures} failed calls, {} leases left",
                s.label,
                net.leases()
            );
        }
        out.insert(s.label, (median(a), median(d)));
    }
    out
}

/// Runs `job(i)` for each `i` in `0..n` on a thread of its own, all released together once
/// every thread is ready, as a runtime's per-pod workers start their calls. Returns the span
/// from the first job's start to the last job's end, each read by the job's own thread (the
/// releasing thread may be scheduled long after the jobs it released), and each job's result
/// (false when its thread panicked).
fn all_at_once(n: usize, job: impl Fn(usize) -> bool + Sync) -> (Duration, Vec<bool>) {
    let ready = std::sync::Barrier::new(n);
    let runs: Vec<Option<(Instant, Instant, bool)>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let (ready, job) = (&ready, &job);
                s.spawn(move || {
                    ready.wait();
                    let start = Instant::now();
                    let ok = job(i);
                    (start, Instant::now(), ok)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().ok()).collect()
    });
    let timed = || runs.iter().flatten();
    let span = match (timed().map(|r| r.0).min(), timed().map(|r| r.1).max()) {
        (Some(first), Some(last)) => last - first,
        _ => Duration::ZERO,
    };
    (span, runs.iter().map(|r| r.is_some_and(|r| r.2)).collect())
}

/// How many times the concurrent ADDs of the latency goals are timed per suite (rounds
/// interleaved between the suites; the median is the figure): one wall time of a few tens of
/// milliseconds moves by a quarter from run to run on a shared machine.
const CONCURRENT_ROUNDS: usize = 7;

/// Median wall time of concurrent ADDs of `chain`, one per pod, through cnitool (then DELs,
/// untimed), per suite, over [`CONCURRENT_ROUNDS`] interleaved rounds.
fn concurrent_adds(o: &Opts, chain: &str, pods: &[Netns]) -> BTreeMap<&'static str, Duration> {
    let mut walls: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    let nets: Vec<_> = suites(o)
        .into_iter()
        .map(|s| (Net::new(&format!("lconc-{}", s.label), chain), s))
        .collect();
    for _ in 0..CONCURRENT_ROUNDS {
        for (net, s) in &nets {
            let cnitool = |i: usize| net.cnitool(o, s.dir, "add", pods[i].path_str()).ok;
            let (wall, ok) = all_at_once(pods.len(), cnitool);
            let failed = ok.iter().filter(|ok| !**ok).count();
            if failed > 0 || net.leases() != pods.len() {
                println!(
                    "  {} concurrent ADD: {failed} failed, {} leases held",
                    s.label,
                    net.leases()
                );
            }
            walls.entry(s.label).or_default().push(wall);
            for p in pods {
                net.cnitool(o, s.dir, "del", p.path_str());
            }
            reap_orphans();
        }
    }
    walls.into_iter().map(|(k, v)| (k, median(v))).collect()
}

/// The kernel's floor of concurrent bridge ADDs, one thread per pod, all started together:
/// each issues only the requests no bridge ADD can do without, on sockets it opens in the host
/// netns and in its pod: the veth pair (the container end born in the pod, the host end
/// enslaved to `bridge`), a lookup of the container end (its index, for the address), the
/// pod's address, then both ends up. With `execs`, each thread first spawns our loopback for
/// VERSION twice, one after the other, as a runtime execs the client and the client the
/// plugin. Returns the wall time (None when a request failed); the pairs are then deleted,
/// untimed.
fn add_floor(o: &Opts, bridge: &str, pods: &[Netns], execs: bool) -> Option<Duration> {
    use netkit::{AddressOptions, Socket, VethSpec};
    let bridge_index = Socket::new().ok()?.link_by_name(bridge).ok()?.index;
    let loopback = o.ours.join("loopback");
    let version = vec![("CNI_COMMAND", "VERSION".to_string())];
    let names: Vec<String> = (0..pods.len()).map(|i| format!("fcfl{i}")).collect();
    let one_pod = |i: usize, pod: &Netns| -> Option<()> {
        if execs {
            for _ in 0..2 {
                run(&loopback, &[], &version, b"{}").ok.then_some(())?;
            }
        }
        let netns = netkit::Netns::open(pod.path()).ok()?;
        let mut host = Socket::new().ok()?;
        let mut cont = Socket::open_in(&netns).ok()?;
        let spec = VethSpec {
            name: &names[i],
            peer_name: "eth0",
            peer_netns: Some(&netns),
            master: Some(bridge_index),
            ..Default::default()
        };
        host.create_veth(&spec).ok()?;
        let eth0 = cont.link_by_name("eth0").ok()?;
        let address = format!("10.85.250.{}/16", i + 1).parse().ok()?;
        cont.add_address(eth0.index, address, &AddressOptions::default())
            .ok()?;
        host.set_link_up(eth0.link?).ok()?;
        cont.set_link_up(eth0.index).ok()
    };
    let (wall, ok) = all_at_once(pods.len(), |i| one_pod(i, &pods[i]).is_some());
    std::thread::scope(|s| {
        for name in &names {
            s.spawn(move || {
                if let Ok(mut host) = Socket::new() {
                    let _ = host.delete_link_by_name(name);
                }
            });
        }
    });
    ok.iter().all(|ok| *ok).then_some(wall)
}

/// Median over [`CONCURRENT_ROUNDS`] of [`add_floor`] (None when any round failed).
fn add_floor_median(o: &Opts, bridge: &str, pods: &[Netns], execs: bool) -> Option<Duration> {
    let walls: Option<Vec<Duration>> = (0..CONCURRENT_ROUNDS)
        .map(|_| add_floor(o, bridge, pods, execs))
        .collect();
    walls.map(median)
}

/// The latency goals: plain and full-chain ADD/DEL, 20 concurrent ADDs, each as a whole
/// figure and as plugin time (minus cnitool's own start-up), and our DELs against the
/// kernel's floor.
fn latency(o: &Opts, l: &mut Latency) {
    let pods_n = 30;
    println!("\n## Latency goals: {pods_n} pods sequential through cnitool (median per pod); plugin time = figure − cnitool start-up");
    let lab = Lab::new("lat", pods_n);
    let _reaper = Subreaper::new();
    let startup_net = Net::new("lat-startup", PLAIN_CHAIN);
    l.startup = client_startup(o, &startup_net);
    report(
        "cnitool start-up (cnitool list)",
        ms(l.startup),
        ms(l.startup),
        "-".into(),
    );

    let plain = add_del_medians(o, "lplain", PLAIN_CHAIN, "{}", &lab.pods);
    let full = add_del_medians(o, "lfull", FULL_CHAIN, FULL_CHAIN_CAPS, &lab.pods);
    for (metric, m, i) in [
        ("plain ADD", &plain, 0),
        ("plain DEL", &plain, 1),
        ("chain ADD", &full, 0),
        ("chain DEL", &full, 1),
    ] {
        let pick = |label: &str| if i == 0 { m[label].0 } else { m[label].1 };
        let (ours, reference) = (pick("ours"), pick("reference"));
        report_latency(metric, ours, reference, l.startup);
        l.figures.push((metric, ours, reference, l.startup));
    }

    let conc_pods = &lab.pods[..20.min(lab.pods.len())];
    let conc_startup = concurrent_client_startup(o, &startup_net, conc_pods.len());
    report(
        &format!(
            "cnitool start-up, {} at once (cnitool list, wall)",
            conc_pods.len()
        ),
        ms(conc_startup),
        ms(conc_startup),
        "-".into(),
    );
    let conc = concurrent_adds(o, PLAIN_CHAIN, conc_pods);
    report_latency(
        &format!("20 concurrent ADDs (wall, median of {CONCURRENT_ROUNDS} rounds)"),
        conc["ours"],
        conc["reference"],
        conc_startup,
    );
    l.figures.push((
        "20 concurrent ADDs",
        conc["ours"],
        conc["reference"],
        conc_startup,
    ));
    for (what, execs) in [
        ("requests only", false),
        ("requests + 2 execs per pod", true),
    ] {
        let metric = format!("20 concurrent ADDs vs the kernel's floor ({what})");
        match add_floor_median(o, PLAIN_BRIDGE, conc_pods, execs) {
            Some(floor) => report(
                &metric,
                ms(conc["ours"]),
                ms(floor),
                format!(
                    "{:.2}",
                    conc["ours"].as_secs_f64() / floor.as_secs_f64().max(1e-9)
                ),
            ),
            None => println!("{metric}: not measured (a request failed)"),
        }
    }

    let floor_chain = del_floor(o, "full", FULL_CHAIN, FULL_CHAIN_CAPS, &lab.pods, true);
    let floor_plain = del_floor(o, "plain", PLAIN_CHAIN, "{}", &lab.pods, false);
    for (metric, (floor, ours)) in [("chain DEL", floor_chain), ("plain DEL", floor_plain)] {
        let plugin = plugin_time(ours, l.startup);
        report(
            &format!(
                "{metric}: ours (plugin time) vs the kernel's floor, alternating, trimmed means"
            ),
            ms(plugin),
            ms(floor),
            format!(
                "{:.2}",
                plugin.as_secs_f64() / floor.as_secs_f64().max(1e-9)
            ),
        );
        l.floors.push((metric, floor, ours));
    }
}

// ---- goals ---------------------------------------------------------------------------------

/// The footprint and latency goals, judged on what this run measured.
#[derive(Default)]
struct Goals {
    /// The wireguard peer pass over WG_PEERS peers (full, no-change), or why it was skipped.
    wireguard: Option<Result<(Duration, Duration), String>>,
    /// (plugin, ours) stripped sizes in bytes.
    sizes: Vec<(&'static str, u64)>,
    /// Peak RSS of a bridge ADD (ours, reference), KiB.
    bridge_rss_kib: Option<(i64, i64)>,
    /// Median exec + VERSION of our loopback.
    exec_version: Option<Duration>,
    /// Median exec of the floor executable, in the same interleaved runs.
    exec_floor: Option<Duration>,
    /// The latency section's figures.
    latency: Option<Latency>,
    /// Whether our binaries are the trimmed build (`make build TRIM=1`).
    trimmed: bool,
}

/// The latest upstream release's static binaries (containernetworking/plugins v1.9.x,
/// stripped), in bytes: the size goals are fractions of these.
const UPSTREAM_SIZES: &[(&str, u64)] = &[
    ("bridge", 4_470_000),
    ("host-local", 3_520_000),
    ("bandwidth", 4_020_000),
    ("portmap", 4_030_000),
    ("loopback", 3_490_000),
];
/// Each of those plugins at most this fraction of upstream's: default build, trimmed build.
const SIZE_GOAL: (u64, u64) = (3, 4);
/// A bridge ADD's peak RSS at most this fraction of the reference's.
const RSS_GOAL: f64 = 1.0 / 4.0;
const EXEC_VERSION_GOAL: Duration = Duration::from_micros(500);
/// Plugin-time speedups over the reference: (metric, at least).
const SPEEDUP_GOALS: &[(&str, f64)] = &[
    ("chain ADD", 6.0),
    ("chain DEL", 3.5),
    ("plain ADD", 3.0),
    ("20 concurrent ADDs", 5.0),
];
/// Our DELs at most this multiple of the kernel's floor.
const FLOOR_GOAL: f64 = 1.2;

fn verdict(met: bool) -> &'static str {
    if met {
        "PASS"
    } else {
        "FAIL"
    }
}

impl Goals {
    fn print(&self) {
        println!("\n## Goals (this run)");
        let (build, div) = if self.trimmed {
            ("trimmed build", SIZE_GOAL.1)
        } else {
            ("default build", SIZE_GOAL.0)
        };
        if self.sizes.is_empty() {
            println!("size ≤ 1/{div} of upstream's static binary: not measured (section sizes)");
        }
        for (p, upstream) in UPSTREAM_SIZES {
            let Some((_, ours)) = self.sizes.iter().find(|(name, _)| name == p) else {
                continue;
            };
            let limit = upstream / div;
            println!(
                "{} size {p} ≤ 1/{div} of upstream's {:.2} MB ({build}): {} KB, limit {} KB",
                verdict(*ours <= limit),
                *upstream as f64 / 1e6,
                ours / 1000,
                limit / 1000
            );
        }
        match self.bridge_rss_kib {
            Some((ours, reference)) => {
                let limit = (reference as f64 * RSS_GOAL) as i64;
                println!(
                    "{} peak RSS of a bridge ADD ≤ 1/4 of the reference: {ours} KiB, limit {limit} KiB",
                    verdict(ours > 0 && ours <= limit)
                );
            }
            None => println!(
                "peak RSS of a bridge ADD ≤ 1/4 of the reference: not measured (section rss)"
            ),
        }
        match &self.wireguard {
            Some(Ok((full, noop))) => {
                println!(
                    "{} wireguard full pass over {WG_PEERS} peers ≤ {}: {}",
                    verdict(*full <= WG_FULL_GOAL),
                    ms(WG_FULL_GOAL),
                    ms(*full)
                );
                println!(
                    "{} wireguard no-change pass over {WG_PEERS} peers ≤ {}: {}",
                    verdict(*noop <= WG_NOOP_GOAL),
                    ms(WG_NOOP_GOAL),
                    ms(*noop)
                );
            }
            Some(Err(why)) => println!("wireguard passes over {WG_PEERS} peers: skipped ({why})"),
            None => println!("wireguard passes: not measured (section wireguard)"),
        }
        match self.exec_version {
            Some(t) => println!(
                "{} exec + VERSION ≤ {}: {}{}",
                verdict(t <= EXEC_VERSION_GOAL),
                ms(EXEC_VERSION_GOAL),
                ms(t),
                self.exec_floor
                    .map(|f| format!(
                        " (the exec floor in the same runs: {}, ours {} above it)",
                        ms(f),
                        ms(t.saturating_sub(f))
                    ))
                    .unwrap_or_default()
            ),
            None => println!(
                "exec + VERSION ≤ {}: not measured (section exec)",
                ms(EXEC_VERSION_GOAL)
            ),
        }
        let Some(l) = &self.latency else {
            println!("latency goals: not measured (section latency)");
            return;
        };
        for (metric, goal) in SPEEDUP_GOALS {
            let Some((ours, reference, startup)) = l.figure(metric) else {
                continue;
            };
            let (po, pr) = (plugin_time(ours, startup), plugin_time(reference, startup));
            let speedup = pr.as_secs_f64() / po.as_secs_f64().max(1e-9);
            println!(
                "{} {metric} ≥ {goal}x faster in plugin time: {:.1}x ({} vs {}; figures {} vs {} ({:.1}x), cnitool start-up {})",
                verdict(speedup >= *goal),
                speedup,
                ms(po),
                ms(pr),
                ms(ours),
                ms(reference),
                reference.as_secs_f64() / ours.as_secs_f64().max(1e-9),
                ms(startup)
            );
        }
        for (metric, floor, ours) in &l.floors {
            // The floor is the kernel's work alone, so it is compared with plugin time (the
            // figure minus cnitool's start-up), as the speed-up goals are.
            let plugin = plugin_time(*ours, l.startup);
            let r = plugin.as_secs_f64() / floor.as_secs_f64().max(1e-9);
            println!(
                "{} {metric} ≤ {FLOOR_GOAL}x the kernel's floor (its link deletions as bare netlink requests), in plugin time: {:.2}x ({} vs {}; figure {}, cnitool start-up {})",
                verdict(r <= FLOOR_GOAL),
                r,
                ms(plugin),
                ms(*floor),
                ms(*ours),
                ms(l.startup)
            );
        }
    }
}

const WG_PEERS: usize = 5000;
const WG_FULL_GOAL: Duration = Duration::from_millis(500);
const WG_NOOP_GOAL: Duration = Duration::from_millis(50);

/// The agent's wireguard peer pass (netkit's `sync_device`: one dump of the device, then
/// only the differences) over WG_PEERS peers, on a device in a scratch netns that stays
/// down (no packet is ever sent to the peers' endpoints): the first pass adds them all,
/// no-change passes only read, a one-peer change adds one and removes one.
fn wireguard(_o: &Opts, goals: &mut Goals) {
    use netkit::wireguard::{PeerConfig, WgSocket};
    use sha2::{Digest, Sha256};
    println!("\n## wireguard peer pass, {WG_PEERS} peers (the agent's wireguard backend)");
    let ns = Netns::new("fcb-wg");
    let skip = |goals: &mut Goals, why: String| {
        println!("  skipped: {why}");
        goals.wireguard = Some(Err(why));
    };
    let kns = match netkit::Netns::open(ns.path()) {
        Ok(n) => n,
        Err(e) => return skip(goals, e.to_string()),
    };
    if !sh(&[
        "ip",
        "-n",
        ns.name(),
        "link",
        "add",
        "wg0",
        "type",
        "wireguard",
    ]) {
        return skip(goals, "this kernel has no wireguard driver".into());
    }
    let key = |i: usize| -> [u8; 32] { Sha256::digest(format!("fcb-peer-{i}")).into() };
    let peer = |i: usize| PeerConfig {
        public_key: key(i),
        endpoint: Some(std::net::SocketAddr::new(
            std::net::Ipv4Addr::new(192, 168, (i / 250) as u8, (i % 250 + 1) as u8).into(),
            51820,
        )),
        allowed_ips: vec![netkit::ipnetwork::IpNetwork::new(
            std::net::Ipv4Addr::new(10, 90 + (i / 256) as u8, (i % 256) as u8, 0).into(),
            24,
        )
        .expect("a /24")],
        preshared_key: None,
        persistent_keepalive: 0,
    };
    let mut peers: Vec<PeerConfig> = (0..WG_PEERS).map(peer).collect();
    let private = key(usize::MAX);
    // CPU time of this process: user = our code, system = the kernel's work for it.
    let cpu = || {
        // SAFETY: getrusage(2) fills the struct we own.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let d = |tv: libc::timeval| {
            Duration::from_micros(tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64)
        };
        (d(ru.ru_utime), d(ru.ru_stime))
    };
    let split = std::cell::Cell::new((Duration::ZERO, Duration::ZERO));
    let pass = |peers: &[PeerConfig]| -> Result<(Duration, netkit::wireguard::SyncReport), String> {
        let (u0, s0) = cpu();
        let t = Instant::now();
        let mut wg = WgSocket::open_in(&kns).map_err(|e| e.to_string())?;
        let report = wg
            .sync_device("wg0", &private, 51820, peers)
            .map_err(|e| e.to_string())?;
        let elapsed = t.elapsed();
        let (u1, s1) = cpu();
        split.set((u1 - u0, s1 - s0));
        Ok((elapsed, report))
    };
    let shown =
        |split: (Duration, Duration)| format!("user {} + kernel {}", ms(split.0), ms(split.1));
    let (full, report) = match pass(&peers) {
        Ok(r) => r,
        Err(e) => return skip(goals, e),
    };
    println!(
        "{:<48} {:>14}   ({report}; {})",
        "full pass (empty device)",
        ms(full),
        shown(split.get())
    );
    let mut noop = Vec::new();
    for _ in 0..5 {
        match pass(&peers) {
            Ok((t, r)) if r.is_noop() => noop.push(t),
            Ok((_, r)) => return skip(goals, format!("a no-change pass changed things: {r}")),
            Err(e) => return skip(goals, e),
        }
    }
    let noop = median(noop);
    println!(
        "{:<48} {:>14}   (last: {})",
        "no-change pass (median of 5)",
        ms(noop),
        shown(split.get())
    );
    peers[0] = peer(WG_PEERS);
    match pass(&peers) {
        Ok((t, r)) => println!(
            "{:<48} {:>14}   ({r}; {})",
            "one node replaced",
            ms(t),
            shown(split.get())
        ),
        Err(e) => println!("  one node replaced: {e}"),
    }
    goals.wireguard = Some(Ok((full, noop)));
}

/// Pods through a private containerd's CRI, as kubelet runs them (the pod network of
/// `containerd::pod_network_conflist`: bridge, host-local, portmap, firewall, tuning, bandwidth,
/// plus containerd's own loopback network): RunPodSandbox of `cri_pods` pods, then
/// StopPodSandbox (the first DEL) and RemovePodSandbox (the second) of each. One containerd per
/// suite, both running; the calls alternate between them so load drifts hit both alike.
fn cri(o: &Opts) {
    let n = o.cri_pods;
    println!("\n## containerd CRI: {n} pods, RunPodSandbox then StopPodSandbox + RemovePodSandbox (median per pod)");
    if let Some(why) = containerd::missing_tools() {
        println!("  skipped: {why}");
        return;
    }
    let suites = suites(o);
    let mut nodes = Vec::new();
    for s in &suites {
        let mut node = CriNode::start(s.dir);
        node.write_conflist(
            "10-bench.conflist",
            &containerd::pod_network_conflist("bench-cri", "10.83.0.0/16"),
        );
        if !node.wait_network_ready(true, Duration::from_secs(15)) {
            println!("  {}: NetworkReady never became true", s.label);
            return;
        }
        // One pod first, untimed: the first exec of every binary, containerd's first sandbox.
        let warmup = node.pod_config("warmup");
        if let Ok(id) = node.cri().run_pod_sandbox(warmup) {
            let _ = node.stop_and_remove(&id);
        }
        nodes.push(node);
    }
    let mut times: Vec<[Vec<Duration>; 3]> = suites.iter().map(|_| Default::default()).collect();
    let mut ids: Vec<Vec<String>> = suites.iter().map(|_| Vec::new()).collect();
    let mut failures = vec![0; suites.len()];
    let mut timed = |k: usize, phase: usize, call: &mut dyn FnMut() -> Result<(), CriError>| {
        let start = Instant::now();
        match call() {
            Ok(()) => times[k][phase].push(start.elapsed()),
            Err(e) => {
                failures[k] += 1;
                eprintln!("  {}: {e}", suites[k].label);
            }
        }
    };
    for i in 0..n {
        for (k, node) in nodes.iter_mut().enumerate() {
            let config = node.pod_config(&format!("bench{i}"));
            timed(k, 0, &mut || {
                ids[k].push(node.cri().run_pod_sandbox(config.clone())?);
                Ok(())
            });
        }
    }
    for i in 0..n {
        for (k, node) in nodes.iter_mut().enumerate() {
            let Some(id) = ids[k].get(i) else { continue };
            timed(k, 1, &mut || node.cri().stop_pod_sandbox(id));
            timed(k, 2, &mut || node.cri().remove_pod_sandbox(id));
        }
    }
    for (k, s) in suites.iter().enumerate() {
        if failures[k] > 0 {
            println!("  {}: {} failed CRI calls", s.label, failures[k]);
        }
    }
    let medians: Vec<Vec<Duration>> = times
        .into_iter()
        .map(|phases| phases.into_iter().map(median).collect())
        .collect();
    for (phase, call) in ["RunPodSandbox", "StopPodSandbox", "RemovePodSandbox"]
        .iter()
        .enumerate()
    {
        report_time(call, medians[0][phase], medians[1][phase]);
    }
}

fn main() {
    let o = parse_opts();
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("ferrocni-bench needs root (network namespaces)");
        std::process::exit(1);
    }
    // The agent's sections run the agent alone.
    let plugins_needed = o.sections.is_empty()
        || o.sections
            .iter()
            .any(|s| !["agent", "kube", "policy", "bgp"].contains(&s.as_str()));
    for (what, p) in [("ours", &o.ours), ("reference", &o.reference)] {
        if plugins_needed && !p.join("bridge").exists() {
            eprintln!("no {what} plugins in {}", p.display());
            std::process::exit(1);
        }
    }
    let want = |s: &str| o.sections.is_empty() || o.sections.iter().any(|x| x == s);
    let mut goals = Goals {
        trimmed: o.trimmed,
        ..Goals::default()
    };
    let tmp = std::env::temp_dir();
    let place = if ON_DISK.load(std::sync::atomic::Ordering::Relaxed) {
        format!("in {}", tmp.display())
    } else {
        format!(
            "on a tmpfs of their lab's own (--on-disk: in {})",
            tmp.display()
        )
    };
    println!("working directories of the sections with pods: {place}");
    println!(
        "{:<48} {:>14} {:>14} {:>8}",
        "metric", "ferrocni", "reference", "speedup"
    );
    if want("sizes") {
        sizes(&o, &mut goals);
    }
    if want("exec") {
        exec_version(&o, &mut goals);
    }
    if want("loopback") {
        loopback(&o);
    }
    if want("bridge") {
        chain_sequential(&o, "br", BRIDGE_CHAIN, o.pods, "bridge + host-local");
    }
    if want("rss") {
        rss(&o, &mut goals);
    }
    if want("concurrent") {
        concurrent(&o);
    }
    if want("bandwidth") {
        chain_sequential(
            &o,
            "bw",
            BANDWIDTH_CHAIN,
            20,
            "bridge + host-local + bandwidth",
        );
    }
    if want("ptp") {
        chain_sequential(&o, "ptp", PTP_CHAIN, o.pods, "ptp + host-local");
    }
    if want("macvlan") {
        chain_sequential_on(
            &o,
            "mv",
            MACVLAN_CHAIN,
            o.pods,
            "macvlan + host-local",
            &uplink,
        );
    }
    if want("ipvlan") {
        if kernel_has_ipvlan() {
            chain_sequential_on(
                &o,
                "iv",
                IPVLAN_CHAIN,
                o.pods,
                "ipvlan + host-local",
                &uplink,
            );
        } else {
            println!("\n## ipvlan + host-local: skipped, this kernel has no ipvlan driver");
        }
    }
    if want("hostlocal") {
        hostlocal(&o);
    }
    if want("scale") {
        scale(&o);
    }
    if want("vxlan") {
        vxlan(&o);
    }
    if want("wireguard") {
        wireguard(&o, &mut goals);
    }
    if want("netfilter") {
        netfilter_scale(&o);
    }
    if want("latency") {
        let mut l = Latency::default();
        latency(&o, &mut l);
        goals.latency = Some(l);
    }
    if want("cri") {
        cri(&o);
    }
    if want("agent") {
        netns_tests::agent_scale::run(&o.agent);
    }
    if want("kube") {
        netns_tests::kube_scale::run(&o.agent);
    }
    if want("policy") {
        netns_tests::policy_scale::run(&o.agent);
    }
    if want("udp") {
        // The engine's standalone driver is built beside the bench (make bench).
        let driver = std::env::current_exe()
            .map(|e| e.with_file_name("udp-proxy-node"))
            .unwrap_or_default();
        netns_tests::udp_bench::run(&driver, o.udp_seconds, o.udp_rounds);
    }
    if want("bgp") {
        netns_tests::bgp_scale::run(&o.agent);
        netns_tests::bgp_refusals::run(&o.agent);
    }
    goals.print();
}
