//! Helpers for the binary-level tests: run our plugin (or the reference) with env + stdin
//! against a throw-away dataDir. host-local only touches files, so no netns is needed.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

pub const REFERENCE: &str = "/usr/lib/cni/host-local";

pub fn ours() -> &'static str {
    env!("CARGO_BIN_EXE_host-local")
}

/// The reference plugin, or None (tests print a line and skip).
pub fn reference() -> Option<&'static str> {
    if Path::new(REFERENCE).exists() {
        Some(REFERENCE)
    } else {
        eprintln!("skipping: {REFERENCE} not installed");
        None
    }
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "hl-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A call's outcome: exit code and stdout parsed as JSON (Null when empty).
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub json: Value,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.code == 0
    }
    /// Addresses of a 0.3.0+ result (`ips[].address`).
    pub fn addresses(&self) -> Vec<String> {
        self.json["ips"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|ip| ip["address"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub struct Call<'a> {
    pub bin: &'a str,
    pub command: &'a str,
    pub cid: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
}

impl<'a> Call<'a> {
    pub fn new(bin: &'a str, command: &'a str, cid: &'a str) -> Call<'a> {
        Call {
            bin,
            command,
            cid,
            ifname: "eth0",
            args: "",
        }
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(self.bin);
        c.env_clear()
            .env("CNI_COMMAND", self.command)
            .env("CNI_CONTAINERID", self.cid)
            .env("CNI_NETNS", "/var/run/netns/hl-test-does-not-exist")
            .env("CNI_IFNAME", self.ifname)
            .env("CNI_PATH", "/usr/lib/cni")
            .env("CNI_ARGS", self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    pub fn spawn(&self, conf: &Value) -> Child {
        let mut child = self.command().spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // The child may already be dead (crash test): ignore EPIPE.
        let _ = stdin.write_all(conf.to_string().as_bytes());
        drop(stdin);
        child
    }

    pub fn run(&self, conf: &Value) -> Outcome {
        finish(self.spawn(conf))
    }
}

pub fn finish(child: Child) -> Outcome {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout,
        json,
    }
}

pub fn run(bin: &str, command: &str, cid: &str, conf: &Value) -> Outcome {
    Call::new(bin, command, cid).run(conf)
}

/// A conflist-style request config for host-local.
pub fn conf(version: &str, name: &str, data_dir: &Path, ipam: Value) -> Value {
    let mut ipam = ipam;
    ipam["type"] = "host-local".into();
    ipam["dataDir"] = data_dir.to_str().unwrap().into();
    serde_json::json!({"cniVersion": version, "name": name, "type": "bridge", "ipam": ipam})
}

/// Lease files (names that parse as IPs) of a store, sorted, with their content.
pub fn leases(store: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = match std::fs::read_dir(store) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .map(|n| {
                let c = std::fs::read_to_string(store.join(&n)).unwrap_or_default();
                (n, c)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// Every entry of a store directory, sorted.
pub fn entries(store: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(store)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}
