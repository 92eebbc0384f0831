//! Netfilter fixtures shared by the tests and the bench: the foreign rules a Kubernetes node
//! holds, and the programs a run executed.

use std::io::Write;
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
