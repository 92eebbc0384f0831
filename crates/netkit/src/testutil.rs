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

    /// Sets `lo` up and commits table `table` (inet) with an output-hook chain whose one rule
    /// sends each UDP datagram to port `dport` to NFLOG group `group` with `prefix`, copying
    /// `snaplen` bytes: a datagram sent to 127.0.0.1 inside the netns is logged. Returns the
    /// opened netns.
    pub fn with_udp_log_rule(
        &self,
        table: &str,
        dport: u16,
        prefix: &str,
        group: u16,
        snaplen: u32,
    ) -> Netns {
        use crate::netfilter::nf_tables::{build, Batch, Chain, Family, Hook, Rule, Table};
        self.ip(&["link", "set", "lo", "up"]);
        let ns = self.open().expect("open the test netns");
        let f = Family::Inet;
        let mut batch = Batch::new();
        batch
            .add_table(&Table::new(f, table))
            .add_chain(&Chain::base(
                f,
                table,
                "out",
                "filter",
                Hook::Output,
                0,
                None,
            ))
            .add_rule(&Rule::new(
                f,
                table,
                "out",
                build::all([
                    build::l4proto_dport(17, dport),
                    build::log_to_group(prefix, group, snaplen),
                ]),
            ));
        crate::netfilter::nf_tables::Socket::open_in(&ns)
            .and_then(|mut sock| sock.commit(&batch))
            .expect("commit the log rule");
        ns
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
