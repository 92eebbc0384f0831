//! Disk faults. The state directories of the chain — host-local's dataDir, the firewall's and
//! tuning's state, libcni's cache — are small tmpfs mounts in a private mount namespace (a
//! holder process; the plugins and cnitool run inside it). Filled up, or remounted read-only:
//! ADD fails with a CNI error and what it set up does not outlive the runtime's DEL; DEL of the
//! pods that exist still cleans the kernel side; once space (or write access) returns,
//! everything works again and nothing is corrupt (no address handed out twice, no litter).

use std::net::IpAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use netns_tests::chain::{ChainNode, ChainOptions, NETWORK};
use netns_tests::{require_root, Cnitool, Netns, TempDir};
use serde_json::json;

/// A process holding a private mount namespace (slave of the host's, so new netns files
/// appear in it) where `dirs` are fresh tmpfs mounts of `size`.
struct MountHolder {
    child: Child,
    dirs: Vec<String>,
}

impl MountHolder {
    fn new(dirs: &[&Path], size: &str, ready: &Path) -> MountHolder {
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        let mut script = String::from("set -e; ");
        for d in &dirs {
            script.push_str(&format!(
                "mount -t tmpfs -o size={size},mode=0700 ferrocni-disk '{d}'; "
            ));
        }
        script.push_str(&format!("touch '{}'; exec sleep 86400", ready.display()));
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn the mount holder");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "mount holder did not get ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        MountHolder { child, dirs }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `nsenter` into the holder's mount namespace (prefix of a command line).
    fn prefix(&self) -> Vec<String> {
        ["nsenter", "-t", &self.pid().to_string(), "-m", "--"]
            .map(String::from)
            .to_vec()
    }

    fn sh(&self, script: &str) -> Output {
        Command::new("nsenter")
            .args([
                "-t",
                &self.pid().to_string(),
                "-m",
                "--",
                "sh",
                "-c",
                script,
            ])
            .output()
            .expect("nsenter")
    }

    /// Fills every mount (a filler file that takes all remaining blocks).
    fn fill(&self) {
        for d in &self.dirs {
            let _ = self.sh(&format!(
                "dd if=/dev/zero of='{d}/.filler' bs=4k 2>/dev/null"
            ));
        }
    }

    fn free(&self) {
        for d in &self.dirs {
            self.sh(&format!("rm -f '{d}/.filler'"));
        }
    }

    fn remount(&self, mode: &str) {
        for d in &self.dirs {
            let out = self.sh(&format!("mount -o remount,{mode} '{d}'"));
            assert!(out.status.success(), "remount {mode}: {out:?}");
        }
    }
}

impl Drop for MountHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Disk {
    node: ChainNode,
    holder: MountHolder,
    _ready: TempDir,
}

fn disk(tag: &str, subnet: u8) -> Disk {
    let mut node = ChainNode::new(
        tag,
        ChainOptions {
            subnet_v4: format!("10.231.{subnet}.0/24"),
            subnet_v6: Some(format!("fd31:{subnet}::/64")),
            tuning: json!({"type": "tuning", "mtu": 1400}),
            bridge: format!("cni-disk{subnet}"),
        },
        None,
    );
    let ready = TempDir::new(&format!("{tag}-ready"));
    let holder = MountHolder::new(
        &[node.leases.path(), node.state.path(), node.cache.path()],
        "96k",
        &ready.join("ready"),
    );
    node.prefix = holder.prefix();
    node.fs_view = Some(format!("/proc/{}/root", holder.pid()).into());
    Disk {
        node,
        holder,
        _ready: ready,
    }
}

struct Pod {
    ns: Netns,
    cid: String,
    port: u16,
}

fn pod(port: u16) -> Pod {
    let ns = Netns::new("disk-pod");
    let cid = Cnitool::container_id(ns.path_str());
    Pod { ns, cid, port }
}

fn run(d: &Disk, p: &Pod, verb: &str) -> Output {
    d.node
        .cnitool(&p.cid, p.port)
        .run(&[verb, NETWORK, p.ns.path_str()])
}

fn ok(d: &Disk, p: &Pod, verb: &str) {
    let out = run(d, p, verb);
    assert!(
        out.status.success(),
        "{verb} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The kernel side of a pod: its veth and the rules naming it or its addresses.
fn kernel_traces(d: &Disk, p: &Pod, ips: &[IpAddr]) -> Vec<String> {
    let inv = d.node.inventory();
    let mut left: Vec<String> = inv
        .traces_of(&p.cid, ips)
        .into_iter()
        .filter(|t| t.starts_with("rule"))
        .collect();
    if p.ns.link("eth0").is_some() {
        left.push("eth0 in the pod".into());
    }
    left
}

/// The failure is reported as a CNI error (JSON with a code and a message), not a crash.
fn assert_cni_error(out: &Output, what: &str) {
    assert!(!out.status.success(), "{what}: expected a failure");
    let text = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "{what}: {} / {}",
        text.trim(),
        String::from_utf8_lossy(&out.stdout).trim()
    );
    assert!(
        text.contains("failed") || text.contains("error"),
        "{what}: unclear error: {text}"
    );
    assert!(
        !text.contains("panicked"),
        "{what}: a plugin panicked: {text}"
    );
}

fn assert_node_clean(d: &Disk) {
    let inv = d.node.inventory();
    assert!(inv.leases.is_empty(), "leases: {:?}", inv.leases);
    assert!(inv.links.is_empty(), "links: {:?}", inv.links);
    assert!(inv.state_files.is_empty(), "state: {:?}", inv.state_files);
    assert!(inv.cache_files.is_empty(), "cache: {:?}", inv.cache_files);
    let litter = files(d, &d.node.leases.join(NETWORK))
        .into_iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or("");
            name.starts_with('.')
                && !name.starts_with(".ferrocni-index")
                && name != ".ferrocni-boot"
                && name != ".filler"
        })
        .collect::<Vec<_>>();
    assert!(
        litter.is_empty(),
        "temporary files left in the lease store: {litter:?}"
    );
}

