//! bridge STATUS: ready when IPAM is ready and the netfilter tools an ADD would need exist;
//! not available (code 50) when `ipMasq`'s iptables tool is missing. The nftables backend
//! speaks netlink and needs no tool.

use std::process::Command;

use netns_tests::{our_binary, require_root, run_with_stdin, TempDir};
use serde_json::{json, Value};

/// Runs bridge STATUS; with `hide_sbin`, inside a private mount namespace whose /usr/sbin (where
/// iptables and nft live) is an empty tmpfs.
fn status(config: &Value, hide_sbin: bool) -> (bool, Value) {
    let bridge = our_binary("bridge");
    let cni_path = our_binary("host-local").parent().unwrap().to_path_buf();
    let mut cmd = if hide_sbin {
        let mut c = Command::new("unshare");
        c.args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount -t tmpfs none /usr/sbin && exec "$0""#)
            .arg(&bridge);
        c
    } else {
        Command::new(&bridge)
    };
    cmd.env("CNI_COMMAND", "STATUS")
        .env("CNI_PATH", &cni_path)
        .env("PATH", "/usr/bin:/bin");
    let out = run_with_stdin(&mut cmd, config.to_string().as_bytes());
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), v)
}

#[test]
fn status_reports_a_missing_masquerade_tool() {
    require_root!();
    let data = TempDir::new("brst-data");
    let config = |backend: &str| {
        json!({
            "cniVersion": "1.1.0", "name": "brstatus", "type": "bridge", "bridge": "brst0",
            "ipMasq": true, "ipMasqBackend": backend,
            "ipam": {"type": "host-local", "dataDir": data.path(), "subnet": "10.234.1.0/24"}
        })
    };
    for backend in ["iptables", "nftables"] {
        let (ok, out) = status(&config(backend), false);
        assert!(ok, "{backend}: {out}");
    }
    let (ok, out) = status(&config("iptables"), true);
    assert!(!ok, "STATUS must fail without the iptables tool");
    assert_eq!(out["code"], 50, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("iptables"), "{out}");
    let (ok, out) = status(&config("nftables"), true);
    assert!(ok, "nftables over netlink needs no tool: {out}");
}
