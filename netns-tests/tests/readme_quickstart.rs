//! The README's quick start, run as written: its manual steps (the first `sh` block of the
//! section that runs `cnitool`; the one before, `sudo make demo`, is tests/demo.rs's) are
//! extracted from README.md and executed by bash, line by line, stopping at the first failure.
//!
//! It runs in a private mount and network namespace (`unshare --mount --net`), so `make install`,
//! the conf dir, the result cache, host-local's leases and the `demo` netns land on overlays and
//! tmpfs that vanish with the namespace, and the bridge it makes is in a netns of its own: the
//! real host is never touched. `sudo` is a shell function (the tests run as root; sudo may not be
//! installed).
//!
//! `make install` builds the release binaries when they are not fresh, which takes minutes: the
//! test runs when `FERROCNI_QUICKSTART=1` (set by `make test-release`, right after the release
//! build) and skips otherwise.

use std::process::Command;

use netns_tests::{require_root, workspace_root, TempDir};

/// The commands of the first ```sh block after the "Quick start" heading that runs cnitool.
fn quick_start_commands(readme: &str) -> Vec<String> {
    let start = readme
        .lines()
        .position(|l| l.starts_with('#') && l.to_lowercase().contains("quick start"))
        .expect("README.md has a Quick start section");
    let mut lines = readme.lines().skip(start);
    loop {
        let block: Vec<String> = lines
            .by_ref()
            .skip_while(|l| l.trim() != "```sh")
            .skip(1)
            .take_while(|l| l.trim() != "```")
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(str::to_string)
            .collect();
        if block.is_empty() || block.iter().any(|c| c.contains("cnitool")) {
            return block;
        }
    }
}

#[test]
fn quick_start_block_is_found() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let commands = quick_start_commands(&readme);
    assert!(
        commands.iter().any(|c| c.contains("cnitool add")),
        "the quick start runs cnitool add: {commands:?}"
    );
}

#[test]
fn readme_quick_start_runs_as_written() {
    require_root!();
    if std::env::var_os("FERROCNI_QUICKSTART").is_none_or(|v| v != "1") {
        eprintln!(
            "skipping the README quick start: set FERROCNI_QUICKSTART=1 (make test-release does)"
        );
        return;
    }
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let commands = quick_start_commands(&readme);
    let scratch = TempDir::new("quickstart");

    // Overlays keep every write of the quick start private to the mount namespace.
    let mut script = String::from("set -e\n");
    for (n, dir) in ["/etc", "/opt", "/usr", "/var/lib"].iter().enumerate() {
        let (upper, work) = (scratch.join(format!("u{n}")), scratch.join(format!("w{n}")));
        script += &format!(
            "mkdir -p {u} {w}; mount -t overlay overlay -o lowerdir={dir},upperdir={u},workdir={w} {dir}\n",
            u = upper.display(),
            w = work.display()
        );
    }
    script += "mount -t tmpfs tmpfs /run\n";
    script += "ip link set lo up\n";
    script += "sudo() { env \"$@\"; }\n";
    script += "export PATH=/usr/local/sbin:/usr/local/bin:$PATH\n";
    script += "set -x\n";
    for c in &commands {
        script += c;
        script.push('\n');
    }

    let out = Command::new("unshare")
        .args(["--mount", "--net", "--propagation", "private", "bash", "-c"])
        .arg(&script)
        .current_dir(&root)
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README quick start failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    // `cnitool add` printed a result, and the pod's eth0 got its addresses.
    assert!(
        stdout.contains("\"interfaces\""),
        "no ADD result in:\n{stdout}"
    );
    assert!(
        stdout.contains("inet ") && stdout.contains("inet6 "),
        "eth0 has no IPv4 and IPv6 address in:\n{stdout}"
    );
}

#[cfg(test)]
mod tests {
    use super::quick_start_commands;

    #[test]
    fn extracts_the_first_sh_block_running_cnitool_after_the_heading() {
        let readme = "# x\n```sh\nnot cnitool\n```\n## Quick start\n```sh\nmake demo\n```\ntext\n```sh\na cnitool\n\n# c\nb\n```\n```sh\nc cnitool\n```\n";
        assert_eq!(quick_start_commands(readme), vec!["a cnitool", "b"]);
    }
}
