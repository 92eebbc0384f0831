//! bridge answers host-local in-process only when the `host-local` on `CNI_PATH` is the one
//! built with it (the build stamp in its ELF note), and executes any other. Shown through
//! STATUS, which reaches IPAM and needs no netns: a copy of our host-local that the kernel
//! refuses to execute (its ELF header names another machine) still answers, the same copy with
//! one byte of its stamp changed does not, and a script under the name runs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use netns_tests::{our_binary, run_with_stdin, TempDir};
use serde_json::json;

fn status(cni_path: &Path, data: &Path) -> Output {
    let config = json!({
        "cniVersion": "1.1.0", "name": "brlinked", "type": "bridge", "bridge": "brlk0",
        "ipam": {"type": "host-local", "dataDir": data, "subnet": "10.234.9.0/24"}
    });
    let mut cmd = Command::new(our_binary("bridge"));
    cmd.env("CNI_COMMAND", "STATUS").env("CNI_PATH", cni_path);
    run_with_stdin(&mut cmd, config.to_string().as_bytes())
}

/// A copy of our host-local in `dir` that execve refuses (ENOEXEC: `e_machine`, at offset 18
/// of the ELF header, zeroed), its stamp changed when `flip_stamp`.
fn unexecutable_copy(dir: &Path, flip_stamp: bool) {
    let mut bytes = fs::read(our_binary("host-local")).unwrap();
    bytes[18..20].fill(0);
    if flip_stamp {
        let owner = b"ferrocni\0\0\0\0";
        let at = bytes
            .windows(owner.len())
            .position(|w| w == owner)
            .expect("host-local carries no ferrocni note");
        bytes[at + owner.len()] ^= 0xff;
    }
    let path = dir.join("host-local");
    fs::write(&path, bytes).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_same_build_answers_in_process() {
    let (bin, data) = (TempDir::new("brlk-bin"), TempDir::new("brlk-data"));
    unexecutable_copy(bin.path(), false);
    let out = status(bin.path(), data.path());
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn another_build_is_executed() {
    let (bin, data) = (TempDir::new("brlk-bin"), TempDir::new("brlk-data"));
    unexecutable_copy(bin.path(), true);
    let out = status(bin.path(), data.path());
    assert!(
        !out.status.success(),
        "a host-local of another build must be executed, and this one cannot be"
    );

    let marker = bin.path().join("ran");
    let script = bin.path().join("host-local");
    fs::write(
        &script,
        format!("#!/bin/sh\ntouch '{}'\nexit 0\n", marker.display()),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let out = status(bin.path(), data.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        marker.exists(),
        "the script under host-local's name did not run"
    );
}