fn files(d: &Disk, dir: &Path) -> Vec<String> {
    netns_tests::chain::files_under(&d.node.seen(dir))
}

#[test]
fn full_disks() {
    require_root!();
    let d = disk("diskfull", 70);
    let (a, b, c) = (pod(22001), pod(22002), pod(22003));
    ok(&d, &a, "add");
    ok(&d, &b, "add");
    let a_ips = d.node.inventory().addresses_of(&a.cid);

    d.holder.fill();
    let out = run(&d, &c, "add");
    assert_cni_error(&out, "ADD on a full disk");
    // The runtime DELs after a failed ADD; that must work on the full disk too.
    ok(&d, &c, "del");
    assert!(
        kernel_traces(&d, &c, &[]).is_empty(),
        "{:?}",
        kernel_traces(&d, &c, &[])
    );
    assert!(d.node.inventory().addresses_of(&c.cid).is_empty());

    // Pods that exist are still deleted, kernel side included.
    ok(&d, &a, "del");
    assert!(
        kernel_traces(&d, &a, &a_ips).is_empty(),
        "{:?}",
        kernel_traces(&d, &a, &a_ips)
    );
    assert!(d.node.inventory().addresses_of(&a.cid).is_empty());

    // Space returns: everything works, nothing is corrupt.
    d.holder.free();
    ok(&d, &c, "add");
    ok(&d, &a, "add");
    ok(&d, &b, "check");
    let inv = d.node.inventory();
    let mut all: Vec<IpAddr> = inv.leases.keys().copied().collect();
    all.dedup();
    assert_eq!(all.len(), 6, "three pods, two families: {:?}", inv.leases);
    for p in [&a, &b, &c] {
        ok(&d, p, "check");
        ok(&d, p, "del");
    }
    assert_node_clean(&d);
}

#[test]
fn read_only_disks() {
    require_root!();
    let d = disk("diskro", 71);
    let (a, b) = (pod(22011), pod(22012));
    ok(&d, &a, "add");
    let a_ips = d.node.inventory().addresses_of(&a.cid);

    d.holder.remount("ro");
    let out = run(&d, &b, "add");
    assert_cni_error(&out, "ADD on a read-only disk");
    assert!(
        kernel_traces(&d, &b, &[]).is_empty(),
        "{:?}",
        kernel_traces(&d, &b, &[])
    );

    // DEL cleans the kernel side; it cannot release the lease, and says so (unlike the
    // reference, which reports success and keeps the lease).
    let out = run(&d, &a, "del");
    assert!(
        kernel_traces(&d, &a, &a_ips).is_empty(),
        "{:?}",
        kernel_traces(&d, &a, &a_ips)
    );
    assert_cni_error(&out, "DEL on a read-only disk");

    d.holder.remount("rw");
    ok(&d, &a, "del");
    ok(&d, &b, "del");
    assert!(d.node.inventory().leases.is_empty());
    ok(&d, &b, "add");
    ok(&d, &b, "check");
    ok(&d, &b, "del");
    assert_node_clean(&d);
}
