//! `make demo` and `make demo-cluster`: their scripts (`tools/demo/`) run on the binaries under
//! test, as a newcomer runs them, so they never rot. Each must end with its "nothing left" line
//! and leave the host as it found it, which this test checks on its own: the host's links, no
//! network namespace of the demo's in its list, no mount of the demo's and the same mounts and
//! files at and under the directories the demos bind over, no process the demo started (each
//! carries a tag in its environment), and the demo's temporary directory removed.
//!
//! The cluster demo runs with every backend the agent lists (`ferrocni-agent --list-backends`):
//! here those whose kernel driver this host has (vxlan, host-gw, udp, bgp), wireguard and ipip
//! where the kernel has theirs (netns-tests/vm/kernel-tests.txt).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use netns_tests::{kernel_has, our_bin_dir, our_binary, require_root, workspace_root, TempDir};

/// Where the demos bind their own empty directories (tools/demo/lib.sh's watched list).
const BOUND_DIRS: &[&str] = &[
    "/opt/cni",
    "/etc/cni",
    "/var/lib/cni",
    "/etc/ferrocni",
    "/run/flannel",
    "/run/ferrocni",
];

/// The demo script's exit status for "this machine cannot run that".
const UNAVAILABLE: i32 = 3;

/// What the demos must leave unchanged on the host.
#[derive(Debug, PartialEq)]
struct HostState {
    links: BTreeSet<String>,
    netns: BTreeSet<String>,
    /// Mount points at or under [`BOUND_DIRS`].
    mounts: BTreeSet<String>,
    /// `path kind size mtime` of every file at or under [`BOUND_DIRS`].
    files: BTreeSet<String>,
}

fn lines_of(argv: &[&str]) -> BTreeSet<String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn under_bound_dir(path: &str) -> bool {
    BOUND_DIRS
        .iter()
        .any(|d| path == *d || path.starts_with(&format!("{d}/")))
}

/// The devices a tunnel module adds to every network namespace when it loads (an ipip demo, or
/// another test's ipip probe, may load it): the kernel's, not a demo's leftovers.
const KERNEL_FALLBACK_DEVICES: &[&str] = &[
    "tunl0", "gre0", "gretap0", "erspan0", "sit0", "ip6tnl0", "ip6gre0", "ip_vti0", "ip6_vti0",
];

fn host_state() -> HostState {
    let links = lines_of(&["ip", "-o", "link", "show"])
        .iter()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| !KERNEL_FALLBACK_DEVICES.contains(&n.as_str()))
        .collect();
    let netns = lines_of(&["ip", "netns", "list"])
        .iter()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| under_bound_dir(m))
        .map(str::to_string)
        .collect();
    let mut files = BTreeSet::new();
    for dir in BOUND_DIRS.iter().filter(|d| Path::new(d).exists()) {
        files.extend(lines_of(&["find", dir, "-printf", "%p %y %s %T@\\n"]));
    }
    HostState {
        links,
        netns,
        mounts,
        files,
    }
}

/// Mounts the demos made (their tmpfs and overlays are all named `ferrocni-demo`).
fn demo_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(" - ") && l.split(" - ").nth(1).unwrap().contains(" ferrocni-demo "))
        .map(str::to_string)
        .collect()
}

