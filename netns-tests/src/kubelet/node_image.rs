//! The node image as `make image` lays it out (packaging/container/build-image.sh): every CNI
//! plugin in `/opt/cni/bin`, the agent in `/usr/bin` with the C libraries it links and their
//! loader, the default conflist in `/etc/ferrocni`. Built from the workspace's binaries
//! (stripped, as a release is) into an OCI archive named as the manifest's `image:`, so the
//! DaemonSet runs unchanged without a registry or podman.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::{our_binary, success_stdout, workspace_root};

/// The manifest's image (packaging/kube-ferrocni.yml).
pub const NODE_IMAGE: &str = "localhost/ferrocni:0.1.0";

/// The CNI binaries: one per folder of `plugins/` and `ipam/`.
fn plugin_names() -> Vec<String> {
    let root = workspace_root();
    let mut names: Vec<String> = ["plugins", "ipam"]
        .iter()
        .flat_map(|d| fs::read_dir(root.join(d)).into_iter().flatten())
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Builds the node image's archive in `dir`; its path.
pub fn build_node_image(dir: &Path) -> PathBuf {
    let rootfs = dir.join("node-rootfs");
    for sub in ["opt/cni/bin", "usr/bin", "etc/ferrocni", "tmp", "run"] {
        fs::create_dir_all(rootfs.join(sub)).expect("create the node image's rootfs");
    }
    for name in plugin_names() {
        strip_into(&our_binary(&name), &rootfs.join("opt/cni/bin").join(&name));
    }
    let agent = our_binary("ferrocni-agent");
    strip_into(&agent, &rootfs.join("usr/bin/ferrocni-agent"));
    for lib in linked_libraries(&agent) {
        let to = rootfs.join(lib.strip_prefix("/").unwrap_or(&lib));
        fs::create_dir_all(to.parent().unwrap_or(&rootfs)).expect("create a library directory");
        fs::copy(&lib, &to).unwrap_or_else(|e| panic!("copy {}: {e}", lib.display()));
    }
    fs::copy(
        workspace_root().join("packaging/container/10-flannel.conflist"),
        rootfs.join("etc/ferrocni/10-flannel.conflist"),
    )
    .expect("copy the default conflist");
    let archive = crate::oci::write_image(
        dir,
        &rootfs,
        NODE_IMAGE,
        json!({"Entrypoint": ["/usr/bin/ferrocni-agent"], "WorkingDir": "/"}),
    );
    let _ = fs::remove_dir_all(&rootfs);
    archive
}

/// `strip -o to from`: a debug build's binary at a release's size.
fn strip_into(from: &Path, to: &Path) {
    let out = Command::new("strip")
        .arg("-o")
        .arg(to)
        .arg(from)
        .output()
        .unwrap_or_else(|e| panic!("cannot run strip: {e}"));
    success_stdout(&format!("strip {}", from.display()), out);
}

/// The shared libraries `binary` loads and the loader, as `ldd` resolves them (what
/// build-image.sh copies).
fn linked_libraries(binary: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ldd: {e}"));
    let text = success_stdout(&format!("ldd {}", binary.display()), out);
    text.lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.as_slice() {
                [_, "=>", path, ..] if path.starts_with('/') => Some(PathBuf::from(path)),
                [path, ..] if path.starts_with('/') => Some(PathBuf::from(path)),
                _ => None,
            }
        })
        .collect()
}
