//! Helpers shared by libcni's integration tests: temporary directories and fake plugins
//! written as small shell scripts.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory removed (recursively) when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "libcni-test-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }

    pub fn write(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A fake plugin: records each call and replies from files next to it.
///
/// For a call of verb V, the script named N in directory D:
/// * saves its stdin to `D/N.V.stdin` and appends `N V cid=.. if=.. netns=.. args=..` to
///   `D/calls.log`;
/// * copies `D/N.V.stderr` to stderr if present;
/// * if `D/N.V.fail` exists, prints it on stdout and exits 1;
/// * else prints `D/N.V.out` if present and exits 0.
const FAKE_PLUGIN: &str = r#"#!/bin/sh
dir=$(dirname "$0")
name=$(basename "$0")
cat > "$dir/$name.$CNI_COMMAND.stdin"
echo "$name $CNI_COMMAND cid=$CNI_CONTAINERID if=$CNI_IFNAME netns=$CNI_NETNS args=$CNI_ARGS" >> "$dir/calls.log"
[ -f "$dir/$name.$CNI_COMMAND.stderr" ] && cat "$dir/$name.$CNI_COMMAND.stderr" >&2
if [ -f "$dir/$name.$CNI_COMMAND.fail" ]; then
    cat "$dir/$name.$CNI_COMMAND.fail"
    exit 1
fi
[ -f "$dir/$name.$CNI_COMMAND.out" ] && cat "$dir/$name.$CNI_COMMAND.out"
exit 0
"#;

/// A directory of fake plugins.
pub struct FakePlugins {
    pub dir: TempDir,
}

impl FakePlugins {
    pub fn new(names: &[&str]) -> FakePlugins {
        let dir = TempDir::new("plugins");
        for name in names {
            let path = dir.join(name);
            fs::write(&path, FAKE_PLUGIN).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        FakePlugins { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Sets what plugin `name` prints for `verb`.
    pub fn reply(&self, name: &str, verb: &str, stdout: &str) {
        self.dir.write(&format!("{name}.{verb}.out"), stdout);
    }

    /// Makes plugin `name` fail `verb`, printing `stdout` (and `stderr`).
    pub fn fail(&self, name: &str, verb: &str, stdout: &str, stderr: &str) {
        self.dir.write(&format!("{name}.{verb}.fail"), stdout);
        if !stderr.is_empty() {
            self.dir.write(&format!("{name}.{verb}.stderr"), stderr);
        }
    }

    /// Lines of `calls.log` (`name VERB cid=.. if=.. netns=.. args=..`).
    pub fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `name VERB` of each call, in order.
    pub fn call_names(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect()
    }

    pub fn clear_calls(&self) {
        let _ = fs::remove_file(self.dir.join("calls.log"));
    }

    /// The JSON plugin `name` last received for `verb`.
    pub fn stdin(&self, name: &str, verb: &str) -> serde_json::Value {
        let raw = fs::read(self.dir.join(format!("{name}.{verb}.stdin"))).unwrap();
        serde_json::from_slice(&raw).unwrap()
    }
}
