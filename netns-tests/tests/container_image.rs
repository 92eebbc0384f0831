//! The node image (packaging/container): built FROM scratch with podman out of our binaries
//! (`FERROCNI_BIN_DIR`, the release tarball's under `make test-release`), then run as a
//! DaemonSet's init container would: `install-cni` copies every plugin and the conflist into
//! the mounted host directories, byte for byte; the agent runs from the image (`--version`).
//! Podman's configuration and storage live in a temporary directory; no network is given to
//! the containers and nothing is left behind.

use std::fs;
use std::path::Path;
use std::process::Command;

use netns_tests::private_host::{self, remove_cgroup_tree, unique_cgroup_parent};
use netns_tests::{our_bin_dir, our_binary, require_root, workspace_root, TempDir};

/// Root cannot raise rlimits here and runc refuses limits above the hard ones: ask for
/// modest values, capped at the hard limits.
fn capped_limit(resource: libc::__rlimit_resource_t, want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we own.
    if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
        return want;
    }
    if lim.rlim_max == libc::RLIM_INFINITY {
        want
    } else {
        want.min(lim.rlim_max)
    }
}

struct Podman {
    work: TempDir,
    cgroup_parent: String,
}

impl Podman {
    fn new() -> Podman {
        let work = TempDir::new("image");
        let nofile = capped_limit(libc::RLIMIT_NOFILE, 1024);
        let nproc = capped_limit(libc::RLIMIT_NPROC, 1024);
        fs::create_dir_all(work.join("tmp")).unwrap();
        fs::write(
            work.join("containers.conf"),
            format!(
                "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
                 log_driver = \"k8s-file\"\n\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n\
                 events_logger = \"none\"\ntmp_dir = \"{}\"\n",
                work.join("tmp").display()
            ),
        )
        .unwrap();
        fs::write(
            work.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                work.join("storage").display(),
                work.join("run").display()
            ),
        )
        .unwrap();
        Podman {
            work,
            cgroup_parent: unique_cgroup_parent("ferrocni-image"),
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.args(["300", program])
            .env("CONTAINERS_CONF", self.work.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.work.join("storage.conf"));
        cmd
    }

    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = self
            .command("podman")
            .args(["run", "--rm", "--network", "none"])
            .arg(format!("--cgroup-parent={}", self.cgroup_parent))
            .args(args)
            .output()
            .expect("run podman");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let storage = self.work.join("storage");
        let _ = self.command("podman").args(["rmi", "-af"]).output();
        remove_cgroup_tree(&self.cgroup_parent);
        // vfs layers may hold read-only directories.
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+w")
            .arg(&storage)
            .status();
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    fs::read(a)
        .ok()
        .is_some_and(|x| fs::read(b).ok() == Some(x))
}

#[test]
fn node_image_installs_the_plugins_and_conflist() {
    require_root!();
    if let Some(missing) = private_host::missing_tools(&["podman", "runc", "conmon", "ldd"]) {
        eprintln!("skipping: {missing:?} missing (apt-get install -y podman runc)");
        return;
    }
    let bin_dir = our_bin_dir();
    // Builds what the image needs when testing the workspace's own binaries.
    our_binary("ferrocni-agent");
    let bridge = our_binary("bridge");
    let podman = Podman::new();
    let tag = format!("localhost/ferrocni-node-test:{}", std::process::id());
    let script = workspace_root().join("packaging/container/build-image.sh");
    let out = podman
        .command("sh")
        .arg(&script)
        .arg(&bin_dir)
        .arg(&tag)
        .output()
        .expect("run build-image.sh");
    assert!(
        out.status.success(),
        "build-image.sh: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The agent runs from the image: FROM scratch, with only what build-image.sh put in.
    let (ok, stdout, stderr) = podman.run(&[&tag, "--version"]);
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout,
        format!("ferrocni-agent ferrocni v{}\n", env!("CARGO_PKG_VERSION"))
    );

    // The init container: plugins and conflist onto the "host".
    let host = TempDir::new("image-host");
    let (hbin, hconf) = (host.join("opt/cni/bin"), host.join("etc/cni/net.d"));
    fs::create_dir_all(&hbin).unwrap();
    fs::create_dir_all(&hconf).unwrap();
    // A plugin already there (an upgrade) is replaced.
    fs::write(hbin.join("bridge"), "old").unwrap();
    let mounts = [
        format!("--volume={}:/host/opt/cni/bin", hbin.display()),
        format!("--volume={}:/host/etc/cni/net.d", hconf.display()),
    ];
    let (ok, _, stderr) = podman.run(&[&mounts[0], &mounts[1], &tag, "install-cni"]);
    assert!(ok, "install-cni: {stderr}");
    assert!(
        stderr.contains(" INFO ferrocni-agent: installed /host/opt/cni/bin/bridge"),
        "{stderr}"
    );
    assert!(
        same_file(&bridge, &hbin.join("bridge")),
        "bridge differs from {}",
        bridge.display()
    );
    for plugin in [
        "host-local",
        "loopback",
        "portmap",
        "flannel",
        "vxlan",
        "dhcp",
    ] {
        assert!(
            same_file(&bin_dir.join(plugin), &hbin.join(plugin)),
            "{plugin} not installed as built"
        );
    }
    assert!(
        !hbin.join("ferrocni-agent").exists(),
        "the agent is not a plugin"
    );
    assert!(!hbin.join("cnitool").exists());
    assert!(same_file(
        &workspace_root().join("packaging/container/10-flannel.conflist"),
        &hconf.join("10-flannel.conflist")
    ));
    let leftovers: Vec<_> = fs::read_dir(&hbin)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporaries left: {leftovers:?}");
}
