//! Netfilter fixtures shared by the tests and the bench: the foreign rules a Kubernetes node
//! holds, and the programs a run executed.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// kube-proxy-like nat rules as `iptables-restore --noflush` input: `KUBE-SERVICES` jumped
/// from PREROUTING and OUTPUT, holding one jump per service, and one DNAT chain per service
/// (two rules per service: `rules / 2` services, 10.96.0.0/16 → 10.244.0.0/16).
pub fn kube_proxy_like_nat_rules(rules: usize) -> String {
    let services = rules / 2;
    let mut text = String::from("*nat\n:KUBE-SERVICES - [0:0]\n");
    for i in 0..services {
        text.push_str(&format!(":KUBE-SVC-{i:06} - [0:0]\n"));
    }
    text.push_str("-A PREROUTING -j KUBE-SERVICES\n-A OUTPUT -j KUBE-SERVICES\n");
    for i in 0..services {
        let (a, b) = (i / 250, i % 250 + 1);
        text.push_str(&format!(
            "-A KUBE-SERVICES -d 10.96.{a}.{b}/32 -p tcp --dport 80 -j KUBE-SVC-{i:06}\n\
             -A KUBE-SVC-{i:06} -p tcp -j DNAT --to-destination 10.244.{a}.{b}:8080\n"
        ));
    }
    text.push_str("COMMIT\n");
    text
}

/// Loads [`kube_proxy_like_nat_rules`] with one `iptables-restore --noflush`, run by `cmd`
/// (e.g. `ip netns exec NS iptables-restore --noflush`). Whether it succeeded.
pub fn load_nat_rules(mut cmd: Command, rules: usize) -> bool {
    if rules == 0 {
        return true;
    }
    let Ok(mut child) = cmd.stdin(Stdio::piped()).spawn() else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        if stdin
            .write_all(kube_proxy_like_nat_rules(rules).as_bytes())
            .is_err()
        {
            return false;
        }
    }
    child.wait().map(|s| s.success()).unwrap_or(false)
}

/// The programs an `strace -f -e trace=execve -o FILE` run executed (successful execs only),
/// by file name.
pub fn traced_execs(strace_output: &str) -> Vec<String> {
    strace_output
        .lines()
        .filter(|l| l.contains("execve(\"") && !l.contains("= -1"))
        .filter_map(|l| l.split('"').nth(1))
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .collect()
}

/// Runs our cnitool as `tool` describes (in its host netns, with its env) under
/// `strace -f -e trace=execve`, the trace written to `trace_file`; panics unless it
/// succeeds; returns the programs it executed.
pub fn traced_cnitool(tool: &crate::Cnitool, args: &[&str], trace_file: &Path) -> Vec<String> {
    let mut cmd = match &tool.host_netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "strace"]);
            c
        }
        None => Command::new("strace"),
    };
    let cni_path = tool
        .cni_path
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    cmd.args(["-f", "-qq", "--seccomp-bpf", "-e", "trace=execve", "-o"])
        .arg(trace_file)
        .arg(crate::our_binary("cnitool"))
        .args(args)
        .env("NETCONFPATH", &tool.netconf)
        .env("CNI_PATH", cni_path)
        .env("CNI_CACHE_DIR", &tool.cache_dir);
    for (k, v) in &tool.env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run strace: {e}"));
    assert!(
        out.status.success(),
        "cnitool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    traced_execs(&std::fs::read_to_string(trace_file).unwrap_or_default())
}

/// A veth from `host` (`host_if`, `host_cidr`) to `outside` (`wan`, `outside_cidr`), both up;
/// with `via`, the outside's default route goes through the host.
pub fn link_outside(
    host: &crate::Netns,
    host_if: &str,
    host_cidr: &str,
    outside: &crate::Netns,
    outside_cidr: &str,
    via: Option<&str>,
) {
    host.exec_ok(&[
        "ip",
        "link",
        "add",
        host_if,
        "type",
        "veth",
        "peer",
        "name",
        "wan",
        "netns",
        outside.name(),
    ]);
    host.exec_ok(&["ip", "addr", "add", host_cidr, "dev", host_if]);
    host.exec_ok(&["ip", "link", "set", host_if, "up"]);
    outside.exec_ok(&["ip", "addr", "add", outside_cidr, "dev", "wan"]);
    outside.exec_ok(&["ip", "link", "set", "wan", "up"]);
    if let Some(gw) = via {
        outside.exec_ok(&["ip", "route", "add", "default", "via", gw]);
    }
}

/// The address (without prefix) of a result's first IP.
pub fn first_ip(result_json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(result_json).expect("a CNI result");
    v["ips"][0]["address"]
        .as_str()
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string()
}
