//! Helpers for root tests (used by netkit's and the plugins' test suites; not for plugin code).
//! Each test makes its own uniquely named netns and removes it on drop, even on panic.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::Result;
use crate::netlink::Socket;
use crate::netns::Netns;

/// Whether the tests run as root (root tests skip otherwise).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Returns early from a test (with a note) when not running as root.
#[macro_export]
macro_rules! skip_unless_root {
    () => {
        if !$crate::testutil::is_root() {
            eprintln!("skipping {}: needs root", module_path!());
            return;
        }
    };
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A named netns under `/run/netns`, deleted (with everything in it) on drop.
pub struct TestNetns {
    name: String,
}

impl TestNetns {
    /// Creates `<prefix>-<pid>-<n>` with `ip netns add` and sets its `lo` up.
    pub fn new(prefix: &str) -> TestNetns {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("run ip netns add");
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TestNetns { name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    pub fn open(&self) -> Result<Netns> {
        Netns::open(self.path())
    }

    /// A netlink socket acting inside this netns.
    pub fn socket(&self) -> Result<Socket> {
        Socket::open_in(&self.open()?)
    }

    /// Runs `ip <args>` inside the netns; panics on failure, returns stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.name])
            .args(args)
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "ip -n {} {args:?}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `ip -j <args>` inside the netns and parses the JSON output.
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["-j"];
        all.extend_from_slice(args);
        let text = self.ip(&all);
        if text.trim().is_empty() {
            return serde_json::Value::Array(Vec::new());
        }
        serde_json::from_str(&text).expect("ip -j output is JSON")
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