/// Processes whose environment carries `tag` (everything a demo started inherits it).
fn processes_tagged(tag: &str) -> Vec<String> {
    let needle = format!("FERROCNI_DEMO_TEST_TAG={tag}");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(Result::ok)
        .filter(|p| p.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|p| {
            std::fs::read(p.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .map(|p| {
            let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            format!(
                "{} {}",
                p.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            )
        })
        .collect()
}

/// The network namespace names the demos give (private to them; none may reach the host).
fn is_demo_netns_name(name: &str) -> bool {
    ["pod1", "pod2", "node1", "node2", "node3"].contains(&name)
        || name.strip_prefix("pod-").is_some_and(|r| r.len() == 2)
}

struct DemoRun {
    status: i32,
    stdout: String,
}

impl DemoRun {
    fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

/// One demo at a time: each is isolated, but on the VM's emulated CPUs two clusters starting
/// at once slow etcd past the agents' start-up timeout.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `tools/demo/<script>` on the binaries under test, checks the host is as it was, and
/// returns how it ended.
fn run_demo(script: &str, args: &[&str]) -> DemoRun {
    let _one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The binaries the demos run, built when the tests build them.
    for bin in ["cnitool", "bridge", "host-local", "portmap", "vxlan"] {
        our_binary(bin);
    }
    let agent = our_binary("ferrocni-agent");
    let tmp = TempDir::new("demo");
    let tag = tmp
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let before = host_state();
    let out = Command::new(workspace_root().join("tools/demo").join(script))
        .arg("--bin-dir")
        .arg(our_bin_dir())
        .args(["--agent".as_ref(), agent.as_os_str()])
        .args(args)
        .env("TMPDIR", tmp.path())
        .env("FERROCNI_DEMO_TEST_TAG", &tag)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run tools/demo/{script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Shown with --nocapture (the VM runner's hint for the driver-dependent backends).
    eprintln!(
        "--- tools/demo/{script} {}\n{stdout}{stderr}",
        args.join(" ")
    );
    let after = host_state();

    let leftover_processes = processes_tagged(&tag);
    assert!(
        leftover_processes.is_empty(),
        "{script} left processes: {leftover_processes:#?}"
    );
    let mounts = demo_mounts();
    assert!(mounts.is_empty(), "{script} left mounts: {mounts:#?}");
    let new_netns: Vec<&String> = after
        .netns
        .difference(&before.netns)
        .filter(|n| is_demo_netns_name(n))
        .collect();
    assert!(
        new_netns.is_empty(),
        "{script} left network namespaces on the host: {new_netns:?}"
    );
    assert_eq!(
        (&before.links, &before.mounts, &before.files),
        (&after.links, &after.mounts, &after.files),
        "{script} changed the host's links, mounts or files under {BOUND_DIRS:?}"
    );
    let left_in_tmp: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert!(
        left_in_tmp.is_empty(),
        "{script} left its temporary files: {left_in_tmp:?}"
    );

    let run = DemoRun {
        status: out.status.code().unwrap_or(-1),
        stdout,
    };
    assert!(
        run.last_line().starts_with("nothing left: "),
        "{script} did not end with its check of the host; its last line: {:?}",
        run.last_line()
    );
    run
}

/// Whether the demo found a tool or the backend's driver missing (it says which and exits 3).
fn unavailable(run: &DemoRun, what: &str) -> bool {
    if run.status == UNAVAILABLE {
        eprintln!("skipping {what}: the demo cannot run here (its output says why)");
        return true;
    }
    false
}

fn assert_ran(run: &DemoRun, what: &str) {
    assert_eq!(run.status, 0, "{what} failed:\n{}", run.stdout);
}

#[test]
fn single_node() {
    require_root!();
    let run = run_demo("demo.sh", &[]);
    if unavailable(&run, "the single-node demo") {
        return;
    }
    assert_ran(&run, "the single-node demo");
    for expected in [
        "cnitool add bridge-dualstack /run/netns/pod1\n{",
        "\"interfaces\"",
        "ip -brief address show eth0\neth0",
        "hello from pod1",
        "(no output: CHECK passed)",
        "checked: no lease, cached result, veth, pod namespace or rule",
    ] {
        assert!(
            run.stdout.contains(expected),
            "no {expected:?} in:\n{}",
            run.stdout
        );
    }
    let pings = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("64 bytes from"))
        .count();
    assert_eq!(pings, 4, "pod to pod and to gateway, both families");
}

/// One backend as the agent lists it (`--list-backends`).
struct Listed {
    name: String,
    /// The kernel driver it needs, as [`kernel_has`] names it.
    driver: Option<String>,
}

/// The backends the agent runs, as `ferrocni-agent --list-backends` lists them: a name, what it
/// needs of the node (`kernel:<link kind>`, `kernel:tun`, `program:<command>:<package>`,
/// comma-separated, or `-`), what it is.
fn backends() -> Vec<Listed> {
    let out = Command::new(our_binary("ferrocni-agent"))
        .arg("--list-backends")
        .output()
        .expect("ferrocni-agent --list-backends");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?.to_string();
            let driver = fields
                .next()?
                .split(',')
                .find_map(|need| need.strip_prefix("kernel:"))
                // kernel_has probes /dev/net/tun's driver as "tap".
                .map(|kind| if kind == "tun" { "tap" } else { kind }.to_string());
            Some(Listed { name, driver })
        })
        .collect()
}

/// Node1's routes (the demo's `ip route` there) lead to the other nodes' pod subnets: a route
/// to each, or one to the whole cluster network off the node's bridge.
fn routes_reach_the_other_nodes(stdout: &str) -> Result<(), String> {
    let routes = stdout
        .split_once("node1$ ip route\n")
        .and_then(|(_, rest)| rest.split_once("Tear down"))
        .map(|(routes, _)| routes)
        .ok_or("no `ip route` of node1 in the output")?;
    let cluster_route = routes
        .lines()
        .any(|l| l.starts_with("10.244.0.0/16 ") && !l.contains("cni0"));
    for node in ["node2", "node3"] {
        let subnet = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{node}: FLANNEL_SUBNET=")))
            .and_then(|gateway| {
                let (ip, len) = gateway.split_once('/')?;
                Some(format!("{}.0/{len}", ip.rsplit_once('.')?.0))
            })
            .ok_or(format!("no FLANNEL_SUBNET of {node}"))?;
        let direct = routes.lines().any(|l| l.starts_with(&format!("{subnet} ")));
        if !direct && !cluster_route {
            return Err(format!("no route to {node}'s {subnet} on node1:\n{routes}"));
        }
    }
    Ok(())
}

/// The three-node demo with `backend`: every pod reaches every other with its own address, the
/// agents' metrics and node1's routes to the other nodes are shown. `Ok(false)`: this machine
/// cannot run it (the demo said why).
fn cluster_runs(backend: &str) -> Result<bool, String> {
    let run = run_demo("demo-cluster.sh", &["--backend", backend]);
    if unavailable(&run, &format!("the {backend} cluster demo")) {
        return Ok(false);
    }
    if run.status != 0 {
        return Err(format!(
            "the {backend} cluster demo failed:\n{}",
            run.stdout
        ));
    }
    for expected in [
        "30 of 30 pairs: every pod reached every other, with its own address",
        "ferrocni_agent_leases{state=\"programmed\"} 2",
        "ferrocni_agent_leases{state=\"known\"} 3",
        "checked: no pod namespace, veth, lease or cached result is left on any node",
    ] {
        if !run.stdout.contains(expected) {
            return Err(format!(
                "no {expected:?} in the {backend} demo:\n{}",
                run.stdout
            ));
        }
    }
    routes_reach_the_other_nodes(&run.stdout).map_err(|e| format!("{backend}: {e}"))?;
    Ok(true)
}

/// Every backend the agent lists, each where this kernel has its driver (else skipped, or a
/// failure with FERROCNI_REQUIRE_DRIVERS=1) and the demo finds what it needs.
#[test]
fn cluster_every_backend() {
    require_root!();
    let mut failures = Vec::new();
    for backend in backends() {
        if let Some(driver) = &backend.driver {
            if !kernel_has(driver) {
                let why = format!(
                    "the {} backend: this kernel has no {driver} driver",
                    backend.name
                );
                assert!(
                    !netns_tests::drivers_required(),
                    "{why}, and FERROCNI_REQUIRE_DRIVERS=1 forbids skipping"
                );
                eprintln!("skipping {why}");
                continue;
            }
        }
        if let Err(e) = cluster_runs(&backend.name) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Without the backend's driver the demo says so and points at the VM runner.
#[test]
fn cluster_without_the_driver_points_at_the_vm() {
    require_root!();
    let missing = backends()
        .into_iter()
        .find(|b| b.driver.as_deref().is_some_and(|d| !kernel_has(d)));
    let Some(backend) = missing else {
        eprintln!("skipping: this kernel has every backend's driver");
        return;
    };
    let (name, driver) = (&backend.name, backend.driver.as_deref().unwrap_or_default());
    let run = run_demo("demo-cluster.sh", &["--backend", name]);
    assert_eq!(run.status, UNAVAILABLE, "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "has no {driver} driver, which the {name} backend needs"
        )) && run.stdout.contains("netns-tests/vm/run"),
        "{}",
        run.stdout
    );
}

#[test]
fn cluster_names_the_backends_it_knows() {
    require_root!();
    let out = Command::new(workspace_root().join("tools/demo/demo-cluster.sh"))
        .args(["--bin-dir".as_ref(), our_bin_dir().as_os_str()])
        .args(["--agent".as_ref(), our_binary("ferrocni-agent").as_os_str()])
        .args(["--backend", "token-ring"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let names: Vec<String> = backends().into_iter().map(|b| b.name).collect();
    assert!(names.len() >= 6, "{names:?}");
    assert!(
        stderr.contains(&format!(
            "unknown backend token-ring; the demo knows: {} ",
            names.join(" ")
        )),
        "{stderr}"
    );
}

/// `make demo` and `make demo-cluster BACKEND=...` run these scripts on what `make build` built.
#[test]
fn make_targets_run_the_scripts() {
    let out = Command::new("make")
        .args(["-n", "--no-print-directory", "-C"])
        .arg(workspace_root())
        .args(["demo", "demo-cluster", "BACKEND=ipip", "CARGO=/nonexistent"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("tools/demo/demo.sh --bin-dir"), "{text}");
    assert!(
        text.contains("tools/demo/demo-cluster.sh --backend ipip --bin-dir"),
        "{text}"
    );
}
